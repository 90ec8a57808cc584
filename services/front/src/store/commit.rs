//! One committed mutation: everything a change writes, applied as a single
//! engine transaction across tables at one new revision.
//!
//! Mutations plan a [`Commit`] while holding their space's lock stripe, reading
//! the current state outside any transaction, then apply it. The transaction
//! reads the space's record and refuses the commit unless the space is still
//! at the revision it was planned on, so nothing planned can be stale. Its
//! closure does no I/O and no heavy work: the engine may run it more than
//! once.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use prost::bytes::Bytes;

use super::engine::{Table, Tx};
use super::outbox::Jobs;
use super::records::{
    Change, ChangeKind, Entry, Hash, IndexJob, IndexOp, Kind, LeaseEvent, NodeRecord, Receipt, RevisionRecord,
    SpaceRecord, TrashRecord, VersionRecord, decode, encode, now_ms,
};
use super::{Store, content, keys};
use crate::error::{Error, Reason, Result};
use crate::ids::NodeId;
use crate::path::SpacePath;
use crate::system_files::Function;

/// A planned mutation of one space; see the module docs.
#[derive(Debug)]
pub(crate) struct Commit {
    /// The space as it will be after the commit (revision already bumped).
    pub space: SpaceRecord,
    pub time_ms: i64,
    pub principal: String,
    /// New path states in the order planned; `None` removes the path.
    entries: Vec<(SpacePath, Option<Entry>)>,
    /// Where the latest planned state of each path is in `entries`: a commit
    /// of a large subtree looks paths up once per entry.
    latest: HashMap<SpacePath, usize>,
    pub nodes: Vec<(NodeId, NodeRecord)>,
    versions: Vec<NewVersion>,
    /// Where each planned version is in `versions`, by node and number.
    version_index: BTreeMap<(NodeId, u64), usize>,
    pub changes: Vec<Change>,
    /// The commit creates the space (and claims its name).
    pub creating: bool,
    /// What made the commit, for watchers (see [`RevisionRecord::operation`]).
    pub operation: &'static str,
    /// The leases the call that plans the commit carries (see [`super::leases`]).
    pub carried: Vec<String>,
    /// Lease changes, for watchers.
    pub lease_events: Vec<LeaseEvent>,
    /// A new list of registered functions, when it changes.
    pub functions: Option<Vec<Function>>,
    /// Records deleted for good (permanent removal).
    pub purge: Vec<Purge>,
    /// Trash records written (`Some`) or dropped (`None`), by key.
    pub trash: Vec<(Vec<u8>, Option<TrashRecord>)>,
    /// The receipt of the idempotent call that made this commit.
    pub receipt: Option<([u8; 32], Receipt)>,
    /// A session's record of the version this commit writes (key, value;
    /// see [`crate::sessions`]), kept by its transaction.
    pub session_read: Option<(Vec<u8>, Vec<u8>)>,
    /// Latest states of paths read ahead, in one round trip, while the
    /// space's lock is held (see [`Commit::read_ahead`]).
    read_ahead: HashMap<SpacePath, Option<Entry>>,
}

/// A record a permanent removal deletes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Purge {
    /// A history key whose state, of a removed node, adds nothing once
    /// erased.
    History(Vec<u8>),
    /// A history key whose state, of a removed node, becomes "nothing
    /// here", so that the path's earlier state does not show through.
    Erase(Vec<u8>),
    /// A version record, with the content reference it releases and the
    /// size of that content.
    Version {
        key: Vec<u8>,
        hash: Hash,
        size: u64,
    },
    Node(NodeId),
}

#[derive(Debug)]
pub(crate) struct NewVersion {
    pub node: NodeId,
    pub number: u64,
    pub record: VersionRecord,
    pub content: NewContent,
}

/// Where a new version's content comes from.
#[derive(Debug)]
pub(crate) enum NewContent {
    /// Stored already (a copy).
    Stored,
    /// These bytes, stored by the commit unless they are already.
    Bytes(Arc<Vec<u8>>),
    /// Staged as an upload before the commit (see [`content::stage`]),
    /// claimed by it unless the content is stored already.
    Uploaded(content::Uploaded),
}

