//! Idempotency receipts on the embedded engine: in the journal, then on
//! shelves.
//!
//! sled keeps a tree's file small while its keys come and go in order, as
//! the journal's do, but not a tree of keys that arrive in random order and
//! stay: receipts, keyed by a hash and kept a day, made the store's files
//! several times larger than the same load without them, and removing them
//! in bulk gave little of that back. So receipts live in no tree. A
//! commit's receipts ride in its journal record (see [`super::journal`]):
//! once the commit's other writes are in the trees, the record is replaced
//! by one of the receipts alone, and they are *staged* here, in memory. A
//! background thread (the [`Shelver`]) writes the staged receipts to a
//! [`Shelf`], a sorted file, synced, and only then removes their journal
//! records: a receipt is always in the journal or on a shelf, and after a
//! crash the journal stages it again (a receipt on a shelf and staged again
//! is the same receipt twice, which is harmless).
//!
//! Shelves filled in the same hour merge, [`FAN`] of a level into one of the
//! next, and all into one once the hour is over, so a lookup asks a few
//! dozen shelves' filters at most. Pruning drops a shelf once every receipt
//! on it expired: a receipt is kept at least as long as asked, and at most
//! about an hour more.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError, RwLock};
use std::thread;
use std::time::Duration;

use prost::bytes::Bytes;

use super::journal;
use super::shelf::{Probe, Shelf};
use crate::error::Result;
use crate::store::engine::Table;
use crate::store::records::now_ms;

/// The directory of the shelves, in the data directory.
pub const DIR: &str = "receipts";
/// Staged receipts that wake the shelver: sled reclaims the journal's space
/// well while it holds a few hundred records, less so with thousands.
const SHELVE_AT: usize = 512;
/// The longest a receipt stays staged while calls are few.
const SHELVE_EVERY: Duration = Duration::from_secs(10);
/// Shelves of one level and hour that merge into one of the next level.
const FAN: usize = 8;
const HOUR_MS: i64 = 3_600_000;

/// A receipt kept in memory until it is on a shelf.
#[derive(Debug, Clone)]
struct Staged {
    /// The journal record that holds it.
    record: u64,
    value: Bytes,
    /// Whether its record holds the receipts alone (its commit is whole);
    /// only then may the shelver remove the record.
    settled: bool,
}

/// The receipts of the embedded engine; see the module docs.
#[derive(Debug)]
pub struct Receipts {
    dir: PathBuf,
    journal: sled::Tree,
    staged: Mutex<BTreeMap<Bytes, Staged>>,
    /// In the order they were made.
    shelves: RwLock<Vec<Arc<Shelf>>>,
    next_shelf: AtomicU64,
    /// Held by shelving, merging and pruning, which run one at a time.
    tidying: Mutex<()>,
}

impl Receipts {
    /// Opens the shelves in `data_dir`'s receipts directory (made if
    /// missing), removing what a crash left half written.
    pub fn open(data_dir: &Path, journal: sled::Tree) -> std::result::Result<Receipts, (PathBuf, String)> {
        let dir = data_dir.join(DIR);
        let failed = |error: std::io::Error| (dir.clone(), error.to_string());
        std::fs::create_dir_all(&dir).map_err(failed)?;
        let mut seqs = Vec::new();
        for entry in std::fs::read_dir(&dir).map_err(failed)? {
            let name = entry.map_err(failed)?.file_name();
            let name = name.to_string_lossy();
            if let Some(seq) = Shelf::seq_of(&name) {
                seqs.push(seq);
            } else if name.ends_with(".tmp") {
                std::fs::remove_file(dir.join(&*name)).map_err(failed)?;
            }
        }
        seqs.sort_unstable();
        let mut shelves = Vec::with_capacity(seqs.len());
        for seq in seqs {
            let shelf = Shelf::open(&dir, seq).map_err(|detail| (Shelf::path(&dir, seq), detail))?;
            shelves.push(Arc::new(shelf));
        }
        let next_shelf = shelves.last().map_or(0, |s| s.seq + 1);
        Ok(Receipts {
            dir,
            journal,
            staged: Mutex::new(BTreeMap::new()),
            shelves: RwLock::new(shelves),
            next_shelf: AtomicU64::new(next_shelf),
            tidying: Mutex::new(()),
        })
    }

