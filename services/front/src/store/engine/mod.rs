//! The narrow interface the store is written against (SPEC §10): an ordered
//! key-value store of a few tables, with point reads, range scans and
//! transactions that the engine may run more than once.
//!
//! Keys and values are bytes ([`super::keys`] is the schema); keys sort
//! bytewise. A transaction sees its own writes; its reads of rows it is about
//! to change are what make it serializable for what it touches, so the store
//! re-validates anything it planned outside a transaction by reading it in
//! the transaction. No engine type leaves this module.

pub mod postgres;
pub mod sled;

use std::fmt;
use std::future::Future;
use std::pin::Pin;

use prost::bytes::Bytes;

use crate::error::Result;

/// The tables of the store, one ordered key space each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Table {
    /// The store's own marks: its format, the outbox head and pruning mark.
    Meta = 0,
    Spaces = 1,
    Current = 2,
    History = 3,
    Nodes = 4,
    Versions = 5,
    Content = 6,
    Revlog = 7,
    Trash = 8,
    Receipts = 9,
    /// Index jobs in sequence order, as delivered to workers.
    Outbox = 10,
    /// Index jobs of commits not yet given a sequence, by space and revision.
    Queue = 11,
    /// Idempotency scopes claimed by a call in progress on some front (used
    /// only by an engine that several fronts share).
    Claims = 12,
    /// Read-before-edit records of agent sessions (used only by an engine
    /// that several fronts share).
    Sessions = 13,
}

impl Table {
    pub const ALL: [Table; 14] = [
        Table::Meta,
        Table::Spaces,
        Table::Current,
        Table::History,
        Table::Nodes,
        Table::Versions,
        Table::Content,
        Table::Revlog,
        Table::Trash,
        Table::Receipts,
        Table::Outbox,
        Table::Queue,
        Table::Claims,
        Table::Sessions,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Table::Meta => "meta",
            Table::Spaces => "spaces",
            Table::Current => "current",
            Table::History => "history",
            Table::Nodes => "nodes",
            Table::Versions => "versions",
            Table::Content => "content",
            Table::Revlog => "revlog",
            Table::Trash => "trash",
            Table::Receipts => "receipts",
            Table::Outbox => "outbox",
            Table::Queue => "queue",
            Table::Claims => "claims",
            Table::Sessions => "sessions",
        }
    }
}

/// A key range: `start` included, `end` excluded (`None`: to the end).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyRange {
    pub start: Vec<u8>,
    pub end: Option<Vec<u8>>,
}

impl KeyRange {
    pub fn new(start: impl Into<Vec<u8>>, end: impl Into<Vec<u8>>) -> Self {
        Self { start: start.into(), end: Some(end.into()) }
    }

    /// Every key from `start` on.
    pub fn from(start: impl Into<Vec<u8>>) -> Self {
        Self { start: start.into(), end: None }
    }

    /// Every key that starts with `prefix`.
    pub fn prefix(prefix: &[u8]) -> Self {
        Self { start: prefix.to_vec(), end: prefix_end(prefix) }
    }

    /// Every key up to and including `last`.
    pub fn through(start: impl Into<Vec<u8>>, last: &[u8]) -> Self {
        let mut end = last.to_vec();
        end.push(0);
        Self { start: start.into(), end: Some(end) }
    }
}

/// The first key after every key that starts with `prefix` (`None` when
/// there is none: the prefix is all `ff`).
fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < u8::MAX {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

/// Entries of a range scan, in key order (or reversed), read as they are
/// consumed.
pub type Entries<'a> = Box<dyn Iterator<Item = Result<(Bytes, Bytes)>> + Send + 'a>;

/// A future that resolves once what was committed before it is durable.
pub type Durable = Pin<Box<dyn Future<Output = Result<()>> + Send + 'static>>;

/// Whether an engine can take calls, as its health check tells.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Health {
    Serving,
    /// Its storage does not answer now (a database that is down or out of
    /// reach); calls fail fast until it answers again, without a restart.
    Unavailable(String),
    /// It failed for good (a write or flush its storage refused): calls that
    /// change anything fail until the front restarts.
    Failed(String),
}

/// A storage engine; see the module docs.
pub trait Engine: Send + Sync + fmt::Debug {
    fn get(&self, table: Table, key: &[u8]) -> Result<Option<Bytes>>;

    /// Several point reads at once (one round trip on a database), in the
    /// order asked.
    fn get_many(&self, keys: &[(Table, &[u8])]) -> Result<Vec<Option<Bytes>>> {
        keys.iter().map(|(table, key)| self.get(*table, key)).collect()
    }

    /// The entries in `range`, ascending (descending when `reverse`). Not a
    /// snapshot: entries committed while it is consumed may or may not show.
    fn scan(&self, table: Table, range: KeyRange, reverse: bool) -> Entries<'_>;

    /// The first `limit` entries of `table` as of one moment: every entry
    /// committed before any entry it returns is in it too (or after `limit`).
    fn scan_snapshot(&self, table: Table, limit: usize) -> Result<Vec<(Bytes, Bytes)>>;

    /// Runs `work` as one atomic transaction. The engine may re-run it when
    /// it conflicts with another, so `work` must do no I/O of its own and
    /// read what it depends on through the transaction.
    fn transact(&self, work: &mut dyn FnMut(&mut dyn Tx) -> Result<()>) -> Result<()>;

