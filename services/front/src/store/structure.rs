//! Structural changes planned on a [`Commit`]: trash and restore, permanent
//! removal, rename and move, copy. Each works on a whole subtree and sees
//! what the commit has already planned, so a batch of actions composes.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use super::commit::{Commit, NewContent, NewVersion, Purge};
use super::engine::{KeyRange, Table};
use super::records::{
    Change, ChangeKind, Entry, Kind, NodeRecord, RevisionRecord, SpaceRecord, TrashRecord, VersionRecord, decode,
};
use super::{Store, keys};
use crate::error::{Error, Reason, Result};
use crate::ids::{NodeId, SpaceId};
use crate::path::SpacePath;

impl Store {
    /// Plans a mutation of one space under its lock and applies it (unless
    /// `apply` is false: a preview computes everything and saves nothing).
    /// Returns the plan's result and the revision after it.
    pub(crate) fn mutate<T>(
        &self,
        space: SpaceId,
        principal: &str,
        apply: bool,
        mut plan: impl FnMut(&Store, &mut Commit) -> Result<T>,
    ) -> Result<(T, u64)> {
        let (out, revisions) =
            self.mutate_many(&[space], principal, apply, |store, commits| plan(store, &mut commits[0]))?;
        Ok((out, revisions[0]))
    }

    /// Like [`Store::mutate`] for several spaces at once (a move between
    /// spaces): all their commits apply in one transaction, or none does.
    /// The first space's commit carries the receipt. `plan` runs again when
    /// its plan went stale (see [`Store::replanning`]).
    pub(crate) fn mutate_many<T>(
        &self,
        spaces: &[SpaceId],
        principal: &str,
        apply: bool,
        mut plan: impl FnMut(&Store, &mut [Commit]) -> Result<T>,
    ) -> Result<(T, Vec<u64>)> {
        let _guards = self.lock_spaces(spaces);
        self.replanning(spaces, || self.mutate_once(spaces, principal, apply, &mut plan))
    }

    fn mutate_once<T>(
        &self,
        spaces: &[SpaceId],
        principal: &str,
        apply: bool,
        plan: &mut impl FnMut(&Store, &mut [Commit]) -> Result<T>,
    ) -> Result<(T, Vec<u64>)> {
        let mut befores = Vec::with_capacity(spaces.len());
        for &space in spaces {
            befores.push(self.space(space)?.ok_or_else(|| Error::space_not_found(&space.to_string()))?);
        }
        let mut commits: Vec<Commit> = befores.iter().map(|b| Commit::new(b.clone(), principal)).collect();
        let out = plan(self, &mut commits)?;
        for (commit, before) in commits.iter().zip(&befores) {
            commit.check_quota(before)?;
        }
        let unchanged: Vec<u64> = befores.iter().map(|b| b.revision).collect();
        if !apply {
            // A preview says what applying it would say.
            for commit in &commits {
                commit.check_leases()?;
            }
            return Ok((out, unchanged));
        }
        let changed: Vec<bool> =
            commits.iter().zip(&befores).map(|(c, b)| !c.is_empty() || c.settings_changed(b)).collect();
        if !changed.iter().any(|&c| c) {
            if let Some((key, receipt)) = &commits[0].receipt {
                self.put_receipt(key, receipt)?;
            }
            return Ok((out, unchanged));
        }
        if !changed[0]
            && let Some(first_changed) = changed.iter().position(|&c| c)
        {
            // The receipt belongs with the change: carry it on an applied commit.
            commits[first_changed].receipt = commits[0].receipt.take();
        }
        let to_apply: Vec<&Commit> = commits.iter().zip(&changed).filter(|(_, c)| **c).map(|(c, _)| c).collect();
        self.apply_all(&to_apply)?;
        let revisions = commits
            .iter()
            .zip(&befores)
            .zip(&changed)
            .map(|((c, b), ch)| if *ch { c.revision() } else { b.revision })
            .collect();
        Ok((out, revisions))
    }

