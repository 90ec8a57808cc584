//! Who is calling, and what they may do.
//!
//! Callers authenticate with `authorization: Bearer <token>`; tokens map to
//! principals through the `--tokens` file. In `--dev` mode every call is
//! principal `dev`, an owner of every space. A principal's rights in a space
//! come from the space's access list (admins own every space); the
//! `x-agentvfs-mode` header can only narrow them. A space the caller has no
//! role in is NOT_FOUND, exactly like one that does not exist.

use std::collections::HashMap;
use std::path::Path;

use serde::Deserialize;
use tonic::metadata::MetadataMap;

use crate::error::{Error, Reason, Result};
use crate::store::{Role, SpaceRecord};

/// The authenticated caller of one request.
#[derive(Debug, Clone)]
pub struct Caller {
    pub principal: String,
    /// Owner of every space; may create spaces.
    pub admin: bool,
    /// `x-agentvfs-mode: read-only` narrows every call to reading.
    pub read_only: bool,
    /// `x-agentvfs-session`.
    pub session: Option<String>,
    /// `x-agentvfs-tool-call`.
    pub tool_call: Option<String>,
    /// The call's admission; released when the last clone is dropped.
    pub admission: Option<crate::admission::Permit>,
    /// The call's request ID, forwarded to workers.
    pub request_id: Option<String>,
    /// `x-agentvfs-lease`: the path leases the call carries (IDs, comma-separated).
    pub leases: Vec<String>,
}

/// What a call needs in its space.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    Read,
    Write,
    Admin,
}

#[derive(Debug, Clone)]
struct Identity {
    principal: String,
    admin: bool,
}

/// Maps request metadata to callers.
#[derive(Debug, Clone)]
pub struct Authenticator {
    dev: bool,
    /// BLAKE3 of each token → identity, so lookups never compare secrets
    /// byte by byte.
    tokens: HashMap<[u8; 32], Identity>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TokensFile {
    tokens: Vec<TokenEntry>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenEntry {
    token: String,
    principal: String,
    #[serde(default)]
    admin: bool,
}

/// The principal of every call in `--dev` mode.
pub const DEV_PRINCIPAL: &str = "dev";
/// The header that carries a request's ID, from the client (or the front,
/// which makes one up) to the front's logs and on to a worker.
pub const REQUEST_ID: &str = "x-request-id";
/// Longest accepted value of an `x-agentvfs-*` header.
const MAX_HEADER_CHARS: usize = 256;

impl Authenticator {
    pub fn dev() -> Self {
        Self { dev: true, tokens: HashMap::new() }
    }

    /// Loads a tokens file.
    pub fn from_file(path: &Path, dev: bool) -> Result<Self, String> {
        let text =
            std::fs::read_to_string(path).map_err(|e| format!("cannot read tokens file {}: {e}", path.display()))?;
        let file: TokensFile =
            toml::from_str(&text).map_err(|e| format!("tokens file {} is not valid: {e}", path.display()))?;
        let mut tokens = HashMap::new();
        for entry in file.tokens {
            if entry.token.len() < 16 || entry.principal.is_empty() {
                return Err(format!(
                    "tokens file {}: every token needs 16+ characters and a principal",
                    path.display()
                ));
            }
            let identity = Identity { principal: entry.principal, admin: entry.admin };
            tokens.insert(*blake3::hash(entry.token.as_bytes()).as_bytes(), identity);
        }
        Ok(Self { dev, tokens })
    }

    /// Authenticates a request from its metadata.
    pub fn authenticate(&self, metadata: &MetadataMap) -> Result<Caller> {
        let identity = match metadata.get("authorization") {
            Some(value) => {
                let value =
                    value.to_str().map_err(|_| unauthenticated("The authorization header is not valid text."))?;
                let token = value
                    .strip_prefix("Bearer ")
                    .or_else(|| value.strip_prefix("bearer "))
                    .ok_or_else(|| unauthenticated("The authorization header must be `Bearer <token>`."))?;
                self.tokens
                    .get(blake3::hash(token.trim().as_bytes()).as_bytes())
                    .cloned()
                    .ok_or_else(|| unauthenticated("The bearer token is not valid."))?
            }
            None if self.dev => dev_identity(),
            None => return Err(unauthenticated("The call has no authorization header.")),
        };
        let read_only = match header(metadata, "x-agentvfs-mode")?.as_deref() {
            None | Some("edit") => false,
            Some("read-only") => true,
            Some(other) => {
                return Err(Error::new(
                    Reason::InvalidArgument,
                    format!("x-agentvfs-mode must be `read-only` or `edit`, not {other:?}."),
                )
                .field("x-agentvfs-mode"));
            }
        };
        Ok(Caller {
            principal: identity.principal,
            admin: identity.admin,
            read_only,
            session: header(metadata, "x-agentvfs-session")?,
            tool_call: header(metadata, "x-agentvfs-tool-call")?,
            admission: None,
            request_id: metadata.get(REQUEST_ID).and_then(|v| v.to_str().ok()).map(str::to_owned),
            leases: header(metadata, "x-agentvfs-lease")?
                .map(|ids| ids.split(',').map(|id| id.trim().to_owned()).filter(|id| !id.is_empty()).collect())
                .unwrap_or_default(),
        })
    }
}

fn dev_identity() -> Identity {
    Identity { principal: DEV_PRINCIPAL.to_owned(), admin: true }
}

fn header(metadata: &MetadataMap, name: &str) -> Result<Option<String>> {
    let Some(value) = metadata.get(name) else {
        return Ok(None);
    };
    let value = value.to_str().ok().filter(|v| v.len() <= MAX_HEADER_CHARS).ok_or_else(|| {
        Error::new(
            Reason::InvalidArgument,
            format!("{name} must be printable ASCII of at most {MAX_HEADER_CHARS} characters."),
        )
        .field(name)
    })?;
    Ok((!value.is_empty()).then(|| value.to_owned()))
}

fn unauthenticated(message: &str) -> Error {
    Error::new(Reason::Unauthenticated, message)
}

impl Caller {
    /// Runs `work` (store work of this call) as carrying the call's leases.
    pub fn carrying<T>(&self, work: impl FnOnce() -> T) -> T {
        crate::store::leases::carrying(&self.leases, work)
    }

    /// The caller's role in `space`, if it has one.
    pub fn role(&self, space: &SpaceRecord) -> Option<Role> {
        if self.admin { Some(Role::Owner) } else { space.role_of(&self.principal) }
    }

    /// Checks that the caller may do `need` in `space`. `shown` is the space
    /// as the caller named it, so NOT_FOUND never reveals more than it was told.
    pub fn authorize(&self, space: &SpaceRecord, need: Need, shown: &str) -> Result<Role> {
        let Some(role) = self.role(space) else {
            return Err(Error::space_not_found(shown));
        };
        let required = match need {
            Need::Read => Role::Viewer,
            Need::Write => Role::Editor,
            Need::Admin => Role::Owner,
        };
        if need != Need::Read && self.read_only {
            return Err(Error::new(
                Reason::PermissionDenied,
                "This call changes data, but the request is in read-only mode (x-agentvfs-mode).",
            ));
        }
        if role < required {
            return Err(Error::new(
                Reason::PermissionDenied,
                format!("Your role in this space ({role:?}) does not allow this call; it needs {required:?}."),
            )
            .with("role", format!("{role:?}").to_lowercase())
            .with("requiredRole", format!("{required:?}").to_lowercase()));
        }
        Ok(role)
    }
}
