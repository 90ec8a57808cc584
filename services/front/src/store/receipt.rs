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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Reason;
    use crate::path::SpacePath;
    use crate::store::{Actor, Durability, NewSpace, Quota, SpaceRecord, StoreLimits, WriteBody, WriteMode, WriteOp};

    fn plan<T>(key: u8, encode: impl Fn(&T) -> Vec<u8> + Send + 'static) -> Option<ReceiptPlan<T>> {
        Some(ReceiptPlan::new([key; 32], [key ^ 0xff; 32], encode))
    }

    fn write(space: &SpaceRecord, expected_version: Option<u64>, key: u8) -> WriteOp {
        WriteOp {
            space: space.id,
            path: SpacePath::parse("/f").unwrap(),
            body: WriteBody::Text { text: "x".into(), encoding: None },
            mode: WriteMode::Overwrite,
            expected_version,
            operation: "write",
            executable: None,
            actor: Actor { principal: "p".into(), ..Actor::default() },
            receipt: plan(key, |outcome: &super::super::WriteOutcome| outcome.version.to_be_bytes().to_vec()),
            session: None,
        }
    }

    #[test]
    fn a_receipt_exists_exactly_when_its_call_completed() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), Durability::Off, StoreLimits::default()).unwrap();
        let new = NewSpace { name: "s".into(), owner: "p".into(), quota: Quota::default() };
        let space = store.create_space(new, plan(1, |s: &SpaceRecord| s.name.clone().into_bytes())).unwrap();
        let receipt = store.receipt(&[1; 32]).unwrap().unwrap();
        assert_eq!((receipt.fingerprint, receipt.response), ([0xfe; 32], b"s".to_vec()));

        // A refused change leaves no receipt, so a retry runs again.
        let refused = store.write(write(&space, Some(7), 2)).unwrap_err();
        assert_eq!(refused.reason, Reason::VersionConflict);
        assert_eq!(store.receipt(&[2; 32]).unwrap(), None);

        // The receipt encodes the outcome of the change it was written with.
        assert_eq!(store.write(write(&space, None, 3)).unwrap().version, 1);
        assert_eq!(store.receipt(&[3; 32]).unwrap().unwrap().response, 1u64.to_be_bytes());

        // A call that changes nothing keeps its receipt alone.
        let unchanged = store.write(write(&space, Some(1), 4)).unwrap();
        assert!(!unchanged.changed);
        assert_eq!(store.receipt(&[4; 32]).unwrap().unwrap().response, 1u64.to_be_bytes());

        let deleted = plan(5, |s: &SpaceRecord| s.revision.to_be_bytes().to_vec());
        let revision = store.delete_space(space.id, deleted).unwrap().revision;
        assert_eq!(store.receipt(&[5; 32]).unwrap().unwrap().response, revision.to_be_bytes());
    }
}
