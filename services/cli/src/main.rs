//! `agentvfs`: the command line of agentvfs, the versioned gRPC file system
//! for AI agents.
//!
//! `agentvfs up [--data-dir DIR] [--listen ADDR]` runs the service locally: it
//! starts an `agentvfs-worker` and a dev-mode `agentvfs-front` (found next to
//! this executable, else on `PATH`), waits until the front serves, makes sure
//! a space named `default` exists, and stops both on Ctrl-C or SIGTERM.
//!
//! Every subcommand prints its result on stdout; a failure is one line on
//! stderr and a non-zero exit status.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod up;

#[derive(Debug, Parser)]
#[command(name = "agentvfs", version, about = "The agentvfs command line.")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a front and a worker locally until Ctrl-C, with a space named `default`.
    Up(up::UpArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => return fail(&format!("cannot start the runtime: {error}")),
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Up(args) => up::run(args).await,
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => fail(&error),
    }
}

fn fail(error: &dyn std::fmt::Display) -> ExitCode {
    eprintln!("agentvfs: {error}");
    ExitCode::FAILURE
}
