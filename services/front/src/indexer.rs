//! Delivery of the index outbox to every worker.
//!
//! Each worker gets its own follower: it asks the worker how far its index
//! got (`IndexStatus`), sends the outbox from there in order, at least once,
//! and moves on only when the worker acknowledges a commit. A worker whose
//! index is new, or older than what the outbox still holds, is rebuilt from
//! the store first. Jobs leave the outbox once every worker has them. The
//! followers track the worker pool: a worker that joins gets one, a worker
//! that leaves loses its follower and no longer holds jobs in the outbox,
//! and neither does one that has not answered for [`HOLD`] (it is rebuilt
//! when it comes back).

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use agentvfs_proto::v1 as pb;
use agentvfs_proto::v1::worker_client::WorkerClient;
use tokio::sync::watch;
use tonic::transport::Channel;

use crate::store::{IndexJob, IndexOp, Store};
use crate::workers::{Pool, Worker};

/// Jobs per delivery.
const BATCH: usize = 256;
/// How often an idle follower checks that its worker still has its index.
const IDLE_CHECK: Duration = Duration::from_secs(2);
/// How long to wait before trying an unreachable worker again.
const RETRY: Duration = Duration::from_secs(1);
/// How long the outbox keeps jobs for a worker that does not answer.
pub const HOLD: Duration = Duration::from_secs(300);
/// Least time between two prunings of the outbox by one task: delivery
/// wakes at every commit, and a pruning costs the store a few transactions.
const PRUNE_EVERY: Duration = Duration::from_millis(500);

/// Prunes the outbox for one delivery task, at most once per
/// [`PRUNE_EVERY`]; a pruning asked for sooner waits until it is due.
#[derive(Debug)]
struct Pruner {
    fence: Option<u64>,
    last: Option<tokio::time::Instant>,
    /// The highest sequence asked for and not yet pruned.
    pending: Option<u64>,
}

impl Pruner {
    fn new(fence: Option<u64>) -> Pruner {
        Pruner { fence, last: None, pending: None }
    }

    /// Prunes jobs up to `upto` now if due, else once [`Pruner::due`].
    async fn prune(&mut self, store: &Store, upto: u64) -> crate::error::Result<()> {
        self.pending = Some(self.pending.map_or(upto, |pending| pending.max(upto)));
        self.prune_if_due(store).await
    }

    /// When the pending pruning may run; `None` when nothing is pending.
    fn due(&self) -> Option<tokio::time::Instant> {
        self.pending.map(|_| self.last.map_or_else(tokio::time::Instant::now, |last| last + PRUNE_EVERY))
    }

    async fn prune_if_due(&mut self, store: &Store) -> crate::error::Result<()> {
        let (Some(upto), Some(due)) = (self.pending, self.due()) else { return Ok(()) };
        if due > tokio::time::Instant::now() {
            return Ok(());
        }
        let fence = self.fence;
        store.blocking(move |store| store.prune_outbox(upto, fence)).await?;
        (self.last, self.pending) = (Some(tokio::time::Instant::now()), None);
        Ok(())
    }
}

/// Sleeps until `due`; forever when `None`.
async fn until(due: Option<tokio::time::Instant>) {
    match due {
        Some(due) => tokio::time::sleep_until(due).await,
        None => std::future::pending().await,
    }
}

/// What each worker has acknowledged, for pruning, lag reporting and
/// choosing a worker to search.
#[derive(Debug, Default)]
pub struct Progress {
    workers: Mutex<HashMap<SocketAddr, Follower>>,
}

/// One follower's view of its worker.
#[derive(Debug, Default)]
struct Follower {
    /// The outbox position the worker's index has; none from the moment
    /// the follower reaches it until the worker has caught up with the
    /// store (after a rebuild, if it needed one). Meanwhile the worker holds
    /// every job: it may need any of them.
    acked: Option<u64>,
    /// Whether the follower has brought the worker up to date since it
    /// last reached it: until then the worker may be rebuilding.
    caught_up: bool,
    reachable: bool,
    last_answer: Option<Instant>,
}

