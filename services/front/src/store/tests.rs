//! Model-based property tests: random operations against the real sled store
//! and a plain in-memory model (a snapshot of the tree per revision), reopens
//! included. They must agree on every read, at every revision, and on every
//! paginated listing.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::engine::Engine as _;
use super::*;
use crate::error::Reason;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Node {
    Dir,
    File { version: u64, content: Vec<u8> },
}

type Tree = BTreeMap<String, Node>;

#[derive(Debug, Clone)]
enum Op {
    Write { path: usize, content: usize, mode: WriteMode, text: bool, expected: Option<u64> },
    ReadAt { path: usize, back: u64 },
    ListAt { back: u64, page: usize, root: usize, recursive: bool },
    Compact { back: u64 },
    Reopen,
}

const PATHS: [&str; 7] = ["/a", "/a/b", "/a/b/c", "/d", "/d/e", "/a-b", "/functions/f.md"];
const DIRS: [&str; 4] = ["/", "/a", "/a/b", "/d"];
const CONTENTS: [&[u8]; 5] = [b"", b"one\n", b"two\r\nlines", b"bin\0ary", b"\xff\xfe"];

fn op() -> impl Strategy<Value = Op> {
    let mode = prop_oneof![Just(WriteMode::Overwrite), Just(WriteMode::Append), Just(WriteMode::CreateNew)];
    prop_oneof![
        6 => (0..PATHS.len(), 0..CONTENTS.len(), mode, any::<bool>(), prop::option::of(0u64..4))
            .prop_map(|(path, content, mode, text, expected)| Op::Write { path, content, mode, text, expected }),
        3 => (0..PATHS.len(), 0u64..6).prop_map(|(path, back)| Op::ReadAt { path, back }),
        2 => (0u64..6, 1usize..4, 0..DIRS.len(), any::<bool>())
            .prop_map(|(back, page, root, recursive)| Op::ListAt { back, page, root, recursive }),
        1 => Just(Op::Reopen),
        1 => (0u64..4).prop_map(|back| Op::Compact { back }),
    ]
}

fn path(p: &str) -> SpacePath {
    SpacePath::parse(p).unwrap()
}

/// What the model says a write does: the new tree, or the expected error.
fn model_write(
    tree: &Tree,
    p: &str,
    body: &[u8],
    mode: WriteMode,
    text: bool,
    expected: Option<u64>,
) -> Result<Option<Tree>, Reason> {
    let target = path(p);
    let existing = tree.get(p);
    if let Some(Node::Dir) = existing {
        return Err(Reason::NotAFile);
    }
    let current = match existing {
        Some(Node::File { version, .. }) => *version,
        _ => 0,
    };
    if expected.is_some_and(|e| e != current) {
        return Err(Reason::VersionConflict);
    }
    let old = match existing {
        Some(Node::File { content, .. }) => Some(content),
        _ => None,
    };
    if old.is_some() && mode == WriteMode::CreateNew {
        return Ok(None);
    }
    let content = match (old, mode) {
        (Some(old), WriteMode::Append) => {
            if text && !body.is_empty() {
                let meta = crate::text::TextMeta::analyze(old);
                if !meta.is_text {
                    return Err(if meta.is_utf8 { Reason::BinaryContent } else { Reason::NotUtf8 });
                }
            }
            [old.as_slice(), body].concat()
        }
        _ => body.to_vec(),
    };
    if old == Some(&content) {
        return Ok(None);
    }
    let mut next = tree.clone();
    for ancestor in target.ancestors() {
        match next.get(ancestor.as_str()) {
            Some(Node::File { .. }) => return Err(Reason::NotADirectory),
            Some(Node::Dir) => {}
            None => {
                next.insert(ancestor.to_string(), Node::Dir);
            }
        }
    }
    next.insert(p.to_owned(), Node::File { version: current + 1, content });
    Ok(Some(next))
}

/// Opens the store in `dir`. sled releases its file lock from a background
/// thread after the last handle is dropped, so a reopen in the same process
/// can briefly find it still held; a new process never does.
/// Writes `body` at `at` in `space`, replacing what is there.
fn overwrite(store: &Store, space: SpaceId, at: &str, body: &[u8]) -> crate::store::WriteOutcome {
    store
        .write(WriteOp {
            space,
            path: path(at),
            body: WriteBody::Bytes(body.to_vec()),
            mode: WriteMode::Overwrite,
            expected_version: None,
            operation: "write",
            actor: Actor::default(),
            receipt: None,
        })
        .unwrap()
}

