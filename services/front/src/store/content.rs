//! Content blobs: stored once per BLAKE3 hash, reference-counted by the
//! versions that use them, and split into chunks (below sled's ~128 KiB
//! threshold, above which it writes blob files that it never fsyncs).
//!
//! Content of one chunk is written by the commit that brings it. Larger
//! content is *uploaded* first, outside the commit's transaction, a few
//! chunks per transaction, under keys of its own upload that nothing else
//! touches ([`stage`], [`put_staged`]); the commit then only claims the
//! upload, and whoever staged it releases it after the commit, which drops
//! it unless it was claimed (the content was stored already, or the commit
//! failed). Chunks are keyed by the upload alone, so they can be stored as
//! they arrive, before the content's hash is known: memory per upload does
//! not grow with the content. A marker in `meta` records an upload until its
//! commit claims it, so that what a crash leaves behind is collected
//! ([`Store::collect_uploads`]).
//!
//! Stores written before uploads were streamed keep chunks under keys of the
//! content's hash and the upload; they read as before.

use prost::bytes::Bytes;

use super::engine::{Table, Tx};
use super::records::{BlobMeta, Hash, UploadMarker, decode, encode, now_ms};
use super::{Store, keys};
use crate::error::{Error, Reason, Result};

/// Bytes per stored chunk.
pub const CHUNK_SIZE: usize = 64 * 1024;
/// Bytes an upload stores per transaction: sixteen chunks.
pub const UPLOAD_BATCH: usize = 16 * CHUNK_SIZE;

/// How old an upload no commit claimed must be before it is collected:
/// far longer than any commit takes.
pub const UPLOAD_GRACE: std::time::Duration = std::time::Duration::from_secs(3600);

/// An upload's ID.
pub type UploadId = [u8; 16];

/// Content staged as an upload, ready for a commit to claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Uploaded {
    pub id: UploadId,
    pub size: u64,
}

/// How many chunks content of `size` bytes takes.
fn chunk_count(size: u64) -> Result<u32> {
    u32::try_from(size.div_ceil(CHUNK_SIZE as u64)).map_err(|_| Error::internal("content has too many chunks"))
}

/// Where the chunks of uploaded content are, as its `x` record says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum UploadKeys {
    /// Under the upload alone.
    Upload(UploadId),
    /// Under the content's hash and the upload (stores written before
    /// uploads were streamed).
    Hashed(UploadId),
}

/// Follows the upload ID in an `x` record of [`UploadKeys::Upload`]; a
/// record of the upload ID alone is [`UploadKeys::Hashed`].
const UPLOAD_KEYS_TAG: u8 = b'u';

