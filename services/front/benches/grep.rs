//! Whole-space `Grep` through real `agentvfs-front` and `agentvfs-worker`
//! processes, against `rg` over the same files on disk.
//!
//! The corpus is real source text from the local cargo registry
//! (`$CARGO_HOME/registry/src/*/`): UTF-8 files without NUL bytes of at most
//! 1 MiB, in sorted path order, until `AGENTVFS_BENCH_MB` megabytes (default
//! 200). The files are written to a temporary directory and, with 32
//! concurrent `Write` calls, into the space `bench` of a front started with
//! `--durability off` (this only speeds up loading, which is not what is
//! measured).
//!
//! For each query (a literal that never occurs, a common literal, a
//! case-insensitive literal and a regex) it times:
//! - `rg -c` over the directory, best of five runs after a warm-up run, so the
//!   OS page cache is warm;
//! - `Grep` in COUNT mode over the whole space, following page tokens to the
//!   end, COLD (the worker process restarted, its content cache empty) and
//!   then WARM (the same query again at once); best of five such pairs,
//!   after one untimed pair before the first query, as `rg` gets a warm-up
//!   run: it lets the front's work after the load settle and brings the
//!   store's pages into its cache, as the warm-up brings rg's files into the
//!   OS page cache. The worker runs as the Kubernetes manifests run it, with
//!   `--reserve-cache`; each cold run is followed by one on a worker started
//!   without it (its cache memory faulted in as content arrives), reported
//!   beside it.
//!
//! It prints the times, MB/s, the speed ratios against `rg` with their goals
//! (warm at least 2x rg, cold at least 0.5x rg) and the total matching-line
//! counts of both sides, flagging a mismatch. Figures are printed, never
//! asserted, and written as JSON to `target/bench-grep.json`.
//!
//! With `AGENTVFS_BENCH_CORPUS=encodings` the same sources are stored in
//! the encodings agents meet, a ninth of the files each (Shift_JIS, EUC-JP,
//! GBK, Big5, EUC-KR, windows-1251, windows-1252, UTF-16LE with a BOM, and
//! UTF-8), each with a comment line in a language of its encoding after every
//! eighth line, under a folder named for the encoding; `rg` searches each
//! folder with `--encoding` naming it, as it would have to be told, and a
//! fifth query looks for Japanese text. The goal there is warm at least 1x
//! rg; the report is `target/bench-grep-encodings.json`.
//!
//! ```sh
//! cargo bench -p agentvfs-front --bench grep
//! AGENTVFS_BENCH_MB=50 cargo bench -p agentvfs-front --bench grep
//! AGENTVFS_BENCH_MB=100 AGENTVFS_BENCH_CORPUS=encodings cargo bench -p agentvfs-front --bench grep
//! ```
//!
//! `rg` is taken from `PATH` or `~/.cargo/bin`, and installed with
//! `cargo install ripgrep --locked` when missing.

#[path = "common/cpu.rs"]
mod cpu;
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

/// Corpus size in MB (10^6 bytes) unless `AGENTVFS_BENCH_MB` says otherwise.
const DEFAULT_CORPUS_MB: u64 = 200;
/// Larger files are left out: rare in source trees, and they would dominate.
const MAX_FILE_BYTES: u64 = 1 << 20;
const LOAD_CONCURRENCY: usize = 32;
/// More connections than this only adds client work on a 2-core machine.
const LOAD_CHANNELS: usize = 8;
/// Runs of each kind per query; the best counts. The machine is shared and
/// noisy, so a single run can be off by half either way.
const TIMED_RUNS: usize = 5;
const SPACE: &str = "bench";
const MB: f64 = 1e6;
/// Longest wait for the search index to catch up with the load.
const INDEX_WAIT: Duration = Duration::from_secs(900);

struct Query {
    name: &'static str,
    pattern: &'static str,
    fixed: bool,
    insensitive: bool,
}

