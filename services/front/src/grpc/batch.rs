//! `Batch`: up to 20 structural actions previewed, or applied atomically as
//! one commit at one revision.

use std::sync::Arc;

use agentvfs_proto::v1 as pb;
use prost::Message as _;
use tonic::Code;

use super::edit::{check_base, failure, parse_edits};
use super::{Front, Target, idempotency, reference_error};
use crate::auth::{Caller, Need};
use crate::edit;
use crate::error::{Error, Reason, Result};
use crate::media;
use crate::path::SpacePath;
use crate::reference::{Reference, ReferenceError};
use crate::store::{
    ChangeKind, Commit, Entry, Hash, NewContent, ReceiptPlan, SpaceRecord, Store, VersionRecord, unrepresentable,
};
use crate::text::encoding::{self, Charset};

/// Most actions in one batch, and the largest batch request.
const MAX_ACTIONS: usize = 20;
const MAX_REQUEST_BYTES: usize = 2 << 20;

/// Previews or applies a batch; a failing action is reported in the
/// response (`failed_index`), never half-applied. A failing service (the
/// store unreachable, a conflict to retry) fails the call instead.
pub(super) fn batch(front: &Front, caller: &Caller, req: &pb::BatchRequest) -> Result<pb::BatchResponse> {
    if req.actions.is_empty() || req.actions.len() > MAX_ACTIONS {
        return Err(Error::new(
            Reason::InvalidArgument,
            format!("A batch has 1 to {MAX_ACTIONS} actions, not {}.", req.actions.len()),
        )
        .with("limit", MAX_ACTIONS)
        .field("actions"));
    }
    if req.encoded_len() > MAX_REQUEST_BYTES {
        return Err(Error::new(
            Reason::TooLarge,
            "A batch request is at most 2 MiB; split it or use Write for large files.",
        )
        .with("limit", MAX_REQUEST_BYTES)
        .field("actions"));
    }
    if req.apply && req.idempotency_key.is_empty() {
        return Err(Error::invalid_argument(
            "idempotency_key",
            "Applying a batch needs an idempotency_key, so a retry can never apply it twice.",
        ));
    }
    let need = if req.apply { Need::Write } else { Need::Read };
    let space = front.space(caller, &req.space, need)?;
    // Previews never consume a key.
    let key = if req.apply { req.idempotency_key.as_str() } else { "" };
    let fingerprint = idempotency::fingerprint(key, req);
    let scope = space.id.to_string();
    idempotency::run(front, caller, &scope, "Batch", key, fingerprint, |claim| {
        let receipt = claim.map(|c| c.receipt(pb::BatchResponse::clone));
        plan(front, caller, req, &space, need, receipt.as_ref())
    })
}

