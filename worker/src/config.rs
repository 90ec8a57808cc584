//! Configuration of `agentvfs-worker`: flags, `AGENTVFS_*` environment
//! variables and an optional TOML file (`--config`), in that order.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use serde::Deserialize;

#[derive(Debug, Clone, Default, Parser, Deserialize)]
#[command(name = "agentvfs-worker", version, about = "The agentvfs worker: grep scans and the search index.")]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct Options {
    /// TOML file with any of these settings (flags and environment win).
    #[arg(long, env = "AGENTVFS_CONFIG")]
    #[serde(skip)]
    pub config: Option<PathBuf>,
    /// Address to serve the worker service on; port 0 picks a free port.
    #[arg(long, env = "AGENTVFS_LISTEN")]
    pub listen: Option<SocketAddr>,
    /// The front's address, for fetching content by hash.
    #[arg(long, env = "AGENTVFS_FRONT")]
    pub front: Option<String>,
    /// Directory of the search index.
    #[arg(long, env = "AGENTVFS_INDEX_DIR")]
    pub index_dir: Option<PathBuf>,
    /// Bytes of file content kept in memory between jobs.
    #[arg(long, env = "AGENTVFS_CACHE_BYTES")]
    pub cache_bytes: Option<usize>,
    /// Hash every content fetched from the front (BLAKE3) and refuse any that
    /// does not match before caching it. Off by default: the front hashes
    /// content as it is written and sled checks what it reads from disk, so
    /// this guards only the path between the two processes, at about 0.4
    /// CPU-seconds per GB fetched (as much as the rest of a cold scan).
    #[arg(long, env = "AGENTVFS_VERIFY_CONTENT", num_args = 0..=1, default_missing_value = "true")]
    pub verify_content: Option<bool>,
    /// Map and touch all of the cache's memory at startup, before serving
    /// (in huge pages where the kernel has them), instead of as content
    /// arrives: the worker then holds its whole cache from the start, and
    /// its first scans take no page faults (about a fifth of the worker's
    /// CPU time on a cold scan otherwise). Off by default; the Kubernetes
    /// manifests turn it on.
    #[arg(long, env = "AGENTVFS_RESERVE_CACHE", num_args = 0..=1, default_missing_value = "true")]
    pub reserve_cache: Option<bool>,
    /// Bearer token the worker presents to the front.
    #[arg(long, env = "AGENTVFS_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Seconds in-flight jobs get to finish after SIGTERM.
    #[arg(long, env = "AGENTVFS_DRAIN_SECONDS")]
    pub drain_seconds: Option<u64>,
    /// Address to serve Prometheus metrics on (`/metrics`); none by default.
    /// The log says the port bound (`metrics listening on ADDR`), for `:0`.
    #[arg(long, env = "AGENTVFS_METRICS_LISTEN")]
    pub metrics_listen: Option<SocketAddr>,
    /// `plain` or `json` logs on stderr.
    #[arg(long, env = "AGENTVFS_LOG_FORMAT")]
    pub log_format: Option<String>,
}

/// The validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub listen: SocketAddr,
    pub front: String,
    pub index_dir: PathBuf,
    pub cache_bytes: usize,
    pub verify_content: bool,
    pub reserve_cache: bool,
    pub token: Option<String>,
    pub drain: Duration,
    pub json_logs: bool,
    pub metrics_listen: Option<SocketAddr>,
}

impl Options {
    pub fn resolve(self) -> Result<Config, String> {
        let file = match &self.config {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
                toml::from_str::<Options>(&text)
                    .map_err(|e| format!("config file {} is not valid: {e}", path.display()))?
            }
            None => Options::default(),
        };
        let front = self.front.or(file.front).unwrap_or_else(|| "127.0.0.1:50051".to_owned());
        let front = if front.contains("://") { front } else { format!("http://{front}") };
        let json_logs = match self.log_format.or(file.log_format).as_deref() {
            None | Some("plain") => false,
            Some("json") => true,
            Some(other) => return Err(format!("--log-format must be plain or json, not {other:?}")),
        };
        let config = Config {
            listen: self.listen.or(file.listen).unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 50052))),
            front,
            index_dir: self.index_dir.or(file.index_dir).unwrap_or_else(|| PathBuf::from("./data/index")),
            cache_bytes: self.cache_bytes.or(file.cache_bytes).unwrap_or(512 << 20),
            verify_content: self.verify_content.or(file.verify_content).unwrap_or(false),
            reserve_cache: self.reserve_cache.or(file.reserve_cache).unwrap_or(false),
            token: self.token.or(file.token),
            drain: Duration::from_secs(self.drain_seconds.or(file.drain_seconds).unwrap_or(20)),
            json_logs,
            metrics_listen: self.metrics_listen.or(file.metrics_listen),
        };
        tonic::transport::Endpoint::from_shared(config.front.clone())
            .map_err(|e| format!("--front {:?} is not a valid address: {e}", config.front))?;
        Ok(config)
    }
}
