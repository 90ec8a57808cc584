//! The front's versioned store, written once against the storage
//! [`engine`] interface.
//!
//! Spaces hold a path tree kept as history by revision (etcd-style MVCC):
//! `current` has each path's latest [`Entry`], `history` every state it had,
//! keyed by revision, so any retained revision can be read as a consistent
//! snapshot. File versions are immutable [`VersionRecord`]s; their content is
//! stored once per BLAKE3 hash. Every mutation is one engine transaction
//! across tables, serialized per space by a lock stripe, and acknowledged
//! only once the engine says it is durable.
//!
//! All methods block; callers on the async runtime use [`Store::blocking`].

mod batched;
mod cache;
pub mod claims;
mod commit;
pub mod content;
pub mod engine;
mod fork;
mod fronts;
mod generate;
mod grouped;
mod history;
pub mod keys;
pub mod leases;
mod outbox;
mod receipt;
pub mod records;
mod revert;
mod snapshot;
mod spaces;
mod structure;
mod write;

use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

use prost::bytes::Bytes;

pub(crate) use commit::{Commit, NewContent};
pub use engine::Health;
pub use engine::postgres::{Postgres, PostgresOptions, masked_url};
pub use engine::sled::{Durability, SledEngine, SledOptions};
pub use fork::{FORK_GRACE, NewFork};
pub use fronts::{FrontId, Lease};
pub use generate::Generated;
pub use history::{Compacted, expired};
pub use receipt::ReceiptPlan;
pub use records::{
    ChangeKind, Entry, ForkOrigin, Hash, IndexJob, IndexOp, Kind, LeaseChange, LeaseRecord, NodeRecord, Quota, Receipt,
    Role, SpaceRecord, Usage, VersionRecord,
};
pub use revert::Reverted;
pub use snapshot::{ScanOptions, ScanPage};
pub use spaces::NewSpace;
pub use write::{
    Actor, SessionMark, WriteBody, WriteMode, WriteOp, WriteOutcome, not_text, unrepresentable, version_conflict,
};

use crate::error::{Error, Reason, Result};
use crate::ids::{NodeId, SpaceId};
use crate::path::SpacePath;
use engine::{Engine, Entries, KeyRange, Table, Tx};
use records::decode;

const FORMAT_KEY: &[u8] = b"format";
const FORMAT: &[u8] = b"agentvfs-store-1";
const LOCK_STRIPES: usize = 64;
/// How often a change whose plan went stale is planned again (see
/// [`Store::replanning`]) before the call fails with TRANSACTION_CONFLICT.
const MAX_REPLANS: u32 = 16;
/// Revisions of deleted spaces, in `spaces` (a big-endian `u64`).
const RETIRED_KEY: &[u8] = b"mretired";

/// Size limits the store enforces on content.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreLimits {
    /// Largest file that text operations accept.
    pub max_text_bytes: u64,
    /// Largest file of any kind.
    pub max_file_bytes: u64,
    /// Default quota for new spaces.
    pub default_quota: Quota,
    /// Free disk space a commit must leave; below it writes are refused
    /// with STORAGE_FULL before sled runs out of room (sled treats a failed
    /// write as fatal for reads too).
    pub min_free_bytes: u64,
    /// Memory sled may use to cache the store's pages, or, on a database,
    /// the cache of immutable records may take.
    pub cache_bytes: u64,
    /// Most entries (files and folders) a subtree may hold for one change to
    /// move, copy, trash or remove it. The bound is memory: while sled
    /// writes one such commit the front grew by about 25 KiB per entry
    /// (measured: a 20,000-file folder took it from 84 MiB to 575 MiB on a
    /// copy, and to 1.25 GiB through a rename and a trash after it).
    pub max_subtree_entries: usize,
}

