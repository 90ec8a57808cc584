//! Reverting a subtree to what it was at an earlier revision, as one commit.
//!
//! History is never rewritten: the revert is a new revision. Nodes keep
//! their identity where they can. A node of the old tree that is still in
//! the subtree goes back to its old path (a rename or move back), a file
//! whose content or executable bit differs gets a new version with the old
//! content, and a node in the trash comes back out of it (what else its
//! trashed subtree held stays in the trash). A node the old tree had that
//! has since left the subtree, or was removed for good, comes back as a new
//! node with the old content: the revert changes the subtree alone. Every
//! node that did not exist then is trashed, a trashed subtree per topmost
//! such node, so that a name taken since goes back to its old owner.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::commit::{Commit, NewContent, NewVersion};
use super::engine::Table;
use super::keys;
use super::records::{ChangeKind, Entry, Kind, NodeRecord, TrashRecord, VersionRecord, decode};
use super::snapshot::{entry_at, walk};
use super::{Actor, Store, history};
use crate::error::{Error, Reason, Result};
use crate::ids::NodeId;
use crate::path::SpacePath;

/// One change a revert makes (or would make, in a dry run).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reverted {
    pub kind: ChangeKind,
    pub node: NodeId,
    pub node_kind: Kind,
    pub path: SpacePath,
    /// Where a node moved back from.
    pub old_path: Option<SpacePath>,
    /// The file's version before the revert (0 for a folder, or a file
    /// that comes back as a new node).
    pub from_version: u64,
    /// Its version after (0 for a folder; for a trashed file, the version
    /// it had).
    pub to_version: u64,
}

/// Where a node of the old tree is now.
enum Now {
    /// Live in the subtree at this path (or stood in for there).
    Here(SpacePath, Entry),
    /// In the trash, as this entry.
    Trashed(Entry),
    /// Outside the subtree, or gone for good.
    Elsewhere,
}

impl Commit {
    /// Plans the revert of the subtree at `root` to `to_revision`; see the
    /// module docs. The versions it makes record `actor`'s idempotency key
    /// and tool call. Returns the changes in the order planned.
    pub fn revert(
        &mut self,
        store: &Store,
        root: &SpacePath,
        to_revision: u64,
        actor: &Actor,
    ) -> Result<Vec<Reverted>> {
        let latest = self.revision() - 1;
        if to_revision == 0 || to_revision > latest {
            return Err(Error::invalid_argument(
                "to_revision",
                format!("to_revision must be a revision of the space, from 1 to {latest}."),
            )
            .with("currentRevision", latest));
        }
        if to_revision < self.space.compacted_revision {
            return Err(history::expired(to_revision, self.space.compacted_revision));
        }
        let then = self.tree_at(store, root, to_revision)?;
        let now = self.subtree(store, root)?;
        let then_nodes: HashSet<NodeId> = then.values().map(|entry| entry.node).collect();
        let here: HashMap<NodeId, (SpacePath, Entry)> =
            now.iter().map(|(path, entry)| (entry.node, (path.clone(), entry.clone()))).collect();
        let mut trash = self.trash_holding(store, &then_nodes, &here)?;
        // A node of then that is gone from the subtree is stood in for by
        // what holds its path now, if of its kind and new since (what a
        // revert that brought it back as a new node left there).
        let at_path: HashMap<&SpacePath, &Entry> = now.iter().map(|(path, entry)| (path, entry)).collect();
        let stand_ins: HashMap<SpacePath, Entry> = then
            .iter()
            .filter(|(_, old)| !here.contains_key(&old.node) && !trash.holding.contains_key(&old.node))
            .filter_map(|(path, old)| {
                let current = at_path.get(path)?;
                (current.kind == old.kind && !then_nodes.contains(&current.node))
                    .then(|| (path.clone(), (*current).clone()))
            })
            .collect();
        let mut changes = Vec::new();

        // What did not exist then goes to the trash; what moved leaves its
        // current path.
        let newcomers: BTreeMap<SpacePath, Entry> = now
            .iter()
            .filter(|(path, entry)| !then_nodes.contains(&entry.node) && !stand_ins.contains_key(path))
            .cloned()
            .collect();
        for (top, entries) in by_top(&newcomers) {
            changes.extend(self.trash_entries(&top, &entries));
        }
        for (path, entry) in &now {
            if then_nodes.contains(&entry.node) && !then.contains_key(path) {
                self.plan(path.clone(), None);
            }
        }

        // The old tree, parents first.
        if !then.is_empty() {
            self.ensure_parents(store, root)?;
        }
        for (path, old) in &then {
            let now = match here.get(&old.node) {
                Some((at, entry)) => Now::Here(at.clone(), entry.clone()),
                None => match (trash.holding.get(&old.node), stand_ins.get(path)) {
                    (Some((_, entry)), _) => Now::Trashed(entry.clone()),
                    (None, Some(entry)) => Now::Here(path.clone(), entry.clone()),
                    (None, None) => Now::Elsewhere,
                },
            };
            changes.extend(self.bring_back(store, path, old, now, actor)?);
        }
        for (key, record) in trash.records.drain() {
            let restored: HashSet<NodeId> =
                trash.holding.values().filter(|(held, _)| *held == key).map(|(_, entry)| entry.node).collect();
            self.keep_in_trash(key, record, &restored);
        }
        Ok(changes)
    }

