//! Fetching content from the front by hash, through the cache.

use std::sync::Arc;

use agentvfs_proto::v1::GetContentRequest;
use agentvfs_proto::v1::content_store_client::ContentStoreClient;
use tonic::transport::Channel;

use crate::cache::ContentCache;

/// Largest content the worker accepts for one hash.
const MAX_CONTENT_BYTES: u64 = 64 << 20;
/// Hashes asked for in one call to the front.
const BATCH: usize = 500;

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

    /// Content for every hash, in order; a failure is kept per file. Cached
    /// content is served at once; the rest comes from the front in batches.
    pub async fn fetch_all(&self, hashes: Vec<String>) -> Vec<Result<Arc<[u8]>, String>> {
        let mut out: Vec<Option<Result<Arc<[u8]>, String>>> =
            self.cache.get_many(hashes.iter().map(String::as_str)).into_iter().map(|hit| hit.map(Ok)).collect();
        let missing: Vec<usize> = (0..hashes.len()).filter(|&i| out[i].is_none()).collect();
        for batch in missing.chunks(BATCH) {
            let wanted: Vec<String> = batch.iter().map(|&i| hashes[i].clone()).collect();
            let fetched = self.fetch_batch(&wanted).await;
            for (&i, result) in batch.iter().zip(fetched) {
                if let Ok(content) = &result {
                    self.cache.insert(hashes[i].clone(), content.clone());
                }
                out[i] = Some(result);
            }
        }
        out.into_iter().map(|r| r.unwrap_or_else(|| Err("not fetched".to_owned()))).collect()
    }

    async fn fetch_batch(&self, hashes: &[String]) -> Vec<Result<Arc<[u8]>, String>> {
        match self.stream_batch(hashes).await {
            Ok(results) => results,
            Err(error) => hashes.iter().map(|_| Err(error.clone())).collect(),
        }
    }

    async fn stream_batch(&self, hashes: &[String]) -> Result<Vec<Result<Arc<[u8]>, String>>, String> {
        let mut request = tonic::Request::new(GetContentRequest { hashes: hashes.to_vec() });
        if let Some(token) = &self.token
            && let Ok(value) = format!("Bearer {token}").parse()
        {
            request.metadata_mut().insert("authorization", value);
        }
        let mut stream =
            self.client.clone().get_content(request).await.map_err(|s| s.message().to_owned())?.into_inner();
        let mut results: Vec<Result<Vec<u8>, String>> = vec![Err("the front sent nothing".to_owned()); hashes.len()];
        while let Some(chunk) = stream.message().await.map_err(|s| s.message().to_owned())? {
            let Some(slot) = results.get_mut(chunk.index as usize) else {
                return Err("the front answered for a hash it was not asked for".to_owned());
            };
            if chunk.first {
                *slot = if chunk.error.is_empty() {
                    if chunk.size > MAX_CONTENT_BYTES {
                        Err("content is larger than the worker accepts".to_owned())
                    } else {
                        Ok(Vec::with_capacity(usize::try_from(chunk.size).unwrap_or(0)))
                    }
                } else {
                    Err(chunk.error)
                };
            }
            if let Ok(bytes) = slot {
                bytes.extend_from_slice(&chunk.data);
            }
        }
        Ok(results
            .into_iter()
            .zip(hashes)
            .map(|(result, hash)| {
                let bytes = result?;
                // Content is addressed by hash: check it before it is cached for good.
                if blake3::hash(&bytes).to_hex().as_str() != hash {
                    return Err("content from the front does not match its hash".to_owned());
                }
                Ok(Arc::from(bytes))
            })
            .collect())
    }
}
