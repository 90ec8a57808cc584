//! The embedded engine's failure latch. Once sled has failed a write or a
//! flush (an I/O error, a full disk reached by a route the free-space check
//! did not see), later writes can hang inside it until the call times out,
//! and nothing it acknowledges is sure to be on disk. So the first such
//! failure is kept: from then on every change fails at once, the engine's
//! health says `Failed`, and the liveness probe has the front restarted,
//! which recovers the store from what was flushed.

use std::fmt;
use std::sync::OnceLock;

use crate::error::{Error, Reason, Result};

/// The first storage failure, kept until the front restarts.
#[derive(Debug, Default)]
pub struct Latch {
    cause: OnceLock<String>,
}

impl Latch {
    /// Records `cause` unless a failure is recorded already, and returns the
    /// error every change gets from now on. The first failure is logged.
    pub fn trip(&self, cause: impl fmt::Display) -> Error {
        let mut first = false;
        let cause = self.cause.get_or_init(|| {
            first = true;
            cause.to_string()
        });
        if first {
            tracing::error!(
                %cause,
                "THE STORE FAILED: every change is refused from now on and health says NOT_SERVING; \
                 the front must restart to recover the store"
            );
        }
        failed(cause)
    }

    /// The latched error, if the store failed.
    pub fn check(&self) -> Result<()> {
        match self.cause.get() {
            Some(cause) => Err(failed(cause)),
            None => Ok(()),
        }
    }

    /// Why the store failed, if it did.
    pub fn cause(&self) -> Option<&str> {
        self.cause.get().map(String::as_str)
    }
}

fn failed(cause: &str) -> Error {
    Error::new(
        Reason::StoreUnavailable,
        "The server's store failed and the server must restart before it accepts changes; \
         this change may not have been saved.",
    )
    .with("cause", cause)
    .next_action("Retry with backoff and the same idempotency key: the server restarts to recover.")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_failure_is_kept_and_every_later_check_fails_with_it() {
        let latch = Latch::default();
        assert!(latch.check().is_ok());
        assert_eq!(latch.cause(), None);
        let first = latch.trip("io error: disk gone");
        assert_eq!(first.reason, Reason::StoreUnavailable);
        latch.trip("a later failure");
        assert_eq!(latch.cause(), Some("io error: disk gone"));
        let later = latch.check().unwrap_err();
        assert_eq!(later, first);
    }
}
