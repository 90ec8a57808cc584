//! `agentvfs-load run` against the real `agentvfs-front` binary: templated
//! requests reach the service, the report has ghz's shape, and runs bounded
//! by count or by duration stop by themselves.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::io::{BufRead as _, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use agentvfs_proto::v1 as pb;
use agentvfs_proto::v1::admin_client::AdminClient;
use agentvfs_proto::v1::file_system_client::FileSystemClient;
use serde_json::{Value, json};
use tonic::transport::Channel;

#[path = "../../front/tests/support/binaries.rs"]
mod binaries;

/// The `agentvfs-front` binary, next to this package's binary.
fn front_binary() -> PathBuf {
    binaries::workspace_binaries(env!("CARGO_BIN_EXE_agentvfs-load")).join("agentvfs-front")
}

/// A dev-mode front on a loopback port with a temporary store; killed on drop.
struct Front {
    child: Child,
    addr: String,
    dir: tempfile::TempDir,
}

impl Front {
    fn start() -> Front {
        let dir = tempfile::tempdir().unwrap();
        let stderr = std::fs::File::create(dir.path().join("front.log")).unwrap();
        let mut child = Command::new(front_binary())
            .args(["--dev", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(dir.path().join("data"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .unwrap();
        // Keep reading stdout after the first line so the front never
        // blocks on (or fails writing to) a full or closed pipe.
        let stdout = child.stdout.take().unwrap();
        let (first, line) = mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            let _ = first.send(lines.next().and_then(Result::ok));
            for _ in lines {}
        });
        let line = line.recv_timeout(Duration::from_secs(30)).ok().flatten();
        let mut front = Front { child, addr: String::new(), dir };
        let Some(addr) = line.as_deref().and_then(|line| line.trim().strip_prefix("listening on ")) else {
            panic!("front did not print `listening on ADDR` (got {line:?}); log: {}", front.log());
        };
        front.addr = addr.to_owned();
        front
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("front.log")).unwrap_or_default()
    }

    async fn channel(&self) -> Channel {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            match Channel::from_shared(format!("http://{}", self.addr)).unwrap().connect().await {
                Ok(channel) => return channel,
                Err(error) if Instant::now() > deadline => panic!("cannot connect: {error}; log: {}", self.log()),
                Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
    }

    /// A new space; returns its ID.
    async fn space(&self, name: &str) -> String {
        AdminClient::new(self.channel().await)
            .create_space(pb::CreateSpaceRequest { name: name.into(), ..Default::default() })
            .await
            .unwrap()
            .into_inner()
            .id
    }

    /// Writes `scenario` into the front's temp dir and runs it; returns
    /// the parsed JSON report.
    async fn run(&self, scenario: &Value, args: &[&str]) -> Value {
        let path = self.dir.path().join("scenario.json");
        std::fs::write(&path, serde_json::to_vec_pretty(scenario).unwrap()).unwrap();
        let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_agentvfs-load"))
            .arg("run")
            .arg(&path)
            .args(["--format", "json"])
            .args(args)
            .output()
            .await
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "agentvfs-load failed: {stderr}\nfront log: {}", self.log());
        serde_json::from_str(&stdout).unwrap_or_else(|error| panic!("report is not JSON ({error}): {stdout}"))
    }
}

impl Drop for Front {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Every file under `dir`, through the paginated listing.
async fn files_under(front: &Front, space: &str, dir: &str) -> Vec<String> {
    let mut client = FileSystemClient::new(front.channel().await);
    let mut files = Vec::new();
    let mut page_token = String::new();
    loop {
        let page = client
            .list(pb::ListRequest {
                space: space.into(),
                path: dir.into(),
                recursive: true,
                page_size: 200,
                page_token: page_token.clone(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        files.extend(page.entries.into_iter().filter(|e| e.path.ends_with(".txt")).map(|e| e.path));
        if page.next_page_token.is_empty() {
            return files;
        }
        page_token = page.next_page_token;
    }
}

#[tokio::test]
async fn a_templated_write_scenario_runs_to_its_count() {
    let front = Front::start();
    let space = front.space("load").await;
    let scenario = json!({
        "call": "agentvfs.v1.FileSystem.Write",
        "host": front.addr,
        "insecure": true,
        "total": 200,
        "concurrency": 8,
        "connections": 2,
        "data": {
            "space": space,
            "path": "/load/{{.WorkerID}}/{{.RequestNumber}}.txt",
            "content": "request {{.RequestNumber}} {{.UUID}} at {{.TimestampUnix}}"
        },
        "metadata": {"x-agentvfs-tool-call": "load-{{.RequestNumber}}"}
    });
    let report = front.run(&scenario, &[]).await;

    assert_eq!(report["count"], 200, "{report}");
    assert_eq!(report["statusCodeDistribution"], json!({"OK": 200}), "{report}");
    assert_eq!(report["errorDistribution"], json!({}), "{report}");
    assert_eq!(report["endReason"], "normal");
    assert_eq!(report["options"]["total"], 200);
    assert_eq!(report["options"]["concurrency"], 8);
    let percentages: Vec<f64> =
        report["latencyDistribution"].as_array().unwrap().iter().map(|p| p["percentage"].as_f64().unwrap()).collect();
    assert_eq!(percentages, [10.0, 25.0, 50.0, 75.0, 90.0, 95.0, 99.0, 99.9]);
    let (fastest, slowest) = (report["fastest"].as_u64().unwrap(), report["slowest"].as_u64().unwrap());
    assert!(
        0 < fastest && fastest <= report["average"].as_u64().unwrap() && report["average"].as_u64().unwrap() <= slowest
    );
    assert!(slowest <= report["total"].as_u64().unwrap());
    assert!(report["rps"].as_f64().unwrap() > 0.0);

    // Every request number was used exactly once, each by one of the 8 callers.
    let files = files_under(&front, &space, "/load").await;
    let numbers: BTreeSet<u64> =
        files.iter().map(|path| path.rsplit('/').next().unwrap().trim_end_matches(".txt").parse().unwrap()).collect();
    assert_eq!(numbers, (0..200).collect(), "{files:?}");
    let workers: BTreeSet<&str> = files.iter().map(|path| path.split('/').nth(2).unwrap()).collect();
    assert!(workers.len() <= 8 && workers.iter().all(|w| w.starts_with('g') && w.contains('c')), "{workers:?}");
}

#[tokio::test]
async fn duration_runs_stop_by_themselves_and_errors_are_reported() {
    let front = Front::start();
    let space = front.space("load").await;
    FileSystemClient::new(front.channel().await)
        .write(pb::WriteRequest {
            space: space.clone(),
            path: "/hot.txt".into(),
            body: Some(pb::write_request::Body::Content("hot\n".into())),
            ..Default::default()
        })
        .await
        .unwrap();
    let read = json!({
        "call": "agentvfs.v1.FileSystem/Read",
        "host": front.addr,
        "insecure": true,
        "total": 1_000_000,
        "concurrency": 4,
        "data": {"space": space, "path": "/hot.txt"}
    });

    let started = Instant::now();
    let report = front.run(&read, &["--duration", "1s"]).await;
    assert!(started.elapsed() < Duration::from_secs(20), "a 1s run took {:?}", started.elapsed());
    assert_eq!(report["endReason"], "timeout", "{report}");
    let count = report["count"].as_u64().unwrap();
    assert!(count > 0 && count < 1_000_000, "{report}");
    assert_eq!(report["statusCodeDistribution"], json!({"OK": count}), "{report}");
    assert_eq!(report["options"]["duration"], 1_000_000_000u64);

    // Flags override the file: a read-only write is refused every time,
    // and the refusals are counted by code and message.
    let mut write = read.clone();
    write["call"] = "agentvfs.v1.FileSystem.Write".into();
    write["data"] = json!({"space": space, "path": "/denied/{{.RequestNumber}}.txt", "content": "x"});
    let report =
        front.run(&write, &["--metadata", "x-agentvfs-mode=read-only", "--total", "20", "--concurrency", "2"]).await;
    assert_eq!(report["count"], 20, "{report}");
    assert_eq!(report["statusCodeDistribution"], json!({"PermissionDenied": 20}), "{report}");
    let errors = report["errorDistribution"].as_object().unwrap();
    assert_eq!(errors.len(), 1, "{report}");
    let (message, times) = errors.iter().next().unwrap();
    assert!(message.starts_with("rpc error: code = PermissionDenied desc = "), "{message}");
    assert_eq!(times, 20);
    assert!(files_under(&front, &space, "/").await.iter().all(|path| !path.starts_with("/denied")));
}
