//! Key layouts. Integers are big-endian so byte order is numeric order, and
//! every per-space key starts with the 16-byte space ID (one table per kind
//! of record, never a table per space).
//!
//! | table | key | value |
//! |---|---|---|
//! | `spaces` | `s` space | `SpaceRecord` |
//! | `spaces` | `n` name | space |
//! | `spaces` | `d` space | deleted, purge pending |
//! | `spaces` | `f` space | registered functions (`Vec<Function>`) |
//! | `spaces` | `mretired` | revisions of deleted spaces (for [`super::seal`]) |
//! | `current` | space path | `Entry` (latest state) |
//! | `history` | space path `00` revision | `Option<Entry>` (None = gone) |
//! | `nodes` | node | `NodeRecord` |
//! | `versions` | space node version | `VersionRecord` |
//! | `content` | hash `m` | `BlobMeta` |
//! | `content` | hash `c` chunk | bytes (≤ [`super::content::CHUNK_SIZE`]) |
//! | `content` | hash `x` | upload ID `u`: the content's chunks are that upload's (the ID alone: its hashed chunks) |
//! | `content` | upload `u` chunk | bytes of an upload (see [`super::content::stage`]) |
//! | `content` | hash `u` upload chunk | bytes of an upload, in stores written before uploads were streamed |
//! | `revlog` | space revision | `RevisionRecord` |
//! | `trash` | space node | `TrashRecord` (a trashed subtree) |
//! | `receipts` | BLAKE3(space, principal, method, key) | `Receipt` |
//! | `outbox` | sequence | `IndexJob` (until every worker has it) |
//! | `queue` | space revision index | `IndexJob` (until it gets a sequence) |
//! | `claims` | BLAKE3(space, principal, method, key) | `ClaimRecord` (a call in progress) |
//! | `sessions` | session `00` node | `SessionRead` (the session's last read of the node) |
//! | `meta` | `format`, `outbox.head`, `outbox.pruned` | the store's own marks |
//! | `meta` | `staged.` upload | start time in ms (an upload not yet committed) |
//! | `meta` | `forking.` space | last write in ms (a fork not yet published) |
//! | `meta` | `upload.` upload | `UploadMarker` (the same, in stores written before uploads were streamed) |
//!
//! Paths never contain NUL, so `00` separates a path from its revision and
//! all revisions of one path sort together, in path byte order.

use crate::ids::{NodeId, SpaceId};
use crate::path::SpacePath;

pub fn space(id: SpaceId) -> Vec<u8> {
    tagged(b's', &id.to_bytes())
}

/// The row, in `meta`, that a front holds while it plans a change of the
/// space again (see `Store::replanning`); commits of other fronts wait at it.
pub fn gate(id: SpaceId) -> Vec<u8> {
    let mut key = b"gate.".to_vec();
    key.extend_from_slice(&id.to_bytes());
    key
}

pub fn space_name(name: &str) -> Vec<u8> {
    tagged(b'n', name.as_bytes())
}

pub fn functions(id: SpaceId) -> Vec<u8> {
    tagged(b'f', &id.to_bytes())
}

pub fn deleted_space(id: SpaceId) -> Vec<u8> {
    tagged(b'd', &id.to_bytes())
}

/// Markers of forks not yet published, in `meta`.
pub const PENDING_FORKS: &[u8] = b"forking.";

pub fn pending_fork(id: SpaceId) -> Vec<u8> {
    let mut key = PENDING_FORKS.to_vec();
    key.extend_from_slice(&id.to_bytes());
    key
}

fn tagged(tag: u8, rest: &[u8]) -> Vec<u8> {
    let mut key = Vec::with_capacity(1 + rest.len());
    key.push(tag);
    key.extend_from_slice(rest);
    key
}

pub fn current(space: SpaceId, path: &SpacePath) -> Vec<u8> {
    let mut key = Vec::with_capacity(16 + path.as_str().len());
    key.extend_from_slice(&space.to_bytes());
    key.extend_from_slice(path.as_str().as_bytes());
    key
}

