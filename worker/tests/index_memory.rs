//! The search index's heap stays flat however many commits it makes. A
//! worker commits every batch of index jobs, each commit writes a segment,
//! and segments merge away: nothing may grow with the files that come and
//! go. Measured with jemalloc's own count of allocated bytes, in a test
//! binary of its own so that no other test's allocations count.

// Tests may unwrap: a panic is the failure report.
#![allow(clippy::unwrap_used)]

use agentvfs_worker::index::{Job, JobOp, SearchIndex};
use tikv_jemalloc_ctl::{epoch, stats};

#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Bytes allocated now.
fn allocated() -> usize {
    epoch::advance().unwrap();
    stats::allocated::read().unwrap()
}

#[test]
fn commits_leave_no_memory_behind() {
    let dir = tempfile::tempdir().unwrap();
    let index = SearchIndex::open(dir.path()).unwrap();
    // Eight files, rewritten over and over: one job, one commit, each time.
    let commit = |n: u64| {
        let (node, path) = (format!("n{}", n % 8), format!("/f{}.md", n % 8));
        let text = Some(format!("version {n} of file {node}"));
        let op = JobOp::Upsert { path, version: n, text };
        index.apply(vec![Job { sequence: n, space: "s".into(), revision: n, node, op }]).unwrap();
    };
    // The heap swings by a megabyte as segments are written, merged and
    // dropped, and by how much depends on how the background merges kept
    // up. Merged into one segment, the index reads the same each time.
    let settled = || {
        index.merge_all().unwrap();
        allocated()
    };
    // A leak grows the heap over every stretch of commits; a cache or pool
    // that fills once (somewhere in the first few hundred commits, as the
    // merge threads happen to run) grows it over one. So the heap is read
    // after each of four stretches, and the middle of the three growths
    // between them must be small.
    let mut readings = Vec::new();
    for stretch in 0..4 {
        for n in stretch * 200 + 1..=stretch * 200 + 200 {
            commit(n);
        }
        readings.push(settled() as i64);
    }
    let mut growths: Vec<i64> = readings.windows(2).map(|pair| pair[1] - pair[0]).collect();
    eprintln!("index heap after 200, 400, 600 and 800 commits: {readings:?} bytes");
    growths.sort_unstable();
    assert!(growths[1] < 128 * 1024, "the index's heap grew {growths:?} bytes over each 200 commits");
    assert_eq!(index.search("s", "/", "file", 10, 0).unwrap().0.len(), 8);
}
