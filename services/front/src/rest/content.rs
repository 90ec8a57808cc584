//! `GET` and `PUT /api/v1/fs/content?space=…&path=…`: a file's bytes as the
//! raw body of the reply or of the request, streamed through `Download` and
//! `Upload` piece by piece, so that memory per call does not grow with the
//! file.
//!
//! - `GET` takes `base`, `version` and `at_revision` too. The reply's headers
//!   say what was read (`ETag: "<version>"`, `X-Agentvfs-Version`,
//!   `X-Agentvfs-Node-Id`, `X-Agentvfs-Hash`, `Content-Length`); a call that
//!   fails before the first byte answers with the JSON error body, one that
//!   fails later ends the connection before `Content-Length` bytes.
//! - `PUT` takes `base` too, and the headers `If-Match: "<version>"` (the
//!   version it replaces), `If-None-Match: *` (create only),
//!   `Idempotency-Key` and `X-Agentvfs-Hash` (BLAKE3 hex of the whole body,
//!   checked before anything is saved). It answers 201 when it created the
//!   file, else 200, with `UploadResponse` in proto3 JSON.

use agentvfs_proto::v1 as pb;
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::BodyExt as _;
use prost::Message as _;
use prost::bytes::Bytes;
use tokio_stream::StreamExt as _;
use tonic::Code;
use tower::ServiceExt as _;

use super::{BODY_TIMEOUT, Body, Failure, Frames, Gateway, deadline, frame, grpc_call, proto_json, query};
use crate::auth::REQUEST_ID;

pub const ROUTE: &str = "/api/v1/fs/content";

/// The most bytes of a request body that go into one `Upload` message.
const PIECE: usize = 1 << 20;
/// Messages in flight between the HTTP body and the call, each way.
const QUEUE: usize = 4;

impl Gateway {
    pub(super) async fn content(
        &self,
        request: Request<hyper::body::Incoming>,
        request_id: &mut Option<HeaderValue>,
    ) -> Result<Response<Body>, Failure> {
        match *request.method() {
            Method::GET => self.download(request, request_id).await,
            Method::PUT => self.upload(request, request_id).await,
            ref other => Err(Failure::local(
                StatusCode::METHOD_NOT_ALLOWED,
                Code::InvalidArgument,
                format!("{ROUTE} takes GET (download) or PUT (upload), not {other}."),
            )),
        }
    }

    async fn download(
        &self,
        request: Request<hyper::body::Incoming>,
        request_id: &mut Option<HeaderValue>,
    ) -> Result<Response<Body>, Failure> {
        let mut download = pb::DownloadRequest::default();
        for (name, value) in query(request.uri().query().unwrap_or("")) {
            match name.as_str() {
                "space" => download.space = value,
                "path" => download.path = value,
                "base" => download.base = value,
                "version" => download.version = number(&name, &value)?,
                "at_revision" => download.at_revision = number(&name, &value)?,
                _ => {
                    return Err(bad(format!(
                        "GET {ROUTE} takes space, path, base, version and at_revision, not {name:?}."
                    )));
                }
            }
        }
        let method = self.method("Download");
        let body = http_body_util::Full::new(frame(&download.encode_to_vec())).map_err(|never| match never {});
        let mut call = grpc_call(&method, request.headers(), tonic::body::Body::new(body));
        deadline(request.headers(), &mut call)?;
        let response = self.grpc.clone().oneshot(call).await.unwrap_or_else(|never| match never {});
        let (head, mut body) = response.into_parts();
        if let Some(id) = head.headers.get(REQUEST_ID) {
            *request_id = Some(id.clone());
        }
        if let Some(status) = tonic::Status::from_header_map(&head.headers).filter(|s| s.code() != Code::Ok) {
            return Err(Failure::from_status(&self.pool, &status));
        }

        // The first message says what is read; until it comes, a failure is an HTTP error.
        let mut frames = Frames::default();
        let first = loop {
            if let Some(message) = frames.next() {
                break message;
            }
            match body.frame().await {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => frames.push(&data),
                    Err(frame) => {
                        let status = frame.into_trailers().ok().and_then(|t| tonic::Status::from_header_map(&t));
                        return Err(self.ended(status));
                    }
                },
                Some(Err(status)) => return Err(Failure::from_status(&self.pool, &status)),
                None => return Err(self.ended(None)),
            }
        };
        let first = pb::DownloadChunk::decode(first).map_err(|_| unreadable())?;
        let info = first.header.ok_or_else(unreadable)?;

