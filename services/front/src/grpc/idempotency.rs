//! Idempotency keys: a retry with the same key and request gets the original
//! response; the same key with another request is refused.
//!
//! A key's scope is (space, principal, method, key). The receipt (the encoded
//! response) is written in the same transaction as the change it describes,
//! so it exists exactly when the change does. While a call runs, its scope
//! is claimed: a concurrent call with the same key gets
//! IDEMPOTENCY_REQUEST_IN_PROGRESS. The claim lives inside the task that
//! applies the change (on the blocking pool, or on its space's line, see
//! [`crate::turns`]), which runs to completion even if the client goes away,
//! so a retry can never overlap the original.
//!
//! A front claims the scope in memory first, which answers a duplicate sent
//! to the same front without a round trip. When several fronts share the
//! store, the scope is then claimed in the store too, in the transaction
//! that also looks for the receipt (see [`crate::store::claims`]). A call
//! that succeeded leaves its claim to expire: its receipt, written with its
//! change, answers every later call before any claim is looked at, and the
//! holder of the background lease prunes expired claims. A call that failed
//! deletes its claim at once, so that a retry can run.
//!
//! The claim's deadline must outlast the call, however long it runs: past
//! `--request-timeout-seconds` the client has its answer, but the change
//! still runs to its end and may then commit. No fixed deadline bounds
//! that (a commit may wait on locks and be re-planned many times), so the
//! claim is a lease, the front's `--lease-seconds` ahead, moved forward
//! every third of that by a thread that lives exactly as long as the change.
//! A claim left by a front that died expires within that lease, and a
//! retry then takes it over (finding the receipt if the change committed).
//! The lease assumes the fronts' clocks agree to within a few seconds.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::Duration;

use prost::Message;

use super::Front;
use crate::app::InFlight;
use crate::auth::Caller;
use crate::error::{Error, Reason, Result};
use crate::store::claims::Claimed;
use crate::store::records::now_ms;
use crate::store::{Receipt, ReceiptPlan, Store};

/// Longest accepted idempotency key.
const MAX_KEY_BYTES: usize = 256;
// A claim in a shared store is valid for the front's lease (`--lease-seconds`)
// from its last renewal. Its owner renews it every third of that while its
// call runs, so that two renewals in a row may fail before it lapses; and at
// release, with less than a third left, checks it is still its own before
// deleting it (above that, no other front can have taken it over, even with
// its clock that far ahead).

/// A claimed scope, released on drop.
#[derive(Debug)]
pub struct Claim<'a> {
    in_flight: &'a InFlight,
    scope: [u8; 32],
    fingerprint: [u8; 32],
    /// The claim in a shared store, when there is one.
    lease: Option<Lease<'a>>,
    /// The call succeeded: its receipt is written, and the claim in a
    /// shared store may expire rather than be deleted.
    succeeded: AtomicBool,
}

/// A claim held in a shared store.
#[derive(Debug)]
struct Lease<'a> {
    store: &'a Store,
    owner: [u8; 16],
    /// The deadline the store last confirmed.
    deadline_ms: AtomicI64,
    /// Set when a renewal found the claim taken over.
    lost: AtomicBool,
    /// How far ahead each renewal moves the deadline.
    length: Duration,
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        // The shared claim first: until it is gone, a duplicate on this
        // front is answered from memory.
        if let Some(lease) = &self.lease
            && !self.succeeded.load(Ordering::Acquire)
        {
            lease.release(&self.scope);
        }
        self.in_flight.lock().remove(&self.scope);
    }
}

