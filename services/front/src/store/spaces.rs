//! Creating and deleting spaces.

use std::sync::Arc;

use super::commit::{Commit, NewContent};
use super::engine::Table;
use super::receipt::ReceiptPlan;
use super::records::{Entry, Hash, Quota, Role, SpaceRecord, Usage, VersionRecord, decode, now_ms};
use super::{RETIRED_KEY, Store, content, keys, retired_count};
use crate::error::{Error, Reason, Result};
use crate::ids::SpaceId;
use crate::media;
use crate::path::SpacePath;
use crate::system_files;
use crate::text::TextMeta;
use crate::text::encoding::Charset;

/// Longest space name, in characters.
pub const MAX_SPACE_NAME_CHARS: usize = 128;

/// What `CreateSpace` asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewSpace {
    pub name: String,
    /// Becomes the space's owner.
    pub owner: String,
    /// Zero fields take the server default.
    pub quota: Quota,
}

/// Checks a space name: 1–128 characters, no `/` or control characters, no
/// leading or trailing white space, and not shaped like a space ID (so a name
/// can never be mistaken for an ID).
pub fn validate_name(name: &str) -> Result<()> {
    let problem = if name.is_empty() {
        Some("must not be empty")
    } else if name.chars().count() > MAX_SPACE_NAME_CHARS {
        Some("must be at most 128 characters")
    } else if name.chars().any(|c| c.is_control() || c == '/') {
        Some("must not contain `/` or control characters")
    } else if name.trim() != name {
        Some("must not start or end with white space")
    } else if name.starts_with(SpaceId::PREFIX) {
        Some("must not start with `sp_`, which is reserved for space IDs")
    } else {
        None
    };
    match problem {
        Some(problem) => Err(Error::new(Reason::InvalidArgument, format!("The space name {problem}.")).field("name")),
        None => Ok(()),
    }
}

impl Store {
    /// Creates a space with its system files at revision 1.
    pub fn create_space(&self, new: NewSpace, receipt: Option<ReceiptPlan<SpaceRecord>>) -> Result<SpaceRecord> {
        validate_name(&new.name)?;
        if self.space_id_by_name(&new.name)?.is_some() {
            return Err(already_exists(&new.name));
        }
        let quota = self.effective_quota(new.quota);
        let space = SpaceRecord {
            id: SpaceId::generate(),
            name: new.name.clone(),
            created_ms: now_ms(),
            revision: 0,
            quota,
            usage: Usage::default(),
            access: vec![(new.owner.clone(), Role::Owner)],
            compacted_revision: 0,
            forked_from: None,
            leases: Vec::new(),
        };
        let _guard = self.lock_space(space.id);
        let mut commit = Commit::new(space.clone(), &new.owner);
        commit.creating = true;
        commit.mkdir(&SpacePath::root(), true);
        for dir in system_files::SYSTEM_DIRS {
            commit.mkdir(&SpacePath::from_stored(dir.to_owned()), true);
        }
        let agent_md = system_files::agent_md(&new.name, &[]).into_bytes();
        let text = TextMeta::analyze(&agent_md);
        let record = VersionRecord {
            hash: Hash::of(&agent_md),
            size: agent_md.len() as u64,
            text,
            mime_type: media::recorded(&text, Charset::UTF_8, &agent_md),
            principal: new.owner.clone(),
            operation: "generate".to_owned(),
            revision: 0,
            time_ms: 0,
            idempotency_key: None,
            tool_call: None,
            executable: false,
        };
        commit.put_file(
            &SpacePath::from_stored(system_files::AGENT_MD.to_owned()),
            None,
            record,
            NewContent::Bytes(Arc::new(agent_md)),
            true,
        );
        // The root is not counted as a directory of the space.
        commit.space.usage.directories -= 1;
        commit.receipt = receipt.map(|receipt| receipt.seal(&commit.space));
        self.apply(&commit)?;
        Ok(commit.space)
    }

    /// Changes a space's settings (access list, quota) as one commit.
    pub fn update_space(
        &self,
        id: SpaceId,
        principal: &str,
        mut change: impl FnMut(&mut SpaceRecord) -> Result<()>,
        receipt: Option<ReceiptPlan<SpaceRecord>>,
    ) -> Result<SpaceRecord> {
        let (space, _) = self.mutate(id, principal, true, |_, commit| {
            change(&mut commit.space)?;
            commit.receipt = receipt.as_ref().map(|receipt| receipt.seal(&commit.space));
            Ok(commit.space.clone())
        })?;
        Ok(space)
    }

    /// The quota a request asks for, zero fields taking the server default.
    pub fn effective_quota(&self, requested: Quota) -> Quota {
        let defaults = self.limits().default_quota;
        Quota {
            max_bytes: if requested.max_bytes == 0 { defaults.max_bytes } else { requested.max_bytes },
            max_files: if requested.max_files == 0 { defaults.max_files } else { requested.max_files },
        }
    }