        let (pieces, stream) = tokio::sync::mpsc::channel::<Bytes>(QUEUE);
        tokio::spawn(async move {
            if !first.data.is_empty() && pieces.send(Bytes::from(first.data)).await.is_err() {
                return;
            }
            loop {
                while let Some(message) = frames.next() {
                    let Ok(chunk) = pb::DownloadChunk::decode(message) else { return };
                    if pieces.send(Bytes::from(chunk.data)).await.is_err() {
                        return;
                    }
                }
                // A failure ends the body short of its Content-Length, which
                // the client sees as a cut connection.
                match body.frame().await {
                    Some(Ok(frame)) => match frame.into_data() {
                        Ok(data) => frames.push(&data),
                        Err(_trailers) => return,
                    },
                    Some(Err(_)) | None => return,
                }
            }
        });
        let stream =
            tokio_stream::wrappers::ReceiverStream::new(stream).map(|bytes| Ok(hyper::body::Frame::data(bytes)));
        let mut response = Response::new(http_body_util::StreamBody::new(stream).boxed());
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/octet-stream"));
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(info.size));
        headers.insert(header::ETAG, value(&format!("\"{}\"", info.version)));
        headers.insert("x-agentvfs-version", HeaderValue::from(info.version));
        headers.insert("x-agentvfs-node-id", value(&info.node_id));
        headers.insert("x-agentvfs-hash", value(&info.hash));
        Ok(response)
    }

    async fn upload(
        &self,
        request: Request<hyper::body::Incoming>,
        request_id: &mut Option<HeaderValue>,
    ) -> Result<Response<Body>, Failure> {
        let mut upload = pb::UploadHeader::default();
        for (name, value) in query(request.uri().query().unwrap_or("")) {
            match name.as_str() {
                "space" => upload.space = value,
                "path" => upload.path = value,
                "base" => upload.base = value,
                _ => return Err(bad(format!("PUT {ROUTE} takes space, path and base, not {name:?}."))),
            }
        }
        let headers = request.headers();
        upload.expected_version = expected_version(headers)?;
        upload.idempotency_key = text(headers, "idempotency-key")?;
        upload.hash = text(headers, "x-agentvfs-hash")?;

        let (parts, mut incoming) = request.into_parts();
        let (messages, stream) = tokio::sync::mpsc::channel::<Result<Bytes, tonic::Status>>(QUEUE);
        let header = pb::UploadChunk { part: Some(pb::upload_chunk::Part::Header(upload)) };
        // The queue is empty: the header always fits.
        let _ = messages.try_send(Ok(frame(&header.encode_to_vec())));
        tokio::spawn(async move {
            loop {
                let piece = tokio::select! {
                    piece = tokio::time::timeout(BODY_TIMEOUT, incoming.frame()) => piece,
                    // The call ended (refused, or failed): stop reading.
                    () = messages.closed() => return,
                };
                let data = match piece {
                    Ok(Some(Ok(frame))) => match frame.into_data() {
                        Ok(data) => data,
                        Err(_trailers) => continue,
                    },
                    Ok(None) => return,
                    Ok(Some(Err(error))) => {
                        let status = tonic::Status::cancelled(format!("The request body could not be read: {error}"));
                        let _ = messages.send(Err(status)).await;
                        return;
                    }
                    Err(_) => {
                        let status = tonic::Status::cancelled(format!(
                            "The request body stalled for {} s; nothing was saved.",
                            BODY_TIMEOUT.as_secs()
                        ));
                        let _ = messages.send(Err(status)).await;
                        return;
                    }
                };
                for piece in data.chunks(PIECE) {
                    let chunk = pb::UploadChunk { part: Some(pb::upload_chunk::Part::Data(piece.to_vec())) };
                    if messages.send(Ok(frame(&chunk.encode_to_vec()))).await.is_err() {
                        return;
                    }
                }
            }
        });
        let stream =
            tokio_stream::wrappers::ReceiverStream::new(stream).map(|piece| piece.map(hyper::body::Frame::data));
        let body = tonic::body::Body::new(http_body_util::StreamBody::new(stream));
        let method = self.method("Upload");
        let mut call = grpc_call(&method, &parts.headers, body);
        deadline(&parts.headers, &mut call)?;
        let response = self.grpc.clone().oneshot(call).await.unwrap_or_else(|never| match never {});
        let reply = self.reply(response, method.output(), request_id).await?;
        let created = reply.get_field_by_name("created").is_some_and(|created| created.as_bool() == Some(true));
        let status = if created { StatusCode::CREATED } else { StatusCode::OK };
        Ok(super::json_response(status, &proto_json(&reply)?))
    }

    fn method(&self, name: &str) -> prost_reflect::MethodDescriptor {
        self.pool
            .get_service_by_name("agentvfs.v1.FileSystem")
            .and_then(|service| service.methods().find(|method| method.name() == name))
            .expect("the compiled-in descriptors have every FileSystem RPC")
    }

    /// A stream that ended before its first message.
    fn ended(&self, status: Option<tonic::Status>) -> Failure {
        let status = status.unwrap_or_else(|| tonic::Status::internal("The call ended without a reply."));
        if status.code() == Code::Ok { unreadable() } else { Failure::from_status(&self.pool, &status) }
    }
}

fn bad(message: String) -> Failure {
    Failure::local(StatusCode::BAD_REQUEST, Code::InvalidArgument, message)
}

fn unreadable() -> Failure {
    Failure::local(StatusCode::INTERNAL_SERVER_ERROR, Code::Internal, "A reply could not be read.")
}

fn number(name: &str, value: &str) -> Result<u64, Failure> {
    value.parse().map_err(|_| bad(format!("{name} must be a whole number, not {value:?}.")))
}

/// A header value the reply carries as is; what a store wrote is printable.
fn value(text: &str) -> HeaderValue {
    HeaderValue::from_str(text).unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// A header's text, empty when it is absent.
fn text(headers: &HeaderMap, name: &str) -> Result<String, Failure> {
    headers.get(name).map_or(Ok(String::new()), |value| {
        value.to_str().map(str::to_owned).map_err(|_| bad(format!("{name} must be printable ASCII.")))
    })
}

/// The version an upload replaces: `If-Match: "<version>"` (or a bare
/// number), or 0 (the file must not exist) for `If-None-Match: *`.
fn expected_version(headers: &HeaderMap) -> Result<Option<u64>, Failure> {
    let if_match = text(headers, "if-match")?;
    let if_none_match = text(headers, "if-none-match")?;
    match (if_match.trim(), if_none_match.trim()) {
        ("", "") => Ok(None),
        ("", "*") => Ok(Some(0)),
        ("", other) => Err(bad(format!("If-None-Match takes only *, not {other:?}."))),
        (version, "") => {
            version.trim_matches('"').parse().map(Some).map_err(|_| {
                bad(format!("If-Match must be the version the upload replaces (\"3\"), not {if_match:?}."))
            })
        }
        _ => Err(bad("Give If-Match or If-None-Match, not both.".to_owned())),
    }
}
