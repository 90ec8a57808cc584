//! `Grep`: the front resolves each page's files from the pinned snapshot and
//! hands the scan to a worker.
//!
//! A page visits files in byte order of path and stops at whichever comes
//! first: `head_limit` entries, the byte budget, or the file budget. Files
//! that cannot be scanned as text are listed in `skipped` with a reason. The
//! page token records the pinned revision, where to resume (a file, and the
//! last line reported in it) and how much of `offset` is still to skip.

pub mod ahead;
pub mod query;
pub mod selections;

use std::sync::Arc;
use std::time::{Duration, Instant};

use agentvfs_proto::v1 as pb;

use crate::error::{Error, Result};
use crate::page_token::{PageToken, fingerprint};
use crate::path::SpacePath;
use crate::store::{Entry, ScanOptions, SpaceRecord, Store};
use crate::text::tokens::TokenBudget;
use crate::workers::{Priority, Workers};
pub use query::GrepQuery;

/// Per-page budgets of a grep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageBudget {
    pub max_files: usize,
    pub max_bytes: u64,
    /// Largest file scanned as text.
    pub max_text_bytes: u64,
    /// Bytes of matched text one page may return (keeps replies under the
    /// message size limit).
    pub max_output_bytes: u64,
}

/// What grep pages share: the store and workers they run on, their budgets,
/// pages computed ahead of the requests that will ask for them, and file
/// selections that several pages reuse.
#[derive(Debug)]
pub struct Grep {
    store: Store,
    workers: Arc<Workers>,
    budget: PageBudget,
    read_ahead: ahead::ReadAhead,
    selections: selections::Selections,
}

impl Grep {
    pub fn new(store: Store, workers: Arc<Workers>, budget: PageBudget) -> Self {
        Self { store, workers, budget, read_ahead: Default::default(), selections: Default::default() }
    }
}

/// What one grep searches: a space as the call found it, and the directory
/// or file to search below.
#[derive(Debug, Clone)]
pub struct Scope {
    pub space: SpaceRecord,
    pub root: SpacePath,
}

/// Where a grep page starts.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Cursor {
    revision: u64,
    /// Start at this file, skipping its lines up to `line` (inclusive start).
    from: Option<String>,
    line: u64,
    /// Entries of `offset` still to skip.
    skip: u64,
}

/// A page of files resolved from the snapshot.
#[derive(Debug)]
pub struct Selection {
    /// The files to scan, as the job names them (built once, reused by
    /// every page that takes this selection).
    files: Vec<pb::GrepFileRef>,
    skipped: Vec<pb::SkippedFile>,
    /// The first file not visited, when the walk stopped early.
    next: Option<String>,
    visited: u64,
    /// When asked for: content the next page will most likely scan.
    prefetch: Vec<String>,
}

impl Selection {
    /// Memory it holds, roughly.
    fn approximate_bytes(&self) -> usize {
        let files: usize = self
            .files
            .iter()
            .map(|f| f.path.len() + f.node_id.len() + f.hash.len() + size_of::<pb::GrepFileRef>())
            .sum();
        let skipped: usize = self.skipped.iter().map(|s| s.path.len() + s.reason.len() + 64).sum();
        files + skipped + self.prefetch.len() * 88 + size_of::<Self>()
    }
}

/// How a page ended, for deciding what to do ahead of the next one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageEnd {
    /// It stopped on its file or byte budget (not on entries), so the next
    /// page starts on a file boundary.
    pub on_budget: bool,
    /// The worker lacked some of the page's content, so it likely lacks the
    /// next page's too.
    pub fetched: bool,
}

