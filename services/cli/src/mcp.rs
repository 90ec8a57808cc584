//! `agentvfs mcp`: a Model Context Protocol server on stdin/stdout that gives
//! an agent the file system as nine tools — `ls`, `read`, `write`, `edit`,
//! `find`, `grep`, `search`, `read_many` and `batch` — each one call of the
//! `FileSystem` service of the front at `--addr`.
//!
//! - Arguments are JSON objects with the snake_case fields of the proto
//!   requests (see [`inputs`]); `space` defaults to `--space`.
//! - A result is the response message as proto JSON with the proto's
//!   snake_case field names and 64-bit integers as numbers, both as text and
//!   as structured content. Fields at their default (false, 0, empty) are
//!   left out, so a listing without `next_page_token` is complete.
//! - A failure is a tool error (`isError: true`) whose JSON is
//!   `{"error": {"reason", "message", "next_action", "retryable", "metadata"}}`,
//!   from the status's `ErrorInfo` (see [`CliError::parts`]), its next action
//!   naming tools and arguments (see [`next_actions`]).
//! - The whole MCP session is one agentvfs session (`x-agentvfs-session`,
//!   `--session` or a fresh `mcp-<ULID>`), so that what `read` records lets a
//!   later `edit` go ahead without a `base_version`.

use std::collections::BTreeMap;
use std::sync::Arc;

use agentvfs_proto::v1 as pb;
use prost_reflect::{DescriptorPool, SerializeOptions};
use rmcp::handler::server::tool::schema_for_input;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorData, Implementation, JsonObject,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::{RoleServer, ServerHandler, ServiceExt as _};
use serde::Serialize;
use serde_json::Value;

use self::next_actions::NEXT_ACTIONS;
use crate::client::Client;
use crate::errors::{CliError, spell_next_action};
use crate::output;

mod descriptions;
mod inputs;
mod next_actions;

/// Serves MCP on stdin/stdout until the client closes stdin.
pub async fn run(addr: &str, token: Option<&str>, space: String, session: Option<String>) -> Result<(), CliError> {
    let session = session.unwrap_or_else(|| format!("mcp-{}", ulid::Ulid::generate()));
    let client = Client::new(addr, token, Some(&session))?;
    let server = Server::new(client, space)?;
    // stdout carries the protocol; notes go to stderr, which MCP clients log.
    eprintln!("agentvfs mcp: serving space {} of {addr} on stdio, session {session}", server.space);
    let running = server
        .serve(rmcp::transport::stdio_pipes())
        .await
        .map_err(|error| CliError::Other(format!("the MCP client did not initialize: {error}")))?;
    running.waiting().await.map_err(|error| CliError::Other(format!("the MCP server stopped: {error}")))?;
    Ok(())
}

#[derive(Debug, Clone)]
struct Server {
    client: Client,
    /// The space of requests whose arguments name none.
    space: String,
    /// Proto descriptors, for printing responses as proto JSON.
    pool: DescriptorPool,
    tools: Arc<Vec<Tool>>,
}

/// Proto JSON as agents read it best: the field names they send, numbers as numbers.
const JSON: SerializeOptions =
    SerializeOptions::new().use_proto_field_name(true).stringify_64_bit_integers(false).skip_default_fields(true);

impl Server {
    fn new(client: Client, space: String) -> Result<Server, CliError> {
        let tools = Arc::new(tools(&space)?);
        Ok(Server { client, space, pool: output::descriptors()?, tools })
    }

    /// Runs one tool; every failure, of the arguments or of the call, is a tool error.
    async fn call(&self, name: &str, arguments: JsonObject) -> Result<CallToolResult, CallToolResult> {
        let mut fs = self.client.fs.clone();
        let space = self.space.as_str();
        match name {
            "ls" => self.reply(name, "ListResponse", fs.list(parse::<inputs::Ls>(arguments)?.request(space)).await),
            "read" => self.reply(name, "ReadResponse", fs.read(parse::<inputs::Read>(arguments)?.request(space)).await),
            "read_many" => {
                let request = parse::<inputs::ReadMany>(arguments)?.request(space);
                let mut response = fs.read_many(request).await;
                if let Ok(response) = &mut response {
                    spell_read_errors(name, response.get_mut());
                }
                self.reply(name, "ReadManyResponse", response)
            }
            "write" => {
                self.reply(name, "WriteResponse", fs.write(parse::<inputs::Write>(arguments)?.request(space)).await)
            }
            "edit" => {
                self.reply(name, "EditResponse", fs.edit(parse::<inputs::EditFile>(arguments)?.request(space)).await)
            }
            "find" => self.reply(name, "FindResponse", fs.find(parse::<inputs::Find>(arguments)?.request(space)).await),
            "grep" => self.reply(name, "GrepResponse", fs.grep(parse::<inputs::Grep>(arguments)?.request(space)).await),
            "search" => {
                self.reply(name, "SearchResponse", fs.search(parse::<inputs::Search>(arguments)?.request(space)).await)
            }
            "batch" => {
                let response = fs.batch(parse::<inputs::Batch>(arguments)?.request(space)).await;
                let mut response = response.map_err(|status| failure(name, &CliError::Status(status)))?.into_inner();
                for outcome in &mut response.outcomes {
                    if let Some(error) = &mut outcome.error {
                        spell_read_error(name, error);
                    }
                }
                self.batch_reply(&response)
            }
            _ => Err(error_result(&ToolError::invalid_argument(format!("there is no tool named {name:?}")), None)),
        }
    }

