//! End-to-end RPC throughput of the real `agentvfs-front` process over
//! loopback gRPC.
//!
//! Measures:
//! 1. Durable `Write` rate of ~200-byte text files at concurrency 1, 16 and 64
//!    under each `--durability` mode: `group` (the default), `per-write` (one
//!    flush per write) and `off` (no durability), and the ratios group/per-write
//!    and group/off at concurrency 64.
//! 2. Small `Read` rate at concurrency 64 against a no-op RPC served by the same
//!    process (`grpc.health.v1.Health/Check`), and their ratio; with section 1,
//!    also group-commit writes at concurrency 64 against that no-op.
//! 3. What idempotency keys and bearer-token auth add to group-commit `Write`
//!    at concurrency 16 and 64: a `--dev` baseline without keys, the same with
//!    a unique `idempotency_key` on every write, and a `--tokens` front where
//!    every call carries `authorization: Bearer`, each on a fresh front.
//! 4. Latency of sequential `Edit`s of one line in a ~5 MiB text file, next to
//!    sequential tail `Read`s (10 lines) and whole-file `Write`s of that file.
//! 5. Time of one `Batch` that copies, renames or trashes a folder of
//!    [`SUBTREE_FILES`] files (each action is one commit under the space's lock).
//! 6. The database engine beside sled, in the same run: a front on sled and a
//!    front on a fresh database of a throwaway PostgreSQL cluster
//!    (`agentvfs-testdb`, sharing the machine's cores), both
//!    `--durability group`, take turns on durable `Write`s of ~200-byte files
//!    at concurrency 1, 16 and 64, 200-byte `Read`s at concurrency 64 and
//!    [`EDIT_CALLS`] sequential one-line `Edit`s of a ~100 KiB text file.
//!    Each database figure is printed with sled's and their ratio, against
//!    the goals: writes at c=64 at least 0.8x sled, reads at least 0.5x.
//!    Beside it, the transactions the database committed
//!    (`pg_stat_database.xact_commit`) per second and per call. Then the
//!    same writes and reads at c=64 spread evenly over two fronts on that
//!    database, against one front and sled (on two cores a second front
//!    adds no CPU: the figure is the cost of sharing the database).
//! 7. The same 200-byte `Read` at concurrency 64 over gRPC, over HTTP/1.1
//!    and over HTTP/2 (`--http-listen`, proto3 JSON in and out), one front,
//!    against the goal of HTTP at least 0.6x gRPC.
//! 8. The round trip of one MCP `read` tool call over the front's `/mcp`
//!    (Streamable HTTP) against the same over `agentvfs mcp` on stdio, the
//!    bridge that calls the front over gRPC: 500 sequential calls each.
//! 9. `ApplyPatch` of a unified diff of up to 200 text files from this
//!    repository's own history (its last 200 commits), on a space holding
//!    the older files, against `git apply` of the same diff on a directory
//!    holding them: median of 5 runs each, and their ratio.
//! 10. `Admin.ForkSpace` of a space of [`FORK_FILES`] files of 10 KiB each
//!     (100 MB of content): its time and how much the store grew, against
//!     one `Batch` copy of the same tree within the space (which shares
//!     content the same way) and against the content's own size. Then
//!     `Revert` of that tree after [`REVERTED_FILES`] of its files changed,
//!     against the sequential `Write`s that changed them.
//! 11. Durable `Write`s at concurrency 64 while a path lease is held
//!     elsewhere in the space, against the same without one (alternating,
//!     two windows each): the cost of checking leases on the write path.
//! 12. Reading a ~5 MiB text file (this repository's Rust sources, repeated)
//!     from end to end in `Read` pages of 131,072 UTF-16 units, with tokens
//!     counted (`max_tokens` above what a page holds, so the pages are the
//!     same) and with a budget of 8,192 tokens a page, against the same
//!     reads without (and against pages of 32,768 units, about as many as
//!     the budget makes): rounds taking turns, the fastest of each, against
//!     the goal of counting costing at most 2x.
//!
//! Rate measurements run for a fixed wall time after a short warm-up and
//! report calls/s with p50/p99 latency; the file sections time a fixed
//! number of sequential calls. Figures are printed, never asserted, and also
//! written as JSON to `target/bench-rpc.json`.
//!
//! ```sh
//! cargo bench -p agentvfs-front --bench rpc             # every section
//! cargo bench -p agentvfs-front --bench rpc -- database # one section
//! ```
//!
//! Sections: `writes`, `reads`, `overhead`, `big-file`, `subtree`, `http`,
//! `mcp`, `fork`, `leases`, `tokens`, `patch` (needs this clone's git history), `database` (skipped when PostgreSQL's server does not start here;
//! Debian's `postgresql` package provides it). With
//! `AGENTVFS_BENCH_FRONT=PATH` the bench runs another build of the front (an
//! older commit's, for a before/after comparison in one script; `database`
//! needs one with `--database-url`).

#[path = "common/rss.rs"]
mod rss;

use std::future::Future;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use agentvfs_proto::v1 as pb;
use agentvfs_proto::v1::admin_client::AdminClient;
use agentvfs_proto::v1::file_system_client::FileSystemClient;
use agentvfs_testdb::Cluster;
use http_body_util::{BodyExt, Full};
use prost::bytes::Bytes;
use serde_json::{Value, json};
use tonic::metadata::MetadataValue;
use tonic::transport::Channel;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

const WARMUP: Duration = Duration::from_millis(300);
const WINDOW: Duration = Duration::from_secs(3);
const WRITE_LEVELS: [usize; 3] = [1, 16, 64];
const MODES: [&str; 3] = ["group", "per-write", "off"];
const READ_CONCURRENCY: usize = 64;
const SPACE: &str = "bench";
/// More connections than this only adds client work on a 2-core machine.
const MAX_CHANNELS: usize = 8;
const OVERHEAD_LEVELS: [usize; 2] = [16, 64];
const VARIANTS: [Variant; 3] = [Variant::Baseline, Variant::Idempotency, Variant::Auth];
/// The only token of the `--tokens` front; an admin, so it owns every space.
const BEARER: &str = "Bearer bench-admin-token-0123456789";
/// 80,000 lines of 64 characters plus `\n` is 5,200,000 bytes: as large as
/// it gets while staying under the 5 MiB (5,242,880-byte) text limit.
const BIG_LINES: usize = 80_000;
const BIG_LINE_CHARS: usize = 64;
const BIG_PATH: &str = "/big/five-mib.txt";
/// Sequential calls per kind in the 5 MiB file section.
const BIG_CALLS: usize = 30;
/// Files in the folder the subtree section copies, renames and trashes.
const SUBTREE_FILES: usize = 20_000;
/// Files in the space the `fork` section forks, and the bytes of each.
const FORK_FILES: usize = 10_000;
const FORK_FILE_BYTES: usize = 10 << 10;
/// Files of the forked tree changed, then reverted, by the `fork` section.
const REVERTED_FILES: usize = 1_000;
/// 1,575 lines of 64 characters plus `\n` is 102,375 bytes: just under
/// 100 KiB, the file the database section edits.
const EDIT_LINES: usize = 1_575;
const EDIT_PATH: &str = "/edit/hundred-kib.txt";
/// Names the two-front writes' folder, apart from the one-front runs'
/// (named by their concurrency).
const TWO_FRONTS_RUN: usize = 2_064;
/// Sequential one-line edits per engine in the database section.
const EDIT_CALLS: usize = 100;
/// Connections of the database front (the front's default).
const DATABASE_POOL: usize = 16;
/// Goals of the database engine, as a share of sled's rate in the same run.
const DATABASE_WRITE_GOAL: f64 = 0.8;
const DATABASE_READ_GOAL: f64 = 0.5;
/// Longer than PostgreSQL 15 keeps an idle backend's counts before it
/// publishes them (`PGSTAT_IDLE_INTERVAL`, ten seconds); see [`Commits`].
const STATS_SETTLE: Duration = Duration::from_millis(10_500);

/// How a front authenticates its callers.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Access {
    /// `--dev`: every call is the `dev` principal, no header needed.
    Dev,
    /// `--tokens FILE` holding [`BEARER`]'s token; every call must send it.
    Token,
}

/// One column of the write-overhead comparison.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Variant {
    Baseline,
    Idempotency,
    Auth,
}

impl Variant {
    fn name(self) -> &'static str {
        match self {
            Variant::Baseline => "baseline",
            Variant::Idempotency => "idempotency",
            Variant::Auth => "auth",
        }
    }

    fn access(self) -> Access {
        if self == Variant::Auth { Access::Token } else { Access::Dev }
    }
}

/// Adds the bench token to a request (the `--tokens` front refuses calls
/// without it).
fn bearer(mut request: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
    request.metadata_mut().insert("authorization", MetadataValue::from_static(BEARER));
    Ok(request)
}

/// A running front on its own temporary store; killed on drop.
struct Front {
    child: Child,
    addr: String,
    /// Where it serves HTTP, when started with `--http-listen`.
    http: Option<String>,
    access: Access,
    _temp: tempfile::TempDir,
}

impl Front {
    async fn start(durability: &str) -> Front {
        Front::start_with(durability, Access::Dev, &[]).await
    }

