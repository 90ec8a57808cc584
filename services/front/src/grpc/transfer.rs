//! `Upload` and `Download`: raw bytes of any file, streamed in chunks.

use std::sync::{Arc, Mutex, PoisonError};

use agentvfs_proto::v1 as pb;
use tokio_stream::StreamExt as _;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Status;
use tonic::codegen::BoxStream;

use super::access::Access;
use super::{Front, convert, idempotency};
use crate::auth::{Caller, Need};
use crate::error::{Error, Reason, Result};
use crate::ids::{NodeId, SpaceId};
use crate::media;
use crate::path::SpacePath;
use crate::store::content::{self, ChunkReader, UploadId, Uploaded};
use crate::store::{Actor, Hash, Store, WriteBody, WriteMode, WriteOp, WriteOutcome};
use crate::text::encoding;
use crate::text::{TextAnalyzer, TextMeta};

/// Stored chunks (64 KiB each, one per `Download` message) read per store
/// call: with the queue, what one download holds at most.
const RUN: u32 = 8;
/// `Download` messages queued between the store reader and the connection.
const QUEUE: usize = 4;

/// Reads the first message of an upload stream, which must be its header.
pub(super) async fn receive_header(stream: &mut tonic::Streaming<pb::UploadChunk>) -> Result<pb::UploadHeader> {
    match stream.next().await {
        Some(Ok(pb::UploadChunk { part: Some(pb::upload_chunk::Part::Header(header)) })) => Ok(header),
        Some(Err(status)) => Err(stream_error(&status)),
        _ => Err(Error::invalid_argument("header", "The first upload message must be the header.")),
    }
}

/// An upload's bytes, received: held when they are few, else staged in the
/// store batch by batch as they arrived.
pub(super) struct Received {
    body: ReceivedBody,
    /// What the idempotency fingerprint covers: the header and the bytes.
    fingerprint: [u8; 32],
}

enum ReceivedBody {
    Bytes(Vec<u8>),
    Staged { staged: Staged, size: u64, hash: Hash, text: TextMeta, mime_type: String },
}

/// An upload staged in the store, released once dropped: after its commit
/// claimed it (and removed its marker) that deletes nothing, after a
/// failure or a duplicate it deletes the chunks.
struct Staged {
    store: Store,
    id: UploadId,
    /// Set by the release, under the lock every batch is stored under: a
    /// batch still under way when the call went away is stored before the
    /// release or not at all, never after it.
    released: Arc<Mutex<bool>>,
}

impl Drop for Staged {
    fn drop(&mut self) {
        let (store, id, released) = (self.store.clone(), self.id, self.released.clone());
        // Without a runtime (the front is stopping) the collector gets it.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn_blocking(move || {
                *released.lock().unwrap_or_else(PoisonError::into_inner) = true;
                content::release_quietly(&store, id);
            });
        }
    }
}

