//! `Edit` and `Diff`: guarded text edits and diffs between versions.

use agentvfs_proto::v1 as pb;

use super::idempotency::{self, Claim};
use super::{Front, Target, text_of};
use crate::auth::{Caller, Need};
use crate::diff;
use crate::edit::{self, EditFailure, EditOp, FailureKind};
use crate::error::{Error, Reason, Result};
use crate::store::{
    Actor, Entry, Hash, ScanOptions, WriteBody, WriteMode, WriteOp, WriteOutcome, unrepresentable, version_conflict,
};

/// Most edits in one request.
const MAX_EDITS: usize = 100;

/// Runs an edit (or previews it, with `dry_run`).
pub(super) fn edit(front: &Front, caller: &Caller, req: pb::EditRequest) -> Result<pb::EditResponse> {
    let edits = parse_edits(&req.edits)?;
    let need = if req.dry_run { Need::Read } else { Need::Write };
    let target = front.target(caller, &req.space, &req.path, &req.base, "path", need)?;
    // Dry runs never consume a key.
    let key = if req.dry_run { "" } else { req.idempotency_key.as_str() };
    let fingerprint = idempotency::fingerprint(key, &req);
    let space = target.space.id.to_string();
    idempotency::run(front, caller, &space, "Edit", key, fingerprint, |claim| {
        apply(front, caller, &req, target, &edits, claim)
    })
}

/// Computes an edit and saves it, leaving `claim`'s receipt.
fn apply(
    front: &Front,
    caller: &Caller,
    req: &pb::EditRequest,
    target: Target,
    edits: &[EditOp],
    claim: Option<&Claim<'_>>,
) -> Result<pb::EditResponse> {
    let entry = front.existing(&target, None)?;
    if entry.is_dir() {
        return Err(super::not_a_file(&target.path));
    }
    check_base(front, caller, &target, &entry, req.base_version)?;
    let (record, original) = text_of(front, &target, &entry, entry.version)?;
    let (edited, counts) = edit::apply(&original, edits).map_err(|f| failure(f, &target))?;
    // Written back in the file's encoding, its other bytes kept.
    let charset = record.charset();
    let bytes = if charset.is_utf8() {
        edited.clone().into_bytes()
    } else {
        let stored = front.store.content(record.hash)?;
        match edited == original {
            true => stored,
            false => charset
                .splice(&stored, &original, &edited)
                .map_err(|character| unrepresentable(&target.path, charset, character))?,
        }
    };
    let name = target.path.to_string();
    let preview =
        diff::unified(&original, &edited, &format!("{name}@v{}", entry.version), &format!("{name}@edited"), 3);
    let mut response = pb::EditResponse {
        changed: edited != original,
        version: entry.version,
        previous_version: entry.version,
        hash: Hash::of(&bytes).to_hex(),
        size: bytes.len() as u64,
        replacements: counts,
        diff: preview.text,
        dry_run: req.dry_run,
        node_id: entry.node.to_string(),
        revision: target.space.revision,
    };
    if req.dry_run || !response.changed {
        debug_assert_eq!(response.changed, record.hash != Hash::of(&bytes));
        let receipt = claim.map(|c| c.receipt(pb::EditResponse::clone));
        front.store.keep_receipt(receipt.as_ref(), &response)?;
        return Ok(response);
    }
    let template = response.clone();
    let outcome = front.store.write(WriteOp {
        space: target.space.id,
        path: target.path,
        body: WriteBody::Encoded { bytes, charset },
        mode: WriteMode::Overwrite,
        // The version the edits were computed against: a concurrent change
        // in between is a conflict, never silently overwritten.
        expected_version: Some(entry.version),
        executable: None,
        operation: "edit",
        actor: Actor {
            principal: caller.principal.clone(),
            tool_call: caller.tool_call.clone(),
            idempotency_key: super::non_empty(req.idempotency_key.clone()),
        },
        receipt: claim.map(|c| {
            c.receipt(move |outcome: &WriteOutcome| pb::EditResponse {
                version: outcome.version,
                revision: outcome.revision,
                ..template.clone()
            })
        }),
        session: super::session_mark(front, caller),
    })?;
    super::upsert_written(front, caller, entry.node, outcome.version);
    response.version = outcome.version;
    response.revision = outcome.revision;
    Ok(response)
}