/// Plans the batch's actions in one commit per space they touch; applies
/// them (with `receipt`) when asked and every action succeeds. A failed
/// batch keeps its receipt too: a retry gets the same failure.
fn plan(
    front: &Front,
    caller: &Caller,
    req: &pb::BatchRequest,
    space: &SpaceRecord,
    need: Need,
    receipt: Option<&ReceiptPlan<pb::BatchResponse>>,
) -> Result<pb::BatchResponse> {
    let mut outcomes = Vec::with_capacity(req.actions.len());
    let mut failed: Option<usize> = None;
    // Spaces that moves send content to; each needs write access and consent.
    let mut spaces = vec![space.id];
    let mut destination_error = None;
    for (index, action) in req.actions.iter().enumerate() {
        if let Some(pb::batch_action::Action::Move(m)) = &action.action
            && !m.to_space.is_empty()
            && m.to_space != space.name
            && m.to_space != space.id.to_string()
        {
            let field = format!("actions[{index}].move.to_space");
            let resolved = if req.confirm_access {
                front
                    .space(caller, &m.to_space, need)
                    .map_err(|e| if e.reason == Reason::InvalidArgument { e.field(&field) } else { e })
            } else {
                Err(Error::new(
                    Reason::InvalidArgument,
                    "Moving content to another space changes who can see it; set confirm_access to do it.",
                )
                .field("confirm_access"))
            };
            match resolved {
                Ok(destination) if !spaces.contains(&destination.id) => spaces.push(destination.id),
                Ok(_) => {}
                Err(error) => {
                    destination_error = Some((index, error));
                    break;
                }
            }
        }
    }
    // A failing action fails the plan, so nothing of the batch is applied.
    let planned = front.store.mutate_many(&spaces, &caller.principal, req.apply, |store, commits| {
        if let Some((index, error)) = &destination_error {
            failed = Some(*index);
            return Err(error.clone());
        }
        // Planned again from the start when the plan went stale.
        outcomes.clear();
        for (index, action) in req.actions.iter().enumerate() {
            match run(front, caller, store, commits, req, index, action) {
                Ok(outcome) => outcomes.push(outcome),
                Err(error) => {
                    failed = Some(index);
                    return Err(error);
                }
            }
        }
        let changes = commits.iter().any(|c| !c.is_empty());
        let response = pb::BatchResponse {
            outcomes: std::mem::take(&mut outcomes),
            applied_changes: req.apply && changes,
            atomic: req.apply,
            applied: if req.apply { req.actions.len() as u32 } else { 0 },
            failed_index: None,
            revision: if req.apply && !commits[0].is_empty() { commits[0].revision() } else { space.revision },
        };
        commits[0].receipt = receipt.as_ref().map(|receipt| receipt.seal(&response));
        Ok(response)
    });
    let response = match planned {
        Ok((response, _)) if response.applied_changes => return Ok(response),
        Ok((response, _)) => response,
        // The service failed, not an action: the call fails as a whole and
        // keeps no receipt, so the same call can be sent again.
        Err(error) if error.reason.retryable() || matches!(error.reason.code(), Code::Internal | Code::DataLoss) => {
            return Err(error);
        }
        Err(error) => {
            // A quota failure belongs to the whole batch; it is reported on its last action.
            let index = failed.unwrap_or(req.actions.len() - 1);
            outcomes.truncate(index);
            outcomes.push(pb::BatchOutcome {
                index: index as u32,
                ok: false,
                summary: error.message().to_owned(),
                error: Some(pb::ReadError {
                    code: error.reason.code() as i32,
                    reason: error.reason.as_str().to_owned(),
                    message: error.message().to_owned(),
                    metadata: error.info_metadata(),
                }),
                ..Default::default()
            });
            pb::BatchResponse {
                outcomes,
                failed_index: Some(index as u32),
                revision: space.revision,
                ..Default::default()
            }
        }
    };
    front.store.keep_receipt(receipt, &response)?;
    Ok(response)
}

/// A path of an action, resolved in the batch's space (relative to `base`).
fn path_of(req: &pb::BatchRequest, value: &str, field: &str) -> Result<SpacePath> {
    let parsed = Reference::parse(value).map_err(|e| reference_error(e, field, value))?;
    match parsed {
        Reference::Absolute(path) => Ok(path),
        Reference::Relative(path) if req.base.is_empty() => Ok(path),
        Reference::Relative(path) => {
            let base = match Reference::parse(&req.base).map_err(|e| reference_error(e, "base", &req.base))? {
                Reference::Absolute(base) | Reference::Relative(base) => base,
                _ => return Err(Error::invalid_argument("base", "A batch's base is a folder path.")),
            };
            base.join(path.as_str()).map_err(|e| reference_error(ReferenceError::Path(e), field, value))
        }
        _ => Err(Error::invalid_argument(field, "Batch actions name paths in the batch's space.")),
    }
}

fn ok(index: usize, summary: String, path: &SpacePath, entry: Option<&Entry>, count: usize) -> pb::BatchOutcome {
    pb::BatchOutcome {
        index: index as u32,
        ok: true,
        summary,
        path: path.to_string(),
        node_id: entry.map(|e| e.node.to_string()).unwrap_or_default(),
        version: entry.map_or(0, |e| e.version),
        subtree_count: count as u64,
        error: None,
    }
}

