//! Admission control: calls beyond what the server can take are shed at
//! once with a retry delay instead of queueing without bound.
//!
//! Two limits apply to every call: a global bound on calls in flight
//! (OVERLOADED) and a per-principal token bucket (RATE_LIMITED), both with
//! `RetryInfo`.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::error::{Error, Reason, Result};

/// Held for the duration of an admitted call.
pub type Permit = Arc<OwnedSemaphorePermit>;

/// The server's admission limits.
#[derive(Debug)]
pub struct Admission {
    closing: std::sync::atomic::AtomicBool,
    in_flight: Arc<Semaphore>,
    max_in_flight: usize,
    rates: Option<DefaultKeyedRateLimiter<String>>,
}

impl Admission {
    /// `per_second` calls per principal (0: no rate limit), with bursts of
    /// twice that; at most `max_in_flight` calls at once.
    pub fn new(max_in_flight: usize, per_second: u32) -> Self {
        let rates = NonZeroU32::new(per_second).map(|rate| {
            let burst = NonZeroU32::new(rate.get().saturating_mul(2)).unwrap_or(rate);
            RateLimiter::keyed(Quota::per_second(rate).allow_burst(burst))
        });
        Self {
            closing: std::sync::atomic::AtomicBool::new(false),
            in_flight: Arc::new(Semaphore::new(max_in_flight)),
            max_in_flight,
            rates,
        }
    }

    /// From now on, refuses new calls with SHUTTING_DOWN (calls in flight
    /// finish).
    pub fn close(&self) {
        self.closing.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Admits a call of `principal`, or sheds it.
    pub fn admit(&self, principal: &str) -> Result<Permit> {
        if self.closing.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(Error::new(Reason::ShuttingDown, "The server is shutting down; retry on another instance.")
                .retry_after(Duration::from_secs(1)));
        }
        if let Some(rates) = &self.rates
            && let Err(not_until) = rates.check_key(&principal.to_owned())
        {
            let wait = not_until.wait_time_from(DefaultClock::default().now()).max(Duration::from_millis(1));
            return Err(Error::new(
                Reason::RateLimited,
                "This principal is over its call rate; retry after the delay.",
            )
            .retry_after(wait));
        }
        let permit = self.in_flight.clone().try_acquire_owned().map_err(|_| {
            Error::new(Reason::Overloaded, "The server is at its limit of calls in flight; retry after the delay.")
                .with("limit", self.max_in_flight)
                .retry_after(Duration::from_millis(100))
        })?;
        Ok(Arc::new(permit))
    }

    /// Forgets rate state of principals idle long enough to be full again.
    pub fn forget_idle(&self) {
        if let Some(rates) = &self.rates {
            rates.retain_recent();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sheds_over_rate_and_over_capacity() {
        let admission = Admission::new(2, 1);
        let first = admission.admit("a").unwrap();
        let _second = admission.admit("a").unwrap();
        assert_eq!(admission.admit("a").unwrap_err().reason, Reason::RateLimited);
        assert_eq!(admission.admit("b").unwrap_err().reason, Reason::Overloaded, "two calls in flight");
        drop(first);
        assert!(admission.admit("b").is_ok());
        let unlimited = Admission::new(10, 0);
        for _ in 0..100 {
            drop(unlimited.admit("a").unwrap());
        }
        unlimited.close();
        assert_eq!(unlimited.admit("a").unwrap_err().reason, Reason::ShuttingDown);
    }
}
