//! The front's versioned store on sled 0.34.
//!
//! Spaces hold a path tree kept as history by revision (etcd-style MVCC):
//! `current` has each path's latest [`Entry`], `history` every state it had,
//! keyed by revision, so any retained revision can be read as a consistent
//! snapshot. File versions are immutable [`VersionRecord`]s; their content is
//! stored once per BLAKE3 hash. Every mutation is one sled transaction across
//! trees, serialized per space by a lock stripe, and acknowledged only after a
//! flush that covers it ([`flusher`]).
//!
//! All methods block; callers on the async runtime use [`Store::blocking`].

mod commit;
pub mod content;
mod flusher;
mod generate;
mod history;
pub mod keys;
mod outbox;
mod receipt;
pub mod records;
pub mod seal;
mod snapshot;
mod spaces;
mod structure;
mod write;

use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

pub(crate) use commit::Commit;
pub use flusher::Durability;
pub use generate::Generated;
pub use history::{Compacted, expired};
pub use receipt::ReceiptPlan;
pub use records::{
    ChangeKind, Entry, Hash, IndexJob, IndexOp, Kind, NodeRecord, Quota, Receipt, Role, SpaceRecord, Usage,
    VersionRecord,
};
pub use snapshot::{ScanOptions, ScanPage};
pub use spaces::NewSpace;
pub use write::{Actor, WriteBody, WriteMode, WriteOp, WriteOutcome, not_text, version_conflict};

use crate::error::{Error, Reason, Result};
use crate::ids::{NodeId, SpaceId};
use crate::path::SpacePath;
use records::decode;

const FORMAT_KEY: &[u8] = b"format";
const FORMAT: &[u8] = b"agentvfs-store-1";
const LOCK_STRIPES: usize = 64;

/// Disk room to reserve per content chunk a change releases: sled's page
/// rewrites took up to five times the bytes removed (see
/// [`Store::check_room_to_release`]); this allows eight.
const REWRITE_PER_CHUNK: u64 = 8 * content::CHUNK_SIZE as u64;
/// Disk room a releasing change needs besides its rewrites, for its records.
const RELEASE_SLACK: u64 = 1 << 20;

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
    /// Memory sled may use to cache the store's pages.
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
    /// Counts commits, so followers of the log know when to look again.
    commits: tokio::sync::watch::Sender<u64>,
    dir: std::path::PathBuf,
    db: sled::Db,
    t: Trees,
    flusher: flusher::Flusher,
    stripes: Vec<Mutex<()>>,
    /// Held while the seal is written (see [`Store::seal`]).
    sealing: Mutex<()>,
    limits: StoreLimits,
}

#[derive(Debug, Clone)]
struct Trees {
    spaces: sled::Tree,
    current: sled::Tree,
    history: sled::Tree,
    nodes: sled::Tree,
    versions: sled::Tree,
    content: sled::Tree,
    revlog: sled::Tree,
    trash: sled::Tree,
    receipts: sled::Tree,
    outbox: sled::Tree,
}

/// Why the store could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("cannot open the store at {path} (its files db, conf and snap.* may be damaged): {source}")]
    Sled { path: String, source: sled::Error },
    #[error("the store file {path} is damaged: {detail}; restore the data directory from a backup")]
    Damaged { path: String, detail: String },
    #[error("{path} holds data that is not an agentvfs store (format {found:?})")]
    Format { path: String, found: String },
    #[error("cannot start the store flusher: {0}")]
    Thread(#[from] std::io::Error),
    #[error("cannot finish deleting spaces: {0}")]
    Purge(Error),
    #[error("cannot check or write the store's seal: {0}")]
    Seal(Error),
}

