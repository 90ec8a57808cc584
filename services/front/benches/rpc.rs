//! End-to-end RPC throughput of the real `agentvfs-front` process over
//! loopback gRPC.
//!
//! Measures:
//! 1. Durable `Write` rate of ~200-byte text files at concurrency 1, 16 and 64
//!    under each `--durability` mode: `group` (the default), `per-write` (one
//!    flush per write) and `off` (no durability), and the ratios group/per-write
//!    and group/off at concurrency 64.
//! 2. Small `Read` rate at concurrency 64 against a no-op RPC served by the same
//!    process (`grpc.health.v1.Health/Check`), and their ratio.
//!
//! Every measurement runs for a fixed wall time after a short warm-up and
//! reports calls/s with p50/p99 latency. Figures are printed, never asserted,
//! and also written as JSON to `target/bench-rpc.json`.
//!
//! ```sh
//! cargo bench -p agentvfs-front --bench rpc
//! ```

use std::fmt::Write as _;
use std::future::Future;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use agentvfs_proto::v1 as pb;
use agentvfs_proto::v1::admin_client::AdminClient;
use agentvfs_proto::v1::file_system_client::FileSystemClient;
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

/// A running front on its own temporary store; killed on drop.
struct Front {
    child: Child,
    addr: String,
    _temp: tempfile::TempDir,
}

impl Front {
    async fn start(durability: &str) -> Front {
        let temp = tempfile::tempdir().expect("temp dir");
        let mut child = Command::new(env!("CARGO_BIN_EXE_agentvfs-front"))
            .args(["--dev", "--listen", "127.0.0.1:0", "--rate-limit", "0", "--durability", durability, "--data-dir"])
            .arg(temp.path().join("data"))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn agentvfs-front");
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
        let front = Front { child, addr, _temp: temp };
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
        AdminClient::new(channel)
            .create_space(pb::CreateSpaceRequest { name: SPACE.into(), quota: Some(quota), ..Default::default() })
            .await
            .expect("create space");
    }

