//! `ls`, `read`, `read-many`, `write`, `edit` and `resolve`.

use std::io::Read as _;
use std::path::PathBuf;

use agentvfs_proto::v1 as pb;

use super::{Context, Paging, TokenArgs, edits, read_input};
use crate::errors::{CliError, NEXT_ACTIONS, exit_code_for, spell_next_action};
use crate::output::{self, line, note};

#[derive(Debug, clap::Args)]
pub struct LsArgs {
    /// Directory (path or reference); default `/`.
    path: Option<String>,
    /// List the whole subtree.
    #[arg(long, short = 'R')]
    recursive: bool,
    /// Only entries whose path matches this glob.
    #[arg(long, default_value = "")]
    glob: String,
    #[command(flatten)]
    paging: Paging,
}

pub async fn ls(ctx: &mut Context, args: LsArgs) -> Result<(), CliError> {
    let mut token = args.paging.page_token.clone();
    loop {
        let request = pb::ListRequest {
            space: ctx.space.clone(),
            path: args.path.clone().unwrap_or_default(),
            recursive: args.recursive,
            glob: args.glob.clone(),
            page_size: args.paging.page_size,
            page_token: token,
            ..Default::default()
        };
        let page = ctx.client.fs.list(request).await?.into_inner();
        if ctx.out.is_json() {
            ctx.out.message("ListResponse", &page)?;
        } else {
            for entry in &page.entries {
                line(&entry_line(entry))?;
            }
        }
        match args.paging.follow(&ctx.out, &page.next_page_token) {
            Some(next) => token = next,
            None => return Ok(()),
        }
    }
}

/// `d  -  -  /docs/` or `f  12  v3  /docs/a.md`: kind, bytes, version, path.
fn entry_line(entry: &pb::Entry) -> String {
    if entry.kind == pb::NodeKind::Directory as i32 {
        format!("d {:>10} {:>5} {}/", "-", "-", entry.path.trim_end_matches('/'))
    } else {
        format!("f {:>10} {:>5} {}", entry.size, format!("v{}", entry.version), entry.path)
    }
}

#[derive(Debug, clap::Args)]
pub struct ReadArgs {
    /// File (path or reference).
    path: String,
    /// Lines `A:B` (1-based, inclusive), or `A:` from line A on.
    #[arg(long, value_name = "A:B")]
    lines: Option<String>,
    /// File version (default: the latest).
    #[arg(long, value_name = "N", default_value_t = 0)]
    version: u64,
    /// Output budget in UTF-16 code units (default: the server's, 32,768).
    #[arg(long, value_name = "N", default_value_t = 0)]
    max_chars: u64,
    #[command(flatten)]
    tokens: TokenArgs,
}

pub async fn read(ctx: &mut Context, args: ReadArgs) -> Result<(), CliError> {
    let (offset, limit) = match &args.lines {
        Some(lines) => parse_lines(lines)?,
        None => (0, 0),
    };
    let request = pb::ReadRequest {
        space: ctx.space.clone(),
        path: args.path,
        version: args.version,
        offset,
        limit,
        max_chars: args.max_chars,
        max_tokens: args.tokens.max_tokens,
        tokenizer: args.tokens.tokenizer,
        ..Default::default()
    };
    let response = ctx.client.fs.read(request).await?.into_inner();
    if ctx.out.is_json() {
        return ctx.out.message("ReadResponse", &response);
    }
    output::text(&response.content)?;
    note_more(&response);
    Ok(())
}

/// Says where a cut read continues, so that the rest is not lost unnoticed.
fn note_more(response: &pb::ReadResponse) {
    if let Some(next) = &response.next {
        let cut = if next.start_char > 0 {
            format!(" (line cut at UTF-16 offset {})", next.start_char)
        } else {
            String::new()
        };
        note(&format!(
            "{}: lines {}-{} of {}; more from line {}{cut}",
            response.path, response.first_line, response.last_line, response.total_lines, next.start_line
        ));
    }
}

/// `A:B` → offset A, limit B-A+1; `A:` → offset A, the server's default limit.
fn parse_lines(lines: &str) -> Result<(u64, u64), CliError> {
    let bad = || CliError::Usage(format!("--lines expects A:B with 1 <= A <= B, not {lines:?}"));
    let (start, end) = lines.split_once(':').ok_or_else(bad)?;
    let start: u64 = start.parse().map_err(|_| bad())?;
    if start == 0 {
        return Err(bad());
    }
    if end.is_empty() {
        return Ok((start, 0));
    }
    let end: u64 = end.parse().map_err(|_| bad())?;
    if end < start {
        return Err(bad());
    }
    Ok((start, end - start + 1))
}

