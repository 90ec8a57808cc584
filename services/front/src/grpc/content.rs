//! The `ContentStore` service: content by hash, for workers only.
//!
//! Only administrators (the workers' principal; `dev` in dev mode) may call
//! it, so a client cannot probe for content by guessing hashes. One call
//! carries many hashes, so a page of small files costs one round trip.

use std::sync::Arc;

use agentvfs_proto::v1 as pb;
use agentvfs_proto::v1::content_store_server::ContentStore;
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
        let (sender, receiver) = tokio::sync::mpsc::channel(4);
        let store = self.front.store.clone();
        // Read on the blocking pool, a file at a time, so memory stays bounded
        // by the channel whatever the batch holds.
        tokio::task::spawn_blocking(move || {
            for (index, hash) in hashes.iter().enumerate() {
                let index = u32::try_from(index).unwrap_or(u32::MAX);
                let content = match Hash::from_hex(hash) {
                    // The worker hashes what it receives, so the front need not.
                    Some(hash) if store.has_content(hash).unwrap_or(false) => {
                        store.content_unverified(hash).map_err(|e| e.to_string())
                    }
                    Some(_) => Err("no content has this hash".to_owned()),
                    None => Err("not a BLAKE3 hex hash".to_owned()),
                };
                let messages = match content {
                    Ok(bytes) => chunks(index, &bytes),
                    Err(error) => vec![pb::ContentChunk { index, first: true, error, ..Default::default() }],
                };
                for message in messages {
                    if sender.blocking_send(Ok(message)).is_err() {
                        return;
                    }
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(receiver))))
    }
}

fn chunks(index: u32, bytes: &[u8]) -> Vec<pb::ContentChunk> {
    let mut out: Vec<pb::ContentChunk> =
        bytes.chunks(CHUNK).map(|c| pb::ContentChunk { index, data: c.to_vec(), ..Default::default() }).collect();
    if out.is_empty() {
        out.push(pb::ContentChunk { index, ..Default::default() });
    }
    out[0].first = true;
    out[0].size = bytes.len() as u64;
    out
}
