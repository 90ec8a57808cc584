//! `/mcp` (SPEC §11): rmcp's own client speaks the Streamable HTTP transport
//! to a real front (with bearer tokens) and worker on loopback.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use agentvfs_proto::v1 as pb;
use agentvfs_proto::v1::file_system_client::FileSystemClient;
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{RoleClient, ServiceExt as _};
use serde_json::{Value, json};
use support::{Bearer, Front, Worker};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

const ADMIN: &str = "admin-token-0123456789";
const AGENT: &str = "agent-token-0123456789";
const OTHER: &str = "other-token-0123456789";

type McpClient = RunningService<RoleClient, ()>;

/// A front with tokens, a worker and HTTP; the space `default` is the agent's.
struct Service {
    front: Front,
    _worker: Worker,
    http: String,
    _temp: tempfile::TempDir,
}

impl Service {
    async fn start(extra: &[&str]) -> Service {
        let temp = tempfile::tempdir().unwrap();
        let tokens = temp.path().join("tokens.toml");
        std::fs::write(
            &tokens,
            format!(
                "[[tokens]]\ntoken = \"{ADMIN}\"\nprincipal = \"ops\"\nadmin = true\n\n\
                 [[tokens]]\ntoken = \"{AGENT}\"\nprincipal = \"agent\"\n\n\
                 [[tokens]]\ntoken = \"{OTHER}\"\nprincipal = \"other\"\n"
            ),
        )
        .unwrap();
        let (front, worker, http) = support::with_front_port(async |front_addr| {
            let index = temp.path().join("index");
            let credentials = [("AGENTVFS_TOKEN", ADMIN)];
            let worker =
                Worker::start_binary(&support::worker_binary(), front_addr, "127.0.0.1:0", &index, &credentials).await;
            let mut args = vec!["--worker", worker.addr.as_str(), "--http-listen", "127.0.0.1:0"];
            args.extend_from_slice(&["--tokens", tokens.to_str().unwrap()]);
            args.extend_from_slice(extra);
            let front = Front::try_start_at_with(front_addr, &temp.path().join("data"), &args).await?;
            let http = front.http();
            Some((front, worker, http))
        })
        .await;
        let admin = front.channel().await;
        let mut admin = agentvfs_proto::v1::admin_client::AdminClient::with_interceptor(admin, Bearer(ADMIN));
        let space = pb::CreateSpaceRequest { name: "default".into(), ..Default::default() };
        let id = admin.create_space(space).await.unwrap().into_inner().id;
        let grant = pb::SetAccessRequest {
            space: id,
            principal: "agent".into(),
            role: pb::Role::Editor.into(),
            ..Default::default()
        };
        admin.set_access(grant).await.unwrap();
        Service { front, _worker: worker, http, _temp: temp }
    }

    async fn grpc(&self) -> FileSystemClient<InterceptedService<Channel, Bearer>> {
        FileSystemClient::with_interceptor(self.front.channel().await, Bearer(AGENT))
    }

    /// An MCP client with `token`, after the handshake that opens its session.
    async fn connect(&self, token: &str) -> McpClient {
        let config =
            StreamableHttpClientTransportConfig::with_uri(format!("http://{}/mcp", self.http)).auth_header(token);
        ().serve(StreamableHttpClientTransport::from_config(config)).await.unwrap()
    }
}

async fn call(client: &McpClient, tool: &str, arguments: Value) -> CallToolResult {
    let Value::Object(arguments) = arguments else { panic!("arguments must be an object") };
    client.call_tool(CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments)).await.unwrap()
}

#[track_caller]
fn ok(result: &CallToolResult) -> Value {
    assert_eq!(result.is_error, Some(false), "expected success: {result:?}");
    result.structured_content.clone().unwrap()
}

#[track_caller]
fn tool_error(result: &CallToolResult, reason: &str) -> Value {
    assert_eq!(result.is_error, Some(true), "expected a tool error: {result:?}");
    let error = result.structured_content.as_ref().unwrap()["error"].clone();
    assert_eq!(error["reason"], reason, "{error}");
    assert!(error["next_action"].as_str().unwrap().len() > 10, "no next action: {error}");
    error
}

