//! Group commit: one blocking `flush()` covers every writer waiting when it
//! starts, so durable throughput grows with concurrency.
//!
//! A writer commits its transaction, then calls [`Flusher::wait`]. The
//! flusher thread takes the whole queue of waiters, flushes once, and answers
//! them all. A waiter that queues while a flush runs is answered by the next
//! flush, which starts after its commit: an acknowledged write is always on
//! disk. `flush_async` is never used (sled 0.34 can deadlock in it).
//!
//! A flush that fails trips the engine's [`Latch`]: its waiters, and every
//! waiter after them, get the latched error, and no flush runs again.

use std::sync::{Arc, Condvar, Mutex};
use std::thread;

use tokio::sync::oneshot;

use super::failure::Latch;
use crate::error::{Error, Result};

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
    waiters: Vec<Waiter>,
    closed: bool,
}

struct Shared {
    queue: Mutex<Queue>,
    wake: Condvar,
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
        let shared = Arc::new(Shared { queue: Mutex::default(), wake: Condvar::new() });
        let thread = if mode == Durability::Group {
            let (db, shared, latch) = (db.clone(), shared.clone(), latch.clone());
            Some(thread::Builder::new().name("store-flusher".into()).spawn(move || run(&db, &shared, &latch))?)
        } else {
            None
        };
        Ok(Self { mode, db, latch, shared, thread: Mutex::new(thread) })
    }

    /// Resolves once everything committed before the call is on disk.
    pub async fn wait(&self) -> Result<()> {
        self.latch.check()?;
        match self.mode {
            Durability::Off => Ok(()),
            Durability::PerWrite => {
                let (db, latch) = (self.db.clone(), self.latch.clone());
                tokio::task::spawn_blocking(move || flush_or_trip(&db, &latch))
                    .await
                    .map_err(|e| Error::internal(format!("flush task: {e}")))?
            }
            Durability::Group => {
                let (tx, rx) = oneshot::channel();
                {
                    let mut queue = lock(&self.shared.queue);
                    if queue.closed {
                        drop(queue);
                        return flush_or_trip(&self.db, &self.latch);
                    }
                    queue.waiters.push(tx);
                }
                self.shared.wake.notify_one();
                rx.await.map_err(|_| Error::internal("the flusher stopped before answering"))?
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

fn run(db: &sled::Db, shared: &Shared, latch: &Latch) {
    loop {
        let batch = {
            let mut queue = lock(&shared.queue);
            while queue.waiters.is_empty() && !queue.closed {
                queue = shared.wake.wait(queue).unwrap_or_else(std::sync::PoisonError::into_inner);
            }
            if queue.waiters.is_empty() {
                return;
            }
            std::mem::take(&mut queue.waiters)
        };
        let started = std::time::Instant::now();
        let result = flush_or_trip(db, latch);
        fault_point!("store::after_flush");
        metrics::histogram!("agentvfs_flush_batch_writers").record(batch.len() as f64);
        metrics::histogram!("agentvfs_flush_duration_seconds").record(started.elapsed().as_secs_f64());
        for waiter in batch {
            let _ = waiter.send(result.clone());
        }
    }
}
