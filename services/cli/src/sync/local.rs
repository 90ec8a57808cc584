//! The local side of a checkout: which names are safe, walking the tree
//! without following links, and writing files so that a reader never sees
//! half of one.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::Write as _;
use std::path::{Path, PathBuf};

use unicode_normalization::UnicodeNormalization as _;

use crate::errors::{CliError, EXIT_USAGE};

/// Names starting with this are the journal's and its temporary files'.
pub const RESERVED_PREFIX: &str = ".agentvfs-sync";
/// Where a downloaded file is written before it is renamed into place.
const PART: &str = ".agentvfs-sync.part";
/// The journal and its temporary file, written in the root only.
const JOURNAL: &str = super::journal::JOURNAL;
const JOURNAL_TMP: &str = super::journal::JOURNAL_TMP;

/// A local tree, by NFC path relative to its root.
#[derive(Debug, Default)]
pub struct Tree {
    pub files: BTreeMap<String, File>,
    pub dirs: BTreeSet<String>,
}

#[derive(Debug)]
pub struct File {
    /// Where it is on disk (its name may not be in NFC).
    pub path: PathBuf,
    pub size: u64,
    /// BLAKE3 hex of the content.
    pub hash: String,
}

/// Why one path segment cannot be a name in a checkout, if it cannot.
pub fn check_segment(segment: &str) -> Result<(), String> {
    if segment.is_empty() {
        return Err("an empty path segment".to_owned());
    }
    if segment == "." || segment == ".." {
        return Err(format!("a {segment:?} segment (path traversal)"));
    }
    if segment.contains(['/', '\\']) {
        return Err("a name with a slash or backslash".to_owned());
    }
    if segment.chars().any(char::is_control) {
        return Err("a name with a control character".to_owned());
    }
    if segment.starts_with(RESERVED_PREFIX) {
        return Err(format!("a reserved name (names starting with {RESERVED_PREFIX} belong to the sync journal)"));
    }
    Ok(())
}

/// Checks a `/`-separated relative path segment by segment.
pub fn check_relative(path: &str) -> Result<(), String> {
    path.split('/').try_for_each(check_segment)
}

/// The first two paths that would be the same file on a case-insensitive or
/// normalizing file system.
pub fn check_collisions<'a>(paths: impl Iterator<Item = &'a str>) -> Result<(), (String, String)> {
    let mut seen: HashMap<String, &str> = HashMap::new();
    for path in paths {
        let folded = path.nfc().flat_map(char::to_lowercase).collect::<String>();
        if let Some(other) = seen.insert(folded, path) {
            return Err((other.to_owned(), path.to_owned()));
        }
    }
    Ok(())
}

/// `place` is the local directory or the remote folder the name is in.
pub fn unsafe_name(place: &str, what: &str, problem: &str) -> CliError {
    CliError::refused(
        "UNSAFE_NAME",
        format!("{place}: {what} has {problem}"),
        "rename or remove it, then run the command again",
        EXIT_USAGE,
    )
}

pub fn collision(place: &str, a: &str, b: &str) -> CliError {
    CliError::refused(
        "NAME_COLLISION",
        format!(
            "{place}: {a:?} and {b:?} differ only in case or Unicode normalization, so some file systems would merge them"
        ),
        "rename one of them so that the names differ in more than case",
        EXIT_USAGE,
    )
}

pub fn too_many(what: &str, limit: u64) -> CliError {
    CliError::refused(
        "TOO_MANY_ENTRIES",
        format!("{what} has more than {limit} entries"),
        "sync a smaller folder (a checkout holds at most 10,000 files and folders)",
        EXIT_USAGE,
    )
}

/// Walks `root` without following links. Refuses links and other special
/// files, unsafe, reserved or colliding names, and more than `limit`
/// entries. The journal and the temporary files in the root are skipped.
pub fn walk(root: &Path, limit: u64) -> Result<Tree, CliError> {
    let place = root.display().to_string();
    let mut tree = Tree::default();
    let mut stack = vec![(root.to_owned(), String::new())];
    let mut count = 0u64;
    while let Some((dir, rel)) = stack.pop() {
        let mut children = Vec::new();
        for child in std::fs::read_dir(&dir)? {
            children.push(child?);
        }
        children.sort_by_key(std::fs::DirEntry::file_name);
        for child in children {
            let name = child.file_name();
            let Some(name) = name.to_str() else {
                return Err(unsafe_name(&place, &format!("{:?}", child.path()), "a name that is not UTF-8"));
            };
            if rel.is_empty() && [JOURNAL, JOURNAL_TMP, PART].contains(&name) {
                continue;
            }
            let name: String = name.nfc().collect();
            let path = if rel.is_empty() { name.clone() } else { format!("{rel}/{name}") };
            check_segment(&name).map_err(|problem| unsafe_name(&place, &path, &problem))?;
            // Two names with the same NFC form (one composed, one decomposed).
            if tree.files.contains_key(&path) || tree.dirs.contains(&path) {
                return Err(CliError::refused(
                    "NAME_COLLISION",
                    format!("{place}: {path:?} exists twice, in composed and decomposed Unicode forms"),
                    "rename one of them so that the names differ in more than normalization",
                    EXIT_USAGE,
                ));
            }
            count += 1;
            if count > limit {
                return Err(too_many(&place, limit));
            }
            let kind = child.file_type()?;
            if kind.is_symlink() {
                return Err(CliError::refused(
                    "SYMLINK",
                    format!("{place}: {path} is a symbolic link; links are not synced (they can point outside)"),
                    "replace the link with the file or folder it points to, or remove it",
                    EXIT_USAGE,
                ));
            } else if kind.is_dir() {
                stack.push((child.path(), path.clone()));
                tree.dirs.insert(path);
            } else if kind.is_file() {
                let bytes = std::fs::read(child.path())?;
                let hash = blake3::hash(&bytes).to_hex().to_string();
                tree.files.insert(path, File { path: child.path(), size: bytes.len() as u64, hash });
            } else {
                return Err(unsafe_name(&place, &path, "a special file type (not a regular file or folder)"));
            }
        }
    }
    check_collisions(tree.files.keys().chain(&tree.dirs).map(String::as_str))
        .map_err(|(a, b)| collision(&place, &a, &b))?;
    Ok(tree)
}

/// The local path of a checked relative path.
pub fn join(root: &Path, rel: &str) -> PathBuf {
    rel.split('/').fold(root.to_owned(), |path, segment| path.join(segment))
}

/// Writes `bytes` to `root/rel` through a temporary file in `root`, so the
/// file appears whole or not at all.
pub fn write_file(root: &Path, rel: &str, bytes: &[u8]) -> Result<(), CliError> {
    let part = root.join(PART);
    let mut file = std::fs::File::create(&part)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    drop(file);
    std::fs::rename(&part, join(root, rel))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_traversal_reserved_and_control_names() {
        assert!(check_relative("a/b.txt").is_ok());
        assert!(check_relative("../x").is_err());
        assert!(check_relative("a/./b").is_err());
        assert!(check_relative("a//b").is_err());
        assert!(check_relative(".agentvfs-sync.json").is_err());
        assert!(check_relative("d/.agentvfs-sync.json").is_err());
        assert!(check_relative("a\nb").is_err());
    }

    #[test]
    fn case_and_normalization_pairs_collide() {
        assert!(check_collisions(["A.txt", "b.txt"].into_iter()).is_ok());
        assert!(check_collisions(["A.txt", "a.txt"].into_iter()).is_err());
        assert!(check_collisions(["caf\u{e9}", "cafe\u{301}"].into_iter()).is_err());
    }
}
