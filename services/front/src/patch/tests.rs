use proptest::prelude::*;

use super::*;
use crate::edit::Difference;
use crate::properties::{check_patch_apply, check_patch_parse, check_patch_round_trip};

fn lines(text: &[&str]) -> Vec<String> {
    text.iter().map(|line| (*line).to_owned()).collect()
}

fn hunk(old: &[&str], new: &[&str]) -> Hunk {
    Hunk {
        anchors: Vec::new(),
        line: None,
        old: lines(old),
        new: lines(new),
        end_of_file: false,
        final_newline: FinalNewline::Keep,
    }
}

fn unified_hunk(line: u64, old: &[&str], new: &[&str]) -> Hunk {
    Hunk { line: Some(line), final_newline: FinalNewline::Stated { old: true, new: true }, ..hunk(old, new) }
}

/// The hunks of the only file of `text`, an update.
fn update(text: &str) -> Vec<Hunk> {
    match parse(text, Format::detect(text)).unwrap().files.as_slice() {
        [FileChange::Update { hunks, .. }] => hunks.clone(),
        other => panic!("{other:?}"),
    }
}

fn error(text: &str, format: Format) -> (usize, ParseErrorKind) {
    let error = parse(text, format).unwrap_err();
    (error.line, error.kind)
}

fn failure(original: &str, hunks: &[Hunk]) -> (usize, HunkFailureKind) {
    let failure = apply_hunks(original, hunks).unwrap_err();
    (failure.index, failure.kind)
}

// apply_patch: the grammar.