const QUERIES: [Query; 4] = [
    // Matches nothing, so both sides do a full scan and report no lines.
    Query { name: "absent literal", pattern: "qzxv_agentvfs_no_such_token_4471", fixed: true, insensitive: false },
    Query { name: "literal 'fn '", pattern: "fn ", fixed: true, insensitive: false },
    Query { name: "-i 'error'", pattern: "error", fixed: true, insensitive: true },
    Query { name: "regex impl-for", pattern: r"\bimpl\s+\w+\s+for\b", fixed: false, insensitive: false },
];

/// The query only the encodings corpus adds: text of its Japanese comments.
const JAPANESE_QUERY: Query =
    Query { name: "Japanese text", pattern: "名前はまだ無い", fixed: true, insensitive: false };

/// The encodings of the encodings corpus, each with the comment line its
/// files get (text that encoding holds).
const ENCODINGS: [(&str, &str); 9] = [
    ("shift_jis", "// 吾輩は猫である。名前はまだ無い。どこで生れたかとんと見当がつかぬ。"),
    ("euc-jp", "// 何でも薄暗いじめじめした所で泣いていた事だけは記憶している。名前はまだ無い。"),
    ("gbk", "// 天地玄黄，宇宙洪荒。日月盈昃，辰宿列张。寒来暑往，秋收冬藏。"),
    ("big5", "// 學而時習之，不亦說乎？有朋自遠方來，不亦樂乎？"),
    ("euc-kr", "// 다람쥐 헌 쳇바퀴에 타고파. 동해 물과 백두산이 마르고 닳도록."),
    ("windows-1251", "// Съешь же ещё этих мягких французских булок, да выпей чаю."),
    ("windows-1252", "// Les naïfs ægithales hâtifs pondant à Noël où il gèle sont sûrs d'être déçus."),
    ("utf-16le", "// 吾輩は猫である。Съешь же ещё этих мягких булок. 天地玄黄。"),
    ("utf-8", "// 名前はまだ無い。天地玄黄。다람쥐. Съешь же ещё. Noël."),
];

// ---------------------------------------------------------------- corpus

/// Files as (space-relative path without the leading `/`, bytes).
struct Corpus {
    files: Vec<(String, Vec<u8>)>,
    bytes: u64,
    sources: Vec<PathBuf>,
    /// The folders `rg` searches, each with the encoding it is told
    /// (`None`: the whole corpus, as it finds it).
    folders: Vec<(String, Option<&'static str>)>,
}

fn registry_sources() -> Vec<PathBuf> {
    let home = std::env::var_os("CARGO_HOME").map(PathBuf::from).or_else(|| {
        let home = std::env::var_os("HOME")?;
        Some(PathBuf::from(home).join(".cargo"))
    });
    let Some(home) = home else { return Vec::new() };
    let Ok(entries) = std::fs::read_dir(home.join("registry").join("src")) else { return Vec::new() };
    let mut dirs: Vec<PathBuf> = entries.flatten().map(|e| e.path()).filter(|p| p.is_dir()).collect();
    dirs.sort();
    dirs
}

/// Every regular file under `dir` (symlinks are not followed), keyed by its
/// path relative to the registry source directory, e.g. `serde-1.0.0/src/lib.rs`.
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

/// A path the front stores as is, so its files are the ones `rg` sees.
fn storable(relative: &str) -> bool {
    !relative.chars().any(|c| c.is_control() || c == '\\')
        && relative.len() < 4000
        && relative.split('/').count() < 64
        && relative.split('/').all(|s| s.len() <= 255 && s != "." && s != "..")
}

fn load_corpus(target_bytes: u64) -> Corpus {
    let sources = registry_sources();
    let mut candidates = BTreeMap::new();
    for source in &sources {
        walk(source, "", &mut candidates);
    }
    let mut corpus = Corpus { files: Vec::new(), bytes: 0, sources, folders: vec![(String::new(), None)] };
    for (relative, path) in candidates {
        if corpus.bytes >= target_bytes {
            break;
        }
        let small = std::fs::metadata(&path).is_ok_and(|m| m.len() <= MAX_FILE_BYTES);
        if !small || !storable(&relative) {
            continue;
        }
        let Ok(bytes) = std::fs::read(&path) else { continue };
        if bytes.contains(&0) {
            continue;
        }
        if std::str::from_utf8(&bytes).is_err() {
            continue;
        }
        corpus.bytes += bytes.len() as u64;
        corpus.files.push((relative, bytes));
    }
    corpus
}

/// `corpus` in the encodings of [`ENCODINGS`], a file in each in turn, with
/// the encoding's comment line after every eighth line, under a folder
/// named for it; files an encoding cannot hold are left out.
fn encoded(corpus: Corpus) -> Corpus {
    let mut out = Corpus {
        files: Vec::new(),
        bytes: 0,
        sources: corpus.sources,
        folders: ENCODINGS.iter().map(|(label, _)| ((*label).to_owned(), Some(*label))).collect(),
    };
    for (i, (relative, bytes)) in corpus.files.into_iter().enumerate() {
        let (label, comment) = ENCODINGS[i % ENCODINGS.len()];
        let text = String::from_utf8(bytes).expect("the corpus is UTF-8");
        let mut commented = String::with_capacity(text.len() + text.len() / 4);
        for (n, line) in text.split_inclusive('\n').enumerate() {
            commented.push_str(line);
            if n % 8 == 7 && line.ends_with('\n') {
                commented.push_str(comment);
                commented.push('\n');
            }
        }
        let encoding = encoding_rs::Encoding::for_label(label.as_bytes()).expect("a known label");
        let bytes = if encoding == encoding_rs::UTF_16LE {
            "\u{feff}".encode_utf16().chain(commented.encode_utf16()).flat_map(u16::to_le_bytes).collect()
        } else {
            let (bytes, _, unmappable) = encoding.encode(&commented);
            if unmappable {
                continue;
            }
            bytes.into_owned()
        };
        out.bytes += bytes.len() as u64;
        out.files.push((format!("{label}/{relative}"), bytes));
    }
    out
}

fn write_to_disk(corpus: &Corpus, dir: &Path) {
    for (relative, bytes) in &corpus.files {
        let path = dir.join(relative);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).expect("create corpus directory");
        }
        std::fs::write(&path, bytes).expect("write corpus file");
    }
}

