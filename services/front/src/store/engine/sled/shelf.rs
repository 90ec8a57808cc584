//! A shelf: an immutable file of idempotency receipts sorted by key, where
//! the embedded engine keeps them once they leave the journal (see
//! [`super::receipts`]).
//!
//! The file is a run of blocks of about [`BLOCK_BYTES`] each, then its
//! *meta* (postcard): every block's first key, place and BLAKE3 hash, a
//! Bloom filter of the keys, and when the shelf was filled; then a trailer
//! of the meta's length and hash and [`MAGIC`]. A block is a list of
//! entries, each a key's length (two bytes, big-endian) and the key, then
//! the value's length (four bytes) and the value.
//!
//! The meta is read and checked when the shelf is opened and kept in
//! memory (a few bytes per receipt); a lookup that the filter lets through
//! reads one block and checks its hash. A shelf is written to a temporary
//! file, synced, renamed into place and its directory synced: a shelf that
//! has its name is whole.

use std::fs::File;
use std::io::{BufWriter, Write as _};
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use prost::bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Reason, Result};

/// The last bytes of every shelf.
const MAGIC: &[u8; 8] = b"avshelf1";
/// The trailer: the meta's length, its hash, the magic.
const TRAILER: usize = 4 + 16 + MAGIC.len();
/// A block is closed once it holds this many bytes.
const BLOCK_BYTES: usize = 4096;
/// Bloom filter bits per key: about 1 % false positives.
const BITS_PER_KEY: usize = 10;
const HASHES: u64 = 7;
/// The file name's ending.
pub const EXTENSION: &str = "shelf";

#[derive(Debug, Serialize, Deserialize)]
struct Meta {
    blocks: Vec<BlockRef>,
    bloom: Vec<u64>,
    entries: u64,
    /// The newest time (ms since the epoch) an entry was taken from the
    /// journal: no receipt in the shelf was created after it.
    filled_ms: i64,
    /// How many merges made it (0: taken from the journal).
    level: u32,
}

#[derive(Debug, Serialize, Deserialize)]
struct BlockRef {
    first: Vec<u8>,
    offset: u64,
    len: u32,
    hash: [u8; 16],
}

/// An open shelf; see the module docs.
#[derive(Debug)]
pub struct Shelf {
    path: PathBuf,
    file: File,
    /// Its place in the order shelves were made (its file name).
    pub seq: u64,
    meta: Meta,
}

impl Shelf {
    pub fn path(dir: &Path, seq: u64) -> PathBuf {
        dir.join(format!("{seq:016x}.{EXTENSION}"))
    }

    /// The sequence number a shelf's file name holds.
    pub fn seq_of(name: &str) -> Option<u64> {
        let hex = name.strip_suffix(EXTENSION)?.strip_suffix('.')?;
        if hex.len() != 16 {
            return None;
        }
        u64::from_str_radix(hex, 16).ok()
    }

