//! How an agentvfs server process (`agentvfs-front`, `agentvfs-worker`)
//! starts and stops, the same way for both (SPEC §9):
//!
//! - logs go to stderr, plain or one JSON object per line ([`init_logging`]);
//! - SIGTERM and Ctrl-C are caught from before the process says it listens,
//!   so a signal sent as soon as the line appears drains instead of killing
//!   ([`Shutdown`]);
//! - exactly one line on stdout, `listening on <ADDR>`, once the listener is
//!   bound ([`listen`]); any other listener (metrics, HTTP) is logged as
//!   `<service> listening on <ADDR>` on stderr ([`bind`]), and `/metrics`
//!   is served from one ([`metrics::serve`]);
//! - a failure to start is one line on stderr and a non-zero exit ([`fail`]);
//! - with the `failpoints` feature, the fault points named in `FAILPOINTS`
//!   are armed ([`arm_failpoints`]).
//!
//! ```no_run
//! # async fn serve(_: tokio::net::TcpListener, _: agentvfs_process::Shutdown) -> std::io::Result<()> { Ok(()) }
//! # async fn run() -> std::process::ExitCode {
//! let shutdown = match agentvfs_process::Shutdown::on_signals() {
//!     Ok(shutdown) => shutdown,
//!     Err(error) => return agentvfs_process::fail("agentvfs-worker", 1, &error),
//! };
//! let listener = match agentvfs_process::listen("127.0.0.1:0".parse().unwrap()).await {
//!     Ok(listener) => listener,
//!     Err(error) => return agentvfs_process::fail("agentvfs-worker", 1, &error),
//! };
//! match serve(listener, shutdown).await {
//!     Ok(()) => std::process::ExitCode::SUCCESS,
//!     Err(error) => agentvfs_process::fail("agentvfs-worker", 1, &error),
//! }
//! # }
//! ```

use std::future::Future;
use std::io::Write as _;
use std::net::SocketAddr;
use std::pin::Pin;
use std::process::ExitCode;
use std::task::{Context, Poll};

use tokio::net::TcpListener;
use tokio::signal::unix::{Signal, SignalKind, signal};

pub mod metrics;

/// Logs on stderr, filtered by `AGENTVFS_LOG` (default `info`); `json`
/// writes one JSON object per line.
pub fn init_logging(json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("AGENTVFS_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Colours only for people at a terminal, not for log collectors.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    if json { builder.json().init() } else { builder.init() }
}

/// Binds `address` and prints `listening on <ADDR>` (the port actually
/// bound, for `:0`) as the process's only line on stdout.
pub async fn listen(address: SocketAddr) -> Result<TcpListener, String> {
    let listener = TcpListener::bind(address).await.map_err(|error| format!("cannot listen on {address}: {error}"))?;
    let bound = listener.local_addr().map_or_else(|_| address.to_string(), |a| a.to_string());
    println!("listening on {bound}");
    let _ = std::io::stdout().flush();
    Ok(listener)
}

/// Binds `address`, when there is one, for another service of the process
/// than its gRPC one (`metrics`, `HTTP`) and logs `<service> listening on
/// <ADDR>`: the port actually bound, for `:0`. stdout keeps its one line;
/// this one goes with the logs, on stderr.
pub async fn bind(service: &str, address: Option<SocketAddr>) -> Result<Option<TcpListener>, String> {
    let Some(address) = address else { return Ok(None) };
    let listener =
        TcpListener::bind(address).await.map_err(|error| format!("cannot serve {service} on {address}: {error}"))?;
    let bound = listener.local_addr().map_or_else(|_| address.to_string(), |a| a.to_string());
    tracing::info!("{service} listening on {bound}");
    Ok(Some(listener))
}

/// Prints `<program>: <error>` on stderr and returns exit status `code`.
pub fn fail(program: &str, code: u8, error: &dyn std::fmt::Display) -> ExitCode {
    eprintln!("{program}: {error}");
    ExitCode::from(code)
}

/// Completes on the first SIGTERM or SIGINT (Ctrl-C). The handlers are in
/// place from [`Shutdown::on_signals`] on.
#[derive(Debug)]
pub struct Shutdown {
    terminate: Signal,
    interrupt: Signal,
}

impl Shutdown {
    /// Catches SIGTERM and SIGINT from now on; call it inside the runtime,
    /// before announcing the listener.
    pub fn on_signals() -> std::io::Result<Self> {
        Ok(Self { terminate: signal(SignalKind::terminate())?, interrupt: signal(SignalKind::interrupt())? })
    }
}

impl Future for Shutdown {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        // A closed signal stream (`None`) never fires again: keep waiting
        // for the other one.
        if let Poll::Ready(Some(())) = self.terminate.poll_recv(cx) {
            return Poll::Ready(());
        }
        match self.interrupt.poll_recv(cx) {
            Poll::Ready(Some(())) => Poll::Ready(()),
            _ => Poll::Pending,
        }
    }
}

/// With the `failpoints` feature, arms the fault points named in
/// `FAILPOINTS` (`name=action;…`, see the `fail` crate) and, when any are
/// named, makes any panic, such as a point's `panic` action, abort the
/// process as a crash would. Without `FAILPOINTS` the process behaves as a
/// build without the feature. Keep the scenario alive while serving.
#[cfg(feature = "failpoints")]
pub fn arm_failpoints() -> fail::FailScenario<'static> {
    if std::env::var_os("FAILPOINTS").is_some() {
        let report = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            report(info);
            std::process::abort();
        }));
    }
    fail::FailScenario::setup()
}
