//! The headers of SPEC §11: those a call may send (parameters), those every
//! reply carries, and the bearer token (a security scheme, since OpenAPI
//! does not describe `Authorization` as a parameter).

use serde_json::{Value, json};

/// Request headers, by component name.
const PARAMETERS: &str = "#/components/parameters/";
/// Response headers, by component name.
const HEADERS: &str = "#/components/headers/";

/// The headers of every call: who is calling, how, and which call this is.
pub(super) const CALL: &[&str] = &["Session", "Mode", "ToolCall", "Lease", "RequestId"];

/// A `$ref` to the request header `name`.
pub(super) fn parameter(name: &str) -> Value {
    json!({ "$ref": format!("{PARAMETERS}{name}") })
}

/// A `$ref` to the response header `name`.
pub(super) fn header(name: &str) -> Value {
    json!({ "$ref": format!("{HEADERS}{name}") })
}

/// `components.parameters`.
pub(super) fn parameters() -> Value {
    json!({
        "Session": in_header("X-Agentvfs-Session", json!({ "type": "string" }),
            "The agentvfs session the call belongs to: what a session has read lets a later edit of the \
             same file go ahead without `baseVersion`."),
        "Mode": in_header("X-Agentvfs-Mode", json!({ "type": "string", "enum": ["read-only", "edit"] }),
            "Narrows the caller's rights for this call: `read-only` refuses every change."),
        "ToolCall": in_header("X-Agentvfs-Tool-Call", json!({ "type": "string" }),
            "The agent's tool-call ID, recorded on the versions the call writes."),
        "Lease": in_header("X-Agentvfs-Lease", json!({ "type": "string" }),
            "The path leases the call carries (`leaseId`s from `acquire_lease`, comma-separated): a change \
             under a leased path is refused with `LEASE_HELD` to a call that does not carry its lease."),
        "RequestId": in_header("X-Request-Id", json!({ "type": "string" }),
            "An ID for this call, echoed in the reply's `x-request-id`; without it the server makes one."),
        "RequestTimeout": in_header("X-Request-Timeout", json!({ "type": "number", "minimum": 0 }),
            "The call's deadline in decimal seconds, as `2.5`; the server's own limit applies when shorter."),
        "IdempotencyKey": in_header("Idempotency-Key", json!({ "type": "string" }),
            "Fills an empty `idempotencyKey` of the request: a change retried with the same key is applied \
             at most once, and the retry gets the first reply."),
        "LastEventId": in_header("Last-Event-ID", json!({ "type": "string", "pattern": "^[0-9]+(/[0-9]+)?$" }),
            "Resumes a watch after this event (`<revision>/<index>`, as an event's `id:`), or after every \
             event of a revision (a bare `<revision>`); it overrides `from_revision`."),
        "McpSession": in_header("Mcp-Session-Id", json!({ "type": "string" }),
            "The MCP session: the `Mcp-Session-Id` of the reply to `initialize`, sent with every later \
             request. One MCP session is one agentvfs session."),
        "McpProtocolVersion": in_header("MCP-Protocol-Version", json!({ "type": "string" }),
            "The MCP protocol revision agreed at `initialize`."),
    })
}

/// `components.headers`.
pub(super) fn headers() -> Value {
    json!({
        "RequestId": {
            "description": "The call's request ID: the caller's `X-Request-Id`, or one the server made.",
            "schema": { "type": "string" },
        },
        "RetryAfter": {
            "description": "Seconds to wait before retrying: the error's `RetryInfo` delay, rounded up.",
            "schema": { "type": "integer", "minimum": 0 },
        },
    })
}

/// `components.securitySchemes`.
pub(super) fn security_schemes() -> Value {
    json!({
        "bearer": {
            "type": "http",
            "scheme": "bearer",
            "description": "A token of the server's `--tokens` file. A `--dev` server also takes calls \
                            without one, as principal `dev`.",
        },
    })
}

/// A response header of one route.
pub(super) fn response_header(description: &str, schema: Value) -> Value {
    json!({ "description": description, "schema": schema })
}

/// An optional request header.
pub(super) fn in_header(name: &str, schema: Value, description: &str) -> Value {
    json!({ "name": name, "in": "header", "required": false, "schema": schema, "description": description })
}
