//! The read-before-edit rule: which version of which file each agent session
//! last read.
//!
//! A single front keeps the records in memory, bounded in count (least
//! recently used first out) and in idle time. A session whose record was
//! evicted simply has to read again: the rule can only ask for an extra
//! read, never let a stale edit through, because edits are checked against
//! versions, not times.
//!
//! Fronts that share a store keep them in it instead, so that a read on one
//! front lets an edit on another proceed: a write keeps its session's record
//! in its own transaction, each other recorded read is one upsert (no read
//! before it; the reads recorded at the same moment share one transaction),
//! each guarded edit one point read.
//! The in-memory records are not consulted then. Any answer they give can
//! differ from the shared record in both directions: another front may have
//! recorded a newer read (a stale refusal) or, later, a read of an older
//! version (an edit let through that every other front refuses), so only
//! the store can answer the same on every front.

use std::num::NonZeroUsize;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use lru::LruCache;

use crate::error::Result;
use crate::ids::NodeId;
use crate::store::records::{SessionRead, now_ms};
use crate::store::{SessionMark, Store};

/// Session → (node → version read) records.
#[derive(Debug)]
pub struct Sessions {
    reads: Mutex<LruCache<(String, NodeId), (u64, Instant)>>,
    idle: Duration,
}

impl Sessions {
    pub fn new(capacity: usize, idle: Duration) -> Self {
        let capacity = NonZeroUsize::new(capacity).unwrap_or(NonZeroUsize::MIN);
        Self { reads: Mutex::new(LruCache::new(capacity)), idle }
    }

    /// Records that `session` has seen `version` of `node`.
    pub fn saw(&self, store: &Store, session: &str, node: NodeId, version: u64) -> Result<()> {
        if store.shared() {
            let read_ms = now_ms();
            let expires_ms = read_ms.saturating_add(self.idle_ms());
            return store.record_session_read(session, node, SessionRead { version, read_ms, expires_ms });
        }
        self.lock().put((session.to_owned(), node), (version, Instant::now()));
        Ok(())
    }

    /// What a write records for `session` in its own transaction, on a
    /// store that several fronts share; `None` (and [`Sessions::saw`] once
    /// it is done) otherwise.
    pub fn mark(&self, store: &Store, session: Option<&str>) -> Option<SessionMark> {
        let session = session.filter(|_| store.shared())?;
        Some(SessionMark { session: session.to_owned(), idle_ms: self.idle_ms() })
    }

    /// The version `session` last saw of `node`, unless the record expired.
    pub fn seen(&self, store: &Store, session: &str, node: NodeId) -> Result<Option<u64>> {
        if store.shared() {
            let read = store.session_read(session, node)?;
            // This front's idle limit, whichever front wrote the record.
            return Ok(read.filter(|r| now_ms().saturating_sub(r.read_ms) <= self.idle_ms()).map(|r| r.version));
        }
        let mut reads = self.lock();
        let key = (session.to_owned(), node);
        match reads.get(&key) {
            Some(&(version, at)) if at.elapsed() <= self.idle => Ok(Some(version)),
            Some(_) => {
                reads.pop(&key);
                Ok(None)
            }
            None => Ok(None),
        }
    }

    fn idle_ms(&self) -> i64 {
        i64::try_from(self.idle.as_millis()).unwrap_or(i64::MAX)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LruCache<(String, NodeId), (u64, Instant)>> {
        self.reads.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Durability, StoreLimits};

    #[test]
    fn records_are_bounded_and_expire() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), Durability::Off, StoreLimits::default()).unwrap();
        let sessions = Sessions::new(2, Duration::from_secs(60));
        let (a, b, c) = (NodeId::generate(), NodeId::generate(), NodeId::generate());
        let seen = |sessions: &Sessions, session: &str, node: NodeId| sessions.seen(&store, session, node).unwrap();
        sessions.saw(&store, "s1", a, 1).unwrap();
        sessions.saw(&store, "s1", b, 2).unwrap();
        sessions.saw(&store, "s2", c, 3).unwrap();
        assert_eq!(seen(&sessions, "s1", a), None, "evicted as least recently used");
        assert_eq!((seen(&sessions, "s1", b), seen(&sessions, "s2", c)), (Some(2), Some(3)));
        assert_eq!(seen(&sessions, "s2", b), None);

        let quick = Sessions::new(10, Duration::ZERO);
        quick.saw(&store, "s", a, 1).unwrap();
        std::thread::sleep(Duration::from_millis(2));
        assert_eq!(seen(&quick, "s", a), None);
    }
}
