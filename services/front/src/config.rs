//! Configuration of `agentvfs-front`: flags, `AGENTVFS_*` environment
//! variables and an optional TOML file (`--config`), in that order of
//! precedence. Everything is validated before the server binds.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use serde::Deserialize;

use crate::discovery::Target;
use crate::store::{Durability, PostgresOptions, Quota, StoreLimits, masked_url};

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LogFormat {
    #[default]
    Plain,
    Json,
}

/// Every setting, each optional so that the sources can be layered.
#[derive(Debug, Clone, Default, Parser, Deserialize)]
#[command(
    name = "agentvfs-front",
    version,
    about = "The agentvfs front: the gRPC file system for AI agents.",
    disable_help_subcommand = true
)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct Options {
    /// Something to do other than serving; with none, the front serves.
    #[command(subcommand)]
    #[serde(skip)]
    pub command: Option<Command>,
    /// TOML file with any of these settings (flags and environment win).
    #[arg(long, env = "AGENTVFS_CONFIG")]
    #[serde(skip)]
    pub config: Option<PathBuf>,
    /// Address to serve gRPC on; port 0 picks a free port.
    #[arg(long, env = "AGENTVFS_LISTEN")]
    pub listen: Option<SocketAddr>,
    /// Directory of the embedded (sled) store; not used with --database-url.
    #[arg(long, env = "AGENTVFS_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// Keep the store in a PostgreSQL-protocol database instead:
    /// `postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE`.
    #[arg(long, env = "AGENTVFS_DATABASE_URL", conflicts_with = "database_url_file")]
    pub database_url: Option<String>,
    /// File holding the database URL (a mounted Kubernetes Secret).
    #[arg(long, env = "AGENTVFS_DATABASE_URL_FILE")]
    pub database_url_file: Option<PathBuf>,
    /// Database connections open at once, at most.
    #[arg(long, env = "AGENTVFS_DATABASE_POOL")]
    pub database_pool: Option<usize>,
    /// Seconds to wait for a database connection before calls fail with
    /// STORE_UNAVAILABLE.
    #[arg(long, env = "AGENTVFS_DATABASE_CONNECT_TIMEOUT_SECONDS")]
    pub database_connect_timeout_seconds: Option<u64>,
    /// Seconds a database statement may run before it is cancelled.
    #[arg(long, env = "AGENTVFS_DATABASE_STATEMENT_TIMEOUT_SECONDS")]
    pub database_statement_timeout_seconds: Option<u64>,
    /// Seconds a front's leases last unless renewed: with several fronts on
    /// one database, how soon another front takes over the background work
    /// (index delivery, pruning) and the idempotency keys of one that died.
    #[arg(long, env = "AGENTVFS_LEASE_SECONDS")]
    pub lease_seconds: Option<u64>,
    /// Workers, comma-separated: `IP:PORT`, or `HOST:PORT` for every
    /// address the name resolves to (a headless Service: every ready pod).
    #[arg(long, env = "AGENTVFS_WORKER", value_delimiter = ',')]
    pub worker: Option<Vec<String>>,
    /// Seconds between lookups of worker host names.
    #[arg(long, env = "AGENTVFS_WORKER_REFRESH_SECONDS")]
    pub worker_refresh_seconds: Option<u64>,
    /// Accept unauthenticated calls as principal `dev` (loopback only).
    #[arg(long, env = "AGENTVFS_DEV", num_args = 0..=1, default_missing_value = "true")]
    pub dev: Option<bool>,
    /// TOML file of bearer tokens: `[[tokens]] token, principal, admin`.
    #[arg(long, env = "AGENTVFS_TOKENS")]
    pub tokens: Option<PathBuf>,
    /// How writes are made durable before they are acknowledged.
    #[arg(long, env = "AGENTVFS_DURABILITY", value_enum)]
    pub durability: Option<Durability>,
    #[arg(long, env = "AGENTVFS_LOG_FORMAT", value_enum)]
    pub log_format: Option<LogFormat>,
    /// Largest file text operations accept, in bytes.
    #[arg(long, env = "AGENTVFS_MAX_TEXT_BYTES")]
    pub max_text_bytes: Option<u64>,
    /// Largest file of any kind, in bytes.
    #[arg(long, env = "AGENTVFS_MAX_FILE_BYTES")]
    pub max_file_bytes: Option<u64>,
    /// Largest gRPC message, in bytes.
    #[arg(long, env = "AGENTVFS_MAX_MESSAGE_BYTES")]
    pub max_message_bytes: Option<usize>,
    /// Default byte quota of new spaces.
    #[arg(long, env = "AGENTVFS_DEFAULT_QUOTA_BYTES")]
    pub default_quota_bytes: Option<u64>,
    /// Default file-count quota of new spaces.
    #[arg(long, env = "AGENTVFS_DEFAULT_QUOTA_FILES")]
    pub default_quota_files: Option<u64>,
    /// Seconds in-flight calls get to finish after SIGTERM.
    #[arg(long, env = "AGENTVFS_DRAIN_SECONDS")]
    pub drain_seconds: Option<u64>,
    /// Seconds a call may take before it fails with DEADLINE_EXCEEDED (a
    /// shorter client deadline wins; streamed responses are not cut).
    #[arg(long, env = "AGENTVFS_REQUEST_TIMEOUT_SECONDS")]
    pub request_timeout_seconds: Option<u64>,
    /// Grep jobs running at once across all workers.
    #[arg(long, env = "AGENTVFS_GREP_CONCURRENCY")]
    pub grep_concurrency: Option<usize>,
    /// Grep jobs that may wait for a slot before calls fail with OVERLOADED.
    #[arg(long, env = "AGENTVFS_GREP_QUEUE")]
    pub grep_queue: Option<usize>,
    /// Files one grep page visits at most.
    #[arg(long, env = "AGENTVFS_GREP_MAX_FILES")]
    pub grep_max_files: Option<usize>,
    /// Bytes one grep page scans at most.
    #[arg(long, env = "AGENTVFS_GREP_MAX_BYTES")]
    pub grep_max_bytes: Option<u64>,
    /// Address to serve Prometheus metrics on (`/metrics`); none by default.
    /// The log says the port bound (`metrics listening on ADDR`), for `:0`.
    #[arg(long, env = "AGENTVFS_METRICS_LISTEN")]
    pub metrics_listen: Option<SocketAddr>,
    /// Address to serve HTTP on: `POST /api/v1/fs/{rpc}` and
    /// `/api/v1/admin/{rpc}` in proto3 JSON, file content raw at
    /// `/api/v1/fs/content`, Watch as Server-Sent Events, MCP at `/mcp` and
    /// `GET /openapi.json`; none by default. The log says the port bound
    /// (`HTTP listening on ADDR`), for `:0`.
    #[arg(long, env = "AGENTVFS_HTTP_LISTEN")]
    pub http_listen: Option<SocketAddr>,
    /// Browser origins that may call `/mcp`, comma-separated, each with a
    /// scheme and a port or `*` (`https://app.example:443`,
    /// `http://localhost:*`); a request from any other origin is refused.
    #[arg(long, env = "AGENTVFS_HTTP_ALLOWED_ORIGINS", value_delimiter = ',')]
    pub http_allowed_origins: Option<Vec<String>>,
    /// Free disk space to keep; writes that would go below it are STORAGE_FULL.
    #[arg(long, env = "AGENTVFS_MIN_FREE_BYTES")]
    pub min_free_bytes: Option<u64>,
    /// Memory for caching the store, in bytes: sled's page cache, or on a
    /// database the cache of version records and content (which never change).
    #[arg(long, env = "AGENTVFS_STORE_CACHE_BYTES")]
    pub store_cache_bytes: Option<u64>,
    /// Most entries a folder may hold for one change to move, copy, trash
    /// or remove it whole (larger ones are TOO_LARGE).
    #[arg(long, env = "AGENTVFS_MAX_SUBTREE_ENTRIES")]
    pub max_subtree_entries: Option<usize>,
    /// Threads for store work at most (each keeps memory of its own once
    /// started); calls beyond that wait for one.
    #[arg(long, env = "AGENTVFS_STORE_THREADS")]
    pub store_threads: Option<usize>,
    /// Calls served at once; more fail fast with OVERLOADED.
    #[arg(long, env = "AGENTVFS_MAX_IN_FLIGHT")]
    pub max_in_flight: Option<usize>,
    /// Calls per second per principal, bursts of twice that (0: unlimited).
    #[arg(long, env = "AGENTVFS_RATE_LIMIT")]
    pub rate_limit: Option<u32>,
    /// Hours idempotency receipts are kept (at least 24).
    #[arg(long, env = "AGENTVFS_RECEIPT_HOURS")]
    pub receipt_hours: Option<u64>,
    /// Read records kept for the read-before-edit rule, across sessions.
    #[arg(long, env = "AGENTVFS_SESSION_CAPACITY")]
    pub session_capacity: Option<usize>,
    /// Seconds after which an idle session's read records are forgotten.
    #[arg(long, env = "AGENTVFS_SESSION_IDLE_SECONDS")]
    pub session_idle_seconds: Option<u64>,
    /// Print the effective configuration and exit.
    #[arg(long)]
    #[serde(skip)]
    pub print_config: bool,
}