/// All history keys of one path share this prefix.
pub fn history_prefix(space: SpaceId, path: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(16 + path.len() + 9);
    key.extend_from_slice(&space.to_bytes());
    key.extend_from_slice(path.as_bytes());
    key.push(0);
    key
}

pub fn history(space: SpaceId, path: &SpacePath, revision: u64) -> Vec<u8> {
    let mut key = history_prefix(space, path.as_str());
    key.extend_from_slice(&revision.to_be_bytes());
    key
}

/// Splits a history key into (path, revision).
pub fn parse_history(key: &[u8]) -> Option<(&str, u64)> {
    let body = key.get(16..key.len().checked_sub(9)?)?;
    let revision = u64::from_be_bytes(key.get(key.len() - 8..)?.try_into().ok()?);
    Some((std::str::from_utf8(body).ok()?, revision))
}

/// The range of keys (in `current` or `history`) of everything below `dir`.
/// The upper bound replaces the trailing `/` with the next byte, `0`.
pub fn subtree_range(space: SpaceId, dir: &SpacePath) -> (Vec<u8>, Vec<u8>) {
    let mut start = space.to_bytes().to_vec();
    start.extend_from_slice(dir.as_str().as_bytes());
    if !dir.is_root() {
        start.push(b'/');
    }
    let mut end = start.clone();
    *end.last_mut().unwrap_or(&mut 0) = b'/' + 1;
    (start, end)
}

/// The first key after every key of `path` itself (in `history`) and before
/// any key of a sibling that sorts after it.
pub fn after_path(space: SpaceId, path: &str) -> Vec<u8> {
    let mut key = space.to_bytes().to_vec();
    key.extend_from_slice(path.as_bytes());
    key.push(1);
    key
}

/// The first key after everything below `path` (in `history`).
pub fn after_subtree(space: SpaceId, path: &str) -> Vec<u8> {
    let mut key = space.to_bytes().to_vec();
    key.extend_from_slice(path.as_bytes());
    key.push(b'/' + 1);
    key
}

pub fn node(id: NodeId) -> Vec<u8> {
    id.to_bytes().to_vec()
}

pub fn version(space: SpaceId, node: NodeId, version: u64) -> Vec<u8> {
    let mut key = versions_prefix(space, node);
    key.extend_from_slice(&version.to_be_bytes());
    key
}

pub fn versions_prefix(space: SpaceId, node: NodeId) -> Vec<u8> {
    let mut key = Vec::with_capacity(40);
    key.extend_from_slice(&space.to_bytes());
    key.extend_from_slice(&node.to_bytes());
    key
}

/// The number of a version key.
pub fn parse_version_number(key: &[u8]) -> crate::error::Result<u64> {
    key.get(32..40)
        .and_then(|n| n.try_into().ok())
        .map(u64::from_be_bytes)
        .ok_or_else(|| crate::error::Error::internal("malformed version key"))
}

pub fn blob_meta(hash: &[u8; 32]) -> Vec<u8> {
    let mut key = hash.to_vec();
    key.push(b'm');
    key
}

pub fn blob_chunk(hash: &[u8; 32], index: u32) -> Vec<u8> {
    let mut key = hash.to_vec();
    key.push(b'c');
    key.extend_from_slice(&index.to_be_bytes());
    key
}

/// Names the upload whose chunks a content's are.
pub fn blob_upload(hash: &[u8; 32]) -> Vec<u8> {
    let mut key = hash.to_vec();
    key.push(b'x');
    key
}

/// Every chunk key of `upload` starts with this. Shorter than any key that
/// starts with a hash, so the two never meet.
pub fn upload_chunks(upload: &[u8; 16]) -> Vec<u8> {
    let mut key = upload.to_vec();
    key.push(b'u');
    key
}

pub fn upload_chunk(upload: &[u8; 16], index: u32) -> Vec<u8> {
    let mut key = upload_chunks(upload);
    key.extend_from_slice(&index.to_be_bytes());
    key
}