/// `POST /mcp` of `body`: the status, the head (lowercase) and the body.
fn exchange(addr: &str, headers: &[(&str, &str)], body: &str) -> (u16, String, String) {
    let mut all = vec![("content-type", "application/json"), ("accept", "application/json, text/event-stream")];
    all.extend_from_slice(headers);
    let (status, headers, body) = support::http::exchange(addr, "POST", "/mcp", &all, body);
    let head = headers.iter().map(|(name, value)| format!("{name}: {}\n", value.to_lowercase())).collect();
    (status, head, body)
}

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#;

#[tokio::test]
async fn an_mcp_client_over_http_lists_reads_edits_after_reading_and_greps_with_a_cursor() {
    let service = Service::start(&[]).await;
    let mut grpc = service.grpc().await;
    for i in 0..30 {
        grpc.write(support::write_text("default", &format!("/src/f{i:02}.rs"), "fn main() {}\n// TODO: test\n"))
            .await
            .unwrap();
    }
    let client = service.connect(AGENT).await;

    // The same thirteen tools as `agentvfs mcp`, from the same definitions.
    let mut names: Vec<String> = client.list_all_tools().await.unwrap().into_iter().map(|t| t.name.into()).collect();
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

    // Written over gRPC, so not yet read in this MCP session: the edit is refused.
    let edit = json!({"path": "/src/f00.rs", "edits": [{"type": "replace", "old_text": "test", "new_text": "done"}]});
    tool_error(&call(&client, "edit", edit.clone()).await, "READ_REQUIRED");
    let read = ok(&call(&client, "read", json!({"path": "/src/f00.rs"})).await);
    assert_eq!(read["content"], "fn main() {}\n// TODO: test\n");
    let edited = ok(&call(&client, "edit", edit).await);
    assert_eq!(edited["version"], 2, "{edited}");
    // gRPC sees what MCP wrote.
    let text = grpc.read(support::read("default", "/src/f00.rs")).await.unwrap().into_inner().content;
    assert_eq!(text, "fn main() {}\n// TODO: done\n");

    // Another MCP session is another agentvfs session: it has read nothing.
    let second = service.connect(AGENT).await;
    let edit = json!({"path": "/src/f01.rs", "edits": [{"type": "append", "text": "// more\n"}]});
    tool_error(&call(&second, "edit", edit.clone()).await, "READ_REQUIRED");
    ok(&call(&client, "read", json!({"path": "/src/f01.rs"})).await);
    tool_error(&call(&second, "edit", edit).await, "READ_REQUIRED");

    // Grep pages with a cursor until the last page, seeing every match once.
    let mut paths = Vec::new();
    let mut pages = 0;
    let mut arguments = json!({"pattern": "TODO", "path": "/src", "output_mode": "content", "head_limit": 7});
    loop {
        let page = ok(&call(&client, "grep", arguments.clone()).await);
        pages += 1;
        paths.extend(page["matches"].as_array().unwrap().iter().map(|m| m["path"].as_str().unwrap().to_owned()));
        match page.get("next_page_token") {
            Some(token) => arguments["page_token"] = token.clone(),
            None => break,
        }
    }
    assert!(pages >= 5, "30 matches 7 at a time took {pages} pages");
    assert_eq!(paths, (0..30).map(|i| format!("/src/f{i:02}.rs")).collect::<Vec<_>>());

    client.cancel().await.unwrap();
    second.cancel().await.unwrap();
}