    fn reply<M: prost::Message>(
        &self,
        tool: &str,
        name: &str,
        response: Result<tonic::Response<M>, tonic::Status>,
    ) -> Result<CallToolResult, CallToolResult> {
        let message = response.map_err(|status| failure(tool, &CliError::Status(status)))?.into_inner();
        let text = self.proto_json(name, &message).map_err(|error| failure(tool, &error))?;
        Ok(json_result(text, false))
    }

    /// A batch that stopped at a failing action is a tool error naming that
    /// action's reason and next action, with the outcomes under `batch`.
    fn batch_reply(&self, response: &pb::BatchResponse) -> Result<CallToolResult, CallToolResult> {
        let text = self.proto_json("BatchResponse", response).map_err(|error| failure("batch", &error))?;
        let Some(index) = response.failed_index else { return Ok(json_result(text, false)) };
        let failed = response.outcomes.iter().find(|outcome| outcome.index == index).and_then(|o| o.error.as_ref());
        let error = match failed {
            Some(error) => ToolError::new(
                error.reason.clone(),
                format!("action {index} failed: {}", error.message),
                error.metadata.clone().into_iter().collect(),
            ),
            None => ToolError::new("BATCH_FAILED".to_owned(), format!("action {index} failed"), BTreeMap::new()),
        };
        Err(error_result(&error, Some(text)))
    }

    fn proto_json<M: prost::Message>(&self, name: &str, message: &M) -> Result<String, CliError> {
        let dynamic = output::dynamic(&self.pool, name, message)?;
        let mut text = Vec::new();
        dynamic
            .serialize_with_options(&mut serde_json::Serializer::new(&mut text), &JSON)
            .map_err(|error| CliError::Other(format!("cannot print agentvfs.v1.{name} as JSON: {error}")))?;
        String::from_utf8(text).map_err(|error| CliError::Other(format!("agentvfs.v1.{name} as JSON: {error}")))
    }
}

impl ServerHandler for Server {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("agentvfs", env!("CARGO_PKG_VERSION")))
            .with_instructions(descriptions::INSTRUCTIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tools.as_ref().clone()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.tools.iter().find(|tool| tool.name == name).cloned()
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        // An unknown tool is a protocol error: the client asked for something this server does not offer.
        if self.get_tool(&request.name).is_none() {
            return Err(ErrorData::invalid_params(format!("unknown tool {:?}", request.name), None));
        }
        let result = self.call(&request.name, request.arguments.unwrap_or_default()).await;
        Ok(result.unwrap_or_else(|error| error).into())
    }
}

/// The nine tools, with input schemas whose `space` defaults to `space`.
fn tools(space: &str) -> Result<Vec<Tool>, CliError> {
    use descriptions as d;
    let read_only = || ToolAnnotations::new().read_only(true).destructive(false).idempotent(true).open_world(false);
    let changes = || ToolAnnotations::new().read_only(false).destructive(true).idempotent(false).open_world(false);
    Ok(vec![
        tool::<inputs::Ls>("ls", "List a directory", d::LS, read_only(), space)?,
        tool::<inputs::Read>("read", "Read a text file", d::READ, read_only(), space)?,
        tool::<inputs::Write>("write", "Write a file", d::WRITE, changes(), space)?,
        tool::<inputs::EditFile>("edit", "Edit a text file", d::EDIT, changes(), space)?,
        tool::<inputs::Find>("find", "Find files by glob", d::FIND, read_only(), space)?,
        tool::<inputs::Grep>("grep", "Search file contents", d::GREP, read_only(), space)?,
        tool::<inputs::Search>("search", "Ranked full-text search", d::SEARCH, read_only(), space)?,
        tool::<inputs::ReadMany>("read_many", "Read several files", d::READ_MANY, read_only(), space)?,
        tool::<inputs::Batch>("batch", "Structural changes", d::BATCH, changes(), space)?,
    ])
}

