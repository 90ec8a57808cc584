//! The index outbox: jobs written with the changes they describe, read by
//! the delivery task in sequence order, removed once every worker has them.
//!
//! A commit queues its jobs under its space and revision (`queue`), so that
//! commits of different spaces share no record: nothing serializes them.
//! Jobs get their sequence when they are published: moved from the queue
//! into the outbox, at the head, by one transaction at a time (the head is
//! read and written by each), in the order of one snapshot of the queue.
//! A snapshot that holds a space's job holds every earlier job of that
//! space (that commit came first), so each space's jobs keep their revision
//! order; and since only publishing writes the outbox, a job never appears
//! behind one that delivery has passed. Reading the outbox publishes first.
//!
//! An engine that one front has to itself (sled) commits one transaction at
//! a time anyway: there a commit gives its jobs their sequences itself, at
//! the head, straight into the outbox ([`Jobs`]), after moving there what
//! the queue holds (the jobs of a fork or of a space's deletion, which are
//! still queued), so that no job overtakes one committed before it; the
//! outbox still grows only at its head, one transaction at a time. When the
//! queue holds more than a publishing batch, the commit queues its jobs
//! behind them instead.

use super::Store;
use prost::bytes::Bytes;

use super::engine::{KeyRange, Table, Tx};
use super::keys::{self, parse_sequence};
use super::records::{Entry, IndexJob, IndexOp, SpaceRecord, decode, encode, now_ms};
use crate::error::{Error, Result};
use crate::ids::SpaceId;

/// The highest sequence handed out, in `meta`.
const HEAD_KEY: &[u8] = b"outbox.head";
/// The highest sequence pruning has passed, in `meta`.
const PRUNED_KEY: &[u8] = b"outbox.pruned";
/// Queued jobs published per transaction.
const PUBLISH_BATCH: usize = 1024;

/// Where a transaction puts the index jobs of a commit; see the module docs.
#[derive(Debug, Clone, Copy)]
pub(super) enum Jobs {
    /// Into the queue, for publishing.
    Queued,
    /// Into the outbox, at the head.
    Sequenced,
}

impl Jobs {
    /// How jobs are written on this store.
    pub(super) fn of(store: &Store) -> Jobs {
        if store.shared() { Jobs::Queued } else { Jobs::Sequenced }
    }

    /// Writes encoded jobs in order; `queued_key` is the queue key of the
    /// job at each index.
    pub(super) fn write<'a>(
        self,
        tx: &mut dyn Tx,
        jobs: impl IntoIterator<Item = &'a [u8]>,
        queued_key: impl Fn(u64) -> Vec<u8>,
    ) -> Result<usize> {
        let mut written = 0;
        match self {
            Jobs::Queued => {
                for job in jobs {
                    tx.put(Table::Queue, &queued_key(written as u64), job)?;
                    written += 1;
                }
            }
            Jobs::Sequenced => {
                let queued = tx.scan_prefix(Table::Queue, &[])?;
                if queued.len() > PUBLISH_BATCH {
                    return Jobs::Queued.write(tx, jobs, queued_key);
                }
                let start = mark(tx.get(Table::Meta, HEAD_KEY)?)?;
                let mut head = start;
                for (key, job) in queued {
                    // An earlier commit of this transaction may have moved it.
                    if tx.get(Table::Queue, &key)?.is_some() {
                        tx.delete(Table::Queue, &key)?;
                        head += 1;
                        tx.put(Table::Outbox, &keys::sequence(head), &job)?;
                    }
                }
                for job in jobs {
                    head += 1;
                    tx.put(Table::Outbox, &keys::sequence(head), job)?;
                    written += 1;
                }
                if head > start {
                    tx.put(Table::Meta, HEAD_KEY, &head.to_be_bytes())?;
                }
            }
        }
        Ok(written)
    }
}

