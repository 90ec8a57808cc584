//! Prometheus metrics: a tower layer that counts and times every RPC by
//! method and status code, and gauges sampled from the store, the grep
//! queue and the index outbox.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use metrics::{counter, gauge, histogram};
use metrics_exporter_prometheus::PrometheusBuilder;
use tonic::Code;
use tracing::Instrument as _;

use crate::auth::REQUEST_ID;
use crate::indexer::Progress;
use crate::store::Store;
use crate::workers::Workers;

/// The front's recorder: histograms of durations with buckets from 0.5 ms
/// to 10 s, and of how many writers one flush answered from 1 to 1,024.
pub fn recorder() -> Result<PrometheusBuilder, String> {
    let writers = metrics_exporter_prometheus::Matcher::Full("agentvfs_flush_batch_writers".into());
    PrometheusBuilder::new()
        .set_buckets(&[0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0])
        .and_then(|b| b.set_buckets_for_metric(writers, &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 1024.0]))
        .map_err(|e| format!("metrics buckets: {e}"))
}

/// Samples gauges every few seconds until the task is dropped.
pub async fn sample(store: Store, workers: Arc<Workers>, progress: Arc<Progress>) {
    let mut tick = tokio::time::interval(Duration::from_secs(5));
    loop {
        tick.tick().await;
        gauge!("agentvfs_grep_queue_depth").set(workers.queue_depth() as f64);
        let slowest = progress.slowest().unwrap_or(0);
        let sampled = store
            .blocking(move |store| {
                Ok((store.outbox_bounds()?, store.size_on_disk()?, store.outbox_lag_seconds(slowest)?))
            })
            .await;
        let (outbox, size, lag_seconds) = match sampled {
            Ok(sampled) => sampled,
            Err(_) => continue,
        };
        if let Some(size) = size {
            gauge!("agentvfs_store_size_bytes").set(size as f64);
        }
        let (depth, lag) = match outbox {
            Some((first, last)) => (last - first + 1, last.saturating_sub(slowest)),
            None => (0, 0),
        };
        gauge!("agentvfs_outbox_depth").set(depth as f64);
        gauge!("agentvfs_index_lag_jobs").set(lag as f64);
        gauge!("agentvfs_index_lag_seconds").set(lag_seconds);
    }
}

/// Counts, times and tracks in flight every RPC by method and status code,
/// and gives every call a request ID.
#[derive(Debug, Clone, Copy, Default)]
pub struct RpcMetricsLayer;

impl<S> tower::Layer<S> for RpcMetricsLayer {
    type Service = RpcMetrics<S>;

    fn layer(&self, inner: S) -> RpcMetrics<S> {
        RpcMetrics { inner }
    }
}

/// See [`RpcMetricsLayer`].
#[derive(Debug, Clone)]
pub struct RpcMetrics<S> {
    inner: S,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, B, R> tower::Service<http::Request<B>> for RpcMetrics<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<R>> + Send,
    S::Future: Send + 'static,
    S::Error: 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<Result<S::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<B>) -> Self::Future {
        let method = request.uri().path().to_owned();
        // Every call carries a request ID from here on (the client's, or a
        // new one): spans, logs and the worker calls it causes all name it.
        let request_id = match request.headers().get(REQUEST_ID).and_then(|v| v.to_str().ok()) {
            Some(id) if !id.is_empty() && id.len() <= 128 => id.to_owned(),
            _ => {
                let id = ulid::Ulid::generate().to_string();
                if let Ok(value) = http::HeaderValue::from_str(&id) {
                    request.headers_mut().insert(REQUEST_ID, value);
                }
                id
            }
        };
        // One span per call: handlers record the principal and space; the
        // status and latency are recorded when it ends.
        let span = tracing::info_span!(
            "rpc",
            method = %method,
            request_id = %request_id,
            principal = tracing::field::Empty,
            space = tracing::field::Empty,
            status = tracing::field::Empty,
            latency_ms = tracing::field::Empty,
        );
        let call = Call::start(method, span);
        let response = call.span.in_scope(|| self.inner.call(request));
        Box::pin(async move {
            let mut call = call;
            let mut response = response.instrument(call.span.clone()).await;
            if let (Ok(response), Ok(value)) = (&mut response, http::HeaderValue::from_str(&request_id)) {
                response.headers_mut().insert(REQUEST_ID, value);
            }
            // Errors are sent as trailers-only responses, with the status in
            // the headers; a success carries it in the trailers, as 0.
            call.outcome = Some(match &response {
                Ok(response) => Outcome::Status(
                    response.headers().get("grpc-status").map_or(Code::Ok, |v| Code::from_bytes(v.as_bytes())),
                ),
                Err(_) => Outcome::Transport,
            });
            response
        })
    }
}

/// How a call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// With this gRPC status.
    Status(Code),
    /// The server failed the HTTP exchange itself.
    Transport,
}

impl Outcome {
    /// The `code` label: the status code's number, or `transport`.
    fn label(self) -> String {
        match self {
            Outcome::Status(code) => (code as i32).to_string(),
            Outcome::Transport => "transport".to_owned(),
        }
    }

    /// Whether the service itself failed (not the caller's request).
    fn is_server_failure(self) -> bool {
        matches!(self, Outcome::Status(Code::Unknown | Code::Internal | Code::DataLoss) | Outcome::Transport)
    }
}

/// One call's accounting, finished when it is dropped: when the call
/// completes, or when its connection closes first (then as CANCELLED).
struct Call {
    method: String,
    span: tracing::Span,
    started: Instant,
    outcome: Option<Outcome>,
}

impl Call {
    fn start(method: String, span: tracing::Span) -> Call {
        gauge!("agentvfs_rpc_in_flight").increment(1.0);
        Call { method, span, started: Instant::now(), outcome: None }
    }
}

impl Drop for Call {
    fn drop(&mut self) {
        gauge!("agentvfs_rpc_in_flight").decrement(1.0);
        // The client went away before an answer: gRPC's CANCELLED.
        let outcome = self.outcome.take().unwrap_or(Outcome::Status(Code::Cancelled));
        let code = outcome.label();
        let latency = self.started.elapsed();
        self.span.record("status", code.as_str()).record("latency_ms", latency.as_secs_f64() * 1e3);
        // Failures of the service itself are worth a line at the default
        // level; every call is logged at debug.
        if outcome.is_server_failure() {
            tracing::warn!(parent: &self.span, "rpc failed");
        } else {
            tracing::debug!(parent: &self.span, "rpc finished");
        }
        let method = std::mem::take(&mut self.method);
        counter!("agentvfs_rpc_requests_total", "method" => method.clone(), "code" => code.clone()).increment(1);
        histogram!("agentvfs_rpc_duration_seconds", "method" => method, "code" => code).record(latency.as_secs_f64());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_are_labelled_by_code_number_and_server_failures_told_apart() {
        assert_eq!(Outcome::Status(Code::Ok).label(), "0");
        assert_eq!(Outcome::Status(Code::NotFound).label(), "5");
        assert_eq!(Outcome::Transport.label(), "transport");
        assert_eq!(Code::from_bytes(b"13"), Code::Internal);
        for failure in [Code::Unknown, Code::Internal, Code::DataLoss] {
            assert!(Outcome::Status(failure).is_server_failure());
        }
        assert!(Outcome::Transport.is_server_failure());
        assert!(!Outcome::Status(Code::Unavailable).is_server_failure());
        assert!(!Outcome::Status(Code::InvalidArgument).is_server_failure());
    }
}
