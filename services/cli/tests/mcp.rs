//! `agentvfs mcp` end to end: rmcp's own client drives the real binary over
//! stdio against a real front and worker.

#![allow(clippy::unwrap_used)]

use crate::support;

use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::RunningService;
use rmcp::transport::TokioChildProcess;
use rmcp::{RoleClient, ServiceExt as _};
use serde_json::{Value, json};
use support::Stack;

type McpClient = RunningService<RoleClient, ()>;

/// Starts `agentvfs mcp` against `addr` and completes the MCP handshake.
async fn connect(addr: &str, extra: &[&str]) -> McpClient {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_agentvfs"));
    command
        .args(["--addr", addr])
        .args(extra)
        .arg("mcp")
        .env_remove("AGENTVFS_SPACE")
        .env_remove("AGENTVFS_TOKEN")
        .env_remove("AGENTVFS_SESSION");
    ().serve(TokioChildProcess::new(command).unwrap()).await.unwrap()
}

async fn call(client: &McpClient, tool: &str, arguments: Value) -> CallToolResult {
    let Value::Object(arguments) = arguments else { panic!("arguments must be an object") };
    client.call_tool(CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments)).await.unwrap()
}

/// The JSON of a result: its one text block, which the structured content repeats.
#[track_caller]
fn json_of(result: &CallToolResult) -> Value {
    assert_eq!(result.content.len(), 1, "{result:?}");
    let text: Value = serde_json::from_str(&result.content[0].as_text().unwrap().text).unwrap();
    assert_eq!(result.structured_content.as_ref(), Some(&text), "text and structured content differ");
    text
}

#[track_caller]
fn ok(result: &CallToolResult) -> Value {
    assert_eq!(result.is_error, Some(false), "expected success: {result:?}");
    json_of(result)
}

/// The `error` object of a tool error, after checking that it says what to do next.
#[track_caller]
fn tool_error(result: &CallToolResult, reason: &str) -> Value {
    assert_eq!(result.is_error, Some(true), "expected a tool error: {result:?}");
    let error = json_of(result)["error"].clone();
    assert_eq!(error["reason"], reason, "{error}");
    assert!(!error["message"].as_str().unwrap().is_empty(), "{error}");
    assert!(error["next_action"].as_str().unwrap().len() > 10, "no next action: {error}");
    error
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap()
}

#[test]
fn tools_list_names_the_thirteen_tools_with_input_schemas() {
    let stack = Stack::start();
    runtime().block_on(async {
        let client = connect(&stack.addr, &["--space", "default"]).await;
        let info = client.peer_info().unwrap();
        assert!(info.instructions.as_deref().unwrap().contains("next_page_token"));
        let tools = client.list_all_tools().await.unwrap();
        let mut names: Vec<&str> = tools.iter().map(|tool| tool.name.as_ref()).collect();
        names.sort_unstable();
        assert_eq!(
            names,
            [
                "apply_patch",
                "batch",
                "edit",
                "find",
                "grep",
                "lease",
                "ls",
                "read",
                "read_many",
                "release",
                "revert",
                "search",
                "write"
            ]
        );
        for tool in &tools {
            let schema = &tool.input_schema;
            assert_eq!(schema["type"], "object", "{}", tool.name);
            let properties = schema["properties"].as_object().unwrap();
            assert_eq!(properties["space"]["default"], "default", "{}", tool.name);
            assert!(tool.description.as_deref().unwrap().len() > 200, "{} is barely described", tool.name);
            for (field, property) in properties {
                assert!(property.get("description").is_some(), "{}.{field} has no description", tool.name);
            }
        }
        let schema = |name: &str| tools.iter().find(|tool| tool.name == name).unwrap().input_schema.clone();
        assert_eq!(schema("read")["required"], json!(["path"]));
        assert_eq!(schema("edit")["required"], json!(["path", "edits"]));
        for name in ["write", "edit", "batch", "apply_patch", "revert"] {
            assert!(schema(name)["properties"].get("idempotency_key").is_some(), "{name}");
        }
        assert!(schema("edit")["properties"].get("dry_run").is_some());
        assert!(
            tools
                .iter()
                .find(|tool| tool.name == "edit")
                .unwrap()
                .description
                .as_deref()
                .unwrap()
                .contains("READ_REQUIRED")
        );
        client.cancel().await.unwrap();
    });
}

