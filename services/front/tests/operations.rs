//! End-to-end: metrics scraped from the real process move with the traffic.

// Tests may unwrap: a panic is the failure report.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::io::Read as _;
use std::time::{Duration, Instant};

use agentvfs_proto::v1 as pb;

use support::{Front, failpoint_binaries, read, reason, sample, scrape, write_text};

#[tokio::test]
async fn rpc_metrics_count_calls_by_method_and_code() {
    let front = Front::start_with(&["--metrics-listen", "127.0.0.1:0"]).await;
    let metrics = front.metrics();
    front.space("s").await;
    let mut fs = front.fs().await;
    fs.write(write_text("s", "/a.txt", "a")).await.unwrap();
    for _ in 0..3 {
        fs.read(read("s", "/a.txt")).await.unwrap();
    }
    let _ = fs.read(read("s", "/missing.txt")).await.unwrap_err();
    let reads = ["agentvfs_rpc_requests_total", "/agentvfs.v1.FileSystem/Read", "code=\"0\""];
    let first = scrape(&metrics);
    assert_eq!(sample(&first, &reads), Some(3.0), "{first}");
    assert_eq!(
        sample(&first, &["agentvfs_rpc_requests_total", "/agentvfs.v1.FileSystem/Read", "code=\"5\""]),
        Some(1.0)
    );
    assert!(sample(&first, &["agentvfs_rpc_duration_seconds_count", "/agentvfs.v1.FileSystem/Write"]).is_some());
    assert!(sample(&first, &["agentvfs_flush_duration_seconds_count"]).is_some_and(|n| n >= 1.0));
    // How many writers a flush answered, in buckets of writers, not seconds.
    let lone_flushes = ["agentvfs_flush_batch_writers_bucket", "le=\"2\""];
    assert!(sample(&first, &lone_flushes).is_some_and(|n| n >= 1.0), "{first}");

    fs.read(read("s", "/a.txt")).await.unwrap();
    assert_eq!(sample(&scrape(&metrics), &reads), Some(4.0));
}

async fn worker_health(front: &Front) -> i32 {
    let mut health = tonic_health::pb::health_client::HealthClient::new(front.channel().await);
    let request = tonic_health::pb::HealthCheckRequest { service: "agentvfs.v1.Worker".into() };
    health.check(request).await.map(|r| r.into_inner().status).unwrap_or(-1)
}

