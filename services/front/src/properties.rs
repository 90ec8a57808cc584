//! The invariants the parsers and engines promise, as executable checks.
//!
//! Each `check_*` function takes arbitrary input, runs the code under test on
//! it and panics when a promise is broken: a panic inside the code, a result
//! that does not round-trip, a refusal that names the wrong reason. The
//! property tests in `properties/tests.rs` call them with generated input on
//! stable Rust; the `cargo fuzz` targets under `fuzz/` call them with
//! coverage-guided input. Both sides therefore test the same properties.
//!
//! | check                        | code under test                                   |
//! |------------------------------|---------------------------------------------------|
//! | [`check_path_parse`]         | [`SpacePath::parse`] and its navigation           |
//! | [`check_reference_parse`]    | [`Reference::parse`] and [`reference::uri`]       |
//! | [`check_glob`]               | [`Glob::new`] and [`Glob::matches`]               |
//! | [`check_page_token`]         | [`PageToken::decode`]                             |
//! | [`check_page_token_fields`]  | [`PageToken::encode`] / [`PageToken::decode`]     |
//! | [`check_edit`]               | [`edit::apply`]                                   |
//! | [`check_patch_parse`]        | [`patch::parse`] in both formats                  |
//! | [`check_patch_apply`]        | [`patch::parse`] then [`patch::apply_hunks`]      |
//! | [`check_patch_round_trip`]   | both formats generated from a diff, then applied  |
//! | [`check_utf16_offsets`]      | the UTF-16 offset functions of [`text`]           |
//! | [`check_slice`]              | [`text::slice`] and [`TextMeta::analyze`]         |
//! | [`check_token_slice`]        | [`text::Slice::within_tokens`] after a slice      |
//! | [`check_request_decode`]     | decoding every request message, and its status    |

use agentvfs_proto::v1 as pb;
use prost::Message;
use tonic_types::StatusExt;
use unicode_normalization::{UnicodeNormalization, is_nfc};

use crate::edit::{self, EditOp, FailureKind};
use crate::error::Reason;
use crate::glob::{Glob, GlobError, MAX_GLOB_BYTES};
use crate::ids::{NodeId, SpaceId};
use crate::page_token::PageToken;
use crate::patch::{self, FileChange, FinalNewline, Format, HunkFailureKind};
use crate::path::{MAX_DEPTH, MAX_PATH_BYTES, MAX_SEGMENT_BYTES, PathError, SpacePath};
use crate::reference::{self, ITEM_PREFIX, Reference, SPACE_PREFIX, URI_PREFIX};
use crate::text::tokens::{MIN_MAX_TOKENS, TokenBudget, Tokenizer};
use crate::text::{self, SliceRequest, TextMeta};

/// Asserts every invariant of a parsed path.
fn assert_valid_path(path: &SpacePath) {
    let s = path.as_str();
    assert!(s.starts_with('/'), "{s:?} is not absolute");
    assert!(s.len() <= MAX_PATH_BYTES, "{s:?} is too long");
    assert!(is_nfc(s), "{s:?} is not NFC");
    assert!(!s.contains('\\') && !s.chars().any(char::is_control), "{s:?} has a forbidden character");
    if path.is_root() {
        assert_eq!(s, "/");
        assert_eq!(path.depth(), 0);
        assert_eq!(path.parent(), None);
        assert_eq!(path.name(), "");
        return;
    }
    let segments: Vec<&str> = s[1..].split('/').collect();
    for segment in &segments {
        assert!(!matches!(*segment, "" | "." | ".."), "{s:?} has an empty, `.` or `..` segment");
        assert!(segment.len() <= MAX_SEGMENT_BYTES, "{s:?} has a segment that is too long");
    }
    assert!(segments.len() <= MAX_DEPTH, "{s:?} is too deep");
    assert_eq!(path.depth(), segments.len(), "depth of {s:?}");
    assert_eq!(path.name(), *segments.last().unwrap_or(&""), "name of {s:?}");
    let parent = path.parent().unwrap_or_else(|| panic!("{s:?} has no parent"));
    assert_eq!(parent.join(path.name()).as_ref(), Ok(path), "parent + name of {s:?}");
    assert!(path.starts_with(&parent) && path.starts_with(path) && path.starts_with(&SpacePath::root()));
    assert!(!parent.starts_with(path), "{s:?} lies below its own parent");
    let ancestors = path.ancestors();
    assert_eq!(ancestors.len(), segments.len() - 1, "ancestors of {s:?}");
    for (depth, ancestor) in ancestors.iter().enumerate() {
        assert_eq!(ancestor.depth(), depth + 1);
        assert!(path.starts_with(ancestor), "{s:?} does not start with its ancestor {ancestor:?}");
        assert_eq!(ancestor.join(path.relative_to(ancestor)).as_ref(), Ok(path), "{s:?} below {ancestor:?}");
    }
    assert_eq!(path.relative_to(&SpacePath::root()), &s[1..]);
    assert_eq!(path.relative_to(path), "");
}

