//! Scanning one file's bytes with ripgrep's `grep-searcher`.
//!
//! The `Sink` callbacks map one to one onto the wire format: `matched` makes
//! an entry, `context` attaches before-context to the next entry and
//! after-context to the previous one. Offsets are converted to UTF-16 units.

use grep_matcher::Matcher;
use grep_regex::{RegexMatcher, RegexMatcherBuilder};
use grep_searcher::{BinaryDetection, Searcher, SearcherBuilder, Sink, SinkContext, SinkContextKind, SinkMatch};

/// Longest line (or context line) returned, in UTF-16 units.
pub const MAX_LINE_UNITS: usize = 2_000;
/// Bound on the compiled regex (grep-regex defaults to 100 MiB).
pub const REGEX_SIZE_LIMIT: usize = 10 << 20;
/// Bound on the lazy DFA's cache (grep-regex defaults to 1,000 MiB).
pub const DFA_SIZE_LIMIT: usize = 10 << 20;
/// Deepest nesting of groups and repetitions accepted in a pattern.
pub const NEST_LIMIT: u32 = 100;

/// What a scan reports per file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    FilesWithMatches,
    Content,
    Count,
}

/// A compiled query, shared by every scanning thread.
#[derive(Debug, Clone)]
pub struct Query {
    matcher: RegexMatcher,
    mode: Mode,
    multiline: bool,
    before: usize,
    after: usize,
}

/// A pattern that does not compile within the bounds.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PatternError(pub String);

/// Options of a query.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Options {
    pub fixed_strings: bool,
    pub case_insensitive: bool,
    pub multiline: bool,
    pub mode: Mode,
    pub before_context: usize,
    pub after_context: usize,
}

impl Query {
    pub fn new(pattern: &str, options: Options) -> Result<Self, PatternError> {
        let mut builder = RegexMatcherBuilder::new();
        builder
            .case_insensitive(options.case_insensitive)
            .fixed_strings(options.fixed_strings)
            .multi_line(true)
            .dot_matches_new_line(options.multiline)
            .size_limit(REGEX_SIZE_LIMIT)
            .dfa_size_limit(DFA_SIZE_LIMIT)
            .nest_limit(NEST_LIMIT);
        if !options.multiline {
            // Lets the matcher search line by line and never match `\n`.
            builder.line_terminator(Some(b'\n'));
        }
        let matcher = builder.build(pattern).map_err(|e| PatternError(e.to_string()))?;
        Ok(Self {
            matcher,
            mode: options.mode,
            multiline: options.multiline,
            before: options.before_context,
            after: options.after_context,
        })
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// A scanner for one thread.
    pub fn scanner(&self) -> Scanner<'_> {
        let searcher = |line_numbers: bool| {
            SearcherBuilder::new()
                .line_number(line_numbers)
                .multi_line(self.multiline)
                .before_context(self.before)
                .after_context(self.after)
                .binary_detection(BinaryDetection::none())
                .build()
        };
        Scanner { query: self, matcher: self.matcher.clone(), numbered: searcher(true), plain: searcher(false) }
    }
}

/// What one thread scans with. The matcher is the thread's own clone, so
/// its regex caches are its own instead of being taken from a pool shared
/// by every thread at each search.
#[derive(Debug)]
pub struct Scanner<'q> {
    query: &'q Query,
    matcher: RegexMatcher,
    /// Counts lines: for CONTENT mode and for resuming inside a file.
    numbered: Searcher,
    /// Does not: counting newlines for every match is a large share of
    /// a COUNT scan with many matches (about a tenth of its CPU time).
    plain: Searcher,
}

impl Scanner<'_> {
    /// Scans `content`, ignoring matches on lines up to `resume_after_line`,
    /// keeping at most `limit` hits (CONTENT mode).
    pub fn scan(&mut self, content: &[u8], resume_after_line: u64, limit: usize) -> FileScan {
        let query = self.query;
        let mut sink = Collect {
            query,
            matcher: &self.matcher,
            resume: resume_after_line,
            limit,
            out: FileScan::default(),
            before: Vec::new(),
        };
        let searcher =
            if query.mode == Mode::Content || resume_after_line > 0 { &mut self.numbered } else { &mut self.plain };
        // The sink never fails and a slice search does no I/O.
        if let Err(error) = searcher.search_slice(&self.matcher, content, &mut sink) {
            tracing::warn!(%error, "scan stopped early");
        }
        sink.out
    }
}

