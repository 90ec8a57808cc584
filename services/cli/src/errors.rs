//! How a failed command is reported: one `error:` line and one `next:` line
//! on stderr, and an exit status per class of failure, so that scripts and
//! agents can branch on the status without parsing text.

use std::collections::HashMap;
use std::io;

use tonic::Code;
use tonic_types::StatusExt as _;

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

    /// Writes the error to stderr: as text, or as one JSON object with `--json`.
    pub fn report(&self, json: bool) {
        if matches!(self, CliError::Failed(_)) {
            return;
        }
        let (reason, message, metadata) = self.parts();
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
            CliError::Status(status) => match status.get_details_error_info() {
                Some(info) => (info.reason, status.message().to_owned(), info.metadata),
                None => (code_name(status.code()).to_owned(), status.message().to_owned(), HashMap::new()),
            },
            CliError::Io(error) => ("IO".to_owned(), error.to_string(), HashMap::new()),
            CliError::Other(message) => ("ERROR".to_owned(), message.clone(), HashMap::new()),
            CliError::Failed(_) => ("FAILED".to_owned(), String::new(), HashMap::new()),
            CliError::Refused { reason, message, next, .. } => {
                ((*reason).to_owned(), message.clone(), HashMap::from([("nextAction".to_owned(), next.clone())]))
            }
        }
    }
}

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

/// The canonical gRPC name, used as the reason when the server sent no `ErrorInfo`
/// (for example when it could not be reached at all).
fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}
