//! HTTP for callers that do not speak gRPC (SPEC §11): `POST
//! /api/v1/fs/{rpc}` and `POST /api/v1/admin/{rpc}`, the request message in
//! proto3 JSON, the response message in proto3 JSON.
//!
//! A call is turned into the gRPC call it names and served in process by
//! the same services and layers as gRPC (authentication, limits,
//! admission, deadlines, request IDs, metrics), so each RPC has one
//! implementation. JSON is read and written with the proto descriptors
//! the build compiled (`prost-reflect`): no message has a hand-written
//! JSON form. A failed call answers with the HTTP status of its gRPC code
//! (Google's mapping) and Google's JSON error body, whose `details` carry
//! the same `ErrorInfo`, `BadRequest`, … as the gRPC status, and with
//! `Retry-After` when the error says when to retry.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use agentvfs_proto::{code_name, v1 as pb};
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, Limited};
use prost::Message as _;
use prost::bytes::{Buf, Bytes};
use prost_reflect::{DescriptorPool, DeserializeOptions, DynamicMessage, MethodDescriptor, SerializeOptions, Value};
use tokio::net::TcpListener;
use tokio_stream::StreamExt as _;
use tonic::Code;
use tower::ServiceExt as _;
use tower::util::BoxCloneSyncService;

use crate::auth::{Authenticator, REQUEST_ID};

mod content;
mod mcp;

/// A reply's body: one JSON document, or a stream of events.
type Body = http_body_util::combinators::BoxBody<Bytes, Infallible>;

/// The in-process gRPC service every HTTP call is turned into.
pub type Grpc = BoxCloneSyncService<Request<tonic::body::Body>, Response<tonic::body::Body>, Infallible>;

/// Bodies larger than this are parsed on a blocking thread.
const BLOCKING_PARSE: usize = 256 << 10;

/// `Watch` as Server-Sent Events.
pub(crate) const WATCH_ROUTE: &str = "/api/v1/fs/watch";
/// The OpenAPI document of every route.
pub(crate) const OPENAPI_ROUTE: &str = "/openapi.json";
pub(crate) use content::ROUTE as CONTENT_ROUTE;
pub(crate) use mcp::ROUTE as MCP_ROUTE;
/// Comment lines sent on an idle event stream, so that proxies keep it open.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// How long a client may take to send a request's headers, and then its
/// body: a slow sender holds a connection and memory, never a call.
const HEADER_TIMEOUT: Duration = Duration::from_secs(30);
const BODY_TIMEOUT: Duration = Duration::from_secs(60);

/// How the front serves HTTP.
#[derive(Debug, Clone)]
pub struct Options {
    /// The largest request body.
    pub max_body: usize,
    /// Authenticates `/mcp` requests before the MCP layer reads them.
    pub auth: Authenticator,
    /// `--dev`: calls need no token.
    pub dev: bool,
    /// Browser origins that may call `/mcp`.
    pub allowed_origins: Vec<String>,
    /// An MCP session ends after this long without a request.
    pub session_idle: Duration,
}

/// Serves HTTP on `listener` until the task is dropped, which ends every
/// connection.
pub async fn serve(listener: TcpListener, grpc: Grpc, options: Options) {
    let gateway = Arc::new(Gateway::new(grpc, options));
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(error) => {
                tracing::warn!(%error, "cannot accept an HTTP connection");
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let gateway = gateway.clone();
        connections.spawn(serve_connection(stream, peer, gateway));
        while connections.try_join_next().is_some() {}
    }
}

async fn serve_connection(stream: tokio::net::TcpStream, peer: SocketAddr, gateway: Arc<Gateway>) {
    let service = hyper::service::service_fn(move |request| {
        let gateway = gateway.clone();
        async move { Ok::<_, Infallible>(gateway.handle(request).await) }
    });
    let mut builder = hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new());
    builder.http1().timer(hyper_util::rt::TokioTimer::new()).header_read_timeout(HEADER_TIMEOUT);
    if let Err(error) = builder.serve_connection(hyper_util::rt::TokioIo::new(stream), service).await {
        tracing::debug!(%peer, %error, "HTTP connection ended");
    }
}