/// Runs one grep page over `scope` (a directory or a file), or takes it
/// from a read-ahead (see [`ahead`]).
pub async fn page(
    grep: &Arc<Grep>,
    scope: &Scope,
    query: &GrepQuery,
    request: &pb::GrepRequest,
    deadline: Option<Duration>,
    request_id: Option<&str>,
) -> Result<pb::GrepResponse> {
    let key = ahead::Key::new(&scope.space.id.to_string(), scope.root.as_str(), request);
    if let Some((outcome, parked)) = grep.read_ahead.take(&key) {
        // The client moved on: the page parked behind this one may start.
        if let Some(parked) = parked {
            start_ahead(grep, scope, query, parked.request, parked.prefetch);
        }
        let outcome = match deadline {
            Some(deadline) => {
                tokio::time::timeout(deadline, outcome).await.map_err(|_| crate::workers::deadline_passed())?
            }
            None => outcome.await,
        };
        if let Ok(Ok((response, end))) = outcome {
            // The snapshot may have been compacted since the page was read.
            Store::check_revision(&scope.space, response.revision)?;
            if end.on_budget {
                read_ahead(grep, scope, query, request, &response, end);
            }
            return Ok(response);
        }
    }
    let (response, end) = run(grep, scope, query, request, deadline, request_id, Priority::Request, false).await?;
    if end.on_budget {
        read_ahead(grep, scope, query, request, &response, end);
    }
    Ok(response)
}

/// Starts the page after `response` in the background when a worker slot
/// is spare, for the request that will ask for it.
fn read_ahead(
    grep: &Arc<Grep>,
    scope: &Scope,
    query: &GrepQuery,
    request: &pb::GrepRequest,
    response: &pb::GrepResponse,
    end: PageEnd,
) {
    if response.complete {
        return;
    }
    let next = pb::GrepRequest { page_token: response.next_page_token.clone(), ..request.clone() };
    start_ahead(grep, scope, query, next, end.fetched);
}

/// Runs `next` in the background for the request that will ask for it,
/// when a worker slot is spare and its search has room ahead of its client
/// (otherwise it is parked; see [`ahead`]).
fn start_ahead(grep: &Arc<Grep>, scope: &Scope, query: &GrepQuery, next: pb::GrepRequest, prefetch: bool) {
    if !grep.workers.has_spare() {
        return;
    }
    let (space, root) = (scope.space.id.to_string(), scope.root.as_str());
    let key = ahead::Key::new(&space, root, &next);
    let search = ahead::Key::search(&space, root, &next);
    let parked = ahead::Parked { request: next, prefetch };
    let Some(sender) = grep.read_ahead.reserve(key, search, parked.clone()) else { return };
    let (grep, scope, query) = (grep.clone(), scope.clone(), query.clone());
    tokio::spawn(async move {
        let mode = Priority::ReadAhead;
        let result = run(&grep, &scope, &query, &parked.request, None, None, mode, parked.prefetch).await;
        let _ = sender.send(result);
    });
}