fn open(dir: &std::path::Path) -> Store {
    try_open(dir).unwrap_or_else(|error| panic!("{error}"))
}

fn try_open(dir: &std::path::Path) -> Result<Store, OpenError> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        match Store::open(dir, Durability::Group, StoreLimits::default()) {
            Err(OpenError::Engine { detail, .. })
                if detail.contains("could not acquire lock") && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            other => return other,
        }
    }
}

fn listing(
    store: &Store,
    space: SpaceId,
    root: &SpacePath,
    revision: u64,
    page: usize,
    recursive: bool,
) -> Vec<String> {
    let mut out = Vec::new();
    let mut after: Option<String> = None;
    let all = |_: &SpacePath, _: &Entry| true;
    loop {
        let result = store
            .scan(
                space,
                &ScanOptions {
                    root,
                    revision,
                    recursive,
                    after: after.as_deref(),
                    from: None,
                    limit: page,
                    budget: 3,
                    filter: &all,
                },
            )
            .unwrap();
        assert!(result.entries.len() <= page);
        out.extend(result.entries.into_iter().map(|(p, _)| p.to_string()));
        match result.resume_after {
            Some(next) => after = Some(next),
            None => return out,
        }
    }
}

fn model_listing(tree: &Tree, root: &str, recursive: bool) -> Vec<String> {
    let root = path(root);
    tree.keys()
        .filter(|p| {
            let p = path(p);
            p != root && p.starts_with(&root) && (recursive || p.parent().as_ref() == Some(&root))
        })
        .cloned()
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn store_agrees_with_model(ops in prop::collection::vec(op(), 1..40)) {
        let dir = tempfile::tempdir().unwrap();
        let mut store = open(dir.path());
        let space = store.create_space(NewSpace { name: "m".into(), owner: "p".into(), quota: Quota::default() }, None).unwrap();
        let agent = store.entry(space.id, &path("/AGENT.md"), None).unwrap().unwrap();
        let mut initial = Tree::new();
        initial.insert("/AGENT.md".into(), Node::File { version: 1, content: store.content(agent.hash).unwrap() });
        for d in ["/functions", "/scenarios", "/scripts"] {
            initial.insert(d.into(), Node::Dir);
        }
        // snapshots[r] is the tree as of revision r.
        let mut snapshots = vec![Tree::new(), initial];
        // Revisions below this were compacted away.
        let mut floor = 0u64;

        for op in ops {
            let revision = snapshots.len() as u64 - 1;
            match op {
                Op::Write { path: p, content, mode, text, expected } => {
                    let p = PATHS[p];
                    let body = CONTENTS[content];
                    let body_value = if text {
                        match std::str::from_utf8(body) {
                            Ok(s) => WriteBody::Text(s.to_owned()),
                            Err(_) => continue,
                        }
                    } else {
                        WriteBody::Bytes(body.to_vec())
                    };
                    let want = model_write(snapshots.last().unwrap(), p, body, mode, text, expected);
                    let got = store.write(WriteOp {
                        space: space.id,
                        path: path(p),
                        body: body_value,
                        mode,
                        expected_version: expected,
                        operation: "write",
                        actor: Actor { principal: "p".into(), ..Actor::default() },
                        receipt: None,
                    });
                    match (want, got) {
                        (Ok(Some(next)), Ok(outcome)) => {
                            prop_assert!(outcome.changed);
                            prop_assert_eq!(outcome.revision, revision + 1);
                            snapshots.push(next);
                        }
                        (Ok(None), Ok(outcome)) => {
                            prop_assert!(!outcome.changed);
                            prop_assert_eq!(outcome.revision, revision);
                        }
                        (Err(reason), Err(error)) => prop_assert_eq!(reason, error.reason),
                        (want, got) => prop_assert!(false, "model {:?} vs store {:?}", want, got),
                    }
                }
                Op::ReadAt { path: p, back } => {
                    let at = revision.saturating_sub(back).max(floor);
                    let entry = store.entry(space.id, &path(PATHS[p]), Some(at)).unwrap();
                    match (snapshots[at as usize].get(PATHS[p]), entry) {
                        (None, None) => {}
                        (Some(Node::Dir), Some(e)) => prop_assert!(e.is_dir()),
                        (Some(Node::File { version, content }), Some(e)) => {
                            prop_assert_eq!(e.version, *version);
                            prop_assert_eq!(&store.content(e.hash).unwrap(), content);
                            let record = store.version(space.id, e.node, *version).unwrap().unwrap();
                            prop_assert_eq!(record.hash, e.hash);
                        }
                        (want, got) => prop_assert!(false, "at {}: model {:?} vs store {:?}", at, want, got),
                    }
                }
                Op::ListAt { back, page, root, recursive } => {
                    let at = revision.saturating_sub(back).max(floor);
                    let tree = &snapshots[at as usize];
                    let root_path = DIRS[root];
                    if root_path != "/" && tree.get(root_path) != Some(&Node::Dir) {
                        continue;
                    }
                    let paged = listing(&store, space.id, &path(root_path), at, page, recursive);
                    prop_assert_eq!(paged, model_listing(tree, root_path, recursive));
                }
                Op::Compact { back } => {
                    let target = revision.saturating_sub(back).max(1);
                    let done = store.compact(space.id, "p", target).unwrap();
                    floor = floor.max(done.revision);
                    // The compaction is a commit of its own; the tree does not change.
                    let same = snapshots.last().unwrap().clone();
                    if store.space(space.id).unwrap().unwrap().revision == snapshots.len() as u64 {
                        snapshots.push(same);
                    }
                }
                Op::Reopen => {
                    store.close().unwrap();
                    drop(store);
                    store = open(dir.path());
                }
            }
            let stored = store.space(space.id).unwrap().unwrap();
            prop_assert_eq!(stored.revision, snapshots.len() as u64 - 1);
            let live = snapshots.last().unwrap();
            let files: Vec<_> = live.values().filter_map(|n| match n { Node::File { content, .. } => Some(content.len() as u64), _ => None }).collect();
            prop_assert_eq!(stored.usage.files, files.len() as u64);
            prop_assert_eq!(stored.usage.bytes, files.iter().sum::<u64>());
        }
    }
}