    /// Resolves once every transaction committed before the call is durable.
    fn durable(&self) -> Durable;

    /// Notes that a change is on its way to a commit until the returned
    /// value drops. An engine that makes commits durable in groups waits a
    /// moment for such changes before it flushes, so that one flush covers
    /// them too.
    fn expect_commit(&self) -> Expected {
        Box::new(())
    }

    /// Refuses a change that brings `incoming` new bytes and releases
    /// `released_chunks` content chunks when the engine could not store it
    /// safely (a nearly full disk).
    fn check_room(&self, incoming: u64, released_chunks: u64) -> Result<()>;

    /// Bytes the store takes on the front's disk (`None`: it is not on it).
    fn size_on_disk(&self) -> Result<Option<u64>>;

    /// Checks, once at open, that the store holds every change the engine
    /// knows to have been made durable (`watermark` counts them).
    fn check_watermark(&self, watermark: u64) -> Result<(), super::OpenError>;

    /// Makes everything committed durable and records `watermark` with it.
    fn checkpoint(&self, watermark: u64) -> Result<()>;

    /// Makes everything durable and stops background work.
    fn shutdown(&self) -> Result<()>;

    /// How the engine is doing now; may block for up to the engine's
    /// connect timeout to find out.
    fn health(&self) -> Health;

    /// Whether several fronts may use this storage at once (a database):
    /// then state that calls share across fronts, such as idempotency
    /// claims and session reads, must live in it rather than in memory.
    fn shared(&self) -> bool;

    /// Removes the rows of `table` that `expired` says are, checking each
    /// again in the transaction that removes it: a row renewed or rewritten
    /// since the scan found it stays. Returns how many were removed. (The
    /// embedded engine keeps receipts in bulk and drops them in bulk: some
    /// expired ones stay a while longer.)
    fn prune(&self, table: Table, expired: &dyn Fn(&[u8]) -> Result<bool>) -> Result<usize> {
        prune_rows(self, table, expired)
    }

    /// Locks `rows` (made, empty, where missing) in a transaction of their
    /// own until the returned value is dropped: a transaction of any front
    /// that reads one of them ahead waits until then. For storage that
    /// several fronts share; one process has its own locks, and this
    /// holds nothing.
    fn hold(&self, _rows: &[(Table, Vec<u8>)]) -> Result<Held> {
        Ok(Box::new(()))
    }
}

/// Rows re-checked and removed per transaction when pruning.
const PRUNE_BATCH: usize = 256;

/// [`Engine::prune`] by a scan, then a transaction per batch of rows.
pub fn prune_rows<E: Engine + ?Sized>(
    engine: &E,
    table: Table,
    expired: &dyn Fn(&[u8]) -> Result<bool>,
) -> Result<usize> {
    let mut found = Vec::new();
    for item in engine.scan(table, KeyRange::from(Vec::new()), false) {
        let (key, value) = item?;
        if expired(&value)? {
            found.push(key.to_vec());
        }
    }
    let mut removed = 0;
    for batch in found.chunks(PRUNE_BATCH) {
        let mut removed_here = 0;
        engine.transact(&mut |tx| {
            removed_here = 0;
            let wanted: Vec<(Table, Vec<u8>)> = batch.iter().map(|key| (table, key.clone())).collect();
            tx.read_ahead(&wanted)?;
            for key in batch {
                if let Some(raw) = tx.get(table, key)?
                    && expired(&raw)?
                {
                    tx.delete(table, key)?;
                    removed_here += 1;
                }
            }
            Ok(())
        })?;
        removed += removed_here;
    }
    Ok(removed)
}

/// Rows locked by [`Engine::hold`], released on drop.
pub type Held = Box<dyn Send>;

/// A change [`Engine::expect_commit`] waits for, until it drops.
pub type Expected = Box<dyn Send>;

/// The reads and writes of one transaction.
pub trait Tx {
    fn get(&mut self, table: Table, key: &[u8]) -> Result<Option<Bytes>>;

    /// Reads (and so locks) several rows the transaction will `get`, in one
    /// round trip where that saves any. Rows are locked in (table, key)
    /// order, the order [`Engine::hold`] locks them in.
    fn read_ahead(&mut self, _keys: &[(Table, Vec<u8>)]) -> Result<()> {
        Ok(())
    }
    fn put(&mut self, table: Table, key: &[u8], value: &[u8]) -> Result<()>;
    fn delete(&mut self, table: Table, key: &[u8]) -> Result<()>;

    /// The rows of `table` under `prefix`, in key order, as committed: the
    /// transaction's own writes are not among them, so scan before writing.
    /// A database reads them after every lock the transaction holds, so
    /// rows those locks guard cannot change under it; sled runs one
    /// transaction at a time.
    fn scan_prefix(&mut self, table: Table, prefix: &[u8]) -> Result<Vec<(Bytes, Bytes)>>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_ranges_end_after_every_key_of_the_prefix() {
        assert_eq!(KeyRange::prefix(b"ab").end.as_deref(), Some(&b"ac"[..]));
        assert_eq!(KeyRange::prefix(&[1, 0xff]).end.as_deref(), Some(&[2][..]));
        assert_eq!(KeyRange::prefix(&[0xff, 0xff]).end, None);
        assert_eq!(KeyRange::through(b"a".to_vec(), b"b").end.as_deref(), Some(&b"b\0"[..]));
    }
}
