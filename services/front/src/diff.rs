//! Unified diffs of text, for `Diff` and edit previews.

use similar::{ChangeTag, TextDiff};

/// A unified diff and its line counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unified {
    pub text: String,
    pub added: u64,
    pub removed: u64,
}

/// The unified diff from `old` to `new`, labelled with `old_name` and
/// `new_name`, with `context` lines around each hunk.
pub fn unified(old: &str, new: &str, old_name: &str, new_name: &str, context: usize) -> Unified {
    let diff = TextDiff::from_lines(old, new);
    let (mut added, mut removed) = (0, 0);
    for change in diff.iter_all_changes() {
        match change.tag() {
            ChangeTag::Insert => added += 1,
            ChangeTag::Delete => removed += 1,
            ChangeTag::Equal => {}
        }
    }
    let text = if added == 0 && removed == 0 {
        String::new()
    } else {
        diff.unified_diff().context_radius(context).header(old_name, new_name).to_string()
    };
    Unified { text, added, removed }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diffs_count_lines() {
        let d = unified("a\nb\nc\n", "a\nB\nc\nd\n", "v1", "v2", 3);
        assert_eq!((d.added, d.removed), (2, 1));
        assert!(d.text.starts_with("--- v1\n+++ v2\n@@"), "{}", d.text);
        assert!(d.text.contains("-b\n+B\n"));
        assert_eq!(unified("same", "same", "a", "b", 3).text, "");
    }
}