/// [`SpacePath::parse`]: never panics; an accepted path satisfies every
/// invariant of [`SpacePath`], displays as itself and parses back to itself
/// (normalization is idempotent), so no `..` ever survives; a refusal names
/// a reason the input actually has.
pub fn check_path_parse(input: &str) {
    match SpacePath::parse(input) {
        Ok(path) => {
            assert_valid_path(&path);
            assert_eq!(path.to_string(), path.as_str());
            assert_eq!(SpacePath::parse(path.as_str()).as_ref(), Ok(&path), "normalizing {path:?} again changed it");
            if input.len() <= MAX_PATH_BYTES {
                // Both spellings stay far below the cheap length guard.
                assert_eq!(SpacePath::parse(&format!("/{input}/")).as_ref(), Ok(&path), "slashes around {input:?}");
                assert_eq!(SpacePath::parse(&format!("./{input}/.")).as_ref(), Ok(&path), "dots around {input:?}");
                let nfd: String = input.nfd().collect();
                assert_eq!(SpacePath::parse(&nfd).as_ref(), Ok(&path), "NFD spelling of {input:?}");
            }
        }
        Err(PathError::ControlCharacter) => assert!(input.chars().any(char::is_control), "{input:?}"),
        Err(PathError::Backslash) => assert!(input.contains('\\'), "{input:?}"),
        Err(PathError::Traversal) => {
            assert!(input.nfc().collect::<String>().split('/').any(|s| s == ".."), "{input:?} refused as traversal");
        }
        Err(PathError::SegmentTooLong) => {
            let normalized: String = input.nfc().collect();
            assert!(normalized.split('/').any(|s| s.len() > MAX_SEGMENT_BYTES), "{input:?}");
        }
        Err(PathError::TooLong) => {
            let normalized: String = input.nfc().collect();
            assert!(normalized.len() >= MAX_PATH_BYTES || input.len() > 4 * MAX_PATH_BYTES, "{input:?}");
        }
        Err(PathError::TooDeep) => {
            let normalized: String = input.nfc().collect();
            let segments = normalized.split('/').filter(|s| !matches!(*s, "" | ".")).count();
            assert!(segments > MAX_DEPTH, "{input:?} refused as too deep");
        }
    }
}

/// [`Reference::parse`]: never panics; every accepted reference prints back
/// (as an ID, a URI or a path) to text that parses to the same reference; a
/// URI's path has no more segments than its encoded form, so an encoded
/// `/` or `..` can never change the path's structure.
pub fn check_reference_parse(input: &str) {
    let Ok(parsed) = Reference::parse(input) else {
        return;
    };
    match &parsed {
        Reference::Item(node) => {
            let text = format!("{ITEM_PREFIX}{node}");
            assert_eq!(Reference::parse(&text), Ok(Reference::Item(*node)), "{input:?}");
            assert_eq!(node.to_string().parse::<NodeId>(), Ok(*node));
        }
        Reference::SpaceRoot(space) => {
            let text = format!("{SPACE_PREFIX}{space}");
            assert_eq!(Reference::parse(&text), Ok(Reference::SpaceRoot(*space)), "{input:?}");
            assert_eq!(space.to_string().parse::<SpaceId>(), Ok(*space));
        }
        Reference::Uri(space, path) => {
            assert_valid_path(path);
            assert_eq!(Reference::parse(&reference::uri(*space, path)).as_ref(), Ok(&parsed), "{input:?}");
            let rest = &input[URI_PREFIX.len()..];
            let encoded = rest.split_once('/').map_or("", |(_, encoded)| encoded);
            let raw_segments = encoded.split('/').filter(|s| !s.is_empty()).count();
            assert!(path.depth() <= raw_segments, "{input:?} decoded to the deeper {path:?}");
        }
        Reference::Absolute(path) | Reference::Relative(path) => {
            assert_valid_path(path);
            assert_eq!(SpacePath::parse(input).as_ref(), Ok(path), "{input:?}");
            assert_eq!(Reference::parse(path.as_str()), Ok(Reference::Absolute(path.clone())), "{input:?}");
            assert_eq!(matches!(parsed, Reference::Absolute(_)), input.is_empty() || input.starts_with('/'));
            // Any path can be named by URI in any space.
            let space = SpaceId::from_bytes([7; 16]);
            assert_eq!(
                Reference::parse(&reference::uri(space, path)),
                Ok(Reference::Uri(space, path.clone())),
                "URI of {path:?}"
            );
        }
    }
}

