//! Content cache keyed by BLAKE3 hash, bounded in bytes.
//!
//! Content is immutable, so an entry never goes stale: the only policy is
//! which bytes to keep. Contents fetched together share one slab of memory
//! (see [`crate::slab`]), so slabs are what the cache keeps and lets go:
//! using any content of a slab makes the slab the most recently used, and
//! the least recently used slab goes first, with all its contents. The bound
//! is on the slabs' sizes, which is the memory they hold.

use std::collections::HashMap;
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
    /// Content by hash, with the slab it is part of.
    entries: HashMap<String, (u64, Bytes)>,
    /// Slabs, by recency of use.
    slabs: LruCache<u64, Slab>,
    next_slab: u64,
    bytes: usize,
}

#[derive(Debug)]
struct Slab {
    bytes: usize,
    hashes: Vec<String>,
}

impl ContentCache {
    pub fn new(capacity_bytes: usize) -> Self {
        let inner = Inner { entries: HashMap::new(), slabs: LruCache::unbounded(), next_slab: 0, bytes: 0 };
        Self { inner: Mutex::new(inner), capacity: capacity_bytes, hits: AtomicU64::new(0), misses: AtomicU64::new(0) }
    }

    pub fn get(&self, hash: &str) -> Option<Bytes> {
        self.get_many(std::iter::once(hash)).pop().flatten()
    }

    /// Looks up many hashes under one lock.
    pub fn get_many<'a>(&self, hashes: impl Iterator<Item = &'a str>) -> Vec<Option<Bytes>> {
        let mut inner = self.lock();
        let found: Vec<_> = hashes.map(|hash| inner.get(hash)).collect();
        drop(inner);
        let hits = found.iter().filter(|f| f.is_some()).count() as u64;
        self.hits.fetch_add(hits, Ordering::Relaxed);
        self.misses.fetch_add(found.len() as u64 - hits, Ordering::Relaxed);
        found
    }

    /// Keeps `contents`, which share one slab of memory holding just them
    /// (or are one content alone), unless together they are larger than the
    /// whole cache. A hash already cached is served from the new slab from
    /// now on, the most recently used.
    pub fn insert(&self, contents: Vec<(String, Bytes)>) {
        let bytes: usize = contents.iter().map(|(_, content)| content.len()).sum();
        if bytes > self.capacity || contents.is_empty() {
            return;
        }
        let mut inner = self.lock();
        let id = inner.next_slab;
        inner.next_slab += 1;
        let mut hashes = Vec::with_capacity(contents.len());
        for (hash, content) in contents {
            inner.entries.insert(hash.clone(), (id, content));
            hashes.push(hash);
        }
        inner.slabs.put(id, Slab { bytes, hashes });
        inner.bytes += bytes;
        while inner.bytes > self.capacity {
            let Some((evicted, slab)) = inner.slabs.pop_lru() else { break };
            inner.bytes -= slab.bytes;
            for hash in slab.hashes {
                if inner.entries.get(&hash).is_some_and(|(owner, _)| *owner == evicted) {
                    inner.entries.remove(&hash);
                }
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

impl Inner {
    fn get(&mut self, hash: &str) -> Option<Bytes> {
        let (slab, content) = self.entries.get(hash)?;
        self.slabs.promote(slab);
        Some(content.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slab(hashes: &[&str], each: usize) -> Vec<(String, Bytes)> {
        let memory = Bytes::from(vec![7u8; hashes.len() * each]);
        hashes.iter().enumerate().map(|(i, h)| (h.to_string(), memory.slice(i * each..(i + 1) * each))).collect()
    }

    #[test]
    fn stays_within_its_byte_bound() {
        let cache = ContentCache::new(10);
        cache.insert(slab(&["a"], 5));
        cache.insert(slab(&["b"], 5));
        assert!(cache.get("a").is_some());
        cache.insert(slab(&["c"], 3));
        assert!(cache.get("b").is_none(), "least recently used goes first");
        assert!(cache.get("a").is_some() && cache.get("c").is_some());
        cache.insert(slab(&["huge"], 11));
        assert!(cache.get("huge").is_none());
        assert!(cache.stats().2 <= 10);
    }

    #[test]
    fn a_slab_is_kept_and_let_go_as_a_whole() {
        let cache = ContentCache::new(12);
        cache.insert(slab(&["a1", "a2", "a3"], 2));
        cache.insert(slab(&["b1", "b2"], 2));
        // Using one content keeps its whole slab.
        assert!(cache.get("a2").is_some());
        cache.insert(slab(&["c1", "c2"], 2));
        assert!(cache.get("b1").is_none() && cache.get("b2").is_none(), "the older slab went, all of it");
        for hash in ["a1", "a2", "a3", "c1", "c2"] {
            assert!(cache.get(hash).is_some(), "{hash}");
        }
        assert_eq!(cache.stats().2, 10);
    }

    #[test]
    fn a_hash_cached_twice_is_served_from_its_newer_slab() {
        let cache = ContentCache::new(8);
        cache.insert(slab(&["a", "shared"], 2));
        cache.insert(slab(&["shared", "b"], 2));
        // Evicts the first slab; "shared" is in the second one too.
        cache.insert(slab(&["c"], 2));
        assert!(cache.get("a").is_none());
        assert!(cache.get("shared").is_some() && cache.get("b").is_some());
        assert_eq!(cache.stats().2, 6);
    }
}
