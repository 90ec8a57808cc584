//! `GET /openapi.json` (SPEC §11) from a real front, checked by a real
//! validator: `openapi-spec-validator`, found at the path in
//! `AGENTVFS_OPENAPI_VALIDATOR`. `scripts/test` installs it and sets the
//! variable; by hand, `export AGENTVFS_OPENAPI_VALIDATOR=$(scripts/openapi-validator)`.
//! Without it the test fails rather than pass unchecked.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;

use serde_json::Value;
use support::{Front, free_port};

const VALIDATOR: &str = "AGENTVFS_OPENAPI_VALIDATOR";

/// A front serving HTTP too, and its HTTP address (picked in advance: the
/// process prints only its gRPC address).
async fn front() -> (Front, String, tempfile::TempDir) {
    support::with_front_port(async |_| {
        let http = format!("127.0.0.1:{}", free_port());
        let temp = tempfile::tempdir().unwrap();
        let front = Front::try_start_at_with("127.0.0.1:0", temp.path(), &["--http-listen", &http]).await?;
        Some((front, http, temp))
    })
    .await
}

/// One HTTP/1.1 exchange without a body: the status, the head (lowercase)
/// and the body.
fn exchange(addr: &str, method: &str, path: &str) -> (u16, String, Vec<u8>) {
    let mut stream = TcpStream::connect(addr).unwrap();
    let request = format!("{method} {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\ncontent-length: 0\r\n\r\n");
    stream.write_all(request.as_bytes()).unwrap();
    let mut response = Vec::new();
    stream.read_to_end(&mut response).unwrap();
    let end = response.windows(4).position(|window| window == b"\r\n\r\n").expect("a complete head");
    let head = String::from_utf8_lossy(&response[..end]).to_ascii_lowercase();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, head, response[end + 4..].to_vec())
}

#[tokio::test]
async fn the_served_document_is_valid_openapi_3_1_of_every_route() {
    let validator = std::env::var_os(VALIDATOR).unwrap_or_else(|| {
        panic!(
            "{VALIDATOR} is not set: it names the openapi-spec-validator that checks the document. Run \
             scripts/test, or `export {VALIDATOR}=$(scripts/openapi-validator)` (which installs it) first."
        )
    });
    let (_front, http, temp) = front().await;

    let (status, head, body) = exchange(&http, "GET", "/openapi.json");
    assert_eq!(status, 200, "{head}");
    assert!(head.contains("\r\ncontent-type: application/json"), "{head}");
    let document: Value = serde_json::from_slice(&body).expect("the document is JSON");
    assert_eq!(document["openapi"], "3.1.0");
    for path in [
        "/api/v1/fs/read",
        "/api/v1/fs/read_many",
        "/api/v1/fs/list_versions",
        "/api/v1/admin/create_space",
        "/api/v1/fs/watch",
        "/api/v1/fs/content",
        "/mcp",
        "/openapi.json",
    ] {
        assert!(document["paths"][path].is_object(), "no path {path}");
    }

    let file = temp.path().join("openapi.json");
    std::fs::write(&file, &body).unwrap();
    let output = Command::new(&validator)
        .args(["--schema", "3.1", "--validation-errors", "all"])
        .arg(&file)
        .output()
        .unwrap_or_else(|error| panic!("cannot run {validator:?} ({VALIDATOR}): {error}"));
    assert!(
        output.status.success(),
        "openapi-spec-validator refused the document:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );

    let (status, _, body) = exchange(&http, "POST", "/openapi.json");
    assert_eq!(status, 405, "{}", String::from_utf8_lossy(&body));
}
