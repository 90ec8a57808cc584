//! The embedded engine: sled 0.34 in a data directory, one tree per table.
//!
//! Transactions run one at a time: a closure reads the trees and buffers its
//! writes, which then reach the trees whole through the [`journal`], out of
//! sight of readers until the last one is in. A commit is acknowledged only
//! after a flush that covers it ([`flusher`]); the [`seal`] tells a crash,
//! which loses only unacknowledged writes, from damage, which would lose
//! acknowledged ones; a change is refused before the disk is too full for
//! sled, which treats a failed write as fatal for reads too; and a write or
//! flush sled fails anyway stops every later change until a restart
//! ([`failure`]).

mod failure;
mod flusher;
mod journal;
mod receipts;
pub mod seal;
mod shelf;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use prost::bytes::Bytes;

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
    /// Commits on their way into `trees`, and receipts on their way to a
    /// shelf; see [`journal`].
    journal: sled::Tree,
    /// Held by the transaction running; holds the next journal key.
    committing: Mutex<u64>,
    receipts: Arc<receipts::Receipts>,
    shelver: Mutex<receipts::Shelver>,
    /// Readers hold it shared for each read; a commit holds it alone while
    /// its writes go in, so that no read sees part of one.
    visible: RwLock<()>,
    flusher: Arc<flusher::Flusher>,
    /// Set by the first write or flush sled fails; see [`failure`].
    latch: Arc<failure::Latch>,
    /// The watermark the seal held at open.
    sealed: Option<u64>,
    /// Held while the seal is written: two writers of its temporary file
    /// would fail each other's rename.
    sealing: Mutex<()>,
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
        let journal = db.open_tree(journal::TREE).map_err(sled_err)?;
        let receipts = receipts::Receipts::open(dir, journal.clone())
            .map_err(|(path, detail)| seal::damaged(&path, format!("cannot open the receipts: {detail}")))?;
        let engine_err = |detail: String| OpenError::Engine { path: display.clone(), detail };
        // A store written before receipts were shelved kept them in a tree.
        let tree = &trees[Table::Receipts as usize];
        if !tree.is_empty() {
            let entries = tree.iter().map(entry).collect::<Result<Vec<_>>>().map_err(|e| engine_err(e.to_string()))?;
            receipts.shelve_all(entries).map_err(|e| engine_err(e.to_string()))?;
            tree.clear().map_err(sled_err)?;
        }
        let (replayed, next_record) = journal::replay(&journal, &trees, &receipts).map_err(engine_err)?;
        if replayed > 0 {
            tracing::info!(commits = replayed, "wrote the commits a crash left in the journal");
        }
        let receipts = Arc::new(receipts);
        let shelver = receipts::Shelver::start(receipts.clone())?;
        let latch = Arc::new(failure::Latch::default());
        let flusher = Arc::new(flusher::Flusher::start(db.clone(), options.durability, latch.clone())?);
        Ok(Self {
            dir: dir.to_owned(),
            db,
            trees,
            journal,
            committing: Mutex::new(next_record),
            receipts,
            shelver: Mutex::new(shelver),
            visible: RwLock::new(()),
            flusher,
            latch,
            sealed,
            sealing: Mutex::new(()),
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
        let _visible = self.visible.read().unwrap_or_else(PoisonError::into_inner);
        if table == Table::Receipts {
            return self.receipts.get(key);
        }
        Ok(self.tree(table).get(key)?.map(Bytes::from_owner))
    }

    fn scan(&self, table: Table, range: KeyRange, reverse: bool) -> Entries<'_> {
        let tree = self.tree(table);
        if range.end.as_ref().is_some_and(|end| *end <= range.start) {
            return Box::new(std::iter::empty());
        }
        if table == Table::Receipts {
            // Staged receipts as of one moment, in sight of commits whole.
            let found = {
                let _visible = self.visible.read().unwrap_or_else(PoisonError::into_inner);
                self.receipts.range(&range.start, range.end.as_deref())
            };
            if !reverse {
                return Box::new(found);
            }
            return match found.collect::<Result<Vec<_>>>() {
                Ok(found) => Box::new(found.into_iter().rev().map(Ok)),
                Err(error) => Box::new(std::iter::once(Err(error))),
            };
        }
        let mut entries = match range.end {
            Some(end) => tree.range(range.start..end),
            None => tree.range(range.start..),
        };
        // Each step reads in sight of commits whole, like `get`.
        Box::new(std::iter::from_fn(move || {
            let _visible = self.visible.read().unwrap_or_else(PoisonError::into_inner);
            let item = if reverse { entries.next_back() } else { entries.next() }?;
            Some(entry(item))
        }))
    }

    fn scan_snapshot(&self, table: Table, limit: usize) -> Result<Vec<(Bytes, Bytes)>> {
        // No commit goes in while the scan holds the trees' visibility.
        let _visible = self.visible.read().unwrap_or_else(PoisonError::into_inner);
        if table == Table::Receipts {
            return self.receipts.range(&[], None).take(limit).collect();
        }
        self.tree(table).iter().take(limit).map(entry).collect()
    }

    fn transact(&self, work: &mut dyn FnMut(&mut dyn Tx) -> Result<()>) -> Result<()> {
        // Fails fast: after a failed write sled may hang a new one.
        self.latch.check()?;
        let mut next_key = self.committing.lock().unwrap_or_else(PoisonError::into_inner);
        let mut tx =
            SledTx { trees: &self.trees, receipts: &self.receipts, writes: vec![BTreeMap::new(); self.trees.len()] };
        work(&mut tx)?;
        if tx.writes.iter().all(BTreeMap::is_empty) {
            return Ok(());
        }
        let receipts: Vec<(&[u8], &[u8])> = tx.writes[Table::Receipts as usize]
            .iter()
            .map(|(key, value)| value.as_deref().map(|value| (key.as_slice(), value)))
            .collect::<Option<_>>()
            .ok_or_else(|| Error::internal("receipts are removed by pruning alone"))?;
        let record = *next_key;
        let key = record.to_be_bytes();
        *next_key += 1;
        let failed = |error: sled::Error| self.latch.trip(format_args!("write: {error}"));
        self.journal.insert(key, journal::encode(tx.writes())).map_err(failed)?;
        fault_point!("store::journaled");
        {
            let _alone = self.visible.write().unwrap_or_else(PoisonError::into_inner);
            journal::write_all(&self.trees, tx.writes()).map_err(failed)?;
            self.receipts.stage(record, receipts.iter().copied());
        }
        if receipts.is_empty() {
            self.journal.remove(key).map_err(failed)?;
        } else {
            // The record now holds the receipts alone, until a shelf does.
            let alone = receipts.iter().map(|&(key, value)| (Table::Receipts, key, Some(value)));
            self.journal.insert(key, journal::encode(alone)).map_err(failed)?;
            if self.receipts.settle(record, receipts.iter().map(|&(key, _)| key)) {
                self.shelver.lock().unwrap_or_else(PoisonError::into_inner).wake();
            }
        }
        self.flusher.committed();
        Ok(())
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
        Ok(Some(self.db.size_on_disk()? + self.receipts.size()))
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
        self.shelver.lock().unwrap_or_else(PoisonError::into_inner).stop();
        self.flusher.shutdown()
    }

    fn prune(&self, table: Table, expired: &dyn Fn(&[u8]) -> Result<bool>) -> Result<usize> {
        match table {
            Table::Receipts => self.receipts.prune(expired),
            table => super::prune_rows(self, table, expired),
        }
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

fn entry(item: sled::Result<(sled::IVec, sled::IVec)>) -> Result<(Bytes, Bytes)> {
    let (key, value) = item?;
    Ok((Bytes::from_owner(key), Bytes::from_owner(value)))
}

/// A transaction: reads of the trees as they are, under its own writes,
/// which it keeps until the commit.
struct SledTx<'a> {
    trees: &'a [sled::Tree],
    receipts: &'a receipts::Receipts,
    /// Per [`Table`], in its order: the value each key is set to, or
    /// `None` where it is removed.
    writes: Vec<BTreeMap<Vec<u8>, Option<Bytes>>>,
}