    /// Stages the receipts a commit wrote in journal record `record`, to
    /// be settled once the record holds them alone.
    pub fn stage<'a>(&self, record: u64, receipts: impl IntoIterator<Item = (&'a [u8], &'a [u8])>) {
        let mut staged = lock(&self.staged);
        for (key, value) in receipts {
            let value = Bytes::copy_from_slice(value);
            staged.insert(Bytes::copy_from_slice(key), Staged { record, value, settled: false });
        }
    }

    /// Marks the receipts of `record` settled; whether enough are staged
    /// to shelve them.
    pub fn settle<'a>(&self, record: u64, keys: impl IntoIterator<Item = &'a [u8]>) -> bool {
        let mut staged = lock(&self.staged);
        for key in keys {
            if let Some(receipt) = staged.get_mut(key)
                && receipt.record == record
            {
                receipt.settled = true;
            }
        }
        staged.len() >= SHELVE_AT
    }

    /// The receipt kept under `key`.
    pub fn get(&self, key: &[u8]) -> Result<Option<Bytes>> {
        // Staged first: the shelver puts a shelf in place before it
        // unstages what the shelf holds.
        if let Some(receipt) = lock(&self.staged).get(key) {
            return Ok(Some(receipt.value.clone()));
        }
        let probe = Probe::of(key);
        for shelf in self.shelves().iter().rev() {
            if let Some(value) = shelf.get(key, probe)? {
                return Ok(Some(value));
            }
        }
        Ok(None)
    }

    /// The receipts with keys in `[start, end)`, in key order: those staged
    /// now, and the shelves' read as they are consumed.
    pub fn range(&self, start: &[u8], end: Option<&[u8]>) -> Merged {
        let staged: Vec<(Bytes, Bytes)> = {
            let staged = lock(&self.staged);
            let upper = end.map_or(std::ops::Bound::Unbounded, std::ops::Bound::Excluded);
            let range = staged.range::<[u8], _>((std::ops::Bound::Included(start), upper));
            range.map(|(key, receipt)| (key.clone(), receipt.value.clone())).collect()
        };
        let shelves = self.shelves().into_iter().map(|shelf| Source::new(shelf.blocks_in(start, end)));
        // Staged last: the latest source wins.
        Merged::new(shelves.chain([Source::new(std::iter::once(Ok(staged)))]).collect())
    }

    /// Bytes the shelves take on disk.
    pub fn size(&self) -> u64 {
        self.shelves().iter().map(|shelf| shelf.size()).sum()
    }

    fn shelves(&self) -> Vec<Arc<Shelf>> {
        self.shelves.read().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Shelves the settled receipts, then merges what the shelves' hours
    /// and levels call for.
    pub fn tidy(&self) -> Result<()> {
        let _alone = lock(&self.tidying);
        self.shelve()?;
        while let Some(group) = self.merge_due(now_ms()) {
            self.merge(&group)?;
        }
        Ok(())
    }

    /// Writes `entries` (key order) to the shelves, from a tree of an
    /// earlier version of the store.
    pub fn shelve_all(&self, entries: Vec<(Bytes, Bytes)>) -> Result<()> {
        if entries.is_empty() {
            return Ok(());
        }
        let _alone = lock(&self.tidying);
        self.fill_shelf(entries.len(), entries.into_iter().map(Ok))
    }

    /// Writes a shelf of `count` entries (key order) and puts it in place.
    fn fill_shelf(&self, count: usize, entries: impl IntoIterator<Item = Result<(Bytes, Bytes)>>) -> Result<()> {
        let seq = self.next_shelf.fetch_add(1, Ordering::Relaxed);
        let shelf = Shelf::write(&self.dir, seq, 0, now_ms(), count, entries)?;
        self.shelves.write().unwrap_or_else(PoisonError::into_inner).push(Arc::new(shelf));
        Ok(())
    }

    /// Shelves the settled receipts, without merging.
    pub fn shelve_settled(&self) -> Result<()> {
        let _alone = lock(&self.tidying);
        self.shelve()
    }

    fn shelve(&self) -> Result<()> {
        let taken: Vec<(Bytes, Staged)> = lock(&self.staged)
            .iter()
            .filter(|(_, receipt)| receipt.settled)
            .map(|(key, receipt)| (key.clone(), receipt.clone()))
            .collect();
        if taken.is_empty() {
            return Ok(());
        }
        self.fill_shelf(taken.len(), taken.iter().map(|(key, receipt)| Ok((key.clone(), receipt.value.clone()))))?;
        {
            let mut staged = lock(&self.staged);
            for (key, receipt) in &taken {
                if staged.get(key).is_some_and(|now| now.record == receipt.record) {
                    staged.remove(key);
                }
            }
        }
        // A receipt staged again under a later record (the same receipt,
        // written twice) stays in that one.
        let records: BTreeSet<u64> = taken.iter().map(|(_, receipt)| receipt.record).collect();
        for record in records {
            self.journal.remove(record.to_be_bytes())?;
        }
        Ok(())
    }

    /// The next shelves to merge: those of an hour that is over, when there
    /// are several, or [`FAN`] of one level of the current hour.
    fn merge_due(&self, now_ms: i64) -> Option<Vec<Arc<Shelf>>> {
        let mut groups: BTreeMap<(i64, Option<u32>), Vec<Arc<Shelf>>> = BTreeMap::new();
        let current = now_ms.div_euclid(HOUR_MS);
        for shelf in self.shelves() {
            let hour = shelf.filled_ms().div_euclid(HOUR_MS);
            let level = (hour >= current).then_some(shelf.level());
            groups.entry((hour, level)).or_default().push(shelf);
        }
        groups.into_iter().find_map(|((_, level), group)| {
            let due = if level.is_some() { group.len() >= FAN } else { group.len() > 1 };
            due.then_some(group)
        })
    }

    fn merge(&self, group: &[Arc<Shelf>]) -> Result<()> {
        let seq = self.next_shelf.fetch_add(1, Ordering::Relaxed);
        let level = group.iter().map(|s| s.level()).max().unwrap_or(0) + 1;
        let filled_ms = group.iter().map(|s| s.filled_ms()).max().unwrap_or(0);
        let capacity = group.iter().map(|s| s.entries()).sum::<u64>();
        let sources = group.iter().map(|shelf| Source::new(shelf.blocks_in(&[], None))).collect();
        let merged = Shelf::write(&self.dir, seq, level, filled_ms, capacity as usize, Merged::new(sources))?;
        self.replace(group, Some(merged));
        Ok(())
    }

    /// Puts `with` in the place of `shelves` and removes their files.
    fn replace(&self, shelves: &[Arc<Shelf>], with: Option<Shelf>) {
        {
            let mut all = self.shelves.write().unwrap_or_else(PoisonError::into_inner);
            all.retain(|shelf| !shelves.iter().any(|gone| gone.seq == shelf.seq));
            all.extend(with.map(Arc::new));
        }
        for shelf in shelves {
            // A file left behind holds receipts the others hold too, and
            // merges or expires later.
            if let Err(error) = shelf.remove(&self.dir) {
                tracing::warn!(%error, seq = shelf.seq, "cannot remove a shelf of receipts");
            }
        }
    }

    /// Drops the receipts `expired` says are: the staged ones, and every
    /// shelf all of whose receipts are; returns how many.
    pub fn prune(&self, expired: &dyn Fn(&[u8]) -> Result<bool>) -> Result<usize> {
        let _alone = lock(&self.tidying);
        let mut pruned = self.prune_staged(expired)?;
        for shelf in self.shelves() {
            let mut all = true;
            'blocks: for block in shelf.blocks_in(&[], None) {
                for (_, value) in block? {
                    if !expired(&value)? {
                        all = false;
                        break 'blocks;
                    }
                }
            }
            if all {
                self.replace(std::slice::from_ref(&shelf), None);
                pruned += shelf.entries() as usize;
            }
        }
        Ok(pruned)
    }

    /// Unstages the settled receipts that expired, and rewrites their
    /// journal records without them.
    fn prune_staged(&self, expired: &dyn Fn(&[u8]) -> Result<bool>) -> Result<usize> {
        let mut staged = lock(&self.staged);
        let mut records = BTreeSet::new();
        for receipt in staged.values() {
            if receipt.settled && expired(&receipt.value)? {
                records.insert(receipt.record);
            }
        }
        let mut pruned = 0;
        for record in records {
            let keys: Vec<Bytes> =
                staged.iter().filter(|(_, receipt)| receipt.record == record).map(|(key, _)| key.clone()).collect();
            let mut kept = Vec::new();
            for key in keys {
                if expired(&staged[&key].value)? {
                    staged.remove(&key);
                    pruned += 1;
                } else {
                    kept.push((key.clone(), staged[&key].value.clone()));
                }
            }
            if kept.is_empty() {
                self.journal.remove(record.to_be_bytes())?;
            } else {
                let writes = kept.iter().map(|(key, value)| (Table::Receipts, &key[..], Some(&value[..])));
                self.journal.insert(record.to_be_bytes(), journal::encode(writes))?;
            }
        }
        Ok(pruned)
    }
}