    /// The most recently trashed subtree whose root was at `path`.
    pub fn trashed_at(&self, space: SpaceId, path: &SpacePath) -> Result<Option<NodeId>> {
        let mut best: Option<(u64, NodeId)> = None;
        for item in self.scan_prefix(Table::Trash, &space.to_bytes()) {
            let (key, value) = item?;
            let record: TrashRecord = decode(&value)?;
            let node = <[u8; 16]>::try_from(&key[16..])
                .map(NodeId::from_bytes)
                .map_err(|_| Error::internal("bad trash key"))?;
            if record.path == path.as_str() && best.is_none_or(|(revision, _)| record.revision > revision) {
                best = Some((record.revision, node));
            }
        }
        Ok(best.map(|(_, node)| node))
    }

    /// The trash record of a node, if it is in the trash.
    pub fn trashed(&self, space: SpaceId, node: NodeId) -> Result<Option<TrashRecord>> {
        self.get_decoded(Table::Trash, &keys::trash(space, node))
    }
}

impl Commit {
    /// Whether the space's own settings (access, quota) change.
    pub fn settings_changed(&self, before: &SpaceRecord) -> bool {
        self.space.access != before.access
            || self.space.quota != before.quota
            || self.space.compacted_revision != before.compacted_revision
            || self.space.leases != before.leases
    }

    /// Whether the commit changes nothing.
    pub fn is_empty(&self) -> bool {
        self.planned_entries().is_empty() && self.trash.is_empty() && self.purge.is_empty() && self.functions.is_none()
    }

    /// The content this commit plans for version `number` of `node`, if any.
    pub fn planned_bytes(&self, node: NodeId, number: u64) -> Option<&[u8]> {
        match &self.planned_version(node, number)?.content {
            NewContent::Bytes(bytes) => Some(bytes),
            NewContent::Stored | NewContent::Uploaded(_) => None,
        }
    }

    /// `path` and every live entry below it, in path order, as planned so far.
    /// A subtree of more than the store's `max_subtree_entries` is TOO_LARGE:
    /// one commit carries all of it, under the space's lock.
    pub fn subtree(&self, store: &Store, path: &SpacePath) -> Result<Vec<(SpacePath, Entry)>> {
        let limit = store.limits().max_subtree_entries;
        let mut found: BTreeMap<SpacePath, Entry> = BTreeMap::new();
        if let Some(entry) = self.current(store, path)? {
            found.insert(path.clone(), entry);
        }
        let (start, end) = keys::subtree_range(self.space.id, path);
        for item in store.range(Table::Current, KeyRange::new(start, end)) {
            let (key, value) = item?;
            let stored = std::str::from_utf8(&key[16..]).map_err(|_| Error::internal("malformed current key"))?;
            found.insert(SpacePath::from_stored(stored.to_owned()), decode(&value)?);
            if found.len() > limit {
                return Err(subtree_too_large(path, limit));
            }
        }
        for (planned, entry) in self.planned_entries() {
            if planned != path && planned.starts_with(path) {
                match entry {
                    Some(entry) => found.insert(planned.clone(), entry.clone()),
                    None => found.remove(planned),
                };
            }
        }
        if !found.contains_key(path) {
            return Ok(Vec::new());
        }
        if found.len() > limit {
            return Err(subtree_too_large(path, limit));
        }
        Ok(found.into_iter().collect())
    }

    pub(super) fn change(&mut self, kind: ChangeKind, path: &SpacePath, old_path: Option<&SpacePath>, entry: &Entry) {
        self.changes.push(Change {
            kind,
            node: entry.node,
            node_kind: entry.kind,
            path: path.to_string(),
            old_path: old_path.map(ToString::to_string),
            version: entry.version,
        });
    }

    pub(super) fn count_out(&mut self, entry: &Entry) {
        let usage = &mut self.space.usage;
        match entry.kind {
            Kind::File => {
                usage.files = usage.files.saturating_sub(1);
                usage.bytes = usage.bytes.saturating_sub(entry.size);
            }
            Kind::Directory => usage.directories = usage.directories.saturating_sub(1),
        }
    }

    pub(super) fn count_in(&mut self, entry: &Entry) {
        let usage = &mut self.space.usage;
        match entry.kind {
            Kind::File => {
                usage.files += 1;
                usage.bytes += entry.size;
            }
            Kind::Directory => usage.directories += 1,
        }
    }