#[test]
fn read_then_edit_then_grep_in_one_session() {
    let stack = Stack::start();
    stack.ok(&["write", "/docs/a.md", "--content", "alpha\nbeta\ngamma\n"]);
    runtime().block_on(async {
        let client = connect(&stack.addr, &[]).await;
        let edit = json!({
            "path": "/docs/a.md",
            "edits": [{"type": "replace", "old_text": "beta", "new_text": "BETA"}],
            "idempotency_key": "beta-to-upper",
        });
        // Read before edit: this session has not read the file yet.
        tool_error(&call(&client, "edit", edit.clone()).await, "READ_REQUIRED");

        let read = ok(&call(&client, "read", json!({"path": "/docs/a.md"})).await);
        assert_eq!(read["content"], "alpha\nbeta\ngamma\n");
        assert_eq!(read["version"], 1);
        assert_eq!(read["total_lines"], 3);

        let mut preview = edit.clone();
        preview["dry_run"] = json!(true);
        preview["idempotency_key"] = json!("preview");
        let preview = ok(&call(&client, "edit", preview).await);
        assert_eq!(preview["dry_run"], true);
        assert!(preview["diff"].as_str().unwrap().contains("-beta\n+BETA\n"), "{preview}");
        assert_eq!(stack.ok(&["read", "/docs/a.md"]), "alpha\nbeta\ngamma\n", "a dry run saved");

        let edited = ok(&call(&client, "edit", edit.clone()).await);
        assert_eq!((edited["changed"].clone(), edited["version"].clone()), (json!(true), json!(2)), "{edited}");
        assert_eq!(stack.ok(&["read", "/docs/a.md"]), "alpha\nBETA\ngamma\n");
        // The same key and arguments replay the first answer instead of editing again.
        assert_eq!(ok(&call(&client, "edit", edit).await), edited);

        let grep = ok(&call(&client, "grep", json!({"pattern": "BETA", "output_mode": "content"})).await);
        let matches = grep["matches"].as_array().unwrap();
        assert_eq!(matches.len(), 1, "{grep}");
        assert_eq!((&matches[0]["path"], &matches[0]["line_number"]), (&json!("/docs/a.md"), &json!(2)));
        assert_eq!(matches[0]["version"], 2);
        assert_eq!(grep["complete"], true);
        client.cancel().await.unwrap();
    });
}

#[test]
fn sessions_are_per_connection_unless_given() {
    let stack = Stack::start();
    stack.ok(&["write", "/a.txt", "--content", "one\n"]);
    runtime().block_on(async {
        let edit = json!({"path": "/a.txt", "edits": [{"type": "append", "text": "two\n"}]});
        let reader = connect(&stack.addr, &[]).await;
        let other = connect(&stack.addr, &[]).await;
        ok(&call(&reader, "read", json!({"path": "/a.txt"})).await);
        tool_error(&call(&other, "edit", edit.clone()).await, "READ_REQUIRED");

        let shared_reader = connect(&stack.addr, &["--session", "shared"]).await;
        let shared_editor = connect(&stack.addr, &["--session", "shared"]).await;
        ok(&call(&shared_reader, "read", json!({"path": "/a.txt"})).await);
        assert_eq!(ok(&call(&shared_editor, "edit", edit).await)["version"], 2);
        for client in [reader, other, shared_reader, shared_editor] {
            client.cancel().await.unwrap();
        }
    });
}

