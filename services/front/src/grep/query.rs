//! `Grep` arguments parsed into a validated query.

use agentvfs_proto::v1 as pb;
use ignore::types::{Types, TypesBuilder};

use crate::error::{Error, Reason, Result};
use crate::glob::{Glob, GlobError};
use crate::path::SpacePath;
use crate::text::tokens::TokenBudget;

/// Longest accepted pattern, in bytes.
pub const MAX_PATTERN_BYTES: usize = 4096;
/// Most context lines on either side of a match.
pub const MAX_CONTEXT: u32 = 100;
/// Default entries per page, and the most one page returns.
pub const DEFAULT_HEAD_LIMIT: u32 = 250;
pub const MAX_HEAD_LIMIT: u32 = 2_000;
/// Deepest nesting accepted in a regex (the worker enforces the same).
const NEST_LIMIT: u32 = 100;

/// A validated grep: everything but the root and the cursor.
#[derive(Debug, Clone)]
pub struct GrepQuery {
    pub pattern: String,
    pub fixed_strings: bool,
    pub case_insensitive: bool,
    pub multiline: bool,
    pub mode: pb::GrepOutputMode,
    pub line_numbers: bool,
    pub before: u32,
    pub after: u32,
    pub head_limit: u32,
    /// CONTENT mode: a page's budget in tokens.
    pub tokens: Option<TokenBudget>,
    pub offset: u64,
    pub glob: Option<Glob>,
    pub types: Option<Types>,
    /// The arguments that shape the result, for binding page tokens.
    pub fingerprint_parts: Vec<String>,
}

impl GrepQuery {
    pub fn parse(req: &pb::GrepRequest) -> Result<Self> {
        let pattern = &req.pattern;
        if pattern.is_empty() {
            return Err(Error::new(Reason::InvalidPattern, "The pattern must not be empty.").field("pattern"));
        }
        if pattern.len() > MAX_PATTERN_BYTES {
            return Err(Error::new(
                Reason::TooLarge,
                format!("The pattern is {} bytes, over the limit of {MAX_PATTERN_BYTES}.", pattern.len()),
            )
            .with("limit", MAX_PATTERN_BYTES)
            .field("pattern"));
        }
        if let Some(position) = pattern.find('\0') {
            return Err(invalid_pattern("the pattern contains a NUL character", position));
        }
        if !req.fixed_strings {
            check_syntax(pattern, req.case_insensitive, req.multiline)?;
        }
        let mode = pb::GrepOutputMode::try_from(req.output_mode)
            .map_err(|_| Error::invalid_argument("output_mode", format!("Unknown output mode {}.", req.output_mode)))?;
        let context = |value: u32, field: &str| -> Result<u32> {
            if value > MAX_CONTEXT {
                return Err(Error::new(
                    Reason::InvalidArgument,
                    format!("{field} must be at most {MAX_CONTEXT} lines."),
                )
                .with("limit", MAX_CONTEXT)
                .field(field));
            }
            Ok(value)
        };
        // A side's own setting wins over `context`: what the scan uses is
        // what the page token binds.
        let both = context(req.context, "context")?;
        let before = match context(req.before_context, "before_context")? {
            0 => both,
            lines => lines,
        };
        let after = match context(req.after_context, "after_context")? {
            0 => both,
            lines => lines,
        };
        let head_limit = match req.head_limit {
            None => DEFAULT_HEAD_LIMIT,
            Some(0) => MAX_HEAD_LIMIT,
            Some(n) if n <= MAX_HEAD_LIMIT => n,
            Some(n) => {
                return Err(Error::new(
                    Reason::InvalidArgument,
                    format!("head_limit must be at most {MAX_HEAD_LIMIT} (0 for as many as a page allows), not {n}."),
                )
                .with("limit", MAX_HEAD_LIMIT)
                .field("head_limit"));
            }
        };
        let tokens = TokenBudget::parse(req.max_tokens, &req.tokenizer)?;
        if tokens.is_some() && mode != pb::GrepOutputMode::Content {
            return Err(Error::invalid_argument(
                "max_tokens",
                "A budget in tokens applies to CONTENT mode, whose matches return text.",
            ));
        }
        let glob = match req.glob.as_str() {
            "" => None,
            g => Some(Glob::new(g).map_err(|e| {
                let reason = if matches!(e, GlobError::TooLong) { Reason::TooLarge } else { Reason::InvalidPattern };
                Error::new(reason, format!("The glob {g:?} is not usable: {e}.")).field("glob")
            })?),
        };
        let types = if req.r#type.is_empty() {
            None
        } else {
            let mut builder = TypesBuilder::new();
            builder.add_defaults();
            for name in &req.r#type {
                builder.select(name);
            }
            Some(builder.build().map_err(|e| {
                Error::new(
                    Reason::InvalidArgument,
                    format!("Unknown file type: {e}. Use ripgrep type names such as rust, py, js, md."),
                )
                .field("type")
            })?)
        };
        let mut types_sorted = req.r#type.clone();
        types_sorted.sort();
        let fingerprint_parts = vec![
            pattern.clone(),
            req.glob.clone(),
            types_sorted.join(","),
            format!("{}{}{}", u8::from(req.fixed_strings), u8::from(req.case_insensitive), u8::from(req.multiline)),
            format!("{}:{before}:{after}:{}", req.output_mode, req.offset),
        ];
        Ok(Self {
            pattern: pattern.clone(),
            fixed_strings: req.fixed_strings,
            case_insensitive: req.case_insensitive,
            multiline: req.multiline,
            mode,
            line_numbers: req.line_numbers.unwrap_or(true),
            before,
            after,
            head_limit,
            tokens,
            offset: req.offset,
            glob,
            types,
            fingerprint_parts,
        })
    }

    /// The parts of the fingerprint that choose files (the glob and the
    /// types), as opposed to what is looked for in them.
    pub fn file_filter(&self) -> [&str; 2] {
        [&self.fingerprint_parts[1], &self.fingerprint_parts[2]]
    }

    /// Whether a file below `root` is part of the search.
    pub fn selects(&self, root: &SpacePath, path: &SpacePath) -> bool {
        self.glob.as_ref().is_none_or(|g| g.matches(root, path))
            && self.types.as_ref().is_none_or(|t| t.matched(path.name(), false).is_whitelist())
    }
}