    /// The live subtree at `path`, refusing the root and missing paths.
    fn existing_subtree(&self, store: &Store, path: &SpacePath) -> Result<Vec<(SpacePath, Entry)>> {
        if path.is_root() {
            return Err(
                Error::new(Reason::InvalidArgument, "The root folder cannot be changed this way.").field("path")
            );
        }
        let subtree = self.subtree(store, path)?;
        if subtree.is_empty() {
            return Err(Error::not_found(path));
        }
        Ok(subtree)
    }

    /// Moves a subtree to the trash: hidden from the tree, history kept.
    /// Returns the number of entries trashed.
    pub fn trash(&mut self, store: &Store, path: &SpacePath) -> Result<usize> {
        let subtree = self.existing_subtree(store, path)?;
        let root = subtree[0].1.node;
        for (p, entry) in &subtree {
            self.plan(p.clone(), None);
            self.nodes.push((entry.node, NodeRecord { space: self.space.id, path: p.to_string(), trashed: true }));
            self.count_out(entry);
            self.change(ChangeKind::Trashed, p, None, entry);
        }
        let record = TrashRecord {
            path: path.to_string(),
            revision: self.revision(),
            time_ms: self.time_ms,
            principal: self.principal.clone(),
            entries: subtree.iter().map(|(p, e)| (p.to_string(), e.clone())).collect(),
        };
        self.trash.push((keys::trash(self.space.id, root), Some(record)));
        Ok(subtree.len())
    }

    /// Puts a trashed subtree back where it was. Returns its root path and
    /// the number of entries restored.
    pub fn restore(&mut self, store: &Store, node: NodeId) -> Result<(SpacePath, usize)> {
        let record = store
            .trashed(self.space.id, node)?
            .ok_or_else(|| Error::not_found(format!("{}{node} in the trash", crate::reference::ITEM_PREFIX)))?;
        let root = SpacePath::from_stored(record.path.clone());
        if self.current(store, &root)?.is_some() {
            return Err(Error::new(
                Reason::AlreadyExists,
                format!("{root} is in use; move it away before restoring the trashed item."),
            )
            .with("path", &root));
        }
        self.ensure_parents(store, &root)?;
        for (p, entry) in &record.entries {
            let p = SpacePath::from_stored(p.clone());
            let entry = Entry { revision: self.revision(), ..entry.clone() };
            self.nodes.push((entry.node, NodeRecord { space: self.space.id, path: p.to_string(), trashed: false }));
            self.count_in(&entry);
            self.change(ChangeKind::Restored, &p, None, &entry);
            self.plan(p, Some(entry));
        }
        self.trash.push((keys::trash(self.space.id, node), None));
        Ok((root, record.entries.len()))
    }

    /// Deletes a subtree for good: its nodes, their versions and their
    /// states in history, wherever they were (see [`Commit::forget`]);
    /// content no other version uses is freed. Returns the entries removed.
    pub fn remove(&mut self, store: &Store, path: &SpacePath) -> Result<usize> {
        let subtree = self.existing_subtree(store, path)?;
        for (p, entry) in &subtree {
            self.plan(p.clone(), None);
            self.count_out(entry);
            self.change(ChangeKind::Removed, p, None, entry);
            self.purge_node(store, entry.node)?;
        }
        self.forget(store, subtree.iter().map(|(p, e)| (p.to_string(), e.node)))?;
        Ok(subtree.len())
    }

    /// Deletes a trashed subtree for good. Returns the entries removed.
    pub fn remove_trashed(&mut self, store: &Store, node: NodeId) -> Result<usize> {
        let record = store
            .trashed(self.space.id, node)?
            .ok_or_else(|| Error::not_found(format!("{}{node} in the trash", crate::reference::ITEM_PREFIX)))?;
        for (p, entry) in &record.entries {
            let p = SpacePath::from_stored(p.clone());
            self.change(ChangeKind::Removed, &p, None, entry);
            self.purge_node(store, entry.node)?;
        }
        self.forget(store, record.entries.iter().map(|(p, e)| (p.clone(), e.node)))?;
        self.trash.push((keys::trash(self.space.id, node), None));
        Ok(record.entries.len())
    }

    fn purge_node(&mut self, store: &Store, node: NodeId) -> Result<()> {
        for item in store.scan_prefix(Table::Versions, &keys::versions_prefix(self.space.id, node)) {
            let (key, value) = item?;
            let record: VersionRecord = decode(&value)?;
            self.purge.push(Purge::Version { key: key.to_vec(), hash: record.hash, size: record.size });
        }
        self.purge.push(Purge::Node(node));
        Ok(())
    }

