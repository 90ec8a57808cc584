//! Property: for random small spaces and random page sizes, the pages of a
//! grep, concatenated, equal one unbounded scan of the same snapshot — no
//! duplicates, no losses, every page within budget — even while files change
//! between pages. The reference scan runs the worker's scanner directly on
//! the files written.

// Tests may unwrap: a panic is the failure report.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::sync::atomic::{AtomicUsize, Ordering};

use agentvfs_proto::v1 as pb;
use agentvfs_worker::scan::{Mode, Options, Query};
use proptest::prelude::*;
use support::{Engine, Stack, write_bytes};

const MAX_FILES: u64 = 3;

fn file_body() -> impl Strategy<Value = Vec<u8>> {
    let line = prop_oneof![
        Just(b"needle".to_vec()),
        Just(b"hay".to_vec()),
        Just(b"needle hay needle".to_vec()),
        Just(b"".to_vec()),
        Just("n\u{e9}edle \u{1f600} needle".as_bytes().to_vec()),
        Just([b"x".repeat(2500), b"needle".to_vec()].concat()),
    ];
    let ending = prop_oneof![Just(b"\n".to_vec()), Just(b"\r\n".to_vec())];
    (prop::collection::vec((line, ending), 0..8), any::<bool>(), any::<bool>()).prop_map(
        |(lines, final_newline, binary)| {
            let mut body: Vec<u8> = lines.into_iter().flat_map(|(l, e)| [l, e].concat()).collect();
            if !final_newline && body.ends_with(b"\n") {
                body.pop();
            }
            if binary {
                body.extend_from_slice(b"needle\0");
            }
            body
        },
    )
}

#[derive(Debug, Clone)]
struct Case {
    files: Vec<(String, Vec<u8>)>,
    mode: i32,
    head_limit: u32,
    context: u32,
}

fn case() -> impl Strategy<Value = Case> {
    let names = prop::sample::select(vec!["/a.txt", "/b/c.txt", "/b/d.md", "/e.txt", "/f/g/h.txt", "/z.txt"]);
    (prop::collection::btree_map(names, file_body(), 1..6), 0..3i32, 1u32..5, 0u32..3).prop_map(
        |(files, mode, head_limit, context)| Case {
            files: files.into_iter().map(|(p, b)| (p.to_owned(), b)).collect(),
            mode,
            head_limit,
            context,
        },
    )
}

/// (path, line, column, text) or (path, count) per entry, in order.
type Row = (String, u64, u64, String);

fn reference(case: &Case) -> Vec<Row> {
    let mode = match case.mode {
        0 => Mode::FilesWithMatches,
        1 => Mode::Content,
        _ => Mode::Count,
    };
    let options = Options {
        fixed_strings: false,
        case_insensitive: false,
        multiline: false,
        mode,
        before_context: case.context as usize,
        after_context: case.context as usize,
    };
    let query = Query::new("needle", options).unwrap();
    let mut rows = Vec::new();
    for (path, body) in &case.files {
        if body.contains(&0) {
            continue;
        }
        let found = query.scanner().scan(body, 0, usize::MAX);
        match mode {
            Mode::Content => {
                rows.extend(found.hits.into_iter().map(|h| (path.clone(), h.line.number, h.column, h.line.text)))
            }
            _ if found.count > 0 => rows.push((path.clone(), found.count, 0, String::new())),
            _ => {}
        }
    }
    rows
}

static SPACES: AtomicUsize = AtomicUsize::new(0);

#[test]
fn concatenated_pages_equal_one_unbounded_scan() {
    pages_equal_one_scan(Engine::Embedded);
}

#[test]
fn concatenated_pages_equal_one_unbounded_scan_on_a_database() {
    pages_equal_one_scan(Engine::Database);
}

fn pages_equal_one_scan(engine: Engine) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let max_files = MAX_FILES.to_string();
    let stack =
        runtime.block_on(engine.scope(Stack::start(&["--grep-max-files", &max_files, "--grep-max-bytes", "200"])));
    let config = ProptestConfig { cases: 32, ..ProptestConfig::default() };
    proptest!(config, |(case in case())| {
        let space = format!("p{}", SPACES.fetch_add(1, Ordering::Relaxed));
        let pages = runtime.block_on(async {
            stack.front.space(&space).await;
            let mut fs = stack.front.fs().await;
            for (path, body) in &case.files {
                fs.write(write_bytes(&space, path, body)).await.unwrap();
            }
            let mut rows: Vec<Row> = Vec::new();
            let mut skipped = Vec::new();
            let mut token = String::new();
            for page in 0.. {
                assert!(page < 500, "pagination did not end");
                let request = pb::GrepRequest {
                    space: space.clone(),
                    pattern: "needle".into(),
                    glob: "*.txt".into(),
                    output_mode: case.mode,
                    context: case.context,
                    head_limit: Some(case.head_limit),
                    page_token: token,
                    ..Default::default()
                };
                let response = fs.grep(request).await.unwrap().into_inner();
                let entries = response.matches.len() + response.files.len();
                assert!(entries <= case.head_limit as usize, "page over head_limit");
                assert!(response.stats.unwrap().files_visited <= MAX_FILES, "page over the file budget");
                rows.extend(response.matches.into_iter().map(|m| (m.path, m.line_number, m.column, m.line)));
                rows.extend(response.files.into_iter().map(|f| (f.path, f.count.max(1), 0, String::new())));
                skipped.extend(response.skipped.into_iter().map(|s| s.path));
                // Writes between pages must not change what the pinned pages return.
                for (path, _) in &case.files {
                    fs.write(write_bytes(&space, path, b"needle changed\n")).await.unwrap();
                }
                if response.complete {
                    break;
                }
                token = response.next_page_token;
            }
            (rows, skipped)
        });
        let (rows, skipped) = pages;
        let only_txt = Case { files: case.files.iter().filter(|(p, _)| p.ends_with(".txt")).cloned().collect(), ..case.clone() };
        let mut expected = reference(&only_txt);
        if case.mode == 0 {
            for row in &mut expected {
                row.1 = 1;
            }
        }
        prop_assert_eq!(rows, expected);
        let binaries: Vec<_> = only_txt.files.iter().filter(|(_, b)| b.contains(&0)).map(|(p, _)| p.clone()).collect();
        prop_assert_eq!(skipped, binaries, "every binary file is reported once");
    });
}
