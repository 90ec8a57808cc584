//! `pull-folder SPACE:PATH DIR [--resume]`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use agentvfs_proto::v1 as pb;

use super::journal::{self, Journal, Kind, Origin, State};
use super::{MAX_ENTRIES, local, progress, remote};
use crate::commands::Context;
use crate::errors::{CliError, EXIT_CONFLICT, EXIT_NOT_FOUND, EXIT_USAGE};
use crate::output::line;

#[derive(Debug, clap::Args)]
pub struct PullArgs {
    /// The folder: `SPACE:PATH` (e.g. `default:/docs`), or `/PATH` in `--space`.
    source: String,
    /// A local directory that does not exist yet (with --resume: the one an interrupted pull left).
    dir: PathBuf,
    /// Finish an interrupted pull into DIR; files already there are kept as they are.
    #[arg(long)]
    resume: bool,
    /// Refuse a folder with more files and folders than this (at most 10,000).
    #[arg(long, value_name = "N", default_value_t = MAX_ENTRIES, value_parser = super::max_entries)]
    max_entries: u64,
}

/// Splits `SPACE:PATH`; a path or reference alone is looked up in `space`.
fn parse_source(source: &str, space: &str) -> Result<(String, String), CliError> {
    if source.starts_with("agentvfs:") {
        return Ok((String::new(), source.to_owned()));
    }
    if source.starts_with('/') {
        return Ok((space.to_owned(), source.to_owned()));
    }
    match source.split_once(':') {
        Some((space, path)) if !space.is_empty() => {
            Ok((space.to_owned(), if path.is_empty() { "/".to_owned() } else { path.to_owned() }))
        }
        _ => Err(CliError::Usage(format!("expected SPACE:PATH (for example default:/docs) or /PATH, not {source:?}"))),
    }
}

pub async fn pull(ctx: &mut Context, args: PullArgs) -> Result<(), CliError> {
    let (space, path) = parse_source(&args.source, &ctx.space)?;
    // Checked again when the directory is created; this only saves a listing.
    if !args.resume && std::fs::symlink_metadata(&args.dir).is_ok() {
        return Err(dir_exists(&args.dir));
    }
    let request = pb::ResolveRequest { space: space.clone(), reference: path, ..Default::default() };
    let folder = ctx.client.fs.resolve(request).await?.into_inner();
    if folder.kind != pb::NodeKind::Directory as i32 {
        return Err(CliError::refused(
            "NOT_A_FOLDER",
            format!("{} is a file", folder.path),
            "give a folder; `agentvfs read` or `agentvfs ls` work on single files",
            EXIT_USAGE,
        ));
    }
    let dir = &args.dir;
    let mut journal = if args.resume {
        let journal = Journal::load(dir)?;
        if journal.origin.node_id != folder.node_id || journal.origin.space_id != folder.space_id {
            return Err(CliError::refused(
                "ORIGIN_MISMATCH",
                format!("{} was pulled from {}:{}", dir.display(), journal.origin.space, journal.origin.path),
                "resume with the same SPACE:PATH the pull started with",
                EXIT_USAGE,
            ));
        }
        if journal.state == State::Ready {
            return summary(ctx, &journal, dir, 0, 0, 0, "already pulled");
        }
        journal
    } else {
        start(ctx, &space, folder, dir, args.max_entries).await?
    };

    // The tree as it is now; refuses links and unsafe names that appeared since.
    let tree = local::walk(dir, MAX_ENTRIES)?;
    for (rel, entry) in &journal.entries {
        if entry.kind == Kind::Directory && !tree.dirs.contains(rel) {
            if tree.files.contains_key(rel) {
                return Err(local_kind_changed(dir, rel, "a file", "folder"));
            }
            std::fs::create_dir_all(local::join(dir, rel))?;
        }
    }
    let mut kept = 0;
    let mut edited = 0;
    let mut missing = Vec::new();
    for (rel, entry) in journal.entries.iter().filter(|(_, entry)| entry.kind == Kind::File) {
        match tree.files.get(rel) {
            Some(file) => {
                kept += 1;
                edited += usize::from(file.hash != entry.hash);
            }
            None if tree.dirs.contains(rel) => return Err(local_kind_changed(dir, rel, "a folder", "file")),
            None => missing.push((rel.clone(), entry.clone())),
        }
    }
    let bar = progress(missing.len() as u64, "pull", ctx.out.is_json());
    for (rel, entry) in &missing {
        bar.set_message(rel.clone());
        let remote_path = remote::path(&journal.origin.path, rel);
        let (bytes, version, hash) =
            match remote::download(&mut ctx.client, &journal.origin.space_id, &remote_path).await {
                Ok(download) => download,
                Err(CliError::Status(status)) if status.code() == tonic::Code::NotFound => {
                    return Err(source_changed(&remote_path, dir, "was deleted or moved"));
                }
                Err(error) => return Err(error),
            };
        if version != entry.version || hash != entry.hash {
            let change = format!("changed from v{} to v{version}", entry.version);
            return Err(source_changed(&remote_path, dir, &change));
        }
        if blake3::hash(&bytes).to_hex().as_str() != hash {
            return Err(CliError::Other(format!("the bytes of {remote_path} do not match their hash; try again")));
        }
        local::write_file(dir, rel, &bytes)?;
        bar.inc(1);
    }
    bar.finish_and_clear();
    journal.state = State::Ready;
    journal.save(dir)?;
    let what = if args.resume { "resumed the pull" } else { "pulled" };
    summary(ctx, &journal, dir, missing.len(), kept, edited, what)
}

