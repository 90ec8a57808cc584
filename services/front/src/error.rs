//! The front's one error type and its one mapping to `tonic::Status`.
//!
//! Every error carries a stable [`Reason`] (SPEC §6), a plain sentence an
//! agent can act on, and structured metadata. [`Error::into_status`] turns it
//! into a gRPC status with exactly one `google.rpc.ErrorInfo` (domain
//! `agentvfs`, metadata with `retryable` and `nextAction`), plus `BadRequest`,
//! `PreconditionFailure`, `QuotaFailure` and `RetryInfo` where they apply.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::time::Duration;

use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

/// Declares [`Reason`] from one table of variants and their `ErrorInfo`
/// reason strings, so that naming and parsing can never disagree.
macro_rules! reasons {
    ($($variant:ident => $name:literal,)*) => {
        /// The closed set of error reasons clients branch on.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Reason {
            $($variant,)*
        }

        impl Reason {
            /// Every reason, in table order.
            pub const ALL: &[Reason] = &[$(Reason::$variant,)*];

            /// The `ErrorInfo.reason` string.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Reason::$variant => $name,)*
                }
            }

            /// The reason an `ErrorInfo.reason` string names, if it names one
            /// (a worker's error, read back by the front).
            pub fn parse(name: &str) -> Option<Reason> {
                match name {
                    $($name => Some(Reason::$variant),)*
                    _ => None,
                }
            }
        }
    };
}

reasons! {
    InvalidArgument => "INVALID_ARGUMENT",
    InvalidPath => "INVALID_PATH",
    PathTraversal => "PATH_TRAVERSAL",
    InvalidPattern => "INVALID_PATTERN",
    CursorInvalid => "CURSOR_INVALID",
    AmbiguousReference => "AMBIGUOUS_REFERENCE",
    TooLarge => "TOO_LARGE",
    NotFound => "NOT_FOUND",
    AlreadyExists => "ALREADY_EXISTS",
    NotAFile => "NOT_A_FILE",
    NotADirectory => "NOT_A_DIRECTORY",
    BinaryContent => "BINARY_CONTENT",
    NotUtf8 => "NOT_UTF8",
    UnrepresentableText => "UNREPRESENTABLE_TEXT",
    FileTooLarge => "FILE_TOO_LARGE",
    ReadRequired => "READ_REQUIRED",
    EditNoMatch => "EDIT_NO_MATCH",
    EditAmbiguousMatch => "EDIT_AMBIGUOUS_MATCH",
    EditNoop => "EDIT_NOOP",
    IdempotencyKeyReused => "IDEMPOTENCY_KEY_REUSED",
    SnapshotExpired => "SNAPSHOT_EXPIRED",
    VersionConflict => "VERSION_CONFLICT",
    FileModifiedSinceRead => "FILE_MODIFIED_SINCE_READ",
    LeaseHeld => "LEASE_HELD",
    IdempotencyRequestInProgress => "IDEMPOTENCY_REQUEST_IN_PROGRESS",
    PermissionDenied => "PERMISSION_DENIED",
    Unauthenticated => "UNAUTHENTICATED",
    QuotaExceeded => "QUOTA_EXCEEDED",
    RateLimited => "RATE_LIMITED",
    Overloaded => "OVERLOADED",
    WorkerUnavailable => "WORKER_UNAVAILABLE",
    ShuttingDown => "SHUTTING_DOWN",
    StorageFull => "STORAGE_FULL",
    StoreUnavailable => "STORE_UNAVAILABLE",
    TransactionConflict => "TRANSACTION_CONFLICT",
    DataLoss => "DATA_LOSS",
    Internal => "INTERNAL",
}

impl Reason {
    /// The gRPC code of SPEC §6.
    pub fn code(self) -> Code {
        use Reason::*;
        match self {
            InvalidArgument | InvalidPath | PathTraversal | InvalidPattern | CursorInvalid | AmbiguousReference
            | TooLarge => Code::InvalidArgument,
            NotFound => Code::NotFound,
            AlreadyExists => Code::AlreadyExists,
            NotAFile
            | NotADirectory
            | BinaryContent
            | NotUtf8
            | UnrepresentableText
            | FileTooLarge
            | ReadRequired
            | EditNoMatch
            | EditAmbiguousMatch
            | EditNoop
            | IdempotencyKeyReused
            | SnapshotExpired
            | VersionConflict
            | FileModifiedSinceRead
            | LeaseHeld => Code::FailedPrecondition,
            IdempotencyRequestInProgress | TransactionConflict => Code::Aborted,
            PermissionDenied => Code::PermissionDenied,
            Unauthenticated => Code::Unauthenticated,
            QuotaExceeded | RateLimited | Overloaded | StorageFull => Code::ResourceExhausted,
            WorkerUnavailable | ShuttingDown | StoreUnavailable => Code::Unavailable,
            DataLoss => Code::DataLoss,
            Internal => Code::Internal,
        }
    }