impl Default for StoreLimits {
    fn default() -> Self {
        Self {
            max_text_bytes: 5 << 20,
            max_file_bytes: 64 << 20,
            default_quota: Quota { max_bytes: 1 << 30, max_files: 100_000 },
            min_free_bytes: 64 << 20,
            cache_bytes: 256 << 20,
            max_subtree_entries: 10_000,
        }
    }
}

/// Handle to the store; cheap to clone.
#[derive(Clone, Debug)]
pub struct Store {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// Counts commits (this front's, and others' it learns of), so followers
    /// of the log know when to look again.
    commits: tokio::sync::watch::Sender<u64>,
    /// Counts this front's own commits, for other fronts (see [`fronts`]).
    own_commits: std::sync::atomic::AtomicU64,
    engine: Box<dyn Engine>,
    /// Immutable records kept in memory, for an engine without a cache.
    cache: Option<cache::Cache>,
    stripes: Vec<Mutex<()>>,
    /// Writes waiting for each lock stripe (see [`grouped`]).
    queued: Vec<grouped::Queue>,
    /// Session records waiting to be written (see [`batched`]).
    session_reads: batched::Batched<(Vec<u8>, Vec<u8>)>,
    /// Held while jobs move from the queue to the outbox (see [`outbox`]).
    publishing: Mutex<()>,
    /// Spaces whose gates this front holds (see [`Store::replanning`]).
    gated: Mutex<std::collections::HashSet<SpaceId>>,
    limits: StoreLimits,
}

/// Gates of spaces held by this front (see [`Store::replanning`]).
struct Gates<'a> {
    store: &'a Store,
    spaces: Vec<SpaceId>,
    _held: engine::Held,
}

impl Drop for Gates<'_> {
    fn drop(&mut self) {
        let mut gated = self.store.inner.gated.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        for space in &self.spaces {
            gated.remove(space);
        }
    }
}

/// Why the store could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("cannot open the store at {path} (its files db, conf and snap.* may be damaged): {detail}")]
    Engine { path: String, detail: String },
    #[error("the store file {path} is damaged: {detail}; restore the data directory from a backup")]
    Damaged { path: String, detail: String },
    #[error("{path} holds data that is not an agentvfs store (format {found:?})")]
    Format { path: String, found: String },
    #[error("cannot start the store flusher: {0}")]
    Thread(#[from] std::io::Error),
    #[error("cannot finish deleting spaces or unclaimed uploads: {0}")]
    Purge(Error),
    #[error("cannot check or write the store's seal: {0}")]
    Seal(Error),
    #[error("cannot read the store: {0}")]
    Read(Error),
    #[error(
        "the database's schema is at version {found}, newer than this build knows ({supported}); \
         run a newer agentvfs-front"
    )]
    SchemaTooNew { found: i32, supported: i32 },
}

impl Store {
    /// Opens (or creates) the embedded store in `dir`.
    pub fn open(dir: &Path, durability: Durability, limits: StoreLimits) -> Result<Self, OpenError> {
        let options =
            SledOptions { durability, cache_bytes: limits.cache_bytes, min_free_bytes: limits.min_free_bytes };
        // sled caches its pages itself.
        Self::on(Box::new(SledEngine::open(dir, options)?), limits, None)
    }

    /// Opens the store in the database of `options`.
    pub fn connect(options: &PostgresOptions, limits: StoreLimits) -> Result<Self, OpenError> {
        let cache = cache::Cache::new(usize::try_from(limits.cache_bytes).unwrap_or(usize::MAX));
        Self::on(Box::new(Postgres::open(options)?), limits, Some(cache))
    }

