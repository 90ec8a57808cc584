//! The arguments of each MCP tool: snake_case JSON objects mirroring the
//! proto requests, with the doc comments as their schema descriptions, and
//! their mapping to the request of the one RPC each tool makes.
//!
//! `space` is optional everywhere and defaults to the server's space.

use agentvfs_proto::v1 as pb;
use schemars::JsonSchema;
use serde::Deserialize;

use crate::edits::{self, Edit};

fn space(space: Option<String>, default: &str) -> String {
    space.unwrap_or_else(|| default.to_owned())
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Ls {
    /// Space ID or name.
    pub space: Option<String>,
    /// Directory to list (path or reference); default `/`.
    #[serde(default)]
    pub path: String,
    /// List the whole subtree instead of the directory's direct children.
    #[serde(default)]
    pub recursive: bool,
    /// Only entries whose path matches this glob (`*`, `?`, `**`, `[abc]`, `{a,b}`); without `/` it matches base
    /// names at any depth.
    #[serde(default)]
    pub glob: String,
    /// Entries per page, 1–200 (default 100).
    #[schemars(range(min = 1, max = 200))]
    pub page_size: Option<u32>,
    /// The `next_page_token` of the previous page, to continue the listing (same other arguments).
    #[serde(default)]
    pub page_token: String,
    /// List the tree as of this space revision (0 = now); ignored with a page_token.
    #[serde(default)]
    pub at_revision: u64,
}

impl Ls {
    pub fn request(self, default_space: &str) -> pb::ListRequest {
        pb::ListRequest {
            space: space(self.space, default_space),
            path: self.path,
            recursive: self.recursive,
            glob: self.glob,
            page_size: self.page_size.unwrap_or(0),
            page_token: self.page_token,
            at_revision: self.at_revision,
            ..Default::default()
        }
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Read {
    /// Space ID or name.
    pub space: Option<String>,
    /// File to read (path or reference).
    pub path: String,
    /// File version to read (default: the latest).
    #[serde(default)]
    pub version: u64,
    /// First line to return, 1-based (default 1); to continue a cut read, pass `next.start_line`.
    #[serde(default)]
    pub offset: u64,
    /// Lines to return (default 200).
    #[serde(default)]
    pub limit: u64,
    /// UTF-16 offset within the first line; to continue a cut read, pass `next.start_char` (0 when absent).
    #[serde(default)]
    pub start_char: u64,
    /// Output budget in UTF-16 code units, 2–131072 (default 32768).
    #[schemars(range(min = 2, max = 131_072))]
    pub max_chars: Option<u64>,
    /// Read the file as of this space revision (0 = now).
    #[serde(default)]
    pub at_revision: u64,
    /// Output budget in tokens (at least 4): the text ends at the last whole line that fits, and `next` continues.
    pub max_tokens: Option<u64>,
    /// Vocabulary `max_tokens` counts in: `o200k_base` (default) or `cl100k_base`.
    #[serde(default)]
    pub tokenizer: Tokenizer,
}

/// A vocabulary to count tokens in.
#[derive(Debug, Default, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Tokenizer {
    /// GPT-4o and later.
    #[default]
    O200kBase,
    /// GPT-4 and GPT-3.5.
    Cl100kBase,
}

impl Tokenizer {
    fn name(self) -> String {
        match self {
            Tokenizer::O200kBase => "o200k_base",
            Tokenizer::Cl100kBase => "cl100k_base",
        }
        .to_owned()
    }
}

impl Read {
    pub fn request(self, default_space: &str) -> pb::ReadRequest {
        pb::ReadRequest {
            space: space(self.space, default_space),
            path: self.path,
            version: self.version,
            offset: self.offset,
            limit: self.limit,
            start_char: self.start_char,
            max_chars: self.max_chars.unwrap_or(0),
            at_revision: self.at_revision,
            // Images, PDFs and audio come back as what they are.
            media: true,
            max_tokens: self.max_tokens.unwrap_or(0),
            tokenizer: self.tokenizer.name(),
            ..Default::default()
        }
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadMany {
    /// Space ID or name.
    pub space: Option<String>,
    /// 1–10 files to read; together they share an output budget of 262144 UTF-16 code units.
    #[schemars(length(min = 1, max = 10))]
    pub reads: Vec<ReadItem>,
    /// A budget in tokens (at least 4) shared by all the reads.
    pub max_tokens: Option<u64>,
    /// Vocabulary `max_tokens` counts in: `o200k_base` (default) or `cl100k_base`.
    #[serde(default)]
    pub tokenizer: Tokenizer,
}

/// One file of a `read_many` call.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadItem {
    /// File to read (path or reference).
    pub path: String,
    /// File version to read (default: the latest).
    #[serde(default)]
    pub version: u64,
    /// First line to return, 1-based (default 1).
    #[serde(default)]
    pub offset: u64,
    /// Lines to return (default 200).
    #[serde(default)]
    pub limit: u64,
    /// UTF-16 offset within the first line.
    #[serde(default)]
    pub start_char: u64,
    /// Output budget for this file in UTF-16 code units, 2–131072 (default 32768).
    #[schemars(range(min = 2, max = 131_072))]
    pub max_chars: Option<u64>,
}

impl ReadMany {
    pub fn request(self, default_space: &str) -> pb::ReadManyRequest {
        let reads = self
            .reads
            .into_iter()
            .map(|read| pb::ReadRequest {
                path: read.path,
                version: read.version,
                offset: read.offset,
                limit: read.limit,
                start_char: read.start_char,
                max_chars: read.max_chars.unwrap_or(0),
                ..Default::default()
            })
            .collect();
        pb::ReadManyRequest {
            space: space(self.space, default_space),
            reads,
            max_tokens: self.max_tokens.unwrap_or(0),
            tokenizer: self.tokenizer.name(),
        }
    }
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum WriteMode {
    /// Replace the whole content; creates the file when missing.
    #[default]
    Overwrite,
    /// Add to the end; creates the file when missing.
    Append,
    /// Create only: an existing file is left alone and reported with `written: false`.
    CreateNew,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Write {
    /// Space ID or name.
    pub space: Option<String>,
    /// File to write (path or reference); missing parent directories are created.
    pub path: String,
    /// The text to store, exactly as given (at most 5 MiB).
    pub content: String,
    /// `overwrite` (default), `append` or `create_new`.
    #[serde(default)]
    pub mode: WriteMode,
    /// Fail with VERSION_CONFLICT unless the file's latest version is this one (0 = the file must not exist yet).
    pub expected_version: Option<u64>,
    /// Any string unique to this intended change: a retry with the same key and arguments returns the first
    /// result instead of writing again.
    #[serde(default)]
    pub idempotency_key: String,
    /// Encoding to store the text in (`utf-8`, `shift_jis`, `utf-16le`, `gb18030`, `windows-1252`, …); by default
    /// an existing file keeps its encoding and a new file is UTF-8.
    pub encoding: Option<String>,
}

impl Write {
    pub fn request(self, default_space: &str) -> pb::WriteRequest {
        let mode = match self.mode {
            WriteMode::Overwrite => pb::WriteMode::Overwrite,
            WriteMode::Append => pb::WriteMode::Append,
            WriteMode::CreateNew => pb::WriteMode::CreateNew,
        };
        pb::WriteRequest {
            space: space(self.space, default_space),
            path: self.path,
            body: Some(pb::write_request::Body::Content(self.content)),
            mode: mode as i32,
            expected_version: self.expected_version,
            idempotency_key: self.idempotency_key,
            encoding: self.encoding.unwrap_or_default(),
            ..Default::default()
        }
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EditFile {
    /// Space ID or name.
    pub space: Option<String>,
    /// File to edit (path or reference).
    pub path: String,
    /// Ordered edits, checked together and saved as one new version, or not at all.
    #[schemars(length(min = 1))]
    pub edits: Vec<Edit>,
    /// The version the edits were written against; fails with VERSION_CONFLICT if the file is at another. Without
    /// it, this session must have read the file (READ_REQUIRED) and the file must not have changed since
    /// (FILE_MODIFIED_SINCE_READ).
    pub base_version: Option<u64>,
    /// Preview only: compute the result and its diff, save nothing.
    #[serde(default)]
    pub dry_run: bool,
    /// Any string unique to this intended change: a retry with the same key and arguments returns the first
    /// result instead of editing twice.
    #[serde(default)]
    pub idempotency_key: String,
}

impl EditFile {
    pub fn request(self, default_space: &str) -> pb::EditRequest {
        pb::EditRequest {
            space: space(self.space, default_space),
            path: self.path,
            base_version: self.base_version,
            edits: self.edits.into_iter().map(edits::to_proto).collect(),
            dry_run: self.dry_run,
            idempotency_key: self.idempotency_key,
            ..Default::default()
        }
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Find {
    /// Space ID or name.
    pub space: Option<String>,
    /// Glob over file paths (`*`, `?`, `**`, `[abc]`, `{a,b}`); without `/` it matches base names at any depth
    /// (`*.md` finds every Markdown file), with `/` the path relative to `path`. Empty matches every file.
    #[serde(default)]
    pub pattern: String,
    /// Root directory (path or reference); default `/`.
    #[serde(default)]
    pub path: String,
    /// Files per page, 1–200 (default 100).
    #[schemars(range(min = 1, max = 200))]
    pub page_size: Option<u32>,
    /// The `next_page_token` of the previous page, to continue (same other arguments).
    #[serde(default)]
    pub page_token: String,
    /// Search the tree as of this space revision (0 = now); ignored with a page_token.
    #[serde(default)]
    pub at_revision: u64,
}

impl Find {
    pub fn request(self, default_space: &str) -> pb::FindRequest {
        pb::FindRequest {
            space: space(self.space, default_space),
            pattern: self.pattern,
            path: self.path,
            page_size: self.page_size.unwrap_or(0),
            page_token: self.page_token,
            at_revision: self.at_revision,
            ..Default::default()
        }
    }
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum GrepOutputMode {
    /// The paths of matching files (in `files`).
    #[default]
    FilesWithMatches,
    /// Matching lines with line number, column, submatches and context (in `matches`).
    Content,
    /// The number of matching lines per file (in `files`).
    Count,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Grep {
    /// Space ID or name.
    pub space: Option<String>,
    /// A regular expression (Rust regex syntax, like ripgrep), or a literal with `fixed_strings`.
    pub pattern: String,
    /// Root directory or a single file (path or reference); default `/`.
    #[serde(default)]
    pub path: String,
    /// Only files whose path matches this glob; without `/` it matches base names (`*.rs`).
    #[serde(default)]
    pub glob: String,
    /// Only files of these ripgrep file types (`rust`, `py`, `js`, `md`, …).
    #[serde(default, rename = "type")]
    pub types: Vec<String>,
    /// Treat the pattern as a literal string.
    #[serde(default)]
    pub fixed_strings: bool,
    /// Match case-insensitively.
    #[serde(default)]
    pub case_insensitive: bool,
    /// `.` matches newlines and matches may span lines.
    #[serde(default)]
    pub multiline: bool,
    /// `files_with_matches` (default), `content` or `count`.
    #[serde(default)]
    pub output_mode: GrepOutputMode,
    /// Report line numbers in `content` mode (default true).
    pub line_numbers: Option<bool>,
    /// Lines of context before each match (`content` mode).
    #[serde(default)]
    pub before_context: u32,
    /// Lines of context after each match (`content` mode).
    #[serde(default)]
    pub after_context: u32,
    /// Lines of context before and after each match (`content` mode).
    #[serde(default)]
    pub context: u32,
    /// Entries per page (default 250; 0 = as many as the page's scan budget allows).
    pub head_limit: Option<u32>,
    /// Skip the first N entries of the whole result.
    #[serde(default)]
    pub offset: u64,
    /// The `next_page_token` of the previous page, to continue the search (same other arguments).
    #[serde(default)]
    pub page_token: String,
    /// Search the tree as of this space revision (0 = now); ignored with a page_token.
    #[serde(default)]
    pub at_revision: u64,
    /// `content` mode: a page's budget in tokens (at least 4) over its matches' lines and context; the page ends
    /// before the match that would go over it (it holds at least one).
    pub max_tokens: Option<u64>,
    /// Vocabulary `max_tokens` counts in: `o200k_base` (default) or `cl100k_base`.
    #[serde(default)]
    pub tokenizer: Tokenizer,
}

impl Grep {
    pub fn request(self, default_space: &str) -> pb::GrepRequest {
        let mode = match self.output_mode {
            GrepOutputMode::FilesWithMatches => pb::GrepOutputMode::FilesWithMatches,
            GrepOutputMode::Content => pb::GrepOutputMode::Content,
            GrepOutputMode::Count => pb::GrepOutputMode::Count,
        };
        pb::GrepRequest {
            space: space(self.space, default_space),
            pattern: self.pattern,
            path: self.path,
            glob: self.glob,
            r#type: self.types,
            fixed_strings: self.fixed_strings,
            case_insensitive: self.case_insensitive,
            multiline: self.multiline,
            output_mode: mode as i32,
            line_numbers: self.line_numbers,
            before_context: self.before_context,
            after_context: self.after_context,
            context: self.context,
            head_limit: self.head_limit,
            offset: self.offset,
            page_token: self.page_token,
            at_revision: self.at_revision,
            max_tokens: self.max_tokens.unwrap_or(0),
            tokenizer: self.tokenizer.name(),
            ..Default::default()
        }
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Search {
    /// Space ID or name.
    pub space: Option<String>,
    /// Full-text query: words, ranked by relevance.
    pub query: String,
    /// Only files below this directory (path or reference).
    #[serde(default)]
    pub path: String,
    /// Only files whose path matches this glob.
    #[serde(default)]
    pub glob: String,
    /// Hits per page (0 = the server default).
    pub page_size: Option<u32>,
    /// The `next_page_token` of the previous page, to continue (same other arguments).
    #[serde(default)]
    pub page_token: String,
}

impl Search {
    pub fn request(self, default_space: &str) -> pb::SearchRequest {
        pb::SearchRequest {
            space: space(self.space, default_space),
            query: self.query,
            path: self.path,
            glob: self.glob,
            page_size: self.page_size.unwrap_or(0),
            page_token: self.page_token,
            ..Default::default()
        }
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Batch {
    /// Space ID or name.
    pub space: Option<String>,
    /// 1–20 actions, run in order against the state the previous ones leave.
    #[schemars(length(min = 1, max = 20))]
    pub actions: Vec<Action>,
    /// Apply the actions atomically (all or none); false (the default) only previews them. Applying requires an
    /// `idempotency_key`.
    #[serde(default)]
    pub apply: bool,
    /// Any string unique to this intended change; required with `apply`, so that a retry cannot apply twice.
    #[serde(default)]
    pub idempotency_key: String,
    /// Acknowledge that a cross-space move changes who can see the content.
    #[serde(default)]
    pub confirm_access: bool,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ApplyPatch {
    /// Space ID or name.
    pub space: Option<String>,
    /// The patch: `*** Begin Patch` … `*** End Patch` (apply_patch), or a unified diff of one or more files.
    pub patch: String,
    /// Folder the patch's relative paths are in (default `/`).
    #[serde(default)]
    pub base: String,
    /// Apply the patch atomically (every file or none); false (the default) only checks it and returns the
    /// resulting diff. Applying requires an `idempotency_key`.
    #[serde(default)]
    pub apply: bool,
    /// Any string unique to this intended change; required with `apply`, so that a retry cannot apply twice.
    #[serde(default)]
    pub idempotency_key: String,
}

impl ApplyPatch {
    pub fn request(self, default_space: &str) -> pb::ApplyPatchRequest {
        pb::ApplyPatchRequest {
            space: space(self.space, default_space),
            patch: self.patch,
            base: self.base,
            dry_run: !self.apply,
            idempotency_key: self.idempotency_key,
            ..Default::default()
        }
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Revert {
    /// Space ID or name.
    pub space: Option<String>,
    /// The file or folder to revert; `/` for the whole space.
    pub path: String,
    /// The revision whose state the path takes: a `revision` an earlier ls, read, write or edit returned.
    pub to_revision: u64,
    /// Save the revert as one new revision; false (the default) only lists the changes it would make.
    /// Applying requires an `idempotency_key`.
    #[serde(default)]
    pub apply: bool,
    /// Any string unique to this intended change; required with `apply`, so that a retry cannot apply twice.
    #[serde(default)]
    pub idempotency_key: String,
}

impl Revert {
    pub fn request(self, default_space: &str) -> pb::RevertRequest {
        pb::RevertRequest {
            space: space(self.space, default_space),
            path: self.path,
            to_revision: self.to_revision,
            dry_run: !self.apply,
            idempotency_key: self.idempotency_key,
            ..Default::default()
        }
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Lease {
    /// Space ID or name.
    pub space: Option<String>,
    /// The file or folder; the lease covers everything below it.
    pub path: String,
    /// Seconds until the lease expires (1–3600, default 300); call lease again on the same path to renew it.
    #[serde(default)]
    pub ttl_seconds: Option<u64>,
}

impl Lease {
    pub fn request(self, default_space: &str) -> pb::AcquireLeaseRequest {
        pb::AcquireLeaseRequest {
            space: space(self.space, default_space),
            path: self.path,
            ttl_seconds: self.ttl_seconds.unwrap_or(300),
            ..Default::default()
        }
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Release {
    /// Space ID or name.
    pub space: Option<String>,
    /// The lease to end; empty (the default) ends every lease this session holds.
    #[serde(default)]
    pub lease_id: String,
}

/// One structural action: an object with exactly one key naming the action.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Action {
    /// Create a directory (and missing parents).
    Mkdir {
        /// The new directory's path.
        path: String,
    },
    /// Create a file; fails if it exists.
    Create {
        /// The new file's path.
        path: String,
        /// Its text.
        #[serde(default)]
        content: String,
    },
    /// Edit a file, with the same edits as the `edit` tool.
    Edit {
        /// The file's path or reference.
        path: String,
        /// The version the edits were written against; without it the session must have read the file.
        base_version: Option<u64>,
        /// Ordered edits.
        edits: Vec<Edit>,
    },
    /// Copy a file or directory into a folder.
    Copy {
        /// What to copy (path or reference).
        from: String,
        /// Destination folder; must exist.
        to_folder: String,
        /// New name (default: the source's name).
        #[serde(default)]
        name: String,
    },
    /// Rename a file or directory in place.
    Rename {
        /// What to rename (path or reference).
        path: String,
        /// The new name (one path segment).
        new_name: String,
    },
    /// Move a file or directory into another folder.
    Move {
        /// What to move (path or reference).
        from: String,
        /// Destination folder; must exist.
        to_folder: String,
        /// Destination space for a cross-space move (needs `confirm_access`).
        #[serde(default)]
        to_space: String,
    },
    /// Move a file or directory to the trash (restorable by an operator).
    Trash {
        /// What to trash (path or reference).
        path: String,
    },
}

impl Batch {
    pub fn request(self, default_space: &str) -> pb::BatchRequest {
        pb::BatchRequest {
            space: space(self.space, default_space),
            actions: self.actions.into_iter().map(Action::into_proto).collect(),
            apply: self.apply,
            idempotency_key: self.idempotency_key,
            confirm_access: self.confirm_access,
            ..Default::default()
        }
    }
}

impl Action {
    fn into_proto(self) -> pb::BatchAction {
        use pb::batch_action::Action as A;
        let action = match self {
            Action::Mkdir { path } => A::Mkdir(pb::MkdirAction { path }),
            Action::Create { path, content } => A::Create(pb::CreateAction { path, content }),
            Action::Edit { path, base_version, edits } => {
                A::Edit(pb::EditAction { path, base_version, edits: edits.into_iter().map(edits::to_proto).collect() })
            }
            Action::Copy { from, to_folder, name } => A::Copy(pb::CopyAction { from, to_folder, name }),
            Action::Rename { path, new_name } => A::Rename(pb::RenameAction { path, new_name }),
            Action::Move { from, to_folder, to_space } => A::Move(pb::MoveAction { from, to_folder, to_space }),
            Action::Trash { path } => A::Trash(pb::TrashAction { path }),
        };
        pb::BatchAction { action: Some(action) }
    }
}