impl Claim<'_> {
    /// The receipt this call leaves with its change: `respond` builds the
    /// response the caller gets from the outcome of the change.
    pub fn receipt<T, R: Message>(&self, respond: impl Fn(&T) -> R + Send + 'static) -> ReceiptPlan<T> {
        ReceiptPlan::new(self.scope, self.fingerprint, move |outcome| respond(outcome).encode_to_vec())
    }

    /// Runs `op` under the claim, renewing a shared claim until it returns.
    fn hold<R>(&self, op: impl FnOnce(Option<&Claim<'_>>) -> Result<R>) -> Result<R> {
        let Some(lease) = &self.lease else { return op(Some(self)) };
        let (done, stopped) = mpsc::channel::<()>();
        std::thread::scope(|threads| {
            std::thread::Builder::new()
                .name("claim-renewal".into())
                .spawn_scoped(threads, move || lease.renew_until(&self.scope, &stopped, lease.length / 3))
                .map_err(|e| Error::internal(format!("cannot start renewing an idempotency claim: {e}")))?;
            let outcome = op(Some(self));
            drop(done);
            self.succeeded.store(outcome.is_ok(), Ordering::Release);
            outcome
        })
    }
}

impl Lease<'_> {
    /// Moves the claim's deadline forward every `every` until `stopped`
    /// disconnects (the call returned).
    fn renew_until(&self, scope: &[u8; 32], stopped: &mpsc::Receiver<()>, every: Duration) {
        while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(every) {
            let deadline = now_ms().saturating_add(millis(self.length));
            match self.store.renew_claim(scope, self.owner, deadline) {
                Ok(true) => self.deadline_ms.store(deadline, Ordering::Release),
                Ok(false) => {
                    tracing::warn!("an idempotency claim lapsed and was taken over while its call ran");
                    self.lost.store(true, Ordering::Release);
                    return;
                }
                // Tried again at the next beat; the claim holds until its deadline.
                Err(error) => tracing::warn!(%error, "renewing an idempotency claim failed"),
            }
        }
    }

    /// Deletes the claim: blindly while its deadline is well ahead (one
    /// round trip), otherwise only if it is still this front's.
    fn release(&self, scope: &[u8; 32]) {
        let left = self.deadline_ms.load(Ordering::Acquire).saturating_sub(now_ms());
        let unchecked = !self.lost.load(Ordering::Acquire) && left > millis(self.length / 3);
        if let Err(error) = self.store.release_claim(scope, self.owner, unchecked) {
            tracing::warn!(%error, "releasing an idempotency claim failed; it lapses at its deadline");
        }
    }
}

/// The fingerprint of a request (computed only for calls with a key).
pub fn fingerprint(key: &str, request: &impl Message) -> [u8; 32] {
    if key.is_empty() { [0; 32] } else { *blake3::hash(&request.encode_to_vec()).as_bytes() }
}