    async fn start_with(durability: &str, access: Access, extra_args: &[&str]) -> Front {
        let temp = tempfile::tempdir().expect("temp dir");
        let mut command = Command::new(front_binary());
        // Without `--rate-limit 0` the per-principal limit would shed the
        // load and the bench would measure the limiter instead.
        command
            .args(["--listen", "127.0.0.1:0", "--rate-limit", "0", "--durability", durability, "--data-dir"])
            .arg(temp.path().join("data"))
            .args(extra_args);
        match access {
            Access::Dev => {
                command.arg("--dev");
            }
            Access::Token => {
                let tokens = temp.path().join("tokens.toml");
                let token = BEARER.strip_prefix("Bearer ").expect("bearer prefix");
                std::fs::write(
                    &tokens,
                    format!("[[tokens]]\ntoken = \"{token}\"\nprincipal = \"bench\"\nadmin = true\n"),
                )
                .expect("write tokens file");
                command.arg("--tokens").arg(tokens);
            }
        }
        let mut child = command.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn agentvfs-front");
        // The front logs where it serves HTTP (`HTTP listening on ADDR`)
        // before it prints its gRPC address.
        let mut stderr = BufReader::new(child.stderr.take().expect("stderr"));
        let http = extra_args.contains(&"--http-listen").then(|| {
            let mut line = String::new();
            loop {
                line.clear();
                assert!(stderr.read_line(&mut line).expect("read stderr") > 0, "the front never served HTTP");
                if let Some((_, address)) = line.split_once("HTTP listening on ") {
                    break address.trim().to_owned();
                }
            }
        });
        std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
        let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let mut line = String::new();
        stdout.read_line(&mut line).expect("read first stdout line");
        // Keep draining so the child can never block on a full stdout pipe.
        std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));
        let addr = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .to_owned();
        let front = Front { child, addr, http, access, _temp: temp };
        front.wait_serving().await;
        front
    }

    async fn wait_serving(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(channel) = self.try_connect().await {
                let reply = HealthClient::new(channel)
                    .check(HealthCheckRequest { service: "agentvfs.v1.FileSystem".into() })
                    .await;
                if reply.is_ok_and(|r| r.into_inner().status == ServingStatus::Serving as i32) {
                    return;
                }
            }
            assert!(Instant::now() < deadline, "front did not become healthy");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn try_connect(&self) -> Result<Channel, tonic::transport::Error> {
        Channel::from_shared(format!("http://{}", self.addr)).expect("valid uri").connect().await
    }

    /// `n` independent HTTP/2 connections.
    async fn channels(&self, n: usize) -> Vec<Channel> {
        let mut channels = Vec::with_capacity(n);
        for _ in 0..n {
            channels.push(self.try_connect().await.expect("connect"));
        }
        channels
    }

    async fn create_space(&self) {
        let channel = self.try_connect().await.expect("connect");
        let quota = pb::Quota { max_bytes: 1 << 40, max_files: 100_000_000 };
        let request = pb::CreateSpaceRequest { name: SPACE.into(), quota: Some(quota), ..Default::default() };
        match self.access {
            Access::Dev => AdminClient::new(channel).create_space(request).await,
            Access::Token => AdminClient::with_interceptor(channel, bearer).create_space(request).await,
        }
        .expect("create space");
    }

    fn stop(self) {
        drop(self);
    }
}

impl Drop for Front {
    fn drop(&mut self) {
        rss::note("front", self.child.id());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One measurement: completed calls in the window and their latencies.
struct Stats {
    calls: usize,
    secs: f64,
    p50_ms: f64,
    p99_ms: f64,
}

impl Stats {
    fn rate(&self) -> f64 {
        self.calls as f64 / self.secs
    }
}

/// Runs `concurrency` tasks, each calling `call(channel, task, n)` back to
/// back, round-robin over `channels`. Calls started during the warm-up are not
/// counted; no call starts after the window ends.
async fn drive<C, F, Fut, E>(channels: &[C], concurrency: usize, call: F) -> Stats
where
    C: Clone + Send + 'static,
    F: Fn(C, usize, u64) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = Result<(), E>> + Send,
    E: std::fmt::Debug,
{
    let begin = Instant::now();
    let measured_from = begin + WARMUP;
    let deadline = measured_from + WINDOW;
    let mut tasks = Vec::with_capacity(concurrency);
    for task in 0..concurrency {
        let channel = channels[task % channels.len()].clone();
        let call = call.clone();
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            let mut n = 0u64;
            let mut last_end = measured_from;
            loop {
                let start = Instant::now();
                if start >= deadline {
                    break;
                }
                call(channel.clone(), task, n).await.expect("rpc failed");
                let end = Instant::now();
                if start >= measured_from {
                    latencies.push(end - start);
                    last_end = end;
                }
                n += 1;
            }
            (latencies, last_end)
        }));
    }
    let mut latencies = Vec::new();
    let mut last_end = measured_from;
    for task in tasks {
        let (mut own, end) = task.await.expect("bench task panicked");
        latencies.append(&mut own);
        last_end = last_end.max(end);
    }
    latencies.sort_unstable();
    Stats {
        calls: latencies.len(),
        secs: (last_end - measured_from).as_secs_f64().max(1e-9),
        p50_ms: percentile_ms(&latencies, 0.50),
        p99_ms: percentile_ms(&latencies, 0.99),
    }
}

/// Nearest-rank percentile of `sorted`, in milliseconds (0 when empty).
fn percentile_ms(sorted: &[Duration], p: f64) -> f64 {
    let index = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len().max(1)) - 1;
    sorted.get(index).map_or(0.0, |d| d.as_secs_f64() * 1e3)
}

/// A ~200-byte text, distinct per write so content dedup does not help.
fn payload(concurrency: usize, task: usize, n: u64) -> String {
    let mut text = format!("c{concurrency} task {task} write {n}\n");
    while text.len() < 200 {
        text.push_str("the quick brown fox jumps over the lazy dog\n");
    }
    text.truncate(200);
    text
}

/// Writes file `n` of task `task` of measurement `run` (its concurrency,
/// unless it says otherwise): a new ~200-byte file.
async fn write_small(channel: Channel, run: usize, task: usize, n: u64) -> Result<(), tonic::Status> {
    let request = pb::WriteRequest {
        space: SPACE.into(),
        path: format!("/c{run}/w{task}/f{n}.txt"),
        body: Some(pb::write_request::Body::Content(payload(run, task, n))),
        ..Default::default()
    };
    FileSystemClient::new(channel).write(request).await.map(drop)
}

async fn bench_writes(durability: &str) -> Vec<(usize, Stats)> {
    let front = Front::start(durability).await;
    front.create_space().await;
    let mut results = Vec::new();
    for concurrency in WRITE_LEVELS {
        let channels = front.channels(concurrency.min(MAX_CHANNELS)).await;
        let stats =
            drive(&channels, concurrency, move |channel, task, n| write_small(channel, concurrency, task, n)).await;
        print_row(durability, concurrency, &stats);
        results.push((concurrency, stats));
    }
    front.stop();
    results
}

/// Group-commit writes like [`bench_writes`] at [`OVERHEAD_LEVELS`], on a
/// fresh front per variant so receipts or auth state of one never slow another.
async fn bench_write_overhead(variant: Variant) -> Vec<(usize, Stats)> {
    let front = Front::start_with("group", variant.access(), &[]).await;
    front.create_space().await;
    let mut results = Vec::new();
    for concurrency in OVERHEAD_LEVELS {
        let channels = front.channels(concurrency.min(MAX_CHANNELS)).await;
        let stats = drive(&channels, concurrency, move |channel, task, n| async move {
            // The level is part of the key: the same front serves every level,
            // and reusing a key for another request is an error, not a replay.
            let idempotency_key =
                if variant == Variant::Idempotency { format!("k-c{concurrency}-{task}-{n}") } else { String::new() };
            let request = pb::WriteRequest {
                space: SPACE.into(),
                path: format!("/c{concurrency}/w{task}/f{n}.txt"),
                body: Some(pb::write_request::Body::Content(payload(concurrency, task, n))),
                idempotency_key,
                ..Default::default()
            };
            match variant.access() {
                Access::Dev => FileSystemClient::new(channel).write(request).await,
                Access::Token => FileSystemClient::with_interceptor(channel, bearer).write(request).await,
            }
            .map(drop)
        })
        .await;
        print_row(variant.name(), concurrency, &stats);
        results.push((concurrency, stats));
    }
    front.stop();
    results
}

/// Latencies of a fixed number of sequential calls.
struct Sequential {
    sorted: Vec<Duration>,
}

impl Sequential {
    fn new(mut samples: Vec<Duration>) -> Sequential {
        samples.sort_unstable();
        Sequential { sorted: samples }
    }

    fn mean_ms(&self) -> f64 {
        let total: Duration = self.sorted.iter().sum();
        total.as_secs_f64() * 1e3 / self.sorted.len().max(1) as f64
    }

    fn p50_ms(&self) -> f64 {
        percentile_ms(&self.sorted, 0.50)
    }

    fn p99_ms(&self) -> f64 {
        percentile_ms(&self.sorted, 0.99)
    }

    fn max_ms(&self) -> f64 {
        self.sorted.last().map_or(0.0, |d| d.as_secs_f64() * 1e3)
    }
}

/// Line `index` (0-based) of the big file: 64 characters, unique because of
/// the fixed-width number and the `tag`.
fn big_line(index: usize, tag: &str) -> String {
    let mut line = format!("line {index:06} {tag} ");
    while line.len() < BIG_LINE_CHARS {
        line.push_str("lorem ipsum dolor sit amet ");
    }
    line.truncate(BIG_LINE_CHARS);
    line
}

/// A text of `lines` lines of [`big_line`], the first tagged `first_tag`.
fn lines_text(lines: usize, first_tag: &str) -> String {
    let mut text = String::with_capacity(lines * (BIG_LINE_CHARS + 1));
    for index in 0..lines {
        text.push_str(&big_line(index, if index == 0 { first_tag } else { "original" }));
        text.push('\n');
    }
    text
}

/// The line edited in round `round` of `calls` on a file of `lines` lines:
/// spread over the whole file, never the first line (rewritten by the
/// overwrite baseline) and never twice (`calls` < `lines`).
fn edited_index(round: usize, lines: usize, calls: usize) -> usize {
    1 + round * (lines - 1) / calls
}

/// Edits one line of the file at `path` (written by [`lines_text`] with
/// `lines` lines, now at `version`) in each of `calls` sequential `Edit`s;
/// returns each call's latency.
async fn edit_lines(
    fs: &mut FileSystemClient<Channel>,
    path: &str,
    lines: usize,
    calls: usize,
    mut version: u64,
) -> Vec<Duration> {
    let mut edits = Vec::with_capacity(calls);
    for round in 0..calls {
        let index = edited_index(round, lines, calls);
        let replace = pb::ReplaceEdit {
            old_text: format!("{}\n", big_line(index, "original")),
            new_text: format!("{}\n", big_line(index, &format!("edited-{round:02}"))),
            ..Default::default()
        };
        let request = pb::EditRequest {
            space: SPACE.into(),
            path: path.into(),
            base_version: Some(version),
            edits: vec![pb::TextEdit { kind: Some(pb::text_edit::Kind::Replace(replace)) }],
            ..Default::default()
        };
        let start = Instant::now();
        let reply = fs.edit(request).await.expect("edit one line").into_inner();
        edits.push(start.elapsed());
        assert!(reply.changed && reply.replacements == [1], "edit {round} did not replace exactly one line");
        version = reply.version;
    }
    edits
}

