//! End-to-end: forking a space.

// Tests may unwrap: a panic is the failure report.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::time::{Duration, Instant};

use agentvfs_proto::v1 as pb;
use agentvfs_proto::v1::batch_action::Action;
use agentvfs_proto::v1::file_system_client::FileSystemClient;
use support::{Front, Stack, apply_batch, assert_error, write_bytes, write_text};
use tonic::Code;
use tonic::transport::Channel;

/// Every entry of `space` as of `at_revision` (0 = latest), listed page by
/// page: (path, kind, size, hash, executable, MIME type).
async fn tree(
    fs: &mut FileSystemClient<Channel>,
    space: &str,
    at_revision: u64,
) -> Vec<(String, i32, u64, String, bool, String)> {
    let mut out = Vec::new();
    let mut page_token = String::new();
    loop {
        let request = pb::ListRequest {
            space: space.into(),
            path: "/".into(),
            recursive: true,
            page_size: 7,
            page_token,
            at_revision,
            ..Default::default()
        };
        let page = fs.list(request).await.unwrap().into_inner();
        out.extend(page.entries.into_iter().map(|e| (e.path, e.kind, e.size, e.hash, e.executable, e.mime_type)));
        if page.next_page_token.is_empty() {
            return out;
        }
        page_token = page.next_page_token;
    }
}

/// The bytes of `path` in `space` as of `at_revision` (0 = latest).
async fn bytes(fs: &mut FileSystemClient<Channel>, space: &str, path: &str, at_revision: u64) -> Vec<u8> {
    let request = pb::DownloadRequest { space: space.into(), path: path.into(), at_revision, ..Default::default() };
    let mut stream = fs.download(request).await.unwrap().into_inner();
    let mut out = Vec::new();
    while let Some(chunk) = stream.message().await.unwrap() {
        out.extend_from_slice(&chunk.data);
    }
    out
}

fn fork(source: &str, at_revision: u64, name: &str, key: &str) -> pb::ForkSpaceRequest {
    pb::ForkSpaceRequest { source: source.into(), at_revision, name: name.into(), idempotency_key: key.into() }
}

async fn revision(front: &Front, space: &str) -> u64 {
    front.admin().await.get_space(pb::GetSpaceRequest { space: space.into() }).await.unwrap().into_inner().revision
}

