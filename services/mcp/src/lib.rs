//! The agentvfs tools of the Model Context Protocol, defined once for both
//! transports: `agentvfs mcp` (stdio, in the CLI) and `/mcp` on the front
//! (Streamable HTTP). Thirteen tools — `ls`, `read`, `write`, `edit`,
//! `find`, `grep`, `search`, `read_many`, `batch`, `apply_patch`, `revert`,
//! `lease` and `release` — each make one call of the `FileSystem` service.
//!
//! - Arguments are JSON objects with the snake_case fields of the proto
//!   requests (see [`inputs`]); `space` defaults to the server's space.
//! - A result is the response message as proto JSON with the proto's
//!   snake_case field names and 64-bit integers as numbers, both as text and
//!   as structured content. Fields at their default (false, 0, empty) are
//!   left out, so a listing without `next_page_token` is complete.
//! - A failure is a tool error (`isError: true`) whose JSON is
//!   `{"error": {"reason", "message", "next_action", "retryable", "metadata"}}`,
//!   from the status's `ErrorInfo`, its next action naming tools and
//!   arguments (see [`next_actions`]).
//! - A server is one agentvfs session (`x-agentvfs-session`) when it is
//!   given one, so that what `read` records lets a later `edit` go ahead
//!   without a `base_version`.
//! - Over HTTP, the headers of the request that carries a tool call
//!   (`authorization`, `x-agentvfs-session`, `x-agentvfs-mode`,
//!   `x-agentvfs-tool-call`, `x-request-id`) go with the call it makes, so
//!   the front authenticates and authorizes each call as if it came over
//!   gRPC.
//! - The path leases that `lease` takes are carried (`x-agentvfs-lease`) by
//!   every later call of the same MCP session, until `release` ends them.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use agentvfs_proto::v1 as pb;
use agentvfs_proto::v1::file_system_client::FileSystemClient;
use prost_reflect::{DescriptorPool, DynamicMessage, SerializeOptions};
use rmcp::handler::server::tool::schema_for_input;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorData, Implementation, JsonObject,
    ListToolsResult, PaginatedRequestParams, ResourceContents, ServerCapabilities, ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::{RoleServer, ServerHandler};
use serde::Serialize;
use serde_json::Value;
use tonic::metadata::{AsciiMetadataValue, MetadataMap};
use tonic_types::StatusExt as _;
use tower::ServiceExt as _;
use tower::util::BoxCloneSyncService;

use self::next_actions::NEXT_ACTIONS;
pub use self::next_actions::{NextActions, spell_next_action};

pub mod descriptions;
pub mod edits;
mod inputs;
pub mod next_actions;

/// A gRPC transport the tools call the front through: a channel to a remote
/// front, or the front's own services in process.
pub type Grpc = BoxCloneSyncService<http::Request<tonic::body::Body>, http::Response<tonic::body::Body>, Unreachable>;

/// A transport's failure to reach the front (tonic makes it `UNAVAILABLE`).
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct Unreachable(Box<dyn std::error::Error + Send + Sync>);

/// `service` as the tools' transport: a tonic channel, or the front's own
/// services in process.
pub fn grpc<S, B>(service: S) -> Grpc
where
    S: tower::Service<http::Request<tonic::body::Body>, Response = http::Response<B>> + Clone + Send + Sync + 'static,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    S::Future: Send + 'static,
    B: http_body::Body<Data = prost::bytes::Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let service = service
        .map_response(|response: http::Response<B>| response.map(tonic::body::Body::new))
        .map_err(|error| Unreachable(error.into()));
    BoxCloneSyncService::new(service)
}

/// Responses may carry a whole 10 MiB grep page plus framing; tonic's 4 MiB
/// default would refuse them.
const MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;

/// Headers of an HTTP request that a tool call carries on to the front.
const FORWARDED: &[&str] =
    &["authorization", "x-agentvfs-session", "x-agentvfs-mode", "x-agentvfs-tool-call", "x-request-id"];

/// The lease header, carrying the leases of the MCP session (and any the
/// HTTP request names).
const LEASE: &str = "x-agentvfs-lease";

/// The MCP session of a Streamable HTTP request.
const MCP_SESSION: &str = "mcp-session-id";

/// The reason, message and `ErrorInfo` metadata of a failed call; a status
/// without `ErrorInfo` (one that never reached the front) is named by its code.
pub fn status_parts(status: &tonic::Status) -> (String, String, HashMap<String, String>) {
    match status.get_details_error_info() {
        Some(info) => (info.reason, status.message().to_owned(), info.metadata),
        None => (agentvfs_proto::code_name(status.code()).to_owned(), status.message().to_owned(), HashMap::new()),
    }
}

/// A server could not be set up.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Error(String);