/// Whether `pattern` has no glob syntax at all.
fn is_literal(pattern: &str) -> bool {
    !pattern.contains(['*', '?', '[', ']', '{', '}', '\\', ','])
}

/// [`Glob::new`] and [`Glob::matches`]: never panic; overlong patterns are
/// refused; a pattern without `/` matches base names at any depth and below
/// any root; a pattern with `/` but without `**`, classes or alternations
/// only matches paths with as many segments as it has, because `*` and `?`
/// never cross a `/`; a literal pattern matches exactly its own text.
pub fn check_glob(pattern: &str, paths: &[&str]) {
    let glob = match Glob::new(pattern) {
        Ok(glob) => glob,
        Err(GlobError::TooLong) => {
            assert!(pattern.len() > MAX_GLOB_BYTES, "{pattern:?} refused as too long");
            return;
        }
        Err(GlobError::Invalid(_)) => {
            assert!(pattern.len() <= MAX_GLOB_BYTES);
            return;
        }
    };
    assert!(pattern.len() <= MAX_GLOB_BYTES, "{pattern:?} accepted though too long");
    assert_eq!(glob.as_str(), pattern);
    let root = SpacePath::root();
    let elsewhere = SpacePath::parse("/elsewhere/deeper").unwrap_or_else(|e| unreachable!("{e}"));
    let trimmed = pattern.trim_start_matches('/');
    // Patterns are brought to NFC like paths, so a literal matches the
    // paths canonically equal to it: NFC may reorder combining marks.
    let canonical: String = pattern.nfc().collect();
    let canonical_trimmed: String = trimmed.nfc().collect();
    for path in paths.iter().filter_map(|p| SpacePath::parse(p).ok()).filter(|p| !p.is_root()) {
        let matched = glob.matches(&root, &path);
        if !pattern.contains('/') {
            let moved = elsewhere.join(path.name()).unwrap_or_else(|e| unreachable!("{e}"));
            assert_eq!(glob.matches(&elsewhere, &moved), matched, "{pattern:?} on {path:?} and {moved:?}");
            if is_literal(pattern) {
                assert_eq!(matched, path.name() == canonical, "literal {pattern:?} on {path:?}");
            }
        } else {
            if matched && !trimmed.contains("**") && !trimmed.contains(['[', '{', '\\']) {
                let relative = path.relative_to(&root);
                assert_eq!(relative.matches('/').count(), trimmed.matches('/').count(), "{pattern:?} on {path:?}");
            }
            if is_literal(pattern) {
                assert_eq!(matched, path.relative_to(&root) == canonical_trimmed, "literal {pattern:?} on {path:?}");
            }
            // Matching is relative: the same path below another root matches alike.
            let relative = path.relative_to(&root);
            if let Ok(moved) = elsewhere.join(relative) {
                assert_eq!(glob.matches(&elsewhere, &moved), matched, "{pattern:?} on {path:?} below {elsewhere:?}");
            }
        }
    }
}

/// [`PageToken::decode`] on any text: never panics; every refusal is
/// `CURSOR_INVALID`; an accepted token belongs to `fingerprint`, is refused
/// for any other fingerprint, and is exactly the token the server would
/// issue for its contents: each position has one spelling, so no padding,
/// trailing bytes or over-long numbers ride along.
pub fn check_page_token(token: &str, fingerprint: [u8; 16]) {
    match PageToken::decode(token, fingerprint) {
        Ok(decoded) => {
            assert_eq!(decoded.fingerprint, fingerprint);
            assert_eq!(decoded.encode(), token, "an accepted token is not canonical");
            for bit in [0, 7, 64, 127] {
                let mut other = fingerprint;
                other[bit / 8] ^= 1 << (bit % 8);
                let refused = PageToken::decode(token, other).expect_err("accepted with another fingerprint");
                assert_eq!(refused.reason, Reason::CursorInvalid);
            }
        }
        Err(error) => assert_eq!(error.reason, Reason::CursorInvalid, "{token:?}"),
    }
}

/// [`PageToken::encode`] then [`PageToken::decode`]: the token comes back
/// unchanged for its own fingerprint and is refused for `other`, unless
/// `other` is the same fingerprint.
pub fn check_page_token_fields(token: &PageToken, other: [u8; 16]) {
    let encoded = token.encode();
    assert_eq!(PageToken::decode(&encoded, token.fingerprint).as_ref(), Ok(token));
    let with_other = PageToken::decode(&encoded, other);
    if other == token.fingerprint {
        assert_eq!(with_other.as_ref(), Ok(token));
    } else {
        assert_eq!(with_other.map_err(|e| e.reason), Err(Reason::CursorInvalid));
    }
    check_page_token(&encoded, token.fingerprint);
}