/// `base_version` when given; otherwise the session's read-before-edit record.
pub(super) fn check_base(
    front: &Front,
    caller: &Caller,
    target: &Target,
    entry: &Entry,
    base: Option<u64>,
) -> Result<()> {
    let path = &target.path;
    if let Some(base) = base {
        if base != entry.version {
            let message = format!("{path} is at version {}, not the base version {base}.", entry.version);
            return Err(version_conflict(path, message, base, entry.version));
        }
        return Ok(());
    }
    let seen = match caller.session.as_deref() {
        Some(session) => front.sessions.seen(&front.store, session, entry.node)?,
        None => None,
    };
    match seen {
        None => Err(Error::new(
            Reason::ReadRequired,
            format!("Read {path} in this session (x-agentvfs-session) before editing it, or pass base_version."),
        )
        .with("path", path)),
        Some(read) if read != entry.version => Err(Error::new(
            Reason::FileModifiedSinceRead,
            format!(
                "{path} changed since this session read it: it read version {read}, the file is at {}.",
                entry.version
            ),
        )
        .with("path", path)
        .with("expectedVersion", read)
        .with("currentVersion", entry.version)
        .precondition("VERSION", path.to_string())),
        Some(_) => Ok(()),
    }
}

pub(super) fn parse_edits(edits: &[pb::TextEdit]) -> Result<Vec<EditOp>> {
    if edits.is_empty() {
        return Err(Error::invalid_argument("edits", "Give at least one edit."));
    }
    if edits.len() > MAX_EDITS {
        return Err(Error::new(Reason::InvalidArgument, format!("At most {MAX_EDITS} edits fit in one request."))
            .with("limit", MAX_EDITS)
            .field("edits"));
    }
    edits
        .iter()
        .enumerate()
        .map(|(i, edit)| match &edit.kind {
            Some(pb::text_edit::Kind::Replace(r)) => {
                let expected_matches = r.expected_matches.unwrap_or(1);
                if expected_matches == 0 {
                    return Err(Error::invalid_argument(
                        &format!("edits[{i}].replace.expected_matches"),
                        "expected_matches must be at least 1.",
                    ));
                }
                Ok(EditOp::Replace {
                    old_text: r.old_text.clone(),
                    new_text: r.new_text.clone(),
                    expected_matches,
                    replace_all: r.replace_all,
                })
            }
            Some(pb::text_edit::Kind::Append(a)) => Ok(EditOp::Append { text: a.text.clone() }),
            Some(pb::text_edit::Kind::Lines(l)) => Ok(EditOp::Lines {
                start_line: l.start_line,
                end_line: l.end_line,
                old_text: l.old_text.clone(),
                new_text: l.new_text.clone(),
            }),
            None => Err(Error::invalid_argument(&format!("edits[{i}]"), "Each edit needs replace, append or lines.")),
        })
        .collect()
}

pub(super) fn failure(failure: EditFailure, target: &Target) -> Error {
    let i = failure.index;
    let path = &target.path;
    let error = match failure.kind {
        FailureKind::EmptyOldText => {
            return Error::invalid_argument(&format!("edits[{i}].replace.old_text"), "old_text must not be empty.")
                .with("editIndex", i);
        }
        FailureKind::Noop => Error::new(Reason::EditNoop, format!("edits[{i}]: new_text is the same as old_text."))
            .field(format!("edits[{i}].replace.new_text")),
        FailureKind::NoMatch { near_miss } => {
            let mut message = format!("edits[{i}]: old_text was not found in {path}.");
            if let Some((line, difference)) = near_miss {
                message.push_str(&format!(
                    " Line {line} matches except for {}; copy the text exactly as read.",
                    difference.as_str()
                ));
            }
            let mut error = Error::new(Reason::EditNoMatch, message).with("path", path);
            if let Some((line, difference)) = near_miss {
                error = error.with("nearMissLine", line).with("nearMissDifference", difference.as_str());
            }
            error.field(format!("edits[{i}].replace.old_text"))
        }
        FailureKind::Ambiguous { expected, count, lines } => {
            let list = lines.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
            Error::new(
                Reason::EditAmbiguousMatch,
                format!("edits[{i}]: old_text matches {count} times in {path} (lines {list}), not {expected}."),
            )
            .with("path", path)
            .with("matches", count)
            .with("expectedMatches", expected)
            .with("lines", list)
            .field(format!("edits[{i}].replace.old_text"))
        }
        FailureKind::BadRange { start_line, end_line, line_count } => Error::new(
            Reason::InvalidArgument,
            format!(
                "edits[{i}]: lines {start_line}–{end_line} are not a range of {path}, which has {line_count} lines."
            ),
        )
        .with("lines", line_count)
        .field(format!("edits[{i}].lines.start_line")),
        FailureKind::LinesMismatch { start_line, end_line } => Error::new(
            Reason::EditNoMatch,
            format!("edits[{i}]: lines {start_line}–{end_line} of {path} differ from old_text; read them again."),
        )
        .with("path", path)
        .field(format!("edits[{i}].lines.old_text")),
    };
    error.with("editIndex", i)
}