impl SledTx<'_> {
    /// Every write, by table and key.
    fn writes(&self) -> impl Iterator<Item = journal::Write<'_>> {
        Table::ALL
            .iter()
            .zip(&self.writes)
            .flat_map(|(table, writes)| writes.iter().map(|(key, value)| (*table, key.as_slice(), value.as_deref())))
    }
}

impl Tx for SledTx<'_> {
    fn get(&mut self, table: Table, key: &[u8]) -> Result<Option<Bytes>> {
        match self.writes[table as usize].get(key) {
            Some(written) => Ok(written.clone()),
            None if table == Table::Receipts => self.receipts.get(key),
            None => Ok(self.trees[table as usize].get(key)?.map(Bytes::from_owner)),
        }
    }

    fn put(&mut self, table: Table, key: &[u8], value: &[u8]) -> Result<()> {
        self.writes[table as usize].insert(key.to_vec(), Some(Bytes::copy_from_slice(value)));
        Ok(())
    }

    fn delete(&mut self, table: Table, key: &[u8]) -> Result<()> {
        self.writes[table as usize].insert(key.to_vec(), None);
        Ok(())
    }

    fn scan_prefix(&mut self, table: Table, prefix: &[u8]) -> Result<Vec<(Bytes, Bytes)>> {
        // Commits run one at a time, so the trees hold what is committed.
        if table == Table::Receipts {
            return self.receipts.range(prefix, super::KeyRange::prefix(prefix).end.as_deref()).collect();
        }
        self.trees[table as usize].scan_prefix(prefix).map(entry).collect()
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

/// Runs `open` until sled no longer holds the store's file lock, for at
/// most 10 s. sled releases the lock from a background thread after the
/// last handle is dropped, so a reopen in the same process can briefly find
/// it still held; a new process never does.
#[cfg(test)]
pub(crate) fn when_unlocked<T>(open: impl Fn() -> Result<T, OpenError>) -> Result<T, OpenError> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        match open() {
            Err(OpenError::Engine { detail, .. })
                if detail.contains("could not acquire lock") && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn open(dir: &Path) -> SledEngine {
        let options = SledOptions { durability: Durability::Off, cache_bytes: 1 << 20, min_free_bytes: 0 };
        when_unlocked(|| SledEngine::open(dir, options)).unwrap()
    }

    fn get(engine: &SledEngine, table: Table, key: &[u8]) -> Option<Bytes> {
        engine.get(table, key).unwrap()
    }

    /// A crash after a commit's journal record is on disk, before its
    /// writes reach the trees: the next open writes them all.
    #[test]
    fn a_commit_cut_short_after_its_journal_record_is_whole_after_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        {
            let engine = open(dir.path());
            engine
                .transact(&mut |tx| {
                    tx.put(Table::Spaces, b"gone", b"soon")?;
                    tx.put(Table::Versions, b"kept", b"old")
                })
                .unwrap();
            let record = journal::encode([
                (Table::Spaces, &b"gone"[..], None),
                (Table::Versions, &b"kept"[..], Some(&b"new"[..])),
                (Table::Current, &b"path"[..], Some(&b"entry"[..])),
            ]);
            engine.journal.insert(7u64.to_be_bytes(), record).unwrap();
            let with_receipt = journal::encode([
                (Table::Trash, &b"t"[..], Some(&b"1"[..])),
                (Table::Receipts, &b"scope"[..], Some(&b"receipt"[..])),
            ]);
            engine.journal.insert(8u64.to_be_bytes(), with_receipt).unwrap();
            engine.shutdown().unwrap();
        }
        let engine = open(dir.path());
        assert_eq!(get(&engine, Table::Spaces, b"gone"), None);
        assert_eq!(get(&engine, Table::Versions, b"kept").as_deref(), Some(&b"new"[..]));
        assert_eq!(get(&engine, Table::Current, b"path").as_deref(), Some(&b"entry"[..]));
        assert_eq!(get(&engine, Table::Trash, b"t").as_deref(), Some(&b"1"[..]));
        assert_eq!(get(&engine, Table::Receipts, b"scope").as_deref(), Some(&b"receipt"[..]));
        // What stays is the receipt alone, until it is shelved.
        let left: Vec<(Vec<u8>, Vec<u8>)> =
            engine.journal.iter().map(|e| e.map(|(k, v)| (k.to_vec(), v.to_vec())).unwrap()).collect();
        let alone = journal::encode([(Table::Receipts, &b"scope"[..], Some(&b"receipt"[..]))]);
        assert_eq!(left, [(8u64.to_be_bytes().to_vec(), alone)]);
        engine.receipts.tidy().unwrap();
        assert!(engine.journal.is_empty(), "the journal is emptied once replayed and shelved");
        assert_eq!(get(&engine, Table::Receipts, b"scope").as_deref(), Some(&b"receipt"[..]));
    }

    /// A receipt is in the journal (staged) or on a shelf from its commit
    /// on, across reopens, and commits after a reopen are numbered after
    /// the journal records left.
    #[test]
    fn receipts_are_found_from_their_commit_to_their_shelf_and_across_reopens() {
        let dir = tempfile::tempdir().unwrap();
        let receipt =
            |n: u32| (blake3::hash(&n.to_be_bytes()).as_bytes().to_vec(), format!("response {n}").into_bytes());
        let commit = |engine: &SledEngine, range: std::ops::Range<u32>| {
            for n in range {
                let (key, value) = receipt(n);
                engine
                    .transact(&mut |tx| {
                        tx.put(Table::Trash, &n.to_be_bytes(), b"x")?;
                        tx.put(Table::Receipts, &key, &value)
                    })
                    .unwrap();
            }
        };
        let found = |engine: &SledEngine, mut range: std::ops::Range<u32>| {
            range.all(|n| get(engine, Table::Receipts, &receipt(n).0).as_deref() == Some(&receipt(n).1[..]))
        };
        // The test shelves by hand.
        let open = |dir: &Path| {
            let engine = open(dir);
            engine.shelver.lock().unwrap().stop();
            engine
        };
        {
            let engine = open(dir.path());
            commit(&engine, 0..100);
            assert!(found(&engine, 0..100));
            assert_eq!(engine.journal.len(), 100, "staged, each in its record");
            engine.receipts.tidy().unwrap();
            assert!(engine.journal.is_empty());
            assert!(found(&engine, 0..100));
            commit(&engine, 100..150);
            engine.shutdown().unwrap();
        }
        {
            let engine = open(dir.path());
            assert_eq!(*engine.committing.lock().unwrap(), 150, "numbered on after the records left");
            assert!(engine.journal.is_empty(), "a stopping shelver shelves what is staged");
            assert!(found(&engine, 0..150));
            commit(&engine, 150..160);
            assert!(found(&engine, 0..160));
            assert_eq!(engine.journal.len(), 10);
            engine.shutdown().unwrap();
        }
        let engine = open(dir.path());
        assert!(found(&engine, 0..160));
        assert_eq!(get(&engine, Table::Trash, &159u32.to_be_bytes()).as_deref(), Some(&b"x"[..]));
        let all: Vec<_> = engine.scan(Table::Receipts, KeyRange::from(Vec::new()), false).map(Result::unwrap).collect();
        assert_eq!(all.len(), 160);
        assert!(all.windows(2).all(|w| w[0].0 < w[1].0), "in key order");
        // Receipts go by pruning, not one by one.
        assert!(engine.transact(&mut |tx| tx.delete(Table::Receipts, &receipt(1).0)).is_err());
        assert!(found(&engine, 0..160));
    }

    /// A store that kept receipts in a tree has them moved to a shelf.
    #[test]
    fn receipts_kept_in_a_tree_move_to_a_shelf_at_open() {
        let dir = tempfile::tempdir().unwrap();
        {
            let db = sled::Config::new().path(dir.path()).open().unwrap();
            let tree = db.open_tree(Table::Receipts.name()).unwrap();
            for n in 0u32..10 {
                tree.insert(n.to_be_bytes(), &n.to_le_bytes()).unwrap();
            }
            db.flush().unwrap();
        }
        let engine = open(dir.path());
        assert!(engine.tree(Table::Receipts).is_empty());
        for n in 0u32..10 {
            assert_eq!(get(&engine, Table::Receipts, &n.to_be_bytes()).as_deref(), Some(&n.to_le_bytes()[..]));
        }
    }

    /// A transaction reads its own writes over the trees, and its journal
    /// record is gone once its writes are in.
    #[test]
    fn a_transaction_sees_its_writes_and_leaves_nothing_in_the_journal() {
        let dir = tempfile::tempdir().unwrap();
        let engine = open(dir.path());
        engine.transact(&mut |tx| tx.put(Table::Trash, b"a", b"1")).unwrap();
        engine
            .transact(&mut |tx| {
                assert_eq!(tx.get(Table::Trash, b"a")?.as_deref(), Some(&b"1"[..]));
                tx.delete(Table::Trash, b"a")?;
                assert_eq!(tx.get(Table::Trash, b"a")?, None);
                tx.put(Table::Trash, b"b", b"2")?;
                assert_eq!(tx.get(Table::Trash, b"b")?.as_deref(), Some(&b"2"[..]));
                // Scans see what is committed, not the transaction's writes.
                assert_eq!(tx.scan_prefix(Table::Trash, b"")?.len(), 1);
                Ok(())
            })
            .unwrap();
        assert_eq!(get(&engine, Table::Trash, b"a"), None);
        assert_eq!(get(&engine, Table::Trash, b"b").as_deref(), Some(&b"2"[..]));
        assert!(engine.journal.is_empty());

        // A transaction that fails writes nothing.
        let refused = engine.transact(&mut |tx| {
            tx.put(Table::Trash, b"c", b"3")?;
            Err(Error::internal("refused"))
        });
        assert!(refused.is_err());
        assert_eq!(get(&engine, Table::Trash, b"c"), None);
    }
}
