//! `Write`: create, overwrite or append to a file.

use std::sync::Arc;

use super::Store;
use super::commit::{Commit, NewContent};
use super::content::Uploaded;
use super::receipt::ReceiptPlan;
use super::records::{Entry, Hash, VersionRecord};
use crate::error::{Error, Reason, Result};
use crate::ids::{NodeId, SpaceId};
use crate::media;
use crate::path::SpacePath;
use crate::text::TextMeta;

/// Who is making a change, recorded on every version it creates.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Actor {
    pub principal: String,
    /// `x-agentvfs-tool-call` metadata.
    pub tool_call: Option<String>,
    pub idempotency_key: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteBody {
    /// Text content: the result must be a text file within the text limit.
    Text(String),
    /// Raw bytes of any kind.
    Bytes(Vec<u8>),
    /// Raw bytes of any kind, staged in the store already (see
    /// [`super::content::stage`]); only with [`WriteMode::Overwrite`] or
    /// [`WriteMode::CreateNew`]. The caller releases the upload once the
    /// write returns. `mime_type` is [`crate::media::recorded`] of its bytes.
    Uploaded { upload: Uploaded, hash: Hash, text: TextMeta, mime_type: String },
}

/// A write's body once it is out of the [`WriteOp`].
enum Body {
    Bytes { bytes: Arc<Vec<u8>>, text: bool },
    Uploaded { upload: Uploaded, hash: Hash, text: TextMeta, mime_type: String },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteMode {
    Overwrite,
    Append,
    CreateNew,
}

#[derive(Debug)]
pub struct WriteOp {
    pub space: SpaceId,
    pub path: SpacePath,
    pub body: WriteBody,
    pub mode: WriteMode,
    /// The file's latest version must be this (0: the file must not exist).
    pub expected_version: Option<u64>,
    /// Recorded on the version (`write`, `append`, `upload`, …).
    pub operation: &'static str,
    /// The new version's executable bit; `None` keeps the latest version's
    /// (none for a new file).
    pub executable: Option<bool>,
    pub actor: Actor,
    /// Set for idempotent calls.
    pub receipt: Option<ReceiptPlan<WriteOutcome>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteOutcome {
    pub node: NodeId,
    pub version: u64,
    pub hash: Hash,
    pub size: u64,
    pub text: TextMeta,
    /// The file did not exist before.
    pub created: bool,
    /// False for CREATE_NEW on an existing file.
    pub written: bool,
    /// A new version was saved (false when the content was already equal).
    pub changed: bool,
    pub revision: u64,
}

impl Store {
    /// Applies a write; see [`WriteOp`]. Not yet durable: await [`Store::durable`]
    /// when `changed`.
    pub fn write(&self, mut op: WriteOp) -> Result<WriteOutcome> {
        let _guard = self.lock_space(op.space);
        let body = match std::mem::replace(&mut op.body, WriteBody::Bytes(Vec::new())) {
            WriteBody::Text(text) => Body::Bytes { bytes: Arc::new(text.into_bytes()), text: true },
            WriteBody::Bytes(bytes) => Body::Bytes { bytes: Arc::new(bytes), text: false },
            WriteBody::Uploaded { upload, hash, text, mime_type } => {
                if op.mode == WriteMode::Append {
                    return Err(Error::internal("staged content cannot be appended"));
                }
                Body::Uploaded { upload, hash, text, mime_type }
            }
        };
        self.replanning(&[op.space], || self.write_once(&op, &body))
    }