impl Commit {
    /// Starts a commit at the space's next revision.
    pub fn new(mut space: SpaceRecord, principal: &str) -> Self {
        space.revision += 1;
        Self {
            space,
            time_ms: now_ms(),
            principal: principal.to_owned(),
            entries: Vec::new(),
            latest: HashMap::new(),
            nodes: Vec::new(),
            versions: Vec::new(),
            version_index: BTreeMap::new(),
            changes: Vec::new(),
            creating: false,
            operation: "",
            carried: super::leases::carried(),
            lease_events: Vec::new(),
            functions: None,
            purge: Vec::new(),
            trash: Vec::new(),
            receipt: None,
            session_read: None,
            read_ahead: HashMap::new(),
        }
    }

    /// Latest states of paths read under the space's lock before planning
    /// (see [`Store::space_with_entries`]), for [`Commit::current`] to
    /// answer from.
    pub fn remember(&mut self, states: impl IntoIterator<Item = (SpacePath, Option<Entry>)>) {
        self.read_ahead.extend(states);
    }

    pub fn revision(&self) -> u64 {
        self.space.revision
    }

    /// The state `path` will have after this commit, as planned so far.
    fn planned(&self, path: &SpacePath) -> Option<&Option<Entry>> {
        self.latest.get(path).map(|&at| &self.entries[at].1)
    }

    /// Plans the state of `path` after this commit (`None` removes it).
    pub fn plan(&mut self, path: SpacePath, entry: Option<Entry>) {
        self.latest.insert(path.clone(), self.entries.len());
        self.entries.push((path, entry));
    }

    /// Every planned path state, in the order planned.
    pub fn planned_entries(&self) -> &[(SpacePath, Option<Entry>)] {
        &self.entries
    }

    /// Plans a new version record.
    pub fn add_version(&mut self, version: NewVersion) {
        self.version_index.insert((version.node, version.number), self.versions.len());
        self.versions.push(version);
    }

    /// Version `number` of `node`, if this commit plans it.
    pub fn planned_version(&self, node: NodeId, number: u64) -> Option<&NewVersion> {
        self.version_index.get(&(node, number)).map(|&at| &self.versions[at])
    }

    /// The versions this commit plans for `node`, by number.
    pub fn planned_versions_of(&self, node: NodeId) -> impl Iterator<Item = &NewVersion> {
        self.version_index.range((node, 0)..=(node, u64::MAX)).map(|(_, &at)| &self.versions[at])
    }

    /// The latest state of `path`, counting what this commit already plans.
    pub fn current(&self, store: &Store, path: &SpacePath) -> Result<Option<Entry>> {
        match (self.planned(path), self.read_ahead.get(path)) {
            (Some(entry), _) | (None, Some(entry)) => Ok(entry.clone()),
            (None, None) => store.entry(self.space.id, path, None),
        }
    }

    /// Creates every missing ancestor directory of `path`; fails when a file
    /// is in the way.
    pub fn ensure_parents(&mut self, store: &Store, path: &SpacePath) -> Result<()> {
        for ancestor in path.ancestors() {
            match self.current(store, &ancestor)? {
                Some(entry) if entry.is_dir() => {}
                Some(_) => {
                    return Err(Error::new(
                        Reason::NotADirectory,
                        format!("{ancestor} is a file, so {path} cannot be created below it."),
                    )
                    .with("path", &ancestor));
                }
                None => {
                    self.mkdir(&ancestor, false);
                }
            }
        }
        Ok(())
    }

    /// Plans a new directory.
    pub fn mkdir(&mut self, path: &SpacePath, system: bool) -> NodeId {
        let node = NodeId::generate();
        let entry = Entry {
            node,
            kind: Kind::Directory,
            version: 0,
            size: 0,
            hash: Default::default(),
            is_text: false,
            modified_ms: self.time_ms,
            revision: self.revision(),
            system,
            user_modified: false,
            executable: false,
            mime_type: String::new(),
        };
        self.space.usage.directories += 1;
        self.nodes.push((node, NodeRecord { space: self.space.id, path: path.to_string(), trashed: false }));
        self.changes.push(Change {
            kind: ChangeKind::Mkdir,
            node,
            node_kind: Kind::Directory,
            path: path.to_string(),
            old_path: None,
            version: 0,
        });
        self.plan(path.clone(), Some(entry));
        node
    }