/// What `agentvfs-front COMMAND` does instead of serving.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum Command {
    /// Copy a stopped embedded store (--data-dir) into an empty database,
    /// then verify the copy by reading every version back.
    ///
    /// Every table is copied byte for byte, in batches of a few hundred
    /// rows per transaction; then the database is opened as a store and
    /// every version of every space is read back and hashed again. Refuses
    /// a database that holds anything, and a store that is running, missing
    /// or damaged. A copy that stops half way leaves a database that fronts
    /// refuse: drop and recreate it, then run migrate again.
    Migrate(crate::migrate::MigrateOptions),
}

/// The validated configuration the server runs with.
#[derive(Debug, Clone)]
pub struct Config {
    pub listen: SocketAddr,
    pub data_dir: PathBuf,
    /// The database to keep the store in, instead of `data_dir`.
    pub database: Option<PostgresOptions>,
    /// How long a front's leases last unless renewed.
    pub lease: Duration,
    pub workers: Vec<Target>,
    pub worker_refresh: Duration,
    pub dev: bool,
    pub tokens: Option<PathBuf>,
    pub durability: Durability,
    pub log_format: LogFormat,
    pub limits: StoreLimits,
    pub max_message_bytes: usize,
    pub drain: Duration,
    pub request_timeout: Duration,
    pub session_capacity: usize,
    pub session_idle: Duration,
    pub grep_concurrency: usize,
    pub grep_queue: usize,
    pub grep_max_files: usize,
    pub grep_max_bytes: u64,
    pub receipt_retention: Duration,
    pub max_in_flight: usize,
    pub rate_limit: u32,
    pub metrics_listen: Option<SocketAddr>,
    pub http_listen: Option<SocketAddr>,
    pub http_allowed_origins: Vec<String>,
    pub store_threads: usize,
}

