//! `push-folder DIR [--apply]`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use agentvfs_proto::v1 as pb;

use super::journal::{self, Journal, Kind, State};
use super::plan::{self, Change, Plan, Step, Whereabouts};
use super::{MAX_ENTRIES, local, progress, remote};
use crate::commands::Context;
use crate::errors::{CliError, EXIT_CONFLICT};
use crate::output::{line, note};

#[derive(Debug, clap::Args)]
pub struct PushArgs {
    /// A directory made by `pull-folder`.
    dir: PathBuf,
    /// Apply the plan; without it the plan is only previewed.
    #[arg(long)]
    apply: bool,
    /// Refuse a local tree with more files and folders than this (at most 10,000).
    #[arg(long, value_name = "N", default_value_t = MAX_ENTRIES, value_parser = super::max_entries)]
    max_entries: u64,
}

pub async fn push(ctx: &mut Context, args: PushArgs) -> Result<(), CliError> {
    let dir = &args.dir;
    let mut journal = Journal::load(dir)?;
    if journal.state != State::Ready {
        return Err(CliError::refused(
            "PULL_INCOMPLETE",
            format!("the pull into {} did not finish", dir.display()),
            "finish it with `agentvfs pull-folder SPACE:PATH DIR --resume`, then push",
            EXIT_CONFLICT,
        ));
    }
    let local = local::walk(dir, args.max_entries)?;
    let origin = journal.origin.clone();
    let request = pb::ResolveRequest {
        space: origin.space_id.clone(),
        reference: format!("agentvfs:item:{}", origin.node_id),
        ..Default::default()
    };
    let folder = ctx.client.fs.resolve(request).await?.into_inner();
    if folder.path != origin.path {
        return Err(CliError::refused(
            "PUSH_CONFLICT",
            format!("the folder {} was moved or renamed remotely to {}", origin.path, folder.path),
            "pull the folder into a new directory, carry the local edits over, and push from there",
            EXIT_CONFLICT,
        ));
    }
    let listed = remote::list(&mut ctx.client, &origin.space_id, &origin.path, MAX_ENTRIES).await?;
    let away = whereabouts(ctx, &journal, &listed).await?;
    let plan = plan::build(&journal, &local, &listed, &away);

    let json = ctx.out.is_json();
    if !args.apply || !plan.conflicts.is_empty() {
        for step in &plan.steps {
            line(&step_line(step, None, json))?;
        }
        for path in &plan.kept {
            line(&kept_line(path, json))?;
        }
        for conflict in &plan.conflicts {
            line(&conflict_line(conflict, json))?;
        }
    }
    if !plan.conflicts.is_empty() {
        let n = plan.conflicts.len();
        return Err(CliError::refused(
            "PUSH_CONFLICT",
            format!("the push of {} has {n} conflict{}; nothing was applied", dir.display(), plural(n)),
            "pull the folder into a new directory, carry the local edits over, and push from there",
            EXIT_CONFLICT,
        ));
    }
    if !args.apply {
        return summary(&plan, false, json);
    }
    apply(ctx, dir, &mut journal, &local, &plan).await
}

/// Where the journal entries that are not at their path remotely went.
async fn whereabouts(
    ctx: &mut Context,
    journal: &Journal,
    listed: &BTreeMap<String, remote::Entry>,
) -> Result<BTreeMap<String, Whereabouts>, CliError> {
    let by_node: BTreeMap<&str, &str> =
        listed.iter().map(|(path, entry)| (entry.node_id.as_str(), path.as_str())).collect();
    let mut away = BTreeMap::new();
    for (path, entry) in &journal.entries {
        if listed.get(path).is_some_and(|remote| remote.node_id == entry.node_id) {
            continue;
        }
        if let Some(now) = by_node.get(entry.node_id.as_str()) {
            away.insert(path.clone(), Whereabouts::Moved(remote::path(&journal.origin.path, now)));
            continue;
        }
        let request = pb::ResolveRequest {
            space: journal.origin.space_id.clone(),
            reference: format!("agentvfs:item:{}", entry.node_id),
            ..Default::default()
        };
        let found = match ctx.client.fs.resolve(request).await {
            Ok(response) => Whereabouts::Moved(response.into_inner().path),
            Err(status) if status.code() == tonic::Code::NotFound => Whereabouts::Gone,
            Err(status) => return Err(status.into()),
        };
        away.insert(path.clone(), found);
    }
    Ok(away)
}

