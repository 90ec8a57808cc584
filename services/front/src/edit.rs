//! The edit engine: ordered text edits applied in memory, all or nothing.
//!
//! `replace` matches `old_text` exactly, whitespace included; `new_text` is
//! literal. Line endings are respected: in a file with CRLF terminators an
//! `old_text` written with bare `\n` still matches, and every bare `\n` that
//! an edit inserts is written as `\r\n`, so no edit turns a CRLF file into an
//! LF one. When nothing matches, the error names the closest near-miss (same
//! text but for whitespace, indentation, case or line endings).

/// One edit, as the request gave it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EditOp {
    Replace { old_text: String, new_text: String, expected_matches: u32, replace_all: bool },
    Append { text: String },
    Lines { start_line: u64, end_line: u64, old_text: String, new_text: String },
}

/// How a near-miss differs from `old_text`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Difference {
    Whitespace,
    Indentation,
    Case,
    LineEndings,
}

impl Difference {
    pub fn as_str(self) -> &'static str {
        match self {
            Difference::Whitespace => "whitespace",
            Difference::Indentation => "indentation",
            Difference::Case => "case",
            Difference::LineEndings => "line endings",
        }
    }
}

/// Why an edit failed; `index` is the edit's position in the request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EditFailure {
    pub index: usize,
    pub kind: FailureKind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FailureKind {
    /// `old_text` is empty.
    EmptyOldText,
    /// `old_text` equals `new_text`.
    Noop,
    /// Nothing matched; the closest near-miss, if any: (line, difference).
    NoMatch { near_miss: Option<(u64, Difference)> },
    /// The match count differs from `expected_matches`.
    Ambiguous { expected: u32, count: u32, lines: Vec<u64> },
    /// A `lines` range outside the file.
    BadRange { start_line: u64, end_line: u64, line_count: u64 },
    /// A `lines` edit whose `old_text` differs from the lines' current text.
    LinesMismatch { start_line: u64, end_line: u64 },
}

/// Applies `edits` in order; returns the new text and each edit's
/// replacement count.
pub fn apply(original: &str, edits: &[EditOp]) -> Result<(String, Vec<u32>), EditFailure> {
    let mut text = original.to_owned();
    let mut counts = Vec::with_capacity(edits.len());
    // The line-ending style is the file's as the request found it: an
    // earlier edit that removes every terminator does not make later
    // edits insert bare `\n` into a CRLF file.
    let crlf = uses_crlf(original);
    for (index, edit) in edits.iter().enumerate() {
        let fail = |kind| EditFailure { index, kind };
        let count = match edit {
            EditOp::Replace { old_text, new_text, expected_matches, replace_all } => {
                if old_text.is_empty() {
                    return Err(fail(FailureKind::EmptyOldText));
                }
                if old_text == new_text {
                    return Err(fail(FailureKind::Noop));
                }
                replace(&mut text, old_text, new_text, *expected_matches, *replace_all, crlf).map_err(fail)?
            }
            EditOp::Append { text: extra } => {
                text.push_str(&terminators(extra, crlf));
                1
            }
            EditOp::Lines { start_line, end_line, old_text, new_text } => {
                replace_lines(&mut text, *start_line, *end_line, old_text, &terminators(new_text, crlf))
                    .map_err(fail)?;
                1
            }
        };
        counts.push(count);
    }
    Ok((text, counts))
}

/// Whether inserted text should use CRLF: the file has CRLF terminators and
/// no bare LF ones.
fn uses_crlf(text: &str) -> bool {
    let crlf = text.matches("\r\n").count();
    crlf > 0 && crlf == text.matches('\n').count()
}

/// `text` with every bare `\n` written as `\r\n` when `crlf`.
fn terminators(text: &str, crlf: bool) -> std::borrow::Cow<'_, str> {
    if !crlf || !text.contains('\n') {
        return text.into();
    }
    let mut out = String::with_capacity(text.len() + 16);
    let mut previous = '\0';
    for c in text.chars() {
        if c == '\n' && previous != '\r' {
            out.push('\r');
        }
        out.push(c);
        previous = c;
    }
    out.into()
}

