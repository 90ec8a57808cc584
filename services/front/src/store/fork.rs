//! Forking a space: a new space holding another's tree as of a revision.
//!
//! Content is stored once per hash, so a fork writes metadata only: per path
//! a current and a history state, a node and, for a file, a version record
//! and one more reference to its content. The fork's history starts over: it
//! is at revision 1, every file at version 1.
//!
//! The source is never locked. Its tree is read a page at a time from its
//! snapshot at the fork's revision, and each page is written by a
//! transaction of its own, under a space ID nothing names yet, that also
//! reads the source's record (on a database: locks its row): a compaction
//! past the fork's revision fails the fork instead of dropping content a
//! page refers to, and once a page holds its references, nothing the
//! source does can drop that content. A last transaction publishes the
//! fork: its record, its name and its first revision.
//!
//! Until then the fork is pending (`meta` `forking.` space: when it was last
//! written, in ms). A fork whose front stopped midway is purged like a
//! deleted space (see [`Store::collect_forks`]).

use std::collections::BTreeSet;
use std::time::Duration;

use super::engine::Table;
use super::receipt::ReceiptPlan;
use super::records::{
    Change, ChangeKind, Entry, ForkOrigin, Hash, IndexJob, IndexOp, NodeRecord, RevisionRecord, SpaceRecord, Usage,
    VersionRecord, decode, encode, now_ms,
};
use super::snapshot::{entry_at, walk};
use super::spaces::{already_exists, validate_name};
use super::{Store, content, keys};
use crate::error::{Error, Reason, Result};
use crate::ids::{NodeId, SpaceId};
use crate::path::SpacePath;

/// Paths copied per transaction.
const PAGE: usize = 1000;
/// How often a fork starts over after the source's content went from under
/// a page (a permanent removal in the source since the fork's revision).
const ATTEMPTS: u32 = 3;
/// How long a pending fork may go unwritten before another front purges it:
/// pages take milliseconds, so only a stopped front leaves one this old.
pub const FORK_GRACE: Duration = Duration::from_secs(3600);

/// What `ForkSpace` asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewFork {
    pub source: SpaceId,
    /// 0 = the source's revision now.
    pub at_revision: u64,
    pub name: String,
    /// Becomes the fork's owner.
    pub owner: String,
}

/// What the pages of a fork wrote, for the transaction that publishes it.
#[derive(Debug, Default)]
pub(super) struct Copied {
    usage: Usage,
    changes: Vec<Change>,
}

impl Store {
    /// Creates a space holding the tree of `new.source` as of
    /// `new.at_revision`; see the module docs.
    pub fn fork_space(&self, new: &NewFork, receipt: Option<ReceiptPlan<SpaceRecord>>) -> Result<SpaceRecord> {
        validate_name(&new.name)?;
        if self.space_id_by_name(&new.name)?.is_some() {
            return Err(already_exists(&new.name));
        }
        let source = self.space(new.source)?.ok_or_else(|| Error::space_not_found(&new.source.to_string()))?;
        let revision = if new.at_revision == 0 { source.revision } else { new.at_revision };
        Store::check_revision(&source, revision)?;
        let mut attempts = 0;
        loop {
            let fork = SpaceId::generate();
            let copied = self.copy_tree(new, &source, revision, fork);
            let published = copied.and_then(|copied| self.publish_fork(new, &source, revision, fork, copied, &receipt));
            match published {
                Ok(space) => return Ok(space),
                Err(error) => {
                    self.abandon_fork(fork)?;
                    attempts += 1;
                    if error.reason != Reason::TransactionConflict || attempts == ATTEMPTS {
                        return Err(error);
                    }
                    tracing::info!(source = %source.id, %error, "a fork starts over");
                }
            }
        }
    }