/// Runs one page and tells how it ended. With `prefetch`, the job also
/// names the content the next page will most likely scan, for the worker
/// to fetch in the background.
#[allow(clippy::too_many_arguments)]
async fn run(
    grep: &Arc<Grep>,
    scope: &Scope,
    query: &GrepQuery,
    request: &pb::GrepRequest,
    deadline: Option<Duration>,
    request_id: Option<&str>,
    priority: Priority,
    prefetch: bool,
) -> Result<(pb::GrepResponse, PageEnd)> {
    let started = Instant::now();
    let (store, workers, budget) = (&grep.store, &grep.workers, grep.budget);
    let (space, root) = (&scope.space, &scope.root);
    let mut parts: Vec<&str> = vec!["grep", root.as_str()];
    let space_id = space.id.to_string();
    parts.push(&space_id);
    parts.extend(query.fingerprint_parts.iter().map(String::as_str));
    let bound = fingerprint(&parts);
    let cursor = match request.page_token.as_str() {
        "" => {
            let revision = if request.at_revision == 0 { space.revision } else { request.at_revision };
            Cursor { revision, from: None, line: 0, skip: query.offset }
        }
        token => {
            let token = PageToken::decode(token, bound)?;
            let from = (!token.after.is_empty()).then_some(token.after);
            Cursor { revision: token.revision, from, line: token.line, skip: token.position }
        }
    };
    Store::check_revision(space, cursor.revision)?;

    let key = selections::Key::new(space.id, cursor.revision, root, query, cursor.from.as_deref(), prefetch);
    let selection = match grep.selections.get(&key) {
        Some(selection) => selection,
        None => {
            let (store, space_id, root, query, cursor) =
                (store.clone(), space.id, root.clone(), query.clone(), cursor.clone());
            let selection = Arc::new(
                store
                    .clone()
                    .blocking(move |_| select(&store, space_id, &root, &query, &cursor, budget, prefetch))
                    .await?,
            );
            grep.selections.insert(key, selection.clone());
            selection
        }
    };
    // A walk that stopped on its budget fixes where the next page starts,
    // whatever the worker finds, unless the worker stops sooner (on entries
    // or output) or part of `offset` is still to skip: start that page now,
    // beside this one. Its token is the one this page will hand out if it
    // ends on its budget; if it does not, nothing ever asks for it.
    if let Some(next) = &selection.next
        && cursor.skip == 0
    {
        let token =
            PageToken { fingerprint: bound, revision: cursor.revision, after: next.clone(), position: 0, line: 0 };
        let next = pb::GrepRequest { page_token: token.encode(), ..request.clone() };
        start_ahead(grep, scope, query, next, prefetch);
    }
    let mut response = pb::GrepResponse { revision: cursor.revision, ..Default::default() };
    let mut stats = pb::GrepStats { files_visited: selection.visited, ..Default::default() };
    let mut resume: Option<(String, u64)> = selection.next.clone().map(|path| (path, 0));
    let mut end = PageEnd { on_budget: resume.is_some(), fetched: false };
    let mut skip_left = cursor.skip;

    if !selection.files.is_empty() {
        let job = pb::GrepJob {
            pattern: query.pattern.clone(),
            fixed_strings: query.fixed_strings,
            case_insensitive: query.case_insensitive,
            multiline: query.multiline,
            output_mode: query.mode as i32,
            before_context: query.before,
            after_context: query.after,
            files: selection.files.clone(),
            resume_after_line: if selection.files[0].path == cursor.from.as_deref().unwrap_or("") {
                cursor.line
            } else {
                0
            },
            max_entries: u64::from(query.head_limit),
            skip_entries: cursor.skip,
            max_output_bytes: budget.max_output_bytes,
            prefetch: selection.prefetch.clone(),
        };
        let (files, max_entries, skip) = (&selection.files, job.max_entries, job.skip_entries);
        let check = |result: &pb::GrepJobResult| check_result(files, max_entries, skip, result);
        let result = workers.grep(job, deadline, request_id, priority, check).await?;
        stats.bytes_scanned = result.bytes_scanned;
        end.fetched = result.files_fetched > 0;
        skip_left = cursor.skip.saturating_sub(result.entries_skipped);
        let done = result.files_done as usize;
        if done < selection.files.len() {
            resume = Some((selection.files[done].path.clone(), result.stopped_after_line));
            end.on_budget = false;
        }
        response.skipped.extend(result.skipped);
        let mut entries = result.entries;
        if let Some(budget) = query.tokens {
            // Counting takes a millisecond or more per 30 KB of matches: off the runtime.
            let (kept, tokens, counted) = store
                .blocking(move |_| {
                    let (kept, tokens) = within_tokens(&entries, budget);
                    Ok((kept, tokens, entries))
                })
                .await?;
            entries = counted;
            response.tokens = tokens;
            if kept < entries.len() {
                let last = &entries[kept - 1];
                resume = Some((selection.files[last.file_index as usize].path.clone(), last.line_number));
                end.on_budget = false;
                entries.truncate(kept);
            }
        }
        convert(query, &selection.files, entries, &mut response);
    }
    // Skipped files past the resume point are listed again on the page that visits them.
    response.skipped.extend(selection.skipped.iter().cloned());
    if let Some((from, _)) = &resume {
        response.skipped.retain(|s| s.path.as_str() < from.as_str());
    }
    response.skipped.sort_by(|a, b| a.path.cmp(&b.path));
    stats.files_matched = response.files.len() as u64
        + response.matches.iter().map(|m| m.path.as_str()).collect::<std::collections::BTreeSet<_>>().len() as u64;
    stats.elapsed_micros = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
    response.stats = Some(stats);
    match resume {
        Some((from, line)) => {
            response.next_page_token =
                PageToken { fingerprint: bound, revision: cursor.revision, after: from, position: skip_left, line }
                    .encode();
        }
        None => response.complete = true,
    }
    Ok((response, end))
}

