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

/// Copies each content (given as its pieces, in order) into one new slab
/// and returns the contents as slices of it, in the same order. Each
/// content is passed to `check` (with its position) right after it is
/// copied, while it is still in the CPU's cache; one that fails it comes
/// back as `None` and its room in the slab goes unused (a check fails only
/// on damaged content).
pub fn pack(contents: &[Vec<Bytes>], check: impl Fn(usize, &[u8]) -> bool + Sync) -> Vec<Option<Bytes>> {
    let sizes: Vec<usize> = contents.iter().map(|pieces| pieces.iter().map(Bytes::len).sum()).collect();
    let total = sizes.iter().sum();
    let mapped = if total >= HUGE_PAGE { mapped(total, contents, &check) } else { None };
    let (slab, passed) = mapped.unwrap_or_else(|| heap(total, contents, &check));
    let mut start = 0;
    sizes
        .into_iter()
        .zip(passed)
        .map(|(len, passed)| {
            start += len;
            passed.then(|| slab.slice(start - len..start))
        })
        .collect()
}

/// A slab in an anonymous mapping and which contents passed their check,
/// or `None` if the mapping fails (the caller falls back to the heap).
///
/// The slab starts on a huge page boundary inside a mapping one huge page
/// longer (the part before it is never touched, so it takes no memory), and
/// only its whole huge pages are advised: the tail of less than 2 MiB is
/// ordinary pages, so no huge page is ever mostly empty.
fn mapped(
    total: usize,
    contents: &[Vec<Bytes>],
    check: &(impl Fn(usize, &[u8]) -> bool + Sync),
) -> Option<(Bytes, Vec<bool>)> {
    let mut map = memmap2::MmapMut::map_anon(total + HUGE_PAGE).ok()?;
    let start = (HUGE_PAGE - map.as_ptr() as usize % HUGE_PAGE) % HUGE_PAGE;
    // Advice only: without transparent huge pages this is ordinary memory.
    let _ = map.advise_range(memmap2::Advice::HugePage, start, total / HUGE_PAGE * HUGE_PAGE);
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

    #[test]
    fn every_content_comes_back_whole_and_in_order() {
        for sizes in
            [&[][..], &[0, 5, 0], &[1_500, 3, 999, 1_000, 1_001], &[HUGE_PAGE / 2, HUGE_PAGE / 2 + 7, 0, 12_345]]
        {
            let contents = contents(sizes);
            let packed: Vec<Bytes> = pack(&contents, |_, _| true).into_iter().flatten().collect();
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
        let packed: Vec<Bytes> = pack(&contents(&[HUGE_PAGE, 10, 20]), |_, _| true).into_iter().flatten().collect();
        // Side by side, in one block: each starts where the one before ends.
        for pair in packed.windows(2) {
            assert_eq!(pair[0].as_ptr().wrapping_add(pair[0].len()), pair[1].as_ptr());
        }
        let small: Vec<Bytes> = pack(&contents(&[10, 20]), |_, _| true).into_iter().flatten().collect();
        assert_eq!(small[0].as_ptr().wrapping_add(10), small[1].as_ptr());
    }

    #[test]
    fn a_content_that_fails_its_check_is_left_out() {
        for sizes in [&[10, 20, 30][..], &[HUGE_PAGE, 20, 30]] {
            let contents = contents(sizes);
            let packed = pack(&contents, |i, bytes| i != 1 && bytes == joined(&contents[i]));
            assert_eq!(packed[0].as_deref(), Some(&joined(&contents[0])[..]));
            assert_eq!(packed[1], None);
            assert_eq!(packed[2].as_deref(), Some(&joined(&contents[2])[..]));
        }
    }
}
