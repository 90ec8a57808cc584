//! `agentvfs-worker`: validates configuration, binds, prints
//! `listening on <ADDR>` and serves grep jobs until SIGTERM or Ctrl-C.

use std::io::Write as _;
use std::process::ExitCode;

use agentvfs_worker::config::Options;
use agentvfs_worker::server;
use clap::Parser as _;

/// jemalloc returns freed memory to the system (see the front's note on
/// glibc's allocator).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    let config = match Options::parse().resolve() {
        Ok(config) => config,
        Err(error) => return fail(2, &error),
    };
    #[cfg(feature = "failpoints")]
    let _failpoints = arm_failpoints();
    let filter = tracing_subscriber::EnvFilter::try_from_env("AGENTVFS_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Colours only for people at a terminal, not for log collectors.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    if config.json_logs {
        logs.json().init()
    } else {
        logs.init()
    }
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => return fail(1, &format!("cannot start the runtime: {error}")),
    };
    runtime.block_on(async move {
        let listener = match tokio::net::TcpListener::bind(config.listen).await {
            Ok(listener) => listener,
            Err(error) => return fail(1, &format!("cannot listen on {}: {error}", config.listen)),
        };
        let address = listener.local_addr().map_or_else(|_| config.listen.to_string(), |a| a.to_string());
        println!("listening on {address}");
        let _ = std::io::stdout().flush();
        match server::serve(&config, listener, shutdown_signal()).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => fail(1, &error),
        }
    })
}

fn fail(code: u8, error: &dyn std::fmt::Display) -> ExitCode {
    eprintln!("agentvfs-worker: {error}");
    ExitCode::from(code)
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    tokio::select! {
        () = ctrl_c => {},
        () = terminate => {},
    }
}

/// With the `failpoints` feature, arms the fault points named in
/// `FAILPOINTS` (`name=action;…`, see the `fail` crate) and, when any are
/// named, makes any panic, such as a point's `panic` action, abort the
/// process as a crash would. Without `FAILPOINTS` the process behaves as a
/// build without the feature.
#[cfg(feature = "failpoints")]
fn arm_failpoints() -> fail::FailScenario<'static> {
    if std::env::var_os("FAILPOINTS").is_some() {
        let report = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            report(info);
            std::process::abort();
        }));
    }
    fail::FailScenario::setup()
}
