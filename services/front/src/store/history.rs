//! The revision log (what `Watch` streams) and compaction of history.

use std::collections::HashSet;

use prost::bytes::Bytes;

use super::engine::{KeyRange, Table};
use super::records::{Entry, RevisionRecord, VersionRecord, decode};
use super::{Store, content, keys};
use crate::error::{Error, Reason, Result};
use crate::ids::{NodeId, SpaceId};

/// What a compaction dropped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Compacted {
    pub revision: u64,
    pub history_dropped: u64,
    pub versions_dropped: u64,
    pub bytes_freed: u64,
}

impl Store {
    /// Up to `limit` revision records of `space`, from revision `from` on.
    pub fn revisions(&self, space: SpaceId, from: u64, limit: usize) -> Result<Vec<(u64, RevisionRecord)>> {
        let start = keys::revlog(space, from);
        let end = keys::revlog(space, u64::MAX);
        let mut out = Vec::new();
        for item in self.range(Table::Revlog, KeyRange::new(start, end)).take(limit) {
            let (key, value) = item?;
            let revision = u64::from_be_bytes(key[16..24].try_into().map_err(|_| Error::internal("bad revlog key"))?);
            out.push((revision, decode(&value)?));
        }
        Ok(out)
    }

    /// A receiver that changes after every commit, for followers of the log.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.inner.commits.subscribe()
    }

    /// Drops history older than `revision`: every path keeps its state as of
    /// `revision`, file versions that no kept state (or trash record) needs
    /// are deleted with their unshared content, and the revision log before
    /// it goes. Reads, tokens and watches below it become SNAPSHOT_EXPIRED.
    pub fn compact(&self, space: SpaceId, principal: &str, revision: u64) -> Result<Compacted> {
        // Publish the new floor first: from here on nothing reads below it,
        // so what follows may delete outside a transaction.
        let (floor, _) = self.mutate(space, principal, true, |_, commit| {
            let target = if revision == 0 { commit.space.revision - 1 } else { revision };
            if target > commit.space.revision - 1 {
                return Err(Error::invalid_argument(
                    "revision",
                    format!("Revision {target} is not in the past; the space is at {}.", commit.space.revision - 1),
                ));
            }
            if target <= commit.space.compacted_revision {
                return Ok(commit.space.compacted_revision);
            }
            commit.space.compacted_revision = target;
            Ok(target)
        })?;
        let mut out = Compacted { revision: floor, ..Compacted::default() };
        let mut needed: HashSet<(NodeId, u64)> = HashSet::new();
        // History: per path, keep the last state at or below the floor.
        let mut dropped: Vec<Bytes> = Vec::new();
        let mut group: Vec<(Bytes, u64, Option<Entry>)> = Vec::new();
        let mut group_path: Option<String> = None;
        let mut close_group = |group: &mut Vec<(Bytes, u64, Option<Entry>)>| {
            let kept = group.iter().rposition(|(_, revision, _)| *revision <= floor);
            for (at, (key, revision, state)) in group.drain(..).enumerate() {
                let older = kept.is_some_and(|kept| at < kept);
                // The kept state goes too when it says the path was gone.
                let gone_at_floor = Some(at) == kept && state.is_none();
                if older || gone_at_floor {
                    dropped.push(key);
                } else if let Some(entry) = state
                    && (Some(at) == kept || revision > floor)
                {
                    needed.insert((entry.node, entry.version));
                }
            }
        };
        for item in self.scan_prefix(Table::History, &space.to_bytes()) {
            let (key, value) = item?;
            let (path, revision) = keys::parse_history(&key).ok_or_else(|| Error::internal("malformed history key"))?;
            if group_path.as_deref() != Some(path) {
                close_group(&mut group);
                group_path = Some(path.to_owned());
            }
            let state: Option<Entry> = decode(&value)?;
            group.push((key, revision, state));
        }
        close_group(&mut group);
        out.history_dropped = self.remove_all(Table::History, dropped)? as u64;
        // Trashed subtrees keep what a restore needs.
        for item in self.scan_prefix(Table::Trash, &space.to_bytes()) {
            let record: super::records::TrashRecord = decode(&item?.1)?;
            needed.extend(record.entries.iter().map(|(_, e)| (e.node, e.version)));
        }
        // Versions: drop those made before the floor that nothing needs.
        for item in self.scan_prefix(Table::Versions, &space.to_bytes()) {
            let (key, value) = item?;
            let record: VersionRecord = decode(&value)?;
            let node = NodeId::from_bytes(key[16..32].try_into().map_err(|_| Error::internal("bad version key"))?);
            let number = keys::parse_version_number(&key)?;
            if record.revision >= floor || needed.contains(&(node, number)) {
                continue;
            }
            // What was dropped so far stays dropped; compacting again goes on.
            self.check_room(0, record.size.div_ceil(content::CHUNK_SIZE as u64))
                .map_err(|e| e.with("versionsDropped", out.versions_dropped))?;
            let mut freed = 0;
            self.transact(|tx| {
                freed = 0;
                if tx.get(Table::Versions, &key)?.is_some() {
                    tx.delete(Table::Versions, &key)?;
                    freed = content::drop_ref(tx, record.hash)?;
                }
                Ok(())
            })?;
            out.versions_dropped += 1;
            out.bytes_freed += freed;
        }
        // The log below the floor.
        let below = KeyRange::new(keys::revlog(space, 0), keys::revlog(space, floor));
        let log: Vec<Bytes> =
            self.range(Table::Revlog, below).map(|item| item.map(|(key, _)| key)).collect::<Result<_>>()?;
        self.remove_all(Table::Revlog, log)?;
        Ok(out)
    }
}

/// SNAPSHOT_EXPIRED for a revision below the compaction floor.
pub fn expired(revision: u64, floor: u64) -> Error {
    Error::new(
        Reason::SnapshotExpired,
        format!("Revision {revision} was compacted away; the oldest readable revision is {floor}."),
    )
    .with("revision", revision)
    .with("compactedRevision", floor)
}
