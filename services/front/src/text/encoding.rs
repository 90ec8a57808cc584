//! Text in encodings other than UTF-8.
//!
//! Bytes that are not UTF-8 are still text when they are UTF-16 with a
//! byte-order mark, or when Mozilla's `chardetng` (Firefox's detector) names
//! a legacy encoding that decodes all of them to sensible text. Text
//! operations work on the decoded text, with the usual UTF-16 offsets; what
//! they write back is encoded in the file's own encoding with `encoding_rs`,
//! keeping the bytes outside the changed text as they were.
//!
//! ```
//! use agentvfs_front::text::encoding::{Charset, classify};
//!
//! let shift_jis = Charset::for_label("shift_jis").unwrap();
//! let bytes = shift_jis.encode("吾輩は猫である。名前はまだ無い。\n").unwrap();
//! let (meta, charset) = classify(&bytes);
//! assert!(meta.is_text && !meta.is_utf8);
//! assert_eq!(charset.name(), "shift_jis");
//! assert_eq!(charset.decode(&bytes).unwrap(), "吾輩は猫である。名前はまだ無い。\n");
//! ```

use std::borrow::Cow;

use chardetng::{EncodingDetector, Iso2022JpDetection, Utf8Detection};
use encoding_rs::{EncoderResult, Encoding, UTF_16BE, UTF_16LE};

use super::TextMeta;

/// How much of a file the detector looks at; the whole file is then
/// decoded to check its guess.
const DETECT_BYTES: usize = 64 << 10;

/// The MIME type of text in an encoding other than UTF-8 starts with this,
/// followed by the encoding's name.
const MIME_PREFIX: &str = "text/plain; charset=";

/// The character encoding of a text file's bytes.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Charset(&'static Encoding);

impl std::fmt::Debug for Charset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0.name())
    }
}

impl Charset {
    pub const UTF_8: Self = Self(encoding_rs::UTF_8);

    /// The encoding a WHATWG label names (`shift_jis`, `utf-16le`, `gbk`,
    /// `latin1`, …; case-insensitive), when text can be stored in it: UTF-8,
    /// UTF-16 and the encodings that keep ASCII as ASCII. Not ISO-2022-JP,
    /// whose bytes change meaning with escape sequences, nor the
    /// `replacement` and `x-user-defined` pseudo-encodings.
    pub fn for_label(label: &str) -> Option<Self> {
        let encoding = Encoding::for_label(label.trim().as_bytes())?;
        let storable = encoding == UTF_16LE
            || encoding == UTF_16BE
            || (encoding.is_ascii_compatible() && encoding != encoding_rs::X_USER_DEFINED);
        storable.then_some(Self(encoding))
    }

    /// The encoding a version's recorded MIME type names; UTF-8 for every
    /// other type (text in UTF-8 records none).
    pub fn of_mime_type(mime_type: &str) -> Self {
        mime_type.strip_prefix(MIME_PREFIX).and_then(Self::for_label).unwrap_or(Self::UTF_8)
    }

    /// The MIME type a version in this encoding records: nothing for
    /// UTF-8, `text/plain; charset=NAME` for the others.
    pub fn recorded_mime_type(self) -> String {
        if self.is_utf8() { String::new() } else { format!("{MIME_PREFIX}{}", self.name()) }
    }

    /// The encoding's name in lower case (`utf-8`, `shift_jis`, `utf-16le`).
    pub fn name(self) -> String {
        self.0.name().to_ascii_lowercase()
    }

    pub fn is_utf8(self) -> bool {
        self == Self::UTF_8
    }

    fn is_utf16(self) -> bool {
        self.0 == UTF_16LE || self.0 == UTF_16BE
    }

