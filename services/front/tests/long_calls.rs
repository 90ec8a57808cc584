//! End-to-end: calls that outlive their first authorization (`Watch`,
//! `Upload`) follow changes of access made while they run.

// Tests may unwrap: a panic is the failure report.
#![allow(clippy::unwrap_used)]

mod support;

use std::time::Duration;

use agentvfs_proto::v1 as pb;
use agentvfs_proto::v1::admin_client::AdminClient;
use agentvfs_proto::v1::file_system_client::FileSystemClient;
use support::{Front, assert_error, write_text};
use tokio_stream::wrappers::ReceiverStream;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;
use tonic::{Code, Status};

#[derive(Clone)]
struct Bearer(&'static str);

impl tonic::service::Interceptor for Bearer {
    fn call(&mut self, mut request: tonic::Request<()>) -> Result<tonic::Request<()>, Status> {
        request.metadata_mut().insert("authorization", format!("Bearer {}", self.0).parse().unwrap());
        Ok(request)
    }
}

type Fs = FileSystemClient<InterceptedService<Channel, Bearer>>;
type Admin = AdminClient<InterceptedService<Channel, Bearer>>;

const OPS: &str = "ops-token-0123456789";
const ALICE: &str = "alice-token-0123456789";
const BOB: &str = "bob-token-0123456789";

/// A front with three principals: `ops` (admin), `alice` (editor of space
/// `s`) and `bob` (viewer of `s`).
struct Tenants {
    front: Front,
    _dir: tempfile::TempDir,
    ops: Admin,
    alice: Fs,
    bob: Fs,
}

impl Tenants {
    async fn start() -> Tenants {
        let dir = tempfile::tempdir().unwrap();
        let tokens = dir.path().join("tokens.toml");
        std::fs::write(
            &tokens,
            format!(
                "[[tokens]]\ntoken = \"{OPS}\"\nprincipal = \"ops\"\nadmin = true\n\n\
                 [[tokens]]\ntoken = \"{ALICE}\"\nprincipal = \"alice\"\n\n\
                 [[tokens]]\ntoken = \"{BOB}\"\nprincipal = \"bob\"\n"
            ),
        )
        .unwrap();
        let front = Front::start_with(&["--tokens", tokens.to_str().unwrap()]).await;
        let channel = front.channel().await;
        let mut ops = AdminClient::with_interceptor(channel.clone(), Bearer(OPS));
        ops.create_space(pb::CreateSpaceRequest { name: "s".into(), ..Default::default() }).await.unwrap();
        let tenants = Tenants {
            ops,
            alice: FileSystemClient::with_interceptor(channel.clone(), Bearer(ALICE)),
            bob: FileSystemClient::with_interceptor(channel, Bearer(BOB)),
            front,
            _dir: dir,
        };
        tenants.grant("alice", pb::Role::Editor).await;
        tenants.grant("bob", pb::Role::Viewer).await;
        tenants
    }

    /// Sets `principal`'s role in `s` (`Unspecified` removes it).
    async fn grant(&self, principal: &str, role: pb::Role) {
        let request = pb::SetAccessRequest {
            space: "s".into(),
            principal: principal.into(),
            role: role as i32,
            ..Default::default()
        };
        self.ops.clone().set_access(request).await.unwrap();
    }

    async fn delete_space(&self) {
        let request = pb::DeleteSpaceRequest { space: "s".into(), confirm: "s".into(), ..Default::default() };
        self.ops.clone().delete_space(request).await.unwrap();
    }
}

fn watch_all() -> pb::WatchRequest {
    pb::WatchRequest { space: "s".into(), path: "/".into(), from_revision: 0 }
}

/// The next message of a stream, which must come within ten seconds.
async fn next<T>(stream: &mut tonic::Streaming<T>) -> Result<Option<T>, Status> {
    tokio::time::timeout(Duration::from_secs(10), stream.message()).await.expect("a message or an error in time")
}

/// Asserts that `status` is what a fresh call gets: same code, reason and
/// message.
#[track_caller]
fn same_error(status: &Status, fresh: &Status) {
    assert_error(status, fresh.code(), &support::reason(fresh));
    assert_eq!(status.message(), fresh.message(), "{status:?} vs a fresh call's {fresh:?}");
}

/// Reads a watch until it ends with an error; fails on any event for `path`.
async fn error_without(stream: &mut tonic::Streaming<pb::WatchEvent>, path: &str) -> Status {
    loop {
        match next(stream).await {
            Ok(Some(event)) => assert_ne!(event.path, path, "an event after access was lost: {event:?}"),
            Ok(None) => panic!("the watch ended without an error"),
            Err(status) => return status,
        }
    }
}

#[tokio::test]
async fn a_watcher_whose_role_is_removed_gets_no_later_event_and_not_found() {
    let t = Tenants::start().await;
    let mut stream = t.bob.clone().watch(watch_all()).await.unwrap().into_inner();
    t.alice.clone().write(write_text("s", "/before.md", "seen\n")).await.unwrap();
    assert_eq!(next(&mut stream).await.unwrap().unwrap().path, "/before.md");

    t.grant("bob", pb::Role::Unspecified).await;
    t.alice.clone().write(write_text("s", "/after.md", "not for bob\n")).await.unwrap();
    let status = error_without(&mut stream, "/after.md").await;
    let fresh = t.bob.clone().watch(watch_all()).await.unwrap_err();
    assert_eq!(fresh.code(), Code::NotFound);
    same_error(&status, &fresh);
    assert!(next(&mut stream).await.unwrap().is_none(), "the stream ends after its error");
}

#[tokio::test]
async fn a_watcher_of_a_deleted_space_gets_not_found() {
    let t = Tenants::start().await;
    let mut stream = t.bob.clone().watch(watch_all()).await.unwrap().into_inner();
    t.alice.clone().write(write_text("s", "/before.md", "seen\n")).await.unwrap();
    assert_eq!(next(&mut stream).await.unwrap().unwrap().path, "/before.md");

    t.delete_space().await;
    let status = error_without(&mut stream, "").await;
    let fresh = t.bob.clone().watch(watch_all()).await.unwrap_err();
    assert_eq!(fresh.code(), Code::NotFound);
    same_error(&status, &fresh);
}

fn upload_header(path: &str) -> pb::UploadChunk {
    pb::UploadChunk {
        part: Some(pb::upload_chunk::Part::Header(pb::UploadHeader {
            space: "s".into(),
            path: path.into(),
            ..Default::default()
        })),
    }
}

fn upload_data(bytes: Vec<u8>) -> pb::UploadChunk {
    pb::UploadChunk { part: Some(pb::upload_chunk::Part::Data(bytes)) }
}

/// An upload is authorized when its header arrives, so that a caller who
/// may not write there is refused before sending the bytes (the stream is
/// still open when the refusal comes), and again when the bytes are stored.
#[tokio::test]
async fn an_upload_is_refused_at_its_header_when_the_caller_may_not_write() {
    let t = Tenants::start().await;
    let (sender, receiver) = tokio::sync::mpsc::channel(4);
    sender.send(upload_header("/viewer.bin")).await.unwrap();
    sender.send(upload_data(vec![7; 1024])).await.unwrap();
    let mut bob = t.bob.clone();
    let reply = tokio::time::timeout(Duration::from_secs(10), bob.upload(ReceiverStream::new(receiver)))
        .await
        .expect("the refusal comes while the upload stream is still open");
    assert_error(&reply.unwrap_err(), Code::PermissionDenied, "PERMISSION_DENIED");
    drop(sender);
}

#[tokio::test]
async fn an_upload_whose_writer_loses_its_role_midway_saves_nothing() {
    let t = Tenants::start().await;
    let (sender, receiver) = tokio::sync::mpsc::channel(4);
    sender.send(upload_header("/midway.bin")).await.unwrap();
    sender.send(upload_data(vec![1; 64 * 1024])).await.unwrap();
    let mut alice = t.alice.clone();
    let upload = tokio::spawn(async move { alice.upload(ReceiverStream::new(receiver)).await });

    t.grant("alice", pb::Role::Unspecified).await;
    sender.send(upload_data(vec![2; 64 * 1024])).await.unwrap();
    drop(sender);
    let status = upload.await.unwrap().unwrap_err();
    let fresh = t.alice.clone().write(write_text("s", "/midway.bin", "x")).await.unwrap_err();
    same_error(&status, &fresh);
    // Nothing was saved.
    let mut ops_fs = FileSystemClient::with_interceptor(t.front.channel().await, Bearer(OPS));
    let read = ops_fs.read(support::read("s", "/midway.bin")).await.unwrap_err();
    assert_eq!(read.code(), Code::NotFound, "{read:?}");
}