    /// Plans a file's new version. `previous` is its current entry, if any.
    pub fn put_file(
        &mut self,
        path: &SpacePath,
        previous: Option<&Entry>,
        mut record: VersionRecord,
        content: NewContent,
        system: bool,
    ) -> Entry {
        let (node, number) = match previous {
            Some(entry) => (entry.node, entry.version + 1),
            None => (NodeId::generate(), 1),
        };
        record.revision = self.revision();
        record.time_ms = self.time_ms;
        let entry = Entry {
            node,
            kind: Kind::File,
            version: number,
            size: record.size,
            hash: record.hash,
            is_text: record.text.is_text,
            modified_ms: self.time_ms,
            revision: self.revision(),
            system: previous.map_or(system, |e| e.system),
            // A principal's write to a generated file marks it user-modified; a
            // regeneration by the service clears the mark.
            user_modified: !system && previous.is_some_and(|e| e.system || e.user_modified),
            executable: record.executable,
            mime_type: record.mime_type.clone(),
        };
        let usage = &mut self.space.usage;
        usage.bytes = usage.bytes - previous.map_or(0, |e| e.size) + record.size;
        if previous.is_none() {
            usage.files += 1;
            self.nodes.push((node, NodeRecord { space: self.space.id, path: path.to_string(), trashed: false }));
        }
        self.changes.push(Change {
            kind: if previous.is_some() { ChangeKind::Modified } else { ChangeKind::Created },
            node,
            node_kind: Kind::File,
            path: path.to_string(),
            old_path: None,
            version: number,
        });
        self.add_version(NewVersion { node, number, record, content });
        self.plan(path.clone(), Some(entry.clone()));
        entry
    }

    /// Refuses the commit when it would take the space past its quota.
    pub fn check_quota(&self, before: &SpaceRecord) -> Result<()> {
        let (usage, quota) = (&self.space.usage, &self.space.quota);
        if usage.bytes > before.usage.bytes && usage.bytes > quota.max_bytes {
            return Err(Error::new(
                Reason::QuotaExceeded,
                format!("The space would hold {} bytes, over its quota of {} bytes.", usage.bytes, quota.max_bytes),
            )
            .with("limit", quota.max_bytes)
            .with("used", before.usage.bytes)
            .with("requested", usage.bytes)
            .quota(format!("space:{}:bytes", self.space.id)));
        }
        if usage.files > before.usage.files && usage.files > quota.max_files {
            return Err(Error::new(
                Reason::QuotaExceeded,
                format!("The space would hold {} files, over its quota of {} files.", usage.files, quota.max_files),
            )
            .with("limit", quota.max_files)
            .with("used", before.usage.files)
            .quota(format!("space:{}:files", self.space.id)));
        }
        Ok(())
    }
}

impl Store {
    /// Applies a planned commit atomically. Not yet durable: see [`Store::durable`].
    pub(crate) fn apply(&self, commit: &Commit) -> Result<()> {
        self.apply_all(&[commit])
    }

