//! Reading ahead: the next page of a grep, computed while the client reads
//! the current one.
//!
//! A client following page tokens asks for the pages of a search one after
//! another, so a page's round trip is time the worker could spend on the next
//! one. When a page's walk stops on its file or byte budget (so the next page
//! starts where this one's files end, whatever the client does), the front
//! starts that next page at once, beside this one, and keeps the result,
//! keyed by the exact request that will ask for it; a page run ahead does the
//! same for the page after it, up to two pages ahead of the client. The
//! request that asks takes it; nothing else can. When the worker stops a page
//! sooner (on entries or output), the page run ahead is for a token that is
//! never handed out, and expires unused.
//!
//! A read-ahead is best effort and never changes an answer:
//! - it reads the same pinned snapshot the request would, and the request is
//!   authorized and its snapshot checked before it takes a result;
//! - it runs only when a worker slot is free and at least one more stays free
//!   (see [`crate::workers::Workers::grep_spare`]), so it never queues ahead
//!   of, or sheds, a real search;
//! - a failed read-ahead is dropped: the request runs its page itself and
//!   reports its own error;
//! - at most [`MAX_PENDING`] are kept, each for at most [`KEEP`].

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use agentvfs_proto::v1 as pb;
use prost::Message as _;
use tokio::sync::oneshot;

use super::PageEnd;
use crate::error::Result;

/// Read-ahead pages kept at once, across all clients.
pub const MAX_PENDING: usize = 16;
/// How long a read-ahead page waits for its request.
pub const KEEP: Duration = Duration::from_secs(30);

/// What identifies the request a read-ahead page answers: the resolved
/// space and root plus every field of the request (page token included).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Key(Vec<u8>);

impl Key {
    pub fn new(space: &str, root: &str, request: &pb::GrepRequest) -> Self {
        let mut key = Vec::with_capacity(space.len() + root.len() + 2 + request.encoded_len());
        key.extend_from_slice(space.as_bytes());
        key.push(0);
        key.extend_from_slice(root.as_bytes());
        key.push(0);
        request.encode(&mut key).unwrap_or_default();
        Self(key)
    }
}

/// The outcome of one read-ahead: the page and how it ended.
pub type Outcome = oneshot::Receiver<Result<(pb::GrepResponse, PageEnd)>>;

/// Read-ahead pages waiting for their requests.
#[derive(Debug, Default)]
pub struct ReadAhead {
    pending: Mutex<HashMap<Key, (Instant, Outcome)>>,
}

impl ReadAhead {
    /// Reserves a place for the page `key` answers; `None` when one is
    /// already pending or the table is full. The page's outcome goes to the
    /// returned sender.
    pub fn reserve(&self, key: Key) -> Option<oneshot::Sender<Result<(pb::GrepResponse, PageEnd)>>> {
        let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        pending.retain(|_, (started, _)| started.elapsed() < KEEP);
        if pending.len() >= MAX_PENDING || pending.contains_key(&key) {
            return None;
        }
        let (sender, receiver) = oneshot::channel();
        pending.insert(key, (Instant::now(), receiver));
        Some(sender)
    }

    /// Takes the read-ahead page for `key`, if one was started.
    pub fn take(&self, key: &Key) -> Option<Outcome> {
        let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        pending.remove(key).filter(|(started, _)| started.elapsed() < KEEP).map(|(_, outcome)| outcome)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(token: &str) -> Key {
        Key::new("sp", "/", &pb::GrepRequest { pattern: "x".into(), page_token: token.into(), ..Default::default() })
    }

    #[tokio::test]
    async fn a_page_read_ahead_goes_to_the_request_it_answers_once() {
        let ahead = ReadAhead::default();
        let sender = ahead.reserve(key("t1")).unwrap();
        assert!(ahead.reserve(key("t1")).is_none(), "one read-ahead per request");
        assert!(ahead.take(&key("t2")).is_none(), "another token is another request");
        let page = pb::GrepResponse { revision: 7, ..Default::default() };
        sender.send(Ok((page, PageEnd { on_budget: true, fetched: false }))).unwrap();
        let (page, end) = ahead.take(&key("t1")).unwrap().await.unwrap().unwrap();
        assert_eq!((page.revision, end.on_budget), (7, true));
        assert!(ahead.take(&key("t1")).is_none(), "taken once");
    }

    #[test]
    fn at_most_a_bounded_number_wait() {
        let ahead = ReadAhead::default();
        let senders: Vec<_> = (0..MAX_PENDING).map(|i| ahead.reserve(key(&i.to_string())).unwrap()).collect();
        assert!(ahead.reserve(key("one more")).is_none());
        assert!(ahead.take(&key("0")).is_some());
        assert!(ahead.reserve(key("one more")).is_some());
        drop(senders);
    }
}
