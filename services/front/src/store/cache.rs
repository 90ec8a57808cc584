//! A bounded cache of what never changes once written: version records and
//! content by hash, so that a read on the database engine costs only its
//! lookups of mutable records (the space, the path's entry). Nothing
//! mutable is ever cached. The embedded engine has sled's page cache and
//! does without.

use std::sync::Mutex;

use lru::LruCache;
use prost::bytes::Bytes;

use super::records::{Hash, VersionRecord};
use crate::ids::{NodeId, SpaceId};

/// Content larger than this is not cached: one would push out many.
pub const MAX_CACHED_CONTENT: usize = 1 << 20;
/// What a version record is counted as, besides its strings.
const RECORD_BYTES: usize = 256;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Key {
    Version(SpaceId, NodeId, u64),
    Content(Hash),
    /// The ID a space name stood for: a hint, confirmed by the space's
    /// record (see [`crate::store::Store::space_by_name`]).
    SpaceName(String),
}

#[derive(Debug, Clone)]
enum Value {
    Version(VersionRecord),
    Content(Bytes),
    SpaceId(SpaceId),
}

impl Value {
    fn bytes(&self) -> usize {
        match self {
            Value::Version(record) => RECORD_BYTES + record.principal.len() + record.operation.len(),
            Value::Content(bytes) => bytes.len() + 64,
            Value::SpaceId(_) => 64,
        }
    }
}

/// The cache; see the module docs.
#[derive(Debug)]
pub struct Cache {
    inner: Mutex<Inner>,
    budget: usize,
}

#[derive(Debug)]
struct Inner {
    entries: LruCache<Key, Value>,
    bytes: usize,
}

impl Cache {
    /// A cache of at most `budget` bytes.
    pub fn new(budget: usize) -> Self {
        Self { inner: Mutex::new(Inner { entries: LruCache::unbounded(), bytes: 0 }), budget }
    }

    pub fn version(&self, space: SpaceId, node: NodeId, version: u64) -> Option<VersionRecord> {
        match self.get(&Key::Version(space, node, version), "version")? {
            Value::Version(record) => Some(record),
            _ => None,
        }
    }

    pub fn put_version(&self, space: SpaceId, node: NodeId, version: u64, record: &VersionRecord) {
        self.put(Key::Version(space, node, version), Value::Version(record.clone()));
    }

    /// The ID `name` stood for when it was last looked up.
    pub fn space_id(&self, name: &str) -> Option<SpaceId> {
        match self.get(&Key::SpaceName(name.to_owned()), "space_name")? {
            Value::SpaceId(id) => Some(id),
            _ => None,
        }
    }

    pub fn put_space_id(&self, name: &str, id: SpaceId) {
        self.put(Key::SpaceName(name.to_owned()), Value::SpaceId(id));
    }

    /// The content with this hash, as it was read and verified once.
    pub fn content(&self, hash: Hash) -> Option<Bytes> {
        match self.get(&Key::Content(hash), "content")? {
            Value::Content(bytes) => Some(bytes),
            _ => None,
        }
    }

    /// Keeps content whose bytes were checked against `hash`.
    pub fn put_content(&self, hash: Hash, bytes: Bytes) {
        if bytes.len() <= MAX_CACHED_CONTENT {
            self.put(Key::Content(hash), Value::Content(bytes));
        }
    }

    fn get(&self, key: &Key, kind: &'static str) -> Option<Value> {
        let found = self.lock().entries.get(key).cloned();
        let outcome = if found.is_some() { "hit" } else { "miss" };
        metrics::counter!("agentvfs_store_cache_lookups_total", "kind" => kind, "outcome" => outcome).increment(1);
        found
    }

    fn put(&self, key: Key, value: Value) {
        let size = value.bytes();
        if size > self.budget {
            return;
        }
        let mut inner = self.lock();
        if let Some(old) = inner.entries.put(key, value) {
            inner.bytes -= old.bytes();
        }
        inner.bytes += size;
        while inner.bytes > self.budget {
            let Some((_, evicted)) = inner.entries.pop_lru() else { break };
            inner.bytes -= evicted.bytes();
        }
        metrics::gauge!("agentvfs_store_cache_bytes").set(inner.bytes as f64);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_stays_within_its_budget_and_drops_the_least_recently_used() {
        let cache = Cache::new(3 * (1000 + 64));
        let hashes: Vec<Hash> = (0..4u8).map(|i| Hash::of(&[i])).collect();
        for hash in &hashes[..3] {
            cache.put_content(*hash, Bytes::from(vec![0; 1000]));
        }
        // Used last: the first stays, the second is the least recently used.
        assert!(cache.content(hashes[0]).is_some());
        cache.put_content(hashes[3], Bytes::from(vec![0; 1000]));
        assert!(cache.content(hashes[1]).is_none());
        assert!(cache.content(hashes[0]).is_some() && cache.content(hashes[3]).is_some());
        assert!(cache.lock().bytes <= 3 * (1000 + 64));
        // Nothing larger than the budget, or than the largest content kept.
        cache.put_content(Hash::of(b"big"), Bytes::from(vec![0; MAX_CACHED_CONTENT + 1]));
        assert!(cache.content(Hash::of(b"big")).is_none());
    }
}