#[test]
fn apply_patch_reads_every_kind_of_change() {
    let text = "\
*** Begin Patch
*** Add File: docs/new.md
+# New
+
*** Delete File: old.txt
*** Update File: src/app.py
*** Move to: src/main.py
@@ def greet():
-    print(\"Hi\")
+    print(\"Hello\")
*** End Patch
";
    let greet = Hunk { anchors: lines(&["def greet():"]), ..hunk(&["    print(\"Hi\")"], &["    print(\"Hello\")"]) };
    assert_eq!(
        parse(text, Format::ApplyPatch).unwrap().files,
        [
            FileChange::Add { path: "docs/new.md".into(), content: "# New\n\n".into() },
            FileChange::Delete { path: "old.txt".into() },
            FileChange::Update { path: "src/app.py".into(), move_to: Some("src/main.py".into()), hunks: vec![greet] },
        ]
    );
    assert_eq!(Format::detect(text), Format::ApplyPatch);
    assert_eq!(Format::detect("--- a/x\n+++ b/x\n"), Format::Unified);
}

#[test]
fn apply_patch_ignores_blank_lines_and_padding_around_markers() {
    let text = "\n  *** Begin Patch \n  *** Update File: a.txt  \n\n@@\n-one\n+two\n *** End Patch \n\n";
    assert_eq!(update(text), [hunk(&["one"], &["two"])]);
    assert_eq!(parse("*** Begin Patch\n*** End Patch", Format::ApplyPatch).unwrap().files, []);
}

#[test]
fn apply_patch_refuses_a_broken_envelope_naming_the_line() {
    let expected = |line, found: &str, expected| (line, ParseErrorKind::Expected { expected, found: found.to_owned() });
    assert_eq!(error("", Format::ApplyPatch), expected(1, "", "`*** Begin Patch`"));
    assert_eq!(error("\nhello\n", Format::ApplyPatch), expected(2, "hello", "`*** Begin Patch`"));
    assert_eq!(
        error("*** Begin Patch\n*** Delete File: a\n", Format::ApplyPatch),
        expected(2, "*** Delete File: a", "`*** End Patch` as the last line")
    );
    let stray = "*** Begin Patch\n*** Delete File: a\nwhat\n*** End Patch";
    assert_eq!(
        error(stray, Format::ApplyPatch),
        expected(3, "what", "`*** Add File:`, `*** Delete File:`, `*** Update File:` or `*** End Patch`")
    );
}

#[test]
fn apply_patch_hunk_lines_and_their_leniencies() {
    // An empty line is an empty context line; the first hunk may omit `@@`.
    let text = "*** Begin Patch\n*** Update File: a\n a\n\n-b\n+B\n*** End Patch";
    assert_eq!(update(text), [hunk(&["a", "", "b"], &["a", "", "B"])]);
    // Empty lines that end a hunk separate it from the next one.
    let text = "*** Begin Patch\n*** Update File: a\n@@\n-a\n+A\n\n\n@@\n-b\n+B\n\n*** End Patch";
    assert_eq!(update(text), [hunk(&["a"], &["A"]), hunk(&["b"], &["B"])]);
    // A line that is not a hunk line.
    let text = "*** Begin Patch\n*** Update File: a\n@@\nfoo\n*** End Patch";
    let (line, kind) = error(text, Format::ApplyPatch);
    assert_eq!(line, 4);
    assert!(matches!(kind, ParseErrorKind::Expected { expected: "a hunk line starting with ' ', '-' or '+'", .. }));
    // A second hunk needs its `@@`.
    let text = "*** Begin Patch\n*** Update File: a\n@@\n-a\n*** End of File\n-b\n*** End Patch";
    assert_eq!(error(text, Format::ApplyPatch).0, 6);
    let text = "*** Begin Patch\n*** Update File: a\n@@x\n-a\n*** End Patch";
    assert_eq!(error(text, Format::ApplyPatch).0, 3);
}

#[test]
fn apply_patch_anchors_stack_and_end_of_file_is_kept() {
    let text = "*** Begin Patch\n*** Update File: a\n@@ class A\n@@   def f():\n-x\n+y\n*** End of File\n*** End Patch";
    let expected = Hunk { anchors: lines(&["class A", "  def f():"]), end_of_file: true, ..hunk(&["x"], &["y"]) };
    assert_eq!(update(text), [expected]);
    // `@@` with only whitespace after it is a bare `@@`.
    let text = "*** Begin Patch\n*** Update File: a\n@@  \n-x\n+y\n*** End Patch";
    assert_eq!(update(text), [hunk(&["x"], &["y"])]);
}

#[test]
fn apply_patch_insertions_without_anchor_append() {
    let text = "*** Begin Patch\n*** Update File: a\n@@\n+tail\n*** End Patch";
    assert_eq!(update(text), [Hunk { end_of_file: true, ..hunk(&[], &["tail"]) }]);
    assert_eq!(apply_hunks("one\ntwo\n", &update(text)).unwrap(), "one\ntwo\ntail\n");
    let text = "*** Begin Patch\n*** Update File: a\n@@ one\n+after one\n*** End Patch";
    assert_eq!(apply_hunks("one\ntwo\n", &update(text)).unwrap(), "one\nafter one\ntwo\n");
}

#[test]
fn apply_patch_updates_need_hunks_or_a_move_and_headers_need_paths() {
    let text = "*** Begin Patch\n*** Update File: a.txt\n*** End Patch";
    assert_eq!(error(text, Format::ApplyPatch), (2, ParseErrorKind::EmptyUpdate("a.txt".into())));
    let text = "*** Begin Patch\n*** Update File: a.txt\n*** Move to: b.txt\n*** End Patch";
    assert_eq!(
        parse(text, Format::ApplyPatch).unwrap().files,
        [FileChange::Update { path: "a.txt".into(), move_to: Some("b.txt".into()), hunks: vec![] }]
    );
    let text = "*** Begin Patch\n*** Add File: \n+x\n*** End Patch";
    assert_eq!(error(text, Format::ApplyPatch), (2, ParseErrorKind::EmptyPath));
    let text = "*** Begin Patch\n*** Update File: a\n@@\n\n*** End Patch";
    assert_eq!(error(text, Format::ApplyPatch), (3, ParseErrorKind::EmptyHunk));
    let text = "*** Begin Patch\n*** Update File: a\n@@\n*** End of File\n*** End Patch";
    assert_eq!(error(text, Format::ApplyPatch), (4, ParseErrorKind::EmptyHunk));
}

#[test]
fn a_patch_written_with_crlf_reads_as_lf() {
    let text = "*** Begin Patch\r\n*** Update File: a\r\n@@\r\n-one\r\n+two\r\n*** End Patch\r\n";
    assert_eq!(update(text), [hunk(&["one"], &["two"])]);
    assert_eq!(apply_hunks("one\n", &update(text)).unwrap(), "two\n");
    assert_eq!(apply_hunks("one\r\n", &update(text)).unwrap(), "two\r\n");
}

// Unified diffs: the grammar.

#[test]
fn git_diffs_of_several_files_with_their_headers() {
    let text = "\
commit 0123abc
Author: someone

    Subject line

diff --git a/src/lib.rs b/src/lib.rs
index 83db48f..bf269f4 100644
--- a/src/lib.rs
+++ b/src/lib.rs
@@ -1,3 +1,3 @@ mod a;
 one
-two
+deux
 three
@@ -10 +10,2 @@
 ten
+ten and a half
diff --git a/docs/new.md b/docs/new.md
new file mode 100644
index 0000000..e69de29
--- /dev/null
+++ b/docs/new.md
@@ -0,0 +1,2 @@
+hello
+world
diff --git a/gone.txt b/gone.txt
deleted file mode 100644
index e69de29..0000000
--- a/gone.txt
+++ /dev/null
@@ -1 +0,0 @@
-bye
diff --git a/empty.txt b/empty.txt
new file mode 100644
index 0000000..e69de29
";
    assert_eq!(
        parse(text, Format::Unified).unwrap().files,
        [
            FileChange::Update {
                path: "src/lib.rs".into(),
                move_to: None,
                hunks: vec![
                    unified_hunk(1, &["one", "two", "three"], &["one", "deux", "three"]),
                    unified_hunk(10, &["ten"], &["ten", "ten and a half"]),
                ],
            },
            FileChange::Add { path: "docs/new.md".into(), content: "hello\nworld\n".into() },
            FileChange::Delete { path: "gone.txt".into() },
            FileChange::Add { path: "empty.txt".into(), content: String::new() },
        ]
    );
}

#[test]
fn git_renames_and_mode_changes() {
    let text = "\
diff --git a/old name.txt b/new name.txt
similarity index 100%
rename from old name.txt
rename to new name.txt
diff --git a/script.sh b/script.sh
old mode 100644
new mode 100755
diff --git a/a.rs b/b.rs
similarity index 90%
rename from a.rs
rename to b.rs
index 1111111..2222222 100644
--- a/a.rs
+++ b/b.rs
@@ -2 +2 @@
-x
+y
";
    assert_eq!(
        parse(text, Format::Unified).unwrap().files,
        [
            FileChange::Update { path: "old name.txt".into(), move_to: Some("new name.txt".into()), hunks: vec![] },
            FileChange::Update {
                path: "a.rs".into(),
                move_to: Some("b.rs".into()),
                hunks: vec![unified_hunk(2, &["x"], &["y"])]
            },
        ]
    );
}

#[test]
fn git_quoted_names_are_unquoted() {
    let text = "diff --git \"a/caf\\303\\251 \\\"x\\\".txt\" \"b/caf\\303\\251 \\\"x\\\".txt\"\nnew file mode 100644\n--- /dev/null\n+++ \"b/caf\\303\\251 \\\"x\\\".txt\"\n@@ -0,0 +1 @@\n+hi\n";
    assert_eq!(
        parse(text, Format::Unified).unwrap().files,
        [FileChange::Add { path: "café \"x\".txt".into(), content: "hi\n".into() }]
    );
    let bad = "--- \"a/x\\q\"\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n";
    assert_eq!(error(bad, Format::Unified), (1, ParseErrorKind::BadQuotedPath("\"a/x\\q\"".into())));
}

#[test]
fn plain_diffs_keep_their_names_and_drop_timestamps() {
    let text = "\
diff -u -r old/notes.txt new/notes.txt
--- old/notes.txt\t2024-01-01 10:00:00.000000000 +0100
+++ new/notes.txt\t2024-01-02 10:00:00.000000000 +0100
@@ -1,2 +1,2 @@
 keep
-drop
+add
Only in new: extra.txt
";
    assert_eq!(
        parse(text, Format::Unified).unwrap().files,
        [FileChange::Update {
            path: "old/notes.txt".into(),
            move_to: None,
            hunks: vec![unified_hunk(1, &["keep", "drop"], &["keep", "add"])],
        }]
    );
}

#[test]
fn no_newline_markers_attach_to_their_side() {
    let text = "--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+c\n";
    let [hunk] = update(text).try_into().unwrap();
    assert_eq!(hunk.final_newline, FinalNewline::Stated { old: false, new: true });
    assert_eq!(apply_hunks("a\nb", std::slice::from_ref(&hunk)).unwrap(), "a\nc\n");
    // The file must lack the newline the diff says it lacks.
    assert_eq!(
        failure("a\nb\n", &[hunk]),
        (0, HunkFailureKind::NoMatch { near_miss: Some((1, Difference::LineEndings)) })
    );

    let text = "--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+b\n\\ Kein Zeilenumbruch am Dateiende.\n";
    assert_eq!(apply_hunks("a\n", &update(text)).unwrap(), "b");
    let text = "--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n-a\n+b\n c\n\\ No newline at end of file\n";
    assert_eq!(apply_hunks("a\nc", &update(text)).unwrap(), "b\nc");
    // A marker before more lines of its side, or with nothing before it.
    let text = "--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n-a\n\\ No newline at end of file\n-b\n+c\n+d\n";
    assert_eq!(error(text, Format::Unified), (6, ParseErrorKind::MisplacedNoNewline));
    let text = "--- a/f\n+++ b/f\n@@ -1 +1 @@\n\\ No newline at end of file\n-a\n+b\n";
    assert_eq!(error(text, Format::Unified), (4, ParseErrorKind::MisplacedNoNewline));
}

#[test]
fn hunk_counts_must_match_their_header() {
    let short = "--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n a\n-b\n+c\ndiff --git a/g b/g\n";
    let counts = ParseErrorKind::CountMismatch { old: 3, new: 3, old_found: 2, new_found: 2 };
    assert_eq!(error(short, Format::Unified), (7, counts));
    let long = "--- a/f\n+++ b/f\n@@ -1 +1 @@\n-b\n+c\n+d\n";
    let counts = ParseErrorKind::CountMismatch { old: 1, new: 1, old_found: 1, new_found: 2 };
    assert_eq!(error(long, Format::Unified), (6, counts));
    let cut = "--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n a\n";
    assert_eq!(error(cut, Format::Unified).0, 3);
    // An empty line inside a hunk is an empty context line.
    let blank = "--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n a\n\n-b\n+c\n";
    assert_eq!(update(blank), [unified_hunk(1, &["a", "", "b"], &["a", "", "c"])]);
    for header in ["@@ -x +1 @@", "@@ -0,1 +1 @@", "@@ -1 +1"] {
        let text = format!("--- a/f\n+++ b/f\n{header}\n-a\n");
        assert_eq!(error(&text, Format::Unified), (3, ParseErrorKind::BadHunkHeader(header.into())), "{header}");
    }
}

#[test]
fn unified_refusals_name_the_file_or_the_problem() {
    let git_binary = "diff --git a/logo.png b/logo.png\nindex 1..2 100644\nGIT binary patch\nliteral 5\n";
    assert_eq!(error(git_binary, Format::Unified), (3, ParseErrorKind::Binary("logo.png".into())));
    let differ = "diff --git a/logo.png b/logo.png\nindex 1..2 100644\nBinary files a/logo.png and b/logo.png differ\n";
    assert_eq!(error(differ, Format::Unified), (3, ParseErrorKind::Binary("logo.png".into())));
    let plain = "Binary files old/x.bin and new/x.bin differ\n";
    assert_eq!(error(plain, Format::Unified), (1, ParseErrorKind::Binary("old/x.bin".into())));
    let copy = "diff --git a/x b/y\nsimilarity index 100%\ncopy from x\ncopy to y\n";
    assert!(matches!(error(copy, Format::Unified), (3, ParseErrorKind::Unsupported(_))));
    assert_eq!(error("just words\n", Format::Unified), (1, ParseErrorKind::NoFiles));
    let headless = "@@ -1 +1 @@\n-a\n+b\n";
    assert!(matches!(error(headless, Format::Unified), (1, ParseErrorKind::Expected { .. })));
    let added = "--- /dev/null\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n";
    assert_eq!(error(added, Format::Unified), (1, ParseErrorKind::AddRemovesLines("x".into())));
}

#[test]
fn similar_unified_diffs_parse_and_apply() {
    let (old, new) = ("a\nb\nc\nd\ne\nf\ng\nh\ni\nj\n", "a\nB\nc\nd\ne\nf\ng\nh\ni\nj\nk");
    let text =
        similar::TextDiff::from_lines(old, new).unified_diff().context_radius(1).header("a/x", "b/x").to_string();
    assert_eq!(apply_hunks(old, &update(&text)).unwrap(), new);
}

// Applying hunks.

#[test]
fn hunks_apply_in_order_against_the_original() {
    let file = "a\nb\nc\nd\ne\n";
    let hunks = [hunk(&["a", "b"], &["a", "B"]), hunk(&["d"], &["D", "D2"]), hunk(&["e"], &[])];
    assert_eq!(apply_hunks(file, &hunks).unwrap(), "a\nB\nc\nD\nD2\n");
    // A later hunk is searched after the previous one only.
    assert_eq!(
        failure(file, &[hunk(&["c"], &["C"]), hunk(&["a"], &["A"])]),
        (1, HunkFailureKind::NoMatch { near_miss: None })
    );
}

#[test]
fn repeated_lines_are_ambiguous_without_a_line_or_anchor() {
    let file = "x\nfn a() {\n  body\n}\nfn b() {\n  body\n}\n";
    let change = hunk(&["  body"], &["  BODY"]);
    assert_eq!(failure(file, std::slice::from_ref(&change)), (0, HunkFailureKind::Ambiguous { lines: vec![3, 6] }));
    let anchored = Hunk { anchors: lines(&["fn b() {"]), ..change.clone() };
    assert_eq!(apply_hunks(file, &[anchored]).unwrap(), "x\nfn a() {\n  body\n}\nfn b() {\n  BODY\n}\n");
    let missing = Hunk { anchors: lines(&["fn c() {"]), ..change };
    assert_eq!(failure(file, &[missing]), (0, HunkFailureKind::AnchorNotFound { anchor: "fn c() {".into() }));
}

#[test]
fn a_unified_hunk_prefers_its_stated_line_moved_by_earlier_offsets() {
    let file = "x\nbody\ny\nbody\nz\nbody\n";
    assert_eq!(apply_hunks(file, &[unified_hunk(4, &["body"], &["BODY"])]).unwrap(), "x\nbody\ny\nBODY\nz\nbody\n");
    // Two lines were inserted at the top since the diff: the first hunk is
    // found two lines down, so the second is expected two lines down too.
    let moved = format!("new\nnew\n{file}");
    let hunks = [unified_hunk(1, &["x"], &["X"]), unified_hunk(4, &["body"], &["BODY"])];
    assert_eq!(apply_hunks(&moved, &hunks).unwrap(), "new\nnew\nX\nbody\ny\nBODY\nz\nbody\n");
    // Not at the stated line and not unique: ambiguous.
    assert_eq!(
        failure(file, &[unified_hunk(3, &["body"], &["BODY"])]),
        (0, HunkFailureKind::Ambiguous { lines: vec![2, 4, 6] })
    );
}

#[test]
fn near_misses_name_the_line_and_the_difference() {
    let file = "fn main() {\n    println!(\"Hi\");\n}\n";
    let miss = |old: &[&str]| match failure(file, &[hunk(old, &["x"])]).1 {
        HunkFailureKind::NoMatch { near_miss } => near_miss,
        other => panic!("{other:?}"),
    };
    assert_eq!(miss(&["println!(\"Hi\");", "}"]), Some((2, Difference::Indentation)));
    assert_eq!(miss(&["fn  main()  {"]), Some((1, Difference::Whitespace)));
    assert_eq!(miss(&["FN MAIN() {"]), Some((1, Difference::Case)));
    assert_eq!(miss(&["}\r"]), Some((3, Difference::LineEndings)));
    assert_eq!(miss(&["nothing like it"]), None);
    // A line is never a near-miss of part of a line.
    assert_eq!(miss(&["main() {"]), None);
}

#[test]
fn end_of_file_hunks_must_end_the_file() {
    let file = "a\nb\na\nc\n";
    let eof = Hunk { end_of_file: true, ..hunk(&["a"], &["A"]) };
    assert_eq!(failure(file, &[eof]), (0, HunkFailureKind::NotAtEnd { lines: vec![1, 3] }));
    let eof = Hunk { end_of_file: true, ..hunk(&["a", "c"], &["A", "C"]) };
    assert_eq!(apply_hunks(file, &[eof]).unwrap(), "a\nb\nA\nC\n");
}

#[test]
fn crlf_files_stay_crlf() {
    let file = "\u{feff}one\r\ntwo\r\nthree\r\n";
    let hunks = [hunk(&["\u{feff}one", "two"], &["\u{feff}one", "2", "2.5"])];
    assert_eq!(apply_hunks(file, &hunks).unwrap(), "\u{feff}one\r\n2\r\n2.5\r\nthree\r\n");
    // Lines that carry their `\r` match exactly, in a file of mixed endings too.
    let mixed = "a\r\nb\nc\r\n";
    assert_eq!(apply_hunks(mixed, &[hunk(&["b", "c\r"], &["B", "c\r"])]).unwrap(), "a\r\nB\nc\r\n");
    // Written without `\r`, the lines match only CRLF lines, and are written with CRLF.
    assert_eq!(apply_hunks(mixed, &[hunk(&["c"], &["C"])]).unwrap(), "a\r\nb\nC\r\n");
    assert_eq!(
        failure(mixed, &[hunk(&["b\r"], &["B"])]).1,
        HunkFailureKind::NoMatch { near_miss: Some((2, Difference::LineEndings)) }
    );
}

#[test]
fn final_newlines_are_kept_by_apply_patch_and_stated_by_unified_diffs() {
    // `apply_patch` cannot say: the file keeps its own.
    assert_eq!(apply_hunks("a\nb", &[hunk(&["b"], &["c", "d"])]).unwrap(), "a\nc\nd");
    assert_eq!(apply_hunks("a\nb\n", &[hunk(&["b"], &["c"])]).unwrap(), "a\nc\n");
    let append = Hunk { end_of_file: true, ..hunk(&[], &["c"]) };
    assert_eq!(apply_hunks("a\r\nb", std::slice::from_ref(&append)).unwrap(), "a\r\nb\r\nc");
    assert_eq!(apply_hunks("", &[append]).unwrap(), "c\n");
    // Removing the last line leaves the line before it as it was.
    assert_eq!(apply_hunks("a\nb", &[hunk(&["b"], &[])]).unwrap(), "a\n");
    // A unified insertion after the last line says that line has a newline.
    assert_eq!(apply_hunks("a\n", &[unified_hunk(2, &[], &["b"])]).unwrap(), "a\nb\n");
    assert_eq!(
        failure("a", &[unified_hunk(2, &[], &["b"])]),
        (0, HunkFailureKind::NoMatch { near_miss: Some((1, Difference::LineEndings)) })
    );
}

#[test]
fn insertions_need_a_place() {
    assert_eq!(failure("a\n", &[hunk(&[], &["b"])]), (0, HunkFailureKind::Unplaced));
    assert_eq!(apply_hunks("a\nb\n", &[unified_hunk(2, &[], &["between"])]).unwrap(), "a\nbetween\nb\n");
    assert_eq!(apply_hunks("a\n", &[unified_hunk(1, &[], &["first"])]).unwrap(), "first\na\n");
    assert_eq!(
        failure("a\n", &[unified_hunk(5, &[], &["far"])]),
        (0, HunkFailureKind::LineOutOfRange { line: 5, first: 1, last: 2 })
    );
}

// Properties, shared with the fuzz target.

/// Text of lines from a small alphabet, so hunks repeat; some lines look
/// like patch syntax; endings are LF, CRLF, or all CRLF.
fn text() -> impl Strategy<Value = String> {
    text_of(true)
}

/// Text as [`text`] makes it; with `lone_cr`, a line may hold a lone `\r`.
fn text_of(lone_cr: bool) -> impl Strategy<Value = String> {
    let mut alphabet = vec![
        "a",
        "b",
        "a b",
        "",
        " ",
        "\tb",
        "A",
        "é😀",
        "*** End Patch",
        "*** End of File",
        "@@ x",
        "--- a",
        "+++ b",
        "-- ",
        "\\ x",
    ];
    if lone_cr {
        alphabet.push("x\ry");
    }
    let line = prop::sample::select(alphabet);
    let ending = prop::sample::select(vec!["\n", "\n", "\r\n"]);
    (prop::collection::vec((line, ending), 0..12), any::<bool>(), any::<bool>()).prop_map(|(lines, crlf, last)| {
        let mut text: String =
            lines.iter().map(|(line, ending)| format!("{line}{}", if crlf { "\r\n" } else { ending })).collect();
        if last && text.ends_with('\n') {
            text.pop();
            if text.ends_with('\r') {
                text.pop();
            }
        }
        text
    })
}

/// Text that mixes the syntax of both patch formats.
fn patch_text() -> impl Strategy<Value = String> {
    let part = prop::sample::select(vec![
        "*** Begin Patch\n",
        "*** End Patch\n",
        "*** Add File: a\n",
        "*** Update File: a\n",
        "*** Delete File: a\n",
        "*** Move to: b\n",
        "*** End of File\n",
        "@@\n",
        "@@ a\n",
        "diff --git a/a b/a\n",
        "--- a/a\n",
        "+++ b/a\n",
        "--- /dev/null\n",
        "new file mode 100644\n",
        "rename from a\n",
        "@@ -1 +1 @@\n",
        "@@ -1,2 +0,0 @@\n",
        "@@ -0,0 +1 @@\n",
        "\\ No newline at end of file\n",
        " a\n",
        "-a\n",
        "+b\n",
        "-b\n",
        "\n",
        "\r\n",
        "\"",
        "a",
    ]);
    prop::collection::vec(part, 0..16).prop_map(|parts| parts.concat())
}

/// `similar`'s own unified diff of two texts.
fn similar_diff(old: &str, new: &str, context: usize) -> String {
    similar::TextDiff::from_lines(old, new).unified_diff().context_radius(context).header("a/f", "b/f").to_string()
}

proptest! {
    #[test]
    fn both_formats_round_trip_a_diff(old in text(), new in text(), context in 0u8..6) {
        check_patch_round_trip(&old, &new, context);
    }

    #[test]
    fn similars_own_unified_diffs_round_trip(old in text_of(false), new in text_of(false), context in 0usize..4) {
        // `similar` splits lines at a lone `\r` too, so its diff of such text
        // is not a diff of lines. A file all CRLF gets CRLF lines.
        prop_assume!(old != new);
        let crlf_only = old.contains("\r\n") && !old.replace("\r\n", "").contains('\n');
        let expected = if crlf_only { new.replace("\r\n", "\n").replace('\n', "\r\n") } else { new.clone() };
        let text = similar_diff(&old, &new, context);
        prop_assert_eq!(apply_hunks(&old, &update(&text)), Ok(expected), "{}", text);
    }

    #[test]
    fn a_diff_applied_to_any_file_keeps_the_promises(old in text_of(false), new in text_of(false), other in text()) {
        let text = similar_diff(&old, &new, 1);
        check_patch_apply(&other, &text);
        check_patch_apply(&old, &text);
    }

    #[test]
    fn parsing_arbitrary_text_never_panics(input in patch_text()) {
        check_patch_parse(&input);
    }

    #[test]
    fn applying_arbitrary_patches_never_panics(original in text(), patch in patch_text()) {
        check_patch_apply(&original, &patch);
    }

    #[test]
    fn parsing_arbitrary_strings_never_panics(input in ".{0,200}") {
        check_patch_parse(&input);
    }
}
