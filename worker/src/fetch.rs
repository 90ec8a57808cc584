//! Fetching content from the front by hash, through the cache.
//!
//! A content the front cannot send (gone, larger than the worker takes, not
//! matching its hash) fails alone: its file is reported as skipped. A call
//! the front refuses, or that breaks off, fails the whole fetch
//! ([`FetchError`]): the worker then cannot tell what the files hold, and
//! says so rather than report them as skipped.
//!
//! The fetcher also tells whether the front accepts the worker's
//! credentials ([`Credentials`]): refused on the first UNAUTHENTICATED or
//! PERMISSION_DENIED, accepted again on the next call the front answers
//! (a fetch, or [`Fetcher::check_credentials`], which the server calls
//! periodically so that a refused worker finds out when it is let in).

use std::sync::Arc;

use agentvfs_proto::v1 as pb;
use agentvfs_proto::v1::GetContentRequest;
use prost::bytes::Bytes;
use tokio::sync::watch;
use tonic::Code;
use tonic::transport::Channel;

use crate::cache::ContentCache;

/// Largest content the worker accepts for one hash.
const MAX_CONTENT_BYTES: u64 = 64 << 20;
/// Hashes asked for in one call to the front (the most it takes), so a
/// whole page of files comes in one round trip.
const BATCH: usize = 1_000;
/// Contents are checked and copied into a slab together in groups, each
/// as large as fits in one of the pool's blocks (a content larger than a
/// block goes alone); soon enough to let the received messages go.
const GROUP_BYTES: usize = crate::slab::BLOCK;
/// Largest message the front may send (a batch is about 1 MiB of content).
const MAX_MESSAGE_BYTES: usize = 8 << 20;

/// Gets content by hash from the cache or the front.
#[derive(Debug, Clone)]
pub struct Fetcher {
    front: Channel,
    cache: Arc<ContentCache>,
    token: Option<String>,
    /// Whether content is hashed and checked before it is cached.
    verify: bool,
    /// Held by the one background prefetch that may run; fetches wait for
    /// it, so content being prefetched is never fetched twice.
    prefetching: Arc<tokio::sync::Mutex<()>>,
    credentials: Arc<watch::Sender<Credentials>>,
}

/// Whether the front accepts the worker's credentials, as far as it knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Credentials {
    /// The front has not answered yet.
    Unknown,
    Accepted,
    /// The front refused them (UNAUTHENTICATED or PERMISSION_DENIED).
    Refused,
}

/// Why a fetch failed as a whole.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FetchError {
    /// The front refused the worker's credentials.
    #[error("the front refused the worker's credentials ({0})")]
    Refused(String),
    /// The content service could not be reached, or its answer broke off or
    /// broke the contract.
    #[error("the content service failed ({0})")]
    Failed(String),
}

impl FetchError {
    /// The `cause` the worker's error names.
    pub fn cause(&self) -> &'static str {
        match self {
            FetchError::Refused(_) => "CREDENTIALS_REFUSED",
            FetchError::Failed(_) => "CONTENT_SERVICE_FAILED",
        }
    }

    fn from_status(status: &tonic::Status) -> Self {
        match status.code() {
            Code::Unauthenticated | Code::PermissionDenied => FetchError::Refused(status.message().to_owned()),
            _ => FetchError::Failed(status.message().to_owned()),
        }
    }
}

/// Content as fetched (checked against its hash when the fetcher verifies),
/// or why it cannot be used.
type Checked = Result<Bytes, String>;

/// Contents packed into one slab, each with its position in the batch, and
/// the bytes of memory the slab takes.
type PackedGroup = (Vec<(usize, Checked)>, usize);

impl Fetcher {
    /// With `verify`, every content fetched is hashed and refused unless it
    /// matches the hash it was asked for.
    pub fn new(front: Channel, cache: Arc<ContentCache>, token: Option<String>, verify: bool) -> Self {
        let credentials = Arc::new(watch::Sender::new(Credentials::Unknown));
        Self { front, cache, token, verify, prefetching: Arc::default(), credentials }
    }

    pub fn cache(&self) -> &ContentCache {
        &self.cache
    }

    /// Whether the front accepts the worker's credentials, now and as it changes.
    pub fn credentials(&self) -> watch::Receiver<Credentials> {
        self.credentials.subscribe()
    }