impl Progress {
    fn lock(&self) -> MutexGuard<'_, HashMap<SocketAddr, Follower>> {
        self.workers.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The outbox position every worker that still holds jobs has reached.
    pub fn slowest(&self) -> Option<u64> {
        self.lock()
            .values()
            .filter(|f| f.reachable || f.last_answer.is_some_and(|at| at.elapsed() < HOLD))
            .map(|f| f.acked.unwrap_or(0))
            .min()
    }

    /// Whether any worker answered its follower lately.
    pub fn any_reachable(&self) -> bool {
        self.lock().values().any(|f| f.reachable)
    }

    /// Whether the worker at `address` answers and its index has caught up
    /// with the store, so that its search results are whole.
    pub fn serves_search(&self, address: SocketAddr) -> bool {
        self.lock().get(&address).is_some_and(|f| f.reachable && f.caught_up)
    }

    fn lost(&self, worker: SocketAddr) {
        if let Some(follower) = self.lock().get_mut(&worker) {
            (follower.reachable, follower.caught_up) = (false, false);
        }
    }

    /// The follower reached its worker and has yet to learn where its
    /// index is: until it has, the worker holds every job.
    fn reached_anew(&self, worker: SocketAddr) {
        if let Some(follower) = self.lock().get_mut(&worker) {
            *follower = Follower { reachable: true, last_answer: Some(Instant::now()), ..Follower::default() };
        }
    }

    fn set(&self, worker: SocketAddr, acked: u64) {
        if let Some(follower) = self.lock().get_mut(&worker) {
            follower.acked = Some(acked);
            follower.caught_up = true;
            follower.last_answer = Some(Instant::now());
        }
    }
}

/// The index feed: the task that delivers the outbox, recording in
/// `progress` what each worker has. It follows the worker pool with a
/// follower per worker; with no worker, it keeps the outbox empty (a worker
/// that joins later is rebuilt anyway). Dropping the task stops every
/// follower.
///
/// With several fronts on one database, only the holder of the background
/// lease runs it; `fence` is the lease's generation, which its pruning of
/// the outbox checks (`None`: the only front).
pub fn feed(
    store: Store,
    pool: watch::Receiver<Pool>,
    progress: Arc<Progress>,
    fence: Option<u64>,
) -> impl Future<Output = ()> + Send + 'static {
    progress.lock().clear();
    supervise(store, pool, progress, fence)
}

async fn supervise(store: Store, mut pool: watch::Receiver<Pool>, progress: Arc<Progress>, fence: Option<u64>) {
    // Owned here: when the supervisor stops, dropping the set aborts them.
    let mut tasks = tokio::task::JoinSet::new();
    let mut followers: HashMap<SocketAddr, tokio::task::AbortHandle> = HashMap::new();
    let mut commits = store.subscribe();
    let mut pruner = Pruner::new(fence);
    loop {
        while tasks.try_join_next().is_some() {}
        let workers = pool.borrow_and_update().clone();
        followers.retain(|address, task| {
            let stays = workers.iter().any(|w| w.address == *address);
            if !stays {
                task.abort();
                progress.lock().remove(address);
            }
            stays
        });
        for Worker { address, client } in workers.iter().cloned() {
            followers.entry(address).or_insert_with(|| {
                progress.lock().insert(address, Follower::default());
                let (store, progress) = (store.clone(), progress.clone());
                tasks.spawn(async move {
                    loop {
                        if let Err(error) = follow(&store, client.clone(), address, &progress, fence).await {
                            tracing::warn!(worker = %address, %error, "index delivery interrupted");
                        }
                        progress.lost(address);
                        tokio::time::sleep(RETRY).await;
                    }
                })
            });
        }
        if followers.is_empty() {
            let head = store.blocking(|store| store.outbox_head()).await.unwrap_or(0);
            let _ = pruner.prune(&store, head).await;
        }
        tokio::select! {
            changed = pool.changed() => if changed.is_err() { break },
            changed = commits.changed(), if followers.is_empty() => if changed.is_err() { break },
            () = until(pruner.due()), if followers.is_empty() => {}
        }
    }
}

