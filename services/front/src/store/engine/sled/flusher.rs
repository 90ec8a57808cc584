//! Group commit: one blocking `flush()` covers every writer waiting when it
//! starts, so durable throughput grows with concurrency.
//!
//! A writer commits its transaction, counts it ([`Flusher::committed`]),
//! then calls [`Flusher::wait`]. The flusher thread takes the whole queue of
//! waiters, flushes once, and answers them all. A waiter that queues while a
//! flush runs is answered by the next flush, which starts after its commit:
//! an acknowledged write is always on disk. But a flush covers every
//! commit counted when it started, so a waiter whose commits it covers
//! joins the flush that runs, or, once it ended, is answered at once: a
//! follower of the log that waits for the commits it read, behind their
//! writers, costs no flush of its own.
//! `flush_async` is never used (sled 0.34 can deadlock in it).
//!
//! The changes of one space commit one at a time, so flushing as soon as a
//! waiter arrives would cover one writer per flush. So while changes are
//! on their way to a commit ([`Flusher::expect`]), the flusher waits up to
//! [`GATHER`] for them to join the batch; a writer alone is flushed at once.
//!
//! A flush that fails trips the engine's [`Latch`]: its waiters, and every
//! waiter after them, get the latched error, and no flush runs again.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::failure::Latch;
use crate::error::{Error, Result};
use crate::store::engine::Durable;

/// How mutations are made durable before they are acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Durability {
    /// One flush covers every write waiting at that moment (the default).
    #[default]
    Group,
    /// Every write flushes on its own (a baseline for benchmarks).
    PerWrite,
    /// Never wait for a flush: acknowledged writes can be lost on a crash.
    /// Only for benchmarks that measure what durability costs.
    Off,
}

type Waiter = oneshot::Sender<Result<()>>;

#[derive(Default)]
struct Queue {
    /// Waiters for the next flush.
    waiters: Vec<Waiter>,
    /// The flush that runs, if one does.
    running: Option<Running>,
    /// Commits the last flush that succeeded covered.
    flushed: u64,
    closed: bool,
}

/// A flush under way: the commits it covers (those counted when it
/// started) and the waiters who joined it since, their commits among them.
struct Running {
    covers: u64,
    joined: Vec<Waiter>,
}

/// The longest a flush waits for changes on their way to a commit: the
/// latency a write may gain under load, never alone.
const GATHER: Duration = Duration::from_millis(2);

struct Shared {
    queue: Mutex<Queue>,
    wake: Condvar,
    /// Changes on their way to a commit.
    coming: AtomicUsize,
    /// Flushes made by the flusher thread so far.
    flushes: AtomicUsize,
    /// Commits counted so far ([`Flusher::committed`]).
    committed: AtomicU64,
}

/// A change on its way to a commit, counted until it drops.
pub struct Expected(Arc<Shared>);

impl Drop for Expected {
    fn drop(&mut self) {
        if self.0.coming.fetch_sub(1, Ordering::AcqRel) == 1 {
            // Under the lock, so that a flusher about to wait sees it.
            drop(lock(&self.0.queue));
            self.0.wake.notify_one();
        }
    }
}

/// Makes committed writes durable; see the module docs.
pub struct Flusher {
    mode: Durability,
    db: sled::Db,
    latch: Arc<Latch>,
    shared: Arc<Shared>,
    thread: Mutex<Option<thread::JoinHandle<()>>>,
}

impl std::fmt::Debug for Flusher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Flusher").field("mode", &self.mode).finish_non_exhaustive()
    }
}

impl Flusher {
    pub fn start(db: sled::Db, mode: Durability, latch: Arc<Latch>) -> std::io::Result<Self> {
        Self::gathering_for(db, mode, latch, GATHER)
    }

