//! Fetching content from the front by hash, through the cache.

use std::sync::Arc;

use agentvfs_proto::v1::GetContentRequest;
use agentvfs_proto::v1::content_store_client::ContentStoreClient;
use tokio::sync::Semaphore;
use tonic::transport::Channel;

use crate::cache::ContentCache;

/// Largest content the worker accepts for one hash.
const MAX_CONTENT_BYTES: usize = 64 << 20;
/// Content fetches in flight at once per job.
const PARALLEL_FETCHES: usize = 8;

/// Gets content by hash from the cache or the front.
#[derive(Debug, Clone)]
pub struct Fetcher {
    client: ContentStoreClient<Channel>,
    cache: Arc<ContentCache>,
    token: Option<String>,
}

impl Fetcher {
    pub fn new(front: Channel, cache: Arc<ContentCache>, token: Option<String>) -> Self {
        let client = ContentStoreClient::new(front).max_decoding_message_size(8 << 20);
        Self { client, cache, token }
    }

    pub fn cache(&self) -> &ContentCache {
        &self.cache
    }

    /// Content for every hash, in order; a failure is kept per file.
    pub async fn fetch_all(&self, hashes: Vec<String>) -> Vec<Result<Arc<[u8]>, String>> {
        let limit = Arc::new(Semaphore::new(PARALLEL_FETCHES));
        let tasks: Vec<_> = hashes
            .into_iter()
            .map(|hash| {
                let (this, limit) = (self.clone(), limit.clone());
                tokio::spawn(async move {
                    let _permit = limit.acquire().await;
                    this.fetch(&hash).await
                })
            })
            .collect();
        let mut out = Vec::with_capacity(tasks.len());
        for task in tasks {
            out.push(task.await.unwrap_or_else(|e| Err(format!("fetch task failed: {e}"))));
        }
        out
    }

    async fn fetch(&self, hash: &str) -> Result<Arc<[u8]>, String> {
        if let Some(content) = self.cache.get(hash) {
            return Ok(content);
        }
        let mut request = tonic::Request::new(GetContentRequest { hash: hash.to_owned() });
        if let Some(token) = &self.token
            && let Ok(value) = format!("Bearer {token}").parse()
        {
            request.metadata_mut().insert("authorization", value);
        }
        let mut stream =
            self.client.clone().get_content(request).await.map_err(|s| s.message().to_owned())?.into_inner();
        let mut bytes = Vec::new();
        while let Some(chunk) = stream.message().await.map_err(|s| s.message().to_owned())? {
            if bytes.len() + chunk.data.len() > MAX_CONTENT_BYTES {
                return Err("content is larger than the worker accepts".to_owned());
            }
            bytes.extend_from_slice(&chunk.data);
        }
        if blake3::hash(&bytes).to_hex().as_str() != hash {
            return Err("content from the front does not match its hash".to_owned());
        }
        let content: Arc<[u8]> = Arc::from(bytes);
        self.cache.insert(hash.to_owned(), content.clone());
        Ok(content)
    }
}
