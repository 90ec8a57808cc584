//! The `ContentStore` service: content by hash, for workers only.
//!
//! Only administrators (the workers' principal; `dev` in dev mode) may call
//! it, so a client cannot probe for content by guessing hashes. One call
//! carries many hashes, so a page of small files costs one round trip.

use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::Duration;

use agentvfs_proto::v1 as pb;
use agentvfs_proto::v1::content_store_server::ContentStore;
use tokio_stream::StreamExt as _;
use tokio_stream::wrappers::ReceiverStream;
use tonic::codegen::BoxStream;
use tonic::{Request, Response, Status};

use super::Front;
use crate::error::{Error, Reason};
use crate::store::Hash;

/// Bytes per `GetContent` message.
const CHUNK: usize = 1 << 20;
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
    ) -> Result<Response<BoxStream<pb::ContentChunk>>, Status> {
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
            for (index, hash) in hashes.iter().enumerate() {
                let index = u32::try_from(index).unwrap_or(u32::MAX);
                let content = match Hash::from_hex(hash) {
                    // The worker hashes what it receives, so the front need not.
                    Some(hash) => match store.content_unverified(hash) {
                        Ok(Some(bytes)) => Ok(bytes),
                        Ok(None) => Err("no content has this hash".to_owned()),
                        Err(error) => Err(error.to_string()),
                    },
                    None => Err("not a BLAKE3 hex hash".to_owned()),
                };
                let messages = match content {
                    Ok(bytes) => chunks(index, bytes),
                    Err(error) => vec![pb::ContentChunk { index, first: true, error, ..Default::default() }],
                };
                for message in messages {
                    if !buffered.reserve(message.data.len(), &sender) || sender.blocking_send(Ok(message)).is_err() {
                        return;
                    }
                }
            }
        });
        let stream = ReceiverStream::new(receiver).map(move |message| {
            if let Ok(message) = &message {
                taken.release(message.data.len());
            }
            message
        });
        Ok(Response::new(Box::pin(stream)))
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

/// The messages carrying one content; content that fits one message is
/// moved into it, not copied.
fn chunks(index: u32, bytes: Vec<u8>) -> Vec<pb::ContentChunk> {
    let size = bytes.len() as u64;
    let mut out: Vec<pb::ContentChunk> = if bytes.len() <= CHUNK {
        vec![pb::ContentChunk { index, data: bytes, ..Default::default() }]
    } else {
        bytes.chunks(CHUNK).map(|c| pb::ContentChunk { index, data: c.to_vec(), ..Default::default() }).collect()
    };
    out[0].first = true;
    out[0].size = size;
    out
}
