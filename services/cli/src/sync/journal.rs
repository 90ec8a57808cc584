//! The journal of a checkout, `DIR/.agentvfs-sync.json`: where the folder
//! came from and the state each entry was pulled or last pushed at.
//!
//! It is replaced atomically (a temporary file, flushed, then renamed over
//! it), so an interruption leaves either the old or the new journal, and is
//! readable by its owner only.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::local;
use crate::errors::{CliError, EXIT_USAGE};

/// The journal's name in the checkout's root.
pub const JOURNAL: &str = ".agentvfs-sync.json";
/// Where a new journal is written before it replaces the old one.
pub const JOURNAL_TMP: &str = ".agentvfs-sync.json.tmp";
const FORMAT: u32 = 1;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Journal {
    pub format: u32,
    pub origin: Origin,
    pub state: State,
    /// Set while a push is being applied; part of every step's idempotency key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub push_id: Option<String>,
    /// By path relative to the origin folder, `/`-separated, in NFC.
    pub entries: BTreeMap<String, Entry>,
}

/// The remote folder a checkout was pulled from.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Origin {
    pub space_id: String,
    /// The space as it was named on the command line, for messages.
    pub space: String,
    pub path: String,
    pub node_id: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    /// A pull started and has not finished; `pull-folder --resume` finishes it.
    Pulling,
    /// Every entry is present locally.
    Ready,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    File,
    Directory,
}

/// The base state of one entry: what the local copy was pulled or pushed as.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Entry {
    pub kind: Kind,
    pub node_id: String,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub version: u64,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub hash: String,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub size: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Journal {
    pub fn new(origin: Origin, entries: BTreeMap<String, Entry>) -> Journal {
        Journal { format: FORMAT, origin, state: State::Pulling, push_id: None, entries }
    }

    /// Reads and checks the journal of `dir`: every path in it must be a
    /// safe relative path, so that a tampered journal cannot point outside.
    pub fn load(dir: &Path) -> Result<Journal, CliError> {
        let path = dir.join(JOURNAL);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                return Err(CliError::refused(
                    "NOT_A_CHECKOUT",
                    format!("{} has no {JOURNAL}", dir.display()),
                    "give a directory made by `agentvfs pull-folder`",
                    EXIT_USAGE,
                ));
            }
            Err(error) => return Err(error.into()),
        };
        let bad = |message: String| {
            CliError::refused(
                "BAD_JOURNAL",
                format!("{}: {message}", path.display()),
                "pull the folder again into a new directory",
                EXIT_USAGE,
            )
        };
        let journal: Journal = serde_json::from_str(&text).map_err(|error| bad(error.to_string()))?;
        if journal.format != FORMAT {
            return Err(bad(format!("unknown journal format {}", journal.format)));
        }
        for name in journal.entries.keys() {
            local::check_relative(name).map_err(|problem| bad(format!("entry {name:?}: {problem}")))?;
        }
        local::check_collisions(journal.entries.keys().map(String::as_str))
            .map_err(|(a, b)| bad(format!("entries {a:?} and {b:?} collide")))?;
        Ok(journal)
    }

    /// Replaces the journal of `dir` atomically.
    pub fn save(&self, dir: &Path) -> Result<(), CliError> {
        let text = serde_json::to_vec_pretty(self)
            .map_err(|error| CliError::Other(format!("cannot encode the journal: {error}")))?;
        let tmp = dir.join(JOURNAL_TMP);
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create(true).truncate(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let mut file = options.open(&tmp)?;
        file.write_all(&text)?;
        file.write_all(b"\n")?;
        file.sync_all()?;
        drop(file);
        std::fs::rename(&tmp, dir.join(JOURNAL))?;
        Ok(())
    }
}