/// A line of text, clipped for output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    pub number: u64,
    pub text: String,
    pub clipped: bool,
}

/// One match with its context (CONTENT mode).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hit {
    pub line: Line,
    /// 1-based UTF-16 column of the first submatch.
    pub column: u64,
    /// UTF-16 ranges within `line.text` (before clipping).
    pub submatches: Vec<(u64, u64)>,
    pub before: Vec<Line>,
    pub after: Vec<Line>,
}

/// What one file produced.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FileScan {
    /// CONTENT mode: matches in order, at most the limit.
    pub hits: Vec<Hit>,
    /// Matching lines (all modes; FILES mode stops at the first).
    pub count: u64,
    /// The limit stopped the scan before the end of the file.
    pub stopped: bool,
}

struct Collect<'q> {
    query: &'q Query,
    matcher: &'q RegexMatcher,
    resume: u64,
    limit: usize,
    out: FileScan,
    /// Before-context waiting for its match.
    before: Vec<Line>,
}

impl Sink for Collect<'_> {
    type Error = std::io::Error;

    fn matched(&mut self, _searcher: &Searcher, m: &SinkMatch<'_>) -> Result<bool, std::io::Error> {
        let number = m.line_number().unwrap_or(0);
        if self.resume > 0 && number <= self.resume {
            self.before.clear();
            return Ok(true);
        }
        match self.query.mode {
            Mode::FilesWithMatches => {
                self.out.count = 1;
                return Ok(false);
            }
            Mode::Count => {
                self.out.count += 1;
                return Ok(true);
            }
            Mode::Content => {}
        }
        if self.out.hits.len() >= self.limit {
            self.out.stopped = true;
            return Ok(false);
        }
        self.out.count += 1;
        let bytes = m.bytes();
        let mut submatches = Vec::new();
        let _ = self.matcher.find_iter(bytes, |found| {
            if found.start() < found.end() || submatches.is_empty() {
                submatches.push((utf16_offset(bytes, found.start()), utf16_offset(bytes, found.end())));
            }
            true
        });
        let column = submatches.first().map_or(1, |(start, _)| start + 1);
        self.out.hits.push(Hit {
            line: line(number, bytes),
            column,
            submatches,
            before: std::mem::take(&mut self.before),
            after: Vec::new(),
        });
        Ok(true)
    }

    fn context(&mut self, _searcher: &Searcher, context: &SinkContext<'_>) -> Result<bool, std::io::Error> {
        let number = context.line_number().unwrap_or(0);
        if (self.resume > 0 && number <= self.resume) || self.query.mode != Mode::Content {
            return Ok(true);
        }
        let line = line(number, context.bytes());
        match context.kind() {
            SinkContextKind::Before => self.before.push(line),
            SinkContextKind::After => {
                if let Some(hit) = self.out.hits.last_mut() {
                    hit.after.push(line);
                }
            }
            SinkContextKind::Other => {}
        }
        Ok(true)
    }
}

/// A line without its terminator, clipped to [`MAX_LINE_UNITS`].
fn line(number: u64, bytes: &[u8]) -> Line {
    let bytes = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    let bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
    let text = String::from_utf8_lossy(bytes);
    let mut units = 0;
    for (i, c) in text.char_indices() {
        units += c.len_utf16();
        if units > MAX_LINE_UNITS {
            return Line { number, text: text[..i].to_owned(), clipped: true };
        }
    }
    Line { number, text: text.into_owned(), clipped: false }
}

/// UTF-16 offset of byte offset `at` in `bytes` (lossy for invalid UTF-8).
fn utf16_offset(bytes: &[u8], at: usize) -> u64 {
    String::from_utf8_lossy(&bytes[..at.min(bytes.len())]).encode_utf16().count() as u64
}

#[cfg(test)]
mod tests;
