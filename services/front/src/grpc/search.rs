//! `Search`: ranked hits from a worker's index, checked against the store.
//!
//! The index may lag the store or hold a document of a node that has since
//! moved, changed or gone; every hit is checked against the store before it
//! is returned, and hits that are stale, trashed, removed or outside the
//! request's space, path or glob are dropped.

use std::time::{Duration, Instant};

use agentvfs_proto::v1 as pb;

use super::page_token::{PageToken, fingerprint};
use super::{Front, Target, page_size};
use crate::error::{Error, Reason, Result};
use crate::glob::Glob;
use crate::ids::NodeId;
use crate::path::SpacePath;
use crate::workers::Failure;

/// Longest accepted query, in bytes.
const MAX_QUERY_BYTES: usize = 1024;
const DEFAULT_PAGE: usize = 20;
const MAX_PAGE: usize = 100;

/// A validated search request.
#[derive(Debug)]
pub(super) struct SearchPlan {
    pub query: String,
    pub limit: usize,
    pub offset: u64,
    pub glob: Option<Glob>,
    pub bound: [u8; 16],
}

pub(super) fn plan(target: &Target, req: &pb::SearchRequest) -> Result<SearchPlan> {
    let query = req.query.trim();
    if query.is_empty() {
        return Err(Error::invalid_argument("query", "The query must not be empty."));
    }
    if query.len() > MAX_QUERY_BYTES {
        return Err(Error::new(Reason::TooLarge, format!("The query is over {MAX_QUERY_BYTES} bytes."))
            .with("limit", MAX_QUERY_BYTES)
            .field("query"));
    }
    let limit = page_size(req.page_size, DEFAULT_PAGE, MAX_PAGE, "page_size")?;
    let glob = match req.glob.as_str() {
        "" => None,
        g => Some(Glob::new(g).map_err(|e| {
            Error::new(Reason::InvalidPattern, format!("The glob {g:?} is not usable: {e}.")).field("glob")
        })?),
    };
    let bound = fingerprint(&["search", &target.space.id.to_string(), target.path.as_str(), query, &req.glob]);
    let offset = match req.page_token.as_str() {
        "" => 0,
        token => PageToken::decode(token, bound)?.position,
    };
    Ok(SearchPlan { query: query.to_owned(), limit, offset, glob, bound })
}

/// Runs a search on a worker (failing over like grep jobs do, within the
/// caller's deadline) and checks its hits against the store.
pub(super) async fn run(
    front: &Front,
    target: &Target,
    plan: SearchPlan,
    deadline: Option<Duration>,
    request_id: Option<&str>,
) -> Result<pb::SearchResponse> {
    let until = deadline.map(|deadline| Instant::now() + deadline);
    let request = pb::IndexQuery {
        space_id: target.space.id.to_string(),
        query: plan.query.clone(),
        path_prefix: target.path.to_string(),
        limit: plan.limit as u32,
        offset: u32::try_from(plan.offset).unwrap_or(u32::MAX),
    };
    // Workers whose index has caught up with the store first: one that is
    // still being rebuilt would answer with part of the space.
    let preferred = |address| front.index_progress.serves_search(address);
    let limit = plan.limit;
    let (hits, index_revision) = front
        .workers
        .failover(preferred, request, until, request_id, |mut client, request| async move {
            let reply = client.search_index(request).await?.into_inner();
            let hits = worker_hits(reply.hits, limit).map_err(Failure::Malformed)?;
            Ok((hits, reply.index_revision))
        })
        .await?;
    let full_page = hits.len() >= plan.limit;
    let checked = {
        let (store, space, root, glob) = (front.store.clone(), target.space.id, target.path.clone(), plan.glob);
        store
            .clone()
            .blocking(move |store| {
                let mut kept = Vec::with_capacity(hits.len());
                for hit in hits {
                    let Some(record) = store.node(hit.node)? else { continue };
                    if record.trashed || record.space != space {
                        continue;
                    }
                    let path = SpacePath::from_stored(record.path);
                    if !path.starts_with(&root) || glob.as_ref().is_some_and(|g| !g.matches(&root, &path)) {
                        continue;
                    }
                    match store.entry(space, &path, None)? {
                        Some(entry) if entry.node == hit.node && entry.version == hit.version => {}
                        _ => continue,
                    }
                    kept.push(pb::SearchHit {
                        path: path.to_string(),
                        node_id: hit.node.to_string(),
                        version: hit.version,
                        score: hit.score,
                        snippet: hit.snippet,
                        highlights: hit.highlights,
                    });
                }
                Ok(kept)
            })
            .await?
    };
    let next = plan.offset + plan.limit as u64;
    Ok(pb::SearchResponse {
        hits: checked,
        next_page_token: if full_page {
            PageToken { fingerprint: plan.bound, revision: 0, after: String::new(), position: next, line: 0 }.encode()
        } else {
            String::new()
        },
        index_revision,
    })
}

