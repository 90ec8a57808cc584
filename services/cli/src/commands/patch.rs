//! `patch FILE`: a patch (`apply_patch` or a unified diff such as `git diff`
//! prints) checked, or applied atomically.

use std::path::PathBuf;

use agentvfs_proto::v1 as pb;

use super::{Context, read_input};
use crate::errors::CliError;
use crate::output::line;

#[derive(Debug, clap::Args)]
pub struct PatchArgs {
    /// The patch (`-` = stdin): `*** Begin Patch` … `*** End Patch`, or a
    /// unified diff of one or more files.
    patch: PathBuf,
    /// Folder the patch's relative paths are in.
    #[arg(long, value_name = "FOLDER", default_value = "/")]
    base: String,
    /// Apply atomically; without it the patch is only checked and its diff printed.
    #[arg(long, requires = "idempotency_key")]
    apply: bool,
    /// Required with --apply, so that a retried apply cannot run twice.
    #[arg(long, value_name = "KEY", default_value = "", allow_hyphen_values = true)]
    idempotency_key: String,
}

pub async fn patch(ctx: &mut Context, args: PatchArgs) -> Result<(), CliError> {
    let request = pb::ApplyPatchRequest {
        space: ctx.space.clone(),
        patch: read_input(&args.patch)?,
        base: args.base,
        dry_run: !args.apply,
        idempotency_key: args.idempotency_key,
        ..Default::default()
    };
    let response = ctx.client.fs.apply_patch(request).await?.into_inner();
    if ctx.out.is_json() {
        return ctx.out.message("ApplyPatchResponse", &response);
    }
    if !args.apply {
        print!("{}", response.diff);
    }
    for file in &response.files {
        let change = match pb::PatchChange::try_from(file.change) {
            Ok(pb::PatchChange::Added) => "add",
            Ok(pb::PatchChange::Updated) => "update",
            Ok(pb::PatchChange::Deleted) => "delete",
            Ok(pb::PatchChange::Moved) => "move",
            _ => "change",
        };
        let to = if file.new_path.is_empty() { String::new() } else { format!(" -> {}", file.new_path) };
        let version = if file.version == 0 { String::new() } else { format!(" v{}", file.version) };
        line(&format!("{change} {}{to}{version} (+{} -{})", file.path, file.lines_added, file.lines_removed))?;
    }
    if args.apply {
        line(&format!("applied {} files at revision {}", response.files.len(), response.revision))
    } else {
        line("checked: nothing applied (apply with --apply --idempotency-key KEY)")
    }
}