struct Gateway {
    grpc: Grpc,
    pool: DescriptorPool,
    max_body: usize,
    mcp: mcp::Mcp,
}

/// Headers a gRPC call must not take from the HTTP request.
const NOT_FORWARDED: &[header::HeaderName] = &[
    header::CONTENT_TYPE,
    header::CONTENT_LENGTH,
    header::TE,
    header::HOST,
    header::CONNECTION,
    header::TRANSFER_ENCODING,
    header::ACCEPT,
    header::ACCEPT_ENCODING,
];

impl Gateway {
    fn new(grpc: Grpc, options: Options) -> Gateway {
        let pool = DescriptorPool::decode(agentvfs_proto::FILE_DESCRIPTOR_SET)
            .expect("the descriptors compiled into agentvfs-proto decode");
        let settings = mcp::Settings {
            allowed_origins: options.allowed_origins,
            session_idle: options.session_idle,
            max_body: options.max_body,
        };
        let mcp = mcp::Mcp::new(grpc.clone(), options.auth, options.dev, settings)
            .expect("the MCP tools build from the compiled-in descriptors and schemas");
        Gateway { grpc, pool, max_body: options.max_body, mcp }
    }

    async fn handle(&self, request: Request<hyper::body::Incoming>) -> Response<Body> {
        let mut request_id = request.headers().get(REQUEST_ID).cloned();
        let mut response = match self.call(request, &mut request_id).await {
            Ok(response) => response,
            Err(failure) => failure.into_response(),
        };
        if let Some(id) = request_id {
            response.headers_mut().insert(REQUEST_ID, id);
        }
        response
    }

    /// Serves one call; `request_id` becomes the one the call was given.
    async fn call(
        &self,
        request: Request<hyper::body::Incoming>,
        request_id: &mut Option<HeaderValue>,
    ) -> Result<Response<Body>, Failure> {
        if request.uri().path() == WATCH_ROUTE {
            return self.watch(request, request_id).await;
        }
        if request.uri().path() == OPENAPI_ROUTE {
            if request.method() != Method::GET {
                return Err(Failure::local(
                    StatusCode::METHOD_NOT_ALLOWED,
                    Code::InvalidArgument,
                    format!("{OPENAPI_ROUTE} takes GET, not {}.", request.method()),
                ));
            }
            let mut response = Response::new(Full::new(Bytes::from_static(crate::openapi::document())).boxed());
            response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
            return Ok(response);
        }
        if request.uri().path() == content::ROUTE {
            return self.content(request, request_id).await;
        }
        if request.uri().path() == mcp::ROUTE {
            return Ok(self.mcp.handle(request, &self.pool).await);
        }
        let method = self.route(request.method(), request.uri().path())?;
        let json = request
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .is_none_or(|value| value.split(';').next().is_some_and(|kind| kind.trim() == "application/json"));
        if !json {
            return Err(Failure::local(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                Code::InvalidArgument,
                "The request body must be proto3 JSON (Content-Type: application/json).",
            ));
        }
        let too_large = || {
            Failure::local_because(
                StatusCode::PAYLOAD_TOO_LARGE,
                Code::InvalidArgument,
                "TOO_LARGE",
                format!("The request body is over the {}-byte limit; use Upload for large files.", self.max_body),
            )
        };
        // Refused before a byte of it is read (a client that sent
        // `Expect: 100-continue` never sends it).
        let declared = request.headers().get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
        if declared.is_some_and(|length| length > self.max_body as u64) {
            return Err(too_large());
        }
        let (parts, body) = request.into_parts();
        let Ok(body) = tokio::time::timeout(BODY_TIMEOUT, Limited::new(body, self.max_body).collect()).await else {
            return Err(Failure::local(
                StatusCode::REQUEST_TIMEOUT,
                Code::InvalidArgument,
                format!("The request body did not arrive within {} s.", BODY_TIMEOUT.as_secs()),
            ));
        };
        let body = match body {
            Ok(body) => body.to_bytes(),
            Err(error) if error.is::<http_body_util::LengthLimitError>() => return Err(too_large()),
            Err(error) => {
                return Err(Failure::local(
                    StatusCode::BAD_REQUEST,
                    Code::InvalidArgument,
                    format!("The request body could not be read: {error}"),
                ));
            }
        };
        // Parsing a body of megabytes takes milliseconds: off the runtime's threads.
        let mut message = if body.len() > BLOCKING_PARSE {
            let (method, body) = (method.clone(), body.clone());
            tokio::task::spawn_blocking(move || parse(&method, &body)).await.map_err(|_| {
                Failure::local(StatusCode::INTERNAL_SERVER_ERROR, Code::Internal, "The body could not be parsed.")
            })??
        } else {
            parse(&method, &body)?
        };
        let key = parts.headers.get("idempotency-key").map(HeaderValue::to_str).transpose().map_err(|_| {
            Failure::local(StatusCode::BAD_REQUEST, Code::InvalidArgument, "Idempotency-Key must be printable ASCII.")
        })?;
        if let Some(key) = key
            && let Some(field) = method.input().get_field_by_name("idempotency_key")
            && message.get_field(&field).as_str().is_some_and(str::is_empty)
        {
            message.set_field(&field, Value::String(key.to_owned()));
        }

        let mut grpc_request = grpc_request(&method, &parts.headers, &message);
        deadline(&parts.headers, &mut grpc_request)?;
        let response = self.grpc.clone().oneshot(grpc_request).await.unwrap_or_else(|never| match never {});
        let reply = self.reply(response, method.output(), request_id).await?;
        Ok(json_response(StatusCode::OK, &proto_json(&reply)?))
    }