/// A worker's hit, checked to be well formed.
#[derive(Debug, Clone, PartialEq)]
struct WorkerHit {
    node: NodeId,
    version: u64,
    score: f32,
    snippet: String,
    highlights: Vec<pb::Range>,
}

/// The hits of a worker's reply, or why the reply breaks the contract: more
/// hits than asked for, a node ID that does not parse, or highlights that
/// are not (start, end) pairs of UTF-16 offsets within the snippet.
fn worker_hits(hits: Vec<pb::IndexHit>, limit: usize) -> std::result::Result<Vec<WorkerHit>, String> {
    if hits.len() > limit {
        return Err(format!("{} hits for a page of {limit}", hits.len()));
    }
    hits.into_iter()
        .map(|hit| {
            let node = hit.node_id.parse::<NodeId>().map_err(|_| format!("hit node ID {:?}", hit.node_id))?;
            if hit.highlight_ranges.len() % 2 != 0 {
                return Err(format!("{} highlight offsets, not pairs", hit.highlight_ranges.len()));
            }
            let units = hit.snippet.encode_utf16().count() as u64;
            let highlights = hit
                .highlight_ranges
                .chunks_exact(2)
                .map(|pair| match *pair {
                    [start, end] if start <= end && end <= units => Ok(pb::Range { start, end }),
                    _ => Err(format!("highlight {pair:?} in a snippet of {units} UTF-16 units")),
                })
                .collect::<std::result::Result<_, _>>()?;
            Ok(WorkerHit { node, version: hit.version, score: hit.score, snippet: hit.snippet, highlights })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hit(snippet: &str, ranges: &[u64]) -> pb::IndexHit {
        pb::IndexHit {
            node_id: NodeId::generate().to_string(),
            path: "/a.md".into(),
            version: 1,
            score: 1.0,
            snippet: snippet.into(),
            highlight_ranges: ranges.to_vec(),
        }
    }

    #[test]
    fn well_formed_hits_keep_their_highlights() {
        let hits = worker_hits(vec![hit("zébra herd", &[0, 5, 6, 10])], 20).unwrap();
        assert_eq!(hits[0].highlights, [pb::Range { start: 0, end: 5 }, pb::Range { start: 6, end: 10 }]);
    }

    #[test]
    fn malformed_worker_replies_are_refused_not_trusted() {
        let odd = worker_hits(vec![hit("zebra", &[0, 5, 1])], 20);
        assert!(odd.is_err_and(|why| why.contains("pairs")));
        for ranges in [&[3, 1][..], &[0, 6], &[u64::MAX, u64::MAX]] {
            assert!(worker_hits(vec![hit("zebra", ranges)], 20).is_err(), "{ranges:?}");
        }
        let bad_node = pb::IndexHit { node_id: "nope".into(), ..hit("zebra", &[]) };
        assert!(worker_hits(vec![bad_node], 20).is_err());
        assert!(worker_hits(vec![hit("a", &[]), hit("b", &[])], 1).is_err(), "more hits than the page");
    }
}
