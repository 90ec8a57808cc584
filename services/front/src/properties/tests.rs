//! The shared properties, driven by generated input on stable Rust.

use proptest::prelude::*;

use super::*;
use crate::page_token::fingerprint;

/// Text that mixes path syntax, Unicode that normalizes and forbidden bytes.
fn path_text() -> impl Strategy<Value = String> {
    let parts = prop::sample::select(vec![
        "/",
        "//",
        ".",
        "..",
        "a",
        "b.md",
        "...",
        "e\u{301}",
        "\u{e9}",
        "\u{fb2c}",
        "\u{1100}\u{1161}",
        " ",
        "\\",
        "\0",
        "\n",
        "%2e",
        "%2F",
        "%",
        "😀",
        "agentvfs:",
    ]);
    prop::collection::vec(parts, 0..24).prop_map(|p| p.concat())
}

fn reference_text() -> impl Strategy<Value = String> {
    let prefix = prop::sample::select(vec![
        "",
        "agentvfs:item:nd_01ARZ3NDEKTSV4RRFFQ69G5FAV",
        "agentvfs:space:sp_01ARZ3NDEKTSV4RRFFQ69G5FAV",
        "agentvfs:item:",
        "agentvfs:space:",
        "agentvfs://sp_01ARZ3NDEKTSV4RRFFQ69G5FAV",
        "agentvfs://sp_01arz3ndektsv4rrffq69g5fav/",
        "agentvfs://",
        "agentvfs:",
    ]);
    (prefix, path_text()).prop_map(|(prefix, rest)| format!("{prefix}{rest}"))
}

fn glob_text() -> impl Strategy<Value = String> {
    let parts = prop::sample::select(vec![
        "*", "**", "?", "/", "a", "b", ".md", "[ab]", "[!a]", "{a,b}", "{,x}", "\\*", "[", "{", ",", "😀",
    ]);
    prop::collection::vec(parts, 0..10).prop_map(|p| p.concat())
}

fn file_text() -> impl Strategy<Value = String> {
    let parts = prop::sample::select(vec!["a", "b", "ab", " ", "\t", "\n", "\r\n", "\r", "😀", "\u{feff}", "A"]);
    prop::collection::vec(parts, 0..40).prop_map(|p| p.concat())
}

fn edit_text() -> impl Strategy<Value = String> {
    let parts = prop::sample::select(vec!["a", "b", "ab", " ", "\n", "\r\n", "😀", "$1", "A"]);
    prop::collection::vec(parts, 0..4).prop_map(|p| p.concat())
}

fn edit_op() -> impl Strategy<Value = EditOp> {
    prop_oneof![
        (edit_text(), edit_text(), 0u32..4, any::<bool>()).prop_map(|(old_text, new_text, expected_matches, all)| {
            EditOp::Replace { old_text, new_text, expected_matches, replace_all: all }
        }),
        edit_text().prop_map(|text| EditOp::Append { text }),
        (0u64..6, 0u64..6, edit_text(), edit_text()).prop_map(|(start_line, end_line, old_text, new_text)| {
            EditOp::Lines { start_line, end_line, old_text, new_text }
        }),
    ]
}

fn unicode_text() -> impl Strategy<Value = String> {
    let parts = prop::sample::select(vec!["a", "bc", "\n", "\r\n", "😀", "日", "\u{feff}", " ", "\0", "é"]);
    prop::collection::vec(parts, 0..40).prop_map(|p| p.concat())
}