/// Lists and checks the folder, creates `dir` and writes the journal of the new pull.
async fn start(
    ctx: &mut Context,
    space: &str,
    folder: pb::ResolveResponse,
    dir: &std::path::Path,
    limit: u64,
) -> Result<Journal, CliError> {
    let listed = remote::list(&mut ctx.client, &folder.space_id, &folder.path, limit).await?;
    let source = format!("{}:{}", if space.is_empty() { &folder.space_id } else { space }, folder.path);
    for rel in listed.keys() {
        local::check_relative(rel).map_err(|problem| local::unsafe_name(&source, rel, &problem))?;
    }
    local::check_collisions(listed.keys().map(String::as_str)).map_err(|(a, b)| local::collision(&source, &a, &b))?;
    if let Err(error) = std::fs::create_dir(dir) {
        return Err(match error.kind() {
            std::io::ErrorKind::AlreadyExists => dir_exists(dir),
            std::io::ErrorKind::NotFound => CliError::refused(
                "NO_PARENT",
                format!("the parent of {} does not exist", dir.display()),
                "create the parent directory first",
                EXIT_NOT_FOUND,
            ),
            _ => error.into(),
        });
    }
    let entries: BTreeMap<String, journal::Entry> = listed
        .into_iter()
        .map(|(rel, entry)| {
            let journal_entry = journal::Entry {
                kind: entry.kind,
                node_id: entry.node_id,
                version: entry.version,
                hash: entry.hash,
                size: entry.size,
            };
            (rel, journal_entry)
        })
        .collect();
    let origin = Origin {
        space_id: folder.space_id.clone(),
        space: if space.is_empty() { folder.space_id } else { space.to_owned() },
        path: folder.path,
        node_id: folder.node_id,
    };
    let journal = Journal::new(origin, entries);
    journal.save(dir)?;
    Ok(journal)
}

fn dir_exists(dir: &std::path::Path) -> CliError {
    CliError::refused(
        "DIRECTORY_EXISTS",
        format!("{} already exists", dir.display()),
        "pull into a new directory, or finish an interrupted pull with --resume",
        EXIT_CONFLICT,
    )
}

fn source_changed(remote_path: &str, dir: &std::path::Path, change: &str) -> CliError {
    CliError::refused(
        "SOURCE_CHANGED",
        format!("{remote_path} {change} during the pull; the checkout would mix two states"),
        format!("remove {} and pull again, ideally while the folder is not being edited", dir.display()),
        EXIT_CONFLICT,
    )
}

fn local_kind_changed(dir: &std::path::Path, rel: &str, found: &str, expected: &str) -> CliError {
    CliError::refused(
        "LOCAL_CONFLICT",
        format!("{}: {rel} is {found} locally but a {expected} remotely", dir.display()),
        format!("move {rel} aside and resume again"),
        EXIT_CONFLICT,
    )
}

fn summary(
    ctx: &Context,
    journal: &Journal,
    dir: &std::path::Path,
    downloaded: usize,
    kept: usize,
    edited: usize,
    what: &str,
) -> Result<(), CliError> {
    let files = journal.entries.values().filter(|entry| entry.kind == Kind::File).count();
    let folders = journal.entries.len() - files;
    let origin = format!("{}:{}", journal.origin.space, journal.origin.path);
    if ctx.out.is_json() {
        let value = serde_json::json!({ "pull": {
            "space": journal.origin.space, "spaceId": journal.origin.space_id, "path": journal.origin.path,
            "dir": dir.display().to_string(), "files": files, "folders": folders,
            "downloaded": downloaded, "kept": kept, "editedLocally": edited,
        }});
        return line(&value.to_string());
    }
    line(&format!("{what} {origin} into {}: {files} files, {folders} folders", dir.display()))?;
    if kept > 0 {
        line(&format!("downloaded {downloaded}; kept {kept} already present ({edited} edited locally)"))?;
    }
    Ok(())
}
