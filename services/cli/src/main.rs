//! `agentvfs`: the command line of agentvfs, the versioned gRPC file system
//! for AI agents.
//!
//! `agentvfs up [--data-dir DIR] [--listen ADDR]` runs the service locally: it
//! starts an `agentvfs-worker` and a dev-mode `agentvfs-front` (found next to
//! this executable, else on `PATH`), waits until the front serves, makes sure
//! a space named `default` exists, and stops both on Ctrl-C or SIGTERM.
//!
//! `agentvfs mcp` serves the Model Context Protocol on stdin/stdout: the tools
//! `ls`, `read`, `write`, `edit`, `find`, `grep`, `search`, `read_many`,
//! `batch` and `apply_patch`, each one gRPC call to the front at `--addr`, in `--space` unless a
//! call names another, all in one session (`--session`, else a new one).
//!
//! Every other subcommand is a client of a running front: one gRPC call, or
//! the pages of one call (`ls`, `read`, `read-many`, `write`, `edit`, `find`,
//! `grep`, `search`, `versions`, `diff`, `resolve`, `batch`, `patch`, `watch`, and the
//! admin commands `space`, `access`, `quota`, `functions`), or a sequence of
//! calls (`pull-folder`, `push-folder`; see the `sync` module). Global flags:
//! `--addr` (`AGENTVFS_ADDR`, default `127.0.0.1:50051`), `--token`
//! (`AGENTVFS_TOKEN`, sent as `authorization: Bearer`), `--space`
//! (`AGENTVFS_SPACE`, default `default`), `--session` (`AGENTVFS_SESSION`, sent
//! as `x-agentvfs-session`) and `--json` (one line of proto JSON per response
//! message). Paginated commands print `next page token: …` on stderr unless
//! `--all` follows the pages to the end; edits and batches only preview
//! unless `--apply` is given with an `--idempotency-key`. Each run is a new
//! call with no session unless `--session` is given, so `edit` without
//! `--version` edits the latest version (the diff printed shows what it
//! changes); with `--session`, the front instead requires a `read` of the
//! file in that session.
//!
//! `agentvfs mount [SPACE:]PATH DIR` mounts a space's folder on a local
//! directory (FUSE) until Ctrl-C or SIGTERM: each file written there is saved
//! as one version when it is closed (see the `mount` module).
//!
//! `pull-folder SPACE:PATH DIR` checks a folder out into a new local directory
//! (original bytes, empty folders, and a private journal `.agentvfs-sync.json`
//! with the base version and hash of every entry; `--resume` finishes an
//! interrupted pull). `push-folder DIR` previews the new versions, files and
//! folders the local edits make, stops on remote conflicts, moves and
//! renames, and with `--apply` applies them step by step under idempotency
//! keys, so a rerun after an interruption applies nothing twice.
//!
//! Results go to stdout. A failure prints `error: <REASON>: <message>` and
//! `next: <what to do>` on stderr (in this command line's flags and
//! commands: see `errors::NEXT_ACTIONS`), and exits with a status by class:
//!
//! | Status | Meaning |
//! |---|---|
//! | 0 | success |
//! | 1 | any other failure |
//! | 2 | invalid arguments or usage (`INVALID_ARGUMENT`, a bad command line or input file) |
//! | 3 | not found |
//! | 4 | conflicts with the current state (`FAILED_PRECONDITION`, `ALREADY_EXISTS`, `ABORTED`) |
//! | 5 | not allowed (`PERMISSION_DENIED`, `UNAUTHENTICATED`) |
//! | 6 | retryable (`RESOURCE_EXHAUSTED`, `UNAVAILABLE`) |

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use self::client::Client;
use self::commands::{Context, admin, batch, files, grep_search, history, patch};
use self::errors::CliError;
use self::output::Output;

mod client;
mod commands;
mod errors;
mod mcp;
mod mount;
mod output;
mod sync;
mod up;

const EXIT_CODES: &str = "\
Exit status:
  0  success
  1  any other failure
  2  invalid arguments or usage (INVALID_ARGUMENT, a bad command line or input file)
  3  not found (NOT_FOUND)
  4  conflicts with the current state (FAILED_PRECONDITION, ALREADY_EXISTS, ABORTED)
  5  not allowed (PERMISSION_DENIED, UNAUTHENTICATED)
  6  retryable: try again later (RESOURCE_EXHAUSTED, UNAVAILABLE)

