//! The application: the front's state and what every transport does with
//! it, below the adapters (gRPC today) and above the store.
//!
//! Adapters parse a request into domain values and call in here; this module
//! resolves what a call names (a space the caller may see, a path or a
//! reference in it) and holds the components the calls share: the store, the
//! authenticator, read-before-edit sessions, the workers, grep paging,
//! idempotency claims, admission and index progress. Nothing here knows a
//! transport's types.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::auth::{Authenticator, Caller, Need};
use crate::error::{Error, Reason, Result};
use crate::grep::Grep;
use crate::ids::SpaceId;
use crate::path::{PathError, SpacePath};
use crate::reference::{Reference, ReferenceError};
use crate::sessions::Sessions;
use crate::store::{Entry, SpaceRecord, Store, VersionRecord, not_text};
use crate::workers::Workers;

/// Longest reference echoed back in error metadata.
const MAX_ECHO_CHARS: usize = 256;

/// State shared by the front's services.
#[derive(Debug)]
pub struct Front {
    pub store: Store,
    pub auth: Authenticator,
    /// What each agent session has read, for the read-before-edit rule.
    pub sessions: Sessions,
    /// Where grep jobs and searches run.
    pub workers: Arc<Workers>,
    /// Grep pages: budgets, read-ahead and cached file selections.
    pub grep: Arc<Grep>,
    /// Idempotency scopes of calls running now.
    pub in_flight: InFlight,
    pub admission: crate::admission::Admission,
    /// How far every worker's index has caught up with the outbox.
    pub index_progress: Arc<crate::indexer::Progress>,
    /// Where changes wait for their space's turn (see [`crate::turns`]).
    pub turns: crate::turns::Turns,
}

/// A resolved request target: a visible space and a normalized path in it.
#[derive(Debug, Clone)]
pub struct Target {
    pub space: SpaceRecord,
    pub path: SpacePath,
}

impl Front {
    /// Finds a space by ID or exact name and checks the caller's rights. A
    /// space the caller cannot see is NOT_FOUND, like a missing one.
    pub fn space(&self, caller: &Caller, space: &str, need: Need) -> Result<SpaceRecord> {
        if space.is_empty() {
            return Err(Error::invalid_argument("space", "The request must name its space (ID or name)."));
        }
        let record = match space.parse::<SpaceId>() {
            Ok(id) => self.store.space(id)?,
            Err(()) => self.store.space_by_name(space)?,
        };
        let record = record.ok_or_else(|| Error::space_not_found(&echo(space)))?;
        caller.authorize(&record, need, &echo(space))?;
        tracing::Span::current().record("space", tracing::field::display(record.id));
        Ok(record)
    }

    /// Resolves `reference` (relative to `base` when given) in the request's
    /// `space`, or in the space the reference itself names.
    pub fn target(
        &self,
        caller: &Caller,
        space: &str,
        reference: &str,
        base: &str,
        field: &str,
        need: Need,
    ) -> Result<Target> {
        let parsed = Reference::parse(reference).map_err(|e| reference_error(e, field, reference))?;
        // A relative path stays open until the space (and so the base) is known.
        let (named_space, path) = match parsed {
            Reference::Item(node) => {
                let record = self.store.node(node)?.filter(|r| !r.trashed);
                let record = record.ok_or_else(|| Error::not_found(echo(reference)))?;
                (Some(record.space), Ok(SpacePath::from_stored(record.path)))
            }
            Reference::SpaceRoot(id) => (Some(id), Ok(SpacePath::root())),
            Reference::Uri(id, path) => (Some(id), Ok(path)),
            Reference::Absolute(path) => (None, Ok(path)),
            Reference::Relative(path) => (None, Err(path)),
        };
        let space_record = match named_space {
            Some(id) => {
                let record = self.store.space(id)?.ok_or_else(|| Error::not_found(echo(reference)))?;
                // Not visible: the same answer as a reference to nothing.
                if caller.role(&record).is_none() {
                    return Err(Error::not_found(echo(reference)));
                }
                caller.authorize(&record, need, &echo(reference))?;
                if !space.is_empty() && space != record.name && space != record.id.to_string() {
                    return Err(Error::invalid_argument(
                        "space",
                        "The reference belongs to a different space than the one the request names.",
                    ));
                }
                record
            }
            None => self.space(caller, space, need)?,
        };
        let path = match path {
            Ok(path) => path,
            Err(relative) => self.join_base(caller, &space_record, base, &relative, need)?,
        };
        Ok(Target { space: space_record, path })
    }

