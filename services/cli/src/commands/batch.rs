//! `batch actions.json`: structural changes previewed, or applied atomically.

use std::path::PathBuf;

use agentvfs_proto::v1 as pb;

use super::{Context, proto_json_array, read_input};
use crate::errors::CliError;
use crate::output::line;

#[derive(Debug, clap::Args)]
pub struct BatchArgs {
    /// JSON array (`-` = stdin) of 1–20 `BatchAction`s in proto JSON, e.g.
    /// {"mkdir":{"path":"/a"}}, {"create":{"path":"/a/b.md","content":"…"}},
    /// {"rename":{"path":"/a","newName":"c"}}, {"trash":{"path":"/x"}}.
    actions: PathBuf,
    /// Apply atomically; without it the actions are only previewed.
    #[arg(long, requires = "idempotency_key")]
    apply: bool,
    /// Required with --apply, so that a retried apply cannot run twice.
    #[arg(long, value_name = "KEY", default_value = "", allow_hyphen_values = true)]
    idempotency_key: String,
    /// Acknowledge that a cross-space move changes who can see the content.
    #[arg(long)]
    confirm_access: bool,
}

pub async fn batch(ctx: &mut Context, args: BatchArgs) -> Result<(), CliError> {
    let actions: Vec<pb::BatchAction> = proto_json_array(&read_input(&args.actions)?, "BatchAction")?;
    let request = pb::BatchRequest {
        space: ctx.space.clone(),
        actions,
        apply: args.apply,
        idempotency_key: args.idempotency_key,
        confirm_access: args.confirm_access,
        ..Default::default()
    };
    let response = ctx.client.fs.batch(request).await?.into_inner();
    if ctx.out.is_json() {
        return ctx.out.message("BatchResponse", &response);
    }
    for outcome in &response.outcomes {
        let status = if outcome.ok { "ok" } else { "FAILED" };
        let error = outcome.error.as_ref().map_or_else(String::new, |e| format!(" ({}: {})", e.reason, e.message));
        line(&format!("#{} {status}: {}{error}", outcome.index, outcome.summary))?;
    }
    let summary = if response.applied_changes {
        format!("applied {} actions at revision {}", response.applied, response.revision)
    } else if args.apply {
        "nothing applied".to_owned()
    } else {
        "preview: nothing applied (apply with --apply --idempotency-key KEY)".to_owned()
    };
    line(&summary)?;
    // A failed action is reported above; the status lets scripts notice it.
    match response.failed_index {
        Some(_) => Err(CliError::Failed(crate::errors::EXIT_CONFLICT)),
        None => Ok(()),
    }
}