    /// Writes the fork's records a page at a time (see the module docs).
    pub(super) fn copy_tree(
        &self,
        new: &NewFork,
        source: &SpaceRecord,
        revision: u64,
        fork: SpaceId,
    ) -> Result<Copied> {
        let time_ms = now_ms();
        let mut copied = Copied::default();
        let root = SpacePath::root();
        let root_entry = entry_at(self, source.id, root.as_str(), revision)?
            .ok_or_else(|| Error::internal("the source space has no root directory"))?;
        let mut jobs = 0u32;
        let mut copy_page = |entries: Vec<(SpacePath, Entry)>| -> Result<()> {
            let version_keys: Vec<Vec<u8>> = entries
                .iter()
                .filter(|(_, entry)| !entry.is_dir())
                .map(|(_, entry)| keys::version(source.id, entry.node, entry.version))
                .collect();
            let key_refs: Vec<(Table, &[u8])> = version_keys.iter().map(|key| (Table::Versions, &key[..])).collect();
            let mut versions = self.engine().get_many(&key_refs)?.into_iter();
            let mut rows = Rows::default();
            for (path, entry) in entries {
                let node = NodeId::generate();
                let is_dir = entry.is_dir();
                let mut copy = Entry { node, version: 0, modified_ms: time_ms, revision: 1, ..entry };
                if is_dir {
                    if !path.is_root() {
                        copied.usage.directories += 1;
                    }
                } else {
                    let raw = versions.next().flatten().ok_or_else(|| {
                        Error::new(
                            Reason::TransactionConflict,
                            format!("{path} lost its version in the source while the space was forked."),
                        )
                    })?;
                    let record = VersionRecord {
                        principal: new.owner.clone(),
                        operation: "fork".to_owned(),
                        revision: 1,
                        time_ms,
                        idempotency_key: None,
                        tool_call: None,
                        ..decode(&raw)?
                    };
                    copy.version = 1;
                    copied.usage.files += 1;
                    copied.usage.bytes += record.size;
                    let op = IndexOp::Upsert {
                        path: path.to_string(),
                        version: 1,
                        hash: record.hash,
                        is_text: record.text.is_text,
                    };
                    let job = IndexJob {
                        space: fork,
                        revision: 1,
                        node: Some(node),
                        op,
                        queued_ms: time_ms,
                        encoding: record.charset().name(),
                    };
                    rows.hashes.insert(record.hash);
                    rows.puts.push((Table::Versions, keys::version(fork, node, 1), encode(&record)));
                    rows.puts.push((Table::Queue, keys::queued(fork, 1, jobs), encode(&job)));
                    jobs += 1;
                }
                copied.changes.push(Change {
                    kind: if copy.is_dir() { ChangeKind::Mkdir } else { ChangeKind::Created },
                    node,
                    node_kind: copy.kind,
                    path: path.to_string(),
                    old_path: None,
                    version: copy.version,
                });
                let record = NodeRecord { space: fork, path: path.to_string(), trashed: false };
                rows.puts.push((Table::Nodes, keys::node(node).to_vec(), encode(&record)));
                rows.puts.push((Table::History, keys::history(fork, &path, 1), encode(&Some(copy.clone()))));
                rows.puts.push((Table::Current, keys::current(fork, &path), encode(&copy)));
            }
            self.write_page(source.id, revision, fork, &rows)
        };
        // The root alone, then every page below it.
        copy_page(vec![(root.clone(), root_entry)])?;
        walk(self, source.id, &root, revision, PAGE, &mut copy_page)?;
        Ok(copied)
    }

    /// Writes one page of a fork, holding a reference to each content.
    fn write_page(&self, source: SpaceId, revision: u64, fork: SpaceId, rows: &Rows) -> Result<()> {
        self.check_room(0, 0)?;
        let mut reads = vec![(Table::Spaces, keys::space(source))];
        reads.extend(rows.hashes.iter().map(|hash| (Table::Content, keys::blob_meta(&hash.0))));
        let touched = encode(&now_ms());
        self.transact(|tx| {
            tx.read_ahead(&reads)?;
            let Some(raw) = tx.get(Table::Spaces, &keys::space(source))? else {
                return Err(Error::space_not_found(&source.to_string()));
            };
            Store::check_revision(&decode(&raw)?, revision)?;
            for hash in &rows.hashes {
                if tx.get(Table::Content, &keys::blob_meta(&hash.0))?.is_none() {
                    return Err(Error::new(
                        Reason::TransactionConflict,
                        "Content of the source was removed for good while the space was forked.",
                    ));
                }
            }
            for (table, key, value) in &rows.puts {
                tx.put(*table, key, value)?;
            }
            // One reference per version record written.
            for (table, _, value) in &rows.puts {
                if *table == Table::Versions {
                    content::add_ref(tx, decode::<VersionRecord>(value)?.hash, content::Source::Stored)?;
                }
            }
            tx.put(Table::Meta, &keys::pending_fork(fork), &touched)
        })
    }