    fn stop(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Front {
    fn drop(&mut self) {
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
async fn drive<F, Fut>(channels: &[Channel], concurrency: usize, call: F) -> Stats
where
    F: Fn(Channel, usize, u64) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = Result<(), tonic::Status>> + Send,
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
    let percentile = |p: f64| {
        let index = ((latencies.len() as f64 * p).ceil() as usize).clamp(1, latencies.len().max(1)) - 1;
        latencies.get(index).map_or(0.0, |d| d.as_secs_f64() * 1e3)
    };
    Stats {
        calls: latencies.len(),
        secs: (last_end - measured_from).as_secs_f64().max(1e-9),
        p50_ms: percentile(0.50),
        p99_ms: percentile(0.99),
    }
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

async fn bench_writes(durability: &str) -> Vec<(usize, Stats)> {
    let front = Front::start(durability).await;
    front.create_space().await;
    let mut results = Vec::new();
    for concurrency in WRITE_LEVELS {
        let channels = front.channels(concurrency.min(MAX_CHANNELS)).await;
        let stats = drive(&channels, concurrency, move |channel, task, n| async move {
            let request = pb::WriteRequest {
                space: SPACE.into(),
                path: format!("/c{concurrency}/w{task}/f{n}.txt"),
                body: Some(pb::write_request::Body::Content(payload(concurrency, task, n))),
                ..Default::default()
            };
            FileSystemClient::new(channel).write(request).await.map(drop)
        })
        .await;
        print_row(durability, concurrency, &stats);
        results.push((concurrency, stats));
    }
    front.stop();
    results
}

async fn bench_reads() -> (Stats, Stats) {
    let front = Front::start("group").await;
    front.create_space().await;
    let channels = front.channels(READ_CONCURRENCY.min(MAX_CHANNELS)).await;
    let setup = pb::WriteRequest {
        space: SPACE.into(),
        path: "/read/small.txt".into(),
        body: Some(pb::write_request::Body::Content(payload(0, 0, 0))),
        ..Default::default()
    };
    FileSystemClient::new(channels[0].clone()).write(setup).await.expect("write the file to read");

    let noop = drive(&channels, READ_CONCURRENCY, |channel, _, _| async move {
        HealthClient::new(channel).check(HealthCheckRequest { service: String::new() }).await.map(drop)
    })
    .await;
    print_row("health (no-op)", READ_CONCURRENCY, &noop);
    let read = drive(&channels, READ_CONCURRENCY, |channel, _, _| async move {
        let request = pb::ReadRequest { space: SPACE.into(), path: "/read/small.txt".into(), ..Default::default() };
        let reply = FileSystemClient::new(channel).read(request).await?.into_inner();
        assert_eq!(reply.content.len(), 200, "read returned the wrong content");
        Ok(())
    })
    .await;
    print_row("read 200 B", READ_CONCURRENCY, &read);
    front.stop();
    (read, noop)
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

fn stats_json(s: &Stats) -> String {
    format!(
        r#"{{"calls": {}, "seconds": {:.3}, "per_second": {:.1}, "p50_ms": {:.3}, "p99_ms": {:.3}}}"#,
        s.calls,
        s.secs,
        s.rate(),
        s.p50_ms,
        s.p99_ms
    )
}

fn ratio_json(ratio: f64, goal: f64, result: &str) -> String {
    format!(r#"{{"ratio": {ratio:.3}, "goal": {goal}, "result": "{result}"}}"#)
}

/// `target/` of the build that produced the front binary.
fn target_dir() -> PathBuf {
    let binary = Path::new(env!("CARGO_BIN_EXE_agentvfs-front"));
    binary.parent().and_then(Path::parent).map_or_else(|| PathBuf::from("target"), Path::to_path_buf)
}

#[tokio::main]
async fn main() {
    println!("durable writes, ~200-byte files, {}s per level after {}ms warm-up", WINDOW.as_secs(), WARMUP.as_millis());
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
    println!("small reads vs no-op RPC, group front, {}s each", WINDOW.as_secs());
    print_header();
    let (read, noop) = bench_reads().await;
    let read_vs_noop = read.rate() / noop.rate();

    println!();
    let r1 = verdict("group/per-write @ c=64", group_vs_per_write, 5.0);
    let r2 = verdict("group/off @ c=64", group_vs_off, 0.5);
    let r3 = verdict("read/no-op @ c=64", read_vs_noop, 0.7);

    let mut json = String::from("{\n  \"writes\": {\n");
    for (i, (mode, levels)) in writes.iter().enumerate() {
        let rows: Vec<String> = levels.iter().map(|(c, s)| format!("\"{c}\": {}", stats_json(s))).collect();
        let comma = if i + 1 < writes.len() { "," } else { "" };
        let _ = writeln!(json, "    \"{mode}\": {{{}}}{comma}", rows.join(", "));
    }
    let _ = writeln!(json, "  }},");
    let _ = writeln!(json, "  \"read_c64\": {},", stats_json(&read));
    let _ = writeln!(json, "  \"noop_c64\": {},", stats_json(&noop));
    let _ = writeln!(json, "  \"ratios\": {{");
    let _ = writeln!(json, "    \"group_vs_per_write_c64\": {},", ratio_json(group_vs_per_write, 5.0, &r1));
    let _ = writeln!(json, "    \"group_vs_off_c64\": {},", ratio_json(group_vs_off, 0.5, &r2));
    let _ = writeln!(json, "    \"read_vs_noop_c64\": {}", ratio_json(read_vs_noop, 0.7, &r3));
    let _ = writeln!(json, "  }}\n}}");
    let path = target_dir().join("bench-rpc.json");
    std::fs::write(&path, json).expect("write bench-rpc.json");
    println!("\nwrote {}", path.display());
}