#[derive(Debug, clap::Args)]
pub struct ReadManyArgs {
    /// 1–10 files (paths or references).
    #[arg(required = true)]
    paths: Vec<String>,
    /// Output budget per file in UTF-16 code units.
    #[arg(long, value_name = "N", default_value_t = 0)]
    max_chars: u64,
    /// `--max-tokens` is a budget shared by all the files.
    #[command(flatten)]
    tokens: TokenArgs,
}

/// Prints each file under a `==> path <==` header; failed reads are reported
/// on stderr and make the exit status that of the first failure.
pub async fn read_many(ctx: &mut Context, args: ReadManyArgs) -> Result<(), CliError> {
    let reads = args
        .paths
        .iter()
        .map(|path| pb::ReadRequest { path: path.clone(), max_chars: args.max_chars, ..Default::default() })
        .collect();
    let request = pb::ReadManyRequest {
        space: ctx.space.clone(),
        reads,
        max_tokens: args.tokens.max_tokens,
        tokenizer: args.tokens.tokenizer,
    };
    let mut response = ctx.client.fs.read_many(request).await?.into_inner();
    for result in &mut response.results {
        if let Some(pb::read_many_result::Outcome::Error(error)) = &mut result.outcome
            && let Some(next) = spell_next_action(NEXT_ACTIONS, &error.reason, "read-many", &error.metadata)
        {
            error.metadata.insert("nextAction".to_owned(), next);
        }
    }
    if ctx.out.is_json() {
        ctx.out.message("ReadManyResponse", &response)?;
    }
    let mut first_failure = None;
    for (result, path) in response.results.iter().zip(&args.paths) {
        match &result.outcome {
            Some(pb::read_many_result::Outcome::Read(read)) if !ctx.out.is_json() => {
                line(&format!("==> {} <==", read.path))?;
                output::text(&read.content)?;
                note_more(read);
            }
            Some(pb::read_many_result::Outcome::Error(error)) => {
                if !ctx.out.is_json() {
                    note(&format!("error: {path}: {}: {}", error.reason, error.message));
                    if let Some(next) = error.metadata.get("nextAction") {
                        note(&format!("next: {next}"));
                    }
                }
                first_failure.get_or_insert(exit_code_for(tonic::Code::from(error.code)));
            }
            _ => {}
        }
    }
    match first_failure {
        Some(code) => Err(CliError::Failed(code)),
        None => Ok(()),
    }
}

#[derive(Debug, clap::Args)]
pub struct WriteArgs {
    /// File (path or reference).
    path: String,
    /// The content; without it, stdin is written (bytes that are not UTF-8 are stored as they are).
    /// An overwrite of more than 1 MiB is streamed, as an upload.
    #[arg(long, allow_hyphen_values = true)]
    content: Option<String>,
    /// Add to the end of the file.
    #[arg(long, conflicts_with = "create_new")]
    append: bool,
    /// Only create: an existing file is left alone.
    #[arg(long)]
    create_new: bool,
    /// Fail unless the latest version is N (0 = the file must not exist).
    #[arg(long, value_name = "N")]
    expected_version: Option<u64>,
    /// Set (true) or clear (false) the executable bit; without it the file keeps its bit.
    #[arg(long, value_name = "BOOL")]
    executable: Option<bool>,
    /// Store the text in this encoding (utf-8, shift_jis, utf-16le, gb18030, windows-1252, …);
    /// without it an existing file keeps its encoding and a new file is UTF-8.
    #[arg(long, value_name = "LABEL", default_value = "")]
    encoding: String,
    #[arg(long, value_name = "KEY", default_value = "", allow_hyphen_values = true)]
    idempotency_key: String,
}