    /// Asks the front for no content, to learn whether it accepts the
    /// worker's credentials; tells whether the front answered (either way).
    pub async fn check_credentials(&self) -> bool {
        !matches!(self.open(Vec::new()).await, Err(FetchError::Failed(_)))
    }

    /// Calls `GetContent` for `hashes`, noting whether the front accepted
    /// the worker's credentials.
    async fn open(&self, hashes: Vec<String>) -> Result<crate::wire::ContentStream, FetchError> {
        let request = GetContentRequest { hashes };
        let token = self.token.as_deref();
        let opened = crate::wire::get_content(self.front.clone(), request, token, MAX_MESSAGE_BYTES).await;
        let known = match opened.as_ref().map_err(FetchError::from_status) {
            Ok(_) => Credentials::Accepted,
            Err(FetchError::Refused(_)) => Credentials::Refused,
            Err(FetchError::Failed(_)) => Credentials::Unknown,
        };
        if known != Credentials::Unknown {
            self.credentials.send_if_modified(|now| std::mem::replace(now, known) != known);
        }
        opened.map_err(|status| FetchError::from_status(&status))
    }

    /// Content for every hash, in order; a content that cannot be used
    /// fails alone. Cached content is served at once; the rest comes from
    /// the front in batches (and, when the fetcher verifies, is checked
    /// against its hash on every core) before it is cached.
    pub async fn fetch_all(&self, hashes: Vec<String>) -> Result<Vec<Checked>, FetchError> {
        Ok(self.fetch_counted(hashes).await?.0)
    }

    /// [`Fetcher::fetch_all`], also counting the files fetched from the front.
    pub async fn fetch_counted(&self, hashes: Vec<String>) -> Result<(Vec<Checked>, usize), FetchError> {
        drop(self.prefetching.lock().await);
        self.fetch_missing(hashes).await
    }

    /// Fetches into the cache, in the background, the content of `hashes`
    /// that it lacks; does nothing while another prefetch runs.
    pub fn prefetch(&self, hashes: Vec<String>) {
        let Ok(guard) = self.prefetching.clone().try_lock_owned() else { return };
        let fetcher = self.clone();
        tokio::spawn(async move {
            // A hint: what fails here fails again, and is reported, when a job needs it.
            let _ = fetcher.fetch_missing(hashes).await;
            drop(guard);
        });
    }

    async fn fetch_missing(&self, hashes: Vec<String>) -> Result<(Vec<Checked>, usize), FetchError> {
        let mut out: Vec<Option<Checked>> =
            self.cache.get_many(hashes.iter().map(String::as_str)).into_iter().map(|hit| hit.map(Ok)).collect();
        let missing: Vec<usize> = (0..hashes.len()).filter(|&i| out[i].is_none()).collect();
        for batch in missing.chunks(BATCH) {
            let wanted: Vec<String> = batch.iter().map(|&i| hashes[i].clone()).collect();
            let checked = self.stream_batch(&wanted).await?;
            for (&i, result) in batch.iter().zip(checked) {
                out[i] = Some(result);
            }
        }
        let fetched = out.into_iter().map(|r| r.unwrap_or_else(|| Err("not fetched".to_owned()))).collect();
        Ok((fetched, missing.len()))
    }

    /// Streams the content of `hashes` from the front into the cache. The
    /// contents are taken in groups of up to [`GROUP_BYTES`] as they become
    /// whole, while the rest is still arriving: on the scan pool, each group
    /// is copied out of the received messages into a slab of its own (see
    /// [`crate::slab`]), each content checked against its hash as it lands
    /// when the fetcher verifies, so received messages are held until their
    /// group is copied, not to the end.
    async fn stream_batch(&self, hashes: &[String]) -> Result<Vec<Checked>, FetchError> {
        let mut stream = self.open(hashes.to_vec()).await?;
        let mut assembler = Assembler::new(hashes.len());
        let (mut group, mut group_bytes, mut groups) = (Vec::new(), 0, Vec::new());
        while let Some(batch) = stream.message().await.map_err(|s| FetchError::from_status(&s))? {
            for chunk in batch.chunks {
                let Some(whole) = assembler.add(chunk).map_err(FetchError::Failed)? else { continue };
                let len = whole.pieces.iter().map(Bytes::len).sum::<usize>();
                if group_bytes + len > GROUP_BYTES && !group.is_empty() {
                    groups.push(self.check_and_pack(hashes, std::mem::take(&mut group)));
                    group_bytes = 0;
                }
                group_bytes += len;
                group.push(whole);
            }
        }
        if !group.is_empty() {
            groups.push(self.check_and_pack(hashes, group));
        }
        let mut results: Vec<Checked> = assembler.finish();
        for group in groups {
            let (checked, footprint) =
                group.await.map_err(|_| FetchError::Failed("the content check stopped".to_owned()))?;
            let good = checked.iter().filter_map(|(i, r)| Some((hashes[*i].clone(), r.clone().ok()?)));
            self.cache.insert(good.collect(), footprint);
            for (i, result) in checked {
                results[i] = result;
            }
        }
        Ok(results)
    }

