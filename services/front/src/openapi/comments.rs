//! The comments of the `.proto` sources, which become the document's
//! descriptions. protox keeps them in each file's `SourceCodeInfo`, where a
//! definition is found by its path in the file's descriptor.

use std::collections::HashMap;

use prost_reflect::{DescriptorPool, FileDescriptor};

/// The leading comment of every commented definition: by file name, then
/// by the definition's path (see `SourceCodeInfo.Location.path`).
#[derive(Debug)]
pub(super) struct Comments {
    leading: HashMap<String, HashMap<Vec<i32>, String>>,
}

impl Comments {
    pub(super) fn new(pool: &DescriptorPool) -> Comments {
        let leading = pool
            .files()
            .map(|file| {
                let locations = file.file_descriptor_proto().source_code_info.iter().flat_map(|info| &info.location);
                let comments = locations
                    .filter_map(|location| Some((location.path.clone(), tidy(location.leading_comments.as_deref()?))))
                    .filter(|(_, comment)| !comment.is_empty())
                    .collect();
                (file.name().to_owned(), comments)
            })
            .collect();
        Comments { leading }
    }

    /// The comment above the definition at `path` of `file`.
    pub(super) fn of(&self, file: &FileDescriptor, path: &[i32]) -> Option<&str> {
        self.leading.get(file.name())?.get(path).map(String::as_str)
    }
}

/// A comment without the layout of its `//` lines: the space after `//`,
/// trailing blanks and blank lines at either end go; line breaks stay (they
/// are soft breaks in Markdown).
fn tidy(comment: &str) -> String {
    let lines: Vec<&str> = comment.lines().map(|line| line.strip_prefix(' ').unwrap_or(line).trim_end()).collect();
    lines.join("\n").trim_matches('\n').to_owned()
}

#[cfg(test)]
mod tests {
    use super::tidy;

    #[test]
    fn comments_lose_their_layout_but_keep_their_lines() {
        assert_eq!(tidy(" Reads a slice.\n"), "Reads a slice.");
        assert_eq!(tidy(" First line\n second line  \n\n"), "First line\nsecond line");
        assert_eq!(tidy(" Code:\n   indented\n"), "Code:\n  indented");
        assert_eq!(tidy("\n"), "");
    }
}