/// Blocks of entries in key order, from one shelf (or the staged
/// receipts).
type Blocks = Box<dyn Iterator<Item = Result<Vec<(Bytes, Bytes)>>> + Send>;

/// The entries of several sources of receipts in key order, each key once
/// (from the latest source that holds it).
pub struct Merged {
    sources: Vec<Source>,
    /// Started: every source holds its first entry.
    started: bool,
    failed: bool,
}

/// One source of [`Merged`], with the entry it is at.
struct Source {
    blocks: Blocks,
    block: std::vec::IntoIter<(Bytes, Bytes)>,
    head: Option<(Bytes, Bytes)>,
}

impl Source {
    fn new(blocks: impl Iterator<Item = Result<Vec<(Bytes, Bytes)>>> + Send + 'static) -> Source {
        Source { blocks: Box::new(blocks), block: Vec::new().into_iter(), head: None }
    }

    fn advance(&mut self) -> Result<()> {
        loop {
            if let Some(entry) = self.block.next() {
                self.head = Some(entry);
                return Ok(());
            }
            match self.blocks.next() {
                Some(block) => self.block = block?.into_iter(),
                None => {
                    self.head = None;
                    return Ok(());
                }
            }
        }
    }
}

impl Merged {
    /// Merges `sources`, latest last.
    fn new(sources: Vec<Source>) -> Merged {
        Merged { sources, started: false, failed: false }
    }

