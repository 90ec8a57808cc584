//! `GET /openapi.json` (SPEC §11) from a real front, checked by a real
//! validator: `openapi-spec-validator`, found at the path in
//! `AGENTVFS_OPENAPI_VALIDATOR`. `scripts/test` installs it and sets the
//! variable; by hand, `export AGENTVFS_OPENAPI_VALIDATOR=$(scripts/openapi-validator)`.
//! Without it the test fails rather than pass unchecked.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::process::Command;

use serde_json::Value;
use support::http::exchange;

const VALIDATOR: &str = "AGENTVFS_OPENAPI_VALIDATOR";

#[tokio::test]
async fn the_served_document_is_valid_openapi_3_1_of_every_route() {
    let validator = std::env::var_os(VALIDATOR).unwrap_or_else(|| {
        panic!(
            "{VALIDATOR} is not set: it names the openapi-spec-validator that checks the document. Run \
             scripts/test, or `export {VALIDATOR}=$(scripts/openapi-validator)` (which installs it) first."
        )
    });
    let (_front, http, temp) = support::front_with_http(&[]).await;

    let (status, headers, body) = exchange(&http, "GET", "/openapi.json", &[], "");
    assert_eq!(status, 200, "{headers:?}");
    assert!(headers.contains(&("content-type".to_owned(), "application/json".to_owned())), "{headers:?}");
    let document: Value = serde_json::from_str(&body).expect("the document is JSON");
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

    let (status, _, body) = exchange(&http, "POST", "/openapi.json", &[], "");
    assert_eq!(status, 405, "{body}");
}
