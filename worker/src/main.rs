//! `agentvfs-worker`: validates configuration, binds, prints
//! `listening on <ADDR>` and serves grep jobs until SIGTERM or Ctrl-C.

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
    let _failpoints = agentvfs_process::arm_failpoints();
    agentvfs_process::init_logging(config.json_logs);
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => return fail(1, &format!("cannot start the runtime: {error}")),
    };
    runtime.block_on(async move {
        let shutdown = match agentvfs_process::Shutdown::on_signals() {
            Ok(shutdown) => shutdown,
            Err(error) => return fail(1, &format!("cannot catch signals: {error}")),
        };
        // Bound before `listening on` is printed, like the front's.
        let metrics = match agentvfs_process::bind("metrics", config.metrics_listen).await {
            Ok(listener) => listener,
            Err(error) => return fail(1, &error),
        };
        let listener = match agentvfs_process::listen(config.listen).await {
            Ok(listener) => listener,
            Err(error) => return fail(1, &error),
        };
        match server::serve(&config, listener, metrics, shutdown).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => fail(1, &error),
        }
    })
}

fn fail(code: u8, error: &dyn std::fmt::Display) -> ExitCode {
    agentvfs_process::fail("agentvfs-worker", code, error)
}