/// Walks the snapshot from the cursor and picks the files of one page.
fn select(
    store: &Store,
    space: crate::ids::SpaceId,
    root: &SpacePath,
    query: &GrepQuery,
    cursor: &Cursor,
    budget: PageBudget,
    prefetch: bool,
) -> Result<Selection> {
    let mut selection =
        Selection { files: Vec::new(), skipped: Vec::new(), next: None, visited: 0, prefetch: Vec::new() };
    // A file as the root: the search covers just that file.
    let root_entry = store.entry(space, root, Some(cursor.revision))?.ok_or_else(|| Error::not_found(root))?;
    let candidates: Vec<(SpacePath, Entry)> = if root_entry.is_dir() {
        let filter = |path: &SpacePath, entry: &Entry| !entry.is_dir() && query.selects(root, path);
        let page = store.scan(
            space,
            &ScanOptions {
                root,
                revision: cursor.revision,
                recursive: true,
                after: None,
                from: cursor.from.as_deref(),
                // With prefetch, the walk also covers the next page's files.
                limit: if prefetch { 2 * budget.max_files + 1 } else { budget.max_files + 1 },
                budget: usize::MAX,
                filter: &filter,
            },
        )?;
        page.entries
    } else if cursor.from.as_deref().is_none_or(|from| from == root.as_str()) {
        vec![(root.clone(), root_entry)]
    } else {
        Vec::new()
    };
    let mut bytes = 0u64;
    let mut candidates = candidates.into_iter();
    let mut first_of_next = None;
    for (path, entry) in candidates.by_ref() {
        let over_budget = selection.visited as usize >= budget.max_files
            || (!selection.files.is_empty() && bytes + entry.size > budget.max_bytes);
        if over_budget {
            selection.next = Some(path.to_string());
            first_of_next = Some(entry);
            break;
        }
        selection.visited += 1;
        let reason = if !entry.is_text {
            Some("binary")
        } else if entry.size > budget.max_text_bytes {
            Some("too_large")
        } else {
            None
        };
        match reason {
            Some(reason) => {
                selection.skipped.push(pb::SkippedFile { path: path.to_string(), reason: reason.to_owned() })
            }
            None => {
                bytes += entry.size;
                selection.files.push(pb::GrepFileRef {
                    path: path.to_string(),
                    node_id: entry.node.to_string(),
                    version: entry.version,
                    hash: entry.hash.to_hex(),
                    size: entry.size,
                    encoding: entry.charset().name(),
                });
            }
        }
    }
    if prefetch {
        // The next page's files under the same budgets (it may stop sooner).
        let (mut files, mut bytes) = (0, 0u64);
        for entry in first_of_next.into_iter().chain(candidates.map(|(_, entry)| entry)) {
            if files >= budget.max_files || (files > 0 && bytes + entry.size > budget.max_bytes) {
                break;
            }
            files += 1;
            if entry.is_text && entry.size <= budget.max_text_bytes {
                bytes += entry.size;
                selection.prefetch.push(entry.hash.to_hex());
            }
        }
    }
    Ok(selection)
}

/// Checks a worker's result against the job it answers (its `files`,
/// `max_entries` and `skip_entries`): a result that names files the job did
/// not, finishes more files than it had, or returns or skips more entries
/// than asked is refused (the job then goes to another worker).
fn check_result(
    files: &[pb::GrepFileRef],
    max_entries: u64,
    skip_entries: u64,
    result: &pb::GrepJobResult,
) -> std::result::Result<(), String> {
    let done = result.files_done as usize;
    if done > files.len() {
        return Err(format!("{done} files done of {}", files.len()));
    }
    if max_entries > 0 && result.entries.len() as u64 > max_entries {
        return Err(format!("{} entries for at most {max_entries}", result.entries.len()));
    }
    if result.entries_skipped > skip_entries {
        return Err(format!("{} entries skipped of {skip_entries}", result.entries_skipped));
    }
    let mut previous = 0;
    for entry in &result.entries {
        let file = entry.file_index as usize;
        // A page that stops inside files[done] reports entries of it too.
        if file >= files.len() || file > done || file < previous {
            return Err(format!("an entry for file {file} of {} ({done} done)", files.len()));
        }
        previous = file;
    }
    // The job names its files in byte order of path.
    if let Some(stray) =
        result.skipped.iter().find(|s| files.binary_search_by(|f| f.path.as_str().cmp(&s.path)).is_err())
    {
        return Err(format!("a skipped file the job does not name ({} bytes of path)", stray.path.len()));
    }
    Ok(())
}

