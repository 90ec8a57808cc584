//! `versions`, `diff`, `watch` and `revert`: a file's or a space's past;
//! `lease`: who may change a path now.

use agentvfs_proto::v1 as pb;

use super::{Context, Paging};
use crate::errors::CliError;
use crate::output::{self, line};

#[derive(Debug, clap::Args)]
pub struct VersionsArgs {
    /// File (path or reference).
    path: String,
    #[command(flatten)]
    paging: Paging,
}

pub async fn versions(ctx: &mut Context, args: VersionsArgs) -> Result<(), CliError> {
    let mut token = args.paging.page_token.clone();
    loop {
        let request = pb::ListVersionsRequest {
            space: ctx.space.clone(),
            path: args.path.clone(),
            page_size: args.paging.page_size,
            page_token: token,
            ..Default::default()
        };
        let page = ctx.client.fs.list_versions(request).await?.into_inner();
        if ctx.out.is_json() {
            ctx.out.message("ListVersionsResponse", &page)?;
        } else {
            for version in &page.versions {
                line(&version_line(version))?;
            }
        }
        match args.paging.follow(&ctx.out, &page.next_page_token) {
            Some(next) => token = next,
            None => return Ok(()),
        }
    }
}

/// `v2  2026-…Z  edit  dev  12 bytes  r7`.
fn version_line(version: &pb::VersionInfo) -> String {
    format!(
        "v{}\t{}\t{}\t{}\t{} bytes\tr{}",
        version.version,
        output::time(version.time.as_ref()),
        version.operation,
        version.principal,
        version.size,
        version.revision
    )
}

#[derive(Debug, clap::Args)]
pub struct DiffArgs {
    /// File or directory (path or reference).
    path: String,
    /// Version to diff from (0 = latest).
    #[arg(long, value_name = "N", default_value_t = 0)]
    from: u64,
    /// Version to diff to (0 = latest).
    #[arg(long, value_name = "M", default_value_t = 0)]
    to: u64,
    /// For a directory: the revision to diff from.
    #[arg(long, value_name = "REV", default_value_t = 0)]
    from_revision: u64,
    /// For a directory: the revision to diff to.
    #[arg(long, value_name = "REV", default_value_t = 0)]
    to_revision: u64,
    /// Context lines around each hunk (default 3).
    #[arg(long, short = 'U', value_name = "N")]
    context: Option<u32>,
}

pub async fn diff(ctx: &mut Context, args: DiffArgs) -> Result<(), CliError> {
    let request = pb::DiffRequest {
        space: ctx.space.clone(),
        path: args.path,
        from_version: args.from,
        to_version: args.to,
        from_revision: args.from_revision,
        to_revision: args.to_revision,
        context: args.context,
        ..Default::default()
    };
    let response = ctx.client.fs.diff(request).await?.into_inner();
    if ctx.out.is_json() {
        return ctx.out.message("DiffResponse", &response);
    }
    for file in &response.files {
        if file.unified_diff.is_empty() {
            line(&format!("{}: {}", file.path, file.status))?;
        } else {
            output::text(&file.unified_diff)?;
        }
    }
    Ok(())
}

#[derive(Debug, clap::Args)]
pub struct WatchArgs {
    /// Only events at or below this path.
    path: Option<String>,
    /// First revision to deliver (0 = only new changes).
    #[arg(long = "from", value_name = "REV", default_value_t = 0)]
    from_revision: u64,
}

/// Prints events as they arrive, until the stream ends or Ctrl-C.
pub async fn watch(ctx: &mut Context, args: WatchArgs) -> Result<(), CliError> {
    let request = pb::WatchRequest {
        space: ctx.space.clone(),
        path: args.path.unwrap_or_default(),
        from_revision: args.from_revision,
    };
    let mut stream = ctx.client.fs.watch(request).await?.into_inner();
    while let Some(event) = stream.message().await? {
        if ctx.out.is_json() {
            ctx.out.message("WatchEvent", &event)?;
            continue;
        }
        let from = if event.old_path.is_empty() { String::new() } else { format!(" (from {})", event.old_path) };
        let by = if event.operation.is_empty() { String::new() } else { format!(" [{}]", event.operation) };
        line(&format!("r{} {} {}{from}{by}", event.revision, change_kind(event.kind), event.path))?;
    }
    Ok(())
}

/// A `ChangeKind` as a lowercase word (`modified`, `renamed`, …).
fn change_kind(kind: i32) -> String {
    pb::ChangeKind::try_from(kind)
        .map_or("unknown", |kind| kind.as_str_name().trim_start_matches("CHANGE_KIND_"))
        .to_ascii_lowercase()
}

#[derive(Debug, clap::Args)]
#[command(after_help = "Example:\n  agentvfs revert /notes --to-revision 2             # preview\n  \
                        agentvfs revert /notes --to-revision 2 --apply")]
pub struct RevertArgs {
    /// The file or folder; `/` for the whole space.
    path: String,
    /// The revision whose state PATH takes (`versions` and `watch` print revisions).
    #[arg(long, value_name = "N", required = true)]
    to_revision: u64,
    /// Save the revert as one new revision; without it the changes are only listed.
    #[arg(long)]
    apply: bool,
    /// With --apply: a retry with the same key is applied once (default: a new key).
    #[arg(long, value_name = "KEY", default_value = "", allow_hyphen_values = true)]
    idempotency_key: String,
}