    /// Erases the states of removed nodes from history at every path they
    /// held, given as `(path, node)`: each node's last path, and wherever
    /// the revision log (and this commit) say it was since the compaction
    /// floor. Below the floor, history keeps only each path's state at the
    /// floor, and a node's state there outlives the floor only while the
    /// node stays at that path, which a later move in the log names.
    ///
    /// An erased state becomes "nothing here" where an earlier state of the
    /// path would otherwise show through, and is deleted where it adds
    /// nothing, so a past revision shows neither the removed node nor a
    /// node it had replaced. This reads the space's log since the floor:
    /// a permanent removal costs a pass over it.
    fn forget(&mut self, store: &Store, removed: impl Iterator<Item = (String, NodeId)>) -> Result<()> {
        let mut paths = BTreeSet::new();
        let mut nodes = HashSet::new();
        for (path, node) in removed {
            paths.insert(path);
            nodes.insert(node);
        }
        let mut held = |change: &Change| {
            if nodes.contains(&change.node) {
                paths.insert(change.path.clone());
                paths.extend(change.old_path.clone());
            }
        };
        let space = self.space.id;
        let log = KeyRange::new(keys::revlog(space, self.space.compacted_revision), keys::revlog(space, u64::MAX));
        for item in store.range(Table::Revlog, log) {
            let record: RevisionRecord = decode(&item?.1)?;
            record.changes.iter().for_each(&mut held);
        }
        self.changes.iter().for_each(&mut held);
        for path in &paths {
            // Whether the path's state before the entry at hand is a node.
            let mut shown = false;
            for item in store.scan_prefix(Table::History, &keys::history_prefix(space, path)) {
                let (key, value) = item?;
                match decode::<Option<Entry>>(&value)? {
                    Some(entry) if !nodes.contains(&entry.node) => shown = true,
                    Some(_) if shown => {
                        self.purge.push(Purge::Erase(key.to_vec()));
                        shown = false;
                    }
                    Some(_) => self.purge.push(Purge::History(key.to_vec())),
                    None => shown = false,
                }
            }
        }
        Ok(())
    }

    /// Checks that `to` can receive a subtree from `from`: free, with an
    /// existing folder as parent, and not inside `from` itself.
    fn check_destination(&self, store: &Store, from: &SpacePath, to: &SpacePath) -> Result<()> {
        if to.starts_with(from) {
            return Err(Error::new(Reason::InvalidArgument, format!("{from} cannot be placed inside itself ({to}).")));
        }
        let parent = to.parent().unwrap_or_else(SpacePath::root);
        match self.current(store, &parent)? {
            Some(entry) if entry.is_dir() => {}
            Some(_) => {
                return Err(Error::new(Reason::NotADirectory, format!("{parent} is a file, not a folder."))
                    .with("path", &parent));
            }
            None => return Err(Error::not_found(&parent)),
        }
        if self.current(store, to)?.is_some() {
            return Err(Error::new(Reason::AlreadyExists, format!("{to} already exists.")).with("path", to));
        }
        Ok(())
    }

    /// Moves a subtree into another space's commit at `to`; nodes keep their
    /// IDs and every version (the source keeps its history).
    pub fn move_to_space(
        &mut self,
        store: &Store,
        from: &SpacePath,
        dest: &mut Commit,
        to: &SpacePath,
    ) -> Result<usize> {
        let subtree = self.existing_subtree(store, from)?;
        let parent = to.parent().unwrap_or_else(SpacePath::root);
        match dest.current(store, &parent)? {
            Some(entry) if entry.is_dir() => {}
            Some(_) => {
                return Err(Error::new(Reason::NotADirectory, format!("{parent} is a file, not a folder."))
                    .with("path", &parent));
            }
            None => return Err(Error::not_found(&parent)),
        }
        if dest.current(store, to)?.is_some() {
            return Err(Error::new(Reason::AlreadyExists, format!("{to} already exists.")).with("path", to));
        }
        for (p, entry) in &subtree {
            let new_path = join_below(to, p.relative_to(from))?;
            self.plan(p.clone(), None);
            self.count_out(entry);
            self.change(ChangeKind::Moved, &SpacePath::root(), Some(p), entry);
            if !entry.is_dir() {
                let mut numbers = Vec::new();
                let versions = keys::versions_prefix(self.space.id, entry.node);
                for item in store.scan_prefix(Table::Versions, &versions) {
                    let (key, value) = item?;
                    let number = keys::parse_version_number(&key)?;
                    numbers.push((number, decode::<VersionRecord>(&value)?));
                }
                numbers.extend(self.planned_versions_of(entry.node).map(|v| (v.number, v.record.clone())));
                for (number, record) in numbers {
                    dest.add_version(NewVersion { node: entry.node, number, record, content: NewContent::Stored });
                }
            }
            let moved = Entry { revision: dest.revision(), ..entry.clone() };
            dest.nodes
                .push((entry.node, NodeRecord { space: dest.space.id, path: new_path.to_string(), trashed: false }));
            dest.count_in(&moved);
            dest.change(ChangeKind::Moved, &new_path, None, &moved);
            dest.plan(new_path, Some(moved));
        }
        Ok(subtree.len())
    }