struct BigFile {
    bytes: usize,
    edit: Sequential,
    read: Sequential,
    write: Sequential,
}

async fn bench_big_file() -> BigFile {
    let front = Front::start("group").await;
    front.create_space().await;
    let mut fs = FileSystemClient::new(front.try_connect().await.expect("connect"));
    let text = lines_text(BIG_LINES, "original");
    let bytes = text.len();
    assert!(bytes < 5 << 20, "the big file must stay under the 5 MiB text limit");
    let write = |content: String| pb::WriteRequest {
        space: SPACE.into(),
        path: BIG_PATH.into(),
        body: Some(pb::write_request::Body::Content(content)),
        ..Default::default()
    };
    let version = fs.write(write(text)).await.expect("write the 5 MiB file").into_inner().version;
    let edits = edit_lines(&mut fs, BIG_PATH, BIG_LINES, BIG_CALLS, version).await;

    let mut reads = Vec::with_capacity(BIG_CALLS);
    for _ in 0..BIG_CALLS {
        let request = pb::ReadRequest {
            space: SPACE.into(),
            path: BIG_PATH.into(),
            offset: (BIG_LINES - 9) as u64,
            limit: 10,
            ..Default::default()
        };
        let start = Instant::now();
        let reply = fs.read(request).await.expect("read the 5 MiB file's tail").into_inner();
        reads.push(start.elapsed());
        assert_eq!(reply.last_line, BIG_LINES as u64, "tail read did not reach the last line");
        assert_eq!(reply.content.lines().count(), 10, "tail read returned the wrong number of lines");
    }

    let mut writes = Vec::with_capacity(BIG_CALLS);
    for round in 0..BIG_CALLS {
        // A different first line each time, so every overwrite is a real change.
        let request = write(lines_text(BIG_LINES, &format!("overwrite-{round:02}")));
        let start = Instant::now();
        let reply = fs.write(request).await.expect("overwrite the 5 MiB file").into_inner();
        writes.push(start.elapsed());
        assert!(reply.written && reply.size == bytes as u64, "overwrite {round} did not store the whole file");
    }
    front.stop();
    BigFile { bytes, edit: Sequential::new(edits), read: Sequential::new(reads), write: Sequential::new(writes) }
}

/// The file the `tokens` section reads, and its size.
const TOKENS_PATH: &str = "/tokens/sources.rs";
const TOKENS_BYTES: usize = 5_000_000;
/// Rounds of each kind of read in the `tokens` section; the fastest counts.
const TOKENS_ROUNDS: usize = 5;

/// This repository's Rust sources, repeated to about `bytes` bytes.
fn source_text(bytes: usize) -> String {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() && !path.ends_with("target") && !path.ends_with(".git") {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let mut files = Vec::new();
    walk(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."), &mut files);
    files.sort();
    let sources: String = files.iter().filter_map(|f| std::fs::read_to_string(f).ok()).collect();
    assert!(!sources.is_empty(), "no Rust sources found");
    let mut text = String::with_capacity(bytes + sources.len());
    while text.len() < bytes {
        text.push_str(&sources);
    }
    let mut end = text[..bytes].rfind('\n').map_or(bytes, |at| at + 1);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text
}

/// Reads [`TOKENS_PATH`] from end to end in pages of at most `max_chars`
/// UTF-16 units and `max_tokens` tokens (0: no budget): seconds, pages, tokens.
async fn read_through(fs: &mut FileSystemClient<Channel>, max_chars: u64, max_tokens: u64) -> (f64, u64, u64) {
    let (mut offset, mut start_char, mut pages, mut tokens) = (1, 0, 0, 0);
    let start = Instant::now();
    loop {
        let request = pb::ReadRequest {
            space: SPACE.into(),
            path: TOKENS_PATH.into(),
            offset,
            start_char,
            limit: 1_000_000,
            max_chars,
            max_tokens,
            ..Default::default()
        };
        let page = fs.read(request).await.expect("read a page").into_inner();
        (pages, tokens) = (pages + 1, tokens + page.tokens);
        match page.next {
            Some(next) => (offset, start_char) = (next.start_line, next.start_char),
            None => return (start.elapsed().as_secs_f64(), pages, tokens),
        }
    }
}

async fn bench_tokens() -> Value {
    let front = Front::start("group").await;
    front.create_space().await;
    let mut fs = FileSystemClient::new(front.try_connect().await.expect("connect"));
    let text = source_text(TOKENS_BYTES);
    let write = pb::WriteRequest {
        space: SPACE.into(),
        path: TOKENS_PATH.into(),
        body: Some(pb::write_request::Body::Content(text.clone())),
        ..Default::default()
    };
    fs.write(write).await.expect("write the file");
    // (name, max_chars, max_tokens): counted but never cut, then cut to a
    // budget, and as many pages without one.
    let kinds = [
        ("plain", 131_072, 0),
        ("tokens counted", 131_072, 10_000_000),
        ("8,192-token pages", 131_072, 8_192),
        ("32,768-unit pages", 32_768, 0),
    ];
    read_through(&mut fs, 131_072, 0).await;
    let mut best = [(f64::MAX, 0, 0); 4];
    for _ in 0..TOKENS_ROUNDS {
        for (i, (_, max_chars, max_tokens)) in kinds.iter().enumerate() {
            let run = read_through(&mut fs, *max_chars, *max_tokens).await;
            if run.0 < best[i].0 {
                best[i] = run;
            }
        }
    }
    front.stop();
    println!("{} bytes, {} lines; fastest of {TOKENS_ROUNDS} rounds", text.len(), text.lines().count());
    println!("{:<20} {:>9} {:>7} {:>10} {:>9}", "reading", "seconds", "pages", "tokens", "/plain");
    let plain = best[0].0;
    let mut out = serde_json::Map::new();
    for ((name, max_chars, max_tokens), (secs, pages, tokens)) in kinds.iter().zip(best) {
        println!("{name:<20} {secs:>9.3} {pages:>7} {tokens:>10} {:>8.2}x", secs / plain);
        let figures = json!({
            "max_chars": max_chars, "max_tokens": max_tokens, "seconds": secs, "pages": pages, "tokens": tokens,
            "vs_plain": secs / plain,
        });
        out.insert((*name).to_owned(), figures);
    }
    let counted = best[1].0 / plain;
    let verdict = if counted <= 2.0 { "PASS" } else { "MISS" };
    println!("goal: counting tokens at most 2x the plain read: {counted:.2}x {verdict}");
    out.insert("counting_vs_plain".into(), ratio_json(counted, 2.0, verdict));
    out.insert("bytes".into(), json!(text.len()));
    Value::Object(out)
}

/// Path of the 200-byte file the read measurements read.
const READ_PATH: &str = "/read/small.txt";

/// Writes the file [`read_small`] reads.
async fn write_read_file(channel: &Channel) {
    let setup = pb::WriteRequest {
        space: SPACE.into(),
        path: READ_PATH.into(),
        body: Some(pb::write_request::Body::Content(payload(0, 0, 0))),
        ..Default::default()
    };
    FileSystemClient::new(channel.clone()).write(setup).await.expect("write the file to read");
}

/// Reads the whole 200-byte file [`write_read_file`] wrote.
async fn read_small(channel: Channel) -> Result<(), tonic::Status> {
    let request = pb::ReadRequest { space: SPACE.into(), path: READ_PATH.into(), ..Default::default() };
    let reply = FileSystemClient::new(channel).read(request).await?.into_inner();
    assert_eq!(reply.content.len(), 200, "read returned the wrong content");
    Ok(())
}

async fn bench_reads() -> (Stats, Stats) {
    let front = Front::start("group").await;
    front.create_space().await;
    let channels = front.channels(READ_CONCURRENCY.min(MAX_CHANNELS)).await;
    write_read_file(&channels[0]).await;

    let noop = drive(&channels, READ_CONCURRENCY, |channel, _, _| async move {
        HealthClient::new(channel).check(HealthCheckRequest { service: String::new() }).await.map(drop)
    })
    .await;
    print_row("health (no-op)", READ_CONCURRENCY, &noop);
    let read = drive(&channels, READ_CONCURRENCY, |channel, _, _| read_small(channel)).await;
    print_row("read 200 B", READ_CONCURRENCY, &read);
    front.stop();
    (read, noop)
}

/// A connection to the front's `--http-listen` port.
#[derive(Clone)]
enum Http {
    /// HTTP/1.1 with keep-alive: one call at a time.
    One(Arc<tokio::sync::Mutex<hyper::client::conn::http1::SendRequest<Full<Bytes>>>>),
    /// HTTP/2 (prior knowledge): calls multiplexed.
    Two(hyper::client::conn::http2::SendRequest<Full<Bytes>>),
}

impl Http {
    async fn connect(addr: &str, two: bool) -> Http {
        let stream = tokio::net::TcpStream::connect(addr).await.expect("connect to the HTTP port");
        stream.set_nodelay(true).expect("nodelay");
        let io = hyper_util::rt::TokioIo::new(stream);
        if two {
            let executor = hyper_util::rt::TokioExecutor::new();
            let (send, connection) = hyper::client::conn::http2::handshake(executor, io).await.expect("HTTP/2");
            tokio::spawn(connection);
            Http::Two(send)
        } else {
            let (send, connection) = hyper::client::conn::http1::handshake(io).await.expect("HTTP/1.1");
            tokio::spawn(connection);
            Http::One(Arc::new(tokio::sync::Mutex::new(send)))
        }
    }

    /// POSTs proto3 JSON to `uri`; the reply's body when it is 200.
    async fn post(&self, uri: &str, body: &'static str) -> Result<Bytes, String> {
        let request = http::Request::post(uri)
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from_static(body.as_bytes())))
            .expect("request");
        let response = match self {
            Http::One(send) => send.lock().await.send_request(request).await,
            Http::Two(send) => send.clone().send_request(request).await,
        }
        .map_err(|e| e.to_string())?;
        let status = response.status();
        let body = response.into_body().collect().await.map_err(|e| e.to_string())?.to_bytes();
        if status != http::StatusCode::OK {
            return Err(format!("{status}: {}", String::from_utf8_lossy(&body)));
        }
        Ok(body)
    }
}

