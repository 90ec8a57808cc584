//! Text edits as agents write them: `{"type":"replace"|"append"|"lines", …}`
//! objects, the `edits` of the `edit` and `batch` tools and the items of
//! `agentvfs edit --patch`, mapped to `TextEdit` messages.

use agentvfs_proto::v1 as pb;
use serde::Deserialize;

/// One text edit, as agents write it: the `--patch` items of `agentvfs edit`
/// and the `edits` of the MCP `edit` and `batch` tools.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
pub enum Edit {
    /// Replace exact text (whitespace included; `\n` also matches CRLF terminators).
    Replace {
        /// The exact current text to find; non-empty and different from `new_text`.
        old_text: String,
        /// The literal replacement (no `$` expansion), written with the file's own line terminators.
        new_text: String,
        /// How many matches must exist (default 1); ignored with `replace_all`.
        #[serde(default)]
        expected_matches: Option<u32>,
        /// Replace every match, however many.
        #[serde(default)]
        replace_all: bool,
    },
    /// Add text to the end of the file.
    Append {
        /// The text to add (include a final newline if the file should end with one).
        text: String,
    },
    /// Replace an inclusive, 1-based line range whose current text is known.
    Lines {
        /// First line of the range, 1-based.
        start_line: u64,
        /// Last line of the range, inclusive.
        end_line: u64,
        /// The exact current text of those lines, terminators included.
        old_text: String,
        /// The text that replaces them.
        new_text: String,
    },
}

/// The `TextEdit` message of one edit.
pub fn to_proto(edit: Edit) -> pb::TextEdit {
    use pb::text_edit::Kind;
    let kind = match edit {
        Edit::Replace { old_text, new_text, expected_matches, replace_all } => {
            Kind::Replace(pb::ReplaceEdit { old_text, new_text, expected_matches, replace_all })
        }
        Edit::Append { text } => Kind::Append(pb::AppendEdit { text }),
        Edit::Lines { start_line, end_line, old_text, new_text } => {
            Kind::Lines(pb::LinesEdit { start_line, end_line, old_text, new_text })
        }
    };
    pb::TextEdit { kind: Some(kind) }
}
