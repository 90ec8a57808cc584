//! The edit engine on an arbitrary file and arbitrary edits.
#![no_main]

use agentvfs_front::edit::EditOp;
use agentvfs_front::properties::check_edit;
use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;

#[derive(Debug, Arbitrary)]
enum Op {
    Replace { old_text: String, new_text: String, expected_matches: u8, replace_all: bool },
    Append { text: String },
    Lines { start_line: u8, end_line: u8, old_text: String, new_text: String },
}

impl From<Op> for EditOp {
    fn from(op: Op) -> Self {
        match op {
            Op::Replace { old_text, new_text, expected_matches, replace_all } => {
                EditOp::Replace { old_text, new_text, expected_matches: expected_matches.into(), replace_all }
            }
            Op::Append { text } => EditOp::Append { text },
            Op::Lines { start_line, end_line, old_text, new_text } => {
                EditOp::Lines { start_line: start_line.into(), end_line: end_line.into(), old_text, new_text }
            }
        }
    }
}

fuzz_target!(|input: (String, Vec<Op>)| {
    let (file, ops) = input;
    let edits: Vec<EditOp> = ops.into_iter().take(8).map(EditOp::from).collect();
    check_edit(&file, &edits);
});
