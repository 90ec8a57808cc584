//! Failed calls: Google's JSON error body (the `Error` schema) and one
//! response per HTTP status the gateway fails with, each status named with
//! the gRPC codes behind it by the gateway's own mapping.

use std::collections::BTreeMap;

use agentvfs_proto::code_name;
use prost_reflect::MessageDescriptor;
use serde_json::{Map, Value, json};
use tonic::Code;

use super::headers::header;
use super::schemas::reference;
use crate::rest::http_status;

/// Where the document keeps its shared responses.
const RESPONSES: &str = "#/components/responses/";

/// Statuses whose errors may say when to retry (`RATE_LIMITED`,
/// `OVERLOADED`, `WORKER_UNAVAILABLE`, `SHUTTING_DOWN`).
const RETRYABLE: [u16; 2] = [429, 503];

/// Failures of the HTTP layer itself, before any call: a body over the
/// limit, one that is not JSON, one that does not arrive in time.
pub(super) const BODY_FAILURES: &[u16] = &[408, 413, 415];

/// The gRPC codes of failed calls.
fn failure_codes() -> impl Iterator<Item = Code> {
    (1..=16).map(Code::from_i32)
}

/// The HTTP status of each failed call, with the names of its gRPC codes.
fn call_statuses() -> BTreeMap<u16, Vec<&'static str>> {
    let mut statuses = BTreeMap::<u16, Vec<&str>>::new();
    for code in failure_codes() {
        statuses.entry(http_status(code).as_u16()).or_default().push(code_name(code));
    }
    statuses
}

/// The `responses` entries of a route's failures: every failed call, and
/// the body failures in `body`.
pub(super) fn failures(body: &[u16]) -> Map<String, Value> {
    call_statuses()
        .into_keys()
        .chain(body.iter().copied())
        .map(|status| (status.to_string(), json!({ "$ref": format!("{RESPONSES}Error{status}") })))
        .collect()
}

/// `components.responses`: one per status of [`failures`].
pub(super) fn responses() -> Value {
    let calls = call_statuses().into_iter().map(|(status, codes)| {
        let mut codes = codes.join(", ");
        if let Some(last) = codes.rfind(", ") {
            codes.replace_range(last..last + 2, " or ");
        }
        (status, format!("The call failed with gRPC code {codes}; `details` say why (see `Error`)."))
    });
    let body = [
        (408, "The request body did not arrive in time."),
        (413, "The request body is over the size limit (reason `TOO_LARGE`)."),
        (415, "The request body is not `application/json`."),
    ]
    .map(|(status, text)| (status, text.to_owned()));
    let responses: Map<String, Value> =
        calls.chain(body).map(|(status, text)| (format!("Error{status}"), response(status, &text))).collect();
    Value::Object(responses)
}

fn response(status: u16, description: &str) -> Value {
    let mut headers = Map::from_iter([("x-request-id".to_owned(), header("RequestId"))]);
    if RETRYABLE.contains(&status) {
        headers.insert("Retry-After".to_owned(), header("RetryAfter"));
    }
    json!({
        "description": description,
        "headers": headers,
        "content": { "application/json": { "schema": reference("Error") } },
    })
}

/// Google's JSON error body (AIP-193); `details` are the status's detail
/// messages as `Any`, each one of `detail_types`.
pub(super) fn error_schema(detail_types: &[MessageDescriptor]) -> Value {
    let statuses: Vec<&str> = failure_codes().map(code_name).collect();
    let details: Vec<Value> = detail_types
        .iter()
        .map(|detail| {
            json!({
                "allOf": [reference(detail.full_name())],
                "properties": { "@type": { "const": format!("type.googleapis.com/{}", detail.full_name()) } },
                "required": ["@type"],
            })
        })
        .collect();
    json!({
        "type": "object",
        "required": ["error"],
        "description": "Google's JSON error body. `details` carry one `google.rpc.ErrorInfo` (domain `agentvfs`, \
                        a stable `reason`, `metadata` with `retryable` and `nextAction`), and `BadRequest`, \
                        `PreconditionFailure`, `QuotaFailure` or `RetryInfo` where they apply.",
        "properties": {
            "error": {
                "type": "object",
                "required": ["code", "status", "message", "details"],
                "properties": {
                    "code": { "type": "integer", "description": "The HTTP status." },
                    "status": { "type": "string", "enum": statuses, "description": "The gRPC code." },
                    "message": { "type": "string", "description": "What went wrong, in a sentence." },
                    "details": {
                        "type": "array",
                        "items": { "anyOf": details },
                        "description": "Detail messages as `google.protobuf.Any` in proto3 JSON: `@type` names \
                                        the type and its fields sit beside it.",
                    },
                },
            },
        },
    })
}
