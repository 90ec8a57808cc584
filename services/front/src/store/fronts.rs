//! What several fronts on one database tell each other through it.
//!
//! - Commits: each front counts its own in a row of its own
//!   (`front.` ID), rewritten at most every tick while it commits; every
//!   front reads the others' rows each tick and wakes its followers of the
//!   log (`Watch`, the index feed) when one moved. No row is written by every
//!   commit, and no front writes another's row.
//! - The background lease (`lease.background`): background work (index
//!   delivery and outbox pruning, receipt pruning, collecting uploads) runs
//!   on the one front that holds it, until its deadline; a front that
//!   finds it expired takes it over with the next generation. Work that must
//!   not run twice checks its generation in its own transaction
//!   ([`check_lease`]), so a holder that lost the lease stops at once.

use std::sync::atomic::Ordering;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::Store;
use super::engine::{Table, Tx};
use super::records::{Record, decode, encode, now_ms};
use crate::error::{Error, Reason, Result};

/// A front's identity, new at every start.
pub type FrontId = [u8; 16];

/// Rows of fronts, in `meta`.
const FRONTS: &[u8] = b"front.";
/// The background lease, in `meta`.
const LEASE_KEY: &[u8] = b"lease.background";
/// A front silent this long is gone; its row is removed.
const GONE: Duration = Duration::from_secs(3600);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct FrontRow {
    commits: u64,
    time_ms: i64,
}

/// The background lease as stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    pub holder: FrontId,
    /// Grows by one at every change of holder.
    pub generation: u64,
    pub deadline_ms: i64,
}

impl Record for FrontRow {}
impl Record for Lease {}

fn front_key(front: &FrontId) -> Vec<u8> {
    let mut key = FRONTS.to_vec();
    key.extend_from_slice(front);
    key
}

impl Store {
    /// Counts a commit of this front and wakes the followers of the log.
    pub(super) fn committed(&self) {
        self.inner.own_commits.fetch_add(1, Ordering::Relaxed);
        self.inner.commits.send_modify(|count| *count += 1);
    }

    /// Wakes the followers of the log: another front committed.
    pub fn others_committed(&self) {
        self.inner.commits.send_modify(|count| *count += 1);
    }

    /// How many commits this front has made.
    pub fn own_commits(&self) -> u64 {
        self.inner.own_commits.load(Ordering::Relaxed)
    }

    /// Publishes this front's commit count.
    pub fn announce_commits(&self, front: &FrontId, commits: u64) -> Result<()> {
        let row = encode(&FrontRow { commits, time_ms: now_ms() });
        self.transact(|tx| tx.put(Table::Meta, &front_key(front), &row))
    }

    /// The commit count every front published, by front.
    pub fn front_commits(&self) -> Result<Vec<(FrontId, u64)>> {
        let mut out = Vec::new();
        for item in self.scan_prefix(Table::Meta, FRONTS) {
            let (key, value) = item?;
            let Ok(front) = FrontId::try_from(&key[FRONTS.len()..]) else { continue };
            out.push((front, decode::<FrontRow>(&value)?.commits));
        }
        Ok(out)
    }

    /// Removes the rows of fronts silent for an hour, and `front`'s own
    /// (when it stops).
    pub fn forget_fronts(&self, front: Option<&FrontId>) -> Result<usize> {
        let cutoff = now_ms() - GONE.as_millis() as i64;
        let mut gone = Vec::new();
        for item in self.scan_prefix(Table::Meta, FRONTS) {
            let (key, value) = item?;
            let own = front.is_some_and(|front| key[FRONTS.len()..] == front[..]);
            if own || decode::<FrontRow>(&value)?.time_ms < cutoff {
                gone.push(key);
            }
        }
        self.remove_all(Table::Meta, gone)
    }

    /// Holds the background lease for `ttl` more: renews it when `front`
    /// holds it, takes it when it is free or expired. Returns its generation
    /// when `front` holds it now.
    pub fn hold_lease(&self, front: &FrontId, ttl: Duration) -> Result<Option<u64>> {
        let mut held = None;
        self.transact(|tx| {
            held = None;
            let now = now_ms();
            let current: Option<Lease> = tx.get(Table::Meta, LEASE_KEY)?.map(|raw| decode(&raw)).transpose()?;
            let generation = match current {
                Some(lease) if lease.holder == *front && lease.deadline_ms >= now => lease.generation,
                Some(lease) if lease.deadline_ms >= now => return Ok(()),
                Some(lease) => lease.generation + 1,
                None => 1,
            };
            let lease = Lease { holder: *front, generation, deadline_ms: now + ttl.as_millis() as i64 };
            tx.put(Table::Meta, LEASE_KEY, &encode(&lease))?;
            held = Some(generation);
            Ok(())
        })?;
        Ok(held)
    }

    /// Gives the lease up if `front` holds it (when it stops), so that
    /// another front takes it at once rather than at its deadline.
    pub fn release_lease(&self, front: &FrontId) -> Result<()> {
        self.transact(|tx| {
            let current: Option<Lease> = tx.get(Table::Meta, LEASE_KEY)?.map(|raw| decode(&raw)).transpose()?;
            match current {
                Some(lease) if lease.holder == *front => {
                    tx.put(Table::Meta, LEASE_KEY, &encode(&Lease { deadline_ms: 0, ..lease }))
                }
                _ => Ok(()),
            }
        })
    }

    /// The background lease as stored, if anyone ever held it.
    pub fn lease(&self) -> Result<Option<Lease>> {
        self.get_decoded(Table::Meta, LEASE_KEY)
    }
}

/// Refuses the transaction unless the lease still has `generation` and has
/// not expired: background work whose holder lost the lease stops there.
pub(super) fn check_lease(tx: &mut dyn Tx, generation: u64) -> Result<()> {
    let lease: Option<Lease> = tx.get(Table::Meta, LEASE_KEY)?.map(|raw| decode(&raw)).transpose()?;
    match lease {
        Some(lease) if lease.generation == generation && lease.deadline_ms >= now_ms() => Ok(()),
        _ => Err(Error::new(Reason::TransactionConflict, "This front no longer holds the background lease.")),
    }
}
