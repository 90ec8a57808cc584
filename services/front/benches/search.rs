//! `Search` through real `agentvfs-front` and `agentvfs-worker` processes:
//! how fast the worker's tantivy index catches up with a bulk load, how fast
//! a query answers compared with a whole-space `Grep`, and how long a write
//! takes to become searchable under a steady write load.
//!
//! The corpus is the one the `grep` bench uses (text files of at most 1 MiB
//! from `$CARGO_HOME/registry/src/*/`, in sorted path order), capped at
//! `AGENTVFS_BENCH_MB` megabytes (default 100), plus a few files carrying a
//! made-up rare word spread through the load. It is written with 32
//! concurrent `Write` calls into the space `bench` of a front started with
//! `--durability off --rate-limit 0`; a marker file is written last.
//!
//! 1. Indexing: the time from the first write until a `Search` for the
//!    marker finds it (the outbox is delivered in order, so everything before
//!    it is indexed too), also from the end of loading, as files/s and MB/s,
//!    and the index directory's size on disk.
//! 2. Latency: 200 sequential `Search` calls (page size 20) for the rare word
//!    and for the common word `fn`, p50/p99; one whole-space `Grep` in COUNT
//!    mode for the same words (second of two runs, worker cache warm); the
//!    ratio grep / search p50. Goals (rare word): ratio >= 50, p50 < 1 ms,
//!    p99 < 5 ms.
//! 3. Lag: about 200 small writes/s for 10 s, each with a unique word; for
//!    every 20th, the time from its acknowledgement until `Search` returns
//!    it (polled every 10 ms), p50/p99. Goal: p99 < 1 s.
//!
//! Figures are printed, never asserted, and written as JSON to
//! `target/bench-search.json`.
//!
//! ```sh
//! cargo bench -p agentvfs-front --bench search
//! AGENTVFS_BENCH_MB=20 cargo bench -p agentvfs-front --bench search
//! ```

#[path = "common/rss.rs"]
mod rss;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use agentvfs_proto::v1 as pb;
use agentvfs_proto::v1::admin_client::AdminClient;
use agentvfs_proto::v1::file_system_client::FileSystemClient;
use serde_json::json;
use tonic::transport::Channel;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

const DEFAULT_CORPUS_MB: u64 = 100;
const MAX_FILE_BYTES: u64 = 1 << 20;
const LOAD_CONCURRENCY: usize = 32;
/// More connections than this only adds client work on a 2-core machine.
const LOAD_CHANNELS: usize = 8;
const SPACE: &str = "bench";
const MB: f64 = 1e6;
/// Made up, so it occurs only in the files this bench writes; alphanumeric,
/// so the index's tokenizer keeps it as one word.
const RARE: &str = "quorbliflex";
const RARE_FILES: usize = 5;
const COMMON: &str = "fn";
const MARKER: &str = "zzmarkerlastwrite7731";
const MARKER_PATH: &str = "/zz-bench-marker.txt";
/// Past this the indexing figure is reported as unfinished, so the run
/// still ends in bounded time.
const INDEX_DEADLINE: Duration = Duration::from_secs(180);
const LATENCY_CALLS: usize = 200;
const LATENCY_WARMUP: usize = 10;
const PAGE_SIZE: u32 = 20;
const LAG_SECONDS: u64 = 10;
const LAG_RATE: u64 = 200;
const LAG_SAMPLE_EVERY: usize = 20;
const LAG_POLL: Duration = Duration::from_millis(10);
const LAG_DEADLINE: Duration = Duration::from_secs(30);

// ---------------------------------------------------------------- corpus

fn registry_sources() -> Vec<PathBuf> {
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")));
    let Some(Ok(entries)) = home.map(|h| std::fs::read_dir(h.join("registry").join("src"))) else {
        return Vec::new();
    };
    let mut dirs: Vec<PathBuf> = entries.flatten().map(|e| e.path()).filter(|p| p.is_dir()).collect();
    dirs.sort();
    dirs
}

