//! Page tokens: opaque to clients, bound to the call that made them.
//!
//! A token pins the revision of the first page (so every page reads the same
//! snapshot), records where to resume, and carries a fingerprint of the
//! arguments that shape the result (space, root, filters, mode). A token
//! presented with other arguments, or that fails to decode, is
//! `CURSOR_INVALID`; access is checked on every page regardless.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Reason, Result};

/// Longest accepted token, in bytes.
const MAX_TOKEN_BYTES: usize = 8 * 1024;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PageToken {
    pub fingerprint: [u8; 16],
    /// The pinned revision.
    pub revision: u64,
    /// Resume after this key (a path, a version number, …).
    pub after: String,
    /// A count carried between pages (e.g. entries of an offset still to skip).
    pub position: u64,
    /// A line inside `after` to resume after (grep pages that stop mid-file).
    pub line: u64,
}

/// Fingerprint of the arguments a token is bound to.
pub fn fingerprint(parts: &[&str]) -> [u8; 16] {
    let mut hasher = blake3::Hasher::new();
    for part in parts {
        hasher.update(&(part.len() as u64).to_le_bytes());
        hasher.update(part.as_bytes());
    }
    let mut out = [0; 16];
    out.copy_from_slice(&hasher.finalize().as_bytes()[..16]);
    out
}

impl PageToken {
    pub fn encode(&self) -> String {
        URL_SAFE_NO_PAD.encode(crate::store::records::encode(self))
    }

    /// Decodes `token` and checks that it belongs to a call with `fingerprint`.
    pub fn decode(token: &str, fingerprint: [u8; 16]) -> Result<PageToken> {
        let invalid = |why: &str| {
            Error::new(Reason::CursorInvalid, format!("The page token is not valid: {why}.")).field("page_token")
        };
        if token.len() > MAX_TOKEN_BYTES {
            return Err(invalid("it is too long"));
        }
        let bytes = URL_SAFE_NO_PAD.decode(token).map_err(|_| invalid("it is not a token this server issued"))?;
        let decoded: PageToken =
            postcard::from_bytes(&bytes).map_err(|_| invalid("it is not a token this server issued"))?;
        // postcard ignores trailing bytes and accepts over-long integers; only
        // the exact spelling the server issues is a token.
        if decoded.encode() != token {
            return Err(invalid("it is not a token this server issued"));
        }
        if decoded.fingerprint != fingerprint {
            return Err(invalid("it was issued for a call with different arguments"));
        }
        Ok(decoded)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_round_trip_and_bind_their_arguments() {
        let fp = fingerprint(&["list", "sp_x", "/"]);
        let token = PageToken { fingerprint: fp, revision: 7, after: "/a".into(), position: 3, line: 9 };
        assert_eq!(PageToken::decode(&token.encode(), fp).unwrap(), token);
        let other = fingerprint(&["list", "sp_x", "/b"]);
        assert_eq!(PageToken::decode(&token.encode(), other).unwrap_err().reason, Reason::CursorInvalid);
        assert_eq!(PageToken::decode("garbage!", fp).unwrap_err().reason, Reason::CursorInvalid);
        assert_eq!(PageToken::decode("", fp).unwrap_err().reason, Reason::CursorInvalid);
    }

    #[test]
    fn only_the_issued_spelling_is_accepted() {
        let fp = [0; 16];
        let token = PageToken { fingerprint: fp, revision: 0, after: String::new(), position: 0, line: 0 };
        let mut bytes = crate::store::records::encode(&token);
        assert_eq!(PageToken::decode(&URL_SAFE_NO_PAD.encode(&bytes), fp).unwrap(), token);
        // A trailing byte.
        bytes.push(0);
        assert_eq!(PageToken::decode(&URL_SAFE_NO_PAD.encode(&bytes), fp).unwrap_err().reason, Reason::CursorInvalid);
        // An over-long encoding of revision 0 (varint 0x80 0x00).
        bytes.pop();
        bytes.splice(16..17, [0x80, 0x00]);
        assert_eq!(PageToken::decode(&URL_SAFE_NO_PAD.encode(&bytes), fp).unwrap_err().reason, Reason::CursorInvalid);
    }

    #[test]
    fn fingerprints_separate_their_parts() {
        assert_ne!(fingerprint(&["ab", "c"]), fingerprint(&["a", "bc"]));
    }
}