/// Why delivery to one worker stopped; its follower starts over after
/// [`RETRY`].
#[derive(Debug, thiserror::Error)]
pub enum DeliveryError {
    #[error("the worker failed a call: {}", .0.message())]
    Worker(Box<tonic::Status>),
    #[error(transparent)]
    Store(#[from] crate::error::Error),
    #[error("the worker's reply breaks the contract: {0}")]
    Malformed(String),
    #[error("the worker's index went back; starting over")]
    WentBack,
    #[error("jobs after {cursor} were pruned (up to {pruned}) before the worker had them; starting over")]
    Pruned { cursor: u64, pruned: u64 },
    #[error("the store closed")]
    Closed,
}

impl From<tonic::Status> for DeliveryError {
    fn from(status: tonic::Status) -> Self {
        DeliveryError::Worker(Box::new(status))
    }
}

/// The position a worker's `IndexStatus` reports, refused when it is past
/// `issued`, the highest outbox sequence handed out: trusting it would skip
/// jobs for that worker and prune them for every other.
fn reported_position(status: &pb::IndexStatusResponse, issued: u64) -> Result<u64, DeliveryError> {
    match status.committed_sequence {
        position if position <= issued => Ok(position),
        position => Err(DeliveryError::Malformed(format!("index status at {position}, past the outbox head {issued}"))),
    }
}

/// The position a worker acknowledges for jobs up to `sent`, refused when
/// it is past them (the follower would move past jobs never delivered).
fn acknowledged(ack: &pb::IndexAck, sent: u64) -> Result<u64, DeliveryError> {
    match ack.committed_sequence {
        position if position <= sent => Ok(position),
        position => Err(DeliveryError::Malformed(format!("acknowledged {position} for jobs up to {sent}"))),
    }
}

/// Follows the outbox for one worker until a call fails.
async fn follow(
    store: &Store,
    mut client: WorkerClient<Channel>,
    me: SocketAddr,
    progress: &Progress,
    fence: Option<u64>,
) -> Result<(), DeliveryError> {
    let status = client.index_status(pb::IndexStatusRequest {}).await?.into_inner();
    // Before the outbox is read: from here no other follower's pruning
    // passes jobs this worker may need, and one already under way is caught
    // below by its mark.
    progress.reached_anew(me);
    // The bounds first: pruning marks its position before removing jobs, so
    // an outbox found empty has its last sequence in the mark read after.
    let (bounds, pruned) = store.blocking(|store| Ok((store.outbox_bounds()?, store.outbox_pruned()?))).await?;
    let issued = bounds.map_or(0, |(_, last)| last).max(pruned);
    let mut cursor = reported_position(&status, issued)?;
    // Jobs after the worker's position that pruning removed never reach it.
    let behind = cursor < pruned || bounds.is_some_and(|(first, _)| cursor + 1 < first);
    if (status.fresh && cursor == 0) || behind {
        cursor = rebuild(store, &mut client).await?;
    }
    progress.set(me, cursor);
    let mut commits = store.subscribe();
    let mut pruner = Pruner::new(fence);
    loop {
        // The jobs, then the pruning mark: a pruning that removed any job
        // after the cursor marked its position before.
        let (jobs, pruned) =
            store.blocking(move |store| Ok((store.outbox_after(cursor, BATCH)?, store.outbox_pruned()?))).await?;
        if pruned > cursor {
            return Err(DeliveryError::Pruned { cursor, pruned });
        }
        let Some(&(sent, _)) = jobs.last() else {
            tokio::select! {
                changed = commits.changed() => changed.map_err(|_| DeliveryError::Closed)?,
                () = until(pruner.due()) => pruner.prune_if_due(store).await?,
                () = tokio::time::sleep(IDLE_CHECK) => {
                    // A worker that restarted with a lost index is behind us.
                    let status = client.index_status(pb::IndexStatusRequest {}).await?;
                    if status.into_inner().committed_sequence < cursor {
                        return Err(DeliveryError::WentBack);
                    }
                }
            }
            continue;
        };
        let batch = pb::IndexJobBatch { jobs: jobs.iter().map(|(sequence, job)| to_proto(*sequence, job)).collect() };
        fault_point!("indexer::before_deliver");
        let ack = client.apply_index_jobs(batch).await?.into_inner();
        fault_point!("indexer::after_ack");
        cursor = acknowledged(&ack, sent)?.max(cursor);
        progress.set(me, cursor);
        if let Some(slowest) = progress.slowest() {
            pruner.prune(store, slowest).await?;
        }
    }
}

/// Rebuilds a worker's index from the store: everything dropped, every
/// live file sent, then the position set to the outbox head seen before
/// reading the store (later jobs follow in order and fix any overlap).
async fn rebuild(store: &Store, client: &mut WorkerClient<Channel>) -> Result<u64, DeliveryError> {
    let head = store.blocking(|store| store.outbox_head()).await?;
    tracing::info!(head, "rebuilding a worker's search index from the store");
    let drop_all = pb::IndexJob { op: pb::IndexOp::DropAll as i32, ..Default::default() };
    client.apply_index_jobs(pb::IndexJobBatch { jobs: vec![drop_all] }).await?;
    let spaces = store.blocking(|store| store.all_spaces()).await?;
    for space in spaces {
        let (id, revision) = (space.id, space.revision);
        let jobs = store.blocking(move |store| store.live_files(id, revision)).await?;
        for chunk in jobs.chunks(BATCH) {
            let batch = pb::IndexJobBatch { jobs: chunk.iter().map(|job| to_proto(0, job)).collect() };
            client.apply_index_jobs(batch).await?;
        }
    }
    fault_point!("indexer::after_rebuild");
    // A marker at the head moves the worker's position there.
    let marker = pb::IndexJob { sequence: head, op: pb::IndexOp::Delete as i32, ..Default::default() };
    let ack = client
        .apply_index_jobs(pb::IndexJobBatch { jobs: if head > 0 { vec![marker] } else { Vec::new() } })
        .await?
        .into_inner();
    Ok(acknowledged(&ack, head)?.max(head))
}

fn to_proto(sequence: u64, job: &IndexJob) -> pb::IndexJob {
    let mut out = pb::IndexJob {
        sequence,
        space_id: job.space.to_string(),
        revision: job.revision,
        node_id: job.node.map(|n| n.to_string()).unwrap_or_default(),
        ..Default::default()
    };
    match &job.op {
        IndexOp::Upsert { path, version, hash, is_text } => {
            out.op = pb::IndexOp::Upsert as i32;
            out.path.clone_from(path);
            out.version = *version;
            out.hash = hash.to_hex();
            out.is_text = *is_text;
            out.encoding.clone_from(&job.encoding);
        }
        IndexOp::Delete => out.op = pb::IndexOp::Delete as i32,
        IndexOp::DropSpace => out.op = pb::IndexOp::DropSpace as i32,
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_past_what_the_front_issued_are_refused() {
        let status = |committed_sequence| pb::IndexStatusResponse { committed_sequence, fresh: false };
        assert_eq!(reported_position(&status(7), 7).ok(), Some(7));
        assert_eq!(reported_position(&status(0), 0).ok(), Some(0));
        assert!(matches!(reported_position(&status(8), 7), Err(DeliveryError::Malformed(_))));
        assert!(matches!(reported_position(&status(u64::MAX), 7), Err(DeliveryError::Malformed(_))));
        let ack = |committed_sequence| pb::IndexAck { committed_sequence };
        assert_eq!(acknowledged(&ack(12), 12).ok(), Some(12));
        assert_eq!(acknowledged(&ack(3), 12).ok(), Some(3));
        assert!(matches!(acknowledged(&ack(13), 12), Err(DeliveryError::Malformed(_))));
    }
}
