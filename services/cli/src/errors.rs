//! How a failed command is reported: one `error:` line and one `next:` line
//! on stderr, and an exit status per class of failure, so that scripts and
//! agents can branch on the status without parsing text.
//!
//! The front's next actions speak gRPC: request fields (`base_version`),
//! methods (`List`) and metadata. [`NEXT_ACTIONS`] says the same in this
//! command line's words (`--version`, `agentvfs ls`), so that the `next:`
//! line names what a person can type.

use std::collections::HashMap;
use std::io;

use tonic::Code;

pub use agentvfs_mcp::{NextActions, spell_next_action};

/// Invalid arguments or usage (also what clap exits with on a bad command line).
pub const EXIT_USAGE: u8 = 2;
pub const EXIT_NOT_FOUND: u8 = 3;
/// The request conflicts with the current state: retrying unchanged will not help.
pub const EXIT_CONFLICT: u8 = 4;
pub const EXIT_DENIED: u8 = 5;
/// Worth retrying later: quota, rate limit, overload or an unreachable service.
pub const EXIT_RETRYABLE: u8 = 6;
pub const EXIT_OTHER: u8 = 1;

#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// A bad command line or input file, found before anything was sent.
    #[error("{0}")]
    Usage(String),
    #[error("{}", .0.message())]
    Status(tonic::Status),
    #[error("{0}")]
    Io(#[from] io::Error),
    #[error("{0}")]
    Other(String),
    /// A check made on this side refused the command (for example an unsafe
    /// local tree or a conflicting folder push), with its own reason and next step.
    #[error("{message}")]
    Refused { reason: &'static str, message: String, next: String, exit: u8 },
    /// Already reported in detail (for example the failed reads of `read-many`); only the status remains.
    #[error("failed")]
    Failed(u8),
}

impl From<tonic::Status> for CliError {
    fn from(status: tonic::Status) -> Self {
        CliError::Status(status)
    }
}

impl CliError {
    /// A refusal with a reason, a message, what to do next and an exit status.
    pub fn refused(reason: &'static str, message: impl Into<String>, next: impl Into<String>, exit: u8) -> CliError {
        CliError::Refused { reason, message: message.into(), next: next.into(), exit }
    }

    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Usage(_) => EXIT_USAGE,
            CliError::Status(status) => exit_code_for(status.code()),
            CliError::Io(_) | CliError::Other(_) => EXIT_OTHER,
            CliError::Failed(code) => *code,
            CliError::Refused { exit, .. } => *exit,
        }
    }

    /// Writes the error of `command` to stderr: as text, or as one JSON
    /// object with `--json`.
    pub fn report(&self, json: bool, command: &str) {
        if matches!(self, CliError::Failed(_)) {
            return;
        }
        let (reason, message, mut metadata) = self.parts();
        if let Some(next) = spell_next_action(NEXT_ACTIONS, &reason, command, &metadata) {
            metadata.insert("nextAction".to_owned(), next);
        }
        let next = metadata.get("nextAction").cloned().unwrap_or_default();
        if json {
            let value = serde_json::json!({
                "error": { "reason": reason, "message": message, "exitCode": self.exit_code(), "metadata": metadata }
            });
            eprintln!("{value}");
            return;
        }
        eprintln!("error: {reason}: {message}");
        if !next.is_empty() {
            eprintln!("next: {next}");
        }
    }

    /// The stable reason, the message and the `ErrorInfo` metadata (with
    /// `nextAction` and `retryable` when the front sent them).
    pub fn parts(&self) -> (String, String, HashMap<String, String>) {
        match self {
            CliError::Usage(message) => ("USAGE".to_owned(), message.clone(), HashMap::new()),
            CliError::Status(status) => agentvfs_mcp::status_parts(status),
            CliError::Io(error) => ("IO".to_owned(), error.to_string(), HashMap::new()),
            CliError::Other(message) => ("ERROR".to_owned(), message.clone(), HashMap::new()),
            CliError::Failed(_) => ("FAILED".to_owned(), String::new(), HashMap::new()),
            CliError::Refused { reason, message, next, .. } => {
                ((*reason).to_owned(), message.clone(), HashMap::from([("nextAction".to_owned(), next.clone())]))
            }
        }
    }
}

