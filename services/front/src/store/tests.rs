//! Model-based property tests: random operations against the real sled store
//! and a plain in-memory model (a snapshot of the tree per revision), reopens
//! included. They must agree on every read, at every revision, and on every
//! paginated listing.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::engine::sled::when_unlocked;
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

use crate::text::encoding::{self, Charset};

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
    // Text is stored in the encoding of the text file it replaces or extends.
    let (meta, charset) = old.map_or((crate::text::TextMeta::NOT_TEXT, Charset::UTF_8), |old| encoding::classify(old));
    let charset = if meta.is_text { charset } else { Charset::UTF_8 };
    fn text_body(body: &[u8]) -> &str {
        std::str::from_utf8(body).expect("text bodies are UTF-8")
    }
    let content = match (old, mode) {
        (Some(old), WriteMode::Append) => {
            if text && !body.is_empty() && !meta.is_text {
                return Err(Reason::BinaryContent);
            }
            let body = if text { charset.encode(text_body(body)).unwrap().into_owned() } else { body.to_vec() };
            [old.as_slice(), &body].concat()
        }
        _ if text => charset.encode_file(text_body(body)).unwrap(),
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
/// A new space named `name`, owned by `p`, with the default quota.
fn new_space(store: &Store, name: &str) -> SpaceRecord {
    store.create_space(NewSpace { name: name.into(), owner: "p".into(), quota: Quota::default() }, None).unwrap()
}

fn overwrite(store: &Store, space: SpaceId, at: &str, body: &[u8]) -> crate::store::WriteOutcome {
    store.write(overwrite_op(space, at, body)).unwrap()
}

/// A plain overwrite of `at` with `body`.
fn overwrite_op(space: SpaceId, at: &str, body: &[u8]) -> WriteOp {
    WriteOp {
        space,
        path: path(at),
        body: WriteBody::Bytes(body.to_vec()),
        mode: WriteMode::Overwrite,
        expected_version: None,
        operation: "write",
        executable: None,
        actor: Actor::default(),
        receipt: None,
        session: None,
    }
}

/// The engines every test here runs on.
#[derive(Debug, Clone, Copy)]
enum Engine {
    Sled,
    Postgres,
}

/// Where a test's store lives: a sled directory, or a fresh database of the
/// tests' throwaway PostgreSQL cluster.
enum Home {
    Sled(tempfile::TempDir),
    Postgres(String),
}

impl Home {
    fn new(engine: Engine) -> Home {
        match engine {
            Engine::Sled => Home::Sled(tempfile::tempdir().unwrap()),
            Engine::Postgres => Home::Postgres(agentvfs_testdb::Cluster::shared().create_database()),
        }
    }

    fn open(&self) -> Store {
        self.try_open().unwrap_or_else(|error| panic!("{error}"))
    }

    /// Opens the store (a reopen waits for sled's file lock, see
    /// [`when_unlocked`]).
    fn try_open(&self) -> Result<Store, OpenError> {
        let dir = match self {
            Home::Sled(dir) => dir.path(),
            Home::Postgres(url) => {
                let options = PostgresOptions {
                    url: url.clone(),
                    pool_size: 8,
                    connect_timeout: std::time::Duration::from_secs(10),
                    statement_timeout: std::time::Duration::from_secs(30),
                };
                return Store::connect(&options, StoreLimits::default());
            }
        };
        when_unlocked(|| Store::open(dir, Durability::Group, StoreLimits::default()))
    }
}

/// Runs a test once per engine, as a test of its own each.
macro_rules! on_both_engines {
    ($(fn $name:ident($engine:ident: Engine) $body:block)*) => {
        $(
            fn $name($engine: Engine) $body
        )*
        mod sled {
            $( #[test] fn $name() { super::$name(super::Engine::Sled) } )*
        }
        mod postgres {
            $( #[test] fn $name() { super::$name(super::Engine::Postgres) } )*
        }
    };
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
    fn the_sled_store_agrees_with_the_model(ops in prop::collection::vec(op(), 1..40)) {
        agrees_with_model(Engine::Sled, ops)?;
    }

    #[test]
    fn the_postgres_store_agrees_with_the_model(ops in prop::collection::vec(op(), 1..40)) {
        agrees_with_model(Engine::Postgres, ops)?;
    }
}

fn agrees_with_model(engine: Engine, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let home = Home::new(engine);
    let mut store = home.open();
    let space = new_space(&store, "m");
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
                        Ok(s) => WriteBody::Text { text: s.to_owned(), encoding: None },
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
                    executable: None,
                    actor: Actor { principal: "p".into(), ..Actor::default() },
                    receipt: None,
                    session: None,
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
                store = home.open();
            }
        }
        let stored = store.space(space.id).unwrap().unwrap();
        prop_assert_eq!(stored.revision, snapshots.len() as u64 - 1);
        let live = snapshots.last().unwrap();
        let files: Vec<_> = live
            .values()
            .filter_map(|n| match n {
                Node::File { content, .. } => Some(content.len() as u64),
                _ => None,
            })
            .collect();
        prop_assert_eq!(stored.usage.files, files.len() as u64);
        prop_assert_eq!(stored.usage.bytes, files.iter().sum::<u64>());
    }
    Ok(())
}

/// A thread runs many calls (a line of changes, the blocking pool): the
/// leases one call carries never stay with the thread, even if it panics.
#[test]
fn a_call_that_panics_leaves_no_leases_on_its_thread() {
    let outer = vec!["outer".to_owned()];
    leases::carrying(&outer, || {
        let panicked = std::panic::catch_unwind(|| {
            leases::carrying(&["inner".to_owned()], || {
                assert_eq!(leases::carried(), ["inner"]);
                panic!("a call that panics");
            })
        });
        assert!(panicked.is_err());
        assert_eq!(leases::carried(), ["outer"]);
    });
    assert!(leases::carried().is_empty());
}

#[test]
fn seals_written_at_once_all_succeed() {
    // The sealer task and a shutdown can seal at the same moment; both must
    // succeed, or a graceful stop ends with an error.
    let home = Home::new(Engine::Sled);
    let store = home.open();
    let space = new_space(&store, "s");
    overwrite(&store, space.id, "/a.txt", b"a");
    std::thread::scope(|scope| {
        let sealers: Vec<_> = (0..4).map(|_| scope.spawn(|| (0..25).try_for_each(|_| store.seal()))).collect();
        for sealer in sealers {
            sealer.join().unwrap().unwrap();
        }
    });
}

