//! Unified diffs of one or more files, as `git diff` and `diff -u` print them.
//!
//! A file starts at `diff --git a/X b/Y` (followed by git's extended
//! headers: modes, `index`, `similarity index`, `rename from`/`rename to`,
//! `new file mode`, `deleted file mode`) or, in a plain diff, at a `--- X`
//! line followed by `+++ Y`. Names may be C-quoted as git quotes them, lose
//! a tab-separated timestamp, and lose git's `a/` and `b/` prefixes when both
//! names carry them; `/dev/null` marks an added or deleted file. Hunks are
//! `@@ -START[,COUNT] +START[,COUNT] @@ [SECTION]` (a missing count is 1) and
//! must hold exactly the lines their header counts; `\ No newline at end of
//! file` (in any wording) marks the line before it. An empty line inside a
//! hunk is an empty context line, as git and GNU patch read it. Lines outside
//! files (a commit message, `diff -r`'s `Only in`) are skipped. Binary
//! patches, copies and combined diffs are refused; a change of mode alone
//! yields no change, since files here have no modes. In a plain diff two
//! different names are not a rename: the change applies to the old name.

use super::{FileChange, FinalNewline, Hunk, ParseError, ParseErrorKind, Patch};

pub(super) fn parse(text: &str) -> Result<Patch, ParseError> {
    let lines = super::lines(text);
    let mut reader = Reader { lines: &lines, at: 0 };
    let (mut files, mut headers) = (Vec::new(), 0);
    while let Some(line) = reader.peek() {
        let line_no = reader.at + 1;
        if line.starts_with("diff --git ") {
            headers += 1;
            files.extend(reader.git_file()?);
        } else if line.starts_with("diff --cc ") || line.starts_with("diff --combined ") {
            return Err(ParseError::new(line_no, ParseErrorKind::Unsupported("combined (merge) diffs")));
        } else if line.starts_with("--- ") && reader.lines.get(line_no).is_some_and(|next| next.starts_with("+++ ")) {
            headers += 1;
            files.extend(reader.plain_file()?);
        } else if line.starts_with("@@") {
            return Err(ParseError::expected(line_no, "a `---`/`+++` file header before the hunk", line));
        } else if let Some(rest) = line.strip_prefix("Binary files ") {
            let name = rest.split(" and ").next().unwrap_or(rest);
            return Err(ParseError::new(line_no, ParseErrorKind::Binary(name.to_owned())));
        } else {
            reader.at += 1;
        }
    }
    if headers == 0 {
        return Err(ParseError::new(1, ParseErrorKind::NoFiles));
    }
    Ok(Patch { files })
}

/// Git's extended headers that do not change what the patch does here.
const IGNORED_HEADERS: [&str; 5] = ["old mode ", "new mode ", "index ", "similarity index ", "dissimilarity index "];

/// A file name as a header gives it: `None` for `/dev/null`.
type Name = Option<String>;

struct Reader<'a> {
    lines: &'a [&'a str],
    at: usize,
}

