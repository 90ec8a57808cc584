//! The next action of each reason whose text from the front names an RPC
//! field, method or metadata, in the tools' words: tools and their
//! arguments. Reasons not listed keep the front's text (see
//! [`spell_next_action`] for the shape of a row).

use std::collections::HashMap;

/// Next actions as a transport spells them: `(reason, command, text)`. The
/// row for the command comes first, then the row for any command (`""`).
/// `{key}` in a text is the error's `key` metadata (`path`,
/// `currentVersion`, …).
pub type NextActions = [(&'static str, &'static str, &'static str)];

pub const NEXT_ACTIONS: &NextActions = &[
    (
        "READ_REQUIRED",
        "edit",
        "Call read on {path} first (this MCP session remembers what it read), or give base_version: \
         the version the edits were written against.",
    ),
    (
        "READ_REQUIRED",
        "",
        "Call read on {path} first (this MCP session remembers what it read), or give the edit action a base_version.",
    ),
    (
        "VERSION_CONFLICT",
        "edit",
        "Call read on {path} again, then redo the edit against it with base_version {currentVersion}.",
    ),
    (
        "VERSION_CONFLICT",
        "write",
        "Call read on {path} again, then write again with expected_version {currentVersion}.",
    ),
    ("VERSION_CONFLICT", "", "Call read on {path} again, then redo the change against version {currentVersion}."),
    ("FILE_MODIFIED_SINCE_READ", "", "Call read on {path} again, then redo the edit against what it returns."),
    (
        "LEASE_HELD",
        "",
        "{holder} holds a lease on {path} until {expiresAt} (ms since the epoch): work elsewhere, or wait and call \
         again after it expires.",
    ),
    (
        "EDIT_NO_MATCH",
        "apply_patch",
        "Call read on {path} again and write hunk {hunk} with its context and removed lines exactly as they appear.",
    ),
    (
        "EDIT_AMBIGUOUS_MATCH",
        "apply_patch",
        "Add context lines (or an @@ line naming a line above it) to hunk {hunk} of {path} so it matches once.",
    ),
    ("EDIT_NO_MATCH", "", "Call read on the file again and copy old_text exactly as it appears."),
    ("INVALID_ARGUMENT", "", "Fix the argument the message names, then call again."),
    (
        "TOO_LARGE",
        "read",
        "{path} is {size} bytes, over the {limit}-byte limit of a media read: these tools cannot return it whole. \
         Tell the user, or work with the files beside it.",
    ),
    ("TOO_LARGE", "", "Fix the argument the message names, then call again."),
    ("CURSOR_INVALID", "", "Call again without page_token, with the same arguments on every page."),
    (
        "SNAPSHOT_EXPIRED",
        "revert",
        "Revision {revision} was compacted away: revert to revision {compactedRevision} or later, or tell the user.",
    ),
    ("SNAPSHOT_EXPIRED", "", "Call again without page_token; the pinned revision was compacted away."),
    ("NOT_FOUND", "", "Check the path with the ls or find tool; it does not exist or is not visible to you."),
    ("NOT_A_FILE", "", "Use the ls tool for directories; this tool needs a file."),
    (
        "BINARY_CONTENT",
        "",
        "This file is not text: read returns it whole as media (up to 8 MiB); edit cannot change it, write can replace it.",
    ),
    (
        "NOT_UTF8",
        "",
        "This file is not text: read returns it whole as media (up to 8 MiB); edit cannot change it, write can replace it.",
    ),
    (
        "UNREPRESENTABLE_TEXT",
        "",
        "Leave out the named character, or write the whole file with encoding \"utf-8\" to convert it to UTF-8.",
    ),
    ("FILE_TOO_LARGE", "", "Split the content into smaller files; these tools cannot handle one this large."),
    ("IDEMPOTENCY_KEY_REUSED", "", "Give a new idempotency_key for a different change."),
    ("IDEMPOTENCY_REQUEST_IN_PROGRESS", "", "Call again shortly with the same idempotency_key."),
    (
        "UNAUTHENTICATED",
        "",
        "The token of this MCP server (AGENTVFS_TOKEN or --token of `agentvfs mcp`) is not valid; tell the user.",
    ),
    ("RATE_LIMITED", "", "Wait a moment, then call again."),
    ("OVERLOADED", "", "Wait a moment, then call again; narrow a grep with path, glob or type."),
];

/// The next action of an error with `reason` and `metadata` from `command`
/// as `table` spells it, if it has a row for them and the metadata has every
/// `{key}` the row names.
pub fn spell_next_action(
    table: &NextActions,
    reason: &str,
    command: &str,
    metadata: &HashMap<String, String>,
) -> Option<String> {
    let row = |cmd: &str| table.iter().find(|(r, c, _)| *r == reason && *c == cmd);
    let (_, _, text) = row(command).or_else(|| row(""))?;
    let mut spelled = String::with_capacity(text.len());
    let mut rest = *text;
    while let Some(start) = rest.find('{') {
        let end = start + rest[start..].find('}')?;
        spelled.push_str(&rest[..start]);
        spelled.push_str(metadata.get(&rest[start + 1..end])?);
        rest = &rest[end + 1..];
    }
    spelled.push_str(rest);
    Some(spelled)
}
