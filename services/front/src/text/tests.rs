use proptest::prelude::*;

use super::*;

fn req(start_line: u64, start_char: u64, max_lines: u64, max_chars: u64) -> SliceRequest {
    SliceRequest { start_line, start_char, max_lines, max_chars }
}

#[test]
fn classifies_text_binary_and_non_utf8() {
    let meta = TextMeta::analyze(b"a\r\nb\r\n");
    assert!(meta.is_text);
    assert_eq!(meta.line_ending, LineEnding::CrLf);
    assert_eq!(meta.line_count, 2);
    assert_eq!(TextMeta::analyze(b"a\nb").line_count, 2);
    assert_eq!(TextMeta::analyze(b"a\nb").line_ending, LineEnding::Lf);
    assert_eq!(TextMeta::analyze(b"a\r\nb\n").line_ending, LineEnding::Mixed);
    assert_eq!(TextMeta::analyze(b"").line_count, 0);
    assert_eq!(TextMeta::analyze(b"").line_ending, LineEnding::None);
    let nul = TextMeta::analyze(b"a\0b");
    assert!(nul.is_utf8 && !nul.is_text);
    let latin1 = TextMeta::analyze(b"caf\xe9");
    assert!(!latin1.is_utf8 && !latin1.is_text);
    let bom = TextMeta::analyze("\u{feff}x".as_bytes());
    assert!(bom.bom && bom.utf16_len == 2);
}

#[test]
fn counts_utf16_units() {
    assert_eq!(utf16_len("abc"), 3);
    assert_eq!(utf16_len("😀"), 2);
    assert_eq!(utf16_len("日本"), 2);
    assert_eq!(byte_offset_of_utf16("a😀b", 1), Some(1));
    assert_eq!(byte_offset_of_utf16("a😀b", 2), None);
    assert_eq!(byte_offset_of_utf16("a😀b", 3), Some(5));
    assert_eq!(byte_offset_of_utf16("a😀b", 4), Some(6));
    assert_eq!(byte_offset_of_utf16("a😀b", 5), None);
}

#[test]
fn slices_by_lines() {
    let text = "one\ntwo\r\nthree";
    let s = slice(text, req(2, 0, 1, 100)).unwrap();
    assert_eq!(s.content, "two\r\n");
    assert_eq!((s.first_line, s.last_line, s.truncated, s.next), (2, 2, false, Some((3, 0))));
    let s = slice(text, req(3, 0, 10, 100)).unwrap();
    assert_eq!((s.content.as_str(), s.next), ("three", None));
}

#[test]
fn cuts_by_budget_without_splitting_surrogates() {
    let s = slice("a😀b\n", req(1, 0, 10, 2)).unwrap();
    assert_eq!((s.content.as_str(), s.truncated, s.next), ("a", true, Some((1, 1))));
    let s = slice("a😀b\n", req(1, 1, 10, 2)).unwrap();
    assert_eq!((s.content.as_str(), s.next), ("😀", Some((1, 3))));
}

#[test]
fn refuses_bad_positions() {
    assert_eq!(slice("a\n", req(5, 0, 1, 10)), Err(SliceError::LinePastEnd { start_line: 5, total_lines: 1 }));
    assert_eq!(slice("😀\n", req(1, 1, 1, 10)), Err(SliceError::InsideSurrogatePair { line: 1, start_char: 1 }));
    assert!(matches!(slice("ab\n", req(1, 9, 1, 10)), Err(SliceError::CharPastEnd { .. })));
    assert_eq!(slice("", req(1, 0, 1, 10)).unwrap().content, "");
}

fn text_strategy() -> impl Strategy<Value = String> {
    prop::collection::vec(prop_oneof!["a", "bc", "\n", "\r\n", "😀", "日", "\u{feff}", " "], 0..60)
        .prop_map(|parts| parts.concat())
}

proptest! {
    /// Following `next` from the start reproduces the file exactly, and no
    /// slice exceeds its budget.
    #[test]
    fn following_next_reassembles_the_text(text in text_strategy(), max_lines in 1u64..5, max_chars in 2u64..9) {
        let mut position = (1, 0);
        let mut out = String::new();
        for _ in 0..10_000 {
            let s = slice(&text, req(position.0, position.1, max_lines, max_chars)).unwrap();
            prop_assert!(s.chars <= max_chars);
            prop_assert_eq!(s.chars, utf16_len(&s.content));
            out.push_str(&s.content);
            match s.next {
                Some(next) => { prop_assert_ne!(next, position); position = next; }
                None => break,
            }
        }
        prop_assert_eq!(out, text);
    }
}

/// What [`TextMeta`] says of `bytes`, worked out from the whole of them at
/// once by the plainest means.
fn whole_reference(bytes: &[u8]) -> TextMeta {
    let Ok(text) = std::str::from_utf8(bytes) else {
        let line_ending = LineEnding::None;
        return TextMeta { is_text: false, is_utf8: false, bom: false, line_ending, line_count: 0, utf16_len: 0 };
    };
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let crlf = lines.iter().filter(|line| line.ends_with("\r\n")).count();
    let lf = lines.iter().filter(|line| line.ends_with('\n')).count() - crlf;
    let has_nul = text.contains('\0');
    TextMeta {
        is_text: !has_nul,
        is_utf8: true,
        bom: text.starts_with(BOM),
        line_ending: match (lf, crlf) {
            (0, 0) => LineEnding::None,
            (_, 0) => LineEnding::Lf,
            (0, _) => LineEnding::CrLf,
            _ => LineEnding::Mixed,
        },
        line_count: lines.len() as u64,
        utf16_len: if has_nul { 0 } else { text.encode_utf16().count() as u64 },
    }
}

fn bytes_strategy() -> impl Strategy<Value = Vec<u8>> {
    let part = prop_oneof![
        8 => text_strategy().prop_map(String::into_bytes),
        1 => Just(vec![0]),
        1 => Just(vec![b'\r']),
        1 => prop::collection::vec(any::<u8>(), 1..3),
    ];
    prop::collection::vec(part, 0..8).prop_map(|parts| parts.concat())
}

proptest! {
    /// Fed in pieces split anywhere, even inside a character or a CRLF, the
    /// analyzer says what the whole says.
    #[test]
    fn text_in_pieces_is_classified_as_the_whole(bytes in bytes_strategy(), cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..6)) {
        let mut cuts: Vec<usize> = cuts.iter().map(|cut| cut.index(bytes.len() + 1)).collect();
        cuts.sort_unstable();
        let mut analyzer = TextAnalyzer::default();
        let mut from = 0;
        for cut in cuts.into_iter().chain([bytes.len()]) {
            analyzer.update(&bytes[from..cut]);
            from = cut;
        }
        let expected = whole_reference(&bytes);
        prop_assert_eq!(analyzer.finish(), expected);
        prop_assert_eq!(TextMeta::analyze(&bytes), expected);
    }
}