#[tokio::test]
async fn a_client_of_the_current_stateless_revision_names_its_session_in_a_header() {
    use rmcp::ClientServiceExt as _;
    use rmcp::model::ProtocolVersion;
    let service = Service::start(&[]).await;
    service.grpc().await.write(support::write_text("default", "/a.md", "one\n")).await.unwrap();
    let connect = async |session: Option<&str>| {
        let mut headers = std::collections::HashMap::new();
        if let Some(session) = session {
            headers.insert(http::HeaderName::from_static("x-agentvfs-session"), session.parse().unwrap());
        }
        let config = StreamableHttpClientTransportConfig::with_uri(format!("http://{}/mcp", service.http))
            .auth_header(AGENT)
            .custom_headers(headers);
        let lifecycle = rmcp::ClientLifecycleMode::Discover { preferred_versions: vec![ProtocolVersion::V_2026_07_28] };
        ().serve_with_lifecycle(StreamableHttpClientTransport::from_config(config), lifecycle).await.unwrap()
    };
    let edit = json!({"path": "/a.md", "edits": [{"type": "append", "text": "two\n"}]});

    // Without a session, each request stands alone: an edit needs base_version.
    let alone = connect(None).await;
    assert_eq!(alone.peer_info().unwrap().protocol_version, ProtocolVersion::V_2026_07_28);
    ok(&call(&alone, "read", json!({"path": "/a.md"})).await);
    tool_error(&call(&alone, "edit", edit.clone()).await, "READ_REQUIRED");
    let mut with_base = edit.clone();
    with_base["base_version"] = json!(1);
    assert_eq!(ok(&call(&alone, "edit", with_base).await)["version"], 2);

    // With X-Agentvfs-Session, a read lets a later edit go ahead.
    let named = connect(Some("stateless-agent")).await;
    ok(&call(&named, "read", json!({"path": "/a.md"})).await);
    assert_eq!(ok(&call(&named, "edit", edit).await)["version"], 3);
    alone.cancel().await.unwrap();
    named.cancel().await.unwrap();
}

#[tokio::test]
async fn a_tool_call_runs_as_its_token_and_a_request_without_one_or_from_a_foreign_origin_is_refused() {
    let service = Service::start(&["--http-allowed-origins", "https://app.example:443"]).await;

    // No token, a wrong token: 401 before the MCP layer, with Google's error body.
    for headers in [&[][..], &[("authorization", "Bearer not-a-token-at-all")][..]] {
        let (status, head, body) = exchange(&service.http, headers, INITIALIZE);
        assert_eq!(status, 401, "{head}\n{body}");
        assert!(head.contains("www-authenticate: bearer"), "{head}");
        let body: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(body["error"]["status"], "UNAUTHENTICATED", "{body}");
    }
    // An Origin not in --http-allowed-origins: 403, whatever the token.
    let bearer = format!("Bearer {AGENT}");
    let (status, _, _) =
        exchange(&service.http, &[("authorization", &bearer), ("origin", "https://evil.example")], INITIALIZE);
    assert_eq!(status, 403);
    let (status, head, _) =
        exchange(&service.http, &[("authorization", &bearer), ("origin", "https://app.example")], INITIALIZE);
    assert_eq!(status, 200, "{head}");
    assert!(head.contains("mcp-session-id: "), "{head}");

    // A principal with no role in the space sees no space, exactly as over gRPC.
    let outsider = service.connect(OTHER).await;
    let error = tool_error(&call(&outsider, "ls", json!({"path": "/"})).await, "NOT_FOUND");
    assert_eq!(error["metadata"]["space"], "default", "{error}");
    outsider.cancel().await.unwrap();
}

#[tokio::test]
async fn an_idle_mcp_session_ends() {
    let service = Service::start(&["--session-idle-seconds", "1"]).await;
    let bearer = format!("Bearer {AGENT}");
    let (status, head, _) = exchange(&service.http, &[("authorization", &bearer)], INITIALIZE);
    assert_eq!(status, 200, "{head}");
    let session = head.lines().find_map(|line| line.strip_prefix("mcp-session-id: ")).unwrap().trim().to_owned();
    let list = r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#;
    let headers =
        [("authorization", bearer.as_str()), ("mcp-session-id", &session), ("mcp-protocol-version", "2025-06-18")];
    tokio::time::sleep(std::time::Duration::from_millis(2500)).await;
    let (status, head, body) = exchange(&service.http, &headers, list);
    assert_eq!(status, 404, "an idle session is gone: {head}\n{body}");
}