/// A configuration that cannot be used; the message is printed as is.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

impl Options {
    /// Layers the `--config` file (if any) under these options.
    pub fn with_file(self) -> Result<Options, ConfigError> {
        let Some(path) = &self.config else {
            return Ok(self);
        };
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError(format!("cannot read config file {}: {e}", path.display())))?;
        let file: Options = toml::from_str(&text)
            .map_err(|e| ConfigError(format!("config file {} is not valid: {e}", path.display())))?;
        Ok(Options {
            command: self.command,
            config: self.config,
            listen: self.listen.or(file.listen),
            data_dir: self.data_dir.or(file.data_dir),
            database_url: self.database_url.or(file.database_url),
            database_url_file: self.database_url_file.or(file.database_url_file),
            database_pool: self.database_pool.or(file.database_pool),
            database_connect_timeout_seconds: self
                .database_connect_timeout_seconds
                .or(file.database_connect_timeout_seconds),
            database_statement_timeout_seconds: self
                .database_statement_timeout_seconds
                .or(file.database_statement_timeout_seconds),
            lease_seconds: self.lease_seconds.or(file.lease_seconds),
            worker: self.worker.or(file.worker),
            worker_refresh_seconds: self.worker_refresh_seconds.or(file.worker_refresh_seconds),
            dev: self.dev.or(file.dev),
            tokens: self.tokens.or(file.tokens),
            durability: self.durability.or(file.durability),
            log_format: self.log_format.or(file.log_format),
            max_text_bytes: self.max_text_bytes.or(file.max_text_bytes),
            max_file_bytes: self.max_file_bytes.or(file.max_file_bytes),
            max_message_bytes: self.max_message_bytes.or(file.max_message_bytes),
            default_quota_bytes: self.default_quota_bytes.or(file.default_quota_bytes),
            default_quota_files: self.default_quota_files.or(file.default_quota_files),
            drain_seconds: self.drain_seconds.or(file.drain_seconds),
            request_timeout_seconds: self.request_timeout_seconds.or(file.request_timeout_seconds),
            session_capacity: self.session_capacity.or(file.session_capacity),
            grep_concurrency: self.grep_concurrency.or(file.grep_concurrency),
            grep_queue: self.grep_queue.or(file.grep_queue),
            grep_max_files: self.grep_max_files.or(file.grep_max_files),
            grep_max_bytes: self.grep_max_bytes.or(file.grep_max_bytes),
            receipt_hours: self.receipt_hours.or(file.receipt_hours),
            max_in_flight: self.max_in_flight.or(file.max_in_flight),
            min_free_bytes: self.min_free_bytes.or(file.min_free_bytes),
            store_cache_bytes: self.store_cache_bytes.or(file.store_cache_bytes),
            max_subtree_entries: self.max_subtree_entries.or(file.max_subtree_entries),
            store_threads: self.store_threads.or(file.store_threads),
            metrics_listen: self.metrics_listen.or(file.metrics_listen),
            http_listen: self.http_listen.or(file.http_listen),
            http_allowed_origins: self.http_allowed_origins.or(file.http_allowed_origins),
            rate_limit: self.rate_limit.or(file.rate_limit),
            session_idle_seconds: self.session_idle_seconds.or(file.session_idle_seconds),
            print_config: self.print_config,
        })
    }

    /// Applies defaults and checks the result.
    pub fn resolve(self) -> Result<Config, ConfigError> {
        let defaults = StoreLimits::default();
        let database_url = match (self.database_url, &self.database_url_file) {
            (Some(_), Some(_)) => {
                return Err(ConfigError("give --database-url or --database-url-file, not both".to_owned()));
            }
            (Some(url), None) => Some(url),
            (None, Some(path)) => Some(read_database_url(path)?),
            (None, None) => None,
        };
        let database = database_url.map(|url| PostgresOptions {
            url,
            pool_size: self.database_pool.unwrap_or(16),
            connect_timeout: Duration::from_secs(self.database_connect_timeout_seconds.unwrap_or(5)),
            statement_timeout: Duration::from_secs(self.database_statement_timeout_seconds.unwrap_or(30)),
        });
        let config = Config {
            listen: self.listen.unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 50051))),
            data_dir: self.data_dir.unwrap_or_else(|| PathBuf::from("./data")),
            database,
            lease: Duration::from_secs(self.lease_seconds.unwrap_or(5)),
            workers: self
                .worker
                .unwrap_or_default()
                .iter()
                .filter(|w| !w.trim().is_empty())
                .map(|w| Target::parse(w))
                .collect::<Result<_, _>>()
                .map_err(ConfigError)?,
            worker_refresh: Duration::from_secs(self.worker_refresh_seconds.unwrap_or(5)),
            dev: self.dev.unwrap_or(false),
            tokens: self.tokens,
            durability: self.durability.unwrap_or_default(),
            log_format: self.log_format.unwrap_or_default(),
            limits: StoreLimits {
                max_text_bytes: self.max_text_bytes.unwrap_or(defaults.max_text_bytes),
                max_file_bytes: self.max_file_bytes.unwrap_or(defaults.max_file_bytes),
                default_quota: Quota {
                    max_bytes: self.default_quota_bytes.unwrap_or(defaults.default_quota.max_bytes),
                    max_files: self.default_quota_files.unwrap_or(defaults.default_quota.max_files),
                },
                min_free_bytes: self.min_free_bytes.unwrap_or(defaults.min_free_bytes),
                cache_bytes: self.store_cache_bytes.unwrap_or(defaults.cache_bytes),
                max_subtree_entries: self.max_subtree_entries.unwrap_or(defaults.max_subtree_entries),
            },
            max_message_bytes: self.max_message_bytes.unwrap_or(8 << 20),
            drain: Duration::from_secs(self.drain_seconds.unwrap_or(20)),
            request_timeout: Duration::from_secs(self.request_timeout_seconds.unwrap_or(120)),
            session_capacity: self.session_capacity.unwrap_or(100_000),
            session_idle: Duration::from_secs(self.session_idle_seconds.unwrap_or(3600)),
            grep_concurrency: self.grep_concurrency.unwrap_or(8),
            grep_queue: self.grep_queue.unwrap_or(64),
            grep_max_files: self.grep_max_files.unwrap_or(1_000),
            grep_max_bytes: self.grep_max_bytes.unwrap_or(10 << 20),
            receipt_retention: Duration::from_secs(3600 * self.receipt_hours.unwrap_or(24)),
            max_in_flight: self.max_in_flight.unwrap_or(4096),
            rate_limit: self.rate_limit.unwrap_or(5000),
            metrics_listen: self.metrics_listen,
            http_listen: self.http_listen,
            http_allowed_origins: self
                .http_allowed_origins
                .unwrap_or_default()
                .into_iter()
                .map(|origin| origin.trim().to_owned())
                .filter(|origin| !origin.is_empty())
                .collect(),
            store_threads: self.store_threads.unwrap_or(512),
        };
        config.validate()?;
        Ok(config)
    }
}

