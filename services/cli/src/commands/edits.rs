//! The `edits.json` format of `agentvfs edit`: a JSON array of
//! `{"type":"replace"|"append"|"lines", …}` objects, the shape agents write
//! by hand, mapped to `TextEdit` messages.

use agentvfs_proto::v1 as pb;
use serde::Deserialize;

use crate::errors::CliError;

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

pub fn parse(text: &str) -> Result<Vec<pb::TextEdit>, CliError> {
    let edits: Vec<Edit> =
        serde_json::from_str(text).map_err(|error| CliError::Usage(format!("bad edits JSON: {error}")))?;
    if edits.is_empty() {
        return Err(CliError::Usage("the edits JSON array is empty".to_owned()));
    }
    Ok(edits.into_iter().map(to_proto).collect())
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn parses_every_kind() {
        let edits = parse(
            r#"[{"type":"replace","old_text":"a","new_text":"b","replace_all":true},
                {"type":"append","text":"x\n"},
                {"type":"lines","start_line":1,"end_line":2,"old_text":"a\nb\n","new_text":""}]"#,
        )
        .unwrap();
        assert_eq!(edits.len(), 3);
        assert!(matches!(&edits[0].kind, Some(pb::text_edit::Kind::Replace(r)) if r.replace_all));
    }

    #[test]
    fn rejects_unknown_fields_and_empty_arrays() {
        assert!(parse(r#"[{"type":"append","text":"x","oops":1}]"#).is_err());
        assert!(parse("[]").is_err());
    }
}
