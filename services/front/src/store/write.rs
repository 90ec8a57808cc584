//! `Write`: create, overwrite or append to a file.

use std::borrow::Cow;
use std::sync::Arc;

use super::commit::{Commit, NewContent};
use super::content::Uploaded;
use super::receipt::ReceiptPlan;
use super::records::{Entry, Hash, SessionRead, SpaceRecord, VersionRecord, encode, now_ms};
use super::{Store, grouped, keys};
use crate::error::{Error, Reason, Result};
use crate::ids::{NodeId, SpaceId};
use crate::media;
use crate::path::SpacePath;
use crate::text::TextMeta;
use crate::text::encoding::{self, Charset};

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
    /// Text content, stored in `encoding`, or when that is `None` in the
    /// encoding of the file it replaces or extends (UTF-8 for a new file);
    /// the result must be within the text limit.
    Text { text: String, encoding: Option<Charset> },
    /// Text encoded in `charset` already (an edit's bytes).
    Encoded { bytes: Vec<u8>, charset: Charset },
    /// Raw bytes of any kind.
    Bytes(Vec<u8>),
    /// Raw bytes of any kind, staged in the store already (see
    /// [`super::content::stage`]); only with [`WriteMode::Overwrite`] or
    /// [`WriteMode::CreateNew`]. The caller releases the upload once the
    /// write returns. `mime_type` is [`crate::media::recorded`] of its bytes.
    Uploaded { upload: Uploaded, hash: Hash, text: TextMeta, mime_type: String },
}

/// A write's body once it is out of the [`WriteOp`].
#[derive(Debug)]
pub(super) enum Body {
    /// UTF-8 text, stored in `encoding` (see [`WriteBody::Text`]).
    Text {
        utf8: Arc<Vec<u8>>,
        encoding: Option<Charset>,
    },
    /// Bytes in `charset` when it is known, otherwise bytes of any kind.
    Bytes {
        bytes: Arc<Vec<u8>>,
        charset: Option<Charset>,
    },
    Uploaded {
        upload: Uploaded,
        hash: Hash,
        text: TextMeta,
        mime_type: String,
    },
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
    /// The session to record as having read the version the write leaves,
    /// on a store that several fronts share (see [`crate::sessions`]).
    pub session: Option<SessionMark>,
}

/// A session's read-before-edit record to keep with a write: in the
/// transaction that commits it, or on its own when the write changes
/// nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionMark {
    pub session: String,
    /// How long the record lasts.
    pub idle_ms: i64,
}

impl SessionMark {
    /// The record of a read of `version` at `read_ms`.
    fn read(&self, version: u64, read_ms: i64) -> SessionRead {
        SessionRead { version, read_ms, expires_ms: read_ms.saturating_add(self.idle_ms) }
    }
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
        let body = match std::mem::replace(&mut op.body, WriteBody::Bytes(Vec::new())) {
            WriteBody::Text { text, encoding } => Body::Text { utf8: Arc::new(text.into_bytes()), encoding },
            WriteBody::Encoded { bytes, charset } => Body::Bytes { bytes: Arc::new(bytes), charset: Some(charset) },
            WriteBody::Bytes(bytes) => Body::Bytes { bytes: Arc::new(bytes), charset: None },
            WriteBody::Uploaded { upload, hash, text, mime_type } => {
                if op.mode == WriteMode::Append {
                    return Err(Error::internal("staged content cannot be appended"));
                }
                Body::Uploaded { upload, hash, text, mime_type }
            }
        };
        if grouped::groups(&op, &body) {
            return self.write_grouped(op, body);
        }
        let _guard = self.lock_space(op.space);
        self.replanning(&[op.space], || self.write_once(&op, &body))
    }

    /// Plans and applies a write whose body is `body` (`op.body` is not used).
    pub(super) fn write_once(&self, op: &WriteOp, body: &Body) -> Result<WriteOutcome> {
        // The space, the file and its folders in one round trip.
        let paths = grouped::write_paths(&op.path);
        let (space, states) =
            self.space_with_entries(op.space, &paths)?.ok_or_else(|| Error::space_not_found(&op.space.to_string()))?;
        match self.plan_write(op, body, space, &paths, states)? {
            Planned::Unchanged(outcome) => Ok(outcome),
            Planned::Commit(commit, outcome) => {
                self.apply(&commit)?;
                Ok(outcome)
            }
        }
    }

    /// Plans a write on `space` as it stands, where `paths` (the file's
    /// folders, then the file) are in `states`.
    pub(super) fn plan_write(
        &self,
        op: &WriteOp,
        body: &Body,
        space: SpaceRecord,
        paths: &[SpacePath],
        states: Vec<Option<Entry>>,
    ) -> Result<Planned> {
        let path = &op.path;
        if path.is_root() {
            return Err(not_a_file(path));
        }
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
            self.keep_session(op.session.as_ref(), &outcome);
            return Ok(Planned::Unchanged(outcome));
        }

        let (content, size, hash, text, mime_type, limit) = match body {
            Body::Text { .. } | Body::Bytes { .. } => {
                let previous = match &existing {
                    Some(entry) if op.mode == WriteMode::Append => {
                        Some(self.version(op.space, entry.node, entry.version)?.ok_or_else(|| missing_version(path))?)
                    }
                    _ => None,
                };
                let (bytes, charset) = self.encoded(path, body, existing.as_ref(), previous.as_ref())?;
                let bytes = match (&existing, previous) {
                    (Some(entry), Some(_)) if !bytes.is_empty() => {
                        let mut appended = self.content(entry.hash)?;
                        appended.extend_from_slice(&bytes);
                        Arc::new(appended)
                    }
                    (Some(entry), Some(_)) => Arc::new(self.content(entry.hash)?),
                    _ => bytes,
                };
                let limits = self.limits();
                let text_body = matches!(body, Body::Text { .. } | Body::Bytes { charset: Some(_), .. });
                let limit = if text_body { limits.max_text_bytes } else { limits.max_file_bytes };
                let (text, charset) = match charset {
                    Some(charset) => (encoding::classify_as(&bytes, charset), charset),
                    None => encoding::classify(&bytes),
                };
                let (size, hash) = (bytes.len() as u64, Hash::of(&bytes));
                let mime_type = media::recorded(&text, charset, &bytes);
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
            self.keep_session(op.session.as_ref(), &outcome);
            return Ok(Planned::Unchanged(outcome));
        }

        let mut commit = Box::new(Commit::new(space.clone(), &op.actor.principal));
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
        commit.session_read = op.session.as_ref().map(|mark| {
            (keys::session_read(&mark.session, entry.node), encode(&mark.read(entry.version, commit.time_ms)))
        });
        Ok(Planned::Commit(commit, outcome))
    }

    /// Records a session's read of what a write that changed nothing found.
    /// A record the store failed to keep is logged, not an error of the
    /// write: the rule then asks the session for one more read.
    fn keep_session(&self, mark: Option<&SessionMark>, outcome: &WriteOutcome) {
        let Some(mark) = mark else { return };
        if let Err(error) = self.record_session_read(&mark.session, outcome.node, mark.read(outcome.version, now_ms()))
        {
            tracing::warn!(%error, "recording a session's read failed");
        }
    }
}

