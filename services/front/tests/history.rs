//! End-to-end: the change feed (`Watch`) and compaction of history.

// Tests may unwrap: a panic is the failure report.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::time::Duration;

use agentvfs_proto::v1 as pb;
use agentvfs_proto::v1::batch_action::Action;
use support::{Front, apply_batch, assert_error, read, replace, write_text};
use tonic::Code;

async fn next(stream: &mut tonic::Streaming<pb::WatchEvent>) -> pb::WatchEvent {
    tokio::time::timeout(Duration::from_secs(10), stream.message()).await.expect("an event in time").unwrap().unwrap()
}

on_both_engines! {
    #[tokio::test]
    async fn watch_streams_every_change_in_order_and_resumes() {
        let front = Front::start().await;
        front.space("s").await;
        front.space("other").await;
        let mut fs = front.fs().await;
        let start =
            front.admin().await.get_space(pb::GetSpaceRequest { space: "s".into() }).await.unwrap().into_inner().revision;
        let watch = |from| pb::WatchRequest { space: "s".into(), path: "/docs".into(), from_revision: from };
        let mut stream = fs.watch(watch(start + 1)).await.unwrap().into_inner();

        fs.write(write_text("s", "/docs/a.md", "1")).await.unwrap();
        fs.write(write_text("other", "/docs/a.md", "not for this watcher")).await.unwrap();
        fs.write(write_text("s", "/elsewhere.md", "outside the prefix")).await.unwrap();
        fs.write(write_text("s", "/docs/a.md", "2")).await.unwrap();
        fs.batch(apply_batch(
            "s",
            vec![Action::Rename(pb::RenameAction { path: "/docs/a.md".into(), new_name: "b.md".into() })],
            "r",
        ))
        .await
        .unwrap();
        fs.batch(apply_batch("s", vec![Action::Trash(pb::TrashAction { path: "/docs/b.md".into() })], "t")).await.unwrap();

        let mut seen = Vec::new();
        for _ in 0..5 {
            let event = next(&mut stream).await;
            seen.push((event.kind, event.path.clone(), event.old_path.clone(), event.version, event.revision));
        }
        use pb::ChangeKind as K;
        let kinds: Vec<_> = seen.iter().map(|e| (e.0, e.1.as_str(), e.2.as_str())).collect();
        assert_eq!(
            kinds,
            [
                (K::Mkdir as i32, "/docs", ""),
                (K::Created as i32, "/docs/a.md", ""),
                (K::Modified as i32, "/docs/a.md", ""),
                (K::Renamed as i32, "/docs/b.md", "/docs/a.md"),
                (K::Trashed as i32, "/docs/b.md", ""),
            ]
        );
        assert!(seen.windows(2).all(|w| w[0].4 <= w[1].4), "in revision order");
        drop(stream);

        // Resume after the third event: the rest arrives exactly once.
        let resume_at = seen[2].4 + 1;
        let mut resumed = fs.watch(watch(resume_at)).await.unwrap().into_inner();
        let again: Vec<_> =
            [next(&mut resumed).await, next(&mut resumed).await].into_iter().map(|e| (e.kind, e.revision)).collect();
        assert_eq!(again, [(seen[3].0, seen[3].4), (seen[4].0, seen[4].4)]);
        // Live: a new change arrives on the open stream.
        fs.write(write_text("s", "/docs/c.md", "new")).await.unwrap();
        let live = next(&mut resumed).await;
        assert_eq!((live.kind, live.path.as_str()), (K::Created as i32, "/docs/c.md"));
    }

    #[tokio::test]
    async fn compaction_drops_old_history_and_keeps_the_latest() {
        let front = Front::start().await;
        front.space("s").await;
        let mut fs = front.fs().await;
        let first = fs.write(write_text("s", "/a.txt", "one")).await.unwrap().into_inner();
        // A listing pinned at an early revision.
        let listing =
            fs.list(pb::ListRequest { space: "s".into(), page_size: 1, ..Default::default() }).await.unwrap().into_inner();
        assert!(!listing.next_page_token.is_empty());
        fs.write(write_text("s", "/a.txt", "two")).await.unwrap();
        let last = fs.write(write_text("s", "/a.txt", "three")).await.unwrap().into_inner();
        fs.write(write_text("s", "/gone.txt", "bye")).await.unwrap();
        fs.batch(apply_batch("s", vec![Action::Trash(pb::TrashAction { path: "/gone.txt".into() })], "t")).await.unwrap();

        let mut admin = front.admin().await;
        let compacted = admin.compact(pb::CompactRequest { space: "s".into(), revision: 0 }).await.unwrap().into_inner();
        assert!(compacted.versions_dropped >= 2, "{compacted:?}");
        assert!(compacted.bytes_freed > 0);

        // History before the floor is gone, with everything that pinned it.
        let old = fs.read(pb::ReadRequest { at_revision: first.revision, ..read("s", "/a.txt") }).await.unwrap_err();
        assert_error(&old, Code::FailedPrecondition, "SNAPSHOT_EXPIRED");
        let token =
            pb::ListRequest { space: "s".into(), page_size: 1, page_token: listing.next_page_token, ..Default::default() };
        assert_error(&fs.list(token).await.unwrap_err(), Code::FailedPrecondition, "SNAPSHOT_EXPIRED");
        let watch = pb::WatchRequest { space: "s".into(), path: "/".into(), from_revision: first.revision };
        assert_error(&fs.watch(watch).await.unwrap_err(), Code::FailedPrecondition, "SNAPSHOT_EXPIRED");
        // The latest state is intact, and so is what a restore needs.
        let now = fs.read(read("s", "/a.txt")).await.unwrap().into_inner();
        assert_eq!((now.content.as_str(), now.version), ("three", last.version));
        let versions = fs
            .list_versions(pb::ListVersionsRequest { space: "s".into(), path: "/a.txt".into(), ..Default::default() })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(versions.versions.iter().map(|v| v.version).collect::<Vec<_>>(), [3]);
        admin
            .restore(pb::RestoreRequest { space: "s".into(), reference: "/gone.txt".into(), ..Default::default() })
            .await
            .unwrap();
        assert_eq!(fs.read(read("s", "/gone.txt")).await.unwrap().into_inner().content, "bye");
        let space = admin.get_space(pb::GetSpaceRequest { space: "s".into() }).await.unwrap().into_inner();
        assert_eq!(space.compacted_revision, compacted.compacted_revision);
    }

    #[tokio::test]
    async fn versions_name_the_key_of_the_batch_that_made_them() {
        let front = Front::start().await;
        front.space("s").await;
        let mut fs = front.fs().await;
        fs.write(write_text("s", "/a.md", "alpha\n")).await.unwrap();
        let actions = vec![
            Action::Create(pb::CreateAction { path: "/b.md".into(), content: "beta\n".into() }),
            Action::Edit(pb::EditAction {
                path: "/a.md".into(),
                base_version: Some(1),
                edits: vec![replace("alpha", "ALPHA")],
            }),
        ];
        let applied = fs.batch(apply_batch("s", actions, "batch-key-1")).await.unwrap().into_inner();
        for path in ["/a.md", "/b.md"] {
            let request = pb::ListVersionsRequest { space: "s".into(), path: path.into(), ..Default::default() };
            let newest = fs.list_versions(request).await.unwrap().into_inner().versions.remove(0);
            assert_eq!((newest.idempotency_key.as_str(), newest.revision), ("batch-key-1", applied.revision), "{path}");
        }
    }
}
