//! Content cache keyed by BLAKE3 hash, bounded in bytes.
//!
//! Content is immutable, so an entry never goes stale: the only policy is
//! which bytes to keep (least recently used go first).

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use lru::LruCache;
use prost::bytes::Bytes;

/// A bounded, shared content cache.
#[derive(Debug)]
pub struct ContentCache {
    inner: Mutex<Inner>,
    capacity: usize,
    hits: AtomicU64,
    misses: AtomicU64,
}

#[derive(Debug)]
struct Inner {
    entries: LruCache<String, Bytes>,
    bytes: usize,
}

impl ContentCache {
    pub fn new(capacity_bytes: usize) -> Self {
        Self {
            inner: Mutex::new(Inner { entries: LruCache::unbounded(), bytes: 0 }),
            capacity: capacity_bytes,
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    pub fn get(&self, hash: &str) -> Option<Bytes> {
        let found = self.lock().entries.get(hash).cloned();
        let counter = if found.is_some() { &self.hits } else { &self.misses };
        counter.fetch_add(1, Ordering::Relaxed);
        found
    }

    /// Looks up many hashes under one lock.
    pub fn get_many<'a>(&self, hashes: impl Iterator<Item = &'a str>) -> Vec<Option<Bytes>> {
        let mut inner = self.lock();
        let found: Vec<_> = hashes.map(|hash| inner.entries.get(hash).cloned()).collect();
        drop(inner);
        let hits = found.iter().filter(|f| f.is_some()).count() as u64;
        self.hits.fetch_add(hits, Ordering::Relaxed);
        self.misses.fetch_add(found.len() as u64 - hits, Ordering::Relaxed);
        found
    }

    /// Keeps `content` unless it alone is larger than the whole cache.
    pub fn insert(&self, hash: String, content: Bytes) {
        if content.len() > self.capacity {
            return;
        }
        let mut inner = self.lock();
        inner.bytes += content.len();
        if let Some(old) = inner.entries.put(hash, content) {
            inner.bytes -= old.len();
        }
        while inner.bytes > self.capacity {
            match inner.entries.pop_lru() {
                Some((_, evicted)) => inner.bytes -= evicted.len(),
                None => break,
            }
        }
    }

    /// (hits, misses, bytes held).
    pub fn stats(&self) -> (u64, u64, usize) {
        (self.hits.load(Ordering::Relaxed), self.misses.load(Ordering::Relaxed), self.lock().bytes)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stays_within_its_byte_bound() {
        let cache = ContentCache::new(10);
        cache.insert("a".into(), Bytes::from_static(b"12345"));
        cache.insert("b".into(), Bytes::from_static(b"12345"));
        assert!(cache.get("a").is_some());
        cache.insert("c".into(), Bytes::from_static(b"123"));
        assert!(cache.get("b").is_none(), "least recently used goes first");
        assert!(cache.get("a").is_some() && cache.get("c").is_some());
        cache.insert("huge".into(), Bytes::from_static(&[0u8; 11]));
        assert!(cache.get("huge").is_none());
        assert!(cache.stats().2 <= 10);
    }
}
