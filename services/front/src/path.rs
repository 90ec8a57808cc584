//! Validated, normalized paths inside a space.
//!
//! A [`SpacePath`] is absolute, `/`-separated, in Unicode NFC, with no empty,
//! `.` or `..` segments. Every string that reaches the store went through
//! [`SpacePath::parse`], so the store can rely on those invariants.

use std::fmt;

use unicode_normalization::UnicodeNormalization;

/// Longest accepted path, in bytes, after normalization.
pub const MAX_PATH_BYTES: usize = 4096;
/// Longest accepted segment, in bytes.
pub const MAX_SEGMENT_BYTES: usize = 255;
/// Deepest accepted path, in segments.
pub const MAX_DEPTH: usize = 64;

/// Why a path was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    #[error("path contains a `..` segment; parent traversal is not allowed")]
    Traversal,
    #[error("path contains a NUL or other control character")]
    ControlCharacter,
    #[error("path contains a backslash; use `/` as the separator")]
    Backslash,
    #[error("a path segment is longer than {MAX_SEGMENT_BYTES} bytes")]
    SegmentTooLong,
    #[error("path is longer than {MAX_PATH_BYTES} bytes")]
    TooLong,
    #[error("path is deeper than {MAX_DEPTH} segments")]
    TooDeep,
}

/// An absolute, normalized path; `/` is the root.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SpacePath(String);

impl SpacePath {
    /// The root directory.
    pub fn root() -> Self {
        Self("/".to_owned())
    }

    /// Normalizes and validates a path: adds a missing leading `/`, drops
    /// repeated and trailing `/` and `.` segments, converts to NFC; refuses
    /// `..`, control characters, `\` and oversized input.
    pub fn parse(input: &str) -> Result<Self, PathError> {
        if input.chars().any(char::is_control) {
            return Err(PathError::ControlCharacter);
        }
        if input.contains('\\') {
            return Err(PathError::Backslash);
        }
        // Cheap guard before normalization allocates: NFC never shrinks
        // a string by more than a small factor, so this only refuses
        // input that could not pass the checks below anyway.
        if input.len() > MAX_PATH_BYTES * 4 {
            return Err(PathError::TooLong);
        }
        // Most paths are NFC already (all ASCII ones are): the quick check
        // answers for them without building a copy.
        let normalized = match unicode_normalization::is_nfc_quick(input.chars()) {
            unicode_normalization::IsNormalized::Yes => std::borrow::Cow::Borrowed(input),
            _ => std::borrow::Cow::Owned(input.nfc().collect::<String>()),
        };
        let mut path = String::with_capacity(normalized.len() + 1);
        let mut depth = 0;
        for segment in normalized.split('/') {
            match segment {
                "" | "." => continue,
                ".." => return Err(PathError::Traversal),
                _ => {}
            }
            if segment.len() > MAX_SEGMENT_BYTES {
                return Err(PathError::SegmentTooLong);
            }
            depth += 1;
            path.push('/');
            path.push_str(segment);
        }
        if depth > MAX_DEPTH {
            return Err(PathError::TooDeep);
        }
        if path.is_empty() {
            path.push('/');
        }
        if path.len() > MAX_PATH_BYTES {
            return Err(PathError::TooLong);
        }
        Ok(Self(path))
    }