pub async fn write(ctx: &mut Context, args: WriteArgs) -> Result<(), CliError> {
    use pb::write_request::Body;
    let body = match args.content {
        Some(content) => Body::Content(content),
        None => {
            let mut bytes = Vec::new();
            std::io::stdin().read_to_end(&mut bytes)?;
            match String::from_utf8(bytes) {
                Ok(text) => Body::Content(text),
                Err(error) => Body::Data(error.into_bytes()),
            }
        }
    };
    let mode = if args.append {
        pb::WriteMode::Append
    } else if args.create_new {
        pb::WriteMode::CreateNew
    } else {
        pb::WriteMode::Overwrite
    };
    let size = match &body {
        Body::Content(text) => text.len(),
        Body::Data(bytes) => bytes.len(),
    };
    if !args.encoding.is_empty() && matches!(body, Body::Data(_)) {
        return Err(CliError::Usage("--encoding takes text; stdin is not UTF-8".to_owned()));
    }
    if mode == pb::WriteMode::Overwrite && size > UPLOAD_OVER && args.encoding.is_empty() {
        return upload(ctx, args.path, body, args.expected_version, args.executable, args.idempotency_key).await;
    }
    let request = pb::WriteRequest {
        space: ctx.space.clone(),
        path: args.path,
        body: Some(body),
        mode: mode as i32,
        expected_version: args.expected_version,
        executable: args.executable,
        idempotency_key: args.idempotency_key,
        encoding: args.encoding,
        ..Default::default()
    };
    let response = ctx.client.fs.write(request).await?.into_inner();
    if ctx.out.is_json() {
        return ctx.out.message("WriteResponse", &response);
    }
    let what = match (response.written, response.created) {
        (false, _) => "exists, not written:",
        (true, true) => "created",
        (true, false) => "wrote",
    };
    line(&format!("{what} {} v{} ({} bytes)", response.path, response.version, response.size))
}

/// Content over this many bytes is overwritten through `Upload`, which
/// streams it, rather than in one `Write` message (limited to 8 MiB).
const UPLOAD_OVER: usize = 1 << 20;

/// `write` of large content: an upload of the same bytes, with the same
/// conditions.
async fn upload(
    ctx: &mut Context,
    path: String,
    body: pb::write_request::Body,
    expected_version: Option<u64>,
    executable: Option<bool>,
    idempotency_key: String,
) -> Result<(), CliError> {
    let bytes = match body {
        pb::write_request::Body::Content(text) => text.into_bytes(),
        pb::write_request::Body::Data(bytes) => bytes,
    };
    let header = pb::UploadHeader {
        space: ctx.space.clone(),
        path: path.clone(),
        expected_version,
        executable,
        idempotency_key,
        ..Default::default()
    };
    let chunks = crate::sync::remote::upload_chunks(header, &bytes);
    let response = ctx.client.fs.upload(tokio_stream::iter(chunks)).await?.into_inner();
    if ctx.out.is_json() {
        return ctx.out.message("UploadResponse", &response);
    }
    let what = if response.created { "created" } else { "wrote" };
    line(&format!("{what} {path} v{} ({} bytes)", response.version, response.size))
}

#[derive(Debug, clap::Args)]
pub struct EditArgs {
    /// File (path or reference).
    path: String,
    /// JSON array of edits (`-` = stdin): {"type":"replace","old_text","new_text",
    /// "expected_matches","replace_all"}, {"type":"append","text"},
    /// {"type":"lines","start_line","end_line","old_text","new_text"}.
    #[arg(long, value_name = "FILE")]
    patch: PathBuf,
    /// The version the edits were written against: the edit fails if the
    /// file is at another. Without it (and without --session) the edits
    /// apply to the latest version, whose diff is printed.
    #[arg(long, value_name = "N")]
    version: Option<u64>,
    /// Save the change; without it the edit is only previewed.
    #[arg(long, requires = "idempotency_key")]
    apply: bool,
    /// Required with --apply, so that a retried apply cannot edit twice.
    #[arg(long, value_name = "KEY", default_value = "", allow_hyphen_values = true)]
    idempotency_key: String,
}