/// Lists (or applies) what a revert of PATH to a revision changes.
pub async fn revert(ctx: &mut Context, args: RevertArgs) -> Result<(), CliError> {
    let idempotency_key = match (args.apply, args.idempotency_key.is_empty()) {
        (true, true) => format!("revert-{}", ulid::Ulid::generate()),
        _ => args.idempotency_key,
    };
    let request = pb::RevertRequest {
        space: ctx.space.clone(),
        path: args.path.clone(),
        to_revision: args.to_revision,
        dry_run: !args.apply,
        idempotency_key,
        ..Default::default()
    };
    let response = ctx.client.fs.revert(request).await?.into_inner();
    if ctx.out.is_json() {
        return ctx.out.message("RevertResponse", &response);
    }
    for change in &response.changes {
        let from = if change.old_path.is_empty() { String::new() } else { format!(" (from {})", change.old_path) };
        let versions = match (change.from_version, change.to_version) {
            (from, to) if from != to && from > 0 => format!(" v{from} -> v{to}"),
            (0, to) if to > 0 => format!(" v{to}"),
            _ => String::new(),
        };
        line(&format!("{} {}{from}{versions}", change_kind(change.kind), change.path))?;
    }
    let count = response.changes.len();
    let target = format!("{} to revision {}", args.path, args.to_revision);
    match (args.apply, count) {
        (_, 0) => line(&format!("{target}: nothing to change")),
        (true, _) => {
            let changes = if count == 1 { "change" } else { "changes" };
            line(&format!("reverted {target}: {count} {changes} at revision {}", response.revision))
        }
        (false, _) => line(&format!("preview of a revert of {target}: nothing saved (apply with --apply)")),
    }
}

#[derive(Debug, clap::Subcommand)]
pub enum LeaseCommand {
    /// Lease PATH (and everything below it) for TTL seconds; prints the lease ID.
    ///
    /// Until the lease expires or is released, changes under PATH fail with
    /// LEASE_HELD unless the call carries the lease: `--lease ID` or
    /// AGENTVFS_LEASE. Reads are never blocked.
    #[command(after_help = "Example:\n  export AGENTVFS_LEASE=$(agentvfs lease acquire /notes --ttl 300)\n  \
                            agentvfs write /notes/plan.md --content 'mine for now'\n  \
                            agentvfs lease release \"$AGENTVFS_LEASE\"")]
    Acquire {
        path: String,
        /// Seconds until it expires (1-3600).
        #[arg(long, value_name = "SECONDS", default_value_t = 60)]
        ttl: u64,
    },
    /// Extend a lease you hold to TTL seconds from now.
    Renew {
        lease_id: String,
        #[arg(long, value_name = "SECONDS", default_value_t = 60)]
        ttl: u64,
    },
    /// End a lease (yours, or as an owner of the space, anyone's).
    Release { lease_id: String },
    /// List the leases in force at, above or below PATH.
    List { path: Option<String> },
}

pub async fn lease(ctx: &mut Context, command: LeaseCommand) -> Result<(), CliError> {
    let space = ctx.space.clone();
    let (name, lease) = match command {
        LeaseCommand::Acquire { path, ttl } => {
            let request = pb::AcquireLeaseRequest { space, path, ttl_seconds: ttl, ..Default::default() };
            let lease = ctx.client.fs.acquire_lease(request).await?.into_inner();
            if !ctx.out.is_json() {
                // The ID alone, for `$(agentvfs lease acquire ...)`.
                return line(&lease.lease_id);
            }
            ("acquired", lease)
        }
        LeaseCommand::Renew { lease_id, ttl } => {
            let request = pb::RenewLeaseRequest { space, lease_id, ttl_seconds: ttl };
            ("renewed", ctx.client.fs.renew_lease(request).await?.into_inner())
        }
        LeaseCommand::Release { lease_id } => {
            let request = pb::ReleaseLeaseRequest { space, lease_id };
            ("released", ctx.client.fs.release_lease(request).await?.into_inner())
        }
        LeaseCommand::List { path } => {
            let request = pb::ListLeasesRequest { space, path: path.unwrap_or_default() };
            let response = ctx.client.fs.list_leases(request).await?.into_inner();
            if ctx.out.is_json() {
                return ctx.out.message("ListLeasesResponse", &response);
            }
            for lease in &response.leases {
                line(&format!("{}\t{}\t{}\tuntil {}", lease.lease_id, lease.path, lease.holder, until(lease)))?;
            }
            return Ok(());
        }
    };
    if ctx.out.is_json() {
        return ctx.out.message("Lease", &lease);
    }
    line(&format!("{name} {} on {} until {}", lease.lease_id, lease.path, until(&lease)))
}

/// When a lease expires, in RFC 3339.
fn until(lease: &pb::Lease) -> String {
    lease.expire_time.as_ref().map_or_else(String::new, ToString::to_string)
}