    /// Deletes a space and everything in it. The space disappears atomically;
    /// its data is then purged (and the purge resumes at the next open if
    /// interrupted). The receipt's outcome is the space as it was.
    pub fn delete_space(&self, id: SpaceId, receipt: Option<ReceiptPlan<SpaceRecord>>) -> Result<SpaceRecord> {
        let space = {
            let _guard = self.lock_space(id);
            let space = self.space(id)?.ok_or_else(|| Error::space_not_found(&id.to_string()))?;
            let receipt = receipt.map(|receipt| {
                let (key, receipt) = receipt.seal(&space);
                (key, super::records::encode(&receipt))
            });
            let drop_job = super::records::encode(&super::records::IndexJob::drop_space(id, space.revision + 1));
            self.transact(|tx| {
                let Some(stored) = tx.get(Table::Spaces, &keys::space(id))? else {
                    return Err(Error::space_not_found(&id.to_string()));
                };
                let stored: SpaceRecord = decode(&stored)?;
                tx.put(Table::Queue, &keys::queued(id, stored.revision + 1, 0), &drop_job)?;
                tx.delete(Table::Spaces, &keys::space(id))?;
                tx.delete(Table::Spaces, &keys::space_name(&space.name))?;
                tx.put(Table::Spaces, &keys::deleted_space(id), &[])?;
                // The space's changes stay counted (see `Store::watermark`).
                let retired = retired_count(tx.get(Table::Spaces, RETIRED_KEY)?)?;
                tx.put(Table::Spaces, RETIRED_KEY, &(retired + stored.revision).to_be_bytes())?;
                if let Some((key, value)) = &receipt {
                    tx.put(Table::Receipts, key, value)?;
                }
                Ok(())
            })?;
            // Wakes followers of the space's log, which then find it gone.
            self.committed();
            space
        };
        self.purge_space(id)?;
        Ok(space)
    }

    /// Finishes purging spaces whose deletion was interrupted.
    pub(super) fn purge_deleted_spaces(&self) -> Result<()> {
        let mut pending = Vec::new();
        for item in self.scan_prefix(Table::Spaces, b"d") {
            if let Ok(id) = <[u8; 16]>::try_from(&item?.0[1..]) {
                pending.push(SpaceId::from_bytes(id));
            }
        }
        for id in pending {
            tracing::info!(space = %id, "resuming purge of a deleted space");
            self.purge_space(id)?;
        }
        Ok(())
    }

    /// Purges a deleted space's data. On a disk too full to release its
    /// content safely (see [`Store::check_room`]) it stops, and the purge
    /// resumes at the next open.
    pub(super) fn purge_space(&self, id: SpaceId) -> Result<()> {
        let prefix = id.to_bytes();
        // Versions first, each with its content reference, so content is
        // released exactly once even if the purge is interrupted.
        for item in self.scan_prefix(Table::Versions, &prefix) {
            let (key, value) = item?;
            let size = decode::<VersionRecord>(&value)?.size;
            if let Err(error) = self.check_room(0, size.div_ceil(content::CHUNK_SIZE as u64)) {
                tracing::warn!(space = %id, %error, "purge of a deleted space paused; it resumes at the next start");
                return Ok(());
            }
            self.transact(|tx| {
                if let Some(raw) = tx.get(Table::Versions, &key)? {
                    let record: VersionRecord = decode(&raw)?;
                    tx.delete(Table::Versions, &key)?;
                    content::drop_ref(tx, record.hash)?;
                }
                Ok(())
            })?;
        }
        let mut nodes = Vec::new();
        let mut history = Vec::new();
        for item in self.scan_prefix(Table::History, &prefix) {
            let (key, value) = item?;
            if let Some(entry) = decode::<Option<Entry>>(&value)? {
                nodes.push(keys::node(entry.node).into());
            }
            history.push(key);
        }
        self.remove_all(Table::Nodes, nodes)?;
        self.remove_all(Table::History, history)?;
        for table in [Table::Current, Table::Revlog, Table::Trash] {
            let keys: Vec<_> =
                self.scan_prefix(table, &prefix).map(|item| item.map(|(key, _)| key)).collect::<Result<_>>()?;
            self.remove_all(table, keys)?;
        }
        self.remove_all(Table::Meta, [keys::gate(id).into()])?;
        self.remove_all(Table::Spaces, [keys::functions(id).into(), keys::deleted_space(id).into()])?;
        Ok(())
    }
}

pub(super) fn already_exists(name: &str) -> Error {
    Error::new(Reason::AlreadyExists, format!("A space named {name:?} already exists.")).with("name", name)
}
