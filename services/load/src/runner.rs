//! Driving load: `concurrency` callers share `connections` HTTP/2
//! connections and make unary calls until `total` calls have started or
//! `duration` has passed, then the run stops by itself.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prost::bytes::Bytes;
use tokio::sync::watch;
use tokio::time::Instant;
use tonic::client::Grpc;
use tonic::metadata::{AsciiMetadataValue, BinaryMetadataValue, MetadataKey};
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Status};

use crate::method::{Method, RawCodec};
use crate::report::{EndReason, Report, Stats};
use crate::scenario::{DurationStop, Scenario};
use crate::template::{CallData, JsonTemplate, Rng, Template};

/// One entry of the scenario's `data`, encoded once if it never changes.
#[derive(Debug)]
enum Payload {
    Fixed(Bytes),
    Templated(JsonTemplate),
}

/// Everything a call needs, prepared (and validated) before any call.
#[derive(Debug)]
pub struct Prepared {
    method: Method,
    payloads: Vec<Payload>,
    metadata: Vec<(String, Template)>,
}

impl Prepared {
    /// Parses the scenario's templates and encodes one sample of every
    /// request, so that a bad scenario fails here rather than on every call.
    pub fn new(scenario: &Scenario, method: Method) -> Result<Prepared, String> {
        let mut payloads = Vec::with_capacity(scenario.data.len());
        for (index, data) in scenario.data.iter().enumerate() {
            let where_ = if scenario.data.len() > 1 { format!("`data[{index}]`") } else { "`data`".to_owned() };
            let template = JsonTemplate::parse(data).map_err(|error| format!("{where_}: {error}"))?;
            payloads.push(if template.is_literal() {
                Payload::Fixed(method.encode(data.clone()).map_err(|error| format!("{where_}: {error}"))?)
            } else {
                Payload::Templated(template)
            });
        }
        let metadata = scenario
            .metadata
            .iter()
            .map(|(key, value)| {
                Ok((key.clone(), Template::parse(value).map_err(|error| format!("metadata {key:?}: {error}"))?))
            })
            .collect::<Result<Vec<_>, String>>()?;
        let prepared = Prepared { method, payloads, metadata };
        // Sample values stand in for each template, as on the first call.
        let mut rng = Rng::seeded(0);
        for index in 0..prepared.payloads.len() {
            prepared.request("g0c0", index as u64, &mut rng, None)?;
        }
        Ok(prepared)
    }

    /// The request for call `number`: `data` round-robin, templates
    /// expanded, metadata attached.
    fn request(
        &self,
        worker_id: &str,
        number: u64,
        rng: &mut Rng,
        timeout: Option<Duration>,
    ) -> Result<tonic::Request<Bytes>, String> {
        let index = (number % self.payloads.len() as u64) as usize;
        let mut call = CallData::new(worker_id, number, &self.method.names, rng);
        let bytes = match &self.payloads[index] {
            Payload::Fixed(bytes) => bytes.clone(),
            Payload::Templated(template) => self.method.encode(template.render(&mut call))?,
        };
        let mut request = tonic::Request::new(bytes);
        for (key, value) in &self.metadata {
            let value = value.render(&mut call);
            let map = request.metadata_mut();
            // Binary headers carry raw bytes; gRPC base64-encodes them on the wire.
            if key.ends_with("-bin") {
                let key = MetadataKey::from_bytes(key.as_bytes())
                    .map_err(|_| format!("metadata key {key:?} is not a valid header name"))?;
                map.insert_bin(key, BinaryMetadataValue::from_bytes(value.as_bytes()));
            } else {
                let key = MetadataKey::from_bytes(key.as_bytes())
                    .map_err(|_| format!("metadata key {key:?} is not a valid header name"))?;
                let value = AsciiMetadataValue::try_from(value.as_str())
                    .map_err(|_| format!("metadata {key:?} value {value:?} is not a valid header value"))?;
                map.insert(key, value);
            }
        }
        if let Some(timeout) = timeout {
            request.set_timeout(timeout);
        }
        Ok(request)
    }
}

/// The run's phase, watched by every caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Running,
    /// Start no new call; let calls in flight finish.
    Draining,
    /// Start no new call; abandon calls in flight.
    Halted,
}

/// State shared by the callers.
#[derive(Debug)]
struct Shared {
    prepared: Prepared,
    /// Calls started so far; also each call's `{{.RequestNumber}}`.
    started: AtomicU64,
    /// Calls finished so far, for `skipFirst`.
    finished: AtomicU64,
    /// `None` when the duration bounds the run.
    total: Option<u64>,
    skip_first: u64,
    timeout: Duration,
    /// With `rps`, the earliest moment the next call may start.
    pace: Option<(Mutex<Instant>, Duration)>,
}

