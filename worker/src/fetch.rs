//! Fetching content from the front by hash, through the cache.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use agentvfs_proto::v1::GetContentRequest;
use agentvfs_proto::v1::content_store_client::ContentStoreClient;
use tonic::transport::Channel;

use crate::cache::ContentCache;

/// Largest content the worker accepts for one hash.
const MAX_CONTENT_BYTES: u64 = 64 << 20;
/// Hashes asked for in one call to the front (the most it takes), so a
/// whole page of files comes in one round trip.
const BATCH: usize = 1_000;

/// Gets content by hash from the cache or the front.
#[derive(Debug, Clone)]
pub struct Fetcher {
    client: ContentStoreClient<Channel>,
    cache: Arc<ContentCache>,
    token: Option<String>,
    /// Held by the one background prefetch that may run; fetches wait for
    /// it, so content being prefetched is never fetched twice.
    prefetching: Arc<tokio::sync::Mutex<()>>,
}

/// Content as received, before its hash is checked.
type Received = Result<Vec<u8>, String>;
/// Content checked against its hash, or why it cannot be used.
type Checked = Result<Arc<[u8]>, String>;

impl Fetcher {
    pub fn new(front: Channel, cache: Arc<ContentCache>, token: Option<String>) -> Self {
        let client = ContentStoreClient::new(front).max_decoding_message_size(8 << 20);
        Self { client, cache, token, prefetching: Arc::default() }
    }

    pub fn cache(&self) -> &ContentCache {
        &self.cache
    }

    /// Content for every hash, in order; a failure is kept per file. Cached
    /// content is served at once; the rest comes from the front in batches
    /// and is checked against its hash (on every core) before it is cached.
    pub async fn fetch_all(&self, hashes: Vec<String>) -> Vec<Result<Arc<[u8]>, String>> {
        self.fetch_counted(hashes).await.0
    }

    /// [`Fetcher::fetch_all`], also counting the files fetched from the front.
    pub async fn fetch_counted(&self, hashes: Vec<String>) -> (Vec<Result<Arc<[u8]>, String>>, usize) {
        drop(self.prefetching.lock().await);
        self.fetch_missing(hashes).await
    }

    /// Fetches into the cache, in the background, the content of `hashes`
    /// that it lacks; does nothing while another prefetch runs.
    pub fn prefetch(&self, hashes: Vec<String>) {
        let Ok(guard) = self.prefetching.clone().try_lock_owned() else { return };
        let fetcher = self.clone();
        tokio::spawn(async move {
            fetcher.fetch_missing(hashes).await;
            drop(guard);
        });
    }

    async fn fetch_missing(&self, hashes: Vec<String>) -> (Vec<Result<Arc<[u8]>, String>>, usize) {
        let mut out: Vec<Option<Result<Arc<[u8]>, String>>> =
            self.cache.get_many(hashes.iter().map(String::as_str)).into_iter().map(|hit| hit.map(Ok)).collect();
        let missing: Vec<usize> = (0..hashes.len()).filter(|&i| out[i].is_none()).collect();
        for batch in missing.chunks(BATCH) {
            let wanted: Vec<String> = batch.iter().map(|&i| hashes[i].clone()).collect();
            let received = self.fetch_batch(&wanted).await;
            let checked = tokio::task::spawn_blocking(move || verify_all(wanted, received))
                .await
                .unwrap_or_else(|e| vec![Err(format!("content check failed: {e}")); batch.len()]);
            for (&i, result) in batch.iter().zip(checked) {
                if let Ok(content) = &result {
                    self.cache.insert(hashes[i].clone(), content.clone());
                }
                out[i] = Some(result);
            }
        }
        let fetched = out.into_iter().map(|r| r.unwrap_or_else(|| Err("not fetched".to_owned()))).collect();
        (fetched, missing.len())
    }

    async fn fetch_batch(&self, hashes: &[String]) -> Vec<Received> {
        match self.stream_batch(hashes).await {
            Ok(results) => results,
            Err(error) => hashes.iter().map(|_| Err(error.clone())).collect(),
        }
    }

    async fn stream_batch(&self, hashes: &[String]) -> Result<Vec<Received>, String> {
        let mut request = tonic::Request::new(GetContentRequest { hashes: hashes.to_vec() });
        if let Some(token) = &self.token
            && let Ok(value) = format!("Bearer {token}").parse()
        {
            request.metadata_mut().insert("authorization", value);
        }
        let mut stream =
            self.client.clone().get_content(request).await.map_err(|s| s.message().to_owned())?.into_inner();
        let mut results: Vec<Received> = vec![Err("the front sent nothing".to_owned()); hashes.len()];
        while let Some(chunk) = stream.message().await.map_err(|s| s.message().to_owned())? {
            let Some(slot) = results.get_mut(chunk.index as usize) else {
                return Err("the front answered for a hash it was not asked for".to_owned());
            };
            if chunk.first {
                *slot = if !chunk.error.is_empty() {
                    Err(chunk.error)
                } else if chunk.size > MAX_CONTENT_BYTES {
                    Err("content is larger than the worker accepts".to_owned())
                } else if chunk.data.len() as u64 == chunk.size {
                    // The whole content in one message: kept as received.
                    Ok(chunk.data)
                } else {
                    let mut bytes = Vec::with_capacity(usize::try_from(chunk.size).unwrap_or(0));
                    bytes.extend_from_slice(&chunk.data);
                    Ok(bytes)
                };
            } else if let Ok(bytes) = slot {
                bytes.extend_from_slice(&chunk.data);
            }
        }
        Ok(results)
    }
}

/// Checks received content against its hash (content is addressed by hash,
/// so it is checked before it is cached for good), spreading the files over
/// every core.
fn verify_all(hashes: Vec<String>, received: Vec<Received>) -> Vec<Checked> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(received.len()).max(1);
    let next = AtomicUsize::new(0);
    let mut out: Vec<Checked> = vec![Err("not checked".to_owned()); received.len()];
    let done: Vec<Vec<(usize, Checked)>> = std::thread::scope(|scope| {
        let checkers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut done = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let (Some(hash), Some(result)) = (hashes.get(i), received.get(i)) else { break };
                        let checked = match result {
                            Ok(bytes) if blake3::hash(bytes).to_hex().as_str() == hash => Ok(Arc::from(&bytes[..])),
                            Ok(_) => Err("content from the front does not match its hash".to_owned()),
                            Err(error) => Err(error.clone()),
                        };
                        done.push((i, checked));
                    }
                    done
                })
            })
            .collect();
        checkers.into_iter().map(|c| c.join().unwrap_or_default()).collect()
    });
    for (i, checked) in done.into_iter().flatten() {
        out[i] = checked;
    }
    out
}