    /// The text of `bytes`, or `None` when they are not valid in this
    /// encoding. A byte-order mark stays in the text, as U+FEFF.
    pub fn decode(self, bytes: &[u8]) -> Option<Cow<'_, str>> {
        if self.is_utf8() {
            return std::str::from_utf8(bytes).ok().map(Cow::Borrowed);
        }
        self.0.decode_without_bom_handling_and_without_replacement(bytes)
    }

    /// `text` in this encoding, or the first character it cannot hold.
    pub fn encode(self, text: &str) -> Result<Cow<'_, [u8]>, char> {
        if self.is_utf8() {
            return Ok(Cow::Borrowed(text.as_bytes()));
        }
        // encoding_rs encodes UTF-16 as UTF-8 (as the Web does): by hand.
        if self.is_utf16() {
            let big_endian = self.0 == UTF_16BE;
            let bytes = text
                .encode_utf16()
                .flat_map(|unit| if big_endian { unit.to_be_bytes() } else { unit.to_le_bytes() })
                .collect();
            return Ok(Cow::Owned(bytes));
        }
        let mut encoder = self.0.new_encoder();
        let capacity = encoder.max_buffer_length_from_utf8_without_replacement(text.len()).unwrap_or(usize::MAX);
        let mut out = Vec::with_capacity(capacity);
        match encoder.encode_from_utf8_to_vec_without_replacement(text, &mut out, true) {
            (EncoderResult::InputEmpty, _) => Ok(Cow::Owned(out)),
            (EncoderResult::Unmappable(character), _) => Err(character),
            (EncoderResult::OutputFull, _) => unreachable!("the buffer holds the longest encoding of the text"),
        }
    }

    /// A whole file's `text` in this encoding, or the first character it
    /// cannot hold. In UTF-16 it begins with a byte-order mark, added when
    /// the text has none, so that the bytes say what they are.
    pub fn encode_file(self, text: &str) -> Result<Vec<u8>, char> {
        if self.is_utf16() && !text.starts_with('\u{feff}') {
            return Ok(self.encode(&format!("\u{feff}{text}"))?.into_owned());
        }
        Ok(self.encode(text)?.into_owned())
    }

    /// `new` encoded for a file whose bytes were `original`, decoding to
    /// `old`: the bytes that encode the text before and after the part
    /// that changed are kept exactly, so an edit changes no other byte, even
    /// where encoding the same text again would give other bytes (an
    /// encoding can have two byte sequences for one character). Fails with
    /// the first character of the changed text the encoding cannot hold.
    pub fn splice(self, original: &[u8], old: &str, new: &str) -> Result<Vec<u8>, char> {
        let whole = |new: &str| self.encode(new).map(Cow::into_owned);
        if self.is_utf8() {
            return whole(new);
        }
        // The changed text: new[prefix..new.len() - suffix] replaces old[prefix..old.len() - suffix].
        let mut prefix = old.bytes().zip(new.bytes()).take_while(|(a, b)| a == b).count();
        while !old.is_char_boundary(prefix) {
            prefix -= 1;
        }
        let most = old.len().min(new.len()) - prefix;
        let mut suffix = old.bytes().rev().zip(new.bytes().rev()).take(most).take_while(|(a, b)| a == b).count();
        while !old.is_char_boundary(old.len() - suffix) {
            suffix -= 1;
        }
        let (head, head_bytes) = self.kept_head(original, old, prefix);
        let (tail, tail_bytes) = self.kept_tail(original, old, old.len() - suffix);
        if head > tail || head_bytes > tail_bytes {
            return whole(new);
        }
        let middle = self.encode(&new[head..new.len() - (old.len() - tail)])?;
        let spliced = [&original[..head_bytes], &middle, &original[tail_bytes..]].concat();
        // Decoding must give exactly `new`; encodings that do not keep
        // their lines apart would not, and are written whole.
        match self.decode(&spliced) {
            Some(decoded) if decoded == new => Ok(spliced),
            _ => whole(new),
        }
    }

    /// How much of `old[..prefix]` to keep as its original bytes: the text
    /// offset and the byte offset where the kept part ends. Whole lines
    /// first (a line break is one newline unit in every encoding handled
    /// here), then the rest when encoding it gives the original bytes.
    fn kept_head(self, original: &[u8], old: &str, prefix: usize) -> (usize, usize) {
        let line = old[..prefix].rfind('\n').map_or(0, |at| at + 1);
        let lines = old[..line].matches('\n').count();
        let Some(line_bytes) = self.after_newline(original, lines) else {
            return (0, 0);
        };
        match self.encode(&old[line..prefix]) {
            Ok(rest) if original[line_bytes..].starts_with(&rest) => (prefix, line_bytes + rest.len()),
            _ => (line, line_bytes),
        }
    }

    /// As [`Self::kept_head`], for `old[start..]`: the text offset and the
    /// byte offset where the kept part starts.
    fn kept_tail(self, original: &[u8], old: &str, start: usize) -> (usize, usize) {
        let (line, line_bytes) = match old[start..].find('\n') {
            Some(at) => {
                let line = start + at + 1;
                let lines = old[..line].matches('\n').count();
                match self.after_newline(original, lines) {
                    Some(bytes) => (line, bytes),
                    None => return (old.len(), original.len()),
                }
            }
            None => (old.len(), original.len()),
        };
        match self.encode(&old[start..line]) {
            Ok(rest) if original[..line_bytes].ends_with(&rest) => (start, line_bytes - rest.len()),
            _ => (line, line_bytes),
        }
    }

    /// The byte offset just after the `n`th newline of `bytes` (0 for the
    /// 0th), or `None` when there are fewer.
    fn after_newline(self, bytes: &[u8], n: usize) -> Option<usize> {
        if n == 0 {
            return Some(0);
        }
        let unit: &[u8] = match self.0 {
            e if e == UTF_16LE => b"\n\0",
            e if e == UTF_16BE => b"\0\n",
            _ => b"\n",
        };
        let at = bytes.chunks_exact(unit.len()).enumerate().filter(|(_, chunk)| *chunk == unit).nth(n - 1)?.0;
        Some((at + 1) * unit.len())
    }
}

