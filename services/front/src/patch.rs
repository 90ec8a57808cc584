//! The patch engine: multi-file patches read from the two formats models
//! write, and their hunks applied to a file's text exactly.
//!
//! [`parse`] reads OpenAI's `apply_patch` envelope ([`Format::ApplyPatch`])
//! or a unified diff as `git diff` and `diff -u` print it
//! ([`Format::Unified`]) into one model, a [`Patch`] of [`FileChange`]s.
//! Paths come back as written (minus git's `a/` and `b/` prefixes); the
//! caller validates them. [`apply_hunks`] then applies one file's hunks:
//! each hunk's old lines must occur exactly, after the previous hunk; there is
//! no fuzz and no whitespace-insensitive matching, and a failure names the
//! hunk and the closest near-miss, in the terms of [`edit`](crate::edit).
//!
//! ```
//! use agentvfs_front::patch::{self, FileChange, Format};
//!
//! let text = "*** Begin Patch\n*** Update File: notes.md\n@@\n one\n-two\n+deux\n*** End Patch\n";
//! let parsed = patch::parse(text, Format::detect(text)).unwrap();
//! let FileChange::Update { path, hunks, .. } = &parsed.files[0] else { unreachable!() };
//! assert_eq!(path, "notes.md");
//! assert_eq!(patch::apply_hunks("one\ntwo\nthree\n", hunks).unwrap(), "one\ndeux\nthree\n");
//! ```
//!
//! Both parsers read the patch as lines split at `\n`, so a line's `\r`
//! belongs to its text: a diff of a CRLF file carries each line's `\r` and
//! applies exactly. A patch whose every line ends in CRLF (one pasted from a
//! Windows editor) is read as if written with LF, and then matches a CRLF
//! file the way `Edit` does: lines written with LF match CRLF lines, and the
//! lines it writes get CRLF.

mod apply;
mod apply_patch;
mod unified;

#[cfg(test)]
mod tests;

pub use apply::{HunkFailure, HunkFailureKind, apply_hunks};

/// A parsed patch: its file changes in the order the patch gives them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Patch {
    pub files: Vec<FileChange>,
}

/// One file's change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileChange {
    /// A new file with this content.
    Add { path: String, content: String },
    /// The file goes away; its content is not checked.
    Delete { path: String },
    /// The file's hunks apply in order; with `move_to`, the result moves
    /// there (a pure rename has no hunks).
    Update { path: String, move_to: Option<String>, hunks: Vec<Hunk> },
}

impl FileChange {
    /// The path the change reads from (for an add, the path it creates).
    pub fn path(&self) -> &str {
        match self {
            FileChange::Add { path, .. } | FileChange::Delete { path } | FileChange::Update { path, .. } => path,
        }
    }
}

/// One hunk of an update: `old` lines to find, `new` lines to put there.
///
/// Lines carry no terminator. Where the hunk goes is found from its old
/// lines, narrowed by `anchors`, preferred at `line`, or forced to the end
/// of the file by `end_of_file`. A hunk without old lines is an insertion:
/// it goes after its last anchor, at `line`, or at the end of the file, and
/// without any of these it cannot be placed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hunk {
    /// `apply_patch`'s `@@ TEXT` lines, in order: each must occur, compared
    /// without surrounding whitespace, after the previous hunk and the
    /// previous anchor; the hunk comes after the last of them.
    pub anchors: Vec<String>,
    /// The 1-based line of the original file where the old lines start (for
    /// an insertion, the line it goes before), as a unified diff states it.
    pub line: Option<u64>,
    /// Context and removed lines, in order.
    pub old: Vec<String>,
    /// Context and added lines, in order.
    pub new: Vec<String>,
    /// The old lines must end the file (`*** End of File`).
    pub end_of_file: bool,
    pub final_newline: FinalNewline,
}