/// What a new version's content is, for [`add_ref`].
#[derive(Debug, Clone, Copy)]
pub enum Source<'a> {
    /// Stored already (a copy): only referenced.
    Stored,
    /// Bytes the transaction writes if they are not stored yet.
    Bytes(&'a [u8]),
    /// Bytes staged before the transaction (see [`stage`]), claimed if
    /// they are not stored yet.
    Uploaded(Uploaded),
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
            let size = match source {
                Source::Stored => return Err(Error::internal("a copy references content that is not stored")),
                Source::Bytes(bytes) => {
                    for (index, chunk) in (0..).zip(bytes.chunks(CHUNK_SIZE)) {
                        tx.put(Table::Content, &keys::blob_chunk(&hash.0, index), chunk)?;
                    }
                    bytes.len() as u64
                }
                Source::Uploaded(upload) => {
                    // The upload's chunks become the content's, if they are
                    // all still there: a collected upload lost its marker first.
                    if tx.get(Table::Meta, &keys::staged_marker(&upload.id))?.is_none() {
                        return Err(collected());
                    }
                    let mut record = upload.id.to_vec();
                    record.push(UPLOAD_KEYS_TAG);
                    tx.put(Table::Content, &keys::blob_upload(&hash.0), &record)?;
                    tx.delete(Table::Meta, &keys::staged_marker(&upload.id))?;
                    upload.size
                }
            };
            BlobMeta { size, chunks: chunk_count(size)?, refs: 1 }
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
fn chunk_key(hash: Hash, upload: Option<&UploadKeys>, index: u32) -> Vec<u8> {
    match upload {
        Some(UploadKeys::Upload(upload)) => keys::upload_chunk(upload, index),
        Some(UploadKeys::Hashed(upload)) => keys::hashed_upload_chunk(&hash.0, upload, index),
        None => keys::blob_chunk(&hash.0, index),
    }
}

fn uploaded_as(raw: Option<Bytes>) -> Result<Option<UploadKeys>> {
    let Some(raw) = raw else { return Ok(None) };
    let malformed = || Error::internal("malformed upload record");
    Ok(Some(match raw.split_last() {
        Some((&UPLOAD_KEYS_TAG, id)) if id.len() == 16 => UploadKeys::Upload(id.try_into().map_err(|_| malformed())?),
        _ => UploadKeys::Hashed(raw.as_ref().try_into().map_err(|_| malformed())?),
    }))
}

/// Whether content with this hash is stored.
pub fn is_stored(store: &Store, hash: Hash) -> Result<bool> {
    Ok(store.get(Table::Content, &keys::blob_meta(&hash.0))?.is_some())
}

/// Starts an upload: its marker, so that a crash before its commit leaves
/// nothing that is never collected.
pub fn stage(store: &Store) -> Result<UploadId> {
    stage_with(store, &[])
}

/// Starts an upload with `bytes` as its first chunks, in the transaction
/// that writes its marker (see [`put_staged`] for what they may be).
fn stage_with(store: &Store, bytes: &[u8]) -> Result<UploadId> {
    store.check_room(bytes.len() as u64, 0)?;
    let upload = fastrand::u128(..).to_be_bytes();
    let marker = encode(&now_ms());
    store.transact(|tx| {
        tx.put(Table::Meta, &keys::staged_marker(&upload), &marker)?;
        for (index, chunk) in (0..).zip(bytes.chunks(CHUNK_SIZE)) {
            tx.put(Table::Content, &keys::upload_chunk(&upload, index), chunk)?;
        }
        Ok(())
    })?;
    Ok(upload)
}

/// Stores `bytes` as chunks of `upload` from chunk `first` on, in one
/// transaction that also moves the upload's marker to now: the collector
/// takes only uploads idle for [`UPLOAD_GRACE`], however long they take to
/// arrive. Every chunk but an upload's last must be whole.
pub fn put_staged(store: &Store, upload: UploadId, first: u32, bytes: &[u8]) -> Result<()> {
    store.check_room(bytes.len() as u64, 0)?;
    let marker = encode(&now_ms());
    store.transact(|tx| {
        if tx.get(Table::Meta, &keys::staged_marker(&upload))?.is_none() {
            return Err(collected());
        }
        tx.put(Table::Meta, &keys::staged_marker(&upload), &marker)?;
        for (index, chunk) in (first..).zip(bytes.chunks(CHUNK_SIZE)) {
            tx.put(Table::Content, &keys::upload_chunk(&upload, index), chunk)?;
        }
        Ok(())
    })
}

/// The first `chunks` chunks of `upload`, as staged so far.
pub fn read_staged(store: &Store, upload: UploadId, chunks: u32) -> Result<Vec<u8>> {
    let mut bytes = Vec::new();
    for index in 0..chunks {
        let chunk = store.get(Table::Content, &keys::upload_chunk(&upload, index))?.ok_or_else(collected)?;
        bytes.extend_from_slice(&chunk);
    }
    Ok(bytes)
}

/// Stages `bytes` (content of more than one chunk) as a new upload, a few
/// chunks per transaction.
pub fn upload(store: &Store, bytes: &[u8]) -> Result<Uploaded> {
    let per_batch = chunk_count(UPLOAD_BATCH as u64)?;
    let mut batches = (0..).step_by(per_batch as usize).zip(bytes.chunks(UPLOAD_BATCH));
    let first = batches.next().map_or(&[][..], |(_, batch)| batch);
    let id = stage_with(store, first)?;
    if let Err(error) = batches.try_for_each(|(first, batch)| put_staged(store, id, first, batch)) {
        release_quietly(store, id);
        return Err(error);
    }
    Ok(Uploaded { id, size: bytes.len() as u64 })
}

/// Deletes an upload's chunks and marker unless a commit claimed it (and
/// so removed its marker). Called by whoever staged it once its commit is
/// over, whatever the outcome, or by the collector when no commit can
/// claim it any more.
pub fn release_upload(store: &Store, upload: UploadId) -> Result<()> {
    // The marker first, in one transaction with the check: from then on no
    // commit can claim the upload and no batch can be added to it. A crash
    // before the chunks go leaves them unreachable, never a claim of
    // chunks that are gone.
    let mut released = false;
    store.transact(|tx| {
        released = tx.get(Table::Meta, &keys::staged_marker(&upload))?.is_some();
        if released {
            tx.delete(Table::Meta, &keys::staged_marker(&upload))?;
        }
        Ok(())
    })?;
    if !released {
        return Ok(());
    }
    let chunks = store.scan_prefix(Table::Content, &keys::upload_chunks(&upload)).map(|item| item.map(|(key, _)| key));
    let chunks: Vec<Bytes> = chunks.collect::<Result<_>>()?;
    store.remove_all(Table::Content, chunks).map(drop)
}

/// [`release_upload`], logging a failure: the collector gets it later.
pub fn release_quietly(store: &Store, upload: UploadId) {
    if let Err(error) = release_upload(store, upload) {
        tracing::warn!(%error, "could not release an upload no commit claimed; it is collected later");
    }
}

/// [`release_upload`] for an upload of a store written before uploads were
/// streamed, whose chunks are keyed by the content's hash too.
fn release_hashed_upload(store: &Store, upload: UploadId, hash: Hash, chunks: u32) -> Result<()> {
    if uploaded_as(store.get(Table::Content, &keys::blob_upload(&hash.0))?)? == Some(UploadKeys::Hashed(upload)) {
        // Claimed: its chunks are the content's now (and its marker gone).
        return Ok(());
    }
    let keys: Vec<Bytes> = (0..chunks).map(|index| keys::hashed_upload_chunk(&hash.0, &upload, index).into()).collect();
    store.remove_all(Table::Content, keys)?;
    store.transact(|tx| tx.delete(Table::Meta, &keys::upload_marker(&upload)))
}

impl Store {
    /// Deletes what uploads at least `grace` old left behind: uploads whose
    /// commit never claimed them (the front stopped in between). Returns
    /// how many.
    pub fn collect_uploads(&self, grace: std::time::Duration) -> Result<usize> {
        let cutoff = now_ms() - i64::try_from(grace.as_millis()).unwrap_or(i64::MAX);
        let mut stale = Vec::new();
        for item in self.scan_prefix(Table::Meta, keys::STAGED_MARKERS) {
            let (key, value) = item?;
            let started_ms: i64 = decode(&value)?;
            let Ok(upload) = UploadId::try_from(&key[keys::STAGED_MARKERS.len()..]) else { continue };
            if started_ms <= cutoff {
                stale.push(upload);
            }
        }
        let mut stale_hashed = Vec::new();
        for item in self.scan_prefix(Table::Meta, keys::UPLOAD_MARKERS) {
            let (key, value) = item?;
            let marker: UploadMarker = decode(&value)?;
            let Ok(upload) = UploadId::try_from(&key[keys::UPLOAD_MARKERS.len()..]) else { continue };
            if marker.started_ms <= cutoff {
                stale_hashed.push((upload, marker));
            }
        }
        for upload in &stale {
            tracing::info!("collecting an upload no commit claimed");
            release_upload(self, *upload)?;
        }
        for (upload, marker) in &stale_hashed {
            tracing::info!(hash = %marker.hash.to_hex(), "collecting an upload no commit claimed");
            release_hashed_upload(self, *upload, marker.hash, marker.chunks)?;
        }
        Ok(stale.len() + stale_hashed.len())
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
    upload: Option<UploadKeys>,
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

/// An upload the collector took before it was complete or claimed: it was
/// idle for [`UPLOAD_GRACE`], far longer than any call may take.
fn collected() -> Error {
    Error::internal("the upload was idle past its grace and collected; send it again")
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
