//! Serving the worker: `serve(config, listener, metrics, shutdown)`.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use agentvfs_proto::v1::worker_server::WorkerServer;
use tokio::net::TcpListener;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Endpoint, Server};
use tonic_health::server::HealthReporter;

use crate::cache::ContentCache;
use crate::config::Config;
use crate::fetch::{Credentials, Fetcher};
use crate::grpc::WorkerService;
use crate::index::SearchIndex;

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("server reflection: {0}")]
    Reflection(#[from] tonic_reflection::server::Error),
    #[error("transport: {0}")]
    Transport(#[from] tonic::transport::Error),
    #[error(transparent)]
    Index(#[from] crate::index::IndexError),
    #[error("{0}")]
    Metrics(String),
    #[error("index directory {path}: {source}")]
    IndexDir { path: String, source: std::io::Error },
    #[error("opening the search index failed: {0}")]
    IndexTask(String),
}

/// Bytes of content the front may send ahead of what the worker has read,
/// per fetch (and twice that per connection).
const CONTENT_WINDOW: u32 = 8 << 20;

/// Largest HTTP/2 frame the front may send: more than any `GetContent`
/// message (about 1 MiB of content), so each message can arrive in one
/// frame and be decoded where it landed (see [`crate::wire`]).
const CONTENT_FRAME: u32 = 2 << 20;

/// How often the worker asks the front whether it accepts its credentials,
/// once the front has answered; until then, every [`CREDENTIALS_RETRY`].
const CREDENTIALS_CHECK: Duration = Duration::from_secs(10);
const CREDENTIALS_RETRY: Duration = Duration::from_secs(1);

/// Keeps the worker's health telling whether it can do its work: NOT_SERVING
/// while the front refuses its credentials (so a readiness probe keeps it
/// out of rotation), SERVING otherwise. The fetcher learns it from every
/// call to the front; this also asks at startup and then periodically, so a
/// refused worker, which gets no jobs, finds out when it is let in. A front
/// that cannot be reached says nothing about the worker: it stays SERVING,
/// and its jobs fail with WORKER_UNAVAILABLE naming the cause.
async fn follow_credentials(fetcher: Fetcher, health: HealthReporter) {
    let mut known = fetcher.credentials();
    let mut next_check = tokio::time::Instant::now();
    let mut refused = false;
    loop {
        tokio::select! {
            () = tokio::time::sleep_until(next_check) => {
                let answered = fetcher.check_credentials().await;
                next_check = tokio::time::Instant::now() + if answered { CREDENTIALS_CHECK } else { CREDENTIALS_RETRY };
            }
            changed = known.changed() => if changed.is_err() { return },
        }
        let now_refused = *known.borrow_and_update() == Credentials::Refused;
        if now_refused != refused {
            refused = now_refused;
            if refused {
                tracing::warn!("the front refuses this worker's credentials: not serving");
                health.set_not_serving::<WorkerServer<WorkerService>>().await;
            } else {
                tracing::info!("the front accepts this worker's credentials: serving");
                health.set_serving::<WorkerServer<WorkerService>>().await;
            }
        }
    }
}

/// Serves until `shutdown` resolves, then drains within `config.drain`.
pub async fn serve(
    config: &Config,
    listener: TcpListener,
    metrics: Option<TcpListener>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServeError> {
    std::fs::create_dir_all(&config.index_dir)
        .map_err(|source| ServeError::IndexDir { path: config.index_dir.display().to_string(), source })?;
    let (health, health_service) = tonic_health::server::health_reporter();
    health.set_not_serving::<WorkerServer<WorkerService>>().await;

    // Connects on first use, so the worker starts whether or not the front is up.
    // Content streams from the front in bulk: with HTTP/2's default 64 KiB
    // windows the front would stop for a window update every 64 KiB.
    let front = Endpoint::from_shared(config.front.clone())?
        .tcp_nodelay(true)
        .initial_stream_window_size(CONTENT_WINDOW)
        .initial_connection_window_size(2 * CONTENT_WINDOW)
        .max_frame_size(CONTENT_FRAME)
        .connect_lazy();
    let cache = Arc::new(ContentCache::new(config.cache_bytes));
    if config.reserve_cache {
        let started = std::time::Instant::now();
        let pool = cache.pool().clone();
        let wanted = pool.capacity();
        // Only the kernel refusing memory makes it fall short: the cache then
        // maps the rest as content arrives.
        let reserved = tokio::task::spawn_blocking(move || pool.reserve()).await.unwrap_or_default();
        let millis = started.elapsed().as_millis() as u64;
        if reserved < wanted {
            tracing::warn!(bytes = reserved, wanted, millis, "could reserve only part of the cache memory");
        } else {
            tracing::info!(bytes = reserved, millis, "cache memory reserved");
        }
    }
    let fetcher = Fetcher::new(front, cache.clone(), config.token.clone(), config.verify_content);
    let endpoint = match metrics {
        Some(listener) => {
            let recorder = metrics_exporter_prometheus::PrometheusBuilder::new();
            Some(tokio::spawn(agentvfs_process::metrics::serve(recorder, listener).map_err(ServeError::Metrics)?))
        }
        None => None,
    };
    let sampler = tokio::spawn(async move {
        let mut tick = tokio::time::interval(std::time::Duration::from_secs(5));
        loop {
            tick.tick().await;
            let (hits, misses, bytes) = cache.stats();
            metrics::gauge!("agentvfs_worker_cache_hits").set(hits as f64);
            metrics::gauge!("agentvfs_worker_cache_misses").set(misses as f64);
            metrics::gauge!("agentvfs_worker_cache_bytes").set(bytes as f64);
        }
    });
    let index = {
        // tantivy reads its meta files and segments: a blocking thread's job.
        let dir = config.index_dir.clone();
        Arc::new(
            tokio::task::spawn_blocking(move || SearchIndex::open(&dir))
                .await
                .map_err(|e| ServeError::IndexTask(e.to_string()))??,
        )
    };
    if index.fresh() {
        tracing::info!(dir = %config.index_dir.display(), "search index is new or was lost; the front will rebuild it");
    }
    let credentials = fetcher.clone();
    let worker = WorkerServer::new(WorkerService::new(fetcher, index))
        .max_decoding_message_size(16 << 20)
        .max_encoding_message_size(16 << 20);
    let reflection = |builder: tonic_reflection::server::Builder<'static>| {
        builder
            .register_encoded_file_descriptor_set(agentvfs_proto::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
    };
    let reflection_v1 = reflection(tonic_reflection::server::Builder::configure()).build_v1()?;
    let reflection_v1alpha = reflection(tonic_reflection::server::Builder::configure()).build_v1alpha()?;
    health.set_serving::<WorkerServer<WorkerService>>().await;
    let readiness = tokio::spawn(follow_credentials(credentials, health.clone()));

    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = Server::builder()
        .http2_keepalive_interval(Some(std::time::Duration::from_secs(30)))
        .http2_keepalive_timeout(Some(std::time::Duration::from_secs(10)))
        .max_concurrent_streams(Some(256))
        // Grep jobs are bounded pages and index batches are small: anything
        // this slow is stuck, and the front retries or fails over.
        .timeout(std::time::Duration::from_secs(120))
        .trace_fn(|request| {
            // The front's request ID, so one call can be followed across both processes.
            let request_id = request.headers().get("x-request-id").and_then(|v| v.to_str().ok()).unwrap_or("");
            tracing::info_span!("rpc", method = %request.uri().path(), request_id)
        })
        .add_service(health_service)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(worker)
        .serve_with_incoming_shutdown(TcpIncoming::from(listener).with_nodelay(Some(true)), async {
            let _ = stopped.await;
        });
    let server = tokio::spawn(server);
    shutdown.await;
    tracing::info!("shutting down: draining in-flight jobs");
    readiness.abort();
    let _ = readiness.await;
    health.set_not_serving::<WorkerServer<WorkerService>>().await;
    sampler.abort();
    if let Some(endpoint) = endpoint {
        endpoint.abort();
    }
    let _ = stop.send(());
    match tokio::time::timeout(config.drain, server).await {
        Ok(Ok(result)) => result?,
        Ok(Err(join)) => tracing::error!(error = %join, "server task failed"),
        Err(_) => tracing::warn!(deadline = ?config.drain, "drain deadline passed"),
    }
    Ok(())
}
