//! End-to-end: workers named by a host name join and leave the pool as the
//! name resolves, the way a Kubernetes headless Service lists worker pods.
//!
//! The front runs in a mount namespace of its own (`unshare --mount`) where
//! a test-owned file is bind-mounted over `/etc/hosts`, so the system
//! resolver answers the worker name with the addresses the test writes.
//! Each worker listens on its own loopback address and the same port, as
//! pods of one Deployment do.

// Tests may unwrap: a panic is the failure report.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use agentvfs_proto::v1 as pb;
use agentvfs_proto::v1::file_system_client::FileSystemClient;
use tonic::transport::Channel;

use support::{Front, Worker, sample, scrape, with_front_port, worker_binary, write_text};

const NAME: &str = "workers.agentvfs.test";

/// Points `NAME` at `addresses` in the front's hosts file. Written in place:
/// the bind mount follows the file, not its name.
fn resolve_to(hosts: &Path, addresses: &[&str]) {
    let mut text = String::from("127.0.0.1 localhost\n");
    for address in addresses {
        text.push_str(&format!("{address} {NAME}\n"));
    }
    std::fs::write(hosts, text).unwrap();
}

/// A front launcher that runs the real front with `hosts` as its `/etc/hosts`.
fn front_in_namespace(dir: &Path, hosts: &Path) -> PathBuf {
    let front = env!("CARGO_BIN_EXE_agentvfs-front");
    let script = dir.join("front-in-namespace");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nexec unshare --mount sh -c 'mount --bind \"$0\" /etc/hosts && exec \"$@\"' {} {} \"$@\"\n",
            hosts.display(),
            front
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    script
}

/// A worker serving metrics on a port of its own; returns it and its
/// metrics endpoint.
async fn start_worker(front: &str, listen: &str, dir: &Path) -> (Worker, String) {
    let env = [("AGENTVFS_METRICS_LISTEN", "127.0.0.1:0")];
    let worker = Worker::start_binary(&worker_binary(), front, listen, dir, &env).await;
    let metrics = worker.metrics();
    (worker, metrics)
}

fn grep_jobs(metrics: &str) -> f64 {
    sample(&scrape(metrics), &["agentvfs_worker_grep_job_seconds_count"]).unwrap_or(0.0)
}

/// Polls until `check` holds (bounded wait).
async fn eventually(what: &str, mut check: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !check().await {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn search_hits(fs: &mut FileSystemClient<Channel>) -> Option<usize> {
    let request = pb::SearchRequest { space: "d".into(), query: "needle".into(), page_size: 100, ..Default::default() };
    Some(fs.search(request).await.ok()?.into_inner().hits.len())
}

async fn grep_files(fs: &mut FileSystemClient<Channel>) -> usize {
    let request =
        pb::GrepRequest { space: "d".into(), pattern: "needle".into(), head_limit: Some(0), ..Default::default() };
    let response = fs.grep(request).await.unwrap().into_inner();
    assert!(response.complete);
    response.files.len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_behind_a_name_join_and_leave_as_the_name_resolves() {
    let temp = tempfile::tempdir().unwrap();
    let hosts = temp.path().join("hosts");
    resolve_to(&hosts, &["127.0.0.2"]);
    let binary = front_in_namespace(temp.path(), &hosts);
    let (front, front_addr, mut a, a_metrics, port) = with_front_port(async |front_addr| {
        let (a, a_metrics) = start_worker(front_addr, "127.0.0.2:0", &temp.path().join("a")).await;
        let port = a.addr.rsplit_once(':').unwrap().1.to_owned();
        let target = format!("{NAME}:{port}");
        let args = ["--worker", &target, "--worker-refresh-seconds", "1", "--metrics-listen", "127.0.0.1:0"];
        let front = Front::try_start_binary_at(&binary, front_addr, &args, &[]).await?;
        Some((front, front_addr.to_owned(), a, a_metrics, port))
    })
    .await;
    let front_metrics = front.metrics();
    front.space("d").await;
    let mut fs = front.fs().await;
    for n in 0..30 {
        fs.write(write_text("d", &format!("/f{n:02}.txt"), "a needle here\n")).await.unwrap();
    }
    eventually("the first worker indexes every file", async || search_hits(&mut fs).await == Some(30)).await;
    assert_eq!(grep_files(&mut fs).await, 30);
    assert_eq!(sample(&scrape(&front_metrics), &["agentvfs_workers "]), Some(1.0));

    // Scale out: a second worker on the same port, then the name lists it.
    let (_b, b_metrics) = start_worker(&front_addr, &format!("127.0.0.3:{port}"), &temp.path().join("b")).await;
    resolve_to(&hosts, &["127.0.0.2", "127.0.0.3"]);
    eventually("the front knows both workers", async || {
        sample(&scrape(&front_metrics), &["agentvfs_workers "]) == Some(2.0)
    })
    .await;
    for n in 30..40 {
        fs.write(write_text("d", &format!("/f{n:02}.txt"), "a needle here\n")).await.unwrap();
    }
    // Grep jobs go to both.
    let (a_before, b_before) = (grep_jobs(&a_metrics), grep_jobs(&b_metrics));
    for _ in 0..10 {
        assert_eq!(grep_files(&mut fs).await, 40);
    }
    let (a_jobs, b_jobs) = (grep_jobs(&a_metrics) - a_before, grep_jobs(&b_metrics) - b_before);
    assert!(a_jobs >= 3.0 && b_jobs >= 3.0, "grep jobs were not spread: {a_jobs} and {b_jobs}");

    // Scale in: the first pod goes away and the name stops listing it. The
    // second worker's index was built from the store and followed the
    // outbox, so search and grep stay whole; the outbox no longer waits for
    // the worker that left.
    a.kill();
    resolve_to(&hosts, &["127.0.0.3"]);
    eventually("the front forgets the first worker", async || {
        sample(&scrape(&front_metrics), &["agentvfs_workers "]) == Some(1.0)
    })
    .await;
    for n in 40..50 {
        fs.write(write_text("d", &format!("/f{n:02}.txt"), "a needle here\n")).await.unwrap();
    }
    eventually("search finds every file through the second worker", async || search_hits(&mut fs).await == Some(50))
        .await;
    assert_eq!(grep_files(&mut fs).await, 50);
    // The front samples the outbox every 5 s: this reading is from after
    // the last writes.
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(sample(&scrape(&front_metrics), &["agentvfs_outbox_depth"]), Some(0.0));

    // A name that stops resolving keeps the workers it had.
    std::fs::write(&hosts, "127.0.0.1 localhost\n").unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(sample(&scrape(&front_metrics), &["agentvfs_workers "]), Some(1.0));
    assert_eq!(grep_files(&mut fs).await, 50);
}