/// The tools, served to one MCP client (or, over HTTP, to one MCP session).
#[derive(Debug, Clone)]
pub struct Server {
    fs: FileSystemClient<Grpc>,
    /// The space of requests whose arguments name none.
    space: String,
    /// The agentvfs session of every call that names none.
    session: Option<AsciiMetadataValue>,
    /// Proto descriptors, for printing responses as proto JSON.
    pool: DescriptorPool,
    tools: Arc<Vec<Tool>>,
    /// Path leases taken with `lease` and not yet released, (ID, space,
    /// path), by MCP session (`""` on stdio).
    leases: Arc<std::sync::Mutex<HashMap<String, Vec<Held>>>>,
}

/// A lease an MCP session holds.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Held {
    id: String,
    space: String,
    path: String,
}

/// Proto JSON as agents read it best: the field names they send, numbers as numbers.
const JSON: SerializeOptions =
    SerializeOptions::new().use_proto_field_name(true).stringify_64_bit_integers(false).skip_default_fields(true);

impl Server {
    /// Tools that call the front through `grpc`, in `space` unless the
    /// arguments name another, as agentvfs session `session`.
    pub fn new(grpc: Grpc, space: String, session: Option<&str>) -> Result<Server, Error> {
        let session = session
            .map(|session| {
                session.parse().map_err(|_| Error(format!("the session {session:?} is not printable ASCII")))
            })
            .transpose()?;
        let fs = FileSystemClient::new(grpc)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES);
        let pool = DescriptorPool::decode(agentvfs_proto::FILE_DESCRIPTOR_SET)
            .map_err(|error| Error(format!("cannot load the proto descriptors: {error}")))?;
        Ok(Server { fs, tools: Arc::new(tools(&space)?), space, session, pool, leases: Arc::default() })
    }

    /// The space of calls whose arguments name none.
    pub fn space(&self) -> &str {
        &self.space
    }

    /// Runs one tool; every failure, of the arguments or of the call, is a
    /// tool error. `http` is the HTTP request that carried the call, if any.
    async fn call(
        &self,
        name: &str,
        arguments: JsonObject,
        http: Option<&http::request::Parts>,
    ) -> Result<CallToolResult, CallToolResult> {
        let mut fs = self.fs.clone();
        let space = self.space.as_str();
        match name {
            "ls" => {
                let request = parse::<inputs::Ls>(arguments)?.request(space);
                self.reply(name, "ListResponse", fs.list(self.request(request, http)).await)
            }
            "read" => {
                let request = parse::<inputs::Read>(arguments)?.request(space);
                let response = fs.read(self.request(request, http)).await;
                let mut response = response.map_err(|status| failure(name, &status))?.into_inner();
                // A media read's bytes go in a block of their own, not in the JSON.
                let data = std::mem::take(&mut response.data);
                let mut result = json_result(self.proto_json("ReadResponse", &response)?, false);
                if !data.is_empty() {
                    result.content.push(media_block(&response, &data));
                }
                Ok(result)
            }
            "read_many" => {
                let request = parse::<inputs::ReadMany>(arguments)?.request(space);
                let mut response = fs.read_many(self.request(request, http)).await;
                if let Ok(response) = &mut response {
                    spell_read_errors(name, response.get_mut());
                }
                self.reply(name, "ReadManyResponse", response)
            }
            "write" => {
                let request = parse::<inputs::Write>(arguments)?.request(space);
                self.reply(name, "WriteResponse", fs.write(self.request(request, http)).await)
            }
            "edit" => {
                let request = parse::<inputs::EditFile>(arguments)?.request(space);
                self.reply(name, "EditResponse", fs.edit(self.request(request, http)).await)
            }
            "find" => {
                let request = parse::<inputs::Find>(arguments)?.request(space);
                self.reply(name, "FindResponse", fs.find(self.request(request, http)).await)
            }
            "grep" => {
                let request = parse::<inputs::Grep>(arguments)?.request(space);
                self.reply(name, "GrepResponse", fs.grep(self.request(request, http)).await)
            }
            "search" => {
                let request = parse::<inputs::Search>(arguments)?.request(space);
                self.reply(name, "SearchResponse", fs.search(self.request(request, http)).await)
            }
            "batch" => {
                let request = parse::<inputs::Batch>(arguments)?.request(space);
                let response = fs.batch(self.request(request, http)).await;
                let mut response = response.map_err(|status| failure(name, &status))?.into_inner();
                for outcome in &mut response.outcomes {
                    if let Some(error) = &mut outcome.error {
                        spell_read_error(name, error);
                    }
                }
                self.batch_reply(&response)
            }
            "apply_patch" => {
                let request = parse::<inputs::ApplyPatch>(arguments)?.request(space);
                self.reply(name, "ApplyPatchResponse", fs.apply_patch(self.request(request, http)).await)
            }
            "revert" => {
                let request = parse::<inputs::Revert>(arguments)?.request(space);
                self.reply(name, "RevertResponse", fs.revert(self.request(request, http)).await)
            }
            "lease" => {
                let request = parse::<inputs::Lease>(arguments)?.request(space);
                // The session's own lease on the path is renewed, not taken again.
                let held = self.held(http).into_iter().find(|h| h.space == request.space && h.path == request.path);
                let response = match held {
                    Some(held) => {
                        let renew = pb::RenewLeaseRequest {
                            space: request.space.clone(),
                            lease_id: held.id,
                            ttl_seconds: request.ttl_seconds,
                        };
                        fs.renew_lease(self.request(renew, http)).await
                    }
                    None => fs.acquire_lease(self.request(request.clone(), http)).await,
                };
                if let Ok(lease) = &response {
                    let lease = lease.get_ref();
                    let held = Held { id: lease.lease_id.clone(), space: request.space, path: lease.path.clone() };
                    self.hold(http, held);
                }
                self.reply(name, "Lease", response)
            }
            "release" => {
                let input = parse::<inputs::Release>(arguments)?;
                let held = self.held(http);
                let ids: Vec<Held> = match input.lease_id.as_str() {
                    "" => held,
                    id => vec![Held {
                        id: id.to_owned(),
                        space: input.space.unwrap_or_else(|| space.to_owned()),
                        path: String::new(),
                    }],
                };
                let mut released = pb::ListLeasesResponse::default();
                for lease in ids {
                    let request = pb::ReleaseLeaseRequest { space: lease.space.clone(), lease_id: lease.id.clone() };
                    let response = fs.release_lease(self.request(request, http)).await;
                    let gone = matches!(&response, Err(status) if status.code() == tonic::Code::NotFound);
                    if response.is_ok() || gone {
                        self.drop_held(http, &lease.id);
                    }
                    let lease = response.map_err(|status| failure(name, &status))?.into_inner();
                    released.revision = lease.revision;
                    released.leases.push(lease);
                }
                Ok(json_result(self.proto_json("ListLeasesResponse", &released)?, false))
            }
            _ => Err(error_result(&ToolError::invalid_argument(format!("there is no tool named {name:?}")), None)),
        }
    }

    /// `message` as a call with the forwarded headers of `http`, in the
    /// agentvfs session the request names, else that of its MCP session
    /// (`mcp-<Mcp-Session-Id>`), else this server's.
    fn request<T>(&self, message: T, http: Option<&http::request::Parts>) -> tonic::Request<T> {
        let mut metadata = MetadataMap::new();
        let mcp_session = http
            .and_then(|parts| parts.headers.get(MCP_SESSION))
            .and_then(|id| id.to_str().ok())
            .and_then(|id| format!("mcp-{id}").parse::<AsciiMetadataValue>().ok());
        if let Some(session) = mcp_session.or_else(|| self.session.clone()) {
            metadata.insert("x-agentvfs-session", session);
        }
        if let Some(parts) = http {
            for name in FORWARDED {
                let value = parts.headers.get(*name).and_then(|value| value.to_str().ok());
                if let Some(value) = value.and_then(|value| value.parse::<AsciiMetadataValue>().ok()) {
                    metadata.insert(*name, value);
                }
            }
        }
        let mut leases: Vec<String> = self.held(http).into_iter().map(|held| held.id).collect();
        if let Some(named) = http.and_then(|parts| parts.headers.get(LEASE)).and_then(|value| value.to_str().ok()) {
            leases.push(named.to_owned());
        }
        if let Ok(value) = leases.join(",").parse::<AsciiMetadataValue>()
            && !leases.is_empty()
        {
            metadata.insert(LEASE, value);
        }
        tonic::Request::from_parts(metadata, tonic::Extensions::default(), message)
    }

    /// The MCP session a call belongs to (`""` on stdio).
    fn session_key(http: Option<&http::request::Parts>) -> String {
        http.and_then(|parts| parts.headers.get(MCP_SESSION))
            .and_then(|id| id.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    }

    /// The leases the call's MCP session holds.
    fn held(&self, http: Option<&http::request::Parts>) -> Vec<Held> {
        let leases = self.leases.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        leases.get(&Self::session_key(http)).cloned().unwrap_or_default()
    }

    fn hold(&self, http: Option<&http::request::Parts>, held: Held) {
        let mut leases = self.leases.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let session = leases.entry(Self::session_key(http)).or_default();
        session.retain(|other| other.id != held.id);
        session.push(held);
    }

    fn drop_held(&self, http: Option<&http::request::Parts>, id: &str) {
        let mut leases = self.leases.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(session) = leases.get_mut(&Self::session_key(http)) {
            session.retain(|held| held.id != id);
        }
    }

    fn reply<M: prost::Message>(
        &self,
        tool: &str,
        name: &str,
        response: Result<tonic::Response<M>, tonic::Status>,
    ) -> Result<CallToolResult, CallToolResult> {
        let message = response.map_err(|status| failure(tool, &status))?.into_inner();
        Ok(json_result(self.proto_json(name, &message)?, false))
    }

    /// A batch that stopped at a failing action is a tool error naming that
    /// action's reason and next action, with the outcomes under `batch`.
    fn batch_reply(&self, response: &pb::BatchResponse) -> Result<CallToolResult, CallToolResult> {
        let text = self.proto_json("BatchResponse", response)?;
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

    /// `message`, the `agentvfs.v1.<name>` message, as proto JSON.
    fn proto_json<M: prost::Message>(&self, name: &str, message: &M) -> Result<String, CallToolResult> {
        let internal = |error: String| {
            let message = format!("cannot print agentvfs.v1.{name} as JSON: {error}");
            error_result(&ToolError::new("INTERNAL".to_owned(), message, BTreeMap::new()), None)
        };
        let descriptor = self
            .pool
            .get_message_by_name(&format!("agentvfs.v1.{name}"))
            .ok_or_else(|| internal("no descriptor".to_owned()))?;
        let dynamic = DynamicMessage::decode(descriptor, message.encode_to_vec().as_slice())
            .map_err(|error| internal(error.to_string()))?;
        let mut text = Vec::new();
        dynamic
            .serialize_with_options(&mut serde_json::Serializer::new(&mut text), &JSON)
            .map_err(|error| internal(error.to_string()))?;
        String::from_utf8(text).map_err(|error| internal(error.to_string()))
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
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        // An unknown tool is a protocol error: the client asked for something this server does not offer.
        if self.get_tool(&request.name).is_none() {
            return Err(ErrorData::invalid_params(format!("unknown tool {:?}", request.name), None));
        }
        let http = context.extensions.get::<http::request::Parts>();
        let result = self.call(&request.name, request.arguments.unwrap_or_default(), http).await;
        Ok(result.unwrap_or_else(|error| error).into())
    }
}

/// The thirteen tools, with input schemas whose `space` defaults to `space`.
fn tools(space: &str) -> Result<Vec<Tool>, Error> {
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
        tool::<inputs::ApplyPatch>("apply_patch", "Apply a patch", d::APPLY_PATCH, changes(), space)?,
        tool::<inputs::Revert>("revert", "Revert a file or folder", d::REVERT, changes(), space)?,
        tool::<inputs::Lease>("lease", "Lease a path", d::LEASE, changes(), space)?,
        tool::<inputs::Release>("release", "Release leases", d::RELEASE, changes(), space)?,
    ])
}

