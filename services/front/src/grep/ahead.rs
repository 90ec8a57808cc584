//! Reading ahead: the next pages of a grep, computed while the client reads
//! the current one.
//!
//! A client following page tokens asks for the pages of a search one after
//! another, so a page's round trip is time the worker could spend on the next
//! one. When a page's walk stops on its file or byte budget (so the next page
//! starts where this one's files end, whatever the client does), the front
//! starts that next page at once, beside this one, and keeps the result,
//! keyed by the exact request that will ask for it; a page run ahead does the
//! same for the page after it. The request that asks takes it; nothing else
//! can. When the worker stops a page sooner (on entries or output), the page
//! run ahead is for a token that is never handed out, and expires unused.
//!
//! A search has at most [`MAX_AHEAD`] pages waiting for its client. The page
//! that would go past that is parked, and started when the client takes a
//! page, so the window moves with the client: a client that keeps asking
//! always finds the next page done or under way.
//!
//! A read-ahead is best effort and never changes an answer:
//! - it reads the same pinned snapshot the request would, and the request is
//!   authorized and its snapshot checked before it takes a result;
//! - it runs only when a worker slot is free and at least one more stays free
//!   (see [`crate::workers::Workers::has_spare`]), so it never queues ahead
//!   of, or sheds, a real search;
//! - a failed read-ahead is dropped: the request runs its page itself and
//!   reports its own error;
//! - at most [`MAX_PENDING`] are kept, each for at most [`KEEP`], and as
//!   many parked.

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
/// Pages of one search waiting for its client, at most.
pub const MAX_AHEAD: usize = 2;
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

    /// The search a page belongs to: the same request without its token.
    pub fn search(space: &str, root: &str, request: &pb::GrepRequest) -> Self {
        Self::new(space, root, &pb::GrepRequest { page_token: String::new(), ..request.clone() })
    }
}

/// The outcome of one read-ahead: the page and how it ended.
pub type Outcome = oneshot::Receiver<Result<(pb::GrepResponse, PageEnd)>>;

/// Where a read-ahead page's outcome goes.
pub type Sender = oneshot::Sender<Result<(pb::GrepResponse, PageEnd)>>;

/// A page not started because its search had [`MAX_AHEAD`] pages waiting.
#[derive(Debug, Clone, PartialEq)]
pub struct Parked {
    pub request: pb::GrepRequest,
    pub prefetch: bool,
}

/// Read-ahead pages waiting for their requests.
#[derive(Debug, Default)]
pub struct ReadAhead {
    table: Mutex<Table>,
}

#[derive(Debug, Default)]
struct Table {
    pages: HashMap<Key, Pending>,
    /// Per search, the page to start when its client takes one.
    parked: HashMap<Key, (Instant, Parked)>,
}

#[derive(Debug)]
struct Pending {
    started: Instant,
    search: Key,
    outcome: Outcome,
}

impl Table {
    fn forget_expired(&mut self) {
        self.pages.retain(|_, page| page.started.elapsed() < KEEP);
        self.parked.retain(|_, (since, _)| since.elapsed() < KEEP);
    }
}

impl ReadAhead {
    /// Reserves a place for the page `key` answers, in search `search`.
    /// `None` when one is already pending or the table is full; also `None`
    /// when the search has [`MAX_AHEAD`] pages waiting, and then the page is
    /// parked until its client takes one. The page's outcome goes to the
    /// returned sender.
    pub fn reserve(&self, key: Key, search: Key, page: Parked) -> Option<Sender> {
        let mut table = self.table.lock().unwrap_or_else(PoisonError::into_inner);
        table.forget_expired();
        if table.pages.len() >= MAX_PENDING || table.pages.contains_key(&key) {
            return None;
        }
        if table.pages.values().filter(|p| p.search == search).count() >= MAX_AHEAD {
            if table.parked.len() < MAX_PENDING {
                table.parked.insert(search, (Instant::now(), page));
            }
            return None;
        }
        let (sender, outcome) = oneshot::channel();
        table.pages.insert(key, Pending { started: Instant::now(), search, outcome });
        Some(sender)
    }

    /// Takes the read-ahead page for `key`, if one was started, with the
    /// page of its search that was parked for want of room, now to start.
    pub fn take(&self, key: &Key) -> Option<(Outcome, Option<Parked>)> {
        let mut table = self.table.lock().unwrap_or_else(PoisonError::into_inner);
        let page = table.pages.remove(key).filter(|page| page.started.elapsed() < KEEP)?;
        let parked = table.parked.remove(&page.search).map(|(_, parked)| parked);
        Some((page.outcome, parked))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(pattern: &str, token: &str) -> pb::GrepRequest {
        pb::GrepRequest { pattern: pattern.into(), page_token: token.into(), ..Default::default() }
    }

    fn key(token: &str) -> Key {
        Key::new("sp", "/", &request("x", token))
    }

    fn search(pattern: &str) -> Key {
        Key::search("sp", "/", &request(pattern, ""))
    }

    fn parked(token: &str) -> Parked {
        Parked { request: request("x", token), prefetch: false }
    }

    #[tokio::test]
    async fn a_page_read_ahead_goes_to_the_request_it_answers_once() {
        let ahead = ReadAhead::default();
        let sender = ahead.reserve(key("t1"), search("x"), parked("t1")).unwrap();
        assert!(ahead.reserve(key("t1"), search("x"), parked("t1")).is_none(), "one read-ahead per request");
        assert!(ahead.take(&key("t2")).is_none(), "another token is another request");
        let page = pb::GrepResponse { revision: 7, ..Default::default() };
        sender.send(Ok((page, PageEnd { on_budget: true, fetched: false }))).unwrap();
        let (outcome, parked) = ahead.take(&key("t1")).unwrap();
        let (page, end) = outcome.await.unwrap().unwrap();
        assert_eq!((page.revision, end.on_budget, parked), (7, true, None));
        assert!(ahead.take(&key("t1")).is_none(), "taken once");
    }

    #[test]
    fn the_pages_of_a_search_past_its_window_wait_for_the_client_to_take_one() {
        let ahead = ReadAhead::default();
        let _first = ahead.reserve(key("t1"), search("x"), parked("t1")).unwrap();
        let _second = ahead.reserve(key("t2"), search("x"), parked("t2")).unwrap();
        assert!(ahead.reserve(key("t3"), search("x"), parked("t3")).is_none(), "the window is full");
        assert!(ahead.reserve(key("other"), search("y"), parked("other")).is_some(), "other searches have their own");
        let (_, next) = ahead.take(&key("t1")).unwrap();
        assert_eq!(next, Some(parked("t3")), "taking a page hands over the parked one");
        let (_, next) = ahead.take(&key("t2")).unwrap();
        assert_eq!(next, None, "it is handed over once");
        assert!(ahead.reserve(key("t3"), search("x"), parked("t3")).is_some(), "the window has room again");
    }

    #[test]
    fn at_most_a_bounded_number_wait() {
        let ahead = ReadAhead::default();
        let senders: Vec<_> = (0..MAX_PENDING)
            .map(|i| ahead.reserve(key(&i.to_string()), search(&i.to_string()), parked("")).unwrap())
            .collect();
        assert!(ahead.reserve(key("one more"), search("one more"), parked("")).is_none());
        assert!(ahead.take(&key("0")).is_some());
        assert!(ahead.reserve(key("one more"), search("one more"), parked("")).is_some());
        drop(senders);
    }
}
