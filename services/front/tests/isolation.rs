//! Isolation matrix: every RPC against the caller's own space, another
//! principal's space and a space that does not exist. The other space must
//! be indistinguishable from a missing one, and no call may reveal its
//! content.

// Tests may unwrap: a panic is the failure report.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::future::Future;
use std::pin::Pin;

use agentvfs_proto::v1 as pb;
use agentvfs_proto::v1::admin_client::AdminClient;
use agentvfs_proto::v1::file_system_client::FileSystemClient;
use support::{Bearer, Stack, read, write_text};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;
use tonic::{Code, Status};

type Fs = FileSystemClient<InterceptedService<Channel, Bearer>>;
type Admin = AdminClient<InterceptedService<Channel, Bearer>>;
type Call = Box<dyn Fn(Fs, Admin, String) -> Pin<Box<dyn Future<Output = Result<(), Status>> + Send>>>;

fn call<F, Fut>(f: F) -> Call
where
    F: Fn(Fs, Admin, String) -> Fut + 'static,
    Fut: Future<Output = Result<(), Status>> + Send + 'static,
{
    Box::new(move |fs, admin, space| Box::pin(f(fs, admin, space)))
}

fn edit(space: &str) -> pb::EditRequest {
    pb::EditRequest {
        space: space.into(),
        path: "/secret.txt".into(),
        base_version: Some(1),
        edits: vec![pb::TextEdit { kind: Some(pb::text_edit::Kind::Append(pb::AppendEdit { text: "x".into() })) }],
        ..Default::default()
    }
}

fn calls() -> Vec<(&'static str, Call)> {
    vec![
        (
            "Resolve",
            call(|mut fs, _, s| async move {
                fs.resolve(pb::ResolveRequest { space: s, reference: "/secret.txt".into(), ..Default::default() })
                    .await
                    .map(drop)
            }),
        ),
        (
            "List",
            call(
                |mut fs, _, s| async move { fs.list(pb::ListRequest { space: s, ..Default::default() }).await.map(drop) },
            ),
        ),
        ("Read", call(|mut fs, _, s| async move { fs.read(read(&s, "/secret.txt")).await.map(drop) })),
        ("Write", call(|mut fs, _, s| async move { fs.write(write_text(&s, "/new.txt", "x")).await.map(drop) })),
        ("Edit", call(|mut fs, _, s| async move { fs.edit(edit(&s)).await.map(drop) })),
        (
            "Find",
            call(|mut fs, _, s| async move {
                fs.find(pb::FindRequest { space: s, pattern: "*".into(), ..Default::default() }).await.map(drop)
            }),
        ),
        (
            "Grep",
            call(|mut fs, _, s| async move {
                fs.grep(pb::GrepRequest { space: s, pattern: "CANARY".into(), ..Default::default() }).await.map(drop)
            }),
        ),
        (
            "Batch",
            call(|mut fs, _, s| async move {
                let trash = pb::BatchAction {
                    action: Some(pb::batch_action::Action::Trash(pb::TrashAction { path: "/secret.txt".into() })),
                };
                fs.batch(pb::BatchRequest {
                    space: s,
                    actions: vec![trash],
                    apply: true,
                    idempotency_key: "k".into(),
                    ..Default::default()
                })
                .await
                .map(drop)
            }),
        ),
        (
            "ListVersions",
            call(|mut fs, _, s| async move {
                fs.list_versions(pb::ListVersionsRequest { space: s, path: "/secret.txt".into(), ..Default::default() })
                    .await
                    .map(drop)
            }),
        ),
        (
            "Download",
            call(|mut fs, _, s| async move {
                let mut stream = fs
                    .download(pb::DownloadRequest { space: s, path: "/secret.txt".into(), ..Default::default() })
                    .await?
                    .into_inner();
                while stream.message().await?.is_some() {}
                Ok(())
            }),
        ),
        (
            "Upload",
            call(|mut fs, _, s| async move {
                let header = pb::UploadHeader { space: s, path: "/u.bin".into(), ..Default::default() };
                let chunks = vec![pb::UploadChunk { part: Some(pb::upload_chunk::Part::Header(header)) }];
                fs.upload(tokio_stream::iter(chunks)).await.map(drop)
            }),
        ),
        (
            "Diff",
            call(|mut fs, _, s| async move {
                fs.diff(pb::DiffRequest { space: s, path: "/secret.txt".into(), ..Default::default() }).await.map(drop)
            }),
        ),
        (
            "GetSpace",
            call(|_, mut admin, s| async move { admin.get_space(pb::GetSpaceRequest { space: s }).await.map(drop) }),
        ),
        (
            "SetQuota",
            call(|_, mut admin, s| async move {
                admin.set_quota(pb::SetQuotaRequest { space: s, ..Default::default() }).await.map(drop)
            }),
        ),
        (
            "SetAccess",
            call(|_, mut admin, s| async move {
                admin
                    .set_access(pb::SetAccessRequest { space: s, principal: "x".into(), role: 1, ..Default::default() })
                    .await
                    .map(drop)
            }),
        ),
        (
            "Remove",
            call(|_, mut admin, s| async move {
                admin
                    .remove(pb::RemoveRequest { space: s, path: "/secret.txt".into(), ..Default::default() })
                    .await
                    .map(drop)
            }),
        ),
        (
            "Restore",
            call(|_, mut admin, s| async move {
                admin
                    .restore(pb::RestoreRequest { space: s, reference: "/secret.txt".into(), ..Default::default() })
                    .await
                    .map(drop)
            }),
        ),
        (
            "RegisterFunctions",
            call(|_, mut admin, s| async move {
                admin
                    .register_functions(pb::RegisterFunctionsRequest { space: s, ..Default::default() })
                    .await
                    .map(drop)
            }),
        ),
        (
            "RestoreDefault",
            call(|_, mut admin, s| async move {
                admin
                    .restore_default(pb::RestoreDefaultRequest {
                        space: s,
                        path: "/AGENT.md".into(),
                        ..Default::default()
                    })
                    .await
                    .map(drop)
            }),
        ),
        (
            "DeleteSpace",
            call(|_, mut admin, s| async move {
                admin
                    .delete_space(pb::DeleteSpaceRequest { space: s.clone(), confirm: s, ..Default::default() })
                    .await
                    .map(drop)
            }),
        ),
    ]
}

