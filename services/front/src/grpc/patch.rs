//! `ApplyPatch` (SPEC §15): a patch in either format models write, read by
//! [`crate::patch`] and applied as one commit of one space. Adds are
//! creates (with their folders), deletes go to the trash, updates are new
//! versions whose hunks matched exactly, moves are moves; nothing is saved
//! unless every file of the patch applies, and the error then names the
//! file and the hunk.

use agentvfs_proto::v1 as pb;

use super::batch::{Encoded, planned_text, put};
use super::{Front, Target, idempotency, reference_error};
use crate::auth::{Caller, Need};
use crate::diff;
use crate::error::{Error, Reason, Result};
use crate::patch::{self, FileChange, Format, HunkFailure, HunkFailureKind, Patch};
use crate::path::SpacePath;
use crate::reference::{Reference, ReferenceError};
use crate::store::{ChangeKind, Commit, ReceiptPlan, SpaceRecord, Store};

/// The largest patch text, and the most files one patch may change.
const MAX_PATCH_BYTES: usize = 4 << 20;
const MAX_PATCH_FILES: usize = 1_000;

/// Previews or applies `req`'s patch.
pub(super) fn apply_patch(
    front: &Front,
    caller: &Caller,
    req: &pb::ApplyPatchRequest,
) -> Result<pb::ApplyPatchResponse> {
    if req.patch.len() > MAX_PATCH_BYTES {
        return Err(Error::new(
            Reason::TooLarge,
            format!("A patch is at most {MAX_PATCH_BYTES} bytes, not {}; split it.", req.patch.len()),
        )
        .with("limit", MAX_PATCH_BYTES)
        .field("patch"));
    }
    if !req.dry_run && req.idempotency_key.is_empty() {
        return Err(Error::invalid_argument(
            "idempotency_key",
            "Applying a patch needs an idempotency_key, so a retry can never apply it twice.",
        ));
    }
    let format = match pb::PatchFormat::try_from(req.format) {
        Ok(pb::PatchFormat::Unspecified) => Format::detect(&req.patch),
        Ok(pb::PatchFormat::ApplyPatch) => Format::ApplyPatch,
        Ok(pb::PatchFormat::Unified) => Format::Unified,
        Err(_) => return Err(Error::invalid_argument("format", format!("Unknown patch format {}.", req.format))),
    };
    let parsed = patch::parse(&req.patch, format).map_err(|error| {
        Error::new(Reason::InvalidArgument, format!("The patch cannot be read: {error}."))
            .with("patchLine", error.line)
            .field("patch")
    })?;
    if parsed.files.len() > MAX_PATCH_FILES {
        return Err(Error::new(
            Reason::TooLarge,
            format!("A patch changes at most {MAX_PATCH_FILES} files, not {}; split it.", parsed.files.len()),
        )
        .with("limit", MAX_PATCH_FILES)
        .field("patch"));
    }
    let base = match req.base.as_str() {
        "" => SpacePath::root(),
        base => match Reference::parse(base).map_err(|e| reference_error(e, "base", base))? {
            Reference::Absolute(path) | Reference::Relative(path) => path,
            _ => return Err(Error::invalid_argument("base", "A patch's base is a folder path.")),
        },
    };
    let need = if req.dry_run { Need::Read } else { Need::Write };
    let space = front.space(caller, &req.space, need)?;
    // Dry runs never consume a key.
    let key = if req.dry_run { "" } else { req.idempotency_key.as_str() };
    let fingerprint = idempotency::fingerprint(key, req);
    let scope = space.id.to_string();
    idempotency::run(front, caller, &scope, "ApplyPatch", key, fingerprint, |claim| {
        let receipt = claim.map(|c| c.receipt(pb::ApplyPatchResponse::clone));
        let change = Change { front, caller, req, base: &base, space: &space };
        change.apply(&parsed, receipt.as_ref())
    })
}

/// One `ApplyPatch` call, resolved.
struct Change<'a> {
    front: &'a Front,
    caller: &'a Caller,
    req: &'a pb::ApplyPatchRequest,
    base: &'a SpacePath,
    space: &'a SpaceRecord,
}