    /// Moves (or renames) a subtree to `to`; nodes keep their IDs.
    pub fn relocate(&mut self, store: &Store, from: &SpacePath, to: &SpacePath, kind: ChangeKind) -> Result<usize> {
        let subtree = self.existing_subtree(store, from)?;
        self.check_destination(store, from, to)?;
        for (p, entry) in &subtree {
            let new_path = join_below(to, p.relative_to(from))?;
            let moved = Entry { revision: self.revision(), ..entry.clone() };
            self.plan(p.clone(), None);
            self.nodes
                .push((entry.node, NodeRecord { space: self.space.id, path: new_path.to_string(), trashed: false }));
            self.change(kind, &new_path, Some(p), &moved);
            self.plan(new_path, Some(moved));
        }
        Ok(subtree.len())
    }

    /// Copies a subtree to `to` as new nodes whose file versions share the
    /// originals' content (no bytes are copied).
    pub fn copy(&mut self, store: &Store, from: &SpacePath, to: &SpacePath) -> Result<usize> {
        let subtree = self.existing_subtree(store, from)?;
        self.check_destination(store, from, to)?;
        for (p, entry) in &subtree {
            let new_path = join_below(to, p.relative_to(from))?;
            let node = NodeId::generate();
            let copied = Entry {
                node,
                version: if entry.is_dir() { 0 } else { 1 },
                revision: self.revision(),
                modified_ms: self.time_ms,
                system: false,
                user_modified: false,
                ..entry.clone()
            };
            if !entry.is_dir() {
                let source = match self.planned_version(entry.node, entry.version) {
                    Some(version) => version.record.clone(),
                    None => store.version(self.space.id, entry.node, entry.version)?.ok_or_else(|| {
                        Error::new(Reason::DataLoss, format!("The latest version of {p} is missing."))
                    })?,
                };
                let record = VersionRecord {
                    principal: self.principal.clone(),
                    operation: "copy".to_owned(),
                    revision: self.revision(),
                    time_ms: self.time_ms,
                    idempotency_key: None,
                    tool_call: None,
                    ..source
                };
                self.add_version(NewVersion { node, number: 1, record, content: NewContent::Stored });
            }
            self.nodes.push((node, NodeRecord { space: self.space.id, path: new_path.to_string(), trashed: false }));
            self.count_in(&copied);
            let kind = if entry.is_dir() { ChangeKind::Mkdir } else { ChangeKind::Created };
            self.change(kind, &new_path, None, &copied);
            self.plan(new_path, Some(copied));
        }
        Ok(subtree.len())
    }
}

pub(super) fn subtree_too_large(path: &SpacePath, limit: usize) -> Error {
    Error::new(
        Reason::TooLarge,
        format!("{path} holds more than {limit} entries, the most one change may move, copy, trash or remove."),
    )
    .with("path", path)
    .with("limit", limit)
    .next_action("Change the folders inside it one at a time.")
}

fn join_below(root: &SpacePath, relative: &str) -> Result<SpacePath> {
    if relative.is_empty() {
        return Ok(root.clone());
    }
    root.join(relative).map_err(|e| {
        Error::new(Reason::InvalidPath, format!("The new location would be invalid: {e}.")).with("path", root)
    })
}