    /// Copies whole contents into one slab on the scan pool; when the
    /// fetcher verifies, checks each against its hash as it lands, before it
    /// is cached for good.
    fn check_and_pack(&self, hashes: &[String], whole: Vec<Whole>) -> tokio::sync::oneshot::Receiver<PackedGroup> {
        let verify = self.verify;
        let expected: Vec<String> =
            if verify { whole.iter().map(|w| hashes[w.index].clone()).collect() } else { Vec::new() };
        let (indices, pieces): (Vec<usize>, Vec<Vec<Bytes>>) = whole.into_iter().map(|w| (w.index, w.pieces)).unzip();
        let pool = self.cache.pool().clone();
        let (sender, receiver) = tokio::sync::oneshot::channel();
        rayon::spawn(move || {
            let packed =
                pool.pack(&pieces, |i, content| !verify || blake3::hash(content).to_hex().as_str() == expected[i]);
            let checked = indices
                .into_iter()
                .zip(packed.contents)
                .map(|(index, content)| {
                    (index, content.ok_or_else(|| "content from the front does not match its hash".to_owned()))
                })
                .collect();
            let _ = sender.send((checked, packed.footprint));
        });
        receiver
    }
}

/// A content received whole, as the pieces (slices of received messages)
/// it came in; not yet checked.
#[derive(Debug, PartialEq, Eq)]
struct Whole {
    index: usize,
    pieces: Vec<Bytes>,
}

/// Puts content back together from the chunks of a stream.
#[derive(Debug)]
struct Assembler {
    /// What each index received: set once its content is whole or failed.
    results: Vec<Checked>,
    /// The content being received: its index, size, and pieces and bytes so far.
    partial: Option<Partial>,
}

#[derive(Debug)]
struct Partial {
    index: usize,
    size: u64,
    pieces: Vec<Bytes>,
    received: u64,
}

impl Assembler {
    fn new(len: usize) -> Self {
        Self { results: vec![Err("the front sent nothing".to_owned()); len], partial: None }
    }

    /// Takes one chunk; returns the content it completes, if any.
    fn add(&mut self, chunk: pb::ContentChunk) -> Result<Option<Whole>, String> {
        let index = chunk.index as usize;
        if index >= self.results.len() {
            return Err("the front answered for a hash it was not asked for".to_owned());
        }
        if chunk.first {
            self.partial = None;
            if !chunk.error.is_empty() {
                self.results[index] = Err(chunk.error);
                return Ok(None);
            }
            if chunk.size > MAX_CONTENT_BYTES {
                self.results[index] = Err("content is larger than the worker accepts".to_owned());
                return Ok(None);
            }
            self.results[index] = Err("the content arrived incomplete".to_owned());
            self.partial = Some(Partial { index, size: chunk.size, pieces: Vec::new(), received: 0 });
        }
        let Some(partial) = &mut self.partial else { return Ok(None) };
        let received = partial.received + chunk.data.len() as u64;
        if partial.index != index || received > partial.size {
            self.partial = None;
            return Ok(None);
        }
        partial.received = received;
        if !chunk.data.is_empty() {
            partial.pieces.push(chunk.data);
        }
        if received < partial.size {
            return Ok(None);
        }
        let Partial { index, pieces, .. } = self.partial.take().expect("partial content is present");
        Ok(Some(Whole { index, pieces }))
    }

