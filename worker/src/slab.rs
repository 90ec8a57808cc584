//! Memory for cached content: contents fetched together are copied side by
//! side into one piece of memory, a slab, and each is kept as a slice of it.
//!
//! A worker filling its cache spends more CPU time in page faults than on
//! anything else when every content has an allocation of its own, faulted in
//! 4 KiB at a time. A slab of 2 MiB or more is an anonymous mapping advised
//! `MADV_HUGEPAGE`, so where transparent huge pages are enabled (`always` or
//! `madvise`) the kernel fills it 2 MiB at a time.
//!
//! Slabs of up to [`BLOCK`] bytes come from a [`SlabPool`] of blocks as
//! large as the cache: once the last slice of such a slab is dropped its
//! block goes back to the pool, not to the kernel, so a cache that is full
//! and turning over fills again without a page fault. The pool can be filled
//! when the worker starts ([`SlabPool::reserve`]), so that even the first
//! scans take no fault and the worker holds all of its cache memory from the
//! start. Other slabs (smaller than a huge page, or a single content larger
//! than a block) are freed when their last slice is dropped.

use std::sync::{Arc, Mutex, PoisonError};

use prost::bytes::Bytes;
use rayon::prelude::*;

/// Below this a slab cannot hold a huge page, and is ordinary heap memory.
const HUGE_PAGE: usize = 2 << 20;
/// Bytes per pooled block: two huge pages.
pub const BLOCK: usize = 2 * HUGE_PAGE;
/// Granule of the kernel's page faults without huge pages.
const PAGE: usize = 4 << 10;

/// Contents packed into one slab, and the memory the slab takes.
#[derive(Debug)]
pub struct Packed {
    /// Each content as a slice of the slab, or `None` where it failed its check.
    pub contents: Vec<Option<Bytes>>,
    /// Bytes of memory the slab holds: a whole block for a pooled slab.
    pub footprint: usize,
}

/// Blocks of [`BLOCK`] bytes for slabs, made as needed up to a limit and
/// reused once let go.
#[derive(Debug, Clone)]
pub struct SlabPool {
    inner: Arc<Pool>,
}

#[derive(Debug)]
struct Pool {
    /// Blocks that exist: at most `limit`.
    made: Mutex<Blocks>,
    limit: usize,
}

#[derive(Debug, Default)]
struct Blocks {
    free: Vec<Block>,
    count: usize,
}

/// An anonymous mapping with [`BLOCK`] bytes at `start` on a huge page
/// boundary, those advised `MADV_HUGEPAGE`.
#[derive(Debug)]
struct Block {
    map: memmap2::MmapMut,
    start: usize,
}

impl Block {
    fn new() -> Option<Block> {
        let (map, start) = aligned_map(BLOCK)?;
        Some(Block { map, start })
    }

    fn bytes(&self) -> &[u8] {
        &self.map[self.start..self.start + BLOCK]
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.map[self.start..self.start + BLOCK]
    }
}

/// A block lent to a slab: back to its pool when the slab's last slice is dropped.
struct Lease {
    block: Option<Block>,
    pool: Arc<Pool>,
}

impl AsRef<[u8]> for Lease {
    fn as_ref(&self) -> &[u8] {
        self.block.as_ref().map_or(&[], Block::bytes)
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(block) = self.block.take() {
            self.pool.lock().free.push(block);
        }
    }
}