/// What a hunk says about the newline at the end of the file, which only
/// matters when the hunk's old lines end the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinalNewline {
    /// Nothing (`apply_patch` cannot say): the last line the hunk writes
    /// ends with a newline exactly when the file's last line did.
    Keep,
    /// Whether each side's last line ends with a newline, when that line is
    /// the file's last: `false` where a unified diff says `\ No newline at
    /// end of file`. A `false` side makes the hunk end the file.
    Stated { old: bool, new: bool },
}

/// The two patch formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// OpenAI's `*** Begin Patch` … `*** End Patch` envelope.
    ApplyPatch,
    /// A unified diff, from `git diff` or `diff -u`, of one or more files.
    Unified,
}

impl Format {
    /// The format `text` is written in: `apply_patch` when its first
    /// non-blank line is `*** Begin Patch`, a unified diff otherwise.
    pub fn detect(text: &str) -> Format {
        let first = text.lines().find(|line| !line.trim().is_empty());
        if first.is_some_and(|line| line.trim() == apply_patch::BEGIN) { Format::ApplyPatch } else { Format::Unified }
    }
}

/// Why a patch could not be read: the 1-based line of the patch text and
/// what was wrong there.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("patch line {line}: {kind}")]
pub struct ParseError {
    pub line: usize,
    pub kind: ParseErrorKind,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseErrorKind {
    #[error("expected {expected}, found `{found}`")]
    Expected { expected: &'static str, found: String },
    #[error("the file header has no path")]
    EmptyPath,
    #[error("the hunk has no lines")]
    EmptyHunk,
    #[error("`*** Update File: {0}` has no hunks and no `*** Move to:`")]
    EmptyUpdate(String),
    #[error("malformed hunk header `{0}`; expected `@@ -START,COUNT +START,COUNT @@`")]
    BadHunkHeader(String),
    #[error("the hunk header says {old} old and {new} new lines, but the hunk has {old_found} and {new_found}")]
    CountMismatch { old: usize, new: usize, old_found: usize, new_found: usize },
    #[error("`\\ No newline at end of file` must follow the last line of its side of the hunk")]
    MisplacedNoNewline,
    #[error("the new file {0} has a hunk that removes lines")]
    AddRemovesLines(String),
    #[error("the deleted file {0} has a hunk that adds lines")]
    DeleteAddsLines(String),
    #[error("{0} is binary; only text patches apply")]
    Binary(String),
    #[error("malformed quoted path `{0}`")]
    BadQuotedPath(String),
    #[error("{0} are not supported")]
    Unsupported(&'static str),
    #[error("no file header (`diff --git` or `---`/`+++`) found")]
    NoFiles,
}

impl ParseError {
    fn new(line: usize, kind: ParseErrorKind) -> ParseError {
        ParseError { line, kind }
    }

    /// An error at the 1-based `line` whose text is `found`.
    fn expected(line: usize, expected: &'static str, found: &str) -> ParseError {
        ParseError::new(line, ParseErrorKind::Expected { expected, found: excerpt(found) })
    }
}

/// Reads `text` as a patch in `format`.
pub fn parse(text: &str, format: Format) -> Result<Patch, ParseError> {
    match format {
        Format::ApplyPatch => apply_patch::parse(text),
        Format::Unified => unified::parse(text),
    }
}

/// The lines of a patch, split at `\n`; a patch whose every line ends in
/// CRLF loses the `\r`s.
fn lines(text: &str) -> Vec<&str> {
    let crlf = text.matches("\r\n").count();
    let crlf_only = crlf > 0 && crlf == text.matches('\n').count();
    let body = text.strip_suffix('\n').unwrap_or(text);
    body.split('\n').map(|line| if crlf_only { line.strip_suffix('\r').unwrap_or(line) } else { line }).collect()
}

/// At most 80 characters of a patch line, for an error message.
fn excerpt(line: &str) -> String {
    match line.char_indices().nth(80) {
        Some((at, _)) => format!("{}…", &line[..at]),
        None => line.to_owned(),
    }
}
