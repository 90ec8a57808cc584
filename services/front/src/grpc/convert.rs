//! Domain values to proto messages.

use agentvfs_proto::v1 as pb;

use crate::error::{Error, Result};
use crate::media;
use crate::path::SpacePath;
use crate::store::{Entry, Kind, Role, SpaceRecord, VersionRecord};
use crate::text::encoding::Charset;
use crate::text::{LineEnding, TextMeta};

pub fn timestamp(ms: i64) -> Option<prost_types::Timestamp> {
    Some(prost_types::Timestamp {
        seconds: ms.div_euclid(1000),
        nanos: i32::try_from(ms.rem_euclid(1000) * 1_000_000).unwrap_or(0),
    })
}

pub fn kind(kind: Kind) -> i32 {
    match kind {
        Kind::File => pb::NodeKind::File as i32,
        Kind::Directory => pb::NodeKind::Directory as i32,
    }
}

pub fn hash_hex(entry: &Entry) -> String {
    if entry.is_dir() { String::new() } else { entry.hash.to_hex() }
}

pub fn entry(path: &SpacePath, entry: &Entry) -> pb::Entry {
    pb::Entry {
        path: path.to_string(),
        name: path.name().to_owned(),
        kind: kind(entry.kind),
        node_id: entry.node.to_string(),
        size: entry.size,
        version: entry.version,
        hash: hash_hex(entry),
        modified_time: timestamp(entry.modified_ms),
        is_text: entry.is_text,
        system: entry.system,
        user_modified: entry.user_modified,
        revision: entry.revision,
        executable: entry.executable,
        mime_type: media::shown(entry.is_text, &entry.mime_type).to_owned(),
    }
}

/// The encoding a request names in `field` (`None` when empty), or
/// INVALID_ARGUMENT listing some it could name.
pub fn charset(field: &str, label: &str) -> Result<Option<Charset>> {
    if label.is_empty() {
        return Ok(None);
    }
    Charset::for_label(label).map(Some).ok_or_else(|| {
        Error::invalid_argument(
            field,
            format!(
                "{label:?} is not an encoding text can be stored in; use a WHATWG label such as utf-8, utf-16le, \
                 utf-16be, shift_jis, euc-jp, gbk, gb18030, big5, euc-kr, windows-1251 or windows-1252."
            ),
        )
    })
}

/// What a version's bytes are as text, in its encoding.
pub fn text_info(meta: &TextMeta, charset: Charset) -> pb::TextInfo {
    pb::TextInfo {
        encoding: if meta.is_text { charset.name() } else { String::new() },
        is_text: meta.is_text,
        is_utf8: meta.is_utf8,
        bom: meta.bom,
        line_ending: match meta.line_ending {
            LineEnding::None => pb::LineEnding::None,
            LineEnding::Lf => pb::LineEnding::Lf,
            LineEnding::CrLf => pb::LineEnding::Crlf,
            LineEnding::Mixed => pb::LineEnding::Mixed,
        } as i32,
        line_count: meta.line_count,
        utf16_length: meta.utf16_len,
    }
}

pub fn version_info(number: u64, record: &VersionRecord) -> pb::VersionInfo {
    pb::VersionInfo {
        version: number,
        hash: record.hash.to_hex(),
        size: record.size,
        principal: record.principal.clone(),
        operation: record.operation.clone(),
        revision: record.revision,
        time: timestamp(record.time_ms),
        idempotency_key: record.idempotency_key.clone().unwrap_or_default(),
        tool_call_id: record.tool_call.clone().unwrap_or_default(),
        text: Some(text_info(&record.text, record.charset())),
        executable: record.executable,
        mime_type: media::shown(record.text.is_text, &record.mime_type).to_owned(),
    }
}

pub fn role(role: Role) -> i32 {
    match role {
        Role::Viewer => pb::Role::Viewer as i32,
        Role::Editor => pb::Role::Editor as i32,
        Role::Owner => pb::Role::Owner as i32,
    }
}

pub fn space(space: &SpaceRecord) -> pb::Space {
    pb::Space {
        id: space.id.to_string(),
        name: space.name.clone(),
        revision: space.revision,
        quota: Some(pb::Quota { max_bytes: space.quota.max_bytes, max_files: space.quota.max_files }),
        usage: Some(pb::Usage {
            bytes: space.usage.bytes,
            files: space.usage.files,
            directories: space.usage.directories,
        }),
        access: space
            .access
            .iter()
            .map(|(principal, r)| pb::AccessEntry { principal: principal.clone(), role: role(*r) })
            .collect(),
        create_time: timestamp(space.created_ms),
        compacted_revision: space.compacted_revision,
        forked_from: space
            .forked_from
            .map(|origin| pb::ForkOrigin { space_id: origin.space.to_string(), revision: origin.revision }),
    }
}

/// A path lease, with the space's revision after its last change.
pub fn lease(lease: &crate::store::LeaseRecord, revision: u64) -> pb::Lease {
    pb::Lease {
        lease_id: lease.id.to_string(),
        path: lease.path.clone(),
        holder: lease.holder.clone(),
        expire_time: timestamp(lease.expires_ms),
        acquire_time: timestamp(lease.acquired_ms),
        revision,
    }
}