impl Pool {
    fn lock(&self) -> std::sync::MutexGuard<'_, Blocks> {
        self.made.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl SlabPool {
    /// A pool of at most `capacity_bytes` in blocks (rounded down).
    pub fn new(capacity_bytes: usize) -> Self {
        Self { inner: Arc::new(Pool { made: Mutex::default(), limit: capacity_bytes / BLOCK }) }
    }

    /// Makes every block the pool may hold now and touches each of its
    /// pages, so the kernel backs them (with huge pages where it can) before
    /// any scan needs them. Returns the bytes reserved.
    pub fn reserve(&self) -> usize {
        let mut made = self.inner.lock();
        let wanted = self.inner.limit - made.count;
        let mut blocks: Vec<Block> = (0..wanted).map_while(|_| Block::new()).collect();
        blocks.par_iter_mut().for_each(|block| block.bytes_mut().iter_mut().step_by(PAGE).for_each(|byte| *byte = 0));
        made.count += blocks.len();
        made.free.append(&mut blocks);
        made.count * BLOCK
    }

    /// Bytes of the blocks the pool may make.
    pub fn capacity(&self) -> usize {
        self.inner.limit * BLOCK
    }

    /// Blocks made so far, and how many of them are free.
    pub fn blocks(&self) -> (usize, usize) {
        let made = self.inner.lock();
        (made.count, made.free.len())
    }

    /// A free block, or a new one while the pool is below its limit.
    fn take(&self) -> Option<Block> {
        let mut made = self.inner.lock();
        if let Some(block) = made.free.pop() {
            return Some(block);
        }
        if made.count >= self.inner.limit {
            return None;
        }
        let block = Block::new()?;
        made.count += 1;
        Some(block)
    }

    /// Copies each content (given as its pieces, in order) into one new slab
    /// and returns the contents as slices of it, in the same order. Each
    /// content is passed to `check` (with its position) right after it is
    /// copied, while it is still in the CPU's cache; one that fails it comes
    /// back as `None` and its room in the slab goes unused (a check fails
    /// only on damaged content).
    pub fn pack(&self, contents: &[Vec<Bytes>], check: impl Fn(usize, &[u8]) -> bool + Sync) -> Packed {
        let sizes: Vec<usize> = contents.iter().map(|pieces| pieces.iter().map(Bytes::len).sum()).collect();
        let total = sizes.iter().sum();
        let pooled = if (HUGE_PAGE..=BLOCK).contains(&total) { self.take() } else { None };
        let (slab, passed, footprint) = match pooled {
            Some(mut block) => {
                let passed = copy_and_check(&mut block.bytes_mut()[..total], contents, &check);
                let lease = Lease { block: Some(block), pool: self.inner.clone() };
                (Bytes::from_owner(lease).slice(..total), passed, BLOCK)
            }
            None => {
                let mapped = if total >= HUGE_PAGE { mapped(total, contents, &check) } else { None };
                let (slab, passed) = mapped.unwrap_or_else(|| heap(total, contents, &check));
                (slab, passed, total)
            }
        };
        let mut start = 0;
        let contents = sizes
            .into_iter()
            .zip(passed)
            .map(|(len, passed)| {
                start += len;
                passed.then(|| slab.slice(start - len..start))
            })
            .collect();
        Packed { contents, footprint }
    }
}

/// An anonymous mapping with `len` bytes starting on a huge page boundary
/// (inside a mapping one huge page longer: the part before them is never
/// touched, so it takes no memory), and where those bytes start. Only their
/// whole huge pages are advised: a tail of less than 2 MiB is ordinary
/// pages, so no huge page is ever mostly empty.
fn aligned_map(len: usize) -> Option<(memmap2::MmapMut, usize)> {
    let map = memmap2::MmapMut::map_anon(len + HUGE_PAGE).ok()?;
    let start = (HUGE_PAGE - map.as_ptr() as usize % HUGE_PAGE) % HUGE_PAGE;
    // Advice only: without transparent huge pages this is ordinary memory.
    let _ = map.advise_range(memmap2::Advice::HugePage, start, len / HUGE_PAGE * HUGE_PAGE);
    Some((map, start))
}

/// A slab in an anonymous mapping of its own and which contents passed
/// their check, or `None` if the mapping fails (the caller falls back to
/// the heap).
fn mapped(
    total: usize,
    contents: &[Vec<Bytes>],
    check: &(impl Fn(usize, &[u8]) -> bool + Sync),
) -> Option<(Bytes, Vec<bool>)> {
    let (mut map, start) = aligned_map(total)?;
    let passed = copy_and_check(&mut map[start..start + total], contents, check);
    Some((Bytes::from_owner(map.make_read_only().ok()?).slice(start..start + total), passed))
}

fn heap(total: usize, contents: &[Vec<Bytes>], check: &(impl Fn(usize, &[u8]) -> bool + Sync)) -> (Bytes, Vec<bool>) {
    let mut slab = vec![0; total];
    let passed = copy_and_check(&mut slab, contents, check);
    (Bytes::from(slab), passed)
}

/// Copies the contents side by side into `slab`, checking each as it lands;
/// on every core, since a fresh slab's first touch of each page is a cost.
fn copy_and_check(
    slab: &mut [u8],
    contents: &[Vec<Bytes>],
    check: &(impl Fn(usize, &[u8]) -> bool + Sync),
) -> Vec<bool> {
    let mut places = Vec::with_capacity(contents.len());
    let mut rest = slab;
    for (i, pieces) in contents.iter().enumerate() {
        let (place, tail) = rest.split_at_mut(pieces.iter().map(Bytes::len).sum());
        places.push((i, place, pieces));
        rest = tail;
    }
    places
        .into_par_iter()
        .map(|(i, place, pieces)| {
            let mut at = 0;
            for piece in pieces {
                place[at..at + piece.len()].copy_from_slice(piece);
                at += piece.len();
            }
            check(i, place)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn contents(sizes: &[usize]) -> Vec<Vec<Bytes>> {
        // Each content in pieces of up to 1,000 bytes, every byte telling its content and position.
        sizes
            .iter()
            .enumerate()
            .map(|(i, &size)| {
                let bytes: Vec<u8> = (0..size).map(|at| (i * 31 + at % 251) as u8).collect();
                bytes.chunks(1_000).map(Bytes::copy_from_slice).collect()
            })
            .collect()
    }

    fn joined(pieces: &[Bytes]) -> Vec<u8> {
        pieces.concat()
    }

    /// Packs with a pool of two blocks.
    fn pack(contents: &[Vec<Bytes>], check: impl Fn(usize, &[u8]) -> bool + Sync) -> Packed {
        SlabPool::new(2 * BLOCK).pack(contents, check)
    }

    fn pack_all(pool: &SlabPool, sizes: &[usize]) -> Packed {
        let contents = contents(sizes);
        let packed = pool.pack(&contents, |_, _| true);
        for (packed, pieces) in packed.contents.iter().zip(&contents) {
            assert_eq!(packed.as_deref(), Some(&joined(pieces)[..]));
        }
        packed
    }

    #[test]
    fn every_content_comes_back_whole_and_in_order() {
        for sizes in [
            &[][..],
            &[0, 5, 0],
            &[1_500, 3, 999, 1_000, 1_001],
            &[HUGE_PAGE / 2, HUGE_PAGE / 2 + 7, 0, 12_345],
            &[BLOCK - 3, 3],
            &[BLOCK, 1],
        ] {
            let contents = contents(sizes);
            let packed: Vec<Bytes> = pack(&contents, |_, _| true).contents.into_iter().flatten().collect();
            assert_eq!(packed.len(), contents.len());
            for (packed, pieces) in packed.iter().zip(&contents) {
                assert_eq!(packed[..], joined(pieces)[..]);
                // A copy: the slab never keeps what it was given alive.
                assert!(pieces.iter().all(|p| p.is_empty() || p.as_ptr() != packed.as_ptr()));
            }
        }
    }

    #[test]
    fn contents_share_one_slab() {
        let packed: Vec<Bytes> =
            pack(&contents(&[HUGE_PAGE, 10, 20]), |_, _| true).contents.into_iter().flatten().collect();
        // Side by side, in one block: each starts where the one before ends.
        for pair in packed.windows(2) {
            assert_eq!(pair[0].as_ptr().wrapping_add(pair[0].len()), pair[1].as_ptr());
        }
        let small: Vec<Bytes> = pack(&contents(&[10, 20]), |_, _| true).contents.into_iter().flatten().collect();
        assert_eq!(small[0].as_ptr().wrapping_add(10), small[1].as_ptr());
    }

    #[test]
    fn a_content_that_fails_its_check_is_left_out() {
        for sizes in [&[10, 20, 30][..], &[HUGE_PAGE, 20, 30]] {
            let contents = contents(sizes);
            let packed = pack(&contents, |i, bytes| i != 1 && bytes == joined(&contents[i])).contents;
            assert_eq!(packed[0].as_deref(), Some(&joined(&contents[0])[..]));
            assert_eq!(packed[1], None);
            assert_eq!(packed[2].as_deref(), Some(&joined(&contents[2])[..]));
        }
    }

    #[test]
    fn a_slab_of_huge_pages_takes_a_block_and_gives_it_back() {
        let pool = SlabPool::new(2 * BLOCK);
        let first = pack_all(&pool, &[HUGE_PAGE, 100]);
        assert_eq!(first.footprint, BLOCK);
        assert_eq!(pool.blocks(), (1, 0));
        let at = first.contents[0].as_ref().map(|c| c.as_ptr());
        // The block stays lent while any slice of its slab is alive.
        let kept = first.contents[1].clone();
        drop(first);
        assert_eq!(pool.blocks(), (1, 0));
        drop(kept);
        assert_eq!(pool.blocks(), (1, 1), "back in the pool, not unmapped");
        let second = pack_all(&pool, &[HUGE_PAGE + 5]);
        assert_eq!(second.contents[0].as_ref().map(|c| c.as_ptr()), at, "the same memory, reused");
        assert_eq!(pool.blocks(), (1, 0));
    }

    #[test]
    fn slabs_outside_the_pool_take_only_what_they_hold() {
        let pool = SlabPool::new(BLOCK);
        // Small: heap memory; larger than a block: a mapping of its own.
        assert_eq!(pack_all(&pool, &[10, 20]).footprint, 30);
        assert_eq!(pack_all(&pool, &[BLOCK, 1]).footprint, BLOCK + 1);
        assert_eq!(pool.blocks(), (0, 0));
        // The one block is lent: the next slab is a mapping of its own.
        let lent = pack_all(&pool, &[HUGE_PAGE]);
        assert_eq!(lent.footprint, BLOCK);
        assert_eq!(pack_all(&pool, &[HUGE_PAGE]).footprint, HUGE_PAGE);
        assert_eq!(pool.blocks(), (1, 0), "never more blocks than the pool's bound");
    }

    #[test]
    fn a_reserved_pool_makes_all_its_blocks_at_once() {
        let pool = SlabPool::new(3 * BLOCK + 5);
        assert_eq!(pool.capacity(), 3 * BLOCK);
        assert_eq!(pool.reserve(), 3 * BLOCK);
        assert_eq!(pool.blocks(), (3, 3));
        let packed = pack_all(&pool, &[BLOCK]);
        assert_eq!(pool.blocks(), (3, 2), "taken from the reserve, none made");
        drop(packed);
        assert_eq!(pool.reserve(), 3 * BLOCK, "reserving again makes nothing more");
        assert_eq!(pool.blocks(), (3, 3));
    }
}