    /// What each index received, contents not yet checked left as errors.
    fn finish(self) -> Vec<Checked> {
        self.results
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(index: u32, first: bool, size: u64, data: &'static [u8]) -> pb::ContentChunk {
        pb::ContentChunk { index, first, size, data: Bytes::from_static(data), error: String::new() }
    }

    fn whole(index: usize, pieces: &[&'static [u8]]) -> Result<Option<Whole>, String> {
        Ok(Some(Whole { index, pieces: pieces.iter().map(|p| Bytes::from_static(p)).collect() }))
    }

    #[test]
    fn contents_are_put_back_together_from_their_chunks() {
        let mut assembler = Assembler::new(4);
        assert_eq!(assembler.add(chunk(0, true, 3, b"abc")), whole(0, &[b"abc"]));
        assert_eq!(assembler.add(chunk(1, true, 5, b"de")), Ok(None));
        assert_eq!(assembler.add(chunk(1, false, 0, b"fgh")), whole(1, &[b"de", b"fgh"]));
        assert_eq!(assembler.add(chunk(3, true, 0, b"")), whole(3, &[]), "an empty content is whole at once");
        let failed = pb::ContentChunk { index: 2, first: true, error: "gone".into(), ..Default::default() };
        assert_eq!(assembler.add(failed), Ok(None));
        assert_eq!(assembler.finish()[2], Err("gone".to_owned()));
    }

    #[test]
    fn a_content_that_stops_short_or_runs_over_is_not_used() {
        let mut assembler = Assembler::new(3);
        assert_eq!(assembler.add(chunk(0, true, 4, b"ab")), Ok(None));
        // The next content begins before the first is whole.
        assert_eq!(assembler.add(chunk(1, true, 4, b"ab")), Ok(None));
        assert_eq!(assembler.add(chunk(1, false, 0, b"cde")), Ok(None));
        assert_eq!(assembler.add(chunk(1, false, 0, b"cd")), Ok(None), "nothing more is taken for it");
        assert_eq!(assembler.add(chunk(2, true, 2, b"abc")), Ok(None), "larger than announced");
        assert_eq!(
            assembler.add(chunk(7, true, 1, b"x")),
            Err("the front answered for a hash it was not asked for".into())
        );
        let results = assembler.finish();
        assert!(results[0].is_err() && results[1].is_err() && results[2].is_err());
    }

    /// A fetcher whose front is never called.
    fn fetcher(verify: bool) -> Fetcher {
        let front = tonic::transport::Endpoint::from_static("http://127.0.0.1:9").connect_lazy();
        Fetcher::new(front, Arc::new(ContentCache::new(1 << 20)), None, verify)
    }

    #[tokio::test]
    async fn contents_that_do_not_match_their_hash_are_refused_and_the_rest_copied_out() {
        let hashes = vec![blake3::hash(b"right").to_hex().to_string(), blake3::hash(b"other").to_hex().to_string()];
        let message = Bytes::from_static(b"rightwrong");
        let whole = vec![
            Whole { index: 0, pieces: vec![message.slice(..2), message.slice(2..5)] },
            Whole { index: 1, pieces: vec![message.slice(5..)] },
        ];
        let (mut checked, _) = fetcher(true).check_and_pack(&hashes, whole).await.unwrap();
        checked.sort_by_key(|(i, _)| *i);
        let right = checked[0].1.clone().unwrap();
        assert_eq!(right, Bytes::from_static(b"right"));
        assert!(!message.as_ptr_range().contains(&right.as_ptr()), "copied out of the message");
        assert_eq!(checked[1], (1, Err("content from the front does not match its hash".to_owned())));
    }

    #[tokio::test]
    async fn without_verifying_contents_are_taken_as_they_came() {
        let hashes = vec![blake3::hash(b"other").to_hex().to_string()];
        let message = Bytes::from_static(b"wrong");
        let whole = vec![Whole { index: 0, pieces: vec![message.slice(..3), message.slice(3..)] }];
        let (checked, _) = fetcher(false).check_and_pack(&hashes, whole).await.unwrap();
        assert_eq!(checked, [(0, Ok(Bytes::from_static(b"wrong")))]);
        assert!(
            !message.as_ptr_range().contains(&checked[0].1.as_ref().unwrap().as_ptr()),
            "copied out of the message"
        );
    }
}
