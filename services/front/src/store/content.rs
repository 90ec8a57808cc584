//! Content blobs: stored once per BLAKE3 hash, reference-counted by the
//! versions that use them, and split into chunks (below sled's ~128 KiB
//! threshold, above which it writes blob files that it never fsyncs).
//!
//! Content of one chunk is written by the commit that brings it. Larger
//! content is *uploaded* first, outside the commit's transaction, a few
//! chunks per transaction, under keys of its own upload that nothing else
//! touches ([`upload`]); the commit then only claims the upload (or, when
//! the content is stored already, drops it). A marker in `meta` records an
//! upload until its commit claims it, so that what a crash leaves behind is
//! collected ([`Store::collect_uploads`]).

use prost::bytes::Bytes;

use super::engine::{Table, Tx};
use super::records::{BlobMeta, Hash, UploadMarker, decode, encode, now_ms};
use super::{Store, keys};
use crate::error::{Error, Reason, Result};

/// Bytes per stored chunk.
pub const CHUNK_SIZE: usize = 64 * 1024;
/// Chunks an upload writes per transaction.
const UPLOAD_BATCH: usize = 16;

/// How old an upload no commit claimed must be before it is collected:
/// far longer than any commit takes.
pub const UPLOAD_GRACE: std::time::Duration = std::time::Duration::from_secs(3600);

/// An upload's ID.
pub type UploadId = [u8; 16];

