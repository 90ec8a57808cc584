//! Idempotency keys: a retry with the same key and request gets the original
//! response; the same key with another request is refused.
//!
//! A key's scope is (space, principal, method, key). The receipt (the encoded
//! response) is written in the same transaction as the change it describes,
//! so it exists exactly when the change does. While a call runs, its scope
//! is claimed in memory: a concurrent call with the same key gets
//! IDEMPOTENCY_REQUEST_IN_PROGRESS. The claim lives inside the blocking task
//! that applies the change, which runs to completion even if the client goes
//! away, so a retry can never overlap the original.

use prost::Message;

use super::Front;
use crate::app::InFlight;
use crate::auth::Caller;
use crate::error::{Error, Reason, Result};
use crate::store::ReceiptPlan;

/// Longest accepted idempotency key.
const MAX_KEY_BYTES: usize = 256;

/// A claimed scope, released on drop.
#[derive(Debug)]
pub struct Claim<'a> {
    in_flight: &'a InFlight,
    scope: [u8; 32],
    fingerprint: [u8; 32],
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        self.in_flight.lock().remove(&self.scope);
    }
}

impl Claim<'_> {
    /// The receipt this call leaves with its change: `respond` builds the
    /// response the caller gets from the outcome of the change.
    pub fn receipt<T, R: Message>(&self, respond: impl Fn(&T) -> R + Send + 'static) -> ReceiptPlan<T> {
        ReceiptPlan::new(self.scope, self.fingerprint, move |outcome| respond(outcome).encode_to_vec())
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
        return Err(Error::new(
            Reason::IdempotencyRequestInProgress,
            "A call with this idempotency key is still running; retry with the same key shortly.",
        )
        .retry_after(std::time::Duration::from_millis(100)));
    }
    let claim = Claim { in_flight: &front.in_flight, scope, fingerprint };
    match front.store.receipt(&scope)? {
        Some(receipt) if receipt.fingerprint != fingerprint => Err(Error::new(
            Reason::IdempotencyKeyReused,
            "This idempotency key was used for a different request; use a new key for a new request.",
        )
        .field("idempotency_key")),
        Some(receipt) => R::decode(receipt.response.as_slice())
            .map_err(|e| Error::internal(format!("stored receipt does not decode: {e}"))),
        None => op(Some(&claim)),
    }
}
