//! Applying one file's hunks to its text, exactly.
//!
//! Hunks are placed in order against the original text, each after the
//! previous one. A hunk's old lines must equal the file's lines, `\r`
//! included; only when nothing matches that way and the file has CRLF lines
//! do lines written without `\r` match CRLF lines (the rule of `Edit`). If
//! the old lines occur several times, a unified diff's stated line, moved
//! by the offset at which the previous hunk was found (as GNU patch does),
//! picks one; otherwise the hunk is ambiguous. Lines the hunk writes end
//! with CRLF when the file's lines all do, or when the hunk matched CRLF
//! lines, so a CRLF file stays CRLF.

use std::hash::{DefaultHasher, Hash as _, Hasher as _};

use super::{FinalNewline, Hunk};
use crate::edit::Difference;

/// At most this many candidate lines are listed for an ambiguous hunk.
const MAX_LISTED: usize = 50;

/// Why a hunk could not be applied; `index` is its 0-based position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HunkFailure {
    pub index: usize,
    pub kind: HunkFailureKind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HunkFailureKind {
    /// An anchor line does not occur after the previous hunk.
    AnchorNotFound { anchor: String },
    /// The old lines occur nowhere after the previous hunk; the closest
    /// near-miss, if any: (1-based line where it starts, how it differs).
    NoMatch { near_miss: Option<(u64, Difference)> },
    /// The old lines occur at these 1-based lines (the first 50), and
    /// nothing says which is meant.
    Ambiguous { lines: Vec<u64> },
    /// The hunk must end the file, but its old lines occur only at these
    /// 1-based lines (the first 50).
    NotAtEnd { lines: Vec<u64> },
    /// An insertion's line lies outside `first..=last`: before the previous
    /// hunk's end or past the end of the file.
    LineOutOfRange { line: u64, first: u64, last: u64 },
    /// An insertion with no anchor, no line and no end-of-file mark.
    Unplaced,
}

/// Applies `hunks` in order to `original`; returns the new text.
pub fn apply_hunks(original: &str, hunks: &[Hunk]) -> Result<String, HunkFailure> {
    let file = File::new(original);
    let keys: Vec<u64> = (0..file.len()).map(|i| key(file.line(i))).collect();
    let crlf = crlf_only(original);
    let mut out = String::with_capacity(original.len());
    // Lines before `cursor` are settled; lines before `copied` are in `out`.
    let (mut cursor, mut copied) = (0, 0);
    let mut offset: i64 = 0;
    for (index, hunk) in hunks.iter().enumerate() {
        let fail = |kind| HunkFailure { index, kind };
        for anchor in &hunk.anchors {
            let found = (cursor..file.len()).find(|&i| file.line(i).trim() == anchor.trim());
            cursor = found.ok_or_else(|| fail(HunkFailureKind::AnchorNotFound { anchor: anchor.clone() }))? + 1;
        }
        let hint = hunk.line.map(|line| signed(line).saturating_sub(1).saturating_add(offset));
        let (start, mode) = locate(&file, &keys, hunk, cursor, hint).map_err(fail)?;
        if let Some(line) = hunk.line {
            offset = signed(start as u64).saturating_sub(signed(line).saturating_sub(1));
        }
        out.push_str(&original[file.bounds[copied]..file.bounds[start]]);
        write_new(&mut out, &file, hunk, start, crlf || mode == Mode::Crlf);
        copied = start + hunk.old.len();
        cursor = copied;
    }
    out.push_str(&original[file.bounds[copied]..]);
    Ok(out)
}

/// A file's text split into lines.
struct File<'a> {
    text: &'a str,
    /// Line `i` spans `bounds[i]..bounds[i + 1]`, its `\n` included.
    bounds: Vec<usize>,
    /// The last line ends with `\n` (an empty file counts as ending so).
    final_newline: bool,
}

impl<'a> File<'a> {
    fn new(text: &'a str) -> File<'a> {
        let bounds = std::iter::once(0)
            .chain(text.match_indices('\n').map(|(i, _)| i + 1))
            .chain((!text.is_empty() && !text.ends_with('\n')).then_some(text.len()))
            .collect();
        File { text, bounds, final_newline: text.is_empty() || text.ends_with('\n') }
    }

    fn len(&self) -> usize {
        self.bounds.len() - 1
    }

    /// Line `i` without its `\n`; a CRLF line keeps its `\r`.
    fn line(&self, i: usize) -> &'a str {
        let line = &self.text[self.bounds[i]..self.bounds[i + 1]];
        line.strip_suffix('\n').unwrap_or(line)
    }

    /// Whether line `i` ends with `\n`.
    fn terminated(&self, i: usize) -> bool {
        i + 1 < self.len() || self.final_newline
    }
}