#[tokio::test]
async fn another_principals_space_is_indistinguishable_from_a_missing_one() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.toml");
    std::fs::write(
        &tokens,
        "[[tokens]]\ntoken = \"ops-token-0123456789\"\nprincipal = \"ops\"\nadmin = true\n\n\
         [[tokens]]\ntoken = \"alice-token-0123456789\"\nprincipal = \"alice\"\n\n\
         [[tokens]]\ntoken = \"bob-token-0123456789\"\nprincipal = \"bob\"\n",
    )
    .unwrap();
    // The worker fetches content with a token of its own, as deployed.
    let worker_env = [("AGENTVFS_TOKEN", "ops-token-0123456789")];
    let stack = Stack::start_configured(&["--tokens", tokens.to_str().unwrap()], &[], &worker_env).await;
    let channel = stack.front.channel().await;
    let clients = |token| {
        (
            FileSystemClient::with_interceptor(channel.clone(), Bearer(token)),
            AdminClient::with_interceptor(channel.clone(), Bearer(token)),
        )
    };
    let (_, mut ops) = clients("ops-token-0123456789");
    for (space, owner) in [("alice-space", "alice"), ("bob-space", "bob")] {
        ops.create_space(pb::CreateSpaceRequest { name: space.into(), ..Default::default() }).await.unwrap();
        let grant = pb::SetAccessRequest {
            space: space.into(),
            principal: owner.into(),
            role: pb::Role::Owner as i32,
            ..Default::default()
        };
        ops.set_access(grant).await.unwrap();
    }
    let (mut bob_fs, _) = clients("bob-token-0123456789");
    bob_fs.write(write_text("bob-space", "/secret.txt", "CANARY bob's secret\n")).await.unwrap();
    let (mut alice_fs, alice_admin) = clients("alice-token-0123456789");
    alice_fs.write(write_text("alice-space", "/secret.txt", "alice's own\n")).await.unwrap();
    let bob_id = ops.get_space(pb::GetSpaceRequest { space: "bob-space".into() }).await.unwrap().into_inner().id;

    let mut checked = 0;
    for (name, run) in calls() {
        let other = run(alice_fs.clone(), alice_admin.clone(), "bob-space".into()).await.unwrap_err();
        let other_by_id = run(alice_fs.clone(), alice_admin.clone(), bob_id.clone()).await.unwrap_err();
        let missing = run(alice_fs.clone(), alice_admin.clone(), "ghost-space".into()).await.unwrap_err();
        for status in [&other, &other_by_id, &missing] {
            assert_eq!(status.code(), Code::NotFound, "{name}: {status:?}");
        }
        assert_eq!(
            other.message().replace("bob-space", "X"),
            missing.message().replace("ghost-space", "X"),
            "{name}: the messages differ only by the name the caller gave"
        );
        assert!(!other.message().contains("CANARY") && !format!("{:?}", other.details()).contains("CANARY"));
        checked += 1;
    }
    assert_eq!(checked, 20);

    // Bob's canary never shows up for Alice, whatever she searches; her own
    // file does.
    let grep =
        |pattern: &str| pb::GrepRequest { space: "alice-space".into(), pattern: pattern.into(), ..Default::default() };
    let own = alice_fs.grep(grep("alice.s own")).await.unwrap().into_inner();
    assert_eq!(own.files.iter().map(|f| f.path.as_str()).collect::<Vec<_>>(), ["/secret.txt"], "{own:?}");
    let canary = alice_fs.grep(grep("CANARY")).await.unwrap().into_inner();
    assert!(canary.files.is_empty() && canary.skipped.is_empty() && canary.complete, "{canary:?}");
    // Bob's node IDs do not open doors either.
    let bob_file = bob_fs
        .resolve(pb::ResolveRequest {
            space: "bob-space".into(),
            reference: "/secret.txt".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let by_item = alice_fs.read(read("", &format!("agentvfs:item:{}", bob_file.node_id))).await.unwrap_err();
    assert_eq!(by_item.code(), Code::NotFound);
    let by_item_in_own =
        alice_fs.read(read("alice-space", &format!("agentvfs:item:{}", bob_file.node_id))).await.unwrap_err();
    assert_eq!(by_item_in_own.code(), Code::NotFound);
    // And Bob's own calls still work.
    assert_eq!(
        bob_fs.read(read("bob-space", "/secret.txt")).await.unwrap().into_inner().content,
        "CANARY bob's secret\n"
    );
}

/// The worker fetches content from a front that checks tokens with its own
/// token: several batches of it, contents of more than one chunk. Without
/// one it is refused, and the search fails (WORKER_UNAVAILABLE, naming the
/// cause) rather than reporting no matches.
#[tokio::test]
async fn the_worker_fetches_content_with_its_own_token() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.toml");
    std::fs::write(&tokens, "[[tokens]]\ntoken = \"ops-token-0123456789\"\nprincipal = \"ops\"\nadmin = true\n")
        .unwrap();
    let body = "a line of text\n".repeat(5_000) + "the needle\n";
    let with_token = [("AGENTVFS_TOKEN", "ops-token-0123456789")];
    for worker_env in [&with_token[..], &[]] {
        let stack = Stack::start_configured(&["--tokens", tokens.to_str().unwrap()], &[], worker_env).await;
        let channel = stack.front.channel().await;
        let mut admin = AdminClient::with_interceptor(channel.clone(), Bearer("ops-token-0123456789"));
        admin.create_space(pb::CreateSpaceRequest { name: "s".into(), ..Default::default() }).await.unwrap();
        let mut fs = FileSystemClient::with_interceptor(channel, Bearer("ops-token-0123456789"));
        for i in 0..40 {
            fs.write(write_text("s", &format!("/f{i:02}.txt"), &body)).await.unwrap();
        }
        let count = pb::GrepOutputMode::Count as i32;
        let grep =
            pb::GrepRequest { space: "s".into(), pattern: "needle".into(), output_mode: count, ..Default::default() };
        if worker_env.is_empty() {
            let error = fs.grep(grep).await.unwrap_err();
            assert_eq!(error.code(), Code::Unavailable, "{error:?}");
            assert!(error.message().contains("authorization"), "{error:?}");
        } else {
            let reply = fs.grep(grep).await.unwrap().into_inner();
            assert!(reply.skipped.is_empty(), "{:?}", reply.skipped);
            assert_eq!(reply.files.len(), 40);
            assert!(reply.files.iter().all(|f| f.count == 1));
        }
    }
}
