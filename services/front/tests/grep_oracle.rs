//! Oracle: `Grep` over the fixture tree reports the same match lines,
//! context lines and submatch texts as ripgrep (`scripts/grep-oracle`
//! regenerates `fixtures/grep/expected.json` with `rg --json`).

// Tests may unwrap: a panic is the failure report.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::path::Path;

use agentvfs_proto::v1 as pb;
use support::{Stack, write_bytes};

/// (path, line, "m" or "c", submatch texts), as in expected.json.
type Line = (String, u64, String, Vec<String>);

fn fixture_files(dir: &Path, prefix: &str, out: &mut Vec<(String, Vec<u8>)>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    entries.sort();
    for path in entries {
        let name = format!("{prefix}/{}", path.file_name().unwrap().to_str().unwrap());
        if path.is_dir() {
            fixture_files(&path, &name, out);
        } else {
            out.push((name, std::fs::read(&path).unwrap()));
        }
    }
}

/// The text of UTF-16 range `start..end` of `line`.
fn utf16_slice(line: &str, start: u64, end: u64) -> String {
    let units: Vec<u16> = line.encode_utf16().collect();
    String::from_utf16(&units[start as usize..end as usize]).unwrap()
}

#[tokio::test]
async fn grep_agrees_with_ripgrep_on_the_fixture_tree() {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/grep");
    let expected: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixtures.join("expected.json")).unwrap()).unwrap();
    let stack = Stack::start(&[]).await;
    stack.front.space("s").await;
    let mut fs = stack.front.fs().await;
    let mut files = Vec::new();
    fixture_files(&fixtures.join("tree"), "", &mut files);
    for (path, body) in &files {
        fs.write(write_bytes("s", path, body)).await.unwrap();
    }
    let cases = expected["cases"].as_array().unwrap();
    assert!(cases.len() >= 10);
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let request = pb::GrepRequest {
            space: "s".into(),
            pattern: case["pattern"].as_str().unwrap().into(),
            fixed_strings: case["fixed"].as_bool().unwrap(),
            case_insensitive: case["case_insensitive"].as_bool().unwrap(),
            multiline: case["multiline"].as_bool().unwrap(),
            before_context: case["before"].as_u64().unwrap() as u32,
            after_context: case["after"].as_u64().unwrap() as u32,
            output_mode: pb::GrepOutputMode::Content as i32,
            // Only the fixture tree, not the space's generated files.
            glob: "{src,docs,py}/**".into(),
            head_limit: Some(0),
            ..Default::default()
        };
        let response = fs.grep(request).await.unwrap().into_inner();
        assert!(response.complete, "{name}: one page holds the fixture");
        let mut ours: Vec<Line> = Vec::new();
        for m in response.matches {
            let context = |l: &pb::ContextLine| (m.path.clone(), l.line_number, "c".to_owned(), Vec::new());
            ours.extend(m.before.iter().map(context));
            let texts = m.submatches.iter().map(|r| utf16_slice(&m.line, r.start, r.end)).collect();
            ours.push((m.path.clone(), m.line_number, "m".to_owned(), texts));
            ours.extend(m.after.iter().map(context));
        }
        let theirs: Vec<Line> = serde_json::from_value(case["lines"].clone()).unwrap();
        assert_eq!(ours, theirs, "case {name}");
    }
}
