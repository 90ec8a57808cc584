//! The worker's one error type and its one mapping to `tonic::Status`.
//!
//! Every error the front receives from a worker carries one
//! `google.rpc.ErrorInfo` (domain `agentvfs`) whose reason is a SPEC §6
//! reason the front parses back into its own `Reason`; it never reads the
//! message. How the front treats each (see its `workers::Workers::failover`):
//!
//! - `INVALID_ARGUMENT` / `INVALID_PATTERN`: the caller's request is at fault;
//!   forwarded to the caller, with the field named in `field`.
//! - `WORKER_UNAVAILABLE`: this worker cannot do the job now (it cannot get
//!   the content from the front, say why in `cause`); the front tries the
//!   next worker.
//! - `INTERNAL`: this worker failed; the front tries the next worker.

use std::collections::HashMap;

use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

use crate::fetch::FetchError;

/// An error of the worker, ready to become a gRPC status.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A request field the worker cannot use.
    #[error("{message}")]
    InvalidArgument { field: &'static str, message: String },
    /// The grep pattern does not compile within bounds.
    #[error("The pattern does not compile within bounds: {0}")]
    InvalidPattern(String),
    /// The content a job needs could not be fetched from the front.
    #[error("The worker cannot fetch content from the front: {0}.")]
    Content(#[from] FetchError),
    /// Content the index needs is not available for one file.
    #[error("Content for indexing is not available: {0}.")]
    IndexContent(String),
    /// Anything else; logged where it becomes a status.
    #[error("{0}")]
    Internal(String),
}

impl Error {
    /// The `ErrorInfo.reason` (a SPEC §6 reason) and the gRPC code that goes with it.
    fn reason(&self) -> (&'static str, Code) {
        match self {
            Error::InvalidArgument { .. } => ("INVALID_ARGUMENT", Code::InvalidArgument),
            Error::InvalidPattern(_) => ("INVALID_PATTERN", Code::InvalidArgument),
            Error::Content(_) | Error::IndexContent(_) => ("WORKER_UNAVAILABLE", Code::Unavailable),
            Error::Internal(_) => ("INTERNAL", Code::Internal),
        }
    }

    /// The status for this error, with its `ErrorInfo`.
    pub fn into_status(self) -> Status {
        let (reason, code) = self.reason();
        let retryable = code == Code::Unavailable;
        let mut metadata = HashMap::from([("retryable".to_owned(), retryable.to_string())]);
        let next_action = match &self {
            Error::InvalidArgument { field, .. } => {
                metadata.insert("field".to_owned(), (*field).to_owned());
                "Fix the named field and send the request again."
            }
            Error::InvalidPattern(_) => {
                metadata.insert("field".to_owned(), "pattern".to_owned());
                "Fix the pattern at the reported position and search again."
            }
            Error::Content(error) => {
                metadata.insert("cause".to_owned(), error.cause().to_owned());
                "Send the job to another worker; an operator must fix this worker's token or network."
            }
            Error::IndexContent(_) => "Deliver the jobs again shortly.",
            Error::Internal(message) => {
                tracing::error!(%message, "internal error");
                "Send the job to another worker."
            }
        };
        metadata.insert("nextAction".to_owned(), next_action.to_owned());
        let message = self.to_string();
        Status::with_error_details(
            code,
            message,
            ErrorDetails::with_error_info(reason, agentvfs_proto::ERROR_DOMAIN, metadata),
        )
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

    fn info(error: Error) -> (Code, tonic_types::ErrorInfo) {
        let status = error.into_status();
        (status.code(), status.get_details_error_info().expect("an ErrorInfo"))
    }

    #[test]
    fn errors_carry_the_reason_the_front_reads_back() {
        let (code, pattern) = info(Error::InvalidPattern("unclosed group".into()));
        assert_eq!((code, pattern.reason.as_str()), (Code::InvalidArgument, "INVALID_PATTERN"));
        assert_eq!(pattern.metadata["field"], "pattern");
        assert_eq!(pattern.domain, agentvfs_proto::ERROR_DOMAIN);

        let (code, refused) = info(Error::Content(FetchError::Refused("no authorization header".into())));
        assert_eq!((code, refused.reason.as_str()), (Code::Unavailable, "WORKER_UNAVAILABLE"));
        assert_eq!(refused.metadata["cause"], "CREDENTIALS_REFUSED");
        assert_eq!(refused.metadata["retryable"], "true");

        let (code, internal) = info(Error::Internal("task failed".into()));
        assert_eq!((code, internal.reason.as_str()), (Code::Internal, "INTERNAL"));
    }
}