fn tool<T: schemars::JsonSchema + 'static>(
    name: &'static str,
    title: &str,
    description: &'static str,
    mut annotations: ToolAnnotations,
    space: &str,
) -> Result<Tool, CliError> {
    let mut schema = schema_for_input::<T>()
        .map_err(|error| CliError::Other(format!("the input schema of tool {name}: {error}")))?
        .as_ref()
        .clone();
    if let Some(Value::Object(field)) = schema.get_mut("properties").and_then(|properties| properties.get_mut("space"))
    {
        field.insert("default".to_owned(), Value::String(space.to_owned()));
    }
    annotations.title = Some(title.to_owned());
    Ok(Tool::new(name, description, schema).with_title(title).with_annotations(annotations))
}

fn parse<T: serde::de::DeserializeOwned>(arguments: JsonObject) -> Result<T, CallToolResult> {
    serde_json::from_value(Value::Object(arguments)).map_err(|error| {
        error_result(
            &ToolError::invalid_argument(format!("the arguments do not fit the tool's input schema: {error}")),
            None,
        )
    })
}

/// A successful result: the JSON as text and as structured content.
fn json_result(text: String, is_error: bool) -> CallToolResult {
    let value = serde_json::from_str(&text).unwrap_or(Value::Null);
    let mut result = if is_error {
        CallToolResult::error(vec![ContentBlock::text(text)])
    } else {
        CallToolResult::success(vec![ContentBlock::text(text)])
    };
    result.structured_content = Some(value);
    result
}

/// What an agent needs to act on a failure.
#[derive(Debug, Serialize)]
struct ToolError {
    /// The stable reason from the status's `ErrorInfo` (`NOT_FOUND`, `EDIT_NO_MATCH`, …).
    reason: String,
    message: String,
    next_action: String,
    retryable: bool,
    /// The rest of the `ErrorInfo` metadata: `path`, `expectedVersion`, `currentVersion`, `line`, ….
    metadata: BTreeMap<String, String>,
}

impl ToolError {
    fn new(reason: String, message: String, mut metadata: BTreeMap<String, String>) -> ToolError {
        let retryable = metadata.remove("retryable").map_or(reason == "UNAVAILABLE", |value| value == "true");
        let next_action = metadata.remove("nextAction").unwrap_or_else(|| fallback_next_action(&reason).to_owned());
        ToolError { reason, message, next_action, retryable, metadata }
    }

    fn invalid_argument(message: String) -> ToolError {
        ToolError::new("INVALID_ARGUMENT".to_owned(), message, BTreeMap::new())
    }
}

/// For statuses that carry no `ErrorInfo`: those that never reached the front.
fn fallback_next_action(reason: &str) -> &'static str {
    match reason {
        "UNAVAILABLE" => {
            "The agentvfs front is not reachable: check that it runs at this server's --addr, then call again."
        }
        "INVALID_ARGUMENT" => "Fix the arguments to match the tool's input schema and description, then call again.",
        _ => "Read the message, fix its cause, then call again.",
    }
}

/// The tool error of a failed call of `tool`, its next action in this bridge's words.
fn failure(tool: &str, error: &CliError) -> CallToolResult {
    let (reason, message, mut metadata) = error.parts();
    if let Some(next) = spell_next_action(NEXT_ACTIONS, &reason, tool, &metadata) {
        metadata.insert("nextAction".to_owned(), next);
    }
    error_result(&ToolError::new(reason, message, metadata.into_iter().collect()), None)
}

/// Spells the next action of each failed read of a `read_many` in this bridge's words.
fn spell_read_errors(tool: &str, response: &mut pb::ReadManyResponse) {
    for result in &mut response.results {
        if let Some(pb::read_many_result::Outcome::Error(error)) = &mut result.outcome {
            spell_read_error(tool, error);
        }
    }
}

fn spell_read_error(tool: &str, error: &mut pb::ReadError) {
    if let Some(next) = spell_next_action(NEXT_ACTIONS, &error.reason, tool, &error.metadata) {
        error.metadata.insert("nextAction".to_owned(), next);
    }
}

/// A tool error: `{"error": …}`, with the batch response under `batch` when there is one.
fn error_result(error: &ToolError, batch: Option<String>) -> CallToolResult {
    // Strings and a string map always serialize; the fallback keeps the reason regardless.
    let error = serde_json::to_string(error)
        .unwrap_or_else(|_| serde_json::json!({ "reason": error.reason, "message": error.message }).to_string());
    let text = match batch {
        Some(batch) => format!("{{\"error\":{error},\"batch\":{batch}}}"),
        None => format!("{{\"error\":{error}}}"),
    };
    json_result(text, true)
}
