//! Memory for cached content: contents fetched together are copied side by
//! side into one block, a slab, and each is kept as a slice of it.
//!
//! A worker filling its cache spends more CPU time in page faults than on
//! anything else when every content has an allocation of its own, faulted in
//! 4 KiB at a time. A slab of 2 MiB or more is an anonymous mapping advised
//! `MADV_HUGEPAGE`, so where transparent huge pages are enabled (`always` or
//! `madvise`) the kernel fills it 2 MiB at a time. A slab's memory is freed
//! when the last slice of it is dropped.

use prost::bytes::Bytes;
use rayon::prelude::*;

/// Below this a slab cannot hold a huge page, and is ordinary heap memory.
const HUGE_PAGE: usize = 2 << 20;
/// Pieces each copying task takes at least: pieces are often a few hundred
/// bytes, too little for a task of their own.
const PIECES_PER_TASK: usize = 32;

/// Copies each content (given as its pieces, in order) into one new slab
/// and returns the contents as slices of it, in the same order.
pub fn pack(contents: &[Vec<Bytes>]) -> Vec<Bytes> {
    let sizes: Vec<usize> = contents.iter().map(|pieces| pieces.iter().map(Bytes::len).sum()).collect();
    let total = sizes.iter().sum();
    let slab = if total >= HUGE_PAGE { mapped(total, contents) } else { None };
    let slab = slab.unwrap_or_else(|| heap(total, contents));
    let mut start = 0;
    sizes
        .into_iter()
        .map(|len| {
            start += len;
            slab.slice(start - len..start)
        })
        .collect()
}

/// A slab in an anonymous mapping, or `None` if the mapping fails (the
/// caller falls back to the heap).
///
/// The slab starts on a huge page boundary inside a mapping one huge page
/// longer (the part before it is never touched, so it takes no memory), and
/// only its whole huge pages are advised: the tail of less than 2 MiB is
/// ordinary pages, so no huge page is ever mostly empty.
fn mapped(total: usize, contents: &[Vec<Bytes>]) -> Option<Bytes> {
    let mut map = memmap2::MmapMut::map_anon(total + HUGE_PAGE).ok()?;
    let start = (HUGE_PAGE - map.as_ptr() as usize % HUGE_PAGE) % HUGE_PAGE;
    // Advice only: without transparent huge pages this is ordinary memory.
    let _ = map.advise_range(memmap2::Advice::HugePage, start, total / HUGE_PAGE * HUGE_PAGE);
    let mut pieces = Vec::new();
    let mut rest: &mut [u8] = &mut map[start..start + total];
    for piece in contents.iter().flatten() {
        let (head, tail) = rest.split_at_mut(piece.len());
        pieces.push((head, piece));
        rest = tail;
    }
    // Both cores copy: a fresh slab's first touch of each page is the cost.
    pieces.into_par_iter().with_min_len(PIECES_PER_TASK).for_each(|(to, from)| to.copy_from_slice(from));
    Some(Bytes::from_owner(map.make_read_only().ok()?).slice(start..start + total))
}

fn heap(total: usize, contents: &[Vec<Bytes>]) -> Bytes {
    let mut slab = Vec::with_capacity(total);
    for piece in contents.iter().flatten() {
        slab.extend_from_slice(piece);
    }
    Bytes::from(slab)
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

    #[test]
    fn every_content_comes_back_whole_and_in_order() {
        for sizes in
            [&[][..], &[0, 5, 0], &[1_500, 3, 999, 1_000, 1_001], &[HUGE_PAGE / 2, HUGE_PAGE / 2 + 7, 0, 12_345]]
        {
            let contents = contents(sizes);
            let packed = pack(&contents);
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
        let packed = pack(&contents(&[HUGE_PAGE, 10, 20]));
        // Side by side, in one block: each starts where the one before ends.
        for pair in packed.windows(2) {
            assert_eq!(pair[0].as_ptr().wrapping_add(pair[0].len()), pair[1].as_ptr());
        }
        let small = pack(&contents(&[10, 20]));
        assert_eq!(small[0].as_ptr().wrapping_add(10), small[1].as_ptr());
    }
}
