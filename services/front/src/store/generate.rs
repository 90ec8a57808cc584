//! System files: registering functions and regenerating generated files.
//!
//! A generated file that a principal has changed is *user-modified* and is
//! left alone by registration; `restore_default` regenerates it on request,
//! as a new version.

use std::sync::Arc;

use super::commit::{Commit, NewContent};
use super::engine::Table;
use super::receipt::ReceiptPlan;
use super::records::{Hash, VersionRecord};
use super::{Store, keys};
use crate::error::{Error, Reason, Result};
use crate::ids::SpaceId;
use crate::media;
use crate::path::SpacePath;
use crate::system_files::{self, AGENT_MD, Function};
use crate::text::TextMeta;
use crate::text::encoding::Charset;

/// What a generation wrote and what it left alone.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Generated {
    pub written: Vec<String>,
    pub skipped_user_modified: Vec<String>,
    pub revision: u64,
    /// Version of the last file written (for `restore_default`).
    pub version: u64,
}

/// The functions registered in a space.
impl super::records::Record for Vec<Function> {}

impl Store {
    /// The functions registered in a space, by name.
    pub fn functions(&self, space: SpaceId) -> Result<Vec<Function>> {
        Ok(self.get_decoded(Table::Spaces, &keys::functions(space))?.unwrap_or_default())
    }

    /// Adds or updates functions, writes their files and `/AGENT.md`.
    pub fn register_functions(
        &self,
        space: SpaceId,
        functions: Vec<Function>,
        principal: &str,
        receipt: Option<ReceiptPlan<Generated>>,
    ) -> Result<Generated> {
        let _guard = self.lock_space(space);
        self.replanning(&[space], || self.register_functions_once(space, &functions, principal, receipt.as_ref()))
    }

    fn register_functions_once(
        &self,
        space: SpaceId,
        functions: &[Function],
        principal: &str,
        receipt: Option<&ReceiptPlan<Generated>>,
    ) -> Result<Generated> {
        let record = self.space(space)?.ok_or_else(|| Error::space_not_found(&space.to_string()))?;
        let mut commit = Commit::new(record.clone(), principal);
        let before = self.functions(space)?;
        let mut registry = before.clone();
        for function in functions.iter().cloned() {
            match registry.iter_mut().find(|f| f.name == function.name) {
                Some(existing) => *existing = function,
                None => registry.push(function),
            }
        }
        registry.sort_by(|a, b| a.name.cmp(&b.name));
        let mut files: Vec<(String, String)> =
            registry.iter().map(|f| (system_files::function_path(&f.name), system_files::function_md(f))).collect();
        files.push((AGENT_MD.to_owned(), agent_md(&commit.space.name, &registry)));
        if registry != before {
            commit.functions = Some(registry);
        }
        self.generate(commit, &record, files, false, receipt)
    }

    /// Regenerates one system file, discarding a principal's changes.
    pub fn restore_default(
        &self,
        space: SpaceId,
        path: &SpacePath,
        principal: &str,
        receipt: Option<ReceiptPlan<Generated>>,
    ) -> Result<Generated> {
        let _guard = self.lock_space(space);
        self.replanning(&[space], || self.restore_default_once(space, path, principal, receipt.as_ref()))
    }

    fn restore_default_once(
        &self,
        space: SpaceId,
        path: &SpacePath,
        principal: &str,
        receipt: Option<&ReceiptPlan<Generated>>,
    ) -> Result<Generated> {
        let record = self.space(space)?.ok_or_else(|| Error::space_not_found(&space.to_string()))?;
        let commit = Commit::new(record.clone(), principal);
        let registry = self.functions(space)?;
        let content = if path.as_str() == AGENT_MD {
            agent_md(&record.name, &registry)
        } else {
            let function = registry.iter().find(|f| system_files::function_path(&f.name) == path.as_str());
            match function {
                Some(function) => system_files::function_md(function),
                None => {
                    return Err(Error::new(
                        Reason::InvalidArgument,
                        format!("{path} is not a generated file; only /AGENT.md and registered /functions/*.md are."),
                    )
                    .with("path", path)
                    .field("path"));
                }
            }
        };
        self.generate(commit, &record, vec![(path.to_string(), content)], true, receipt)
    }

    /// Writes generated files in one commit; user-modified ones only when `force`.
    fn generate(
        &self,
        mut commit: Commit,
        before: &super::SpaceRecord,
        files: Vec<(String, String)>,
        force: bool,
        receipt: Option<&ReceiptPlan<Generated>>,
    ) -> Result<Generated> {
        let mut out = Generated { revision: before.revision, ..Generated::default() };
        for (path, content) in files {
            let path = SpacePath::from_stored(path);
            let existing = commit.current(self, &path)?;
            if let Some(entry) = &existing {
                if entry.is_dir() {
                    return Err(Error::new(Reason::NotAFile, format!("{path} is a directory.")).with("path", &path));
                }
                if entry.user_modified && !force {
                    out.skipped_user_modified.push(path.to_string());
                    continue;
                }
            }
            let bytes = content.into_bytes();
            let hash = Hash::of(&bytes);
            if existing.as_ref().is_some_and(|e| e.hash == hash && !e.user_modified) {
                out.version = existing.as_ref().map_or(0, |e| e.version);
                continue;
            }
            commit.ensure_parents(self, &path)?;
            let text = TextMeta::analyze(&bytes);
            let record = VersionRecord {
                hash,
                size: bytes.len() as u64,
                text,
                mime_type: media::recorded(&text, Charset::UTF_8, &bytes),
                principal: commit.principal.clone(),
                operation: if force { "restore_default" } else { "generate" }.to_owned(),
                revision: 0,
                time_ms: 0,
                idempotency_key: None,
                tool_call: None,
                executable: false,
            };
            let entry = commit.put_file(&path, existing.as_ref(), record, NewContent::Bytes(Arc::new(bytes)), true);
            out.version = entry.version;
            out.written.push(path.to_string());
        }
        if out.written.is_empty() && commit.functions.is_none() {
            self.keep_receipt(receipt, &out)?;
            return Ok(out);
        }
        commit.check_quota(before)?;
        out.revision = commit.revision();
        commit.receipt = receipt.map(|receipt| receipt.seal(&out));
        self.apply(&commit)?;
        Ok(out)
    }
}

fn agent_md(space_name: &str, registry: &[Function]) -> String {
    let functions: Vec<(String, String)> = registry.iter().map(|f| (f.name.clone(), f.description.clone())).collect();
    system_files::agent_md(space_name, &functions)
}