    /// Whether the same call can succeed later unchanged.
    pub fn retryable(self) -> bool {
        use Reason::*;
        matches!(
            self,
            IdempotencyRequestInProgress
                | LeaseHeld
                | RateLimited
                | Overloaded
                | WorkerUnavailable
                | ShuttingDown
                | StoreUnavailable
                | TransactionConflict
        )
    }

    fn default_next_action(self) -> &'static str {
        use Reason::*;
        match self {
            InvalidArgument | TooLarge => "Fix the named field and send the request again.",
            InvalidPath => "Use an absolute path of `/`-separated names without control characters.",
            PathTraversal => "Name the target by its absolute path; `..` is never resolved.",
            InvalidPattern => "Fix the pattern at the reported position and search again.",
            CursorInvalid => "Repeat the first request without a page token, with the same arguments on every page.",
            AmbiguousReference => "Name the space by its ID instead of its name.",
            NotFound => "Check the path with List or Find; it does not exist or is not visible to you.",
            AlreadyExists => "Choose another name, or read the existing item first.",
            NotAFile => "Use List for directories; this call needs a file.",
            NotADirectory => "A file is in the way; choose a path whose parents are directories.",
            BinaryContent | NotUtf8 => {
                "Read it with media set (up to 8 MiB) or Download its raw bytes; text operations cannot read it."
            }
            UnrepresentableText => {
                "Leave out the named character, or write the file with encoding utf-8 to convert it to UTF-8."
            }
            FileTooLarge => "Use Download for this file, or split the content into smaller files.",
            ReadRequired => "Read the file in this session first, or pass base_version.",
            EditNoMatch => "Read the file again and copy old_text exactly as it appears.",
            EditAmbiguousMatch => "Add surrounding context to old_text so it matches once, or set replace_all.",
            EditNoop => "Make new_text differ from old_text, or skip this edit.",
            IdempotencyKeyReused => "Use a new idempotency key for a different request.",
            SnapshotExpired => "Restart from the first page; the pinned revision was compacted away.",
            VersionConflict | FileModifiedSinceRead => {
                "Read the file again, then redo the change against the current version."
            }
            IdempotencyRequestInProgress => "Retry with the same idempotency key shortly.",
            LeaseHeld => {
                "Another holder leased this path: retry after the delay in RetryInfo (its expiry), or ask the holder to \
                 release it; a call that carries the lease (x-agentvfs-lease) may change the path."
            }
            PermissionDenied => "Ask an owner of the space for a role that allows this call.",
            Unauthenticated => "Send a valid bearer token in the authorization metadata.",
            QuotaExceeded => "Free space by removing files, or ask an owner to raise the quota.",
            RateLimited | Overloaded => "Retry after the delay in RetryInfo.",
            WorkerUnavailable | ShuttingDown | StoreUnavailable | TransactionConflict => "Retry shortly, with backoff.",
            StorageFull => "Stop writing and tell an operator; reads still work.",
            DataLoss => "Tell an operator; stored data failed an integrity check.",
            Internal => "Tell an operator; retrying will not help.",
        }
    }
}

impl std::str::FromStr for Reason {
    type Err = UnknownReason;

    fn from_str(name: &str) -> std::result::Result<Self, UnknownReason> {
        Reason::parse(name).ok_or(UnknownReason)
    }
}

