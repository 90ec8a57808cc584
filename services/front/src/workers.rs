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

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

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

    /// Runs one grep job on some worker, within `deadline` if given. A
    /// reply that `check` refuses counts as that worker's failure.
    pub async fn grep(
        &self,
        job: pb::GrepJob,
        deadline: Option<Duration>,
        request_id: Option<&str>,
        priority: Priority,
        check: impl Fn(&pb::GrepJobResult) -> std::result::Result<(), String>,
    ) -> Result<pb::GrepJobResult> {
        let until = deadline.map(|deadline| Instant::now() + deadline);
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
                let permit = within(until, self.running.acquire()).await;
                self.waiting.fetch_sub(1, Ordering::AcqRel);
                permit?.map_err(|_| unavailable("The job queue is closed."))?
            }
        };
        let check = &check;
        self.failover(
            |_| true,
            job,
            until,
            request_id,
            |mut client, request| async move {
                let reply = client.run_grep(request).await?.into_inner();
                check(&reply).map_err(Failure::Malformed)?;
                Ok(reply)
            },
        )
        .await
    }

    /// Sends `message` to the workers in turn (those `preferred` first)
    /// through `call` until one answers, within `until` if given. The one
    /// failover rule of every worker call:
    ///
    /// - an answer (that `call` found well formed) is the result;
    /// - a worker's refusal of the request (INVALID_ARGUMENT, such as an
    ///   INVALID_PATTERN) is the caller's error, forwarded with its reason;
    /// - DEADLINE_EXCEEDED, or running out of time, ends the failover;
    /// - anything else (unreachable, failing, or a malformed reply) moves on
    ///   to the next worker;
    /// - when none is left, WORKER_UNAVAILABLE with RetryInfo, naming the
    ///   last failure.
    ///
    /// Each attempt carries the time left as its `grpc-timeout` and the
    /// caller's request ID.
    pub async fn failover<M, T, F, Fut>(
        &self,
        preferred: impl Fn(SocketAddr) -> bool,
        message: M,
        until: Option<Instant>,
        request_id: Option<&str>,
        mut call: F,
    ) -> Result<T>
    where
        M: Clone,
        F: FnMut(WorkerClient<Channel>, tonic::Request<M>) -> Fut,
        Fut: Future<Output = std::result::Result<T, Failure>>,
    {
        let workers = self.in_turn(preferred);
        if workers.is_empty() {
            return Err(unavailable("No worker is known to this server."));
        }
        let out_of_time = || until.is_some_and(|until| Instant::now() >= until);
        let mut last_failure = None;
        let last = workers.len() - 1;
        let mut message = Some(message);
        for (i, Worker { address, client }) in workers.into_iter().enumerate() {
            // A job names up to a page of files: cloned only for a failover.
            let Some(body) = (if i == last { message.take() } else { message.clone() }) else { break };
            let mut request = tonic::Request::new(body);
            let left = until.map(|until| until.saturating_duration_since(Instant::now()));
            if let Some(left) = left {
                if left.is_zero() {
                    return Err(deadline_passed());
                }
                request.set_timeout(left);
            }
            if let Some(value) = request_id.and_then(|id| id.parse().ok()) {
                request.metadata_mut().insert(crate::auth::REQUEST_ID, value);
            }
            let failure = match within(until, call(client, request)).await? {
                Ok(answer) => return Ok(answer),
                Err(failure) => failure,
            };
            match failure.verdict(out_of_time()) {
                Verdict::Forward(error) => return Err(error),
                Verdict::OutOfTime => return Err(deadline_passed()),
                Verdict::TryNext => {
                    tracing::warn!(worker = %address, failure = %failure, "worker failed a call");
                    last_failure = Some(failure);
                }
            }
        }
        Err(match last_failure {
            Some(failure) => failure.describe(),
            None => unavailable("No worker could run the search."),
        })
    }
}

/// Waits for `work` until `until`, if given; past it, the call's deadline
/// has passed.
async fn within<T>(until: Option<Instant>, work: impl Future<Output = T>) -> Result<T> {
    match until {
        Some(until) => tokio::time::timeout_at(until.into(), work).await.map_err(|_| deadline_passed()),
        None => Ok(work.await),
    }
}

/// Why one worker gave no usable answer.
#[derive(Debug)]
pub enum Failure {
    /// The call failed with this status.
    Status(tonic::Status),
    /// The worker answered, but its reply breaks the contract (and is not used).
    Malformed(String),
}

impl From<tonic::Status> for Failure {
    fn from(status: tonic::Status) -> Self {
        Failure::Status(status)
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Status(status) => write!(f, "{:?}: {}", status.code(), status.message()),
            Failure::Malformed(why) => write!(f, "malformed reply: {why}"),
        }
    }
}

/// What a failover does after a worker's failure.
#[derive(Debug)]
enum Verdict {
    /// The caller's own error: return it.
    Forward(Error),
    OutOfTime,
    TryNext,
}

impl Failure {
    fn verdict(&self, out_of_time: bool) -> Verdict {
        let Failure::Status(status) = self else { return Verdict::TryNext };
        match status.code() {
            Code::InvalidArgument => Verdict::Forward(refused(status)),
            Code::DeadlineExceeded => Verdict::OutOfTime,
            // A connection to a worker that just died also ends as
            // CANCELLED: only the caller's deadline stops the failover.
            Code::Cancelled if out_of_time => Verdict::OutOfTime,
            _ => Verdict::TryNext,
        }
    }