/// What a new version's content is, for [`add_ref`].
#[derive(Debug, Clone, Copy)]
pub enum Source<'a> {
    /// Stored already (a copy): only referenced.
    Stored,
    /// Bytes the transaction writes if they are not stored yet.
    Bytes(&'a [u8]),
    /// Bytes uploaded before the transaction (see [`upload`]), which also
    /// holds them in case the upload cannot be claimed.
    Uploaded(UploadId, &'a [u8]),
}

/// Adds one reference to `hash`, storing its content if it is new.
pub fn add_ref(tx: &mut dyn Tx, hash: Hash, source: Source<'_>) -> Result<()> {
    let meta_key = keys::blob_meta(&hash.0);
    let meta = match tx.get(Table::Content, &meta_key)? {
        Some(raw) => {
            let mut meta: BlobMeta = decode(&raw)?;
            meta.refs += 1;
            meta
        }
        None => {
            let bytes = match source {
                Source::Stored => return Err(Error::internal("a copy references content that is not stored")),
                Source::Bytes(bytes) => {
                    for (index, chunk) in (0..).zip(bytes.chunks(CHUNK_SIZE)) {
                        tx.put(Table::Content, &keys::blob_chunk(&hash.0, index), chunk)?;
                    }
                    bytes
                }
                Source::Uploaded(upload, bytes) => {
                    // The upload's chunks become the content's.
                    tx.put(Table::Content, &keys::blob_upload(&hash.0), &upload)?;
                    tx.delete(Table::Meta, &keys::upload_marker(&upload))?;
                    bytes
                }
            };
            let chunks = u32::try_from(bytes.len().div_ceil(CHUNK_SIZE))
                .map_err(|_| Error::internal("content has too many chunks"))?;
            BlobMeta { size: bytes.len() as u64, chunks, refs: 1 }
        }
    };
    tx.put(Table::Content, &meta_key, &encode(&meta))
}

/// Drops one reference to `hash`, deleting the content with the last one.
/// Returns the bytes freed.
pub fn drop_ref(tx: &mut dyn Tx, hash: Hash) -> Result<u64> {
    let meta_key = keys::blob_meta(&hash.0);
    let Some(raw) = tx.get(Table::Content, &meta_key)? else {
        return Ok(0);
    };
    let mut meta: BlobMeta = decode(&raw)?;
    meta.refs = meta.refs.saturating_sub(1);
    if meta.refs > 0 {
        tx.put(Table::Content, &meta_key, &encode(&meta))?;
        return Ok(0);
    }
    let upload = uploaded_as(tx.get(Table::Content, &keys::blob_upload(&hash.0))?)?;
    for index in 0..meta.chunks {
        tx.delete(Table::Content, &chunk_key(hash, upload.as_ref(), index))?;
    }
    if upload.is_some() {
        tx.delete(Table::Content, &keys::blob_upload(&hash.0))?;
    }
    tx.delete(Table::Content, &meta_key)?;
    Ok(meta.size)
}

/// The key of chunk `index` of `hash`: of its upload, or classic.
fn chunk_key(hash: Hash, upload: Option<&UploadId>, index: u32) -> Vec<u8> {
    match upload {
        Some(upload) => keys::upload_chunk(&hash.0, upload, index),
        None => keys::blob_chunk(&hash.0, index),
    }
}

fn uploaded_as(raw: Option<Bytes>) -> Result<Option<UploadId>> {
    raw.map(|raw| UploadId::try_from(raw.as_ref()).map_err(|_| Error::internal("malformed upload record"))).transpose()
}

/// Whether content with this hash is stored.
pub fn is_stored(store: &Store, hash: Hash) -> Result<bool> {
    Ok(store.get(Table::Content, &keys::blob_meta(&hash.0))?.is_some())
}

/// Uploads `bytes` (content of more than one chunk) under a new upload:
/// the marker first, then the chunks, a few per transaction.
pub fn upload(store: &Store, hash: Hash, bytes: &[u8]) -> Result<UploadId> {
    let upload = fastrand::u128(..).to_be_bytes();
    let chunks = u32::try_from(bytes.len().div_ceil(CHUNK_SIZE)).map_err(|_| Error::internal("content too large"))?;
    let marker = encode(&UploadMarker { hash, chunks, started_ms: now_ms() });
    store.transact(|tx| tx.put(Table::Meta, &keys::upload_marker(&upload), &marker))?;
    let mut index = 0u32;
    for batch in bytes.chunks(CHUNK_SIZE * UPLOAD_BATCH) {
        let first = index;
        store.transact(|tx| {
            for (at, chunk) in (first..).zip(batch.chunks(CHUNK_SIZE)) {
                tx.put(Table::Content, &keys::upload_chunk(&hash.0, &upload, at), chunk)?;
            }
            Ok(())
        })?;
        index += batch.len().div_ceil(CHUNK_SIZE) as u32;
    }
    Ok(upload)
}

/// Deletes an upload's chunks and marker unless its content claimed it.
/// Called once the upload's commit is over, whatever its outcome (a
/// duplicate or a failed commit leaves an upload nothing uses), or by the
/// collector when no commit can claim it any more.
pub fn release_upload(store: &Store, upload: UploadId, hash: Hash, chunks: u32) -> Result<()> {
    if uploaded_as(store.get(Table::Content, &keys::blob_upload(&hash.0))?)? == Some(upload) {
        // Claimed: its chunks are the content's now (and its marker gone).
        return Ok(());
    }
    let keys: Vec<Bytes> = (0..chunks).map(|index| keys::upload_chunk(&hash.0, &upload, index).into()).collect();
    store.remove_all(Table::Content, keys)?;
    store.transact(|tx| tx.delete(Table::Meta, &keys::upload_marker(&upload)))
}

impl Store {
    /// Deletes what uploads older than `grace` left behind: uploads whose
    /// commit never claimed them (the front stopped in between). Returns
    /// how many.
    pub fn collect_uploads(&self, grace: std::time::Duration) -> Result<usize> {
        let cutoff = now_ms() - i64::try_from(grace.as_millis()).unwrap_or(i64::MAX);
        let mut stale = Vec::new();
        for item in self.scan_prefix(Table::Meta, keys::UPLOAD_MARKERS) {
            let (key, value) = item?;
            let marker: UploadMarker = decode(&value)?;
            let Ok(upload) = UploadId::try_from(&key[keys::UPLOAD_MARKERS.len()..]) else { continue };
            if marker.started_ms < cutoff {
                stale.push((upload, marker));
            }
        }
        for (upload, marker) in &stale {
            tracing::info!(hash = %marker.hash.to_hex(), "collecting an upload no commit claimed");
            release_upload(self, *upload, marker.hash, marker.chunks)?;
        }
        Ok(stale.len())
    }
}

/// Reads the whole content of `hash`, verifying it.
pub fn read(store: &Store, hash: Hash) -> Result<Vec<u8>> {
    let bytes = read_if_stored(store, hash)?.ok_or_else(|| missing(hash))?;
    if Hash::of(&bytes) != hash {
        return Err(damaged(hash));
    }
    Ok(bytes)
}

/// The content of `hash`, unverified, or `None` when nothing is stored
/// under it.
pub fn read_if_stored(store: &Store, hash: Hash) -> Result<Option<Vec<u8>>> {
    Ok(read_chunks_if_stored(store, hash)?.map(|chunks| match <[Bytes; 1]>::try_from(chunks) {
        Ok([only]) => only.to_vec(),
        Err(chunks) => chunks.concat(),
    }))
}

/// The stored chunks of `hash` in order, unverified and not copied, or
/// `None` when nothing is stored under it. Point reads: a range scan would
/// clone a whole tree node for every content.
///
/// The first chunk is read first. Every chunk but the last is whole, so a
/// shorter first chunk is all of the content: most contents are that small,
/// and take one read instead of two. Otherwise the metadata tells how many
/// chunks follow and how many bytes they must add up to.
pub fn read_chunks_if_stored(store: &Store, hash: Hash) -> Result<Option<Vec<Bytes>>> {
    let mut first = store.get(Table::Content, &keys::blob_chunk(&hash.0, 0))?;
    if let Some(chunk) = &first
        && chunk.len() < CHUNK_SIZE
    {
        return Ok(Some(vec![chunk.clone()]));
    }
    let Some(meta) = store.get_decoded::<BlobMeta>(Table::Content, &keys::blob_meta(&hash.0))? else {
        return Ok(None);
    };
    let upload = match first {
        Some(_) => None,
        None => uploaded_as(store.get(Table::Content, &keys::blob_upload(&hash.0))?)?,
    };
    let mut chunks = Vec::new();
    let mut size = 0u64;
    for index in 0..meta.chunks {
        let chunk = match first.take() {
            Some(chunk) if index == 0 => chunk,
            _ => store.get(Table::Content, &chunk_key(hash, upload.as_ref(), index))?.ok_or_else(|| missing(hash))?,
        };
        size += chunk.len() as u64;
        chunks.push(chunk);
    }
    if size != meta.size {
        return Err(damaged(hash));
    }
    Ok(Some(chunks))
}

/// Reads one content a run of chunks at a time, hashing as it goes, so that
/// content of any size can be streamed while only a run of it is held.
#[derive(Debug)]
pub struct ChunkReader {
    hash: Hash,
    /// The upload whose chunks the content's are (none: classic keys).
    upload: Option<UploadId>,
    size: u64,
    chunks: u32,
    next: u32,
    read: u64,
    hasher: blake3::Hasher,
    verified: bool,
}

impl ChunkReader {
    /// Opens the content of `hash`; DATA_LOSS when nothing is stored under it.
    pub fn open(store: &Store, hash: Hash) -> Result<Self> {
        let meta: BlobMeta =
            store.get_decoded(Table::Content, &keys::blob_meta(&hash.0))?.ok_or_else(|| missing(hash))?;
        let upload = uploaded_as(store.get(Table::Content, &keys::blob_upload(&hash.0))?)?;
        Ok(Self {
            hash,
            upload,
            size: meta.size,
            chunks: meta.chunks,
            next: 0,
            read: 0,
            hasher: blake3::Hasher::new(),
            verified: false,
        })
    }

    /// The next run of at most `max` chunks, in order, copied out of the
    /// store. The run that completes the content comes only once the whole
    /// content has been found to have its size and hash (DATA_LOSS
    /// otherwise); after it, runs are empty.
    pub fn next_run(&mut self, store: &Store, max: u32) -> Result<Vec<Vec<u8>>> {
        let end = self.next.saturating_add(max.max(1)).min(self.chunks);
        let mut run = Vec::with_capacity((end - self.next) as usize);
        for index in self.next..end {
            let key = chunk_key(self.hash, self.upload.as_ref(), index);
            let chunk = store.get(Table::Content, &key)?.ok_or_else(|| missing(self.hash))?;
            self.read += chunk.len() as u64;
            self.hasher.update(&chunk);
            run.push(chunk.to_vec());
        }
        self.next = end;
        if self.next == self.chunks && !self.verified {
            if self.read != self.size || *self.hasher.finalize().as_bytes() != self.hash.0 {
                return Err(damaged(self.hash));
            }
            self.verified = true;
        }
        Ok(run)
    }

    /// True once every chunk was read and the content verified.
    pub fn finished(&self) -> bool {
        self.verified
    }

    /// The content's size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }
}

fn damaged(hash: Hash) -> Error {
    Error::new(Reason::DataLoss, "Stored content failed its integrity check.").with("hash", hash.to_hex())
}

fn missing(hash: Hash) -> Error {
    Error::new(Reason::DataLoss, "Content referenced by a version is missing from the store.")
        .with("hash", hash.to_hex())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::store::{Durability, StoreLimits};

    fn stored(bytes: &[u8]) -> (tempfile::TempDir, Store, Hash) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), Durability::Off, StoreLimits::default()).unwrap();
        let hash = Hash::of(bytes);
        store.transact(|tx| add_ref(tx, hash, Source::Bytes(bytes))).unwrap();
        (dir, store, hash)
    }

    fn read_all(store: &Store, hash: Hash) -> Result<Vec<u8>> {
        let mut reader = ChunkReader::open(store, hash)?;
        let mut bytes = Vec::new();
        while !reader.finished() {
            let run = reader.next_run(store, 3)?;
            assert!(run.len() <= 3);
            bytes.extend(run.concat());
        }
        assert!(reader.next_run(store, 3)?.is_empty());
        Ok(bytes)
    }

    #[test]
    fn the_chunk_reader_reads_content_of_any_size_in_runs() {
        for size in [0, 1, CHUNK_SIZE - 1, CHUNK_SIZE, 7 * CHUNK_SIZE + 5] {
            let bytes: Vec<u8> = (0..size).map(|i| (i % 251) as u8).collect();
            let (_dir, store, hash) = stored(&bytes);
            assert_eq!(read_all(&store, hash).unwrap(), bytes, "{size} bytes");
        }
    }

    #[test]
    fn the_chunk_reader_refuses_content_that_does_not_match_its_hash() {
        let bytes = vec![7; 5 * CHUNK_SIZE];
        let (_dir, store, hash) = stored(&bytes);
        let mut damaged_chunk = vec![7; CHUNK_SIZE];
        damaged_chunk[10] = 8;
        store.transact(|tx| tx.put(Table::Content, &keys::blob_chunk(&hash.0, 4), &damaged_chunk)).unwrap();
        assert_eq!(read_all(&store, hash).unwrap_err().reason, Reason::DataLoss);
        // A missing chunk, or no content at all, is DATA_LOSS too.
        store.transact(|tx| tx.delete(Table::Content, &keys::blob_chunk(&hash.0, 2))).unwrap();
        assert_eq!(read_all(&store, hash).unwrap_err().reason, Reason::DataLoss);
        assert_eq!(ChunkReader::open(&store, Hash::of(b"nothing")).unwrap_err().reason, Reason::DataLoss);
    }
}
