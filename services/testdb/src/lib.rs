//! Throwaway PostgreSQL clusters for tests: a real server (Debian's
//! `postgresql` package, found under `/usr/lib/postgresql/*/bin`, the newest
//! version), never a mock.
//!
//! A test process usually shares one cluster ([`Cluster::shared`], started on
//! first use) and isolates its tests by database
//! ([`Cluster::create_database`]). Crash tests start their own
//! ([`Cluster::start`]) and [`kill`](Cluster::kill) and
//! [`restart`](Cluster::restart) it.
//!
//! - Each cluster lives in a fresh temporary directory: `initdb` with a
//!   trusted superuser `agentvfs`, UTF-8 and the C locale; the server listens
//!   on 127.0.0.1 on a port chosen at run time, with durability as in
//!   production (`fsync` on).
//! - PostgreSQL refuses to run as root: when the tests do (as CI does), the
//!   server runs as the `postgres` user the package creates.
//! - The server never outlives the test process, however that ends (a
//!   panic, SIGKILL): its supervisor stops it and removes its directory when
//!   the process is gone. Dropping a cluster of one's own does the same.
//!
//! ```no_run
//! # async fn run() -> Result<(), tokio_postgres::Error> {
//! let url = agentvfs_testdb::Cluster::shared().create_database();
//! let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await?;
//! tokio::spawn(connection);
//! client.batch_execute("CREATE TABLE t (k bytea PRIMARY KEY)").await?;
//! # Ok(())
//! # }
//! ```

mod host;
mod server;

use std::fs;
use std::io::{Read, Seek, SeekFrom};
use std::net::{Ipv4Addr, TcpListener};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use host::Account;
use server::Server;
use tempfile::TempDir;

/// The superuser `initdb` creates; it connects without a password.
const USER: &str = "agentvfs";

/// How long a server may take to accept connections, crash recovery
/// included; CI machines can be slow.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// Ports to try when another process takes the one chosen first.
const PORT_ATTEMPTS: usize = 5;

/// A PostgreSQL server with its data directory; see the crate's
/// documentation.
#[derive(Debug)]
pub struct Cluster {
    bin: PathBuf,
    account: Option<Account>,
    port: u16,
    /// `None` between [`Cluster::kill`] and [`Cluster::restart`].
    server: Mutex<Option<Server>>,
    databases: AtomicU64,
    // Last, so that it is removed after the server stopped.
    dir: TempDir,
}

impl Cluster {
    /// Creates a cluster in a fresh temporary directory and starts its
    /// server; returns once it accepts connections.
    ///
    /// # Panics
    ///
    /// When PostgreSQL is not installed or the server does not start (the
    /// message includes the server's log).
    pub fn start() -> Cluster {
        Cluster::try_start().unwrap_or_else(|error| panic!("cannot start PostgreSQL: {error}"))
    }