/// Whether a file has CRLF terminators only (and at least one).
fn crlf_only(text: &str) -> bool {
    let crlf = text.matches("\r\n").count();
    crlf > 0 && crlf == text.matches('\n').count()
}

/// [`edit::apply`]: never panics; a failure names an edit that exists; a
/// success reports one count per edit; a CRLF file stays CRLF and a BOM
/// stays, unless an edit's `old_text` names a CR or the BOM itself; a
/// single `replace_all` (or a replace whose expected count is right) equals
/// `str::replace`, whenever no line ending has to be converted.
pub fn check_edit(original: &str, edits: &[EditOp]) {
    let result = edit::apply(original, edits);
    let names = |op: &EditOp, c: char| match op {
        EditOp::Replace { old_text, .. } => old_text.contains(c),
        // A `lines` edit names its lines' terminators, so only the BOM counts.
        EditOp::Lines { old_text, .. } => c == '\u{feff}' && old_text.contains(c),
        EditOp::Append { .. } => false,
    };
    match &result {
        Ok((out, counts)) => {
            assert_eq!(counts.len(), edits.len());
            if crlf_only(original) && !edits.iter().any(|op| names(op, '\r')) {
                assert!(!out.replace("\r\n", "").contains('\n'), "{original:?} lost CRLF: {out:?}");
            }
            if original.starts_with(text::BOM) && !edits.iter().any(|op| names(op, '\u{feff}')) {
                assert!(out.starts_with(text::BOM), "{original:?} lost its BOM: {out:?}");
            }
            for (op, count) in edits.iter().zip(counts) {
                match op {
                    EditOp::Replace { replace_all: false, expected_matches, .. } => {
                        assert_eq!(count, expected_matches);
                    }
                    EditOp::Replace { replace_all: true, .. } => assert!(*count >= 1),
                    EditOp::Append { .. } | EditOp::Lines { .. } => assert_eq!(*count, 1),
                }
            }
        }
        Err(failure) => {
            assert!(failure.index < edits.len(), "{failure:?}");
            let line_count = original.lines().count() as u64 + 1;
            match &failure.kind {
                FailureKind::Ambiguous { expected, count, lines } => {
                    assert_ne!(expected, count);
                    assert!(lines.len() <= *count as usize);
                    assert!(lines.windows(2).all(|w| w[0] <= w[1]), "{lines:?}");
                    assert!(lines.iter().all(|&l| l >= 1), "{lines:?}");
                }
                FailureKind::BadRange { start_line, end_line, line_count } => {
                    assert!(*start_line == 0 || end_line < start_line || end_line > line_count);
                }
                FailureKind::NoMatch { near_miss: Some((line, _)) } if failure.index == 0 => {
                    assert!((1..=line_count).contains(line), "near-miss line {line} of {line_count}");
                }
                _ => {}
            }
        }
    }
    if let [EditOp::Replace { old_text, new_text, expected_matches, replace_all }] = edits {
        let count = original.matches(old_text.as_str()).count();
        let converts = new_text.contains('\n') && (crlf_only(original) || old_text.contains("\r\n"));
        let valid = !old_text.is_empty() && old_text != new_text && count > 0;
        if valid && !converts && (*replace_all || count == *expected_matches as usize) {
            let expected = original.replace(old_text.as_str(), new_text);
            assert_eq!(result, Ok((expected, vec![count as u32])), "{original:?}: {old_text:?} → {new_text:?}");
        } else if valid && !*replace_all && count != *expected_matches as usize {
            assert!(matches!(result, Err(edit::EditFailure { kind: FailureKind::Ambiguous { .. }, .. })));
        }
    }
}

