//! Writes to one space that arrive together, committed together.
//!
//! A space's changes take turns under its lock stripe, and each commit
//! costs a few round trips to a database. So a write queues itself, and one
//! writer at a time leads its stripe's queue: under the lock, it plans every
//! write queued for its space, each on top of the one before, and commits
//! them in one transaction: the same revisions, in the same order, as had
//! they taken turns, for the round trips of one. The writers it answered
//! return as soon as it is done; one of the others leads next.
//!
//! Only whole-file writes of distinct paths go together: an append reads the
//! content it extends, which a write planned just before it would not have
//! stored yet. A group that another front's commit made stale is planned
//! again; when its transaction fails otherwise (a lease refused one of the
//! commits, say), each write is planned and committed again on its own, as
//! it would have been alone.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Condvar, Mutex, PoisonError};

use super::Store;
use super::commit::Commit;
use super::leases;
use super::records::Entry;
use super::write::{Body, Planned, WriteMode, WriteOp, WriteOutcome};
use crate::error::{Error, Result};
use crate::ids::SpaceId;
use crate::path::SpacePath;

/// Most writes one transaction commits.
const MAX_GROUP: usize = 64;

/// A write waiting for its space's lock; see the module docs.
#[derive(Debug)]
pub(super) struct Queued {
    space: SpaceId,
    path: SpacePath,
    /// The leases the call carries (see [`leases::carrying`]): the writer
    /// that commits it may be another call's thread.
    carried: Vec<String>,
    /// Taken by the writer that commits it.
    write: Mutex<Option<(WriteOp, Body)>>,
    outcome: Mutex<Option<Result<WriteOutcome>>>,
}

/// The writes queued on one lock stripe, and whether a writer leads them:
/// holds the stripe, or is about to.
#[derive(Debug, Default)]
pub(super) struct Queue {
    waiting: Mutex<Waiting>,
    /// Signalled when a leader is done: the writes it answered return, and
    /// one of the others leads next.
    done: Condvar,
}

#[derive(Debug, Default)]
struct Waiting {
    /// Oldest first.
    writes: Vec<Arc<Queued>>,
    led: bool,
}

/// The lead of a stripe's queue, handed on when it drops (a panic too).
struct Lead<'a>(&'a Queue);

impl Drop for Lead<'_> {
    fn drop(&mut self) {
        lock(&self.0.waiting).led = false;
        self.0.done.notify_all();
    }
}

/// Whether a write may go in a group (see the module docs).
pub(super) fn groups(op: &WriteOp, body: &Body) -> bool {
    op.mode != WriteMode::Append && !matches!(body, Body::Uploaded { .. })
}

impl Store {
    /// Queues a write and returns its outcome: committed by this thread,
    /// with the writes queued beside it, or by the thread that led before.
    /// A writer waits for its outcome or for the lead, not for the stripe:
    /// one whose write was committed returns without another turn.
    pub(super) fn write_grouped(&self, op: WriteOp, body: Body) -> Result<WriteOutcome> {
        let queued = Arc::new(Queued {
            space: op.space,
            path: op.path.clone(),
            carried: leases::carried(),
            write: Mutex::new(Some((op, body))),
            outcome: Mutex::new(None),
        });
        let queue = &self.inner.queued[Self::stripe(queued.space)];
        let mut waiting = lock(&queue.waiting);
        waiting.writes.push(queued.clone());
        loop {
            if let Some(outcome) = take(&queued.outcome) {
                return outcome;
            }
            if !waiting.led {
                break;
            }
            waiting = queue.done.wait(waiting).unwrap_or_else(PoisonError::into_inner);
        }
        waiting.led = true;
        drop(waiting);
        let lead = Lead(queue);
        {
            let _guard = self.lock_space(queued.space);
            // A group leaves out a second write of a path, and writes past
            // the most it takes: this write may be in a later one.
            while lock(&queued.outcome).is_none() {
                let group = take_group(queue, queued.space);
                if group.is_empty() {
                    break;
                }
                self.commit_group(&group);
            }
        }
        drop(lead);
        // Unanswered only when a leader before panicked with it taken.
        take(&queued.outcome).unwrap_or_else(|| Err(Error::internal("a queued write was not answered")))
    }