    /// The one message of a unary call's `response`, or its failure;
    /// `request_id` becomes the one the call was given.
    async fn reply(
        &self,
        response: Response<tonic::body::Body>,
        output: prost_reflect::MessageDescriptor,
        request_id: &mut Option<HeaderValue>,
    ) -> Result<DynamicMessage, Failure> {
        let (head, body) = response.into_parts();
        if let Some(id) = head.headers.get(REQUEST_ID) {
            *request_id = Some(id.clone());
        }
        let collected = body.collect().await.map_err(|status| Failure::from_status(&self.pool, &status))?;
        let trailers = collected.trailers().cloned().unwrap_or_default();
        // A call that fails before its reply says so in the headers alone.
        let status = tonic::Status::from_header_map(&head.headers)
            .or_else(|| tonic::Status::from_header_map(&trailers))
            .unwrap_or_else(|| tonic::Status::internal("The call ended without a gRPC status."));
        if status.code() != Code::Ok {
            return Err(Failure::from_status(&self.pool, &status));
        }
        unframe(collected.to_bytes()).and_then(|bytes| DynamicMessage::decode(output, bytes).ok()).ok_or_else(|| {
            Failure::local(StatusCode::INTERNAL_SERVER_ERROR, Code::Internal, "A reply could not be read.")
        })
    }

