//! OpenAI's `apply_patch` format, the one GPT models are trained to write:
//!
//! ```text
//! *** Begin Patch
//! *** Add File: PATH        then lines `+TEXT`
//! *** Delete File: PATH
//! *** Update File: PATH     then optionally `*** Move to: PATH`, then hunks:
//! @@ [ANCHOR]               lines ` TEXT` (context), `-TEXT`, `+TEXT`,
//!                           optionally `*** End of File`
//! *** End Patch
//! ```
//!
//! The reader is as lenient as the published reference (`openai/codex`,
//! `apply-patch`) and no more: blank lines around the envelope and
//! whitespace around the `***` header lines are ignored; an empty line in a
//! hunk is an empty context line; the first hunk of an update may omit its
//! `@@`; blank lines between hunks are skipped; and empty lines that end a
//! hunk are taken as separators, not context (the reference retries without
//! them). Beyond it: consecutive `@@ TEXT` lines stack as anchors, as the
//! reference's own instructions teach models to write; an update may be a
//! pure `*** Move to:` rename; `@@` followed only by whitespace is a bare
//! `@@`. An insertion (a hunk with only `+` lines) goes after its anchor, or
//! at the end of the file without one, as the reference appends it.

use super::{FileChange, FinalNewline, Hunk, ParseError, ParseErrorKind, Patch};

pub(super) const BEGIN: &str = "*** Begin Patch";
const END: &str = "*** End Patch";
const ADD: &str = "*** Add File:";
const DELETE: &str = "*** Delete File:";
const UPDATE: &str = "*** Update File:";
const MOVE: &str = "*** Move to:";
const END_OF_FILE: &str = "*** End of File";
const FILE_HEADER: &str = "`*** Add File:`, `*** Delete File:`, `*** Update File:` or `*** End Patch`";

pub(super) fn parse(text: &str) -> Result<Patch, ParseError> {
    let lines = super::lines(text);
    let Some(first) = lines.iter().position(|line| !line.trim().is_empty()) else {
        return Err(ParseError::expected(1, "`*** Begin Patch`", ""));
    };
    if lines[first].trim() != BEGIN {
        return Err(ParseError::expected(first + 1, "`*** Begin Patch`", lines[first]));
    }
    let last = lines.iter().rposition(|line| !line.trim().is_empty()).unwrap_or(first);
    if last == first || lines[last].trim() != END {
        return Err(ParseError::expected(last + 1, "`*** End Patch` as the last line", lines[last]));
    }
    let mut reader = Reader { lines: &lines[..last], at: first + 1 };
    let mut files = Vec::new();
    while reader.at < reader.lines.len() {
        files.push(reader.file()?);
    }
    Ok(Patch { files })
}

struct Reader<'a> {
    /// The patch's lines up to, not including, `*** End Patch`.
    lines: &'a [&'a str],
    /// The index of the next line to read.
    at: usize,
}

impl Reader<'_> {
    fn peek(&self) -> Option<&str> {
        self.lines.get(self.at).copied()
    }

    fn file(&mut self) -> Result<FileChange, ParseError> {
        let line_no = self.at + 1;
        let line = self.lines[self.at].trim();
        self.at += 1;
        if let Some(path) = header(line, ADD, line_no)? {
            let mut content = String::new();
            while let Some(text) = self.peek().and_then(|line| line.strip_prefix('+')) {
                content.push_str(text);
                content.push('\n');
                self.at += 1;
            }
            return Ok(FileChange::Add { path, content });
        }
        if let Some(path) = header(line, DELETE, line_no)? {
            return Ok(FileChange::Delete { path });
        }
        let Some(path) = header(line, UPDATE, line_no)? else {
            return Err(ParseError::expected(line_no, FILE_HEADER, line));
        };
        let move_to = match self.peek() {
            Some(next) => header(next.trim(), MOVE, self.at + 1)?,
            None => None,
        };
        if move_to.is_some() {
            self.at += 1;
        }
        let mut hunks = Vec::new();
        loop {
            while self.peek().is_some_and(|line| line.trim().is_empty()) {
                self.at += 1;
            }
            match self.peek() {
                Some(line) if !line.starts_with('*') => hunks.push(self.hunk(hunks.is_empty())?),
                _ => break,
            }
        }
        if hunks.is_empty() && move_to.is_none() {
            return Err(ParseError::new(line_no, ParseErrorKind::EmptyUpdate(path)));
        }
        Ok(FileChange::Update { path, move_to, hunks })
    }

    /// One hunk: its `@@` lines, then its body. The first hunk of an update
    /// may start with its body.
    fn hunk(&mut self, first: bool) -> Result<Hunk, ParseError> {
        let start = self.at + 1;
        let mut anchors = Vec::new();
        let mut headed = false;
        while let Some(line) = self.peek().filter(|line| line.starts_with("@@")) {
            if line.trim_end() != "@@" {
                let Some(anchor) = line.strip_prefix("@@ ") else {
                    return Err(ParseError::expected(self.at + 1, "`@@` or `@@ TEXT`", line));
                };
                if !anchor.trim().is_empty() {
                    anchors.push(anchor.to_owned());
                }
            }
            headed = true;
            self.at += 1;
        }
        if !headed && !first {
            let found = self.peek().unwrap_or_default();
            return Err(ParseError::expected(self.at + 1, "`@@` to start the next hunk", found));
        }
        let (mut old, mut new) = (Vec::new(), Vec::new());
        let (mut end_of_file, mut body, mut blank_tail) = (false, 0, 0);
        while let Some(line) = self.peek() {
            if line == END_OF_FILE {
                if body == 0 {
                    return Err(ParseError::new(self.at + 1, ParseErrorKind::EmptyHunk));
                }
                end_of_file = true;
                self.at += 1;
                break;
            }
            let mut chars = line.chars();
            match chars.next() {
                None => {
                    old.push(String::new());
                    new.push(String::new());
                }
                Some(' ') => {
                    old.push(chars.as_str().to_owned());
                    new.push(chars.as_str().to_owned());
                }
                Some('-') => old.push(chars.as_str().to_owned()),
                Some('+') => new.push(chars.as_str().to_owned()),
                Some(_) if body == 0 => {
                    return Err(ParseError::expected(self.at + 1, "a hunk line starting with ' ', '-' or '+'", line));
                }
                Some(_) => break,
            }
            blank_tail = if line.is_empty() { blank_tail + 1 } else { 0 };
            body += 1;
            self.at += 1;
        }
        if !end_of_file {
            // Empty lines before the next header separate; they are not context.
            old.truncate(old.len() - blank_tail);
            new.truncate(new.len() - blank_tail);
        }
        if old.is_empty() && new.is_empty() {
            return Err(ParseError::new(start, ParseErrorKind::EmptyHunk));
        }
        // An insertion without an anchor is appended, as the reference does.
        let end_of_file = end_of_file || (old.is_empty() && anchors.is_empty());
        Ok(Hunk { anchors, line: None, old, new, end_of_file, final_newline: FinalNewline::Keep })
    }
}

/// The path of a `MARKER PATH` header line (already trimmed), if `line` is
/// one; the marker alone is an empty path.
fn header(line: &str, marker: &str, line_no: usize) -> Result<Option<String>, ParseError> {
    let Some(rest) = line.strip_prefix(marker) else {
        return Ok(None);
    };
    if rest.is_empty() {
        return Err(ParseError::new(line_no, ParseErrorKind::EmptyPath));
    }
    Ok(rest.strip_prefix(' ').map(|path| path.trim().to_owned()))
}
