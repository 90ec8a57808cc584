//! The document's paths: a `POST` per unary RPC, the streams of changes and
//! of content, MCP, and the document itself.

use prost_reflect::{DescriptorPool, MessageDescriptor, MethodDescriptor, ServiceDescriptor};
use serde_json::{Map, Value, json};

use super::comments::Comments;
use super::errors::{BODY_FAILURES, failures};
use super::headers::{CALL, header, in_header, parameter, response_header};
use super::schemas::{describe, field_schema, reference};
use crate::rest::{self, snake_case};

/// The services served as `POST /api/v1/{prefix}/{rpc}`, by prefix.
pub(super) const SERVICES: [(&str, &str); 2] = [("fs", "agentvfs.v1.FileSystem"), ("admin", "agentvfs.v1.Admin")];

/// What the streaming routes carry in place of their RPCs' streams.
const WATCH_REQUEST: &str = "agentvfs.v1.WatchRequest";
const WATCH_EVENT: &str = "agentvfs.v1.WatchEvent";
const DOWNLOAD_REQUEST: &str = "agentvfs.v1.DownloadRequest";
const UPLOAD_HEADER: &str = "agentvfs.v1.UploadHeader";
const UPLOAD_RESPONSE: &str = "agentvfs.v1.UploadResponse";

/// The routes, described from the descriptors in `pool`.
#[derive(Debug)]
pub(super) struct Routes<'a> {
    pub(super) pool: &'a DescriptorPool,
    pub(super) comments: &'a Comments,
}

