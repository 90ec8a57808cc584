//! How handlers run their store work: on the blocking pool, or for a
//! change on its space's line (see [`crate::turns`]), never on the async
//! runtime (sled commits, flushes and scans block).

use std::sync::Arc;

use tonic::{Response, Status};

use super::Front;
use crate::error::{Error, Result};

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

/// [`run_durable`] for a change to one `space`, which waits for its turn
/// on the space's line when changes take turns (see [`crate::turns`]).
pub(super) async fn run_change<T, F>(front: &Arc<Front>, space: &str, work: F) -> Result<Response<T>, Status>
where
    T: Send + 'static,
    F: FnOnce(&Front) -> Result<T> + Send + 'static,
{
    let coming = front.store.expect_commit();
    if !front.turns.enabled() {
        let reply = blocking(front, work).await?;
        let durable = front.store.durable();
        drop(coming);
        durable.await?;
        return Ok(Response::new(reply));
    }
    let (answer, answered) = tokio::sync::oneshot::channel();
    let on_line = front.clone();
    front.turns.queue(
        space,
        Box::new(move || {
            let front = on_line;
            // A caller that went away while its change waited (its deadline
            // passed) gets nothing done, as when it leaves before its turn.
            if answer.is_closed() {
                return;
            }
            // Queued for the flush before the change stops being expected,
            // so that a flush waiting for it covers it.
            let reply = work(&front).map(|reply| (reply, front.store.durable()));
            drop(coming);
            let _ = answer.send(reply);
        }),
    )?;
    let (reply, durable) = answered.await.map_err(|_| Error::internal("the change failed before it answered"))??;
    durable.await?;
    Ok(Response::new(reply))
}