/// The `http` section: the same 200-byte `Read` at c=64 over gRPC, over
/// HTTP/1.1 (one keep-alive connection per caller) and over HTTP/2 (as
/// many connections as gRPC uses), on one front.
async fn bench_http() -> Value {
    let front = Front::start_with("group", Access::Dev, &["--http-listen", "127.0.0.1:0"]).await;
    let http_addr = front.http.clone().expect("an HTTP address");
    front.create_space().await;
    let channels = front.channels(READ_CONCURRENCY.min(MAX_CHANNELS)).await;
    write_read_file(&channels[0]).await;
    let uri: &'static str = Box::leak(format!("http://{http_addr}/api/v1/fs/read").into_boxed_str());
    let body: &'static str = Box::leak(json!({"space": SPACE, "path": READ_PATH}).to_string().into_boxed_str());
    let read_over = move |conn: Http| async move {
        let reply = conn.post(uri, body).await?;
        let reply: Value = serde_json::from_slice(&reply).map_err(|e| e.to_string())?;
        assert_eq!(reply["content"].as_str().map(str::len), Some(200), "read returned the wrong content");
        Ok::<(), String>(())
    };

    let grpc = drive(&channels, READ_CONCURRENCY, |channel, _, _| read_small(channel)).await;
    print_row("read gRPC", READ_CONCURRENCY, &grpc);
    let mut ones = Vec::with_capacity(READ_CONCURRENCY);
    for _ in 0..READ_CONCURRENCY {
        ones.push(Http::connect(&http_addr, false).await);
    }
    let one = drive(&ones, READ_CONCURRENCY, move |conn, _, _| read_over(conn)).await;
    print_row("read HTTP/1.1", READ_CONCURRENCY, &one);
    let mut twos = Vec::with_capacity(MAX_CHANNELS);
    for _ in 0..READ_CONCURRENCY.min(MAX_CHANNELS) {
        twos.push(Http::connect(&http_addr, true).await);
    }
    let two = drive(&twos, READ_CONCURRENCY, move |conn, _, _| read_over(conn)).await;
    print_row("read HTTP/2", READ_CONCURRENCY, &two);
    front.stop();
    println!();
    let one_vs_grpc = one.rate() / grpc.rate();
    let two_vs_grpc = two.rate() / grpc.rate();
    let r1 = verdict("HTTP/1.1/gRPC read c=64", one_vs_grpc, 0.6);
    let r2 = verdict("HTTP/2/gRPC read c=64", two_vs_grpc, 0.6);
    json!({
        "read_grpc_c64": stats_json(&grpc),
        "read_http1_c64": stats_json(&one),
        "read_http2_c64": stats_json(&two),
        "http1_vs_grpc_c64": one_vs_grpc,
        "http2_vs_grpc_c64": two_vs_grpc,
        "verdicts": {"http1_vs_grpc": r1, "http2_vs_grpc": r2},
    })
}

/// Sequential `read` tool calls per transport in the `mcp` section.
const MCP_CALLS: usize = 500;

/// The `mcp` section: the round trip of one MCP `read` tool call over the
/// front's Streamable HTTP endpoint against the same over `agentvfs mcp` on
/// stdio (the CLI bridge that calls the front over gRPC), sequential calls
/// on one front.
async fn bench_mcp() -> Value {
    use rmcp::ServiceExt as _;
    let front = Front::start_with("group", Access::Dev, &["--http-listen", "127.0.0.1:0"]).await;
    let http_addr = front.http.clone().expect("an HTTP address");
    front.create_space().await;
    write_read_file(&front.channels(1).await[0]).await;

    let transport = rmcp::transport::StreamableHttpClientTransport::from_uri(format!("http://{http_addr}/mcp"));
    let over_http = ().serve(transport).await.expect("an MCP session over HTTP");
    let http = mcp_reads(&over_http).await;
    print_sequential("MCP read over HTTP", &http);
    let mut bridge = tokio::process::Command::new(cli_binary());
    bridge.args(["--addr", &front.addr, "--space", SPACE, "mcp"]);
    let (child, _) = rmcp::transport::TokioChildProcess::builder(bridge)
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start agentvfs mcp");
    let over_stdio = ().serve(child).await.expect("an MCP session over stdio");
    let stdio = mcp_reads(&over_stdio).await;
    print_sequential("MCP read over stdio", &stdio);
    let _ = over_http.cancel().await;
    let _ = over_stdio.cancel().await;
    front.stop();
    let ratio = http.p50_ms() / stdio.p50_ms();
    println!("\nHTTP/stdio MCP read p50 {ratio:.2}x");
    json!({"read_http": sequential_json(&http), "read_stdio": sequential_json(&stdio), "http_vs_stdio_p50": ratio})
}

async fn mcp_reads(client: &rmcp::service::RunningService<rmcp::RoleClient, ()>) -> Sequential {
    let arguments = json!({"space": SPACE, "path": READ_PATH});
    let Value::Object(arguments) = arguments else { unreachable!("an object") };
    let call = || rmcp::model::CallToolRequestParams::new("read").with_arguments(arguments.clone());
    for _ in 0..20 {
        client.call_tool(call()).await.expect("warm-up read");
    }
    let mut samples = Vec::with_capacity(MCP_CALLS);
    for _ in 0..MCP_CALLS {
        let began = Instant::now();
        let result = client.call_tool(call()).await.expect("read tool call");
        samples.push(began.elapsed());
        assert_eq!(result.is_error, Some(false), "the read tool failed: {result:?}");
    }
    Sequential::new(samples)
}

/// The `agentvfs` command line beside the front under test, built first so
/// that it is this source's.
fn cli_binary() -> PathBuf {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let status = std::process::Command::new(cargo)
        .args(["build", "--release", "--locked", "--quiet", "-p", "agentvfs", "--bin", "agentvfs"])
        .status()
        .expect("run cargo");
    assert!(status.success(), "building agentvfs failed");
    target_dir().join("release/agentvfs")
}

fn print_header() {
    println!("{:<16} {:>4} {:>8} {:>11} {:>9} {:>9}", "measurement", "c", "calls", "calls/s", "p50 ms", "p99 ms");
}

fn print_row(name: &str, concurrency: usize, s: &Stats) {
    println!("{name:<16} {concurrency:>4} {:>8} {:>11.0} {:>9.2} {:>9.2}", s.calls, s.rate(), s.p50_ms, s.p99_ms);
}

fn verdict(name: &str, ratio: f64, goal: f64) -> String {
    let result = if ratio >= goal { "PASS" } else { "MISS" };
    println!("{name:<24} {ratio:>7.2}x  (goal >= {goal}x)  {result}");
    result.to_owned()
}

fn stats_json(s: &Stats) -> Value {
    json!({"calls": s.calls, "seconds": s.secs, "per_second": s.rate(), "p50_ms": s.p50_ms, "p99_ms": s.p99_ms})
}

fn print_sequential_header() {
    println!("{:<24} {:>5} {:>9} {:>9} {:>9} {:>9}", "measurement", "calls", "mean ms", "p50 ms", "p99 ms", "max ms");
}

fn print_sequential(name: &str, s: &Sequential) {
    println!(
        "{name:<24} {:>5} {:>9.2} {:>9.2} {:>9.2} {:>9.2}",
        s.sorted.len(),
        s.mean_ms(),
        s.p50_ms(),
        s.p99_ms(),
        s.max_ms()
    );
}

fn sequential_json(s: &Sequential) -> Value {
    json!({"calls": s.sorted.len(), "mean_ms": s.mean_ms(), "p50_ms": s.p50_ms(), "p99_ms": s.p99_ms(), "max_ms": s.max_ms()})
}

fn ratio_json(ratio: f64, goal: f64, result: &str) -> Value {
    json!({"ratio": ratio, "goal": goal, "result": result})
}

/// The front under test: this build's, or `AGENTVFS_BENCH_FRONT`.
fn front_binary() -> PathBuf {
    std::env::var_os("AGENTVFS_BENCH_FRONT")
        .map_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_agentvfs-front")), PathBuf::from)
}

/// Seconds each structural action on a folder of [`SUBTREE_FILES`] took.
struct Subtree {
    copy: f64,
    rename: f64,
    trash: f64,
}

/// Fills `/src` with [`SUBTREE_FILES`] small files, then times one `Batch`
/// each that copies it, renames the copy and trashes it.
async fn bench_subtree() -> Subtree {
    // The folder (with its 100 subfolders) is over the default limit of
    // entries one change may carry; the bench measures this size on purpose.
    let front = Front::start_with("group", Access::Dev, &["--max-subtree-entries", "25000"]).await;
    front.create_space().await;
    let channels = front.channels(MAX_CHANNELS).await;
    let writers = 16;
    let mut tasks = Vec::new();
    for task in 0..writers {
        let channel = channels[task % channels.len()].clone();
        tasks.push(tokio::spawn(async move {
            for n in (task..SUBTREE_FILES).step_by(writers) {
                let request = pb::WriteRequest {
                    space: SPACE.into(),
                    path: format!("/src/d{}/f{n}.txt", n % 100),
                    body: Some(pb::write_request::Body::Content(payload(0, task, n as u64))),
                    ..Default::default()
                };
                FileSystemClient::new(channel.clone()).write(request).await.expect("write");
            }
        }));
    }
    for task in tasks {
        task.await.expect("writer panicked");
    }
    let mut client = FileSystemClient::new(channels[0].clone());
    let mut timed = async |key: &str, action: pb::batch_action::Action| {
        let request = pb::BatchRequest {
            space: SPACE.into(),
            actions: vec![pb::BatchAction { action: Some(action) }],
            apply: true,
            idempotency_key: key.into(),
            ..Default::default()
        };
        let began = Instant::now();
        let reply = client.batch(request).await.expect("batch").into_inner();
        assert_eq!(reply.applied, 1, "{key} was not applied");
        began.elapsed().as_secs_f64()
    };
    use pb::batch_action::Action;
    let copy =
        timed("copy", Action::Copy(pb::CopyAction { from: "/src".into(), to_folder: "/".into(), name: "copy".into() }))
            .await;
    let rename =
        timed("rename", Action::Rename(pb::RenameAction { path: "/copy".into(), new_name: "renamed".into() })).await;
    let trash = timed("trash", Action::Trash(pb::TrashAction { path: "/renamed".into() })).await;
    front.stop();
    Subtree { copy, rename, trash }
}

