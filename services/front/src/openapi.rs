//! `GET /openapi.json` (SPEC §11): an OpenAPI 3.1 document of every HTTP
//! route, generated from the proto descriptors the build compiled, so that
//! it describes exactly what [`crate::rest`] serves and never drifts from
//! the protos. Nothing in it is written per message:
//!
//! - every message and enum the routes carry becomes a component schema of
//!   its proto3 JSON form (`schemas`), the protos' comments its
//!   descriptions (`comments`);
//! - every unary RPC of `FileSystem` and `Admin` a `POST` path, its failures
//!   the HTTP statuses of the gateway's own mapping of gRPC codes, each with
//!   Google's error body (`errors`);
//! - the headers of SPEC §11 shared parameters (`headers`); the watch and
//!   content streams, `/mcp` (`mcp`) and this document their own paths
//!   (`routes`);
//! - the configurable limits of SPEC §7, at their defaults, in the
//!   description; the fixed ones on the fields they bound.
//!
//! ```
//! let document: serde_json::Value = serde_json::from_slice(agentvfs_front::openapi::document()).unwrap();
//! assert_eq!(document["openapi"], "3.1.0");
//! assert!(document["paths"]["/api/v1/fs/read"]["post"].is_object());
//! ```

use std::sync::LazyLock;

use prost_reflect::DescriptorPool;
use serde_json::{Map, Value, json};

use crate::config::{Config, Options};

mod comments;
mod errors;
mod headers;
mod mcp;
mod routes;
mod schemas;
#[cfg(test)]
mod tests;

use comments::Comments;
use routes::Routes;

/// The file of the error detail messages (`ErrorInfo`, `RetryInfo`, …).
const ERROR_DETAILS: &str = "google/rpc/error_details.proto";

static DOCUMENT: LazyLock<Vec<u8>> = LazyLock::new(|| {
    let pool = DescriptorPool::decode(agentvfs_proto::FILE_DESCRIPTOR_SET)
        .expect("the descriptors compiled into agentvfs-proto decode");
    serde_json::to_vec(&build(&pool)).expect("a JSON value serializes")
});

/// The document as JSON, built on first use.
pub fn document() -> &'static [u8] {
    &DOCUMENT
}

/// The document for the routes of the services in `pool`.
fn build(pool: &DescriptorPool) -> Value {
    let comments = Comments::new(pool);
    let routes = Routes { pool, comments: &comments };
    let details: Vec<_> =
        pool.get_file_by_name(ERROR_DETAILS).map(|file| file.messages().collect()).unwrap_or_default();
    let mut components: Map<String, Value> = schemas::reachable(routes.messages().into_iter().chain(details.clone()))
        .into_iter()
        .map(|(name, definition)| (name, schemas::component(&definition, &comments)))
        .collect();
    components.insert("Error".to_owned(), errors::error_schema(&details));
    components.insert("JsonRpcMessage".to_owned(), mcp::json_rpc_schema());
    let mut tags: Vec<Value> = routes
        .services()
        .map(|(_, service)| {
            let mut tag = json!({ "name": service.name() });
            schemas::describe(&mut tag, &[comments.of(&service.parent_file(), service.path()).unwrap_or_default()]);
            tag
        })
        .collect();
    tags.push(json!({ "name": "MCP", "description": "The agentvfs tools over the Model Context Protocol." }));
    tags.push(json!({ "name": "OpenAPI", "description": "This document." }));
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "agentvfs",
            "version": env!("CARGO_PKG_VERSION"),
            "description": description(&defaults()),
        },
        "tags": tags,
        "security": [{ "bearer": [] }],
        "paths": routes.paths(),
        "components": {
            "schemas": components,
            "responses": errors::responses(),
            "parameters": headers::parameters(),
            "headers": headers::headers(),
            "securitySchemes": headers::security_schemes(),
        },
    })
}

/// The configuration of a server given no setting but `--dev` (which only
/// spares it a tokens file): every limit at its default.
fn defaults() -> Config {
    Options { dev: Some(true), ..Options::default() }.resolve().expect("the default configuration is valid")
}

/// What every route shares: the JSON mapping, errors, and the configurable
/// limits of SPEC §7 at their defaults.
fn description(defaults: &Config) -> String {
    let limits = &defaults.limits;
    let grep = crate::grep::query::DEFAULT_HEAD_LIMIT;
    format!(
        "A versioned file system for AI agents over HTTP: every unary RPC of `agentvfs.v1.FileSystem` as \
         `POST /api/v1/fs/{{rpc}}` and of `agentvfs.v1.Admin` as `POST /api/v1/admin/{{rpc}}`, `{{rpc}}` its \
         name in snake_case; changes as Server-Sent Events; raw file content; MCP. Generated from the proto \
         descriptors: the descriptions are the protos' comments.\n\n\
         **proto3 JSON.** Replies name fields in lowerCamelCase and leave out fields at their default (0, \
         false, empty); requests may use either that or the proto's snake_case names, and unknown fields are \
         refused. 64-bit integers are decimal strings, `bytes` base64, enums their value names (requests may \
         also send numbers for both), a `google.protobuf.Timestamp` an RFC 3339 string; non-finite floats are \
         `\"NaN\"`, `\"Infinity\"` and `\"-Infinity\"`.\n\n\
         **Errors.** The HTTP status of the gRPC code (Google's mapping) with Google's JSON error body \
         (`Error`); its `ErrorInfo` `reason` is stable, and `Retry-After` gives the `RetryInfo` delay.\n\n\
         **Limits** (the defaults; a server may be configured otherwise):\n\
         - a call's JSON body: twice the gRPC message limit of {message}, else 413 `TOO_LARGE`;\n\
         - text operations: files up to {text}; raw content: files up to {file};\n\
         - a grep page: {grep} entries unless `headLimit` says otherwise, {grep_bytes} scanned, {grep_files} \
         files visited;\n\
         - a space: {quota_bytes} and {quota_files} files;\n\
         - a folder moved, copied, trashed or removed whole: {subtree} entries;\n\
         - a call: {timeout} s; {rate} calls per second per principal, else 429 `RATE_LIMITED`.\n\n\
         Limits fixed in the server are on the fields they bound.",
        message = size(defaults.max_message_bytes as u64),
        text = size(limits.max_text_bytes),
        file = size(limits.max_file_bytes),
        grep_bytes = size(defaults.grep_max_bytes),
        grep_files = grouped(defaults.grep_max_files as u64),
        quota_bytes = size(limits.default_quota.max_bytes),
        quota_files = grouped(limits.default_quota.max_files),
        subtree = grouped(limits.max_subtree_entries as u64),
        timeout = defaults.request_timeout.as_secs(),
        rate = grouped(u64::from(defaults.rate_limit)),
    )
}

/// `bytes` in the largest binary unit that divides it: `5 MiB`.
fn size(bytes: u64) -> String {
    let units = [(1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")];
    match units.iter().find(|(unit, _)| bytes >= *unit && bytes.is_multiple_of(*unit)) {
        Some((unit, name)) => format!("{} {name}", grouped(bytes / unit)),
        None => format!("{} bytes", grouped(bytes)),
    }
}

/// `n` with thousands separated by commas: `100,000`.
fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}