on_both_engines! {
    #[tokio::test]
    async fn a_fork_is_the_source_as_of_its_revision_and_goes_its_own_way() {
        let stack = Stack::start(&[]).await;
        let front = &stack.front;
        front.space("s").await;
        let mut fs = front.fs().await;
        fs.write(write_text("s", "/docs/a.md", "alpha zebra\n")).await.unwrap();
        fs.write(write_text("s", "/docs/b.md", "beta\n")).await.unwrap();
        fs.write(write_bytes("s", "/bin/blob", &[0, 159, 146, 150, 255])).await.unwrap();
        fs.write(pb::WriteRequest { executable: Some(true), ..write_text("s", "/bin/run.sh", "#!/bin/sh\necho hi\n") })
            .await
            .unwrap();
        let at = revision(front, "s").await;
        // Later history the fork must not see.
        fs.write(write_text("s", "/docs/a.md", "alpha changed\n")).await.unwrap();
        let rename = Action::Rename(pb::RenameAction { path: "/docs/b.md".into(), new_name: "c.md".into() });
        fs.batch(apply_batch("s", vec![rename], "r")).await.unwrap();
        fs.batch(apply_batch("s", vec![Action::Trash(pb::TrashAction { path: "/bin/blob".into() })], "t")).await.unwrap();
        fs.write(write_text("s", "/later.md", "later\n")).await.unwrap();

        let mut admin = front.admin().await;
        let forked = admin.fork_space(fork("s", at, "f", "k1")).await.unwrap().into_inner();
        let origin = forked.forked_from.clone().unwrap();
        let source_id = admin.get_space(pb::GetSpaceRequest { space: "s".into() }).await.unwrap().into_inner().id;
        assert_eq!((origin.space_id.as_str(), origin.revision), (source_id.as_str(), at));
        assert_eq!(forked.revision, 1);
        assert_eq!(forked.access.iter().map(|a| a.principal.as_str()).collect::<Vec<_>>(), ["dev"]);

        // Entry by entry, and byte by byte.
        let expected = tree(&mut fs, "s", at).await;
        assert_eq!(tree(&mut fs, "f", 0).await, expected);
        for (path, kind, ..) in &expected {
            if *kind == pb::NodeKind::File as i32 {
                assert_eq!(bytes(&mut fs, "f", path, 0).await, bytes(&mut fs, "s", path, at).await, "{path}");
            }
        }
        let a = fs.read(support::read("f", "/docs/a.md")).await.unwrap().into_inner();
        assert_eq!((a.content.as_str(), a.version), ("alpha zebra\n", 1));
        let versions = pb::ListVersionsRequest { space: "f".into(), path: "/docs/a.md".into(), ..Default::default() };
        assert_eq!(fs.list_versions(versions).await.unwrap().into_inner().versions.len(), 1);

        // A retry under the same key is answered from the receipt; the key
        // with another request is refused.
        let again = admin.fork_space(fork("s", at, "f", "k1")).await.unwrap().into_inner();
        assert_eq!(again.id, forked.id);
        let status = admin.fork_space(fork("s", 0, "f", "k1")).await.unwrap_err();
        assert_error(&status, Code::FailedPrecondition, "IDEMPOTENCY_KEY_REUSED");
        let status = admin.fork_space(fork("s", at, "f", "")).await.unwrap_err();
        assert_error(&status, Code::AlreadyExists, "ALREADY_EXISTS");

        // The fork is indexed for search like any space.
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let search = pb::SearchRequest { space: "f".into(), query: "zebra".into(), ..Default::default() };
            let hits = fs.search(search).await.unwrap().into_inner().hits;
            if hits.iter().map(|h| h.path.as_str()).collect::<Vec<_>>() == ["/docs/a.md"] {
                break;
            }
            assert!(Instant::now() < deadline, "the fork was not indexed: {hits:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }

        // The two change independently, and the fork outlives its source.
        fs.write(write_text("f", "/docs/a.md", "forked\n")).await.unwrap();
        fs.write(write_text("s", "/docs/new.md", "only in the source\n")).await.unwrap();
        assert_eq!(bytes(&mut fs, "s", "/docs/a.md", 0).await, b"alpha changed\n");
        assert_eq!(bytes(&mut fs, "f", "/docs/a.md", 0).await, b"forked\n");
        let status = fs.read(support::read("f", "/docs/new.md")).await.unwrap_err();
        assert_error(&status, Code::NotFound, "NOT_FOUND");
        let compact = pb::CompactRequest { space: "s".into(), revision: 0 };
        admin.compact(compact).await.unwrap();
        admin.delete_space(pb::DeleteSpaceRequest { space: "s".into(), confirm: "s".into(), ..Default::default() })
            .await
            .unwrap();
        assert_eq!(bytes(&mut fs, "f", "/bin/blob", 0).await, [0, 159, 146, 150, 255]);
        assert_eq!(bytes(&mut fs, "f", "/docs/a.md", 1).await, b"alpha zebra\n");
    }

    #[tokio::test]
    async fn a_fork_below_the_compaction_floor_or_of_an_unknown_space_is_refused() {
        let front = Front::start().await;
        front.space("s").await;
        let mut fs = front.fs().await;
        fs.write(write_text("s", "/a.md", "1\n")).await.unwrap();
        let old = revision(&front, "s").await;
        fs.write(write_text("s", "/a.md", "2\n")).await.unwrap();
        let mut admin = front.admin().await;
        admin.compact(pb::CompactRequest { space: "s".into(), revision: 0 }).await.unwrap();
        let status = admin.fork_space(fork("s", old, "f", "")).await.unwrap_err();
        assert_error(&status, Code::FailedPrecondition, "SNAPSHOT_EXPIRED");
        let status = admin.fork_space(fork("nope", 0, "f", "")).await.unwrap_err();
        assert_error(&status, Code::NotFound, "NOT_FOUND");
        let status = admin.fork_space(fork("", 0, "f", "")).await.unwrap_err();
        assert_error(&status, Code::InvalidArgument, "INVALID_ARGUMENT");
        assert_eq!(support::metadata(&status, "field"), "source");
        let status = admin.fork_space(fork("s", 0, "", "")).await.unwrap_err();
        assert_error(&status, Code::InvalidArgument, "INVALID_ARGUMENT");
        let status = admin.fork_space(fork("s", 99, "f", "")).await.unwrap_err();
        assert_error(&status, Code::InvalidArgument, "INVALID_ARGUMENT");
        assert_eq!(support::metadata(&status, "field"), "at_revision");
        let status = admin.get_space(pb::GetSpaceRequest { space: "f".into() }).await.unwrap_err();
        assert_error(&status, Code::NotFound, "NOT_FOUND");
    }
}
