//! `/mcp`: the Model Context Protocol's Streamable HTTP transport, in
//! brief. Its messages are JSON-RPC 2.0, whose methods and tools MCP
//! itself describes (`tools/list`), so the document gives their envelope
//! only.

use serde_json::{Value, json};

use super::headers::{parameter, response_header};
use super::schemas::reference;

/// `/mcp`.
pub(super) fn path() -> Value {
    let sent = json!({
        "200": {
            "description": "The response (to `initialize`, with the new session's `Mcp-Session-Id`).",
            "headers": {
                "Mcp-Session-Id": response_header("The MCP session `initialize` opened.", json!({ "type": "string" })),
            },
            "content": {
                "application/json": { "schema": reference("JsonRpcMessage") },
                "text/event-stream": { "schema": { "type": "string" } },
            },
        },
        "202": { "description": "The notification or response was accepted." },
        "400": { "description": "Not a JSON-RPC message, or no `Mcp-Session-Id` after `initialize`." },
        "401": { "description": "No valid bearer token." },
        "403": { "description": "The `Origin` is not one of the server's `--http-allowed-origins`." },
        "404": { "description": "The session ended or is unknown: start a new one with `initialize`." },
    });
    let mut post = operation(
        "Mcp.Send",
        "Sends one JSON-RPC message. A request is answered with its response, as JSON or as a stream of \
         events that ends with it; a notification or a response is accepted with 202.",
        sent,
    );
    post["requestBody"] =
        json!({ "required": true, "content": { "application/json": { "schema": reference("JsonRpcMessage") } } });
    let events = json!({ "text/event-stream": { "schema": { "type": "string" } } });
    let get = operation(
        "Mcp.Listen",
        "Opens a stream of the server's own messages to the session.",
        json!({
            "200": { "description": "The messages, as events.", "content": events },
            "405": { "description": "The server offers no such stream." },
        }),
    );
    let delete = operation(
        "Mcp.Close",
        "Ends the session.",
        json!({
            "202": { "description": "The session ended." },
            "404": { "description": "The session ended or is unknown." },
        }),
    );
    json!({
        "description": "The Model Context Protocol's Streamable HTTP transport: JSON-RPC 2.0 messages, the \
                        agentvfs tools of `agentvfs mcp` (`tools/list`, `tools/call`). Bearer tokens as for \
                        every route; `Origin` is checked.",
        "parameters": [parameter("McpSession"), parameter("McpProtocolVersion")],
        "post": post,
        "get": get,
        "delete": delete,
    })
}

/// A JSON-RPC 2.0 message, as `/mcp` takes and gives them.
pub(super) fn json_rpc_schema() -> Value {
    json!({
        "type": "object",
        "required": ["jsonrpc"],
        "description": "A JSON-RPC 2.0 request (`id` and `method`), notification (`method` alone) or \
                        response (`id` and `result` or `error`).",
        "properties": {
            "jsonrpc": { "const": "2.0" },
            "id": { "type": ["string", "integer"] },
            "method": { "type": "string" },
            "params": { "type": "object" },
            "result": {},
            "error": {
                "type": "object",
                "required": ["code", "message"],
                "properties": { "code": { "type": "integer" }, "message": { "type": "string" }, "data": {} },
            },
        },
    })
}

/// An operation of `/mcp`.
fn operation(id: &str, description: &str, responses: Value) -> Value {
    json!({ "operationId": id, "tags": ["MCP"], "description": description, "responses": responses })
}
