//! The remote side of a checkout: listing the origin folder, fetching and
//! storing raw bytes, creating folders.

use std::collections::BTreeMap;

use agentvfs_proto::v1 as pb;

use super::journal::Kind;
use super::local;
use crate::client::Client;
use crate::errors::CliError;

/// Bytes per upload message.
const CHUNK: usize = 1 << 20;
/// Retries of a retryable failure, waiting 0.2 s, 0.4 s, … 3.2 s.
const RETRIES: u32 = 5;

/// One entry of the origin folder, as the server lists it.
#[derive(Debug, Clone)]
pub struct Entry {
    pub kind: Kind,
    pub node_id: String,
    pub version: u64,
    pub hash: String,
    pub size: u64,
}

/// The remote path of `rel` inside the folder `origin`.
pub fn path(origin: &str, rel: &str) -> String {
    format!("{}/{rel}", origin.trim_end_matches('/'))
}

/// Every entry below `origin`, by relative path; refuses more than `limit`.
pub async fn list(
    client: &mut Client,
    space: &str,
    origin: &str,
    limit: u64,
) -> Result<BTreeMap<String, Entry>, CliError> {
    let prefix = format!("{}/", origin.trim_end_matches('/'));
    let mut entries = BTreeMap::new();
    let mut token = String::new();
    loop {
        let request = pb::ListRequest {
            space: space.to_owned(),
            path: origin.to_owned(),
            recursive: true,
            page_size: 200,
            page_token: token,
            ..Default::default()
        };
        let page = client.fs.list(request).await?.into_inner();
        for entry in page.entries {
            let full = entry.path.trim_end_matches('/');
            let Some(rel) = full.strip_prefix(&prefix) else { continue };
            let kind = if entry.kind == pb::NodeKind::Directory as i32 { Kind::Directory } else { Kind::File };
            entries.insert(
                rel.to_owned(),
                Entry { kind, node_id: entry.node_id, version: entry.version, hash: entry.hash, size: entry.size },
            );
            if entries.len() as u64 > limit {
                return Err(local::too_many(origin, limit));
            }
        }
        if page.next_page_token.is_empty() {
            return Ok(entries);
        }
        token = page.next_page_token;
    }
}

/// The bytes of the latest version of a file, with that version's number and hash.
pub async fn download(client: &mut Client, space: &str, path: &str) -> Result<(Vec<u8>, u64, String), CliError> {
    let request = pb::DownloadRequest { space: space.to_owned(), path: path.to_owned(), ..Default::default() };
    let mut stream = client.fs.download(request).await?.into_inner();
    let mut bytes = Vec::new();
    let mut header = None;
    while let Some(chunk) = stream.message().await? {
        if let Some(first) = chunk.header {
            header = Some(first);
        }
        bytes.extend_from_slice(&chunk.data);
    }
    let header = header.ok_or_else(|| CliError::Other(format!("the download of {path} had no header")))?;
    Ok((bytes, header.version, header.hash))
}

/// Stores `bytes` as a new version of `path`, only if its latest version is
/// `expected_version` (0: only if it does not exist).
pub async fn upload(
    client: &mut Client,
    space: &str,
    path: &str,
    expected_version: u64,
    bytes: Vec<u8>,
    key: &str,
) -> Result<pb::UploadResponse, CliError> {
    let header = pb::UploadHeader {
        space: space.to_owned(),
        path: path.to_owned(),
        expected_version: Some(expected_version),
        idempotency_key: key.to_owned(),
        ..Default::default()
    };
    let chunks = upload_chunks(header, &bytes);
    let mut attempt = 0;
    loop {
        match client.fs.upload(tokio_stream::iter(chunks.clone())).await {
            Ok(response) => return Ok(response.into_inner()),
            Err(status) => backoff(status, &mut attempt).await?,
        }
    }
}

/// The messages of an upload of `bytes` under `header`, whose hash this
/// sets: the header, then the bytes a chunk at a time.
pub fn upload_chunks(header: pb::UploadHeader, bytes: &[u8]) -> Vec<pb::UploadChunk> {
    use pb::upload_chunk::Part;
    let header = pb::UploadHeader { hash: blake3::hash(bytes).to_hex().to_string(), ..header };
    let mut chunks = vec![pb::UploadChunk { part: Some(Part::Header(header)) }];
    chunks.extend(bytes.chunks(CHUNK).map(|data| pb::UploadChunk { part: Some(Part::Data(data.to_vec())) }));
    chunks
}

/// Waits before retrying a call that failed with a retryable status (a rate
/// limit, an overload, the same key still running), a few times; otherwise
/// returns the failure.
async fn backoff(status: tonic::Status, attempt: &mut u32) -> Result<(), CliError> {
    use tonic_types::StatusExt as _;
    let retryable = status
        .get_details_error_info()
        .is_some_and(|info| info.metadata.get("retryable").is_some_and(|value| value == "true"))
        || matches!(status.code(), tonic::Code::Unavailable | tonic::Code::ResourceExhausted);
    if !retryable || *attempt >= RETRIES {
        return Err(status.into());
    }
    *attempt += 1;
    tokio::time::sleep(std::time::Duration::from_millis(100 << *attempt)).await;
    Ok(())
}

/// Creates the folder `path`; returns its node ID.
pub async fn mkdir(client: &mut Client, space: &str, path: &str, key: &str) -> Result<String, CliError> {
    let action =
        pb::BatchAction { action: Some(pb::batch_action::Action::Mkdir(pb::MkdirAction { path: path.to_owned() })) };
    let request = pb::BatchRequest {
        space: space.to_owned(),
        actions: vec![action],
        apply: true,
        idempotency_key: key.to_owned(),
        ..Default::default()
    };
    let mut attempt = 0;
    let response = loop {
        match client.fs.batch(request.clone()).await {
            Ok(response) => break response.into_inner(),
            Err(status) => backoff(status, &mut attempt).await?,
        }
    };
    let outcome = response.outcomes.into_iter().next();
    match outcome {
        Some(outcome) if outcome.ok => Ok(outcome.node_id),
        // Reported like a failed call, with the action's own reason and next step.
        Some(pb::BatchOutcome { error: Some(error), .. }) => {
            let details =
                tonic_types::ErrorDetails::with_error_info(error.reason, agentvfs_proto::ERROR_DOMAIN, error.metadata);
            Err(CliError::Status(<tonic::Status as tonic_types::StatusExt>::with_error_details(
                tonic::Code::from(error.code),
                error.message,
                details,
            )))
        }
        _ => Err(CliError::Other(format!("creating the folder {path} returned no outcome"))),
    }
}