#[test]
fn failures_are_tool_errors_with_reason_and_next_action() {
    let stack = Stack::start();
    stack.ok(&["write", "/docs/a.md", "--content", "alpha\nbeta\n"]);
    runtime().block_on(async {
        let client = connect(&stack.addr, &[]).await;
        let missing = tool_error(&call(&client, "read", json!({"path": "/docs/missing.md"})).await, "NOT_FOUND");
        assert!(missing["message"].as_str().unwrap().contains("/docs/missing.md"), "{missing}");
        assert_eq!(missing["retryable"], false);

        ok(&call(&client, "read", json!({"path": "/docs/a.md"})).await);
        let edit = json!({"path": "/docs/a.md", "edits": [{"type": "replace", "old_text": "  beta", "new_text": "b"}]});
        let no_match = tool_error(&call(&client, "edit", edit).await, "EDIT_NO_MATCH");
        assert!(no_match["next_action"].as_str().unwrap().to_lowercase().contains("read"), "{no_match}");

        // Arguments that do not fit the schema never reach the front.
        let bad =
            tool_error(&call(&client, "read", json!({"path": "/docs/a.md", "lines": "1:2"})).await, "INVALID_ARGUMENT");
        assert!(bad["message"].as_str().unwrap().contains("lines"), "{bad}");
        tool_error(&call(&client, "grep", json!({})).await, "INVALID_ARGUMENT");
        tool_error(&call(&client, "ls", json!({"page_size": -1})).await, "INVALID_ARGUMENT");

        // A batch that fails at an action names that action's reason, with every outcome.
        let batch = json!({"actions": [{"mkdir": {"path": "/new"}}, {"rename": {"path": "/nope", "new_name": "x"}}]});
        let result = call(&client, "batch", batch).await;
        let failed = tool_error(&result, "NOT_FOUND");
        assert!(failed["message"].as_str().unwrap().starts_with("action 1 failed"), "{failed}");
        assert_eq!(json_of(&result)["batch"]["failed_index"], 1);
        assert_eq!(json_of(&result)["batch"]["outcomes"][0]["ok"], true);

        // A front that cannot be reached is retryable.
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().to_string();
        let orphan = connect(&closed, &[]).await;
        let unavailable = tool_error(&call(&orphan, "ls", json!({})).await, "UNAVAILABLE");
        assert_eq!(unavailable["retryable"], true);
        orphan.cancel().await.unwrap();
        client.cancel().await.unwrap();
    });
}

#[test]
fn apply_patch_checks_by_default_and_applies_when_asked() {
    let stack = Stack::start();
    stack.ok(&["write", "/docs/a.md", "--content", "alpha\nbeta\n"]);
    runtime().block_on(async {
        let client = connect(&stack.addr, &[]).await;
        let text = "*** Begin Patch\n*** Update File: docs/a.md\n@@\n alpha\n-beta\n+BETA\n\
                    *** Add File: docs/b.md\n+new\n*** End Patch\n";
        let checked = ok(&call(&client, "apply_patch", json!({"patch": text})).await);
        assert_eq!(checked["dry_run"], true);
        assert!(checked["diff"].as_str().unwrap().contains("+BETA"), "{checked}");
        assert!(stack.ok(&["read", "/docs/a.md"]).contains("beta"));
        tool_error(&call(&client, "apply_patch", json!({"patch": text, "apply": true})).await, "INVALID_ARGUMENT");

        let apply = json!({"patch": text, "apply": true, "idempotency_key": "p1"});
        let applied = ok(&call(&client, "apply_patch", apply).await);
        assert_eq!(applied["files"].as_array().unwrap().len(), 2, "{applied}");
        assert!(stack.ok(&["read", "/docs/a.md"]).contains("BETA"));
        assert!(stack.ok(&["read", "/docs/b.md"]).contains("new"));

        // Applied once, the same hunk no longer matches: the error names it.
        let again = json!({"patch": text.replace("docs/b.md", "docs/c.md"), "apply": true, "idempotency_key": "p2"});
        let stale = tool_error(&call(&client, "apply_patch", again).await, "EDIT_NO_MATCH");
        assert!(stale["next_action"].as_str().unwrap().contains("hunk 0 "), "{stale}");
        assert_eq!(stack.run(&["read", "/docs/c.md"]).code, 3, "nothing of a failed patch is saved");
        client.cancel().await.unwrap();
    });
}

#[test]
fn revert_lists_by_default_and_saves_when_asked() {
    let stack = Stack::start();
    let written = stack.ok(&["--json", "write", "/docs/a.md", "--content", "alpha\n"]);
    let at: u64 = serde_json::from_str::<Value>(&written).unwrap()["revision"].as_str().unwrap().parse().unwrap();
    stack.ok(&["write", "/docs/a.md", "--content", "beta\n"]);
    runtime().block_on(async {
        let client = connect(&stack.addr, &[]).await;
        let listed = ok(&call(&client, "revert", json!({"path": "/docs", "to_revision": at})).await);
        assert_eq!(listed["dry_run"], true);
        assert_eq!(listed["changes"][0]["kind"], "CHANGE_KIND_MODIFIED", "{listed}");
        assert_eq!(stack.ok(&["read", "/docs/a.md"]), "beta\n");
        tool_error(
            &call(&client, "revert", json!({"path": "/docs", "to_revision": at, "apply": true})).await,
            "INVALID_ARGUMENT",
        );
        let apply = json!({"path": "/docs", "to_revision": at, "apply": true, "idempotency_key": "r1"});
        let applied = ok(&call(&client, "revert", apply).await);
        assert_eq!(applied["changes"], listed["changes"]);
        assert_eq!(stack.ok(&["read", "/docs/a.md"]), "alpha\n");
        client.cancel().await.unwrap();
    });
}

