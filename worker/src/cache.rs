//! Content cache keyed by BLAKE3 hash, bounded in bytes.
//!
//! Content is immutable, so an entry never goes stale: the only policy is
//! which bytes to keep. Contents fetched together share one slab of memory
//! (see [`crate::slab`]), so slabs are what the cache keeps and lets go:
//! using any content of a slab makes the slab the most recently used, and
//! the least recently used slab goes first, with all its contents. The bound
//! is on the memory the slabs hold: a whole block for a slab from the
//! cache's [`SlabPool`], which is as large as the bound, so the cache never
//! holds more pooled blocks than the pool may make.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use lru::LruCache;
use prost::bytes::Bytes;

use crate::slab::SlabPool;

/// A bounded, shared content cache.
#[derive(Debug)]
pub struct ContentCache {
    inner: Mutex<Inner>,
    capacity: usize,
    pool: SlabPool,
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
        Self {
            inner: Mutex::new(inner),
            capacity: capacity_bytes,
            pool: SlabPool::new(capacity_bytes),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    /// Where the memory of slabs for this cache comes from.
    pub fn pool(&self) -> &SlabPool {
        &self.pool
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

    /// Keeps `contents`, which share one slab of `footprint` bytes of
    /// memory holding just them (or are one content alone), unless the slab
    /// is larger than the whole cache. A hash already cached is served from
    /// the new slab from now on, the most recently used.
    pub fn insert(&self, contents: Vec<(String, Bytes)>, footprint: usize) {
        if footprint > self.capacity || contents.is_empty() {
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
        inner.slabs.put(id, Slab { bytes: footprint, hashes });
        inner.bytes += footprint;
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
    use crate::slab::BLOCK;

    /// Inserts a slab holding `each` bytes for every hash.
    fn insert(cache: &ContentCache, hashes: &[&str], each: usize) {
        let memory = Bytes::from(vec![7u8; hashes.len() * each]);
        let contents =
            hashes.iter().enumerate().map(|(i, h)| (h.to_string(), memory.slice(i * each..(i + 1) * each))).collect();
        cache.insert(contents, memory.len());
    }

    #[test]
    fn stays_within_its_byte_bound() {
        let cache = ContentCache::new(10);
        insert(&cache, &["a"], 5);
        insert(&cache, &["b"], 5);
        assert!(cache.get("a").is_some());
        insert(&cache, &["c"], 3);
        assert!(cache.get("b").is_none(), "least recently used goes first");
        assert!(cache.get("a").is_some() && cache.get("c").is_some());
        insert(&cache, &["huge"], 11);
        assert!(cache.get("huge").is_none());
        assert!(cache.stats().2 <= 10);
    }

    #[test]
    fn a_slab_is_kept_and_let_go_as_a_whole() {
        let cache = ContentCache::new(12);
        insert(&cache, &["a1", "a2", "a3"], 2);
        insert(&cache, &["b1", "b2"], 2);
        // Using one content keeps its whole slab.
        assert!(cache.get("a2").is_some());
        insert(&cache, &["c1", "c2"], 2);
        assert!(cache.get("b1").is_none() && cache.get("b2").is_none(), "the older slab went, all of it");
        for hash in ["a1", "a2", "a3", "c1", "c2"] {
            assert!(cache.get(hash).is_some(), "{hash}");
        }
        assert_eq!(cache.stats().2, 10);
    }

    #[test]
    fn a_hash_cached_twice_is_served_from_its_newer_slab() {
        let cache = ContentCache::new(8);
        insert(&cache, &["a", "shared"], 2);
        insert(&cache, &["shared", "b"], 2);
        // Evicts the first slab; "shared" is in the second one too.
        insert(&cache, &["c"], 2);
        assert!(cache.get("a").is_none());
        assert!(cache.get("shared").is_some() && cache.get("b").is_some());
        assert_eq!(cache.stats().2, 6);
    }

    #[test]
    fn a_pooled_slab_counts_a_whole_block_and_its_block_comes_back_when_evicted() {
        let cache = ContentCache::new(2 * BLOCK);
        for (i, hash) in ["a", "b", "c"].into_iter().enumerate() {
            let packed = cache.pool().pack(&[vec![Bytes::from(vec![i as u8; 2 << 20])]], |_, _| true);
            let content = packed.contents.into_iter().flatten().collect::<Vec<_>>().remove(0);
            cache.insert(vec![(hash.to_owned(), content)], packed.footprint);
        }
        // a and b took the pool's two blocks; c, packed while both were
        // held, got memory of its own, and evicted a.
        assert!(cache.get("a").is_none());
        assert!(cache.get("b").is_some() && cache.get("c").is_some());
        assert_eq!(cache.stats().2, BLOCK + (2 << 20));
        assert_eq!(cache.pool().blocks(), (2, 1), "a's block is free for the next slab");
    }
}
