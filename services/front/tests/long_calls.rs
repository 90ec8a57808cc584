//! End-to-end: calls that outlive their first authorization (`Watch`,
//! `Download`, `Upload`) follow changes of access made while they run, and a
//! `Download` holds a bounded part of the file, whatever its size.

// Tests may unwrap: a panic is the failure report.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::time::Duration;

use agentvfs_proto::v1 as pb;
use agentvfs_proto::v1::admin_client::AdminClient;
use agentvfs_proto::v1::file_system_client::FileSystemClient;
use support::{Bearer, Front, assert_error, write_text};
use tokio_stream::wrappers::ReceiverStream;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;
use tonic::{Code, Status};

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

    // Normally the front has checked the header by now, and the role goes
    // while the bytes arrive. Should the removal land first, the header is
    // refused and the call ends before the next message: the answer and
    // what is saved must be the same either way.
    tokio::time::sleep(Duration::from_millis(100)).await;
    t.grant("alice", pb::Role::Unspecified).await;
    let _ = sender.send(upload_data(vec![2; 64 * 1024])).await;
    drop(sender);
    let status = upload.await.unwrap().unwrap_err();
    let fresh = t.alice.clone().write(write_text("s", "/midway.bin", "x")).await.unwrap_err();
    same_error(&status, &fresh);
    // Nothing was saved.
    let mut ops_fs = FileSystemClient::with_interceptor(t.front.channel().await, Bearer(OPS));
    let read = ops_fs.read(support::read("s", "/midway.bin")).await.unwrap_err();
    assert_eq!(read.code(), Code::NotFound, "{read:?}");
}

/// Uploads `data` to `path` in `s` in 1 MiB messages.
async fn upload(fs: &mut Fs, path: &str, data: &[u8]) -> pb::UploadResponse {
    let mut messages = vec![upload_header(path)];
    messages.extend(data.chunks(1 << 20).map(|chunk| upload_data(chunk.to_vec())));
    fs.upload(tokio_stream::iter(messages)).await.unwrap().into_inner()
}

/// Bytes that are not UTF-8 (so they are classified at a glance) and do not
/// repeat within a chunk.
fn binary(size: usize) -> Vec<u8> {
    let mut data: Vec<u8> = (0..size).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    data[0] = 0xFF;
    data
}

#[tokio::test]
async fn a_download_ends_with_not_found_when_its_space_is_deleted_midway() {
    let t = Tenants::start().await;
    let data = binary(16 << 20);
    upload(&mut t.alice.clone(), "/big.bin", &data).await;
    let request = pb::DownloadRequest { space: "s".into(), path: "/big.bin".into(), ..Default::default() };
    let mut stream = t.bob.clone().download(request.clone()).await.unwrap().into_inner();
    let first = next(&mut stream).await.unwrap().unwrap();
    assert_eq!(first.header.as_ref().unwrap().size, data.len() as u64);

    t.delete_space().await;
    let mut received = first.data.len();
    let status = loop {
        match next(&mut stream).await {
            Ok(Some(chunk)) => received += chunk.data.len(),
            Ok(None) => panic!("the whole file arrived after its space was deleted"),
            Err(status) => break status,
        }
    };
    assert!(received < data.len(), "{received} bytes");
    let fresh = t.bob.clone().download(request).await.unwrap_err();
    assert_eq!(fresh.code(), Code::NotFound);
    same_error(&status, &fresh);
}

/// Peak and current resident memory of a process, in bytes.
fn memory(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| -> u64 {
        let line = status.lines().find(|l| l.starts_with(name)).unwrap();
        line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 1024
    };
    (field("VmHWM:"), field("VmRSS:"))
}

/// Downloads `/big.bin` of space `s` whole; returns its size and BLAKE3 hex.
async fn download_all(front: &Front) -> (usize, String) {
    let request = pb::DownloadRequest { space: "s".into(), path: "/big.bin".into(), ..Default::default() };
    let mut stream = front.fs().await.download(request).await.unwrap().into_inner();
    let mut hasher = blake3::Hasher::new();
    let mut received = 0;
    while let Some(chunk) = next(&mut stream).await.unwrap() {
        received += chunk.data.len();
        hasher.update(&chunk.data);
    }
    (received, hasher.finalize().to_hex().to_string())
}

