//! `PageToken::decode` on arbitrary text, and encode/decode of arbitrary tokens.
#![no_main]

use agentvfs_front::grpc::page_token::PageToken;
use agentvfs_front::properties::{check_page_token, check_page_token_fields};
use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;

#[derive(Debug, Arbitrary)]
enum Input<'a> {
    /// Arbitrary text presented as a token.
    Text { token: &'a str, fingerprint: [u8; 16] },
    /// Arbitrary bytes, encoded as a token would be.
    Bytes { bytes: &'a [u8], fingerprint: [u8; 16] },
    /// A token the server could issue, checked against another fingerprint.
    Fields { fingerprint: [u8; 16], revision: u64, after: String, position: u64, line: u64, other: [u8; 16] },
}

fuzz_target!(|input: Input<'_>| {
    match input {
        Input::Text { token, fingerprint } => check_page_token(token, fingerprint),
        Input::Bytes { bytes, fingerprint } => {
            use base64::Engine as _;
            check_page_token(&base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes), fingerprint);
        }
        Input::Fields { fingerprint, revision, after, position, line, other } => {
            let token = PageToken { fingerprint, revision, after, position, line };
            check_page_token_fields(&token, other);
        }
    }
});
