//! End-to-end: idempotency keys on every FileSystem mutation.

// Tests may unwrap: a panic is the failure report.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::time::Duration;

use agentvfs_proto::v1 as pb;
use agentvfs_proto::v1::batch_action::Action;
use support::{Front, assert_error, read, write_text};
use tonic::Code;

fn keyed(mut request: pb::WriteRequest, key: &str) -> pb::WriteRequest {
    request.idempotency_key = key.into();
    request
}

async fn versions(front: &Front, path: &str) -> usize {
    let request = pb::ListVersionsRequest { space: "s".into(), path: path.into(), ..Default::default() };
    front.fs().await.list_versions(request).await.unwrap().into_inner().versions.len()
}

on_both_engines! {
    #[tokio::test]
    async fn replays_return_the_original_response_and_apply_once() {
        let mut front = Front::start().await;
        front.space("s").await;
        let mut fs = front.fs().await;

        let mut append = write_text("s", "/log.txt", "line\n");
        append.mode = pb::WriteMode::Append as i32;
        let first = fs.write(keyed(append.clone(), "w1")).await.unwrap().into_inner();
        let again = fs.write(keyed(append.clone(), "w1")).await.unwrap().into_inner();
        assert_eq!(first, again);
        assert_eq!(fs.read(read("s", "/log.txt")).await.unwrap().into_inner().content, "line\n");

        let edit = pb::EditRequest {
            space: "s".into(),
            path: "/log.txt".into(),
            base_version: Some(1),
            edits: vec![pb::TextEdit { kind: Some(pb::text_edit::Kind::Append(pb::AppendEdit { text: "more\n".into() })) }],
            idempotency_key: "e1".into(),
            ..Default::default()
        };
        let edited = fs.edit(edit.clone()).await.unwrap().into_inner();
        // The base version is stale now, yet the replay answers as the original did.
        assert_eq!(fs.edit(edit).await.unwrap().into_inner(), edited);

        let batch = pb::BatchRequest {
            space: "s".into(),
            actions: vec![pb::BatchAction {
                action: Some(pb::batch_action::Action::Mkdir(pb::MkdirAction { path: "/d".into() })),
            }],
            apply: true,
            idempotency_key: "b1".into(),
            ..Default::default()
        };
        let applied = fs.batch(batch.clone()).await.unwrap().into_inner();
        assert!(applied.atomic);
        assert_eq!(fs.batch(batch.clone()).await.unwrap().into_inner(), applied);

        let header = pb::UploadHeader {
            space: "s".into(),
            path: "/up.bin".into(),
            idempotency_key: "u1".into(),
            ..Default::default()
        };
        let upload = || {
            tokio_stream::iter(vec![
                pb::UploadChunk { part: Some(pb::upload_chunk::Part::Header(header.clone())) },
                pb::UploadChunk { part: Some(pb::upload_chunk::Part::Data(vec![1, 2, 3])) },
            ])
        };
        let uploaded = fs.upload(upload()).await.unwrap().into_inner();
        assert_eq!(fs.upload(upload()).await.unwrap().into_inner(), uploaded);
        assert_eq!(versions(&front, "/up.bin").await, 1);

        // Receipts are durable with their changes.
        front.crash_and_restart().await;
        let mut fs = front.fs().await;
        assert_eq!(fs.write(keyed(append, "w1")).await.unwrap().into_inner(), first);
        assert_eq!(fs.batch(batch).await.unwrap().into_inner(), applied);
        assert_eq!(versions(&front, "/log.txt").await, 2);
    }

    #[tokio::test]
    async fn a_call_that_failed_is_retried_with_its_key_at_once() {
        // A failed call leaves no receipt and holds its key no longer: the
        // retry runs (and fails alike) instead of finding the key in use.
        let front = Front::start().await;
        front.space("s").await;
        let mut fs = front.fs().await;
        let stale = pb::WriteRequest { expected_version: Some(7), ..keyed(write_text("s", "/f.txt", "x"), "k") };
        for _ in 0..2 {
            let error = fs.write(stale.clone()).await.unwrap_err();
            assert_error(&error, Code::FailedPrecondition, "VERSION_CONFLICT");
        }
        // Nor does the key hold once a call with it succeeded: later calls replay it.
        let created = fs.write(keyed(write_text("s", "/f.txt", "x"), "k")).await.unwrap().into_inner();
        assert_eq!(fs.write(keyed(write_text("s", "/f.txt", "x"), "k")).await.unwrap().into_inner(), created);
        assert_eq!(versions(&front, "/f.txt").await, 1);
    }

    #[tokio::test]
    async fn a_batch_the_store_fails_keeps_no_receipt_and_applies_when_sent_again() {
        // The commit after the space's fails as an unreachable store would: the call
        // fails as a whole, and its key does not replay the failure.
        let (binary, _) = support::failpoint_binaries();
        let front = Front::start_binary(&binary, &[], &[("FAILPOINTS", "store::before_commit=1*off->1*return")]).await;
        front.space("s").await;
        let mut fs = front.fs().await;
        let create = |path: &str, content: &str| {
            Action::Create(pb::CreateAction { path: path.into(), content: content.into() })
        };
        let batch = support::apply_batch("s", vec![create("/a.txt", "a\n"), create("/b.txt", "b\n")], "b1");
        let failed = fs.batch(batch.clone()).await.unwrap_err();
        assert_error(&failed, Code::Unavailable, "STORE_UNAVAILABLE");
        let missing = fs.read(read("s", "/a.txt")).await.unwrap_err();
        assert_error(&missing, Code::NotFound, "NOT_FOUND");

        let applied = fs.batch(batch.clone()).await.unwrap().into_inner();
        assert_eq!(applied.failed_index, None, "{applied:?}");
        assert_eq!(applied.applied, 2);
        assert_eq!(fs.read(read("s", "/b.txt")).await.unwrap().into_inner().content, "b\n");
        assert_eq!(fs.batch(batch).await.unwrap().into_inner(), applied);
    }

    #[tokio::test]
    async fn a_key_reused_for_another_request_is_refused() {
        let front = Front::start().await;
        front.space("s").await;
        let mut fs = front.fs().await;
        fs.write(keyed(write_text("s", "/a.txt", "one"), "k")).await.unwrap();
        let other = fs.write(keyed(write_text("s", "/a.txt", "two"), "k")).await.unwrap_err();
        assert_error(&other, Code::FailedPrecondition, "IDEMPOTENCY_KEY_REUSED");
        // Dry runs never consume a key.
        let dry = pb::EditRequest {
            space: "s".into(),
            path: "/a.txt".into(),
            base_version: Some(1),
            edits: vec![pb::TextEdit { kind: Some(pb::text_edit::Kind::Append(pb::AppendEdit { text: "!".into() })) }],
            idempotency_key: "e".into(),
            dry_run: true,
            ..Default::default()
        };
        fs.edit(dry.clone()).await.unwrap();
        let real = fs.edit(pb::EditRequest { dry_run: false, ..dry }).await.unwrap().into_inner();
        assert!(real.changed && real.version == 2);
    }

    #[tokio::test]
    async fn concurrent_duplicates_apply_once() {
        let front = Front::start().await;
        front.space("s").await;
        let fs = front.fs().await;
        let mut request = write_text("s", "/c.txt", "x\n");
        request.mode = pb::WriteMode::Append as i32;
        let request = keyed(request, "same");
        let calls: Vec<_> = (0..8)
            .map(|_| {
                let (mut fs, request) = (fs.clone(), request.clone());
                tokio::spawn(async move { fs.write(request).await })
            })
            .collect();
        let mut responses = Vec::new();
        for call in calls {
            match call.await.unwrap() {
                Ok(response) => responses.push(response.into_inner()),
                Err(status) => assert_error(&status, Code::Aborted, "IDEMPOTENCY_REQUEST_IN_PROGRESS"),
            }
        }
        assert!(!responses.is_empty());
        assert!(responses.windows(2).all(|w| w[0] == w[1]), "every answer is the original one");
        assert_eq!(front.fs().await.read(read("s", "/c.txt")).await.unwrap().into_inner().content, "x\n");
    }

    #[tokio::test]
    async fn a_cancelled_call_retried_with_its_key_applies_once() {
        let front = Front::start().await;
        front.space("s").await;
        let mut fs = front.fs().await;
        let mut request = write_text("s", "/big.txt", &"y".repeat(2 << 20));
        request.mode = pb::WriteMode::Append as i32;
        let request = keyed(request, "cancel-me");
        let mut first = tonic::Request::new(request.clone());
        first.set_timeout(Duration::from_millis(1));
        let _ = fs.write(first).await;
        // Retry until the original has finished one way or the other.
        let response = loop {
            match fs.write(request.clone()).await {
                Ok(response) => break response.into_inner(),
                Err(status) if status.code() == Code::Aborted => tokio::time::sleep(Duration::from_millis(10)).await,
                Err(status) => panic!("{status:?}"),
            }
        };
        assert_eq!(response.version, 1);
        assert_eq!(versions(&front, "/big.txt").await, 1);
        let size = front.fs().await.read(pb::ReadRequest { max_chars: 2, ..read("s", "/big.txt") }).await.unwrap();
        assert_eq!(size.into_inner().size, 2 << 20);
    }

    #[tokio::test]
    async fn admin_mutations_replay_too() {
        let front = Front::start().await;
        let mut admin = front.admin().await;
        let create = pb::CreateSpaceRequest { name: "s".into(), idempotency_key: "c".into(), ..Default::default() };
        let created = admin.create_space(create.clone()).await.unwrap().into_inner();
        assert_eq!(admin.create_space(create).await.unwrap().into_inner(), created, "not ALREADY_EXISTS");
        let other = pb::CreateSpaceRequest { name: "t".into(), idempotency_key: "c".into(), ..Default::default() };
        assert_error(&admin.create_space(other).await.unwrap_err(), Code::FailedPrecondition, "IDEMPOTENCY_KEY_REUSED");

        let mut fs = front.fs().await;
        fs.write(write_text("s", "/x/a.txt", "a")).await.unwrap();
        let trash = pb::BatchRequest {
            space: "s".into(),
            actions: vec![pb::BatchAction {
                action: Some(pb::batch_action::Action::Trash(pb::TrashAction { path: "/x".into() })),
            }],
            apply: true,
            idempotency_key: "t".into(),
            ..Default::default()
        };
        fs.batch(trash).await.unwrap();
        let restore = pb::RestoreRequest { space: "s".into(), reference: "/x".into(), idempotency_key: "r".into() };
        let restored = admin.restore(restore.clone()).await.unwrap().into_inner();
        assert_eq!(admin.restore(restore).await.unwrap().into_inner(), restored, "not NOT_FOUND");

        let remove =
            pb::RemoveRequest { space: "s".into(), path: "/x".into(), recursive: true, idempotency_key: "rm".into() };
        let removed = admin.remove(remove.clone()).await.unwrap().into_inner();
        assert_eq!(admin.remove(remove).await.unwrap().into_inner(), removed);

        let quota = pb::SetQuotaRequest {
            space: "s".into(),
            quota: Some(pb::Quota { max_bytes: 1 << 20, max_files: 10 }),
            idempotency_key: "q".into(),
        };
        let set = admin.set_quota(quota.clone()).await.unwrap().into_inner();
        assert_eq!(admin.set_quota(quota).await.unwrap().into_inner(), set);

        let delete = pb::DeleteSpaceRequest { space: "s".into(), confirm: "s".into(), idempotency_key: "d".into() };
        let deleted = admin.delete_space(delete.clone()).await.unwrap().into_inner();
        // The space is gone, so the replay is not authorized any more: NOT_FOUND.
        assert_error(&admin.delete_space(delete).await.unwrap_err(), Code::NotFound, "NOT_FOUND");
        assert_eq!(deleted.space_id, created.id);
    }
}