    /// Plans every write of `group` in order and commits them together, or
    /// each alone when that fails; answers each.
    fn commit_group(&self, group: &[Arc<Queued>]) {
        let writes: Vec<(&Queued, (WriteOp, Body))> =
            group.iter().filter_map(|queued| take(&queued.write).map(|write| (&**queued, write))).collect();
        if let [(queued, (op, body))] = writes.as_slice() {
            let outcome = self.write_alone(queued, op, body);
            answer(queued, outcome);
            return;
        }
        // A group that another front's commit made stale is planned again
        // as a write alone would be: holding the space's gate.
        match self.replanning(&[writes[0].0.space], || self.plan_group(&writes)) {
            Ok(outcomes) => {
                for ((queued, _), outcome) in writes.iter().zip(outcomes) {
                    answer(queued, outcome);
                }
            }
            Err(error) => {
                tracing::debug!(%error, writes = writes.len(), "a group of writes is committed one by one");
                for (queued, (op, body)) in &writes {
                    answer(queued, self.write_alone(queued, op, body));
                }
            }
        }
    }

    /// A write planned and committed on its own, as if it had not queued.
    fn write_alone(&self, queued: &Queued, op: &WriteOp, body: &Body) -> Result<WriteOutcome> {
        leases::carrying(&queued.carried, || self.replanning(&[op.space], || self.write_once(op, body)))
    }

    /// Plans the writes of one space in order, each on the state the ones
    /// before leave, and commits those that change anything in one
    /// transaction. Fails when that transaction does; otherwise returns each
    /// write's outcome (a write refused by its plan is refused here too).
    fn plan_group(&self, writes: &[(&Queued, (WriteOp, Body))]) -> Result<Vec<Result<WriteOutcome>>> {
        let space = writes[0].0.space;
        let lookups: BTreeSet<SpacePath> = writes.iter().flat_map(|(_, (op, _))| write_paths(&op.path)).collect();
        let lookups: Vec<SpacePath> = lookups.into_iter().collect();
        let (mut record, states) =
            self.space_with_entries(space, &lookups)?.ok_or_else(|| Error::space_not_found(&space.to_string()))?;
        let mut latest: HashMap<SpacePath, Option<Entry>> = lookups.into_iter().zip(states).collect();
        let mut commits: Vec<Commit> = Vec::new();
        let mut outcomes = Vec::with_capacity(writes.len());
        for (queued, (op, body)) in writes {
            let paths = write_paths(&op.path);
            let states = paths.iter().map(|path| latest.get(path).cloned().flatten()).collect();
            let planned =
                leases::carrying(&queued.carried, || self.plan_write(op, body, record.clone(), &paths, states));
            match planned {
                Ok(Planned::Unchanged(outcome)) => outcomes.push(Ok(outcome)),
                Ok(Planned::Commit(commit, outcome)) => {
                    for (path, entry) in commit.planned_entries() {
                        latest.insert(path.clone(), entry.clone());
                    }
                    // The space as this commit leaves it, revision included.
                    record = commit.space.clone();
                    commits.push(*commit);
                    outcomes.push(Ok(outcome));
                }
                Err(error) => outcomes.push(Err(error)),
            }
        }
        if !commits.is_empty() {
            self.apply_all(&commits.iter().collect::<Vec<_>>())?;
        }
        Ok(outcomes)
    }
}

/// The paths a write to `path` reads: its folders, then itself.
pub(super) fn write_paths(path: &SpacePath) -> Vec<SpacePath> {
    let mut paths = path.ancestors();
    paths.push(path.clone());
    paths
}

/// Takes the oldest writes queued for `space`, of distinct paths.
fn take_group(queue: &Queue, space: SpaceId) -> Vec<Arc<Queued>> {
    let mut waiting = lock(&queue.waiting);
    let mut paths = HashSet::new();
    let mut group = Vec::new();
    waiting.writes.retain(|queued| {
        let taken = group.len() < MAX_GROUP && queued.space == space && paths.insert(queued.path.clone());
        if taken {
            group.push(queued.clone());
        }
        !taken
    });
    group
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn take<T>(slot: &Mutex<Option<T>>) -> Option<T> {
    lock(slot).take()
}

fn answer(queued: &Queued, outcome: Result<WriteOutcome>) {
    *lock(&queued.outcome) = Some(outcome);
}
