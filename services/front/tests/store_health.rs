//! End-to-end: the front's health follows its store's, on both engines.
//!
//! A sled store that failed a flush refuses every later change at once
//! (STORE_UNAVAILABLE, not a hang until the call times out), and takes both
//! health entries out of service, `Admin` being the liveness probe; a
//! restart recovers every acknowledged write. A database that goes away
//! takes only `FileSystem` (readiness) out of service, fails calls within
//! the connect timeout, and the front serves again as soon as the database
//! answers, without a restart.

// Tests may unwrap: a panic is the failure report.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::time::{Duration, Instant};

use agentvfs_testdb::Cluster;
use support::{Front, assert_error, failpoint_binaries, metadata, read, write_text};
use tonic::Code;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

const FILE_SYSTEM: &str = "agentvfs.v1.FileSystem";
const ADMIN: &str = "agentvfs.v1.Admin";
/// How long a refused call may take: well under the request timeout.
const FAST: Duration = Duration::from_secs(3);
/// How long health may take to follow the store (it checks every second).
const HEALTH_FOLLOWS: Duration = Duration::from_secs(5);

async fn status(front: &Front, service: &str) -> ServingStatus {
    let request = HealthCheckRequest { service: service.into() };
    let status = HealthClient::new(front.channel().await).check(request).await.unwrap().into_inner().status;
    ServingStatus::try_from(status).unwrap()
}

/// Polls `service`'s health until it is `want`; fails after `within`.
async fn wait_status(front: &Front, service: &str, want: ServingStatus, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let now = status(front, service).await;
        if now == want {
            return;
        }
        assert!(Instant::now() < deadline, "{service} still {now:?} after {within:?}, not {want:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_failed_flush_fails_later_writes_fast_and_has_the_front_restarted() {
    let (binary, _) = failpoint_binaries();
    // Opening the store, creating the space and the first writes flush;
    // from the eleventh flush on, every flush fails.
    let failing = [("FAILPOINTS", "store::flush=10*off->return")];
    let mut front = Front::start_binary(&binary, &[], &failing).await;
    front.space("s").await;
    let mut fs = front.fs().await;
    let mut acknowledged = Vec::new();
    let failed = loop {
        let n = acknowledged.len();
        assert!(n < 100, "no flush failed");
        match fs.write(write_text("s", &format!("/f{n}.txt"), &format!("file {n}\n"))).await {
            Ok(_) => acknowledged.push(n),
            Err(status) => break status,
        }
    };
    assert!(!acknowledged.is_empty(), "the first writes were flushed");
    // The write whose flush failed is not acknowledged.
    assert_error(&failed, Code::Unavailable, "STORE_UNAVAILABLE");
    assert!(metadata(&failed, "cause").contains("store::flush fault point"), "{failed:?}");

    // Every later change fails at once, with the cause.
    for n in 0..3 {
        let started = Instant::now();
        let refused = fs.write(write_text("s", &format!("/later{n}.txt"), "refused\n")).await.unwrap_err();
        assert!(started.elapsed() < FAST, "a refused write took {:?}", started.elapsed());
        assert_error(&refused, Code::Unavailable, "STORE_UNAVAILABLE");
        assert!(metadata(&refused, "cause").contains("store::flush fault point"), "{refused:?}");
    }
    // Neither readiness nor liveness says serving any more.
    wait_status(&front, FILE_SYSTEM, ServingStatus::NotServing, HEALTH_FOLLOWS).await;
    wait_status(&front, ADMIN, ServingStatus::NotServing, HEALTH_FOLLOWS).await;

    // What Kubernetes does next: a restart, on the same store.
    front.crash_and_restart().await;
    assert_eq!(status(&front, ADMIN).await, ServingStatus::Serving);
    let mut fs = front.fs().await;
    for n in &acknowledged {
        let content = fs.read(read("s", &format!("/f{n}.txt"))).await.unwrap().into_inner().content;
        assert_eq!(content, format!("file {n}\n"));
    }
    fs.write(write_text("s", "/after.txt", "after the restart\n")).await.unwrap();
}

#[tokio::test]
async fn a_database_that_goes_away_takes_files_out_of_service_until_it_answers_again() {
    let cluster = Cluster::start();
    let url = cluster.create_database();
    let args = ["--database-url", &url, "--database-connect-timeout-seconds", "1", "--metrics-listen", "127.0.0.1:0"];
    let (binary, _) = failpoint_binaries();
    let front = Front::start_binary(&binary, &args, &[]).await;
    let metrics = front.metrics();
    front.space("s").await;
    let mut fs = front.fs().await;
    fs.write(write_text("s", "/before.txt", "written before\n")).await.unwrap();

    cluster.kill();
    wait_status(&front, FILE_SYSTEM, ServingStatus::NotServing, HEALTH_FOLLOWS).await;
    // Alive: restarting the front would not bring the database back.
    assert_eq!(status(&front, ADMIN).await, ServingStatus::Serving);
    for n in 0..3 {
        let started = Instant::now();
        let refused = fs.write(write_text("s", &format!("/down{n}.txt"), "refused\n")).await.unwrap_err();
        assert!(started.elapsed() < FAST, "a refused write took {:?}", started.elapsed());
        assert_error(&refused, Code::Unavailable, "STORE_UNAVAILABLE");
    }
    assert_eq!(status(&front, FILE_SYSTEM).await, ServingStatus::NotServing);

    cluster.restart();
    wait_status(&front, FILE_SYSTEM, ServingStatus::Serving, HEALTH_FOLLOWS).await;
    assert_eq!(status(&front, ADMIN).await, ServingStatus::Serving);
    fs.write(write_text("s", "/after.txt", "written after\n")).await.unwrap();
    let before = fs.read(read("s", "/before.txt")).await.unwrap().into_inner().content;
    assert_eq!(before, "written before\n");

    // The pool and the statements show in /metrics.
    let body = support::scrape(&metrics);
    let max = support::sample(&body, &["agentvfs_store_pool_max_connections"]);
    assert_eq!(max, Some(16.0), "{body}");
    for state in ["state=\"in_use\"", "state=\"idle\""] {
        assert!(support::sample(&body, &["agentvfs_store_pool_connections", state]).is_some(), "{body}");
    }
    assert!(support::sample(&body, &["agentvfs_store_transaction_retries_total"]).is_some(), "{body}");
    assert!(support::sample(&body, &["agentvfs_store_statement_seconds_count", "commit"]).is_some(), "{body}");
}