/// Parses the regex like the worker will, to report errors with a position
/// before any job is queued.
fn check_syntax(pattern: &str, case_insensitive: bool, multiline: bool) -> Result<()> {
    let mut parser = regex_syntax::ParserBuilder::new()
        .nest_limit(NEST_LIMIT)
        .case_insensitive(case_insensitive)
        .multi_line(true)
        .dot_matches_new_line(multiline)
        .build();
    match parser.parse(pattern) {
        Ok(_) => Ok(()),
        Err(regex_syntax::Error::Parse(e)) => Err(invalid_pattern(&e.kind().to_string(), e.span().start.offset)),
        Err(regex_syntax::Error::Translate(e)) => Err(invalid_pattern(&e.kind().to_string(), e.span().start.offset)),
        Err(e) => Err(invalid_pattern(&e.to_string(), 0)),
    }
}

fn invalid_pattern(why: &str, position: usize) -> Error {
    Error::new(Reason::InvalidPattern, format!("The pattern is not a valid regex at byte {position}: {why}."))
        .with("position", position)
        .next_action("Fix the pattern at the reported position, or set fixed_strings to search for it literally.")
        .field("pattern")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(pattern: &str) -> pb::GrepRequest {
        pb::GrepRequest { pattern: pattern.into(), ..Default::default() }
    }

    #[test]
    fn bad_patterns_report_their_position() {
        let err = GrepQuery::parse(&req("ab(c")).unwrap_err();
        assert_eq!(err.reason, Reason::InvalidPattern);
        assert_eq!(err.info_metadata()["position"], "2");
        let err = GrepQuery::parse(&req("x\\p{Nope}")).unwrap_err();
        assert_eq!(err.info_metadata()["position"], "1");
        assert!(GrepQuery::parse(&pb::GrepRequest { fixed_strings: true, ..req("ab(c") }).is_ok());
        assert_eq!(GrepQuery::parse(&req("a\0b")).unwrap_err().reason, Reason::InvalidPattern);
        assert_eq!(GrepQuery::parse(&req(&"(".repeat(150))).unwrap_err().reason, Reason::InvalidPattern);
        assert_eq!(GrepQuery::parse(&req(&"a".repeat(5000))).unwrap_err().reason, Reason::TooLarge);
    }

    #[test]
    fn tokens_bind_the_context_the_scan_uses() {
        let parse = |before_context, after_context, context| {
            GrepQuery::parse(&pb::GrepRequest { before_context, after_context, context, ..req("x") }).unwrap()
        };
        let own_side_wins = parse(2, 0, 5);
        assert_eq!((own_side_wins.before, own_side_wins.after), (2, 5));
        let wider = parse(5, 0, 0);
        assert_eq!((wider.before, wider.after), (5, 0));
        assert_ne!(own_side_wins.fingerprint_parts, wider.fingerprint_parts);
        assert_ne!(parse(2, 0, 5).fingerprint_parts, parse(5, 0, 5).fingerprint_parts);
        // The same scan spelt two ways is one query.
        assert_eq!(parse(3, 3, 0).fingerprint_parts, parse(0, 0, 3).fingerprint_parts);
        assert_eq!(parse(3, 0, 3).fingerprint_parts, parse(0, 0, 3).fingerprint_parts);
    }

    #[test]
    fn types_and_globs_select_files() {
        let q = GrepQuery::parse(&pb::GrepRequest { r#type: vec!["rust".into()], ..req("x") }).unwrap();
        let root = SpacePath::root();
        assert!(q.selects(&root, &SpacePath::parse("/src/main.rs").unwrap()));
        assert!(!q.selects(&root, &SpacePath::parse("/README.md").unwrap()));
        let unknown = GrepQuery::parse(&pb::GrepRequest { r#type: vec!["nope".into()], ..req("x") }).unwrap_err();
        assert_eq!(unknown.reason, Reason::InvalidArgument);
    }
}
