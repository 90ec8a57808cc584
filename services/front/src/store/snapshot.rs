//! Reading the path tree as of a revision.
//!
//! `history` holds every state of every path, keyed `space path 00 revision`,
//! so the keys of one path are contiguous and ordered by revision, and paths
//! are in byte order. A snapshot read picks, per path, the last state at or
//! below the revision; a state of `None` means the path was gone.

use std::ops::ControlFlow;

use super::engine::{KeyRange, Table};
use super::records::{Entry, decode};
use super::{Store, keys};
use crate::error::{Error, Result};
use crate::ids::SpaceId;
use crate::path::SpacePath;

/// The state of `path` as of `revision`.
pub fn entry_at(store: &Store, space: SpaceId, path: &str, revision: u64) -> Result<Option<Entry>> {
    let start = keys::history_prefix(space, path);
    let mut last = start.clone();
    last.extend_from_slice(&revision.to_be_bytes());
    match store.engine().scan(Table::History, KeyRange::through(start, &last), true).next() {
        Some(item) => decode::<Option<Entry>>(&item?.1),
        None => Ok(None),
    }
}

/// Hands `each` every entry below `root` as of `revision`, in path order,
/// a page of at most `page` entries at a time.
pub fn walk(
    store: &Store,
    space: SpaceId,
    root: &SpacePath,
    revision: u64,
    page: usize,
    mut each: impl FnMut(Vec<(SpacePath, Entry)>) -> Result<()>,
) -> Result<()> {
    let all = |_: &SpacePath, _: &Entry| true;
    let mut after: Option<String> = None;
    loop {
        let options = ScanOptions {
            root,
            revision,
            recursive: true,
            after: after.as_deref(),
            from: None,
            limit: page,
            budget: page.saturating_mul(16),
            filter: &all,
        };
        let found = scan(store, space, &options)?;
        if !found.entries.is_empty() {
            each(found.entries)?;
        }
        match found.resume_after {
            Some(last) => after = Some(last),
            None => return Ok(()),
        }
    }
}

/// What one page of a snapshot walk reads.
pub struct ScanOptions<'a> {
    /// Directory whose descendants are walked (itself excluded).
    pub root: &'a SpacePath,
    pub revision: u64,
    /// Walk the whole subtree, or only direct children.
    pub recursive: bool,
    /// Resume after this path (from the previous page).
    pub after: Option<&'a str>,
    /// Start at this path, itself included.
    pub from: Option<&'a str>,
    /// Most entries to return.
    pub limit: usize,
    /// Most history keys to examine before returning a (possibly short) page.
    pub budget: usize,
    /// Which live entries to return.
    pub filter: &'a dyn Fn(&SpacePath, &Entry) -> bool,
}

impl std::fmt::Debug for ScanOptions<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScanOptions")
            .field("root", &self.root)
            .field("revision", &self.revision)
            .field("recursive", &self.recursive)
            .field("after", &self.after)
            .finish_non_exhaustive()
    }
}

/// Entries in path byte order, and where to resume when more may remain.
#[derive(Debug, Default)]
pub struct ScanPage {
    pub entries: Vec<(SpacePath, Entry)>,
    pub resume_after: Option<String>,
}

struct Group {
    path: String,
    state: Option<Entry>,
}

/// Walks `options.root` as of `options.revision`; see [`ScanOptions`].
pub fn scan(store: &Store, space: SpaceId, options: &ScanOptions<'_>) -> Result<ScanPage> {
    let (range_start, end) = keys::subtree_range(space, options.root);
    let mut start = range_start;
    if let Some(after) = options.after {
        start = start.max(keys::after_path(space, after));
    }
    if let Some(from) = options.from {
        start = start.max(keys::history_prefix(space, from));
    }
    // Byte offset where a descendant's path relative to the root begins.
    let relative_from = if options.root.is_root() { 1 } else { options.root.as_str().len() + 1 };
    let mut page = ScanPage::default();
    let mut group: Option<Group> = None;
    let mut examined = 0usize;

    'seek: loop {
        for item in store.range(Table::History, KeyRange::new(start.clone(), end.clone())) {
            let (key, value) = item?;
            examined += 1;
            let (path, revision) = keys::parse_history(&key).ok_or_else(|| Error::internal("malformed history key"))?;
            if group.as_ref().is_none_or(|g| g.path != path) {
                if let Some(done) = group.take() {
                    if close(done, options, &mut page).is_break() {
                        return finish(store, space, &end, page);
                    }
                    if examined > options.budget {
                        return Ok(page);
                    }
                }
                if path == options.root.as_str() {
                    // The root itself (only the space root sorts inside its range).
                    continue;
                }
                if !options.recursive
                    && let Some(slash) = path[relative_from..].find('/')
                {
                    // A grandchild: skip the child's whole subtree in one seek.
                    start = keys::after_subtree(space, &path[..relative_from + slash]);
                    continue 'seek;
                }
                group = Some(Group { path: path.to_owned(), state: None });
            }
            if revision <= options.revision
                && let Some(group) = group.as_mut()
            {
                group.state = decode(&value)?;
            }
        }
        break;
    }
    if let Some(done) = group.take()
        && close(done, options, &mut page).is_break()
    {
        return finish(store, space, &end, page);
    }
    page.resume_after = None;
    Ok(page)
}

/// Emits a finished path group; breaks when the page is full.
fn close(group: Group, options: &ScanOptions<'_>, page: &mut ScanPage) -> ControlFlow<()> {
    if let Some(entry) = group.state {
        let path = SpacePath::from_stored(group.path.clone());
        if (options.filter)(&path, &entry) {
            page.entries.push((path, entry));
        }
    }
    page.resume_after = Some(group.path);
    if page.entries.len() >= options.limit { ControlFlow::Break(()) } else { ControlFlow::Continue(()) }
}

/// A full page: keep the resume point only if anything follows it.
fn finish(store: &Store, space: SpaceId, end: &[u8], mut page: ScanPage) -> Result<ScanPage> {
    if let Some(after) = &page.resume_after
        && store.range(Table::History, KeyRange::new(keys::after_path(space, after), end)).next().is_none()
    {
        page.resume_after = None;
    }
    Ok(page)
}
