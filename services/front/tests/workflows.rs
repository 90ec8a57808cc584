//! End-to-end: forking a space, reverting a subtree, leasing a path.

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

/// What a fork must copy of each entry of `space` as of `at_revision` (0 =
/// latest): path, kind, size, hash, executable bit and MIME type.
async fn tree(
    fs: &mut FileSystemClient<Channel>,
    space: &str,
    at_revision: u64,
) -> Vec<(String, i32, u64, String, bool, String)> {
    let entries = support::tree(fs, space, at_revision).await;
    entries.into_iter().map(|e| (e.path, e.kind, e.size, e.hash, e.executable, e.mime_type)).collect()
}

/// A space `s` whose `/a.md` has two versions; the revision of the first.
async fn two_versions() -> (Front, FileSystemClient<Channel>, u64) {
    let front = Front::start().await;
    front.space("s").await;
    let mut fs = front.fs().await;
    fs.write(write_text("s", "/a.md", "1\n")).await.unwrap();
    let old = revision(&front, "s").await;
    fs.write(write_text("s", "/a.md", "2\n")).await.unwrap();
    (front, fs, old)
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
        let (front, _fs, old) = two_versions().await;
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

    #[tokio::test]
    async fn a_revert_makes_a_folder_what_it_was_in_one_revision_and_a_dry_run_lists_the_same() {
        let front = Front::start().await;
        front.space("s").await;
        let mut fs = front.fs().await;
        fs.write(write_text("s", "/p/a.md", "one\n")).await.unwrap();
        fs.write(write_text("s", "/p/b.md", "bee\n")).await.unwrap();
        fs.write(write_text("s", "/p/sub/c.md", "sea\n")).await.unwrap();
        fs.write(write_text("s", "/q/x.md", "outside\n")).await.unwrap();
        let at = revision(&front, "s").await;
        fs.write(write_text("s", "/p/a.md", "two\n")).await.unwrap();
        let rename = Action::Rename(pb::RenameAction { path: "/p/b.md".into(), new_name: "b2.md".into() });
        fs.batch(apply_batch("s", vec![rename], "r")).await.unwrap();
        fs.batch(apply_batch("s", vec![Action::Trash(pb::TrashAction { path: "/p/sub".into() })], "t")).await.unwrap();
        fs.write(write_text("s", "/p/new.md", "new\n")).await.unwrap();
        // A newcomer under the old name of a renamed file.
        fs.write(write_text("s", "/p/b.md", "impostor\n")).await.unwrap();
        fs.write(write_text("s", "/q/x.md", "outside, changed\n")).await.unwrap();
        let before = revision(&front, "s").await;
        let mut watch = fs
            .watch(pb::WatchRequest { space: "s".into(), path: "/".into(), from_revision: before + 1 })
            .await
            .unwrap()
            .into_inner();

        let request = |dry_run: bool| pb::RevertRequest {
            space: "s".into(),
            path: "/p".into(),
            to_revision: at,
            dry_run,
            idempotency_key: if dry_run { String::new() } else { "rv".into() },
            ..Default::default()
        };
        let preview = fs.revert(request(true)).await.unwrap().into_inner();
        assert_eq!(preview.revision, before, "a dry run saves nothing");
        assert_eq!(revision(&front, "s").await, before);
        let applied = fs.revert(request(false)).await.unwrap().into_inner();
        assert_eq!(applied.revision, before + 1, "one revision");
        let summary = |r: &pb::RevertResponse| -> Vec<(i32, String, String, u64, u64)> {
            r.changes.iter().map(|c| (c.kind, c.path.clone(), c.old_path.clone(), c.from_version, c.to_version)).collect()
        };
        assert_eq!(summary(&preview), summary(&applied));
        use pb::ChangeKind as K;
        let mut kinds: Vec<(i32, &str)> = applied.changes.iter().map(|c| (c.kind, c.path.as_str())).collect();
        kinds.sort();
        let mut expected = vec![
            (K::Modified as i32, "/p/a.md"),
            (K::Renamed as i32, "/p/b.md"),
            (K::Trashed as i32, "/p/b.md"),
            (K::Trashed as i32, "/p/new.md"),
            (K::Restored as i32, "/p/sub"),
            (K::Restored as i32, "/p/sub/c.md"),
        ];
        expected.sort();
        assert_eq!(kinds, expected);
        let modified = applied.changes.iter().find(|c| c.kind == K::Modified as i32).unwrap();
        assert_eq!((modified.from_version, modified.to_version), (2, 3), "history is kept: a new version");
        let versions = pb::ListVersionsRequest { space: "s".into(), path: "/p/a.md".into(), ..Default::default() };
        let newest = fs.list_versions(versions).await.unwrap().into_inner().versions.remove(0);
        assert_eq!((newest.operation.as_str(), newest.idempotency_key.as_str()), ("revert", "rv"));

        // The folder is what it was; outside it nothing changed.
        let diff = pb::DiffRequest {
            space: "s".into(),
            path: "/p".into(),
            from_revision: at,
            to_revision: applied.revision,
            ..Default::default()
        };
        assert_eq!(fs.diff(diff).await.unwrap().into_inner().files, []);
        let a = fs.read(support::read("s", "/p/a.md")).await.unwrap().into_inner();
        assert_eq!((a.content.as_str(), a.version), ("one\n", 3));
        assert_eq!(fs.read(support::read("s", "/p/b.md")).await.unwrap().into_inner().content, "bee\n");
        assert_eq!(fs.read(support::read("s", "/q/x.md")).await.unwrap().into_inner().content, "outside, changed\n");

        // Watchers see each change, tagged with the revert.
        for _ in 0..applied.changes.len() {
            let event = tokio::time::timeout(Duration::from_secs(10), watch.message()).await.unwrap().unwrap().unwrap();
            assert_eq!((event.revision, event.operation.as_str()), (applied.revision, "revert"));
        }

        // A retry is answered from its receipt; reverting again changes nothing.
        assert_eq!(fs.revert(request(false)).await.unwrap().into_inner(), applied);
        let again = pb::RevertRequest { idempotency_key: "rv2".into(), ..request(false) };
        let again = fs.revert(again).await.unwrap().into_inner();
        assert_eq!((again.changes.len(), again.revision), (0, applied.revision));
    }

    #[tokio::test]
    async fn a_revert_without_a_key_or_to_a_revision_out_of_reach_is_refused() {
        let (front, mut fs, old) = two_versions().await;
        let request = |to_revision: u64, key: &str| pb::RevertRequest {
            space: "s".into(),
            path: "/a.md".into(),
            to_revision,
            idempotency_key: key.into(),
            ..Default::default()
        };
        let status = fs.revert(request(old, "")).await.unwrap_err();
        assert_error(&status, Code::InvalidArgument, "INVALID_ARGUMENT");
        assert_eq!(support::metadata(&status, "field"), "idempotency_key");
        let status = fs.revert(request(old + 5, "k")).await.unwrap_err();
        assert_error(&status, Code::InvalidArgument, "INVALID_ARGUMENT");
        assert_eq!(support::metadata(&status, "field"), "to_revision");
        front.admin().await.compact(pb::CompactRequest { space: "s".into(), revision: 0 }).await.unwrap();
        let status = fs.revert(request(old, "k")).await.unwrap_err();
        assert_error(&status, Code::FailedPrecondition, "SNAPSHOT_EXPIRED");
        assert_eq!(fs.read(support::read("s", "/a.md")).await.unwrap().into_inner().content, "2\n");
    }

    #[tokio::test]
    async fn a_lease_refuses_every_change_without_it_until_released_or_expired_and_survives_a_restart() {
        let mut front = Front::start().await;
        front.space("s").await;
        let mut fs = front.fs().await;
        fs.write(write_text("s", "/p/a.md", "one\n")).await.unwrap();
        fs.write(write_text("s", "/p/sub/b.md", "bee\n")).await.unwrap();
        fs.write(write_text("s", "/elsewhere/c.md", "sea\n")).await.unwrap();
        let before = revision(&front, "s").await;
        let acquire = |path: &str, ttl_seconds| pb::AcquireLeaseRequest {
            space: "s".into(),
            path: path.into(),
            ttl_seconds,
            ..Default::default()
        };
        let lease = fs.acquire_lease(acquire("/p", 30)).await.unwrap().into_inner();
        assert!(lease.lease_id.starts_with("ls_"));
        assert_eq!((lease.path.as_str(), lease.holder.as_str(), lease.revision), ("/p", "dev", before + 1));
        // Watchers of the path see lease changes.
        let lease_event = async |fs: &mut FileSystemClient<Channel>, from_revision: u64| {
            let watch = pb::WatchRequest { space: "s".into(), path: "/p".into(), from_revision };
            let mut events = fs.watch(watch).await.unwrap().into_inner();
            let event = tokio::time::timeout(Duration::from_secs(10), events.message()).await.unwrap().unwrap().unwrap();
            (event.kind, event.path, event.lease.unwrap().lease_id)
        };
        let acquired = (pb::ChangeKind::LeaseAcquired as i32, "/p".to_owned(), lease.lease_id.clone());
        assert_eq!(lease_event(&mut fs, lease.revision).await, acquired);

        // Every kind of change to the subtree, without the lease.
        let held = |status: tonic::Status| {
            assert_error(&status, Code::FailedPrecondition, "LEASE_HELD");
            assert_eq!(support::metadata(&status, "holder"), "dev");
            assert_eq!(support::metadata(&status, "path"), "/p");
            use tonic_types::StatusExt;
            let retry = status.get_details_retry_info().expect("RetryInfo until the lease expires");
            assert!(retry.retry_delay.unwrap() <= Duration::from_secs(30));
        };
        held(fs.write(write_text("s", "/p/a.md", "two\n")).await.unwrap_err());
        held(fs.write(write_text("s", "/p/new.md", "new\n")).await.unwrap_err());
        let edit = pb::EditRequest {
            space: "s".into(),
            path: "/p/a.md".into(),
            base_version: Some(1),
            edits: vec![support::replace("one", "uno")],
            ..Default::default()
        };
        held(fs.edit(edit.clone()).await.unwrap_err());
        let trash = Action::Trash(pb::TrashAction { path: "/p/sub".into() });
        held(fs.batch(apply_batch("s", vec![trash.clone()], "t1")).await.unwrap_err());
        let move_in = Action::Move(pb::MoveAction { from: "/elsewhere/c.md".into(), to_folder: "/p".into(), ..Default::default() });
        held(fs.batch(apply_batch("s", vec![move_in], "m1")).await.unwrap_err());
        let revert = pb::RevertRequest {
            space: "s".into(),
            path: "/p".into(),
            to_revision: 2,
            idempotency_key: "rv".into(),
            ..Default::default()
        };
        held(fs.revert(revert).await.unwrap_err());
        let remove = pb::RemoveRequest { space: "s".into(), path: "/p/sub/b.md".into(), ..Default::default() };
        held(front.admin().await.remove(remove).await.unwrap_err());
        // Overlapping leases conflict; reads and changes elsewhere go on.
        held(fs.acquire_lease(acquire("/p/sub", 30)).await.unwrap_err());
        held(fs.acquire_lease(acquire("/", 30)).await.unwrap_err());
        assert_eq!(fs.read(support::read("s", "/p/a.md")).await.unwrap().into_inner().content, "one\n");
        fs.write(write_text("s", "/elsewhere/d.md", "free\n")).await.unwrap();
        fs.acquire_lease(acquire("/elsewhere/d.md", 30)).await.unwrap();

        // The holder's calls carry the lease.
        fn carrying<T>(message: T, lease: &str) -> tonic::Request<T> {
            let mut request = tonic::Request::new(message);
            request.metadata_mut().insert("x-agentvfs-lease", lease.parse().unwrap());
            request
        }
        fs.write(carrying(write_text("s", "/p/a.md", "two\n"), &lease.lease_id)).await.unwrap();
        fs.batch(carrying(apply_batch("s", vec![trash], "t2"), &lease.lease_id)).await.unwrap();

        // It survives a restart, and is listed.
        front.crash_and_restart().await;
        let mut fs = front.fs().await;
        held(fs.write(write_text("s", "/p/a.md", "three\n")).await.unwrap_err());
        let listed = fs.list_leases(pb::ListLeasesRequest { space: "s".into(), path: "/p/a.md".into() }).await.unwrap();
        let listed: Vec<_> = listed.into_inner().leases.into_iter().map(|l| l.lease_id).collect();
        assert_eq!(listed, std::slice::from_ref(&lease.lease_id));

        // Released, the path is free; an expired lease frees it on its own.
        let release = pb::ReleaseLeaseRequest { space: "s".into(), lease_id: lease.lease_id.clone() };
        let released = fs.release_lease(release.clone()).await.unwrap().into_inner();
        let event = (pb::ChangeKind::LeaseReleased as i32, "/p".to_owned(), lease.lease_id.clone());
        assert_eq!(lease_event(&mut fs, released.revision).await, event);
        fs.write(write_text("s", "/p/a.md", "three\n")).await.unwrap();
        assert_error(&fs.release_lease(release).await.unwrap_err(), Code::NotFound, "NOT_FOUND");
        let short = fs.acquire_lease(acquire("/p", 1)).await.unwrap().into_inner();
        held(fs.edit(pb::EditRequest { base_version: Some(3), edits: vec![support::replace("three", "four")], ..edit.clone() }).await.unwrap_err());
        let renew = pb::RenewLeaseRequest { space: "s".into(), lease_id: short.lease_id.clone(), ttl_seconds: 1 };
        fs.renew_lease(renew.clone()).await.unwrap();
        tokio::time::sleep(Duration::from_millis(1100)).await;
        fs.edit(pb::EditRequest { base_version: Some(3), edits: vec![support::replace("three", "four")], ..edit }).await.unwrap();
        assert_error(&fs.renew_lease(renew).await.unwrap_err(), Code::NotFound, "NOT_FOUND");
        let status = fs.acquire_lease(acquire("/p", 3601)).await.unwrap_err();
        assert_error(&status, Code::InvalidArgument, "INVALID_ARGUMENT");
    }
}