    /// `GET /api/v1/fs/watch?space=…&path=…&from_revision=…` as Server-Sent
    /// Events: one event per `WatchEvent`, its data the event in proto3
    /// JSON, its `id` `<revision>/<index>` (the event's place among the
    /// events of its revision that this watch sees). A client that
    /// reconnects with `Last-Event-ID` gets every later event once: the
    /// stream starts again at that revision and skips what it had. A bare
    /// `<revision>` resumes after that whole revision. The stream ends with
    /// an `error` event when the call fails (access removed, space deleted).
    async fn watch(
        &self,
        request: Request<hyper::body::Incoming>,
        request_id: &mut Option<HeaderValue>,
    ) -> Result<Response<Body>, Failure> {
        if request.method() != Method::GET {
            return Err(Failure::local(
                StatusCode::METHOD_NOT_ALLOWED,
                Code::InvalidArgument,
                format!("{WATCH_ROUTE} takes GET, not {}.", request.method()),
            ));
        }
        let bad = |message: String| Failure::local(StatusCode::BAD_REQUEST, Code::InvalidArgument, message);
        let mut watch = pb::WatchRequest::default();
        for (name, value) in query(request.uri().query().unwrap_or("")) {
            match name.as_str() {
                "space" => watch.space = value,
                "path" => watch.path = value,
                "from_revision" => {
                    watch.from_revision =
                        value.parse().map_err(|_| bad(format!("from_revision must be a revision, not {value:?}.")))?;
                }
                _ => return Err(bad(format!("{WATCH_ROUTE} takes space, path and from_revision, not {name:?}."))),
            }
        }
        let mut seen = None;
        if let Some(last) = request.headers().get("last-event-id") {
            let last = last.to_str().ok().and_then(EventId::parse).ok_or_else(|| {
                bad("Last-Event-ID must be an event id of this stream (<revision>/<index>).".to_owned())
            })?;
            watch.from_revision = last.resume_from();
            seen = Some(last);
        }
        let method = self
            .pool
            .get_service_by_name("agentvfs.v1.FileSystem")
            .and_then(|service| service.methods().find(|m| m.name() == "Watch"))
            .expect("the descriptors have FileSystem.Watch");
        let message = DynamicMessage::decode(method.input(), watch.encode_to_vec().as_slice())
            .expect("a WatchRequest re-decodes");
        let grpc_request = grpc_request(&method, request.headers(), &message);
        let response = self.grpc.clone().oneshot(grpc_request).await.unwrap_or_else(|never| match never {});
        let (head, mut body) = response.into_parts();
        if let Some(id) = head.headers.get(REQUEST_ID) {
            *request_id = Some(id.clone());
        }
        // A call refused at once is an HTTP error, not a stream.
        if let Some(status) = tonic::Status::from_header_map(&head.headers)
            && status.code() != Code::Ok
        {
            return Err(Failure::from_status(&self.pool, &status));
        }

        let (events, stream) = tokio::sync::mpsc::channel::<Bytes>(16);
        let (pool, output) = (self.pool.clone(), method.output());
        tokio::spawn(async move {
            let mut frames = Frames::default();
            let mut position: Option<EventId> = None;
            loop {
                let frame = tokio::select! {
                    frame = body.frame() => frame,
                    () = tokio::time::sleep(KEEP_ALIVE) => {
                        if events.send(Bytes::from_static(b": keep-alive\n\n")).await.is_err() {
                            return;
                        }
                        continue;
                    }
                    () = events.closed() => return,
                };
                let status = match frame {
                    None => None,
                    Some(Err(status)) => Some(status),
                    Some(Ok(frame)) => match frame.into_data() {
                        Ok(data) => {
                            frames.push(&data);
                            while let Some(message) = frames.next() {
                                let Ok(event) = DynamicMessage::decode(output.clone(), message) else {
                                    let status = tonic::Status::internal("A watch event could not be read.");
                                    let _ = events.send(error_event(&pool, &status)).await;
                                    return;
                                };
                                let revision =
                                    event.get_field_by_name("revision").and_then(|v| v.as_u64()).unwrap_or(0);
                                let id = EventId::after(position, revision);
                                position = Some(id);
                                if seen.is_some_and(|seen| !id.is_after(seen)) {
                                    continue;
                                }
                                if events.send(sse_event(&id, &event)).await.is_err() {
                                    return;
                                }
                            }
                            continue;
                        }
                        Err(frame) => frame.into_trailers().ok().and_then(|t| tonic::Status::from_header_map(&t)),
                    },
                };
                if let Some(status) = status.filter(|s| s.code() != Code::Ok) {
                    let _ = events.send(error_event(&pool, &status)).await;
                }
                return;
            }
        });
        let stream = tokio_stream::wrappers::ReceiverStream::new(stream)
            .map(|bytes| Ok::<_, Infallible>(hyper::body::Frame::data(bytes)));
        let mut response = Response::new(http_body_util::StreamBody::new(stream).boxed());
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        Ok(response)
    }

