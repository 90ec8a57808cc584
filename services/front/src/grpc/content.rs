//! The `ContentStore` service: content by hash, for workers only.
//!
//! Only administrators (the workers' principal; `dev` in dev mode) may call
//! it, so a client cannot probe for content by guessing hashes.

use std::sync::Arc;

use agentvfs_proto::v1 as pb;
use agentvfs_proto::v1::content_store_server::ContentStore;
use tonic::codegen::BoxStream;
use tonic::{Request, Response, Status};

use super::Front;
use crate::error::{Error, Reason};
use crate::store::Hash;

/// Bytes per `GetContent` message.
const CHUNK: usize = 1 << 20;

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
        let hash = Hash::from_hex(&request.get_ref().hash)
            .ok_or_else(|| Error::invalid_argument("hash", "hash must be 64 hex digits of BLAKE3."))?;
        let bytes = self
            .front
            .store
            .blocking(move |store| {
                if !store.has_content(hash)? {
                    return Err(Error::new(Reason::NotFound, "No content has this hash.").with("hash", hash.to_hex()));
                }
                store.content(hash)
            })
            .await?;
        let size = bytes.len() as u64;
        let mut chunks: Vec<Result<pb::ContentChunk, Status>> =
            bytes.chunks(CHUNK).map(|c| Ok(pb::ContentChunk { data: c.to_vec(), size: 0 })).collect();
        match chunks.first_mut() {
            Some(Ok(first)) => first.size = size,
            _ => chunks.push(Ok(pb::ContentChunk { data: Vec::new(), size })),
        }
        Ok(Response::new(Box::pin(tokio_stream::iter(chunks))))
    }
}