    /// Publishes a fork whose pages are written: its record, name, registered
    /// functions and first revision, in one transaction.
    fn publish_fork(
        &self,
        new: &NewFork,
        source: &SpaceRecord,
        revision: u64,
        fork: SpaceId,
        copied: Copied,
        receipt: &Option<ReceiptPlan<SpaceRecord>>,
    ) -> Result<SpaceRecord> {
        let space = SpaceRecord {
            id: fork,
            name: new.name.clone(),
            created_ms: now_ms(),
            revision: 1,
            quota: source.quota,
            usage: copied.usage,
            access: vec![(new.owner.clone(), super::records::Role::Owner)],
            compacted_revision: 0,
            forked_from: Some(ForkOrigin { space: source.id, revision }),
            leases: Vec::new(),
        };
        let functions = self.get(Table::Spaces, &keys::functions(source.id))?;
        let revlog = encode(&RevisionRecord {
            time_ms: space.created_ms,
            principal: new.owner.clone(),
            changes: copied.changes,
            operation: "fork".to_owned(),
            leases: Vec::new(),
        });
        let receipt = receipt.as_ref().map(|receipt| {
            let (key, receipt) = receipt.seal(&space);
            (key, encode(&receipt))
        });
        let (space_key, name_key, pending_key) =
            (keys::space(fork), keys::space_name(&space.name), keys::pending_fork(fork));
        let space_value = encode(&space);
        let reads = [(Table::Spaces, name_key.clone()), (Table::Meta, pending_key.clone())];
        self.transact(|tx| {
            tx.read_ahead(&reads)?;
            if tx.get(Table::Spaces, &name_key)?.is_some() {
                return Err(already_exists(&space.name));
            }
            if tx.get(Table::Meta, &pending_key)?.is_none() {
                return Err(Error::new(
                    Reason::TransactionConflict,
                    "The fork was collected as abandoned before it was published; nothing was created.",
                ));
            }
            tx.delete(Table::Meta, &pending_key)?;
            tx.put(Table::Spaces, &space_key, &space_value)?;
            tx.put(Table::Spaces, &name_key, &fork.to_bytes())?;
            if let Some(functions) = &functions {
                tx.put(Table::Spaces, &keys::functions(fork), functions)?;
            }
            tx.put(Table::Revlog, &keys::revlog(fork, 1), &revlog)?;
            if let Some((key, value)) = &receipt {
                tx.put(Table::Receipts, key, value)?;
            }
            Ok(())
        })?;
        self.committed();
        Ok(space)
    }

    /// Purges what a fork that was not published wrote. Its index jobs may
    /// have reached workers already, so a drop of its index follows them.
    fn abandon_fork(&self, fork: SpaceId) -> Result<()> {
        let drop = IndexJob::drop_space(fork, 2);
        self.transact(|tx| {
            tx.put(Table::Queue, &keys::queued(fork, 2, 0), &encode(&drop))?;
            tx.put(Table::Spaces, &keys::deleted_space(fork), &[])
        })?;
        self.purge_space(fork)?;
        self.transact(|tx| tx.delete(Table::Meta, &keys::pending_fork(fork)))
    }

    /// Purges pending forks not written for `grace`: their front stopped
    /// before publishing them. Returns how many.
    pub fn collect_forks(&self, grace: Duration) -> Result<usize> {
        let cutoff = now_ms() - i64::try_from(grace.as_millis()).unwrap_or(i64::MAX);
        let mut stale = Vec::new();
        for item in self.scan_prefix(Table::Meta, keys::PENDING_FORKS) {
            let (key, value) = item?;
            let Ok(id) = <[u8; 16]>::try_from(&key[keys::PENDING_FORKS.len()..]) else { continue };
            if decode::<i64>(&value)? <= cutoff {
                stale.push(SpaceId::from_bytes(id));
            }
        }
        for fork in &stale {
            tracing::info!(space = %fork, "purging a fork that was never published");
            self.abandon_fork(*fork)?;
        }
        Ok(stale.len())
    }
}

/// The rows one page of a fork writes, and the content it refers to.
#[derive(Default)]
struct Rows {
    puts: Vec<(Table, Vec<u8>, Vec<u8>)>,
    hashes: BTreeSet<Hash>,
}