    /// [`Flusher::start`] with another longest wait for changes on their
    /// way than [`GATHER`].
    fn gathering_for(db: sled::Db, mode: Durability, latch: Arc<Latch>, gather: Duration) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            queue: Mutex::default(),
            wake: Condvar::new(),
            coming: AtomicUsize::new(0),
            flushes: AtomicUsize::new(0),
            committed: AtomicU64::new(0),
        });
        let thread = if mode == Durability::Group {
            let (db, shared, latch) = (db.clone(), shared.clone(), latch.clone());
            let run = move || run(&db, &shared, &latch, gather);
            Some(thread::Builder::new().name("store-flusher".into()).spawn(run)?)
        } else {
            None
        };
        Ok(Self { mode, db, latch, shared, thread: Mutex::new(thread) })
    }

    /// Counts a change on its way to a commit until the value drops.
    pub fn expect(&self) -> Expected {
        self.shared.coming.fetch_add(1, Ordering::AcqRel);
        Expected(self.shared.clone())
    }

    /// Counts a commit, once its writes are in sled: a flush that starts
    /// after it covers it.
    pub fn committed(&self) {
        self.shared.committed.fetch_add(1, Ordering::AcqRel);
    }

    /// Resolves once everything committed before the call is on disk. The
    /// call queues the waiter; the future only waits for its answer.
    pub fn wait(&self) -> Durable {
        if let Err(error) = self.latch.check() {
            return Box::pin(std::future::ready(Err(error)));
        }
        match self.mode {
            Durability::Off => Box::pin(std::future::ready(Ok(()))),
            Durability::PerWrite => {
                let (db, latch) = (self.db.clone(), self.latch.clone());
                Box::pin(async move {
                    tokio::task::spawn_blocking(move || flush_or_trip(&db, &latch))
                        .await
                        .map_err(|e| Error::internal(format!("flush task: {e}")))?
                })
            }
            Durability::Group => {
                // The commits to cover: those counted before the call.
                let committed = self.shared.committed.load(Ordering::Acquire);
                let (tx, rx) = oneshot::channel();
                let first = {
                    let mut queue = lock(&self.shared.queue);
                    if queue.closed {
                        drop(queue);
                        return Box::pin(std::future::ready(flush_or_trip(&self.db, &self.latch)));
                    }
                    if queue.flushed >= committed {
                        return Box::pin(std::future::ready(Ok(())));
                    }
                    match &mut queue.running {
                        Some(running) if running.covers >= committed => {
                            running.joined.push(tx);
                            false
                        }
                        _ => {
                            queue.waiters.push(tx);
                            queue.waiters.len() == 1
                        }
                    }
                };
                // A flusher gathering a batch needs no wake-up per waiter.
                if first {
                    self.shared.wake.notify_one();
                }
                Box::pin(async move { rx.await.map_err(|_| Error::internal("the flusher stopped before answering"))? })
            }
        }
    }

    /// Flushes what is left and stops the thread.
    pub fn shutdown(&self) -> Result<()> {
        lock(&self.shared.queue).closed = true;
        self.shared.wake.notify_one();
        if let Some(thread) = lock(&self.thread).take() {
            let _ = thread.join();
        }
        flush_or_trip(&self.db, &self.latch)
    }
}