#[test]
fn a_lease_is_carried_by_the_sessions_later_calls_until_released() {
    let stack = Stack::start();
    stack.ok(&["write", "/docs/a.md", "--content", "alpha\n"]);
    runtime().block_on(async {
        let client = connect(&stack.addr, &[]).await;
        let lease = ok(&call(&client, "lease", json!({"path": "/docs", "ttl_seconds": 120})).await);
        assert_eq!((lease["path"].as_str(), lease["holder"].as_str()), (Some("/docs"), Some("dev")), "{lease}");
        // Another caller is refused; this session's own calls carry the lease.
        let refused = stack.run(&["write", "/docs/a.md", "--content", "theirs\n"]);
        assert!(refused.stderr.contains("LEASE_HELD"), "{refused:?}");
        ok(&call(&client, "write", json!({"path": "/docs/a.md", "content": "ours\n"})).await);
        let again = ok(&call(&client, "lease", json!({"path": "/docs"})).await);
        assert_eq!(again["lease_id"], lease["lease_id"], "leasing the same path again renews the lease");
        let released = ok(&call(&client, "release", json!({})).await);
        assert_eq!(released["leases"][0]["lease_id"], lease["lease_id"]);
        stack.ok(&["write", "/docs/a.md", "--content", "theirs\n"]);
        client.cancel().await.unwrap();
    });
}

/// A 1x1 PNG.
const PNG: &[u8] = &[
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52, 0x00, 0x00, 0x00,
    0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00, 0x00, 0x1f, 0x15, 0xc4, 0x89, 0x00, 0x00, 0x00, 0x0d, 0x49,
    0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0xf8, 0xcf, 0xc0, 0xf0, 0x1f, 0x00, 0x05, 0x00, 0x01, 0xff, 0x89, 0x99, 0x3d,
    0x1d, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e, 0x44, 0xae, 0x42, 0x60, 0x82,
];