/// Regular files under `dir` (symlinks not followed), keyed by their path
/// relative to the registry source directory.
fn walk(dir: &Path, relative: &str, out: &mut BTreeMap<String, PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let (Ok(kind), Some(name)) = (entry.file_type(), entry.file_name().to_str().map(str::to_owned)) else {
            continue;
        };
        let relative = if relative.is_empty() { name } else { format!("{relative}/{name}") };
        if kind.is_dir() {
            walk(&entry.path(), &relative, out);
        } else if kind.is_file() {
            out.entry(relative).or_insert_with(|| entry.path());
        }
    }
}

fn storable(relative: &str) -> bool {
    !relative.chars().any(|c| c.is_control() || c == '\\')
        && relative.len() < 4000
        && relative.split('/').count() < 64
        && relative.split('/').all(|s| s.len() <= 255 && s != "." && s != "..")
}

/// Files as (space path, text), about `target_bytes` in all.
fn load_corpus(target_bytes: u64) -> Vec<(String, String)> {
    let mut candidates = BTreeMap::new();
    for source in registry_sources() {
        walk(&source, "", &mut candidates);
    }
    let (mut files, mut bytes) = (Vec::new(), 0u64);
    for (relative, path) in candidates {
        if bytes >= target_bytes {
            break;
        }
        if !storable(&relative) || !std::fs::metadata(&path).is_ok_and(|m| m.len() <= MAX_FILE_BYTES) {
            continue;
        }
        let Ok(data) = std::fs::read(&path) else { continue };
        if data.contains(&0) {
            continue;
        }
        let Ok(text) = String::from_utf8(data) else { continue };
        bytes += text.len() as u64;
        files.push((format!("/{relative}"), text));
    }
    files
}

// ---------------------------------------------------------------- processes

/// Built through cargo every time: a no-op when up to date, and a stale
/// worker would measure old code.
fn worker_binary() -> PathBuf {
    let worker = Path::new(env!("CARGO_BIN_EXE_agentvfs-front")).with_file_name("agentvfs-worker");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let status = Command::new(cargo)
        .args(["build", "--release", "-p", "agentvfs-worker", "--bin", "agentvfs-worker"])
        .status()
        .expect("run cargo build for agentvfs-worker");
    assert!(status.success() && worker.exists(), "building agentvfs-worker failed");
    worker
}

/// Spawns `command`; returns it with the address from its first stdout line
/// (`listening on <ADDR>`) and drains the rest so it never blocks.
fn spawn_listening(command: &mut Command, what: &str) -> (Child, String) {
    let mut child =
        command.stdout(Stdio::piped()).stderr(Stdio::null()).spawn().unwrap_or_else(|e| panic!("spawn {what}: {e}"));
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    stdout.read_line(&mut line).expect("read first stdout line");
    std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));
    let addr = line.trim().strip_prefix("listening on ").unwrap_or_else(|| panic!("{what} printed {line:?}"));
    (child, addr.to_owned())
}

/// A front and its worker on a temporary store; both killed on drop (also
/// when the bench panics, as the panic unwinds through `main`).
struct Stack {
    front: Child,
    worker: Child,
    front_addr: String,
    index_dir: PathBuf,
    _temp: tempfile::TempDir,
}