/// The next action of each reason whose text from the front names an RPC
/// field, method or metadata, as typed on this command line. Reasons not
/// listed keep the front's text.
pub const NEXT_ACTIONS: &NextActions = &[
    (
        "READ_REQUIRED",
        "edit",
        "Run `agentvfs read {path}` first with the same --session (or AGENTVFS_SESSION), \
         or give --version N: the version the edits were written against.",
    ),
    (
        "READ_REQUIRED",
        "",
        "Run `agentvfs read {path}` first with the same --session (or AGENTVFS_SESSION), \
         or give the action a base_version.",
    ),
    (
        "VERSION_CONFLICT",
        "edit",
        "Read the file again (`agentvfs read {path}`), then redo the edit against it with --version {currentVersion}.",
    ),
    (
        "VERSION_CONFLICT",
        "write",
        "Read the file again (`agentvfs read {path}`), then write again with --expected-version {currentVersion}.",
    ),
    (
        "VERSION_CONFLICT",
        "",
        "Read the file again (`agentvfs read {path}`), then redo the change against version {currentVersion}.",
    ),
    (
        "FILE_MODIFIED_SINCE_READ",
        "edit",
        "Read the file again (`agentvfs read {path}`) in the same --session, then redo the edit against it \
         (or give --version {currentVersion}).",
    ),
    (
        "EDIT_NO_MATCH",
        "edit",
        "Read the file again (`agentvfs read`) and copy old_text in the edits file exactly as it appears.",
    ),
    (
        "EDIT_AMBIGUOUS_MATCH",
        "edit",
        "Add surrounding context to old_text in the edits file so it matches once, or set \"replace_all\": true.",
    ),
    (
        "EDIT_NO_MATCH",
        "patch",
        "Read {path} again (`agentvfs read {path}`) and write hunk {hunk} of the patch with its lines exactly as \
         they appear.",
    ),
    (
        "EDIT_AMBIGUOUS_MATCH",
        "patch",
        "Add context lines (or an @@ line naming a line above it) to hunk {hunk} of {path} in the patch so it \
         matches once.",
    ),
    (
        "INVALID_PATTERN",
        "grep",
        "Fix the pattern at the reported position, or add -F (--fixed-strings) to search for it literally.",
    ),
    (
        "LEASE_HELD",
        "",
        "{holder} leased {path}: wait for it to expire or be released (`agentvfs lease list`), or, if the lease is \
         yours, pass --lease ID (or AGENTVFS_LEASE).",
    ),
    ("INVALID_ARGUMENT", "", "Fix the argument the message names and run the command again."),
    ("TOO_LARGE", "", "Fix the argument the message names and run the command again."),
    ("CURSOR_INVALID", "", "Run the command again without --page-token, with the same arguments on every page."),
    ("SNAPSHOT_EXPIRED", "", "Run the command again without --page-token; the pinned revision was compacted away."),
    (
        "NOT_FOUND",
        "",
        "Check the path with `agentvfs ls` or `agentvfs find`; it does not exist or is not visible to you.",
    ),
    ("NOT_A_FILE", "", "Use `agentvfs ls` for directories; this command needs a file."),
    (
        "BINARY_CONTENT",
        "",
        "Text commands cannot read this file; `agentvfs pull-folder` copies its folder with the raw bytes.",
    ),
    (
        "NOT_UTF8",
        "",
        "Text commands cannot read this file; `agentvfs pull-folder` copies its folder with the raw bytes.",
    ),
    (
        "UNREPRESENTABLE_TEXT",
        "",
        "Leave out the named character, or convert the file with `agentvfs write PATH --encoding utf-8`.",
    ),
    (
        "FILE_TOO_LARGE",
        "",
        "Split the content into smaller files; `agentvfs pull-folder` copies a folder with every file's bytes.",
    ),
    ("IDEMPOTENCY_KEY_REUSED", "", "Give a new --idempotency-key for a different change."),
    ("IDEMPOTENCY_REQUEST_IN_PROGRESS", "", "Run the same command again shortly, with the same --idempotency-key."),
    ("UNAUTHENTICATED", "", "Give a valid token with --token (or AGENTVFS_TOKEN)."),
    ("RATE_LIMITED", "", "Wait a moment and run the command again (exit status 6: worth retrying)."),
    (
        "OVERLOADED",
        "",
        "Wait a moment and run the command again (exit status 6: worth retrying); narrow a grep with a path, --glob or --type.",
    ),
];

/// The exit status of a gRPC status code (also used for `ReadMany` outcomes).
pub fn exit_code_for(code: Code) -> u8 {
    match code {
        Code::InvalidArgument | Code::OutOfRange => EXIT_USAGE,
        Code::NotFound => EXIT_NOT_FOUND,
        Code::FailedPrecondition | Code::AlreadyExists | Code::Aborted => EXIT_CONFLICT,
        Code::PermissionDenied | Code::Unauthenticated => EXIT_DENIED,
        Code::ResourceExhausted | Code::Unavailable => EXIT_RETRYABLE,
        _ => EXIT_OTHER,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn metadata(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn next_actions_are_spelled_per_command_with_metadata_filled_in() {
        let conflict = metadata(&[("path", "/a.md"), ("currentVersion", "3")]);
        let edit = spell_next_action(NEXT_ACTIONS, "VERSION_CONFLICT", "edit", &conflict).unwrap();
        assert!(edit.contains("--version 3") && edit.contains("agentvfs read /a.md"), "{edit}");
        let write = spell_next_action(NEXT_ACTIONS, "VERSION_CONFLICT", "write", &conflict).unwrap();
        assert!(write.contains("--expected-version 3"), "{write}");
        let other = spell_next_action(NEXT_ACTIONS, "VERSION_CONFLICT", "batch", &conflict).unwrap();
        assert!(other.contains("version 3"), "{other}");
        // A row whose metadata is missing leaves the front's text in place.
        assert_eq!(spell_next_action(NEXT_ACTIONS, "VERSION_CONFLICT", "edit", &HashMap::new()), None);
        assert_eq!(spell_next_action(NEXT_ACTIONS, "STORAGE_FULL", "write", &conflict), None);
    }

    /// No text of the table names a request field where the command line has a flag.
    #[test]
    fn no_next_action_names_an_rpc_field_that_is_a_flag() {
        for (reason, command, text) in NEXT_ACTIONS {
            for field in ["base_version", "expected_version", "page_token", "idempotency_key", "fixed_strings"] {
                let allowed = field == "base_version" && command.is_empty() && *reason == "READ_REQUIRED";
                assert!(allowed || !text.contains(field), "{reason}/{command}: {text}");
            }
        }
    }
}
