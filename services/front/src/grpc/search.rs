//! `Search`: ranked hits from a worker's index, checked against the store.
//!
//! The index may lag the store or hold a document of a node that has since
//! moved, changed or gone; every hit is checked against the store before it
//! is returned, and hits that are stale, trashed, removed or outside the
//! request's space, path or glob are dropped.

use agentvfs_proto::v1 as pb;

use super::page_token::{PageToken, fingerprint};
use super::{Front, Target, page_size};
use crate::error::{Error, Reason, Result};
use crate::glob::Glob;
use crate::ids::NodeId;
use crate::path::SpacePath;
use crate::workers::Worker;

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

/// Runs a search on the next worker and checks its hits.
pub(super) async fn run(front: &Front, target: &Target, plan: SearchPlan) -> Result<pb::SearchResponse> {
    let request = pb::IndexQuery {
        space_id: target.space.id.to_string(),
        query: plan.query.clone(),
        path_prefix: target.path.to_string(),
        limit: plan.limit as u32,
        offset: u32::try_from(plan.offset).unwrap_or(u32::MAX),
    };
    // Workers whose index has caught up with the store first: one that is
    // still being rebuilt would answer with part of the space.
    let mut result = None;
    for Worker { address, mut client } in front.workers.in_turn(|address| front.index_progress.serves_search(address)) {
        match client.search_index(request.clone()).await {
            Ok(response) => {
                result = Some(response);
                break;
            }
            Err(status) => {
                tracing::warn!(worker = %address, code = ?status.code(), message = status.message(), "search failed")
            }
        }
    }
    let Some(result) = result else {
        return Err(Error::new(Reason::WorkerUnavailable, "No worker could run the search.")
            .retry_after(std::time::Duration::from_secs(1)));
    };
    let result = result.into_inner();
    let full_page = result.hits.len() >= plan.limit;
    let checked = {
        let (store, space, root, glob) = (front.store.clone(), target.space.id, target.path.clone(), plan.glob);
        let hits = result.hits;
        store
            .clone()
            .blocking(move |store| {
                let mut kept = Vec::with_capacity(hits.len());
                for hit in hits {
                    let Ok(node) = hit.node_id.parse::<NodeId>() else { continue };
                    let Some(record) = store.node(node)? else { continue };
                    if record.trashed || record.space != space {
                        continue;
                    }
                    let path = SpacePath::from_stored(record.path);
                    if !path.starts_with(&root) || glob.as_ref().is_some_and(|g| !g.matches(&root, &path)) {
                        continue;
                    }
                    match store.entry(space, &path, None)? {
                        Some(entry) if entry.node == node && entry.version == hit.version => {}
                        _ => continue,
                    }
                    kept.push(pb::SearchHit {
                        path: path.to_string(),
                        node_id: hit.node_id,
                        version: hit.version,
                        score: hit.score,
                        snippet: hit.snippet,
                        highlights: hit
                            .highlight_ranges
                            .chunks(2)
                            .map(|r| pb::Range { start: r[0], end: r[1] })
                            .collect(),
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
        index_revision: result.index_revision,
    })
}