/// What a write comes to once planned.
pub(super) enum Planned {
    /// Nothing to commit: the file is as asked already (or, for
    /// CREATE_NEW, exists).
    Unchanged(WriteOutcome),
    /// This commit, with the outcome the write has once it is applied.
    Commit(Box<Commit>, WriteOutcome),
}

impl Store {
    /// A text or bytes body as the bytes to store (to append, with
    /// `previous` the version they extend) and their encoding when known.
    fn encoded(
        &self,
        path: &SpacePath,
        body: &Body,
        existing: Option<&Entry>,
        previous: Option<&VersionRecord>,
    ) -> Result<(Arc<Vec<u8>>, Option<Charset>)> {
        let file_charset = existing.filter(|e| e.is_text).map(|e| Charset::of_mime_type(&e.mime_type));
        match body {
            Body::Text { utf8, encoding } => {
                if let Some(previous) = previous {
                    if !previous.text.is_text && !utf8.is_empty() {
                        return Err(not_text(path, &previous.text));
                    }
                    if let (Some(asked), Some(file)) = (encoding, file_charset)
                        && *asked != file
                    {
                        return Err(Error::invalid_argument(
                            "encoding",
                            format!(
                                "{path} is in {}; appended text is stored in it, not in {}.",
                                file.name(),
                                asked.name()
                            ),
                        ));
                    }
                }
                let charset = encoding.or(file_charset).unwrap_or(Charset::UTF_8);
                if charset.is_utf8() {
                    return Ok((utf8.clone(), Some(charset)));
                }
                let text = std::str::from_utf8(utf8).map_err(|_| Error::internal("a text body is not UTF-8"))?;
                let bytes = match previous {
                    Some(_) => charset.encode(text).map(Cow::into_owned),
                    None => charset.encode_file(text),
                };
                let bytes = bytes.map_err(|character| unrepresentable(path, charset, character))?;
                Ok((Arc::new(bytes), Some(charset)))
            }
            Body::Bytes { bytes, charset } => Ok((bytes.clone(), *charset)),
            Body::Uploaded { .. } => Err(Error::internal("staged content is not encoded")),
        }
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

/// BINARY_CONTENT for a text operation on a file that is not text.
pub fn not_text(path: &SpacePath, text: &TextMeta) -> Error {
    let message = if text.is_utf8 {
        format!("{path} contains NUL bytes, so it is binary, not text.")
    } else {
        format!(
            "{path} is binary: it is not UTF-8, not UTF-16 with a byte-order mark, and no other encoding decodes it \
             to text."
        )
    };
    Error::new(Reason::BinaryContent, message).with("path", path)
}

/// UNREPRESENTABLE_TEXT: `character` of the text for `path` has no encoding
/// in `charset`.
pub fn unrepresentable(path: &SpacePath, charset: Charset, character: char) -> Error {
    Error::new(
        Reason::UnrepresentableText,
        format!(
            "{path} is stored in {}, which cannot hold {character:?} (U+{:04X}).",
            charset.name(),
            u32::from(character)
        ),
    )
    .with("path", path)
    .with("encoding", charset.name())
    .with("character", format!("U+{:04X}", u32::from(character)))
}

fn missing_version(path: &SpacePath) -> Error {
    Error::new(Reason::DataLoss, format!("The latest version record of {path} is missing.")).with("path", path)
}
