//! The embedded engine: sled 0.34 in a data directory, one tree per table.
//!
//! Transactions span every tree (sled runs them one at a time and re-runs a
//! closure on conflict). A commit is acknowledged only after a flush that
//! covers it ([`flusher`]); the [`seal`] tells a crash, which loses only
//! unacknowledged writes, from damage, which would lose acknowledged ones;
//! a change is refused before the disk is too full for sled, which
//! treats a failed write as fatal for reads too; and a write or flush sled
//! fails anyway stops every later change until a restart ([`failure`]).

mod failure;
mod flusher;
pub mod seal;

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use prost::bytes::Bytes;
use sled::Transactional;
use sled::transaction::{
    ConflictableTransactionError, TransactionError, TransactionalTree, UnabortableTransactionError,
};

pub use flusher::Durability;

use super::{Durable, Engine, Entries, Expected, Health, KeyRange, Table, Tx};
use crate::error::{Error, Reason, Result};
use crate::store::{OpenError, content};

/// Disk room to reserve per content chunk a change releases: sled's page
/// rewrites took up to five times the bytes removed (see
/// [`SledEngine::check_room_to_release`]); this allows eight.
const REWRITE_PER_CHUNK: u64 = 8 * content::CHUNK_SIZE as u64;
/// Disk room a releasing change needs besides its rewrites, for its records.
const RELEASE_SLACK: u64 = 1 << 20;

/// How the embedded engine is set up.
#[derive(Debug, Clone, Copy)]
pub struct SledOptions {
    pub durability: Durability,
    /// Memory sled may use to cache the store's pages.
    pub cache_bytes: u64,
    /// Free disk space a change that brings new content must leave.
    pub min_free_bytes: u64,
}

/// The embedded engine; see the module docs.
pub struct SledEngine {
    dir: PathBuf,
    db: sled::Db,
    /// One tree per [`Table`], in its order (`Meta` is sled's default tree).
    trees: Vec<sled::Tree>,
    flusher: Arc<flusher::Flusher>,
    /// Set by the first write or flush sled fails; see [`failure`].
    latch: Arc<failure::Latch>,
    /// The watermark the seal held at open.
    sealed: Option<u64>,
    /// Held while the seal is written: two writers of its temporary file
    /// would fail each other's rename.
    sealing: Mutex<()>,
    /// Transactions hold it shared; a snapshot scan holds it alone, so that
    /// no transaction commits in the middle of one.
    snapshot: RwLock<()>,
    min_free_bytes: u64,
}

impl std::fmt::Debug for SledEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SledEngine").field("dir", &self.dir).finish_non_exhaustive()
    }
}

impl SledEngine {
    /// Opens (or creates) the sled database in `dir`.
    pub fn open(dir: &Path, options: SledOptions) -> Result<Self, OpenError> {
        let display = dir.display().to_string();
        let sled_err = |source: sled::Error| OpenError::Engine { path: display.clone(), detail: source.to_string() };
        let sealed = seal::read(dir)?;
        // Before sled, which would start an empty store over a lost file.
        seal::check_files(dir, sealed)?;
        let db = sled::Config::new()
            .path(dir)
            .cache_capacity(options.cache_bytes)
            .mode(sled::Mode::HighThroughput)
            .open()
            .map_err(sled_err)?;
        let mut trees = Vec::with_capacity(Table::ALL.len());
        for table in Table::ALL {
            trees.push(match table {
                Table::Meta => (*db).clone(),
                table => db.open_tree(table.name()).map_err(sled_err)?,
            });
        }
        let latch = Arc::new(failure::Latch::default());
        let flusher = Arc::new(flusher::Flusher::start(db.clone(), options.durability, latch.clone())?);
        Ok(Self {
            dir: dir.to_owned(),
            db,
            trees,
            flusher,
            latch,
            sealed,
            sealing: Mutex::new(()),
            snapshot: RwLock::new(()),
            min_free_bytes: options.min_free_bytes,
        })
    }

    fn tree(&self, table: Table) -> &sled::Tree {
        &self.trees[table as usize]
    }

