use proptest::prelude::*;

use super::*;

fn replace(old: &str, new: &str) -> EditOp {
    EditOp::Replace { old_text: old.into(), new_text: new.into(), expected_matches: 1, replace_all: false }
}

#[test]
fn replaces_exactly_and_literally() {
    let (out, counts) = apply("let a = 1;\n", &[replace("a = 1", "a = $1 $&")]).unwrap();
    assert_eq!(out, "let a = $1 $&;\n");
    assert_eq!(counts, [1]);
}

#[test]
fn counts_must_match_unless_replace_all() {
    let err = apply("x\nx\ny\nx\n", &[replace("x", "z")]).unwrap_err();
    assert_eq!(err.kind, FailureKind::Ambiguous { expected: 1, count: 3, lines: vec![1, 2, 4] });
    let two = EditOp::Replace { old_text: "x".into(), new_text: "z".into(), expected_matches: 3, replace_all: false };
    assert_eq!(apply("x\nx\ny\nx\n", &[two]).unwrap().0, "z\nz\ny\nz\n");
    let all = EditOp::Replace { old_text: "aa".into(), new_text: "b".into(), expected_matches: 1, replace_all: true };
    assert_eq!(apply("aaaaa", &[all]).unwrap(), ("bba".to_owned(), vec![2]));
}

#[test]
fn crlf_files_stay_crlf() {
    let file = "\u{feff}one\r\ntwo\r\nthree\r\n";
    let (out, _) = apply(file, &[replace("one\ntwo\n", "uno\ndos\n")]).unwrap();
    assert_eq!(out, "\u{feff}uno\r\ndos\r\nthree\r\n");
    let (out, _) = apply(file, &[EditOp::Append { text: "four\n".into() }]).unwrap();
    assert!(out.ends_with("three\r\nfour\r\n"));
    assert!(!out.replace("\r\n", "").contains('\n'));
}

#[test]
fn a_crlf_file_stays_crlf_after_an_edit_removes_its_terminators() {
    // The first edit leaves no `\n` in the file; the second still inserts
    // CRLF, because the line-ending style is the file's as it was.
    let edits = [replace("\n", "x"), replace("x", "\n\n")];
    assert_eq!(apply("\r\n", &edits).unwrap().0, "\r\r\n\r\n");
}

#[test]
fn lines_edits_check_the_current_text() {
    let file = "a\nb\nc";
    let edit = |old: &str| EditOp::Lines { start_line: 2, end_line: 3, old_text: old.into(), new_text: "B\n".into() };
    assert_eq!(apply(file, &[edit("b\nc")]).unwrap().0, "a\nB\n");
    assert_eq!(
        apply(file, &[edit("b\n")]).unwrap_err().kind,
        FailureKind::LinesMismatch { start_line: 2, end_line: 3 }
    );
    let far = EditOp::Lines { start_line: 3, end_line: 4, old_text: String::new(), new_text: String::new() };
    assert!(matches!(apply(file, &[far]).unwrap_err().kind, FailureKind::BadRange { line_count: 3, .. }));
}

#[test]
fn no_match_names_the_near_miss() {
    let file = "fn main() {\n    println!(\"Hi\");\n}\n";
    let miss = |old: &str| near_miss_of(file, old);
    assert_eq!(miss("println!(\"hi\");"), Some((2, Difference::Case)));
    assert_eq!(miss("println!( \"Hi\" );").map(|m| m.1), None);
    assert_eq!(miss("fn  main()  {"), Some((1, Difference::Whitespace)));
    assert_eq!(miss("\tprintln!(\"Hi\");\n}"), Some((2, Difference::Indentation)));
    assert_eq!(miss("nothing like it"), None);
}

#[test]
fn failures_name_their_edit_and_change_nothing() {
    let err = apply("abc", &[replace("a", "x"), replace("", "y")]).unwrap_err();
    assert_eq!((err.index, err.kind), (1, FailureKind::EmptyOldText));
    assert_eq!(apply("abc", &[replace("b", "b")]).unwrap_err().kind, FailureKind::Noop);
}

fn text() -> impl Strategy<Value = String> {
    let parts = prop::sample::select(vec!["a", "b", "ab", " ", "\n", "😀", "$1"]);
    prop::collection::vec(parts, 0..40).prop_map(|p| p.concat())
}

proptest! {
    /// A valid replace_all equals the standard library's replacement.
    #[test]
    fn replace_all_equals_str_replace(
        file in text(),
        old in "[ab😀]{1,3}",
        new in prop::collection::vec(prop::sample::select(vec!["a", "b", "$1", "$&", " "]), 0..3).prop_map(|p| p.concat()),
    ) {
        prop_assume!(old != new && file.contains(&old));
        let edit = EditOp::Replace { old_text: old.clone(), new_text: new.clone(), expected_matches: 1, replace_all: true };
        let (out, counts) = apply(&file, &[edit]).unwrap();
        prop_assert_eq!(out, file.replace(&old, &new));
        prop_assert_eq!(counts[0] as usize, file.matches(&old).count());
    }

    /// Whatever the edits, a CRLF file stays CRLF.
    #[test]
    fn crlf_is_never_lost(lines in prop::collection::vec("[a-c]{0,4}", 1..8), new in "[a-c\n]{0,6}") {
        let file: String = lines.iter().map(|l| format!("{l}\r\n")).collect();
        let old = format!("{}\n", lines[0]);
        let edits = [
            EditOp::Replace { old_text: old, new_text: new.clone(), expected_matches: 1, replace_all: true },
            EditOp::Append { text: new },
        ];
        if let Ok((out, _)) = apply(&file, &edits) {
            prop_assert!(!out.replace("\r\n", "").contains('\n'), "{:?}", out);
        }
    }
}

#[test]
fn a_near_miss_is_found_across_lines_and_after_blank_ones() {
    let file = "a\n\n  b c\nd\r\n";
    let miss = |old: &str| near_miss_of(file, old);
    assert_eq!(miss("b  c"), Some((3, Difference::Whitespace)));
    assert_eq!(miss("a b"), Some((1, Difference::Whitespace)), "a line break is whitespace too");
    assert_eq!(miss(" b c\n  d"), Some((3, Difference::Indentation)));
    assert_eq!(miss("B C"), Some((3, Difference::Case)));
}

/// A long `old_text` that matches nowhere in a long file: the near-miss
/// search used to compare every window of lines with every check, work that
/// grew with the product of the two sizes (the `edit` fuzz target found an
/// input of 4 KB that took seconds).
#[test]
fn a_long_edit_that_matches_nowhere_in_a_long_file_fails_at_once() {
    let file: String = (0..100_000).map(|i| format!("line {i}\n")).collect();
    let old_text: String = (0..10_000).map(|i| format!("other {i}\n")).collect();
    assert_eq!(near_miss_of(&file, &old_text), None);
}

/// The near miss an edit replacing `old` reports; panics unless it fails to match.
fn near_miss_of(file: &str, old: &str) -> Option<(u64, Difference)> {
    match apply(file, &[replace(old, "x")]).unwrap_err().kind {
        FailureKind::NoMatch { near_miss } => near_miss,
        other => panic!("{other:?}"),
    }
}