/// [`patch::parse`] on any text, in both formats: never panics; a refusal
/// names a line of the text; an accepted patch has a path for every change
/// and no empty hunk, and its hunks have the shape of their format.
pub fn check_patch_parse(input: &str) {
    let line_count = input.strip_suffix('\n').unwrap_or(input).split('\n').count();
    for format in [Format::ApplyPatch, Format::Unified] {
        let parsed = match patch::parse(input, format) {
            Ok(parsed) => parsed,
            Err(error) => {
                assert!((1..=line_count).contains(&error.line), "{format:?} {input:?}: {error}");
                continue;
            }
        };
        for change in &parsed.files {
            assert!(!change.path().is_empty(), "{format:?} {input:?}: {change:?}");
            let FileChange::Update { move_to, hunks, .. } = change else { continue };
            assert!(move_to.as_ref().is_none_or(|to| !to.is_empty()));
            assert!(!hunks.is_empty() || move_to.is_some(), "{format:?} {input:?}: an empty update");
            for hunk in hunks {
                assert!(!hunk.old.is_empty() || !hunk.new.is_empty(), "{format:?} {input:?}: an empty hunk");
                assert!(hunk.old.iter().chain(&hunk.new).all(|line| !line.contains('\n')));
                match format {
                    Format::ApplyPatch => {
                        assert_eq!((hunk.line, hunk.final_newline), (None, FinalNewline::Keep));
                        assert!(!hunk.old.is_empty() || !hunk.anchors.is_empty() || hunk.end_of_file);
                    }
                    Format::Unified => {
                        assert!(hunk.anchors.is_empty() && !hunk.end_of_file);
                        assert!(hunk.line.is_some_and(|line| line >= 1), "{input:?}: {hunk:?}");
                    }
                }
            }
        }
    }
}

/// [`patch::apply_hunks`] of any patch to any text: never panics; a failure
/// names a hunk that exists and lines of the file; a success of a unified
/// diff on a file without `\r` is undone by the reversed diff, whenever
/// that applies.
pub fn check_patch_apply(original: &str, patch_text: &str) {
    let Ok(parsed) = patch::parse(patch_text, Format::detect(patch_text)) else {
        return;
    };
    let line_count = original.lines().count() as u64;
    for change in &parsed.files {
        let FileChange::Update { hunks, .. } = change else { continue };
        let failure = match patch::apply_hunks(original, hunks) {
            Ok(out) => {
                let unified = hunks.iter().all(|hunk| hunk.line.is_some());
                if unified && !original.contains('\r') && !out.contains('\r') {
                    let reversed: Vec<patch::Hunk> = hunks.iter().map(reverse).collect();
                    if let Ok(back) = patch::apply_hunks(&out, &reversed) {
                        assert_eq!(back, original, "{patch_text:?} reversed on {out:?}");
                    }
                }
                continue;
            }
            Err(failure) => failure,
        };
        assert!(failure.index < hunks.len(), "{failure:?}");
        let in_file = |line: &u64| (1..=line_count + 1).contains(line);
        match &failure.kind {
            HunkFailureKind::Ambiguous { lines } => {
                assert!(lines.len() >= 2 && lines.windows(2).all(|w| w[0] < w[1]), "{lines:?}");
                assert!(lines.iter().all(in_file), "{lines:?} of {line_count}");
            }
            HunkFailureKind::NotAtEnd { lines } => {
                assert!(!lines.is_empty() && lines.iter().all(in_file), "{lines:?} of {line_count}");
            }
            HunkFailureKind::NoMatch { near_miss: Some((line, _)) } => assert!(in_file(line), "{line} of {line_count}"),
            HunkFailureKind::LineOutOfRange { line, first, last } => {
                assert!(line < first || line > last, "{failure:?}");
                assert!(*last <= line_count + 1, "{failure:?}");
            }
            _ => {}
        }
    }
}

/// A hunk that undoes `hunk`, placed by its lines alone.
fn reverse(hunk: &patch::Hunk) -> patch::Hunk {
    let final_newline = match hunk.final_newline {
        FinalNewline::Stated { old, new } => FinalNewline::Stated { old: new, new: old },
        FinalNewline::Keep => FinalNewline::Keep,
    };
    patch::Hunk { old: hunk.new.clone(), new: hunk.old.clone(), line: None, final_newline, ..hunk.clone() }
}

/// A file's lines for diffing: split after each `\n`, so a lone `\r` stays
/// inside its line (`similar`'s own line splitting would break there).
fn diff_lines(text: &str) -> Vec<&str> {
    text.split_inclusive('\n').collect()
}

/// The groups of changes from `old` to `new`, each with `context` lines
/// around it: (old range, new range, lines with their sign).
type Group<'a> = (std::ops::Range<usize>, std::ops::Range<usize>, Vec<(char, &'a str)>);

