//! `Watch`: a stream of change events from the revision log.
//!
//! A follower task reads the log from the requested revision, in batches,
//! and sends events through a small bounded channel: a slow consumer slows
//! the reading, nothing piles up in memory. At the end of the log it waits
//! for the next commit, then for it to be on disk, so no event describes a
//! change that a crash could still undo.
//!
//! Every batch re-checks the caller's access against the space's record
//! (see [`Access`]), and holds only changes committed up to that record's
//! revision: a caller whose role is removed, or whose space is deleted,
//! gets no event committed after that and the stream ends with the error a
//! fresh call would get. Both changes are commits that wake the follower.

use agentvfs_proto::v1 as pb;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Status;
use tonic::codegen::BoxStream;

use super::access::Access;
use super::{Front, Target, convert};
use crate::error::Result;
use crate::ids::SpaceId;
use crate::path::SpacePath;
use crate::store::{ChangeKind, LeaseChange, Store, expired};

/// Events buffered between the log reader and a slow consumer.
const BUFFER: usize = 64;
/// Log records read at a time.
const BATCH: usize = 256;

/// Starts following `target`'s space from `from_revision` (0: from now on),
/// for as long as `access` holds.
pub(super) fn follow(
    front: &Front,
    target: Target,
    access: Access,
    from_revision: u64,
) -> Result<BoxStream<pb::WatchEvent>> {
    let space = &target.space;
    let first = if from_revision == 0 { space.revision + 1 } else { from_revision };
    if first <= space.compacted_revision {
        return Err(expired(first, space.compacted_revision));
    }
    let (sender, receiver) = tokio::sync::mpsc::channel(BUFFER);
    let store = front.store.clone();
    let mut commits = store.subscribe();
    tokio::spawn(async move {
        let mut next = first;
        loop {
            let space_id = target.space.id;
            let batch = {
                let (store, access) = (store.clone(), access.clone());
                store.blocking(move |store| read(store, &access, space_id, next)).await
            };
            let records = match batch {
                Ok(records) => records,
                Err(error) => {
                    let _ = sender.send(Err(Status::from(error))).await;
                    return;
                }
            };
            if records.is_empty() {
                tokio::select! {
                    // The consumer went away: stop at once, even on a quiet space.
                    () = sender.closed() => return,
                    changed = commits.changed() => {
                        if changed.is_err() || store.durable().await.is_err() {
                            return;
                        }
                    }
                }
                continue;
            }
            for (revision, events) in records {
                next = revision + 1;
                for event in events.into_iter().filter(|e| visible(e, &target.path)) {
                    if sender.send(Ok(event)).await.is_err() {
                        return;
                    }
                }
            }
        }
    });
    Ok(Box::pin(ReceiverStream::new(receiver)))
}

/// The next log records of a space as events, up to the revision of the
/// space record that `access` was checked against; SNAPSHOT_EXPIRED when the
/// log was compacted past `next` while following it.
fn read(store: &Store, access: &Access, space: SpaceId, next: u64) -> Result<Vec<(u64, Vec<pb::WatchEvent>)>> {
    let record = access.recheck(store)?;
    if next <= record.compacted_revision {
        return Err(expired(next, record.compacted_revision));
    }
    // The record and the log entry of a change are written in one
    // transaction, so every entry up to the record's revision was committed
    // while the access just checked held; later ones wait for the next batch
    // (their commit has woken, or will wake, the follower).
    let records = store.revisions(space, next, BATCH)?;
    Ok(records
        .into_iter()
        .take_while(|(revision, _)| *revision <= record.revision)
        .map(|(revision, record)| {
            let time = convert::timestamp(record.time_ms);
            let changes = record.changes.into_iter().map(|change| pb::WatchEvent {
                revision,
                kind: kind(change.kind) as i32,
                node_id: change.node.to_string(),
                path: change.path,
                old_path: change.old_path.unwrap_or_default(),
                version: change.version,
                node_kind: convert::kind(change.node_kind),
                time,
                operation: record.operation.clone(),
                lease: None,
            });
            let leases = record.leases.into_iter().map(|event| pb::WatchEvent {
                revision,
                kind: match event.change {
                    LeaseChange::Acquired => pb::ChangeKind::LeaseAcquired,
                    LeaseChange::Renewed => pb::ChangeKind::LeaseRenewed,
                    LeaseChange::Released => pb::ChangeKind::LeaseReleased,
                } as i32,
                path: event.lease.path.clone(),
                time,
                lease: Some(convert::lease(&event.lease, revision)),
                ..Default::default()
            });
            (revision, changes.chain(leases).collect())
        })
        .collect())
}

fn visible(event: &pb::WatchEvent, prefix: &SpacePath) -> bool {
    let under = |path: &str| SpacePath::parse(path).is_ok_and(|p| p.starts_with(prefix));
    (!event.path.is_empty() && under(&event.path)) || (!event.old_path.is_empty() && under(&event.old_path))
}

pub(super) fn kind(kind: ChangeKind) -> pb::ChangeKind {
    match kind {
        ChangeKind::Created => pb::ChangeKind::Created,
        ChangeKind::Modified => pb::ChangeKind::Modified,
        ChangeKind::Mkdir => pb::ChangeKind::Mkdir,
        ChangeKind::Renamed => pb::ChangeKind::Renamed,
        ChangeKind::Moved => pb::ChangeKind::Moved,
        ChangeKind::Trashed => pb::ChangeKind::Trashed,
        ChangeKind::Restored => pb::ChangeKind::Restored,
        ChangeKind::Removed => pb::ChangeKind::Removed,
    }
}