    /// The unary RPC a route names.
    fn route(&self, method: &Method, path: &str) -> Result<MethodDescriptor, Failure> {
        let not_found = || {
            Failure::local(
                StatusCode::NOT_FOUND,
                Code::NotFound,
                format!(
                    "No route {path}: calls are POST /api/v1/fs/{{rpc}} or /api/v1/admin/{{rpc}}, {{rpc}} a unary RPC \
                     in snake_case (read, list_versions, ...)."
                ),
            )
        };
        let (service, rpc) = match path.strip_prefix("/api/v1/").and_then(|rest| rest.split_once('/')) {
            Some(("fs", rpc)) => ("agentvfs.v1.FileSystem", rpc),
            Some(("admin", rpc)) => ("agentvfs.v1.Admin", rpc),
            _ => return Err(not_found()),
        };
        let service = self.pool.get_service_by_name(service).ok_or_else(not_found)?;
        let rpc = service
            .methods()
            .find(|m| snake_case(m.name()) == rpc && !m.is_client_streaming() && !m.is_server_streaming())
            .ok_or_else(not_found)?;
        if method != Method::POST {
            return Err(Failure::local(
                StatusCode::METHOD_NOT_ALLOWED,
                Code::InvalidArgument,
                format!("{path} takes POST, not {method}."),
            ));
        }
        Ok(rpc)
    }
}

/// The request message in `body`: proto3 JSON, either field spelling, no
/// unknown field; an empty body is the empty message.
fn parse(method: &MethodDescriptor, body: &[u8]) -> Result<DynamicMessage, Failure> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(DynamicMessage::new(method.input()));
    }
    // JSON parsers disagree on which of two equal keys wins; refuse them
    // rather than read what another reader of the same body would not.
    serde_json::from_slice::<UniqueKeys>(body).map_err(|error| {
        Failure::local(StatusCode::BAD_REQUEST, Code::InvalidArgument, format!("The body is not valid JSON: {error}"))
    })?;
    let mut deserializer = serde_json::Deserializer::from_slice(body);
    let options = DeserializeOptions::new().deny_unknown_fields(true);
    DynamicMessage::deserialize_with_options(method.input(), &mut deserializer, &options)
        .and_then(|message| deserializer.end().map(|()| message))
        .map_err(|error| {
            Failure::local(
                StatusCode::BAD_REQUEST,
                Code::InvalidArgument,
                format!("The body is not a valid {} in proto3 JSON: {error}", method.input().name()),
            )
        })
}

/// A JSON document none of whose objects names a key twice.
struct UniqueKeys;

impl<'de> serde::Deserialize<'de> for UniqueKeys {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<UniqueKeys, D::Error> {
        deserializer.deserialize_any(UniqueKeys)
    }
}

impl<'de> serde::de::Visitor<'de> for UniqueKeys {
    type Value = UniqueKeys;

    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("a JSON value")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<UniqueKeys, A::Error> {
        let mut keys = std::collections::HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            map.next_value::<UniqueKeys>()?;
            if !keys.insert(key) {
                return Err(serde::de::Error::custom("an object names the same key twice"));
            }
        }
        Ok(UniqueKeys)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<UniqueKeys, A::Error> {
        while seq.next_element::<UniqueKeys>()?.is_some() {}
        Ok(UniqueKeys)
    }

    fn visit_bool<E>(self, _: bool) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }

    fn visit_i64<E>(self, _: i64) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }

    fn visit_u64<E>(self, _: u64) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }

    fn visit_f64<E>(self, _: f64) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }

    fn visit_str<E>(self, _: &str) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }

    fn visit_unit<E>(self) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }
}

