//! The revision log (what `Watch` streams) and compaction of history.

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
        for item in self.trees().revlog.range(start..end).take(limit) {
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
        let t = self.trees();
        let mut needed: std::collections::HashSet<(NodeId, u64)> = std::collections::HashSet::new();
        // History: per path, keep the last state at or below the floor.
        let mut group: Vec<(sled::IVec, u64)> = Vec::new();
        let mut group_path: Option<String> = None;
        let mut flush_group = |group: &mut Vec<(sled::IVec, u64)>, out: &mut Compacted| -> Result<()> {
            let below: Vec<_> = group.iter().filter(|(_, r)| *r <= floor).collect();
            if let Some(((kept_key, _), older)) = below.split_last() {
                for (key, _) in older {
                    t.history.remove(key)?;
                    out.history_dropped += 1;
                }
                if let Some(raw) = t.history.get(kept_key)? {
                    match decode::<Option<Entry>>(&raw)? {
                        Some(entry) => {
                            needed.insert((entry.node, entry.version));
                        }
                        None => {
                            t.history.remove(kept_key)?;
                            out.history_dropped += 1;
                        }
                    }
                }
            }
            for (key, r) in group.iter() {
                if *r > floor
                    && let Some(raw) = t.history.get(key)?
                    && let Some(entry) = decode::<Option<Entry>>(&raw)?
                {
                    needed.insert((entry.node, entry.version));
                }
            }
            group.clear();
            Ok(())
        };
        for item in t.history.scan_prefix(space.to_bytes()) {
            let (key, _) = item?;
            let (path, revision) = keys::parse_history(&key).ok_or_else(|| Error::internal("malformed history key"))?;
            if group_path.as_deref() != Some(path) {
                flush_group(&mut group, &mut out)?;
                group_path = Some(path.to_owned());
            }
            group.push((key, revision));
        }
        flush_group(&mut group, &mut out)?;
        // Trashed subtrees keep what a restore needs.
        for item in t.trash.scan_prefix(space.to_bytes()) {
            let record: super::records::TrashRecord = decode(&item?.1)?;
            needed.extend(record.entries.iter().map(|(_, e)| (e.node, e.version)));
        }
        // Versions: drop those made before the floor that nothing needs.
        for item in t.versions.scan_prefix(space.to_bytes()) {
            let (key, value) = item?;
            let record: VersionRecord = decode(&value)?;
            let node = NodeId::from_bytes(key[16..32].try_into().map_err(|_| Error::internal("bad version key"))?);
            let number = u64::from_be_bytes(key[32..40].try_into().map_err(|_| Error::internal("bad version key"))?);
            if record.revision >= floor || needed.contains(&(node, number)) {
                continue;
            }
            // What was dropped so far stays dropped; compacting again goes on.
            self.check_room_to_release(record.size.div_ceil(content::CHUNK_SIZE as u64))
                .map_err(|e| e.with("versionsDropped", out.versions_dropped))?;
            use sled::Transactional;
            let freed = (&t.versions, &t.content).transaction(|(versions, content)| {
                if versions.remove(&key)?.is_some() {
                    return content::drop_ref(content, record.hash);
                }
                Ok(0)
            })?;
            out.versions_dropped += 1;
            out.bytes_freed += freed;
        }
        // The log below the floor.
        for item in t.revlog.range(keys::revlog(space, 0)..keys::revlog(space, floor)) {
            t.revlog.remove(item?.0)?;
        }
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