/// Windows of writes at c=64 without a lease in the space and with one
/// held on another path, in the order free, leased, leased, free, twice,
/// after a window not counted, so that the store's steady growth (which
/// slows later windows) weighs on both alike.
async fn bench_leases() -> (Vec<Stats>, Vec<Stats>) {
    let front = Front::start("group").await;
    front.create_space().await;
    let channels = front.channels(MAX_CHANNELS).await;
    let mut fs = FileSystemClient::new(channels[0].clone());
    let (mut free, mut leased) = (Vec::new(), Vec::new());
    // An empty store takes writes faster than any later window: one
    // window first that is not counted.
    let warm = drive(&channels, 64, |channel, task, n| write_small(channel, 999, task, n)).await;
    print_row("(warm-up)", 64, &warm);
    let mut lease: Option<String> = None;
    let order = [false, true, true, false, false, true, true, false];
    for (window, with_lease) in order.into_iter().enumerate() {
        match (with_lease, lease.take()) {
            (true, None) => {
                let acquire = pb::AcquireLeaseRequest {
                    space: SPACE.into(),
                    path: "/held".into(),
                    ttl_seconds: 600,
                    ..Default::default()
                };
                lease = Some(fs.acquire_lease(acquire).await.expect("lease").into_inner().lease_id);
            }
            (false, Some(lease_id)) => {
                fs.release_lease(pb::ReleaseLeaseRequest { space: SPACE.into(), lease_id }).await.expect("release");
            }
            (_, held) => lease = held,
        }
        let run = 1000 + window;
        let stats = drive(&channels, 64, move |channel, task, n| write_small(channel, run, task, n)).await;
        print_row(if with_lease { "lease on /held" } else { "no lease" }, 64, &stats);
        if with_lease { leased.push(stats) } else { free.push(stats) }
    }
    front.stop();
    (free, leased)
}

struct Fork {
    revert_seconds: f64,
    writes_seconds: f64,
    content_bytes: u64,
    store_before: u64,
    fork_seconds: f64,
    fork_growth: i64,
    copy_seconds: f64,
    copy_growth: i64,
}

/// Bytes of the files under `dir`.
fn dir_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries
        .flatten()
        .map(|entry| match entry.metadata() {
            Ok(meta) if meta.is_dir() => dir_bytes(&entry.path()),
            Ok(meta) => meta.len(),
            Err(_) => 0,
        })
        .sum()
}

/// Fills `/src` with [`FORK_FILES`] distinct files, then times a fork of
/// the space and, as the baseline, a `Batch` copy of `/src` in it, with the
/// store's growth on disk through each.
async fn bench_fork() -> Fork {
    let front = Front::start_with("group", Access::Dev, &["--max-subtree-entries", "25000"]).await;
    front.create_space().await;
    let channels = front.channels(MAX_CHANNELS).await;
    let writers = 16;
    let mut tasks = Vec::new();
    for task in 0..writers {
        let channel = channels[task % channels.len()].clone();
        tasks.push(tokio::spawn(async move {
            for n in (task..FORK_FILES).step_by(writers) {
                let line = format!("file {n} of the forked space, line after line of text\n");
                let content = line.repeat(FORK_FILE_BYTES / line.len() + 1)[..FORK_FILE_BYTES].to_owned();
                let request = pb::WriteRequest {
                    space: SPACE.into(),
                    path: format!("/src/d{}/f{n}.txt", n % 100),
                    body: Some(pb::write_request::Body::Content(content)),
                    ..Default::default()
                };
                FileSystemClient::new(channel.clone()).write(request).await.expect("write");
            }
        }));
    }
    for task in tasks {
        task.await.expect("writer panicked");
    }
    let data = front._temp.path().join("data");
    let store_before = dir_bytes(&data);
    let began = Instant::now();
    let request = pb::ForkSpaceRequest { source: SPACE.into(), name: "fork".into(), ..Default::default() };
    let forked = AdminClient::new(channels[0].clone()).fork_space(request).await.expect("fork").into_inner();
    let fork_seconds = began.elapsed().as_secs_f64();
    assert_eq!(forked.usage.unwrap_or_default().files as usize, FORK_FILES + 1, "every file and AGENT.md");
    let after_fork = dir_bytes(&data);
    let request = pb::BatchRequest {
        space: SPACE.into(),
        actions: vec![pb::BatchAction {
            action: Some(pb::batch_action::Action::Copy(pb::CopyAction {
                from: "/src".into(),
                to_folder: "/".into(),
                name: "copy".into(),
            })),
        }],
        apply: true,
        idempotency_key: "copy".into(),
        ..Default::default()
    };
    let began = Instant::now();
    FileSystemClient::new(channels[0].clone()).batch(request).await.expect("copy");
    let copy_seconds = began.elapsed().as_secs_f64();
    let after_copy = dir_bytes(&data);
    // Change some of the files, then revert the tree to before.
    let mut admin = AdminClient::new(channels[0].clone());
    let before = admin.get_space(pb::GetSpaceRequest { space: SPACE.into() }).await.expect("space").into_inner();
    let mut fs = FileSystemClient::new(channels[0].clone());
    let began = Instant::now();
    for n in (0..FORK_FILES).step_by(FORK_FILES / REVERTED_FILES) {
        let request = pb::WriteRequest {
            space: SPACE.into(),
            path: format!("/src/d{}/f{n}.txt", n % 100),
            body: Some(pb::write_request::Body::Content(format!("changed {n}\n"))),
            ..Default::default()
        };
        fs.write(request).await.expect("write");
    }
    let writes_seconds = began.elapsed().as_secs_f64();
    let request = pb::RevertRequest {
        space: SPACE.into(),
        path: "/src".into(),
        to_revision: before.revision,
        idempotency_key: "revert".into(),
        ..Default::default()
    };
    let began = Instant::now();
    let reverted = fs.revert(request).await.expect("revert").into_inner();
    let revert_seconds = began.elapsed().as_secs_f64();
    assert_eq!(reverted.changes.len(), REVERTED_FILES, "one new version per changed file");
    front.stop();
    Fork {
        revert_seconds,
        writes_seconds,
        content_bytes: (FORK_FILES * FORK_FILE_BYTES) as u64,
        store_before,
        fork_seconds,
        fork_growth: after_fork as i64 - store_before as i64,
        copy_seconds,
        copy_growth: after_copy as i64 - after_fork as i64,
    }
}

/// Commits of this repository's history the `patch` section diffs across,
/// the most text files its diff carries, and the runs of each side.
const PATCH_COMMITS: usize = 200;
const PATCH_FILES: usize = 200;
const PATCH_RUNS: usize = 5;

/// `git` in `dir`; its stdout. Panics with its stderr on failure.
fn git(dir: &Path, args: &[&str]) -> Vec<u8> {
    let out = Command::new("git").arg("-C").arg(dir).args(args).output().expect("run git");
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    out.stdout
}

/// The median of `seconds`.
fn median(mut seconds: Vec<f64>) -> f64 {
    seconds.sort_by(f64::total_cmp);
    seconds[seconds.len() / 2]
}