    /// Applies several commits (of different spaces) in one transaction.
    pub(crate) fn apply_all(&self, commits: &[&Commit]) -> Result<()> {
        // Staged content was checked for room as it was stored.
        let incoming: u64 = commits
            .iter()
            .flat_map(|c| c.versions.iter())
            .map(|v| match &v.content {
                NewContent::Bytes(bytes) => bytes.len() as u64,
                NewContent::Stored | NewContent::Uploaded(_) => 0,
            })
            .sum();
        let released: u64 = commits
            .iter()
            .flat_map(|c| c.purge.iter())
            .map(|purge| match purge {
                Purge::Version { size, .. } => size.div_ceil(content::CHUNK_SIZE as u64),
                Purge::History(_) | Purge::Erase(_) | Purge::Node(_) => 0,
            })
            .sum();
        self.check_room(incoming, released)?;
        for commit in commits {
            commit.check_leases()?;
        }
        let prepared: Vec<Prepared> =
            commits.iter().map(|commit| Prepared::new(commit, self.gate(commit.space.id), Jobs::of(self))).collect();
        // Large new content goes in first, outside the transaction.
        let mut uploads: HashMap<Hash, content::Uploaded> = HashMap::new();
        let uploaded = self.upload_new_content(commits, &mut uploads);
        let mut unclaimed = Vec::new();
        let committed = uploaded.and_then(|()| {
            // A `panic` action crashes the front here; a `return` action
            // fails the commit as an unreachable store would.
            #[cfg(feature = "failpoints")]
            fail::fail_point!("store::before_commit", |_| Err(Error::new(
                Reason::StoreUnavailable,
                "The store failed the commit at the store::before_commit fault point; nothing was changed."
            )));
            // Every row the commits read, locked in one round trip: the
            // markers of the uploads they claim too.
            let mut reads: std::collections::BTreeSet<(Table, Vec<u8>)> =
                commits.iter().zip(&prepared).flat_map(|(commit, prepared)| reads(commit, prepared)).collect();
            let staged = commits.iter().flat_map(|c| c.versions.iter()).filter_map(|v| match &v.content {
                NewContent::Uploaded(upload) => Some(upload),
                NewContent::Stored | NewContent::Bytes(_) => None,
            });
            for upload in staged.chain(uploads.values()) {
                reads.insert((Table::Meta, keys::staged_marker(&upload.id)));
            }
            let reads: Vec<(Table, Vec<u8>)> = reads.into_iter().collect();
            self.transact(|tx| {
                tx.read_ahead(&reads)?;
                // An upload of content stored meanwhile is not claimed.
                unclaimed.clear();
                for (hash, upload) in &uploads {
                    if tx.get(Table::Content, &keys::blob_meta(&hash.0))?.is_some() {
                        unclaimed.push(upload.id);
                    }
                }
                for (commit, prepared) in commits.iter().zip(&prepared) {
                    write_commit(tx, commit, prepared, &uploads)?;
                }
                Ok(())
            })
        });
        // A claimed upload is the content's now; the others go.
        let release: Vec<content::UploadId> = match committed {
            Ok(()) => unclaimed,
            Err(_) => uploads.values().map(|upload| upload.id).collect(),
        };
        for upload in release {
            content::release_quietly(self, upload);
        }
        committed?;
        fault_point!("store::after_commit");
        self.committed();
        self.cache_committed(commits);
        Ok(())
    }

    /// Keeps what `commits` wrote that never changes, when the engine has a
    /// cache: a version just written is read next more often than not (an
    /// edit reads the version it replaces).
    fn cache_committed(&self, commits: &[&Commit]) {
        let Some(cache) = &self.inner.cache else { return };
        for commit in commits {
            for version in &commit.versions {
                cache.put_version(commit.space.id, version.node, version.number, &version.record);
                if let NewContent::Bytes(bytes) = &version.content
                    && bytes.len() <= super::cache::MAX_CACHED_CONTENT
                {
                    cache.put_content(version.record.hash, Bytes::copy_from_slice(bytes));
                }
            }
        }
    }
}

impl Store {
    /// Uploads the new content of more than one chunk that `commits` bring
    /// and is not stored yet, once per hash, into `uploads`.
    fn upload_new_content(&self, commits: &[&Commit], uploads: &mut HashMap<Hash, content::Uploaded>) -> Result<()> {
        for version in commits.iter().flat_map(|c| c.versions.iter()) {
            let (NewContent::Bytes(bytes), hash) = (&version.content, version.record.hash) else { continue };
            if bytes.len() <= content::CHUNK_SIZE || uploads.contains_key(&hash) || content::is_stored(self, hash)? {
                continue;
            }
            uploads.insert(hash, content::upload(self, bytes)?);
        }
        Ok(())
    }
}