    /// The subtree at `root` as of `revision`, bounded like [`Commit::subtree`].
    fn tree_at(&self, store: &Store, root: &SpacePath, revision: u64) -> Result<BTreeMap<SpacePath, Entry>> {
        let limit = store.limits().max_subtree_entries;
        let mut out = BTreeMap::new();
        let Some(entry) = entry_at(store, self.space.id, root.as_str(), revision)? else { return Ok(out) };
        let is_dir = entry.is_dir();
        out.insert(root.clone(), entry);
        if !is_dir {
            return Ok(out);
        }
        walk(store, self.space.id, root, revision, limit + 1, |entries| {
            out.extend(entries);
            if out.len() > limit {
                return Err(super::structure::subtree_too_large(root, limit));
            }
            Ok(())
        })?;
        Ok(out)
    }

    /// The trash records that hold nodes of the old tree not live in the
    /// subtree.
    fn trash_holding(
        &self,
        store: &Store,
        then_nodes: &HashSet<NodeId>,
        here: &HashMap<NodeId, (SpacePath, Entry)>,
    ) -> Result<Trash> {
        let mut trash = Trash::default();
        let mut wanted = 0;
        for node in then_nodes.iter().filter(|node| !here.contains_key(node)) {
            if store.node(*node)?.is_some_and(|record| record.trashed && record.space == self.space.id) {
                wanted += 1;
            }
        }
        if wanted == 0 {
            return Ok(trash);
        }
        for item in store.scan_prefix(Table::Trash, &self.space.id.to_bytes()) {
            let (key, value) = item?;
            let record: TrashRecord = decode(&value)?;
            let mut holds = false;
            for (_, entry) in &record.entries {
                if then_nodes.contains(&entry.node) && !here.contains_key(&entry.node) {
                    trash.holding.insert(entry.node, (key.to_vec(), entry.clone()));
                    holds = true;
                }
            }
            if holds {
                trash.records.insert(key.to_vec(), record);
            }
        }
        Ok(trash)
    }

    /// Trashes `entries` (a subtree, `top` first) as one trashed item.
    fn trash_entries(&mut self, top: &SpacePath, entries: &[(SpacePath, Entry)]) -> Vec<Reverted> {
        let mut changes = Vec::new();
        for (path, entry) in entries {
            self.plan(path.clone(), None);
            self.nodes.push((entry.node, NodeRecord { space: self.space.id, path: path.to_string(), trashed: true }));
            self.count_out(entry);
            self.change(ChangeKind::Trashed, path, None, entry);
            changes.push(reverted(ChangeKind::Trashed, path, None, entry, entry.version, entry.version));
        }
        let record = TrashRecord {
            path: top.to_string(),
            revision: self.revision(),
            time_ms: self.time_ms,
            principal: self.principal.clone(),
            entries: entries.iter().map(|(path, entry)| (path.to_string(), entry.clone())).collect(),
        };
        if let Some((_, root)) = entries.first() {
            self.trash.push((keys::trash(self.space.id, root.node), Some(record)));
        }
        changes
    }

    /// Plans `path` as `old` was, given where `old`'s node is now.
    fn bring_back(
        &mut self,
        store: &Store,
        path: &SpacePath,
        old: &Entry,
        now: Now,
        actor: &Actor,
    ) -> Result<Vec<Reverted>> {
        let revision = self.revision();
        let (current, from, trashed) = match now {
            Now::Here(at, entry) => (entry, Some(at), false),
            Now::Trashed(entry) => (entry, None, true),
            Now::Elsewhere => return self.recreate(store, path, old, actor),
        };
        let moved = from.as_ref().filter(|from| *from != path);
        let same_content = old.is_dir() || (current.hash == old.hash && current.executable == old.executable);
        if !trashed && moved.is_none() && same_content {
            return Ok(Vec::new());
        }
        let mut entry = Entry { revision, ..current.clone() };
        let mut changes = Vec::new();
        if trashed {
            self.count_in(&entry);
            self.change(ChangeKind::Restored, path, None, &entry);
            changes.push(reverted(ChangeKind::Restored, path, None, &entry, current.version, current.version));
        } else if let Some(from) = moved {
            let kind = if from.parent() == path.parent() { ChangeKind::Renamed } else { ChangeKind::Moved };
            self.change(kind, path, Some(from), &entry);
            changes.push(reverted(kind, path, Some(from), &entry, current.version, current.version));
        }
        if !same_content {
            let record = self.old_version(store, path, old, actor)?;
            entry = Entry {
                version: current.version + 1,
                size: record.size,
                hash: record.hash,
                is_text: record.text.is_text,
                modified_ms: self.time_ms,
                executable: record.executable,
                mime_type: record.mime_type.clone(),
                user_modified: current.system || current.user_modified,
                ..entry
            };
            let usage = &mut self.space.usage;
            usage.bytes = usage.bytes - current.size + record.size;
            self.add_version(NewVersion {
                node: entry.node,
                number: entry.version,
                record,
                content: NewContent::Stored,
            });
            self.change(ChangeKind::Modified, path, None, &entry);
            changes.push(reverted(ChangeKind::Modified, path, None, &entry, current.version, entry.version));
        }
        self.nodes.push((entry.node, NodeRecord { space: self.space.id, path: path.to_string(), trashed: false }));
        self.plan(path.clone(), Some(entry));
        Ok(changes)
    }

