//! Server reflection gives a stock client everything it needs to read an
//! error: the `google.rpc` status and error detail types that replies carry
//! as `Any`, and the files they import, from the front and the worker, over
//! reflection v1 and v1alpha. The client here knows no agentvfs or
//! `google.rpc` type: it decodes with what reflection served, as grpcurl does.

#![allow(clippy::unwrap_used)]

use crate::support;

use std::collections::{BTreeSet, VecDeque};

use prost::Message as _;
use prost_reflect::{DescriptorPool, DynamicMessage};
use prost_types::{FileDescriptorProto, FileDescriptorSet};
use support::{Stack, write_text};
use tonic::transport::Channel;

/// The types agentvfs errors carry in their details.
const DETAIL_TYPES: &[&str] = &[
    "google.rpc.ErrorInfo",
    "google.rpc.BadRequest",
    "google.rpc.PreconditionFailure",
    "google.rpc.QuotaFailure",
    "google.rpc.RetryInfo",
];

#[derive(Debug, Clone, Copy)]
enum Version {
    V1,
    V1Alpha,
}

#[derive(Debug, Clone)]
enum Ask {
    Symbol(String),
    File(String),
}

/// One reflection request; the encoded file descriptors of the answer.
async fn ask(channel: Channel, version: Version, ask: Ask) -> Result<Vec<Vec<u8>>, String> {
    match version {
        Version::V1 => {
            use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
            use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
            use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
            use tonic_reflection::pb::v1::{ErrorResponse, ServerReflectionRequest};
            let message_request = match ask {
                Ask::Symbol(symbol) => MessageRequest::FileContainingSymbol(symbol),
                Ask::File(file) => MessageRequest::FileByFilename(file),
            };
            let request = ServerReflectionRequest { host: String::new(), message_request: Some(message_request) };
            let mut replies = ServerReflectionClient::new(channel)
                .server_reflection_info(tokio_stream::iter([request]))
                .await
                .map_err(|status| status.to_string())?
                .into_inner();
            let reply = replies.message().await.map_err(|status| status.to_string())?.ok_or("no reply")?;
            match reply.message_response {
                Some(MessageResponse::FileDescriptorResponse(files)) => Ok(files.file_descriptor_proto),
                Some(MessageResponse::ErrorResponse(ErrorResponse { error_code, error_message })) => {
                    Err(format!("{error_code}: {error_message}"))
                }
                other => Err(format!("unexpected reply {other:?}")),
            }
        }
        Version::V1Alpha => {
            use tonic_reflection::pb::v1alpha::server_reflection_client::ServerReflectionClient;
            use tonic_reflection::pb::v1alpha::server_reflection_request::MessageRequest;
            use tonic_reflection::pb::v1alpha::server_reflection_response::MessageResponse;
            use tonic_reflection::pb::v1alpha::{ErrorResponse, ServerReflectionRequest};
            let message_request = match ask {
                Ask::Symbol(symbol) => MessageRequest::FileContainingSymbol(symbol),
                Ask::File(file) => MessageRequest::FileByFilename(file),
            };
            let request = ServerReflectionRequest { host: String::new(), message_request: Some(message_request) };
            let mut replies = ServerReflectionClient::new(channel)
                .server_reflection_info(tokio_stream::iter([request]))
                .await
                .map_err(|status| status.to_string())?
                .into_inner();
            let reply = replies.message().await.map_err(|status| status.to_string())?.ok_or("no reply")?;
            match reply.message_response {
                Some(MessageResponse::FileDescriptorResponse(files)) => Ok(files.file_descriptor_proto),
                Some(MessageResponse::ErrorResponse(ErrorResponse { error_code, error_message })) => {
                    Err(format!("{error_code}: {error_message}"))
                }
                other => Err(format!("unexpected reply {other:?}")),
            }
        }
    }
}

/// What a reflection client does before decoding: asks for the file of each
/// symbol, then for every file those import, by name, until none is missing.
async fn pool_from_reflection(addr: &str, version: Version, symbols: &[&str]) -> DescriptorPool {
    let channel = Channel::from_shared(format!("http://{addr}")).unwrap().connect().await.unwrap();
    let mut pending: VecDeque<Ask> = symbols.iter().map(|s| Ask::Symbol((*s).to_owned())).collect();
    let mut seen = BTreeSet::new();
    let mut files = Vec::new();
    while let Some(next) = pending.pop_front() {
        let answer = ask(channel.clone(), version, next.clone())
            .await
            .unwrap_or_else(|error| panic!("{addr} ({version:?}) cannot resolve {next:?}: {error}"));
        for raw in answer {
            let file = FileDescriptorProto::decode(raw.as_slice()).unwrap();
            if !seen.insert(file.name().to_owned()) {
                continue;
            }
            for dependency in &file.dependency {
                if !seen.contains(dependency) {
                    pending.push_back(Ask::File(dependency.clone()));
                }
            }
            files.push(file);
        }
    }
    DescriptorPool::from_file_descriptor_set(FileDescriptorSet { file: files })
        .unwrap_or_else(|error| panic!("{addr} ({version:?}) served descriptors that do not link: {error}"))
}

/// The details of `status` as a reflection client shows them: the
/// `google.rpc.Status` in `grpc-status-details-bin`, decoded and printed as
/// JSON with each `Any` resolved against `pool`.
fn details_json(pool: &DescriptorPool, status: &tonic::Status) -> serde_json::Value {
    let descriptor = pool.get_message_by_name("google.rpc.Status").expect("google.rpc.Status was served");
    let decoded = DynamicMessage::decode(descriptor, status.details()).unwrap();
    let json = serde_json::to_value(&decoded).unwrap_or_else(|error| panic!("cannot show the details: {error}"));
    json["details"].clone()
}

#[tokio::test]
async fn reflection_serves_the_error_detail_types_so_stock_clients_can_decode_errors() {
    let stack = Stack::start(&[]).await;
    stack.front.space("s").await;
    let mut fs = stack.front.fs().await;
    fs.write(write_text("s", "/a.md", "one\n")).await.unwrap();
    let conflict = fs
        .write(agentvfs_proto::v1::WriteRequest { expected_version: Some(7), ..write_text("s", "/a.md", "two\n") })
        .await
        .expect_err("a write at the wrong expected version fails");

    let mut symbols = vec!["agentvfs.v1.FileSystem", "google.rpc.Status"];
    symbols.extend_from_slice(DETAIL_TYPES);
    for version in [Version::V1Alpha, Version::V1] {
        let pool = pool_from_reflection(&stack.front.addr, version, &symbols).await;
        let details = details_json(&pool, &conflict);
        assert_eq!(details[0]["@type"], "type.googleapis.com/google.rpc.ErrorInfo", "{details}");
        assert_eq!(details[0]["reason"], "VERSION_CONFLICT", "{details}");
        assert_eq!(details[0]["domain"], "agentvfs", "{details}");
        assert_eq!(details[0]["metadata"]["currentVersion"], "1", "{details}");
        assert_eq!(details[1]["@type"], "type.googleapis.com/google.rpc.PreconditionFailure", "{details}");
        assert_eq!(details[1]["violations"][0]["type"], "VERSION", "{details}");
        assert_eq!(details[1]["violations"][0]["subject"], "/a.md", "{details}");

        // The worker serves the same types.
        let pool = pool_from_reflection(&stack.worker.addr, version, &symbols[1..]).await;
        for name in DETAIL_TYPES {
            assert!(pool.get_message_by_name(name).is_some(), "{name} from the worker ({version:?})");
        }
    }
}