/// The database URL in the file at `path` (surrounding blanks dropped).
pub fn read_database_url(path: &std::path::Path) -> Result<String, ConfigError> {
    std::fs::read_to_string(path)
        .map(|url| url.trim().to_owned())
        .map_err(|e| ConfigError(format!("cannot read the database URL from {}: {e}", path.display())))
}

impl Config {
    fn validate(&self) -> Result<(), ConfigError> {
        if self.dev && !self.listen.ip().is_loopback() {
            return Err(ConfigError(format!(
                "--dev accepts unauthenticated calls, so it only listens on a loopback address, not {}",
                self.listen
            )));
        }
        if let Some(http) = self.http_listen.filter(|http| self.dev && !http.ip().is_loopback()) {
            return Err(ConfigError(format!(
                "--dev accepts unauthenticated calls, so it only serves HTTP on a loopback address, not {http}"
            )));
        }
        if !self.dev && self.tokens.is_none() {
            return Err(ConfigError("either --tokens FILE or --dev is required".to_owned()));
        }
        if self.lease.is_zero() {
            return Err(ConfigError("--lease-seconds must be positive".to_owned()));
        }
        if let Some(database) = &self.database {
            if !(database.url.starts_with("postgres://") || database.url.starts_with("postgresql://")) {
                return Err(ConfigError(format!(
                    "the database URL must start with postgres:// or postgresql://, not {:?}",
                    masked_url(&database.url)
                )));
            }
            if database.pool_size == 0 || database.connect_timeout.is_zero() || database.statement_timeout.is_zero() {
                return Err(ConfigError("--database-pool and the database timeouts must be positive".to_owned()));
            }
        }
        let limits = &self.limits;
        if limits.max_text_bytes == 0 || limits.max_text_bytes > limits.max_file_bytes {
            return Err(ConfigError("--max-text-bytes must be between 1 and --max-file-bytes".to_owned()));
        }
        if self.max_message_bytes < 64 << 10 {
            return Err(ConfigError("--max-message-bytes must be at least 65536".to_owned()));
        }
        if self.request_timeout.is_zero() {
            return Err(ConfigError("--request-timeout-seconds must be positive".to_owned()));
        }
        if self.worker_refresh.is_zero() {
            return Err(ConfigError("--worker-refresh-seconds must be positive".to_owned()));
        }
        if self.max_in_flight == 0 {
            return Err(ConfigError("--max-in-flight must be positive".to_owned()));
        }
        if self.store_threads == 0 {
            return Err(ConfigError("--store-threads must be positive".to_owned()));
        }
        if self.receipt_retention < Duration::from_secs(24 * 3600) {
            return Err(ConfigError("--receipt-hours must be at least 24".to_owned()));
        }
        if self.grep_max_files == 0 || self.grep_max_bytes == 0 {
            return Err(ConfigError("grep page budgets must be positive".to_owned()));
        }
        if limits.max_subtree_entries == 0 {
            return Err(ConfigError("--max-subtree-entries must be positive".to_owned()));
        }
        if limits.default_quota.max_bytes == 0 || limits.default_quota.max_files == 0 {
            return Err(ConfigError("default quotas must be positive".to_owned()));
        }
        Ok(())
    }