pub fn hashed_upload_chunk(hash: &[u8; 32], upload: &[u8; 16], index: u32) -> Vec<u8> {
    let mut key = hash.to_vec();
    key.push(b'u');
    key.extend_from_slice(upload);
    key.extend_from_slice(&index.to_be_bytes());
    key
}

/// Every marker of a staged upload starts with this.
pub const STAGED_MARKERS: &[u8] = b"staged.";

pub fn staged_marker(upload: &[u8; 16]) -> Vec<u8> {
    let mut key = STAGED_MARKERS.to_vec();
    key.extend_from_slice(upload);
    key
}

/// Every marker of an upload with hashed chunk keys starts with this.
pub const UPLOAD_MARKERS: &[u8] = b"upload.";

pub fn upload_marker(upload: &[u8; 16]) -> Vec<u8> {
    let mut key = UPLOAD_MARKERS.to_vec();
    key.extend_from_slice(upload);
    key
}

pub fn trash(space: SpaceId, node: NodeId) -> Vec<u8> {
    let mut key = space.to_bytes().to_vec();
    key.extend_from_slice(&node.to_bytes());
    key
}

pub fn revlog(space: SpaceId, revision: u64) -> Vec<u8> {
    let mut key = space.to_bytes().to_vec();
    key.extend_from_slice(&revision.to_be_bytes());
    key
}

/// A queued index job: the `index`th of the commit that made `revision`.
pub fn queued(space: SpaceId, revision: u64, index: u32) -> Vec<u8> {
    let mut key = revlog(space, revision);
    key.extend_from_slice(&index.to_be_bytes());
    key
}

/// A queued job of a rebuild of the space's index at `revision`: after
/// every job of the commit that made `revision` (a longer key with their
/// prefix), before any job of the next.
pub fn queued_reindex(space: SpaceId, revision: u64, index: u64) -> Vec<u8> {
    let mut key = queued(space, revision, u32::MAX);
    key.extend_from_slice(&index.to_be_bytes());
    key
}

/// The key of a session's read of `node`. Session IDs are printable ASCII
/// (no NUL), so `00` ends the session and one session's records sort
/// together.
pub fn session_read(session: &str, node: NodeId) -> Vec<u8> {
    let mut key = Vec::with_capacity(session.len() + 17);
    key.extend_from_slice(session.as_bytes());
    key.push(0);
    key.extend_from_slice(&node.to_bytes());
    key
}

pub fn sequence(sequence: u64) -> [u8; 8] {
    sequence.to_be_bytes()
}

pub fn parse_sequence(key: &[u8]) -> crate::error::Result<u64> {
    Ok(u64::from_be_bytes(key.try_into().map_err(|_| crate::error::Error::internal("malformed outbox sequence"))?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn history_keys_sort_by_path_then_revision() {
        let s = SpaceId::generate();
        let p = |x: &str| SpacePath::parse(x).unwrap();
        let mut keys =
            [history(s, &p("/a/b"), 1), history(s, &p("/a"), 300), history(s, &p("/a-b"), 1), history(s, &p("/a"), 2)];
        keys.sort();
        let parsed: Vec<_> = keys.iter().map(|k| parse_history(k).unwrap()).collect();
        assert_eq!(parsed, [("/a", 2), ("/a", 300), ("/a-b", 1), ("/a/b", 1)]);
    }

    #[test]
    fn subtree_range_covers_descendants_only() {
        let s = SpaceId::generate();
        let (start, end) = subtree_range(s, &SpacePath::parse("/a").unwrap());
        let inside = history(s, &SpacePath::parse("/a/z/y").unwrap(), 9);
        let itself = history(s, &SpacePath::parse("/a").unwrap(), 9);
        let sibling = history(s, &SpacePath::parse("/a0").unwrap(), 9);
        assert!(start <= inside && inside < end);
        assert!(!(start <= itself && itself < end));
        assert!(!(start <= sibling && sibling < end));
    }
}
