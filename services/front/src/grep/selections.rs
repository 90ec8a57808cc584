//! Page selections, kept by snapshot.
//!
//! Which files a grep page visits depends only on the snapshot (the space and
//! the pinned revision), the root, the glob and types, where the page starts,
//! and the server's page budget: never on the pattern. A pinned snapshot never
//! changes, so a selection serves every later page that starts at the same
//! place: the same search again, or a search for another pattern over the
//! same tree, as long as nothing was written in between. At most
//! [`MAX_ENTRIES`] selections and [`MAX_BYTES`] are kept, so the cache fills
//! within seconds under any grep load and then stays the same size; the
//! least recently used go first.

use std::sync::{Arc, Mutex, PoisonError};

use lru::LruCache;

use super::{GrepQuery, Selection};
use crate::ids::SpaceId;
use crate::path::SpacePath;

/// Selections kept at most: enough for every page of a whole-space search.
pub const MAX_ENTRIES: usize = 64;
/// Memory for kept selections, roughly.
pub const MAX_BYTES: usize = 16 << 20;

/// What a selection depends on.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Key {
    space: SpaceId,
    revision: u64,
    root: String,
    /// The glob and the types, as the query's fingerprint spells them.
    filter: [String; 2],
    from: Option<String>,
    prefetch: bool,
}

impl Key {
    pub fn new(
        space: SpaceId,
        revision: u64,
        root: &SpacePath,
        query: &GrepQuery,
        from: Option<&str>,
        prefetch: bool,
    ) -> Self {
        let filter = query.file_filter().map(str::to_owned);
        Self { space, revision, root: root.to_string(), filter, from: from.map(str::to_owned), prefetch }
    }
}

/// Selections kept for reuse.
#[derive(Debug)]
pub struct Selections {
    inner: Mutex<Inner>,
}

#[derive(Debug)]
struct Inner {
    entries: LruCache<Key, (Arc<Selection>, usize)>,
    bytes: usize,
}

impl Default for Selections {
    fn default() -> Self {
        Self { inner: Mutex::new(Inner { entries: LruCache::unbounded(), bytes: 0 }) }
    }
}

impl Selections {
    pub fn get(&self, key: &Key) -> Option<Arc<Selection>> {
        self.lock().entries.get(key).map(|(selection, _)| selection.clone())
    }

    pub fn insert(&self, key: Key, selection: Arc<Selection>) {
        let size = selection.approximate_bytes();
        if size > MAX_BYTES {
            return;
        }
        let mut inner = self.lock();
        if let Some((_, old)) = inner.entries.put(key, (selection, size)) {
            inner.bytes -= old;
        }
        inner.bytes += size;
        while inner.bytes > MAX_BYTES || inner.entries.len() > MAX_ENTRIES {
            let Some((_, (_, dropped))) = inner.entries.pop_lru() else { break };
            inner.bytes -= dropped;
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn selection(files: usize) -> Arc<Selection> {
        let files = (0..files)
            .map(|i| agentvfs_proto::v1::GrepFileRef {
                path: format!("/f{i}"),
                node_id: crate::ids::NodeId::generate().to_string(),
                version: 1,
                hash: crate::store::Hash::of(b"x").to_hex(),
                size: 1,
                encoding: String::new(),
            })
            .collect();
        Arc::new(Selection { files, skipped: Vec::new(), next: None, visited: 0, prefetch: Vec::new() })
    }

    fn key(revision: u64) -> Key {
        let query =
            GrepQuery::parse(&agentvfs_proto::v1::GrepRequest { pattern: "x".into(), ..Default::default() }).unwrap();
        Key::new(SpaceId::generate(), revision, &SpacePath::root(), &query, None, false)
    }

    #[test]
    fn the_least_recently_used_go_once_the_cache_is_full() {
        let cache = Selections::default();
        let keys: Vec<Key> = (0..100).map(key).collect();
        for k in &keys {
            cache.insert(k.clone(), selection(1));
        }
        assert!(cache.get(&keys[0]).is_none());
        assert!(cache.get(&keys[99]).is_some());
        assert_eq!(cache.lock().entries.len(), MAX_ENTRIES);
    }

    #[test]
    fn the_byte_bound_holds() {
        let cache = Selections::default();
        for revision in 0..MAX_ENTRIES as u64 {
            cache.insert(key(revision), selection(5_000));
        }
        let inner = cache.lock();
        assert!(inner.bytes <= MAX_BYTES && inner.entries.len() < MAX_ENTRIES, "{} bytes", inner.bytes);
    }
}
