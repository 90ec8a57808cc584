//! A catalogue of hostile inputs, table-driven, through real front and
//! worker processes: each must get its exact code and reason, and the
//! process must stay healthy throughout.

// Tests may unwrap: a panic is the failure report.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use agentvfs_proto::v1 as pb;
use agentvfs_proto::v1::file_system_client::FileSystemClient;
use support::{Stack, read, write_bytes, write_text};
use tonic::transport::Channel;
use tonic::{Code, Status};

type Call = Pin<Box<dyn Future<Output = Result<(), Status>> + Send>>;

struct Case {
    name: String,
    call: Call,
    code: Code,
    reason: &'static str,
}

fn case(
    name: impl Into<String>,
    call: impl Future<Output = Result<(), Status>> + Send + 'static,
    code: Code,
    reason: &'static str,
) -> Case {
    Case { name: name.into(), call: Box::pin(call), code, reason }
}

const BAD_PATH: (Code, &str) = (Code::InvalidArgument, "INVALID_PATH");
const TRAVERSAL: (Code, &str) = (Code::InvalidArgument, "PATH_TRAVERSAL");
const BAD_ARG: (Code, &str) = (Code::InvalidArgument, "INVALID_ARGUMENT");
const BAD_PATTERN: (Code, &str) = (Code::InvalidArgument, "INVALID_PATTERN");
const NOT_FOUND: (Code, &str) = (Code::NotFound, "NOT_FOUND");
const CURSOR: (Code, &str) = (Code::InvalidArgument, "CURSOR_INVALID");
const TOO_LARGE: (Code, &str) = (Code::InvalidArgument, "TOO_LARGE");