/// A unified diff of up to [`PATCH_FILES`] text files of this repository,
/// across its last [`PATCH_COMMITS`] commits: `ApplyPatch` on a space that
/// holds the older files, against `git apply` on a directory that holds
/// them, [`PATCH_RUNS`] times each on fresh state, medians compared. Every
/// applied space is checked against the newer commit.
async fn bench_patch() -> Value {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let commits: usize =
        String::from_utf8_lossy(&git(&root, &["rev-list", "--count", "HEAD"])).trim().parse().unwrap_or(0);
    let depth = PATCH_COMMITS.min(commits.saturating_sub(1));
    if depth == 0 {
        println!("skipped: the clone has no history to diff");
        return json!({"skipped": "no history"});
    }
    let base = format!("HEAD~{depth}");
    // Text files only: `git diff --numstat` shows a binary file as `-`.
    let numstat =
        String::from_utf8(git(&root, &["diff", "--numstat", "--no-renames", &base, "HEAD"])).expect("a text listing");
    // Each file's diff on its own: a file that is not UTF-8 cannot be text
    // in the store either.
    let mut paths = Vec::new();
    let mut patch = String::new();
    for line in numstat.lines() {
        let mut fields = line.splitn(3, '\t');
        let (Some(added), Some(removed), Some(path)) = (fields.next(), fields.next(), fields.next()) else { continue };
        if added == "-" || removed == "-" || paths.len() == PATCH_FILES {
            continue;
        }
        if let Ok(diff) = String::from_utf8(git(&root, &["diff", "--no-renames", &base, "HEAD", "--", path])) {
            patch.push_str(&diff);
            paths.push(path.to_owned());
        }
    }
    let mut listed = vec!["ls-tree", "-r", "--name-only", &base, "--"];
    listed.extend(paths.iter().map(String::as_str));
    let older: Vec<(String, Vec<u8>)> = String::from_utf8(git(&root, &listed))
        .expect("a text listing")
        .lines()
        .map(|path| (path.to_owned(), git(&root, &["show", &format!("{base}:{path}")])))
        .collect();
    let lines = patch.lines().filter(|l| l.starts_with(['+', '-']) && !l.starts_with("+++") && !l.starts_with("---"));
    println!(
        "{} files ({} there before), {} changed lines, {} bytes of diff, across {depth} commits",
        paths.len(),
        older.len(),
        lines.count(),
        patch.len()
    );

    let temp = tempfile::tempdir().expect("temp dir");
    let diff_file = temp.path().join("change.diff");
    std::fs::write(&diff_file, &patch).expect("write the diff");
    let mut git_apply = Vec::new();
    for run in 0..PATCH_RUNS {
        let dir = temp.path().join(format!("git{run}"));
        for (path, bytes) in &older {
            let file = dir.join(path);
            std::fs::create_dir_all(file.parent().expect("a parent")).expect("create a folder");
            std::fs::write(file, bytes).expect("write a file");
        }
        let began = Instant::now();
        git(&dir, &["apply", diff_file.to_str().expect("a UTF-8 path")]);
        git_apply.push(began.elapsed().as_secs_f64());
    }

    let front = Front::start_with("group", Access::Dev, &[]).await;
    let channel = front.try_connect().await.expect("connect");
    let mut apply_patch = Vec::new();
    for run in 0..PATCH_RUNS {
        let space = format!("patch{run}");
        let request = pb::CreateSpaceRequest { name: space.clone(), ..Default::default() };
        AdminClient::new(channel.clone()).create_space(request).await.expect("create space");
        let mut writers = Vec::new();
        for share in older.chunks(older.len().div_ceil(16).max(1)) {
            let (channel, space, share) = (channel.clone(), space.clone(), share.to_vec());
            writers.push(tokio::spawn(async move {
                for (path, bytes) in share {
                    let request = pb::WriteRequest {
                        space: space.clone(),
                        path: format!("/{path}"),
                        body: Some(pb::write_request::Body::Data(bytes)),
                        ..Default::default()
                    };
                    FileSystemClient::new(channel.clone()).write(request).await.expect("write");
                }
            }));
        }
        for writer in writers {
            writer.await.expect("writer panicked");
        }
        let request = pb::ApplyPatchRequest {
            space: space.clone(),
            patch: patch.clone(),
            format: pb::PatchFormat::Unified as i32,
            idempotency_key: format!("bench-{run}"),
            ..Default::default()
        };
        let mut client = FileSystemClient::new(channel.clone()).max_decoding_message_size(64 << 20);
        let began = Instant::now();
        let reply = client.apply_patch(request).await.expect("apply patch").into_inner();
        apply_patch.push(began.elapsed().as_secs_f64());
        assert_eq!(reply.files.len(), paths.len());
        if run == 0 {
            // The space now holds what the newer commit holds.
            for path in &paths {
                let newer = Command::new("git").arg("-C").arg(&root).args(["show", &format!("HEAD:{path}")]).output();
                let newer = newer.ok().filter(|out| out.status.success()).map(|out| out.stdout);
                let request =
                    pb::DownloadRequest { space: space.clone(), path: format!("/{path}"), ..Default::default() };
                let stored = match client.download(request).await {
                    Ok(stream) => {
                        let mut stream = stream.into_inner();
                        let mut bytes = Vec::new();
                        while let Some(chunk) = stream.message().await.expect("download") {
                            bytes.extend(chunk.data);
                        }
                        Some(bytes)
                    }
                    Err(_) => None,
                };
                assert_eq!(stored, newer, "{path} differs from HEAD after ApplyPatch");
            }
        }
    }
    front.stop();

    let (ours, theirs) = (median(apply_patch.clone()), median(git_apply.clone()));
    println!("{:<24} {:>9.3} s (median of {PATCH_RUNS})", "ApplyPatch", ours);
    println!("{:<24} {:>9.3} s (median of {PATCH_RUNS})", "git apply", theirs);
    println!("{:<24} {:>9.2}x", "ApplyPatch/git apply", ours / theirs);
    json!({
        "files": paths.len(),
        "commits": depth,
        "diff_bytes": patch.len(),
        "apply_patch_seconds": apply_patch,
        "git_apply_seconds": git_apply,
        "apply_patch_median_seconds": ours,
        "git_apply_median_seconds": theirs,
        "apply_patch_vs_git_apply": ours / theirs,
    })
}

/// The `database` section's fronts, both `--durability group`: one on sled,
/// one on a fresh database of a throwaway PostgreSQL cluster on the same
/// machine. Each measurement runs on one, then the other, so that drift of
/// a shared machine hits both alike.
struct Engines {
    sled: Front,
    database: Front,
    /// Another front on the same database, for the two-front figures.
    second: Front,
    commits: Commits,
}

impl Engines {
    async fn start(cluster: &Cluster, url: &str) -> Engines {
        let sled = Front::start("group").await;
        let pool = DATABASE_POOL.to_string();
        let args = ["--database-url", url, "--database-pool", &pool];
        let database = Front::start_with("group", Access::Dev, &args).await;
        let second = Front::start_with("group", Access::Dev, &args).await;
        let name = url.rsplit('/').next().expect("a database URL names its database");
        let commits = Commits::connect(cluster, name).await;
        Engines { sled, database, second, commits }
    }

    /// Runs `database` (which returns its result and how many calls it
    /// made), then `sled`; returns both results and what the database
    /// committed for the first. The count is read [`STATS_SETTLE`] after
    /// the database's calls stop, so the sled run overlaps that wait.
    async fn pair<D, S>(
        &self,
        database: impl Future<Output = (D, u64)>,
        sled: impl Future<Output = S>,
    ) -> (D, S, Transactions) {
        let started = Instant::now();
        let (on_database, calls) = database.await;
        let secs = started.elapsed().as_secs_f64();
        let settled = tokio::time::Instant::now() + STATS_SETTLE;
        let on_sled = sled.await;
        tokio::time::sleep_until(settled).await;
        let committed = self.commits.since_last().await;
        (on_database, on_sled, Transactions { committed, calls, secs })
    }

    fn stop(self) {
        self.sled.stop();
        self.database.stop();
        self.second.stop();
    }
}

/// Reads `pg_stat_database.xact_commit` of the front's database, from the
/// `postgres` database: a reading is a transaction too, and must not count.
///
/// PostgreSQL 15 publishes a backend's counts at most once a second, and
/// what a backend counted in its last second only after it has been idle
/// for ten (`PGSTAT_IDLE_INTERVAL`; seen here: 500 quick statements of a
/// session that then idled showed up 10.0 s later). So a count read at
/// the edge of a 3 s window would miss up to a second of it: each reading
/// is taken [`STATS_SETTLE`] after the calls stopped, readings are
/// chained (one measurement's last is the next one's first), and a
/// measurement's calls are counted from the first, warm-up included, to
/// the last. What the front does in the background meanwhile (sealing,
/// sampling gauges: a few transactions a second) counts too.
struct Commits {
    client: tokio_postgres::Client,
    database: String,
    connection: tokio::task::JoinHandle<()>,
    last: std::sync::atomic::AtomicI64,
}

impl Commits {
    async fn connect(cluster: &Cluster, database: &str) -> Commits {
        let (client, connection) = tokio_postgres::connect(&cluster.url("postgres"), tokio_postgres::NoTls)
            .await
            .expect("connect to the cluster's postgres database");
        let connection = tokio::spawn(async move {
            let _ = connection.await;
        });
        Commits { client, database: database.to_owned(), connection, last: Default::default() }
    }

    /// Transactions committed since the previous call (since the database
    /// was created, the first time).
    async fn since_last(&self) -> i64 {
        let row = self
            .client
            .query_one("SELECT xact_commit FROM pg_stat_database WHERE datname = $1", &[&self.database])
            .await
            .expect("read pg_stat_database");
        let count: i64 = row.get(0);
        count - self.last.swap(count, Ordering::Relaxed)
    }

    async fn server_version(&self) -> String {
        let row = self.client.query_one("SHOW server_version", &[]).await.expect("read the server's version");
        row.get(0)
    }
}

impl Drop for Commits {
    fn drop(&mut self) {
        self.connection.abort();
    }
}

/// Transactions the database committed during a measurement, and the
/// calls (warm-up included) that caused them.
struct Transactions {
    committed: i64,
    calls: u64,
    secs: f64,
}

impl Transactions {
    fn per_second(&self) -> f64 {
        self.committed as f64 / self.secs.max(1e-9)
    }

    fn per_call(&self) -> f64 {
        self.committed as f64 / self.calls.max(1) as f64
    }

    fn json(&self) -> Value {
        json!({
            "committed": self.committed,
            "calls": self.calls,
            "seconds": self.secs,
            "per_second": self.per_second(),
            "per_call": self.per_call(),
        })
    }
}

/// [`drive`] on `front`, returning also how many calls completed, warm-up
/// included.
async fn drive_counted<F, Fut>(front: &Front, concurrency: usize, call: F) -> (Stats, u64)
where
    F: Fn(Channel, usize, u64) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = Result<(), tonic::Status>> + Send,
{
    drive_spread(&[front], concurrency, call).await
}

/// [`drive_counted`] with the calls spread evenly over `fronts`.
async fn drive_spread<F, Fut>(fronts: &[&Front], concurrency: usize, call: F) -> (Stats, u64)
where
    F: Fn(Channel, usize, u64) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = Result<(), tonic::Status>> + Send,
{
    let per_front = (concurrency.min(MAX_CHANNELS) / fronts.len()).max(1);
    let mut each = Vec::new();
    for front in fronts {
        each.push(front.channels(per_front).await);
    }
    // Interleaved, so that round-robin over them alternates the fronts.
    let channels: Vec<Channel> = (0..per_front).flat_map(|i| each.iter().map(move |c| c[i].clone())).collect();
    let calls = Arc::new(AtomicU64::new(0));
    let counter = Arc::clone(&calls);
    let stats = drive(&channels, concurrency, move |channel, task, n| {
        let (call, counter) = (call.clone(), Arc::clone(&counter));
        async move {
            call(channel, task, n).await?;
            counter.fetch_add(1, Ordering::Relaxed);
            Ok::<(), tonic::Status>(())
        }
    })
    .await;
    (stats, calls.load(Ordering::Relaxed))
}

