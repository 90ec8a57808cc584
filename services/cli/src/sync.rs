//! `pull-folder` and `push-folder`: a remote folder checked out into a local
//! directory, edited there with any tool, and pushed back as new versions.
//!
//! `pull-folder SPACE:PATH DIR` creates `DIR` with the original bytes of every
//! file (binary included) and every folder (empty ones included), plus a
//! private journal, `DIR/.agentvfs-sync.json`: the origin (space ID, path,
//! node ID) and, per relative path, the node ID, kind, base version, size and
//! BLAKE3 hash the checkout started from. It never holds credentials.
//!
//! `push-folder DIR` compares the local tree with the journal and with the
//! remote folder and plans new versions of changed files (against their base
//! versions), new files and new folders. Remote content changes, moves and
//! renames, and new names that already exist remotely, stop the plan before
//! anything is applied. A local deletion keeps the remote file; a local
//! rename is an addition. The plan is only previewed unless `--apply` is given.
//!
//! Applying is a journaled sequence, not one transaction: after each step the
//! journal is rewritten atomically (temporary file, then rename). Every step
//! carries an idempotency key derived from a push ID kept in the journal, the
//! step's kind, relative path, base version and content hash, so a rerun after
//! an interruption sends the same keys and the server answers steps it already
//! applied from its receipts instead of applying them again.
//!
//! Names starting with `.agentvfs-sync` are reserved. Symbolic links and
//! other special files, names that are unsafe as paths, and names that
//! collide once case and Unicode normalization are ignored are refused on
//! both sides, so that a checkout means the same on every file system.
//! A checkout holds at most 10,000 entries (`--max-entries` lowers that).

use std::io::IsTerminal as _;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

mod journal;
mod local;
mod plan;
mod pull;
mod push;
pub(crate) mod remote;

pub use pull::{PullArgs, pull};
pub use push::{PushArgs, push};

/// The most entries (files and folders) one checkout may hold.
pub const MAX_ENTRIES: u64 = 10_000;

/// Parses `--max-entries`: 1 to [`MAX_ENTRIES`].
fn max_entries(value: &str) -> Result<u64, String> {
    let n: u64 = value.parse().map_err(|_| format!("{value:?} is not a number"))?;
    if n == 0 || n > MAX_ENTRIES {
        return Err(format!("must be between 1 and {MAX_ENTRIES}"));
    }
    Ok(n)
}

/// A progress bar on stderr when it is a terminal and the output is not
/// JSON; otherwise one that draws nothing.
fn progress(len: u64, label: &'static str, json: bool) -> ProgressBar {
    let target = if !json && std::io::stderr().is_terminal() {
        ProgressDrawTarget::stderr()
    } else {
        ProgressDrawTarget::hidden()
    };
    let bar = ProgressBar::with_draw_target(Some(len), target).with_prefix(label);
    if let Ok(style) = ProgressStyle::with_template("{prefix:>8} [{bar:30}] {pos}/{len} {wide_msg}") {
        bar.set_style(style.progress_chars("=> "));
    }
    bar
}
