//! End-to-end: `Grep` through real front and worker processes.

// Tests may unwrap: a panic is the failure report.
#![allow(clippy::unwrap_used)]

use crate::support;

use agentvfs_proto::v1 as pb;
use support::{Stack, assert_error, metadata, read, write_bytes, write_text};
use tonic::Code;

fn grep(pattern: &str) -> pb::GrepRequest {
    pb::GrepRequest { space: "s".into(), pattern: pattern.into(), ..Default::default() }
}

fn content(pattern: &str) -> pb::GrepRequest {
    pb::GrepRequest { output_mode: pb::GrepOutputMode::Content as i32, ..grep(pattern) }
}

async fn fill(stack: &Stack) {
    stack.front.space("s").await;
    let mut fs = stack.front.fs().await;
    let files = [
        ("/src/main.rs", "fn main() {\n    // TODO: start\n    println!(\"hi\");\n}\n"),
        ("/src/lib.rs", "pub fn lib() {}\n// todo: lower\n// TODO: upper\n"),
        ("/docs/guide.md", "# Guide\n\nTODO write the guide 😀 TODO\n"),
        ("/notes/crlf.txt", "alpha\r\nTODO crlf\r\nomega"),
    ];
    for (path, text) in files {
        fs.write(write_text("s", path, text)).await.unwrap();
    }
    fs.write(write_bytes("s", "/bin/blob.dat", b"TODO\0binary")).await.unwrap();
}

