//! `agentvfs up`: a worker and a dev-mode front for local use, stopped
//! together.
//!
//! Each process must be told the other's address. The front's port is
//! therefore fixed (port 0 is refused): the worker starts first with `--front
//! <listen>` and reports the address it got, then the front starts with
//! `--worker <that address>`. Stopping goes the other way round, the front
//! first, so that it drains while the worker can still answer it.

use std::ffi::OsString;
use std::future::Future as _;
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::task::Poll;
use std::time::Duration;

use self::ready::ReadyError;
use self::service::{Ending, Service, StartError};
use self::signals::StopSignals;

mod ready;
mod service;
mod signals;

const FRONT: &str = "agentvfs-front";
const WORKER: &str = "agentvfs-worker";
/// The space every local setup starts with.
const SPACE: &str = "default";
/// How long each child gets to exit after SIGTERM before it is killed; more
/// than the front's default 20 s drain.
const STOP_GRACE: Duration = Duration::from_secs(25);

#[derive(Debug, clap::Args)]
pub struct UpArgs {
    /// Directory of the front's store.
    #[arg(long, default_value = "./data")]
    data_dir: PathBuf,
    /// Address the front serves gRPC on: a loopback address with a fixed port.
    #[arg(long, default_value = "127.0.0.1:50051")]
    listen: SocketAddr,
    /// Directory of the worker's search index [default: <DATA_DIR>/index].
    #[arg(long)]
    index_dir: Option<PathBuf>,
    /// Address the worker serves on; port 0 picks a free port.
    #[arg(long, default_value = "127.0.0.1:0")]
    worker_listen: SocketAddr,
    /// Address the front serves HTTP on (`POST /api/v1/fs/{rpc}` in proto3
    /// JSON, raw content, Server-Sent Events, `/openapi.json` and MCP at
    /// `/mcp`): a loopback address with a fixed port.
    #[arg(long, default_value = "127.0.0.1:8080")]
    http_listen: SocketAddr,
}

