//! Group commit: one blocking `flush()` covers every writer waiting when it
//! starts, so durable throughput grows with concurrency.
//!
//! A writer commits its transaction, then calls [`Flusher::wait`]. The
//! flusher thread takes the whole queue of waiters, flushes once, and answers
//! them all. A waiter that queues while a flush runs is answered by the next
//! flush, which starts after its commit: an acknowledged write is always on
//! disk. `flush_async` is never used (sled 0.34 can deadlock in it).

use std::sync::{Arc, Condvar, Mutex};
use std::thread;

use tokio::sync::oneshot;

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
    shared: Arc<Shared>,
    thread: Mutex<Option<thread::JoinHandle<()>>>,
}

impl std::fmt::Debug for Flusher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Flusher").field("mode", &self.mode).finish_non_exhaustive()
    }
}

impl Flusher {
    pub fn start(db: sled::Db, mode: Durability) -> std::io::Result<Self> {
        let shared = Arc::new(Shared { queue: Mutex::default(), wake: Condvar::new() });
        let thread = if mode == Durability::Group {
            let (db, shared) = (db.clone(), shared.clone());
            Some(thread::Builder::new().name("store-flusher".into()).spawn(move || run(&db, &shared))?)
        } else {
            None
        };
        Ok(Self { mode, db, shared, thread: Mutex::new(thread) })
    }

    /// Resolves once everything committed before the call is on disk.
    pub async fn wait(&self) -> Result<()> {
        match self.mode {
            Durability::Off => Ok(()),
            Durability::PerWrite => {
                let db = self.db.clone();
                tokio::task::spawn_blocking(move || db.flush().map(drop).map_err(Error::from))
                    .await
                    .map_err(|e| Error::internal(format!("flush task: {e}")))?
            }
            Durability::Group => {
                let (tx, rx) = oneshot::channel();
                {
                    let mut queue = lock(&self.shared.queue);
                    if queue.closed {
                        drop(queue);
                        return self.db.flush().map(drop).map_err(Error::from);
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
        self.db.flush()?;
        Ok(())
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

fn run(db: &sled::Db, shared: &Shared) {
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
        let result = db.flush().map(drop).map_err(Error::from);
        fault_point!("store::after_flush");
        metrics::histogram!("agentvfs_flush_batch_writers").record(batch.len() as f64);
        metrics::histogram!("agentvfs_flush_duration_seconds").record(started.elapsed().as_secs_f64());
        for waiter in batch {
            let _ = waiter.send(result.clone());
        }
    }
}