/// Applies the steps in order, saving the journal after each one.
async fn apply(
    ctx: &mut Context,
    dir: &Path,
    journal: &mut Journal,
    local: &local::Tree,
    plan: &Plan,
) -> Result<(), CliError> {
    // A push ID already in the journal belongs to an interrupted push: its
    // steps get their old keys back, and the server replays what it applied.
    let resumed = journal.push_id.is_some();
    let push_id = journal.push_id.get_or_insert_with(|| ulid::Ulid::generate().to_string()).clone();
    journal.save(dir)?;
    let json = ctx.out.is_json();
    let bar = progress(plan.steps.len() as u64, "push", json);
    for (done, step) in plan.steps.iter().enumerate() {
        bar.set_message(step.path.clone());
        let result = apply_step(ctx, journal, local, step, &push_id, resumed).await;
        let (entry, version) = match result {
            Ok(applied) => applied,
            Err(error) => {
                bar.finish_and_clear();
                note(&format!(
                    "{done} of {} steps applied and recorded; run push-folder again to continue",
                    plan.steps.len()
                ));
                return Err(error);
            }
        };
        journal.entries.insert(step.path.clone(), entry);
        journal.save(dir)?;
        bar.suspend(|| line(&step_line(step, Some(version), json)))?;
        bar.inc(1);
    }
    bar.finish_and_clear();
    journal.push_id = None;
    journal.save(dir)?;
    summary(plan, true, json)
}

/// Applies one step; returns its journal entry and the version it made.
async fn apply_step(
    ctx: &mut Context,
    journal: &Journal,
    local: &local::Tree,
    step: &Step,
    push_id: &str,
    resumed: bool,
) -> Result<(journal::Entry, u64), CliError> {
    let space = journal.origin.space_id.clone();
    let path = remote::path(&journal.origin.path, &step.path);
    let key = idempotency_key(push_id, step);
    let recorded = |entry: &remote::Entry| {
        let kept = journal::Entry {
            kind: entry.kind,
            node_id: entry.node_id.clone(),
            version: entry.version,
            hash: entry.hash.clone(),
            size: entry.size,
        };
        (kept, entry.version)
    };
    let expected = match step.change {
        Change::Mkdir => {
            if let Some(entry) = &step.already {
                return Ok(recorded(entry));
            }
            let node_id = remote::mkdir(&mut ctx.client, &space, &path, &key).await?;
            let entry = journal::Entry { kind: Kind::Directory, node_id, version: 0, hash: String::new(), size: 0 };
            return Ok((entry, 0));
        }
        Change::Update { base } => base,
        Change::Create => 0,
    };
    // Bytes already on the server under a fresh push ID cannot have a receipt.
    if let (Some(entry), false) = (&step.already, resumed) {
        return Ok(recorded(entry));
    }
    let file = local.files.get(&step.path).ok_or_else(|| CliError::Other(format!("{} vanished", step.path)))?;
    let bytes = std::fs::read(&file.path)?;
    if blake3::hash(&bytes).to_hex().as_str() != step.hash {
        return Err(CliError::refused(
            "LOCAL_CHANGED",
            format!("{} changed while it was being pushed", file.path.display()),
            "run push-folder again to push its current content",
            EXIT_CONFLICT,
        ));
    }
    match (remote::upload(&mut ctx.client, &space, &path, expected, bytes, &key).await, &step.already) {
        (Ok(response), _) => {
            let entry = journal::Entry {
                kind: Kind::File,
                node_id: response.node_id,
                version: response.version,
                hash: response.hash,
                size: response.size,
            };
            Ok((entry, response.version))
        }
        // No receipt for this key: the bytes came from another writer (or an
        // earlier push); they are what this step wanted, so record them.
        (Err(CliError::Status(status)), Some(entry))
            if matches!(
                status.code(),
                tonic::Code::FailedPrecondition | tonic::Code::AlreadyExists | tonic::Code::Aborted
            ) =>
        {
            Ok(recorded(entry))
        }
        (Err(error), _) => Err(error),
    }
}