    /// Writes `entries` (in key order, each key once; at most `capacity`)
    /// as shelf `seq` of `dir`, durably.
    pub fn write(
        dir: &Path,
        seq: u64,
        level: u32,
        filled_ms: i64,
        capacity: usize,
        entries: impl IntoIterator<Item = Result<(Bytes, Bytes)>>,
    ) -> Result<Shelf> {
        let path = Self::path(dir, seq);
        let temporary = path.with_extension("tmp");
        let failed = |error: std::io::Error| Error::internal(format!("cannot write {}: {error}", temporary.display()));
        let mut out = BufWriter::new(File::create(&temporary).map_err(failed)?);
        let mut meta = Meta { blocks: Vec::new(), bloom: bloom_of(capacity), entries: 0, filled_ms, level };
        let mut block: Vec<u8> = Vec::with_capacity(BLOCK_BYTES * 2);
        let mut first = Vec::new();
        let mut offset = 0u64;
        let mut close = |block: &mut Vec<u8>, first: &[u8], meta: &mut Meta, out: &mut BufWriter<File>| {
            if block.is_empty() {
                return Ok(());
            }
            out.write_all(block)?;
            let len = block.len() as u32;
            meta.blocks.push(BlockRef { first: first.to_vec(), offset, len, hash: hash16(block) });
            offset += u64::from(len);
            block.clear();
            Ok::<_, std::io::Error>(())
        };
        for entry in entries {
            let (key, value) = entry?;
            if block.is_empty() {
                first = key.to_vec();
            }
            let key_len = u16::try_from(key.len()).map_err(|_| Error::internal("a receipt key is too long"))?;
            let value_len = u32::try_from(value.len()).map_err(|_| Error::internal("a receipt is too long"))?;
            block.extend_from_slice(&key_len.to_be_bytes());
            block.extend_from_slice(&key);
            block.extend_from_slice(&value_len.to_be_bytes());
            block.extend_from_slice(&value);
            insert(&mut meta.bloom, &key);
            meta.entries += 1;
            if block.len() >= BLOCK_BYTES {
                close(&mut block, &first, &mut meta, &mut out).map_err(failed)?;
            }
        }
        close(&mut block, &first, &mut meta, &mut out).map_err(failed)?;
        let encoded = postcard::to_stdvec(&meta).map_err(|e| Error::internal(format!("cannot encode a shelf: {e}")))?;
        let meta_len = u32::try_from(encoded.len()).map_err(|_| Error::internal("a shelf's index is too long"))?;
        (|| {
            out.write_all(&encoded)?;
            out.write_all(&meta_len.to_be_bytes())?;
            out.write_all(&hash16(&encoded))?;
            out.write_all(MAGIC)?;
            out.into_inner().map_err(|e| e.into_error())?.sync_all()
        })()
        .map_err(failed)?;
        std::fs::rename(&temporary, &path).map_err(failed)?;
        File::open(dir).and_then(|d| d.sync_all()).map_err(failed)?;
        let file = File::open(&path).map_err(failed)?;
        Ok(Shelf { path, file, seq, meta })
    }

    /// Opens shelf `seq` of `dir` and checks its meta.
    pub fn open(dir: &Path, seq: u64) -> std::result::Result<Shelf, String> {
        let path = Self::path(dir, seq);
        let file = File::open(&path).map_err(|e| format!("cannot open it: {e}"))?;
        let size = file.metadata().map_err(|e| format!("cannot read its size: {e}"))?.len();
        if size < TRAILER as u64 {
            return Err(format!("it is {size} bytes long, shorter than its trailer"));
        }
        let mut trailer = [0u8; TRAILER];
        file.read_exact_at(&mut trailer, size - TRAILER as u64).map_err(|e| format!("cannot read it: {e}"))?;
        if &trailer[20..] != MAGIC {
            return Err("its trailer is not a shelf's".into());
        }
        let meta_len = u64::from(u32::from_be_bytes([trailer[0], trailer[1], trailer[2], trailer[3]]));
        let Some(meta_at) = (size - TRAILER as u64).checked_sub(meta_len) else {
            return Err(format!("its index ({meta_len} bytes) is longer than the file"));
        };
        let mut encoded = vec![0u8; meta_len as usize];
        file.read_exact_at(&mut encoded, meta_at).map_err(|e| format!("cannot read its index: {e}"))?;
        if hash16(&encoded) != trailer[4..20] {
            return Err("its index does not match its hash".into());
        }
        let meta: Meta = postcard::from_bytes(&encoded).map_err(|e| format!("cannot decode its index: {e}"))?;
        if meta.bloom.is_empty() || meta.blocks.iter().any(|b| b.offset + u64::from(b.len) > meta_at) {
            return Err("its index points outside its blocks".into());
        }
        Ok(Shelf { path, file, seq, meta })
    }

    pub fn entries(&self) -> u64 {
        self.meta.entries
    }

    pub fn filled_ms(&self) -> i64 {
        self.meta.filled_ms
    }

    pub fn level(&self) -> u32 {
        self.meta.level
    }

    /// Bytes the shelf takes on disk.
    pub fn size(&self) -> u64 {
        self.file.metadata().map(|m| m.len()).unwrap_or(0)
    }

    /// The value kept under `key`, if the shelf holds it (`probe` is the
    /// key's, made once for every shelf asked).
    pub fn get(&self, key: &[u8], probe: Probe) -> Result<Option<Bytes>> {
        if !probe.bits(&self.meta.bloom).all(|(word, mask)| self.meta.bloom[word] & mask != 0) {
            return Ok(None);
        }
        let i = self.meta.blocks.partition_point(|b| b.first.as_slice() <= key);
        let Some(i) = i.checked_sub(1) else { return Ok(None) };
        let block = self.block(i)?;
        Ok(block.binary_search_by(|(k, _)| k.as_ref().cmp(key)).ok().map(|at| block[at].1.clone()))
    }