    /// WORKER_UNAVAILABLE, naming this last failure: the worker's message
    /// and, when it gave one, its cause (such as the front refusing the
    /// worker's credentials).
    fn describe(self) -> Error {
        let detail = match &self {
            Failure::Malformed(why) => format!("a worker's reply was malformed: {why}"),
            Failure::Status(status) => status.message().to_owned(),
        };
        let error = unavailable(&format!("No worker could run the search; the last one failed: {detail}"))
            .with("detail", detail);
        let Failure::Status(status) = self else { return error };
        let info = status.get_details_error_info().filter(|info| info.domain == agentvfs_proto::ERROR_DOMAIN);
        match info.as_ref().and_then(|info| info.metadata.get("cause")) {
            Some(cause) => error.with("cause", cause),
            None => error,
        }
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

/// A worker's refusal of the request (such as a pattern that does not
/// compile within bounds), with the reason its `ErrorInfo` gives when that
/// is a reason for a refused argument, and the field it names.
fn refused(status: &tonic::Status) -> Error {
    let info = status.get_details_error_info().filter(|info| info.domain == agentvfs_proto::ERROR_DOMAIN);
    let reason = info
        .as_ref()
        .and_then(|info| Reason::parse(&info.reason))
        .filter(|reason| reason.code() == Code::InvalidArgument)
        .unwrap_or(Reason::InvalidArgument);
    let error = Error::new(reason, status.message().to_owned());
    match info.as_ref().and_then(|info| info.metadata.get("field")) {
        Some(field) => error.field(field.clone()),
        None => error,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use tonic_types::ErrorDetails;

    use super::*;

    fn worker_status(code: Code, reason: &str, metadata: &[(&str, &str)]) -> tonic::Status {
        let metadata: HashMap<String, String> =
            metadata.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        let details = ErrorDetails::with_error_info(reason, agentvfs_proto::ERROR_DOMAIN, metadata);
        tonic::Status::with_error_details(code, "from the worker", details)
    }

    #[test]
    fn refusals_are_forwarded_with_their_reason_and_field() {
        let pattern = worker_status(Code::InvalidArgument, "INVALID_PATTERN", &[("field", "pattern")]);
        let Verdict::Forward(error) = Failure::Status(pattern).verdict(false) else { panic!("not forwarded") };
        assert_eq!(error.reason, Reason::InvalidPattern);
        assert_eq!(error.info_metadata()["field"], "pattern");
        // A reason that is not a refused argument, or none at all: INVALID_ARGUMENT.
        for reason in ["WORKER_UNAVAILABLE", "SOMETHING_NEW", ""] {
            let status = worker_status(Code::InvalidArgument, reason, &[]);
            let Verdict::Forward(error) = Failure::Status(status).verdict(false) else { panic!("not forwarded") };
            assert_eq!(error.reason, Reason::InvalidArgument, "{reason}");
        }
    }

    #[test]
    fn the_deadline_ends_a_failover_and_anything_else_tries_the_next_worker() {
        let verdict = |code, out_of_time| Failure::Status(tonic::Status::new(code, "x")).verdict(out_of_time);
        assert!(matches!(verdict(Code::DeadlineExceeded, false), Verdict::OutOfTime));
        assert!(matches!(verdict(Code::Cancelled, true), Verdict::OutOfTime));
        assert!(matches!(verdict(Code::Cancelled, false), Verdict::TryNext));
        for code in [Code::Unavailable, Code::Internal, Code::Unknown, Code::ResourceExhausted] {
            assert!(matches!(verdict(code, false), Verdict::TryNext), "{code:?}");
        }
        assert!(matches!(Failure::Malformed("odd".into()).verdict(false), Verdict::TryNext));
    }

    #[test]
    fn no_worker_left_is_worker_unavailable_naming_the_last_cause() {
        let refused = worker_status(Code::Unavailable, "WORKER_UNAVAILABLE", &[("cause", "CREDENTIALS_REFUSED")]);
        let status = Failure::Status(refused).describe().into_status();
        assert_eq!(status.code(), Code::Unavailable);
        let details = status.get_error_details();
        assert_eq!(details.error_info().unwrap().reason, "WORKER_UNAVAILABLE");
        assert_eq!(details.error_info().unwrap().metadata["cause"], "CREDENTIALS_REFUSED");
        assert!(status.message().contains("from the worker"));
        assert!(details.retry_info().is_some());
    }

    #[tokio::test]
    async fn a_failover_stops_at_the_deadline() {
        let workers = Workers::new(1, 1);
        workers.set_addresses(vec!["127.0.0.1:9".parse().unwrap(), "127.0.0.1:10".parse().unwrap()]);
        let mut calls = 0;
        let until = Some(Instant::now() + Duration::from_millis(50));
        let result: Result<()> = workers
            .failover(
                |_| true,
                (),
                until,
                None,
                |_, request| {
                    calls += 1;
                    assert!(request.metadata().get("grpc-timeout").is_some(), "the time left goes to the worker");
                    std::future::pending()
                },
            )
            .await;
        let error = result.unwrap_err();
        assert_eq!(error.reason, Reason::WorkerUnavailable);
        assert!(error.message().contains("deadline"), "{error}");
        assert_eq!(calls, 1, "a worker that runs out the clock leaves none for the next");
    }
}
