//! `space`, `access`, `quota` and `functions`: the Admin service, for hosts
//! and operators rather than agents.

use std::path::PathBuf;

use agentvfs_proto::v1 as pb;
use clap::Subcommand;

use super::{Context, Paging, proto_json_array, read_input};
use crate::errors::CliError;
use crate::output::line;

#[derive(Debug, Subcommand)]
pub enum SpaceCommand {
    /// Create a space; you become its owner.
    Create {
        name: String,
        /// Byte quota (0 = the server default).
        #[arg(long, default_value_t = 0)]
        bytes: u64,
        /// File quota (0 = the server default).
        #[arg(long, default_value_t = 0)]
        files: u64,
        #[arg(long, value_name = "KEY", default_value = "", allow_hyphen_values = true)]
        idempotency_key: String,
    },
    /// Fork a space: a new space holding SOURCE's files as of a revision,
    /// sharing their content; you become its owner.
    ///
    /// The fork's history starts over (every file at version 1); the two
    /// spaces change independently from then on.
    #[command(after_help = "Example:\n  agentvfs space fork default before-edit --at-revision 2")]
    Fork {
        /// The space to fork (name or ID).
        source: String,
        /// The new space's name.
        name: String,
        /// The source's revision to copy (0 = its current revision).
        #[arg(long, value_name = "N", default_value_t = 0)]
        at_revision: u64,
        #[arg(long, value_name = "KEY", default_value = "", allow_hyphen_values = true)]
        idempotency_key: String,
    },
    /// List the spaces you hold a role in.
    List {
        #[command(flatten)]
        paging: Paging,
    },
    /// Delete a space and all its history.
    Delete {
        name: String,
        /// The space's name again, to confirm.
        #[arg(long, required = true)]
        confirm: String,
        #[arg(long, value_name = "KEY", default_value = "", allow_hyphen_values = true)]
        idempotency_key: String,
    },
}

pub async fn space(ctx: &mut Context, command: SpaceCommand) -> Result<(), CliError> {
    match command {
        SpaceCommand::Create { name, bytes, files, idempotency_key } => {
            let request = pb::CreateSpaceRequest {
                name,
                quota: Some(pb::Quota { max_bytes: bytes, max_files: files }),
                idempotency_key,
            };
            let space = ctx.client.admin.create_space(request).await?.into_inner();
            print_space(ctx, "created space", &space)
        }
        SpaceCommand::Fork { source, name, at_revision, idempotency_key } => {
            let request = pb::ForkSpaceRequest { source: source.clone(), at_revision, name, idempotency_key };
            let space = ctx.client.admin.fork_space(request).await?.into_inner();
            if ctx.out.is_json() {
                return ctx.out.message("Space", &space);
            }
            let origin = space.forked_from.clone().unwrap_or_default();
            let usage = space.usage.unwrap_or_default();
            line(&format!(
                "forked {source} at revision {} into space {} ({}): {} files, {} bytes",
                origin.revision, space.name, space.id, usage.files, usage.bytes
            ))
        }
        SpaceCommand::List { paging } => {
            let mut token = paging.page_token.clone();
            loop {
                let request = pb::ListSpacesRequest { page_size: paging.page_size, page_token: token };
                let page = ctx.client.admin.list_spaces(request).await?.into_inner();
                if ctx.out.is_json() {
                    ctx.out.message("ListSpacesResponse", &page)?;
                } else {
                    for space in &page.spaces {
                        let usage = space.usage.unwrap_or_default();
                        line(&format!(
                            "{}\t{}\t{} files\t{} bytes\tr{}",
                            space.name, space.id, usage.files, usage.bytes, space.revision
                        ))?;
                    }
                }
                match paging.follow(&ctx.out, &page.next_page_token) {
                    Some(next) => token = next,
                    None => return Ok(()),
                }
            }
        }
        SpaceCommand::Delete { name, confirm, idempotency_key } => {
            let request = pb::DeleteSpaceRequest { space: name.clone(), confirm, idempotency_key };
            let response = ctx.client.admin.delete_space(request).await?.into_inner();
            if ctx.out.is_json() {
                return ctx.out.message("DeleteSpaceResponse", &response);
            }
            line(&format!("deleted space {name} ({})", response.space_id))
        }
    }
}