fn diff_groups<'a>(old: &[&'a str], new: &[&'a str], context: usize) -> Vec<Group<'a>> {
    let ops = similar::capture_diff_slices(similar::Algorithm::Myers, old, new);
    let mut groups = Vec::new();
    for ops in similar::group_diff_ops(ops, context) {
        let (Some(first), Some(last)) = (ops.first(), ops.last()) else { continue };
        let old_range = first.old_range().start..last.old_range().end;
        let new_range = first.new_range().start..last.new_range().end;
        let mut lines = Vec::new();
        for op in &ops {
            let (tag, old_lines, new_lines) = op.as_tag_tuple();
            match tag {
                similar::DiffTag::Equal => lines.extend(old[old_lines].iter().map(|l| (' ', *l))),
                similar::DiffTag::Delete => lines.extend(old[old_lines].iter().map(|l| ('-', *l))),
                similar::DiffTag::Insert => lines.extend(new[new_lines].iter().map(|l| ('+', *l))),
                similar::DiffTag::Replace => {
                    lines.extend(old[old_lines].iter().map(|l| ('-', *l)));
                    lines.extend(new[new_lines].iter().map(|l| ('+', *l)));
                }
            }
        }
        groups.push((old_range, new_range, lines));
    }
    groups
}

/// A `git diff` of one file from `old` to `new`.
fn unified_text(old: &str, new: &str, context: usize) -> String {
    let (old_lines, new_lines) = (diff_lines(old), diff_lines(new));
    let range =
        |r: &std::ops::Range<usize>| format!("{},{}", if r.is_empty() { r.start } else { r.start + 1 }, r.len());
    let mut text = String::from("diff --git a/file.txt b/file.txt\n--- a/file.txt\n+++ b/file.txt\n");
    for (old_range, new_range, lines) in diff_groups(&old_lines, &new_lines, context) {
        text.push_str(&format!("@@ -{} +{} @@\n", range(&old_range), range(&new_range)));
        for (sign, line) in lines {
            text.push(sign);
            match line.strip_suffix('\n') {
                Some(line) => text.push_str(&format!("{line}\n")),
                None => text.push_str(&format!("{line}\n\\ No newline at end of file\n")),
            }
        }
    }
    text
}

/// An `apply_patch` update of one file from `old` to `new`; `None` when
/// `context` is 0 and an insertion has no context to place it.
fn apply_patch_text(old: &str, new: &str, context: usize) -> Option<String> {
    let (old_lines, new_lines) = (diff_lines(old), diff_lines(new));
    let mut text = String::from("*** Begin Patch\n*** Update File: file.txt\n");
    for (old_range, _, lines) in diff_groups(&old_lines, &new_lines, context) {
        let at_end = old_range.end == old_lines.len();
        if old_range.is_empty() && !at_end {
            return None;
        }
        text.push_str("@@\n");
        for (sign, line) in lines {
            text.push(sign);
            text.push_str(line.strip_suffix('\n').unwrap_or(line));
            text.push('\n');
        }
        if at_end {
            text.push_str("*** End of File\n");
        }
    }
    text.push_str("*** End Patch\n");
    Some(text)
}

/// `text` with each bare `\n` written as CRLF.
fn with_crlf(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.split_inclusive('\n') {
        match line.strip_suffix('\n') {
            Some(body) if !body.ends_with('\r') => {
                out.push_str(body);
                out.push_str("\r\n");
            }
            _ => out.push_str(line),
        }
    }
    out
}

/// The hunks of a one-file patch that updates `file.txt`.
fn update_hunks(text: &str, format: Format) -> Vec<patch::Hunk> {
    let parsed = patch::parse(text, format).unwrap_or_else(|e| panic!("{text:?}: {e}"));
    match <[FileChange; 1]>::try_from(parsed.files) {
        Ok([FileChange::Update { path, move_to: None, hunks }]) if path == "file.txt" => hunks,
        other => panic!("{text:?} parsed to {other:?}"),
    }
}

/// A diff from `old` to `new`, written as a unified diff and as an
/// `apply_patch` patch (with `context` lines, and with the whole file as
/// context), parses and applies to `old` to give `new` exactly, with two
/// exceptions the formats call for: the lines a patch writes into a file
/// whose lines all end with CRLF end with CRLF; and `apply_patch`, which
/// cannot state a final newline, keeps `old`'s. With little context an
/// `apply_patch` hunk may only fail as ambiguous, listing its true place.
pub fn check_patch_round_trip(old: &str, new: &str, context: u8) {
    if old == new {
        return;
    }
    let context = usize::from(context % 6);
    let convert = |text: &str| if crlf_only(old) { with_crlf(text) } else { text.to_owned() };

    let unified = unified_text(old, new, context);
    let applied = patch::apply_hunks(old, &update_hunks(&unified, Format::Unified));
    assert_eq!(applied.as_deref(), Ok(convert(new).as_str()), "{unified}");

    // `apply_patch` keeps `old`'s final newline: the last line `new` ends
    // with takes `old`'s ending, unless nothing is left.
    let old_newline = old.is_empty() || old.ends_with('\n');
    let expected = match (old_newline, new.ends_with('\n') || new.is_empty()) {
        (true, false) => format!("{new}\n"),
        (false, true) => new.strip_suffix('\n').unwrap_or(new).to_owned(),
        _ => new.to_owned(),
    };
    let expected = convert(&expected);
    let whole = diff_lines(old).len() + diff_lines(new).len() + 1;
    for context in [context.max(1), whole] {
        let Some(text) = apply_patch_text(old, new, context) else { continue };
        match patch::apply_hunks(old, &update_hunks(&text, Format::ApplyPatch)) {
            Ok(out) => assert_eq!(out, expected, "{text}"),
            Err(failure) => {
                assert!(context < whole, "{text}: {failure:?}");
                let HunkFailureKind::Ambiguous { lines } = &failure.kind else { panic!("{text}: {failure:?}") };
                assert!(lines.len() >= 2, "{text}: {failure:?}");
            }
        }
    }
}

/// The UTF-16 offset functions of [`text`], against the standard library's
/// UTF-16 encoder: [`text::utf16_len`] counts code units; a UTF-16 offset
/// maps to a byte offset exactly when it lies on a character boundary, and
/// that byte offset maps back to the same UTF-16 offset; offsets inside a
/// surrogate pair or past the end are refused; [`text::prefix_within_utf16`]
/// takes the longest prefix within its budget.
pub fn check_utf16_offsets(text: &str, units: u64) {
    let encoded: Vec<u16> = text.encode_utf16().collect();
    let len = encoded.len() as u64;
    assert_eq!(text::utf16_len(text), len, "{text:?}");
    let inside_pair = units < len && (0xdc00..0xe000).contains(&encoded[units as usize]);
    match text::byte_offset_of_utf16(text, units) {
        Some(byte) => {
            assert!(units <= len && !inside_pair, "{text:?} at {units}: accepted");
            assert!(text.is_char_boundary(byte), "{text:?} at {units}: byte {byte} is not a boundary");
            assert_eq!(text::utf16_len(&text[..byte]), units, "{text:?} at {units} → {byte}");
            assert_eq!(String::from_utf16_lossy(&encoded[..units as usize]), text[..byte]);
        }
        None => assert!(units > len || inside_pair, "{text:?} at {units}: refused"),
    }
    // Every character boundary round-trips; check the one at or before
    // `units` as a byte offset, to keep the work linear.
    let mut byte = (units as usize).min(text.len());
    while !text.is_char_boundary(byte) {
        byte -= 1;
    }
    let offset = text::utf16_len(&text[..byte]);
    assert_eq!(text::byte_offset_of_utf16(text, offset), Some(byte), "{text:?}: byte {byte} → {offset}");

    let (prefix, used) = text::prefix_within_utf16(text, units);
    assert!(text.starts_with(prefix));
    assert_eq!(used, text::utf16_len(prefix));
    assert!(used <= units, "{text:?}: prefix of {used} units within {units}");
    if let Some(next) = text[prefix.len()..].chars().next() {
        assert!(used + next.len_utf16() as u64 > units, "{text:?}: prefix within {units} stopped early");
    }
}

/// [`text::slice`] and [`TextMeta::analyze`]: following `next` from the start
/// reproduces the file exactly, never exceeds the budget and always moves
/// on; the metadata agrees with the text it describes.
pub fn check_slice(text: &str, max_lines: u64, max_chars: u64) {
    let (max_lines, max_chars) = (max_lines.clamp(1, 64), max_chars.clamp(2, 1 << 20));
    let meta = TextMeta::analyze(text.as_bytes());
    assert!(meta.is_utf8);
    assert_eq!(meta.is_text, !text.contains('\0'));
    assert_eq!(meta.bom, text.starts_with(text::BOM));
    assert_eq!(meta.line_count, text::lines_inclusive(text).count() as u64);
    if meta.is_text {
        assert_eq!(meta.utf16_len, text.encode_utf16().count() as u64);
    }
    let mut position = (1, 0);
    let mut out = String::new();
    // Each slice takes at least one character, so the walk is bounded.
    for _ in 0..=text.len() + 1 {
        let request = SliceRequest { start_line: position.0, start_char: position.1, max_lines, max_chars };
        let slice = text::slice(text, request).unwrap_or_else(|e| panic!("{text:?} at {position:?}: {e}"));
        assert!(slice.chars <= max_chars);
        assert_eq!(slice.chars, text::utf16_len(&slice.content));
        out.push_str(&slice.content);
        match slice.next {
            Some(next) => {
                assert!(next > position, "{text:?}: slice at {position:?} continues at {next:?}");
                position = next;
            }
            None => {
                assert_eq!(out, text, "following `next` did not reassemble the text");
                return;
            }
        }
    }
    panic!("{text:?}: following `next` never ended");
}

/// [`text::slice`] cut to a budget in tokens ([`text::Slice::within_tokens`]):
/// pages following `next` reassemble the text, none holds more tokens than
/// the budget, each says how many it holds, and a page ends inside a line
/// only when that line does not fit whole.
pub fn check_token_slice(text: &str, max_chars: u64, max_tokens: u64) {
    let budget = TokenBudget { tokenizer: Tokenizer::O200kBase, max: max_tokens.clamp(MIN_MAX_TOKENS, 1 << 20) };
    let max_chars = max_chars.clamp(2, 1 << 20);
    let mut position = (1, 0);
    let mut out = String::new();
    for _ in 0..=text.len() + 1 {
        let request = SliceRequest { start_line: position.0, start_char: position.1, max_lines: u64::MAX, max_chars };
        let mut slice = text::slice(text, request).unwrap_or_else(|e| panic!("{text:?} at {position:?}: {e}"));
        let whole = slice.content.clone();
        let tokens = slice.within_tokens(request, budget);
        assert!(tokens <= budget.max, "{text:?}: a page of {tokens} tokens");
        assert_eq!(tokens, budget.tokenizer.count(&slice.content));
        assert_eq!(slice.chars, text::utf16_len(&slice.content));
        assert!(!slice.content.is_empty() || text.is_empty(), "{text:?}: an empty page at {position:?}");
        if slice.content.len() < whole.len() && !slice.content.ends_with('\n') {
            assert!(!slice.content.contains('\n'), "{text:?}: a page cut inside a line that is not its first");
        }
        out.push_str(&slice.content);
        match slice.next {
            Some(next) => {
                assert!(next > position, "{text:?}: page at {position:?} continues at {next:?}");
                position = next;
            }
            None => {
                assert_eq!(out, text, "following `next` did not reassemble the text");
                return;
            }
        }
    }
    panic!("{text:?}: following `next` never ended");
}

/// Decodes `bytes` as `M`: a message round-trips through its encoding; a
/// failure becomes `INVALID_ARGUMENT` with its `ErrorInfo`.
fn check_decode<M: Message + Default + PartialEq + std::fmt::Debug>(bytes: &[u8]) {
    match M::decode(bytes) {
        Ok(message) => {
            let encoded = message.encode_to_vec();
            assert_eq!(encoded.len(), message.encoded_len());
            assert_eq!(M::decode(encoded.as_slice()).as_ref(), Ok(&message), "{}", std::any::type_name::<M>());
        }
        Err(error) => {
            let status = agentvfs_proto::codec::malformed_message(&error);
            assert_eq!(status.code(), tonic::Code::InvalidArgument, "{}", std::any::type_name::<M>());
            let info = status.get_details_error_info().unwrap_or_else(|| panic!("no ErrorInfo for {error}"));
            assert_eq!(
                (info.reason.as_str(), info.domain.as_str()),
                ("INVALID_ARGUMENT", agentvfs_proto::ERROR_DOMAIN)
            );
        }
    }
}

/// Decodes arbitrary bytes as every message a client sends: each decode
/// either succeeds with a message that re-encodes to itself or fails with a
/// clean `INVALID_ARGUMENT`; none panics.
pub fn check_request_decode(bytes: &[u8]) {
    macro_rules! each {
        ($($message:ident),* $(,)?) => {
            $(check_decode::<pb::$message>(bytes);)*
        };
    }
    each!(
        CreateSpaceRequest,
        ForkSpaceRequest,
        GetSpaceRequest,
        ListSpacesRequest,
        DeleteSpaceRequest,
        SetAccessRequest,
        SetQuotaRequest,
        RemoveRequest,
        RestoreRequest,
        RegisterFunctionsRequest,
        RestoreDefaultRequest,
        ReindexRequest,
        CompactRequest,
        ResolveRequest,
        ListRequest,
        FindRequest,
        ReadRequest,
        ReadManyRequest,
        WriteRequest,
        EditRequest,
        GrepRequest,
        SearchRequest,
        BatchRequest,
        ListVersionsRequest,
        WatchRequest,
        UploadChunk,
        DownloadRequest,
        DiffRequest,
        RevertRequest,
        AcquireLeaseRequest,
        RenewLeaseRequest,
        ReleaseLeaseRequest,
        ListLeasesRequest,
        GetContentRequest,
        IndexStatusRequest,
    );
}

#[cfg(test)]
mod tests;
