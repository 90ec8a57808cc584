//! How handlers run their store work: on the blocking pool, never on the
//! async runtime (sled transactions, flushes and scans block).

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