impl Store {
    /// Up to `limit` jobs after sequence `after`, in order.
    pub fn outbox_after(&self, after: u64, limit: usize) -> Result<Vec<(u64, IndexJob)>> {
        self.publish()?;
        let mut out = Vec::new();
        for item in self.range(Table::Outbox, KeyRange::from(keys::sequence(after + 1))).take(limit) {
            let (key, value) = item?;
            out.push((parse_sequence(&key)?, decode(&value)?));
        }
        Ok(out)
    }

    /// Seconds since the oldest job after `acked` was queued (0 when none waits).
    pub fn outbox_lag_seconds(&self, acked: u64) -> Result<f64> {
        Ok(match self.outbox_after(acked, 1)?.first() {
            Some((_, job)) => (now_ms() - job.queued_ms).max(0) as f64 / 1000.0,
            None => 0.0,
        })
    }

    /// The first and last sequence in the outbox.
    pub fn outbox_bounds(&self) -> Result<Option<(u64, u64)>> {
        self.publish()?;
        let all = || KeyRange::from(Vec::new());
        let first = self.engine().scan(Table::Outbox, all(), false).next().transpose()?;
        let last = self.engine().scan(Table::Outbox, all(), true).next().transpose()?;
        match (first, last) {
            (Some((first, _)), Some((last, _))) => Ok(Some((parse_sequence(&first)?, parse_sequence(&last)?))),
            _ => Ok(None),
        }
    }

    /// The highest sequence ever handed out (0 before the first job), also
    /// after pruning emptied the outbox.
    pub fn outbox_head(&self) -> Result<u64> {
        self.publish()?;
        mark(self.get(Table::Meta, HEAD_KEY)?)
    }

    /// Removes jobs up to and including `upto`. With several fronts, only
    /// the holder of the background lease prunes: `fence` is its generation,
    /// checked in the transaction that moves the pruning mark.
    pub fn prune_outbox(&self, upto: u64, fence: Option<u64>) -> Result<usize> {
        if upto > self.outbox_pruned()? {
            // Before the jobs go, so that no job is ever gone without the
            // mark that says so.
            self.transact(|tx| {
                if let Some(generation) = fence {
                    super::fronts::check_lease(tx, generation)?;
                }
                tx.put(Table::Meta, PRUNED_KEY, &upto.to_be_bytes())
            })?;
        }
        let range = KeyRange::through(Vec::new(), &keys::sequence(upto));
        let sequences = self.range(Table::Outbox, range).map(|item| item.map(|(key, _)| key));
        let sequences: Vec<_> = sequences.collect::<Result<_>>()?;
        self.remove_all(Table::Outbox, sequences)
    }

    /// The highest sequence pruning has passed: a worker whose index is
    /// older may have missed jobs that are gone and must be rebuilt.
    pub fn outbox_pruned(&self) -> Result<u64> {
        mark(self.get(Table::Meta, PRUNED_KEY)?)
    }

    /// Queues a rebuild of one space's index: drop it, then every live file.
    /// Returns the jobs queued.
    ///
    /// The jobs are queued like a commit's, right behind those of the
    /// revision they describe, by one transaction that reads the space (on a
    /// database: locks its row, which every commit of the space writes) and
    /// then its files: no commit of any front lands in between, and the
    /// jobs of later commits follow them.
    pub fn enqueue_reindex(&self, space: SpaceId) -> Result<usize> {
        let _guard = self.lock_space(space);
        let prefix = space.to_bytes();
        let mut queued = 0;
        self.transact(|tx| {
            let Some(record) = tx.get(Table::Spaces, &keys::space(space))? else {
                return Err(Error::space_not_found(&space.to_string()));
            };
            let revision = decode::<SpaceRecord>(&record)?.revision;
            let current = tx.scan_prefix(Table::Current, &prefix)?.into_iter().map(Ok);
            let drop = IndexJob::drop_space(space, revision);
            let jobs = std::iter::once(Ok(drop)).chain(live_files(space, revision, current));
            let jobs: Vec<Vec<u8>> = jobs.map(|job| job.map(|job| encode(&job))).collect::<Result<_>>()?;
            let key = |index| keys::queued_reindex(space, revision, index);
            queued = Jobs::of(self).write(tx, jobs.iter().map(Vec::as_slice), key)?;
            Ok(())
        })?;
        self.committed();
        Ok(queued)
    }