impl Change<'_> {
    /// Plans every file's change in one commit, and saves it unless this is
    /// a dry run.
    fn apply(
        &self,
        parsed: &Patch,
        receipt: Option<&ReceiptPlan<pb::ApplyPatchResponse>>,
    ) -> Result<pb::ApplyPatchResponse> {
        let store = &self.front.store;
        let mut changed = false;
        let planned =
            store.mutate_many(&[self.space.id], &self.caller.principal, !self.req.dry_run, |store, commits| {
                let commit = &mut commits[0];
                let mut response = pb::ApplyPatchResponse { dry_run: self.req.dry_run, ..Default::default() };
                for (index, change) in parsed.files.iter().enumerate() {
                    let (mut file, diff) = self
                        .file(store, commit, change)
                        .map_err(|error| error.with("fileIndex", index).with("file", change.path()))?;
                    if self.req.dry_run {
                        file.version = 0;
                    }
                    response.files.push(file);
                    response.diff.push_str(&diff);
                }
                changed = !commit.is_empty();
                response.revision = if changed && !self.req.dry_run { commit.revision() } else { self.space.revision };
                commit.receipt = receipt.map(|receipt| receipt.seal(&response));
                Ok(response)
            })?;
        let (response, _) = planned;
        // A patch that changed nothing still answers its retries the same way.
        if !changed {
            store.keep_receipt(receipt, &response)?;
        }
        Ok(response)
    }

    /// Plans one file's change; returns what it did and its unified diff.
    fn file(&self, store: &Store, commit: &mut Commit, change: &FileChange) -> Result<(pb::PatchedFile, String)> {
        let path = self.path(change.path())?;
        let target = Target { space: commit.space.clone(), path: path.clone() };
        let limit = store.limits().max_text_bytes;
        let too_large = |size: usize| {
            Error::new(Reason::FileTooLarge, format!("{path} would be over the {limit}-byte text limit."))
                .with("limit", limit)
                .with("size", size)
        };
        match change {
            FileChange::Add { content, .. } => {
                if commit.current(store, &path)?.is_some() {
                    return Err(Error::new(
                        Reason::AlreadyExists,
                        format!("{path} already exists; the patch adds it."),
                    )
                    .with("path", &path));
                }
                if content.len() as u64 > limit {
                    return Err(too_large(content.len()));
                }
                commit.ensure_parents(store, &path)?;
                let entry = self.put(commit, &path, None, Encoded::utf8(content.clone()))?;
                let diff = diff::unified("", content, "/dev/null", &format!("b{path}"), 3);
                let file = patched(&path, None, pb::PatchChange::Added, 0, entry.version, 0, &diff);
                Ok((file, diff.text))
            }
            FileChange::Delete { .. } => {
                let entry = commit.current(store, &path)?.ok_or_else(|| Error::not_found(&path))?;
                if entry.is_dir() {
                    return Err(super::not_a_file(&path));
                }
                // A file that is not text goes without a diff of its lines.
                let old = match entry.is_text {
                    true => planned_text(store, commit, &target, &entry)?.text,
                    false => String::new(),
                };
                commit.trash(store, &path)?;
                let diff = diff::unified(&old, "", &format!("a{path}"), "/dev/null", 3);
                let file = patched(&path, None, pb::PatchChange::Deleted, entry.version, 0, 0, &diff);
                Ok((file, diff.text))
            }
            FileChange::Update { move_to, hunks, .. } => {
                let entry = commit.current(store, &path)?.ok_or_else(|| Error::not_found(&path))?;
                if entry.is_dir() {
                    return Err(super::not_a_file(&path));
                }
                let planned = planned_text(store, commit, &target, &entry)?;
                let old = &planned.text;
                let new = patch::apply_hunks(old, hunks).map_err(|failure| hunk_error(failure, &path))?;
                if new.len() as u64 > limit {
                    return Err(too_large(new.len()));
                }
                let mut version = entry.version;
                if new != *old {
                    version = self.put(commit, &path, Some(&entry), planned.encode(&path, &new)?)?.version;
                }
                let destination = move_to.as_deref().map(|to| self.path(to)).transpose()?;
                let (kind, new_path) = match &destination {
                    Some(to) if *to != path => {
                        if commit.current(store, to)?.is_some() {
                            return Err(Error::new(
                                Reason::AlreadyExists,
                                format!("{to} already exists; the patch moves {path} there."),
                            )
                            .with("path", to));
                        }
                        commit.ensure_parents(store, to)?;
                        let kind = if to.parent() == path.parent() { ChangeKind::Renamed } else { ChangeKind::Moved };
                        commit.relocate(store, &path, to, kind)?;
                        (pb::PatchChange::Moved, Some(to))
                    }
                    _ => (pb::PatchChange::Updated, None),
                };
                let shown = new_path.unwrap_or(&path);
                let diff = diff::unified(old, &new, &format!("a{path}"), &format!("b{shown}"), 3);
                let hunks = u32::try_from(hunks.len()).unwrap_or(u32::MAX);
                let mut file = patched(&path, new_path, kind, entry.version, version, hunks, &diff);
                if version == entry.version && new_path.is_none() {
                    file.version = 0;
                }
                Ok((file, diff.text))
            }
        }
    }

    /// A path of the patch in the space: relative to the base folder unless
    /// absolute.
    fn path(&self, written: &str) -> Result<SpacePath> {
        let field = "patch";
        match Reference::parse(written).map_err(|e| reference_error(e, field, written))? {
            Reference::Absolute(path) => Ok(path),
            Reference::Relative(path) => {
                self.base.join(path.as_str()).map_err(|e| reference_error(ReferenceError::Path(e), field, written))
            }
            _ => Err(Error::invalid_argument(field, format!("{written:?} is not a path of the space."))),
        }
    }

    /// Plans `text` as `path`'s new version, made by this call.
    fn put(
        &self,
        commit: &mut Commit,
        path: &SpacePath,
        previous: Option<&crate::store::Entry>,
        text: Encoded,
    ) -> Result<crate::store::Entry> {
        let key = (!self.req.dry_run && !self.req.idempotency_key.is_empty()).then(|| self.req.idempotency_key.clone());
        Ok(put(commit, self.caller, "patch", key, path, previous, text))
    }
}

