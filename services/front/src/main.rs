//! `agentvfs-front`: parses and validates configuration, opens the store,
//! binds, prints `listening on <ADDR>` and serves until SIGTERM or Ctrl-C.

use std::io::Write as _;
use std::process::ExitCode;

use agentvfs_front::auth::Authenticator;
use agentvfs_front::config::{LogFormat, Options};
use agentvfs_front::server;
use agentvfs_front::store::Store;
use clap::Parser as _;

/// jemalloc returns freed memory to the system; with glibc's allocator (an
/// arena per busy thread) the front's memory grew without bound under a
/// steady write load: 45 → 137 MiB in three minutes of the soak test, flat
/// at about 80 MiB with jemalloc.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    let config = match Options::parse().with_file().and_then(Options::resolve) {
        Ok(config) => config,
        Err(error) => return fail(2, &error),
    };
    if Options::parse().print_config {
        print!("{}", config.describe());
        return ExitCode::SUCCESS;
    }
    #[cfg(feature = "failpoints")]
    let _failpoints = arm_failpoints();
    init_logging(config.log_format);
    let auth = match &config.tokens {
        Some(path) => match Authenticator::from_file(path, config.dev) {
            Ok(auth) => auth,
            Err(error) => return fail(2, &error),
        },
        None => Authenticator::dev(),
    };
    let store = match Store::open(&config.data_dir, config.durability, config.limits) {
        Ok(store) => store,
        Err(error) => return fail(1, &error),
    };
    // Store calls run on the runtime's blocking threads: the pool grows to
    // the most calls that ever waited at once and keeps its threads while
    // the load goes on, so it is bounded.
    let runtime =
        tokio::runtime::Builder::new_multi_thread().enable_all().max_blocking_threads(config.store_threads).build();
    let runtime = match runtime {
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
        match server::serve(&config, store, auth, listener, shutdown_signal()).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => fail(1, &error),
        }
    })
}

fn fail(code: u8, error: &dyn std::fmt::Display) -> ExitCode {
    eprintln!("agentvfs-front: {error}");
    ExitCode::from(code)
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("AGENTVFS_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Colours only for people at a terminal, not for log collectors.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    match format {
        LogFormat::Plain => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
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