impl Drop for Flusher {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Flushes sled. Every flush of the engine goes through here, so the
/// `store::flush` fault point (a `return` action) fails any of them as an
/// I/O error would.
pub fn flush(db: &sled::Db) -> sled::Result<()> {
    #[cfg(feature = "failpoints")]
    fail::fail_point!("store::flush", |_| {
        Err(sled::Error::Io(std::io::Error::other("failed by the store::flush fault point")))
    });
    db.flush().map(drop)
}

/// Flushes unless the store failed before; a failed flush trips `latch`.
pub fn flush_or_trip(db: &sled::Db, latch: &Latch) -> Result<()> {
    latch.check()?;
    flush(db).map_err(|error| latch.trip(format_args!("flush: {error}")))
}

fn run(db: &sled::Db, shared: &Shared, latch: &Latch, gather: Duration) {
    loop {
        let (batch, covers) = {
            let mut queue = lock(&shared.queue);
            while queue.waiters.is_empty() && !queue.closed {
                queue = shared.wake.wait(queue).unwrap_or_else(std::sync::PoisonError::into_inner);
            }
            if queue.waiters.is_empty() {
                return;
            }
            let deadline = Instant::now() + gather;
            while shared.coming.load(Ordering::Acquire) > 0 && !queue.closed {
                let Some(left) = deadline.checked_duration_since(Instant::now()).filter(|d| !d.is_zero()) else {
                    break;
                };
                queue = shared.wake.wait_timeout(queue, left).unwrap_or_else(std::sync::PoisonError::into_inner).0;
            }
            // Read under the lock, so that a waiter that finds the flush
            // covering its commits finds it before it ends.
            let covers = shared.committed.load(Ordering::Acquire);
            queue.running = Some(Running { covers, joined: Vec::new() });
            (std::mem::take(&mut queue.waiters), covers)
        };
        let started = std::time::Instant::now();
        let result = flush_or_trip(db, latch);
        let joined = {
            let mut queue = lock(&shared.queue);
            if result.is_ok() {
                queue.flushed = queue.flushed.max(covers);
            }
            queue.running.take().map_or_else(Vec::new, |running| running.joined)
        };
        shared.flushes.fetch_add(1, Ordering::Relaxed);
        fault_point!("store::after_flush");
        metrics::histogram!("agentvfs_flush_batch_writers").record((batch.len() + joined.len()) as f64);
        metrics::histogram!("agentvfs_flush_duration_seconds").record(started.elapsed().as_secs_f64());
        for waiter in batch.into_iter().chain(joined) {
            let _ = waiter.send(result.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn flusher(dir: &tempfile::TempDir, gather: Duration) -> (sled::Db, Flusher) {
        let db = sled::Config::new().path(dir.path()).open().unwrap();
        let flusher = Flusher::gathering_for(db.clone(), Durability::Group, Arc::default(), gather).unwrap();
        (db, flusher)
    }

    fn flushes(flusher: &Flusher) -> usize {
        flusher.shared.flushes.load(Ordering::Relaxed)
    }

    /// While a change is on its way to a commit, the flush for the writers
    /// before it waits, and then one flush answers them and the change.
    #[tokio::test]
    async fn a_flush_waits_for_the_change_on_its_way_and_covers_it() {
        let dir = tempfile::tempdir().unwrap();
        let (db, flusher) = flusher(&dir, Duration::from_secs(60));
        let coming = flusher.expect();
        db.insert("first", "committed").unwrap();
        flusher.committed();
        let first = tokio::spawn(flusher.wait());
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(flushes(&flusher), 0, "no flush while a change is on its way");
        assert!(!first.is_finished());

        db.insert("second", "committed").unwrap();
        flusher.committed();
        let second = flusher.wait();
        drop(coming);
        second.await.unwrap();
        first.await.unwrap().unwrap();
        assert_eq!(flushes(&flusher), 1, "one flush answers both");
    }

    /// A writer with no change on its way behind it is flushed at once, and
    /// a change that waits longer than the gathering does not hold it.
    #[tokio::test]
    async fn a_writer_alone_is_flushed_at_once_and_a_slow_change_is_not_waited_for() {
        let dir = tempfile::tempdir().unwrap();
        let (db, flusher) = flusher(&dir, Duration::from_millis(50));
        db.insert("alone", "committed").unwrap();
        flusher.committed();
        flusher.wait().await.unwrap();
        assert_eq!(flushes(&flusher), 1);

        let _slow = flusher.expect();
        db.insert("before the slow one", "committed").unwrap();
        flusher.committed();
        flusher.wait().await.unwrap();
        assert_eq!(flushes(&flusher), 2);
    }

    /// A waiter whose commits a flush that ended already covered is
    /// answered without another flush; a commit after it needs one.
    #[tokio::test]
    async fn a_waiter_covered_by_a_flush_that_ended_needs_no_flush_of_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let (db, flusher) = flusher(&dir, GATHER);
        db.insert("written", "committed").unwrap();
        flusher.committed();
        flusher.wait().await.unwrap();
        assert_eq!(flushes(&flusher), 1);

        // A follower that read the commit waits for it after its writer.
        flusher.wait().await.unwrap();
        assert_eq!(flushes(&flusher), 1, "the first flush covers the commit");

        db.insert("later", "committed").unwrap();
        flusher.committed();
        flusher.wait().await.unwrap();
        assert_eq!(flushes(&flusher), 2, "a commit after the flush needs the next");
    }
}