fn run(
    front: &Front,
    caller: &Caller,
    store: &Store,
    commits: &mut [Commit],
    req: &pb::BatchRequest,
    index: usize,
    action: &pb::BatchAction,
) -> Result<pb::BatchOutcome> {
    let (commit, others) = commits.split_first_mut().ok_or_else(|| Error::internal("a batch without its space"))?;
    let field = |name: &str| format!("actions[{index}].{name}");
    let Some(action) = &action.action else {
        return Err(Error::invalid_argument(&format!("actions[{index}]"), "Each action needs exactly one kind."));
    };
    match action {
        pb::batch_action::Action::Mkdir(a) => {
            let path = path_of(req, &a.path, &field("mkdir.path"))?;
            new_name_free(store, commit, &path)?;
            commit.mkdir(&path, false);
            let entry = commit.current(store, &path)?;
            Ok(ok(index, format!("create folder {path}"), &path, entry.as_ref(), 1))
        }
        pb::batch_action::Action::Create(a) => {
            let path = path_of(req, &a.path, &field("create.path"))?;
            new_name_free(store, commit, &path)?;
            let limit = store.limits().max_text_bytes;
            if a.content.len() as u64 > limit {
                return Err(Error::new(Reason::TooLarge, format!("The content is over the {limit}-byte text limit."))
                    .with("limit", limit)
                    .field(field("create.content")));
            }
            let entry = put(commit, caller, "batch", key_of(req), &path, None, Encoded::utf8(a.content.clone()));
            Ok(ok(index, format!("create {path} ({} bytes)", entry.size), &path, Some(&entry), 1))
        }
        pb::batch_action::Action::Edit(a) => {
            let path = path_of(req, &a.path, &field("edit.path"))?;
            let entry = commit.current(store, &path)?.ok_or_else(|| Error::not_found(&path))?;
            if entry.is_dir() {
                return Err(super::not_a_file(&path));
            }
            let target = Target { space: commit.space.clone(), path: path.clone() };
            check_base(front, caller, &target, &entry, a.base_version)?;
            let original = planned_text(store, commit, &target, &entry)?;
            let edits = parse_edits(&a.edits)?;
            let (edited, _) = edit::apply(&original.text, &edits).map_err(|f| failure(f, &target))?;
            if edited == original.text {
                return Ok(ok(index, format!("edit {path}: no change"), &path, Some(&entry), 1));
            }
            let limit = store.limits().max_text_bytes;
            if edited.len() as u64 > limit {
                return Err(Error::new(
                    Reason::FileTooLarge,
                    format!("{path} would be over the {limit}-byte text limit."),
                )
                .with("limit", limit));
            }
            let new = put(commit, caller, "batch", key_of(req), &path, Some(&entry), original.encode(&path, &edited)?);
            Ok(ok(index, format!("edit {path}: version {} -> {}", entry.version, new.version), &path, Some(&new), 1))
        }
        pb::batch_action::Action::Copy(a) => {
            let from = path_of(req, &a.from, &field("copy.from"))?;
            let folder = path_of(req, &a.to_folder, &field("copy.to_folder"))?;
            let to = named(&folder, if a.name.is_empty() { from.name() } else { &a.name }, &field("copy.name"))?;
            let count = commit.copy(store, &from, &to)?;
            let entry = commit.current(store, &to)?;
            Ok(ok(index, format!("copy {from} to {to} ({count} entries)"), &to, entry.as_ref(), count))
        }
        pb::batch_action::Action::Rename(a) => {
            let from = path_of(req, &a.path, &field("rename.path"))?;
            let parent = from.parent().unwrap_or_else(SpacePath::root);
            let to = named(&parent, &a.new_name, &field("rename.new_name"))?;
            let count = commit.relocate(store, &from, &to, ChangeKind::Renamed)?;
            let entry = commit.current(store, &to)?;
            Ok(ok(index, format!("rename {from} to {to} ({count} entries)"), &to, entry.as_ref(), count))
        }
        pb::batch_action::Action::Move(a) => {
            let from = path_of(req, &a.from, &field("move.from"))?;
            let folder = path_of(req, &a.to_folder, &field("move.to_folder"))?;
            if !a.to_space.is_empty() && a.to_space != commit.space.name && a.to_space != commit.space.id.to_string() {
                let dest = others
                    .iter_mut()
                    .find(|c| c.space.name == a.to_space || c.space.id.to_string() == a.to_space)
                    .ok_or_else(|| Error::internal("a move's destination space was not resolved"))?;
                let to = named(&folder, from.name(), &field("move.from"))?;
                let entry = commit.current(store, &from)?;
                let count = commit.move_to_space(store, &from, dest, &to)?;
                let summary = format!(
                    "move {from} to {}:{to} ({count} entries; now visible to that space's members)",
                    dest.space.name
                );
                return Ok(ok(index, summary, &to, entry.as_ref(), count));
            }
            let to = named(&folder, from.name(), &field("move.from"))?;
            let count = commit.relocate(store, &from, &to, ChangeKind::Moved)?;
            let entry = commit.current(store, &to)?;
            Ok(ok(index, format!("move {from} to {to} ({count} entries)"), &to, entry.as_ref(), count))
        }
        pb::batch_action::Action::Trash(a) => {
            let path = path_of(req, &a.path, &field("trash.path"))?;
            let entry = commit.current(store, &path)?;
            let count = commit.trash(store, &path)?;
            Ok(ok(index, format!("trash {path} ({count} entries)"), &path, entry.as_ref(), count))
        }
    }
}