impl Store {
    /// Opens (or creates) the store in `dir`.
    pub fn open(dir: &Path, durability: Durability, limits: StoreLimits) -> Result<Self, OpenError> {
        let display = dir.display().to_string();
        let sled_err = |source| OpenError::Sled { path: display.clone(), source };
        let sealed = seal::read(dir)?;
        // Before sled, which would start an empty store over a lost file.
        seal::check_files(dir, sealed)?;
        let db = sled::Config::new()
            .path(dir)
            .cache_capacity(limits.cache_bytes)
            .mode(sled::Mode::HighThroughput)
            .open()
            .map_err(sled_err)?;
        let tree = |name: &str| db.open_tree(name);
        let t = Trees {
            spaces: tree("spaces").map_err(sled_err)?,
            current: tree("current").map_err(sled_err)?,
            history: tree("history").map_err(sled_err)?,
            nodes: tree("nodes").map_err(sled_err)?,
            versions: tree("versions").map_err(sled_err)?,
            content: tree("content").map_err(sled_err)?,
            revlog: tree("revlog").map_err(sled_err)?,
            trash: tree("trash").map_err(sled_err)?,
            receipts: tree("receipts").map_err(sled_err)?,
            outbox: tree("outbox").map_err(sled_err)?,
        };
        match db.get(FORMAT_KEY).map_err(sled_err)? {
            Some(found) if found != FORMAT => {
                return Err(OpenError::Format { path: display, found: String::from_utf8_lossy(&found).into_owned() });
            }
            Some(_) => {}
            None if !t.spaces.is_empty() => {
                return Err(OpenError::Format { path: display, found: String::new() });
            }
            None => {
                // An empty store where a sealed one was: its files were lost.
                seal::check(dir, sealed.unwrap_or(0), 0)?;
                db.insert(FORMAT_KEY, FORMAT).map_err(sled_err)?;
                db.flush().map_err(sled_err)?;
            }
        }
        let flusher = flusher::Flusher::start(db.clone(), durability)?;
        let stripes = (0..LOCK_STRIPES).map(|_| Mutex::new(())).collect();
        let store = Self {
            inner: Arc::new(Inner {
                commits: tokio::sync::watch::Sender::new(0),
                dir: dir.to_owned(),
                db,
                t,
                flusher,
                stripes,
                sealing: Mutex::new(()),
                limits,
            }),
        };
        if let Some(sealed) = sealed {
            seal::check(dir, sealed, store.watermark().map_err(OpenError::Seal)?)?;
        }
        store.purge_deleted_spaces().map_err(OpenError::Purge)?;
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

    /// Resolves once every change committed so far is on disk.
    pub async fn durable(&self) -> Result<()> {
        self.inner.flusher.wait().await
    }

    /// Flushes everything, stops background work and seals the store.
    pub fn close(&self) -> Result<()> {
        self.inner.flusher.shutdown()?;
        self.seal()
    }

    pub fn limits(&self) -> StoreLimits {
        self.inner.limits
    }

    /// Refuses a change of about `incoming` bytes when the disk would be left
    /// with less than the configured free space.
    pub fn check_free_space(&self, incoming: u64) -> Result<()> {
        let available = self.available_bytes()?;
        // sled may write a value more than once (log, then page) before it compacts.
        let needed = self.inner.limits.min_free_bytes.saturating_add(incoming.saturating_mul(2));
        if available < needed {
            return Err(Error::new(Reason::StorageFull, "The server's storage is full; the change was not saved.")
                .with("availableBytes", available));
        }
        Ok(())
    }

    /// Refuses a change that releases `chunks` stored content chunks when
    /// sled could run the disk out of space doing it. Removing content makes
    /// sled rewrite the pages that held it, and for a while the old and new
    /// pages both take room: scattered removals from a large store took up
    /// to five times the bytes removed here. Such a change may use the
    /// reserve that `min_free_bytes` keeps (that is what it is for), but not
    /// go past it: once sled has failed a write for want of disk, every later
    /// write hangs (until the call times out), even after room is freed,
    /// until the front restarts.
    pub fn check_room_to_release(&self, chunks: u64) -> Result<()> {
        if chunks == 0 {
            return Ok(());
        }
        let available = self.available_bytes()?;
        let mut rewrite = chunks.saturating_mul(REWRITE_PER_CHUNK);
        if available < rewrite.saturating_add(RELEASE_SLACK) {
            // sled cannot rewrite more than it holds (looked up only when it matters).
            rewrite = rewrite.min(self.size_on_disk()?);
        }
        let needed = rewrite.saturating_add(RELEASE_SLACK);
        if available < needed {
            return Err(Error::new(
                Reason::StorageFull,
                "The server's disk is too full to remove this much stored content safely at once.",
            )
            .with("availableBytes", available)
            .with("neededBytes", needed)
            .next_action("Remove fewer files at a time, or tell an operator to free disk space."));
        }
        Ok(())
    }

    /// Free bytes on the disk of the data directory.
    fn available_bytes(&self) -> Result<u64> {
        let stat = rustix::fs::statvfs(&self.inner.dir)
            .map_err(|e| Error::internal(format!("cannot read free space of the data directory: {e}")))?;
        Ok(stat.f_bavail.saturating_mul(stat.f_frsize))
    }

    /// Bytes the store occupies on disk.
    pub fn size_on_disk(&self) -> Result<u64> {
        Ok(self.inner.db.size_on_disk()?)
    }

    fn trees(&self) -> &Trees {
        &self.inner.t
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
        self.trees().spaces.get(keys::space(id))?.map(|raw| decode(&raw)).transpose()
    }

    pub fn space_id_by_name(&self, name: &str) -> Result<Option<SpaceId>> {
        Ok(self
            .trees()
            .spaces
            .get(keys::space_name(name))?
            .and_then(|raw| <[u8; 16]>::try_from(raw.as_ref()).ok().map(SpaceId::from_bytes)))
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
        self.trees().spaces.range(start..keys::space_name("\u{10ffff}")).filter_map(move |item| {
            let (_, id) = match item {
                Ok(kv) => kv,
                Err(e) => return Some(Err(e.into())),
            };
            let id = SpaceId::from_bytes(<[u8; 16]>::try_from(id.as_ref()).ok()?);
            self.space(id).transpose()
        })
    }

    /// The latest state of `path`, or its state as of `revision`.
    pub fn entry(&self, space: SpaceId, path: &SpacePath, revision: Option<u64>) -> Result<Option<Entry>> {
        match revision {
            None => self.trees().current.get(keys::current(space, path))?.map(|raw| decode(&raw)).transpose(),
            Some(revision) => snapshot::entry_at(&self.trees().history, space, path.as_str(), revision),
        }
    }

    pub fn node(&self, id: NodeId) -> Result<Option<NodeRecord>> {
        self.trees().nodes.get(keys::node(id))?.map(|raw| decode(&raw)).transpose()
    }

    pub fn version(&self, space: SpaceId, node: NodeId, version: u64) -> Result<Option<VersionRecord>> {
        self.trees().versions.get(keys::version(space, node, version))?.map(|raw| decode(&raw)).transpose()
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
        for item in self.trees().versions.range(start..end).rev().take(limit) {
            let (key, raw) = item?;
            let number = u64::from_be_bytes(key[32..40].try_into().map_err(|_| Error::internal("bad version key"))?);
            out.push((number, decode(&raw)?));
        }
        Ok(out)
    }

    /// The bytes with this hash, verified.
    pub fn content(&self, hash: Hash) -> Result<Vec<u8>> {
        content::read(&self.trees().content, hash)
    }

    /// The receipt of an idempotent call, if one is kept.
    pub fn receipt(&self, key: &[u8; 32]) -> Result<Option<Receipt>> {
        self.trees().receipts.get(key)?.map(|raw| decode(&raw)).transpose()
    }

    /// Keeps a receipt for a call that changed nothing (a change's receipt is
    /// written by its commit, in the same transaction).
    pub fn put_receipt(&self, key: &[u8; 32], receipt: &Receipt) -> Result<()> {
        self.trees().receipts.insert(key, records::encode(receipt))?;
        Ok(())
    }

    /// Drops receipts created before `cutoff_ms`; returns how many.
    pub fn prune_receipts(&self, cutoff_ms: i64) -> Result<usize> {
        let mut pruned = 0;
        for item in self.trees().receipts.iter() {
            let (key, value) = item?;
            let receipt: Receipt = decode(&value)?;
            if receipt.created_ms < cutoff_ms {
                self.trees().receipts.remove(key)?;
                pruned += 1;
            }
        }
        Ok(pruned)
    }

    /// The bytes with this hash, not hashed again (for workers, which may
    /// hash them themselves); `None` when no content has this hash.
    pub fn content_unverified(&self, hash: Hash) -> Result<Option<Vec<u8>>> {
        content::read_if_stored(&self.trees().content, hash)
    }

    /// [`Store::content_unverified`] as the stored chunks, without copying them.
    pub fn content_chunks_unverified(&self, hash: Hash) -> Result<Option<Vec<prost::bytes::Bytes>>> {
        let chunks = content::read_chunks_if_stored(&self.trees().content, hash)?;
        Ok(chunks.map(|chunks| chunks.into_iter().map(prost::bytes::Bytes::from_owner).collect()))
    }

    /// A reader of the content with this hash, a run of chunks at a time;
    /// DATA_LOSS when no content has this hash.
    pub fn content_reader(&self, hash: Hash) -> Result<content::ChunkReader> {
        content::ChunkReader::open(&self.trees().content, hash)
    }

    /// The next run of at most `max` chunks of `reader`'s content (see
    /// [`content::ChunkReader::next_run`]).
    pub fn read_content_run(&self, reader: &mut content::ChunkReader, max: u32) -> Result<Vec<Vec<u8>>> {
        reader.next_run(&self.trees().content, max)
    }

    /// One page of a snapshot walk; see [`ScanOptions`].
    pub fn scan(&self, space: SpaceId, options: &ScanOptions<'_>) -> Result<ScanPage> {
        snapshot::scan(&self.trees().history, space, options)
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

// sled's errors become the store's here, so that no sled type leaves it.

impl From<sled::Error> for Error {
    fn from(error: sled::Error) -> Error {
        if let sled::Error::Io(io) = &error
            && is_storage_full(io)
        {
            return Error::new(Reason::StorageFull, "The server's storage is full; the change was not saved.");
        }
        Error::internal(format!("store: {error}"))
    }
}

impl From<sled::transaction::TransactionError<Error>> for Error {
    fn from(error: sled::transaction::TransactionError<Error>) -> Error {
        match error {
            sled::transaction::TransactionError::Abort(error) => error,
            sled::transaction::TransactionError::Storage(error) => error.into(),
        }
    }
}

fn is_storage_full(error: &std::io::Error) -> bool {
    // ENOSPC (28) and EDQUOT (122) on Linux.
    error.kind() == std::io::ErrorKind::StorageFull || matches!(error.raw_os_error(), Some(28 | 122))
}
