//! The gRPC adapter: requests are authenticated, parsed into domain values
//! (paths, references, globs, limits) and handed to the application
//! ([`crate::app`]); its results become proto messages. Proto types stop here.

mod access;
mod admin;
mod batch;
mod content;
mod convert;
mod edit;
mod filesystem;
mod handler;
mod idempotency;
mod leases;
pub mod limits;
mod patch;
mod read;
mod revert;
mod search;
mod transfer;
mod watch;

use std::sync::Arc;

use tonic::Request;

pub(crate) use crate::app::{
    Front, Target, echo, non_empty, not_a_file, reference_error, session_mark, text_of, text_version, upsert_session,
    upsert_written,
};
use crate::auth::Caller;
use crate::error::{Error, Reason, Result};
pub(crate) use crate::page_token;

pub use content::ContentService;

/// The two public services of the front over shared state.
#[derive(Debug, Clone)]
pub struct Services {
    front: Arc<Front>,
}

impl Services {
    pub fn new(front: Arc<Front>) -> Self {
        Self { front }
    }

    /// Refuses new calls from now on (SHUTTING_DOWN); calls in flight finish.
    pub fn close(&self) {
        self.front.admission.close();
    }

    /// Forgets the rate state of idle principals (bounded memory).
    pub fn forget_idle_rates(&self) {
        self.front.admission.forget_idle();
    }

    /// The internal content service over the same state.
    pub fn content(&self) -> ContentService {
        ContentService::new(self.front.clone())
    }
}

impl Front {
    /// Authenticates and admits a call.
    pub fn caller<T>(&self, request: &Request<T>) -> Result<Caller> {
        let mut caller = self.auth.authenticate(request.metadata())?;
        tracing::Span::current().record("principal", caller.principal.as_str());
        caller.admission = Some(self.admission.admit(&caller.principal)?);
        Ok(caller)
    }
}

/// The time left before the caller's deadline (`grpc-timeout`), if it set
/// one that parses (see [`limits::parse_grpc_timeout`]).
pub fn deadline(metadata: &tonic::metadata::MetadataMap) -> Option<std::time::Duration> {
    limits::parse_grpc_timeout(metadata.get("grpc-timeout")?.to_str().ok()?)
}

/// Page size: 0 takes the default; otherwise 1..=max.
pub fn page_size(value: u32, default: usize, max: usize, field: &str) -> Result<usize> {
    match value as usize {
        0 => Ok(default),
        n if n <= max => Ok(n),
        n => Err(Error::new(Reason::InvalidArgument, format!("{field} must be between 1 and {max}, not {n}."))
            .with("limit", max)
            .field(field)),
    }
}
