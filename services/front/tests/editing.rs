//! End-to-end: `Edit`, `ReadMany`, `Diff`, `Upload` and `Download` through
//! the real front process.

// Tests may unwrap: a panic is the failure report.
#![allow(clippy::unwrap_used)]

use crate::support;

use agentvfs_proto::v1 as pb;
use agentvfs_proto::v1::batch_action::Action;
use agentvfs_proto::v1::file_system_client::FileSystemClient;
use support::{Front, apply_batch, assert_error, metadata, read, replace, write_bytes, write_text};
use tonic::Code;
use tonic::transport::Channel;

fn edit(path: &str, base: Option<u64>, edits: Vec<pb::TextEdit>) -> pb::EditRequest {
    pb::EditRequest { space: "s".into(), path: path.into(), base_version: base, edits, ..Default::default() }
}

/// Adds `x-agentvfs-session: <id>` and a tool-call ID to every call.
#[derive(Clone)]
struct SessionHeader(&'static str);

impl tonic::service::Interceptor for SessionHeader {
    fn call(&mut self, mut request: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        request.metadata_mut().insert("x-agentvfs-session", self.0.parse().expect("ASCII session id"));
        request.metadata_mut().insert("x-agentvfs-tool-call", "call-42".parse().expect("ASCII"));
        Ok(request)
    }
}

type SessionClient = FileSystemClient<tonic::service::interceptor::InterceptedService<Channel, SessionHeader>>;

fn session(channel: Channel, id: &'static str) -> SessionClient {
    FileSystemClient::with_interceptor(channel, SessionHeader(id))
}

on_both_engines! {
    #[tokio::test]
    async fn edits_apply_in_order_as_one_version_or_not_at_all() {
        let front = Front::start().await;
        front.space("s").await;
        let mut fs = front.fs().await;
        fs.write(write_text("s", "/a.rs", "let x = 1;\nlet y = 2;\n")).await.unwrap();

        let both = vec![replace("x = 1", "x = $1 $&"), replace("y = 2", "y = 3")];
        let done = fs.edit(edit("/a.rs", Some(1), both)).await.unwrap().into_inner();
        assert!(done.changed);
        assert_eq!((done.version, done.previous_version, done.replacements.clone()), (2, 1, vec![1, 1]));
        assert!(done.diff.contains("-let x = 1;\n") && done.diff.contains("+let x = $1 $&;\n"), "{}", done.diff);
        let text = fs.read(read("s", "/a.rs")).await.unwrap().into_inner().content;
        assert_eq!(text, "let x = $1 $&;\nlet y = 3;\n");
        assert_eq!(done.hash, blake3::hash(text.as_bytes()).to_hex().to_string());

        // The second edit fails: nothing of the first is saved.
        let failing = vec![replace("y = 3", "y = 4"), replace("not there", "z")];
        let err = fs.edit(edit("/a.rs", Some(2), failing)).await.unwrap_err();
        assert_error(&err, Code::FailedPrecondition, "EDIT_NO_MATCH");
        assert_eq!(
            (metadata(&err, "editIndex").as_str(), metadata(&err, "field").as_str()),
            ("1", "edits[1].replace.old_text")
        );
        assert_eq!(fs.read(read("s", "/a.rs")).await.unwrap().into_inner().version, 2);

        let stale = fs.edit(edit("/a.rs", Some(1), vec![replace("y = 3", "y = 4")])).await.unwrap_err();
        assert_error(&stale, Code::FailedPrecondition, "VERSION_CONFLICT");
        assert_eq!((metadata(&stale, "expectedVersion").as_str(), metadata(&stale, "currentVersion").as_str()), ("1", "2"));

        let noop = fs.edit(edit("/a.rs", Some(2), vec![replace("y", "y")])).await.unwrap_err();
        assert_error(&noop, Code::FailedPrecondition, "EDIT_NOOP");
        let empty = fs.edit(edit("/a.rs", Some(2), vec![replace("", "y")])).await.unwrap_err();
        assert_error(&empty, Code::InvalidArgument, "INVALID_ARGUMENT");

        // Dry runs compute everything and save nothing.
        let mut dry = edit("/a.rs", Some(2), vec![replace("y = 3", "y = 4")]);
        dry.dry_run = true;
        let preview = fs.edit(dry).await.unwrap().into_inner();
        assert!(preview.changed && preview.dry_run);
        assert_eq!(preview.version, 2);
        assert!(preview.diff.contains("+let y = 4;"));
        assert_eq!(fs.read(read("s", "/a.rs")).await.unwrap().into_inner().version, 2);

        // An edit whose result equals the current content makes no version.
        let back_and_forth = vec![replace("y = 3", "y = 9"), replace("y = 9", "y = 3")];
        let same = fs.edit(edit("/a.rs", Some(2), back_and_forth)).await.unwrap().into_inner();
        assert!(!same.changed);
        assert_eq!(same.version, 2);
    }

    #[tokio::test]
    async fn ambiguous_and_near_miss_errors_explain_themselves() {
        let front = Front::start().await;
        front.space("s").await;
        let mut fs = front.fs().await;
        fs.write(write_text("s", "/t.py", "def f():\n    return 1\n\ndef g():\n    return 1\n")).await.unwrap();
        let err = fs.edit(edit("/t.py", Some(1), vec![replace("return 1", "return 2")])).await.unwrap_err();
        assert_error(&err, Code::FailedPrecondition, "EDIT_AMBIGUOUS_MATCH");
        assert_eq!((metadata(&err, "matches").as_str(), metadata(&err, "lines").as_str()), ("2", "2,5"));
        let all = pb::TextEdit {
            kind: Some(pb::text_edit::Kind::Replace(pb::ReplaceEdit {
                old_text: "return 1".into(),
                new_text: "return 2".into(),
                replace_all: true,
                ..Default::default()
            })),
        };
        assert_eq!(fs.edit(edit("/t.py", Some(1), vec![all])).await.unwrap().into_inner().replacements, [2]);

        let miss = fs.edit(edit("/t.py", Some(2), vec![replace("def G():", "def h():")])).await.unwrap_err();
        assert_error(&miss, Code::FailedPrecondition, "EDIT_NO_MATCH");
        assert_eq!(
            (metadata(&miss, "nearMissLine").as_str(), metadata(&miss, "nearMissDifference").as_str()),
            ("4", "case")
        );
        let indent = fs.edit(edit("/t.py", Some(2), vec![replace("\treturn 2\n\ndef g", "x")])).await.unwrap_err();
        assert_eq!(metadata(&indent, "nearMissDifference"), "indentation");
    }

    #[tokio::test]
    async fn line_endings_boms_and_line_edits_are_respected() {
        let front = Front::start().await;
        front.space("s").await;
        let mut fs = front.fs().await;
        fs.write(write_text("s", "/w.txt", "\u{feff}one\r\ntwo\r\nthree 😀\r\n")).await.unwrap();
        let edits = vec![
            replace("one\ntwo\n", "uno\ndos\n"),
            pb::TextEdit { kind: Some(pb::text_edit::Kind::Append(pb::AppendEdit { text: "four\n".into() })) },
            pb::TextEdit {
                kind: Some(pb::text_edit::Kind::Lines(pb::LinesEdit {
                    start_line: 3,
                    end_line: 3,
                    old_text: "three 😀\r\n".into(),
                    new_text: "tres 😀\n".into(),
                })),
            },
        ];
        fs.edit(edit("/w.txt", Some(1), edits)).await.unwrap();
        let back = fs.read(read("s", "/w.txt")).await.unwrap().into_inner();
        assert_eq!(back.content, "\u{feff}uno\r\ndos\r\ntres 😀\r\nfour\r\n");
        let info = back.text.unwrap();
        assert!(info.bom);
        assert_eq!(info.line_ending, pb::LineEnding::Crlf as i32);

        let wrong_lines = pb::TextEdit {
            kind: Some(pb::text_edit::Kind::Lines(pb::LinesEdit {
                start_line: 1,
                end_line: 1,
                old_text: "uno\n".into(),
                new_text: "x".into(),
            })),
        };
        let err = fs.edit(edit("/w.txt", Some(2), vec![wrong_lines])).await.unwrap_err();
        assert_error(&err, Code::FailedPrecondition, "EDIT_NO_MATCH");

        fs.write(write_bytes("s", "/b.bin", b"a\0b")).await.unwrap();
        let binary = fs.edit(edit("/b.bin", Some(1), vec![replace("a", "b")])).await.unwrap_err();
        assert_error(&binary, Code::FailedPrecondition, "BINARY_CONTENT");
    }

    #[tokio::test]
    async fn edits_without_base_version_need_a_read_in_the_same_session() {
        let front = Front::start().await;
        front.space("s").await;
        let channel = front.channel().await;
        let mut alice = session(channel.clone(), "alice");
        let mut bob = session(channel.clone(), "bob");
        let mut anonymous = front.fs().await;
        anonymous.write(write_text("s", "/shared.md", "hello\n")).await.unwrap();

        let unread = alice.edit(edit("/shared.md", None, vec![replace("hello", "hi")])).await.unwrap_err();
        assert_error(&unread, Code::FailedPrecondition, "READ_REQUIRED");
        let no_session = anonymous.edit(edit("/shared.md", None, vec![replace("hello", "hi")])).await.unwrap_err();
        assert_error(&no_session, Code::FailedPrecondition, "READ_REQUIRED");

        alice.read(read("s", "/shared.md")).await.unwrap();
        bob.read(read("s", "/shared.md")).await.unwrap();
        let done = alice.edit(edit("/shared.md", None, vec![replace("hello", "hi")])).await.unwrap().into_inner();
        assert_eq!(done.version, 2);
        // Alice's own edit counts as a read; Bob's view is stale.
        alice.edit(edit("/shared.md", None, vec![replace("hi", "hey")])).await.unwrap();
        let stale = bob.edit(edit("/shared.md", None, vec![replace("hello", "yo")])).await.unwrap_err();
        assert_error(&stale, Code::FailedPrecondition, "FILE_MODIFIED_SINCE_READ");
        assert_eq!((metadata(&stale, "expectedVersion").as_str(), metadata(&stale, "currentVersion").as_str()), ("1", "3"));

        let versions = anonymous
            .list_versions(pb::ListVersionsRequest { space: "s".into(), path: "/shared.md".into(), ..Default::default() })
            .await
            .unwrap()
            .into_inner();
        let newest = &versions.versions[0];
        assert_eq!((newest.operation.as_str(), newest.tool_call_id.as_str()), ("edit", "call-42"));
    }

    #[tokio::test]
    async fn read_many_shares_one_budget_and_reports_each_outcome() {
        let front = Front::start().await;
        front.space("s").await;
        let mut fs = front.fs().await;
        let big = "x".repeat(200_000);
        fs.write(write_text("s", "/big1.txt", &big)).await.unwrap();
        fs.write(write_text("s", "/big2.txt", &big)).await.unwrap();
        fs.write(write_text("s", "/small.txt", "small\n")).await.unwrap();
        let reads = ["/small.txt", "/missing.txt", "/big1.txt", "/big2.txt"]
            .iter()
            .map(|p| pb::ReadRequest { path: (*p).into(), max_chars: 131_072, ..Default::default() })
            .collect();
        let many = fs.read_many(pb::ReadManyRequest { space: "s".into(), reads, ..Default::default() }).await.unwrap().into_inner();
        assert!(many.incomplete);
        let outcomes: Vec<_> = many.results.iter().map(|r| r.outcome.clone().unwrap()).collect();
        let mut total = 0;
        for outcome in &outcomes {
            if let pb::read_many_result::Outcome::Read(read) = outcome {
                total += read.content.len();
            }
        }
        assert!(total <= 262_144, "{total}");
        match &outcomes[1] {
            pb::read_many_result::Outcome::Error(e) => {
                assert_eq!((e.reason.as_str(), e.code), ("NOT_FOUND", Code::NotFound as i32))
            }
            other => panic!("{other:?}"),
        }
        match &outcomes[3] {
            pb::read_many_result::Outcome::Read(r) => {
                assert!(r.truncated);
                assert_eq!(r.content.len(), 262_144 - 6 - 131_072);
                assert_eq!(r.next.map(|n| n.start_char), Some(r.content.len() as u64));
            }
            other => panic!("{other:?}"),
        }
        let none = fs.read_many(pb::ReadManyRequest { space: "s".into(), reads: vec![], ..Default::default() }).await.unwrap_err();
        assert_error(&none, Code::InvalidArgument, "INVALID_ARGUMENT");
    }

    #[tokio::test]
    async fn diffs_compare_versions_and_revisions() {
        let front = Front::start().await;
        front.space("s").await;
        let mut fs = front.fs().await;
        let first = fs.write(write_text("s", "/d/a.txt", "a\nb\nc\n")).await.unwrap().into_inner();
        fs.write(write_text("s", "/d/a.txt", "a\nB\nc\nd\n")).await.unwrap();
        fs.write(write_text("s", "/d/new.txt", "new\n")).await.unwrap();
        let diff = fs
            .diff(pb::DiffRequest { space: "s".into(), path: "/d/a.txt".into(), from_version: 1, ..Default::default() })
            .await
            .unwrap()
            .into_inner();
        assert_eq!((diff.lines_added, diff.lines_removed), (2, 1));
        assert!(diff.files[0].unified_diff.contains("-b\n+B\n"), "{}", diff.files[0].unified_diff);

        let tree = fs
            .diff(pb::DiffRequest {
                space: "s".into(),
                path: "/d".into(),
                from_revision: first.revision,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        let statuses: Vec<_> = tree.files.iter().map(|f| (f.path.as_str(), f.status.as_str())).collect();
        assert_eq!(statuses, [("/d/a.txt", "modified"), ("/d/new.txt", "added")]);
    }

    #[tokio::test]
    async fn uploads_and_downloads_round_trip_any_bytes() {
        let front = Front::start().await;
        front.space("s").await;
        let mut fs = front.fs().await;
        let data: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 256) as u8).collect();
        let hash = blake3::hash(&data).to_hex().to_string();
        let header =
            pb::UploadHeader { space: "s".into(), path: "/blob.bin".into(), hash: hash.clone(), ..Default::default() };
        let mut messages = vec![pb::UploadChunk { part: Some(pb::upload_chunk::Part::Header(header)) }];
        messages
            .extend(data.chunks(50_000).map(|c| pb::UploadChunk { part: Some(pb::upload_chunk::Part::Data(c.to_vec())) }));
        let uploaded = fs.upload(tokio_stream::iter(messages)).await.unwrap().into_inner();
        assert_eq!((uploaded.hash.as_str(), uploaded.size, uploaded.created), (hash.as_str(), 300_000, true));

        let mut stream = fs
            .download(pb::DownloadRequest { space: "s".into(), path: "/blob.bin".into(), ..Default::default() })
            .await
            .unwrap()
            .into_inner();
        let mut back = Vec::new();
        let mut header = None;
        while let Some(chunk) = stream.message().await.unwrap() {
            header = header.or(chunk.header);
            back.extend_from_slice(&chunk.data);
        }
        assert_eq!(back, data);
        assert_eq!(header.unwrap().hash, hash);

        // Text round-trips byte for byte, CRLF and BOM included.
        let text = "\u{feff}a\r\nb";
        fs.write(write_text("s", "/t.txt", text)).await.unwrap();
        let mut stream = fs
            .download(pb::DownloadRequest { space: "s".into(), path: "/t.txt".into(), ..Default::default() })
            .await
            .unwrap()
            .into_inner();
        let chunk = stream.message().await.unwrap().unwrap();
        assert_eq!(chunk.data, text.as_bytes());

        let bad_header =
            pb::UploadHeader { space: "s".into(), path: "/x.bin".into(), hash: hash.clone(), ..Default::default() };
        let wrong = vec![
            pb::UploadChunk { part: Some(pb::upload_chunk::Part::Header(bad_header)) },
            pb::UploadChunk { part: Some(pb::upload_chunk::Part::Data(b"other bytes".to_vec())) },
        ];
        let err = fs.upload(tokio_stream::iter(wrong)).await.unwrap_err();
        assert_error(&err, Code::InvalidArgument, "INVALID_ARGUMENT");
        assert_error(&fs.read(read("s", "/x.bin")).await.unwrap_err(), Code::NotFound, "NOT_FOUND");
    }

    #[tokio::test]
    async fn registered_functions_generate_files_and_respect_user_edits() {
        let front = Front::start().await;
        front.space("s").await;
        let mut admin = front.admin().await;
        let mut fs = front.fs().await;
        let spec = |name: &str, description: &str| pb::FunctionSpec {
            name: name.into(),
            description: description.into(),
            parameters_json_schema:
                r#"{"type":"object","properties":{"id":{"type":"string","description":"Order ID"}},"required":["id"]}"#
                    .into(),
            returns: "The order.".into(),
            examples: vec![],
        };
        let register = |functions: Vec<pb::FunctionSpec>| pb::RegisterFunctionsRequest {
            space: "s".into(),
            functions,
            ..Default::default()
        };
        let first = admin
            .register_functions(register(vec![spec("get_order", "Fetches an order."), spec("cancel_order", "Cancels.")]))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(first.written, ["/functions/cancel_order.md", "/functions/get_order.md", "/AGENT.md"]);
        let doc = fs.read(read("s", "/functions/get_order.md")).await.unwrap().into_inner().content;
        assert!(doc.contains("| `id` | string | yes | Order ID |"), "{doc}");
        let agent = fs.read(read("s", "/AGENT.md")).await.unwrap().into_inner().content;
        assert!(agent.contains("[`get_order`](/functions/get_order.md): Fetches an order."), "{agent}");

        // A principal edits one generated file: it is user-modified from now on.
        fs.edit(edit("/functions/get_order.md", Some(1), vec![replace("Fetches an order.", "Fetches one order by ID.")]))
            .await
            .unwrap();
        let listing = fs
            .list(pb::ListRequest { space: "s".into(), path: "/functions".into(), ..Default::default() })
            .await
            .unwrap()
            .into_inner();
        let flags: Vec<_> = listing.entries.iter().map(|e| (e.name.as_str(), e.system, e.user_modified)).collect();
        assert_eq!(flags, [("cancel_order.md", true, false), ("get_order.md", true, true)]);

        let again = admin
            .register_functions(register(vec![
                spec("get_order", "Fetches an order, v2."),
                spec("cancel_order", "Cancels, v2."),
            ]))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(again.written, ["/functions/cancel_order.md", "/AGENT.md"]);
        assert_eq!(again.skipped_user_modified, ["/functions/get_order.md"]);
        let kept = fs.read(read("s", "/functions/get_order.md")).await.unwrap().into_inner().content;
        assert!(kept.contains("Fetches one order by ID."));

        let restored = admin
            .restore_default(pb::RestoreDefaultRequest {
                space: "s".into(),
                path: "/functions/get_order.md".into(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        assert!(restored.changed);
        assert_eq!(restored.version, 3);
        let regenerated = fs.read(read("s", "/functions/get_order.md")).await.unwrap().into_inner().content;
        assert!(regenerated.contains("Fetches an order, v2."), "{regenerated}");
        let listing = fs
            .list(pb::ListRequest { space: "s".into(), path: "/functions".into(), ..Default::default() })
            .await
            .unwrap()
            .into_inner();
        assert!(listing.entries.iter().all(|e| !e.user_modified));

        let bad = admin.register_functions(register(vec![spec("../x", "bad")])).await.unwrap_err();
        assert_error(&bad, Code::InvalidArgument, "INVALID_ARGUMENT");
        assert_eq!(metadata(&bad, "field"), "functions[0].name");
        let not_generated = admin
            .restore_default(pb::RestoreDefaultRequest {
                space: "s".into(),
                path: "/scripts/x.sh".into(),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_error(&not_generated, Code::InvalidArgument, "INVALID_ARGUMENT");
    }

    #[tokio::test]
    async fn a_media_read_returns_the_bytes_and_their_mime_type() {
        let front = Front::start().await;
        front.space("s").await;
        let mut fs = front.fs().await;
        let png = [0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 0x0d, b'I', b'H', b'D', b'R', 0, 0xff];
        fs.write(write_bytes("s", "/img/a.png", &png)).await.unwrap();
        fs.write(write_bytes("s", "/blob.bin", &[0, 1, 2, 0xff])).await.unwrap();
        fs.write(write_text("s", "/a.md", "# a\n")).await.unwrap();
        let media = |path: &str| pb::ReadRequest { media: true, ..read("s", path) };

        // Without media, a binary file is refused as before.
        assert_error(&fs.read(read("s", "/img/a.png")).await.unwrap_err(), Code::FailedPrecondition, "BINARY_CONTENT");
        let image = fs.read(media("/img/a.png")).await.unwrap().into_inner();
        assert_eq!((image.mime_type.as_str(), image.data.as_slice()), ("image/png", png.as_slice()));
        assert_eq!((image.size, image.version, image.content.as_str()), (png.len() as u64, 1, ""));
        let unknown = fs.read(media("/blob.bin")).await.unwrap().into_inner();
        assert_eq!(unknown.mime_type, "application/octet-stream");
        // A text file reads as text, media or not.
        let text = fs.read(media("/a.md")).await.unwrap().into_inner();
        assert_eq!((text.content.as_str(), text.mime_type.as_str()), ("# a\n", "text/plain; charset=utf-8"));
        assert!(text.data.is_empty());

        // Over the limit: TOO_LARGE naming it.
        let mut big = vec![0u8; (8 << 20) + 1];
        big[..png.len()].copy_from_slice(&png);
        let upload = [pb::UploadChunk {
            part: Some(pb::upload_chunk::Part::Header(pb::UploadHeader {
                space: "s".into(),
                path: "/img/big.png".into(),
                hash: blake3::hash(&big).to_hex().to_string(),
                ..Default::default()
            })),
        }]
        .into_iter()
        .chain(big.chunks(1 << 20).map(|data| pb::UploadChunk { part: Some(pb::upload_chunk::Part::Data(data.to_vec())) }));
        fs.upload(tokio_stream::iter(upload.collect::<Vec<_>>())).await.unwrap();
        let error = fs.read(media("/img/big.png")).await.unwrap_err();
        assert_error(&error, Code::InvalidArgument, "TOO_LARGE");
        assert_eq!(metadata(&error, "limit"), (8u64 << 20).to_string());

        // Listings, finds and versions carry the type detected at write time
        // (the big image through a staged upload), and so do a copy and a
        // trip through the trash.
        let copy = pb::CopyAction { from: "/img/a.png".into(), to_folder: "/".into(), name: "copy.png".into() };
        fs.batch(apply_batch("s", vec![Action::Copy(copy)], "c")).await.unwrap();
        fs.batch(apply_batch("s", vec![Action::Trash(pb::TrashAction { path: "/img".into() })], "t")).await.unwrap();
        let restore = pb::RestoreRequest { space: "s".into(), reference: "/img".into(), ..Default::default() };
        front.admin().await.restore(restore).await.unwrap();
        let list = pb::ListRequest { space: "s".into(), recursive: true, ..Default::default() };
        let entries = fs.list(list).await.unwrap().into_inner().entries;
        let types: Vec<_> = entries
            .iter()
            .filter(|e| !e.system)
            .map(|e| (e.path.as_str(), e.mime_type.as_str()))
            .collect();
        assert_eq!(
            types,
            [
                ("/a.md", "text/plain; charset=utf-8"),
                ("/blob.bin", "application/octet-stream"),
                ("/copy.png", "image/png"),
                ("/img", ""),
                ("/img/a.png", "image/png"),
                ("/img/big.png", "image/png"),
            ]
        );
        let find = pb::FindRequest { space: "s".into(), pattern: "*.png".into(), ..Default::default() };
        let matches = fs.find(find).await.unwrap().into_inner().matches;
        assert!(matches.len() == 3 && matches.iter().all(|m| m.mime_type == "image/png"), "{matches:?}");
        let versions = pb::ListVersionsRequest { space: "s".into(), path: "/img/a.png".into(), ..Default::default() };
        let versions = fs.list_versions(versions).await.unwrap().into_inner().versions;
        assert_eq!(versions[0].mime_type, "image/png");

        // ReadMany reads text only.
        let many = pb::ReadManyRequest { space: "s".into(), reads: vec![media("/img/a.png")], ..Default::default() };
        let result = fs.read_many(many).await.unwrap().into_inner();
        match &result.results[0].outcome {
            Some(pb::read_many_result::Outcome::Error(error)) => assert_eq!(error.reason, "INVALID_ARGUMENT"),
            other => panic!("{other:?}"),
        }
    }
}