/// What `bytes` are as text, and in which encoding: UTF-8 (text unless it
/// has a NUL byte), UTF-16 with a byte-order mark, or a legacy encoding
/// `chardetng` guesses that decodes them all to sensible text. Anything
/// else is not text, UTF-32 included.
pub fn classify(bytes: &[u8]) -> (TextMeta, Charset) {
    let meta = TextMeta::analyze(bytes);
    if meta.is_utf8 {
        return (meta, Charset::UTF_8);
    }
    let not_text = (TextMeta::NOT_TEXT, Charset::UTF_8);
    let guess = match bytes {
        [0xFF, 0xFE, 0, 0, ..] | [0, 0, 0xFE, 0xFF, ..] => return not_text,
        [0xFF, 0xFE, ..] => Charset(UTF_16LE),
        [0xFE, 0xFF, ..] => Charset(UTF_16BE),
        // Text in the other encodings has no NUL; most binary files do.
        _ if bytes.contains(&0) => return not_text,
        _ => {
            let mut detector = EncodingDetector::new(Iso2022JpDetection::Deny);
            // A prefix is not the end: it may stop inside a character.
            let prefix = &bytes[..bytes.len().min(DETECT_BYTES)];
            detector.feed(prefix, prefix.len() == bytes.len());
            Charset(detector.guess(None, Utf8Detection::Deny))
        }
    };
    match guess.decode(bytes) {
        Some(text) if guess.is_utf16() || sensible(&text) => (decoded_meta(&text), guess),
        _ => not_text,
    }
}

/// What `bytes` are as text in `charset`, which the caller named: text
/// unless they are not valid in it or have a NUL character.
pub fn classify_as(bytes: &[u8], charset: Charset) -> TextMeta {
    if charset.is_utf8() {
        return TextMeta::analyze(bytes);
    }
    charset.decode(bytes).map_or(TextMeta::NOT_TEXT, |text| decoded_meta(&text))
}

fn decoded_meta(text: &str) -> TextMeta {
    TextMeta { is_utf8: false, ..TextMeta::analyze(text.as_bytes()) }
}

