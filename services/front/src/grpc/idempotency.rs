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
use crate::store::{ReceiptPlan, WriteOutcome};

/// Longest accepted idempotency key.
const MAX_KEY_BYTES: usize = 256;

/// A claimed scope, released on drop.
#[derive(Debug)]
pub struct Claim<'a> {
    in_flight: &'a InFlight,
    pub scope: [u8; 32],
    pub fingerprint: [u8; 32],
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        self.in_flight.lock().remove(&self.scope);
    }
}

/// What to do with a call that carries an idempotency key.
#[derive(Debug)]
pub enum Step<'a, R> {
    /// The call was made before: answer with its response.
    Replay(R),
    /// Run it, leaving a receipt under the claim (none without a key).
    Run(Option<Claim<'a>>),
}

impl Claim<'_> {
    /// Where this call's receipt goes.
    pub fn ticket(&self) -> crate::store::Ticket {
        crate::store::Ticket { key: self.scope, fingerprint: self.fingerprint }
    }

    /// The receipt for `response`, to store with the change.
    pub fn receipt(&self, response: &impl Message) -> crate::store::Receipt {
        crate::store::Receipt {
            fingerprint: self.fingerprint,
            response: response.encode_to_vec(),
            created_ms: crate::store::records::now_ms(),
        }
    }

    /// Keeps the response of a call that changed nothing.
    pub fn keep(&self, store: &crate::store::Store, response: &impl Message) -> Result<()> {
        store.put_receipt(&self.scope, &self.receipt(response))
    }

    /// A receipt plan for a write whose response `render` builds.
    pub fn write_plan<R: Message>(&self, render: impl Fn(&WriteOutcome) -> R + Send + 'static) -> ReceiptPlan {
        ReceiptPlan {
            key: self.scope,
            fingerprint: self.fingerprint,
            render: Box::new(move |outcome| render(outcome).encode_to_vec()),
        }
    }
}

/// The fingerprint of a request (computed only for calls with a key).
pub fn fingerprint(key: &str, request: &impl Message) -> [u8; 32] {
    if key.is_empty() { [0; 32] } else { *blake3::hash(&request.encode_to_vec()).as_bytes() }
}

/// Starts an idempotent call: replays a stored response, refuses a reused or
/// busy key, or claims the scope. The caller must already be authorized for
/// the call, so a replay never reveals what the caller may no longer see.
pub fn begin<'a, R: Message + Default>(
    front: &'a Front,
    caller: &Caller,
    space: &str,
    method: &str,
    key: &str,
    fingerprint: [u8; 32],
) -> Result<Step<'a, R>> {
    if key.is_empty() {
        return Ok(Step::Run(None));
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
        Some(receipt) => {
            let response = R::decode(receipt.response.as_slice())
                .map_err(|e| Error::internal(format!("stored receipt does not decode: {e}")))?;
            Ok(Step::Replay(response))
        }
        None => Ok(Step::Run(Some(claim))),
    }
}

/// Runs `op` idempotently: replays a stored response, or runs `op` with the
/// ticket its receipt must be stored under (none without a key).
pub fn run<R: Message + Default>(
    front: &Front,
    caller: &Caller,
    space: &str,
    method: &str,
    key: &str,
    fingerprint: [u8; 32],
    op: impl FnOnce(Option<crate::store::Ticket>) -> Result<R>,
) -> Result<R> {
    match begin::<R>(front, caller, space, method, key, fingerprint)? {
        Step::Replay(response) => Ok(response),
        Step::Run(claim) => op(claim.as_ref().map(Claim::ticket)),
    }
}