    /// Starts the head of a store written before jobs were queued, whose
    /// outbox was sequenced as jobs were committed.
    pub(super) fn start_outbox_head(&self) -> Result<()> {
        if self.get(Table::Meta, HEAD_KEY)?.is_some() {
            return Ok(());
        }
        let last = match self.engine().scan(Table::Outbox, KeyRange::from(Vec::new()), true).next() {
            Some(item) => parse_sequence(&item?.0)?,
            None => 0,
        };
        let head = last.max(self.outbox_pruned()?);
        self.transact(|tx| tx.put(Table::Meta, HEAD_KEY, &head.to_be_bytes()))
    }

    /// Moves every queued job into the outbox; see the module docs.
    fn publish(&self) -> Result<()> {
        let _one_at_a_time = self.inner.publishing.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        loop {
            let queued = self.engine().scan_snapshot(Table::Queue, PUBLISH_BATCH)?;
            if queued.is_empty() {
                return Ok(());
            }
            let mut rows = vec![(Table::Meta, HEAD_KEY.to_vec())];
            rows.extend(queued.iter().map(|(key, _)| (Table::Queue, key.to_vec())));
            self.transact(|tx| {
                // Every row read, locked in one round trip.
                tx.read_ahead(&rows)?;
                let mut head = mark(tx.get(Table::Meta, HEAD_KEY)?)?;
                for (key, job) in &queued {
                    // Another publisher may have moved it meanwhile.
                    if tx.get(Table::Queue, key)?.is_some() {
                        tx.delete(Table::Queue, key)?;
                        head += 1;
                        tx.put(Table::Outbox, &keys::sequence(head), job)?;
                    }
                }
                tx.put(Table::Meta, HEAD_KEY, &head.to_be_bytes())
            })?;
            if queued.len() < PUBLISH_BATCH {
                return Ok(());
            }
        }
    }

    /// Upserts for every live file of a space, for rebuilding an index.
    pub fn live_files(&self, space: SpaceId, revision: u64) -> Result<Vec<IndexJob>> {
        let current = self.scan_prefix(Table::Current, &space.to_bytes());
        live_files(space, revision, current).collect()
    }

    /// Every space that exists, for a rebuild of a whole index.
    pub fn all_spaces(&self) -> Result<Vec<SpaceRecord>> {
        self.spaces_by_name(None).collect()
    }
}

/// A sequence kept in `meta` (0 when never written).
fn mark(raw: Option<prost::bytes::Bytes>) -> Result<u64> {
    raw.map_or(Ok(0), |raw| parse_sequence(&raw))
}

/// Upserts for the live files among a space's `current` entries.
fn live_files(
    space: SpaceId,
    revision: u64,
    current: impl IntoIterator<Item = Result<(Bytes, Bytes)>>,
) -> impl Iterator<Item = Result<IndexJob>> {
    current.into_iter().filter_map(move |item| {
        let job = || {
            let (key, value) = item?;
            let entry: Entry = decode(&value)?;
            if entry.is_dir() {
                return Ok(None);
            }
            let path = String::from_utf8_lossy(&key[16..]).into_owned();
            let op = IndexOp::Upsert { path, version: entry.version, hash: entry.hash, is_text: entry.is_text };
            let encoding = entry.charset().name();
            Ok(Some(IndexJob { space, revision, node: Some(entry.node), op, queued_ms: now_ms(), encoding }))
        };
        job().transpose()
    })
}
