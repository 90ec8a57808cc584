//! Text rules shared by every text operation.
//!
//! A file is *text* when it is valid UTF-8 with no NUL byte, or text in
//! another encoding ([`encoding`]), which every operation sees decoded. Offsets and
//! lengths are UTF-16 code units (what JavaScript agents count); lines are
//! 1-based and include their terminator. Bytes are never rewritten: a BOM and
//! CR/LF terminators are returned exactly as stored.

use serde::{Deserialize, Serialize};

pub mod encoding;
pub mod tokens;

/// The UTF-8 byte-order mark.
pub const BOM: &str = "\u{feff}";

/// Line terminator style of a text file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum LineEnding {
    None,
    Lf,
    CrLf,
    Mixed,
}

/// What a version's bytes look like as text; computed once at write time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TextMeta {
    pub is_text: bool,
    pub is_utf8: bool,
    pub bom: bool,
    pub line_ending: LineEnding,
    pub line_count: u64,
    pub utf16_len: u64,
}

impl TextMeta {
    /// What bytes that are not text are.
    pub const NOT_TEXT: Self =
        Self { is_text: false, is_utf8: false, bom: false, line_ending: LineEnding::None, line_count: 0, utf16_len: 0 };

    /// Classifies bytes as UTF-8 text ([`encoding::classify`] tries the
    /// other encodings).
    pub fn analyze(bytes: &[u8]) -> Self {
        let mut analyzer = TextAnalyzer::default();
        analyzer.update(bytes);
        analyzer.finish()
    }
}

/// [`TextMeta::analyze`] for bytes that arrive in pieces, split anywhere
/// (inside a character or between CR and LF): fed every piece in order, it
/// finishes with what `analyze` says of them all.
#[derive(Debug, Clone, Default)]
pub struct TextAnalyzer {
    /// The start of a character whose rest is in the next piece.
    partial: Vec<u8>,
    not_utf8: bool,
    has_nul: bool,
    bom: bool,
    lf: u64,
    crlf: u64,
    utf16_len: u64,
    last: Option<u8>,
}

impl TextAnalyzer {
    pub fn update(&mut self, mut bytes: &[u8]) {
        if self.not_utf8 {
            return;
        }
        // First the character the last piece began, once it is whole.
        if let Some(&lead) = self.partial.first() {
            let width = match lead {
                0xC0..=0xDF => 2,
                0xE0..=0xEF => 3,
                _ => 4,
            };
            let need = width - self.partial.len();
            if bytes.len() < need {
                self.partial.extend_from_slice(bytes);
                return;
            }
            let mut whole = std::mem::take(&mut self.partial);
            whole.extend_from_slice(&bytes[..need]);
            bytes = &bytes[need..];
            match std::str::from_utf8(&whole) {
                Ok(character) => self.text(character),
                Err(_) => {
                    self.not_utf8 = true;
                    return;
                }
            }
        }
        match std::str::from_utf8(bytes) {
            Ok(text) => self.text(text),
            // The piece ends inside a character.
            Err(error) if error.error_len().is_none() => {
                let (valid, rest) = bytes.split_at(error.valid_up_to());
                if let Ok(text) = std::str::from_utf8(valid) {
                    self.text(text);
                }
                self.partial = rest.to_vec();
            }
            Err(_) => self.not_utf8 = true,
        }
    }

    fn text(&mut self, text: &str) {
        let bytes = text.as_bytes();
        let Some(&last) = bytes.last() else { return };
        if self.last.is_none() {
            self.bom = text.starts_with(BOM);
        }
        self.has_nul |= memchr_nul(bytes);
        for (i, _) in text.match_indices('\n') {
            let before = if i == 0 { self.last } else { Some(bytes[i - 1]) };
            if before == Some(b'\r') {
                self.crlf += 1;
            } else {
                self.lf += 1;
            }
        }
        self.last = Some(last);
        self.utf16_len += utf16_len(text);
    }

    pub fn finish(self) -> TextMeta {
        if self.not_utf8 || !self.partial.is_empty() {
            return TextMeta::NOT_TEXT;
        }
        let line_ending = match (self.lf, self.crlf) {
            (0, 0) => LineEnding::None,
            (_, 0) => LineEnding::Lf,
            (0, _) => LineEnding::CrLf,
            _ => LineEnding::Mixed,
        };
        let ends_open = self.last.is_some_and(|last| last != b'\n');
        TextMeta {
            is_text: !self.has_nul,
            is_utf8: true,
            bom: self.bom,
            line_ending,
            line_count: self.lf + self.crlf + u64::from(ends_open),
            utf16_len: if self.has_nul { 0 } else { self.utf16_len },
        }
    }
}

fn memchr_nul(bytes: &[u8]) -> bool {
    bytes.contains(&0)
}

/// Length of `text` in UTF-16 code units.
pub fn utf16_len(text: &str) -> u64 {
    // ASCII fast path: one unit per byte.
    if text.is_ascii() {
        return text.len() as u64;
    }
    text.chars().map(|c| c.len_utf16() as u64).sum()
}

/// Byte offset of UTF-16 offset `units` in `text`, or `None` when `units` is
/// past the end or falls between the two halves of a surrogate pair.
pub fn byte_offset_of_utf16(text: &str, units: u64) -> Option<usize> {
    let mut seen = 0u64;
    for (i, c) in text.char_indices() {
        if seen == units {
            return Some(i);
        }
        seen += c.len_utf16() as u64;
        if seen > units {
            return None;
        }
    }
    (seen == units).then_some(text.len())
}

