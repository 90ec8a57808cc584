//! Crash loop: client tasks over several spaces write with base versions,
//! edit, apply batches of 1–20 actions, revert files to their previous
//! version and read, every change under a unique
//! idempotency key, while a nemesis SIGKILLs the front, the worker or both
//! at random moments, or arms a fault point at a storage boundary (before
//! the transaction, after commit before the flush, after the flush before
//! the reply, around outbox delivery, around the worker's index commit and
//! before its acknowledgement) that aborts the process when reached; on
//! sled, also between a commit's journal record and its writes.
//!
//! Each task holds a path lease on its folder, taken before the first crash,
//! and every call of the task carries it; after each cycle a change there
//! without it must still be refused (leases survive crashes). Meanwhile a
//! space is forked: a fork that exists afterwards must hold its source's
//! tree as of the fork's revision, whether or not the call was answered.
//!
//! Every call is recorded as ok, failed or unknown. After each cycle the
//! unknown ones are settled by replaying their keys, then the invariants are
//! checked: reads saw the latest acknowledged bytes; each file's version
//! chain is unbroken and made of exactly the acknowledged changes (so a key
//! applied at most once, and nothing from a call that failed); each batch
//! landed whole at one revision; space revisions never go back. At the end
//! every acknowledged version is read back byte for byte and, once the
//! index has caught up, `Search` sees exactly the files of the store.
//!
//! The loop runs on both storage engines. On the database engine, whose
//! commits need no flush (so `store::after_flush` is never reached), the
//! nemesis also SIGKILLs the database (alone, or with the front) and starts
//! it again.
//!
//! `AGENTVFS_CRASH_CYCLES` sets the number of cycles (default 50; run
//! thousands by hand), `AGENTVFS_CRASH_SEED` the seed of a run to repeat.

// Tests may unwrap: a panic is the failure report.
#![allow(clippy::unwrap_used)]

mod support;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use agentvfs_front::store::{PostgresOptions, Store, StoreLimits};
use agentvfs_proto::v1 as pb;
use agentvfs_proto::v1::batch_action::Action;
use agentvfs_proto::v1::file_system_client::FileSystemClient;
use agentvfs_testdb::Cluster;
use support::{Stack, apply_batch, failpoint_binaries, read, reason, replace};
use tonic::Code;
use tonic::transport::Channel;

const SPACES: usize = 3;
const TASKS: usize = 6;
/// Files each task owns and rewrites; batches also create new ones.
const FILES: usize = 6;
/// Every file holds this word, so `Search` for it lists every file.
const MARKER: &str = "crashmarker";

/// Fault points of the front, armed in turn.
const FRONT_POINTS: [&str; 6] = [
    "store::before_commit",
    "store::journaled",
    "store::after_commit",
    "store::after_flush",
    "indexer::before_deliver",
    "indexer::after_ack",
];
/// Fault points of the worker, armed in turn.
const WORKER_POINTS: [&str; 3] = ["index::before_commit", "index::after_commit", "index::before_ack"];

/// A small deterministic generator (xorshift), so a failing run can be
/// repeated from its seed.
#[derive(Debug, Clone)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

fn space(task: usize) -> String {
    format!("s{}", task % SPACES)
}

fn file(task: usize, index: usize) -> String {
    format!("/t{task}/f{index}.txt")
}

/// File content naming the key that wrote it, with some filler; now and
/// then more than one 64 KiB content chunk.
fn content(key: &str, rng: &mut Rng) -> String {
    let lines = if rng.below(20) == 0 { 3_000 } else { rng.below(40) };
    let mut text = format!("{MARKER}\nkey {key}\n");
    for n in 0..lines {
        text.push_str(&format!("line {n} of {key}\n"));
    }
    text
}

/// What a task believes a file holds: its latest version and bytes.
#[derive(Debug, Clone)]
struct Latest {
    version: u64,
    content: String,
    /// The key named in the content's `key` line.
    key: String,
    /// The revision of the change that made this version.
    revision: u64,
    /// The version before, which a revert brings back.
    previous: Option<Box<Latest>>,
}

/// A version some call made: `key` wrote `content` to `path` at `revision`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Made {
    space: String,
    path: String,
    version: u64,
    key: String,
    revision: u64,
    content: String,
}

/// One call as sent, so that an unknown outcome can be replayed.
#[derive(Debug, Clone)]
enum Call {
    Write(pb::WriteRequest),
    Edit(pb::EditRequest),
    Batch(pb::BatchRequest),
    Revert(pb::RevertRequest),
}

