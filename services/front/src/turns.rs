//! Changes to one space take turns, on a thread of their own.
//!
//! The store makes the changes of one space one at a time, under a lock
//! stripe. On an embedded store, where a change is all CPU, the spaces of
//! each of [`LINES`] stripes get one thread, started on first use, that runs
//! their changes in the order they arrive. While changes keep coming, that
//! thread goes from one to the next without sleeping; on the blocking pool,
//! each change would wake a thread of its own and hand the turn back through
//! the runtime, and under load those hand-offs took about a quarter of the
//! front's CPU. The group commit sees changes queued here as changes on
//! their way (see `expect_commit` in the store).
//!
//! On a database, a change spends most of its time waiting for round
//! trips, and the next one resolving its target meanwhile is worth more:
//! there, changes take no turn. Lines are keyed by the space as the request
//! names it; the store's lock stays what makes changes safe.

use std::sync::mpsc;
use std::sync::{Mutex, PoisonError};
use std::thread;

use crate::error::{Error, Reason, Result};

/// Threads that run changes, at most; spaces share them by a hash of their
/// name.
const LINES: usize = 64;

/// A change to run on a space's line.
pub type Job = Box<dyn FnOnce() + Send>;

/// Where changes wait for their space's turn; see the module docs.
#[derive(Debug)]
pub struct Turns {
    /// Empty when changes take no turn.
    lines: Box<[Mutex<Line>]>,
}

enum Line {
    /// No change came yet.
    Idle,
    Running {
        jobs: mpsc::Sender<Job>,
        thread: thread::JoinHandle<()>,
    },
    /// The front is stopping.
    Closed,
}

impl std::fmt::Debug for Line {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Line::Idle => "Idle",
            Line::Running { .. } => "Running",
            Line::Closed => "Closed",
        })
    }
}

impl Turns {
    /// Lines for changes, or none (`enabled` false) when changes take no
    /// turn.
    pub fn new(enabled: bool) -> Self {
        let lines = if enabled { LINES } else { 0 };
        Self { lines: (0..lines).map(|_| Mutex::new(Line::Idle)).collect() }
    }

    /// Whether changes take turns (see [`Turns::queue`]).
    pub fn enabled(&self) -> bool {
        !self.lines.is_empty()
    }

    /// Queues `job` behind the changes waiting on `space`'s line. A job
    /// that panics ends alone: the line runs the next. Fails when changes
    /// take no turn or the front is stopping.
    pub fn queue(&self, space: &str, job: Job) -> Result<()> {
        use std::hash::BuildHasher;
        if self.lines.is_empty() {
            return Err(Error::internal("changes take no turn on this front"));
        }
        let hash = std::hash::BuildHasherDefault::<std::hash::DefaultHasher>::default().hash_one(space);
        let at = hash as usize % self.lines.len();
        let mut line = self.lines[at].lock().unwrap_or_else(PoisonError::into_inner);
        if let Line::Idle = *line {
            let (jobs, queued) = mpsc::channel::<Job>();
            let thread = thread::Builder::new()
                .name(format!("store-turns-{at}"))
                .spawn(move || run(&queued))
                .map_err(|e| Error::internal(format!("cannot start a thread for changes: {e}")))?;
            *line = Line::Running { jobs, thread };
        }
        match &*line {
            Line::Running { jobs, .. } => jobs.send(job).map_err(|_| stopping()),
            Line::Idle | Line::Closed => Err(stopping()),
        }
    }

    /// Takes no more changes, lets every line finish what is queued, and
    /// waits for their threads.
    pub fn close(&self) {
        for line in &self.lines {
            let line = std::mem::replace(&mut *line.lock().unwrap_or_else(PoisonError::into_inner), Line::Closed);
            if let Line::Running { jobs, thread } = line {
                drop(jobs);
                // The last holder of the front can be a job on this line.
                if thread.thread().id() != thread::current().id() {
                    let _ = thread.join();
                }
            }
        }
    }
}

impl Drop for Turns {
    fn drop(&mut self) {
        self.close();
    }
}

fn stopping() -> Error {
    Error::new(Reason::ShuttingDown, "The server is shutting down; retry on another instance.")
}

/// Runs a line's jobs until every sender is gone and the queue is empty.
fn run(queued: &mpsc::Receiver<Job>) {
    for job in queued {
        // The job answers its caller itself; one that panics drops its
        // answer, which the caller sees as a failed change.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_line_runs_its_changes_in_order_and_outlives_a_panic() {
        let turns = Turns::new(true);
        let seen = Arc::new(Mutex::new(Vec::new()));
        for n in 0..100 {
            let seen = seen.clone();
            turns.queue("space", Box::new(move || seen.lock().unwrap().push(n))).unwrap();
            if n == 50 {
                turns.queue("space", Box::new(|| panic!("a change that panics"))).unwrap();
            }
        }
        turns.close();
        assert_eq!(*seen.lock().unwrap(), (0..100).collect::<Vec<_>>());
        let refused = turns.queue("space", Box::new(|| {})).unwrap_err();
        assert_eq!(refused.reason, Reason::ShuttingDown);
    }

    #[test]
    fn without_turns_nothing_is_queued() {
        let turns = Turns::new(false);
        assert!(!turns.enabled());
        assert!(turns.queue("space", Box::new(|| {})).is_err());
    }
}
