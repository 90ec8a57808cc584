//! The read-before-edit rule: which version of which file each agent session
//! last read.
//!
//! Records live in memory, bounded in count (least recently used first out)
//! and in idle time. A session whose record was evicted simply has to read
//! again: the rule can only ask for an extra read, never let a stale edit
//! through, because edits are checked against versions, not times.

use std::num::NonZeroUsize;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use lru::LruCache;

use crate::ids::NodeId;

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
    pub fn saw(&self, session: &str, node: NodeId, version: u64) {
        self.lock().put((session.to_owned(), node), (version, Instant::now()));
    }

    /// The version `session` last saw of `node`, unless the record expired.
    pub fn seen(&self, session: &str, node: NodeId) -> Option<u64> {
        let mut reads = self.lock();
        let key = (session.to_owned(), node);
        match reads.get(&key) {
            Some(&(version, at)) if at.elapsed() <= self.idle => Some(version),
            Some(_) => {
                reads.pop(&key);
                None
            }
            None => None,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LruCache<(String, NodeId), (u64, Instant)>> {
        self.reads.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_bounded_and_expire() {
        let sessions = Sessions::new(2, Duration::from_secs(60));
        let (a, b, c) = (NodeId::generate(), NodeId::generate(), NodeId::generate());
        sessions.saw("s1", a, 1);
        sessions.saw("s1", b, 2);
        sessions.saw("s2", c, 3);
        assert_eq!(sessions.seen("s1", a), None, "evicted as least recently used");
        assert_eq!((sessions.seen("s1", b), sessions.seen("s2", c)), (Some(2), Some(3)));
        assert_eq!(sessions.seen("s2", b), None);

        let quick = Sessions::new(10, Duration::ZERO);
        quick.saw("s", a, 1);
        std::thread::sleep(Duration::from_millis(2));
        assert_eq!(quick.seen("s", a), None);
    }
}