Errors print `error: <REASON>: <message>` and `next: <what to do>` on stderr.";

#[derive(Debug, Parser)]
#[command(name = "agentvfs", version, about = "The agentvfs command line.", after_help = EXIT_CODES)]
struct Cli {
    #[command(flatten)]
    global: Global,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, clap::Args)]
struct Global {
    /// Address of the front.
    #[arg(long, env = "AGENTVFS_ADDR", default_value = "127.0.0.1:50051", global = true)]
    addr: String,
    /// Bearer token.
    #[arg(long, env = "AGENTVFS_TOKEN", hide_env_values = true, global = true)]
    token: Option<String>,
    /// Space ID or name.
    #[arg(long, env = "AGENTVFS_SPACE", default_value = "default", global = true)]
    space: String,
    /// Session ID, for read-before-edit tracking.
    #[arg(long, env = "AGENTVFS_SESSION", global = true)]
    session: Option<String>,
    /// A path lease to carry (from `lease acquire`): changes under the
    /// leased path are refused to calls that do not carry it (not used by
    /// `mcp`, whose `lease` tool carries its own, or `mount`).
    #[arg(long, env = "AGENTVFS_LEASE", value_name = "LEASE_ID", global = true)]
    lease: Option<String>,
    /// Print each response message as one line of proto JSON.
    #[arg(long, global = true)]
    json: bool,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a front and a worker locally until Ctrl-C, with a space named `default`.
    Up(up::UpArgs),
    /// List a directory.
    Ls(files::LsArgs),
    /// Read a slice of a text file.
    Read(files::ReadArgs),
    /// Read up to 10 files at once.
    ReadMany(files::ReadManyArgs),
    /// Create, overwrite or append to a file.
    Write(files::WriteArgs),
    /// Preview (or with --apply, save) text edits to a file.
    Edit(files::EditArgs),
    /// Find files whose path matches a glob.
    Find(grep_search::FindArgs),
    /// Search file contents, like ripgrep.
    Grep(grep_search::GrepArgs),
    /// Ranked full-text search.
    Search(grep_search::SearchArgs),
    /// List a file's versions, newest first.
    Versions(history::VersionsArgs),
    /// Unified diff between two versions of a file.
    Diff(history::DiffArgs),
    /// Resolve a path or reference.
    Resolve(files::ResolveArgs),
    /// Preview (or with --apply, apply atomically) structural actions.
    Batch(batch::BatchArgs),
    /// Check (or with --apply, apply atomically) a patch: apply_patch or a unified diff.
    Patch(patch::PatchArgs),
    /// Print change events until Ctrl-C.
    Watch(history::WatchArgs),
    /// Preview (or with --apply, save as one revision) a file or folder as it was at a revision.
    Revert(history::RevertArgs),
    /// Lease a path so that only calls carrying the lease change it.
    #[command(subcommand)]
    Lease(history::LeaseCommand),
    /// Create, list or delete spaces.
    #[command(subcommand)]
    Space(admin::SpaceCommand),
    /// Manage who may use a space.
    #[command(subcommand)]
    Access(admin::AccessCommand),
    /// Manage a space's quota.
    #[command(subcommand)]
    Quota(admin::QuotaCommand),
    /// Register the functions an agent may call.
    #[command(subcommand)]
    Functions(admin::FunctionsCommand),
    /// Copy a folder into a new local directory, with a journal for push-folder.
    PullFolder(sync::PullArgs),
    /// Preview (or with --apply, upload) the local changes of a pulled folder.
    PushFolder(sync::PushArgs),
    /// Serve the agent tools over the Model Context Protocol on stdin/stdout.
    Mcp,
    /// Mount a space's folder on a local directory (FUSE) until Ctrl-C.
    Mount(mount::MountArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => return fail(&format!("cannot start the runtime: {error}")),
    };
    if let Command::Up(args) = cli.command {
        return match runtime.block_on(up::run(args)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => fail(&error),
        };
    }
    if let Command::Mcp = cli.command {
        let Global { addr, token, space, session, json, .. } = cli.global;
        return match runtime.block_on(mcp::run(&addr, token.as_deref(), space, session)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                error.report(json, "mcp");
                ExitCode::from(error.exit_code())
            }
        };
    }
    if let Command::Mount(args) = cli.command {
        let Global { addr, token, space, session, json, .. } = cli.global;
        let mounted = runtime.block_on(mount::run(&addr, token.as_deref(), &space, session.as_deref(), args));
        // A mount still serving files left open past the grace period runs
        // on a blocking thread: exit without waiting for it.
        runtime.shutdown_background();
        return match mounted {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                error.report(json, "mount");
                ExitCode::from(error.exit_code())
            }
        };
    }
    let json = cli.global.json;
    let name = cli.command.name();
    match runtime.block_on(client_command(cli.global, cli.command)) {
        Ok(()) => ExitCode::SUCCESS,
        // A closed pipe (`agentvfs ls | head`) is the reader having had enough.
        Err(CliError::Io(error)) if error.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(error) => {
            error.report(json, name);
            ExitCode::from(error.exit_code())
        }
    }
}

