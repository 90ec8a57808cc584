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
    // dropped; its floor is what must stay put. The floor over a window of
    // commits, read after each one, is the heap with the fewest segments
    // open, whatever the merge threads were doing at any one reading.
    let floor = |commits: std::ops::RangeInclusive<u64>| {
        commits
            .map(|n| {
                commit(n);
                allocated()
            })
            .min()
            .unwrap()
    };
    // Warm-up: the first commits fill what is meant to stay (caches, pools).
    for n in 1..=100 {
        commit(n);
    }
    let before = floor(101..=200);
    for n in 201..=500 {
        commit(n);
    }
    let after = floor(501..=600);
    let grown = after as f64 - before as f64;
    eprintln!("index heap: floor of {before} bytes over commits 101-200, {after} over 501-600 ({grown:+} bytes)");
    assert!(grown < 128.0 * 1024.0, "the index's heap grew {grown} bytes over 400 commits");
    assert_eq!(index.search("s", "/", "file", 10, 0).unwrap().0.len(), 8);
}