/// `folder/name`, with `name` a single valid segment.
fn named(folder: &SpacePath, name: &str, field: &str) -> Result<SpacePath> {
    if name.is_empty() || name.contains('/') || name == "." || name == ".." {
        return Err(Error::new(Reason::InvalidPath, format!("{name:?} is not a valid name.")).field(field));
    }
    folder.join(name).map_err(|e| reference_error(ReferenceError::Path(e), field, name))
}

/// New names must be unused and their parent must already exist.
fn new_name_free(store: &Store, commit: &Commit, path: &SpacePath) -> Result<()> {
    if commit.current(store, path)?.is_some() {
        return Err(Error::new(Reason::AlreadyExists, format!("{path} already exists.")).with("path", path));
    }
    let parent = path.parent().unwrap_or_else(SpacePath::root);
    match commit.current(store, &parent)? {
        Some(entry) if entry.is_dir() => Ok(()),
        Some(_) => {
            Err(Error::new(Reason::NotADirectory, format!("{parent} is a file, not a folder.")).with("path", &parent))
        }
        None => Err(Error::new(
            Reason::NotFound,
            format!("The folder {parent} does not exist; batch destinations must exist."),
        )
        .with("path", &parent)),
    }
}

/// Text as the bytes of an encoding.
pub(super) struct Encoded {
    pub bytes: Vec<u8>,
    pub charset: Charset,
}

impl Encoded {
    pub fn utf8(text: String) -> Self {
        Self { bytes: text.into_bytes(), charset: Charset::UTF_8 }
    }
}

/// A text file as a batch has left it so far.
pub(super) struct PlannedText {
    pub charset: Charset,
    /// Its bytes, when not UTF-8 (then they are `text`'s).
    bytes: Vec<u8>,
    pub text: String,
}

impl PlannedText {
    /// The bytes of `new` text for the file: in its encoding, keeping the
    /// bytes of the text around the change as they were.
    pub fn encode(&self, path: &SpacePath, new: &str) -> Result<Encoded> {
        let charset = self.charset;
        let bytes = charset.splice(&self.bytes, &self.text, new).map_err(|c| unrepresentable(path, charset, c))?;
        Ok(Encoded { bytes, charset })
    }
}

/// The text of a file as this batch has left it so far.
pub(super) fn planned_text(store: &Store, commit: &Commit, target: &Target, entry: &Entry) -> Result<PlannedText> {
    let bytes = match commit.planned_bytes(entry.node, entry.version) {
        Some(bytes) => bytes.to_vec(),
        None => {
            let version = store
                .version(target.space.id, entry.node, entry.version)?
                .ok_or_else(|| Error::not_found(&target.path))?;
            if !version.text.is_text {
                return Err(crate::store::not_text(&target.path, &version.text));
            }
            store.content(version.hash)?
        }
    };
    let charset = entry.charset();
    if charset.is_utf8() {
        let text = String::from_utf8(bytes).map_err(|_| Error::internal("text content is not UTF-8"))?;
        return Ok(PlannedText { charset, bytes: Vec::new(), text });
    }
    let text = charset.decode(&bytes).ok_or_else(|| Error::internal("text content does not decode"))?.into_owned();
    Ok(PlannedText { charset, bytes, text })
}

/// The idempotency key a batch's versions record: its key when applied.
fn key_of(req: &pb::BatchRequest) -> Option<String> {
    (req.apply && !req.idempotency_key.is_empty()).then(|| req.idempotency_key.clone())
}

/// Plans `text` as `path`'s new version, made by `operation` under
/// `idempotency_key` (when applied).
pub(super) fn put(
    commit: &mut Commit,
    caller: &Caller,
    operation: &str,
    idempotency_key: Option<String>,
    path: &SpacePath,
    previous: Option<&Entry>,
    Encoded { bytes, charset }: Encoded,
) -> Entry {
    let text = encoding::classify_as(&bytes, charset);
    let record = VersionRecord {
        hash: Hash::of(&bytes),
        size: bytes.len() as u64,
        text,
        mime_type: media::recorded(&text, charset, &bytes),
        principal: caller.principal.clone(),
        operation: operation.to_owned(),
        revision: 0,
        time_ms: 0,
        idempotency_key,
        tool_call: caller.tool_call.clone(),
        // An edit keeps the bit; a created file has none.
        executable: previous.is_some_and(|e| e.executable),
    };
    commit.put_file(path, previous, record, NewContent::Bytes(Arc::new(bytes)), false)
}