    /// The file `reference` names and its latest state, resolved like
    /// [`Front::target`] then [`Front::file_at`]; for a plain path in a space
    /// whose ID is known, the space and the file are read together.
    pub fn file_target(
        &self,
        caller: &Caller,
        space: &str,
        reference: &str,
        base: &str,
        need: Need,
        at_revision: u64,
    ) -> Result<(Target, Entry)> {
        if at_revision == 0
            && base.is_empty()
            && let Ok(Reference::Absolute(path)) = Reference::parse(reference)
        {
            let (id, name) = match space.parse::<SpaceId>() {
                Ok(id) => (Some(id), None),
                Err(()) => (self.store.remembered_space_id(space), Some(space)),
            };
            if let Some(id) = id
                && let Some((record, entry)) = self.store.space_with_entry(id, name, &path)?
            {
                caller.authorize(&record, need, &echo(space))?;
                tracing::Span::current().record("space", tracing::field::display(record.id));
                let entry = entry.ok_or_else(|| Error::not_found(&path))?;
                if entry.is_dir() {
                    return Err(not_a_file(&path));
                }
                return Ok((Target { space: record, path }, entry));
            }
        }
        let target = self.target(caller, space, reference, base, "path", need)?;
        let entry = self.file_at(&target, at_revision)?;
        Ok((target, entry))
    }

    /// `relative` below the folder `base` (the root when `base` is empty).
    fn join_base(
        &self,
        caller: &Caller,
        space: &SpaceRecord,
        base: &str,
        relative: &SpacePath,
        need: Need,
    ) -> Result<SpacePath> {
        if base.is_empty() {
            return Ok(relative.clone());
        }
        let base_target = self.target(caller, &space.id.to_string(), base, "", "base", need)?;
        if base_target.space.id != space.id {
            return Err(Error::invalid_argument("base", "The base folder must be in the request's space."));
        }
        match self.store.entry(space.id, &base_target.path, None)? {
            Some(entry) if entry.is_dir() => {}
            Some(_) => {
                return Err(Error::new(
                    Reason::NotADirectory,
                    format!("The base {} is a file, not a folder.", base_target.path),
                )
                .with("path", &base_target.path)
                .field("base"));
            }
            None => return Err(Error::not_found(&base_target.path).field("base")),
        }
        base_target
            .path
            .join(relative.as_str())
            .map_err(|e| reference_error(ReferenceError::Path(e), "path", relative.as_str()))
    }

    /// The file at `target`, now (`at_revision` 0) or as of a retained
    /// revision; NOT_FOUND or NOT_A_FILE otherwise.
    pub fn file_at(&self, target: &Target, at_revision: u64) -> Result<Entry> {
        let revision = match at_revision {
            0 => None,
            at => {
                Store::check_revision(&target.space, at)?;
                Some(at)
            }
        };
        let entry = self.existing(target, revision)?;
        if entry.is_dir() {
            return Err(not_a_file(&target.path));
        }
        Ok(entry)
    }

    /// The entry at `target`, or NOT_FOUND.
    pub fn existing(&self, target: &Target, revision: Option<u64>) -> Result<Entry> {
        self.store.entry(target.space.id, &target.path, revision)?.ok_or_else(|| Error::not_found(&target.path))
    }
}

/// Version `number` of a file as text, decoded from its encoding: refused
/// when not text or over the text size limit.
pub(crate) fn text_of(front: &Front, target: &Target, entry: &Entry, number: u64) -> Result<(VersionRecord, String)> {
    let version = text_version(front, target, entry, number)?;
    let bytes = front.store.content(version.hash)?;
    let charset = version.charset();
    let text = match charset.decode(&bytes) {
        Some(std::borrow::Cow::Borrowed(_)) => String::from_utf8(bytes).ok(),
        decoded => decoded.map(std::borrow::Cow::into_owned),
    };
    let text = text.ok_or_else(|| Error::internal(format!("text content does not decode as {}", charset.name())))?;
    Ok((version, text))
}