#[test]
fn a_reindex_keeps_the_spaces_jobs_in_revision_order_while_another_front_commits() {
    // A worker applies a space's jobs in outbox order: a rebuild queued
    // behind a newer commit of another front would bring back what that
    // commit replaced or deleted.
    let home = Home::new(Engine::Postgres);
    let (ours, theirs) = (home.open(), home.open());
    let space = new_space(&ours, "s");
    for i in 0..100 {
        overwrite(&ours, space.id, &format!("/f{i}.txt"), b"first");
    }
    let done = std::sync::atomic::AtomicBool::new(false);
    let reindexed = std::thread::scope(|scope| {
        let reindexed = scope.spawn(|| {
            let reindexed: Vec<_> = (0..20).map(|_| ours.enqueue_reindex(space.id)).collect();
            done.store(true, std::sync::atomic::Ordering::SeqCst);
            reindexed
        });
        let mut i = 0u64;
        while !done.load(std::sync::atomic::Ordering::SeqCst) {
            overwrite(&theirs, space.id, &format!("/f{}.txt", i % 100), format!("edit {i}").as_bytes());
            i += 1;
        }
        reindexed.join().unwrap()
    });
    let files = ours.space(space.id).unwrap().unwrap().usage.files as usize;
    for queued in reindexed {
        assert_eq!(queued.unwrap(), 1 + files, "the drop and every file");
    }
    let revisions: Vec<u64> = ours
        .outbox_after(0, usize::MAX)
        .unwrap()
        .into_iter()
        .filter(|(_, job)| job.space == space.id)
        .map(|(_, job)| job.revision)
        .collect();
    let backwards = revisions.windows(2).filter(|pair| pair[1] < pair[0]).count();
    assert_eq!(backwards, 0, "jobs went back in revision; revisions in outbox order: {revisions:?}");
}

#[test]
fn writers_on_two_fronts_to_one_space_all_commit() {
    // Each front serializes its own commits of a space; the two fronts'
    // commits race, and the loser plans again. However long the other
    // front keeps committing, every write must land.
    let home = Home::new(Engine::Postgres);
    let fronts = [home.open(), home.open()];
    let space = new_space(&fronts[0], "s");
    let failed = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for (f, store) in fronts.iter().enumerate() {
            for task in 0..8 {
                let failed = &failed;
                scope.spawn(move || {
                    for n in 0..100 {
                        let op = overwrite_op(
                            space.id,
                            &format!("/f{f}/t{task}/{n}.txt"),
                            format!("{f} {task} {n}").as_bytes(),
                        );
                        if let Err(error) = store.write(op) {
                            eprintln!("front {f} task {task} write {n}: {error}");
                            failed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                    }
                });
            }
        }
    });
    assert_eq!(failed.into_inner(), 0, "writes failed");
    assert_eq!(fronts[1].space(space.id).unwrap().unwrap().revision, 1 + 2 * 8 * 100);
}

#[test]
fn a_database_front_keeps_the_versions_it_commits_in_its_cache() {
    // An edit reads the version it replaces: on a database, from the cache
    // once this front has written it.
    let home = Home::new(Engine::Postgres);
    let store = home.open();
    let space = new_space(&store, "s");
    let outcome = overwrite(&store, space.id, "/f.txt", b"kept");
    let cache = store.inner.cache.as_ref().expect("a database front has a cache");
    assert_eq!(cache.content(outcome.hash).as_deref(), Some(&b"kept"[..]));
    let record = cache.version(space.id, outcome.node, outcome.version).expect("the version record");
    assert_eq!(
        Some(record),
        store.get_decoded(Table::Versions, &keys::version(space.id, outcome.node, outcome.version)).unwrap()
    );
}

/// The upload a content's chunks belong to (`None`: classic chunk keys) and
/// how many chunks of it are stored.
fn content_keys(store: &Store, hash: crate::store::Hash) -> (Option<content::UploadId>, usize) {
    let mut upload = None;
    let mut chunks = 0;
    for item in store.scan_prefix(Table::Content, &hash.0) {
        let (key, value) = item.unwrap();
        match key[32] {
            b'x' => {
                assert_eq!(value.last(), Some(&b'u'), "an upload keyed by its ID alone");
                upload = Some(content::UploadId::try_from(&value[..16]).unwrap());
            }
            b'c' | b'u' => chunks += 1,
            _ => {}
        }
    }
    (upload, chunks + upload.map_or(0, |upload| upload_chunks(store, upload)))
}

/// How many chunks of `upload` are stored.
fn upload_chunks(store: &Store, upload: content::UploadId) -> usize {
    store.scan_prefix(Table::Content, &keys::upload_chunks(&upload)).count()
}

fn upload_markers(store: &Store) -> usize {
    let markers = |prefix| store.scan_prefix(Table::Meta, prefix).count();
    markers(keys::STAGED_MARKERS) + markers(keys::UPLOAD_MARKERS)
}

fn large(seed: u8) -> Vec<u8> {
    (0..300_000u32).map(|i| (i % 251) as u8 ^ seed).collect()
}