    /// Opens the store kept by `engine`, making it a store if it is empty.
    fn on(engine: Box<dyn Engine>, limits: StoreLimits, cache: Option<cache::Cache>) -> Result<Self, OpenError> {
        let display = format!("{engine:?}");
        match engine.get(Table::Meta, FORMAT_KEY).map_err(OpenError::Read)? {
            Some(found) if found != FORMAT => {
                return Err(OpenError::Format { path: display, found: String::from_utf8_lossy(&found).into_owned() });
            }
            Some(_) => {}
            None => {
                if engine.scan(Table::Spaces, KeyRange::from(Vec::new()), false).next().is_some() {
                    return Err(OpenError::Format { path: display, found: String::new() });
                }
                // An empty store where a sealed one was: its data was lost.
                engine.check_watermark(0)?;
                engine
                    .transact(&mut |tx| tx.put(Table::Meta, FORMAT_KEY, FORMAT))
                    .and_then(|()| engine.checkpoint(0))
                    .map_err(OpenError::Seal)?;
            }
        }
        let stripes = (0..LOCK_STRIPES).map(|_| Mutex::new(())).collect();
        let store = Self {
            inner: Arc::new(Inner {
                commits: tokio::sync::watch::Sender::new(0),
                own_commits: std::sync::atomic::AtomicU64::new(0),
                engine,
                cache,
                stripes,
                queued: (0..LOCK_STRIPES).map(|_| grouped::Queue::default()).collect(),
                session_reads: batched::Batched::default(),
                publishing: Mutex::new(()),
                gated: Mutex::default(),
                limits,
            }),
        };
        store.inner.engine.check_watermark(store.watermark().map_err(OpenError::Seal)?)?;
        store.start_outbox_head().map_err(OpenError::Read)?;
        store.purge_deleted_spaces().map_err(OpenError::Purge)?;
        store.collect_uploads(content::UPLOAD_GRACE).map_err(OpenError::Purge)?;
        // Other fronts may be forking now; one front alone stopped midway.
        let grace = if store.shared() { fork::FORK_GRACE } else { std::time::Duration::ZERO };
        store.collect_forks(grace).map_err(OpenError::Purge)?;
        store.seal().map_err(OpenError::Seal)?;
        Ok(store)
    }