/// Whether a file's lines all end with CRLF (and it has one).
fn crlf_only(text: &str) -> bool {
    let crlf = text.matches("\r\n").count();
    crlf > 0 && crlf == text.matches('\n').count()
}

/// How old lines compare with the file's lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Equal text, `\r` included.
    Exact,
    /// A line written without `\r` also matches the same line ending with
    /// CRLF; a line with `\n` must end with CRLF.
    Crlf,
}

impl Mode {
    fn matches(self, file: &File<'_>, i: usize, old: &str) -> bool {
        let line = file.line(i);
        match self {
            Mode::Exact => line == old,
            Mode::Crlf if file.terminated(i) => {
                line.strip_suffix('\r').is_some_and(|line| line == old.strip_suffix('\r').unwrap_or(old))
            }
            Mode::Crlf => line == old,
        }
    }
}

/// Where `hunk` goes (the index of its first old line) and how it matched.
fn locate(
    file: &File<'_>,
    keys: &[u64],
    hunk: &Hunk,
    cursor: usize,
    hint: Option<i64>,
) -> Result<(usize, Mode), HunkFailureKind> {
    let (n, m) = (file.len(), hunk.old.len());
    let must_end = hunk.end_of_file
        || matches!(
            hunk.final_newline,
            FinalNewline::Stated { old: false, .. } | FinalNewline::Stated { new: false, .. }
        );
    if m == 0 {
        let at = if must_end {
            n as i64
        } else if let Some(hint) = hint {
            hint
        } else if !hunk.anchors.is_empty() {
            cursor as i64
        } else {
            return Err(HunkFailureKind::Unplaced);
        };
        if at < cursor as i64 || at > n as i64 {
            let line = u64::try_from(at.saturating_add(1)).unwrap_or(0);
            return Err(HunkFailureKind::LineOutOfRange { line, first: cursor as u64 + 1, last: n as u64 + 1 });
        }
        // A unified insertion after the last line says that line ends with a newline.
        if let FinalNewline::Stated { old, .. } = hunk.final_newline
            && at == n as i64
            && n > 0
            && file.final_newline != old
        {
            return Err(HunkFailureKind::NoMatch { near_miss: Some((n as u64, Difference::LineEndings)) });
        }
        return Ok((at as usize, Mode::Exact));
    }
    let pattern: Vec<u64> = hunk.old.iter().map(|line| key(line)).collect();
    let fits = |p: usize, mode: Mode| {
        let end = p.saturating_add(m);
        if end > n || (must_end && end != n) {
            return false;
        }
        if let FinalNewline::Stated { old, .. } = hunk.final_newline
            && end == n
            && file.final_newline != old
        {
            return false;
        }
        hunk.old.iter().enumerate().all(|(k, old)| mode.matches(file, p + k, old))
    };
    let modes: &[Mode] = if file.text.contains("\r\n") { &[Mode::Exact, Mode::Crlf] } else { &[Mode::Exact] };
    for &mode in modes {
        if let Some(hint) = hint
            && hint >= cursor as i64
            && fits(hint as usize, mode)
        {
            return Ok((hint as usize, mode));
        }
        let found = if must_end {
            let p = n.checked_sub(m).filter(|&p| p >= cursor && fits(p, mode));
            p.into_iter().collect()
        } else {
            windows(keys, &pattern, cursor, MAX_LISTED, |p| fits(p, mode))
        };
        match found.as_slice() {
            [] => {}
            [p] => return Ok((*p, mode)),
            _ => return Err(HunkFailureKind::Ambiguous { lines: listed(&found) }),
        }
    }
    Err(diagnose(file, keys, hunk, cursor, must_end, modes))
}

/// Why `hunk` fits nowhere: its lines occur, but not at the end or not with
/// the final newline it states; or the closest near-miss.
fn diagnose(
    file: &File<'_>,
    keys: &[u64],
    hunk: &Hunk,
    cursor: usize,
    must_end: bool,
    modes: &[Mode],
) -> HunkFailureKind {
    let pattern: Vec<u64> = hunk.old.iter().map(|line| key(line)).collect();
    for &mode in modes {
        let matches = |p: usize| hunk.old.iter().enumerate().all(|(k, old)| mode.matches(file, p + k, old));
        // At the end but for the final newline.
        if let Some(p) = file.len().checked_sub(hunk.old.len()).filter(|&p| p >= cursor && matches(p)) {
            return HunkFailureKind::NoMatch { near_miss: Some((p as u64 + 1, Difference::LineEndings)) };
        }
        if must_end {
            let found = windows(keys, &pattern, cursor, MAX_LISTED, matches);
            if !found.is_empty() {
                return HunkFailureKind::NotAtEnd { lines: listed(&found) };
            }
        }
    }
    HunkFailureKind::NoMatch { near_miss: near_miss(file, &hunk.old, cursor) }
}