/// Runs a call idempotently under `key` (no key: just runs it). A call made
/// before is answered with its stored response; a reused or busy key is
/// refused; otherwise the scope is claimed and `op` runs with the claim,
/// whose receipt it passes to the store with its change. The caller must
/// already be authorized for the call, so a replay never reveals what the
/// caller may no longer see.
pub fn run<R: Message + Default>(
    front: &Front,
    caller: &Caller,
    space: &str,
    method: &str,
    key: &str,
    fingerprint: [u8; 32],
    op: impl FnOnce(Option<&Claim<'_>>) -> Result<R>,
) -> Result<R> {
    if key.is_empty() {
        return op(None);
    }
    if key.len() > MAX_KEY_BYTES {
        return Err(Error::new(Reason::InvalidArgument, format!("idempotency_key is at most {MAX_KEY_BYTES} bytes."))
            .with("limit", MAX_KEY_BYTES)
            .field("idempotency_key"));
    }
    let mut hasher = blake3::Hasher::new();
    for part in [space, &caller.principal, method, key] {
        hasher.update(&(part.len() as u64).to_le_bytes());
        hasher.update(part.as_bytes());
    }
    let scope = *hasher.finalize().as_bytes();
    if !front.in_flight.lock().insert(scope) {
        return Err(in_progress());
    }
    let mut claim =
        Claim { in_flight: &front.in_flight, scope, fingerprint, lease: None, succeeded: AtomicBool::new(false) };
    let receipt = if front.store.shared() {
        let (owner, now) = (front.in_flight.front(), now_ms());
        let deadline = now.saturating_add(millis(front.in_flight.claim_lease()));
        match front.store.claim(&scope, owner, now, deadline)? {
            Claimed::Busy => return Err(in_progress()),
            Claimed::Done(receipt) => Some(receipt),
            Claimed::Taken => {
                let (deadline_ms, lost) = (AtomicI64::new(deadline), AtomicBool::new(false));
                let length = front.in_flight.claim_lease();
                claim.lease = Some(Lease { store: &front.store, owner, deadline_ms, lost, length });
                None
            }
        }
    } else {
        front.store.receipt(&scope)?
    };
    match receipt {
        Some(receipt) => replay(&receipt, fingerprint),
        None => claim.hold(op),
    }
}

/// The stored response of a call made before, if `fingerprint` is its request's.
fn replay<R: Message + Default>(receipt: &Receipt, fingerprint: [u8; 32]) -> Result<R> {
    if receipt.fingerprint != fingerprint {
        return Err(Error::new(
            Reason::IdempotencyKeyReused,
            "This idempotency key was used for a different request; use a new key for a new request.",
        )
        .field("idempotency_key"));
    }
    R::decode(receipt.response.as_slice()).map_err(|e| Error::internal(format!("stored receipt does not decode: {e}")))
}

fn in_progress() -> Error {
    Error::new(
        Reason::IdempotencyRequestInProgress,
        "A call with this idempotency key is still running; retry with the same key shortly.",
    )
    .retry_after(Duration::from_millis(100))
}

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{PostgresOptions, StoreLimits};

    #[test]
    fn a_shared_claim_is_renewed_while_its_call_runs_and_never_released_for_another_front() {
        let options = PostgresOptions {
            url: agentvfs_testdb::Cluster::shared().create_database(),
            pool_size: 4,
            connect_timeout: Duration::from_secs(10),
            statement_timeout: Duration::from_secs(30),
        };
        let store = Store::connect(&options, StoreLimits::default()).unwrap();
        let (scope, owner, other) = ([9; 32], [1; 16], [2; 16]);
        let start = now_ms();
        assert_eq!(store.claim(&scope, owner, start, start + 1_000).unwrap(), Claimed::Taken);
        let lease = Lease {
            store: &store,
            owner,
            deadline_ms: AtomicI64::new(start + 1_000),
            lost: AtomicBool::new(false),
            length: Duration::from_secs(30),
        };
        let renew_for = |every: Duration, time: Duration| {
            let (done, stopped) = mpsc::channel::<()>();
            std::thread::scope(|threads| {
                let (lease, scope) = (&lease, &scope);
                threads.spawn(move || lease.renew_until(scope, &stopped, every));
                std::thread::sleep(time);
                drop(done);
            });
        };
        renew_for(Duration::from_millis(50), Duration::from_millis(300));
        let renewed = lease.deadline_ms.load(Ordering::Acquire);
        assert!(renewed >= start + millis(lease.length), "renewed a lease ahead: {renewed}");
        assert_eq!(
            store.claim(&scope, other, start + 2_000, start + 3_000).unwrap(),
            Claimed::Busy,
            "past the first deadline"
        );

        // Taken over once the lease lapsed (its front stalled): the renewal
        // notices, and the release leaves the new owner's claim alone.
        assert_eq!(store.claim(&scope, other, renewed + 1, renewed + 60_000).unwrap(), Claimed::Taken);
        renew_for(Duration::from_millis(10), Duration::from_millis(200));
        assert!(lease.lost.load(Ordering::Acquire));
        lease.release(&scope);
        assert_eq!(store.claim(&scope, owner, renewed + 2, renewed + 3).unwrap(), Claimed::Busy);

        // Released by its owner, the scope is free at once.
        Lease {
            store: &store,
            owner: other,
            deadline_ms: AtomicI64::new(renewed + 60_000),
            lost: AtomicBool::new(false),
            length: Duration::from_secs(30),
        }
        .release(&scope);
        assert_eq!(store.claim(&scope, owner, renewed + 2, renewed + 3).unwrap(), Claimed::Taken);
    }
}