/// The gRPC call for `message`, with the HTTP request's headers as metadata.
fn grpc_request(
    method: &MethodDescriptor,
    headers: &HeaderMap,
    message: &DynamicMessage,
) -> Request<tonic::body::Body> {
    let body = Full::new(frame(&message.encode_to_vec())).map_err(|never| match never {});
    grpc_call(method, headers, tonic::body::Body::new(body))
}

/// The gRPC call of `method` with `body` (framed messages) and the headers
/// of the HTTP request a gRPC call may take.
fn grpc_call(method: &MethodDescriptor, headers: &HeaderMap, body: tonic::body::Body) -> Request<tonic::body::Body> {
    let path = format!("/{}/{}", method.parent_service().full_name(), method.name());
    let mut request = Request::builder()
        .method(Method::POST)
        .uri(path)
        .version(http::Version::HTTP_2)
        .body(body)
        .expect("a POST to a method path is a valid request");
    let grpc_headers = request.headers_mut();
    for (name, value) in headers {
        // `grpc-timeout` is the one gRPC header an HTTP caller may send.
        if !NOT_FORWARDED.contains(name) && (!name.as_str().starts_with("grpc-") || name == "grpc-timeout") {
            grpc_headers.append(name, value.clone());
        }
    }
    grpc_headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    grpc_headers.insert(header::TE, HeaderValue::from_static("trailers"));
    request
}

/// One encoded message as a gRPC frame.
fn frame(message: &[u8]) -> Bytes {
    let mut framed = Vec::with_capacity(5 + message.len());
    framed.push(0);
    framed.extend_from_slice(&u32::try_from(message.len()).unwrap_or(u32::MAX).to_be_bytes());
    framed.extend_from_slice(message);
    Bytes::from(framed)
}

/// Gives `request` the deadline of the HTTP request's `X-Request-Timeout`.
fn deadline(headers: &HeaderMap, request: &mut Request<tonic::body::Body>) -> Result<(), Failure> {
    if let Some(timeout) = headers.get("x-request-timeout") {
        let timeout = grpc_timeout(timeout).ok_or_else(|| {
            Failure::local(
                StatusCode::BAD_REQUEST,
                Code::InvalidArgument,
                "X-Request-Timeout must be a number of seconds (for example 2.5).",
            )
        })?;
        request.headers_mut().insert("grpc-timeout", timeout);
    }
    Ok(())
}

/// `message` in proto3 JSON.
fn proto_json(message: &DynamicMessage) -> Result<serde_json::Value, Failure> {
    message
        .serialize_with_options(serde_json::value::Serializer, &SerializeOptions::new())
        .map_err(|error| Failure::local(StatusCode::INTERNAL_SERVER_ERROR, Code::Internal, error.to_string()))
}

/// Where an event stands in a watch: its revision and its place among the
/// events of that revision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct EventId {
    revision: u64,
    /// `None`: the whole revision (a bare `<revision>` id).
    index: Option<u64>,
}

impl EventId {
    fn parse(text: &str) -> Option<EventId> {
        let (revision, index) = match text.trim().split_once('/') {
            Some((revision, index)) => (revision, Some(index.parse().ok()?)),
            None => (text.trim(), None),
        };
        Some(EventId { revision: revision.parse().ok()?, index })
    }

    /// The id of an event of `revision` that follows `previous`.
    fn after(previous: Option<EventId>, revision: u64) -> EventId {
        let index = match previous {
            Some(EventId { revision: r, index: Some(i) }) if r == revision => i + 1,
            _ => 0,
        };
        EventId { revision, index: Some(index) }
    }

    /// The revision a stream resumed after this event starts at.
    fn resume_from(self) -> u64 {
        match self.index {
            Some(_) => self.revision.max(1),
            None => self.revision + 1,
        }
    }

    /// Whether an event with this id comes after `seen`.
    fn is_after(self, seen: EventId) -> bool {
        match seen.index {
            None => self.revision > seen.revision,
            Some(index) => (self.revision, self.index.unwrap_or(0)) > (seen.revision, index),
        }
    }
}

