//! End-to-end: batches, trash and removal, access control and quotas
//! through the real front process.

// Tests may unwrap: a panic is the failure report.
#![allow(clippy::unwrap_used)]

use crate::support;

use agentvfs_proto::v1 as pb;
use agentvfs_proto::v1::batch_action::Action;
use support::{Front, Stack, assert_error, read, write_text};
use tonic::{Code, Status};

fn action(action: Action) -> pb::BatchAction {
    pb::BatchAction { action: Some(action) }
}

fn batch(actions: Vec<pb::BatchAction>, apply: bool) -> pb::BatchRequest {
    pb::BatchRequest {
        space: "s".into(),
        actions,
        apply,
        idempotency_key: if apply { format!("k-{}", ulid_like()) } else { String::new() },
        ..Default::default()
    }
}

fn ulid_like() -> u128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos()
}

async fn tree(
    fs: &mut agentvfs_proto::v1::file_system_client::FileSystemClient<tonic::transport::Channel>,
) -> Vec<String> {
    let request = pb::ListRequest { space: "s".into(), recursive: true, page_size: 200, ..Default::default() };
    fs.list(request).await.unwrap().into_inner().entries.into_iter().map(|e| e.path).collect()
}

on_both_engines! {
    #[tokio::test]
    async fn batches_preview_then_apply_atomically() {
        let front = Front::start().await;
        front.space("s").await;
        let mut fs = front.fs().await;
        fs.write(write_text("s", "/notes/a.md", "alpha\n")).await.unwrap();
        fs.write(write_text("s", "/notes/b.md", "beta\n")).await.unwrap();
        let actions = vec![
            action(Action::Mkdir(pb::MkdirAction { path: "/archive".into() })),
            action(Action::Create(pb::CreateAction { path: "/archive/readme.md".into(), content: "old notes\n".into() })),
            action(Action::Edit(pb::EditAction {
                path: "/notes/a.md".into(),
                base_version: Some(1),
                edits: vec![pb::TextEdit {
                    kind: Some(pb::text_edit::Kind::Replace(pb::ReplaceEdit {
                        old_text: "alpha".into(),
                        new_text: "ALPHA".into(),
                        ..Default::default()
                    })),
                }],
            })),
            action(Action::Copy(pb::CopyAction {
                from: "/notes".into(),
                to_folder: "/archive".into(),
                name: String::new(),
            })),
            action(Action::Rename(pb::RenameAction { path: "/notes/b.md".into(), new_name: "beta.md".into() })),
            action(Action::Move(pb::MoveAction {
                from: "/notes/beta.md".into(),
                to_folder: "/archive".into(),
                to_space: String::new(),
            })),
            action(Action::Trash(pb::TrashAction { path: "/notes/a.md".into() })),
        ];
        let before = tree(&mut fs).await;
        let preview = fs.batch(batch(actions.clone(), false)).await.unwrap().into_inner();
        assert!(preview.failed_index.is_none(), "{preview:?}");
        assert_eq!(preview.outcomes.len(), 7);
        assert!(!preview.atomic && preview.applied == 0);
        assert_eq!(tree(&mut fs).await, before, "a preview saves nothing");

        let applied = fs.batch(batch(actions, true)).await.unwrap().into_inner();
        assert!(applied.atomic);
        assert_eq!(applied.applied, 7);
        let after = tree(&mut fs).await;
        for path in ["/archive/readme.md", "/archive/notes/a.md", "/archive/notes/b.md", "/archive/beta.md"] {
            assert!(after.contains(&path.to_owned()), "{path} in {after:?}");
        }
        assert!(!after.contains(&"/notes/a.md".to_owned()));
        // The copy was taken after the edit, and shares its content.
        let copied = fs.read(read("s", "/archive/notes/a.md")).await.unwrap().into_inner();
        assert_eq!(copied.content, "ALPHA\n");
        // One revision for the whole batch.
        let space = front.admin().await.get_space(pb::GetSpaceRequest { space: "s".into() }).await.unwrap().into_inner();
        assert_eq!(space.revision, applied.revision);
    }

    #[tokio::test]
    async fn a_failing_action_leaves_no_trace() {
        let front = Front::start().await;
        front.space("s").await;
        let mut fs = front.fs().await;
        fs.write(write_text("s", "/a.txt", "a")).await.unwrap();
        let mut actions: Vec<_> = (0..6)
            .map(|i| action(Action::Create(pb::CreateAction { path: format!("/new{i}.txt"), content: "x".into() })))
            .collect();
        actions.push(action(Action::Create(pb::CreateAction { path: "/a.txt".into(), content: "clash".into() })));
        let before_tree = tree(&mut fs).await;
        let before = front.admin().await.get_space(pb::GetSpaceRequest { space: "s".into() }).await.unwrap().into_inner();
        let response = fs.batch(batch(actions, true)).await.unwrap().into_inner();
        assert_eq!((response.failed_index, response.applied, response.atomic), (Some(6), 0, false));
        let failure = response.outcomes.last().unwrap().error.clone().unwrap();
        assert_eq!(failure.reason, "ALREADY_EXISTS");
        let after = front.admin().await.get_space(pb::GetSpaceRequest { space: "s".into() }).await.unwrap().into_inner();
        assert_eq!(after.revision, before.revision);
        assert_eq!(tree(&mut fs).await, before_tree);

        let no_key =
            fs.batch(pb::BatchRequest { idempotency_key: String::new(), ..batch(vec![], true) }).await.unwrap_err();
        assert_error(&no_key, Code::InvalidArgument, "INVALID_ARGUMENT");
        let too_many: Vec<_> = (0..21).map(|i| action(Action::Mkdir(pb::MkdirAction { path: format!("/d{i}") }))).collect();
        assert_error(&fs.batch(batch(too_many, true)).await.unwrap_err(), Code::InvalidArgument, "INVALID_ARGUMENT");
    }

    #[tokio::test]
    async fn trash_hides_and_restore_brings_back_with_history() {
        let stack = Stack::start(&[]).await;
        let front = &stack.front;
        front.space("s").await;
        let mut fs = front.fs().await;
        fs.write(write_text("s", "/dir/keep.md", "needle v1\n")).await.unwrap();
        let file = fs.write(write_text("s", "/dir/keep.md", "needle v2\n")).await.unwrap().into_inner();
        let trash = action(Action::Trash(pb::TrashAction { path: "/dir".into() }));
        let trashed = fs.batch(batch(vec![trash], true)).await.unwrap().into_inner();
        assert_eq!(trashed.outcomes[0].subtree_count, 2);

        assert!(!tree(&mut fs).await.iter().any(|p| p.starts_with("/dir")));
        assert_error(&fs.read(read("s", "/dir/keep.md")).await.unwrap_err(), Code::NotFound, "NOT_FOUND");
        let by_id = read("s", &format!("agentvfs:item:{}", file.node_id));
        assert_error(&fs.read(by_id.clone()).await.unwrap_err(), Code::NotFound, "NOT_FOUND");
        let find = pb::FindRequest { space: "s".into(), pattern: "*.md".into(), ..Default::default() };
        assert_eq!(fs.find(find).await.unwrap().into_inner().matches.len(), 1, "only /AGENT.md");
        let grep = pb::GrepRequest { space: "s".into(), pattern: "needle".into(), ..Default::default() };
        assert!(fs.grep(grep.clone()).await.unwrap().into_inner().files.is_empty());

        let mut admin = front.admin().await;
        let restored = admin
            .restore(pb::RestoreRequest { space: "s".into(), reference: "/dir".into(), ..Default::default() })
            .await
            .unwrap()
            .into_inner();
        assert_eq!((restored.path.as_str(), restored.restored), ("/dir", 2));
        let back = fs.read(by_id).await.unwrap().into_inner();
        assert_eq!((back.content.as_str(), back.version), ("needle v2\n", 2));
        let old = fs.read(pb::ReadRequest { version: 1, ..read("s", "/dir/keep.md") }).await.unwrap().into_inner();
        assert_eq!(old.content, "needle v1\n");
        assert_eq!(fs.grep(grep).await.unwrap().into_inner().files.len(), 1);
    }

    #[tokio::test]
    async fn remove_deletes_for_good() {
        let front = Front::start().await;
        front.space("s").await;
        let mut fs = front.fs().await;
        fs.write(write_text("s", "/gone/a.txt", "secret")).await.unwrap();
        let mut admin = front.admin().await;
        let folder = admin
            .remove(pb::RemoveRequest { space: "s".into(), path: "/gone".into(), ..Default::default() })
            .await
            .unwrap_err();
        assert_error(&folder, Code::InvalidArgument, "INVALID_ARGUMENT");
        let removed = admin
            .remove(pb::RemoveRequest { space: "s".into(), path: "/gone".into(), recursive: true, ..Default::default() })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(removed.removed, 2);
        assert_error(&fs.read(read("s", "/gone/a.txt")).await.unwrap_err(), Code::NotFound, "NOT_FOUND");
        // Not even an old revision shows it.
        let old = fs
            .find(pb::FindRequest {
                space: "s".into(),
                pattern: "a.txt".into(),
                at_revision: removed.revision - 1,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        assert!(old.matches.is_empty());
        let restore =
            admin.restore(pb::RestoreRequest { space: "s".into(), reference: "/gone".into(), ..Default::default() });
        assert_error(&restore.await.unwrap_err(), Code::NotFound, "NOT_FOUND");
        let space = admin.get_space(pb::GetSpaceRequest { space: "s".into() }).await.unwrap().into_inner();
        assert_eq!(space.usage.unwrap().files, 1, "only /AGENT.md is left");
    }

    #[tokio::test]
    async fn roles_decide_what_a_principal_may_do() {
        let dir = tempfile::tempdir().unwrap();
        let tokens = dir.path().join("tokens.toml");
        std::fs::write(
            &tokens,
            "[[tokens]]\ntoken = \"admin-token-0123456789\"\nprincipal = \"ops\"\nadmin = true\n\n\
             [[tokens]]\ntoken = \"agent-token-0123456789\"\nprincipal = \"agent\"\n",
        )
        .unwrap();
        let front = Front::start_with(&["--tokens", tokens.to_str().unwrap()]).await;
        let channel = front.channel().await;
        let bearer = |token: &'static str| {
            move |mut request: tonic::Request<()>| {
                request.metadata_mut().insert("authorization", format!("Bearer {token}").parse().unwrap());
                Ok(request)
            }
        };
        let mut admin = agentvfs_proto::v1::admin_client::AdminClient::with_interceptor(
            channel.clone(),
            bearer("admin-token-0123456789"),
        );
        let mut agent = agentvfs_proto::v1::file_system_client::FileSystemClient::with_interceptor(
            channel.clone(),
            bearer("agent-token-0123456789"),
        );
        let mut agent_admin =
            agentvfs_proto::v1::admin_client::AdminClient::with_interceptor(channel, bearer("agent-token-0123456789"));
        admin.create_space(pb::CreateSpaceRequest { name: "s".into(), ..Default::default() }).await.unwrap();
        let set = |role: pb::Role| pb::SetAccessRequest {
            space: "s".into(),
            principal: "agent".into(),
            role: role as i32,
            ..Default::default()
        };

        assert_error(&agent.read(read("s", "/AGENT.md")).await.unwrap_err(), Code::NotFound, "NOT_FOUND");
        admin.set_access(set(pb::Role::Viewer)).await.unwrap();
        agent.read(read("s", "/AGENT.md")).await.unwrap();
        assert_error(
            &agent.write(write_text("s", "/x", "x")).await.unwrap_err(),
            Code::PermissionDenied,
            "PERMISSION_DENIED",
        );
        admin.set_access(set(pb::Role::Editor)).await.unwrap();
        agent.write(write_text("s", "/x", "x")).await.unwrap();
        let not_owner =
            agent_admin.set_quota(pb::SetQuotaRequest { space: "s".into(), ..Default::default() }).await.unwrap_err();
        assert_error(&not_owner, Code::PermissionDenied, "PERMISSION_DENIED");
        admin.set_access(set(pb::Role::Unspecified)).await.unwrap();
        assert_error(&agent.read(read("s", "/x")).await.unwrap_err(), Code::NotFound, "NOT_FOUND");
        let last_owner = pb::SetAccessRequest { space: "s".into(), principal: "ops".into(), role: 0, ..Default::default() };
        assert_error(&admin.set_access(last_owner).await.unwrap_err(), Code::InvalidArgument, "INVALID_ARGUMENT");
    }

    #[tokio::test]
    async fn quotas_can_be_lowered_and_trash_stays_allowed_over_them() {
        let front = Front::start().await;
        front.space("s").await;
        let mut fs = front.fs().await;
        let mut admin = front.admin().await;
        fs.write(write_text("s", "/big.txt", &"x".repeat(10_000))).await.unwrap();
        admin
            .set_quota(pb::SetQuotaRequest {
                space: "s".into(),
                quota: Some(pb::Quota { max_bytes: 5_000, max_files: 10 }),
                ..Default::default()
            })
            .await
            .unwrap();
        assert_error(
            &fs.write(write_text("s", "/more.txt", "y")).await.unwrap_err(),
            Code::ResourceExhausted,
            "QUOTA_EXCEEDED",
        );
        let trash = action(Action::Trash(pb::TrashAction { path: "/big.txt".into() }));
        let response = fs.batch(batch(vec![trash], true)).await.unwrap().into_inner();
        assert!(response.atomic, "{response:?}");
        fs.write(write_text("s", "/more.txt", "y")).await.unwrap();
    }

    #[tokio::test]
    async fn principals_over_their_rate_are_shed_with_a_retry_delay() {
        let front = Front::start_with(&["--rate-limit", "5"]).await;
        let mut fs = front.fs().await;
        let mut limited = None;
        for _ in 0..40 {
            if let Err(status) = fs.read(read("nope", "/x")).await
                && status.code() == Code::ResourceExhausted
            {
                limited = Some(status);
                break;
            }
        }
        let status = limited.expect("a burst of 40 calls exceeds 5/s with bursts of 10");
        assert_error(&status, Code::ResourceExhausted, "RATE_LIMITED");
        use tonic_types::StatusExt;
        assert!(status.get_error_details().retry_info().is_some());
    }

    #[tokio::test]
    async fn usage_stays_exact_across_changes_and_restarts() {
        let mut front = Front::start().await;
        front.space("s").await;
        let mut fs = front.fs().await;
        for i in 0..10 {
            fs.write(write_text("s", &format!("/d{}/f{i}.txt", i % 3), &"z".repeat(100 * i))).await.unwrap();
        }
        let actions = vec![
            action(Action::Copy(pb::CopyAction { from: "/d0".into(), to_folder: "/".into(), name: "copy".into() })),
            action(Action::Trash(pb::TrashAction { path: "/d1".into() })),
            action(Action::Edit(pb::EditAction {
                path: "/d2/f2.txt".into(),
                base_version: Some(1),
                edits: vec![pb::TextEdit {
                    kind: Some(pb::text_edit::Kind::Append(pb::AppendEdit { text: "more".into() })),
                }],
            })),
        ];
        fs.batch(batch(actions, true)).await.unwrap();
        let mut admin = front.admin().await;
        admin
            .remove(pb::RemoveRequest { space: "s".into(), path: "/d2/f5.txt".into(), ..Default::default() })
            .await
            .unwrap();
        admin
            .restore(pb::RestoreRequest { space: "s".into(), reference: "/d1".into(), ..Default::default() })
            .await
            .unwrap();
        front.crash_and_restart().await;

        let mut fs = front.fs().await;
        let listing = fs
            .list(pb::ListRequest { space: "s".into(), recursive: true, page_size: 200, ..Default::default() })
            .await
            .unwrap()
            .into_inner()
            .entries;
        let files: Vec<_> = listing.iter().filter(|e| e.kind == pb::NodeKind::File as i32).collect();
        let dirs = listing.len() - files.len();
        let usage = front
            .admin()
            .await
            .get_space(pb::GetSpaceRequest { space: "s".into() })
            .await
            .unwrap()
            .into_inner()
            .usage
            .unwrap();
        assert_eq!(usage.files, files.len() as u64);
        assert_eq!(usage.bytes, files.iter().map(|f| f.size).sum::<u64>());
        assert_eq!(usage.directories, dirs as u64);
    }

    #[tokio::test]
    async fn moves_between_spaces_need_consent_and_keep_ids_and_history() {
        let front = Front::start().await;
        front.space("s").await;
        front.space("t").await;
        let mut fs = front.fs().await;
        fs.write(write_text("s", "/docs/plan.md", "v1\n")).await.unwrap();
        let file = fs.write(write_text("s", "/docs/plan.md", "v2\n")).await.unwrap().into_inner();
        let before = file.revision;
        let moving =
            || action(Action::Move(pb::MoveAction { from: "/docs".into(), to_folder: "/".into(), to_space: "t".into() }));

        let refused = fs.batch(batch(vec![moving()], true)).await.unwrap().into_inner();
        assert_eq!(refused.failed_index, Some(0));
        assert_eq!(refused.outcomes[0].error.as_ref().unwrap().metadata["field"], "confirm_access");

        let request = pb::BatchRequest { confirm_access: true, ..batch(vec![moving()], true) };
        let moved = fs.batch(request).await.unwrap().into_inner();
        assert!(moved.atomic, "{moved:?}");
        assert_error(&fs.read(read("s", "/docs/plan.md")).await.unwrap_err(), Code::NotFound, "NOT_FOUND");
        let there = fs.read(read("t", "/docs/plan.md")).await.unwrap().into_inner();
        assert_eq!((there.content.as_str(), there.node_id.as_str(), there.version), ("v2\n", file.node_id.as_str(), 2));
        let old = fs.read(pb::ReadRequest { version: 1, ..read("t", "/docs/plan.md") }).await.unwrap().into_inner();
        assert_eq!(old.content, "v1\n");
        // The source still reads its own past.
        let past = fs.read(pb::ReadRequest { at_revision: before, ..read("s", "/docs/plan.md") }).await.unwrap();
        assert_eq!(past.into_inner().content, "v2\n");
        let by_id = fs.read(read("", &format!("agentvfs:item:{}", file.node_id))).await.unwrap().into_inner();
        assert_eq!(by_id.path, "/docs/plan.md");
        let mut admin = front.admin().await;
        let s = admin.get_space(pb::GetSpaceRequest { space: "s".into() }).await.unwrap().into_inner().usage.unwrap();
        let t = admin.get_space(pb::GetSpaceRequest { space: "t".into() }).await.unwrap().into_inner().usage.unwrap();
        assert_eq!((s.files, t.files), (1, 2), "each keeps its /AGENT.md");
    }

    #[tokio::test]
    async fn read_only_mode_blocks_every_mutation_and_bad_tokens_are_unauthenticated() {
        let dir = tempfile::tempdir().unwrap();
        let tokens = dir.path().join("tokens.toml");
        std::fs::write(&tokens, "[[tokens]]\ntoken = \"admin-token-0123456789\"\nprincipal = \"ops\"\nadmin = true\n")
            .unwrap();
        let front = Front::start_with(&["--tokens", tokens.to_str().unwrap()]).await;
        let channel = front.channel().await;
        let with = |authorization: &'static str, mode: Option<&'static str>| {
            move |mut request: tonic::Request<()>| {
                request.metadata_mut().insert("authorization", authorization.parse().unwrap());
                if let Some(mode) = mode {
                    request.metadata_mut().insert("x-agentvfs-mode", mode.parse().unwrap());
                }
                Ok(request)
            }
        };
        let admin_auth = "Bearer admin-token-0123456789";
        let mut admin =
            agentvfs_proto::v1::admin_client::AdminClient::with_interceptor(channel.clone(), with(admin_auth, None));
        admin.create_space(pb::CreateSpaceRequest { name: "s".into(), ..Default::default() }).await.unwrap();
        let mut writer = agentvfs_proto::v1::file_system_client::FileSystemClient::with_interceptor(
            channel.clone(),
            with(admin_auth, None),
        );
        writer.write(write_text("s", "/a.txt", "a")).await.unwrap();

        for malformed in ["Basic YWRtaW46cGFzcw==", "Bearer", "Bearer nope-not-a-token", "admin-token-0123456789"] {
            let mut fs = agentvfs_proto::v1::file_system_client::FileSystemClient::with_interceptor(
                channel.clone(),
                with(malformed, None),
            );
            assert_error(&fs.read(read("s", "/a.txt")).await.unwrap_err(), Code::Unauthenticated, "UNAUTHENTICATED");
        }

        let mut fs = agentvfs_proto::v1::file_system_client::FileSystemClient::with_interceptor(
            channel.clone(),
            with(admin_auth, Some("read-only")),
        );
        let mut ro = agentvfs_proto::v1::admin_client::AdminClient::with_interceptor(
            channel.clone(),
            with(admin_auth, Some("read-only")),
        );
        fs.read(read("s", "/a.txt")).await.unwrap();
        let denied = |status: Status| assert_error(&status, Code::PermissionDenied, "PERMISSION_DENIED");
        denied(fs.write(write_text("s", "/b.txt", "b")).await.unwrap_err());
        let edit = pb::EditRequest {
            space: "s".into(),
            path: "/a.txt".into(),
            base_version: Some(1),
            edits: vec![pb::TextEdit { kind: Some(pb::text_edit::Kind::Append(pb::AppendEdit { text: "!".into() })) }],
            ..Default::default()
        };
        denied(fs.edit(edit).await.unwrap_err());
        denied(
            fs.batch(batch(vec![action(Action::Mkdir(pb::MkdirAction { path: "/d".into() }))], true)).await.unwrap_err(),
        );
        let header = pb::UploadHeader { space: "s".into(), path: "/u.bin".into(), ..Default::default() };
        let upload = vec![pb::UploadChunk { part: Some(pb::upload_chunk::Part::Header(header)) }];
        denied(fs.upload(tokio_stream::iter(upload)).await.unwrap_err());
        denied(ro.create_space(pb::CreateSpaceRequest { name: "t".into(), ..Default::default() }).await.unwrap_err());
        denied(ro.set_quota(pb::SetQuotaRequest { space: "s".into(), ..Default::default() }).await.unwrap_err());
        let access = pb::SetAccessRequest { space: "s".into(), principal: "x".into(), role: 1, ..Default::default() };
        denied(ro.set_access(access).await.unwrap_err());
        denied(
            ro.remove(pb::RemoveRequest { space: "s".into(), path: "/a.txt".into(), ..Default::default() })
                .await
                .unwrap_err(),
        );
        denied(
            ro.restore(pb::RestoreRequest { space: "s".into(), reference: "/a.txt".into(), ..Default::default() })
                .await
                .unwrap_err(),
        );
        denied(
            ro.register_functions(pb::RegisterFunctionsRequest { space: "s".into(), ..Default::default() })
                .await
                .unwrap_err(),
        );
        let default = pb::RestoreDefaultRequest { space: "s".into(), path: "/AGENT.md".into(), ..Default::default() };
        denied(ro.restore_default(default).await.unwrap_err());
        denied(ro.compact(pb::CompactRequest { space: "s".into(), revision: 0 }).await.unwrap_err());
        denied(ro.reindex(pb::ReindexRequest { space: "s".into() }).await.unwrap_err());
        let delete = pb::DeleteSpaceRequest { space: "s".into(), confirm: "s".into(), ..Default::default() };
        denied(ro.delete_space(delete).await.unwrap_err());
        // Nothing changed.
        assert_eq!(writer.read(read("s", "/a.txt")).await.unwrap().into_inner().version, 1);
    }

    #[tokio::test]
    async fn a_folder_over_the_subtree_limit_is_refused_whole() {
        let front = Front::start_with(&["--max-subtree-entries", "4"]).await;
        front.space("s").await;
        let mut fs = front.fs().await;
        // /small holds 4 entries (itself and 3 files), /big 5.
        for i in 0..3 {
            fs.write(write_text("s", &format!("/small/f{i}.txt"), "x")).await.unwrap();
        }
        for i in 0..4 {
            fs.write(write_text("s", &format!("/big/f{i}.txt"), "x")).await.unwrap();
        }
        let copy = |from: &str, name: &str| {
            action(Action::Copy(pb::CopyAction { from: from.into(), to_folder: "/".into(), name: name.into() }))
        };
        let ok = fs.batch(batch(vec![copy("/small", "small2")], true)).await.unwrap().into_inner();
        assert_eq!((ok.applied, ok.failed_index), (1, None), "{ok:?}");

        let before = tree(&mut fs).await;
        for refused in [
            copy("/big", "big2"),
            action(Action::Rename(pb::RenameAction { path: "/big".into(), new_name: "large".into() })),
            action(Action::Trash(pb::TrashAction { path: "/big".into() })),
        ] {
            let response = fs.batch(batch(vec![refused], true)).await.unwrap().into_inner();
            assert_eq!((response.applied, response.failed_index), (0, Some(0)), "{response:?}");
            let error = response.outcomes[0].error.clone().unwrap();
            assert_eq!(error.reason, "TOO_LARGE");
            assert_eq!(error.metadata["limit"], "4");
            assert_eq!(error.metadata["path"], "/big");
        }
        assert_eq!(tree(&mut fs).await, before);

        let remove = pb::RemoveRequest { space: "s".into(), path: "/big".into(), recursive: true, ..Default::default() };
        let status = front.admin().await.remove(remove).await.unwrap_err();
        assert_error(&status, Code::InvalidArgument, "TOO_LARGE");
        assert_eq!(tree(&mut fs).await, before);
    }
}
