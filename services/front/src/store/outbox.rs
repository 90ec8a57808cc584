//! The index outbox: jobs written with the changes they describe, read by
//! the delivery task, removed once every worker has them.

use sled::transaction::ConflictableTransactionError;

use super::Store;
use super::records::{Entry, IndexJob, IndexOp, SpaceRecord, decode, encode};
use crate::error::{Error, Result};
use crate::ids::SpaceId;

/// Where the mark of [`Store::outbox_pruned`] is kept, in sled's default tree.
const PRUNED_KEY: &[u8] = b"outbox.pruned";

impl Store {
    /// Up to `limit` jobs after sequence `after`, in order.
    pub fn outbox_after(&self, after: u64, limit: usize) -> Result<Vec<(u64, IndexJob)>> {
        let start = (after + 1).to_be_bytes();
        let mut out = Vec::new();
        for item in self.trees().outbox.range(start..).take(limit) {
            let (key, value) = item?;
            out.push((sequence_of(&key)?, decode(&value)?));
        }
        Ok(out)
    }

    /// Seconds since the oldest job after `acked` was queued (0 when none waits).
    pub fn outbox_lag_seconds(&self, acked: u64) -> Result<f64> {
        Ok(match self.outbox_after(acked, 1)?.first() {
            Some((_, job)) => (super::records::now_ms() - job.queued_ms).max(0) as f64 / 1000.0,
            None => 0.0,
        })
    }

    /// The first and last sequence in the outbox.
    pub fn outbox_bounds(&self) -> Result<Option<(u64, u64)>> {
        let t = &self.trees().outbox;
        match (t.first()?, t.last()?) {
            (Some((first, _)), Some((last, _))) => Ok(Some((sequence_of(&first)?, sequence_of(&last)?))),
            _ => Ok(None),
        }
    }

    /// The highest sequence ever handed out (0 before the first job): the
    /// last job, or the pruning mark when pruning emptied the outbox. The
    /// bounds are read first: pruning marks its position before removing
    /// jobs, so an outbox found empty has its last sequence in the mark.
    pub fn outbox_head(&self) -> Result<u64> {
        let last = self.outbox_bounds()?.map_or(0, |(_, last)| last);
        Ok(last.max(self.outbox_pruned()?))
    }

    /// Removes jobs up to and including `upto`.
    pub fn prune_outbox(&self, upto: u64) -> Result<usize> {
        let t = &self.trees().outbox;
        if upto > self.outbox_pruned()? {
            // Before the jobs go: sled recovers a prefix of its writes, so
            // no job is ever gone without the mark that says so.
            self.inner.db.insert(PRUNED_KEY, &upto.to_be_bytes())?;
        }
        let mut removed = 0;
        for item in t.range(..=upto.to_be_bytes()) {
            t.remove(item?.0)?;
            removed += 1;
        }
        Ok(removed)
    }

    /// The highest sequence pruning has passed: a worker whose index is
    /// older may have missed jobs that are gone and must be rebuilt.
    pub fn outbox_pruned(&self) -> Result<u64> {
        Ok(match self.inner.db.get(PRUNED_KEY)? {
            Some(value) => sequence_of(&value)?,
            None => 0,
        })
    }

    /// Queues a rebuild of one space's index: drop it, then every live file.
    /// Returns the jobs queued.
    pub fn enqueue_reindex(&self, space: SpaceId) -> Result<usize> {
        // Under the space's lock, so no change of the space can slip between
        // reading its files and queueing them.
        let _guard = self.lock_space(space);
        let record: SpaceRecord = self.space(space)?.ok_or_else(|| Error::space_not_found(&space.to_string()))?;
        let now = super::records::now_ms();
        let mut jobs =
            vec![IndexJob { space, revision: record.revision, node: None, op: IndexOp::DropSpace, queued_ms: now }];
        jobs.extend(self.live_files(space, record.revision)?);
        let encoded: Vec<Vec<u8>> = jobs.iter().map(encode).collect();
        // Sequences are taken inside the transaction that inserts them: sled
        // runs transactions one at a time, so a job with a lower sequence is
        // never inserted after one with a higher sequence, which delivery
        // may already have passed.
        self.trees().outbox.transaction(|outbox| {
            for job in &encoded {
                let sequence = outbox.generate_id()? + 1;
                outbox.insert(&sequence.to_be_bytes(), job.as_slice())?;
            }
            Ok::<_, ConflictableTransactionError<Error>>(())
        })?;
        self.inner.commits.send_modify(|count| *count += 1);
        Ok(jobs.len())
    }

    /// Upserts for every live file of a space, for rebuilding an index.
    pub fn live_files(&self, space: SpaceId, revision: u64) -> Result<Vec<IndexJob>> {
        let mut jobs = Vec::new();
        for item in self.trees().current.scan_prefix(space.to_bytes()) {
            let (key, value) = item?;
            let entry: Entry = decode(&value)?;
            if entry.is_dir() {
                continue;
            }
            let path = String::from_utf8_lossy(&key[16..]).into_owned();
            let op = IndexOp::Upsert { path, version: entry.version, hash: entry.hash, is_text: entry.is_text };
            jobs.push(IndexJob { space, revision, node: Some(entry.node), op, queued_ms: super::records::now_ms() });
        }
        Ok(jobs)
    }

    /// Every space that exists, for a rebuild of a whole index.
    pub fn all_spaces(&self) -> Result<Vec<SpaceRecord>> {
        self.spaces_by_name(None).collect()
    }
}

fn sequence_of(key: &[u8]) -> Result<u64> {
    Ok(u64::from_be_bytes(key.try_into().map_err(|_| Error::internal("malformed outbox key"))?))
}