/// What a call changes if it succeeds: `(path, expected new content)`.
#[derive(Debug, Clone)]
struct Planned {
    call: Call,
    key: String,
    space: String,
    changes: Vec<(String, String)>,
    /// Meant to fail (a stale base version): it must change nothing.
    stale: bool,
    /// The key the new content names, when not this call's (a revert
    /// brings back content an earlier call wrote).
    named_key: Option<String>,
}

#[derive(Debug)]
enum Outcome {
    /// The versions it made, in `changes` order, and its revision.
    Ok(Vec<u64>, u64),
    Failed(String),
    Unknown,
}

/// `message` as a call that carries `lease`.
fn carrying<T>(message: T, lease: &str) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.metadata_mut().insert("x-agentvfs-lease", lease.parse().unwrap());
    request
}

async fn send(fs: &mut FileSystemClient<Channel>, call: &Call, lease: &str) -> Outcome {
    let result = match call.clone() {
        Call::Write(request) => fs.write(carrying(request, lease)).await.map(|r| {
            let r = r.into_inner();
            Outcome::Ok(vec![r.version], r.revision)
        }),
        Call::Edit(request) => fs.edit(carrying(request, lease)).await.map(|r| {
            let r = r.into_inner();
            Outcome::Ok(vec![r.version], r.revision)
        }),
        Call::Revert(request) => fs.revert(carrying(request, lease)).await.map(|r| {
            let r = r.into_inner();
            Outcome::Ok(r.changes.iter().map(|c| c.to_version).collect(), r.revision)
        }),
        Call::Batch(request) => fs.batch(carrying(request, lease)).await.map(|r| {
            let r = r.into_inner();
            match r.failed_index {
                // Refused as a whole: nothing applied.
                Some(index) => {
                    Outcome::Failed(format!("batch action {index} failed: {:?}", r.outcomes.get(index as usize)))
                }
                None => {
                    Outcome::Ok(r.outcomes.iter().filter(|o| o.version > 0).map(|o| o.version).collect(), r.revision)
                }
            }
        }),
    };
    match result {
        Ok(outcome) => outcome,
        // The crash cut the call: it may or may not have applied.
        Err(status)
            if matches!(status.code(), Code::Unavailable | Code::Unknown | Code::Cancelled | Code::Internal) =>
        {
            Outcome::Unknown
        }
        Err(status) if status.code() == Code::FailedPrecondition || status.code() == Code::Aborted => {
            Outcome::Failed(reason(&status))
        }
        Err(status) => panic!("unexpected failure {status:?} for {call:?}"),
    }
}