/// `Diff` between two versions of a file, or two revisions of a subtree.
pub(super) fn diff(front: &Front, caller: &Caller, req: &pb::DiffRequest) -> Result<pb::DiffResponse> {
    let context = req.context.unwrap_or(3).min(100) as usize;
    let target = front.target(caller, &req.space, &req.path, &req.base, "path", Need::Read)?;
    if req.from_revision != 0 || req.to_revision != 0 {
        return subtree_diff(front, &target, req.from_revision, req.to_revision, context);
    }
    let entry = front.existing(&target, None)?;
    if entry.is_dir() {
        return Err(super::not_a_file(&target.path));
    }
    let pick = |v: u64| if v == 0 { entry.version } else { v };
    let (from, to) = (pick(req.from_version), pick(req.to_version));
    let (_, old) = text_of(front, &target, &entry, from)?;
    let (_, new) = text_of(front, &target, &entry, to)?;
    let name = target.path.to_string();
    let d = diff::unified(&old, &new, &format!("{name}@v{from}"), &format!("{name}@v{to}"), context);
    Ok(pb::DiffResponse {
        lines_added: d.added,
        lines_removed: d.removed,
        files: vec![pb::FileDiff {
            path: name,
            from_version: from,
            to_version: to,
            unified_diff: d.text,
            lines_added: d.added,
            lines_removed: d.removed,
            status: if from == to { "unchanged" } else { "modified" }.to_owned(),
        }],
    })
}

/// Files compared in one subtree diff at most.
const MAX_DIFF_FILES: usize = 1_000;

fn subtree_diff(front: &Front, target: &Target, from: u64, to: u64, context: usize) -> Result<pb::DiffResponse> {
    let space = &target.space;
    let to = if to == 0 { space.revision } else { to };
    for revision in [from, to] {
        crate::store::Store::check_revision(space, revision)?;
    }
    let files = |revision: u64| -> Result<Vec<(crate::path::SpacePath, Entry)>> {
        let only_files = |_: &crate::path::SpacePath, e: &Entry| !e.is_dir();
        let page = front.store.scan(
            space.id,
            &ScanOptions {
                root: &target.path,
                revision,
                recursive: true,
                after: None,
                from: None,
                limit: MAX_DIFF_FILES + 1,
                budget: usize::MAX,
                filter: &only_files,
            },
        )?;
        if page.entries.len() > MAX_DIFF_FILES {
            return Err(Error::new(
                Reason::TooLarge,
                format!("The subtree has more than {MAX_DIFF_FILES} files; diff a smaller folder."),
            )
            .with("limit", MAX_DIFF_FILES)
            .field("path"));
        }
        Ok(page.entries)
    };
    let (before, after) = (files(from)?, files(to)?);
    let mut before: std::collections::BTreeMap<_, _> = before.into_iter().collect();
    let mut out = pb::DiffResponse::default();
    let text = |entry: &Entry, path: &crate::path::SpacePath| -> Result<Option<String>> {
        if !entry.is_text {
            return Ok(None);
        }
        let t = Target { space: space.clone(), path: path.clone() };
        Ok(Some(text_of(front, &t, entry, entry.version)?.1))
    };
    let mut changes: Vec<(crate::path::SpacePath, Option<Entry>, Option<Entry>)> = Vec::new();
    for (path, new) in after {
        match before.remove(&path) {
            Some(old) if old.hash == new.hash => {}
            old => changes.push((path, old, Some(new))),
        }
    }
    changes.extend(before.into_iter().map(|(path, old)| (path, Some(old), None)));
    changes.sort_by(|a, b| a.0.cmp(&b.0));
    for (path, old, new) in changes {
        let old_text = match &old {
            Some(e) => text(e, &path)?,
            None => Some(String::new()),
        };
        let new_text = match &new {
            Some(e) => text(e, &path)?,
            None => Some(String::new()),
        };
        let status = match (&old, &new) {
            (None, _) => "added",
            (_, None) => "removed",
            _ => "modified",
        };
        let mut file = pb::FileDiff {
            path: path.to_string(),
            from_version: old.as_ref().map_or(0, |e| e.version),
            to_version: new.as_ref().map_or(0, |e| e.version),
            status: status.to_owned(),
            ..Default::default()
        };
        match (old_text, new_text) {
            (Some(a), Some(b)) => {
                let d = diff::unified(&a, &b, &format!("{path}@r{from}"), &format!("{path}@r{to}"), context);
                (file.unified_diff, file.lines_added, file.lines_removed) = (d.text, d.added, d.removed);
            }
            _ => file.status = "binary".to_owned(),
        }
        out.lines_added += file.lines_added;
        out.lines_removed += file.lines_removed;
        out.files.push(file);
    }
    Ok(out)
}