/// The record of version `number` of a file, checked to be usable as text.
pub(crate) fn text_version(front: &Front, target: &Target, entry: &Entry, number: u64) -> Result<VersionRecord> {
    let version = front
        .store
        .version(target.space.id, entry.node, number)?
        .ok_or_else(|| Error::not_found(format!("version {number} of {}", target.path)))?;
    if !version.text.is_text {
        return Err(not_text(&target.path, &version.text));
    }
    let limit = front.store.limits().max_text_bytes;
    if version.size > limit {
        return Err(Error::new(
            Reason::FileTooLarge,
            format!("{} is {} bytes, over the {limit}-byte limit for text operations.", target.path, version.size),
        )
        .with("path", &target.path)
        .with("size", version.size)
        .with("limit", limit));
    }
    Ok(version)
}

/// Records that the caller's session (if any) has seen `version` of `node`.
/// A record the store failed to keep is logged, not an error of the call
/// that read: the rule then asks the session for one more read.
pub(crate) fn upsert_session(front: &Front, caller: &Caller, node: crate::ids::NodeId, version: u64) {
    if let Some(session) = &caller.session
        && let Err(error) = front.sessions.saw(&front.store, session, node, version)
    {
        tracing::warn!(%error, "recording a session's read failed");
    }
}

/// What a write of the caller records for its session itself (see
/// [`Sessions::mark`](crate::sessions::Sessions::mark)); when `None`,
/// [`upsert_written`] records it once the write is done.
pub(crate) fn session_mark(front: &Front, caller: &Caller) -> Option<crate::store::SessionMark> {
    front.sessions.mark(&front.store, caller.session.as_deref())
}

/// Records that the caller's session has seen the version it wrote, unless
/// the write kept that record itself (see [`session_mark`]).
pub(crate) fn upsert_written(front: &Front, caller: &Caller, node: crate::ids::NodeId, version: u64) {
    if session_mark(front, caller).is_none() {
        upsert_session(front, caller, node, version);
    }
}

pub(crate) fn not_a_file(path: &SpacePath) -> Error {
    Error::new(Reason::NotAFile, format!("{path} is a directory, not a file.")).with("path", path)
}

pub(crate) fn non_empty(value: String) -> Option<String> {
    (!value.is_empty()).then_some(value)
}

/// The error for a reference that did not parse.
pub fn reference_error(error: ReferenceError, field: &str, input: &str) -> Error {
    let reason = match &error {
        ReferenceError::Path(PathError::Traversal) | ReferenceError::EncodedTraversal => Reason::PathTraversal,
        ReferenceError::Path(_) => Reason::InvalidPath,
        ReferenceError::Malformed(_) => Reason::InvalidArgument,
    };
    let mut message = error.to_string();
    if let Some(first) = message.get_mut(0..1) {
        first.make_ascii_uppercase();
    }
    Error::new(reason, format!("{message}.")).with("path", echo(input)).field(field)
}

/// User input, shortened for echoing in errors.
pub(crate) fn echo(input: &str) -> String {
    if input.chars().count() <= MAX_ECHO_CHARS {
        input.to_owned()
    } else {
        let cut: String = input.chars().take(MAX_ECHO_CHARS).collect();
        format!("{cut}…")
    }
}

/// Idempotency scopes of calls running on this front: a second call with a
/// scope that is claimed gets IDEMPOTENCY_REQUEST_IN_PROGRESS without asking
/// the store. On a shared store the scope is claimed there too, under this
/// front's ID (see [`crate::store::claims`]).
#[derive(Debug)]
pub struct InFlight {
    scopes: Mutex<HashSet<[u8; 32]>>,
    /// Names this front process as the owner of its claims in the store.
    front: [u8; 16],
    /// How long a claim in the store lasts unless renewed.
    claim_lease: std::time::Duration,
}

impl InFlight {
    /// Claims that last `claim_lease` in a shared store unless renewed.
    pub fn new(claim_lease: std::time::Duration) -> Self {
        Self { scopes: Mutex::default(), front: ulid::Ulid::generate().to_bytes(), claim_lease }
    }

    pub fn claim_lease(&self) -> std::time::Duration {
        self.claim_lease
    }

    /// The claimed scopes.
    pub fn lock(&self) -> MutexGuard<'_, HashSet<[u8; 32]>> {
        self.scopes.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// This front's ID, as the owner of claims in a shared store.
    pub fn front(&self) -> [u8; 16] {
        self.front
    }
}
