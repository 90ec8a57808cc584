//! The `edits.json` format of `agentvfs edit`: a JSON array of
//! `{"type":"replace"|"append"|"lines", …}` objects, the shape agents write
//! by hand, mapped to `TextEdit` messages.

use agentvfs_mcp::edits::{Edit, to_proto};
use agentvfs_proto::v1 as pb;

use crate::errors::CliError;

pub fn parse(text: &str) -> Result<Vec<pb::TextEdit>, CliError> {
    let edits: Vec<Edit> =
        serde_json::from_str(text).map_err(|error| CliError::Usage(format!("bad edits JSON: {error}")))?;
    if edits.is_empty() {
        return Err(CliError::Usage("the edits JSON array is empty".to_owned()));
    }
    Ok(edits.into_iter().map(to_proto).collect())
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