// ---------------------------------------------------------------- processes

/// `agentvfs-worker` from the target directory of this bench's front binary.
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

/// Spawns `command` and returns it with the address of its first stdout line,
/// `listening on <ADDR>`; the rest of stdout is drained so it never blocks.
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

/// A worker process; killed on drop.
struct Worker {
    child: Child,
    binary: PathBuf,
    addr: String,
    front: String,
    index_dir: PathBuf,
}

/// How the worker gets its cache memory: `--reserve-cache` or not.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Memory {
    Reserved,
    OnDemand,
}

impl Worker {
    fn start(binary: &Path, front: &str, listen: &str, index_dir: &Path, memory: Memory) -> Worker {
        let mut command = Command::new(binary);
        command.args(["--listen", listen, "--front", front, "--index-dir"]).arg(index_dir);
        command.arg(format!("--reserve-cache={}", memory == Memory::Reserved));
        let (child, addr) = spawn_listening(&mut command, "agentvfs-worker");
        Worker { child, binary: binary.to_owned(), addr, front: front.to_owned(), index_dir: index_dir.to_owned() }
    }

    /// Kills the process and starts a new one on the same address: its
    /// content cache starts empty.
    fn restart(&mut self, memory: Memory) {
        rss::note("worker", self.child.id());
        let _ = self.child.kill();
        let _ = self.child.wait();
        *self = Worker::start(&self.binary, &self.front, &self.addr, &self.index_dir, memory);
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        rss::note("worker", self.child.id());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A front and its worker on a temporary store; both killed on drop.
struct Stack {
    front: Child,
    front_addr: String,
    worker: Worker,
    _temp: tempfile::TempDir,
}

impl Stack {
    async fn start() -> Stack {
        let temp = tempfile::tempdir().expect("temp dir");
        // The worker must know the front's address before the front exists.
        let port = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("free port").port();
        let front_addr = format!("127.0.0.1:{port}");
        let index = temp.path().join("index");
        let worker = Worker::start(&worker_binary(), &front_addr, "127.0.0.1:0", &index, Memory::Reserved);
        let mut command = Command::new(env!("CARGO_BIN_EXE_agentvfs-front"));
        command
            .args(["--dev", "--listen", &front_addr, "--worker", &worker.addr, "--durability", "off"])
            .args(["--default-quota-bytes", "100000000000", "--default-quota-files", "10000000", "--data-dir"])
            .arg(temp.path().join("data"));
        let (front, _) = spawn_listening(&mut command, "agentvfs-front");
        let stack = Stack { front, front_addr, worker, _temp: temp };
        stack.wait_serving().await;
        stack
    }

    async fn connect(&self) -> Result<Channel, tonic::transport::Error> {
        Channel::from_shared(format!("http://{}", self.front_addr)).expect("valid uri").connect().await
    }

    async fn wait_serving(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(channel) = self.connect().await {
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

    /// Restarts the worker, then waits until the front reaches it again with
    /// a grep of one small system file, so the cold run pays for an empty
    /// cache and not for reconnecting.
    async fn restart_worker(&mut self, channel: &Channel, memory: Memory) {
        self.worker.restart(memory);
        let probe = pb::GrepRequest { space: SPACE.into(), pattern: "x".into(), path: "/AGENT.md".into(), ..count() };
        let deadline = Instant::now() + Duration::from_secs(20);
        while let Err(status) = client(channel).grep(probe.clone()).await {
            assert!(Instant::now() < deadline, "front never reached the restarted worker: {status:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        let _ = self.front.kill();
        let _ = self.front.wait();
    }
}

fn client(channel: &Channel) -> FileSystemClient<Channel> {
    FileSystemClient::new(channel.clone()).max_decoding_message_size(64 << 20).max_encoding_message_size(64 << 20)
}

// ---------------------------------------------------------------- load

/// Writes every file with `LOAD_CONCURRENCY` concurrent calls; returns the
/// paths the front refused, with the reason.
async fn load(stack: &Stack, corpus: &Arc<Corpus>) -> Vec<(String, String)> {
    AdminClient::new(stack.connect().await.expect("connect"))
        .create_space(pb::CreateSpaceRequest { name: SPACE.into(), ..Default::default() })
        .await
        .expect("create space");
    let mut channels = Vec::new();
    for _ in 0..LOAD_CHANNELS {
        channels.push(stack.connect().await.expect("connect"));
    }
    let next = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for task in 0..LOAD_CONCURRENCY {
        let (mut fs, next, corpus) = (client(&channels[task % LOAD_CHANNELS]), next.clone(), corpus.clone());
        tasks.push(tokio::spawn(async move {
            let mut refused = Vec::new();
            while let Some((relative, bytes)) = corpus.files.get(next.fetch_add(1, Ordering::Relaxed)) {
                let request = pb::WriteRequest {
                    space: SPACE.into(),
                    path: format!("/{relative}"),
                    body: Some(pb::write_request::Body::Data(bytes.clone())),
                    ..Default::default()
                };
                if let Err(status) = fs.write(request).await {
                    refused.push((relative.clone(), format!("{:?}: {}", status.code(), status.message())));
                }
            }
            refused
        }));
    }
    let mut refused = Vec::new();
    for task in tasks {
        refused.extend(task.await.expect("load task panicked"));
    }
    refused.sort();
    refused
}

/// Waits until `Search` answers from an index that reflects the space's
/// current revision; returns the seconds waited.
async fn wait_for_index(channel: &Channel) -> f64 {
    let started = Instant::now();
    let revision = AdminClient::new(channel.clone())
        .get_space(pb::GetSpaceRequest { space: SPACE.into() })
        .await
        .expect("get space")
        .into_inner()
        .revision;
    let mut fs = client(channel);
    loop {
        let request = pb::SearchRequest { space: SPACE.into(), query: "fn".into(), page_size: 1, ..Default::default() };
        if fs.search(request).await.is_ok_and(|r| r.into_inner().index_revision >= revision) {
            return started.elapsed().as_secs_f64();
        }
        assert!(started.elapsed() < INDEX_WAIT, "the search index did not reach revision {revision}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

// ---------------------------------------------------------------- measurements

/// One timed search: seconds and total matching lines, plus what the pages
/// report about themselves (zero for rg).
#[derive(Clone, Copy, Default)]
struct Run {
    secs: f64,
    lines: u64,
    pages: u64,
    files_visited: u64,
    bytes_scanned: u64,
    skipped: u64,
    /// Sum of the front's own per-page `elapsed_micros`.
    server_secs: f64,
    /// CPU seconds: rg's own, or the front's and the worker's together.
    cpu_secs: f64,
    /// Median wall time of the runs this one was the best of.
    median_secs: f64,
}

fn find_rg() -> PathBuf {
    let on_path = std::env::var_os("PATH")
        .map(|paths| std::env::split_paths(&paths).map(|dir| dir.join("rg")).collect::<Vec<_>>())
        .unwrap_or_default();
    let cargo_bin = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cargo")))
        .map(|home| home.join("bin").join("rg"));
    let find = || on_path.iter().chain(cargo_bin.iter()).find(|p| p.is_file()).cloned();
    if let Some(rg) = find() {
        return rg;
    }
    println!("rg not found; running cargo install ripgrep --locked");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let status = Command::new(cargo).args(["install", "ripgrep", "--locked"]).status().expect("run cargo install");
    assert!(status.success(), "cargo install ripgrep failed");
    find().expect("rg is still missing after cargo install")
}

/// `rg -c` over each of `folders` of `dir` in turn, told its encoding, all
/// summed. `-uu` searches hidden and ignore-listed files too, so rg sees
/// exactly the files that were loaded into the space.
fn rg_once(rg: &Path, query: &Query, dir: &Path, folders: &[(String, Option<&str>)]) -> Run {
    let mut run = Run::default();
    for (folder, encoding) in folders {
        let mut command = Command::new(rg);
        command.args(["-c", "-uu"]);
        if let Some(encoding) = encoding {
            command.args(["--encoding", encoding]);
        }
        if query.fixed {
            command.arg("-F");
        }
        if query.insensitive {
            command.arg("-i");
        }
        command.arg("-e").arg(query.pattern).arg(dir.join(folder)).stderr(Stdio::null());
        let (start, cpu_before) = (Instant::now(), cpu::of_waited_children());
        let output = command.output().expect("run rg");
        run.secs += start.elapsed().as_secs_f64();
        run.cpu_secs += cpu::of_waited_children() - cpu_before;
        // Exit status 1 only means "no match".
        assert!(matches!(output.status.code(), Some(0 | 1)), "rg failed: {:?}", output.status);
        run.lines += String::from_utf8_lossy(&output.stdout)
            .lines()
            .filter_map(|line| line.rsplit_once(':').and_then(|(_, n)| n.parse::<u64>().ok()))
            .sum::<u64>();
    }
    run
}

/// Best of `TIMED_RUNS` after one warm-up run.
fn rg_best(rg: &Path, query: &Query, dir: &Path, folders: &[(String, Option<&str>)]) -> Run {
    rg_once(rg, query, dir, folders);
    fastest((0..TIMED_RUNS).map(|_| rg_once(rg, query, dir, folders)).collect())
}

/// The fastest of `runs`, noting their median time.
fn fastest(mut runs: Vec<Run>) -> Run {
    runs.sort_by(|a, b| a.secs.total_cmp(&b.secs));
    let median_secs = runs[runs.len() / 2].secs;
    Run { median_secs, ..runs.swap_remove(0) }
}

fn count() -> pb::GrepRequest {
    pb::GrepRequest {
        space: SPACE.into(),
        output_mode: pb::GrepOutputMode::Count as i32,
        head_limit: Some(0),
        ..Default::default()
    }
}

/// The whole space, page after page until `complete`.
async fn grep_all(channel: &Channel, query: &Query, pids: [u32; 2]) -> Run {
    let mut fs = client(channel);
    let mut run = Run::default();
    let mut token = String::new();
    let cpu_used = || pids.iter().map(|&pid| cpu::of_process(pid)).sum::<f64>();
    let cpu_before = cpu_used();
    let start = Instant::now();
    loop {
        let request = pb::GrepRequest {
            pattern: query.pattern.into(),
            fixed_strings: query.fixed,
            case_insensitive: query.insensitive,
            page_token: std::mem::take(&mut token),
            ..count()
        };
        let page = fs.grep(request).await.unwrap_or_else(|s| panic!("grep {:?} failed: {s:?}", query.pattern));
        let page = page.into_inner();
        run.pages += 1;
        run.lines += page.files.iter().map(|f| f.count).sum::<u64>();
        run.skipped += page.skipped.len() as u64;
        if let Some(stats) = page.stats {
            run.files_visited += stats.files_visited;
            run.bytes_scanned += stats.bytes_scanned;
            run.server_secs += stats.elapsed_micros as f64 / 1e6;
        }
        if page.complete {
            break;
        }
        token = page.next_page_token;
    }
    run.secs = start.elapsed().as_secs_f64();
    run.cpu_secs = cpu_used() - cpu_before;
    run
}

// ---------------------------------------------------------------- report

struct Row {
    query: &'static Query,
    rg: Run,
    cold: Run,
    warm: Run,
    /// Cold, on a worker without `--reserve-cache`.
    on_demand: Run,
}

impl Row {
    /// Whether every Grep run counted the lines rg counted.
    fn counts_agree(&self) -> bool {
        [&self.cold, &self.warm, &self.on_demand].iter().all(|run| run.lines == self.rg.lines)
    }
}

fn verdict(ratio: f64, goal: f64) -> &'static str {
    if ratio >= goal { "PASS" } else { "MISS" }
}

fn run_json(run: &Run, bytes: u64) -> serde_json::Value {
    json!({
        "seconds": run.secs,
        "median_seconds": run.median_secs,
        "mb_per_s": bytes as f64 / MB / run.secs,
        "matching_lines": run.lines,
        "pages": run.pages,
        "files_visited": run.files_visited,
        "bytes_scanned": run.bytes_scanned,
        "skipped": run.skipped,
        "server_seconds": run.server_secs,
        "cpu_seconds": run.cpu_secs,
    })
}

/// `target/` of the build that produced the front binary.
fn target_dir() -> PathBuf {
    let binary = Path::new(env!("CARGO_BIN_EXE_agentvfs-front"));
    binary.parent().and_then(Path::parent).map_or_else(|| PathBuf::from("target"), Path::to_path_buf)
}

#[tokio::main]
async fn main() {
    let target_mb = std::env::var("AGENTVFS_BENCH_MB").ok().and_then(|v| v.parse().ok()).unwrap_or(DEFAULT_CORPUS_MB);
    let rg = find_rg();

    let encodings = std::env::var("AGENTVFS_BENCH_CORPUS").is_ok_and(|c| c == "encodings");
    let started = Instant::now();
    let corpus = load_corpus(target_mb * 1_000_000);
    let corpus = if encodings { encoded(corpus) } else { corpus };
    assert!(!corpus.files.is_empty(), "no cargo registry sources found under $CARGO_HOME/registry/src");
    let sources: Vec<String> = corpus.sources.iter().map(|p| p.display().to_string()).collect();
    println!(
        "corpus: {} files, {:.1} MB (target {target_mb} MB) from {}, read in {:.1}s",
        corpus.files.len(),
        corpus.bytes as f64 / MB,
        sources.join(", "),
        started.elapsed().as_secs_f64()
    );
    if corpus.bytes < target_mb * 1_000_000 {
        println!("  (the registry holds less qualifying text than the target; every qualifying file is used)");
    }
    let disk = tempfile::tempdir().expect("temp dir");
    write_to_disk(&corpus, disk.path());
    // Written back now, so rg never runs beside the kernel's writeback of
    // the corpus (which slowed its first runs by half here).
    let synced = Command::new("sync").status().is_ok_and(|s| s.success());
    assert!(synced, "sync failed");

    let mut stack = Stack::start().await;
    let corpus = Arc::new(corpus);
    let started = Instant::now();
    let refused = load(&stack, &corpus).await;
    let load_secs = started.elapsed().as_secs_f64();
    let (files, mut bytes) = (corpus.files.len() - refused.len(), corpus.bytes);
    for (relative, reason) in &refused {
        println!("  refused {relative}: {reason}");
        // Keep both sides on the same files.
        bytes -= corpus.files.iter().find(|(r, _)| r == relative).map_or(0, |(_, b)| b.len() as u64);
        let _ = std::fs::remove_file(disk.path().join(relative));
    }
    println!(
        "load (durability off; not a measured figure): {files} files, {:.1} MB in {load_secs:.1}s \
         ({:.0} files/s, {:.1} MB/s) with {LOAD_CONCURRENCY} concurrent writes over {LOAD_CHANNELS} connections",
        bytes as f64 / MB,
        files as f64 / load_secs,
        bytes as f64 / MB / load_secs,
    );
    let folders = corpus.folders.clone();
    drop(corpus);

    let channel = stack.connect().await.expect("connect");
    println!(
        "search index caught up with the load after {:.1}s more (not a measured figure)",
        wait_for_index(&channel).await
    );
    stack.restart_worker(&channel, Memory::Reserved).await;
    let pids = [stack.front.id(), stack.worker.child.id()];
    for _ in 0..2 {
        grep_all(&channel, &QUERIES[0], pids).await;
    }
    let mut rows = Vec::new();
    let mut queries: Vec<&'static Query> = QUERIES.iter().collect();
    if encodings {
        queries.push(&JAPANESE_QUERY);
    }
    let warm_goal = if encodings { 1.0 } else { 2.0 };
    for query in queries {
        let rg_run = rg_best(&rg, query, disk.path(), &folders);
        // Best of TIMED_RUNS, like rg: every cold run after a
        // worker restart, every warm run right after a cold one.
        let (mut cold, mut warm, mut on_demand) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..TIMED_RUNS {
            stack.restart_worker(&channel, Memory::Reserved).await;
            let pids = [stack.front.id(), stack.worker.child.id()];
            cold.push(grep_all(&channel, query, pids).await);
            warm.push(grep_all(&channel, query, pids).await);
            stack.restart_worker(&channel, Memory::OnDemand).await;
            let pids = [stack.front.id(), stack.worker.child.id()];
            on_demand.push(grep_all(&channel, query, pids).await);
        }
        let (cold, warm, on_demand) = (fastest(cold), fastest(warm), fastest(on_demand));
        println!(
            "  {:<16} rg {:.3}s (median {:.3}s, cpu {:.2}s) | cold {:.3}s (median {:.3}s, cpu {:.2}s, {} pages, \
             {} files) | warm {:.3}s (median {:.3}s, cpu {:.2}s)",
            query.name,
            rg_run.secs,
            rg_run.median_secs,
            rg_run.cpu_secs,
            cold.secs,
            cold.median_secs,
            cold.cpu_secs,
            cold.pages,
            cold.files_visited,
            warm.secs,
            warm.median_secs,
            warm.cpu_secs,
        );
        rows.push(Row { query, rg: rg_run, cold, warm, on_demand });
    }

    let mb = bytes as f64 / MB;
    println!();
    println!(
        "{:<16} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8}",
        "query", "rg s", "rg MB/s", "cold s", "MB/s", "cold/rg", "warm s", "MB/s", "warm/rg"
    );
    for row in &rows {
        println!(
            "{:<16} {:>8.3} {:>8.0} {:>8.3} {:>8.0} {:>7.2}x {:>8.3} {:>8.0} {:>7.2}x",
            row.query.name,
            row.rg.secs,
            mb / row.rg.secs,
            row.cold.secs,
            mb / row.cold.secs,
            row.rg.secs / row.cold.secs,
            row.warm.secs,
            mb / row.warm.secs,
            row.rg.secs / row.warm.secs,
        );
    }

    println!();
    println!(
        "{:<16} {:>8} {:>8} {:>8} {:>8} {:>8}   (front + worker CPU against rg's)",
        "cpu seconds", "rg", "cold", "cold/rg", "warm", "warm/rg"
    );
    for row in &rows {
        println!(
            "{:<16} {:>8.2} {:>8.2} {:>7.2}x {:>8.2} {:>7.2}x",
            row.query.name,
            row.rg.cpu_secs,
            row.cold.cpu_secs,
            row.rg.cpu_secs / row.cold.cpu_secs,
            row.warm.cpu_secs,
            row.rg.cpu_secs / row.warm.cpu_secs,
        );
    }

    println!();
    println!(
        "{:<16} {:>8} {:>8} {:>8} {:>8} {:>8}   (cold on a worker without --reserve-cache)",
        "cold, on demand", "s", "median s", "MB/s", "/rg", "cpu s"
    );
    for row in &rows {
        println!(
            "{:<16} {:>8.3} {:>8.3} {:>8.0} {:>7.2}x {:>8.2}",
            row.query.name,
            row.on_demand.secs,
            row.on_demand.median_secs,
            mb / row.on_demand.secs,
            row.rg.secs / row.on_demand.secs,
            row.on_demand.cpu_secs,
        );
    }

    println!();
    println!("goals: warm >= {warm_goal}x rg speed, cold >= 0.5x rg speed");
    for row in &rows {
        let (cold, warm) = (row.rg.secs / row.cold.secs, row.rg.secs / row.warm.secs);
        println!(
            "{:<16} warm {:>5.2}x {}   cold {:>5.2}x {}",
            row.query.name,
            warm,
            verdict(warm, warm_goal),
            cold,
            verdict(cold, 0.5)
        );
    }

    println!();
    println!("{:<16} {:>12} {:>12} {:>12}", "matching lines", "rg -c", "Grep COUNT", "");
    for row in &rows {
        let agree = row.counts_agree();
        let flag = if agree {
            "agree".to_owned()
        } else {
            format!(
                "*** MISMATCH *** (cold {} / warm {} / cold on demand {})",
                row.cold.lines, row.warm.lines, row.on_demand.lines
            )
        };
        println!("{:<16} {:>12} {:>12} {flag}", row.query.name, row.rg.lines, row.warm.lines);
        if row.cold.skipped + row.warm.skipped > 0 {
            println!("{:<16} Grep skipped {} files (cold) / {} (warm)", "", row.cold.skipped, row.warm.skipped);
        }
    }

    let queries: Vec<serde_json::Value> = rows
        .iter()
        .map(|row| {
            let (cold, warm) = (row.rg.secs / row.cold.secs, row.rg.secs / row.warm.secs);
            json!({
                "name": row.query.name,
                "pattern": row.query.pattern,
                "fixed_strings": row.query.fixed,
                "case_insensitive": row.query.insensitive,
                "rg": run_json(&row.rg, bytes),
                "cold": run_json(&row.cold, bytes),
                "cold_without_reserve_cache": run_json(&row.on_demand, bytes),
                "warm": run_json(&row.warm, bytes),
                "cold_vs_rg": { "ratio": cold, "goal": 0.5, "result": verdict(cold, 0.5) },
                "warm_vs_rg": { "ratio": warm, "goal": warm_goal, "result": verdict(warm, warm_goal) },
                "counts_agree": row.counts_agree(),
            })
        })
        .collect();
    rss::note("front", stack.front.id());
    rss::note("worker", stack.worker.child.id());
    let peak_rss = rss::report();
    let report = json!({
        "peak_rss_mib": peak_rss,
        "corpus": { "files": files, "bytes": bytes, "sources": sources, "refused": refused.len() },
        "load": { "seconds": load_secs, "durability": "off", "concurrency": LOAD_CONCURRENCY },
        "queries": queries,
    });
    let path = target_dir().join(if encodings { "bench-grep-encodings.json" } else { "bench-grep.json" });
    let text = serde_json::to_string_pretty(&report).expect("serialize report");
    std::fs::write(&path, text + "\n").expect("write bench-grep.json");
    println!("\nwrote {}", path.display());
}