    /// The configuration as TOML-like text, for `--print-config`.
    pub fn describe(&self) -> String {
        format!(
            "listen = \"{}\"\n{}worker = {:?}\nworker-refresh-seconds = {}\ndev = {}\ntokens = {:?}\ndurability = \"{:?}\"\n\
             log-format = \"{:?}\"\nmax-text-bytes = {}\nmax-file-bytes = {}\nmax-message-bytes = {}\n\
             default-quota-bytes = {}\ndefault-quota-files = {}\nmin-free-bytes = {}\nstore-cache-bytes = {}\nmax-subtree-entries = {}\nstore-threads = {}\n\
             drain-seconds = {}\n\
             request-timeout-seconds = {}\n\
             session-capacity = {}\nsession-idle-seconds = {}\ngrep-concurrency = {}\ngrep-queue = {}\n\
             grep-max-files = {}\ngrep-max-bytes = {}\nreceipt-hours = {}\nmax-in-flight = {}\nrate-limit = {}\nmetrics-listen = {:?}\nhttp-listen = {:?}\nhttp-allowed-origins = {:?}\n",
            self.listen,
            self.database.as_ref().map_or_else(
                || format!("data-dir = \"{}\"\n", self.data_dir.display()),
                |database| format!(
                    "database-url = \"{}\"\ndatabase-pool = {}\ndatabase-connect-timeout-seconds = {}\n\
                 database-statement-timeout-seconds = {}\nlease-seconds = {}\n",
                    masked_url(&database.url),
                    database.pool_size,
                    database.connect_timeout.as_secs(),
                    database.statement_timeout.as_secs(),
                    self.lease.as_secs(),
                )
            ),
            self.workers.iter().map(ToString::to_string).collect::<Vec<_>>(),
            self.worker_refresh.as_secs(),
            self.dev,
            self.tokens.as_ref().map(|p| p.display().to_string()),
            self.durability,
            self.log_format,
            self.limits.max_text_bytes,
            self.limits.max_file_bytes,
            self.max_message_bytes,
            self.limits.default_quota.max_bytes,
            self.limits.default_quota.max_files,
            self.limits.min_free_bytes,
            self.limits.cache_bytes,
            self.limits.max_subtree_entries,
            self.store_threads,
            self.drain.as_secs(),
            self.request_timeout.as_secs(),
            self.session_capacity,
            self.session_idle.as_secs(),
            self.grep_concurrency,
            self.grep_queue,
            self.grep_max_files,
            self.grep_max_bytes,
            self.receipt_retention.as_secs() / 3600,
            self.max_in_flight,
            self.rate_limit,
            self.metrics_listen.map(|a| a.to_string()),
            self.http_listen.map(|a| a.to_string()),
            self.http_allowed_origins,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Config, ConfigError> {
        Options::try_parse_from(std::iter::once("agentvfs-front").chain(args.iter().copied()))
            .map_err(|e| ConfigError(e.to_string()))?
            .with_file()?
            .resolve()
    }

    #[test]
    fn dev_mode_refuses_public_addresses() {
        assert!(parse(&["--dev", "--listen", "127.0.0.1:0"]).is_ok());
        let err = parse(&["--dev", "true", "--listen", "0.0.0.0:50051"]).unwrap_err();
        assert!(err.0.contains("loopback"), "{err}");
    }

    #[test]
    fn requires_an_authentication_mode() {
        assert!(parse(&[]).unwrap_err().0.contains("--tokens"));
    }

    #[test]
    fn flags_override_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("front.toml");
        std::fs::write(&file, "dev = true\ndata-dir = \"/from/file\"\nmax-text-bytes = 1024\n").unwrap();
        let config = parse(&["--config", file.to_str().unwrap(), "--data-dir", "/from/flag"]).unwrap();
        assert_eq!(config.data_dir, PathBuf::from("/from/flag"));
        assert_eq!(config.limits.max_text_bytes, 1024);
        assert!(config.dev);
    }

    #[test]
    fn store_threads_are_bounded_and_positive() {
        assert_eq!(parse(&["--dev"]).unwrap().store_threads, 512);
        assert_eq!(parse(&["--dev", "--store-threads", "8"]).unwrap().store_threads, 8);
        assert!(parse(&["--dev", "--store-threads", "0"]).unwrap_err().0.contains("--store-threads"));
    }

    #[test]
    fn the_database_url_comes_from_a_flag_or_a_file_and_its_password_is_never_printed() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("url");
        std::fs::write(&file, "postgres://agentvfs:s3cret@db:5432/agentvfs\n").unwrap();
        let config = parse(&["--dev", "--database-url-file", file.to_str().unwrap()]).unwrap();
        let database = config.database.as_ref().unwrap();
        assert_eq!(database.url, "postgres://agentvfs:s3cret@db:5432/agentvfs");
        assert_eq!(database.pool_size, 16);
        let printed = config.describe();
        assert!(printed.contains("database-url = \"postgres://agentvfs:***@db:5432/agentvfs\""), "{printed}");
        assert!(!printed.contains("s3cret"), "{printed}");
        let both = parse(&["--dev", "--database-url", "postgres://h/d", "--database-url-file", "/f"]);
        assert!(both.is_err());
        let wrong = parse(&["--dev", "--database-url", "mysql://u:pw@h/d"]).unwrap_err();
        assert!(wrong.0.contains("postgres://") && !wrong.0.contains("pw"), "{wrong}");
        assert!(parse(&["--dev"]).unwrap().database.is_none());
    }

    #[test]
    fn unknown_file_keys_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("front.toml");
        std::fs::write(&file, "dve = true\n").unwrap();
        assert!(parse(&["--config", file.to_str().unwrap()]).unwrap_err().0.contains("not valid"));
    }
}