/// Text of words, spaces, scripts that take several tokens a character,
/// and line breaks, runs of them included (a run of blank lines can be one
/// token).
fn prose() -> impl Strategy<Value = String> {
    let parts = prop::sample::select(vec!["word ", "the", " ", "   ", "日本語", "😀", "\n", "\r\n", "\n\n", "x.y()"]);
    prop::collection::vec(parts, 0..200).prop_map(|p| p.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn path_parse(input in path_text()) {
        check_path_parse(&input);
    }

    #[test]
    fn path_parse_any_string(input in any::<String>()) {
        check_path_parse(&input);
    }

    #[test]
    fn reference_parse(input in reference_text()) {
        check_reference_parse(&input);
    }

    #[test]
    fn glob(pattern in glob_text(), paths in prop::collection::vec(path_text(), 0..6)) {
        let paths: Vec<&str> = paths.iter().map(String::as_str).collect();
        check_glob(&pattern, &paths);
    }

    #[test]
    fn page_token_text(token in "[A-Za-z0-9_=+/-]{0,60}", seed in any::<[u8; 16]>()) {
        check_page_token(&token, seed);
    }

    #[test]
    fn page_token_fields(
        seed in any::<[u8; 16]>(),
        other in any::<[u8; 16]>(),
        revision in any::<u64>(),
        after in any::<String>(),
        position in any::<u64>(),
        line in any::<u64>(),
        suffix in prop::collection::vec(any::<u8>(), 0..4),
    ) {
        let token = PageToken { fingerprint: seed, revision, after, position, line };
        check_page_token_fields(&token, other);
        check_page_token_fields(&token, token.fingerprint);
        // The same token with bytes appended.
        let mut bytes = crate::store::records::encode(&token);
        bytes.extend(&suffix);
        use base64::Engine as _;
        check_page_token(&base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes), seed);
    }

    #[test]
    fn edit(file in file_text(), edits in prop::collection::vec(edit_op(), 1..4)) {
        check_edit(&file, &edits);
    }

    #[test]
    fn edit_single_replace(
        file in file_text(),
        old in edit_text(),
        new in edit_text(),
        expected_matches in 0u32..4,
        replace_all in any::<bool>(),
    ) {
        check_edit(&file, &[EditOp::Replace { old_text: old, new_text: new, expected_matches, replace_all }]);
    }

    #[test]
    fn utf16_offsets(text in unicode_text(), units in 0u64..90) {
        check_utf16_offsets(&text, units);
    }

    #[test]
    fn slice(text in unicode_text(), max_lines in 1u64..5, max_chars in 2u64..9) {
        check_slice(&text, max_lines, max_chars);
    }

    #[test]
    fn token_slice(text in prose(), max_chars in 2u64..400, max_tokens in 4u64..40) {
        check_token_slice(&text, max_chars, max_tokens);
    }

    #[test]
    fn request_decode(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
        check_request_decode(&bytes);
    }

    #[test]
    fn request_decode_of_valid_requests(path in any::<String>(), max in any::<u32>(), tail in prop::collection::vec(any::<u8>(), 0..8)) {
        let mut bytes = pb::ReadRequest { path, limit: max.into(), ..Default::default() }.encode_to_vec();
        check_request_decode(&bytes);
        bytes.extend(tail);
        check_request_decode(&bytes);
    }
}

#[test]
fn fingerprints_of_tokens_differ_by_arguments() {
    let token =
        PageToken { fingerprint: fingerprint(&["list", "/"]), revision: 1, after: "/a".into(), position: 0, line: 0 };
    check_page_token_fields(&token, fingerprint(&["list", "/b"]));
}

/// Found by the `glob` fuzz target: NFC puts combining marks in canonical
/// order, so a literal pattern spelled in another order matches the path
/// canonically equal to it (paths are NFC), not only its own spelling.
#[test]
fn a_literal_glob_matches_the_paths_canonically_equal_to_it() {
    let (pattern, path) = ("\u{34c}\u{34c}\u{34d}\u{34d}", "/\u{34d}\u{34d}\u{34c}\u{34c}");
    let glob = Glob::new(pattern).unwrap();
    let path = SpacePath::parse(path).unwrap();
    assert!(glob.matches(&SpacePath::root(), &path));
    check_glob(pattern, &["/\u{34d}\u{34d}\u{34c}\u{34c}", "/\u{34c}\u{34c}\u{34d}\u{34d}", "/\u{34d}"]);
}
