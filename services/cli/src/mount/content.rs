//! File content by hash, bounded by bytes: content never goes stale, so an
//! entry is good until it is evicted, least recently used first.

use std::sync::Arc;

use lru::LruCache;

#[derive(Debug)]
pub struct ContentCache {
    entries: LruCache<String, Arc<Vec<u8>>>,
    bytes: usize,
    capacity: usize,
}

impl ContentCache {
    pub fn new(capacity: usize) -> ContentCache {
        ContentCache { entries: LruCache::unbounded(), bytes: 0, capacity }
    }

    pub fn get(&mut self, hash: &str) -> Option<Arc<Vec<u8>>> {
        self.entries.get(hash).cloned()
    }

    /// Keeps `content` under `hash` unless it alone exceeds the capacity;
    /// evicts the least recently used until the rest fits.
    pub fn put(&mut self, hash: String, content: Arc<Vec<u8>>) {
        if content.len() > self.capacity || hash.is_empty() {
            return;
        }
        self.bytes += content.len();
        if let Some(replaced) = self.entries.put(hash, content) {
            self.bytes -= replaced.len();
        }
        while self.bytes > self.capacity {
            match self.entries.pop_lru() {
                Some((_, evicted)) => self.bytes -= evicted.len(),
                None => break,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_least_recently_used_go_first_and_the_bytes_stay_bounded() {
        let mut cache = ContentCache::new(10);
        cache.put("a".into(), Arc::new(vec![0; 4]));
        cache.put("b".into(), Arc::new(vec![0; 4]));
        assert!(cache.get("a").is_some());
        cache.put("c".into(), Arc::new(vec![0; 4]));
        assert!(cache.get("b").is_none(), "b was the least recently used");
        assert!(cache.get("a").is_some() && cache.get("c").is_some());
        cache.put("huge".into(), Arc::new(vec![0; 11]));
        assert!(cache.get("huge").is_none(), "larger than the whole cache");
        assert_eq!(cache.bytes, 8);
    }
}