/// Replays a call whose outcome is unknown. The call may still hold its
/// key on a front that died (a claim lasts that front's lease), which
/// answers IDEMPOTENCY_REQUEST_IN_PROGRESS until the claim lapses: retried,
/// as a client does, until it has an answer.
async fn settle(fs: &mut FileSystemClient<Channel>, call: &Call, lease: &str) -> Outcome {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        match send(fs, call, lease).await {
            Outcome::Failed(why) if why.contains("IDEMPOTENCY_REQUEST_IN_PROGRESS") => {
                assert!(std::time::Instant::now() < deadline, "the key stayed in progress: {why}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            outcome => return outcome,
        }
    }
}

/// One client task: owns `FILES` files in its space and knows their state.
struct Task {
    id: usize,
    space: String,
    files: Vec<Option<Latest>>,
    rng: Rng,
    /// The lease on the task's folder, carried by its every call.
    lease: String,
}

impl Task {
    /// Plans the next change: a write, an edit, a batch, or one meant to
    /// fail. `None` means a read instead.
    fn plan(&mut self, key: String) -> Option<Planned> {
        let index = self.rng.below(FILES);
        let path = file(self.id, index);
        let latest = self.files[index].clone();
        let base = latest.as_ref().map_or(0, |l| l.version);
        let roll = self.rng.below(100);
        let space = self.space.clone();
        let planned = |call, changes, stale| Planned {
            call,
            key: key.clone(),
            space: space.clone(),
            changes,
            stale,
            named_key: None,
        };
        if roll < 20 {
            return None;
        }
        if roll < 50 || latest.is_none() {
            let text = content(&key, &mut self.rng);
            let request = pb::WriteRequest {
                space: self.space.clone(),
                path: path.clone(),
                body: Some(pb::write_request::Body::Content(text.clone())),
                expected_version: Some(base),
                idempotency_key: key.clone(),
                ..Default::default()
            };
            return Some(planned(Call::Write(request), vec![(path, text)], false));
        }
        let latest = latest.unwrap_or_else(|| unreachable!());
        if roll < 70 {
            let (old, new) = (format!("key {}\n", latest.key), format!("key {key}\n"));
            let request = pb::EditRequest {
                space: self.space.clone(),
                path: path.clone(),
                base_version: Some(base),
                edits: vec![replace(&old, &new)],
                idempotency_key: key.clone(),
                ..Default::default()
            };
            return Some(planned(Call::Edit(request), vec![(path, latest.content.replace(&old, &new))], false));
        }
        if roll < 85
            && let Some(previous) = &latest.previous
        {
            // Back to the version before: its content, named by its key.
            let request = pb::RevertRequest {
                space: self.space.clone(),
                path: path.clone(),
                to_revision: previous.revision,
                idempotency_key: key.clone(),
                ..Default::default()
            };
            let changes = vec![(path, previous.content.clone())];
            return Some(Planned {
                named_key: Some(previous.key.clone()),
                ..planned(Call::Revert(request), changes, false)
            });
        }
        if roll < 90 {
            let (actions, changes) = self.batch_actions(&key, false);
            return Some(planned(Call::Batch(apply_batch(&self.space, actions, &key)), changes, false));
        }
        // Stale: a write against an older version, or a batch whose last
        // action edits against one. Either must change nothing.
        if self.rng.below(2) == 0 {
            let request = pb::WriteRequest {
                space: self.space.clone(),
                path: path.clone(),
                body: Some(pb::write_request::Body::Content(format!("{MARKER}\nkey {key}\n"))),
                expected_version: Some(base - 1),
                idempotency_key: key.clone(),
                ..Default::default()
            };
            return Some(planned(Call::Write(request), Vec::new(), true));
        }
        let (actions, _) = self.batch_actions(&key, true);
        Some(planned(Call::Batch(apply_batch(&self.space, actions, &key)), Vec::new(), true))
    }

    /// Edits of existing files against their versions, then maybe a new
    /// folder, then creations of new files: 1–20 actions. With `stale`, the last edit names an old
    /// version.
    fn batch_actions(&mut self, key: &str, stale: bool) -> (Vec<Action>, Vec<(String, String)>) {
        let existing: Vec<usize> = (0..FILES).filter(|&i| self.files[i].is_some()).collect();
        let edits = 1 + self.rng.below(existing.len());
        let start = self.rng.below(existing.len());
        let folder = self.rng.below(2) == 0;
        let room = 20 - edits - usize::from(folder);
        let creates = if self.rng.below(8) == 0 { room } else { self.rng.below(4).min(room) };
        let (mut actions, mut changes) = (Vec::new(), Vec::new());
        for n in 0..edits {
            let index = existing[(start + n) % existing.len()];
            let latest = self.files[index].clone().unwrap_or_else(|| unreachable!());
            let (old, new) = (format!("key {}\n", latest.key), format!("key {key}\n"));
            let base = if stale && n + 1 == edits { latest.version - 1 } else { latest.version };
            actions.push(Action::Edit(pb::EditAction {
                path: file(self.id, index),
                base_version: Some(base),
                edits: vec![replace(&old, &new)],
            }));
            changes.push((file(self.id, index), latest.content.replace(&old, &new)));
        }
        let dir = if folder { format!("/t{}/{key}", self.id) } else { format!("/t{}", self.id) };
        if folder {
            let at = actions.len() - usize::from(stale);
            actions.insert(at, Action::Mkdir(pb::MkdirAction { path: dir.clone() }));
        }
        for n in 0..creates {
            let path = format!("{dir}/{key}-{n}.txt");
            let text = format!("{MARKER}\nkey {key}\ncreated {n}\n");
            // A stale edit stays last: everything before it must be undone.
            let at = actions.len() - usize::from(stale);
            actions.insert(at, Action::Create(pb::CreateAction { path: path.clone(), content: text.clone() }));
            changes.push((path, text));
        }
        (actions, changes)
    }

    /// Takes in a change that succeeded.
    fn applied(&mut self, planned: &Planned, versions: &[u64], revision: u64) {
        for ((path, text), version) in planned.changes.iter().zip(versions) {
            if let Some(index) = (0..FILES).find(|&i| file(self.id, i) == *path) {
                let previous = self.files[index].take().map(Box::new);
                self.files[index] = Some(Latest {
                    version: *version,
                    content: text.clone(),
                    key: planned.named_key.clone().unwrap_or_else(|| planned.key.clone()),
                    revision,
                    previous,
                });
            }
        }
    }
}

/// A file of the run: (space, path).
type FileKey = (String, String);

/// Everything the run learned, checked against the store.
#[derive(Default)]
struct History {
    made: Vec<Made>,
    failed: BTreeSet<String>,
    calls: usize,
    /// Per path, versions already checked (each cycle checks newer ones).
    verified: HashMap<FileKey, u64>,
    revisions: BTreeMap<String, u64>,
    /// Reverts acknowledged, and forks found published after their cycle.
    reverts: usize,
    forks: usize,
}

impl History {
    fn record(&mut self, planned: &Planned, outcome: Outcome, cycle: usize) {
        match outcome {
            Outcome::Ok(versions, revision) => {
                assert!(!planned.stale, "cycle {cycle}: {} succeeded against a stale version", planned.key);
                self.reverts += usize::from(matches!(planned.call, Call::Revert(_)));
                assert_eq!(versions.len(), planned.changes.len(), "cycle {cycle}: {}: versions made", planned.key);
                for ((path, text), version) in planned.changes.iter().zip(&versions) {
                    self.made.push(Made {
                        space: planned.space.clone(),
                        path: path.clone(),
                        version: *version,
                        key: planned.key.clone(),
                        revision,
                        content: text.clone(),
                    });
                }
            }
            Outcome::Failed(why) => {
                assert!(planned.stale, "cycle {cycle}: {} failed: {why}", planned.key);
                self.failed.insert(planned.key.clone());
            }
            Outcome::Unknown => unreachable!("settled before recording"),
        }
    }
}

/// Runs one task until `stop` or its first unknown outcome; returns the
/// calls made with their outcomes, in order.
async fn run_task(
    mut fs: FileSystemClient<Channel>,
    mut task: Task,
    cycle: usize,
    stop: Arc<AtomicBool>,
) -> (Task, Vec<(Planned, Outcome)>) {
    let mut done = Vec::new();
    for n in 0.. {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let key = format!("c{cycle}-t{}-{n}", task.id);
        let Some(planned) = task.plan(key) else {
            // A read: it must see the latest acknowledged bytes.
            let index = task.rng.below(FILES);
            match fs.read(full(read(&task.space, &file(task.id, index)))).await {
                Ok(back) => {
                    let back = back.into_inner();
                    let latest = task.files[index]
                        .as_ref()
                        .unwrap_or_else(|| panic!("cycle {cycle}: read a file never written"));
                    assert_eq!(
                        (back.version, &back.content),
                        (latest.version, &latest.content),
                        "cycle {cycle}: stale read"
                    );
                }
                Err(status) if status.code() == Code::NotFound => assert!(task.files[index].is_none()),
                Err(_) => return (task, done),
            }
            continue;
        };
        let outcome = send(&mut fs, &planned.call, &task.lease).await;
        let unknown = matches!(outcome, Outcome::Unknown);
        if let Outcome::Ok(versions, revision) = &outcome {
            task.applied(&planned, versions, *revision);
        }
        done.push((planned, outcome));
        if unknown {
            break;
        }
    }
    (task, done)
}

/// A read of the whole file (at most 3,002 lines and 66 KiB here).
fn full(request: pb::ReadRequest) -> pb::ReadRequest {
    pb::ReadRequest { limit: 5_000, max_chars: 131_072, ..request }
}

/// Waits up to `limit` for `exited`, polling.
async fn wait_exit(mut exited: impl FnMut() -> bool, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if exited() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    false
}

#[tokio::test]
async fn acknowledged_changes_survive_crashes_and_faults() {
    crash_loop(None, 1, 50).await;
}

#[tokio::test]
async fn acknowledged_changes_survive_crashes_faults_and_database_kills() {
    crash_loop(Some(Arc::new(Cluster::start())), 1, 50).await;
}

#[tokio::test]
async fn acknowledged_changes_survive_crashes_of_several_fronts_on_one_database() {
    crash_loop(Some(Arc::new(Cluster::start())), 3, 30).await;
}

/// The crash loop of the module docs, of `cycles` cycles unless
/// `AGENTVFS_CRASH_CYCLES` says otherwise; on the database engine when given
/// a database cluster of its own, which the nemesis may kill, with `fronts`
/// fronts on it: client tasks spread over them, and the nemesis kills any.
async fn crash_loop(cluster: Option<Arc<Cluster>>, fronts: usize, cycles: usize) {
    let cycles: usize = std::env::var("AGENTVFS_CRASH_CYCLES").ok().and_then(|v| v.parse().ok()).unwrap_or(cycles);
    let seed = std::env::var("AGENTVFS_CRASH_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(0x5eed_u64);
    let mut rng = Rng(seed);
    let (front_binary, worker_binary) = failpoint_binaries();
    let database = cluster.as_ref().map(|cluster| cluster.create_database());
    let front_args: Vec<&str> = match &database {
        // A restarted front takes the killed one's background work over
        // once its lease expires.
        Some(url) => vec!["--database-url", url, "--lease-seconds", "1"],
        None => Vec::new(),
    };
    let front_points: Vec<&str> = match &cluster {
        // A committed transaction is durable in the database: no journal
        // and no flush.
        Some(_) => {
            let sled_only = ["store::journaled", "store::after_flush"];
            FRONT_POINTS.iter().copied().filter(|point| !sled_only.contains(point)).collect()
        }
        None => FRONT_POINTS.to_vec(),
    };
    let mut stack = Stack::start_binaries(&front_binary, &worker_binary, &front_args).await;
    // More fronts on the same database and worker.
    let mut others = Vec::new();
    for _ in 1..fronts {
        let mut args = front_args.clone();
        args.extend(["--worker", stack.worker.addr.as_str()]);
        others.push(support::Front::start_binary(&front_binary, &args, &[]).await);
    }
    for s in 0..SPACES {
        stack.front.space(&format!("s{s}")).await;
    }
    let mut tasks = Vec::new();
    for id in 0..TASKS {
        let acquire = pb::AcquireLeaseRequest {
            space: space(id),
            path: format!("/t{id}"),
            ttl_seconds: 3600,
            ..Default::default()
        };
        let lease = stack.front.fs().await.acquire_lease(acquire).await.unwrap().into_inner().lease_id;
        tasks.push(Task {
            id,
            space: space(id),
            files: vec![None; FILES],
            rng: Rng(seed ^ ((id as u64 + 1) * 0x9e37_79b9)),
            lease,
        });
    }
    let mut history = History::default();
    let (mut front_armed, mut worker_armed) = (0, 0);
    // Armed points that fired (the process aborted at the boundary) and
    // how often.
    let mut fired: BTreeMap<&str, usize> = BTreeMap::new();

    for cycle in 0..cycles {
        // Odd cycles arm the next fault point, in turn; the rest kill.
        let armed = if cycle % 2 == 1 {
            let (point, front_side) = if cycle % 4 == 1 {
                front_armed += 1;
                (front_points[(front_armed - 1) % front_points.len()], true)
            } else {
                worker_armed += 1;
                (WORKER_POINTS[(worker_armed - 1) % WORKER_POINTS.len()], false)
            };
            // Index points pass once per delivered batch, store points once
            // per commit: far more often.
            // With several fronts, the armed one makes a share of the commits.
            let passes = if point.starts_with("store") { rng.below(30 / fronts) } else { rng.below(4) };
            let spec = format!("{point}={passes}*off->panic");

            let env = [("FAILPOINTS", spec.as_str())];
            if front_side {
                stack.front.crash_and_restart_with(&env).await;
            } else {
                stack.worker.restart_with(&env).await;
            }
            Some((front_side, point))
        } else {
            None
        };
        let mut clients = vec![stack.front.fs().await];
        for other in &others {
            clients.push(other.fs().await);
        }
        let stop = Arc::new(AtomicBool::new(false));
        let running: Vec<_> = tasks
            .drain(..)
            .map(|task| {
                let fs = clients[task.id % clients.len()].clone();
                tokio::spawn(run_task(fs, task, cycle, stop.clone()))
            })
            .collect();
        let window = Duration::from_millis(50 + rng.next() % 250);
        let fork_name = format!("fork-c{cycle}");
        // A fork of one space, started at a random moment of the window:
        // before the nemesis strikes, as it does, or after.
        let forking = {
            let (mut admin, source, name) = (stack.front.admin().await, space(cycle), fork_name.clone());
            let start = Duration::from_millis(rng.next() % (window.as_millis() as u64 + 100));
            tokio::spawn(async move {
                tokio::time::sleep(start).await;
                let request = pb::ForkSpaceRequest {
                    source,
                    name,
                    idempotency_key: format!("fork-{cycle}"),
                    ..Default::default()
                };
                admin.fork_space(request).await
            })
        };
        let patience = match armed {
            // On a database, a restarted front feeds the index once the
            // killed one's background lease (1 s) has expired.
            Some((_, point)) if !point.starts_with("store") && cluster.is_some() => Duration::from_secs(7),
            Some((_, point)) if !point.starts_with("store") => Duration::from_secs(5),
            // A store point needs its passes of commits from the armed front
            // first: a share of the traffic, slower when loops run at once.
            Some(_) => Duration::from_secs(3).max(window * 4),
            None => window * 4,
        };
        let point = armed.map_or("", |(_, point)| point);
        match armed.map(|(front_side, _)| front_side) {
            // The point aborts the process when reached; kill it if not.
            Some(true) => {
                if wait_exit(|| stack.front.exited(), patience).await {
                    *fired.entry(point).or_default() += 1;
                }
                stack.front.crash_and_restart().await;
            }
            Some(false) => {
                if wait_exit(|| stack.worker.exited(), patience).await {
                    *fired.entry(point).or_default() += 1;
                }
                stack.worker.restart().await;
            }
            None => {
                tokio::time::sleep(window).await;
                let kinds = if cluster.is_some() { 5 } else { 3 };
                match rng.below(kinds + others.len()) {
                    // Another front dies and starts again.
                    n if n >= kinds => others[n - kinds].crash_and_restart().await,
                    0 => stack.front.crash_and_restart().await,
                    1 => stack.worker.restart().await,
                    2 => {
                        stack.worker.kill();
                        stack.front.crash_and_restart().await;
                        stack.worker.restart().await;
                    }
                    // The database dies under the front, which stays up and
                    // reconnects once the database is back.
                    3 => {
                        let cluster = cluster.clone().unwrap();
                        let down = Duration::from_millis(rng.next() % 500);
                        tokio::task::spawn_blocking(move || {
                            cluster.kill();
                            std::thread::sleep(down);
                            cluster.restart();
                        })
                        .await
                        .unwrap();
                    }
                    // The database dies, then the front while it reconnects.
                    _ => {
                        let cluster = cluster.clone().unwrap();
                        tokio::task::spawn_blocking(move || {
                            cluster.kill();
                            cluster.restart();
                        })
                        .await
                        .unwrap();
                        stack.front.crash_and_restart().await;
                    }
                }
            }
        }
        stop.store(true, Ordering::Relaxed);
        let mut fs = stack.front.fs().await;
        let mut touched = BTreeSet::new();
        for handle in running {
            let (mut task, done) = handle.await.unwrap();
            for (planned, outcome) in done {
                history.calls += 1;
                // Replaying the key settles an unknown call: applied once.
                let outcome = match outcome {
                    Outcome::Unknown => {
                        let outcome = settle(&mut fs, &planned.call, &task.lease).await;
                        match &outcome {
                            Outcome::Ok(versions, revision) => task.applied(&planned, versions, *revision),
                            Outcome::Unknown => panic!("cycle {cycle}: the replay of {} failed", planned.key),
                            Outcome::Failed(_) => {}
                        }
                        outcome
                    }
                    known => known,
                };
                if matches!(outcome, Outcome::Ok(..)) || planned.stale {
                    touched.extend(planned.changes.iter().map(|(path, _)| (planned.space.clone(), path.clone())));
                }
                history.record(&planned, outcome, cycle);
            }
            tasks.push(task);
        }
        tasks.sort_by_key(|t| t.id);
        check_revisions(&stack, &mut history, cycle).await;
        check_chains(&fs, &mut history, Some(&touched), cycle).await;
        check_lease(&mut fs, &tasks[cycle % TASKS], cycle).await;
        let forked = forking.await.unwrap();
        history.forks += usize::from(check_fork(&stack, &mut fs, &fork_name, forked, cycle).await);
    }

    // Once more, every version of every file from the first, and its bytes.
    let mut fs = stack.front.fs().await;
    history.verified.clear();
    check_chains(&fs, &mut history, None, cycles).await;
    check_contents(&fs, &history.made).await;
    check_index(&stack, &mut fs, &history).await;
    // The background work moved from front to front as its holders died.
    let lease = match &database {
        Some(url) if fronts > 1 => {
            let url = url.clone();
            let generation = tokio::task::spawn_blocking(move || lease_generation(&url)).await.unwrap();
            assert!(generation >= 2, "the background lease never changed hands (generation {generation})");
            format!("background lease generation {generation}, ")
        }
        _ => String::new(),
    };
    if front_armed >= 2 * front_points.len() && worker_armed >= 2 * WORKER_POINTS.len() {
        for point in front_points.iter().chain(&WORKER_POINTS) {
            // With several fronts, the one armed may not be the one holding
            // the background lease, which delivers the index.
            if fronts > 1 && point.starts_with("indexer") {
                continue;
            }
            assert!(fired.contains_key(point), "{point} was armed twice but never reached: {fired:?}");
        }
    }
    eprintln!(
        "crash loop ({}, fronts: {fronts}): {cycles} cycles (seed {seed}), {} calls, {} versions acknowledged, {} refused as stale, \
         {} reverts acknowledged, {} of {cycles} forks published, \
         fault points armed {front_armed}× front {worker_armed}× worker, fired {fired:?}, {lease}lost 0",
        if cluster.is_some() { "database" } else { "sled" },
        history.calls,
        history.made.len(),
        history.failed.len(),
        history.reverts,
        history.forks,
    );
}

/// A change to the task's folder that does not carry its lease is refused:
/// the lease outlived every crash so far.
async fn check_lease(fs: &mut FileSystemClient<Channel>, task: &Task, cycle: usize) {
    let request = pb::WriteRequest {
        space: task.space.clone(),
        path: format!("/t{}/intruder.txt", task.id),
        body: Some(pb::write_request::Body::Content(format!("{MARKER}\nintruder\n"))),
        ..Default::default()
    };
    let status = fs.write(request).await.expect_err("a write without the lease");
    assert_eq!(reason(&status), "LEASE_HELD", "cycle {cycle}: {status:?}");
}

/// The entries of `space` as of `at_revision` (0: latest): path, kind and
/// content hash.
async fn listing(fs: &mut FileSystemClient<Channel>, space: &str, at_revision: u64) -> Vec<(String, i32, String)> {
    support::tree(fs, space, at_revision).await.into_iter().map(|e| (e.path, e.kind, e.hash)).collect()
}

/// A fork made during the cycle exists if its call was answered, and then
/// (answered or not) holds its source's tree as of its revision; it is then
/// deleted. Returns whether it existed.
async fn check_fork(
    stack: &Stack,
    fs: &mut FileSystemClient<Channel>,
    name: &str,
    forked: Result<tonic::Response<pb::Space>, tonic::Status>,
    cycle: usize,
) -> bool {
    let mut admin = stack.front.admin().await;
    let fork = match admin.get_space(pb::GetSpaceRequest { space: name.into() }).await {
        Ok(fork) => fork.into_inner(),
        Err(status) => {
            assert_eq!(status.code(), Code::NotFound, "cycle {cycle}: {status:?}");
            assert!(forked.is_err(), "cycle {cycle}: the fork {name} was acknowledged but is gone");
            return false;
        }
    };
    if let Ok(answered) = &forked {
        assert_eq!(answered.get_ref().id, fork.id, "cycle {cycle}");
    }
    let origin = fork.forked_from.clone().unwrap();
    let source = listing(fs, &space(cycle), origin.revision).await;
    assert_eq!(listing(fs, name, 0).await, source, "cycle {cycle}: the fork {name} differs from its source");
    let delete = pb::DeleteSpaceRequest { space: name.into(), confirm: name.into(), ..Default::default() };
    admin.delete_space(delete).await.unwrap();
    true
}

/// The generation of the background lease in the store at `url`: it grows
/// by one whenever the lease changes hands.
fn lease_generation(url: &str) -> u64 {
    let options = PostgresOptions {
        url: url.to_owned(),
        pool_size: 1,
        connect_timeout: Duration::from_secs(10),
        statement_timeout: Duration::from_secs(30),
    };
    let store = Store::connect(&options, StoreLimits::default()).unwrap();
    store.lease().unwrap().map_or(0, |lease| lease.generation)
}

/// Every version `made` holds its bytes, read back over a few calls at a
/// time.
async fn check_contents(fs: &FileSystemClient<Channel>, made: &[Made]) {
    const READERS: usize = 8;
    let mut readers = tokio::task::JoinSet::new();
    for share in made.chunks(made.len().div_ceil(READERS).max(1)) {
        let (mut fs, share) = (fs.clone(), share.to_vec());
        readers.spawn(async move {
            for made in share {
                let request = pb::ReadRequest { version: made.version, ..full(read(&made.space, &made.path)) };
                let back = fs.read(request).await.unwrap().into_inner();
                assert_eq!(back.content, made.content, "{}: {}@{}", made.key, made.path, made.version);
            }
        });
    }
    while let Some(done) = readers.join_next().await {
        if let Err(failed) = done {
            std::panic::resume_unwind(failed.into_panic());
        }
    }
}

/// Space revisions never go back.
async fn check_revisions(stack: &Stack, history: &mut History, cycle: usize) {
    let mut admin = stack.front.admin().await;
    for s in 0..SPACES {
        let name = format!("s{s}");
        let revision =
            admin.get_space(pb::GetSpaceRequest { space: name.clone() }).await.unwrap().into_inner().revision;
        let last = history.revisions.entry(name.clone()).or_default();
        assert!(revision >= *last, "cycle {cycle}: {name} went back from revision {last} to {revision}");
        *last = revision;
    }
}

/// Version chains have no gaps; every version comes from exactly one
/// acknowledged change (by its key, at its revision), every acknowledged
/// change made one, and no key that failed appears. Checks the versions
/// above those already verified of each path in `only` (all if `None`).
async fn check_chains(
    fs: &FileSystemClient<Channel>,
    history: &mut History,
    only: Option<&BTreeSet<FileKey>>,
    cycle: usize,
) {
    // (space, path) -> (version, key, revision) of each change made there.
    let mut by_path: BTreeMap<FileKey, Vec<(u64, String, u64)>> = BTreeMap::new();
    for made in &history.made {
        by_path.entry((made.space.clone(), made.path.clone())).or_default().push((
            made.version,
            made.key.clone(),
            made.revision,
        ));
    }
    if let Some(only) = only {
        by_path.retain(|path, _| only.contains(path));
    }
    // The versions above those checked, fetched for every path at once.
    let mut listings = tokio::task::JoinSet::new();
    for (space, path) in by_path.keys().cloned() {
        let floor = history.verified.get(&(space.clone(), path.clone())).copied().unwrap_or(0);
        let fs = fs.clone();
        listings.spawn(async move {
            let stored = versions_above(fs, &space, &path, floor).await;
            ((space, path), stored)
        });
    }
    let mut listed = BTreeMap::new();
    while let Some(done) = listings.join_next().await {
        let (file, stored) = done.unwrap_or_else(|failed| std::panic::resume_unwind(failed.into_panic()));
        listed.insert(file, stored);
    }
    for ((space, path), expected) in by_path {
        let floor = history.verified.get(&(space.clone(), path.clone())).copied().unwrap_or(0);
        let mut expected: Vec<_> = expected.into_iter().filter(|(v, _, _)| *v > floor).collect();
        expected.sort();
        let mut stored = listed.remove(&(space.clone(), path.clone())).unwrap_or_default();
        stored.sort();
        for (_, key, _) in &stored {
            assert!(!history.failed.contains(key), "cycle {cycle}: {space}:{path} has a version from failed {key}");
        }
        let numbers: Vec<u64> = stored.iter().map(|(v, _, _)| *v).collect();
        let contiguous: Vec<u64> = (floor + 1..=floor + numbers.len() as u64).collect();
        assert_eq!(numbers, contiguous, "cycle {cycle}: {space}:{path} has gaps");
        assert_eq!(stored, expected, "cycle {cycle}: {space}:{path}: versions and acknowledged changes differ");
        history.verified.insert((space, path), floor + numbers.len() as u64);
    }
}

/// (version, idempotency key, revision) of each version of `path` above
/// `floor`, newest pages first: stops at the first page that reaches `floor`.
async fn versions_above(
    mut fs: FileSystemClient<Channel>,
    space: &str,
    path: &str,
    floor: u64,
) -> Vec<(u64, String, u64)> {
    let mut stored = Vec::new();
    let mut token = String::new();
    loop {
        let request = pb::ListVersionsRequest {
            space: space.to_owned(),
            path: path.to_owned(),
            page_size: 200,
            page_token: token,
            ..Default::default()
        };
        let page = fs.list_versions(request).await.unwrap().into_inner();
        let reached = page.versions.iter().any(|v| v.version <= floor);
        stored.extend(
            page.versions.into_iter().filter(|v| v.version > floor).map(|v| (v.version, v.idempotency_key, v.revision)),
        );
        if reached || page.next_page_token.is_empty() {
            return stored;
        }
        token = page.next_page_token;
    }
}

/// Once the index has caught up with each space, `Search` for the word
/// every file holds lists exactly the store's files at their latest
/// versions.
async fn check_index(stack: &Stack, fs: &mut FileSystemClient<Channel>, history: &History) {
    let mut latest: BTreeMap<FileKey, u64> = BTreeMap::new();
    for made in &history.made {
        let entry = latest.entry((made.space.clone(), made.path.clone())).or_default();
        *entry = (*entry).max(made.version);
    }
    let mut admin = stack.front.admin().await;
    for s in 0..SPACES {
        let name = format!("s{s}");
        let revision =
            admin.get_space(pb::GetSpaceRequest { space: name.clone() }).await.unwrap().into_inner().revision;
        let expected: BTreeMap<String, u64> =
            latest.iter().filter(|((space, _), _)| *space == name).map(|((_, path), v)| (path.clone(), *v)).collect();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let (mut seen, mut token, mut index_revision) = (BTreeMap::new(), String::new(), u64::MAX);
            loop {
                let request = pb::SearchRequest {
                    space: name.clone(),
                    query: MARKER.into(),
                    page_size: 100,
                    page_token: token,
                    ..Default::default()
                };
                let Ok(page) = fs.search(request).await else { break };
                let page = page.into_inner();
                index_revision = index_revision.min(page.index_revision);
                seen.extend(page.hits.into_iter().map(|h| (h.path, h.version)));
                token = page.next_page_token;
                if token.is_empty() {
                    break;
                }
            }
            if index_revision >= revision && index_revision != u64::MAX {
                assert_eq!(seen, expected, "{name}: the index differs from the store at revision {revision}");
                break;
            }
            assert!(Instant::now() < deadline, "{name}: the index did not reach revision {revision}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}