impl Routes<'_> {
    /// The services of [`SERVICES`], by prefix.
    pub(super) fn services(&self) -> impl Iterator<Item = (&'static str, ServiceDescriptor)> + '_ {
        SERVICES.into_iter().map(|(prefix, name)| {
            let service = self.pool.get_service_by_name(name);
            (prefix, service.unwrap_or_else(|| panic!("the descriptors define {name}")))
        })
    }

    /// Every message a route carries as a whole: the unary RPCs' requests
    /// and responses, and the streams' messages.
    pub(super) fn messages(&self) -> Vec<MessageDescriptor> {
        let unary = self.services().flat_map(|(_, service)| unary(&service).collect::<Vec<_>>());
        let streams = [WATCH_REQUEST, WATCH_EVENT, DOWNLOAD_REQUEST, UPLOAD_HEADER, UPLOAD_RESPONSE];
        unary
            .flat_map(|method| [method.input(), method.output()])
            .chain(streams.map(|name| self.message(name)))
            .collect()
    }

    /// `paths`.
    pub(super) fn paths(&self) -> Value {
        let mut paths = Map::new();
        for (prefix, service) in self.services() {
            for method in unary(&service) {
                let path = format!("/api/v1/{prefix}/{}", snake_case(method.name()));
                paths.insert(path, json!({ "post": self.rpc(&method) }));
            }
        }
        paths.insert(rest::WATCH_ROUTE.to_owned(), self.watch());
        paths.insert(rest::CONTENT_ROUTE.to_owned(), self.content());
        paths.insert(rest::MCP_ROUTE.to_owned(), super::mcp::path());
        paths.insert(rest::OPENAPI_ROUTE.to_owned(), openapi());
        Value::Object(paths)
    }

    /// `POST /api/v1/{prefix}/{rpc}`: the request message in, the response
    /// message out, both in proto3 JSON.
    fn rpc(&self, method: &MethodDescriptor) -> Value {
        let mut parameters: Vec<Value> = CALL.iter().chain(&["RequestTimeout"]).map(|name| parameter(name)).collect();
        if method.input().get_field_by_name("idempotency_key").is_some() {
            parameters.push(parameter("IdempotencyKey"));
        }
        let mut responses = Map::from_iter([(
            "200".to_owned(),
            json!({
                "description": format!("The `{}` in proto3 JSON.", method.output().name()),
                "headers": { "x-request-id": header("RequestId") },
                "content": { "application/json": { "schema": reference(method.output().full_name()) } },
            }),
        )]);
        responses.extend(failures(BODY_FAILURES));
        let service = method.parent_service().name();
        let mut operation = json!({
            "operationId": format!("{service}.{}", method.name()),
            "tags": [service],
            "parameters": parameters,
            "requestBody": {
                "required": false,
                "description": format!(
                    "The `{}` in proto3 JSON, in either field spelling; an empty body is the empty message.",
                    method.input().name()
                ),
                "content": { "application/json": { "schema": reference(method.input().full_name()) } },
            },
            "responses": responses,
        });
        self.describe_method(&mut operation, method, "");
        operation
    }

    /// `GET /api/v1/fs/watch`: `Watch` as Server-Sent Events.
    fn watch(&self) -> Value {
        let method = self.method("Watch");
        let mut parameters = self.query(&self.message(WATCH_REQUEST), &["space", "path", "from_revision"]);
        parameters.extend(["LastEventId"].iter().chain(CALL).map(|name| parameter(name)));
        let mut responses = Map::from_iter([(
            "200".to_owned(),
            json!({
                "description": "The events, until the client leaves or the call fails.",
                "headers": { "x-request-id": header("RequestId") },
                "content": { "text/event-stream": { "schema": { "type": "string" } } },
            }),
        )]);
        responses.extend(failures(&[]));
        let mut operation = json!({
            "operationId": "FileSystem.Watch",
            "tags": ["FileSystem"],
            "parameters": parameters,
            "responses": responses,
        });
        let events = format!(
            "Server-Sent Events, one per change: `data:` is one `{WATCH_EVENT}` in proto3 JSON, `id:` is \
             `<revision>/<index>` (the event's place among the events of its revision that this watch sees). \
             Comment lines keep an idle stream open. Reconnecting with `Last-Event-ID` delivers every later \
             event once. A call refused at once is an HTTP error; a failure later ends the stream with an \
             `event: error` whose `data:` is an `Error` body."
        );
        self.describe_method(&mut operation, &method, &events);
        json!({ "get": operation })
    }

    /// `GET` and `PUT /api/v1/fs/content`: `Download` and `Upload` as raw bytes.
    fn content(&self) -> Value {
        let download = self.method("Download");
        let version = json!({ "type": "string", "pattern": "^[0-9]+$" });
        let length = json!({ "type": "integer", "minimum": 0 });
        let mut responses = Map::from_iter([(
            "200".to_owned(),
            json!({
                "description": "The file's bytes.",
                "headers": {
                    "ETag": response_header("The version sent, quoted: `\"<version>\"`.", json!({ "type": "string" })),
                    "X-Agentvfs-Version": response_header("The version sent.", version),
                    "X-Agentvfs-Node-Id": response_header("The file's node ID.", json!({ "type": "string" })),
                    "X-Agentvfs-Hash": response_header("BLAKE3 hex of the bytes.", blake3_hex()),
                    "Content-Length": response_header("The file's size in bytes.", length),
                    "x-request-id": header("RequestId"),
                },
                "content": { "application/octet-stream": {} },
            }),
        )]);
        responses.extend(failures(&[]));
        let mut parameters =
            self.query(&self.message(DOWNLOAD_REQUEST), &["space", "path", "base", "version", "at_revision"]);
        parameters.extend(CALL.iter().map(|name| parameter(name)));
        let mut get = json!({
            "operationId": "FileSystem.Download",
            "tags": ["FileSystem"],
            "parameters": parameters,
            "responses": responses,
        });
        self.describe_method(&mut get, &download, "The bytes of any file, binary included, as they are stored.");
        json!({ "get": get, "put": self.upload() })
    }

    /// `PUT /api/v1/fs/content`: `Upload` of the request body.
    fn upload(&self) -> Value {
        let method = self.method("Upload");
        let header_message = self.message(UPLOAD_HEADER);
        let mut parameters = self.query(&header_message, &["space", "path", "base"]);
        let hash = header_message.get_field_by_name("hash");
        let hash = hash.and_then(|field| self.comments.of(&field.parent_file(), field.path())).unwrap_or_default();
        parameters.extend([
            in_header(
                "If-Match",
                json!({ "type": "string" }),
                "`\"<version>\"`: the version the upload replaces; the upload fails with VERSION_CONFLICT when \
                 the file's latest version is another.",
            ),
            in_header(
                "If-None-Match",
                json!({ "type": "string", "enum": ["*"] }),
                "`*`: create only; the upload fails when the file exists.",
            ),
            in_header("X-Agentvfs-Hash", blake3_hex(), hash),
            parameter("IdempotencyKey"),
        ]);
        parameters.extend(CALL.iter().map(|name| parameter(name)));
        let saved = |description: &str| {
            json!({
                "description": description,
                "headers": { "x-request-id": header("RequestId") },
                "content": { "application/json": { "schema": reference(UPLOAD_RESPONSE) } },
            })
        };
        let mut responses = Map::from_iter([
            ("200".to_owned(), saved("A new version of an existing file.")),
            ("201".to_owned(), saved("A new file.")),
        ]);
        responses.extend(failures(&[413]));
        let mut operation = json!({
            "operationId": "FileSystem.Upload",
            "tags": ["FileSystem"],
            "parameters": parameters,
            "requestBody": {
                "required": true,
                "description": "The file's new bytes, binary included.",
                "content": { "application/octet-stream": {} },
            },
            "responses": responses,
        });
        self.describe_method(&mut operation, &method, "");
        operation
    }

    /// Query parameters carrying the `fields` of `message`, named as in the proto.
    fn query(&self, message: &MessageDescriptor, fields: &[&str]) -> Vec<Value> {
        fields
            .iter()
            .map(|name| {
                let field = message.get_field_by_name(name);
                let field = field.unwrap_or_else(|| panic!("{} has a field {name}", message.full_name()));
                let mut schema = field_schema(&field, self.comments);
                let description = schema.as_object_mut().and_then(|schema| schema.remove("description"));
                let mut parameter = json!({ "name": name, "in": "query", "required": false, "schema": schema });
                if let Some(description) = description {
                    parameter["description"] = description;
                }
                parameter
            })
            .collect()
    }

    /// Sets the RPC's comment, then `more`, as the operation's description.
    fn describe_method(&self, operation: &mut Value, method: &MethodDescriptor, more: &str) {
        let comment = self.comments.of(&method.parent_file(), method.path()).unwrap_or_default();
        describe(operation, &[comment, more]);
    }

    /// The message `name` (a full name).
    fn message(&self, name: &str) -> MessageDescriptor {
        self.pool.get_message_by_name(name).unwrap_or_else(|| panic!("the descriptors define {name}"))
    }

    /// An RPC of `FileSystem`.
    fn method(&self, name: &str) -> MethodDescriptor {
        let (_, service) = SERVICES[0];
        let method = self.pool.get_service_by_name(service).and_then(|s| s.methods().find(|m| m.name() == name));
        method.unwrap_or_else(|| panic!("{service} has an RPC {name}"))
    }
}

/// The RPCs of `service` that take one message and return one, as the
/// gateway serves them.
pub(super) fn unary(service: &ServiceDescriptor) -> impl Iterator<Item = MethodDescriptor> + '_ {
    service.methods().filter(|method| !method.is_client_streaming() && !method.is_server_streaming())
}

/// `GET /openapi.json`.
fn openapi() -> Value {
    json!({
        "get": {
            "operationId": "OpenApi.Get",
            "tags": ["OpenAPI"],
            "description": "This document, generated from the proto descriptors the server was built with.",
            "security": [],
            "responses": {
                "200": {
                    "description": "An OpenAPI 3.1 document.",
                    "content": { "application/json": { "schema": { "type": "object" } } },
                },
            },
        },
    })
}

/// A BLAKE3 hash in lowercase hex.
fn blake3_hex() -> Value {
    json!({ "type": "string", "pattern": "^[0-9a-f]{64}$" })
}