/// The rows [`write_commit`] reads, to be read ahead: the gate, so that a
/// commit that waits there holds no other lock, the space, its name when
/// the commit creates it, and the content the commit refers to.
fn reads(commit: &Commit, prepared: &Prepared) -> Vec<(Table, Vec<u8>)> {
    let gate = prepared.gate_key.iter().map(|key| (Table::Meta, key.clone()));
    let mut reads: Vec<(Table, Vec<u8>)> = gate.chain([(Table::Spaces, prepared.space_key.clone())]).collect();
    if commit.creating {
        reads.push((Table::Spaces, prepared.name_key.clone()));
    }
    let hashes = commit.versions.iter().map(|v| v.record.hash);
    reads.extend(hashes.map(|hash| (Table::Content, keys::blob_meta(&hash.0))));
    reads
}

/// Writes one commit in a transaction that read its [`reads`] ahead, after
/// checking that its space is still where the commit was planned.
fn write_commit(
    tx: &mut dyn Tx,
    commit: &Commit,
    prepared: &Prepared,
    uploads: &HashMap<Hash, content::Uploaded>,
) -> Result<()> {
    let Prepared {
        gate_key: _,
        space_key,
        space_value,
        name_key,
        entries,
        functions_value,
        revlog_value,
        trash_values,
        receipt_value,
        index_jobs,
        jobs,
    } = prepared;
    let stored = tx.get(Table::Spaces, space_key)?;
    if commit.creating {
        if tx.get(Table::Spaces, name_key)?.is_some() || stored.is_some() {
            return Err(Error::new(
                Reason::AlreadyExists,
                format!("A space named {:?} already exists.", commit.space.name),
            )
            .with("name", &commit.space.name));
        }
        tx.put(Table::Spaces, name_key, &commit.space.id.to_bytes())?;
    } else {
        let stored: SpaceRecord = match stored {
            Some(raw) => decode(&raw)?,
            None => return Err(Error::space_not_found(&commit.space.name)),
        };
        if stored.revision + 1 != commit.revision() {
            // Another front committed to the space since the plan read it.
            return Err(Error::new(
                Reason::TransactionConflict,
                "The space changed while this change was planned; it was not saved.",
            ));
        }
    }
    tx.put(Table::Spaces, space_key, space_value)?;
    for (current_key, history_key, current_value, history_value) in entries {
        match current_value {
            Some(value) => tx.put(Table::Current, current_key, value)?,
            None => tx.delete(Table::Current, current_key)?,
        };
        tx.put(Table::History, history_key, history_value)?;
    }
    for (node, record) in &commit.nodes {
        tx.put(Table::Nodes, &keys::node(*node), &encode(record))?;
    }
    for version in &commit.versions {
        let key = keys::version(commit.space.id, version.node, version.number);
        tx.put(Table::Versions, &key, &encode(&version.record))?;
        let hash = version.record.hash;
        let source = match (&version.content, uploads.get(&hash)) {
            (NewContent::Stored, _) => content::Source::Stored,
            (NewContent::Uploaded(upload), _) | (NewContent::Bytes(_), Some(upload)) => {
                content::Source::Uploaded(*upload)
            }
            (NewContent::Bytes(bytes), None) => content::Source::Bytes(bytes),
        };
        content::add_ref(tx, hash, source)?;
    }
    for purge in &commit.purge {
        match purge {
            Purge::History(key) => tx.delete(Table::History, key)?,
            Purge::Erase(key) => tx.put(Table::History, key, &encode(&None::<Entry>))?,
            Purge::Version { key, hash, .. } => {
                if tx.get(Table::Versions, key)?.is_some() {
                    tx.delete(Table::Versions, key)?;
                    content::drop_ref(tx, *hash)?;
                }
            }
            Purge::Node(node) => tx.delete(Table::Nodes, &keys::node(*node))?,
        }
    }
    if let Some((key, value)) = &receipt_value {
        tx.put(Table::Receipts, key, value)?;
    }
    if let Some((key, value)) = &commit.session_read {
        tx.put(Table::Sessions, key, value)?;
    }
    for (key, value) in trash_values {
        match value {
            Some(value) => tx.put(Table::Trash, key, value)?,
            None => tx.delete(Table::Trash, key)?,
        };
    }
    if let Some(functions) = &functions_value {
        tx.put(Table::Spaces, &keys::functions(commit.space.id), functions)?;
    }
    tx.put(Table::Revlog, &keys::revlog(commit.space.id, commit.revision()), revlog_value)?;
    let queued_key = |index: u64| {
        let index = u32::try_from(index).unwrap_or_else(|_| unreachable!("a commit has fewer than 2^32 jobs"));
        keys::queued(commit.space.id, commit.revision(), index)
    };
    jobs.write(tx, index_jobs.iter().map(Vec::as_slice), queued_key)?;
    Ok(())
}