    /// The entries whose keys are in `[start, end)` (`end`: `None` for no
    /// end), in key order, a block at a time, read as they are consumed.
    pub fn blocks_in(
        self: &Arc<Self>,
        start: &[u8],
        end: Option<&[u8]>,
    ) -> impl Iterator<Item = Result<Vec<(Bytes, Bytes)>>> + Send + use<> {
        let shelf = self.clone();
        let (start, end) = (start.to_vec(), end.map(<[u8]>::to_vec));
        let first = shelf.meta.blocks.partition_point(|b| b.first.as_slice() <= start.as_slice()).saturating_sub(1);
        let last = match &end {
            Some(end) => shelf.meta.blocks.partition_point(|b| b.first.as_slice() < end.as_slice()),
            None => shelf.meta.blocks.len(),
        };
        (first..last.max(first)).map(move |i| {
            let mut block = shelf.block(i)?;
            let within = |key: &[u8]| key >= start.as_slice() && end.as_deref().is_none_or(|end| key < end);
            block.retain(|(key, _)| within(key));
            Ok(block)
        })
    }

    /// Removes the shelf's file.
    pub fn remove(&self, dir: &Path) -> std::io::Result<()> {
        std::fs::remove_file(&self.path)?;
        File::open(dir)?.sync_all()
    }

    fn block(&self, i: usize) -> Result<Vec<(Bytes, Bytes)>> {
        let at = &self.meta.blocks[i];
        let mut raw = vec![0u8; at.len as usize];
        self.file.read_exact_at(&mut raw, at.offset).map_err(|e| self.damaged(format!("cannot read it: {e}")))?;
        if hash16(&raw) != at.hash {
            return Err(self.damaged(format!("block {i} does not match its hash")));
        }
        parse_block(Bytes::from(raw)).map_err(|detail| self.damaged(format!("block {i}: {detail}")))
    }

    fn damaged(&self, detail: String) -> Error {
        Error::new(
            Reason::DataLoss,
            format!("A file of idempotency receipts is damaged ({}): {detail}.", self.path.display()),
        )
    }
}

fn parse_block(mut rest: Bytes) -> std::result::Result<Vec<(Bytes, Bytes)>, String> {
    let mut entries = Vec::new();
    while !rest.is_empty() {
        let key_len = take(&mut rest, 2)?;
        let key = take(&mut rest, usize::from(u16::from_be_bytes([key_len[0], key_len[1]])))?;
        let value_len = take(&mut rest, 4)?;
        let value_len = u32::from_be_bytes([value_len[0], value_len[1], value_len[2], value_len[3]]);
        let value = take(&mut rest, value_len as usize)?;
        entries.push((key, value));
    }
    Ok(entries)
}

fn take(rest: &mut Bytes, len: usize) -> std::result::Result<Bytes, String> {
    if rest.len() < len {
        return Err(format!("an entry ends {} bytes early", len - rest.len()));
    }
    Ok(rest.split_to(len))
}

fn hash16(bytes: &[u8]) -> [u8; 16] {
    let mut out = [0u8; 16];
    out.copy_from_slice(&blake3::hash(bytes).as_bytes()[..16]);
    out
}

/// An empty Bloom filter for `keys` keys.
fn bloom_of(keys: usize) -> Vec<u64> {
    vec![0; (keys.max(1) * BITS_PER_KEY).div_ceil(64)]
}

/// Where a key's bits are in any shelf's Bloom filter: double hashing over
/// one BLAKE3 hash of the key.
#[derive(Debug, Clone, Copy)]
pub struct Probe {
    h1: u64,
    h2: u64,
}

impl Probe {
    pub fn of(key: &[u8]) -> Probe {
        let hash = blake3::hash(key);
        let (h1, h2) = hash.as_bytes().split_at(8);
        let word = |bytes: &[u8]| u64::from_le_bytes(bytes[..8].try_into().unwrap_or_default());
        Probe { h1: word(h1), h2: word(h2) | 1 }
    }