impl Reader<'_> {
    fn peek(&self) -> Option<&str> {
        self.lines.get(self.at).copied()
    }

    /// A file after `diff --git`.
    fn git_file(&mut self) -> Result<Option<FileChange>, ParseError> {
        let header_no = self.at + 1;
        let (git_old, git_new) = self.lines[self.at]
            .strip_prefix("diff --git ")
            .and_then(git_names)
            .map_or((None, None), |(old, new)| (Some(old), Some(new)));
        self.at += 1;
        let (mut new_file, mut deleted) = (false, false);
        let (mut rename_from, mut rename_to) = (None, None);
        let mut names: Option<(Name, Name)> = None;
        let display = git_new.clone().or_else(|| git_old.clone()).unwrap_or_default();
        while let Some(line) = self.peek() {
            let line_no = self.at + 1;
            if IGNORED_HEADERS.iter().any(|prefix| line.starts_with(prefix)) {
                // Modes, hashes and similarity say nothing about the text.
            } else if line.starts_with("new file mode ") {
                new_file = true;
            } else if line.starts_with("deleted file mode ") {
                deleted = true;
            } else if let Some(name) = line.strip_prefix("rename from ") {
                rename_from = Some(unquote(name, line_no)?);
            } else if let Some(name) = line.strip_prefix("rename to ") {
                rename_to = Some(unquote(name, line_no)?);
            } else if line.starts_with("copy from ") || line.starts_with("copy to ") {
                return Err(ParseError::new(line_no, ParseErrorKind::Unsupported("copies (`copy from`/`copy to`)")));
            } else if line == "GIT binary patch" || line.starts_with("Binary files ") {
                return Err(ParseError::new(line_no, ParseErrorKind::Binary(display.clone())));
            } else if line.starts_with("--- ") {
                names = Some(self.names()?);
                break;
            } else {
                break;
            }
            self.at += 1;
        }
        let hunks = self.hunks()?;
        let (minus, plus) = match names {
            Some((old, new)) => (Some(old), Some(new)),
            None => (None, None),
        };
        let missing = || ParseError::expected(header_no, "file names", self.lines[header_no - 1]);
        if new_file || matches!(minus, Some(None)) {
            let path = plus.flatten().or(rename_to).or(git_new).ok_or_else(missing)?;
            return added(path, hunks, header_no).map(Some);
        }
        if deleted || matches!(plus, Some(None)) {
            let path = minus.flatten().or(git_old).ok_or_else(missing)?;
            return deleted_file(path, &hunks, header_no).map(Some);
        }
        let path = rename_from.or(minus.flatten()).or(git_old).ok_or_else(missing)?;
        let to = rename_to.or(plus.flatten()).or(git_new).ok_or_else(missing)?;
        let move_to = (to != path).then_some(to);
        if hunks.is_empty() && move_to.is_none() {
            return Ok(None);
        }
        Ok(Some(FileChange::Update { path, move_to, hunks }))
    }

    /// A file of a plain diff: `---`, `+++`, hunks.
    fn plain_file(&mut self) -> Result<Option<FileChange>, ParseError> {
        let header_no = self.at + 1;
        let (old, new) = self.names()?;
        let hunks = self.hunks()?;
        match (old, new) {
            (None, Some(path)) => added(path, hunks, header_no).map(Some),
            (Some(path), None) => deleted_file(path, &hunks, header_no).map(Some),
            (Some(path), Some(_)) => {
                Ok((!hunks.is_empty()).then_some(FileChange::Update { path, move_to: None, hunks }))
            }
            (None, None) => Err(ParseError::expected(header_no, "a file name other than /dev/null", "/dev/null")),
        }
    }

    /// The `--- OLD` and `+++ NEW` lines, without git's prefixes.
    fn names(&mut self) -> Result<(Name, Name), ParseError> {
        let minus_no = self.at + 1;
        let old = self.lines[self.at].strip_prefix("--- ").unwrap_or_default();
        let old = header_name(old, minus_no)?;
        let Some(plus) = self.lines.get(minus_no) else {
            return Err(ParseError::expected(minus_no, "`+++ NAME` after `--- NAME`", ""));
        };
        let Some(new) = plus.strip_prefix("+++ ") else {
            return Err(ParseError::expected(minus_no + 1, "`+++ NAME` after `--- NAME`", plus));
        };
        let new = header_name(new, minus_no + 1)?;
        self.at += 2;
        Ok(strip_prefixes(old, new))
    }

    fn hunks(&mut self) -> Result<Vec<Hunk>, ParseError> {
        let mut hunks = Vec::new();
        while self.peek().is_some_and(|line| line.starts_with("@@")) {
            hunks.push(self.hunk()?);
        }
        Ok(hunks)
    }

    fn hunk(&mut self) -> Result<Hunk, ParseError> {
        let header_no = self.at + 1;
        let header = self.lines[self.at];
        let Some((old_start, old_count, new_count)) = hunk_header(header) else {
            return Err(ParseError::new(header_no, ParseErrorKind::BadHunkHeader(super::excerpt(header))));
        };
        self.at += 1;
        let (mut old, mut new) = (Vec::new(), Vec::new());
        let (mut old_newline, mut new_newline) = (true, true);
        let mut last = None;
        let mismatch = |old_found, new_found, line_no| {
            let counts = ParseErrorKind::CountMismatch { old: old_count, new: new_count, old_found, new_found };
            ParseError::new(line_no, counts)
        };
        while let Some(line) = self.peek() {
            let line_no = self.at + 1;
            if line.starts_with('\\') {
                match last {
                    Some(' ') => (old_newline, new_newline) = (false, false),
                    Some('-') => old_newline = false,
                    Some('+') => new_newline = false,
                    _ => return Err(ParseError::new(line_no, ParseErrorKind::MisplacedNoNewline)),
                }
                last = None;
                self.at += 1;
                continue;
            }
            let done = old.len() == old_count && new.len() == new_count;
            let mut chars = line.chars();
            let kind = match chars.next() {
                // Past the counted lines, an empty line or a `--- ` header ends the hunk.
                None if done => break,
                None => ' ',
                Some('-') if done && (line.starts_with("--- ") || line == "-- ") => break,
                Some(kind @ (' ' | '-' | '+')) => kind,
                Some(_) if done => break,
                Some(_) => return Err(mismatch(old.len(), new.len(), line_no)),
            };
            let (old_found, new_found) = (old.len() + usize::from(kind != '+'), new.len() + usize::from(kind != '-'));
            if old_found > old_count || new_found > new_count {
                // A line more than the header counts: refused rather than dropped.
                return Err(mismatch(old_found, new_found, line_no));
            }
            let text = chars.as_str();
            if (kind != '+' && !old_newline) || (kind != '-' && !new_newline) {
                return Err(ParseError::new(line_no, ParseErrorKind::MisplacedNoNewline));
            }
            if kind != '+' {
                old.push(text.to_owned());
            }
            if kind != '-' {
                new.push(text.to_owned());
            }
            last = Some(kind);
            self.at += 1;
        }
        if old.len() != old_count || new.len() != new_count {
            return Err(mismatch(old.len(), new.len(), header_no));
        }
        // An insertion's header names the line it follows.
        let line = if old_count == 0 { old_start + 1 } else { old_start };
        Ok(Hunk {
            anchors: Vec::new(),
            line: Some(line),
            old,
            new,
            end_of_file: false,
            final_newline: FinalNewline::Stated { old: old_newline, new: new_newline },
        })
    }
}