/// How many of a page's first `entries` fit in `budget` tokens (at least
/// one, so that every page makes progress), and their tokens: those of each
/// match's line and context lines.
fn within_tokens(entries: &[pb::GrepJobEntry], budget: TokenBudget) -> (usize, u64) {
    let mut counter = budget.tokenizer.counter();
    let mut spent = 0;
    for (at, entry) in entries.iter().enumerate() {
        let context = entry.before.iter().chain(&entry.after).map(|line| counter.count(&line.text)).sum::<u64>();
        let tokens = counter.count(&entry.line) + context;
        if at > 0 && spent + tokens > budget.max {
            return (at, spent);
        }
        spent += tokens;
    }
    (entries.len(), spent)
}

/// Worker entries to response entries.
fn convert(query: &GrepQuery, files: &[pb::GrepFileRef], entries: Vec<pb::GrepJobEntry>, out: &mut pb::GrepResponse) {
    for entry in entries {
        let Some(file) = files.get(entry.file_index as usize) else { continue };
        match query.mode {
            pb::GrepOutputMode::Content => {
                let line_number = |n: u64| if query.line_numbers { n } else { 0 };
                let context = |lines: Vec<pb::ContextLine>| {
                    lines
                        .into_iter()
                        .map(|l| pb::ContextLine { line_number: line_number(l.line_number), ..l })
                        .collect()
                };
                out.matches.push(pb::GrepMatch {
                    path: file.path.clone(),
                    node_id: file.node_id.clone(),
                    version: file.version,
                    hash: file.hash.clone(),
                    line_number: line_number(entry.line_number),
                    column: entry.column,
                    line: entry.line,
                    clipped: entry.clipped,
                    submatches: entry.submatches,
                    before: context(entry.before),
                    after: context(entry.after),
                });
            }
            pb::GrepOutputMode::FilesWithMatches | pb::GrepOutputMode::Count => out.files.push(pb::GrepFile {
                path: file.path.clone(),
                node_id: file.node_id.clone(),
                version: file.version,
                hash: file.hash.clone(),
                count: entry.count,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(paths: &[&str]) -> Vec<pb::GrepFileRef> {
        paths.iter().map(|p| pb::GrepFileRef { path: (*p).to_owned(), ..Default::default() }).collect()
    }

    fn entry(file_index: u32) -> pb::GrepJobEntry {
        pb::GrepJobEntry { file_index, count: 1, ..Default::default() }
    }

    #[test]
    fn well_formed_worker_results_pass() {
        let files = files(&["/a", "/b", "/c"]);
        let stopped_in_b = pb::GrepJobResult {
            entries: vec![entry(0), entry(1), entry(1)],
            skipped: vec![pb::SkippedFile { path: "/a".into(), reason: "unreadable".into() }],
            files_done: 1,
            entries_skipped: 2,
            ..Default::default()
        };
        assert_eq!(check_result(&files, 3, 2, &stopped_in_b), Ok(()));
        let all_done = pb::GrepJobResult { files_done: 3, ..Default::default() };
        assert_eq!(check_result(&files, 0, 0, &all_done), Ok(()));
    }

    #[test]
    fn malformed_worker_results_are_refused_not_trusted() {
        let files = files(&["/a", "/b", "/c"]);
        let base = pb::GrepJobResult { files_done: 3, ..Default::default() };
        let malformed = [
            pb::GrepJobResult { files_done: 4, ..base.clone() },
            pb::GrepJobResult { entries: vec![entry(3)], ..base.clone() },
            pb::GrepJobResult { entries: vec![entry(u32::MAX)], ..base.clone() },
            pb::GrepJobResult { entries: vec![entry(2), entry(0)], ..base.clone() },
            pb::GrepJobResult { entries: vec![entry(2)], files_done: 1, ..base.clone() },
            pb::GrepJobResult { entries: vec![entry(0), entry(0)], ..base.clone() },
            pb::GrepJobResult { entries_skipped: 1, ..base.clone() },
            pb::GrepJobResult {
                skipped: vec![pb::SkippedFile { path: "/other/space".into(), reason: "x".into() }],
                ..base.clone()
            },
        ];
        for result in malformed {
            assert!(check_result(&files, 1, 0, &result).is_err(), "{result:?}");
        }
    }
}
