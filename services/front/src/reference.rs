//! References: the ways a request can name a node.
//!
//! `agentvfs:item:<NODE_ID>`, `agentvfs:space:<SPACE_ID>` (the root),
//! `agentvfs://<SPACE_ID>/<percent-encoded path>`, an absolute path, or a
//! relative path (resolved against an explicit base folder, else the root).
//! There is no implicit working directory.

use percent_encoding::percent_decode_str;

use crate::ids::{NodeId, SpaceId};
use crate::path::{PathError, SpacePath};

/// The URI scheme prefix of path references.
pub const URI_PREFIX: &str = "agentvfs://";
/// The prefix of node references.
pub const ITEM_PREFIX: &str = "agentvfs:item:";
/// The prefix of space-root references.
pub const SPACE_PREFIX: &str = "agentvfs:space:";

/// A parsed reference, not yet resolved against the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reference {
    /// A node by stable ID.
    Item(NodeId),
    /// The root of a space, by ID.
    SpaceRoot(SpaceId),
    /// A path in a space named by ID.
    Uri(SpaceId, SpacePath),
    /// An absolute path in the request's space.
    Absolute(SpacePath),
    /// A path relative to the request's base (or the root without one),
    /// already normalized as if it hung off the root.
    Relative(SpacePath),
}

/// Why a reference was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReferenceError {
    #[error(transparent)]
    Path(#[from] PathError),
    #[error("percent-encoded `/`, `\\` or `..` in a reference URI is not allowed")]
    EncodedTraversal,
    #[error("the reference is not valid: {0}")]
    Malformed(&'static str),
}

impl Reference {
    /// Parses a reference. An empty string is the root.
    pub fn parse(input: &str) -> Result<Self, ReferenceError> {
        if let Some(id) = input.strip_prefix(ITEM_PREFIX) {
            return id
                .parse()
                .map(Reference::Item)
                .map_err(|()| ReferenceError::Malformed("expected agentvfs:item:nd_<ULID>"));
        }
        if let Some(id) = input.strip_prefix(SPACE_PREFIX) {
            return id
                .parse()
                .map(Reference::SpaceRoot)
                .map_err(|()| ReferenceError::Malformed("expected agentvfs:space:sp_<ULID>"));
        }
        if let Some(rest) = input.strip_prefix(URI_PREFIX) {
            let (space, encoded) = rest.split_once('/').unwrap_or((rest, ""));
            let space =
                space.parse().map_err(|()| ReferenceError::Malformed("expected agentvfs://sp_<ULID>/<path>"))?;
            return Ok(Reference::Uri(space, decode_uri_path(encoded)?));
        }
        if input.starts_with("agentvfs:") {
            return Err(ReferenceError::Malformed("unknown agentvfs: reference form"));
        }
        let path = SpacePath::parse(input)?;
        Ok(if input.starts_with('/') || input.is_empty() {
            Reference::Absolute(path)
        } else {
            Reference::Relative(path)
        })
    }
}

/// Decodes the path of a reference URI segment by segment, so that an
/// encoded separator or traversal can never change the path's structure.
fn decode_uri_path(encoded: &str) -> Result<SpacePath, ReferenceError> {
    let mut decoded = String::with_capacity(encoded.len());
    for segment in encoded.split('/') {
        let segment = percent_decode_str(segment)
            .decode_utf8()
            .map_err(|_| ReferenceError::Malformed("percent-encoded bytes are not UTF-8"))?;
        if segment.contains(['/', '\\']) || segment == ".." {
            return Err(ReferenceError::EncodedTraversal);
        }
        decoded.push('/');
        decoded.push_str(&segment);
    }
    Ok(SpacePath::parse(&decoded)?)
}

/// The canonical URI of a path, each segment percent-encoded.
pub fn uri(space: SpaceId, path: &SpacePath) -> String {
    use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
    const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'_').remove(b'.').remove(b'~');
    let mut out = format!("{URI_PREFIX}{space}");
    for segment in path.as_str().split('/').skip(1).filter(|s| !s.is_empty()) {
        out.push('/');
        out.extend(utf8_percent_encode(segment, SEGMENT));
    }
    if path.is_root() {
        out.push('/');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_form() {
        let space = SpaceId::generate();
        let node = NodeId::generate();
        assert_eq!(Reference::parse(&format!("agentvfs:item:{node}")), Ok(Reference::Item(node)));
        assert_eq!(Reference::parse(&format!("agentvfs:space:{space}")), Ok(Reference::SpaceRoot(space)));
        assert_eq!(
            Reference::parse(&format!("agentvfs://{space}/Notes/My%20Plan.md")),
            Ok(Reference::Uri(space, SpacePath::parse("/Notes/My Plan.md").unwrap()))
        );
        assert_eq!(Reference::parse("/a/b"), Ok(Reference::Absolute(SpacePath::parse("/a/b").unwrap())));
        assert_eq!(Reference::parse("a/b"), Ok(Reference::Relative(SpacePath::parse("/a/b").unwrap())));
        assert_eq!(Reference::parse(""), Ok(Reference::Absolute(SpacePath::root())));
    }

    #[test]
    fn encoded_traversal_is_refused() {
        let space = SpaceId::generate();
        for bad in ["a/%2e%2e/b", "%2E%2E", "a%2fb", "a%2Fb", "a%5cb", "a/../b"] {
            let result = Reference::parse(&format!("agentvfs://{space}/{bad}"));
            assert!(
                matches!(result, Err(ReferenceError::EncodedTraversal | ReferenceError::Path(PathError::Traversal))),
                "{bad}: {result:?}"
            );
        }
    }

    #[test]
    fn malformed_ids_are_refused() {
        assert!(matches!(Reference::parse("agentvfs:item:nope"), Err(ReferenceError::Malformed(_))));
        assert!(matches!(Reference::parse("agentvfs:other"), Err(ReferenceError::Malformed(_))));
        assert!(matches!(Reference::parse("agentvfs://nope/a"), Err(ReferenceError::Malformed(_))));
    }

    #[test]
    fn uri_round_trips() {
        let space = SpaceId::generate();
        let path = SpacePath::parse("/a b/ü%/c.md").unwrap();
        assert_eq!(Reference::parse(&uri(space, &path)), Ok(Reference::Uri(space, path)));
        assert_eq!(Reference::parse(&uri(space, &SpacePath::root())), Ok(Reference::Uri(space, SpacePath::root())));
    }
}
