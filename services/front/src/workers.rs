//! The front's side of the worker contract: a bounded job queue and the
//! pool of workers jobs are spread over.
//!
//! Jobs wait for a slot in a bounded queue; when it is full a call fails at
//! once with OVERLOADED instead of piling up. A job goes to the next worker in
//! turn; one that cannot be reached is skipped for the next. When none
//! answers, the call fails with WORKER_UNAVAILABLE; nothing else depends on
//! the workers. Which workers there are can change while the front runs
//! ([`crate::discovery`]): each call works on the pool as it was when the
//! call began.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use agentvfs_proto::v1 as pb;
use agentvfs_proto::v1::worker_client::WorkerClient;
use tokio::sync::{Semaphore, watch};
use tonic::Code;
use tonic::transport::{Channel, Endpoint};
use tonic_types::StatusExt;

use crate::error::{Error, Reason, Result};

/// How long a caller is told to wait before retrying an overloaded queue.
const RETRY_AFTER: Duration = Duration::from_millis(250);
/// Largest message either side of a worker call may send.
const MESSAGE_BYTES: usize = 16 << 20;

/// Who a grep job runs for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Priority {
    /// A caller waiting for it: waits in the queue, or fails with OVERLOADED.
    Request,
    /// A read-ahead: runs only on a spare slot (one that leaves another
    /// free), and never waits.
    ReadAhead,
}

/// One worker: its address and a client on a lazily connected channel.
#[derive(Debug, Clone)]
pub struct Worker {
    pub address: SocketAddr,
    pub client: WorkerClient<Channel>,
}

impl Worker {
    fn connect_lazily(address: SocketAddr) -> Self {
        let channel = Endpoint::from_shared(format!("http://{address}"))
            .expect("a socket address is a valid URI authority")
            .tcp_nodelay(true)
            .connect_timeout(Duration::from_secs(2))
            .connect_lazy();
        let client = WorkerClient::new(channel)
            .max_decoding_message_size(MESSAGE_BYTES)
            .max_encoding_message_size(MESSAGE_BYTES);
        Self { address, client }
    }
}

/// The workers known now, in address order.
pub type Pool = Arc<[Worker]>;

/// Workers and the queue in front of them.
#[derive(Debug)]
pub struct Workers {
    pool: watch::Sender<Pool>,
    next: AtomicUsize,
    running: Semaphore,
    waiting: AtomicUsize,
    max_waiting: usize,
}

impl Workers {
    /// An empty pool (see [`Workers::set_addresses`]); `concurrency` jobs run
    /// at once and `queue` more may wait.
    pub fn new(concurrency: usize, queue: usize) -> Self {
        Self {
            pool: watch::Sender::new(Pool::from(Vec::new())),
            next: AtomicUsize::new(0),
            running: Semaphore::new(concurrency.max(1)),
            waiting: AtomicUsize::new(0),
            max_waiting: queue,
        }
    }

    /// Makes `addresses` the pool. Workers already in it keep their
    /// channels; new ones connect on first use, so the front never waits
    /// for a worker to come up.
    pub fn set_addresses(&self, mut addresses: Vec<SocketAddr>) {
        addresses.sort_unstable();
        addresses.dedup();
        self.pool.send_if_modified(|pool| {
            if pool.iter().map(|w| w.address).eq(addresses.iter().copied()) {
                return false;
            }
            let old = std::mem::replace(pool, Pool::from(Vec::new()));
            *pool = addresses
                .iter()
                .map(|&address| match old.iter().find(|w| w.address == address) {
                    Some(known) => known.clone(),
                    None => Worker::connect_lazily(address),
                })
                .collect();
            tracing::info!(workers = ?addresses, "worker pool changed");
            true
        });
        metrics::gauge!("agentvfs_workers").set(addresses.len() as f64);
    }

    /// The workers known now.
    pub fn pool(&self) -> Pool {
        self.pool.borrow().clone()
    }

    /// The pool now and every later change of it.
    pub fn subscribe(&self) -> watch::Receiver<Pool> {
        self.pool.subscribe()
    }

    /// The workers in turn, starting with the next one for calls any worker
    /// can answer; those `preferred` come first.
    pub fn in_turn(&self, preferred: impl Fn(SocketAddr) -> bool) -> Vec<Worker> {
        let pool = self.pool();
        if pool.is_empty() {
            return Vec::new();
        }
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        let mut turn: Vec<Worker> = (0..pool.len()).map(|i| pool[(start + i) % pool.len()].clone()).collect();
        turn.sort_by_key(|w| !preferred(w.address));
        turn
    }