fn tool<T: schemars::JsonSchema + 'static>(
    name: &'static str,
    title: &str,
    description: &'static str,
    mut annotations: ToolAnnotations,
    space: &str,
) -> Result<Tool, Error> {
    let mut schema = schema_for_input::<T>()
        .map_err(|error| Error(format!("the input schema of tool {name}: {error}")))?
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

/// A media read's bytes as the content block a model sees: an image as an
/// image, anything else (a PDF, audio) as an embedded resource.
fn media_block(read: &pb::ReadResponse, data: &[u8]) -> ContentBlock {
    use base64::Engine as _;
    let data = base64::engine::general_purpose::STANDARD.encode(data);
    if read.mime_type.starts_with("image/") {
        ContentBlock::image(data, read.mime_type.clone())
    } else {
        let uri = format!("agentvfs:item:{}", read.node_id);
        ContentBlock::resource(ResourceContents::blob(data, uri).with_mime_type(read.mime_type.clone()))
    }
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
        "UNAVAILABLE" => "The agentvfs front is not reachable or is shutting down: wait a moment, then call again.",
        "INVALID_ARGUMENT" => "Fix the arguments to match the tool's input schema and description, then call again.",
        _ => "Read the message, fix its cause, then call again.",
    }
}

/// The tool error of a failed call of `tool`, its next action in the tools' words.
fn failure(tool: &str, status: &tonic::Status) -> CallToolResult {
    let (reason, message, mut metadata) = status_parts(status);
    if let Some(next) = spell_next_action(NEXT_ACTIONS, &reason, tool, &metadata) {
        metadata.insert("nextAction".to_owned(), next);
    }
    error_result(&ToolError::new(reason, message, metadata.into_iter().collect()), None)
}

/// Spells the next action of each failed read of a `read_many` in the tools' words.
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