/// Whether text a detector's guess decoded looks like text: no control
/// characters but tab, line breaks, form feed and escape (terminal colours
/// in logs). Bytes that are not text decode to some.
fn sensible(text: &str) -> bool {
    !text.chars().any(|c| c.is_control() && !matches!(c, '\t' | '\n' | '\r' | '\x0c' | '\x1b'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn charset(label: &str) -> Charset {
        Charset::for_label(label).unwrap()
    }

    #[test]
    fn labels_name_storable_encodings() {
        assert_eq!(charset("Shift_JIS").name(), "shift_jis");
        assert_eq!(charset("latin1").name(), "windows-1252");
        assert_eq!(charset("utf-16").name(), "utf-16le");
        for unusable in ["utf-32", "iso-2022-jp", "iso-2022-kr", "x-user-defined", "klingon"] {
            assert_eq!(Charset::for_label(unusable), None, "{unusable}");
        }
        assert_eq!(Charset::of_mime_type(&charset("gbk").recorded_mime_type()), charset("gbk"));
        assert_eq!(Charset::UTF_8.recorded_mime_type(), "");
        assert_eq!(Charset::of_mime_type("image/png"), Charset::UTF_8);
    }

    #[test]
    fn utf16_needs_its_byte_order_mark_and_utf32_is_not_text() {
        let le = charset("utf-16le").encode("\u{feff}line one\r\nline two\n").unwrap().into_owned();
        let (meta, found) = classify(&le);
        assert_eq!(found, charset("utf-16le"));
        assert!(meta.is_text && meta.bom && !meta.is_utf8);
        assert_eq!((meta.line_count, meta.utf16_len), (2, 20));
        let be = charset("utf-16be").encode("\u{feff}x\n").unwrap().into_owned();
        assert_eq!(classify(&be).1, charset("utf-16be"));
        assert!(!classify(&le[2..]).0.is_text, "UTF-16 without a byte-order mark has NUL bytes");
        assert!(!classify(b"\xff\xfe\0\0x\0\0\0").0.is_text);
    }

    #[test]
    fn detection_looks_at_a_prefix_that_may_end_inside_a_character() {
        let shift_jis = charset("shift_jis");
        let line = "// 吾輩は猫である。名前はまだ無い。\nfn main() {}\n";
        for pad in 0..2 {
            let text = format!("{}{}", "x".repeat(pad), line.repeat(DETECT_BYTES / 40));
            let bytes = shift_jis.encode(&text).unwrap();
            assert!(bytes.len() > DETECT_BYTES);
            assert_eq!(classify(&bytes).1, shift_jis, "padded by {pad}");
        }
    }

    #[test]
    fn bytes_that_are_no_text_stay_binary() {
        assert!(!classify(b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR").0.is_text);
        assert!(!classify(b"\x01\x02\x03\xfe\xfd\x80").0.is_text);
    }

    #[test]
    fn unrepresentable_characters_are_named() {
        assert_eq!(charset("windows-1252").encode("café ☕"), Err('☕'));
        assert_eq!(charset("shift_jis").encode("データ").unwrap().len(), 6);
    }

    #[test]
    fn a_splice_keeps_the_bytes_outside_the_change() {
        let big5 = charset("big5");
        // Big5 0x8862 decodes to Ê and a combining macron, which Big5 does
        // not encode: the file does not survive a plain re-encoding.
        let line = |text: &str| big5.encode(text).unwrap().into_owned();
        let original = [b"odd \x88\x62 line\n".to_vec(), line("中文 and 中文\n"), b"end \x88\x62\n".to_vec()].concat();
        let old = big5.decode(&original).unwrap().into_owned();
        assert_eq!(big5.encode(&old), Err('Ê'));
        let new = old.replacen("中文", "漢字", 1);
        let spliced = big5.splice(&original, &old, &new).unwrap();
        assert_eq!(big5.decode(&spliced).unwrap(), new);
        assert_eq!(spliced.len(), original.len());
        let differing: Vec<usize> = (0..original.len()).filter(|&i| original[i] != spliced[i]).collect();
        let changed = original.iter().position(|&b| b >= 0xA1).unwrap();
        assert!(differing.iter().all(|&i| (changed..changed + 4).contains(&i)), "{differing:?}");
        assert_eq!(big5.splice(&original, &old, &format!("{old}☃")), Err('☃'));
    }
}