#[test]
fn read_returns_an_image_as_an_image_block_and_a_pdf_as_a_resource() {
    use base64::Engine as _;
    let stack = Stack::start();
    assert_eq!(stack.run_with_bytes(&["write", "/media/dot.png"], PNG).code, 0);
    let pdf = b"%PDF-1.4\n1 0 obj << /Type /Catalog >> endobj\n%%EOF\n\x00\xff";
    assert_eq!(stack.run_with_bytes(&["write", "/media/doc.pdf"], pdf).code, 0);
    runtime().block_on(async {
        let client = connect(&stack.addr, &[]).await;
        let decode = |data: &str| base64::engine::general_purpose::STANDARD.decode(data).unwrap();

        let image = call(&client, "read", json!({"path": "/media/dot.png"})).await;
        assert_eq!(image.is_error, Some(false), "{image:?}");
        assert_eq!(image.content.len(), 2, "{image:?}");
        let meta: Value = serde_json::from_str(&image.content[0].as_text().unwrap().text).unwrap();
        assert_eq!(meta["mime_type"], "image/png");
        assert!(meta.get("data").is_none(), "the bytes are not in the JSON: {meta}");
        let block = serde_json::to_value(&image.content[1]).unwrap();
        assert_eq!(block["type"], "image", "{block}");
        assert_eq!(block["mimeType"], "image/png");
        assert_eq!(decode(block["data"].as_str().unwrap()), PNG);

        let doc = call(&client, "read", json!({"path": "/media/doc.pdf"})).await;
        let block = serde_json::to_value(&doc.content[1]).unwrap();
        assert_eq!(block["type"], "resource", "{block}");
        assert_eq!(block["resource"]["mimeType"], "application/pdf");
        assert!(block["resource"]["uri"].as_str().unwrap().starts_with("agentvfs:item:nd_"), "{block}");
        assert_eq!(decode(block["resource"]["blob"].as_str().unwrap()), pdf);

        // Text reads as it always did: one JSON block.
        stack.ok(&["write", "/media/notes.md", "--content", "# notes\n"]);
        let text = ok(&call(&client, "read", json!({"path": "/media/notes.md"})).await);
        assert_eq!(text["content"], "# notes\n");

        // ls shows each file's type.
        let listed = ok(&call(&client, "ls", json!({"path": "/media"})).await);
        let types: Vec<_> = listed["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| (e["name"].as_str().unwrap(), e["mime_type"].as_str().unwrap()))
            .collect();
        let expected =
            [("doc.pdf", "application/pdf"), ("dot.png", "image/png"), ("notes.md", "text/plain; charset=utf-8")];
        assert_eq!(types, expected);

        // Over the limit of a media read, the next action says what the model can do.
        let mut big = PNG.to_vec();
        big.resize((8 << 20) + 1, 0);
        let wrote = stack.run_with_bytes(&["write", "/media/big.png"], &big);
        assert_eq!(wrote.code, 0, "{}", wrote.stderr);
        let error = tool_error(&call(&client, "read", json!({"path": "/media/big.png"})).await, "TOO_LARGE");
        let next = error["next_action"].as_str().unwrap();
        assert!(
            next.contains("over the 8388608-byte limit of a media read") && next.contains("Tell the user"),
            "{error}"
        );
        client.cancel().await.unwrap();
    });
}

#[test]
fn next_page_token_continues_ls_and_grep() {
    let stack = Stack::start();
    runtime().block_on(async {
        let client = connect(&stack.addr, &[]).await;
        let mut creates = vec![json!({"mkdir": {"path": "/p"}})];
        creates.extend(
            (1..=5).map(|n| json!({"create": {"path": format!("/p/f{n}.txt"), "content": format!("needle {n}\n")}})),
        );
        let applied =
            ok(&call(&client, "batch", json!({"actions": creates, "apply": true, "idempotency_key": "seed"})).await);
        assert_eq!(applied["applied"], 6, "{applied}");

        let mut paths = Vec::new();
        let mut arguments = json!({"path": "/p", "page_size": 2});
        loop {
            let page = ok(&call(&client, "ls", arguments.clone()).await);
            let entries = page["entries"].as_array().unwrap();
            assert!(entries.len() <= 2, "{page}");
            paths.extend(entries.iter().map(|entry| entry["path"].as_str().unwrap().to_owned()));
            match page.get("next_page_token") {
                Some(token) => arguments["page_token"] = token.clone(),
                None => break,
            }
        }
        assert_eq!(paths, (1..=5).map(|n| format!("/p/f{n}.txt")).collect::<Vec<_>>());

        let mut lines = Vec::new();
        let mut pages = 0;
        let mut arguments = json!({"pattern": "needle", "path": "/p", "output_mode": "content", "head_limit": 2});
        loop {
            let page = ok(&call(&client, "grep", arguments.clone()).await);
            pages += 1;
            for found in page["matches"].as_array().unwrap() {
                lines.push(found["line"].as_str().unwrap().to_owned());
            }
            match page.get("next_page_token") {
                Some(token) => arguments["page_token"] = token.clone(),
                None => {
                    assert_eq!(page["complete"], true);
                    break;
                }
            }
        }
        assert!(pages >= 3, "five matches two at a time took {pages} pages");
        assert_eq!(lines, (1..=5).map(|n| format!("needle {n}")).collect::<Vec<_>>());
        client.cancel().await.unwrap();
    });
}

#[test]
fn next_actions_name_the_tools_and_their_arguments() {
    let stack = Stack::start();
    stack.ok(&["write", "/a.txt", "--content", "one\n"]);
    runtime().block_on(async {
        let client = connect(&stack.addr, &[]).await;
        let edit = json!({"path": "/a.txt", "edits": [{"type": "append", "text": "two\n"}]});
        let required = tool_error(&call(&client, "edit", edit.clone()).await, "READ_REQUIRED");
        let next = required["next_action"].as_str().unwrap();
        assert!(next.contains("read on /a.txt") && next.contains("base_version"), "{required}");

        let mut stale = edit.clone();
        stale["base_version"] = json!(5);
        let conflict = tool_error(&call(&client, "edit", stale).await, "VERSION_CONFLICT");
        assert!(conflict["next_action"].as_str().unwrap().contains("base_version 1"), "{conflict}");

        let write = json!({"path": "/a.txt", "content": "x\n", "expected_version": 5});
        let conflict = tool_error(&call(&client, "write", write).await, "VERSION_CONFLICT");
        assert!(conflict["next_action"].as_str().unwrap().contains("expected_version 1"), "{conflict}");

        // No tool is called List or Find.
        let missing = tool_error(&call(&client, "read", json!({"path": "/missing.txt"})).await, "NOT_FOUND");
        assert!(missing["next_action"].as_str().unwrap().contains("ls or find tool"), "{missing}");
        client.cancel().await.unwrap();
    });
}