/// An added file's content: its hunks' new lines.
fn added(path: String, hunks: Vec<Hunk>, header_no: usize) -> Result<FileChange, ParseError> {
    let mut content = String::new();
    for hunk in hunks {
        if !hunk.old.is_empty() {
            return Err(ParseError::new(header_no, ParseErrorKind::AddRemovesLines(path)));
        }
        let newline = !matches!(hunk.final_newline, FinalNewline::Stated { new: false, .. });
        let count = hunk.new.len();
        for (i, line) in hunk.new.into_iter().enumerate() {
            content.push_str(&line);
            if newline || i + 1 < count {
                content.push('\n');
            }
        }
    }
    Ok(FileChange::Add { path, content })
}

fn deleted_file(path: String, hunks: &[Hunk], header_no: usize) -> Result<FileChange, ParseError> {
    if hunks.iter().any(|hunk| !hunk.new.is_empty()) {
        return Err(ParseError::new(header_no, ParseErrorKind::DeleteAddsLines(path)));
    }
    Ok(FileChange::Delete { path })
}

/// `-START[,COUNT] +START[,COUNT]` of `@@ … @@`: the old start and both counts.
fn hunk_header(line: &str) -> Option<(u64, usize, usize)> {
    let rest = line.strip_prefix("@@ -")?;
    let (ranges, _section) = rest.split_once(" @@")?;
    let (old, new) = ranges.split_once(" +")?;
    let range = |text: &str| -> Option<(u64, usize)> {
        let (start, count) = text.split_once(',').unwrap_or((text, "1"));
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if !digits(start) || !digits(count) {
            return None;
        }
        Some((start.parse().ok()?, count.parse().ok()?))
    };
    let (old_start, old_count) = range(old)?;
    let (new_start, new_count) = range(new)?;
    // A side with lines starts at line 1 or later.
    if (old_count > 0 && old_start == 0) || (new_count > 0 && new_start == 0) {
        return None;
    }
    Some((old_start, old_count, new_count))
}