#[test]
fn deleting_a_space_frees_its_content_and_its_name() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let new = |name: &str| NewSpace { name: name.into(), owner: "p".into(), quota: Quota::default() };
    let keep = store.create_space(new("keep"), None).unwrap();
    let gone = store.create_space(new("gone"), None).unwrap();
    let write = |space: SpaceId, p: &str, body: &[u8]| overwrite(&store, space, p, body);
    let shared = write(keep.id, "/shared.txt", b"shared bytes");
    let only = write(gone.id, "/only.txt", b"only in the deleted space");
    write(gone.id, "/shared.txt", b"shared bytes");
    store.delete_space(gone.id, None).unwrap();
    assert!(store.space(gone.id).unwrap().is_none());
    assert!(store.space_id_by_name("gone").unwrap().is_none());
    assert!(content::read_if_stored(&store, shared.hash).unwrap().is_some(), "still used by another space");
    assert!(content::read_if_stored(&store, only.hash).unwrap().is_none(), "freed with its last version");
    assert!(store.node(only.node).unwrap().is_none());
    assert_eq!(store.scan_prefix(Table::History, &gone.id.to_bytes()).count(), 0);
    store.create_space(new("gone"), None).unwrap();
}

#[test]
fn large_content_is_chunked_and_verified() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let space =
        store.create_space(NewSpace { name: "s".into(), owner: "p".into(), quota: Quota::default() }, None).unwrap();
    let body: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    let outcome = overwrite(&store, space.id, "/big.bin", &body);
    assert_eq!(store.content(outcome.hash).unwrap(), body);
    let chunks = store.scan_prefix(Table::Content, &outcome.hash.0).count();
    assert_eq!(chunks, 1 + body.len().div_ceil(content::CHUNK_SIZE));
    assert_eq!(store.content_unverified(outcome.hash).unwrap(), Some(body.clone()));
    assert_eq!(store.content_unverified(crate::store::Hash::of(b"never stored")).unwrap(), None);
    // A lost chunk is DATA_LOSS for the unverified reader too.
    let second_key = keys::blob_chunk(&outcome.hash.0, 1);
    let second = store.get(Table::Content, &second_key).unwrap().unwrap();
    store.transact(|tx| tx.delete(Table::Content, &second_key)).unwrap();
    assert_eq!(store.content_unverified(outcome.hash).unwrap_err().reason, Reason::DataLoss);
    store.transact(|tx| tx.put(Table::Content, &second_key, &second)).unwrap();
    assert_eq!(store.content_unverified(outcome.hash).unwrap(), Some(body.clone()));
    // A damaged chunk is DATA_LOSS, never wrong bytes.
    store.transact(|tx| tx.put(Table::Content, &second_key, b"tampered")).unwrap();
    assert_eq!(store.content(outcome.hash).unwrap_err().reason, Reason::DataLoss);

    // Content of one chunk: read whole, and its lost chunk is DATA_LOSS too.
    let small = b"one chunk".to_vec();
    let outcome = overwrite(&store, space.id, "/small.txt", &small);
    assert_eq!(store.content_unverified(outcome.hash).unwrap(), Some(small));
    store.transact(|tx| tx.delete(Table::Content, &keys::blob_chunk(&outcome.hash.0, 0))).unwrap();
    assert_eq!(store.content_unverified(outcome.hash).unwrap_err().reason, Reason::DataLoss);
}

