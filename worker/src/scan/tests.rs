use super::*;

fn query(pattern: &str, mode: Mode, before: usize, after: usize) -> Query {
    let options = Options {
        fixed_strings: false,
        case_insensitive: false,
        multiline: false,
        mode,
        before_context: before,
        after_context: after,
    };
    Query::new(pattern, options).unwrap()
}

fn run(q: &Query, text: &str, resume: u64, limit: usize) -> FileScan {
    q.scanner().scan(text.as_bytes(), resume, limit)
}

#[test]
fn reports_lines_utf16_columns_and_submatches() {
    let q = query("b+", Mode::Content, 0, 0);
    let found = run(&q, "a\n😀 bb x bbb\r\n", 0, 10);
    let hit = &found.hits[0];
    assert_eq!((hit.line.number, hit.line.text.as_str()), (2, "😀 bb x bbb"));
    assert_eq!(hit.column, 4);
    assert_eq!(hit.submatches, [(3, 5), (8, 11)]);
}

#[test]
fn context_attaches_to_its_match() {
    let q = query("x", Mode::Content, 1, 1);
    let found = run(&q, "a\nx\nb\nc\nd\nx\n", 0, 10);
    let shape: Vec<_> = found
        .hits
        .iter()
        .map(|h| {
            (
                h.line.number,
                h.before.iter().map(|l| l.number).collect::<Vec<_>>(),
                h.after.iter().map(|l| l.number).collect::<Vec<_>>(),
            )
        })
        .collect();
    assert_eq!(shape, [(2, vec![1], vec![3]), (6, vec![5], vec![])]);
}

#[test]
fn resume_skips_reported_lines_and_limit_stops() {
    let q = query("x", Mode::Content, 0, 0);
    let text = "x\nx\nx\nx\n";
    let first = run(&q, text, 0, 2);
    assert_eq!(first.hits.iter().map(|h| h.line.number).collect::<Vec<_>>(), [1, 2]);
    assert!(first.stopped);
    let rest = run(&q, text, 2, 10);
    assert_eq!(rest.hits.iter().map(|h| h.line.number).collect::<Vec<_>>(), [3, 4]);
    assert!(!rest.stopped);
}

#[test]
fn long_lines_are_clipped() {
    let q = query("needle", Mode::Content, 0, 0);
    let text = format!("{}needle\n", "é".repeat(3000));
    let hit = &run(&q, &text, 0, 1).hits[0];
    assert!(hit.line.clipped);
    assert_eq!(hit.line.text.encode_utf16().count(), MAX_LINE_UNITS);
    assert_eq!(hit.column, 3001);
}

#[test]
fn counts_and_files_modes() {
    assert_eq!(run(&query("x", Mode::Count, 0, 0), "x\nyx\nz\nxx\n", 0, 0).count, 3);
    assert_eq!(run(&query("x", Mode::FilesWithMatches, 0, 0), "x\nx\n", 0, 0).count, 1);
    assert_eq!(run(&query("q", Mode::FilesWithMatches, 0, 0), "x\nx\n", 0, 0).count, 0);
}

#[test]
fn hostile_patterns_fail_fast() {
    let options = Options {
        fixed_strings: false,
        case_insensitive: false,
        multiline: false,
        mode: Mode::Content,
        before_context: 0,
        after_context: 0,
    };
    assert!(Query::new("a{10000}{10000}", options).is_err());
    assert!(Query::new(&"(".repeat(200), options).is_err());
    assert!(Query::new("(a", options).is_err());
    // Exponential backtracking patterns are linear in the regex engine.
    let q = Query::new("(a*)*b", options).unwrap();
    let text = format!("{}\n", "a".repeat(100_000));
    assert!(run(&q, &text, 0, 10).hits.is_empty());
}

#[test]
fn multiline_matches_span_lines() {
    let options = Options {
        fixed_strings: false,
        case_insensitive: false,
        multiline: true,
        mode: Mode::Content,
        before_context: 0,
        after_context: 0,
    };
    let q = Query::new("start.*?end", options).unwrap();
    let found = run(&q, "x\nstart\nmiddle\nend\ny\n", 0, 10);
    assert_eq!(found.hits.len(), 1);
    assert_eq!((found.hits[0].line.number, found.hits[0].line.text.as_str()), (2, "start\nmiddle\nend"));
}