#[tokio::test]
async fn grep_answers_in_every_output_mode() {
    let stack = Stack::start(&[]).await;
    fill(&stack).await;
    let mut fs = stack.front.fs().await;

    let files = fs.grep(grep("TODO")).await.unwrap().into_inner();
    let paths: Vec<_> = files.files.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(paths, ["/docs/guide.md", "/notes/crlf.txt", "/src/lib.rs", "/src/main.rs"]);
    assert!(files.complete && files.next_page_token.is_empty());
    assert_eq!(
        files.skipped.iter().map(|s| (s.path.as_str(), s.reason.as_str())).collect::<Vec<_>>(),
        [("/bin/blob.dat", "binary")]
    );

    let counts = fs.grep(pb::GrepRequest { output_mode: pb::GrepOutputMode::Count as i32, ..grep("TODO") }).await;
    let counts: Vec<_> = counts.unwrap().into_inner().files.iter().map(|f| (f.path.clone(), f.count)).collect();
    assert_eq!(counts[0], ("/docs/guide.md".to_owned(), 1));

    let matches = fs.grep(content("TODO")).await.unwrap().into_inner().matches;
    let guide = &matches[0];
    assert_eq!((guide.path.as_str(), guide.line_number, guide.column), ("/docs/guide.md", 3, 1));
    assert_eq!(guide.line, "TODO write the guide 😀 TODO");
    // The second TODO starts after the emoji: UTF-16 units, not bytes.
    assert_eq!(guide.submatches.iter().map(|r| (r.start, r.end)).collect::<Vec<_>>(), [(0, 4), (24, 28)]);
    let crlf = matches.iter().find(|m| m.path == "/notes/crlf.txt").unwrap();
    assert_eq!(crlf.line, "TODO crlf");

    let insensitive =
        fs.grep(pb::GrepRequest { case_insensitive: true, ..content("todo") }).await.unwrap().into_inner();
    assert_eq!(insensitive.matches.iter().filter(|m| m.path == "/src/lib.rs").count(), 2);
    let fixed = fs.grep(pb::GrepRequest { fixed_strings: true, ..content("println!(\"hi\")") }).await.unwrap();
    assert_eq!(fixed.into_inner().matches.len(), 1);
    let multi = fs.grep(pb::GrepRequest { multiline: true, ..content("start\\n.*println") }).await.unwrap();
    let multi = multi.into_inner().matches;
    assert_eq!((multi.len(), multi[0].line_number), (1, 2));
    assert!(multi[0].line.contains('\n'));

    let with_context = fs.grep(pb::GrepRequest { context: 1, ..content("println") }).await.unwrap().into_inner();
    let hit = &with_context.matches[0];
    assert_eq!(hit.before.iter().map(|l| l.line_number).collect::<Vec<_>>(), [2]);
    assert_eq!(hit.after.iter().map(|l| (l.line_number, l.text.as_str())).collect::<Vec<_>>(), [(4, "}")]);
    let no_numbers = fs.grep(pb::GrepRequest { line_numbers: Some(false), ..content("println") }).await.unwrap();
    assert_eq!(no_numbers.into_inner().matches[0].line_number, 0);

    let rust = fs.grep(pb::GrepRequest { r#type: vec!["rust".into()], ..grep("TODO") }).await.unwrap().into_inner();
    assert_eq!(rust.files.len(), 2);
    let md = fs.grep(pb::GrepRequest { glob: "*.md".into(), ..grep("TODO") }).await.unwrap().into_inner();
    assert_eq!(md.files.iter().map(|f| f.path.as_str()).collect::<Vec<_>>(), ["/docs/guide.md"]);
    let one_file = fs.grep(pb::GrepRequest { path: "/src/lib.rs".into(), ..content("TODO|todo") }).await.unwrap();
    assert_eq!(one_file.into_inner().matches.len(), 2);
    let limited =
        fs.grep(pb::GrepRequest { head_limit: Some(1), offset: 1, ..grep("TODO") }).await.unwrap().into_inner();
    assert_eq!(limited.files.iter().map(|f| f.path.as_str()).collect::<Vec<_>>(), ["/notes/crlf.txt"]);
    assert!(!limited.next_page_token.is_empty());
}

#[tokio::test]
async fn grep_errors_are_clear_and_fast() {
    let stack = Stack::start(&[]).await;
    fill(&stack).await;
    let mut fs = stack.front.fs().await;
    let bad = fs.grep(grep("foo(bar")).await.unwrap_err();
    assert_error(&bad, Code::InvalidArgument, "INVALID_PATTERN");
    assert_eq!(metadata(&bad, "position"), "3");
    let huge = fs.grep(grep("(\\w{100}){100}{100}")).await.unwrap_err();
    assert_error(&huge, Code::InvalidArgument, "INVALID_PATTERN");
    let deep = fs.grep(grep(&format!("{}a{}", "(".repeat(300), ")".repeat(300)))).await.unwrap_err();
    assert_error(&deep, Code::InvalidArgument, "INVALID_PATTERN");
    // Classic catastrophic backtracking is linear here: it finishes.
    fs.write(write_text("s", "/a.txt", &format!("{}!\n", "a".repeat(50_000)))).await.unwrap();
    let linear = fs.grep(grep("^(a*)*z$")).await.unwrap().into_inner();
    assert!(linear.files.is_empty() && linear.complete);

    let first = fs.grep(pb::GrepRequest { head_limit: Some(1), ..grep("TODO") }).await.unwrap().into_inner();
    let other = fs.grep(pb::GrepRequest { page_token: first.next_page_token, ..grep("other") }).await.unwrap_err();
    assert_error(&other, Code::InvalidArgument, "CURSOR_INVALID");
    let unknown = fs.grep(pb::GrepRequest { r#type: vec!["klingon".into()], ..grep("x") }).await.unwrap_err();
    assert_error(&unknown, Code::InvalidArgument, "INVALID_ARGUMENT");
}

#[tokio::test]
async fn without_a_worker_grep_is_unavailable_and_the_rest_works() {
    let mut stack = Stack::start(&[]).await;
    fill(&stack).await;
    let mut fs = stack.front.fs().await;
    assert!(!fs.grep(grep("TODO")).await.unwrap().into_inner().files.is_empty());

    stack.worker.kill();
    let down = fs.grep(grep("TODO")).await.unwrap_err();
    assert_error(&down, Code::Unavailable, "WORKER_UNAVAILABLE");
    assert_eq!(metadata(&down, "retryable"), "true");
    fs.read(read("s", "/src/main.rs")).await.unwrap();
    fs.write(write_text("s", "/new.txt", "TODO later")).await.unwrap();

    stack.worker.restart().await;
    let back = fs.grep(grep("TODO")).await.unwrap().into_inner();
    assert!(back.files.iter().any(|f| f.path == "/new.txt"));
}

#[tokio::test]
async fn pages_pin_their_snapshot_while_files_change() {
    let stack = Stack::start(&["--grep-max-files", "2"]).await;
    stack.front.space("s").await;
    let mut fs = stack.front.fs().await;
    for i in 0..6 {
        fs.write(write_text("s", &format!("/f{i}.txt"), "needle\nhay\nneedle\n")).await.unwrap();
    }
    let mut seen = Vec::new();
    let mut token = String::new();
    for page in 0.. {
        assert!(page < 20, "pagination did not end");
        let request = pb::GrepRequest { head_limit: Some(3), page_token: token, ..content("needle") };
        let response = fs.grep(request).await.unwrap().into_inner();
        assert!(response.matches.len() <= 3);
        assert!(response.stats.unwrap().files_visited <= 2);
        seen.extend(response.matches.iter().map(|m| (m.path.clone(), m.line_number)));
        // Changing and adding files between pages does not disturb the search.
        fs.write(write_text("s", "/f5.txt", "gone\n")).await.unwrap();
        fs.write(write_text("s", &format!("/f{page}x.txt"), "needle\n")).await.unwrap();
        if response.complete {
            assert!(response.next_page_token.is_empty());
            break;
        }
        token = response.next_page_token;
    }
    let expected: Vec<_> = (0..6).flat_map(|i| [(format!("/f{i}.txt"), 1), (format!("/f{i}.txt"), 3)]).collect();
    assert_eq!(seen, expected);
}

#[tokio::test]
async fn jobs_spread_over_workers_and_survive_losing_one() {
    let dir = tempfile::tempdir().unwrap();
    // One of them hashes what it fetches: both answer alike.
    let verifying = [("AGENTVFS_VERIFY_CONTENT", "true")];
    let binary = support::worker_binary();
    let (front, mut first, mut second) = support::with_front_port(async |front_addr| {
        let first = support::Worker::start(front_addr, "127.0.0.1:0", &dir.path().join("i1")).await;
        let i2 = dir.path().join("i2");
        let second = support::Worker::start_binary(&binary, front_addr, "127.0.0.1:0", &i2, &verifying).await;
        let both = format!("{},{}", first.addr, second.addr);
        let front = support::Front::try_start_at_with(front_addr, dir.path(), &["--worker", &both]).await?;
        Some((front, first, second))
    })
    .await;
    front.space("s").await;
    let mut fs = front.fs().await;
    fs.write(write_text("s", "/a.txt", "TODO\n")).await.unwrap();
    for _ in 0..4 {
        assert_eq!(fs.grep(grep("TODO")).await.unwrap().into_inner().files.len(), 1);
    }
    first.kill();
    for _ in 0..4 {
        assert_eq!(fs.grep(grep("TODO")).await.unwrap().into_inner().files.len(), 1, "the other worker answers");
    }
    second.kill();
    assert_error(&fs.grep(grep("TODO")).await.unwrap_err(), Code::Unavailable, "WORKER_UNAVAILABLE");
}

#[tokio::test]
async fn a_worker_that_reserves_its_cache_answers_alike_as_the_cache_turns_over() {
    // Three 4 MiB blocks of cache memory, reserved at start, for 16 MB of files.
    let worker_env = [("AGENTVFS_RESERVE_CACHE", "true"), ("AGENTVFS_CACHE_BYTES", "12582912")];
    let stack = Stack::start_configured(&[], &[], &worker_env).await;
    stack.front.space("s").await;
    let mut fs = stack.front.fs().await;
    let filler = "an ordinary line of text for the scan to cross\n".repeat(10_000);
    for i in 0..32 {
        fs.write(write_text("s", &format!("/d/f{i:02}.txt"), &format!("needle {i}\n{filler}needle\n"))).await.unwrap();
    }
    let expected: Vec<(String, u64)> = (0..32).map(|i| (format!("/d/f{i:02}.txt"), 2)).collect();
    for round in 0..3 {
        let mut counts = Vec::new();
        let mut token = String::new();
        loop {
            let request = pb::GrepRequest {
                output_mode: pb::GrepOutputMode::Count as i32,
                page_token: std::mem::take(&mut token),
                ..grep("needle")
            };
            let page = fs.grep(request).await.unwrap().into_inner();
            counts.extend(page.files.into_iter().map(|f| (f.path, f.count)));
            if page.complete {
                break;
            }
            token = page.next_page_token;
        }
        assert_eq!(counts, expected, "round {round}");
    }
}

#[tokio::test]
async fn a_full_queue_fails_fast_with_overloaded() {
    let stack = Stack::start(&["--grep-concurrency", "1", "--grep-queue", "0"]).await;
    stack.front.space("s").await;
    let mut fs = stack.front.fs().await;
    for i in 0..50 {
        fs.write(write_text("s", &format!("/f{i:02}.txt"), &"some text to scan\n".repeat(2000))).await.unwrap();
    }
    let calls = (0..8).map(|_| {
        let mut fs = fs.clone();
        tokio::spawn(async move {
            fs.grep(pb::GrepRequest { case_insensitive: true, glob: "*.txt".into(), ..grep("t.xt") }).await
        })
    });
    let mut overloaded = 0;
    for call in calls.collect::<Vec<_>>() {
        match call.await.unwrap() {
            Ok(response) => assert_eq!(response.into_inner().files.len(), 50),
            Err(status) => {
                assert_error(&status, Code::ResourceExhausted, "OVERLOADED");
                use tonic_types::StatusExt;
                assert!(status.get_error_details().retry_info().is_some());
                overloaded += 1;
            }
        }
    }
    assert!(overloaded > 0, "eight simultaneous searches on a one-slot queue must shed some");
}
