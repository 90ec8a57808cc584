//! What a push would do: the local tree compared with the journal (what was
//! pulled) and with the remote folder (what is there now).

use std::collections::BTreeMap;

use super::journal::{Journal, Kind};
use super::local::Tree;
use super::remote;

/// One change to make on the server.
#[derive(Debug, Clone)]
pub enum Change {
    Mkdir,
    /// A new version of a pulled file, written against its base version.
    Update {
        base: u64,
    },
    Create,
}

#[derive(Debug, Clone)]
pub struct Step {
    /// Relative to the checkout root.
    pub path: String,
    pub change: Change,
    pub size: u64,
    pub hash: String,
    /// The server already has exactly this there: a step whose answer was
    /// lost in an interrupted push, or the same bytes written by someone else.
    /// Applying it only records it (replaying its key when the push is still open).
    pub already: Option<remote::Entry>,
}

#[derive(Debug, Clone)]
pub struct Conflict {
    pub path: String,
    pub reason: String,
}

#[derive(Debug, Default)]
pub struct Plan {
    /// Folders first (parents before children), then files, each by path.
    pub steps: Vec<Step>,
    /// Journal entries deleted locally: their remote copies stay.
    pub kept: Vec<String>,
    pub conflicts: Vec<Conflict>,
}

/// Where a journal entry's node is now, when not at its journal path.
#[derive(Debug, Clone)]
pub enum Whereabouts {
    /// At another path (remote, absolute).
    Moved(String),
    /// Deleted or out of reach.
    Gone,
}

/// Builds the plan. `away` has the journal entries whose node is no longer
/// at their path remotely.
pub fn build(
    journal: &Journal,
    local: &Tree,
    remote: &BTreeMap<String, remote::Entry>,
    away: &BTreeMap<String, Whereabouts>,
) -> Plan {
    let mut plan = Plan::default();
    let conflict = |path: &str, reason: String| Conflict { path: path.to_owned(), reason };
    for (path, whereabouts) in away {
        if let Whereabouts::Moved(to) = whereabouts {
            plan.conflicts.push(conflict(path, format!("moved or renamed remotely to {to}")));
        }
    }
    for path in &local.dirs {
        let pulled = journal.entries.get(path);
        if pulled.is_some_and(|entry| entry.kind == Kind::Directory) {
            continue;
        }
        let step = Step { path: path.clone(), change: Change::Mkdir, size: 0, hash: String::new(), already: None };
        match remote.get(path) {
            None => plan.steps.push(step),
            Some(entry) if entry.kind == Kind::Directory => {
                plan.steps.push(Step { already: Some(entry.clone()), ..step });
            }
            Some(_) => plan.conflicts.push(conflict(path, "a file with this name exists remotely".to_owned())),
        }
    }
    for (path, file) in &local.files {
        let new = Step {
            path: path.clone(),
            change: Change::Create,
            size: file.size,
            hash: file.hash.clone(),
            already: None,
        };
        let pulled = journal.entries.get(path).filter(|entry| entry.kind == Kind::File);
        let Some(pulled) = pulled else {
            match remote.get(path) {
                None => plan.steps.push(new),
                Some(entry) if entry.kind == Kind::File && entry.hash == file.hash => {
                    plan.steps.push(Step { already: Some(entry.clone()), ..new });
                }
                Some(entry) if entry.kind == Kind::File => plan.conflicts.push(conflict(
                    path,
                    format!("a different file exists remotely (v{}); not overwritten", entry.version),
                )),
                Some(_) => plan.conflicts.push(conflict(path, "a folder with this name exists remotely".to_owned())),
            }
            continue;
        };
        if file.hash == pulled.hash {
            continue;
        }
        let update = Step { change: Change::Update { base: pulled.version }, ..new };
        match (away.get(path), remote.get(path)) {
            (Some(Whereabouts::Moved(_)), _) => {}
            (Some(Whereabouts::Gone), Some(_)) => {
                plan.conflicts.push(conflict(path, "replaced remotely by another file or folder".to_owned()));
            }
            (Some(Whereabouts::Gone), None) | (None, None) => {
                plan.conflicts.push(conflict(path, "deleted remotely".to_owned()));
            }
            (None, Some(entry)) if entry.version == pulled.version => plan.steps.push(update),
            (None, Some(entry)) if entry.hash == file.hash => {
                plan.steps.push(Step { already: Some(entry.clone()), ..update });
            }
            (None, Some(entry)) => plan
                .conflicts
                .push(conflict(path, format!("changed remotely (base v{}, now v{})", pulled.version, entry.version))),
        }
    }
    for (path, entry) in &journal.entries {
        let present = match entry.kind {
            Kind::File => local.files.contains_key(path),
            Kind::Directory => local.dirs.contains(path),
        };
        if !present && !matches!(away.get(path), Some(Whereabouts::Moved(_))) {
            plan.kept.push(path.clone());
        }
    }
    plan.steps.sort_by(|a, b| {
        let folder = |step: &Step| !matches!(step.change, Change::Mkdir);
        (folder(a), &a.path).cmp(&(folder(b), &b.path))
    });
    plan.conflicts.sort_by(|a, b| a.path.cmp(&b.path));
    plan
}
