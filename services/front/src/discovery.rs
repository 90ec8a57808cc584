//! Which workers there are.
//!
//! A `--worker` entry that is a socket address is one worker. An entry that
//! names a host stands for every address the name resolves to, looked up
//! again every refresh: behind a Kubernetes headless Service that is every
//! ready worker pod, so pods the autoscaler adds get grep jobs and index
//! updates within one refresh, and pods it removes stop being asked. A lookup
//! that fails keeps the addresses the name had, so a resolver hiccup never
//! empties the pool.

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::workers::Workers;

/// One `--worker` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A worker at a fixed address.
    Address(SocketAddr),
    /// Every address `host` resolves to, each on `port`.
    Name { host: String, port: u16 },
}

impl Target {
    /// Parses `HOST:PORT`, `IP:PORT`, `[IPV6]:PORT`, optionally after
    /// `http://`.
    pub fn parse(entry: &str) -> Result<Target, String> {
        let invalid = |why: &str| format!("worker address {entry:?} is not valid: {why}");
        let authority = entry.trim();
        let authority = authority.strip_prefix("http://").unwrap_or(authority);
        let authority = authority.strip_suffix('/').unwrap_or(authority);
        if let Ok(address) = authority.parse::<SocketAddr>() {
            return Ok(Target::Address(address));
        }
        let (host, port) = authority.rsplit_once(':').ok_or_else(|| invalid("expected HOST:PORT"))?;
        let port = port.parse::<u16>().map_err(|_| invalid("the port is not a number from 0 to 65535"))?;
        let is_name = |host: &str| {
            !host.is_empty()
                && host.len() <= 253
                && host.split('.').all(|label| {
                    !label.is_empty()
                        && label.len() <= 63
                        && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
                })
        };
        if !is_name(host) {
            return Err(invalid("expected a host name or an IP address before the port"));
        }
        Ok(Target::Name { host: host.to_owned(), port })
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Address(address) => write!(f, "{address}"),
            Target::Name { host, port } => write!(f, "{host}:{port}"),
        }
    }
}

/// Fills `workers` from `targets`: once when every target is an address,
/// otherwise now and every `refresh` for as long as the returned task runs.
pub fn start(
    targets: Vec<Target>,
    refresh: Duration,
    workers: Arc<Workers>,
) -> Option<impl std::future::Future<Output = ()> + Send + 'static> {
    let fixed: Option<Vec<SocketAddr>> = targets
        .iter()
        .map(|target| match target {
            Target::Address(address) => Some(*address),
            Target::Name { .. } => None,
        })
        .collect();
    if let Some(addresses) = fixed {
        workers.set_addresses(addresses);
        return None;
    }
    Some(follow(targets, refresh, workers))
}

async fn follow(targets: Vec<Target>, refresh: Duration, workers: Arc<Workers>) {
    let mut known: Vec<Vec<SocketAddr>> = vec![Vec::new(); targets.len()];
    let mut tick = tokio::time::interval(refresh);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        for (target, known) in targets.iter().zip(&mut known) {
            match target {
                Target::Address(address) => *known = vec![*address],
                Target::Name { host, port } => match tokio::net::lookup_host((host.as_str(), *port)).await {
                    Ok(found) => *known = found.collect(),
                    Err(error) => {
                        tracing::warn!(worker = %target, %error, "cannot resolve a worker name; keeping its last addresses");
                    }
                },
            }
        }
        workers.set_addresses(known.concat());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_and_names_parse() {
        assert_eq!(Target::parse("127.0.0.1:50052"), Ok(Target::Address("127.0.0.1:50052".parse().unwrap())));
        assert_eq!(Target::parse("http://[::1]:7/"), Ok(Target::Address("[::1]:7".parse().unwrap())));
        assert_eq!(
            Target::parse("agentvfs-worker.ns.svc.cluster.local:50052"),
            Ok(Target::Name { host: "agentvfs-worker.ns.svc.cluster.local".into(), port: 50052 })
        );
    }

    #[test]
    fn malformed_entries_are_refused() {
        for entry in ["", "worker", "worker:", "worker:99999", ":50052", "a..b:1", "bad host:1", "https://w:1", "w:1/x"]
        {
            assert!(Target::parse(entry).is_err(), "{entry:?} was accepted");
        }
    }
}