impl Stack {
    async fn start() -> Stack {
        let temp = tempfile::tempdir().expect("temp dir");
        let index_dir = temp.path().join("index");
        // The worker must know the front's address before the front exists.
        let port = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("free port").port();
        let front_addr = format!("127.0.0.1:{port}");
        let mut command = Command::new(worker_binary());
        command.args(["--listen", "127.0.0.1:0", "--front", &front_addr, "--index-dir"]).arg(&index_dir);
        let (worker, worker_addr) = spawn_listening(&mut command, "agentvfs-worker");
        let mut command = Command::new(env!("CARGO_BIN_EXE_agentvfs-front"));
        command
            .args(["--dev", "--listen", &front_addr, "--worker", &worker_addr])
            // Durability off only speeds up loading; without `--rate-limit 0`
            // the per-principal limit would shed the load.
            .args(["--durability", "off", "--rate-limit", "0"])
            .args(["--default-quota-bytes", "100000000000", "--default-quota-files", "10000000", "--data-dir"])
            .arg(temp.path().join("data"));
        let (front, _) = spawn_listening(&mut command, "agentvfs-front");
        let stack = Stack { front, worker, front_addr, index_dir, _temp: temp };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(channel) = stack.connect().await {
                let reply = HealthClient::new(channel)
                    .check(HealthCheckRequest { service: "agentvfs.v1.FileSystem".into() })
                    .await;
                if reply.is_ok_and(|r| r.into_inner().status == ServingStatus::Serving as i32) {
                    return stack;
                }
            }
            assert!(Instant::now() < deadline, "front did not become healthy");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn connect(&self) -> Result<Channel, tonic::transport::Error> {
        Channel::from_shared(format!("http://{}", self.front_addr)).expect("valid uri").connect().await
    }

    fn index_bytes(&self) -> u64 {
        fn size(dir: &Path) -> u64 {
            let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
            entries
                .flatten()
                .map(|e| match e.file_type() {
                    Ok(t) if t.is_dir() => size(&e.path()),
                    Ok(t) if t.is_file() => e.metadata().map_or(0, |m| m.len()),
                    _ => 0,
                })
                .sum()
        }
        size(&self.index_dir)
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        for child in [&mut self.front, &mut self.worker] {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn client(channel: &Channel) -> FileSystemClient<Channel> {
    FileSystemClient::new(channel.clone()).max_decoding_message_size(64 << 20).max_encoding_message_size(64 << 20)
}

fn write(path: &str, text: String) -> pb::WriteRequest {
    pb::WriteRequest {
        space: SPACE.into(),
        path: path.into(),
        body: Some(pb::write_request::Body::Content(text)),
        ..Default::default()
    }
}

fn search(query: &str) -> pb::SearchRequest {
    pb::SearchRequest { space: SPACE.into(), query: query.into(), page_size: PAGE_SIZE, ..Default::default() }
}

// ---------------------------------------------------------------- load

struct Loaded {
    /// (revision, bytes) of every accepted write, for what the index covered
    /// at a given revision.
    written: Vec<(u64, u64)>,
    refused: Vec<(String, String)>,
}

async fn load(channels: &[Channel], files: &Arc<Vec<(String, String)>>) -> Loaded {
    let next = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for task in 0..LOAD_CONCURRENCY {
        let (mut fs, next, files) = (client(&channels[task % channels.len()]), next.clone(), files.clone());
        tasks.push(tokio::spawn(async move {
            let (mut written, mut refused) = (Vec::new(), Vec::new());
            while let Some((path, text)) = files.get(next.fetch_add(1, Ordering::Relaxed)) {
                match fs.write(write(path, text.clone())).await {
                    Ok(reply) => written.push((reply.into_inner().revision, text.len() as u64)),
                    Err(status) => refused.push((path.clone(), format!("{:?}: {}", status.code(), status.message()))),
                }
            }
            (written, refused)
        }));
    }
    let mut loaded = Loaded { written: Vec::new(), refused: Vec::new() };
    for task in tasks {
        let (written, refused) = task.await.expect("load task panicked");
        loaded.written.extend(written);
        loaded.refused.extend(refused);
    }
    loaded.written.sort_unstable();
    loaded.refused.sort();
    loaded
}

// ---------------------------------------------------------------- measurements

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Nearest-rank percentile of sorted samples, in ms.
fn percentile(sorted: &[Duration], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    ms(sorted[((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1])
}

fn verdict(pass: bool) -> &'static str {
    if pass { "PASS" } else { "MISS" }
}

struct Latency {
    term: &'static str,
    /// Hits of the first page, and whether more pages follow.
    hits: usize,
    more: bool,
    p50: f64,
    p99: f64,
    max: f64,
    grep_secs: f64,
    grep_lines: u64,
    grep_pages: u64,
}

impl Latency {
    fn ratio(&self) -> f64 {
        self.grep_secs * 1e3 / self.p50
    }
}

async fn search_latency(fs: &mut FileSystemClient<Channel>, term: &'static str) -> Latency {
    let first = fs.search(search(term)).await.expect("search").into_inner();
    for _ in 0..LATENCY_WARMUP {
        fs.search(search(term)).await.expect("search");
    }
    let mut samples = Vec::with_capacity(LATENCY_CALLS);
    for _ in 0..LATENCY_CALLS {
        let start = Instant::now();
        fs.search(search(term)).await.expect("search");
        samples.push(start.elapsed());
    }
    samples.sort_unstable();
    // The first run warms the worker's content cache; the second is timed.
    grep_all(fs, term).await;
    let (grep_secs, grep_lines, grep_pages) = grep_all(fs, term).await;
    Latency {
        term,
        hits: first.hits.len(),
        more: !first.next_page_token.is_empty(),
        p50: percentile(&samples, 0.5),
        p99: percentile(&samples, 0.99),
        max: ms(samples[samples.len() - 1]),
        grep_secs,
        grep_lines,
        grep_pages,
    }
}

/// Whole-space `Grep` in COUNT mode, page after page: seconds, matching
/// lines, pages.
async fn grep_all(fs: &mut FileSystemClient<Channel>, term: &str) -> (f64, u64, u64) {
    let (mut lines, mut pages, mut token) = (0, 0, String::new());
    let start = Instant::now();
    loop {
        let request = pb::GrepRequest {
            space: SPACE.into(),
            pattern: term.into(),
            fixed_strings: true,
            output_mode: pb::GrepOutputMode::Count as i32,
            head_limit: Some(0),
            page_token: std::mem::take(&mut token),
            ..Default::default()
        };
        let page = fs.grep(request).await.unwrap_or_else(|s| panic!("grep {term:?} failed: {s:?}")).into_inner();
        pages += 1;
        lines += page.files.iter().map(|f| f.count).sum::<u64>();
        if page.complete {
            return (start.elapsed().as_secs_f64(), lines, pages);
        }
        token = page.next_page_token;
    }
}

/// Polls `Search` for `term` until a hit at `path` (or `deadline` passes);
/// returns when it was found.
async fn until_found(
    fs: &mut FileSystemClient<Channel>,
    term: &str,
    path: &str,
    deadline: Instant,
    mut on_poll: impl FnMut(&pb::SearchResponse),
) -> Option<Instant> {
    loop {
        if let Ok(reply) = fs.search(search(term)).await {
            let reply = reply.into_inner();
            if reply.hits.iter().any(|h| h.path == path) {
                return Some(Instant::now());
            }
            on_poll(&reply);
        }
        if Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(LAG_POLL).await;
    }
}

struct Lag {
    issued: usize,
    failed: usize,
    issue_secs: f64,
    ack: Vec<Duration>,
    lag: Vec<Duration>,
    timed_out: usize,
}

/// Paced small writes for `LAG_SECONDS`; every `LAG_SAMPLE_EVERY`th is
/// polled for until `Search` returns it.
async fn index_lag(write_channel: &Channel, search_channel: &Channel) -> Lag {
    let total = (LAG_SECONDS * LAG_RATE) as usize;
    let mut ticks = tokio::time::interval(Duration::from_secs(1) / LAG_RATE as u32);
    let mut tasks = Vec::with_capacity(total);
    let start = Instant::now();
    for n in 0..total {
        ticks.tick().await;
        let (mut fs, mut searcher) = (client(write_channel), client(search_channel));
        // Each write is its own task so a slow acknowledgement never holds
        // back the pace.
        tasks.push(tokio::spawn(async move {
            let (token, path) = (format!("lagprobe{n:05}x"), format!("/lag/{n:05}.txt"));
            let text = format!("steady write {n}\nthe probe word is {token} in this small text file\n");
            let sent = Instant::now();
            fs.write(write(&path, text)).await.ok()?;
            let acked = Instant::now();
            if n % LAG_SAMPLE_EVERY != 0 {
                return Some((acked - sent, None));
            }
            let poll = tokio::spawn(async move {
                until_found(&mut searcher, &token, &path, acked + LAG_DEADLINE, |_| {}).await.map(|t| t - acked)
            });
            Some((acked - sent, Some(poll.await.ok().flatten())))
        }));
    }
    let issue_secs = start.elapsed().as_secs_f64();
    let mut lag = Lag { issued: total, failed: 0, issue_secs, ack: Vec::new(), lag: Vec::new(), timed_out: 0 };
    for task in tasks {
        match task.await.expect("lag task panicked") {
            None => lag.failed += 1,
            Some((ack, sampled)) => {
                lag.ack.push(ack);
                match sampled {
                    Some(Some(found)) => lag.lag.push(found),
                    Some(None) => lag.timed_out += 1,
                    None => {}
                }
            }
        }
    }
    lag.ack.sort_unstable();
    lag.lag.sort_unstable();
    lag
}

/// `target/` of the build that produced the front binary.
fn target_dir() -> PathBuf {
    let binary = Path::new(env!("CARGO_BIN_EXE_agentvfs-front"));
    binary.parent().and_then(Path::parent).map_or_else(|| PathBuf::from("target"), Path::to_path_buf)
}

// ---------------------------------------------------------------- main

#[tokio::main]
async fn main() {
    let bench_start = Instant::now();
    let target_mb = std::env::var("AGENTVFS_BENCH_MB").ok().and_then(|v| v.parse().ok()).unwrap_or(DEFAULT_CORPUS_MB);
    let mut files = load_corpus(target_mb * 1_000_000);
    assert!(!files.is_empty(), "no cargo registry sources found under $CARGO_HOME/registry/src");
    // Spread through the load, so the rare word is indexed among the rest.
    for i in 0..RARE_FILES {
        let at = (i + 1) * files.len() / (RARE_FILES + 1);
        files.insert(at, (format!("/zz-rare/{i}.md"), format!("# Note {i}\n\nThe {RARE} setting is rare.\n")));
    }
    let corpus_bytes: u64 = files.iter().map(|(_, t)| t.len() as u64).sum();
    println!(
        "corpus: {} files, {:.1} MB (target {target_mb} MB) read in {:.1}s",
        files.len(),
        corpus_bytes as f64 / MB,
        bench_start.elapsed().as_secs_f64()
    );

    let stack = Stack::start().await;
    AdminClient::new(stack.connect().await.expect("connect"))
        .create_space(pb::CreateSpaceRequest { name: SPACE.into(), ..Default::default() })
        .await
        .expect("create space");
    let mut channels = Vec::new();
    for _ in 0..LOAD_CHANNELS {
        channels.push(stack.connect().await.expect("connect"));
    }
    let search_channel = stack.connect().await.expect("connect");
    let mut fs = client(&search_channel);

    // ---- 1. indexing
    let files = Arc::new(files);
    let load_start = Instant::now();
    let loaded = load(&channels, &files).await;
    let marker = fs.write(write(MARKER_PATH, format!("{MARKER}\n"))).await.expect("write marker").into_inner();
    let load_end = Instant::now();
    let load_secs = (load_end - load_start).as_secs_f64();
    for (path, reason) in &loaded.refused {
        println!("  refused {path}: {reason}");
    }
    let (files_written, bytes_written) =
        (loaded.written.len() + 1, loaded.written.iter().map(|w| w.1).sum::<u64>() + marker.size);
    // What the index reflected when loading ended, by the revisions it covers.
    let at_load_end = fs.search(search(MARKER)).await.map(|r| r.into_inner().index_revision).unwrap_or(0);
    let covered = loaded.written.iter().filter(|w| w.0 <= at_load_end);
    let (files_before, bytes_before) = covered.fold((0usize, 0u64), |(f, b), w| (f + 1, b + w.1));
    let mut last_revision = at_load_end;
    let found = until_found(&mut fs, MARKER, MARKER_PATH, load_end + INDEX_DEADLINE, |r| {
        last_revision = r.index_revision;
    })
    .await;
    let index_bytes = stack.index_bytes();
    println!(
        "load (durability off): {files_written} files, {:.1} MB in {load_secs:.1}s ({:.0} files/s, {:.1} MB/s) \
         with {LOAD_CONCURRENCY} concurrent writes; the index then covered {files_before} files, {:.1} MB \
         (revision {at_load_end} of {})",
        bytes_written as f64 / MB,
        files_written as f64 / load_secs,
        bytes_written as f64 / MB / load_secs,
        bytes_before as f64 / MB,
        marker.revision,
    );
    let indexing = if let Some(found) = found {
        let (total, tail) = ((found - load_start).as_secs_f64(), (found - load_end).as_secs_f64());
        let (tail_files, tail_bytes) = (files_written - files_before, bytes_written - bytes_before);
        println!(
            "indexing: everything searchable {total:.1}s after the first write: {:.0} files/s, {:.1} MB/s",
            files_written as f64 / total,
            bytes_written as f64 / MB / total,
        );
        println!(
            "          {tail:.1}s after loading ended, for the {tail_files} files ({:.1} MB) not yet indexed \
             then: {:.0} files/s, {:.1} MB/s",
            tail_bytes as f64 / MB,
            tail_files as f64 / tail,
            tail_bytes as f64 / MB / tail,
        );
        json!({
            "seconds_from_first_write": total,
            "seconds_from_load_end": tail,
            "files_per_s": files_written as f64 / total,
            "mb_per_s": bytes_written as f64 / MB / total,
            "after_load_files": tail_files,
            "after_load_bytes": tail_bytes,
            "after_load_files_per_s": tail_files as f64 / tail,
            "after_load_mb_per_s": tail_bytes as f64 / MB / tail,
        })
    } else {
        println!(
            "indexing: *** the marker was not searchable {}s after loading ended (index at revision {last_revision} \
             of {}) ***",
            INDEX_DEADLINE.as_secs(),
            marker.revision
        );
        json!({ "finished": false, "index_revision": last_revision })
    };
    println!(
        "index directory: {:.1} MB on disk ({:.2}x the text)",
        index_bytes as f64 / MB,
        index_bytes as f64 / bytes_written as f64
    );

    // ---- 2. latency
    println!();
    let rare = search_latency(&mut fs, RARE).await;
    let common = search_latency(&mut fs, COMMON).await;
    println!(
        "{:<12} {:>6} {:>9} {:>9} {:>9} {:>10} {:>11} {:>9}",
        "term", "hits", "p50 ms", "p99 ms", "max ms", "grep ms", "grep lines", "grep/p50"
    );
    for l in [&rare, &common] {
        let hits = format!("{}{}", l.hits, if l.more { "+" } else { "" });
        println!(
            "{:<12} {hits:>6} {:>9.3} {:>9.3} {:>9.3} {:>10.1} {:>11} {:>8.0}x",
            l.term,
            l.p50,
            l.p99,
            l.max,
            l.grep_secs * 1e3,
            l.grep_lines,
            l.ratio()
        );
    }
    if rare.hits != RARE_FILES {
        println!("  *** the rare word has {} hits, {RARE_FILES} files contain it ***", rare.hits);
    }
    let goals = [
        ("grep / search p50 >= 50x (rare)", rare.ratio() >= 50.0),
        ("search p50 < 1 ms (rare, c=1)", rare.p50 < 1.0),
        ("search p99 < 5 ms (rare, c=1)", rare.p99 < 5.0),
    ];

    // ---- 3. lag
    println!();
    let lag = index_lag(&channels[0], &search_channel).await;
    let lag_p99 = percentile(&lag.lag, 0.99);
    println!(
        "steady writes: {} issued in {:.1}s ({:.0}/s), {} failed; ack p50 {:.2} ms, p99 {:.2} ms",
        lag.issued,
        lag.issue_secs,
        lag.issued as f64 / lag.issue_secs,
        lag.failed,
        percentile(&lag.ack, 0.5),
        percentile(&lag.ack, 0.99),
    );
    println!(
        "index lag (ack -> searchable, polled every {} ms): {} sampled, p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms{}",
        LAG_POLL.as_millis(),
        lag.lag.len(),
        percentile(&lag.lag, 0.5),
        lag_p99,
        lag.lag.last().map_or(f64::NAN, |d| ms(*d)),
        if lag.timed_out > 0 {
            format!(", {} not found within {}s", lag.timed_out, LAG_DEADLINE.as_secs())
        } else {
            String::new()
        },
    );
    let lag_pass = lag.timed_out == 0 && !lag.lag.is_empty() && lag_p99 < 1000.0;

    println!();
    for (goal, pass) in goals {
        println!("{:<36} {}", goal, verdict(pass));
    }
    println!("{:<36} {}", "index lag p99 < 1 s", verdict(lag_pass));
    let index_bytes_end = stack.index_bytes();
    println!(
        "index directory at the end: {:.1} MB; whole bench {:.0}s",
        index_bytes_end as f64 / MB,
        bench_start.elapsed().as_secs_f64()
    );

    rss::note("front", stack.front.id());
    rss::note("worker", stack.worker.id());
    let peak_rss = rss::report();
    let latency_json = |l: &Latency| {
        json!({
            "term": l.term, "first_page_hits": l.hits, "more_pages": l.more, "calls": LATENCY_CALLS,
            "page_size": PAGE_SIZE, "p50_ms": l.p50, "p99_ms": l.p99, "max_ms": l.max,
            "grep": { "seconds": l.grep_secs, "matching_lines": l.grep_lines, "pages": l.grep_pages },
            "grep_over_search_p50": l.ratio(),
        })
    };
    let report = json!({
        "corpus": { "files": files_written, "bytes": bytes_written, "refused": loaded.refused.len() },
        "load": { "seconds": load_secs, "durability": "off", "concurrency": LOAD_CONCURRENCY,
                  "index_revision_at_end": at_load_end, "final_revision": marker.revision,
                  "indexed_files_at_end": files_before, "indexed_bytes_at_end": bytes_before },
        "indexing": indexing,
        "index_dir_bytes": index_bytes,
        "index_dir_bytes_at_end": index_bytes_end,
        "latency": [latency_json(&rare), latency_json(&common)],
        "lag": {
            "writes": lag.issued, "failed": lag.failed, "seconds": lag.issue_secs,
            "ack_p50_ms": percentile(&lag.ack, 0.5), "ack_p99_ms": percentile(&lag.ack, 0.99),
            "sampled": lag.lag.len(), "timed_out": lag.timed_out, "poll_ms": LAG_POLL.as_millis() as u64,
            "p50_ms": percentile(&lag.lag, 0.5), "p99_ms": lag_p99,
        },
        "peak_rss_mib": peak_rss,
        "goals": {
            "rare_ratio_ge_50": verdict(goals[0].1),
            "rare_p50_lt_1ms": verdict(goals[1].1),
            "rare_p99_lt_5ms": verdict(goals[2].1),
            "lag_p99_lt_1s": verdict(lag_pass),
        },
    });
    let path = target_dir().join("bench-search.json");
    let text = serde_json::to_string_pretty(&report).expect("serialize report");
    std::fs::write(&path, text + "\n").expect("write bench-search.json");
    println!("\nwrote {}", path.display());
}