    /// Wraps a string the store wrote itself, already normalized.
    pub(crate) fn from_stored(path: String) -> Self {
        debug_assert!(path.starts_with('/'), "stored path {path:?} must be absolute");
        Self(path)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn is_root(&self) -> bool {
        self.0 == "/"
    }

    /// The last segment; empty for the root.
    pub fn name(&self) -> &str {
        self.0.rsplit('/').next().unwrap_or("")
    }

    /// The containing directory; `None` for the root.
    pub fn parent(&self) -> Option<SpacePath> {
        if self.is_root() {
            return None;
        }
        let cut = self.0.rfind('/').unwrap_or(0);
        Some(if cut == 0 { Self::root() } else { Self(self.0[..cut].to_owned()) })
    }

    /// Every proper ancestor from the top down, root excluded.
    pub fn ancestors(&self) -> Vec<SpacePath> {
        self.0.match_indices('/').skip(1).map(|(i, _)| Self(self.0[..i].to_owned())).collect()
    }

    /// `self` followed by a relative path (itself normalized and validated).
    pub fn join(&self, relative: &str) -> Result<SpacePath, PathError> {
        SpacePath::parse(&format!("{}/{}", self.0, relative))
    }

    /// Whether `self` is `other` or lies below it.
    pub fn starts_with(&self, other: &SpacePath) -> bool {
        other.is_root()
            || self.0 == other.0
            || (self.0.starts_with(&other.0) && self.0.as_bytes().get(other.0.len()) == Some(&b'/'))
    }

    /// The path below `root`, without a leading `/` (empty when equal).
    pub fn relative_to(&self, root: &SpacePath) -> &str {
        debug_assert!(self.starts_with(root));
        let rest = &self.0[root.0.len().min(self.0.len())..];
        rest.trim_start_matches('/')
    }

    /// Segments below the root.
    pub fn depth(&self) -> usize {
        if self.is_root() { 0 } else { self.0.matches('/').count() }
    }
}

impl fmt::Display for SpacePath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for SpacePath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(input: &str) -> String {
        SpacePath::parse(input).expect(input).to_string()
    }

    #[test]
    fn normalizes_separators_and_dots() {
        assert_eq!(ok(""), "/");
        assert_eq!(ok("/"), "/");
        assert_eq!(ok("a/b"), "/a/b");
        assert_eq!(ok("//a///b/"), "/a/b");
        assert_eq!(ok("/a/./b/."), "/a/b");
    }

    #[test]
    fn nfd_and_nfc_spell_the_same_path() {
        assert_eq!(ok("/caf\u{0065}\u{0301}"), ok("/caf\u{00e9}"));
    }

    #[test]
    fn refuses_traversal_controls_and_backslashes() {
        assert_eq!(SpacePath::parse("/a/../b"), Err(PathError::Traversal));
        assert_eq!(SpacePath::parse(".."), Err(PathError::Traversal));
        assert_eq!(SpacePath::parse("/a\0b"), Err(PathError::ControlCharacter));
        assert_eq!(SpacePath::parse("/a\nb"), Err(PathError::ControlCharacter));
        assert_eq!(SpacePath::parse("/a\\b"), Err(PathError::Backslash));
    }

    #[test]
    fn enforces_size_limits() {
        assert!(SpacePath::parse(&"a".repeat(255)).is_ok());
        assert_eq!(SpacePath::parse(&"a".repeat(256)), Err(PathError::SegmentTooLong));
        assert!(SpacePath::parse(&"/a".repeat(64)).is_ok());
        assert_eq!(SpacePath::parse(&"/a".repeat(65)), Err(PathError::TooDeep));
        let long = format!("/{}", vec!["b".repeat(200); 21].join("/"));
        assert_eq!(SpacePath::parse(&long), Err(PathError::TooLong));
    }

    #[test]
    fn navigates() {
        let p = SpacePath::parse("/a/b/c.md").unwrap();
        assert_eq!(p.name(), "c.md");
        assert_eq!(p.parent().unwrap().as_str(), "/a/b");
        assert_eq!(p.ancestors().iter().map(|a| a.as_str()).collect::<Vec<_>>(), ["/a", "/a/b"]);
        assert!(p.starts_with(&SpacePath::parse("/a").unwrap()));
        assert!(!SpacePath::parse("/ab").unwrap().starts_with(&SpacePath::parse("/a").unwrap()));
        assert_eq!(p.relative_to(&SpacePath::parse("/a").unwrap()), "b/c.md");
        assert_eq!(p.relative_to(&SpacePath::root()), "a/b/c.md");
        assert_eq!(SpacePath::parse("/a").unwrap().parent(), Some(SpacePath::root()));
        assert_eq!(p.depth(), 3);
    }
}