on_both_engines! {
    fn the_background_lease_has_one_holder_and_fences_the_one_that_lost_it(engine: Engine) {
        let home = Home::new(engine);
        let store = home.open();
        let (a, b) = ([1; 16], [2; 16]);
        let ttl = std::time::Duration::from_millis(300);
        let first = store.hold_lease(&a, ttl).unwrap().expect("free: a takes it");
        assert_eq!(store.hold_lease(&b, ttl).unwrap(), None, "held by a");
        assert_eq!(store.hold_lease(&a, ttl).unwrap(), Some(first), "a renews it");
        let space =
            new_space(&store, "s");
        overwrite(&store, space.id, "/x.txt", b"x");
        let head = store.outbox_head().unwrap();
        // a, the holder, may prune.
        store.prune_outbox(head - 1, Some(first)).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(400));
        let second = store.hold_lease(&b, ttl).unwrap().expect("expired: b takes it over");
        assert!(second > first);
        // a lost it: its pruning is refused, and nothing moves.
        let refused = store.prune_outbox(head, Some(first)).unwrap_err();
        assert_eq!(refused.reason, Reason::TransactionConflict);
        assert_eq!(store.outbox_pruned().unwrap(), head - 1);
        store.prune_outbox(head, Some(second)).unwrap();
        assert_eq!(store.outbox_pruned().unwrap(), head);
        assert_eq!(store.hold_lease(&a, ttl).unwrap(), None, "held by b now");
    }

    fn a_space_created_again_under_its_name_is_found_by_it(engine: Engine) {
        let home = Home::new(engine);
        let store = home.open();
        let new = || NewSpace { name: "again".into(), owner: "p".into(), quota: Quota::default() };
        let first = store.create_space(new(), None).unwrap();
        assert_eq!(store.space_by_name("again").unwrap().unwrap().id, first.id);
        store.delete_space(first.id, None).unwrap();
        assert_eq!(store.space_by_name("again").unwrap(), None);
        let second = store.create_space(new(), None).unwrap();
        assert_eq!(store.space_by_name("again").unwrap().unwrap().id, second.id);
        assert_eq!(store.space_by_name("never").unwrap(), None);
    }

    fn concurrent_uploads_of_one_content_keep_one_copy(engine: Engine) {
        let home = Home::new(engine);
        let store = home.open();
        let spaces: Vec<_> = (0..2)
            .map(|i| {
                let new = NewSpace { name: format!("s{i}"), owner: "p".into(), quota: Quota::default() };
                store.create_space(new, None).unwrap()
            })
            .collect();
        let together = std::sync::Barrier::new(spaces.len());
        let bodies: Vec<Vec<u8>> = (0..5).map(large).collect();
        std::thread::scope(|scope| {
            for space in &spaces {
                let (store, together, bodies) = (&store, &together, &bodies);
                scope.spawn(move || {
                    for (round, body) in bodies.iter().enumerate() {
                        together.wait();
                        overwrite(store, space.id, &format!("/big{round}.bin"), body);
                    }
                });
            }
        });
        let per_copy = bodies[0].len().div_ceil(content::CHUNK_SIZE);
        for body in &bodies {
            let (upload, chunks) = content_keys(&store, crate::store::Hash::of(body));
            assert!(upload.is_some());
            assert_eq!(chunks, per_copy, "one copy of the chunks, the duplicate upload's released");
        }
        assert_eq!(upload_markers(&store), 0);
        store.delete_space(spaces[1].id, None).unwrap();
        for body in &bodies {
            assert_eq!(&store.content(crate::store::Hash::of(body)).unwrap(), body);
        }
        store.delete_space(spaces[0].id, None).unwrap();
        for body in &bodies {
            assert_eq!(content_keys(&store, crate::store::Hash::of(body)), (None, 0), "freed with its last version");
        }
    }

    fn uploads_no_commit_claimed_are_collected(engine: Engine) {
        let home = Home::new(engine);
        let store = home.open();
        let space =
            new_space(&store, "s");
        let committed = overwrite(&store, space.id, "/kept.bin", &large(1));
        // Left by a front that stopped between the upload and its commit.
        let (stale, fresh) = (large(2), large(3));
        let (stale_hash, fresh_hash) = (crate::store::Hash::of(&stale), crate::store::Hash::of(&fresh));
        let stale_upload = content::upload(&store, &stale).unwrap().id;
        let fresh_upload = content::upload(&store, &fresh).unwrap().id;
        assert_eq!(upload_markers(&store), 2);
        // The stale one started two hours ago.
        let marker_key = keys::staged_marker(&stale_upload);
        let started_ms: i64 = store.get_decoded(Table::Meta, &marker_key).unwrap().unwrap();
        let two_hours_earlier = records::encode(&(started_ms - 2 * 3600 * 1000));
        store.transact(|tx| tx.put(Table::Meta, &marker_key, &two_hours_earlier)).unwrap();
        let one_hour = std::time::Duration::from_secs(3600);
        assert_eq!(store.collect_uploads(one_hour).unwrap(), 1);
        assert_eq!(upload_chunks(&store, stale_upload), 0);
        assert_eq!(upload_chunks(&store, fresh_upload), fresh.len().div_ceil(content::CHUNK_SIZE));
        assert_eq!(store.collect_uploads(std::time::Duration::ZERO).unwrap(), 1);
        assert_eq!(upload_chunks(&store, fresh_upload), 0);
        assert_eq!(upload_markers(&store), 0);
        assert_eq!((content_keys(&store, stale_hash), content_keys(&store, fresh_hash)), ((None, 0), (None, 0)));
        // The committed content is never touched.
        assert_eq!(store.content(committed.hash).unwrap(), large(1));
    }

    fn content_shared_by_concurrent_commits_is_counted_once_per_version(engine: Engine) {
        // Spaces commit at the same moment, each a new version of the same
        // new content: its reference count must see every one of them, or
        // deleting some spaces would free content others still use.
        let home = Home::new(engine);
        let store = home.open();
        let spaces: Vec<_> = (0..4)
            .map(|i| {
                let new = NewSpace { name: format!("s{i}"), owner: "p".into(), quota: Quota::default() };
                store.create_space(new, None).unwrap()
            })
            .collect();
        let contents: Vec<Vec<u8>> = (0..20).map(|round| format!("shared content {round}").into_bytes()).collect();
        let together = std::sync::Barrier::new(spaces.len());
        std::thread::scope(|scope| {
            for space in &spaces {
                let (store, contents, together) = (&store, &contents, &together);
                scope.spawn(move || {
                    for (round, content) in contents.iter().enumerate() {
                        together.wait();
                        overwrite(store, space.id, &format!("/f{round}.txt"), content);
                    }
                });
            }
        });
        for space in &spaces[1..] {
            store.delete_space(space.id, None).unwrap();
        }
        for content in &contents {
            let hash = crate::store::Hash::of(content);
            assert_eq!(&store.content(hash).unwrap(), content, "still used by the space that is left");
        }
        store.delete_space(spaces[0].id, None).unwrap();
        for content in &contents {
            assert_eq!(content::read_if_stored(&store, crate::store::Hash::of(content)).unwrap(), None);
        }
    }

    fn writes_that_wait_together_commit_together_as_if_in_turn(engine: Engine) {
        // Writers of one space queue while one of them commits, and the next
        // commits every queued write in one transaction. Each must come out
        // as it would have taking turns: a revision of its own, its file,
        // one CREATE_NEW of a shared path that wins, and the latest of the
        // overwrites of another.
        let home = Home::new(engine);
        let store = home.open();
        let space = new_space(&store, "s");
        let start = store.space(space.id).unwrap().unwrap();
        let (before, transactions_before) = (start.revision, store.own_commits());
        let (threads, writes) = (16, 20);
        let write = |at: &str, body: String, mode: WriteMode| {
            let op = WriteOp { mode, ..overwrite_op(space.id, at, body.as_bytes()) };
            (at.to_owned(), store.write(op).unwrap())
        };
        let outcomes: Vec<(String, WriteOutcome)> = std::thread::scope(|scope| {
            let writers: Vec<_> = (0..threads)
                .map(|t| {
                    scope.spawn(move || {
                        let mut outcomes = Vec::new();
                        for n in 0..writes {
                            outcomes.push(write(&format!("/d{}/t{t}-{n}.txt", n % 3), format!("{t} {n}"), WriteMode::Overwrite));
                            match n {
                                5 => outcomes.push(write("/once.txt", format!("{t}"), WriteMode::CreateNew)),
                                10 => outcomes.push(write("/same.txt", format!("{t}"), WriteMode::Overwrite)),
                                _ => {}
                            }
                        }
                        outcomes
                    })
                })
                .collect();
            writers.into_iter().flat_map(|writer| writer.join().unwrap()).collect()
        });
        let mut revisions: Vec<u64> = outcomes.iter().filter(|(_, o)| o.changed).map(|(_, o)| o.revision).collect();
        revisions.sort_unstable();
        let committed = revisions.len() as u64;
        assert_eq!(revisions, (before + 1..=before + committed).collect::<Vec<_>>(), "one revision each, none skipped");
        let record = store.space(space.id).unwrap().unwrap();
        assert_eq!(record.revision, before + committed);
        assert_eq!(record.usage.files, start.usage.files + threads * writes + 2);
        let read = |at: &str| {
            let entry = store.entry(space.id, &path(at), None).unwrap().unwrap();
            (entry.version, String::from_utf8(store.content(entry.hash).unwrap()).unwrap())
        };
        for t in 0..threads {
            for n in 0..writes {
                assert_eq!(read(&format!("/d{}/t{t}-{n}.txt", n % 3)), (1, format!("{t} {n}")));
            }
        }
        let created: Vec<&WriteOutcome> = outcomes.iter().filter(|(at, o)| at == "/once.txt" && o.created).map(|(_, o)| o).collect();
        assert_eq!(created.len(), 1, "one CREATE_NEW creates the file");
        let refused = outcomes.iter().filter(|(at, o)| at == "/once.txt" && !o.written).count();
        assert_eq!(refused as u64, threads - 1, "the others find it");
        let same: Vec<&WriteOutcome> = outcomes.iter().filter(|(at, o)| at == "/same.txt" && o.changed).map(|(_, o)| o).collect();
        let last = same.iter().max_by_key(|o| o.revision).unwrap();
        assert_eq!(read("/same.txt").0, same.len() as u64);
        assert_eq!(store.entry(space.id, &path("/same.txt"), None).unwrap().unwrap().hash, last.hash);
        // Queued writes went together: far fewer transactions than commits
        // (on a database, where each transaction takes round trips).
        let transactions = store.own_commits() - transactions_before;
        assert!(transactions <= committed, "{transactions} transactions for {committed} commits");
        if matches!(engine, Engine::Postgres) {
            assert!(transactions * 2 <= committed, "{transactions} transactions for {committed} commits");
        }
    }

    fn a_write_keeps_its_sessions_read(engine: Engine) {
        // A session that wrote a version has read it: the record is kept
        // by the write's own transaction, or on its own when the write
        // changed nothing.
        let home = Home::new(engine);
        let store = home.open();
        let space = new_space(&store, "s");
        let write = |session: &str, body: &[u8]| {
            let session = Some(SessionMark { session: session.to_owned(), idle_ms: 60_000 });
            store.write(WriteOp { session, ..overwrite_op(space.id, "/f.txt", body) }).unwrap()
        };
        let first = write("agent", b"one");
        let second = write("agent", b"two");
        let read = store.session_read("agent", second.node).unwrap().expect("the writer's record");
        assert_eq!((read.version, read.expires_ms - read.read_ms), (2, 60_000));
        let unchanged = write("other", b"two");
        assert!(!unchanged.changed);
        assert_eq!(store.session_read("other", first.node).unwrap().map(|read| read.version), Some(2));
    }

    fn a_store_of_another_format_is_refused(engine: Engine) {
        let home = Home::new(engine);
        let store = home.open();
        store.transact(|tx| tx.put(Table::Meta, FORMAT_KEY, b"something-else")).unwrap();
        store.close().unwrap();
        drop(store);
        let error = home.try_open().unwrap_err();
        assert!(matches!(error, OpenError::Format { .. }), "{error}");
    }

    fn deleting_a_space_frees_its_content_and_its_name(engine: Engine) {
        let home = Home::new(engine);
        let store = home.open();
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

    fn large_content_is_chunked_and_verified(engine: Engine) {
        let home = Home::new(engine);
        let store = home.open();
        let space =
            new_space(&store, "s");
        let body: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        let outcome = overwrite(&store, space.id, "/big.bin", &body);
        assert_eq!(store.content(outcome.hash).unwrap(), body);
        // What follows reads the engine, past the cache of the database engine.
        // Its chunks were uploaded before the commit, which claimed them.
        let (upload, chunks) = content_keys(&store, outcome.hash);
        let upload = upload.expect("uploaded");
        assert_eq!(chunks, body.len().div_ceil(content::CHUNK_SIZE));
        assert_eq!(upload_markers(&store), 0);
        assert_eq!(content::read_if_stored(&store, outcome.hash).unwrap(), Some(body.clone()));
        assert_eq!(content::read_if_stored(&store, crate::store::Hash::of(b"never stored")).unwrap(), None);
        // A lost chunk is DATA_LOSS for the unverified reader too.
        let second_key = keys::upload_chunk(&upload, 1);
        let second = store.get(Table::Content, &second_key).unwrap().unwrap();
        store.transact(|tx| tx.delete(Table::Content, &second_key)).unwrap();
        assert_eq!(content::read_if_stored(&store, outcome.hash).unwrap_err().reason, Reason::DataLoss);
        store.transact(|tx| tx.put(Table::Content, &second_key, &second)).unwrap();
        assert_eq!(content::read_if_stored(&store, outcome.hash).unwrap(), Some(body.clone()));
        // A damaged chunk is DATA_LOSS, never wrong bytes.
        store.transact(|tx| tx.put(Table::Content, &second_key, b"tampered")).unwrap();
        assert_eq!(content::read(&store, outcome.hash).unwrap_err().reason, Reason::DataLoss);

        // Content of one chunk: read whole, and its lost chunk is DATA_LOSS too.
        let small = b"one chunk".to_vec();
        let outcome = overwrite(&store, space.id, "/small.txt", &small);
        assert_eq!(content::read_if_stored(&store, outcome.hash).unwrap(), Some(small));
        store.transact(|tx| tx.delete(Table::Content, &keys::blob_chunk(&outcome.hash.0, 0))).unwrap();
        assert_eq!(content::read_if_stored(&store, outcome.hash).unwrap_err().reason, Reason::DataLoss);
    }

    fn staged_content_is_claimed_by_its_write_and_released_otherwise(engine: Engine) {
        let home = Home::new(engine);
        let store = home.open();
        let space =
            new_space(&store, "s");
        // Staged as a stream would: whole batches, then what is left.
        let body: Vec<u8> = (0..(2 * content::UPLOAD_BATCH + 1000) as u32).map(|i| (i % 253) as u8).collect();
        let stage = |body: &[u8]| {
            let id = content::stage(&store).unwrap();
            let per_batch = (content::UPLOAD_BATCH / content::CHUNK_SIZE) as u32;
            for (first, batch) in (0..).step_by(per_batch as usize).zip(body.chunks(content::UPLOAD_BATCH)) {
                content::put_staged(&store, id, first, batch).unwrap();
            }
            content::Uploaded { id, size: body.len() as u64 }
        };
        let staged_write = |at: &str, upload: content::Uploaded, expected_version: Option<u64>| {
            let (hash, text) = (crate::store::Hash::of(&body), crate::text::TextMeta::analyze(&body));
            let outcome = store.write(WriteOp {
                space: space.id,
                path: path(at),
                body: WriteBody::Uploaded { upload, hash, text, mime_type: crate::media::recorded(&text, crate::text::encoding::Charset::UTF_8, &body) },
                mode: WriteMode::Overwrite,
                expected_version,
                operation: "upload",
                executable: None,
                actor: Actor::default(),
                receipt: None,
                session: None,
            });
            content::release_upload(&store, upload.id).unwrap();
            outcome
        };
        let first = stage(&body);
        let outcome = staged_write("/a.bin", first, None).unwrap();
        let chunks = body.len().div_ceil(content::CHUNK_SIZE);
        assert_eq!(content_keys(&store, outcome.hash), (Some(first.id), chunks), "claimed, and kept by its release");
        assert_eq!(content::read(&store, outcome.hash).unwrap(), body);
        assert_eq!(upload_markers(&store), 0);

        // The same content again: stored once, the second upload released.
        let second = stage(&body);
        let again = staged_write("/b.bin", second, None).unwrap();
        assert_eq!(again.hash, outcome.hash);
        assert_eq!(upload_chunks(&store, second.id), 0);
        // A write that fails releases its upload too.
        let third = stage(&body);
        let conflict = staged_write("/c.bin", third, Some(7)).unwrap_err();
        assert_eq!(conflict.reason, Reason::VersionConflict);
        assert_eq!(upload_chunks(&store, third.id), 0);
        assert_eq!(upload_markers(&store), 0);
        assert_eq!(content_keys(&store, outcome.hash), (Some(first.id), chunks));

        // Each batch moves the upload's marker to now: an upload that keeps
        // arriving is not collected, however long ago it started.
        let slow = content::stage(&store).unwrap();
        let marker_key = keys::staged_marker(&slow);
        let hours_ago = records::encode(&(records::now_ms() - 2 * 3600 * 1000));
        store.transact(|tx| tx.put(Table::Meta, &marker_key, &hours_ago)).unwrap();
        content::put_staged(&store, slow, 0, &body[..content::UPLOAD_BATCH]).unwrap();
        assert_eq!(store.collect_uploads(std::time::Duration::from_secs(3600)).unwrap(), 0);
        // One that was collected takes no more batches and cannot be claimed.
        assert_eq!(store.collect_uploads(std::time::Duration::ZERO).unwrap(), 1);
        assert_eq!(upload_chunks(&store, slow), 0);
        let more = content::put_staged(&store, slow, 16, &body[content::UPLOAD_BATCH..2 * content::UPLOAD_BATCH]);
        assert_eq!(more.unwrap_err().reason, Reason::Internal);
        let size = 2 * content::UPLOAD_BATCH as u64;
        let claim = store.write(WriteOp {
            space: space.id,
            path: path("/slow.bin"),
            body: WriteBody::Uploaded {
                upload: content::Uploaded { id: slow, size },
                hash: crate::store::Hash::of(&body[..size as usize]),
                text: crate::text::TextMeta::analyze(&body[..size as usize]),
                mime_type: String::new(),
            },
            mode: WriteMode::Overwrite,
            expected_version: None,
            operation: "upload",
            executable: None,
            actor: Actor::default(),
            receipt: None,
            session: None,
        });
        assert_eq!(claim.unwrap_err().reason, Reason::Internal);
        assert_eq!(upload_chunks(&store, slow), 0);

        store.delete_space(space.id, None).unwrap();
        assert_eq!(content_keys(&store, outcome.hash), (None, 0), "freed with its last version");
        assert_eq!(upload_chunks(&store, first.id), 0);
    }

    fn uploads_of_stores_written_before_uploads_streamed_read_and_are_collected(engine: Engine) {
        let home = Home::new(engine);
        let store = home.open();
        let space =
            new_space(&store, "s");
        let body = large(4);
        let outcome = overwrite(&store, space.id, "/old.bin", &body);
        let hash = outcome.hash;
        // Moved to the keys of the content's hash and the upload, as such
        // stores have them.
        let (upload, chunks) = content_keys(&store, hash);
        let upload = upload.unwrap();
        store
            .transact(|tx| {
                for index in 0..chunks as u32 {
                    let chunk = tx.get(Table::Content, &keys::upload_chunk(&upload, index))?.unwrap();
                    tx.delete(Table::Content, &keys::upload_chunk(&upload, index))?;
                    tx.put(Table::Content, &keys::hashed_upload_chunk(&hash.0, &upload, index), &chunk)?;
                }
                tx.put(Table::Content, &keys::blob_upload(&hash.0), &upload)
            })
            .unwrap();
        assert_eq!(upload_chunks(&store, upload), 0);
        assert_eq!(content::read_if_stored(&store, hash).unwrap(), Some(body.clone()));
        let mut reader = content::ChunkReader::open(&store, hash).unwrap();
        assert_eq!(reader.next_run(&store, u32::MAX).unwrap().concat(), body);

        // An upload such a store left unclaimed, marked the old way.
        let (abandoned, left) = ([9; 16], large(5));
        let left_hash = crate::store::Hash::of(&left);
        let marker = records::UploadMarker { hash: left_hash, chunks: 5, started_ms: 0 };
        store
            .transact(|tx| {
                for (index, chunk) in (0..).zip(left.chunks(content::CHUNK_SIZE)) {
                    tx.put(Table::Content, &keys::hashed_upload_chunk(&left_hash.0, &abandoned, index), chunk)?;
                }
                tx.put(Table::Meta, &keys::upload_marker(&abandoned), &records::encode(&marker))
            })
            .unwrap();
        assert_eq!(store.collect_uploads(std::time::Duration::from_secs(3600)).unwrap(), 1);
        assert_eq!(content_keys(&store, left_hash), (None, 0));
        assert_eq!(upload_markers(&store), 0);

        store.delete_space(space.id, None).unwrap();
        assert_eq!(store.scan_prefix(Table::Content, &hash.0).count(), 0, "freed with its last version");
    }

    fn receipts_are_pruned_by_age(engine: Engine) {
        let home = Home::new(engine);
        let store = home.open();
        let old = Receipt { fingerprint: [1; 32], response: vec![1], created_ms: 1_000 };
        let new = Receipt { fingerprint: [2; 32], response: vec![2], created_ms: 5_000 };
        store.put_receipt(&[1; 32], &old).unwrap();
        store.put_receipt(&[2; 32], &new).unwrap();
        assert_eq!(store.prune_receipts(2_000).unwrap(), 1);
        assert!(store.receipt(&[1; 32]).unwrap().is_none());
        assert_eq!(store.receipt(&[2; 32]).unwrap(), Some(new));
    }

    fn outbox_jobs_become_visible_in_sequence_order(engine: Engine) {
        // Delivery reads the outbox from the last sequence it passed: a job that
        // appears below that point is never delivered. Reindexing a space while
        // another space commits must never let that happen.
        let home = Home::new(engine);
        let store = home.open();
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

    fn the_outbox_head_survives_pruning_everything(engine: Engine) {
        let home = Home::new(engine);
        let store = home.open();
        let space =
            new_space(&store, "s");
        overwrite(&store, space.id, "/a.txt", b"a");
        let head = store.outbox_head().unwrap();
        assert!(head > 0);
        store.prune_outbox(head, None).unwrap();
        assert_eq!(store.outbox_bounds().unwrap(), None);
        assert_eq!(store.outbox_head().unwrap(), head, "the highest sequence handed out does not go back");
    }

    fn a_claim_holds_until_its_deadline_then_is_taken_over(engine: Engine) {
        use crate::store::claims::Claimed;
        let home = Home::new(engine);
        let store = home.open();
        let (scope, a, b) = ([7; 32], [1; 16], [2; 16]);
        assert_eq!(store.claim(&scope, a, 1_000, 31_000).unwrap(), Claimed::Taken);
        assert_eq!(store.claim(&scope, b, 31_000, 61_000).unwrap(), Claimed::Busy, "live through its deadline");
        assert_eq!(store.claim(&scope, a, 2_000, 32_000).unwrap(), Claimed::Busy, "for its owner too");

        // Its front died: once the deadline passed, another front takes it.
        assert_eq!(store.claim(&scope, b, 31_001, 61_001).unwrap(), Claimed::Taken);
        assert!(!store.renew_claim(&scope, a, 90_000).unwrap(), "the old owner lost it");
        store.release_claim(&scope, a, false).unwrap();
        assert_eq!(store.claim(&scope, a, 40_000, 70_000).unwrap(), Claimed::Busy, "the old owner cannot release it");
        assert!(store.renew_claim(&scope, b, 100_000).unwrap());
        assert_eq!(store.claim(&scope, a, 90_000, 120_000).unwrap(), Claimed::Busy, "renewed past its first deadline");

        // Expired claims nobody retried are pruned; live ones stay.
        let abandoned = [8; 32];
        assert_eq!(store.claim(&abandoned, a, 0, 10).unwrap(), Claimed::Taken);
        assert_eq!(store.prune_claims(50_000).unwrap(), 1);
        assert_eq!(store.claim(&abandoned, b, 50_000, 80_000).unwrap(), Claimed::Taken, "pruned");
        assert_eq!(store.claim(&scope, a, 50_000, 80_000).unwrap(), Claimed::Busy, "kept");

        // Released, the scope is free; once its receipt exists, nothing is claimed.
        store.release_claim(&scope, b, true).unwrap();
        assert_eq!(store.claim(&scope, a, 50_000, 80_000).unwrap(), Claimed::Taken);
        store.release_claim(&scope, a, false).unwrap();
        let receipt = Receipt { fingerprint: [3; 32], response: vec![4], created_ms: 50_000 };
        store.put_receipt(&scope, &receipt).unwrap();
        assert_eq!(store.claim(&scope, b, 60_000, 90_000).unwrap(), Claimed::Done(receipt));
        assert_eq!(store.claim(&scope, a, 60_000, 90_000).unwrap(), Claimed::Done(store.receipt(&scope).unwrap().unwrap()));
    }

    fn session_reads_expire_after_the_idle_time(engine: Engine) {
        use crate::sessions::Sessions;
        let home = Home::new(engine);
        let store = home.open();
        let idle = std::time::Duration::from_millis(400);
        let sessions = Sessions::new(100, idle);
        let (read, fresh) = (NodeId::generate(), NodeId::generate());
        sessions.saw(&store, "s", read, 3).unwrap();
        assert_eq!(sessions.seen(&store, "s", read).unwrap(), Some(3));
        assert_eq!(sessions.seen(&store, "t", read).unwrap(), None, "another session read nothing");
        if store.shared() {
            // Every front on the database sees the read.
            let other_front = home.open();
            assert_eq!(Sessions::new(100, idle).seen(&other_front, "s", read).unwrap(), Some(3));
        }
        std::thread::sleep(idle + std::time::Duration::from_millis(100));
        sessions.saw(&store, "s", fresh, 1).unwrap();
        assert_eq!(sessions.seen(&store, "s", read).unwrap(), None, "expired");
        assert_eq!(sessions.seen(&store, "s", fresh).unwrap(), Some(1));
        if store.shared() {
            // Expired records are pruned; fresh ones stay.
            assert!(store.session_read("s", read).unwrap().is_some());
            assert_eq!(store.prune_session_reads(crate::store::records::now_ms()).unwrap(), 1);
            assert_eq!(store.session_read("s", read).unwrap(), None);
            assert_eq!(store.session_read("s", fresh).unwrap().map(|r| r.version), Some(1));
        }
    }
}

/// Forks and reverts, on both engines.
mod workflows {
    use super::*;

    /// Every live path of `space` as of `revision` (latest when `None`), with
    /// what a file holds: (path, kind, bytes).
    fn tree_at(store: &Store, space: SpaceId, revision: Option<u64>) -> Vec<(String, Kind, Vec<u8>)> {
        try_tree_at(store, space, revision).unwrap()
    }

    /// [`tree_at`], or the error reading it failed with.
    fn try_tree_at(store: &Store, space: SpaceId, revision: Option<u64>) -> Result<Vec<(String, Kind, Vec<u8>)>> {
        let revision = revision.unwrap_or_else(|| store.space(space).unwrap().unwrap().revision);
        let mut out = Vec::new();
        snapshot::walk(store, space, &SpacePath::root(), revision, 3, |entries| {
            for (path, entry) in entries {
                let bytes = if entry.is_dir() { Vec::new() } else { store.content(entry.hash)? };
                out.push((path.to_string(), entry.kind, bytes));
            }
            Ok(())
        })?;
        Ok(out)
    }

    /// References held on the content with this hash.
    fn content_refs(store: &Store, hash: Hash) -> u64 {
        let raw = store.get(Table::Content, &keys::blob_meta(&hash.0)).unwrap().expect("content is stored");
        decode::<records::BlobMeta>(&raw).unwrap().refs
    }

    /// The revisions of a space's index jobs in outbox order, which must
    /// never go back.
    fn fork_revisions_in_outbox_order(store: &Store, space: SpaceId) -> Vec<u64> {
        let jobs = store.outbox_after(0, usize::MAX).unwrap();
        let revisions: Vec<u64> =
            jobs.into_iter().filter(|(_, job)| job.space == space).map(|(_, job)| job.revision).collect();
        assert!(revisions.windows(2).all(|pair| pair[0] <= pair[1]), "jobs went back: {revisions:?}");
        revisions
    }

    fn fork_of(store: &Store, source: SpaceId, at_revision: u64, name: &str) -> Result<SpaceRecord> {
        let new = NewFork { source, at_revision, name: name.into(), owner: "forker".into() };
        store.fork_space(&new, None)
    }

    on_both_engines! {
        fn the_jobs_of_a_small_fork_come_before_those_of_its_first_change(engine: Engine) {
            let home = Home::new(engine);
            let store = home.open();
            let source =
                new_space(&store, "s");
            for i in 0..3 {
                overwrite(&store, source.id, &format!("/f{i}.txt"), b"source\n");
            }
            let at = store.space(source.id).unwrap().unwrap().revision;
            let fork = fork_of(&store, source.id, at, "f").unwrap();
            // The fork's jobs wait in the queue; the next commits must not
            // overtake them, in the fork or elsewhere.
            overwrite(&store, source.id, "/f0.txt", b"source again\n");
            overwrite(&store, fork.id, "/f1.txt", b"forked\n");
            let revisions = fork_revisions_in_outbox_order(&store, fork.id);
            assert_eq!((revisions.first(), revisions.last()), (Some(&1), Some(&2)), "{revisions:?}");
        }

        fn a_fork_holds_the_source_as_of_its_revision_and_shares_its_content(engine: Engine) {
            let home = Home::new(engine);
            let store = home.open();
            let source =
                new_space(&store, "s");
            // More paths than a page of the fork holds.
            for i in 0..2_100 {
                overwrite(&store, source.id, &format!("/src/m{}/f{i}.txt", i % 7), format!("file {}\n", i % 50).as_bytes());
            }
            overwrite(&store, source.id, "/a.txt", b"old\n");
            let at = store.space(source.id).unwrap().unwrap().revision;
            overwrite(&store, source.id, "/a.txt", b"new\n");
            overwrite(&store, source.id, "/later.txt", b"later\n");
            let old = Hash::of(b"old\n");
            let chunks_before = store.scan_prefix(Table::Content, &[]).count();

            let fork = fork_of(&store, source.id, at, "f").unwrap();
            assert_eq!(fork.revision, 1);
            assert_eq!(fork.forked_from, Some(ForkOrigin { space: source.id, revision: at }));
            assert_eq!(fork.access, vec![("forker".to_owned(), Role::Owner)]);
            assert_eq!(fork.quota, source.quota);
            let expected = tree_at(&store, source.id, Some(at));
            assert_eq!(tree_at(&store, fork.id, None), expected, "the fork is the source as of its revision");
            assert_eq!(fork.usage.files, expected.iter().filter(|(_, kind, _)| *kind == Kind::File).count() as u64);
            assert_eq!(store.space(fork.id).unwrap().unwrap(), fork);
            assert_eq!(store.space_by_name("f").unwrap().unwrap().id, fork.id);
            // New nodes, history from version 1, and no new content.
            let a = store.entry(fork.id, &path("/a.txt"), None).unwrap().unwrap();
            assert_eq!(a.version, 1);
            assert_ne!(a.node, store.entry(source.id, &path("/a.txt"), None).unwrap().unwrap().node);
            let v1 = store.version(fork.id, a.node, 1).unwrap().unwrap();
            assert_eq!((v1.operation.as_str(), v1.principal.as_str(), v1.revision), ("fork", "forker", 1));
            assert_eq!(content_refs(&store, old), 2, "the source's version 1 and the fork's");
            assert_eq!(store.scan_prefix(Table::Content, &[]).count(), chunks_before, "content is shared, not copied");
            assert!(store.scan_prefix(Table::Meta, keys::PENDING_FORKS).next().is_none(), "nothing left pending");
            let log = store.revisions(fork.id, 0, 10).unwrap();
            assert_eq!(log.len(), 1);
            assert_eq!(log[0].1.changes.len(), expected.len() + 1, "every path, the root included, was created");

            // The two diverge, and the fork outlives its source.
            overwrite(&store, fork.id, "/a.txt", b"forked\n");
            assert_eq!(fork_revisions_in_outbox_order(&store, fork.id).last(), Some(&2));
            assert_eq!(store.content(store.entry(source.id, &path("/a.txt"), None).unwrap().unwrap().hash).unwrap(), b"new\n");
            store.compact(source.id, "p", 0).unwrap();
            store.delete_space(source.id, None).unwrap();
            assert_eq!(content_refs(&store, old), 1, "the fork's version 1 keeps the old content");
            assert_eq!(store.content(old).unwrap(), b"old\n");
            assert_eq!(tree_at(&store, fork.id, Some(1)), expected);
        }

        fn a_node_removed_for_good_leaves_no_state_at_any_path_it_had(engine: Engine) {
            let home = Home::new(engine);
            let store = home.open();
            let space =
                new_space(&store, "s");
            let revision = || store.space(space.id).unwrap().unwrap().revision;
            let moved = |from: &str, to: &str| {
                store.mutate(space.id, "p", true, |store, c| c.relocate(store, &path(from), &path(to), ChangeKind::Moved))
            };
            overwrite(&store, space.id, "/keep.txt", b"kept\n");
            // /a.txt: first a file that is trashed when another replaces it.
            overwrite(&store, space.id, "/a.txt", b"replaced\n");
            let replaced = store.entry(space.id, &path("/a.txt"), None).unwrap().unwrap();
            overwrite(&store, space.id, "/b.txt", b"removed, one\n");
            overwrite(&store, space.id, "/b.txt", b"removed, two\n");
            store
                .mutate(space.id, "p", true, |store, c| {
                    c.trash(store, &path("/a.txt"))?;
                    c.relocate(store, &path("/b.txt"), &path("/a.txt"), ChangeKind::Moved)
                })
                .unwrap();
            let replacing = revision();
            moved("/a.txt", "/c.txt").unwrap();
            let before = revision();
            store.mutate(space.id, "p", true, |store, c| c.remove(store, &path("/c.txt"))).unwrap();

            // Every past revision reads whole, without the removed node.
            for at in 1..=revision() {
                let tree = tree_at(&store, space.id, Some(at));
                assert!(tree.iter().all(|(_, _, bytes)| !bytes.starts_with(b"removed")), "revision {at}: {tree:?}");
            }
            // Where it replaced a file, that file does not show through.
            assert_eq!(store.entry(space.id, &path("/a.txt"), Some(replacing)).unwrap(), None);
            assert_eq!(store.entry(space.id, &path("/a.txt"), Some(replacing - 1)).unwrap(), Some(replaced));
            assert_eq!(store.entry(space.id, &path("/b.txt"), Some(replacing - 1)).unwrap(), None);
            assert_eq!(store.entry(space.id, &path("/c.txt"), Some(before)).unwrap(), None);
            let now: Vec<String> = tree_at(&store, space.id, None).into_iter().map(|(p, ..)| p).collect();
            assert!(now.contains(&"/keep.txt".to_owned()), "{now:?}");
            assert!(!now.iter().any(|p| ["/a.txt", "/b.txt", "/c.txt"].contains(&p.as_str())), "{now:?}");

            // Moved within one commit, then removed: the path it left is clean too.
            overwrite(&store, space.id, "/d.txt", b"removed, three\n");
            let written = revision();
            store
                .mutate(space.id, "p", true, |store, c| {
                    c.relocate(store, &path("/d.txt"), &path("/e.txt"), ChangeKind::Moved)?;
                    c.remove(store, &path("/e.txt"))
                })
                .unwrap();
            assert_eq!(store.entry(space.id, &path("/d.txt"), Some(written)).unwrap(), None);
            tree_at(&store, space.id, Some(written));
        }

        fn a_fork_refuses_a_compacted_revision_and_a_taken_name(engine: Engine) {
            let home = Home::new(engine);
            let store = home.open();
            let source =
                new_space(&store, "s");
            overwrite(&store, source.id, "/a.txt", b"1");
            overwrite(&store, source.id, "/a.txt", b"2");
            store.compact(source.id, "p", 2).unwrap();
            assert_eq!(fork_of(&store, source.id, 1, "f").unwrap_err().reason, Reason::SnapshotExpired);
            assert_eq!(fork_of(&store, source.id, 99, "f").unwrap_err().reason, Reason::InvalidArgument);
            assert_eq!(fork_of(&store, source.id, 0, "s").unwrap_err().reason, Reason::AlreadyExists);
            assert_eq!(fork_of(&store, source.id, 0, "sp_x").unwrap_err().reason, Reason::InvalidArgument);
            assert!(store.space_by_name("f").unwrap().is_none());
            let fork = fork_of(&store, source.id, 2, "f").unwrap();
            assert_eq!(tree_at(&store, fork.id, None), tree_at(&store, source.id, Some(2)));
        }

        fn a_fork_stopped_before_it_was_published_is_purged(engine: Engine) {
            let home = Home::new(engine);
            let store = home.open();
            let source =
                new_space(&store, "s");
            overwrite(&store, source.id, "/a.txt", b"shared");
            let hash = Hash::of(b"shared");
            let new = NewFork { source: source.id, at_revision: 0, name: "f".into(), owner: "p".into() };
            let revision = store.space(source.id).unwrap().unwrap().revision;
            let fork = SpaceId::generate();
            store.copy_tree(&new, &source, revision, fork).unwrap();
            assert_eq!(content_refs(&store, hash), 2, "the pages hold their references");
            assert_eq!(store.collect_forks(std::time::Duration::from_secs(3600)).unwrap(), 0, "recent: it may be running");
            assert_eq!(store.collect_forks(std::time::Duration::ZERO).unwrap(), 1);
            assert_eq!(content_refs(&store, hash), 1);
            assert!(store.space(fork).unwrap().is_none());
            for table in [Table::Current, Table::History, Table::Versions] {
                assert!(store.scan_prefix(table, &fork.to_bytes()).next().is_none(), "{table:?} is purged");
            }
            assert!(store.scan_prefix(Table::Meta, keys::PENDING_FORKS).next().is_none());
        }
    }

    /// One step of a random history of the subtree `/w` (and of `/o`,
    /// outside it).
    #[derive(Debug, Clone)]
    enum Step {
        Write { path: usize, content: usize, executable: bool },
        Trash { path: usize },
        Move { from: usize, to: usize },
        Remove { path: usize },
        Restore { path: usize },
    }

    const STEP_PATHS: [&str; 9] = ["/w/a", "/w/b", "/w/d", "/w/d/x", "/w/d/y", "/w/e/x", "/w/e", "/o/z", "/o/d"];
    const STEP_CONTENTS: [&[u8]; 3] = [b"one\n", b"two\n", b"\0bin"];

    fn step() -> impl Strategy<Value = Step> {
        let path = 0..STEP_PATHS.len();
        prop_oneof![
            5 => (path.clone(), 0..STEP_CONTENTS.len(), any::<bool>())
                .prop_map(|(path, content, executable)| Step::Write { path, content, executable }),
            2 => path.clone().prop_map(|path| Step::Trash { path }),
            3 => (path.clone(), path.clone()).prop_map(|(from, to)| Step::Move { from, to }),
            1 => path.clone().prop_map(|path| Step::Remove { path }),
            1 => path.prop_map(|path| Step::Restore { path }),
        ]
    }

    /// Takes one step; a step the tree refuses (a missing path, a name in
    /// use) changes nothing.
    fn take(store: &Store, space: SpaceId, step: &Step) {
        let at = |i: usize| path(STEP_PATHS[i]);
        let _ = match step {
            Step::Write { path: i, content, executable } => store
                .write(WriteOp {
                    space,
                    path: at(*i),
                    body: WriteBody::Bytes(STEP_CONTENTS[*content].to_vec()),
                    mode: WriteMode::Overwrite,
                    expected_version: None,
                    operation: "write",
                    executable: Some(*executable),
                    actor: Actor::default(),
                    receipt: None,
                    session: None,
                })
                .map(drop),
            Step::Trash { path: i } => store.mutate(space, "p", true, |store, c| c.trash(store, &at(*i))).map(drop),
            Step::Remove { path: i } => store.mutate(space, "p", true, |store, c| c.remove(store, &at(*i))).map(drop),
            Step::Move { from, to } => store
                .mutate(space, "p", true, |store, c| {
                    c.ensure_parents(store, &at(*to))?;
                    c.relocate(store, &at(*from), &at(*to), ChangeKind::Moved)
                })
                .map(drop),
            Step::Restore { path: i } => match store.trashed_at(space, &at(*i)) {
                Ok(Some(node)) => store.mutate(space, "p", true, |store, c| c.restore(store, node)).map(drop),
                other => other.map(drop),
            },
        };
    }

    /// The subtree at `root` of a tree listing.
    fn below(tree: Vec<(String, Kind, Vec<u8>)>, root: &str) -> Vec<(String, Kind, Vec<u8>)> {
        let root = path(root);
        tree.into_iter().filter(|(p, ..)| path(p).starts_with(&root)).collect()
    }

    /// Executable bits of the files of `/w` now.
    fn executables(
        store: &Store,
        space: SpaceId,
        tree: &[(String, Kind, Vec<u8>)],
        revision: Option<u64>,
    ) -> Vec<bool> {
        tree.iter()
            .filter(|(_, kind, _)| *kind == Kind::File)
            .map(|(p, ..)| store.entry(space, &path(p), revision).unwrap().unwrap().executable)
            .collect()
    }

    fn reverts_to(engine: Engine, steps: Vec<Step>, back: usize) -> Result<(), TestCaseError> {
        let home = Home::new(engine);
        let store = home.open();
        let space = new_space(&store, "s");
        let mut revisions = vec![space.revision];
        for step in &steps {
            take(&store, space.id, step);
            revisions.push(store.space(space.id).unwrap().unwrap().revision);
        }
        let to = revisions[back % revisions.len()];
        // Every past revision reads whole: a node removed for good left no
        // state behind, at any path it had.
        let then = try_tree_at(&store, space.id, Some(to)).map_err(|e| TestCaseError::fail(format!("{e}")))?;
        let outside = below(tree_at(&store, space.id, None), "/o");
        let plan = |apply: bool| {
            store.mutate(space.id, "p", apply, |store, commit| commit.revert(store, &path("/w"), to, &Actor::default()))
        };
        let (previewed, _) = plan(false).map_err(|e| TestCaseError::fail(format!("{e}")))?;
        let (applied, _) = plan(true).unwrap();
        let key = |changes: &[Reverted]| -> Vec<_> {
            changes.iter().map(|c| (c.kind, c.path.clone(), c.old_path.clone(), c.from_version, c.to_version)).collect()
        };
        prop_assert_eq!(key(&previewed), key(&applied), "a dry run lists what the revert does");
        let then = below(then, "/w");
        let now = below(tree_at(&store, space.id, None), "/w");
        prop_assert_eq!(&now, &then, "/w is what it was at revision {}", to);
        prop_assert_eq!(executables(&store, space.id, &now, None), executables(&store, space.id, &then, Some(to)));
        prop_assert_eq!(below(tree_at(&store, space.id, None), "/o"), outside, "nothing outside /w changed");
        // Reverting again changes nothing.
        let (again, _) = plan(true).unwrap();
        prop_assert!(again.is_empty(), "{again:?}");
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

        #[test]
        fn a_sled_revert_makes_the_subtree_what_it_was(steps in prop::collection::vec(step(), 1..24), back in 0usize..24) {
            reverts_to(Engine::Sled, steps, back)?;
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

        #[test]
        fn a_postgres_revert_makes_the_subtree_what_it_was(steps in prop::collection::vec(step(), 1..24), back in 0usize..24) {
            reverts_to(Engine::Postgres, steps, back)?;
        }
    }
}