fn print_space(ctx: &Context, what: &str, space: &pb::Space) -> Result<(), CliError> {
    if ctx.out.is_json() {
        return ctx.out.message("Space", space);
    }
    line(&format!("{what} {} ({})", space.name, space.id))
}

#[derive(Debug, Subcommand)]
pub enum AccessCommand {
    /// Grant or change a principal's role; `none` revokes it.
    Set {
        space: String,
        principal: String,
        /// viewer, editor, owner or none.
        role: String,
        #[arg(long, value_name = "KEY", default_value = "", allow_hyphen_values = true)]
        idempotency_key: String,
    },
}

pub async fn access(ctx: &mut Context, command: AccessCommand) -> Result<(), CliError> {
    let AccessCommand::Set { space, principal, role, idempotency_key } = command;
    let role = match role.to_ascii_lowercase().as_str() {
        "viewer" => pb::Role::Viewer,
        "editor" => pb::Role::Editor,
        "owner" => pb::Role::Owner,
        "none" => pb::Role::Unspecified,
        _ => return Err(CliError::Usage(format!("ROLE must be viewer, editor, owner or none, not {role:?}"))),
    };
    let request = pb::SetAccessRequest { space, principal, role: role as i32, idempotency_key };
    let space = ctx.client.admin.set_access(request).await?.into_inner();
    print_space(ctx, "updated access of space", &space)
}

#[derive(Debug, Subcommand)]
pub enum QuotaCommand {
    /// Set a space's quota (0 = the server default).
    Set {
        space: String,
        #[arg(long, default_value_t = 0)]
        bytes: u64,
        #[arg(long, default_value_t = 0)]
        files: u64,
        #[arg(long, value_name = "KEY", default_value = "", allow_hyphen_values = true)]
        idempotency_key: String,
    },
}

pub async fn quota(ctx: &mut Context, command: QuotaCommand) -> Result<(), CliError> {
    let QuotaCommand::Set { space, bytes, files, idempotency_key } = command;
    let request =
        pb::SetQuotaRequest { space, quota: Some(pb::Quota { max_bytes: bytes, max_files: files }), idempotency_key };
    let space = ctx.client.admin.set_quota(request).await?.into_inner();
    print_space(ctx, "updated quota of space", &space)
}

#[derive(Debug, Subcommand)]
pub enum FunctionsCommand {
    /// Create or update `/functions/<name>.md` and `/AGENT.md`.
    Register {
        space: String,
        /// JSON array (`-` = stdin) of `FunctionSpec`s in proto JSON: name,
        /// description, parametersJsonSchema, returns, examples.
        functions: PathBuf,
        #[arg(long, value_name = "KEY", default_value = "", allow_hyphen_values = true)]
        idempotency_key: String,
    },
}

pub async fn functions(ctx: &mut Context, command: FunctionsCommand) -> Result<(), CliError> {
    let FunctionsCommand::Register { space, functions, idempotency_key } = command;
    let functions = proto_json_array(&read_input(&functions)?, "FunctionSpec")?;
    let request = pb::RegisterFunctionsRequest { space, functions, idempotency_key };
    let response = ctx.client.admin.register_functions(request).await?.into_inner();
    if ctx.out.is_json() {
        return ctx.out.message("RegisterFunctionsResponse", &response);
    }
    for path in &response.written {
        line(&format!("wrote {path}"))?;
    }
    for path in &response.skipped_user_modified {
        line(&format!("skipped {path} (changed by a user; restore its default to regenerate it)"))?;
    }
    Ok(())
}