/// The name of a `---`/`+++` line: C-quoted, or up to a tab (before a
/// timestamp).
fn header_name(text: &str, line_no: usize) -> Result<Name, ParseError> {
    let name = if text.starts_with('"') {
        unquote_prefix(text).map(|(name, _)| name).ok_or_else(|| bad_quote(text, line_no))?
    } else {
        text.split('\t').next().unwrap_or(text).to_owned()
    };
    Ok((name != "/dev/null").then_some(name))
}

/// Git's `a/` and `b/` prefixes go when every name there carries its own.
fn strip_prefixes(old: Name, new: Name) -> (Name, Name) {
    let prefixed = |name: &Name, prefix: &str| name.as_ref().is_none_or(|n| n.starts_with(prefix));
    if (old.is_none() && new.is_none()) || !prefixed(&old, "a/") || !prefixed(&new, "b/") {
        return (old, new);
    }
    let strip = |name: Name, prefix: &str| name.map(|n| n[prefix.len()..].to_owned());
    (strip(old, "a/"), strip(new, "b/"))
}

/// The two names of `diff --git A B`, without prefixes. Unquoted names may
/// hold spaces, so the split is where both names agree, as git reads it.
fn git_names(rest: &str) -> Option<(String, String)> {
    let (old, new) = if rest.starts_with('"') {
        let (old, tail) = unquote_prefix(rest)?;
        let tail = tail.strip_prefix(' ')?;
        let new = if tail.starts_with('"') { unquote_prefix(tail)?.0 } else { tail.to_owned() };
        (old, new)
    } else if let Some((old, _)) = rest.split_once(" \"") {
        (old.to_owned(), unquote_prefix(&rest[old.len() + 1..])?.0)
    } else {
        let spaces: Vec<usize> = rest.match_indices(' ').map(|(i, _)| i).collect();
        let agree = spaces.iter().find(|&&i| {
            let (old, new) = (&rest[..i], &rest[i + 1..]);
            old.strip_prefix("a/").zip(new.strip_prefix("b/")).is_some_and(|(o, n)| o == n) || old == new
        });
        let at = agree.or(if spaces.len() == 1 { spaces.first() } else { None })?;
        (rest[..*at].to_owned(), rest[*at + 1..].to_owned())
    };
    match strip_prefixes(Some(old), Some(new)) {
        (Some(old), Some(new)) => Some((old, new)),
        _ => None,
    }
}

/// A `rename from`/`rename to` name, C-quoted or not.
fn unquote(text: &str, line_no: usize) -> Result<String, ParseError> {
    if !text.starts_with('"') {
        return Ok(text.to_owned());
    }
    unquote_prefix(text).map(|(name, _)| name).ok_or_else(|| bad_quote(text, line_no))
}

fn bad_quote(text: &str, line_no: usize) -> ParseError {
    ParseError::new(line_no, ParseErrorKind::BadQuotedPath(super::excerpt(text)))
}

/// The C-quoted string that `text` starts with, as git writes names with
/// special bytes (`"a/\303\251t\303\251.txt"`), and the text after it.
fn unquote_prefix(text: &str) -> Option<(String, &str)> {
    let body = text.strip_prefix('"')?;
    let bytes = body.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => return Some((String::from_utf8(out).ok()?, &body[i + 1..])),
            b'\\' => {
                let escaped = *bytes.get(i + 1)?;
                i += 2;
                let byte = match escaped {
                    b'a' => 0x07,
                    b'b' => 0x08,
                    b't' => b'\t',
                    b'n' => b'\n',
                    b'v' => 0x0b,
                    b'f' => 0x0c,
                    b'r' => b'\r',
                    b'"' | b'\\' => escaped,
                    b'0'..=b'3' => {
                        let digits = bytes.get(i..i + 2)?;
                        if !digits.iter().all(|d| (b'0'..=b'7').contains(d)) {
                            return None;
                        }
                        i += 2;
                        (escaped - b'0') * 64 + (digits[0] - b'0') * 8 + (digits[1] - b'0')
                    }
                    _ => return None,
                };
                out.push(byte);
            }
            byte => {
                out.push(byte);
                i += 1;
            }
        }
    }
    None
}
