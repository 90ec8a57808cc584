//! Delivery of the index outbox to every worker.
//!
//! Each worker gets its own follower: it asks the worker how far its index
//! got (`IndexStatus`), sends the outbox from there in order, at least once,
//! and moves on only when the worker acknowledges a commit. A worker whose
//! index is new, or older than what the outbox still holds, is rebuilt from
//! the store first. Jobs leave the outbox once every worker has them.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentvfs_proto::v1 as pb;
use agentvfs_proto::v1::worker_client::WorkerClient;
use tonic::transport::Channel;

use crate::store::{IndexJob, IndexOp, Store};

/// Jobs per delivery.
const BATCH: usize = 256;
/// How often an idle follower checks that its worker still has its index.
const IDLE_CHECK: Duration = Duration::from_secs(2);
/// How long to wait before trying an unreachable worker again.
const RETRY: Duration = Duration::from_secs(1);

/// What each worker has acknowledged, for pruning and lag reporting.
#[derive(Debug, Default)]
pub struct Progress {
    acked: Mutex<Vec<u64>>,
    reachable: Mutex<Vec<bool>>,
}

impl Progress {
    /// The outbox position every worker has reached.
    pub fn slowest(&self) -> Option<u64> {
        self.acked.lock().unwrap_or_else(std::sync::PoisonError::into_inner).iter().copied().min()
    }

    /// Whether any worker answered its follower lately.
    pub fn any_reachable(&self) -> bool {
        self.reachable.lock().unwrap_or_else(std::sync::PoisonError::into_inner).iter().any(|&r| r)
    }

    fn reach(&self, worker: usize, reachable: bool) {
        let mut all = self.reachable.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        all[worker] = reachable;
    }

    fn set(&self, worker: usize, acked: u64) {
        let mut all = self.acked.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        all[worker] = acked;
    }
}

/// Starts a follower per worker; with no worker, keeps the outbox empty.
pub fn spawn(store: Store, workers: Vec<(String, WorkerClient<Channel>)>) -> Arc<Progress> {
    let progress = Arc::new(Progress {
        acked: Mutex::new(vec![0; workers.len()]),
        reachable: Mutex::new(vec![false; workers.len()]),
    });
    if workers.is_empty() {
        tokio::spawn(async move {
            let mut commits = store.subscribe();
            // Nothing will read the jobs; a worker added later is rebuilt anyway.
            while commits.changed().await.is_ok() {
                let head = store.blocking(|store| store.outbox_head()).await.unwrap_or(0);
                let _ = store.blocking(move |store| store.prune_outbox(head)).await;
            }
        });
        return progress;
    }
    for (i, (address, client)) in workers.into_iter().enumerate() {
        let (store, progress) = (store.clone(), progress.clone());
        tokio::spawn(async move {
            loop {
                if let Err(error) = follow(&store, client.clone(), i, &progress).await {
                    tracing::warn!(worker = %address, %error, "index delivery interrupted");
                }
                progress.reach(i, false);
                tokio::time::sleep(RETRY).await;
            }
        });
    }
    progress
}

/// Follows the outbox for one worker until a call fails.
async fn follow(
    store: &Store,
    mut client: WorkerClient<Channel>,
    me: usize,
    progress: &Progress,
) -> Result<(), String> {
    let status = client.index_status(pb::IndexStatusRequest {}).await.map_err(|s| s.message().to_owned())?.into_inner();
    progress.reach(me, true);
    let mut cursor = status.committed_sequence;
    let bounds = store.blocking(|store| store.outbox_bounds()).await.map_err(|e| e.to_string())?;
    let behind = bounds.is_some_and(|(first, _)| cursor + 1 < first);
    if (status.fresh && cursor == 0) || behind {
        cursor = rebuild(store, &mut client).await?;
    }
    progress.set(me, cursor);
    let mut commits = store.subscribe();
    loop {
        let jobs = store.blocking(move |store| store.outbox_after(cursor, BATCH)).await.map_err(|e| e.to_string())?;
        if jobs.is_empty() {
            tokio::select! {
                changed = commits.changed() => changed.map_err(|e| e.to_string())?,
                () = tokio::time::sleep(IDLE_CHECK) => {
                    // A worker that restarted with a lost index is behind us.
                    let status = client.index_status(pb::IndexStatusRequest {}).await.map_err(|s| s.message().to_owned())?;
                    if status.into_inner().committed_sequence < cursor {
                        return Err("the worker's index went back; starting over".to_owned());
                    }
                }
            }
            continue;
        }
        let batch = pb::IndexJobBatch { jobs: jobs.iter().map(|(sequence, job)| to_proto(*sequence, job)).collect() };
        fault_point!("indexer::before_deliver");
        let ack = client.apply_index_jobs(batch).await.map_err(|s| s.message().to_owned())?.into_inner();
        fault_point!("indexer::after_ack");
        cursor = ack.committed_sequence.max(cursor);
        progress.set(me, cursor);
        if let Some(slowest) = progress.slowest() {
            store.blocking(move |store| store.prune_outbox(slowest)).await.map_err(|e| e.to_string())?;
        }
    }
}

/// Rebuilds a worker's index from the store: everything dropped, every
/// live file sent, then the position set to the outbox head seen before
/// reading the store (later jobs follow in order and fix any overlap).
async fn rebuild(store: &Store, client: &mut WorkerClient<Channel>) -> Result<u64, String> {
    let head = store.blocking(|store| store.outbox_head()).await.map_err(|e| e.to_string())?;
    tracing::info!(head, "rebuilding a worker's search index from the store");
    let drop_all = pb::IndexJob { op: pb::IndexOp::DropAll as i32, ..Default::default() };
    client.apply_index_jobs(pb::IndexJobBatch { jobs: vec![drop_all] }).await.map_err(|s| s.message().to_owned())?;
    let spaces = store.blocking(|store| store.all_spaces()).await.map_err(|e| e.to_string())?;
    for space in spaces {
        let (id, revision) = (space.id, space.revision);
        let jobs = store.blocking(move |store| store.live_files(id, revision)).await.map_err(|e| e.to_string())?;
        for chunk in jobs.chunks(BATCH) {
            let batch = pb::IndexJobBatch { jobs: chunk.iter().map(|job| to_proto(0, job)).collect() };
            client.apply_index_jobs(batch).await.map_err(|s| s.message().to_owned())?;
        }
    }
    // A marker at the head moves the worker's position there.
    let marker = pb::IndexJob { sequence: head, op: pb::IndexOp::Delete as i32, ..Default::default() };
    let ack = client
        .apply_index_jobs(pb::IndexJobBatch { jobs: if head > 0 { vec![marker] } else { Vec::new() } })
        .await
        .map_err(|s| s.message().to_owned())?
        .into_inner();
    Ok(ack.committed_sequence.max(head))
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
        }
        IndexOp::Delete => out.op = pb::IndexOp::Delete as i32,
        IndexOp::DropSpace => out.op = pb::IndexOp::DropSpace as i32,
    }
    out
}