/// (current key, history key, current value or removal, history value).
type PreparedEntry = (Vec<u8>, Vec<u8>, Option<Vec<u8>>, Vec<u8>);

/// A commit's keys and encoded values, computed before the transaction so
/// that its closure (which the engine may re-run) only writes.
struct Prepared {
    /// The space's gate, unless this front holds it (see `Store::replanning`).
    gate_key: Option<Vec<u8>>,
    space_key: Vec<u8>,
    space_value: Vec<u8>,
    name_key: Vec<u8>,
    entries: Vec<PreparedEntry>,
    functions_value: Option<Vec<u8>>,
    revlog_value: Vec<u8>,
    trash_values: Vec<(Vec<u8>, Option<Vec<u8>>)>,
    receipt_value: Option<([u8; 32], Vec<u8>)>,
    index_jobs: Vec<Vec<u8>>,
    /// Where the index jobs go.
    jobs: Jobs,
}

impl Prepared {
    fn new(commit: &Commit, gate_key: Option<Vec<u8>>, jobs: Jobs) -> Self {
        Self {
            gate_key,
            space_key: keys::space(commit.space.id),
            space_value: encode(&commit.space),
            name_key: keys::space_name(&commit.space.name),
            entries: commit
                .entries
                .iter()
                .map(|(path, entry)| {
                    (
                        keys::current(commit.space.id, path),
                        keys::history(commit.space.id, path, commit.revision()),
                        entry.as_ref().map(encode),
                        encode(entry),
                    )
                })
                .collect(),
            functions_value: commit.functions.as_ref().map(encode),
            revlog_value: encode(&RevisionRecord {
                time_ms: commit.time_ms,
                principal: commit.principal.clone(),
                changes: commit.changes.clone(),
                operation: commit.operation.to_owned(),
                leases: commit.lease_events.clone(),
            }),
            trash_values: commit.trash.iter().map(|(key, record)| (key.clone(), record.as_ref().map(encode))).collect(),
            receipt_value: commit.receipt.as_ref().map(|(key, receipt)| (*key, encode(receipt))),
            index_jobs: index_jobs(commit).iter().map(encode).collect(),
            jobs,
        }
    }
}

/// The index jobs a commit's changes call for (files only).
fn index_jobs(commit: &Commit) -> Vec<IndexJob> {
    let job = |node, op, encoding| IndexJob {
        space: commit.space.id,
        revision: commit.revision(),
        node: Some(node),
        op,
        queued_ms: commit.time_ms,
        encoding,
    };
    let mut latest: HashMap<&str, Option<&Entry>> = HashMap::with_capacity(commit.entries.len());
    for (path, entry) in &commit.entries {
        latest.insert(path.as_str(), entry.as_ref());
    }
    commit
        .changes
        .iter()
        .filter(|change| change.node_kind == Kind::File)
        .filter_map(|change| match change.kind {
            ChangeKind::Trashed | ChangeKind::Removed => Some(job(change.node, IndexOp::Delete, String::new())),
            // A move into another space leaves the source with an empty path.
            ChangeKind::Moved if change.path == "/" => Some(job(change.node, IndexOp::Delete, String::new())),
            ChangeKind::Created
            | ChangeKind::Modified
            | ChangeKind::Restored
            | ChangeKind::Renamed
            | ChangeKind::Moved => {
                let entry = (*latest.get(change.path.as_str())?)?;
                let op = IndexOp::Upsert {
                    path: change.path.clone(),
                    version: entry.version,
                    hash: entry.hash,
                    is_text: entry.is_text,
                };
                Some(job(change.node, op, entry.charset().name()))
            }
            ChangeKind::Mkdir => None,
        })
        .collect()
}
