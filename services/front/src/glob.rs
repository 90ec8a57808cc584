//! File-name globs for `List`, `Find` and `Grep`.
//!
//! `*`, `?`, `**`, `[abc]` and `{a,b}`. A pattern without `/` matches base
//! names at any depth (`*.md` finds every Markdown file); a pattern with `/`
//! matches the path relative to the root the call was given. `*` and `?`
//! never cross a `/`. Patterns are brought to Unicode NFC, like paths, so a
//! pattern spelled in another normalization form matches the same names.

use globset::{GlobBuilder, GlobMatcher};
use unicode_normalization::UnicodeNormalization as _;

use crate::path::SpacePath;

/// Longest accepted glob, in bytes.
pub const MAX_GLOB_BYTES: usize = 1024;

/// A compiled glob.
#[derive(Debug, Clone)]
pub struct Glob {
    matcher: GlobMatcher,
    base_name_only: bool,
    source: String,
}

/// Why a glob was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GlobError {
    #[error("glob is longer than {MAX_GLOB_BYTES} bytes")]
    TooLong,
    #[error("glob is not valid: {0}")]
    Invalid(String),
}

impl Glob {
    /// Compiles a glob.
    pub fn new(pattern: &str) -> Result<Self, GlobError> {
        if pattern.len() > MAX_GLOB_BYTES {
            return Err(GlobError::TooLong);
        }
        let base_name_only = !pattern.contains('/');
        let normalized: String = pattern.nfc().collect();
        let trimmed = normalized.trim_start_matches('/');
        let glob = GlobBuilder::new(trimmed)
            .literal_separator(true)
            .backslash_escape(true)
            .empty_alternates(true)
            .build()
            .map_err(|e| GlobError::Invalid(e.kind().to_string()))?;
        Ok(Self { matcher: glob.compile_matcher(), base_name_only, source: pattern.to_owned() })
    }

    /// Whether `path`, found below `root`, matches.
    pub fn matches(&self, root: &SpacePath, path: &SpacePath) -> bool {
        if self.base_name_only {
            self.matcher.is_match(path.name())
        } else {
            self.matcher.is_match(path.relative_to(root))
        }
    }

    /// The pattern as given.
    pub fn as_str(&self) -> &str {
        &self.source
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> SpacePath {
        SpacePath::parse(s).unwrap()
    }

    #[test]
    fn patterns_match_whatever_normalization_form_they_are_spelled_in() {
        let root = SpacePath::root();
        for pattern in ["caf\u{e9}*.md", "cafe\u{301}*.md", "/notes/cafe\u{301}.md", "[e\u{301}x]*"] {
            let g = Glob::new(pattern).unwrap();
            let path = if pattern.starts_with('[') { p("/\u{e9}t\u{e9}") } else { p("/notes/caf\u{e9}.md") };
            assert!(g.matches(&root, &path), "{pattern:?} does not match {path}");
        }
    }

    #[test]
    fn base_name_patterns_match_at_any_depth() {
        let g = Glob::new("*.md").unwrap();
        let root = SpacePath::root();
        assert!(g.matches(&root, &p("/AGENT.md")));
        assert!(g.matches(&root, &p("/a/b/c.md")));
        assert!(!g.matches(&root, &p("/a/b/c.rs")));
    }

    #[test]
    fn path_patterns_match_relative_to_the_root() {
        let root = p("/src");
        assert!(Glob::new("**/*.rs").unwrap().matches(&root, &p("/src/a/b.rs")));
        assert!(Glob::new("**/*.rs").unwrap().matches(&root, &p("/src/b.rs")));
        assert!(Glob::new("a/*.rs").unwrap().matches(&root, &p("/src/a/b.rs")));
        assert!(!Glob::new("a/*.rs").unwrap().matches(&root, &p("/src/a/c/b.rs")));
        assert!(Glob::new("{a,b}/[xy]?.rs").unwrap().matches(&root, &p("/src/b/x1.rs")));
    }

    #[test]
    fn bad_globs_are_refused() {
        assert!(matches!(Glob::new("[abc"), Err(GlobError::Invalid(_))));
        assert!(matches!(Glob::new("{a,b"), Err(GlobError::Invalid(_))));
        assert_eq!(Glob::new(&"a".repeat(2000)).unwrap_err(), GlobError::TooLong);
    }
}