    /// The filter's word and bit for each hash.
    fn bits(self, bloom: &[u64]) -> impl Iterator<Item = (usize, u64)> + use<> {
        let m = bloom.len() as u64 * 64;
        (0..HASHES).map(move |i| {
            let bit = self.h1.wrapping_add(i.wrapping_mul(self.h2)) % m;
            ((bit / 64) as usize, 1u64 << (bit % 64))
        })
    }
}

fn insert(bloom: &mut [u64], key: &[u8]) {
    for (word, mask) in Probe::of(key).bits(bloom) {
        bloom[word] |= mask;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn key(n: u32) -> Bytes {
        Bytes::copy_from_slice(blake3::hash(&n.to_be_bytes()).as_bytes())
    }

    fn written(dir: &Path, n: u32) -> (Shelf, Vec<(Bytes, Bytes)>) {
        let mut entries: Vec<(Bytes, Bytes)> =
            (0..n).map(|i| (key(i), Bytes::from(format!("receipt {i} {}", "x".repeat(i as usize % 300))))).collect();
        entries.sort();
        let shelf = Shelf::write(dir, 7, 0, 1_000, entries.len(), entries.clone().into_iter().map(Ok)).unwrap();
        (shelf, entries)
    }

    #[test]
    fn a_shelf_finds_every_key_it_holds_and_no_other() {
        let dir = tempfile::tempdir().unwrap();
        let (shelf, entries) = written(dir.path(), 5_000);
        assert!(shelf.meta.blocks.len() > 100, "{} blocks", shelf.meta.blocks.len());
        for (key, value) in &entries {
            assert_eq!(shelf.get(key, Probe::of(key)).unwrap().as_ref(), Some(value));
        }
        let bloom = &shelf.meta.bloom;
        let strangers =
            (5_000..25_000).filter(|&i| Probe::of(&key(i)).bits(bloom).all(|(w, m)| bloom[w] & m != 0)).count();
        assert!(strangers < 20_000 / 50, "{strangers} of 20000 keys not held passed the filter");
        for i in 5_000..6_000 {
            assert_eq!(shelf.get(&key(i), Probe::of(&key(i))).unwrap(), None);
        }

        // Reopened, it reads the same; a range is the sorted slice.
        let shelf = Arc::new(Shelf::open(dir.path(), 7).unwrap());
        assert_eq!((shelf.entries(), shelf.filled_ms(), shelf.level()), (5_000, 1_000, 0));
        let range = |start: &[u8], end: Option<&[u8]>| -> Vec<_> {
            shelf.blocks_in(start, end).flat_map(Result::unwrap).collect()
        };
        let (start, end) = (&entries[1_000].0, &entries[3_000].0);
        assert_eq!(range(start, Some(end)), entries[1_000..3_000]);
        assert_eq!(range(start, None), entries[1_000..]);
        assert_eq!(range(&[], None), entries);
        assert_eq!(range(end, Some(start)), []);
    }

    #[test]
    fn a_damaged_shelf_is_refused_and_never_read_as_missing_entries() {
        let dir = tempfile::tempdir().unwrap();
        let (_, entries) = written(dir.path(), 2_000);
        let path = Shelf::path(dir.path(), 7);
        let whole = std::fs::read(&path).unwrap();

        // A flipped byte in a block: the lookup that reads it fails.
        let mut bytes = whole.clone();
        bytes[10] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        let shelf = Shelf::open(dir.path(), 7).unwrap();
        let error = shelf.get(&entries[0].0, Probe::of(&entries[0].0)).unwrap_err();
        assert_eq!(error.reason, Reason::DataLoss, "{error}");

        // A cut file, or a flipped byte in the index: refused at open.
        for damaged in [whole[..whole.len() - 1].to_vec(), whole[..100].to_vec(), {
            let mut b = whole.clone();
            let at = b.len() - TRAILER - 5;
            b[at] ^= 1;
            b
        }] {
            std::fs::write(&path, &damaged).unwrap();
            assert!(Shelf::open(dir.path(), 7).is_err());
        }
        assert_eq!(Shelf::seq_of("00000000000000ff.shelf"), Some(255));
        assert_eq!(Shelf::seq_of("00000000000000ff.tmp"), None);
    }
}
