//! The search index's heap stays flat however many commits it makes. A
//! worker commits every batch of index jobs, each commit writes a segment,
//! and segments merge away: nothing may grow with the files that come and
//! go. Measured with jemalloc's own count of allocated bytes, in a test
//! binary of its own so that no other test's allocations count.

// Tests may unwrap: a panic is the failure report.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use agentvfs_worker::index::{Job, JobOp, SearchIndex};
use tikv_jemalloc_ctl::{epoch, stats};

#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Bytes allocated now: the least of a few readings over a second, so that
/// a merge running in tantivy's background threads at one of them does not
/// count.
fn allocated() -> usize {
    (0..5)
        .map(|_| {
            std::thread::sleep(Duration::from_millis(200));
            epoch::advance().unwrap();
            stats::allocated::read().unwrap()
        })
        .min()
        .unwrap()
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
    // Warm-up: the first commits fill what is meant to stay (caches, pools).
    for n in 1..=100 {
        commit(n);
    }
    let before = allocated();
    for n in 101..=500 {
        commit(n);
    }
    let after = allocated();
    let grown = after as f64 - before as f64;
    eprintln!("index heap: {before} bytes after 100 commits, {after} after 500 ({grown:+} bytes)");
    assert!(grown < 128.0 * 1024.0, "the index's heap grew {grown} bytes over 400 commits");
    assert_eq!(index.search("s", "/", "file", 10, 0).unwrap().0.len(), 8);
}