/// Reads the data chunks that follow the header, up to the file limit, and
/// checks them against the header's hash. Memory does not grow with the
/// upload: past [`content::UPLOAD_BATCH`] bytes, each batch is staged in
/// the store as soon as it is whole. The bytes are hashed and classified on
/// the blocking pool, batch by batch, as they are stored.
pub(super) async fn receive_data(
    store: &Store,
    stream: &mut tonic::Streaming<pb::UploadChunk>,
    header: &pb::UploadHeader,
    limit: u64,
) -> Result<Received> {
    let expected = match header.hash.as_str() {
        "" => None,
        hex => Some(
            Hash::from_hex(hex)
                .ok_or_else(|| Error::invalid_argument("header.hash", "hash must be 64 hex digits of BLAKE3."))?,
        ),
    };
    let mut digest = Digest::new(header);
    let mut size = 0u64;
    // One batch's buffer, filled and stored over and over.
    let mut pending: Vec<u8> = Vec::new();
    let mut staging = Staging::default();
    while let Some(chunk) = stream.next().await {
        let Some(pb::upload_chunk::Part::Data(bytes)) = chunk.map_err(|status| stream_error(&status))?.part else {
            return Err(Error::invalid_argument("header", "Only the first upload message may be a header."));
        };
        size += bytes.len() as u64;
        if size > limit {
            return Err(Error::new(Reason::TooLarge, format!("The upload is over the {limit}-byte file limit."))
                .with("limit", limit)
                .field("data"));
        }
        let mut bytes = &bytes[..];
        while !bytes.is_empty() {
            let (fill, rest) = bytes.split_at(bytes.len().min(content::UPLOAD_BATCH - pending.len()));
            pending.extend_from_slice(fill);
            bytes = rest;
            if pending.len() == content::UPLOAD_BATCH {
                (digest, pending) = staging.put(store, pending, digest).await?;
                pending.clear();
            }
        }
    }
    // The rest goes after the batches when there were any; otherwise the
    // bytes are few, and the write takes them as they are.
    let pending = match staging.staged {
        Some(_) if pending.is_empty() => pending,
        Some(_) => {
            (digest, _) = staging.put(store, pending, digest).await?;
            Vec::new()
        }
        None => {
            let digested = store.blocking(move |_| {
                digest.update(&pending);
                Ok((digest, pending))
            });
            let pending;
            (digest, pending) = digested.await?;
            pending
        }
    };
    let Digest { hasher, text, head, fingerprint } = digest;
    let hash = Hash(*hasher.finalize().as_bytes());
    if let Some(expected) = expected
        && hash != expected
    {
        return Err(Error::new(
            Reason::InvalidArgument,
            "The uploaded bytes do not match header.hash; nothing was saved.",
        )
        .with("expectedHash", expected.to_hex())
        .with("actualHash", hash.to_hex())
        .field("header.hash"));
    }
    let body = match staging.staged {
        None => ReceivedBody::Bytes(pending),
        Some(staged) => {
            let text = text.finish();
            let mime_type = head.recorded(&text);
            let (text, mime_type) = match text.is_utf8 || size > store.limits().max_text_bytes {
                true => (text, mime_type),
                // Text in another encoding, perhaps: classified whole.
                false => {
                    let (id, chunks) = (staged.id, staging.next);
                    let bytes = store.blocking(move |store| content::read_staged(store, id, chunks)).await?;
                    let (text, charset) = encoding::classify(&bytes);
                    (text, media::recorded(&text, charset, &bytes))
                }
            };
            ReceivedBody::Staged { staged, size, hash, text, mime_type }
        }
    };
    let fingerprint = fingerprint.map_or([0; 32], |hasher| *hasher.finalize().as_bytes());
    Ok(Received { body, fingerprint })
}

/// What an upload's bytes are found to be as they pass: their hash, their
/// text classification, their first bytes for their MIME type and, for a
/// call with an idempotency key, the fingerprint of the header and the bytes.
struct Digest {
    hasher: blake3::Hasher,
    text: TextAnalyzer,
    head: media::Head,
    fingerprint: Option<blake3::Hasher>,
}

impl Digest {
    fn new(header: &pb::UploadHeader) -> Self {
        let fingerprint = (!header.idempotency_key.is_empty()).then(|| {
            let mut hasher = blake3::Hasher::new();
            hasher.update(&prost::Message::encode_to_vec(header));
            hasher
        });
        Self { hasher: blake3::Hasher::new(), text: TextAnalyzer::default(), head: media::Head::default(), fingerprint }
    }

    fn update(&mut self, bytes: &[u8]) {
        self.hasher.update(bytes);
        self.text.update(bytes);
        self.head.update(bytes);
        if let Some(fingerprint) = &mut self.fingerprint {
            fingerprint.update(bytes);
        }
    }
}

/// The upload an upload's batches go to, staged with the first.
#[derive(Default)]
struct Staging {
    staged: Option<Staged>,
    /// The chunk the next batch starts with.
    next: u32,
}

impl Staging {
    /// Digests `batch` and stores it as the upload's next chunks, on the
    /// blocking pool; gives the batch's buffer back.
    async fn put(&mut self, store: &Store, batch: Vec<u8>, mut digest: Digest) -> Result<(Digest, Vec<u8>)> {
        let (id, released) = match &self.staged {
            Some(staged) => (staged.id, staged.released.clone()),
            None => {
                let id = store.blocking(content::stage).await?;
                let released = Arc::new(Mutex::new(false));
                self.staged = Some(Staged { store: store.clone(), id, released: released.clone() });
                (id, released)
            }
        };
        let first = self.next;
        self.next += batch.len().div_ceil(content::CHUNK_SIZE) as u32;
        store
            .blocking(move |store| {
                digest.update(&batch);
                let released = released.lock().unwrap_or_else(PoisonError::into_inner);
                if *released {
                    return Err(Error::internal("the upload was released while a batch of it was on its way"));
                }
                content::put_staged(store, id, first, &batch)?;
                Ok((digest, batch))
            })
            .await
    }
}

fn stream_error(status: &tonic::Status) -> Error {
    Error::new(Reason::InvalidArgument, format!("The upload stream failed: {}.", status.message()))
}