/// gRPC messages out of a stream of body chunks.
#[derive(Default)]
struct Frames {
    buffer: prost::bytes::BytesMut,
}

impl Frames {
    fn push(&mut self, data: &[u8]) {
        self.buffer.extend_from_slice(data);
    }

    fn next(&mut self) -> Option<Bytes> {
        if self.buffer.len() < 5 {
            return None;
        }
        let length = u32::from_be_bytes([self.buffer[1], self.buffer[2], self.buffer[3], self.buffer[4]]) as usize;
        if self.buffer.len() < 5 + length {
            return None;
        }
        let mut message = self.buffer.split_to(5 + length);
        message.advance(5);
        Some(message.freeze())
    }
}

/// One Server-Sent Event carrying `event` as proto3 JSON.
fn sse_event(id: &EventId, event: &DynamicMessage) -> Bytes {
    let json = event
        .serialize_with_options(serde_json::value::Serializer, &SerializeOptions::new())
        .unwrap_or(serde_json::Value::Null);
    Bytes::from(format!("id: {}/{}\ndata: {json}\n\n", id.revision, id.index.unwrap_or(0)))
}

/// The `error` event that ends a stream, with Google's JSON error.
fn error_event(pool: &DescriptorPool, status: &tonic::Status) -> Bytes {
    Bytes::from(format!("event: error\ndata: {}\n\n", Failure::from_status(pool, status).body))
}

/// The decoded `name=value` pairs of a query string.
fn query(query: &str) -> impl Iterator<Item = (String, String)> + '_ {
    let decode = |text: &str| {
        let text = text.replace('+', " ");
        percent_encoding::percent_decode_str(&text).decode_utf8_lossy().into_owned()
    };
    query.split('&').filter(|pair| !pair.is_empty()).map(move |pair| {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        (decode(name), decode(value))
    })
}

/// `X-Request-Timeout` (decimal seconds) as a `grpc-timeout` value.
fn grpc_timeout(seconds: &HeaderValue) -> Option<HeaderValue> {
    let seconds: f64 = seconds.to_str().ok()?.trim().parse().ok()?;
    if !seconds.is_finite() || seconds < 0.0 {
        return None;
    }
    // At most 8 digits: microseconds below 100 s, then milliseconds.
    let micros = (seconds * 1e6).ceil();
    let value =
        if micros < 1e8 { format!("{micros}u") } else { format!("{}m", (seconds * 1e3).ceil().min(99_999_999.0)) };
    HeaderValue::from_str(&value).ok()
}

/// The message of a one-message gRPC body.
fn unframe(mut body: Bytes) -> Option<Bytes> {
    if body.len() < 5 || body[0] != 0 {
        return None;
    }
    body.advance(1);
    let length = body.get_u32() as usize;
    (body.len() == length).then_some(body)
}

fn json_response(status: StatusCode, json: &serde_json::Value) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from(json.to_string())).boxed());
    *response.status_mut() = status;
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// `ReadMany` as `read_many`.
pub(crate) fn snake_case(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 4);
    for (i, c) in name.char_indices() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_lowercase());
    }
    out
}

/// A failed call, as Google's JSON error body.
struct Failure {
    status: StatusCode,
    body: serde_json::Value,
    retry_after: Option<u64>,
}

impl Failure {
    /// A failure of the HTTP layer itself (a route, a body).
    fn local(status: StatusCode, code: Code, message: impl Into<String>) -> Failure {
        Failure::local_because(status, code, code_name(code), message)
    }

    /// [`Failure::local`] with an `ErrorInfo` reason of its own.
    fn local_because(status: StatusCode, code: Code, reason: &str, message: impl Into<String>) -> Failure {
        let info = serde_json::json!({
            "@type": "type.googleapis.com/google.rpc.ErrorInfo",
            "reason": reason,
            "domain": "agentvfs",
            "metadata": { "retryable": "false" },
        });
        let body = serde_json::json!({
            "error": { "code": status.as_u16(), "status": code_name(code), "message": message.into(), "details": [info] }
        });
        Failure { status, body, retry_after: None }
    }

