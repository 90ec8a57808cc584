//! `Upload` and `Download`: raw bytes of any file, streamed in chunks.

use agentvfs_proto::v1 as pb;
use tokio_stream::StreamExt as _;

use super::{Front, convert, idempotency};
use crate::auth::{Caller, Need};
use crate::error::{Error, Reason, Result};
use crate::store::{Actor, Hash, WriteBody, WriteMode, WriteOp, WriteOutcome};

/// Bytes per `Download` message.
pub(super) const CHUNK: usize = 64 * 1024;

/// Reads the first message of an upload stream, which must be its header.
pub(super) async fn receive_header(stream: &mut tonic::Streaming<pb::UploadChunk>) -> Result<pb::UploadHeader> {
    match stream.next().await {
        Some(Ok(pb::UploadChunk { part: Some(pb::upload_chunk::Part::Header(header)) })) => Ok(header),
        Some(Err(status)) => Err(stream_error(&status)),
        _ => Err(Error::invalid_argument("header", "The first upload message must be the header.")),
    }
}

/// Reads the data chunks that follow the header, up to the file limit, and
/// checks them against the header's hash.
pub(super) async fn receive_data(
    stream: &mut tonic::Streaming<pb::UploadChunk>,
    header: &pb::UploadHeader,
    limit: u64,
) -> Result<Vec<u8>> {
    let mut data = Vec::new();
    while let Some(chunk) = stream.next().await {
        match chunk.map_err(|status| stream_error(&status))?.part {
            Some(pb::upload_chunk::Part::Data(bytes)) => {
                if (data.len() + bytes.len()) as u64 > limit {
                    return Err(Error::new(
                        Reason::TooLarge,
                        format!("The upload is over the {limit}-byte file limit."),
                    )
                    .with("limit", limit)
                    .field("data"));
                }
                data.extend_from_slice(&bytes);
            }
            _ => {
                return Err(Error::invalid_argument("header", "Only the first upload message may be a header."));
            }
        }
    }
    if !header.hash.is_empty() {
        let expected = Hash::from_hex(&header.hash)
            .ok_or_else(|| Error::invalid_argument("header.hash", "hash must be 64 hex digits of BLAKE3."))?;
        let actual = Hash::of(&data);
        if actual != expected {
            return Err(Error::new(
                Reason::InvalidArgument,
                "The uploaded bytes do not match header.hash; nothing was saved.",
            )
            .with("expectedHash", expected.to_hex())
            .with("actualHash", actual.to_hex())
            .field("header.hash"));
        }
    }
    Ok(data)
}

fn stream_error(status: &tonic::Status) -> Error {
    Error::new(Reason::InvalidArgument, format!("The upload stream failed: {}.", status.message()))
}

/// Saves a received upload; the idempotency fingerprint covers the header
/// and the bytes.
pub(super) fn store_upload(
    front: &Front,
    caller: &Caller,
    header: pb::UploadHeader,
    data: Vec<u8>,
) -> Result<pb::UploadResponse> {
    let target = front.target(caller, &header.space, &header.path, &header.base, "header.path", Need::Write)?;
    let key = header.idempotency_key.clone();
    let fingerprint = if key.is_empty() {
        [0; 32]
    } else {
        let mut hasher = blake3::Hasher::new();
        hasher.update(&prost::Message::encode_to_vec(&header));
        hasher.update(&data);
        *hasher.finalize().as_bytes()
    };
    let claim = match idempotency::begin(front, caller, &target.space.id.to_string(), "Upload", &key, fingerprint)? {
        idempotency::Step::Replay(response) => return Ok(response),
        idempotency::Step::Run(claim) => claim,
    };
    let outcome = front.store.write(WriteOp {
        space: target.space.id,
        path: target.path,
        body: WriteBody::Bytes(data),
        mode: WriteMode::Overwrite,
        expected_version: header.expected_version,
        operation: "upload",
        actor: Actor {
            principal: caller.principal.clone(),
            tool_call: caller.tool_call.clone(),
            idempotency_key: super::non_empty(header.idempotency_key),
        },
        receipt: claim.as_ref().map(|c| c.write_plan(upload_response)),
    })?;
    super::upsert_session(front, caller, outcome.node, outcome.version);
    Ok(upload_response(&outcome))
}

fn upload_response(outcome: &WriteOutcome) -> pb::UploadResponse {
    pb::UploadResponse {
        node_id: outcome.node.to_string(),
        version: outcome.version,
        hash: outcome.hash.to_hex(),
        size: outcome.size,
        created: outcome.created,
        revision: outcome.revision,
    }
}

/// The messages of a download: the header with the first bytes, then the rest.
pub(super) fn download(front: &Front, caller: &Caller, req: &pb::DownloadRequest) -> Result<Vec<pb::DownloadChunk>> {
    let target = front.target(caller, &req.space, &req.path, &req.base, "path", Need::Read)?;
    let entry = front.file_at(&target, req.at_revision)?;
    let number = if req.version == 0 { entry.version } else { req.version };
    let version = front
        .store
        .version(target.space.id, entry.node, number)?
        .ok_or_else(|| Error::not_found(format!("version {number} of {}", target.path)))?;
    let bytes = front.store.content(version.hash)?;
    let header = pb::DownloadHeader {
        node_id: entry.node.to_string(),
        version: number,
        hash: version.hash.to_hex(),
        size: version.size,
        text: Some(convert::text_info(&version.text)),
    };
    let mut chunks: Vec<pb::DownloadChunk> =
        bytes.chunks(CHUNK).map(|c| pb::DownloadChunk { header: None, data: c.to_vec() }).collect();
    match chunks.first_mut() {
        Some(first) => first.header = Some(header),
        None => chunks.push(pb::DownloadChunk { header: Some(header), data: Vec::new() }),
    }
    Ok(chunks)
}
