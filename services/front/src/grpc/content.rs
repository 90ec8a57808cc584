//! The `ContentStore` service: content by hash, for workers only.
//!
//! Only administrators (the workers' principal; `dev` in dev mode) may call
//! it, so a client cannot probe for content by guessing hashes. One call
//! carries many hashes, so a page of small files costs one round trip.

use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::Duration;

use agentvfs_proto::v1 as pb;
use agentvfs_proto::v1::content_store_server::ContentStore;
use prost::bytes::Bytes;
use tokio_stream::StreamExt as _;
use tokio_stream::wrappers::ReceiverStream;
use tonic::codegen::BoxStream;
use tonic::{Request, Response, Status};

use super::Front;
use crate::error::{Error, Reason};
use crate::store::Hash;

/// Content bytes per `GetContent` message, about (a stored chunk is never split).
const BATCH_BYTES: usize = 1 << 20;
/// Hashes one call may ask for.
const MAX_HASHES: usize = 1_000;
/// Content read ahead of the response stream, at most: enough for the
/// reader to run through a page of small files without waiting for the
/// stream at every file.
const MAX_BUFFERED_BYTES: usize = 8 << 20;
/// Messages waiting in the channel, at most (the byte bound usually binds first).
const MAX_QUEUED: usize = 1_024;

/// Serves content to workers.
#[derive(Debug, Clone)]
pub struct ContentService {
    front: Arc<Front>,
}

impl ContentService {
    pub fn new(front: Arc<Front>) -> Self {
        Self { front }
    }
}

#[tonic::async_trait]
impl ContentStore for ContentService {
    async fn get_content(
        &self,
        request: Request<pb::GetContentRequest>,
    ) -> Result<Response<BoxStream<pb::ContentBatch>>, Status> {
        // Internal traffic: authenticated, but not subject to call admission.
        let caller = self.front.auth.authenticate(request.metadata())?;
        if !caller.admin {
            return Err(Error::new(Reason::PermissionDenied, "Only workers may fetch content by hash.").into());
        }
        let hashes = request.into_inner().hashes;
        if hashes.len() > MAX_HASHES {
            return Err(Error::new(Reason::InvalidArgument, format!("At most {MAX_HASHES} hashes per call."))
                .field("hashes")
                .into());
        }
        let (sender, receiver) = tokio::sync::mpsc::channel(MAX_QUEUED);
        let store = self.front.store.clone();
        let buffered = Arc::new(Buffered::default());
        let taken = buffered.clone();
        // Read on the blocking pool, a file at a time, so memory stays bounded
        // by what is buffered whatever the batch holds.
        tokio::task::spawn_blocking(move || {
            let mut batch = Batch::default();
            for (index, hash) in hashes.iter().enumerate() {
                let index = u32::try_from(index).unwrap_or(u32::MAX);
                let content = match Hash::from_hex(hash) {
                    // Not hashed again: content was hashed as it was written,
                    // sled checks what it reads from disk, and a worker started
                    // with --verify-content hashes what it receives.
                    Some(hash) => match store.content_chunks_unverified(hash) {
                        Ok(Some(chunks)) => Ok(chunks),
                        Ok(None) => Err("no content has this hash".to_owned()),
                        Err(error) => Err(error.to_string()),
                    },
                    None => Err("not a BLAKE3 hex hash".to_owned()),
                };
                let pieces = match content {
                    Ok(chunks) => pieces(index, chunks),
                    Err(error) => vec![pb::ContentChunk { index, first: true, error, ..Default::default() }],
                };
                for piece in pieces {
                    if let Some(full) = batch.add(piece)
                        && !send(&buffered, &sender, full)
                    {
                        return;
                    }
                }
            }
            if let Some(last) = batch.take() {
                send(&buffered, &sender, last);
            }
        });
        let stream = ReceiverStream::new(receiver).map(move |message| {
            if let Ok(message) = &message {
                taken.release(batch_bytes(message));
            }
            message
        });
        Ok(Response::new(Box::pin(stream)))
    }
}

/// Waits for room, then queues `batch`; false when the stream was dropped.
fn send(buffered: &Buffered, sender: &Sender, batch: pb::ContentBatch) -> bool {
    buffered.reserve(batch_bytes(&batch), sender) && sender.blocking_send(Ok(batch)).is_ok()
}

type Sender = tokio::sync::mpsc::Sender<Result<pb::ContentBatch, Status>>;

/// Content bytes a batch carries.
fn batch_bytes(batch: &pb::ContentBatch) -> usize {
    batch.chunks.iter().map(|c| c.data.len()).sum()
}

/// The message being filled.
#[derive(Debug, Default)]
struct Batch {
    chunks: Vec<pb::ContentChunk>,
    bytes: usize,
}

impl Batch {
    /// Adds `chunk`; returns the batch to send when it went over its size.
    fn add(&mut self, chunk: pb::ContentChunk) -> Option<pb::ContentBatch> {
        let full = (self.bytes > 0 && self.bytes + chunk.data.len() > BATCH_BYTES).then(|| self.take()).flatten();
        self.bytes += chunk.data.len();
        self.chunks.push(chunk);
        full
    }

    fn take(&mut self) -> Option<pb::ContentBatch> {
        self.bytes = 0;
        let chunks = std::mem::take(&mut self.chunks);
        (!chunks.is_empty()).then_some(pb::ContentBatch { chunks })
    }
}

/// Bytes read for a `GetContent` stream and not yet taken by it.
#[derive(Debug, Default)]
struct Buffered {
    bytes: Mutex<usize>,
    taken: Condvar,
}

impl Buffered {
    /// Waits until `len` more bytes fit (a message larger than the bound goes
    /// alone); false when the stream was dropped meanwhile.
    fn reserve<T>(&self, len: usize, sender: &tokio::sync::mpsc::Sender<T>) -> bool {
        let mut bytes = self.bytes.lock().unwrap_or_else(PoisonError::into_inner);
        while *bytes > 0 && *bytes + len > MAX_BUFFERED_BYTES {
            if sender.is_closed() {
                return false;
            }
            // Timed, so a stream dropped without taking anything is noticed.
            bytes =
                self.taken.wait_timeout(bytes, Duration::from_millis(100)).unwrap_or_else(PoisonError::into_inner).0;
        }
        *bytes += len;
        true
    }

    fn release(&self, len: usize) {
        let mut bytes = self.bytes.lock().unwrap_or_else(PoisonError::into_inner);
        *bytes = bytes.saturating_sub(len);
        self.taken.notify_one();
    }
}

/// The pieces of one content: one per stored chunk, sent without copying.
fn pieces(index: u32, chunks: Vec<Bytes>) -> Vec<pb::ContentChunk> {
    let size = chunks.iter().map(|c| c.len() as u64).sum();
    let mut out: Vec<pb::ContentChunk> =
        chunks.into_iter().map(|data| pb::ContentChunk { index, data, ..Default::default() }).collect();
    match out.first_mut() {
        Some(first) => {
            first.first = true;
            first.size = size;
        }
        None => out.push(pb::ContentChunk { index, first: true, ..Default::default() }),
    }
    out
}