/// The first place after `cursor` where `old` matches once each line's line
/// ending, indentation, inner whitespace or case is ignored, tried in that
/// order as `Edit` tries them; line-aligned, since hunks match whole lines.
fn near_miss(file: &File<'_>, old: &[String], cursor: usize) -> Option<(u64, Difference)> {
    type Normalize = fn(&str) -> String;
    let checks: [(Difference, Normalize); 4] = [
        (Difference::LineEndings, |line| line.trim_end_matches('\r').to_owned()),
        (Difference::Indentation, |line| line.trim_end_matches('\r').trim_start().to_owned()),
        (Difference::Whitespace, |line| line.split_whitespace().collect::<Vec<_>>().join(" ")),
        (Difference::Case, |line| line.trim_end_matches('\r').to_lowercase()),
    ];
    for (difference, normalize) in checks {
        let wanted: Vec<String> = old.iter().map(|line| normalize(line)).collect();
        if wanted.iter().all(|line| line.trim().is_empty()) {
            continue;
        }
        let lines: Vec<String> = (cursor..file.len()).map(|i| normalize(file.line(i))).collect();
        let keys: Vec<u64> = lines.iter().map(|line| key(line)).collect();
        let pattern: Vec<u64> = wanted.iter().map(|line| key(line)).collect();
        let found = windows(&keys, &pattern, 0, 1, |p| wanted.iter().zip(&lines[p..]).all(|(w, l)| w == l));
        if let Some(p) = found.first() {
            return Some(((cursor + p) as u64 + 1, difference));
        }
    }
    None
}

/// Writes `hunk`'s new lines in place of its old lines at `start`.
fn write_new(out: &mut String, file: &File<'_>, hunk: &Hunk, start: usize, crlf: bool) {
    let newline = |line: &str| if crlf && !line.ends_with('\r') { "\r\n" } else { "\n" };
    if hunk.new.is_empty() {
        return;
    }
    // Lines follow a last line that had no newline: it gets one.
    if !out.is_empty() && !out.ends_with('\n') {
        out.push_str(if crlf { "\r\n" } else { "\n" });
    }
    let ends_file = start + hunk.old.len() == file.len();
    let last_newline = match hunk.final_newline {
        FinalNewline::Keep => file.final_newline,
        FinalNewline::Stated { new, .. } => new,
    };
    for (j, line) in hunk.new.iter().enumerate() {
        out.push_str(line);
        if !(ends_file && j + 1 == hunk.new.len()) || last_newline {
            out.push_str(newline(line));
        }
    }
}

/// `value` as a signed line number, saturating.
fn signed(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// The 1-based lines of the first [`MAX_LISTED`] of `starts`.
fn listed(starts: &[usize]) -> Vec<u64> {
    starts.iter().take(MAX_LISTED).map(|&p| p as u64 + 1).collect()
}

/// The hash a line is found by: its text without a final `\r`, so that both
/// ways of comparing lines hash equal lines alike.
fn key(line: &str) -> u64 {
    let mut hasher = DefaultHasher::new();
    line.strip_suffix('\r').unwrap_or(line).hash(&mut hasher);
    hasher.finish()
}

/// The starts (from `from` on, at most `limit`) of the windows of `keys`
/// that equal `pattern` and pass `verify`, found with a rolling hash so the
/// search is linear in the file unless the lines match.
fn windows(
    keys: &[u64],
    pattern: &[u64],
    from: usize,
    limit: usize,
    mut verify: impl FnMut(usize) -> bool,
) -> Vec<usize> {
    const BASE: u64 = 0x0100_0000_01b3;
    let (n, m) = (keys.len(), pattern.len());
    let mut found = Vec::new();
    if m == 0 || from > n || n - from < m {
        return found;
    }
    let roll = |lines: &[u64]| lines.iter().fold(0u64, |h, &k| h.wrapping_mul(BASE).wrapping_add(k));
    let target = roll(pattern);
    let top = (1..m).fold(1u64, |p, _| p.wrapping_mul(BASE));
    let mut hash = roll(&keys[from..from + m]);
    let mut p = from;
    loop {
        if hash == target && verify(p) {
            found.push(p);
            if found.len() >= limit {
                break;
            }
        }
        if p + m >= n {
            break;
        }
        hash = hash.wrapping_sub(keys[p].wrapping_mul(top)).wrapping_mul(BASE).wrapping_add(keys[p + m]);
        p += 1;
    }
    found
}