    /// Refuses a change of about `incoming` bytes when the disk would be left
    /// with less than the configured free space.
    fn check_free_space(&self, incoming: u64) -> Result<()> {
        let available = self.available_bytes()?;
        // sled may write a value more than once (log, then page) before it compacts.
        let needed = self.min_free_bytes.saturating_add(incoming.saturating_mul(2));
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
    fn check_room_to_release(&self, chunks: u64) -> Result<()> {
        if chunks == 0 {
            return Ok(());
        }
        let available = self.available_bytes()?;
        let mut rewrite = chunks.saturating_mul(REWRITE_PER_CHUNK);
        if available < rewrite.saturating_add(RELEASE_SLACK) {
            // sled cannot rewrite more than it holds (looked up only when it matters).
            rewrite = rewrite.min(self.db.size_on_disk()?);
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
        let stat = rustix::fs::statvfs(&self.dir)
            .map_err(|e| Error::internal(format!("cannot read free space of the data directory: {e}")))?;
        Ok(stat.f_bavail.saturating_mul(stat.f_frsize))
    }
}

impl Engine for SledEngine {
    fn get(&self, table: Table, key: &[u8]) -> Result<Option<Bytes>> {
        Ok(self.tree(table).get(key)?.map(Bytes::from_owner))
    }

    fn scan(&self, table: Table, range: KeyRange, reverse: bool) -> Entries<'_> {
        let tree = self.tree(table);
        if range.end.as_ref().is_some_and(|end| *end <= range.start) {
            return Box::new(std::iter::empty());
        }
        let entries = match range.end {
            Some(end) => tree.range(range.start..end),
            None => tree.range(range.start..),
        };
        let entry = |item: sled::Result<(sled::IVec, sled::IVec)>| {
            let (key, value) = item?;
            Ok((Bytes::from_owner(key), Bytes::from_owner(value)))
        };
        if reverse { Box::new(entries.rev().map(entry)) } else { Box::new(entries.map(entry)) }
    }

    fn scan_snapshot(&self, table: Table, limit: usize) -> Result<Vec<(Bytes, Bytes)>> {
        let _alone = self.snapshot.write().unwrap_or_else(PoisonError::into_inner);
        self.scan(table, KeyRange::from(Vec::new()), false).take(limit).collect()
    }

    fn transact(&self, work: &mut dyn FnMut(&mut dyn Tx) -> Result<()>) -> Result<()> {
        // Fails fast: after a failed write sled may hang a new one.
        self.latch.check()?;
        let _shared = self.snapshot.read().unwrap_or_else(PoisonError::into_inner);
        let work = RefCell::new(work);
        let result = self.trees[..].transaction(|trees: &Vec<TransactionalTree>| {
            let mut tx = SledTx { trees, failure: None };
            match (work.borrow_mut())(&mut tx) {
                Ok(()) => Ok(()),
                // sled's own failure (a conflict to re-run, or storage) goes back to sled.
                Err(error) => Err(match tx.failure.take() {
                    Some(failure) => failure.into(),
                    None => ConflictableTransactionError::Abort(error),
                }),
            }
        });
        result.map_err(|error| match error {
            TransactionError::Abort(error) => error,
            TransactionError::Storage(error) => self.latch.trip(format_args!("write: {error}")),
        })
    }

    fn durable(&self) -> Durable {
        self.flusher.wait()
    }

    fn expect_commit(&self) -> Expected {
        Box::new(self.flusher.expect())
    }

    fn check_room(&self, incoming: u64, released_chunks: u64) -> Result<()> {
        // Changes that bring new content are refused on a nearly full disk;
        // trash and removal keep working to free room, within what sled may
        // need to rewrite the pages that held the content they release.
        if incoming > 0 {
            self.check_free_space(incoming)?;
        }
        self.check_room_to_release(released_chunks)
    }

    fn size_on_disk(&self) -> Result<Option<u64>> {
        Ok(Some(self.db.size_on_disk()?))
    }

    fn check_watermark(&self, watermark: u64) -> Result<(), OpenError> {
        seal::check(&self.dir, self.sealed.unwrap_or(0), watermark)
    }

    fn checkpoint(&self, watermark: u64) -> Result<()> {
        let _one_at_a_time = self.sealing.lock().unwrap_or_else(PoisonError::into_inner);
        // A failed store is never sealed: what it holds in memory may not
        // be on disk.
        flusher::flush_or_trip(&self.db, &self.latch)?;
        seal::write(&self.dir, watermark).map_err(|e| Error::internal(format!("cannot write the seal: {e}")))
    }

    fn shutdown(&self) -> Result<()> {
        self.flusher.shutdown()
    }

    fn health(&self) -> Health {
        match self.latch.cause() {
            Some(cause) => Health::Failed(cause.to_owned()),
            None => Health::Serving,
        }
    }

    /// One process holds the directory's lock: one front.
    fn shared(&self) -> bool {
        false
    }
}

/// One run of a sled transaction.
struct SledTx<'a> {
    trees: &'a [TransactionalTree],
    /// sled's failure, handed back to sled when `work` returns with it.
    failure: Option<UnabortableTransactionError>,
}

impl SledTx<'_> {
    fn fail(&mut self, failure: UnabortableTransactionError) -> Error {
        let error = match &failure {
            UnabortableTransactionError::Conflict => Error::internal("store transaction conflict"),
            UnabortableTransactionError::Storage(error) => error.clone().into(),
        };
        self.failure = Some(failure);
        error
    }
}

impl Tx for SledTx<'_> {
    fn get(&mut self, table: Table, key: &[u8]) -> Result<Option<Bytes>> {
        match self.trees[table as usize].get(key) {
            Ok(value) => Ok(value.map(Bytes::from_owner)),
            Err(failure) => Err(self.fail(failure)),
        }
    }

    fn put(&mut self, table: Table, key: &[u8], value: &[u8]) -> Result<()> {
        match self.trees[table as usize].insert(key, value) {
            Ok(_) => Ok(()),
            Err(failure) => Err(self.fail(failure)),
        }
    }

    fn delete(&mut self, table: Table, key: &[u8]) -> Result<()> {
        match self.trees[table as usize].remove(key) {
            Ok(_) => Ok(()),
            Err(failure) => Err(self.fail(failure)),
        }
    }

    fn scan_prefix(&mut self, _table: Table, _prefix: &[u8]) -> Result<Vec<(Bytes, Bytes)>> {
        // A transaction holds sled's trees exclusively: a read of them from
        // inside one would wait for it forever.
        Err(Error::internal("sled cannot scan inside a transaction"))
    }
}

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

fn is_storage_full(error: &std::io::Error) -> bool {
    // ENOSPC (28) and EDQUOT (122) on Linux.
    error.kind() == std::io::ErrorKind::StorageFull || matches!(error.raw_os_error(), Some(28 | 122))
}