    /// Plans and applies a write whose body is `body` (`op.body` is not used).
    fn write_once(&self, op: &WriteOp, body: &Body) -> Result<WriteOutcome> {
        let path = &op.path;
        if path.is_root() {
            return Err(not_a_file(path));
        }
        // The space, the file and its folders in one round trip.
        let mut paths = path.ancestors();
        paths.push(path.clone());
        let (space, states) =
            self.space_with_entries(op.space, &paths)?.ok_or_else(|| Error::space_not_found(&op.space.to_string()))?;
        let existing = states.last().cloned().flatten();
        if let Some(entry) = &existing
            && entry.is_dir()
        {
            return Err(not_a_file(path));
        }
        check_expected(path, op.expected_version, existing.as_ref())?;

        if let (Some(entry), WriteMode::CreateNew) = (&existing, op.mode) {
            let version = self.version(op.space, entry.node, entry.version)?.ok_or_else(|| missing_version(path))?;
            let outcome = WriteOutcome {
                node: entry.node,
                version: entry.version,
                hash: entry.hash,
                size: entry.size,
                text: version.text,
                created: false,
                written: false,
                changed: false,
                revision: space.revision,
            };
            self.keep_receipt(op.receipt.as_ref(), &outcome)?;
            return Ok(outcome);
        }

        let (content, size, hash, text, mime_type, limit) = match body {
            Body::Bytes { bytes, text: text_body } => {
                let bytes = match (&existing, op.mode) {
                    (Some(entry), WriteMode::Append) if !bytes.is_empty() => {
                        let previous =
                            self.version(op.space, entry.node, entry.version)?.ok_or_else(|| missing_version(path))?;
                        if *text_body && !previous.text.is_text {
                            return Err(not_text(path, &previous.text));
                        }
                        let mut appended = self.content(entry.hash)?;
                        appended.extend_from_slice(bytes);
                        Arc::new(appended)
                    }
                    (Some(entry), WriteMode::Append) => Arc::new(self.content(entry.hash)?),
                    _ => bytes.clone(),
                };
                let limits = self.limits();
                let limit = if *text_body { limits.max_text_bytes } else { limits.max_file_bytes };
                let (size, hash, text) = (bytes.len() as u64, Hash::of(&bytes), TextMeta::analyze(&bytes));
                let mime_type = media::recorded(&text, &bytes);
                (NewContent::Bytes(bytes), size, hash, text, mime_type, limit)
            }
            Body::Uploaded { upload, hash, text, mime_type } => {
                let limit = self.limits().max_file_bytes;
                (NewContent::Uploaded(*upload), upload.size, *hash, *text, mime_type.clone(), limit)
            }
        };
        if size > limit {
            return Err(Error::new(
                Reason::FileTooLarge,
                format!("{path} would be {size} bytes, over the limit of {limit} bytes."),
            )
            .with("path", path)
            .with("size", size)
            .with("limit", limit));
        }

        // Unless the request sets it, the bit stays what it was.
        let executable = op.executable.unwrap_or(existing.as_ref().is_some_and(|e| e.executable));
        if let Some(entry) = &existing
            && entry.hash == hash
            && entry.executable == executable
        {
            let outcome = WriteOutcome {
                node: entry.node,
                version: entry.version,
                hash,
                size: entry.size,
                text,
                created: false,
                written: true,
                changed: false,
                revision: space.revision,
            };
            self.keep_receipt(op.receipt.as_ref(), &outcome)?;
            return Ok(outcome);
        }

        let mut commit = Commit::new(space.clone(), &op.actor.principal);
        commit.remember(paths.iter().cloned().zip(states));
        commit.ensure_parents(self, path)?;
        let record = VersionRecord {
            hash,
            size,
            text,
            principal: op.actor.principal.clone(),
            operation: op.operation.to_owned(),
            revision: 0,
            time_ms: 0,
            idempotency_key: op.actor.idempotency_key.clone(),
            tool_call: op.actor.tool_call.clone(),
            executable,
            mime_type,
        };
        let entry = commit.put_file(path, existing.as_ref(), record, content, false);
        commit.check_quota(&space)?;
        let outcome = WriteOutcome {
            node: entry.node,
            version: entry.version,
            hash,
            size: entry.size,
            text,
            created: existing.is_none(),
            written: true,
            changed: true,
            revision: commit.revision(),
        };
        commit.receipt = op.receipt.as_ref().map(|receipt| receipt.seal(&outcome));
        self.apply(&commit)?;
        Ok(outcome)
    }
}

fn check_expected(path: &SpacePath, expected: Option<u64>, existing: Option<&Entry>) -> Result<()> {
    let Some(expected) = expected else {
        return Ok(());
    };
    let current = existing.map_or(0, |e| e.version);
    if expected == current {
        return Ok(());
    }
    let message = match (expected, current) {
        (0, _) => format!("{path} already exists at version {current}; expected it not to exist."),
        (_, 0) => format!("{path} does not exist; expected version {expected}."),
        _ => format!("{path} is at version {current}, not the expected version {expected}."),
    };
    Err(version_conflict(path, message, expected, current))
}

/// VERSION_CONFLICT with the expected and current version in the details.
pub fn version_conflict(path: &SpacePath, message: String, expected: u64, current: u64) -> Error {
    Error::new(Reason::VersionConflict, message)
        .with("path", path)
        .with("expectedVersion", expected)
        .with("currentVersion", current)
        .precondition("VERSION", path.to_string())
}

fn not_a_file(path: &SpacePath) -> Error {
    Error::new(Reason::NotAFile, format!("{path} is a directory, not a file.")).with("path", path)
}

/// BINARY_CONTENT or NOT_UTF8 for a text operation on a non-text file.
pub fn not_text(path: &SpacePath, text: &TextMeta) -> Error {
    if text.is_utf8 {
        Error::new(Reason::BinaryContent, format!("{path} contains NUL bytes, so it is binary, not text."))
            .with("path", path)
    } else {
        Error::new(Reason::NotUtf8, format!("{path} is not valid UTF-8, so it cannot be used as text."))
            .with("path", path)
    }
}

fn missing_version(path: &SpacePath) -> Error {
    Error::new(Reason::DataLoss, format!("The latest version record of {path} is missing.")).with("path", path)
}
