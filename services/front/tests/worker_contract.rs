//! End-to-end: what a worker that cannot do its job tells the front and
//! its own health check, through real front and worker processes.

// Tests may unwrap: a panic is the failure report.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::time::{Duration, Instant};

use agentvfs_proto::v1 as pb;
use agentvfs_proto::v1::admin_client::AdminClient;
use agentvfs_proto::v1::file_system_client::FileSystemClient;
use support::{Bearer, Stack, assert_error, metadata, write_text};
use tonic::Code;
use tonic::transport::Channel;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

const OPS: &str = "ops-token-0123456789";

/// The worker's health for its service, polled until it is `wanted` (bounded).
async fn wait_health(worker: &str, wanted: ServingStatus) {
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut last = None;
    loop {
        if let Ok(channel) = Channel::from_shared(format!("http://{worker}")).unwrap().connect().await {
            let request = tonic_health::pb::HealthCheckRequest { service: "agentvfs.v1.Worker".into() };
            if let Ok(reply) = HealthClient::new(channel).check(request).await {
                last = Some(reply.into_inner().status);
                if last == Some(wanted as i32) {
                    return;
                }
            }
        }
        assert!(Instant::now() < deadline, "worker health stayed {last:?}, not {wanted:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A worker started without a token the front accepts (none, an unknown
/// one, or one of a principal who may not fetch content) cannot fetch any
/// content: Grep fails with WORKER_UNAVAILABLE naming the cause, instead of
/// a complete page listing every file as skipped, and the worker's health
/// says NOT_SERVING so that its readiness probe keeps it out of rotation.
#[tokio::test]
async fn a_worker_whose_credentials_the_front_refuses_fails_grep_and_is_not_serving() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.toml");
    std::fs::write(
        &tokens,
        format!(
            "[[tokens]]\ntoken = \"{OPS}\"\nprincipal = \"ops\"\nadmin = true\n\n\
             [[tokens]]\ntoken = \"agent-token-0123456789\"\nprincipal = \"agent\"\n"
        ),
    )
    .unwrap();
    let refused: [&[(&str, &str)]; 3] =
        [&[], &[("AGENTVFS_TOKEN", "unknown-token-0123456789")], &[("AGENTVFS_TOKEN", "agent-token-0123456789")]];
    for worker_env in refused {
        let stack = Stack::start_configured(&["--tokens", tokens.to_str().unwrap()], &[], worker_env).await;
        let channel = stack.front.channel().await;
        let mut admin = AdminClient::with_interceptor(channel.clone(), Bearer(OPS));
        admin.create_space(pb::CreateSpaceRequest { name: "s".into(), ..Default::default() }).await.unwrap();
        let mut fs = FileSystemClient::with_interceptor(channel, Bearer(OPS));
        for i in 0..5 {
            fs.write(write_text("s", &format!("/f{i}.txt"), "the needle\n")).await.unwrap();
        }
        let grep = pb::GrepRequest { space: "s".into(), pattern: "needle".into(), ..Default::default() };
        let error = fs.grep(grep).await.expect_err("a worker that cannot fetch content must not answer");
        assert_error(&error, Code::Unavailable, "WORKER_UNAVAILABLE");
        assert_eq!(metadata(&error, "retryable"), "true");
        assert_eq!(metadata(&error, "cause"), "CREDENTIALS_REFUSED", "{error:?} ({worker_env:?})");
        assert!(error.message().contains("credentials"), "{error:?}");
        wait_health(&stack.worker.addr, ServingStatus::NotServing).await;
    }
}

/// The same worker with a token the front accepts serves, and greps.
#[tokio::test]
async fn a_worker_whose_credentials_the_front_accepts_serves() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.toml");
    std::fs::write(&tokens, format!("[[tokens]]\ntoken = \"{OPS}\"\nprincipal = \"ops\"\nadmin = true\n")).unwrap();
    let stack = Stack::start_configured(&["--tokens", tokens.to_str().unwrap()], &[], &[("AGENTVFS_TOKEN", OPS)]).await;
    let channel = stack.front.channel().await;
    let mut admin = AdminClient::with_interceptor(channel.clone(), Bearer(OPS));
    admin.create_space(pb::CreateSpaceRequest { name: "s".into(), ..Default::default() }).await.unwrap();
    let mut fs = FileSystemClient::with_interceptor(channel, Bearer(OPS));
    fs.write(write_text("s", "/f.txt", "the needle\n")).await.unwrap();
    let grep = pb::GrepRequest { space: "s".into(), pattern: "needle".into(), ..Default::default() };
    let reply = fs.grep(grep).await.unwrap().into_inner();
    assert!(reply.complete && reply.skipped.is_empty(), "{reply:?}");
    assert_eq!(reply.files.len(), 1);
    wait_health(&stack.worker.addr, ServingStatus::Serving).await;
}
