//! What a file is when it is not text: its MIME type, detected once from the
//! signature its bytes start with (the `infer` crate's), at write time.
//!
//! ```
//! use agentvfs_front::media;
//!
//! assert_eq!(media::detect(b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR"), "image/png");
//! assert_eq!(media::detect(b"\0\x01\x02"), media::UNKNOWN);
//! ```

use crate::text::TextMeta;
use crate::text::encoding::Charset;

/// The MIME type of every text file.
pub const TEXT: &str = "text/plain; charset=utf-8";

/// The MIME type of bytes whose signature no format claims.
pub const UNKNOWN: &str = "application/octet-stream";

/// How many leading bytes the signatures look at (as many as `infer` reads
/// of a file).
pub const HEAD: usize = 8192;

/// The MIME type of content that is not text, from its first [`HEAD`] bytes
/// (more are ignored).
pub fn detect(bytes: &[u8]) -> &'static str {
    infer::get(&bytes[..bytes.len().min(HEAD)]).map_or(UNKNOWN, |kind| kind.mime_type())
}

/// What [`detect`] says of content that arrives in pieces: keeps its first
/// [`HEAD`] bytes.
#[derive(Debug, Default)]
pub struct Head(Vec<u8>);

impl Head {
    pub fn update(&mut self, bytes: &[u8]) {
        let wanted = HEAD.saturating_sub(self.0.len());
        self.0.extend_from_slice(&bytes[..bytes.len().min(wanted)]);
    }

    /// [`recorded`] of the bytes so far, in UTF-8 or not text.
    pub fn recorded(&self, text: &TextMeta) -> String {
        recorded(text, Charset::UTF_8, &self.0)
    }
}

/// What a version records of its content ([`VersionRecord::mime_type`]):
/// the detected type of content that is not text, nothing for UTF-8 text,
/// and for text in another encoding `text/plain; charset=NAME`
/// ([`Charset::of_mime_type`] reads it back).
///
/// [`VersionRecord::mime_type`]: crate::store::VersionRecord::mime_type
pub fn recorded(text: &TextMeta, charset: Charset, head: &[u8]) -> String {
    if text.is_text { charset.recorded_mime_type() } else { detect(head).to_owned() }
}

/// The type of a file whose latest version is `is_text` and recorded
/// `mime_type`, as the API shows it: empty when it was not recorded.
pub fn shown(is_text: bool, mime_type: &str) -> &str {
    match (is_text, mime_type) {
        (true, "") => TEXT,
        _ => mime_type,
    }
}
