//! `agentvfs-load`: a load generator that runs [ghz] scenario files against
//! a real agentvfs front.
//!
//! Scenarios are ghz's JSON config files, so the same files run under ghz.
//! Requests are built from the agentvfs descriptors compiled into this
//! binary (`agentvfs_proto::FILE_DESCRIPTOR_SET`): no `.proto` files,
//! protoset or server reflection are needed at run time.
//!
//! ```sh
//! # Validate scenarios without a server: the method exists, is unary, and
//! # `data` (templates expanded with sample values) is a valid request.
//! agentvfs-load check deploy/ghz/*.json
//!
//! # Run one; flags override the file. The report is ghz's JSON shape.
//! agentvfs-load run deploy/ghz/read.json --host 127.0.0.1:50051 \
//!     --metadata "authorization=Bearer $TOKEN" -c 16 -n 10000 --format json
//! agentvfs-load run deploy/ghz/write.json --duration 30s --format summary
//! ```
//!
//! A scenario:
//!
//! ```json
//! {
//!   "call": "agentvfs.v1.FileSystem.Write",
//!   "host": "127.0.0.1:50051",
//!   "insecure": true,
//!   "total": 2000,
//!   "concurrency": 16,
//!   "connections": 2,
//!   "data": {
//!     "space": "default",
//!     "path": "/load/{{.WorkerID}}/{{.RequestNumber}}.txt",
//!     "content": "written at {{.TimestampUnix}} by {{.UUID}}"
//!   },
//!   "metadata": { "x-agentvfs-tool-call": "load-{{.RequestNumber}}" }
//! }
//! ```
//!
//! Honoured ghz options: `call`, `host`, `insecure`, `data` (an object, or an
//! array sent round-robin), `data-file`, `metadata`, `metadata-file`,
//! `concurrency`, `connections`, `total`, `duration` (when set, `total` is
//! ignored, as in ghz), `max-duration`, `duration-stop`, `timeout`,
//! `connect-timeout`, `rps`, `skipFirst`, `format` (`json`, `pretty`,
//! `summary`), `name` and `tags`. Templates: `{{.RequestNumber}}` (0, 1, …
//! across the run), `{{.WorkerID}}` (`g<caller>c<connection>`, unique per
//! caller), `{{.UUID}}` (a random UUID per call), `{{.Timestamp}}`,
//! `{{.TimestampUnix}}`, `{{.TimestampUnixMilli}}`, `{{.TimestampUnixNano}}`,
//! the method names, `{{newUUID}}`, `{{randomString N}}` and
//! `{{randomInt MIN MAX}}`. Only unary methods can be called, and only over
//! plaintext HTTP/2. Secret metadata (`authorization` and the like) is
//! redacted from the report's `options`.
//!
//! [ghz]: https://ghz.sh

mod method;
mod report;
mod runner;
mod scenario;
mod template;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};

use crate::method::{Method, descriptors};
use crate::runner::Prepared;
use crate::scenario::{Format, Overrides, Scenario, parse_duration};

#[derive(Debug, Parser)]
#[command(name = "agentvfs-load", version, about = "Runs ghz scenario files against an agentvfs front.")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Runs a scenario and prints its report.
    Run(RunArgs),
    /// Validates scenarios without connecting anywhere; exits non-zero if
    /// any is invalid.
    Check {
        /// ghz JSON config files.
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
}

#[derive(Debug, clap::Args)]
struct RunArgs {
    /// A ghz JSON config file.
    scenario: PathBuf,
    /// Server address, `host:port` (overrides `host`).
    #[arg(long)]
    host: Option<String>,
    /// Callers making calls at once (overrides `concurrency`).
    #[arg(short = 'c', long)]
    concurrency: Option<u64>,
    /// HTTP/2 connections the callers share (overrides `connections`).
    #[arg(long)]
    connections: Option<u64>,
    /// Calls to make (overrides `total`, and the scenario's `duration`).
    #[arg(short = 'n', long)]
    total: Option<u64>,
    /// Run for this long instead, e.g. `30s`, `1m30s` (overrides `duration`).
    #[arg(short = 'z', long, value_parser = parse_duration)]
    duration: Option<Duration>,
    /// Request metadata `KEY=VALUE`, added to or replacing the scenario's;
    /// repeatable.
    #[arg(long = "metadata", value_name = "KEY=VALUE", value_parser = key_value)]
    metadata: Vec<(String, String)>,
    /// Report format (overrides `format`).
    #[arg(long, value_enum)]
    format: Option<Format>,
}

fn key_value(text: &str) -> Result<(String, String), String> {
    let (key, value) = text.split_once('=').ok_or("expected KEY=VALUE")?;
    if key.trim().is_empty() {
        return Err("the key is empty".into());
    }
    Ok((key.trim().to_owned(), value.to_owned()))
}

#[tokio::main]
async fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Check { files } => check(&files),
        Command::Run(args) => match run(args).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                eprintln!("error: {error}");
                ExitCode::FAILURE
            }
        },
    }
}

fn check(files: &[PathBuf]) -> ExitCode {
    let pool = match descriptors() {
        Ok(pool) => pool,
        Err(error) => {
            eprintln!("error: {error}");
            return ExitCode::FAILURE;
        }
    };
    let mut failed = 0;
    for file in files {
        let checked = Scenario::load(file, &Overrides::default()).and_then(|scenario| {
            let method = Method::resolve(&pool, &scenario.call)?;
            Prepared::new(&scenario, method.clone())?;
            Ok((scenario, method))
        });
        match checked {
            Ok((scenario, method)) => {
                for warning in &scenario.warnings {
                    eprintln!("warning: {}: {warning}", file.display());
                }
                let messages = scenario.data.len();
                let plural = if messages == 1 { "" } else { "s" };
                println!("ok: {}: {} ({messages} request{plural})", file.display(), method.names.fully_qualified);
            }
            Err(error) => {
                failed += 1;
                eprintln!("error: {}: {error}", file.display());
            }
        }
    }
    if failed > 0 {
        eprintln!("{failed} of {} scenario(s) invalid", files.len());
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

async fn run(args: RunArgs) -> Result<(), String> {
    let overrides = Overrides {
        host: args.host,
        concurrency: args.concurrency,
        connections: args.connections,
        total: args.total,
        duration: args.duration,
        metadata: args.metadata,
        format: args.format,
    };
    let file = args.scenario.display().to_string();
    let scenario = Scenario::load(&args.scenario, &overrides).map_err(|error| format!("{file}: {error}"))?;
    for warning in &scenario.warnings {
        eprintln!("warning: {file}: {warning}");
    }
    if !scenario.insecure {
        eprintln!("warning: {file}: TLS is not supported; connecting in plaintext as if `insecure` were true");
    }
    let method = Method::resolve(&descriptors()?, &scenario.call).map_err(|error| format!("{file}: {error}"))?;
    let prepared = Prepared::new(&scenario, method).map_err(|error| format!("{file}: {error}"))?;
    let report = runner::run(&scenario, prepared).await?;
    let output = match scenario.format {
        Format::Json => serde_json::to_string(&report).map_err(|error| error.to_string())?,
        Format::Pretty => serde_json::to_string_pretty(&report).map_err(|error| error.to_string())?,
        Format::Summary => report.summary(),
    };
    println!("{}", output.trim_end());
    Ok(())
}