/// Saves a received upload.
pub(super) fn store_upload(
    front: &Front,
    caller: &Caller,
    header: pb::UploadHeader,
    received: Received,
) -> Result<pb::UploadResponse> {
    let target = front.target(caller, &header.space, &header.path, &header.base, "header.path", Need::Write)?;
    let key = header.idempotency_key.clone();
    let space = target.space.id.to_string();
    // Kept until the write is over: dropping it releases what no commit claimed.
    let (body, _staged) = match received.body {
        ReceivedBody::Bytes(bytes) => (WriteBody::Bytes(bytes), None),
        ReceivedBody::Staged { staged, size, hash, text, mime_type } => {
            let upload = Uploaded { id: staged.id, size };
            (WriteBody::Uploaded { upload, hash, text, mime_type }, Some(staged))
        }
    };
    idempotency::run(front, caller, &space, "Upload", &key, received.fingerprint, |claim| {
        let outcome = front.store.write(WriteOp {
            space: target.space.id,
            path: target.path,
            body,
            mode: WriteMode::Overwrite,
            expected_version: header.expected_version,
            executable: header.executable,
            operation: "upload",
            actor: Actor {
                principal: caller.principal.clone(),
                tool_call: caller.tool_call.clone(),
                idempotency_key: super::non_empty(header.idempotency_key),
            },
            receipt: claim.map(|c| c.receipt(upload_response)),
            session: super::session_mark(front, caller),
        })?;
        super::upsert_written(front, caller, outcome.node, outcome.version);
        Ok(upload_response(&outcome))
    })
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

/// A download whose header is ready and whose bytes are still in the store.
pub(super) struct Download {
    header: pb::DownloadHeader,
    source: Source,
}

/// Where a download's bytes come from, and the rights that let it go on.
struct Source {
    access: Access,
    reader: ChunkReader,
    space: SpaceId,
    node: NodeId,
    version: u64,
    path: SpacePath,
}

/// Resolves a download (blocking): the file, its version and its content.
pub(super) fn open_download(front: &Front, caller: &Caller, req: &pb::DownloadRequest) -> Result<Download> {
    let target = front.target(caller, &req.space, &req.path, &req.base, "path", Need::Read)?;
    let entry = front.file_at(&target, req.at_revision)?;
    let number = if req.version == 0 { entry.version } else { req.version };
    let version = front
        .store
        .version(target.space.id, entry.node, number)?
        .ok_or_else(|| Error::not_found(format!("version {number} of {}", target.path)))?;
    let reader = front.store.content_reader(version.hash)?;
    debug_assert_eq!(reader.size(), version.size);
    let header = pb::DownloadHeader {
        node_id: entry.node.to_string(),
        version: number,
        hash: version.hash.to_hex(),
        size: version.size,
        text: Some(convert::text_info(&version.text, version.charset())),
        executable: version.executable,
    };
    let access = Access::new(caller, Need::Read, &target, &req.space, &req.path);
    let source =
        Source { access, reader, space: target.space.id, node: entry.node, version: number, path: target.path };
    Ok(Download { header, source })
}

/// Streams a download: the header with the first bytes, then the rest, read
/// from the store a run at a time off the runtime and sent through a small
/// queue, so a download holds about a run and the queue whatever the file's
/// size. Each run re-checks the caller's access; the stream ends with the
/// error a fresh call would get if it is lost, or DATA_LOSS if the content
/// does not match its hash.
pub(super) fn send_download(store: Store, download: Download) -> BoxStream<pb::DownloadChunk> {
    let (sender, receiver) = tokio::sync::mpsc::channel(QUEUE);
    tokio::spawn(async move {
        let Download { header, mut source } = download;
        let mut header = Some(header);
        loop {
            let step = store
                .blocking(move |store| {
                    let run = next_run(store, &mut source)?;
                    Ok((source, run))
                })
                .await;
            let run;
            (source, run) = match step {
                Ok(step) => step,
                Err(error) => {
                    let _ = sender.send(Err(Status::from(error))).await;
                    return;
                }
            };
            for data in run {
                if sender.send(Ok(pb::DownloadChunk { header: header.take(), data })).await.is_err() {
                    return;
                }
            }
            if source.reader.finished() {
                if let Some(header) = header.take() {
                    let _ = sender.send(Ok(pb::DownloadChunk { header: Some(header), data: Vec::new() })).await;
                }
                return;
            }
        }
    });
    Box::pin(ReceiverStream::new(receiver))
}

/// The next run of a download's bytes, while the caller may still read them.
fn next_run(store: &Store, source: &mut Source) -> Result<Vec<Vec<u8>>> {
    source.access.recheck(store)?;
    store.read_content_run(&mut source.reader, RUN).map_err(|error| {
        // Content released under the stream: its space was deleted, or its
        // version removed or compacted away. Say what a fresh call would.
        if let Err(lost) = source.access.recheck(store) {
            return lost;
        }
        match store.version(source.space, source.node, source.version) {
            Ok(None) => Error::not_found(format!("version {} of {}", source.version, source.path)),
            _ => error,
        }
    })
}