/// The same step of the same push always gets the same key; a new push, a
/// new base version or new content gets another.
fn idempotency_key(push_id: &str, step: &Step) -> String {
    let (kind, base) = match step.change {
        Change::Mkdir => ("mkdir", 0),
        Change::Update { base } => ("update", base),
        Change::Create => ("create", 0),
    };
    let mut hasher = blake3::Hasher::new();
    for part in [kind, &step.path, &base.to_string(), &step.hash] {
        hasher.update(&(part.len() as u64).to_le_bytes());
        hasher.update(part.as_bytes());
    }
    format!("push-folder:{push_id}:{}", &hasher.finalize().to_hex()[..32])
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// One planned step, or with `version` one applied step.
fn step_line(step: &Step, version: Option<u64>, json: bool) -> String {
    let (action, base) = match step.change {
        Change::Mkdir => ("mkdir", None),
        Change::Update { base } => ("update", Some(base)),
        Change::Create => ("create", None),
    };
    if json {
        let mut value = serde_json::json!({ "action": action, "path": step.path });
        if !matches!(step.change, Change::Mkdir) {
            value["size"] = step.size.into();
            value["hash"] = step.hash.clone().into();
        }
        if let Some(base) = base {
            value["baseVersion"] = base.into();
        }
        if let Some(entry) = &step.already {
            value["alreadyRemote"] = true.into();
            if entry.kind == Kind::File {
                value["remoteVersion"] = entry.version.into();
            }
        }
        if let Some(version) = version {
            value["applied"] = true.into();
            if !matches!(step.change, Change::Mkdir) {
                value["version"] = version.into();
            }
        }
        return value.to_string();
    }
    let path = if matches!(step.change, Change::Mkdir) { format!("{}/", step.path) } else { step.path.clone() };
    let detail = match (&step.already, base, version) {
        (Some(entry), _, _) if entry.kind == Kind::File => format!("already v{} on the server", entry.version),
        (Some(_), _, _) => "already on the server".to_owned(),
        (None, Some(base), None) => format!("new version of v{base}, {} bytes", step.size),
        (None, Some(base), Some(version)) => format!("v{base} -> v{version}, {} bytes", step.size),
        (None, None, _) if matches!(step.change, Change::Mkdir) => "new folder".to_owned(),
        (None, None, None) => format!("new file, {} bytes", step.size),
        (None, None, Some(version)) => format!("new file v{version}, {} bytes", step.size),
    };
    let label = if version.is_some() { "applied" } else { "plan" };
    format!("{label:<8} {action:<7} {path} ({detail})")
}

fn kept_line(path: &str, json: bool) -> String {
    if json {
        return serde_json::json!({ "action": "keep", "path": path }).to_string();
    }
    format!("{:<8} {:<7} {path} (deleted locally; the remote copy stays)", "plan", "keep")
}

fn conflict_line(conflict: &plan::Conflict, json: bool) -> String {
    if json {
        return serde_json::json!({ "action": "conflict", "path": conflict.path, "reason": conflict.reason })
            .to_string();
    }
    format!("{:<8} {}: {}", "CONFLICT", conflict.path, conflict.reason)
}

fn summary(plan: &Plan, applied: bool, json: bool) -> Result<(), CliError> {
    let (changes, kept) = (plan.steps.len(), plan.kept.len());
    if json {
        let value = serde_json::json!({ "summary": { "changes": changes, "kept": kept, "applied": applied } });
        return line(&value.to_string());
    }
    let s = plural(changes);
    if applied {
        line(&format!("applied {changes} change{s}; {kept} kept remotely"))
    } else {
        line(&format!("preview: {changes} change{s}, {kept} kept remotely; nothing applied (apply with --apply)"))
    }
}