pub async fn edit(ctx: &mut Context, args: EditArgs) -> Result<(), CliError> {
    let edits = edits::parse(&read_input(&args.patch)?)?;
    // The front lets an edit go ahead against a version the caller names, or
    // one its session read. Each run of this command is a new call with no
    // session unless --session is given, so without --version it reads which
    // version is the latest and edits that: the edits themselves must still
    // match its text exactly, and the diff printed shows what they change.
    let base_version = match args.version {
        Some(version) => Some(version),
        None if ctx.session => None,
        None => latest_version(ctx, &args.path).await?,
    };
    let request = pb::EditRequest {
        space: ctx.space.clone(),
        path: args.path,
        base_version,
        edits,
        dry_run: !args.apply,
        idempotency_key: args.idempotency_key,
        ..Default::default()
    };
    let response = ctx.client.fs.edit(request).await?.into_inner();
    if ctx.out.is_json() {
        return ctx.out.message("EditResponse", &response);
    }
    output::text(&response.diff)?;
    let summary = if !response.changed {
        format!("unchanged: v{}", response.version)
    } else if response.dry_run && args.version.is_none() && !ctx.session {
        format!(
            "preview of an edit to v{0}: nothing saved (save with --apply --idempotency-key KEY; \
             add --version {0} to refuse if the file changes first)",
            response.version
        )
    } else if response.dry_run {
        format!("preview of an edit to v{}: nothing saved (save with --apply --idempotency-key KEY)", response.version)
    } else {
        format!("applied: v{} -> v{}", response.previous_version, response.version)
    };
    line(&summary)
}

/// The latest version of the file at `path`, or `None` for a directory
/// (whose edit the front refuses as it would any other).
async fn latest_version(ctx: &mut Context, path: &str) -> Result<Option<u64>, CliError> {
    let request = pb::ResolveRequest { space: ctx.space.clone(), reference: path.to_owned(), ..Default::default() };
    let resolved = ctx.client.fs.resolve(request).await?.into_inner();
    Ok((resolved.kind != pb::NodeKind::Directory as i32).then_some(resolved.version))
}

#[derive(Debug, clap::Args)]
pub struct ResolveArgs {
    /// A path or reference (`agentvfs:item:…`, `agentvfs://…`).
    reference: String,
}

pub async fn resolve(ctx: &mut Context, args: ResolveArgs) -> Result<(), CliError> {
    let request = pb::ResolveRequest { space: ctx.space.clone(), reference: args.reference, ..Default::default() };
    let response = ctx.client.fs.resolve(request).await?.into_inner();
    if ctx.out.is_json() {
        return ctx.out.message("ResolveResponse", &response);
    }
    let kind = if response.kind == pb::NodeKind::Directory as i32 { "directory" } else { "file" };
    let rights = response.capabilities.map_or_else(String::new, |c| {
        [(c.read, "read"), (c.write, "write"), (c.admin, "admin")]
            .iter()
            .filter(|(has, _)| *has)
            .map(|(_, name)| *name)
            .collect::<Vec<_>>()
            .join(",")
    });
    line(&format!("path: {}", response.path))?;
    line(&format!("kind: {kind}"))?;
    if response.kind != pb::NodeKind::Directory as i32 {
        line(&format!("version: {}", response.version))?;
        line(&format!("size: {}", response.size))?;
    }
    line(&format!("reference: {}", response.canonical_reference))?;
    line(&format!("uri: {}", response.uri))?;
    line(&format!("space: {}", response.space_id))?;
    line(&format!("rights: {rights}"))?;
    line(&format!("revision: {}", response.revision))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::{LsArgs, WriteArgs, parse_lines};

    #[test]
    fn lines_are_offset_and_limit() {
        assert_eq!(parse_lines("3:5").unwrap(), (3, 3));
        assert_eq!(parse_lines("7:").unwrap(), (7, 0));
        assert!(parse_lines("0:2").is_err());
        assert!(parse_lines("5:3").is_err());
        assert!(parse_lines("x").is_err());
    }

    /// Page tokens are base64url, and contents and idempotency keys are the
    /// caller's: any of them may begin with `-` and is still a value.
    #[test]
    fn values_that_begin_with_a_dash_are_values() {
        use clap::Parser;
        #[derive(Parser)]
        enum Command {
            Ls(LsArgs),
            Write(WriteArgs),
        }
        let parse = |args: &[&str]| Command::try_parse_from(["agentvfs"].iter().chain(args)).unwrap();
        let Command::Ls(ls) = parse(&["ls", "--page-token", "-owyYmPtM", "--all"]) else { panic!("not ls") };
        assert_eq!((ls.paging.page_token.as_str(), ls.paging.all), ("-owyYmPtM", true));
        let Command::Write(write) = parse(&["write", "/list.md", "--content", "- item", "--idempotency-key", "-k"])
        else {
            panic!("not write")
        };
        assert_eq!((write.content.as_deref(), write.idempotency_key.as_str()), (Some("- item"), "-k"));
    }
}