    /// The cluster this test process shares, started on first use and
    /// stopped when the process exits.
    pub fn shared() -> &'static Cluster {
        static SHARED: OnceLock<Cluster> = OnceLock::new();
        SHARED.get_or_init(Cluster::start)
    }

    /// The URL of database `db`: `postgres://agentvfs@127.0.0.1:PORT/DB`.
    pub fn url(&self, db: &str) -> String {
        format!("postgres://{USER}@127.0.0.1:{}/{db}", self.port)
    }

    /// Creates a new, empty database with a name unique in this cluster and
    /// returns its URL.
    ///
    /// # Panics
    ///
    /// When the server does not answer (for instance after [`Cluster::kill`]).
    pub fn create_database(&self) -> String {
        let name = format!("test_{}", self.databases.fetch_add(1, Ordering::Relaxed) + 1);
        self.psql(&format!("CREATE DATABASE {name}"))
            .unwrap_or_else(|error| panic!("cannot create database {name}: {error}"));
        self.url(&name)
    }

    /// Crashes the server like a machine losing power: SIGKILL to the
    /// postmaster and all its backends at once. Connections fail until
    /// [`Cluster::restart`]. Does nothing if the server is not running.
    ///
    /// # Panics
    ///
    /// When the server's supervisor cannot be reached.
    pub fn kill(&self) {
        let server = self.server.lock().unwrap_or_else(PoisonError::into_inner).take();
        if let Some(server) = server {
            server.crash().unwrap_or_else(|error| panic!("cannot kill PostgreSQL: {error}"));
        }
    }

    /// Starts the server again on the same data directory and port (killing
    /// it first if it runs); returns once it accepts connections, that is
    /// after crash recovery.
    ///
    /// # Panics
    ///
    /// When the server does not start (the message includes its log).
    pub fn restart(&self) {
        let mut server = self.server.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(running) = server.take() {
            running.crash().unwrap_or_else(|error| panic!("cannot kill PostgreSQL: {error}"));
        }
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            match self.run(deadline) {
                Ok(started) => {
                    *server = Some(started);
                    return;
                }
                // The killed server's backends may hold its shared memory
                // for a moment, or another process the port; PostgreSQL
                // then refuses to start.
                Err(Failure::Exited(log)) if Instant::now() < deadline && is_transient(&log) => {
                    thread::sleep(Duration::from_millis(50));
                }
                Err(failure) => panic!("cannot restart PostgreSQL: {failure}"),
            }
        }
    }

    /// The port the server listens on (127.0.0.1), the same across restarts.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The postmaster's process id, `None` while the server is killed.
    pub fn pid(&self) -> Option<u32> {
        self.server.lock().unwrap_or_else(PoisonError::into_inner).as_ref().map(Server::pid)
    }

    /// The cluster's directory: `data/` (the data directory), the server's
    /// socket and `server.log`.
    pub fn directory(&self) -> &Path {
        self.dir.path()
    }

    fn try_start() -> Result<Cluster, String> {
        let bin = host::bin_dir()?;
        let account = host::server_account()?;
        let dir = tempfile::Builder::new()
            .prefix("agentvfs-pg-")
            .tempdir()
            .map_err(|error| format!("cannot create a temporary directory: {error}"))?;
        if let Some(account) = account {
            std::os::unix::fs::chown(dir.path(), Some(account.uid), Some(account.gid))
                .map_err(|error| format!("cannot hand {} to the postgres user: {error}", dir.path().display()))?;
        }
        initdb(&bin, dir.path(), account)?;
        let mut cluster =
            Cluster { bin, account, port: 0, server: Mutex::new(None), databases: AtomicU64::new(0), dir };
        for _ in 0..PORT_ATTEMPTS {
            cluster.port = free_port()?;
            match cluster.run(Instant::now() + READY_TIMEOUT) {
                Ok(server) => {
                    *cluster.server.get_mut().unwrap_or_else(PoisonError::into_inner) = Some(server);
                    return Ok(cluster);
                }
                // Another process took the port between our probe and the
                // server's bind.
                Err(Failure::Exited(log)) if log.contains("could not bind") => continue,
                Err(failure) => return Err(failure.to_string()),
            }
        }
        Err(format!("no free port after {PORT_ATTEMPTS} attempts"))
    }

    /// Starts the server and waits until it accepts connections. On
    /// failure it is stopped, the data directory kept.
    fn run(&self, deadline: Instant) -> Result<Server, Failure> {
        let log_start = fs::metadata(self.log_path()).map_or(0, |metadata| metadata.len());
        let server = Server::spawn(&self.bin, self.dir.path(), self.port, self.account).map_err(Failure::Spawn)?;
        loop {
            if self.accepts_connections(&server) {
                return Ok(server);
            }
            if server.exited() || Instant::now() >= deadline {
                let exited = server.exited();
                let crashed = server.crash();
                let log = self.log_since(log_start);
                return Err(match crashed {
                    Err(error) => Failure::Spawn(format!("{error}; server log:\n{log}")),
                    Ok(()) if exited => Failure::Exited(log),
                    Ok(()) => Failure::Timeout(log),
                });
            }
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// Whether `server` accepts connections, as its `postmaster.pid` says
    /// (the way `pg_ctl start` waits): line 1 is the postmaster's pid, which
    /// tells this run from a killed one; line 8 its status, `ready` once it
    /// listens and recovery is over. Polling the file instead of connecting
    /// keeps the log free of refused attempts.
    fn accepts_connections(&self, server: &Server) -> bool {
        let Ok(lock) = fs::read_to_string(self.dir.path().join("data/postmaster.pid")) else {
            return false;
        };
        let lines: Vec<&str> = lock.lines().map(str::trim).collect();
        lines.first().and_then(|pid| pid.parse().ok()) == Some(server.pid()) && lines.get(7) == Some(&"ready")
    }

    /// Runs one SQL command in the `postgres` database.
    fn psql(&self, sql: &str) -> Result<(), String> {
        let output = Command::new(self.bin.join("psql"))
            .args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(["-U", USER, "-d", "postgres", "-c", sql])
            .output()
            .map_err(|error| format!("cannot run psql: {error}"))?;
        if output.status.success() {
            Ok(())
        } else {
            Err(format!("psql {}: {}", output.status, String::from_utf8_lossy(&output.stderr).trim()))
        }
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("server.log")
    }

    /// The server's log from byte `start` on, at most its last 8 KiB.
    fn log_since(&self, start: u64) -> String {
        const TAIL: u64 = 8 * 1024;
        let Ok(mut file) = fs::File::open(self.log_path()) else {
            return "(no server log)".to_owned();
        };
        let end = file.metadata().map_or(start, |metadata| metadata.len());
        let mut bytes = Vec::new();
        let _ = file.seek(SeekFrom::Start(start.max(end.saturating_sub(TAIL))));
        let _ = file.read_to_end(&mut bytes);
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

/// Why a server did not come up.
#[derive(Debug)]
enum Failure {
    /// It could not be started or stopped.
    Spawn(String),
    /// It exited before accepting connections (its log).
    Exited(String),
    /// It did not accept connections in time (its log).
    Timeout(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Spawn(error) => f.write_str(error),
            Failure::Exited(log) => write!(f, "the server exited; its log:\n{log}"),
            Failure::Timeout(log) => {
                write!(f, "no connection accepted within {READY_TIMEOUT:?}; the server's log:\n{log}")
            }
        }
    }
}

/// Whether a restart failed only because the killed server had not quite
/// gone: its backends still attached to its shared memory, or its port.
fn is_transient(log: &str) -> bool {
    log.contains("pre-existing shared memory block") || log.contains("could not bind")
}

/// A port that is free on 127.0.0.1 right now.
fn free_port() -> Result<u16, String> {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .map_err(|error| format!("cannot find a free port: {error}"))
}

/// Creates the data directory `dir/data`.
fn initdb(bin: &Path, dir: &Path, account: Option<Account>) -> Result<(), String> {
    let mut command = Command::new(bin.join("initdb"));
    command
        .arg("-D")
        .arg(dir.join("data"))
        .args(["-U", USER, "--auth=trust", "-E", "UTF8", "--no-locale", "--no-instructions"])
        // The directory is thrown away: skipping the final fsync of a fresh
        // cluster saves about 0.2 s of a 1 s start here (a restart after a
        // crash pays it back: recovery fsyncs the data directory first). The
        // server itself keeps fsync on.
        .arg("--no-sync")
        .current_dir(dir);
    if let Some(account) = account {
        command.uid(account.uid).gid(account.gid);
    }
    let output = command.output().map_err(|error| format!("cannot run initdb: {error}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "initdb {}: {}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ))
    }
}