fn replace(
    text: &mut String,
    old_text: &str,
    new_text: &str,
    expected: u32,
    all: bool,
    crlf: bool,
) -> Result<u32, FailureKind> {
    let mut needle = std::borrow::Cow::Borrowed(old_text);
    let mut starts: Vec<usize> = text.match_indices(old_text).map(|(i, _)| i).collect();
    if starts.is_empty() && text.contains("\r\n") && old_text.contains('\n') {
        // An `old_text` written with bare `\n` against CRLF terminators.
        let converted = terminators(old_text, true);
        starts = text.match_indices(converted.as_ref()).map(|(i, _)| i).collect();
        needle = std::borrow::Cow::Owned(converted.into_owned());
    }
    let count = u32::try_from(starts.len()).unwrap_or(u32::MAX);
    if count == 0 {
        return Err(FailureKind::NoMatch { near_miss: near_miss(text, old_text) });
    }
    if !all && count != expected {
        let lines = starts.iter().take(50).map(|&i| line_of(text, i)).collect();
        return Err(FailureKind::Ambiguous { expected, count, lines });
    }
    let replacement = terminators(new_text, crlf || needle.contains("\r\n"));
    let mut out = String::with_capacity(text.len() + starts.len() * replacement.len());
    let mut last = 0;
    for start in starts {
        out.push_str(&text[last..start]);
        out.push_str(&replacement);
        last = start + needle.len();
    }
    out.push_str(&text[last..]);
    *text = out;
    Ok(count)
}

fn replace_lines(text: &mut String, start: u64, end: u64, old_text: &str, new_text: &str) -> Result<(), FailureKind> {
    let bounds: Vec<usize> = std::iter::once(0)
        .chain(text.match_indices('\n').map(|(i, _)| i + 1))
        .chain((!text.is_empty() && !text.ends_with('\n')).then_some(text.len()))
        .collect();
    let line_count = bounds.len() as u64 - 1;
    if start == 0 || end < start || end > line_count {
        return Err(FailureKind::BadRange { start_line: start, end_line: end, line_count });
    }
    let (from, to) = (bounds[start as usize - 1], bounds[end as usize]);
    if &text[from..to] != old_text {
        return Err(FailureKind::LinesMismatch { start_line: start, end_line: end });
    }
    text.replace_range(from..to, new_text);
    Ok(())
}

/// 1-based line number of byte offset `at`.
fn line_of(text: &str, at: usize) -> u64 {
    text[..at].matches('\n').count() as u64 + 1
}

/// The first place where `old_text` matches once whitespace, indentation,
/// case or line endings are ignored: the line where that match begins.
///
/// Each check normalizes the whole text once, line by line, noting where
/// each line begins in the normalized text, and searches it once, so the
/// work is linear in the sizes of the text and of `old_text`.
fn near_miss(text: &str, old_text: &str) -> Option<(u64, Difference)> {
    /// Normalizes `old_text` as a whole.
    type Whole = fn(&str) -> String;
    /// Appends the normalized form of one line of the text (with its terminator).
    type Line = fn(&str, &mut String);
    let checks: [(Difference, Whole, Line); 4] = [
        (
            Difference::LineEndings,
            |s| s.replace("\r\n", "\n").replace('\r', "\n"),
            |line, out| {
                out.push_str(&line.replace("\r\n", "\n").replace('\r', "\n"));
            },
        ),
        (
            Difference::Indentation,
            |s| s.lines().map(str::trim_start).collect::<Vec<_>>().join("\n"),
            |line, out| {
                let content = line.strip_suffix('\n').map(|l| l.strip_suffix('\r').unwrap_or(l));
                out.push_str(content.unwrap_or(line).trim_start());
                if content.is_some() {
                    out.push('\n');
                }
            },
        ),
        (
            Difference::Whitespace,
            |s| s.split_whitespace().collect::<Vec<_>>().join(" "),
            |line, out| {
                for word in line.split_whitespace() {
                    if !out.is_empty() {
                        out.push(' ');
                    }
                    out.push_str(word);
                }
            },
        ),
        (Difference::Case, str::to_lowercase, |line, out| out.push_str(&line.to_lowercase())),
    ];
    for (difference, whole, line) in checks {
        let wanted = whole(old_text);
        if wanted.trim().is_empty() {
            continue;
        }
        let mut normalized = String::with_capacity(text.len());
        let mut starts = Vec::new();
        for text_line in text.split_inclusive('\n') {
            starts.push(normalized.len());
            line(text_line, &mut normalized);
        }
        if let Some(at) = normalized.find(&wanted) {
            // Lines that begin at or before the match; the last of them holds it.
            return Some((starts.partition_point(|&start| start <= at) as u64, difference));
        }
    }
    None
}

#[cfg(test)]
mod tests;