/// A string that names no [`Reason`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("not an agentvfs error reason")]
pub struct UnknownReason;

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An error of the front, ready to become a gRPC status. Small (a reason
/// and a box) so that `Result`s stay cheap to return.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}: {}", .details.message)]
pub struct Error {
    pub reason: Reason,
    details: Box<Details>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Details {
    message: String,
    next_action: Option<String>,
    metadata: BTreeMap<String, String>,
    /// BadRequest field violations: (field path, description).
    fields: Vec<(String, String)>,
    /// PreconditionFailure violation: (type, subject, description).
    precondition: Option<(String, String, String)>,
    /// QuotaFailure violation: (subject, description).
    quota: Option<(String, String)>,
    retry_after: Option<Duration>,
}

/// Results of the front.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn new(reason: Reason, message: impl Into<String>) -> Self {
        Self {
            reason,
            details: Box::new(Details {
                message: message.into(),
                next_action: None,
                metadata: BTreeMap::new(),
                fields: Vec::new(),
                precondition: None,
                quota: None,
                retry_after: None,
            }),
        }
    }

    pub fn message(&self) -> &str {
        &self.details.message
    }

    /// Adds a metadata entry (lowerCamelCase key).
    pub fn with(mut self, key: &str, value: impl ToString) -> Self {
        debug_assert!(!key.contains('_'), "metadata keys are lowerCamelCase: {key}");
        self.details.metadata.insert(key.to_owned(), value.to_string());
        self
    }

    /// Adds a BadRequest field violation; the field path also goes to metadata.
    pub fn field(mut self, field: impl Into<String>) -> Self {
        let field = field.into();
        self.details.metadata.insert("field".to_owned(), field.clone());
        let description = self.details.message.clone();
        self.details.fields.push((field, description));
        self
    }

    pub fn next_action(mut self, action: impl Into<String>) -> Self {
        self.details.next_action = Some(action.into());
        self
    }

    pub fn precondition(mut self, kind: &str, subject: impl Into<String>) -> Self {
        self.details.precondition = Some((kind.to_owned(), subject.into(), self.details.message.clone()));
        self
    }

    pub fn quota(mut self, subject: impl Into<String>) -> Self {
        self.details.quota = Some((subject.into(), self.details.message.clone()));
        self
    }

    pub fn retry_after(mut self, delay: Duration) -> Self {
        self.details.retry_after = Some(delay);
        self
    }

    // ---- common constructors

    pub fn invalid_argument(field: &str, message: impl Into<String>) -> Self {
        Self::new(Reason::InvalidArgument, message).field(field)
    }

    pub fn not_found(what: impl fmt::Display) -> Self {
        Self::new(Reason::NotFound, format!("{what} was not found.")).with("path", what)
    }

    pub fn space_not_found(space: &str) -> Self {
        Self::new(Reason::NotFound, format!("Space {space:?} was not found.")).with("space", space)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(Reason::Internal, message)
    }

    /// The `ErrorInfo` metadata: the error's own entries plus `retryable`
    /// and `nextAction`.
    pub fn info_metadata(&self) -> HashMap<String, String> {
        let mut metadata: HashMap<String, String> = self.details.metadata.clone().into_iter().collect();
        metadata.insert("retryable".to_owned(), self.reason.retryable().to_string());
        metadata.insert(
            "nextAction".to_owned(),
            self.details.next_action.clone().unwrap_or_else(|| self.reason.default_next_action().to_owned()),
        );
        metadata
    }

    /// The gRPC status for this error. Internal errors are logged here, once.
    pub fn into_status(self) -> Status {
        let metadata = self.info_metadata();
        let Self { reason, details } = self;
        let Details { message, fields, precondition, quota, retry_after, .. } = *details;
        if reason == Reason::Internal {
            tracing::error!(%message, "internal error");
        }
        let retryable = reason.retryable();
        let mut details = ErrorDetails::with_error_info(reason.as_str(), agentvfs_proto::ERROR_DOMAIN, metadata);
        for (field, description) in fields {
            details.add_bad_request_violation(field, description);
        }
        if let Some((kind, subject, description)) = precondition {
            details.add_precondition_failure_violation(kind, subject, description);
        }
        if let Some((subject, description)) = quota {
            details.add_quota_failure_violation(subject, description);
        }
        let retry_after = retry_after.or_else(|| retryable.then(|| Duration::from_millis(200)));
        if retry_after.is_some() {
            details.set_retry_info(retry_after);
        }
        let message =
            if reason == Reason::Internal { "The server failed to complete the request.".to_owned() } else { message };
        Status::with_error_details(reason.code(), message, details)
    }
}

impl From<Error> for Status {
    fn from(error: Error) -> Status {
        error.into_status()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_carries_one_error_info_with_required_metadata() {
        let status = Error::new(Reason::VersionConflict, "File /a is at version 3, not 2.")
            .with("path", "/a")
            .with("expectedVersion", 2)
            .with("currentVersion", 3)
            .precondition("VERSION", "/a")
            .into_status();
        assert_eq!(status.code(), Code::FailedPrecondition);
        let details = status.get_error_details();
        let info = details.error_info().unwrap();
        assert_eq!(info.reason, "VERSION_CONFLICT");
        assert_eq!(info.domain, "agentvfs");
        assert_eq!(info.metadata["retryable"], "false");
        assert_eq!(info.metadata["currentVersion"], "3");
        assert!(!info.metadata["nextAction"].is_empty());
        assert_eq!(details.precondition_failure().unwrap().violations.len(), 1);
        assert!(details.retry_info().is_none());
    }

    #[test]
    fn retryable_errors_carry_retry_info() {
        let status = Error::new(Reason::Overloaded, "Too busy.").into_status();
        assert_eq!(status.code(), Code::ResourceExhausted);
        assert!(status.get_error_details().retry_info().is_some());
    }

    #[test]
    fn every_reason_parses_back_from_its_name() {
        for &reason in Reason::ALL {
            assert_eq!(reason.as_str().parse::<Reason>(), Ok(reason));
        }
        assert_eq!(Reason::parse("INVALID_PATTERN"), Some(Reason::InvalidPattern));
        assert_eq!("invalid_pattern".parse::<Reason>(), Err(UnknownReason));
        assert_eq!(Reason::parse(""), None);
    }

    #[test]
    fn internal_errors_hide_their_message() {
        let status = Error::internal("secret detail").into_status();
        assert!(!status.message().contains("secret"));
    }
}