    /// Runs blocking store work off the async runtime.
    pub async fn blocking<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Store) -> Result<T> + Send + 'static,
    {
        let store = self.clone();
        tokio::task::spawn_blocking(move || f(&store))
            .await
            .map_err(|e| Error::internal(format!("store task failed: {e}")))?
    }

    /// Resolves once every change committed before the call is durable
    /// (the call itself queues for that; the future only waits).
    pub fn durable(&self) -> engine::Durable {
        self.engine().durable()
    }

    /// Notes that a change is on its way to a commit until the value drops
    /// (see [`engine::Engine::expect_commit`]).
    pub fn expect_commit(&self) -> engine::Expected {
        self.engine().expect_commit()
    }

    /// Seals the store, then makes everything durable and stops background
    /// work.
    pub fn close(&self) -> Result<()> {
        self.seal()?;
        self.engine().shutdown()
    }

    pub fn limits(&self) -> StoreLimits {
        self.inner.limits
    }

    /// Refuses a change that brings `incoming` new bytes and releases
    /// `released_chunks` content chunks when the engine cannot take it now.
    pub fn check_room(&self, incoming: u64, released_chunks: u64) -> Result<()> {
        self.engine().check_room(incoming, released_chunks)
    }

    /// How the store's engine is doing (see [`Health`]). Blocks, up to the
    /// engine's connect timeout.
    pub fn health(&self) -> Health {
        self.engine().health()
    }

    /// Bytes the store occupies on the front's disk (`None` on a database).
    pub fn size_on_disk(&self) -> Result<Option<u64>> {
        self.engine().size_on_disk()
    }

    fn engine(&self) -> &dyn Engine {
        &*self.inner.engine
    }

    fn get(&self, table: Table, key: &[u8]) -> Result<Option<Bytes>> {
        self.engine().get(table, key)
    }

    fn get_decoded<T: records::Record>(&self, table: Table, key: &[u8]) -> Result<Option<T>> {
        self.get(table, key)?.map(|raw| decode(&raw)).transpose()
    }

    /// The entries of `table` in `range`, in key order.
    fn range(&self, table: Table, range: KeyRange) -> Entries<'_> {
        self.engine().scan(table, range, false)
    }

    /// The entries of `table` whose keys start with `prefix`, in key order.
    fn scan_prefix(&self, table: Table, prefix: &[u8]) -> Entries<'_> {
        self.range(table, KeyRange::prefix(prefix))
    }

    fn transact(&self, mut work: impl FnMut(&mut dyn Tx) -> Result<()>) -> Result<()> {
        self.engine().transact(&mut work)
    }

    /// Removes `keys` from `table`, a few hundred per transaction (for
    /// records nothing reads any more, so not atomically).
    fn remove_all(&self, table: Table, keys: impl IntoIterator<Item = Bytes>) -> Result<usize> {
        let mut removed = 0;
        let mut keys = keys.into_iter().peekable();
        while keys.peek().is_some() {
            let batch: Vec<Bytes> = keys.by_ref().take(REMOVE_BATCH).collect();
            self.transact(|tx| batch.iter().try_for_each(|key| tx.delete(table, key)))?;
            removed += batch.len();
        }
        Ok(removed)
    }

    /// Runs `attempt`, which plans a change of `spaces` and applies it,
    /// once more while it fails with TRANSACTION_CONFLICT: another front
    /// committed to a space after the plan read it (the commit refuses a
    /// stale plan), or the engine gave up re-running the transaction. The
    /// spaces' lock stripes keep this front's own changes from conflicting
    /// at all; the callers hold them.
    ///
    /// Another front that commits to the space without pause would make
    /// every new plan stale too. So after the first stale plan, the spaces'
    /// gates are held while planning again (see [`Engine::hold`]): every
    /// other front's commit to them waits at its gate until this one has
    /// committed, and the next plan cannot go stale.
    fn replanning<T>(&self, spaces: &[SpaceId], mut attempt: impl FnMut() -> Result<T>) -> Result<T> {
        let mut replans = 0;
        let mut gates = None;
        loop {
            match attempt() {
                Err(error) if error.reason == Reason::TransactionConflict && replans < MAX_REPLANS => {
                    replans += 1;
                    metrics::counter!("agentvfs_store_replans_total").increment(1);
                    let held =
                        if gates.is_none() && self.shared() { self.hold_gates(spaces).map(Some) } else { Ok(None) };
                    match held {
                        Ok(Some(held)) => gates = Some(held),
                        // Held already, or too many holds at once: plan
                        // again after a pause.
                        Ok(None) => pause(replans),
                        Err(error) if error.reason == Reason::TransactionConflict => pause(replans),
                        Err(error) => return Err(error),
                    }
                }
                other => return other,
            }
        }
    }

    /// Holds the gates of `spaces` until the value is dropped; meanwhile
    /// this front's commits to them do not wait at their gates.
    fn hold_gates(&self, spaces: &[SpaceId]) -> Result<Gates<'_>> {
        let rows: Vec<_> = spaces.iter().map(|&space| (Table::Meta, keys::gate(space))).collect();
        let held = self.engine().hold(&rows)?;
        self.inner.gated.lock().unwrap_or_else(std::sync::PoisonError::into_inner).extend(spaces.iter().copied());
        Ok(Gates { store: self, spaces: spaces.to_vec(), _held: held })
    }

    /// The gate a commit to `space` waits at, unless this front holds it.
    fn gate(&self, space: SpaceId) -> Option<Vec<u8>> {
        let gated = self.inner.gated.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        (self.shared() && !gated.contains(&space)).then(|| keys::gate(space))
    }

    /// Serializes mutations of one space (and of the spaces sharing its stripe).
    fn lock_space(&self, space: SpaceId) -> MutexGuard<'_, ()> {
        let stripe = Self::stripe(space);
        self.inner.stripes[stripe].lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Locks the stripes of several spaces, always in stripe order, so that
    /// two multi-space changes can never wait on each other.
    fn lock_spaces(&self, spaces: &[SpaceId]) -> Vec<MutexGuard<'_, ()>> {
        let mut stripes: Vec<usize> = spaces.iter().map(|&s| Self::stripe(s)).collect();
        stripes.sort_unstable();
        stripes.dedup();
        stripes
            .into_iter()
            .map(|i| self.inner.stripes[i].lock().unwrap_or_else(std::sync::PoisonError::into_inner))
            .collect()
    }

    fn stripe(space: SpaceId) -> usize {
        (space.to_bytes()[15] as usize) % LOCK_STRIPES
    }

    // ------------------------------------------------------------ point reads

    pub fn space(&self, id: SpaceId) -> Result<Option<SpaceRecord>> {
        self.get_decoded(Table::Spaces, &keys::space(id))
    }

    pub fn space_id_by_name(&self, name: &str) -> Result<Option<SpaceId>> {
        Ok(self
            .get(Table::Spaces, &keys::space_name(name))?
            .and_then(|raw| <[u8; 16]>::try_from(raw.as_ref()).ok().map(SpaceId::from_bytes)))
    }

    /// The space named `name`. On a database the ID a name stands for is
    /// remembered: a space's ID never changes, and the record read by ID
    /// confirms the name (a space deleted and created again under its name
    /// has another ID, which is then looked up again).
    pub fn space_by_name(&self, name: &str) -> Result<Option<SpaceRecord>> {
        let cache = self.inner.cache.as_ref();
        if let Some(id) = cache.and_then(|cache| cache.space_id(name))
            && let Some(record) = self.space(id)?.filter(|record| record.name == name)
        {
            return Ok(Some(record));
        }
        let Some(id) = self.space_id_by_name(name)? else { return Ok(None) };
        let record = self.space(id)?;
        if let (Some(cache), Some(record)) = (cache, &record) {
            cache.put_space_id(&record.name, record.id);
        }
        Ok(record)
    }

    /// A space's record and the latest state of `path` in it, read together
    /// (one round trip on a database). `name`, when given, must be the
    /// space's name: a space found by a remembered ID is checked by it.
    pub fn space_with_entry(
        &self,
        id: SpaceId,
        name: Option<&str>,
        path: &SpacePath,
    ) -> Result<Option<(SpaceRecord, Option<Entry>)>> {
        let found = self.space_with_entries(id, std::slice::from_ref(path))?;
        Ok(found.filter(|(space, _)| name.is_none_or(|name| name == space.name)).map(|(space, mut entries)| {
            let entry = entries.pop().flatten();
            (space, entry)
        }))
    }

    /// A space's record and the latest states of `paths` in it, read
    /// together (one round trip on a database).
    pub(crate) fn space_with_entries(
        &self,
        id: SpaceId,
        paths: &[SpacePath],
    ) -> Result<Option<(SpaceRecord, Vec<Option<Entry>>)>> {
        let space_key = keys::space(id);
        let entry_keys: Vec<Vec<u8>> = paths.iter().map(|path| keys::current(id, path)).collect();
        let mut wanted: Vec<(Table, &[u8])> = vec![(Table::Spaces, &space_key)];
        wanted.extend(entry_keys.iter().map(|key| (Table::Current, key.as_slice())));
        let mut found = self.engine().get_many(&wanted)?.into_iter();
        let Some(space) = found.next().flatten().map(|raw| decode::<SpaceRecord>(&raw)).transpose()? else {
            return Ok(None);
        };
        let entries = found.map(|raw| raw.map(|raw| decode(&raw)).transpose()).collect::<Result<_>>()?;
        Ok(Some((space, entries)))
    }

    /// The ID `name` stands for, when this front remembers it (see
    /// [`Store::space_by_name`]): a hint, to be confirmed by the record.
    pub fn remembered_space_id(&self, name: &str) -> Option<SpaceId> {
        self.inner.cache.as_ref().and_then(|cache| cache.space_id(name))
    }

    /// Spaces ordered by name, starting after `after`.
    pub fn spaces_by_name(&self, after: Option<&str>) -> impl Iterator<Item = Result<SpaceRecord>> + '_ {
        let start = match after {
            Some(name) => {
                let mut key = keys::space_name(name);
                key.push(0);
                key
            }
            None => keys::space_name(""),
        };
        self.range(Table::Spaces, KeyRange::new(start, keys::space_name("\u{10ffff}"))).filter_map(move |item| {
            let (_, id) = match item {
                Ok(kv) => kv,
                Err(e) => return Some(Err(e)),
            };
            let id = SpaceId::from_bytes(<[u8; 16]>::try_from(id.as_ref()).ok()?);
            self.space(id).transpose()
        })
    }

    /// The latest state of `path`, or its state as of `revision`.
    pub fn entry(&self, space: SpaceId, path: &SpacePath, revision: Option<u64>) -> Result<Option<Entry>> {
        match revision {
            None => self.get_decoded(Table::Current, &keys::current(space, path)),
            Some(revision) => snapshot::entry_at(self, space, path.as_str(), revision),
        }
    }

    pub fn node(&self, id: NodeId) -> Result<Option<NodeRecord>> {
        self.get_decoded(Table::Nodes, &keys::node(id))
    }

    pub fn version(&self, space: SpaceId, node: NodeId, version: u64) -> Result<Option<VersionRecord>> {
        let cache = self.inner.cache.as_ref();
        if let Some(record) = cache.and_then(|cache| cache.version(space, node, version)) {
            return Ok(Some(record));
        }
        let record: Option<VersionRecord> = self.get_decoded(Table::Versions, &keys::version(space, node, version))?;
        if let (Some(cache), Some(record)) = (cache, &record) {
            cache.put_version(space, node, version, record);
        }
        Ok(record)
    }

    /// Versions of a node, newest first, starting below `before`.
    pub fn versions(
        &self,
        space: SpaceId,
        node: NodeId,
        before: Option<u64>,
        limit: usize,
    ) -> Result<Vec<(u64, VersionRecord)>> {
        let start = keys::version(space, node, 0);
        let end = keys::version(space, node, before.unwrap_or(u64::MAX));
        let mut out = Vec::new();
        for item in self.engine().scan(Table::Versions, KeyRange::new(start, end), true).take(limit) {
            let (key, raw) = item?;
            out.push((keys::parse_version_number(&key)?, decode(&raw)?));
        }
        Ok(out)
    }

    /// The bytes with this hash, verified.
    pub fn content(&self, hash: Hash) -> Result<Vec<u8>> {
        let cache = self.inner.cache.as_ref();
        if let Some(bytes) = cache.and_then(|cache| cache.content(hash)) {
            return Ok(bytes.to_vec());
        }
        let bytes = content::read(self, hash)?;
        if let Some(cache) = cache
            && bytes.len() <= cache::MAX_CACHED_CONTENT
        {
            cache.put_content(hash, Bytes::copy_from_slice(&bytes));
        }
        Ok(bytes)
    }

    /// The receipt of an idempotent call, if one is kept.
    pub fn receipt(&self, key: &[u8; 32]) -> Result<Option<Receipt>> {
        self.get_decoded(Table::Receipts, key)
    }

    /// Keeps a receipt for a call that changed nothing (a change's receipt is
    /// written by its commit, in the same transaction).
    pub fn put_receipt(&self, key: &[u8; 32], receipt: &Receipt) -> Result<()> {
        let value = records::encode(receipt);
        self.transact(|tx| tx.put(Table::Receipts, key, &value))
    }

    /// Drops receipts created before `cutoff_ms`; returns how many. (The
    /// embedded engine drops them in bulk: some stay a while longer.)
    pub fn prune_receipts(&self, cutoff_ms: i64) -> Result<usize> {
        self.engine().prune(Table::Receipts, &|raw| Ok(decode::<Receipt>(raw)?.created_ms < cutoff_ms))
    }

    /// The bytes with this hash, not hashed again (for workers, which may
    /// hash them themselves); `None` when no content has this hash.
    pub fn content_unverified(&self, hash: Hash) -> Result<Option<Vec<u8>>> {
        if let Some(bytes) = self.inner.cache.as_ref().and_then(|cache| cache.content(hash)) {
            return Ok(Some(bytes.to_vec()));
        }
        content::read_if_stored(self, hash)
    }

    /// [`Store::content_unverified`] as the stored chunks, without copying them.
    pub fn content_chunks_unverified(&self, hash: Hash) -> Result<Option<Vec<Bytes>>> {
        if let Some(bytes) = self.inner.cache.as_ref().and_then(|cache| cache.content(hash)) {
            return Ok(Some(vec![bytes]));
        }
        content::read_chunks_if_stored(self, hash)
    }

    /// A reader of the content with this hash, a run of chunks at a time;
    /// DATA_LOSS when no content has this hash.
    pub fn content_reader(&self, hash: Hash) -> Result<content::ChunkReader> {
        content::ChunkReader::open(self, hash)
    }

    /// The next run of at most `max` chunks of `reader`'s content (see
    /// [`content::ChunkReader::next_run`]).
    pub fn read_content_run(&self, reader: &mut content::ChunkReader, max: u32) -> Result<Vec<Vec<u8>>> {
        reader.next_run(self, max)
    }

    /// One page of a snapshot walk; see [`ScanOptions`].
    pub fn scan(&self, space: SpaceId, options: &ScanOptions<'_>) -> Result<ScanPage> {
        snapshot::scan(self, space, options)
    }

    /// Every change the store has committed: the live spaces' revisions
    /// plus those of deleted spaces (moved under [`RETIRED_KEY`] by the
    /// deletion itself), so it never goes down. An engine that seals the
    /// store records it (see [`engine::sled::seal`]).
    pub(crate) fn watermark(&self) -> Result<u64> {
        let mut total = self.retired()?;
        for item in self.scan_prefix(Table::Spaces, b"s") {
            total += decode::<SpaceRecord>(&item?.1)?.revision;
        }
        Ok(total)
    }

    /// Revisions of deleted spaces (see [`Store::watermark`]).
    fn retired(&self) -> Result<u64> {
        retired_count(self.get(Table::Spaces, RETIRED_KEY)?)
    }

    /// Seals what is committed now: computes the watermark, then has the
    /// engine make everything durable and record it.
    pub fn seal(&self) -> Result<()> {
        let watermark = self.watermark()?;
        self.engine().checkpoint(watermark)
    }

    /// Refuses a revision that is compacted away or not yet written.
    pub fn check_revision(space: &SpaceRecord, revision: u64) -> Result<()> {
        if revision < space.compacted_revision {
            return Err(Error::new(
                Reason::SnapshotExpired,
                format!(
                    "Revision {revision} was compacted away; the oldest readable revision is {}.",
                    space.compacted_revision
                ),
            )
            .with("revision", revision)
            .with("compactedRevision", space.compacted_revision));
        }
        if revision > space.revision {
            return Err(Error::invalid_argument(
                "at_revision",
                format!("Revision {revision} does not exist yet; the space is at revision {}.", space.revision),
            )
            .with("currentRevision", space.revision));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;

/// Records removed by [`Store::remove_all`] per transaction.
const REMOVE_BATCH: usize = 512;

fn retired_count(raw: Option<Bytes>) -> Result<u64> {
    match raw {
        Some(raw) => Ok(u64::from_be_bytes(raw.as_ref().try_into().map_err(|_| Error::internal("bad retired count"))?)),
        None => Ok(0),
    }
}

/// The pause before the `replans`th plan of a change whose plans went stale.
fn pause(replans: u32) {
    std::thread::sleep(std::time::Duration::from_millis(fastrand::u64(1..=4 * u64::from(replans))));
}
