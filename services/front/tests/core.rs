//! End-to-end: the real `agentvfs-front` process driven through the
//! generated client. Spaces, writes, reads, listings, versions, text edge
//! cases, every error this slice of the API can produce, and restarts.

// Tests may unwrap: a panic is the failure report.
#![allow(clippy::unwrap_used)]

use crate::support;

use agentvfs_proto::v1 as pb;
use agentvfs_proto::v1::batch_action::Action;
use agentvfs_proto::v1::file_system_client::FileSystemClient;
use support::{Front, apply_batch, assert_error, metadata, read, write_bytes, write_text};
use tonic::Code;
use tonic::transport::Channel;

/// The entry of `path` in space `s`, listed.
async fn entry(fs: &mut FileSystemClient<Channel>, path: &str) -> pb::Entry {
    let request = pb::ListRequest { space: "s".into(), recursive: true, ..Default::default() };
    let listing = fs.list(request).await.unwrap().into_inner();
    listing.entries.into_iter().find(|e| e.path == path).unwrap()
}

on_both_engines! {
    #[tokio::test]
    async fn new_spaces_start_with_agent_md_and_system_folders() {
        let front = Front::start().await;
        let space = front.space("acme").await;
        let mut fs = front.fs().await;
        let listing = fs.list(pb::ListRequest { space: space.clone(), ..Default::default() }).await.unwrap().into_inner();
        let names: Vec<_> = listing.entries.iter().map(|e| (e.path.as_str(), e.kind, e.system)).collect();
        let (file, dir) = (pb::NodeKind::File as i32, pb::NodeKind::Directory as i32);
        assert_eq!(
            names,
            [("/AGENT.md", file, true), ("/functions", dir, true), ("/scenarios", dir, true), ("/scripts", dir, true)]
        );
        let agent = fs.read(read("acme", "/AGENT.md")).await.unwrap().into_inner();
        assert!(agent.content.contains("/functions/"), "{}", agent.content);
        assert_eq!(agent.version, 1);
    }

    #[tokio::test]
    async fn spaces_are_created_listed_fetched_and_deleted() {
        let front = Front::start().await;
        let mut admin = front.admin().await;
        let id = front.space("alpha").await;
        front.space("beta").await;
        assert!(id.starts_with("sp_") && id.len() == 29);

        let by_name = admin.get_space(pb::GetSpaceRequest { space: "alpha".into() }).await.unwrap().into_inner();
        assert_eq!(by_name.id, id);
        assert_eq!(by_name.revision, 1);
        assert_eq!(by_name.usage.unwrap().files, 1);

        let dup =
            admin.create_space(pb::CreateSpaceRequest { name: "alpha".into(), ..Default::default() }).await.unwrap_err();
        assert_error(&dup, Code::AlreadyExists, "ALREADY_EXISTS");
        let bad =
            admin.create_space(pb::CreateSpaceRequest { name: "a/b".into(), ..Default::default() }).await.unwrap_err();
        assert_error(&bad, Code::InvalidArgument, "INVALID_ARGUMENT");
        assert_eq!(metadata(&bad, "field"), "name");

        let first = admin.list_spaces(pb::ListSpacesRequest { page_size: 1, ..Default::default() }).await.unwrap();
        let first = first.into_inner();
        assert_eq!(first.spaces.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(), ["alpha"]);
        let second = admin
            .list_spaces(pb::ListSpacesRequest { page_size: 1, page_token: first.next_page_token })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(second.spaces.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(), ["beta"]);
        assert!(second.next_page_token.is_empty());

        let wrong = admin
            .delete_space(pb::DeleteSpaceRequest { space: id.clone(), confirm: "beta".into(), ..Default::default() })
            .await
            .unwrap_err();
        assert_error(&wrong, Code::InvalidArgument, "INVALID_ARGUMENT");
        admin
            .delete_space(pb::DeleteSpaceRequest { space: id.clone(), confirm: "alpha".into(), ..Default::default() })
            .await
            .unwrap();
        let gone = admin.get_space(pb::GetSpaceRequest { space: id.clone() }).await.unwrap_err();
        assert_error(&gone, Code::NotFound, "NOT_FOUND");
        // The name is free again.
        front.space("alpha").await;
    }

    #[tokio::test]
    async fn writes_make_versions_and_reads_return_them() {
        let front = Front::start().await;
        front.space("s").await;
        let mut fs = front.fs().await;

        let first = fs.write(write_text("s", "notes/plan.md", "one\n")).await.unwrap().into_inner();
        assert!(first.created && first.written);
        assert_eq!((first.version, first.total_length, first.path.as_str()), (1, 4, "/notes/plan.md"));
        assert_eq!(first.hash, blake3::hash(b"one\n").to_hex().to_string());

        // The parent directory was created implicitly.
        let parent = fs
            .resolve(pb::ResolveRequest { space: "s".into(), reference: "/notes".into(), ..Default::default() })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(parent.kind, pb::NodeKind::Directory as i32);

        let second = fs.write(write_text("s", "/notes/plan.md", "two\n")).await.unwrap().into_inner();
        assert_eq!((second.version, second.created, second.node_id == first.node_id), (2, false, true));

        // Same content again: no new version.
        let same = fs.write(write_text("s", "/notes/plan.md", "two\n")).await.unwrap().into_inner();
        assert_eq!(same.version, 2);

        let mut append = write_text("s", "/notes/plan.md", "three\n");
        append.mode = pb::WriteMode::Append as i32;
        let appended = fs.write(append).await.unwrap().into_inner();
        assert_eq!((appended.version, appended.total_length), (3, 10));

        let mut create_new = write_text("s", "/notes/plan.md", "ignored");
        create_new.mode = pb::WriteMode::CreateNew as i32;
        let skipped = fs.write(create_new).await.unwrap().into_inner();
        assert_eq!((skipped.written, skipped.version, skipped.total_length), (false, 3, 10));

        let latest = fs.read(read("s", "/notes/plan.md")).await.unwrap().into_inner();
        assert_eq!((latest.content.as_str(), latest.version, latest.total_lines), ("two\nthree\n", 3, 2));
        let old = fs.read(pb::ReadRequest { version: 1, ..read("s", "/notes/plan.md") }).await.unwrap().into_inner();
        assert_eq!(old.content, "one\n");

        let versions = fs
            .list_versions(pb::ListVersionsRequest {
                space: "s".into(),
                path: "/notes/plan.md".into(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        let summary: Vec<_> =
            versions.versions.iter().map(|v| (v.version, v.operation.as_str(), v.principal.as_str())).collect();
        assert_eq!(summary, [(3, "append", "dev"), (2, "write", "dev"), (1, "write", "dev")]);
    }

    #[tokio::test]
    async fn expected_version_guards_writes() {
        let front = Front::start().await;
        front.space("s").await;
        let mut fs = front.fs().await;
        let create = pb::WriteRequest { expected_version: Some(0), ..write_text("s", "/a.txt", "x") };
        fs.write(create.clone()).await.unwrap();
        let again = fs.write(create).await.unwrap_err();
        assert_error(&again, Code::FailedPrecondition, "VERSION_CONFLICT");
        assert_eq!((metadata(&again, "expectedVersion").as_str(), metadata(&again, "currentVersion").as_str()), ("0", "1"));
        use tonic_types::StatusExt;
        assert_eq!(again.get_error_details().precondition_failure().unwrap().violations.len(), 1);

        let stale = pb::WriteRequest { expected_version: Some(5), ..write_text("s", "/a.txt", "y") };
        let err = fs.write(stale).await.unwrap_err();
        assert_error(&err, Code::FailedPrecondition, "VERSION_CONFLICT");
        let ok = pb::WriteRequest { expected_version: Some(1), ..write_text("s", "/a.txt", "y") };
        assert_eq!(fs.write(ok).await.unwrap().into_inner().version, 2);
    }

    #[tokio::test]
    async fn text_offsets_are_utf16_and_bytes_are_kept() {
        let front = Front::start().await;
        front.space("s").await;
        let mut fs = front.fs().await;

        // Emoji are two UTF-16 units, CJK one.
        let text = "a😀b日本\nsecond\n";
        let written = fs.write(write_text("s", "/u.txt", text)).await.unwrap().into_inner();
        assert_eq!(written.total_length, 1 + 2 + 1 + 2 + 1 + 7);
        let cut = fs.read(pb::ReadRequest { max_chars: 2, ..read("s", "/u.txt") }).await.unwrap().into_inner();
        assert_eq!((cut.content.as_str(), cut.truncated), ("a", true));
        let next = cut.next.unwrap();
        assert_eq!((next.start_line, next.start_char), (1, 1));
        let rest =
            fs.read(pb::ReadRequest { start_char: 1, max_chars: 4, ..read("s", "/u.txt") }).await.unwrap().into_inner();
        assert_eq!(rest.content, "😀b日");
        let inside = fs.read(pb::ReadRequest { start_char: 2, ..read("s", "/u.txt") }).await.unwrap_err();
        assert_error(&inside, Code::InvalidArgument, "INVALID_ARGUMENT");
        assert_eq!(metadata(&inside, "field"), "start_char");

        // BOM, CRLF and a missing final newline come back exactly.
        let crlf = "\u{feff}line one\r\nline two\r\nno newline";
        fs.write(write_text("s", "/crlf.txt", crlf)).await.unwrap();
        let back = fs.read(read("s", "/crlf.txt")).await.unwrap().into_inner();
        assert_eq!(back.content, crlf);
        let info = back.text.unwrap();
        assert!(info.bom);
        assert_eq!(info.line_ending, pb::LineEnding::Crlf as i32);
        assert_eq!(back.total_lines, 3);
        let second = fs.read(pb::ReadRequest { offset: 2, limit: 1, ..read("s", "/crlf.txt") }).await.unwrap().into_inner();
        assert_eq!((second.content.as_str(), second.first_line, second.last_line), ("line two\r\n", 2, 2));
        assert_eq!(second.next.map(|n| (n.start_line, n.start_char)), Some((3, 0)));

        let past = fs.read(pb::ReadRequest { offset: 9, ..read("s", "/crlf.txt") }).await.unwrap_err();
        assert_error(&past, Code::InvalidArgument, "INVALID_ARGUMENT");
        assert_eq!(metadata(&past, "lines"), "3");
    }

    #[tokio::test]
    async fn binary_files_are_stored_but_refused_as_text() {
        let front = Front::start().await;
        front.space("s").await;
        let mut fs = front.fs().await;
        let binary = [b'P', b'N', b'G', 0, 1, 2, 3, 4];
        let stored = fs.write(write_bytes("s", "/img.png", &binary)).await.unwrap().into_inner();
        assert_eq!((stored.size, stored.total_length), (8, 0));
        assert_eq!(stored.hash, blake3::hash(&binary).to_hex().to_string());
        let err = fs.read(read("s", "/img.png")).await.unwrap_err();
        assert_error(&err, Code::FailedPrecondition, "BINARY_CONTENT");

        // UTF-32 is not an encoding text is kept in.
        fs.write(write_bytes("s", "/utf32.txt", b"\xff\xfe\0\0c\0\0\0")).await.unwrap();
        let err = fs.read(read("s", "/utf32.txt")).await.unwrap_err();
        assert_error(&err, Code::FailedPrecondition, "BINARY_CONTENT");
        let mut append = write_text("s", "/utf32.txt", "more");
        append.mode = pb::WriteMode::Append as i32;
        let err = fs.write(append).await.unwrap_err();
        assert_error(&err, Code::FailedPrecondition, "BINARY_CONTENT");

        // Latin-1 is text, in windows-1252 (its WHATWG name), and stays in it.
        fs.write(write_bytes("s", "/latin1.txt", b"caf\xe9\n")).await.unwrap();
        let mut append = write_text("s", "/latin1.txt", "crème\n");
        append.mode = pb::WriteMode::Append as i32;
        fs.write(append).await.unwrap();
        let latin1 = fs.read(read("s", "/latin1.txt")).await.unwrap().into_inner();
        assert_eq!((latin1.content.as_str(), latin1.size), ("café\ncrème\n", 11));
        assert_eq!(latin1.text.unwrap().encoding, "windows-1252");

        let listing = fs
            .find(pb::FindRequest { space: "s".into(), pattern: "*.png".into(), ..Default::default() })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(listing.matches.len(), 1);
    }

    #[tokio::test]
    async fn paths_and_references_are_validated_and_resolved() {
        let front = Front::start().await;
        let space_id = front.space("s").await;
        let mut fs = front.fs().await;
        let file = fs.write(write_text("s", "/dir/My File.md", "hi\n")).await.unwrap().into_inner();

        let cases = [
            ("/a/../b", Code::InvalidArgument, "PATH_TRAVERSAL"),
            ("..", Code::InvalidArgument, "PATH_TRAVERSAL"),
            ("/a\0b", Code::InvalidArgument, "INVALID_PATH"),
            ("/a\\b", Code::InvalidArgument, "INVALID_PATH"),
            ("/tab\there", Code::InvalidArgument, "INVALID_PATH"),
            ("agentvfs:item:bogus", Code::InvalidArgument, "INVALID_ARGUMENT"),
        ];
        for (path, code, reason) in cases {
            let err = fs.read(read("s", path)).await.unwrap_err();
            assert_error(&err, code, reason);
            assert_eq!(metadata(&err, "field"), "path", "{path:?}");
        }
        let long = format!("/{}", "x".repeat(256));
        assert_error(&fs.read(read("s", &long)).await.unwrap_err(), Code::InvalidArgument, "INVALID_PATH");
        let deep = "/d".repeat(65);
        assert_error(&fs.read(read("s", &deep)).await.unwrap_err(), Code::InvalidArgument, "INVALID_PATH");
        let encoded = format!("agentvfs://{space_id}/dir/%2e%2e/x");
        assert_error(&fs.read(read("", &encoded)).await.unwrap_err(), Code::InvalidArgument, "PATH_TRAVERSAL");

        // Every reference form reaches the same file.
        let forms = [
            format!("agentvfs:item:{}", file.node_id),
            format!("agentvfs://{space_id}/dir/My%20File.md"),
            "/dir/My File.md".to_owned(),
            "dir//My File.md/".to_owned(),
        ];
        for reference in forms {
            let resolved = fs
                .resolve(pb::ResolveRequest { space: "s".into(), reference: reference.clone(), ..Default::default() })
                .await
                .unwrap()
                .into_inner();
            assert_eq!(resolved.node_id, file.node_id, "{reference}");
            assert_eq!(resolved.path, "/dir/My File.md");
            assert_eq!(resolved.uri, format!("agentvfs://{space_id}/dir/My%20File.md"));
            assert!(resolved.capabilities.unwrap().write);
        }
        let relative =
            fs.read(pb::ReadRequest { base: "/dir".into(), ..read("s", "My File.md") }).await.unwrap().into_inner();
        assert_eq!(relative.content, "hi\n");
        let root = fs
            .resolve(pb::ResolveRequest { reference: format!("agentvfs:space:{space_id}"), ..Default::default() })
            .await
            .unwrap()
            .into_inner();
        assert_eq!((root.path.as_str(), root.space_id == space_id), ("/", true));

        // NFD and NFC spell the same path.
        fs.write(write_text("s", "/caf\u{0065}\u{0301}.txt", "nfd")).await.unwrap();
        assert_eq!(fs.read(read("s", "/caf\u{00e9}.txt")).await.unwrap().into_inner().content, "nfd");

        let no_space = fs.read(read("", "/dir/My File.md")).await.unwrap_err();
        assert_error(&no_space, Code::InvalidArgument, "INVALID_ARGUMENT");
        assert_eq!(metadata(&no_space, "field"), "space");
    }

    #[tokio::test]
    async fn structural_errors_have_their_own_reasons() {
        let front = Front::start_with(&["--max-text-bytes", "1024"]).await;
        front.space("s").await;
        let mut fs = front.fs().await;
        fs.write(write_text("s", "/file.txt", "x")).await.unwrap();

        assert_error(&fs.read(read("s", "/missing")).await.unwrap_err(), Code::NotFound, "NOT_FOUND");
        assert_error(&fs.read(read("nope", "/file.txt")).await.unwrap_err(), Code::NotFound, "NOT_FOUND");
        assert_error(&fs.read(read("s", "/functions")).await.unwrap_err(), Code::FailedPrecondition, "NOT_A_FILE");
        assert_error(
            &fs.write(write_text("s", "/functions", "x")).await.unwrap_err(),
            Code::FailedPrecondition,
            "NOT_A_FILE",
        );
        let below_file = fs.write(write_text("s", "/file.txt/child", "x")).await.unwrap_err();
        assert_error(&below_file, Code::FailedPrecondition, "NOT_A_DIRECTORY");
        assert_eq!(metadata(&below_file, "path"), "/file.txt");
        let list_file = fs
            .list(pb::ListRequest { space: "s".into(), path: "/file.txt".into(), ..Default::default() })
            .await
            .unwrap_err();
        assert_error(&list_file, Code::FailedPrecondition, "NOT_A_DIRECTORY");

        let big = fs.write(write_text("s", "/big.txt", &"x".repeat(1025))).await.unwrap_err();
        assert_error(&big, Code::InvalidArgument, "TOO_LARGE");
        assert_eq!((metadata(&big, "field").as_str(), metadata(&big, "limit").as_str()), ("content", "1024"));
        fs.write(write_text("s", "/grow.txt", &"x".repeat(1000))).await.unwrap();
        let mut append = write_text("s", "/grow.txt", &"y".repeat(100));
        append.mode = pb::WriteMode::Append as i32;
        assert_error(&fs.write(append).await.unwrap_err(), Code::FailedPrecondition, "FILE_TOO_LARGE");
        // A large binary file is fine, but not as text.
        fs.write(write_bytes("s", "/big.bin", &vec![b'a'; 4096])).await.unwrap();
        assert_error(&fs.read(read("s", "/big.bin")).await.unwrap_err(), Code::FailedPrecondition, "FILE_TOO_LARGE");

        let no_body = fs.write(pb::WriteRequest { space: "s".into(), path: "/x".into(), ..Default::default() }).await;
        assert_error(&no_body.unwrap_err(), Code::InvalidArgument, "INVALID_ARGUMENT");
        let bad_chars = fs.read(pb::ReadRequest { max_chars: 1, ..read("s", "/file.txt") }).await.unwrap_err();
        assert_error(&bad_chars, Code::InvalidArgument, "INVALID_ARGUMENT");
        assert_eq!(metadata(&bad_chars, "field"), "max_chars");
        let bad_page = fs.list(pb::ListRequest { space: "s".into(), page_size: 201, ..Default::default() }).await;
        assert_error(&bad_page.unwrap_err(), Code::InvalidArgument, "INVALID_ARGUMENT");
        let bad_glob = fs.find(pb::FindRequest { space: "s".into(), pattern: "[abc".into(), ..Default::default() }).await;
        assert_error(&bad_glob.unwrap_err(), Code::InvalidArgument, "INVALID_PATTERN");
        let future = fs.list(pb::ListRequest { space: "s".into(), at_revision: 999, ..Default::default() }).await;
        assert_error(&future.unwrap_err(), Code::InvalidArgument, "INVALID_ARGUMENT");
        let missing_version = fs.read(pb::ReadRequest { version: 7, ..read("s", "/file.txt") }).await.unwrap_err();
        assert_error(&missing_version, Code::NotFound, "NOT_FOUND");
    }

    #[tokio::test]
    async fn quotas_refuse_writes_past_the_limit() {
        let front = Front::start().await;
        let mut admin = front.admin().await;
        admin
            .create_space(pb::CreateSpaceRequest {
                name: "small".into(),
                quota: Some(pb::Quota { max_bytes: 4096, max_files: 3 }),
                ..Default::default()
            })
            .await
            .unwrap();
        let mut fs = front.fs().await;
        let agent_md = admin.get_space(pb::GetSpaceRequest { space: "small".into() }).await.unwrap().into_inner();
        let used = agent_md.usage.unwrap().bytes;
        let room = 4096 - used as usize;
        fs.write(write_text("small", "/fill.txt", &"x".repeat(room))).await.unwrap();
        let over = fs.write(write_text("small", "/one-more.txt", "y")).await.unwrap_err();
        assert_error(&over, Code::ResourceExhausted, "QUOTA_EXCEEDED");
        use tonic_types::StatusExt;
        assert!(over.get_error_details().quota_failure().is_some());
        // Shrinking stays allowed at the limit.
        fs.write(write_text("small", "/fill.txt", "small now")).await.unwrap();
        fs.write(write_text("small", "/two.txt", "2")).await.unwrap();
        let files = fs.write(write_text("small", "/three.txt", "3")).await.unwrap_err();
        assert_error(&files, Code::ResourceExhausted, "QUOTA_EXCEEDED");
    }

    #[tokio::test]
    async fn list_and_find_follow_glob_rules_and_pages() {
        let front = Front::start().await;
        front.space("s").await;
        let mut fs = front.fs().await;
        for path in ["/src/main.rs", "/src/lib/mod.rs", "/src/lib/util.rs", "/docs/a.md", "/docs/deep/b.md", "/top.md"] {
            fs.write(write_text("s", path, path)).await.unwrap();
        }
        let find = |pattern: &str, path: &str| pb::FindRequest {
            space: "s".into(),
            pattern: pattern.into(),
            path: path.into(),
            ..Default::default()
        };
        let paths = |r: pb::FindResponse| r.matches.into_iter().map(|m| m.path).collect::<Vec<_>>();
        assert_eq!(
            paths(fs.find(find("*.md", "/")).await.unwrap().into_inner()),
            ["/AGENT.md", "/docs/a.md", "/docs/deep/b.md", "/top.md"]
        );
        assert_eq!(paths(fs.find(find("deep/*.md", "/docs")).await.unwrap().into_inner()), ["/docs/deep/b.md"]);
        assert_eq!(
            paths(fs.find(find("**/*.rs", "/src")).await.unwrap().into_inner()),
            ["/src/lib/mod.rs", "/src/lib/util.rs", "/src/main.rs"]
        );
        assert_eq!(paths(fs.find(find("{main,mod}.rs", "/")).await.unwrap().into_inner()).len(), 2);

        let list = fs
            .list(pb::ListRequest { space: "s".into(), path: "/src".into(), ..Default::default() })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(list.entries.iter().map(|e| e.path.as_str()).collect::<Vec<_>>(), ["/src/lib", "/src/main.rs"]);

        // Pages of one entry each, with writes in between, equal one listing
        // taken before the writes.
        let all = fs
            .list(pb::ListRequest { space: "s".into(), recursive: true, ..Default::default() })
            .await
            .unwrap()
            .into_inner();
        let mut paged = Vec::new();
        let mut token = String::new();
        loop {
            let page = fs
                .list(pb::ListRequest {
                    space: "s".into(),
                    recursive: true,
                    page_size: 1,
                    page_token: token,
                    ..Default::default()
                })
                .await
                .unwrap()
                .into_inner();
            assert!(page.entries.len() <= 1);
            assert_eq!(page.revision, all.revision);
            paged.extend(page.entries.into_iter().map(|e| e.path));
            fs.write(write_text("s", &format!("/new/{}.txt", paged.len()), "x")).await.unwrap();
            if page.next_page_token.is_empty() {
                break;
            }
            token = page.next_page_token;
        }
        assert_eq!(paged, all.entries.iter().map(|e| e.path.clone()).collect::<Vec<_>>());

        // A token is bound to its arguments.
        let first = fs
            .list(pb::ListRequest { space: "s".into(), recursive: true, page_size: 1, ..Default::default() })
            .await
            .unwrap()
            .into_inner();
        let misuse = fs
            .list(pb::ListRequest {
                space: "s".into(),
                page_size: 1,
                page_token: first.next_page_token,
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_error(&misuse, Code::InvalidArgument, "CURSOR_INVALID");

        // A listing as of an old revision does not see later files.
        let old = fs.find(pb::FindRequest { at_revision: all.revision, ..find("*.txt", "/") }).await.unwrap().into_inner();
        assert!(old.matches.is_empty());
        assert!(!fs.find(find("*.txt", "/")).await.unwrap().into_inner().matches.is_empty());
    }

    #[tokio::test]
    async fn malformed_protobuf_is_invalid_argument() {
        #[derive(Clone, PartialEq, prost::Message)]
        struct RawRead {
            #[prost(bytes = "vec", tag = "1")]
            space: Vec<u8>,
        }
        let front = Front::start().await;
        let mut grpc = tonic::client::Grpc::new(front.channel().await);
        grpc.ready().await.unwrap();
        let err = grpc
            .unary::<RawRead, pb::ReadResponse, _>(
                tonic::Request::new(RawRead { space: vec![0xff, 0xfe] }),
                tonic::codegen::http::uri::PathAndQuery::from_static("/agentvfs.v1.FileSystem/Read"),
                agentvfs_proto::codec::ProtoCodec::default(),
            )
            .await
            .unwrap_err();
        assert_error(&err, Code::InvalidArgument, "INVALID_ARGUMENT");
    }

    #[tokio::test]
    async fn tokens_authenticate_and_read_only_mode_blocks_writes() {
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
        let with = |token: &'static str, mode: Option<&'static str>| {
            move |mut request: tonic::Request<()>| {
                request.metadata_mut().insert("authorization", format!("Bearer {token}").parse().unwrap());
                if let Some(mode) = mode {
                    request.metadata_mut().insert("x-agentvfs-mode", mode.parse().unwrap());
                }
                Ok(request)
            }
        };
        let mut admin = agentvfs_proto::v1::admin_client::AdminClient::with_interceptor(
            channel.clone(),
            with("admin-token-0123456789", None),
        );
        admin.create_space(pb::CreateSpaceRequest { name: "s".into(), ..Default::default() }).await.unwrap();

        let mut anonymous = front.fs().await;
        assert_error(&anonymous.read(read("s", "/AGENT.md")).await.unwrap_err(), Code::Unauthenticated, "UNAUTHENTICATED");
        let mut bogus = agentvfs_proto::v1::file_system_client::FileSystemClient::with_interceptor(
            channel.clone(),
            with("not-a-real-token-at-all", None),
        );
        assert_error(&bogus.read(read("s", "/AGENT.md")).await.unwrap_err(), Code::Unauthenticated, "UNAUTHENTICATED");

        // A principal with no role in the space cannot tell it exists.
        let mut agent = agentvfs_proto::v1::file_system_client::FileSystemClient::with_interceptor(
            channel.clone(),
            with("agent-token-0123456789", None),
        );
        let hidden = agent.read(read("s", "/AGENT.md")).await.unwrap_err();
        let missing = agent.read(read("no-such-space", "/AGENT.md")).await.unwrap_err();
        assert_error(&hidden, Code::NotFound, "NOT_FOUND");
        assert_eq!(hidden.message().replace("\"s\"", "X"), missing.message().replace("\"no-such-space\"", "X"));

        let mut read_only = agentvfs_proto::v1::file_system_client::FileSystemClient::with_interceptor(
            channel,
            with("admin-token-0123456789", Some("read-only")),
        );
        read_only.read(read("s", "/AGENT.md")).await.unwrap();
        let denied = read_only.write(write_text("s", "/x.txt", "x")).await.unwrap_err();
        assert_error(&denied, Code::PermissionDenied, "PERMISSION_DENIED");
    }

    #[tokio::test]
    async fn acknowledged_writes_survive_a_crash() {
        let mut front = Front::start().await;
        front.space("s").await;
        let mut fs = front.fs().await;
        let mut expected = Vec::new();
        for i in 0..50 {
            let path = format!("/crash/{i:02}.txt");
            let content = format!("content {i}\n");
            let written = fs.write(write_text("s", &path, &content)).await.unwrap().into_inner();
            expected.push((path, content, written.hash));
        }
        fs.write(write_bytes("s", "/crash/blob.bin", &[0u8, 1, 2, 255])).await.unwrap();
        // SIGKILL: no drain, no final flush; only what was acknowledged counts.
        front.crash_and_restart().await;
        let mut fs = front.fs().await;
        for (path, content, hash) in expected {
            let back = fs.read(read("s", &path)).await.unwrap().into_inner();
            assert_eq!((back.content, back.hash), (content, hash));
        }
        let space = front.admin().await.get_space(pb::GetSpaceRequest { space: "s".into() }).await.unwrap().into_inner();
        assert_eq!(space.usage.unwrap().files, 52);
    }

    #[tokio::test]
    async fn sigterm_drains_and_exits_zero() {
        let mut front = Front::start().await;
        front.space("s").await;
        front.fs().await.write(write_text("s", "/a.txt", "kept")).await.unwrap();
        let status = front.terminate().await;
        assert!(status.success(), "{status:?}");
    }

    #[tokio::test]
    async fn the_executable_bit_is_a_property_of_each_version() {
        let front = Front::start().await;
        front.space("s").await;
        let mut fs = front.fs().await;
        let script = "#!/bin/sh\necho hi\n";
        let executable = |on| pb::WriteRequest { executable: Some(on), ..write_text("s", "/bin/run.sh", script) };

        assert_eq!(fs.write(executable(true)).await.unwrap().into_inner().version, 1);
        assert!(entry(&mut fs, "/bin/run.sh").await.executable);
        // A write that leaves the bit unset keeps it.
        let kept = fs.write(write_text("s", "/bin/run.sh", "#!/bin/sh\necho hello\n")).await.unwrap().into_inner();
        assert_eq!(kept.version, 2);
        assert!(entry(&mut fs, "/bin/run.sh").await.executable);
        // Changing only the bit makes a version; the same bit again does not.
        let back = fs.write(pb::WriteRequest { executable: Some(false), ..write_text("s", "/bin/run.sh", "#!/bin/sh\necho hello\n") });
        assert_eq!(back.await.unwrap().into_inner().version, 3);
        assert!(!entry(&mut fs, "/bin/run.sh").await.executable);
        let same = fs.write(pb::WriteRequest { executable: Some(false), ..write_text("s", "/bin/run.sh", "#!/bin/sh\necho hello\n") });
        assert_eq!(same.await.unwrap().into_inner().version, 3);
        let request = pb::ListVersionsRequest { space: "s".into(), path: "/bin/run.sh".into(), ..Default::default() };
        let versions = fs.list_versions(request).await.unwrap().into_inner().versions;
        let bits: Vec<_> = versions.iter().map(|v| (v.version, v.executable)).collect();
        assert_eq!(bits, [(3, false), (2, true), (1, true)]);

        // Copies, moves and a trip through the trash keep it; an edit too.
        fs.write(executable(true)).await.unwrap();
        let copy = pb::CopyAction { from: "/bin/run.sh".into(), to_folder: "/".into(), name: "copy.sh".into() };
        fs.batch(apply_batch("s", vec![Action::Copy(copy)], "c")).await.unwrap();
        fs.batch(apply_batch("s", vec![Action::Trash(pb::TrashAction { path: "/bin".into() })], "t")).await.unwrap();
        let restore = pb::RestoreRequest { space: "s".into(), reference: "/bin".into(), ..Default::default() };
        front.admin().await.restore(restore).await.unwrap();
        let edit = pb::EditRequest {
            space: "s".into(),
            path: "/copy.sh".into(),
            edits: vec![support::replace("hi", "there")],
            base_version: Some(1),
            ..Default::default()
        };
        fs.edit(edit).await.unwrap();
        assert!(entry(&mut fs, "/bin/run.sh").await.executable);
        assert!(entry(&mut fs, "/copy.sh").await.executable);
        // A new file has no bit unless it is given.
        fs.write(write_text("s", "/plain.txt", "text\n")).await.unwrap();
        assert!(!entry(&mut fs, "/plain.txt").await.executable);

        // Downloads carry it, and a restart keeps it.
        let mut front = front;
        front.crash_and_restart().await;
        let mut fs = front.fs().await;
        assert!(entry(&mut fs, "/copy.sh").await.executable);
        let download = pb::DownloadRequest { space: "s".into(), path: "/copy.sh".into(), ..Default::default() };
        let mut chunks = fs.download(download).await.unwrap().into_inner();
        let header = chunks.message().await.unwrap().unwrap().header.unwrap();
        assert!(header.executable);
    }
}