fn reads(fs: &FileSystemClient<Channel>, inputs: &[(&str, (Code, &'static str))]) -> Vec<Case> {
    inputs
        .iter()
        .map(|(path, (code, reason))| {
            let (mut fs, path) = (fs.clone(), path.to_string());
            case(format!("read {path:?}"), async move { fs.read(read("s", &path)).await.map(drop) }, *code, reason)
        })
        .collect()
}

fn greps(fs: &FileSystemClient<Channel>, inputs: &[(String, (Code, &'static str))]) -> Vec<Case> {
    inputs
        .iter()
        .map(|(pattern, (code, reason))| {
            let (mut fs, pattern) = (fs.clone(), pattern.clone());
            let name = format!("grep {:?}", pattern.chars().take(40).collect::<String>());
            let request = pb::GrepRequest { space: "s".into(), pattern, ..Default::default() };
            case(name, async move { fs.grep(request).await.map(drop) }, *code, reason)
        })
        .collect()
}

fn finds(fs: &FileSystemClient<Channel>, inputs: &[(String, (Code, &'static str))]) -> Vec<Case> {
    inputs
        .iter()
        .map(|(pattern, (code, reason))| {
            let (mut fs, pattern) = (fs.clone(), pattern.clone());
            let name = format!("find {:?}", pattern.chars().take(40).collect::<String>());
            let request = pb::FindRequest { space: "s".into(), pattern, ..Default::default() };
            case(name, async move { fs.find(request).await.map(drop) }, *code, reason)
        })
        .collect()
}

#[tokio::test]
async fn hostile_inputs_get_exact_errors_and_the_server_stays_healthy() {
    let stack = Stack::start(&[]).await;
    let space = stack.front.space("s").await;
    let mut fs = stack.front.fs().await;
    fs.write(write_text("s", "/doc.md", "line one\nline 😀 two\n")).await.unwrap();
    fs.write(write_bytes("s", "/bin.dat", b"abc\0def")).await.unwrap();
    fs.write(write_bytes("s", "/utf32.txt", b"\xff\xfe\0\0c\0\0\0")).await.unwrap();
    let node = fs
        .resolve(pb::ResolveRequest { space: "s".into(), reference: "/doc.md".into(), ..Default::default() })
        .await
        .unwrap()
        .into_inner()
        .node_id;
    let mut cases = Vec::new();

    // Paths: traversal in every spelling, control characters, sizes.
    let long_segment = format!("/{}", "a".repeat(256));
    let long_path = format!("/{}", vec!["b".repeat(200); 21].join("/"));
    let deep = "/d".repeat(65);
    let mut paths: Vec<(&str, (Code, &'static str))> = vec![
        ("..", TRAVERSAL),
        ("/..", TRAVERSAL),
        ("../etc/passwd", TRAVERSAL),
        ("/a/..", TRAVERSAL),
        ("/a/../b", TRAVERSAL),
        ("/a/b/../../c", TRAVERSAL),
        ("./..", TRAVERSAL),
        ("/./../x", TRAVERSAL),
        ("a//..//b", TRAVERSAL),
        ("/a/./../", TRAVERSAL),
        ("/a\0b", BAD_PATH),
        ("/\u{1}", BAD_PATH),
        ("/\u{1f}", BAD_PATH),
        ("/\u{7f}", BAD_PATH),
        ("/a\tb", BAD_PATH),
        ("/a\nb", BAD_PATH),
        ("/a\rb", BAD_PATH),
        ("/\u{85}", BAD_PATH),
        ("/\u{9f}", BAD_PATH),
        ("/a\\b", BAD_PATH),
        ("\\..\\x", BAD_PATH),
        ("..\\x", BAD_PATH),
        ("/%2e%2e/x", NOT_FOUND),
        ("/...", NOT_FOUND),
        ("/．．", NOT_FOUND),
        ("/missing", NOT_FOUND),
        ("/doc.md/child", NOT_FOUND),
        ("/\u{202e}cod.md", NOT_FOUND),
        ("/\u{200b}", NOT_FOUND),
        ("agentvfs:item:", BAD_ARG),
        ("agentvfs:item:nd_", BAD_ARG),
        ("agentvfs:item:nd_zzzzzzzzzzzzzzzzzzzzzzzzzz", NOT_FOUND),
        ("agentvfs:item:nd_!!!!!!!!!!!!!!!!!!!!!!!!!!", BAD_ARG),
        ("agentvfs:space:nope", BAD_ARG),
        ("agentvfs:other:x", BAD_ARG),
        ("agentvfs://", BAD_ARG),
        ("agentvfs://nope/x", BAD_ARG),
        ("agentvfs:item:nd_01ARZ3NDEKTSV4RRFFQ69G5FAV", NOT_FOUND),
    ];
    paths.push((&long_segment, BAD_PATH));
    paths.push((&long_path, BAD_PATH));
    paths.push((&deep, BAD_PATH));
    cases.extend(reads(&fs, &paths));
    for (suffix, expected) in [
        ("x/%2e%2e/y", TRAVERSAL),
        ("%2E%2E", TRAVERSAL),
        ("a%2fb", TRAVERSAL),
        ("a%2Fb", TRAVERSAL),
        ("a%5cb", TRAVERSAL),
        ("a%5Cb", TRAVERSAL),
        ("%ff%fe", BAD_ARG),
        ("a/../b", TRAVERSAL),
        ("a%00b", BAD_PATH),
        ("%0a", BAD_PATH),
        ("doc.md", (Code::Ok, "")),
        ("%64oc.md", (Code::Ok, "")),
    ] {
        let (mut fs, reference) = (fs.clone(), format!("agentvfs://{space}/{suffix}"));
        cases.push(case(
            format!("read {reference:?}"),
            async move { fs.read(read("", &reference)).await.map(drop) },
            expected.0,
            expected.1,
        ));
    }

    // Text operations on files that are not text; offsets inside surrogate pairs.
    for (path, reason) in [("/bin.dat", "BINARY_CONTENT"), ("/utf32.txt", "BINARY_CONTENT")] {
        let mut f = fs.clone();
        cases.push(case(
            format!("read {path}"),
            async move { f.read(read("s", path)).await.map(drop) },
            Code::FailedPrecondition,
            reason,
        ));
        let mut f = fs.clone();
        let edit = pb::EditRequest {
            space: "s".into(),
            path: path.into(),
            base_version: Some(1),
            edits: vec![pb::TextEdit { kind: Some(pb::text_edit::Kind::Append(pb::AppendEdit { text: "x".into() })) }],
            ..Default::default()
        };
        cases.push(case(
            format!("edit {path}"),
            async move { f.edit(edit).await.map(drop) },
            Code::FailedPrecondition,
            reason,
        ));
    }
    for (offset, start_char, max_chars, expected) in [
        (2u64, 6u64, 0u64, BAD_ARG),
        (2, 99, 0, BAD_ARG),
        (99, 0, 0, BAD_ARG),
        (u64::MAX, 0, 0, BAD_ARG),
        (1, 0, 1, BAD_ARG),
        (1, 0, 131_073, BAD_ARG),
        (1, 0, u64::MAX, BAD_ARG),
        (1, u64::MAX, 0, BAD_ARG),
        (2, 5, 2, (Code::Ok, "")),
        (1, 0, 2, (Code::Ok, "")),
    ] {
        let mut f = fs.clone();
        let request = pb::ReadRequest { offset, start_char, max_chars, ..read("s", "/doc.md") };
        cases.push(case(
            format!("read offset {offset} char {start_char} max {max_chars}"),
            async move { f.read(request).await.map(drop) },
            expected.0,
            expected.1,
        ));
    }

    // Globs and regexes, including bombs.
    let globs: Vec<(String, (Code, &'static str))> = vec![
        ("[".into(), BAD_PATTERN),
        ("{a,b".into(), BAD_PATTERN),
        ("[z-a]".into(), BAD_PATTERN),
        ("a[".into(), BAD_PATTERN),
        ("x".repeat(2000), TOO_LARGE),
        ("{".repeat(500), BAD_PATTERN),
        ("**/*.md".into(), (Code::Ok, "")),
        ("*".repeat(1000), (Code::Ok, "")),
        ("{a,{b,{c,{d}}}}".into(), (Code::Ok, "")),
        ("[!a]*".into(), (Code::Ok, "")),
    ];
    cases.extend(finds(&fs, &globs));
    let regexes: Vec<(String, (Code, &'static str))> = vec![
        ("(".into(), BAD_PATTERN),
        (")".into(), BAD_PATTERN),
        ("[".into(), BAD_PATTERN),
        ("a{2,1}".into(), BAD_PATTERN),
        ("\\".into(), BAD_PATTERN),
        ("(?P<n>".into(), BAD_PATTERN),
        ("a**".into(), (Code::Ok, "")),
        ("*".into(), BAD_PATTERN),
        ("\\p{NotAClass}".into(), BAD_PATTERN),
        ("(?z)".into(), BAD_PATTERN),
        ("a\0b".into(), BAD_PATTERN),
        ("".into(), BAD_PATTERN),
        (format!("{}a{}", "(".repeat(200), ")".repeat(200)), BAD_PATTERN),
        ("a".repeat(5000), TOO_LARGE),
        ("(\\w{100}){100}{100}".into(), BAD_PATTERN),
        ("a{1000}{1000}".into(), BAD_PATTERN),
        ("[\\w\\W]{5000}{500}".into(), BAD_PATTERN),
        ("(a*)*$".into(), (Code::Ok, "")),
        ("(a|a)*b".into(), (Code::Ok, "")),
        ("(?s).*".into(), (Code::Ok, "")),
        ("\\bline\\b".into(), (Code::Ok, "")),
        ("😀".into(), (Code::Ok, "")),
    ];
    cases.extend(greps(&fs, &regexes));
    for (name, request, expected) in [
        ("grep context 101", pb::GrepRequest { context: 101, ..Default::default() }, BAD_ARG),
        ("grep head_limit 2001", pb::GrepRequest { head_limit: Some(2001), ..Default::default() }, BAD_ARG),
        ("grep unknown type", pb::GrepRequest { r#type: vec!["cobol-ish".into()], ..Default::default() }, BAD_ARG),
        ("grep output mode 9", pb::GrepRequest { output_mode: 9, ..Default::default() }, BAD_ARG),
        ("grep bogus token", pb::GrepRequest { page_token: "garbage".into(), ..Default::default() }, CURSOR),
        ("grep root is a file", pb::GrepRequest { path: "/doc.md".into(), ..Default::default() }, (Code::Ok, "")),
    ] {
        let mut f = fs.clone();
        let request = pb::GrepRequest { space: "s".into(), pattern: "line".into(), ..request };
        cases.push(case(name, async move { f.grep(request).await.map(drop) }, expected.0, expected.1));
    }

    // Pages and cursors.
    for (size, token, expected) in [
        (201u32, String::new(), BAD_ARG),
        (u32::MAX, String::new(), BAD_ARG),
        (0, String::new(), (Code::Ok, "")),
        (200, String::new(), (Code::Ok, "")),
        (1, "!!!".to_owned(), CURSOR),
        (1, "AAAA".to_owned(), CURSOR),
        (1, "A".repeat(10_000), CURSOR),
        (1, "a".repeat(40), CURSOR),
        (1, "ZmluZA".to_owned(), CURSOR),
        (1, "\u{1f600}".to_owned(), CURSOR),
    ] {
        let mut f = fs.clone();
        let request =
            pb::ListRequest { space: "s".into(), page_size: size, page_token: token.clone(), ..Default::default() };
        cases.push(case(
            format!("list size {size} token {}", token.len()),
            async move { f.list(request).await.map(drop) },
            expected.0,
            expected.1,
        ));
        let mut f = fs.clone();
        let request =
            pb::FindRequest { space: "s".into(), page_size: size, page_token: token.clone(), ..Default::default() };
        cases.push(case(
            format!("find size {size} token {}", token.len()),
            async move { f.find(request).await.map(drop) },
            expected.0,
            expected.1,
        ));
    }

    // Writes: sizes, modes, versions.
    let too_big = "x".repeat((5 << 20) + 1);
    for (name, request, expected) in [
        (
            "write 5 MiB + 1",
            pb::WriteRequest { body: Some(pb::write_request::Body::Content(too_big)), ..write_text("s", "/big", "") },
            TOO_LARGE,
        ),
        ("write no body", pb::WriteRequest { body: None, ..write_text("s", "/x", "") }, BAD_ARG),
        ("write mode 7", pb::WriteRequest { mode: 7, ..write_text("s", "/x", "x") }, BAD_ARG),
        ("write to a directory", write_text("s", "/", "x"), (Code::FailedPrecondition, "NOT_A_FILE")),
        ("write below a file", write_text("s", "/doc.md/x", "x"), (Code::FailedPrecondition, "NOT_A_DIRECTORY")),
        (
            "write stale version",
            pb::WriteRequest { expected_version: Some(9), ..write_text("s", "/doc.md", "x") },
            (Code::FailedPrecondition, "VERSION_CONFLICT"),
        ),
        (
            "write create over existing",
            pb::WriteRequest { expected_version: Some(0), ..write_text("s", "/doc.md", "x") },
            (Code::FailedPrecondition, "VERSION_CONFLICT"),
        ),
        (
            "write long key",
            pb::WriteRequest { idempotency_key: "k".repeat(300), ..write_text("s", "/k", "x") },
            BAD_ARG,
        ),
        ("write no space", write_text("", "/x", "x"), BAD_ARG),
        ("write missing space", write_text("nowhere", "/x", "x"), NOT_FOUND),
    ] {
        let mut f = fs.clone();
        cases.push(case(name, async move { f.write(request).await.map(drop) }, expected.0, expected.1));
    }

    // Edits.
    let replace = |old: &str, new: &str| pb::TextEdit {
        kind: Some(pb::text_edit::Kind::Replace(pb::ReplaceEdit {
            old_text: old.into(),
            new_text: new.into(),
            ..Default::default()
        })),
    };
    let lines = |start: u64, end: u64| pb::TextEdit {
        kind: Some(pb::text_edit::Kind::Lines(pb::LinesEdit {
            start_line: start,
            end_line: end,
            old_text: String::new(),
            new_text: String::new(),
        })),
    };
    for (name, edits, expected) in [
        ("edit empty old_text", vec![replace("", "x")], BAD_ARG),
        ("edit noop", vec![replace("line", "line")], (Code::FailedPrecondition, "EDIT_NOOP")),
        ("edit no match", vec![replace("absent", "x")], (Code::FailedPrecondition, "EDIT_NO_MATCH")),
        ("edit ambiguous", vec![replace("line", "row")], (Code::FailedPrecondition, "EDIT_AMBIGUOUS_MATCH")),
        ("edit lines 0", vec![lines(0, 1)], BAD_ARG),
        ("edit lines reversed", vec![lines(2, 1)], BAD_ARG),
        ("edit lines past end", vec![lines(1, 99)], BAD_ARG),
        ("edit no edits", vec![], BAD_ARG),
        ("edit 101 edits", vec![replace("a", "b"); 101], BAD_ARG),
        ("edit empty kind", vec![pb::TextEdit { kind: None }], BAD_ARG),
    ] {
        let mut f = fs.clone();
        let request = pb::EditRequest {
            space: "s".into(),
            path: "/doc.md".into(),
            base_version: Some(1),
            edits,
            ..Default::default()
        };
        cases.push(case(name, async move { f.edit(request).await.map(drop) }, expected.0, expected.1));
    }
    let mut f = fs.clone();
    let zero = pb::TextEdit {
        kind: Some(pb::text_edit::Kind::Replace(pb::ReplaceEdit {
            old_text: "one".into(),
            new_text: "1".into(),
            expected_matches: Some(0),
            replace_all: false,
        })),
    };
    let request = pb::EditRequest {
        space: "s".into(),
        path: "/doc.md".into(),
        base_version: Some(1),
        edits: vec![zero],
        ..Default::default()
    };
    cases.push(case("edit expected_matches 0", async move { f.edit(request).await.map(drop) }, BAD_ARG.0, BAD_ARG.1));

    // Batches.
    let mkdir =
        |p: &str| pb::BatchAction { action: Some(pb::batch_action::Action::Mkdir(pb::MkdirAction { path: p.into() })) };
    for (name, actions, apply, key, expected) in [
        ("batch empty", vec![], true, "k1", BAD_ARG),
        ("batch 21 actions", (0..21).map(|i| mkdir(&format!("/m{i}"))).collect(), true, "k2", BAD_ARG),
        ("batch apply without key", vec![mkdir("/m")], true, "", BAD_ARG),
        ("batch action without kind", vec![pb::BatchAction { action: None }], false, "", (Code::Ok, "")),
        ("batch preview", vec![mkdir("/m")], false, "", (Code::Ok, "")),
    ] {
        let mut f = fs.clone();
        let request =
            pb::BatchRequest { space: "s".into(), actions, apply, idempotency_key: key.into(), ..Default::default() };
        cases.push(case(name, async move { f.batch(request).await.map(drop) }, expected.0, expected.1));
    }
    let mut f = fs.clone();
    let huge = pb::BatchAction {
        action: Some(pb::batch_action::Action::Create(pb::CreateAction {
            path: "/huge".into(),
            content: "z".repeat(3 << 20),
        })),
    };
    let request = pb::BatchRequest {
        space: "s".into(),
        actions: vec![huge],
        apply: true,
        idempotency_key: "k3".into(),
        ..Default::default()
    };
    cases.push(case("batch over 2 MiB", async move { f.batch(request).await.map(drop) }, TOO_LARGE.0, TOO_LARGE.1));

    // Space names.
    for (name, expected) in [
        ("", BAD_ARG),
        ("a/b", BAD_ARG),
        ("sp_looks_like_an_id", BAD_ARG),
        (" lead", BAD_ARG),
        ("trail ", BAD_ARG),
        ("tab\tname", BAD_ARG),
        ("nul\0name", BAD_ARG),
        ("x".repeat(129).leak() as &str, BAD_ARG),
        ("s", (Code::AlreadyExists, "ALREADY_EXISTS")),
        ("ünïcødé 😀", (Code::Ok, "")),
    ] {
        let mut admin = stack.front.admin().await;
        let request = pb::CreateSpaceRequest { name: name.to_owned(), ..Default::default() };
        cases.push(case(
            format!("create space {:?}", name.chars().take(20).collect::<String>()),
            async move { admin.create_space(request).await.map(drop) },
            expected.0,
            expected.1,
        ));
    }

    // Metadata.
    for (header, value, expected) in [
        ("x-agentvfs-mode", "admin", BAD_ARG),
        ("x-agentvfs-mode", "READ-ONLY", BAD_ARG),
        ("x-agentvfs-session", "s".repeat(300).leak() as &str, BAD_ARG),
        ("x-agentvfs-tool-call", "t".repeat(300).leak() as &str, BAD_ARG),
        ("authorization", "Bearer unknown-token-value", (Code::Unauthenticated, "UNAUTHENTICATED")),
        ("authorization", "Basic dXNlcjpwYXNz", (Code::Unauthenticated, "UNAUTHENTICATED")),
        ("x-agentvfs-mode", "edit", (Code::Ok, "")),
    ] {
        let mut f = fs.clone();
        let mut request = tonic::Request::new(read("s", &format!("agentvfs:item:{node}")));
        request.metadata_mut().insert(header, value.parse().unwrap());
        cases.push(case(
            format!("header {header}: {}", &value[..value.len().min(20)]),
            async move { f.read(request).await.map(drop) },
            expected.0,
            expected.1,
        ));
    }

    assert!(cases.len() >= 150, "the catalogue has {} cases", cases.len());
    let mut failures = Vec::new();
    for Case { name, call, code, reason } in cases {
        let outcome = tokio::time::timeout(std::time::Duration::from_secs(30), call).await;
        let result = match outcome {
            Ok(result) => result,
            Err(_) => {
                failures.push(format!("{name}: no answer within 30 s"));
                continue;
            }
        };
        match (result, code) {
            (Ok(()), Code::Ok) => {}
            (Ok(()), _) => failures.push(format!("{name}: succeeded, expected {code:?} {reason}")),
            (Err(status), Code::Ok) => {
                failures.push(format!("{name}: failed with {:?} {}", status.code(), status.message()))
            }
            (Err(status), _) => {
                let well_formed = !support::metadata(&status, "nextAction").is_empty();
                if status.code() != code || support::reason(&status) != reason || !well_formed {
                    failures.push(format!(
                        "{name}: got {:?} {:?} ({}), expected {code:?} {reason}",
                        status.code(),
                        support::reason(&status),
                        status.message()
                    ));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{} hostile inputs were mishandled:\n{}", failures.len(), failures.join("\n"));
    // Still healthy, and nothing was lost.
    assert_eq!(fs.read(read("s", "/doc.md")).await.unwrap().into_inner().content, "line one\nline 😀 two\n");
}

#[tokio::test]
async fn messages_over_the_size_limit_get_a_clear_error() {
    let stack = Stack::start(&[]).await;
    stack.front.space("s").await;
    let mut fs = stack.front.fs().await.max_encoding_message_size(64 << 20);
    let status = fs.write(write_bytes("s", "/huge.bin", &vec![7u8; 9 << 20])).await.unwrap_err();
    assert_eq!((status.code(), support::reason(&status).as_str()), (Code::InvalidArgument, "TOO_LARGE"), "{status:?}");
    assert_eq!(support::metadata(&status, "limit"), (8 << 20).to_string());
    fs.write(write_text("s", "/small.txt", "fine")).await.unwrap();
}

/// One hostile HTTP request: the bytes sent, and the status and `ErrorInfo`
/// reason it must get (`None`: refused by the HTTP layer itself, with no
/// JSON body).
struct HttpCase {
    name: &'static str,
    request: Vec<u8>,
    status: u16,
    reason: Option<&'static str>,
}

/// A request with `headers` and `body` (`content-length` added).
fn request(method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Vec<u8> {
    let mut text = format!("{method} {path} HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n");
    for (name, value) in headers {
        text.push_str(&format!("{name}: {value}\r\n"));
    }
    text.push_str(&format!("content-length: {}\r\n\r\n{body}", body.len()));
    text.into_bytes()
}

/// `POST` of `body` as JSON to `route`.
fn json(route: &str, body: &str) -> Vec<u8> {
    request("POST", route, &[("content-type", "application/json")], body)
}

fn http_cases(max_body: usize) -> Vec<HttpCase> {
    let c = |name, request, status, reason| HttpCase { name, request, status, reason };
    let read = |body: &str| json("/api/v1/fs/read", body);
    let with = |headers: &[(&str, &str)]| {
        let mut all = vec![("content-type", "application/json")];
        all.extend_from_slice(headers);
        request("POST", "/api/v1/fs/read", &all, r#"{"space":"s","path":"/doc.md"}"#)
    };
    let (bad, not_found) = (Some("INVALID_ARGUMENT"), Some("NOT_FOUND"));
    let deep = format!(r#"{{"space":"s","path":{}1{}}}"#, "[".repeat(10_000), "]".repeat(10_000));
    let oversized = format!(r#"{{"space":"s","path":"/{}"}}"#, "a".repeat(max_body));
    let mut chunked_oversized = b"POST /api/v1/fs/read HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\
        content-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n"
        .to_vec();
    for _ in 0..(max_body >> 16) + 2 {
        chunked_oversized.extend_from_slice(format!("10000\r\n{}\r\n", "a".repeat(1 << 16)).as_bytes());
    }
    chunked_oversized.extend_from_slice(b"0\r\n\r\n");
    let huge_header = "x".repeat(1 << 20);
    let many_headers: Vec<(String, String)> = (0..200).map(|i| (format!("x-h{i}"), "v".to_owned())).collect();
    let many_headers: Vec<(&str, &str)> = many_headers.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
    let long_session = "s".repeat(1000);
    let write = r#"{"space":"s","path":"/w","content":"x"}"#;
    let mut binary_key =
        request("POST", "/api/v1/fs/write", &[("content-type", "application/json"), ("idempotency-key", "k@")], write);
    let at = binary_key.iter().position(|&byte| byte == b'@').unwrap();
    binary_key[at] = 0xff;
    vec![
        // Routes.
        c("GET of a unary route", request("GET", "/api/v1/fs/read", &[], ""), 405, bad),
        c("an unknown RPC", json("/api/v1/fs/nope", "{}"), 404, not_found),
        c("an unknown service", json("/api/v1/worker/fetch", "{}"), 404, not_found),
        c("the gRPC path over HTTP/1.1", json("/agentvfs.v1.FileSystem/Read", "{}"), 404, not_found),
        c("a streaming RPC as unary", json("/api/v1/fs/download", "{}"), 404, not_found),
        c("an upload as unary", json("/api/v1/fs/upload", "{}"), 404, not_found),
        c("dot segments in the route", json("/api/v1/fs/../admin/create_space", r#"{"name":"x"}"#), 404, not_found),
        c("a trailing slash", json("/api/v1/fs/read/", "{}"), 404, not_found),
        c("an RPC in the wrong case", json("/api/v1/fs/READ", "{}"), 404, not_found),
        c("a percent-encoded RPC", json("/api/v1/fs/%72ead", "{}"), 404, not_found),
        c("a doubled slash", json("//api/v1/fs/read", "{}"), 404, not_found),
        c("an empty RPC name", json("/api/v1/admin/", "{}"), 404, not_found),
        c("POST of the watch stream", json("/api/v1/fs/watch", "{}"), 405, bad),
        c("DELETE of content", request("DELETE", "/api/v1/fs/content?space=s&path=/doc.md", &[], ""), 405, bad),
        c("an unknown method", request("BREW", "/api/v1/fs/read", &[], ""), 405, bad),
        // Bodies.
        c("malformed JSON", read("{"), 400, bad),
        c("a JSON array", read("[]"), 400, bad),
        c("a JSON string", read(r#""read""#), 400, bad),
        c("an unknown field", read(r#"{"space":"s","path":"/doc.md","sudo":true}"#), 400, bad),
        c("a wrong type", read(r#"{"space":"s","path":5}"#), 400, bad),
        c("a negative unsigned", read(r#"{"space":"s","path":"/doc.md","offset":-1}"#), 400, bad),
        c("a number too large", read(r#"{"space":"s","path":"/doc.md","offset":1e400}"#), 400, bad),
        c("a 64-bit number that is not one", read(r#"{"space":"s","path":"/doc.md","offset":"ten"}"#), 400, bad),
        c("a lone surrogate escape", read(r#"{"space":"s","path":"/\ud800"}"#), 400, bad),
        c("a duplicate field", read(r#"{"space":"s","path":"/doc.md","path":"/x"}"#), 400, bad),
        c("an unknown enum name", json("/api/v1/fs/write", r#"{"space":"s","path":"/w","mode":"WRITE_MODE_EVIL"}"#), 400, bad),
        c("invalid base64 bytes", json("/api/v1/fs/write", r#"{"space":"s","path":"/w","data":"%%%"}"#), 400, bad),
        c("nesting 10,000 deep", read(&deep), 400, bad),
        c("trailing garbage", read(r#"{"space":"s","path":"/doc.md"} {}"#), 400, bad),
        c("invalid UTF-8", [json("/api/v1/fs/read", "").as_slice(), &[0xff, 0xfe]].concat(), 400, None),
        c("a body over the limit", read(&oversized), 413, Some("TOO_LARGE")),
        c("a chunked body over the limit", chunked_oversized, 413, Some("TOO_LARGE")),
        c("text/plain", request("POST", "/api/v1/fs/read", &[("content-type", "text/plain")], "{}"), 415, bad),
        c("a form", request("POST", "/api/v1/fs/read", &[("content-type", "application/x-www-form-urlencoded")], "a=b"), 415, bad),
        c("a path escaping the root", read(r#"{"space":"s","path":"/../etc/passwd"}"#), 400, Some("PATH_TRAVERSAL")),
        c("a NUL in a path", read(r#"{"space":"s","path":"/a\u0000b"}"#), 400, Some("INVALID_PATH")),
        // Headers.
        c("a 1 MiB header", with(&[("x-big", &huge_header)]), 431, None),
        c("200 headers", with(&many_headers), 431, None),
        c("a timeout that is not a number", with(&[("x-request-timeout", "soon")]), 400, bad),
        c("a negative timeout", with(&[("x-request-timeout", "-1")]), 400, bad),
        c("an unknown mode", with(&[("x-agentvfs-mode", "god")]), 400, bad),
        c("a 1000-character session", with(&[("x-agentvfs-session", &long_session)]), 400, bad),
        c("a token that is not one", with(&[("authorization", "Bearer nope")]), 401, Some("UNAUTHENTICATED")),
        c("a scheme that is not Bearer", with(&[("authorization", "Basic YTpi")]), 401, Some("UNAUTHENTICATED")),
        c("a binary idempotency key", binary_key, 400, bad),
        // Streams.
        c("a watch revision that is not one", request("GET", "/api/v1/fs/watch?space=s&from_revision=abc", &[], ""), 400, bad),
        c("an unknown watch parameter", request("GET", "/api/v1/fs/watch?space=s&evil=1", &[], ""), 400, bad),
        c("a Last-Event-ID not of this stream", request("GET", "/api/v1/fs/watch?space=s", &[("last-event-id", "x/y")], ""), 400, bad),
        c("a negative content version", request("GET", "/api/v1/fs/content?space=s&path=/doc.md&version=-1", &[], ""), 400, bad),
        c("an unknown content parameter", request("GET", "/api/v1/fs/content?space=s&path=/doc.md&x=1", &[], ""), 400, bad),
        c("If-Match that is no version", request("PUT", "/api/v1/fs/content?space=s&path=/w", &[("if-match", "\"abc\"")], "x"), 400, bad),
        c("If-None-Match other than *", request("PUT", "/api/v1/fs/content?space=s&path=/w", &[("if-none-match", "\"1\"")], "x"), 400, bad),
        c("an upload escaping the root", request("PUT", "/api/v1/fs/content?space=s&path=/../w", &[], "x"), 400, Some("PATH_TRAVERSAL")),
        c("an upload whose hash lies", request("PUT", "/api/v1/fs/content?space=s&path=/w", &[("x-agentvfs-hash", &"0".repeat(64))], "x"), 400, bad),
        // The HTTP layer.
        c("both Content-Length and chunked", b"POST /api/v1/fs/read HTTP/1.1\r\nhost: localhost\r\ncontent-length: 3\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n".to_vec(), 400, None),
        c("a malformed chunk", b"POST /api/v1/fs/read HTTP/1.1\r\nhost: localhost\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n".to_vec(), 400, bad),
        c("a NUL in the request line", b"POST /api/v1/fs/\0read HTTP/1.1\r\nhost: localhost\r\n\r\n".to_vec(), 400, None),
        c("not HTTP at all", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n".to_vec(), 400, None),
        // MCP.
        c("MCP from a foreign origin", request("POST", "/mcp", &[("content-type", "application/json"), ("accept", "application/json, text/event-stream"), ("origin", "https://evil.example")], "{}"), 403, None),
        c("MCP that is not JSON-RPC", request("POST", "/mcp", &[("content-type", "application/json"), ("accept", "application/json, text/event-stream")], "[1,2"), 415, None),
    ]
}

#[tokio::test]
async fn hostile_http_requests_get_clear_4xx_errors_and_the_front_stays_healthy() {
    let (front, http, _temp) = support::front_with_http(&[]).await;
    front.space("s").await;
    let mut fs = front.fs().await;
    fs.write(write_text("s", "/doc.md", "line one\n")).await.unwrap();

    // The message limit is 8 MiB; JSON bodies may take twice that.
    let cases = http_cases(16 << 20);
    assert!(cases.len() >= 40, "only {} cases", cases.len());
    let addr = http.clone();
    let failures = tokio::task::spawn_blocking(move || {
        let mut failures = Vec::new();
        for case in cases {
            let Some((status, _, body)) = support::http::raw(&addr, &case.request, Duration::from_secs(20)) else {
                failures.push(format!("{}: the connection closed without a reply", case.name));
                continue;
            };
            let json: Option<serde_json::Value> = serde_json::from_str(&body).ok();
            let reason = json.as_ref().and_then(|json| {
                let details = json["error"]["details"].as_array()?;
                let info = details.iter().find(|d| d["@type"] == "type.googleapis.com/google.rpc.ErrorInfo")?;
                info["reason"].as_str().map(str::to_owned)
            });
            let message = json.as_ref().and_then(|json| json["error"]["message"].as_str()).unwrap_or("");
            let clear = case.reason.is_none() || message.len() > 10;
            if status != case.status || (case.reason.is_some() && reason.as_deref() != case.reason) || !clear {
                let body: String = body.chars().take(300).collect();
                failures.push(format!(
                    "{}: got {status} {reason:?}, expected {} {:?}: {body}",
                    case.name, case.status, case.reason
                ));
            }
        }
        failures
    })
    .await
    .unwrap();
    assert!(failures.is_empty(), "{} hostile requests were mishandled:\n{}", failures.len(), failures.join("\n"));
    // Still healthy, and nothing was lost.
    assert_eq!(fs.read(read("s", "/doc.md")).await.unwrap().into_inner().content, "line one\n");
}