/// The longest prefix of `text` that fits in `budget` UTF-16 units without
/// splitting a surrogate pair, with its length in units.
pub fn prefix_within_utf16(text: &str, budget: u64) -> (&str, u64) {
    let mut used = 0u64;
    for (i, c) in text.char_indices() {
        let w = c.len_utf16() as u64;
        if used + w > budget {
            return (&text[..i], used);
        }
        used += w;
    }
    (text, used)
}

/// Iterates lines with their terminators (`\n` or `\r\n`) included.
pub fn lines_inclusive(text: &str) -> impl Iterator<Item = &str> {
    text.split_inclusive('\n')
}

/// Where to start and how much to return from a text file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SliceRequest {
    /// First line, 1-based.
    pub start_line: u64,
    /// UTF-16 offset within the first line.
    pub start_char: u64,
    /// Most lines to return (whole or partial).
    pub max_lines: u64,
    /// Output budget in UTF-16 units.
    pub max_chars: u64,
}

/// A slice of a text file, as returned by `Read`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slice {
    pub content: String,
    /// First and last line present in `content` (0 when empty).
    pub first_line: u64,
    pub last_line: u64,
    /// The budget cut the slice before `max_lines` lines.
    pub truncated: bool,
    /// Where to continue: (line, UTF-16 offset), when more remains.
    pub next: Option<(u64, u64)>,
    /// UTF-16 units in `content`.
    pub chars: u64,
}

impl Slice {
    /// Cuts the slice (taken with `request`) to `budget` tokens, at a line
    /// end when one fits; returns its tokens.
    pub fn within_tokens(&mut self, request: SliceRequest, budget: tokens::TokenBudget) -> u64 {
        let (fits, tokens) = budget.tokenizer.prefix_within(&self.content, budget.max);
        if fits == self.content.len() {
            return tokens;
        }
        let kept = &self.content[..fits];
        let (whole_lines, line_end) = (kept.matches('\n').count() as u64, kept.ends_with('\n'));
        self.next = Some(match line_end {
            true => (self.first_line + whole_lines, 0),
            // Inside the first line, which may have started at `start_char`.
            false => (self.first_line, request.start_char + utf16_len(kept)),
        });
        self.last_line = match (kept.is_empty(), line_end) {
            (true, _) => 0,
            (false, true) => self.first_line + whole_lines - 1,
            (false, false) => self.first_line + whole_lines,
        };
        if kept.is_empty() {
            self.first_line = 0;
        }
        self.chars = utf16_len(kept);
        self.truncated = true;
        self.content.truncate(fits);
        tokens
    }
}

/// Why a slice could not be taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SliceError {
    #[error("start line {start_line} is past the end of the file ({total_lines} lines)")]
    LinePastEnd { start_line: u64, total_lines: u64 },
    #[error("start character {start_char} is past the end of line {line} ({line_length} UTF-16 units)")]
    CharPastEnd { line: u64, start_char: u64, line_length: u64 },
    #[error("start character {start_char} falls inside a surrogate pair on line {line}")]
    InsideSurrogatePair { line: u64, start_char: u64 },
}

/// Takes the slice `request` asks for from `text`.
pub fn slice(text: &str, request: SliceRequest) -> Result<Slice, SliceError> {
    debug_assert!(request.start_line >= 1 && request.max_lines >= 1 && request.max_chars >= 2);
    let mut lines = lines_inclusive(text)
        .enumerate()
        .map(|(i, l)| (i as u64 + 1, l))
        .skip_while(|(n, _)| *n < request.start_line)
        .peekable();
    let Some(&(_, first)) = lines.peek() else {
        // An empty file has zero lines; reading it from the start is fine.
        if request.start_line == 1 && request.start_char == 0 {
            return Ok(Slice {
                content: String::new(),
                first_line: 0,
                last_line: 0,
                truncated: false,
                next: None,
                chars: 0,
            });
        }
        let total_lines = lines_inclusive(text).count() as u64;
        return Err(SliceError::LinePastEnd { start_line: request.start_line, total_lines });
    };
    let Some(skip) = byte_offset_of_utf16(first, request.start_char) else {
        let line_length = utf16_len(first);
        return Err(if request.start_char > line_length {
            SliceError::CharPastEnd { line: request.start_line, start_char: request.start_char, line_length }
        } else {
            SliceError::InsideSurrogatePair { line: request.start_line, start_char: request.start_char }
        });
    };

    let mut out = Slice { content: String::new(), first_line: 0, last_line: 0, truncated: false, next: None, chars: 0 };
    let mut budget = request.max_chars;
    let mut taken = 0u64;
    let mut offset_in_line = request.start_char;
    let mut rest_of_first = Some(&first[skip..]);
    while let Some((number, line)) = lines.next() {
        let line = rest_of_first.take().unwrap_or(line);
        if taken == request.max_lines {
            out.next = Some((number, 0));
            break;
        }
        let (part, used) = prefix_within_utf16(line, budget);
        if !part.is_empty() {
            if out.first_line == 0 {
                out.first_line = number;
            }
            out.last_line = number;
            out.content.push_str(part);
            out.chars += used;
            budget -= used;
        }
        if part.len() < line.len() {
            out.truncated = true;
            out.next = Some((number, offset_in_line + used));
            break;
        }
        taken += 1;
        offset_in_line = 0;
        if budget == 0 && lines.peek().is_some() {
            out.truncated = taken < request.max_lines;
            out.next = Some((number + 1, 0));
            break;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
