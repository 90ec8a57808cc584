//! State that calls share across fronts when several serve one database
//! (SPEC §10): idempotency claims of calls in progress and the
//! read-before-edit records of agent sessions. A single front keeps both in
//! memory and never writes these tables.
//!
//! A claim is a lease: its owner renews the deadline while the call runs,
//! so a live claim without a receipt belongs to a call still running (a
//! call that succeeded leaves its claim to expire beside its receipt, which
//! is looked at first), and the claim of a front that died expires and is
//! taken over. Deadlines are wall-clock
//! times compared by other fronts, so the fronts' clocks must agree to well
//! within the renewal margin (see `grpc::idempotency`).

use super::Store;
use super::engine::{Table, Tx};
use super::keys;
use super::records::{ClaimRecord, Receipt, SessionRead, decode, encode};
use crate::error::Result;
use crate::ids::NodeId;

/// What claiming an idempotency scope found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claimed {
    /// The scope is now this front's, until the deadline.
    Taken,
    /// A call holding the scope runs on some front (this one included).
    Busy,
    /// The call completed before: its receipt (nothing was claimed).
    Done(Receipt),
}

impl Store {
    /// Whether several fronts may share this store (a database).
    pub fn shared(&self) -> bool {
        self.engine().shared()
    }

    /// Claims `scope` for `owner` until `deadline_ms`, unless its receipt
    /// exists or another call holds it. One transaction that reads the
    /// claim and the receipt together (one round trip on a database) and
    /// writes the claim: two fronts claiming at once cannot both take it,
    /// since a claim row found missing is inserted, never overwritten.
    pub fn claim(&self, scope: &[u8; 32], owner: [u8; 16], now_ms: i64, deadline_ms: i64) -> Result<Claimed> {
        let value = encode(&ClaimRecord { owner, deadline_ms });
        let mut claimed = Claimed::Busy;
        self.transact(|tx| {
            tx.read_ahead(&[(Table::Claims, scope.to_vec()), (Table::Receipts, scope.to_vec())])?;
            claimed = claim_in(tx, scope, now_ms, &value)?;
            Ok(())
        })?;
        Ok(claimed)
    }

    /// Moves the deadline of `owner`'s claim on `scope` to `deadline_ms`;
    /// false when the claim is no longer `owner`'s (it expired and another
    /// front took it over, or it was pruned).
    pub fn renew_claim(&self, scope: &[u8; 32], owner: [u8; 16], deadline_ms: i64) -> Result<bool> {
        let value = encode(&ClaimRecord { owner, deadline_ms });
        let mut renewed = false;
        self.transact(|tx| {
            renewed = owned_by(tx, scope, owner)?;
            if renewed {
                tx.put(Table::Claims, scope, &value)?;
            }
            Ok(())
        })?;
        Ok(renewed)
    }

    /// Releases `owner`'s claim on `scope`. When `unchecked`, the caller
    /// knows the claim is still its own (its deadline is well ahead), and
    /// the row is deleted without reading it first (one round trip).
    pub fn release_claim(&self, scope: &[u8; 32], owner: [u8; 16], unchecked: bool) -> Result<()> {
        self.transact(|tx| {
            if unchecked || owned_by(tx, scope, owner)? {
                tx.delete(Table::Claims, scope)?;
            }
            Ok(())
        })
    }

    /// Drops claims whose deadline passed before `now_ms` (left by fronts
    /// that died mid-call); returns how many.
    pub fn prune_claims(&self, now_ms: i64) -> Result<usize> {
        self.engine().prune(Table::Claims, &|raw| Ok(decode::<ClaimRecord>(raw)?.deadline_ms < now_ms))
    }

    /// Records that `session` read `read.version` of `node`: one write,
    /// with no read before it (an upsert in one round trip on a database).
    pub fn record_session_read(&self, session: &str, node: NodeId, read: SessionRead) -> Result<()> {
        let row = (keys::session_read(session, node), encode(&read));
        // Reads of many calls at once, each recorded before its call
        // answers: one transaction for the records that wait together.
        self.inner.session_reads.run(row, |rows| {
            self.transact(|tx| rows.iter().try_for_each(|(key, value)| tx.put(Table::Sessions, key, value)))
        })
    }

    /// What `session` last read of `node`, expired or not.
    pub fn session_read(&self, session: &str, node: NodeId) -> Result<Option<SessionRead>> {
        self.get_decoded(Table::Sessions, &keys::session_read(session, node))
    }

    /// Drops session records that expired before `now_ms`; returns how many.
    pub fn prune_session_reads(&self, now_ms: i64) -> Result<usize> {
        self.engine().prune(Table::Sessions, &|raw| Ok(decode::<SessionRead>(raw)?.expires_ms < now_ms))
    }
}

/// The claiming transaction's decision (see [`Store::claim`]).
fn claim_in(tx: &mut dyn Tx, scope: &[u8; 32], now_ms: i64, value: &[u8]) -> Result<Claimed> {
    if let Some(raw) = tx.get(Table::Receipts, scope)? {
        return Ok(Claimed::Done(decode(&raw)?));
    }
    if let Some(raw) = tx.get(Table::Claims, scope)?
        && decode::<ClaimRecord>(&raw)?.deadline_ms >= now_ms
    {
        return Ok(Claimed::Busy);
    }
    // Missing, or expired: its front died mid-call; taken over.
    tx.put(Table::Claims, scope, value)?;
    Ok(Claimed::Taken)
}

/// Whether the claim on `scope` is `owner`'s.
fn owned_by(tx: &mut dyn Tx, scope: &[u8; 32], owner: [u8; 16]) -> Result<bool> {
    match tx.get(Table::Claims, scope)? {
        Some(raw) => Ok(decode::<ClaimRecord>(&raw)?.owner == owner),
        None => Ok(false),
    }
}