impl Command {
    /// The subcommand as typed, which picks the flags an error's next action names.
    fn name(&self) -> &'static str {
        match self {
            Command::Up(_) => "up",
            Command::Ls(_) => "ls",
            Command::Read(_) => "read",
            Command::ReadMany(_) => "read-many",
            Command::Write(_) => "write",
            Command::Edit(_) => "edit",
            Command::Find(_) => "find",
            Command::Grep(_) => "grep",
            Command::Search(_) => "search",
            Command::Versions(_) => "versions",
            Command::Diff(_) => "diff",
            Command::Resolve(_) => "resolve",
            Command::Batch(_) => "batch",
            Command::Patch(_) => "patch",
            Command::Watch(_) => "watch",
            Command::Revert(_) => "revert",
            Command::Lease(_) => "lease",
            Command::Space(_) => "space",
            Command::Access(_) => "access",
            Command::Quota(_) => "quota",
            Command::Functions(_) => "functions",
            Command::PullFolder(_) => "pull-folder",
            Command::PushFolder(_) => "push-folder",
            Command::Mcp => "mcp",
            Command::Mount(_) => "mount",
        }
    }
}

async fn client_command(global: Global, command: Command) -> Result<(), CliError> {
    let client =
        Client::carrying(&global.addr, global.token.as_deref(), global.session.as_deref(), global.lease.as_deref())?;
    let session = global.session.is_some();
    let mut ctx = Context { client, space: global.space, session, out: Output::new(global.json)? };
    let ctx = &mut ctx;
    match command {
        Command::Up(_) | Command::Mcp | Command::Mount(_) => Ok(()),
        Command::Ls(args) => files::ls(ctx, args).await,
        Command::Read(args) => files::read(ctx, args).await,
        Command::ReadMany(args) => files::read_many(ctx, args).await,
        Command::Write(args) => files::write(ctx, args).await,
        Command::Edit(args) => files::edit(ctx, args).await,
        Command::Find(args) => grep_search::find(ctx, args).await,
        Command::Grep(args) => grep_search::grep(ctx, args).await,
        Command::Search(args) => grep_search::search(ctx, args).await,
        Command::Versions(args) => history::versions(ctx, args).await,
        Command::Diff(args) => history::diff(ctx, args).await,
        Command::Resolve(args) => files::resolve(ctx, args).await,
        Command::Batch(args) => batch::batch(ctx, args).await,
        Command::Patch(args) => patch::patch(ctx, args).await,
        Command::Watch(args) => history::watch(ctx, args).await,
        Command::Revert(args) => history::revert(ctx, args).await,
        Command::Lease(command) => history::lease(ctx, command).await,
        Command::Space(command) => admin::space(ctx, command).await,
        Command::Access(command) => admin::access(ctx, command).await,
        Command::Quota(command) => admin::quota(ctx, command).await,
        Command::Functions(command) => admin::functions(ctx, command).await,
        Command::PullFolder(args) => sync::pull(ctx, args).await,
        Command::PushFolder(args) => sync::push(ctx, args).await,
    }
}

fn fail(error: &dyn std::fmt::Display) -> ExitCode {
    eprintln!("agentvfs: {error}");
    ExitCode::FAILURE
}