/// A download streams the file a run of chunks at a time: the front's peak
/// memory grows by far less than the file. (Reading the whole file and
/// copying it into messages grew it by about twice the file.)
#[tokio::test]
async fn a_download_holds_a_bounded_part_of_the_file() {
    const SIZE: usize = 48 << 20;
    let mut front = Front::start().await;
    front.space("s").await;
    let data = binary(SIZE);
    let hash = blake3::hash(&data).to_hex().to_string();
    let mut messages = vec![upload_header("/big.bin")];
    messages.extend(data.chunks(1 << 20).map(|chunk| upload_data(chunk.to_vec())));
    drop(data);
    let uploaded = front.fs().await.upload(tokio_stream::iter(messages)).await.unwrap().into_inner();
    assert_eq!(uploaded.hash, hash);
    // A fresh process, so that nothing the upload left behind is reused; a
    // first download, so that what the store keeps of pages it has read
    // once (about the file's size, whatever its cache setting) is not
    // counted against the download.
    front.crash_and_restart().await;
    assert_eq!(download_all(&front).await, (SIZE, hash.clone()));
    let pid = front.pid();
    // Resets the peak to the current resident size (Linux 4.0+).
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").unwrap();
    let (_, before) = memory(pid);

    assert_eq!(download_all(&front).await, (SIZE, hash));
    let (peak, _) = memory(pid);
    let growth = peak.saturating_sub(before);
    eprintln!("front resident memory: {before} bytes before the download, peak {peak} (+{growth})");
    assert!(growth < (SIZE / 4) as u64, "downloading {SIZE} bytes grew the front's peak memory by {growth} bytes");
}

/// Uploads `size` bytes of [`binary`] to `/big.bin` of space `s`, made 1 MiB
/// at a time as the call takes them; returns the front's answer.
async fn upload_streamed(front: &Front, size: usize) -> pb::UploadResponse {
    let data = binary(size);
    let (sender, receiver) = tokio::sync::mpsc::channel(2);
    let feeder = tokio::spawn(async move {
        let _ = sender.send(upload_header("/big.bin")).await;
        for piece in data.chunks(1 << 20) {
            if sender.send(upload_data(piece.to_vec())).await.is_err() {
                break;
            }
        }
    });
    let response = front.fs().await.upload(ReceiverStream::new(receiver)).await.unwrap().into_inner();
    feeder.await.unwrap();
    response
}

/// An upload goes to the store a batch at a time as it arrives: the front's
/// peak memory grows by far less than the file. (Gathering the whole file
/// before storing it grew it by about twice the file.) Measured with the
/// store in a database, outside the front's process (the embedded store
/// keeps what it wrote in memory until it is flushed, as much as the file,
/// whatever the upload does), after a first, smaller upload has warmed up
/// what any upload uses: connections, threads and their allocator arenas.
#[tokio::test]
async fn an_upload_holds_a_bounded_part_of_the_file() {
    support::Engine::Database
        .scope(async {
            const SIZE: usize = 64 << 20;
            let front = Front::start().await;
            front.space("s").await;
            upload_streamed(&front, 16 << 20).await;
            let pid = front.pid();
            std::fs::write(format!("/proc/{pid}/clear_refs"), "5").unwrap();
            let (_, before) = memory(pid);

            let uploaded = upload_streamed(&front, SIZE).await;
            let (peak, _) = memory(pid);
            let hash = blake3::hash(&binary(SIZE)).to_hex().to_string();
            assert_eq!((uploaded.size, &uploaded.hash), (SIZE as u64, &hash));
            let growth = peak.saturating_sub(before);
            eprintln!("front resident memory: {before} bytes before the upload, peak {peak} (+{growth})");
            assert!(
                growth < (SIZE / 4) as u64,
                "uploading {SIZE} bytes grew the front's peak memory by {growth} bytes"
            );
            assert_eq!(download_all(&front).await, (SIZE, hash));
        })
        .await;
}
