//! The receipt an idempotent call leaves (SPEC §3): a retry with the same
//! key and request gets the original response back.
//!
//! A mutation that takes a [`ReceiptPlan`] writes the receipt in the same
//! transaction as its change, so the receipt exists exactly when the change
//! does; a call that changes nothing keeps its receipt alone. The response
//! is encoded while the change is planned, so the retried transaction
//! closure only copies bytes (see [`super::commit`]).

use super::Store;
use super::records::{Receipt, now_ms};
use crate::error::Result;

/// Encodes the response a caller gets from the outcome of a change.
type Encode<T> = Box<dyn Fn(&T) -> Vec<u8> + Send>;

/// The receipt of an idempotent call whose change has the outcome `T`: the
/// key it is kept under, the request it answers, and how the response the
/// caller gets is encoded from the outcome.
pub struct ReceiptPlan<T> {
    key: [u8; 32],
    /// BLAKE3 of the request, so a reused key with another request is caught.
    fingerprint: [u8; 32],
    encode: Encode<T>,
}

impl<T> std::fmt::Debug for ReceiptPlan<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReceiptPlan").finish_non_exhaustive()
    }
}

impl<T> ReceiptPlan<T> {
    pub fn new(key: [u8; 32], fingerprint: [u8; 32], encode: impl Fn(&T) -> Vec<u8> + Send + 'static) -> Self {
        Self { key, fingerprint, encode: Box::new(encode) }
    }

    /// The receipt for `outcome` and the key it goes under, ready for a
    /// commit to write.
    pub(crate) fn seal(&self, outcome: &T) -> ([u8; 32], Receipt) {
        let receipt = Receipt { fingerprint: self.fingerprint, response: (self.encode)(outcome), created_ms: now_ms() };
        (self.key, receipt)
    }
}

impl Store {
    /// Keeps the receipt of a call that changed nothing (a change's receipt
    /// is written by its commit). Not yet durable: see [`Store::durable`].
    pub fn keep_receipt<T>(&self, receipt: Option<&ReceiptPlan<T>>, outcome: &T) -> Result<()> {
        match receipt {
            Some(plan) => {
                let (key, receipt) = plan.seal(outcome);
                self.put_receipt(&key, &receipt)
            }
            None => Ok(()),
        }
    }
}