    /// Plans a new node at `path` as `old` was: its node left the subtree
    /// or was removed for good.
    fn recreate(&mut self, store: &Store, path: &SpacePath, old: &Entry, actor: &Actor) -> Result<Vec<Reverted>> {
        if old.is_dir() {
            let node = self.mkdir(path, old.system);
            let entry = Entry { node, ..old.clone() };
            return Ok(vec![reverted(ChangeKind::Mkdir, path, None, &entry, 0, 0)]);
        }
        let record = self.old_version(store, path, old, actor)?;
        let entry = self.put_file(path, None, record, NewContent::Stored, old.system);
        Ok(vec![reverted(ChangeKind::Created, path, None, &entry, 0, entry.version)])
    }

    /// The version record of `old`, made anew for this commit.
    fn old_version(&self, store: &Store, path: &SpacePath, old: &Entry, actor: &Actor) -> Result<VersionRecord> {
        let record = store.version(self.space.id, old.node, old.version)?.ok_or_else(|| {
            Error::new(
                Reason::NotFound,
                format!("{path} as it was then (version {}) was removed for good; it cannot come back.", old.version),
            )
            .with("path", path)
        })?;
        Ok(VersionRecord {
            principal: self.principal.clone(),
            operation: "revert".to_owned(),
            revision: self.revision(),
            time_ms: self.time_ms,
            idempotency_key: actor.idempotency_key.clone(),
            tool_call: actor.tool_call.clone(),
            ..record
        })
    }

    /// Rewrites a trash record without the nodes the revert restored: what
    /// remains stays in the trash, a trashed item per topmost entry.
    fn keep_in_trash(&mut self, key: Vec<u8>, record: TrashRecord, restored: &HashSet<NodeId>) {
        let remaining: BTreeMap<SpacePath, Entry> = record
            .entries
            .iter()
            .filter(|(_, entry)| !restored.contains(&entry.node))
            .map(|(path, entry)| (SpacePath::from_stored(path.clone()), entry.clone()))
            .collect();
        self.trash.push((key, None));
        for (top, entries) in by_top(&remaining) {
            let node = entries[0].1.node;
            let entries = entries.into_iter().map(|(path, entry)| (path.to_string(), entry)).collect();
            let kept = TrashRecord { path: top.to_string(), entries, ..record.clone() };
            self.trash.push((keys::trash(self.space.id, node), Some(kept)));
        }
    }
}

/// Trash records holding nodes a revert brings back: each node's record
/// key and entry, and the records by key.
#[derive(Default)]
struct Trash {
    holding: HashMap<NodeId, (Vec<u8>, Entry)>,
    records: HashMap<Vec<u8>, TrashRecord>,
}

/// `entries` as subtrees: by each topmost path (one whose parent is not
/// among them), that path's entries in path order, itself first.
fn by_top(entries: &BTreeMap<SpacePath, Entry>) -> BTreeMap<SpacePath, Vec<(SpacePath, Entry)>> {
    let mut out: BTreeMap<SpacePath, Vec<(SpacePath, Entry)>> = BTreeMap::new();
    for (path, entry) in entries {
        let mut top = path.clone();
        while let Some(parent) = top.parent().filter(|parent| entries.contains_key(parent)) {
            top = parent;
        }
        out.entry(top).or_default().push((path.clone(), entry.clone()));
    }
    out
}

fn reverted(
    kind: ChangeKind,
    path: &SpacePath,
    old_path: Option<&SpacePath>,
    entry: &Entry,
    from_version: u64,
    to_version: u64,
) -> Reverted {
    Reverted {
        kind,
        node: entry.node,
        node_kind: entry.kind,
        path: path.clone(),
        old_path: old_path.cloned(),
        from_version,
        to_version,
    }
}
