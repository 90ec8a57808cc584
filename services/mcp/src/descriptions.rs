//! What the MCP client shows the model: the server's instructions and each
//! tool's description. The limits are the service defaults of SPEC §7.

pub const INSTRUCTIONS: &str = "\
agentvfs is a versioned file system shared with other agents and people. Paths are absolute (`/docs/a.md`); \
references such as `agentvfs:item:nd_…` work wherever a path does. Every change makes a new file version.

Work like this: find files with ls, find, grep (exact text, regex) or search (ranked words); read a file before \
you edit it; change part of a file with edit (dry_run: true previews the diff), a whole file with write, and the \
tree (mkdir, create, copy, rename, move, trash) with batch. This MCP connection is one agentvfs session: reading \
(or writing) a file records its version, and edit without base_version requires that record (READ_REQUIRED) and \
that the file has not changed since (FILE_MODIFIED_SINCE_READ). After either error, read the file again and redo \
the edit against what you read.

Results are JSON with the field names of the arguments (snake_case); fields at their default value (false, 0, \
empty) are left out. ls, find, grep and search return next_page_token while more remains: call the tool again \
with the same arguments plus page_token to get the next page; a result without next_page_token is the last page.

A failed call is a tool error whose JSON is {\"error\": {\"reason\", \"message\", \"next_action\", \"retryable\", \
\"metadata\"}}: reason is stable (NOT_FOUND, READ_REQUIRED, EDIT_NO_MATCH, VERSION_CONFLICT, QUOTA_EXCEEDED, …) \
and next_action says what to do next. Give write, edit and batch an idempotency_key (any string unique to the \
intended change) so that retrying after a lost answer cannot apply the change twice.";

pub const LS: &str = "\
List a directory: its files and subdirectories (with recursive: true, the whole subtree), ordered by path. \
Returns {entries: [{path, name, kind (NODE_KIND_FILE or NODE_KIND_DIRECTORY), node_id, size, version, hash, \
modified_time, is_text, system, user_modified, revision, executable, mime_type}], next_page_token, revision}: \
mime_type is text/plain for text, else the file's detected type (image/png, application/pdf, …). A page holds at most \
page_size entries (1–200, default 100). If next_page_token is present, more entries remain: call ls again with \
the same arguments plus page_token. Every page of one listing reads the same snapshot (revision).";

pub const READ: &str = "\
Read a slice of a text file: at most `limit` lines (default 200) and at most max_chars UTF-16 code units \
(default 32768, up to 131072), from line `offset` (1-based, default 1). Returns {content, path, version, hash, \
total_lines, first_line, last_line, truncated, next, size, text}: content is the original text of lines \
first_line..last_line, line terminators included. If `next` is present the file goes on: call read again with \
offset = next.start_line and start_char = next.start_char (0 when absent). With max_tokens the slice also ends at \
the last whole line within that many tokens (o200k_base, or the `tokenizer` named), and `tokens` says how many it \
holds. Text in another encoding (UTF-16, Shift_JIS, GBK, windows-1252, …) is returned decoded; text.encoding names \
it, and edits keep it. Reading records the version in this session, which edit needs. A file that is not text (up to 8 MiB) comes back whole: an image as an image \
content block, a PDF, audio or other binary file as an embedded resource with its MIME type, beside {path, \
version, hash, size, mime_type}.";

pub const READ_MANY: &str = "\
Read 1–10 files in one call, each as with read, sharing an output budget of 262144 UTF-16 code units (and of \
max_tokens tokens, when given). Returns \
{results: [{read: {…as read returns…}} or {error: {code, reason, message, metadata: {nextAction, …}}}], \
incomplete}, in the order asked; each file succeeds or fails on its own. incomplete: true means a file was cut \
(continue it with read from its next.start_line) or failed. Each successful read counts for edit as a read.";

pub const WRITE: &str = "\
Create or replace a whole text file, or append to one; missing parent directories are created. mode: overwrite \
(default) replaces the content, append adds to the end, create_new only creates (an existing file is left alone \
and the result says written: false). To change part of an existing file use edit instead. expected_version makes \
the write fail with VERSION_CONFLICT unless the file is at that version (0: it must not exist). Writing the same \
content again makes no new version. An existing file keeps its encoding (UTF-16, Shift_JIS, …) unless `encoding` \
names another; a new file is UTF-8. Returns {path, node_id, version, hash, size, total_length, created, written, \
revision}. Pass an idempotency_key so that a retry cannot write twice.";

pub const EDIT: &str = "\
Change part of a text file with exact-text edits, saved as one new version, or not at all if any edit fails. \
First read the file in this session: without base_version an edit fails with READ_REQUIRED if the file was not \
read, and with FILE_MODIFIED_SINCE_READ if it changed since; with base_version it fails with VERSION_CONFLICT \
unless the file is at that version. Edits apply in order: {type: \"replace\", old_text, new_text, \
expected_matches?, replace_all?} replaces text that must match exactly, whitespace and indentation included, \
expected_matches times (default 1): no match is EDIT_NO_MATCH (its metadata points at the closest near-miss), \
another count is EDIT_AMBIGUOUS_MATCH (add surrounding lines to old_text, or set replace_all); \
{type: \"append\", text}; {type: \"lines\", start_line, end_line, old_text, new_text} replaces an inclusive line \
range whose current text, terminators included, is old_text. With dry_run: true nothing is saved and the result \
previews the change. Returns {changed, version, previous_version, hash, size, replacements, diff (unified), \
dry_run}. Pass an idempotency_key so that a retry cannot edit twice.";

pub const FIND: &str = "\
Find files whose path matches a glob: `*`, `?`, `**`, `[abc]`, `{a,b}`; a pattern without `/` matches base names \
at any depth (`*.md` finds every Markdown file), one with `/` matches the path relative to `path`. Returns \
{matches: [{path, node_id, size, version, modified_time, mime_type}], next_page_token, revision}, ordered by path, at most \
page_size (1–200, default 100) per page. If next_page_token is present, call find again with the same arguments \
plus page_token.";

pub const GREP: &str = "\
Search file contents like ripgrep: `pattern` is a regex (Rust syntax) or, with fixed_strings, a literal; \
case-sensitive unless case_insensitive. output_mode: files_with_matches (default; returns files: [{path, version}]), \
content (returns matches: [{path, line_number, column, line, submatches, before, after, version, hash}], with \
before_context/after_context/context lines) or count (files: [{path, count}]). Narrow with path (a directory or \
one file), glob and type. One call returns one page: at most head_limit entries (default 250), at most 10 MiB \
scanned and 1000 files visited. If next_page_token is present the search is not finished, even when this page \
found nothing: call grep again with the same arguments plus page_token; complete: true marks the last page. Files \
that could not be searched (binary, too large) are listed in skipped.";

pub const SEARCH: &str = "\
Ranked full-text search over the space's index, for finding files by words when you do not know the exact text \
(use grep for exact text or regexes). Returns {hits: [{path, node_id, version, score, snippet, highlights}], \
next_page_token, index_revision}. The index follows changes shortly after they are made: a file written a moment \
ago may be missing; index_revision is the space revision it reflects. If next_page_token is present, call search \
again with the same arguments plus page_token.";

pub const BATCH: &str = "\
Preview, or apply atomically, 1–20 changes to the tree. Each action is an object with one key: {mkdir: {path}}, \
{create: {path, content}}, {edit: {path, base_version?, edits: [as for the edit tool]}}, {copy: {from, \
to_folder, name?}}, {rename: {path, new_name}}, {move: {from, to_folder, to_space?}}, {trash: {path}}. Actions run \
in order, each against the state the previous ones leave. By default (apply: false) nothing changes and the \
result previews every action. With apply: true and an idempotency_key (required) all actions apply or none do. \
Returns {outcomes: [{index, ok, summary, path, node_id, version, error}], applied_changes, atomic, applied, \
failed_index, revision}. If an action fails, the call is a tool error naming that action's reason and \
next_action, with the outcomes under batch.";

pub const APPLY_PATCH: &str = "\
Check, or apply atomically, a patch of one or more files: the apply_patch format (*** Begin Patch, *** Add File: \
PATH with + lines, *** Update File: PATH with optional *** Move to: PATH and @@ hunks of context ' ', removed '-' \
and added '+' lines, *** Delete File: PATH, *** End Patch) or a unified diff (git diff). Context lines must match \
the file exactly; a hunk that matches nowhere or twice fails the whole patch, naming the file, the hunk and the \
closest line. Deleted files go to the trash. By default (apply: false) nothing changes and the result shows every \
file's change and the resulting diff; with apply: true and an idempotency_key (required) every file changes or none \
does. Returns {files: [{path, new_path, change, previous_version, version, hunks, lines_added, lines_removed}], \
diff, dry_run, revision}.";

pub const REVERT: &str = "\
Undo changes: make a file or folder (/ for the whole space) what it was at an earlier revision, as one new \
revision; history is kept, so a revert can itself be reverted. Files whose content changed get a new version with \
the old content, renamed or moved files go back to their old paths, trashed files come back, and files created \
since go to the trash. to_revision is a revision an earlier ls, read, write or edit returned. By default (apply: \
false) nothing changes and the result lists every change the revert would make; with apply: true and an \
idempotency_key (required) they are saved together. Returns {changes: [{path, old_path, kind (CHANGE_KIND_MODIFIED, \
_RENAMED, _MOVED, _RESTORED, _TRASHED, _CREATED, _MKDIR), node_kind, node_id, from_version, to_version}], \
revision, dry_run}.";

pub const LEASE: &str = "\
Lease a file or folder (and everything below it) while you work on it, so that other agents cannot change it: \
until the lease expires (ttl_seconds, default 300, at most 3600) or you call release, their write, edit, batch, \
apply_patch and revert calls under the path fail with LEASE_HELD, while yours (every later call of this \
connection) go ahead. Reading is never blocked. Call lease again on the same path to renew it before it expires. A \
path under or above another agent's lease cannot be leased (LEASE_HELD, with the holder and when it expires). \
Returns {lease_id, path, holder, expire_time, acquire_time, revision}.";

pub const RELEASE: &str = "\
Release path leases taken with the lease tool, so that others may change those paths again: the one named by \
lease_id, or (by default) every lease this connection holds. Release a lease as soon as the work it protects is \
done. Returns {leases: [the released leases], revision}.";