    /// Jobs waiting for a slot now.
    pub fn queue_depth(&self) -> usize {
        self.waiting.load(Ordering::Relaxed)
    }

    /// Whether a read-ahead job would find a spare slot now.
    pub fn has_spare(&self) -> bool {
        !self.pool.borrow().is_empty() && self.running.available_permits() >= 2
    }

    /// Runs one grep job on some worker, within `deadline` if given.
    pub async fn grep(
        &self,
        mut job: pb::GrepJob,
        deadline: Option<Duration>,
        request_id: Option<&str>,
        priority: Priority,
    ) -> Result<pb::GrepJobResult> {
        if self.pool.borrow().is_empty() {
            return Err(unavailable("No worker is known to this server."));
        }
        let _permit = match self.running.try_acquire() {
            Ok(permit) if priority == Priority::Request || self.running.available_permits() > 0 => permit,
            Ok(_) => return Err(Error::new(Reason::Overloaded, "No worker slot is spare for reading ahead.")),
            Err(_) if priority == Priority::ReadAhead => {
                return Err(Error::new(Reason::Overloaded, "No worker slot is spare for reading ahead."));
            }
            Err(_) => {
                if self.waiting.fetch_add(1, Ordering::AcqRel) >= self.max_waiting {
                    self.waiting.fetch_sub(1, Ordering::AcqRel);
                    return Err(Error::new(Reason::Overloaded, "Too many searches are waiting; retry shortly.")
                        .with("queueDepth", self.max_waiting)
                        .retry_after(RETRY_AFTER));
                }
                let permit = self.running.acquire().await;
                self.waiting.fetch_sub(1, Ordering::AcqRel);
                permit.map_err(|_| unavailable("The job queue is closed."))?
            }
        };

        let began = std::time::Instant::now();
        let out_of_time = || deadline.is_some_and(|deadline| began.elapsed() >= deadline);
        let mut last_failure = String::new();
        let workers = self.in_turn(|_| true);
        let last = workers.len().saturating_sub(1);
        for (i, Worker { address, mut client }) in workers.into_iter().enumerate() {
            // A job names up to a page of files: cloned only for a failover.
            let message = if i == last { std::mem::take(&mut job) } else { job.clone() };
            let mut request = tonic::Request::new(message);
            if let Some(deadline) = deadline {
                request.set_timeout(deadline);
            }
            if let Some(value) = request_id.and_then(|id| id.parse().ok()) {
                request.metadata_mut().insert(crate::metrics::REQUEST_ID, value);
            }
            match client.run_grep(request).await {
                Ok(response) => return Ok(response.into_inner()),
                Err(status) if status.code() == Code::InvalidArgument => return Err(forwarded(&status)),
                Err(status) if status.code() == Code::DeadlineExceeded => return Err(deadline_passed()),
                // A connection to a worker that just died also ends as
                // CANCELLED: only the caller's deadline stops the failover.
                Err(status) if status.code() == Code::Cancelled && out_of_time() => return Err(deadline_passed()),
                Err(status) => {
                    tracing::warn!(worker = %address, code = ?status.code(), message = status.message(), "worker failed a job");
                    last_failure = status.message().to_owned();
                }
            }
        }
        Err(unavailable("No worker could run the search.").with("detail", last_failure))
    }
}

/// A search that did not finish within its caller's deadline.
pub fn deadline_passed() -> Error {
    unavailable("The search did not finish before the call's deadline.")
        .next_action("Retry with a longer deadline, or narrow the search with path, glob or type.")
}

fn unavailable(message: &str) -> Error {
    Error::new(Reason::WorkerUnavailable, message).retry_after(Duration::from_secs(1))
}

/// A worker's refusal (a pattern that does not compile within bounds).
fn forwarded(status: &tonic::Status) -> Error {
    let reason = match status.get_details_error_info().map(|info| info.reason) {
        Some(reason) if reason == "INVALID_PATTERN" => Reason::InvalidPattern,
        _ => Reason::InvalidArgument,
    };
    Error::new(reason, status.message().to_owned()).field("pattern")
}