#[test]
fn a_directory_that_is_not_a_store_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    {
        let options = SledOptions { durability: Durability::Group, cache_bytes: 1 << 20, min_free_bytes: 0 };
        let engine = SledEngine::open(dir.path(), options).unwrap();
        engine.transact(&mut |tx| tx.put(Table::Meta, FORMAT_KEY, b"something-else")).unwrap();
        engine.shutdown().unwrap();
    }
    let error = try_open(dir.path()).unwrap_err();
    assert!(matches!(error, OpenError::Format { .. }), "{error}");
}

#[test]
fn receipts_are_pruned_by_age() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let old = Receipt { fingerprint: [1; 32], response: vec![1], created_ms: 1_000 };
    let new = Receipt { fingerprint: [2; 32], response: vec![2], created_ms: 5_000 };
    store.put_receipt(&[1; 32], &old).unwrap();
    store.put_receipt(&[2; 32], &new).unwrap();
    assert_eq!(store.prune_receipts(2_000).unwrap(), 1);
    assert!(store.receipt(&[1; 32]).unwrap().is_none());
    assert_eq!(store.receipt(&[2; 32]).unwrap(), Some(new));
}

#[test]
fn outbox_jobs_become_visible_in_sequence_order() {
    // Delivery reads the outbox from the last sequence it passed: a job that
    // appears below that point is never delivered. Reindexing a space while
    // another space commits must never let that happen.
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let new = |name: &str| NewSpace { name: name.into(), owner: "p".into(), quota: Quota::default() };
    let big = store.create_space(new("big"), None).unwrap();
    let busy = store.create_space(new("busy"), None).unwrap();
    for i in 0..200 {
        overwrite(&store, big.id, &format!("/f{i}.txt"), format!("file {i}").as_bytes());
    }
    let done = std::sync::atomic::AtomicBool::new(false);
    let delivered = std::thread::scope(|scope| {
        let reindex = scope.spawn(|| {
            for _ in 0..10 {
                store.enqueue_reindex(big.id).unwrap();
            }
            done.store(true, std::sync::atomic::Ordering::SeqCst);
        });
        let commits = scope.spawn(|| {
            let mut i = 0u64;
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                overwrite(&store, busy.id, "/hot.txt", format!("edit {i}").as_bytes());
                i += 1;
            }
        });
        let (mut passed, mut delivered) = (0, 0usize);
        loop {
            // Read once more after both writers have finished.
            let finished = reindex.is_finished() && commits.is_finished();
            let jobs = store.outbox_after(passed, 64).unwrap();
            delivered += jobs.len();
            match jobs.last() {
                Some((last, _)) => passed = *last,
                None if finished => return delivered,
                None => {}
            }
        }
    });
    assert_eq!(delivered, store.outbox_after(0, usize::MAX).unwrap().len(), "a job appeared behind delivery");
}

#[test]
fn seals_written_at_once_all_succeed() {
    // The sealer task and a shutdown can seal at the same moment; both must
    // succeed, or a graceful stop ends with an error.
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let space =
        store.create_space(NewSpace { name: "s".into(), owner: "p".into(), quota: Quota::default() }, None).unwrap();
    overwrite(&store, space.id, "/a.txt", b"a");
    std::thread::scope(|scope| {
        let sealers: Vec<_> = (0..4).map(|_| scope.spawn(|| (0..25).try_for_each(|_| store.seal()))).collect();
        for sealer in sealers {
            sealer.join().unwrap().unwrap();
        }
    });
}

#[test]
fn the_outbox_head_survives_pruning_everything() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let space =
        store.create_space(NewSpace { name: "s".into(), owner: "p".into(), quota: Quota::default() }, None).unwrap();
    overwrite(&store, space.id, "/a.txt", b"a");
    let head = store.outbox_head().unwrap();
    assert!(head > 0);
    store.prune_outbox(head).unwrap();
    assert_eq!(store.outbox_bounds().unwrap(), None);
    assert_eq!(store.outbox_head().unwrap(), head, "the highest sequence handed out does not go back");
}
