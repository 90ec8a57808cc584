//! How handlers run their store work: on the blocking pool, never on the
//! async runtime (sled commits, flushes and scans block).

use std::sync::Arc;

use tonic::{Response, Status};

use super::Front;
use crate::error::Result;

/// Runs `work` with the front on the blocking pool. The task runs to
/// completion even if the caller goes away, so a change is never cut short.
pub(super) async fn blocking<T, F>(front: &Arc<Front>, work: F) -> Result<T>
where
    T: Send + 'static,
    F: FnOnce(&Front) -> Result<T> + Send + 'static,
{
    let front = front.clone();
    let store = front.store.clone();
    store.blocking(move |_| work(&front)).await
}

/// Runs `work` with the front on the blocking pool and wraps its reply.
pub(super) async fn run<T, F>(front: &Arc<Front>, work: F) -> Result<Response<T>, Status>
where
    T: Send + 'static,
    F: FnOnce(&Front) -> Result<T> + Send + 'static,
{
    Ok(Response::new(blocking(front, work).await?))
}

/// [`run`] for a change: the reply waits until every change committed so
/// far is on disk. Replays and kept receipts wait too: the original change
/// (or the receipt) may not be on disk yet.
pub(super) async fn run_durable<T, F>(front: &Arc<Front>, work: F) -> Result<Response<T>, Status>
where
    T: Send + 'static,
    F: FnOnce(&Front) -> Result<T> + Send + 'static,
{
    let reply = blocking(front, work).await?;
    front.store.durable().await?;
    Ok(Response::new(reply))
}

/// Changes to one space run one at a time (the store serializes them under
/// a lock stripe). On an embedded store, where a change is all CPU, taking
/// the turn here, on the runtime, keeps the changes that wait as parked
/// tasks instead of blocking-pool threads asleep on that lock: under load
/// on a busy space, fewer threads and wake-ups, and the group commit sees
/// them coming. On a database, a change spends most of its time waiting
/// for round trips, and the next one resolving its target meanwhile is
/// worth more: there, changes take no turn. Keyed by the space as the
/// request names it; the store's lock stays what makes changes safe.
#[derive(Debug)]
pub struct Turns {
    /// Empty when changes take no turn.
    stripes: Box<[tokio::sync::Mutex<()>]>,
}

const TURN_STRIPES: usize = 64;

impl Turns {
    pub fn new(enabled: bool) -> Self {
        let stripes = if enabled { TURN_STRIPES } else { 0 };
        Self { stripes: (0..stripes).map(|_| tokio::sync::Mutex::new(())).collect() }
    }

    async fn take(&self, space: &str) -> Option<tokio::sync::MutexGuard<'_, ()>> {
        use std::hash::BuildHasher;
        if self.stripes.is_empty() {
            return None;
        }
        let hash = std::hash::BuildHasherDefault::<std::hash::DefaultHasher>::default().hash_one(space);
        Some(self.stripes[hash as usize % self.stripes.len()].lock().await)
    }
}

/// [`run_durable`] for a change to one `space`, which waits for its turn.
pub(super) async fn run_change<T, F>(front: &Arc<Front>, space: &str, work: F) -> Result<Response<T>, Status>
where
    T: Send + 'static,
    F: FnOnce(&Front) -> Result<T> + Send + 'static,
{
    let coming = front.store.expect_commit();
    let reply = {
        let _turn = front.turns.take(space).await;
        blocking(front, work).await?
    };
    // Queued for the flush before the change stops being expected, so
    // that a flush waiting for it covers it.
    let durable = front.store.durable();
    drop(coming);
    durable.await?;
    Ok(Response::new(reply))
}