fn patched(
    path: &SpacePath,
    new_path: Option<&SpacePath>,
    change: pb::PatchChange,
    previous_version: u64,
    version: u64,
    hunks: u32,
    diff: &diff::Unified,
) -> pb::PatchedFile {
    pb::PatchedFile {
        path: path.to_string(),
        new_path: new_path.map(SpacePath::to_string).unwrap_or_default(),
        change: change as i32,
        previous_version,
        version,
        hunks,
        lines_added: diff.added,
        lines_removed: diff.removed,
    }
}

/// The error of a hunk that did not apply to `path`.
fn hunk_error(failure: HunkFailure, path: &SpacePath) -> Error {
    let hunk = failure.index;
    let lines = |lines: &[u64]| lines.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
    let error = match failure.kind {
        HunkFailureKind::NoMatch { near_miss } => {
            let mut message = format!("Hunk {hunk} of {path} does not match its text.");
            if let Some((line, difference)) = near_miss {
                message.push_str(&format!(
                    " Line {line} matches except for {}; the patch must copy the lines exactly.",
                    difference.as_str()
                ));
            }
            let mut error = Error::new(Reason::EditNoMatch, message);
            if let Some((line, difference)) = near_miss {
                error = error.with("nearMissLine", line).with("nearMissDifference", difference.as_str());
            }
            error
        }
        HunkFailureKind::AnchorNotFound { anchor } => Error::new(
            Reason::EditNoMatch,
            format!("Hunk {hunk} of {path}: its `@@ {anchor}` line is not in the file."),
        ),
        HunkFailureKind::Ambiguous { lines: at } => Error::new(
            Reason::EditAmbiguousMatch,
            format!(
                "Hunk {hunk} of {path} matches at lines {}; add context lines or an `@@` line so it matches once.",
                lines(&at)
            ),
        )
        .with("lines", lines(&at)),
        HunkFailureKind::NotAtEnd { lines: at } => Error::new(
            Reason::EditNoMatch,
            format!("Hunk {hunk} of {path} must end the file, but matches only at lines {}.", lines(&at)),
        )
        .with("lines", lines(&at)),
        HunkFailureKind::LineOutOfRange { line, first, last } => Error::new(
            Reason::EditNoMatch,
            format!("Hunk {hunk} of {path} inserts at line {line}, outside lines {first}–{last} it may go."),
        ),
        HunkFailureKind::Unplaced => Error::new(
            Reason::InvalidArgument,
            format!("Hunk {hunk} of {path} only adds lines and says nowhere where; give it context lines."),
        ),
    };
    let next = match error.reason {
        Reason::EditAmbiguousMatch => {
            "Add context lines (or an `@@` line naming a line above it) to the hunk so it matches once."
        }
        _ => "Read the file again and write the hunk's context and removed lines exactly as they appear.",
    };
    error.with("path", path).with("hunk", hunk).next_action(next)
}