    fn step(&mut self) -> Result<Option<(Bytes, Bytes)>> {
        if !self.started {
            self.started = true;
            self.sources.iter_mut().try_for_each(Source::advance)?;
        }
        // The smallest key; of equal ones, the latest source's.
        let Some(least) = self
            .sources
            .iter()
            .enumerate()
            .filter_map(|(i, source)| source.head.as_ref().map(|(key, _)| (key, i)))
            .max_by(|(a, i), (b, j)| b.cmp(a).then(i.cmp(j)))
            .map(|(_, i)| i)
        else {
            return Ok(None);
        };
        let Some(entry) = self.sources[least].head.clone() else { return Ok(None) };
        for source in &mut self.sources {
            if source.head.as_ref().is_some_and(|(key, _)| *key == entry.0) {
                source.advance()?;
            }
        }
        Ok(Some(entry))
    }
}

impl Iterator for Merged {
    type Item = Result<(Bytes, Bytes)>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        let step = self.step();
        self.failed = step.is_err();
        step.transpose()
    }
}

/// The thread that shelves and merges receipts, stopped and joined when
/// dropped.
pub struct Shelver {
    state: Arc<(Mutex<ShelverState>, Condvar)>,
    thread: Option<thread::JoinHandle<()>>,
}

#[derive(Default)]
struct ShelverState {
    woken: bool,
    stopped: bool,
}

impl Shelver {
    pub fn start(receipts: Arc<Receipts>) -> std::io::Result<Shelver> {
        let state = Arc::new((Mutex::new(ShelverState::default()), Condvar::new()));
        let shared = state.clone();
        let run = move || {
            let (lock_, wake) = &*shared;
            loop {
                {
                    let state = lock(lock_);
                    let (mut state, _) = wake
                        .wait_timeout_while(state, SHELVE_EVERY, |s| !s.woken && !s.stopped)
                        .unwrap_or_else(PoisonError::into_inner);
                    if state.stopped {
                        // A clean stop leaves the journal empty.
                        drop(state);
                        if let Err(error) = receipts.shelve_settled() {
                            tracing::warn!(%error, "cannot shelve idempotency receipts");
                        }
                        return;
                    }
                    state.woken = false;
                }
                if let Err(error) = receipts.tidy() {
                    tracing::warn!(%error, "cannot shelve idempotency receipts");
                }
            }
        };
        let thread = thread::Builder::new().name("store-shelver".into()).spawn(run)?;
        Ok(Shelver { state, thread: Some(thread) })
    }

    /// Has the thread shelve now.
    pub fn wake(&self) {
        lock(&self.state.0).woken = true;
        self.state.1.notify_one();
    }

    /// Stops the thread once it is done with what it is doing and has
    /// shelved what is staged.
    pub fn stop(&mut self) {
        lock(&self.state.0).stopped = true;
        self.state.1.notify_one();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Shelver {
    fn drop(&mut self) {
        self.stop();
    }
}

impl std::fmt::Debug for Shelver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shelver").finish_non_exhaustive()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn key(n: u64) -> [u8; 32] {
        *blake3::hash(&n.to_be_bytes()).as_bytes()
    }

    /// A receipt's value here: when it was made.
    fn made(n: u64, ms: i64) -> (u64, [u8; 32], Vec<u8>) {
        (n, key(n), ms.to_be_bytes().to_vec())
    }

