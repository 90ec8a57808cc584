//! Content blobs: stored once per BLAKE3 hash, reference-counted by the
//! versions that use them, and split into chunks (below sled's ~128 KiB
//! threshold, above which it writes blob files that it never fsyncs).

use prost::bytes::Bytes;

use super::engine::{Table, Tx};
use super::records::{BlobMeta, Hash, decode, encode};
use super::{Store, keys};
use crate::error::{Error, Reason, Result};

/// Bytes per stored chunk.
pub const CHUNK_SIZE: usize = 64 * 1024;

/// Adds one reference to `hash`, storing `bytes` if they are new (`None`:
/// the content must already be stored).
pub fn add_ref(tx: &mut dyn Tx, hash: Hash, bytes: Option<&[u8]>) -> Result<()> {
    let meta_key = keys::blob_meta(&hash.0);
    let meta = match tx.get(Table::Content, &meta_key)? {
        Some(raw) => {
            let mut meta: BlobMeta = decode(&raw)?;
            meta.refs += 1;
            meta
        }
        None => {
            let bytes = bytes.ok_or_else(|| Error::internal("a copy references content that is not stored"))?;
            let chunks = bytes.chunks(CHUNK_SIZE);
            let count = u32::try_from(chunks.len()).map_err(|_| Error::internal("content has too many chunks"))?;
            for (index, chunk) in (0..).zip(chunks) {
                tx.put(Table::Content, &keys::blob_chunk(&hash.0, index), chunk)?;
            }
            BlobMeta { size: bytes.len() as u64, chunks: count, refs: 1 }
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
    for index in 0..meta.chunks {
        tx.delete(Table::Content, &keys::blob_chunk(&hash.0, index))?;
    }
    tx.delete(Table::Content, &meta_key)?;
    Ok(meta.size)
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
    let mut chunks = Vec::new();
    let mut size = 0u64;
    for index in 0..meta.chunks {
        let chunk = match first.take() {
            Some(chunk) if index == 0 => chunk,
            _ => store.get(Table::Content, &keys::blob_chunk(&hash.0, index))?.ok_or_else(|| missing(hash))?,
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
        Ok(Self {
            hash,
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
            let chunk =
                store.get(Table::Content, &keys::blob_chunk(&self.hash.0, index))?.ok_or_else(|| missing(self.hash))?;
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
        store.transact(|tx| add_ref(tx, hash, Some(bytes))).unwrap();
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