/// Runs `scenario` against its host and reports.
pub async fn run(scenario: &Scenario, prepared: Prepared) -> Result<Report, String> {
    let host = scenario.host.as_deref().ok_or("no host: set `host` in the scenario or pass --host")?;
    let uri = if host.starts_with("http://") {
        host.to_owned()
    } else if host.starts_with("https://") {
        return Err(format!("host {host:?}: TLS is not supported; use a plaintext (h2c) address"));
    } else {
        format!("http://{host}")
    };
    let endpoint = Endpoint::from_shared(uri.clone())
        .map_err(|error| format!("host {host:?} is not a valid address: {error}"))?
        .connect_timeout(scenario.connect_timeout)
        .tcp_nodelay(true);

    let mut connecting = tokio::task::JoinSet::new();
    for _ in 0..scenario.connections {
        let endpoint = endpoint.clone();
        connecting.spawn(async move { endpoint.connect().await });
    }
    let mut channels: Vec<Channel> = Vec::new();
    while let Some(joined) = connecting.join_next().await {
        let channel = joined
            .map_err(|error| format!("connecting failed: {error}"))?
            .map_err(|error| format!("cannot connect to {uri}: {}", source_chain(&error)))?;
        channels.push(channel);
    }

    let shared = Arc::new(Shared {
        prepared,
        started: AtomicU64::new(0),
        finished: AtomicU64::new(0),
        total: scenario.bounded_by_count().then_some(scenario.total),
        skip_first: scenario.skip_first,
        timeout: scenario.timeout,
        pace: (scenario.rps > 0)
            .then(|| (Mutex::new(Instant::now()), Duration::from_secs_f64(1.0 / scenario.rps as f64))),
    });
    let (phase, watcher) = watch::channel(Phase::Running);
    let phase = Arc::new(phase);
    let start = Instant::now();

    let mut callers = tokio::task::JoinSet::new();
    for worker in 0..scenario.concurrency {
        let connection = worker % scenario.connections;
        let channel = channels[connection as usize].clone();
        let shared = shared.clone();
        let watcher = watcher.clone();
        callers.spawn(caller(format!("g{worker}c{connection}"), worker, channel, shared, watcher));
    }
    drop(watcher);

    // Ends the run at the duration (or max-duration), or on Ctrl-C.
    let deadline = match (scenario.duration, scenario.max_duration) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    let end_reason = Arc::new(Mutex::new(EndReason::Normal));
    let timer = {
        let (phase, end_reason) = (phase.clone(), end_reason.clone());
        let at_deadline = match scenario.duration_stop {
            DurationStop::Wait => Phase::Draining,
            DurationStop::Drop => Phase::Halted,
        };
        tokio::spawn(async move {
            let interrupted = async {
                // Without a signal handler the run still ends by count or duration.
                if tokio::signal::ctrl_c().await.is_err() {
                    std::future::pending::<()>().await;
                }
            };
            let deadline = async {
                match deadline {
                    Some(deadline) => tokio::time::sleep_until(start + deadline).await,
                    None => std::future::pending().await,
                }
            };
            let (next, reason) = tokio::select! {
                () = deadline => (at_deadline, EndReason::Timeout),
                () = interrupted => (Phase::Halted, EndReason::Cancel),
            };
            *end_reason.lock().expect("end reason lock") = reason;
            let _ = phase.send(next);
        })
    };

    let mut stats = Stats::default();
    let mut failure = None;
    while let Some(joined) = callers.join_next().await {
        match joined {
            Ok(Ok(caller_stats)) => stats.merge(caller_stats),
            Ok(Err(error)) => {
                let _ = phase.send(Phase::Halted);
                failure.get_or_insert(error);
            }
            Err(error) => {
                let _ = phase.send(Phase::Halted);
                failure.get_or_insert(format!("a caller panicked: {error}"));
            }
        }
    }
    let elapsed = start.elapsed();
    timer.abort();
    if let Some(error) = failure {
        return Err(error);
    }
    let end_reason = *end_reason.lock().expect("end reason lock");
    Ok(Report::new(scenario, stats, elapsed, end_reason))
}

/// One caller: makes calls one after another until the run is over.
async fn caller(
    worker_id: String,
    worker: u64,
    channel: Channel,
    shared: Arc<Shared>,
    mut phase: watch::Receiver<Phase>,
) -> Result<Stats, String> {
    let mut grpc = Grpc::new(channel);
    let mut rng = Rng::seeded(worker);
    let mut stats = Stats::default();
    let path = &shared.prepared.method.path;
    loop {
        if *phase.borrow() != Phase::Running {
            break;
        }
        let number = shared.started.fetch_add(1, Ordering::Relaxed);
        if shared.total.is_some_and(|total| number >= total) {
            break;
        }
        if let Some((next, interval)) = &shared.pace {
            let slot = {
                let mut next = next.lock().expect("pace lock");
                let slot = (*next).max(Instant::now());
                *next = slot + *interval;
                slot
            };
            tokio::select! {
                () = tokio::time::sleep_until(slot) => {}
                _ = phase.wait_for(|phase| *phase != Phase::Running) => break,
            }
        }
        let request = shared.prepared.request(&worker_id, number, &mut rng, Some(shared.timeout))?;

        let began = Instant::now();
        let call = async {
            grpc.ready().await.map_err(|error| Status::unavailable(source_chain(&error)))?;
            grpc.unary::<Bytes, Bytes, _>(request, path.clone(), RawCodec).await
        };
        // The server is told the deadline; this enforces it even when the
        // server or network does not answer.
        let call = async {
            tokio::time::timeout(shared.timeout, call)
                .await
                .unwrap_or_else(|_| Err(Status::new(Code::DeadlineExceeded, "context deadline exceeded")))
        };
        let result = tokio::select! {
            result = call => result,
            _ = phase.wait_for(|phase| *phase == Phase::Halted) => break,
        };
        let latency = began.elapsed();
        if shared.finished.fetch_add(1, Ordering::Relaxed) < shared.skip_first {
            continue;
        }
        stats.record(latency, result.as_ref().map(|_| ()));
    }
    Ok(stats)
}

/// An error with its causes, which for connection errors hold the useful part.
fn source_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        // Some errors already repeat their cause in their own message.
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}