#[derive(Debug, thiserror::Error)]
pub enum UpError {
    #[error("`agentvfs up` needs a fixed front port, not {0}: the worker is told the front's address before it starts")]
    AnyPort(SocketAddr),
    #[error("`agentvfs up` needs a fixed HTTP port, not {0}: it says where HTTP is served")]
    AnyHttpPort(SocketAddr),
    #[error("`agentvfs up` runs the front in dev mode, which only listens on a loopback address, not {0}")]
    NotLoopback(SocketAddr),
    #[error("cannot listen for Ctrl-C and SIGTERM: {0}")]
    Signals(io::Error),
    #[error(transparent)]
    Start(#[from] StartError),
    #[error(transparent)]
    Ready(#[from] ReadyError),
    #[error("{name} exited unexpectedly ({status})")]
    Exited { name: &'static str, status: String },
}

/// Where the two processes listen once they are up.
#[derive(Debug)]
struct Addresses {
    front: String,
    worker: String,
}

/// Runs until a stop signal (then `Ok`) or until a child exits on its own or
/// fails to start (then the reason). Either way every child started is
/// stopped before this returns.
pub async fn run(args: UpArgs) -> Result<(), UpError> {
    if args.listen.port() == 0 {
        return Err(UpError::AnyPort(args.listen));
    }
    if args.http_listen.port() == 0 {
        return Err(UpError::AnyHttpPort(args.http_listen));
    }
    for address in [args.listen, args.http_listen] {
        if !address.ip().is_loopback() {
            return Err(UpError::NotLoopback(address));
        }
    }
    let mut signals = StopSignals::install().map_err(UpError::Signals)?;
    let mut services = Vec::new();
    let started = tokio::select! {
        started = start(&args, &mut services) => Some(started),
        () = signals.recv() => None,
    };
    let outcome = match started {
        None => Ok(()),
        Some(Err(error)) => Err(error),
        Some(Ok(addresses)) => {
            println!(
                "agentvfs is up: front {} (data {}), worker {}; space {SPACE:?}",
                addresses.front,
                args.data_dir.display(),
                addresses.worker
            );
            println!("HTTP on http://{0}, MCP on http://{0}/mcp", args.http_listen);
            println!("press Ctrl-C to stop");
            tokio::select! {
                () = signals.recv() => Ok(()),
                exited = first_exit(&mut services) => Err(exited),
            }
        }
    };
    stop_all(&mut services, &mut signals).await;
    outcome
}

/// Starts the worker, then the front, waits until the front serves and
/// ensures the default space. Each child is added to `services` as soon as it
/// is spawned, so that it is stopped even if this future is dropped.
async fn start(args: &UpArgs, services: &mut Vec<Service>) -> Result<Addresses, UpError> {
    let index_dir = args.index_dir.clone().unwrap_or_else(|| args.data_dir.join("index"));
    let worker = launch(
        services,
        WORKER,
        vec![
            "--listen".into(),
            args.worker_listen.to_string().into(),
            "--front".into(),
            args.listen.to_string().into(),
            "--index-dir".into(),
            index_dir.into(),
        ],
    )
    .await?;
    let front = launch(
        services,
        FRONT,
        vec![
            "--dev".into(),
            "--listen".into(),
            args.listen.to_string().into(),
            "--data-dir".into(),
            args.data_dir.clone().into(),
            "--worker".into(),
            worker.clone().into(),
            "--http-listen".into(),
            args.http_listen.to_string().into(),
        ],
    )
    .await?;
    // A child that dies meanwhile is the better explanation than a timeout.
    let channel = tokio::select! {
        ready = ready::serving(&front) => ready?,
        exited = first_exit(services) => return Err(exited),
    };
    tokio::select! {
        ensured = ready::ensure_space(channel, SPACE) => ensured?,
        exited = first_exit(services) => return Err(exited),
    }
    Ok(Addresses { front, worker })
}

/// Spawns one child and waits for the address it listens on.
async fn launch(services: &mut Vec<Service>, name: &'static str, args: Vec<OsString>) -> Result<String, UpError> {
    let index = services.len();
    services.push(Service::spawn(name, &args)?);
    Ok(services[index].listening().await?)
}

/// Completes when any of `services` exits, with that as the error.
async fn first_exit(services: &mut [Service]) -> UpError {
    let mut exits: Vec<_> =
        services.iter_mut().map(|service| Box::pin(async move { (service.name(), service.exit().await) })).collect();
    let (name, status) = std::future::poll_fn(|cx| {
        exits
            .iter_mut()
            .find_map(|exit| match exit.as_mut().poll(cx) {
                Poll::Ready(exited) => Some(exited),
                Poll::Pending => None,
            })
            .map_or(Poll::Pending, Poll::Ready)
    })
    .await;
    let status = match status {
        Ok(status) => status.to_string(),
        Err(error) => format!("cannot wait for it: {error}"),
    };
    UpError::Exited { name, status }
}

/// Stops the children in the reverse order of their start. Another stop
/// signal meanwhile kills whatever is still running.
async fn stop_all(services: &mut [Service], signals: &mut StopSignals) {
    let mut hurried = false;
    for service in services.iter_mut().rev() {
        let name = service.name();
        let already_hurried = hurried;
        let hurry = async {
            if !already_hurried {
                signals.recv().await;
            }
        };
        match service.stop(STOP_GRACE, hurry).await {
            Ok(Ending::Gone) => {}
            Ok(Ending::Stopped(status)) if status.success() => {}
            Ok(Ending::Stopped(status)) => eprintln!("agentvfs: {name} stopped with {status}"),
            Ok(Ending::TimedOut) => {
                eprintln!("agentvfs: {name} did not stop within {} s; killed it", STOP_GRACE.as_secs());
            }
            Ok(Ending::Hurried) => {
                hurried = true;
                eprintln!("agentvfs: killed {name}");
            }
            Ok(Ending::Unsignalled(error)) => {
                eprintln!("agentvfs: cannot send SIGTERM to {name} ({error}); killed it");
            }
            Err(error) => eprintln!("agentvfs: cannot stop {name}: {error}"),
        }
    }
}