/// One rate measurement on both fronts.
struct RatePair {
    concurrency: usize,
    sled: Stats,
    database: Stats,
    transactions: Transactions,
}

impl RatePair {
    /// Drives `call` at `concurrency` on the database front, then on the
    /// sled front.
    async fn measure<F, Fut>(engines: &Engines, concurrency: usize, call: F) -> RatePair
    where
        F: Fn(Channel, usize, u64) -> Fut + Clone + Send + 'static,
        Fut: Future<Output = Result<(), tonic::Status>> + Send,
    {
        let (database, (sled, _), transactions) = engines
            .pair(
                drive_counted(&engines.database, concurrency, call.clone()),
                drive_counted(&engines.sled, concurrency, call),
            )
            .await;
        RatePair { concurrency, sled, database, transactions }
    }

    fn ratio(&self) -> f64 {
        self.database.rate() / self.sled.rate()
    }

    fn print(&self, name: &str) {
        print_row(&format!("{name} sled"), self.concurrency, &self.sled);
        print_row(&format!("{name} database"), self.concurrency, &self.database);
        print_transactions(&format!("{:.2}x sled", self.ratio()), &self.transactions);
    }

    fn json(&self) -> Value {
        json!({
            "sled": stats_json(&self.sled),
            "database": stats_json(&self.database),
            "database_vs_sled": self.ratio(),
            "database_transactions": self.transactions.json(),
        })
    }
}

fn print_transactions(compared: &str, t: &Transactions) {
    println!("{:<16} {compared:>17}; database: {:.0} transactions/s, {:.2} per call", "", t.per_second(), t.per_call());
}

/// Writes the [`EDIT_LINES`]-line file on `front`; returns a client and
/// the file's version.
async fn write_edit_file(front: &Front) -> (FileSystemClient<Channel>, u64) {
    let mut fs = FileSystemClient::new(front.try_connect().await.expect("connect"));
    let request = pb::WriteRequest {
        space: SPACE.into(),
        path: EDIT_PATH.into(),
        body: Some(pb::write_request::Body::Content(lines_text(EDIT_LINES, "original"))),
        ..Default::default()
    };
    let version = fs.write(request).await.expect("write the file to edit").into_inner().version;
    (fs, version)
}

/// [`EDIT_CALLS`] sequential one-line `Edit`s of the file
/// [`write_edit_file`] wrote, and how many calls that was.
async fn edit_file((mut fs, version): (FileSystemClient<Channel>, u64)) -> (Sequential, u64) {
    let edits = edit_lines(&mut fs, EDIT_PATH, EDIT_LINES, EDIT_CALLS, version).await;
    (Sequential::new(edits), EDIT_CALLS as u64)
}

/// One rate measurement on both database fronts at once.
struct TwoFronts {
    stats: Stats,
    transactions: Transactions,
}

impl TwoFronts {
    /// Drives `call` at `concurrency`, spread evenly over the two database
    /// fronts.
    async fn measure<F, Fut>(engines: &Engines, concurrency: usize, call: F) -> TwoFronts
    where
        F: Fn(Channel, usize, u64) -> Fut + Clone + Send + 'static,
        Fut: Future<Output = Result<(), tonic::Status>> + Send,
    {
        let started = Instant::now();
        let (stats, calls) = drive_spread(&[&engines.database, &engines.second], concurrency, call).await;
        let secs = started.elapsed().as_secs_f64();
        tokio::time::sleep(STATS_SETTLE).await;
        let committed = engines.commits.since_last().await;
        TwoFronts { stats, transactions: Transactions { committed, calls, secs } }
    }

    fn print(&self, name: &str, one: &RatePair) {
        print_row(&format!("{name} database x2"), one.concurrency, &self.stats);
        let compared = format!(
            "{:.2}x one, {:.2}x sled",
            self.stats.rate() / one.database.rate(),
            self.stats.rate() / one.sled.rate()
        );
        print_transactions(&compared, &self.transactions);
    }

    fn json(&self, one: &RatePair) -> Value {
        json!({
            "database_two_fronts": stats_json(&self.stats),
            "vs_one_front": self.stats.rate() / one.database.rate(),
            "vs_sled": self.stats.rate() / one.sled.rate(),
            "database_transactions": self.transactions.json(),
        })
    }
}

/// The `database` section: the database engine beside sled.
struct DatabaseRun {
    server_version: String,
    writes: Vec<RatePair>,
    read: RatePair,
    /// Writes and reads at c=64 over two fronts on the same database.
    two_fronts_write: TwoFronts,
    two_fronts_read: TwoFronts,
    edit_sled: Sequential,
    edit_database: Sequential,
    edit_transactions: Transactions,
}

/// `None` when PostgreSQL does not start here (its panic says why), so
/// that a run of every section still reports the others.
async fn bench_database() -> Option<DatabaseRun> {
    let started = tokio::task::spawn_blocking(|| {
        let cluster = Cluster::start();
        let url = cluster.create_database();
        (cluster, url)
    })
    .await;
    let Ok((cluster, url)) = started else {
        println!("skipped: PostgreSQL did not start (Debian's `postgresql` package provides its server)");
        return None;
    };
    let engines = Engines::start(&cluster, &url).await;
    let server_version = engines.commits.server_version().await;
    println!("database: PostgreSQL {server_version} on the same cores, --database-pool {DATABASE_POOL}");
    // Everything the measurements need is written before the first count.
    let mut edited = Vec::new();
    for front in [&engines.database, &engines.sled] {
        front.create_space().await;
        write_read_file(&front.try_connect().await.expect("connect")).await;
        edited.push(write_edit_file(front).await);
    }
    tokio::time::sleep(STATS_SETTLE).await;
    engines.commits.since_last().await;

    print_header();
    let mut writes = Vec::new();
    for concurrency in WRITE_LEVELS {
        let pair = RatePair::measure(&engines, concurrency, move |channel, task, n| {
            write_small(channel, concurrency, task, n)
        })
        .await;
        pair.print("write");
        writes.push(pair);
    }
    let read = RatePair::measure(&engines, READ_CONCURRENCY, |channel, _, _| read_small(channel)).await;
    read.print("read");
    let write_c64 = writes.iter().find(|p| p.concurrency == 64).expect("writes at c=64");
    let two_fronts_write =
        TwoFronts::measure(&engines, 64, |channel, task, n| write_small(channel, TWO_FRONTS_RUN, task, n)).await;
    two_fronts_write.print("write", write_c64);
    let two_fronts_read = TwoFronts::measure(&engines, READ_CONCURRENCY, |channel, _, _| read_small(channel)).await;
    two_fronts_read.print("read", &read);

    println!();
    println!("{EDIT_CALLS} sequential one-line edits of a {EDIT_LINES}-line (~100 KiB) text file (c=1)");
    print_sequential_header();
    let sled_file = edited.pop().expect("the sled front's file");
    let database_file = edited.pop().expect("the database front's file");
    let (edit_database, (edit_sled, _), edit_transactions) =
        engines.pair(edit_file(database_file), edit_file(sled_file)).await;
    print_sequential("edit sled", &edit_sled);
    print_sequential("edit database", &edit_database);
    let slower = edit_database.mean_ms() / edit_sled.mean_ms();
    print_transactions(&format!("mean {slower:.2}x sled"), &edit_transactions);

    engines.stop();
    tokio::task::spawn_blocking(move || drop(cluster)).await.expect("stop PostgreSQL");
    Some(DatabaseRun {
        server_version,
        writes,
        read,
        two_fronts_write,
        two_fronts_read,
        edit_sled,
        edit_database,
        edit_transactions,
    })
}

/// Prints the database section's verdicts; returns its JSON.
fn database_report(run: &DatabaseRun) -> Value {
    let write_pair = run.writes.iter().find(|p| p.concurrency == 64).expect("writes at c=64");
    let write_c64 = write_pair.ratio();
    println!();
    let r1 = verdict("database/sled write c=64", write_c64, DATABASE_WRITE_GOAL);
    let r2 = verdict("database/sled read c=64", run.read.ratio(), DATABASE_READ_GOAL);
    let writes: serde_json::Map<_, _> = run.writes.iter().map(|p| (p.concurrency.to_string(), p.json())).collect();
    json!({
        "server": format!("PostgreSQL {}", run.server_version),
        "pool": DATABASE_POOL,
        "durability": "group",
        "writes": writes,
        "read_c64": run.read.json(),
        "two_fronts": {
            "write_c64": run.two_fronts_write.json(write_pair),
            "read_c64": run.two_fronts_read.json(&run.read),
        },
        "edit_100kib": {
            "lines": EDIT_LINES,
            "bytes": EDIT_LINES * (BIG_LINE_CHARS + 1),
            "sled": sequential_json(&run.edit_sled),
            "database": sequential_json(&run.edit_database),
            "database_vs_sled_mean": run.edit_database.mean_ms() / run.edit_sled.mean_ms(),
            "database_transactions": run.edit_transactions.json(),
        },
        "write_vs_sled_c64": ratio_json(write_c64, DATABASE_WRITE_GOAL, &r1),
        "read_vs_sled_c64": ratio_json(run.read.ratio(), DATABASE_READ_GOAL, &r2),
    })
}

/// `target/` of the build that produced the front binary.
fn target_dir() -> PathBuf {
    let binary = Path::new(env!("CARGO_BIN_EXE_agentvfs-front"));
    binary.parent().and_then(Path::parent).map_or_else(|| PathBuf::from("target"), Path::to_path_buf)
}

/// The sections to run: those named on the command line, or all of them.
fn sections() -> Vec<String> {
    const ALL: [&str; 12] = [
        "writes", "reads", "overhead", "big-file", "subtree", "fork", "leases", "database", "http", "mcp", "tokens",
        "patch",
    ];
    // `cargo bench` passes `--bench`; the rest are section names.
    let named: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    for name in &named {
        assert!(ALL.contains(&name.as_str()), "unknown section {name:?}; sections: {}", ALL.join(", "));
    }
    if named.is_empty() { ALL.iter().map(|s| (*s).to_owned()).collect() } else { named }
}