    /// The failure a gRPC status describes, its details decoded.
    fn from_status(pool: &DescriptorPool, status: &tonic::Status) -> Failure {
        let http = http_status(status.code());
        let mut details = Vec::new();
        let mut retry_after = None;
        if let (false, Some(descriptor)) = (status.details().is_empty(), pool.get_message_by_name("google.rpc.Status"))
            && let Ok(decoded) = DynamicMessage::decode(descriptor, status.details())
            && let Ok(json) = decoded.serialize_with_options(serde_json::value::Serializer, &SerializeOptions::new())
            && let Some(list) = json.get("details").and_then(|d| d.as_array())
        {
            details.clone_from(list);
            retry_after = list.iter().find_map(retry_seconds);
        }
        let body = serde_json::json!({
            "error": {
                "code": http.as_u16(),
                "status": code_name(status.code()),
                "message": status.message(),
                "details": details,
            }
        });
        Failure { status: http, body, retry_after }
    }

    fn into_response(self) -> Response<Body> {
        let mut response = json_response(self.status, &self.body);
        if let Some(seconds) = self.retry_after {
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}

/// Whole seconds, rounded up, of a `RetryInfo` detail's delay (`"1.500s"`).
fn retry_seconds(detail: &serde_json::Value) -> Option<u64> {
    if detail.get("@type")?.as_str()? != "type.googleapis.com/google.rpc.RetryInfo" {
        return None;
    }
    let delay = detail.get("retryDelay")?.as_str()?.strip_suffix('s')?;
    let seconds: f64 = delay.parse().ok()?;
    Some(seconds.max(0.0).ceil() as u64)
}

/// Google's HTTP mapping of gRPC codes.
pub(crate) fn http_status(code: Code) -> StatusCode {
    match code {
        Code::Ok => StatusCode::OK,
        Code::InvalidArgument | Code::FailedPrecondition | Code::OutOfRange => StatusCode::BAD_REQUEST,
        Code::Unauthenticated => StatusCode::UNAUTHORIZED,
        Code::PermissionDenied => StatusCode::FORBIDDEN,
        Code::NotFound => StatusCode::NOT_FOUND,
        Code::AlreadyExists | Code::Aborted => StatusCode::CONFLICT,
        Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
        Code::Cancelled => StatusCode::from_u16(499).unwrap_or(StatusCode::BAD_REQUEST),
        Code::Unimplemented => StatusCode::NOT_IMPLEMENTED,
        Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        Code::DeadlineExceeded => StatusCode::GATEWAY_TIMEOUT,
        Code::Unknown | Code::Internal | Code::DataLoss => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rpc_names_are_snake_case() {
        assert_eq!(snake_case("ReadMany"), "read_many");
        assert_eq!(snake_case("Read"), "read");
        assert_eq!(snake_case("ListVersions"), "list_versions");
    }

    #[test]
    fn request_timeouts_become_grpc_timeouts() {
        let timeout =
            |s: &str| grpc_timeout(&HeaderValue::from_str(s).unwrap()).map(|v| v.to_str().unwrap().to_owned());
        assert_eq!(timeout("2.5").as_deref(), Some("2500000u"));
        assert_eq!(timeout("0").as_deref(), Some("0u"));
        assert_eq!(timeout("3600").as_deref(), Some("3600000m"));
        assert_eq!(timeout("-1"), None);
        assert_eq!(timeout("soon"), None);
    }

    #[test]
    fn retry_after_rounds_the_delay_up() {
        let detail = serde_json::json!({"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "1.200s"});
        assert_eq!(retry_seconds(&detail), Some(2));
        assert_eq!(retry_seconds(&serde_json::json!({"@type": "x", "retryDelay": "1s"})), None);
    }
}