    fn open(dir: &Path) -> (sled::Db, Receipts) {
        let db = sled::Config::new().path(dir.join("db")).open().unwrap();
        let receipts = Receipts::open(dir, db.open_tree("journal").unwrap()).unwrap();
        (db, receipts)
    }

    /// Stages receipts as commits do, each in a record of its own, settled.
    fn commit(receipts: &Receipts, made: &[(u64, [u8; 32], Vec<u8>)]) {
        for (record, key, value) in made {
            receipts.stage(*record, [(&key[..], &value[..])]);
            receipts.settle(*record, [&key[..]]);
        }
    }

    fn levels(receipts: &Receipts) -> Vec<u32> {
        receipts.shelves().iter().map(|s| s.level()).collect()
    }

    #[test]
    fn shelves_of_the_hour_merge_by_eight_then_into_one_and_every_receipt_is_found() {
        let dir = tempfile::tempdir().unwrap();
        let (db, receipts) = open(dir.path());
        let now = now_ms();
        let mut all = Vec::new();
        for round in 0..(FAN as u64 + 3) {
            let batch: Vec<_> = (round * 100..round * 100 + 100).map(|n| made(n, now)).collect();
            commit(&receipts, &batch);
            receipts.tidy().unwrap();
            all.extend(batch);
        }
        // Eight of level 0 became one of level 1; the last three wait.
        let mut found = levels(&receipts);
        found.sort_unstable();
        assert_eq!(found, [0, 0, 0, 1]);
        assert!(lock(&receipts.staged).is_empty());
        for (_, key, value) in &all {
            assert_eq!(receipts.get(key).unwrap().as_deref(), Some(&value[..]));
        }
        assert_eq!(receipts.get(&key(999_999)).unwrap(), None);

        // Once the hour is over, its shelves become one.
        let later = now + 2 * HOUR_MS;
        while let Some(group) = receipts.merge_due(later) {
            receipts.merge(&group).unwrap();
        }
        assert_eq!(levels(&receipts), [2]);
        assert_eq!(receipts.shelves()[0].entries(), all.len() as u64);
        let files = std::fs::read_dir(dir.path().join(DIR)).unwrap().count();
        assert_eq!(files, 1, "merged shelves are removed");

        // Reopened, the shelf answers as before, and the range is every receipt.
        drop((db, receipts));
        let (_db, receipts) = open(dir.path());
        let mut expected: Vec<(Bytes, Bytes)> =
            all.iter().map(|(_, k, v)| (Bytes::copy_from_slice(k), Bytes::copy_from_slice(v))).collect();
        expected.sort();
        let range = |start: &[u8], end: Option<&[u8]>| receipts.range(start, end).collect::<Result<Vec<_>>>().unwrap();
        assert_eq!(range(&[], None), expected);
        let (start, end) = (&expected[10].0, &expected[20].0);
        assert_eq!(range(start, Some(end)), expected[10..20]);
    }

    #[test]
    fn pruning_drops_expired_staged_receipts_and_shelves_whose_receipts_all_expired() {
        let dir = tempfile::tempdir().unwrap();
        let (_db, receipts) = open(dir.path());
        let expired_before = |cutoff: i64| move |raw: &[u8]| Ok(i64::from_be_bytes(raw.try_into().unwrap()) < cutoff);
        // One shelf all old, one mixed, then one old and one new receipt staged.
        commit(&receipts, &(0..50).map(|n| made(n, 1_000)).collect::<Vec<_>>());
        receipts.tidy().unwrap();
        commit(&receipts, &(50..100).map(|n| made(n, if n % 2 == 0 { 1_000 } else { 9_000 })).collect::<Vec<_>>());
        receipts.tidy().unwrap();
        commit(&receipts, &[made(100, 1_000), made(101, 9_000)]);

        assert_eq!(receipts.prune(&expired_before(5_000)).unwrap(), 50 + 1);
        assert_eq!(receipts.shelves().len(), 1, "the mixed shelf stays whole");
        assert_eq!(receipts.get(&key(0)).unwrap(), None);
        assert!(receipts.get(&key(50)).unwrap().is_some(), "kept with its shelf");
        assert_eq!(receipts.get(&key(100)).unwrap(), None);
        assert!(receipts.get(&key(101)).unwrap().is_some());

        assert_eq!(receipts.prune(&expired_before(10_000)).unwrap(), 50 + 1);
        assert!(receipts.shelves().is_empty());
        assert_eq!(receipts.range(&[], None).count(), 0);
    }
}
