//! `agentvfs-front`: parses and validates configuration, opens the store,
//! binds, prints `listening on <ADDR>` and serves until SIGTERM or Ctrl-C.
//! `agentvfs-front migrate` moves an embedded store into a database instead.

use std::process::ExitCode;

use agentvfs_front::auth::Authenticator;
use agentvfs_front::config::{Command, LogFormat, Options};
use agentvfs_front::store::Store;
use agentvfs_front::{migrate, server};
use clap::Parser as _;

/// jemalloc returns freed memory to the system; with glibc's allocator (an
/// arena per busy thread) the front's memory grew without bound under a
/// steady write load: 45 → 137 MiB in three minutes of the soak test, flat
/// at about 80 MiB with jemalloc.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    let options = Options::parse();
    if let Some(Command::Migrate(migration)) = &options.command {
        agentvfs_process::init_logging(false);
        return match migrate::run(migration) {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => fail(1, &error),
        };
    }
    let print_config = options.print_config;
    let config = match options.with_file().and_then(Options::resolve) {
        Ok(config) => config,
        Err(error) => return fail(2, &error),
    };
    if print_config {
        print!("{}", config.describe());
        return ExitCode::SUCCESS;
    }
    #[cfg(feature = "failpoints")]
    let _failpoints = agentvfs_process::arm_failpoints();
    agentvfs_process::init_logging(config.log_format == LogFormat::Json);
    let auth = match &config.tokens {
        Some(path) => match Authenticator::from_file(path, config.dev) {
            Ok(auth) => auth,
            Err(error) => return fail(2, &error),
        },
        None => Authenticator::dev(),
    };
    let opened = match &config.database {
        Some(database) => Store::connect(database, config.limits),
        None => Store::open(&config.data_dir, config.durability, config.limits),
    };
    let store = match opened {
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
        let shutdown = match agentvfs_process::Shutdown::on_signals() {
            Ok(shutdown) => shutdown,
            Err(error) => return fail(1, &format!("cannot catch signals: {error}")),
        };
        // Bound before `listening on` is printed, which says the front is
        // reachable on every address it was given.
        let http = match agentvfs_process::bind("HTTP", config.http_listen).await {
            Ok(listener) => listener,
            Err(error) => return fail(1, &error),
        };
        let metrics = match agentvfs_process::bind("metrics", config.metrics_listen).await {
            Ok(listener) => listener,
            Err(error) => return fail(1, &error),
        };
        let listener = match agentvfs_process::listen(config.listen).await {
            Ok(listener) => listener,
            Err(error) => return fail(1, &error),
        };
        match server::serve(&config, store, auth, server::Listeners { grpc: listener, http, metrics }, shutdown).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => fail(1, &error),
        }
    })
}

fn fail(code: u8, error: &dyn std::fmt::Display) -> ExitCode {
    agentvfs_process::fail("agentvfs-front", code, error)
}