async fn wait_worker_health(front: &Front, want: tonic_health::pb::health_check_response::ServingStatus) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while worker_health(front).await != want as i32 {
        assert!(Instant::now() < deadline, "worker health never became {want:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn readiness_for_search_follows_the_worker() {
    use tonic_health::pb::health_check_response::ServingStatus;
    let mut stack = support::Stack::start(&[]).await;
    wait_worker_health(&stack.front, ServingStatus::Serving).await;
    stack.worker.kill();
    wait_worker_health(&stack.front, ServingStatus::NotServing).await;
    stack.worker.restart().await;
    wait_worker_health(&stack.front, ServingStatus::Serving).await;
}

#[tokio::test]
async fn sigterm_under_load_loses_no_acknowledged_write() {
    let mut front = Front::start().await;
    front.space("s").await;
    let fs = front.fs().await;
    let writers: Vec<_> = (0..8)
        .map(|w| {
            let mut fs = fs.clone();
            tokio::spawn(async move {
                let mut acked = Vec::new();
                for i in 0.. {
                    let path = format!("/load/{w}-{i}.txt");
                    match fs.write(write_text("s", &path, &path)).await {
                        Ok(_) => acked.push(path),
                        Err(status) => {
                            // Refused while draining, or the connection closed.
                            assert!(
                                matches!(
                                    status.code(),
                                    tonic::Code::Unavailable | tonic::Code::Unknown | tonic::Code::Cancelled
                                ),
                                "{status:?}"
                            );
                            return acked;
                        }
                    }
                }
                acked
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(front.terminate().await.success(), "a drained front exits 0");
    let mut acked = Vec::new();
    for writer in writers {
        acked.extend(writer.await.unwrap());
    }
    assert!(acked.len() > 10, "the load ran: {} writes", acked.len());
    front.crash_and_restart().await;
    let mut fs = front.fs().await;
    for path in &acked {
        assert_eq!(&fs.read(read("s", path)).await.unwrap().into_inner().content, path);
    }
}

#[tokio::test]
async fn every_call_gets_a_request_id_back() {
    let front = Front::start().await;
    front.space("s").await;
    let mut fs = front.fs().await;
    let response = fs.read(read("s", "/AGENT.md")).await.unwrap();
    let generated = response.metadata().get("x-request-id").unwrap().to_str().unwrap().to_owned();
    assert_eq!(generated.len(), 26, "a ULID: {generated}");
    let mut request = tonic::Request::new(read("s", "/missing"));
    request.metadata_mut().insert("x-request-id", "trace-me-42".parse().unwrap());
    let status = fs.read(request).await.unwrap_err();
    assert_eq!(status.metadata().get("x-request-id").unwrap(), "trace-me-42");
}

#[tokio::test]
async fn a_call_past_the_request_timeout_fails_cleanly_and_applies_at_most_once() {
    let (binary, _) = failpoint_binaries();
    // Creating the space passes the point once; the next commit stalls 3 s.
    let stall = [("FAILPOINTS", "store::before_commit=1*off->sleep(3000)")];
    let front = Front::start_binary(&binary, &["--request-timeout-seconds", "1"], &stall).await;
    front.space("s").await;
    let mut fs = front.fs().await;
    let write = pb::WriteRequest { idempotency_key: "slow-1".into(), ..write_text("s", "/slow.md", "slow\n") };

    let started = Instant::now();
    let status = fs.write(write.clone()).await.unwrap_err();
    let waited = started.elapsed();
    assert_eq!((status.code(), reason(&status).as_str()), (tonic::Code::ResourceExhausted, "OVERLOADED"));
    assert!(waited >= Duration::from_millis(900) && waited < Duration::from_millis(2_500), "{waited:?}");
    // The server is free for other calls while the stalled one finishes.
    assert_eq!(fs.read(read("s", "/missing.md")).await.unwrap_err().code(), tonic::Code::NotFound);
    // A change that waits behind it past its own time fails the same way,
    // and is dropped unrun: its caller was told it did not finish.
    let left = fs.write(write_text("s", "/left.md", "left\n")).await.unwrap_err();
    assert_eq!(reason(&left), "OVERLOADED", "{left:?}");

    // Retries with the key wait for the original, then get its result.
    // Meanwhile a retry waits behind it in the space's line of changes
    // until its own time is up, and is then dropped unrun. (On a database,
    // where changes take no turn, the key would be reported busy instead.)
    let deadline = Instant::now() + Duration::from_secs(10);
    let version = loop {
        match fs.write(write.clone()).await {
            Ok(response) => break response.into_inner().version,
            Err(status) => {
                assert_eq!(reason(&status), "OVERLOADED", "{status:?}");
                assert!(Instant::now() < deadline, "the stalled write never finished");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    assert_eq!(version, 1);
    let request = pb::ListVersionsRequest { space: "s".into(), path: "/slow.md".into(), ..Default::default() };
    let versions = fs.list_versions(request).await.unwrap().into_inner().versions;
    assert_eq!(versions.iter().map(|v| v.idempotency_key.as_str()).collect::<Vec<_>>(), ["slow-1"]);
    // Had it run, its commit would be done by now (each stalls 3 s).
    tokio::time::sleep(Duration::from_millis(3_500)).await;
    assert_eq!(fs.read(read("s", "/left.md")).await.unwrap_err().code(), tonic::Code::NotFound);
}

#[tokio::test]
async fn each_call_logs_one_span_with_method_space_principal_status_and_latency() {
    let temp = tempfile::tempdir().unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_agentvfs-front"))
        .args(["--dev", "--listen", "127.0.0.1:0", "--log-format", "json", "--data-dir"])
        .arg(temp.path().join("data"))
        .env("AGENTVFS_LOG", "agentvfs_front=debug")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.take().unwrap()), &mut line).unwrap();
    let addr = line.trim().strip_prefix("listening on ").unwrap().to_owned();
    let channel = tonic::transport::Channel::from_shared(format!("http://{addr}")).unwrap().connect().await.unwrap();
    let mut admin = agentvfs_proto::v1::admin_client::AdminClient::new(channel.clone());
    admin.create_space(pb::CreateSpaceRequest { name: "logged".into(), ..Default::default() }).await.unwrap();
    let mut fs = agentvfs_proto::v1::file_system_client::FileSystemClient::new(channel);
    let mut request = tonic::Request::new(read("logged", "/missing.md"));
    request.metadata_mut().insert("x-request-id", "req-logged-1".parse().unwrap());
    assert_eq!(fs.read(request).await.unwrap_err().code(), tonic::Code::NotFound);
    // Stop the process to read every log line, keeping this runtime free to
    // answer the server's GOAWAY.
    std::process::Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    let logs = tokio::task::spawn_blocking(move || {
        let mut logs = String::new();
        child.stderr.take().unwrap().read_to_string(&mut logs).unwrap();
        child.wait().unwrap();
        logs
    })
    .await
    .unwrap();

    let finished: Vec<serde_json::Value> = logs
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|l| l["fields"]["message"] == "rpc finished")
        .collect();
    let read_call = finished
        .iter()
        .find(|l| l["span"]["request_id"] == "req-logged-1")
        .unwrap_or_else(|| panic!("no finished span for the read in {logs}"));
    let span = &read_call["span"];
    assert_eq!(span["method"], "/agentvfs.v1.FileSystem/Read");
    assert_eq!(span["principal"], "dev");
    assert_eq!(span["status"], "5", "NOT_FOUND");
    assert!(span["space"].as_str().is_some_and(|s| !s.is_empty()), "{span}");
    assert!(span["latency_ms"].as_f64().is_some_and(|ms| ms > 0.0), "{span}");
}

/// A TCP proxy to `target` on a loopback port; aborting the returned task
/// drops every connection through it at once, as a vanished client does.
async fn proxy(target: String) -> (String, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let task = tokio::spawn(async move {
        let mut connections = tokio::task::JoinSet::new();
        loop {
            let (mut inbound, _) = listener.accept().await.unwrap();
            let target = target.clone();
            connections.spawn(async move {
                let mut outbound = tokio::net::TcpStream::connect(target).await.unwrap();
                let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
            });
        }
    });
    (addr, task)
}

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap().count()
}

#[tokio::test]
async fn a_client_that_vanishes_mid_stream_frees_what_its_calls_held() {
    let front = Front::start_with(&["--metrics-listen", "127.0.0.1:0"]).await;
    let metrics = front.metrics();
    front.space("s").await;
    let in_flight = |body: &str| sample(body, &["agentvfs_rpc_in_flight"]).unwrap_or(0.0);
    let (fds_before, calls_before) = (open_fds(front.pid()), in_flight(&scrape(&metrics)));

    // Half-sent uploads and open watches on connections that then vanish.
    let (through, vanish) = proxy(front.addr.clone()).await;
    let connect = || async {
        let channel = tonic::transport::Channel::from_shared(format!("http://{through}")).unwrap();
        agentvfs_proto::v1::file_system_client::FileSystemClient::new(channel.connect().await.unwrap())
    };
    let mut calls = Vec::new();
    for n in 0..10 {
        let mut fs = connect().await;
        let (chunks, stream) = tokio::sync::mpsc::channel(4);
        let header = pb::UploadHeader { space: "s".into(), path: format!("/partial-{n}.bin"), ..Default::default() };
        chunks.send(pb::UploadChunk { part: Some(pb::upload_chunk::Part::Header(header)) }).await.unwrap();
        chunks.send(pb::UploadChunk { part: Some(pb::upload_chunk::Part::Data(vec![7; 100_000])) }).await.unwrap();
        let mut watcher = connect().await;
        let watch = pb::WatchRequest { space: "s".into(), path: "/".into(), from_revision: 0 };
        let events = watcher.watch(watch).await.unwrap().into_inner();
        calls.push((
            tokio::spawn(async move { fs.upload(tokio_stream::wrappers::ReceiverStream::new(stream)).await }),
            chunks,
            events,
        ));
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while in_flight(&scrape(&metrics)) < calls_before + 10.0 {
        assert!(Instant::now() < deadline, "the uploads never reached the front");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let fds_open = open_fds(front.pid());
    assert!(fds_open >= fds_before + 10, "{fds_before} -> {fds_open}");
    // The connections drop before the uploads end: cut, not finished.
    vanish.abort();
    let _ = vanish.await;

    let deadline = Instant::now() + Duration::from_secs(10);
    while in_flight(&scrape(&metrics)) > calls_before || open_fds(front.pid()) > fds_before {
        assert!(
            Instant::now() < deadline,
            "still {} calls in flight and {} descriptors open (before: {calls_before}, {fds_before})",
            in_flight(&scrape(&metrics)),
            open_fds(front.pid())
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Nothing of an unfinished upload is saved.
    drop(calls);
    let mut fs = front.fs().await;
    assert_eq!(fs.read(read("s", "/partial-0.bin")).await.unwrap_err().code(), tonic::Code::NotFound);
}