#[tokio::main]
async fn main() {
    let sections = sections();
    let runs = |name: &str| sections.iter().any(|s| s == name);
    let mut report = serde_json::Map::new();
    // Group-commit writes/s at c=64, when the `writes` section ran.
    let mut durable_c64 = None;

    if runs("writes") {
        println!(
            "durable writes, ~200-byte files, {}s per level after {}ms warm-up",
            WINDOW.as_secs(),
            WARMUP.as_millis()
        );
        print_header();
        let mut writes = Vec::new();
        for mode in MODES {
            writes.push((mode, bench_writes(mode).await));
        }
        let rate_at = |mode: &str, concurrency: usize| {
            writes
                .iter()
                .find(|(m, _)| *m == mode)
                .and_then(|(_, levels)| levels.iter().find(|(c, _)| *c == concurrency))
                .map_or(0.0, |(_, s)| s.rate())
        };
        let group_vs_per_write = rate_at("group", 64) / rate_at("per-write", 64);
        let group_vs_off = rate_at("group", 64) / rate_at("off", 64);
        println!();
        let r1 = verdict("group/per-write @ c=64", group_vs_per_write, 5.0);
        let r2 = verdict("group/off @ c=64", group_vs_off, 0.7);
        let levels = |levels: &[(usize, Stats)]| -> Value {
            levels.iter().map(|(c, s)| (c.to_string(), stats_json(s))).collect::<serde_json::Map<_, _>>().into()
        };
        report.insert(
            "writes".into(),
            writes.iter().map(|(mode, l)| ((*mode).to_owned(), levels(l))).collect::<serde_json::Map<_, _>>().into(),
        );
        report.insert(
            "write_ratios".into(),
            json!({
                "group_vs_per_write_c64": ratio_json(group_vs_per_write, 5.0, &r1),
                "group_vs_off_c64": ratio_json(group_vs_off, 0.7, &r2),
            }),
        );
        durable_c64 = Some(rate_at("group", 64));
    }

    if runs("reads") {
        println!();
        println!("small reads vs no-op RPC, group front, {}s each", WINDOW.as_secs());
        print_header();
        let (read, noop) = bench_reads().await;
        let read_vs_noop = read.rate() / noop.rate();
        let r3 = verdict("read/no-op @ c=64", read_vs_noop, 0.8);
        report.insert("read_c64".into(), stats_json(&read));
        report.insert("noop_c64".into(), stats_json(&noop));
        report.insert("read_vs_noop_c64".into(), ratio_json(read_vs_noop, 0.8, &r3));
        // The no-op runs on another front than the writes, on the same machine.
        if let Some(durable) = durable_c64 {
            let durable_vs_noop = durable / noop.rate();
            let r4 = verdict("group write/no-op @ c=64", durable_vs_noop, 0.12);
            report.insert("group_write_vs_noop_c64".into(), ratio_json(durable_vs_noop, 0.12, &r4));
        }
    }

    if runs("overhead") {
        println!();
        println!(
            "write overhead of idempotency and auth, group front, ~200-byte files, {}s per level",
            WINDOW.as_secs()
        );
        print_header();
        let mut overhead = Vec::new();
        for variant in VARIANTS {
            overhead.push((variant, bench_write_overhead(variant).await));
        }
        let overhead_at = |variant: Variant, concurrency: usize| {
            overhead
                .iter()
                .find(|(v, _)| *v == variant)
                .and_then(|(_, levels)| levels.iter().find(|(c, _)| *c == concurrency))
                .map_or(0.0, |(_, s)| s.rate())
        };
        let idempotency_vs_baseline = overhead_at(Variant::Idempotency, 64) / overhead_at(Variant::Baseline, 64);
        let auth_vs_baseline = overhead_at(Variant::Auth, 64) / overhead_at(Variant::Baseline, 64);
        println!("{:<24} {idempotency_vs_baseline:>7.2}x", "idempotency/baseline @ c=64");
        println!("{:<24} {auth_vs_baseline:>7.2}x", "auth/baseline @ c=64");
        let mut section: serde_json::Map<String, Value> = overhead
            .iter()
            .map(|(variant, levels)| {
                let levels: serde_json::Map<_, _> =
                    levels.iter().map(|(c, s)| (c.to_string(), stats_json(s))).collect();
                (variant.name().to_owned(), levels.into())
            })
            .collect();
        section.insert("idempotency_vs_baseline_c64".into(), json!(idempotency_vs_baseline));
        section.insert("auth_vs_baseline_c64".into(), json!(auth_vs_baseline));
        report.insert("write_overhead".into(), section.into());
    }

    if runs("big-file") {
        println!();
        println!("edit latency on a 5 MiB file, group front, {BIG_CALLS} sequential calls each (c=1)");
        let big = bench_big_file().await;
        println!("file: {} bytes, {BIG_LINES} lines", big.bytes);
        print_sequential_header();
        print_sequential("edit (replace 1 line)", &big.edit);
        print_sequential("read 10 tail lines", &big.read);
        print_sequential("write whole file", &big.write);
        report.insert(
            "big_file".into(),
            json!({
                "bytes": big.bytes,
                "lines": BIG_LINES,
                "edit": sequential_json(&big.edit),
                "read_tail_10_lines": sequential_json(&big.read),
                "write_whole_file": sequential_json(&big.write),
            }),
        );
    }

    if runs("subtree") {
        println!();
        println!("one Batch action on a folder of {SUBTREE_FILES} files, group front");
        let subtree = bench_subtree().await;
        println!("{:<24} {:>9.3} s", "copy", subtree.copy);
        println!("{:<24} {:>9.3} s", "rename the copy", subtree.rename);
        println!("{:<24} {:>9.3} s", "trash the copy", subtree.trash);
        report.insert(
            "subtree".into(),
            json!({
                "files": SUBTREE_FILES,
                "copy_seconds": subtree.copy,
                "rename_seconds": subtree.rename,
                "trash_seconds": subtree.trash,
            }),
        );
    }

    if runs("fork") {
        println!();
        println!("fork of a space of {FORK_FILES} files of {FORK_FILE_BYTES} bytes, group front");
        let fork = bench_fork().await;
        let content_mb = fork.content_bytes as f64 / 1e6;
        let growth = |bytes: i64| {
            format!(
                "{:+.1} MB ({:.1}% of the content)",
                bytes as f64 / 1e6,
                100.0 * bytes as f64 / fork.content_bytes as f64
            )
        };
        println!("content: {content_mb:.1} MB; store before: {:.1} MB", fork.store_before as f64 / 1e6);
        println!("{:<24} {:>9.3} s   store {}", "ForkSpace", fork.fork_seconds, growth(fork.fork_growth));
        println!("{:<24} {:>9.3} s   store {}", "Batch copy (baseline)", fork.copy_seconds, growth(fork.copy_growth));
        println!("{:<24} {:>9.2}x", "fork/copy time", fork.fork_seconds / fork.copy_seconds);
        println!("{:<24} {:>9.3} s", format!("Revert of {REVERTED_FILES} files"), fork.revert_seconds);
        println!("{:<24} {:>9.3} s", format!("{REVERTED_FILES} Writes (baseline)"), fork.writes_seconds);
        println!("{:<24} {:>9.2}x", "revert/writes time", fork.revert_seconds / fork.writes_seconds);
        report.insert(
            "fork".into(),
            json!({
                "files": FORK_FILES,
                "content_bytes": fork.content_bytes,
                "store_bytes_before": fork.store_before,
                "fork_seconds": fork.fork_seconds,
                "fork_store_growth_bytes": fork.fork_growth,
                "copy_seconds": fork.copy_seconds,
                "copy_store_growth_bytes": fork.copy_growth,
                "reverted_files": REVERTED_FILES,
                "revert_seconds": fork.revert_seconds,
                "writes_seconds": fork.writes_seconds,
            }),
        );
    }

    if runs("leases") {
        println!();
        println!("durable writes at c=64 with and without a lease held elsewhere in the space, group front");
        print_header();
        let (free, leased) = bench_leases().await;
        let rate = |runs: &[Stats]| runs.iter().map(Stats::rate).sum::<f64>() / runs.len() as f64;
        let ratio = rate(&leased) / rate(&free);
        let result = verdict("leased/free @ c=64", ratio, 0.95);
        report.insert(
            "leases".into(),
            json!({
                "free_c64": free.iter().map(stats_json).collect::<Vec<_>>(),
                "leased_c64": leased.iter().map(stats_json).collect::<Vec<_>>(),
                "leased_vs_free_c64": ratio_json(ratio, 0.95, &result),
            }),
        );
    }

    if runs("database") {
        println!();
        println!(
            "database engine beside sled, --durability group, ~200-byte files, {}s per level after {}ms warm-up",
            WINDOW.as_secs(),
            WARMUP.as_millis()
        );
        let section = match bench_database().await {
            Some(run) => database_report(&run),
            None => json!({"skipped": "PostgreSQL did not start"}),
        };
        report.insert("database".into(), section);
    }

    if runs("http") {
        println!("\n200-byte reads over gRPC and over HTTP (proto3 JSON), one front, {}s each", WINDOW.as_secs());
        print_header();
        report.insert("http".into(), bench_http().await);
    }

    if runs("mcp") {
        println!("\nMCP read tool calls, {MCP_CALLS} in a row per transport, one front");
        print_sequential_header();
        report.insert("mcp".into(), bench_mcp().await);
    }

    if runs("tokens") {
        println!("\nA ~5 MiB text file read from end to end in Read pages, with and without tokens counted");
        report.insert("tokens".into(), bench_tokens().await);
    }

    if runs("patch") {
        println!("\nApplyPatch of a unified diff from this repository's history, against git apply");
        report.insert("patch".into(), bench_patch().await);
    }

    report.insert("peak_rss_mib".into(), rss::report());
    let path = target_dir().join("bench-rpc.json");
    let text = serde_json::to_string_pretty(&Value::Object(report)).expect("serialize report");
    std::fs::write(&path, text + "\n").expect("write bench-rpc.json");
    println!("\nwrote {}", path.display());
}
