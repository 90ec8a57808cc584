//! A server process's Prometheus endpoint: `/metrics` on a listener the
//! process bound itself, so `--metrics-listen 127.0.0.1:0` works like
//! `--listen` does and the bound address is logged (see [`crate::bind`]).

use std::convert::Infallible;
use std::future::Future;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::{Method, Request, Response, StatusCode};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tokio::net::TcpListener;

/// How long a scraper may take to send its request headers.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// How often histograms drop samples that aged out of their window.
const UPKEEP: Duration = Duration::from_secs(5);

/// Installs `recorder` as the process's metrics recorder and returns the
/// task that serves what it recorded as Prometheus text at `GET /metrics`
/// on `listener` (and keeps the recorder's upkeep), until it is dropped.
pub fn serve(
    recorder: PrometheusBuilder,
    listener: TcpListener,
) -> Result<impl Future<Output = ()> + Send + 'static, String> {
    let handle = recorder.install_recorder().map_err(|error| format!("cannot record metrics: {error}"))?;
    Ok(async move {
        let upkeep = handle.clone();
        let _upkeep = AbortOnDrop(tokio::spawn(async move {
            let mut tick = tokio::time::interval(UPKEEP);
            loop {
                tick.tick().await;
                upkeep.run_upkeep();
            }
        }));
        let mut connections = tokio::task::JoinSet::new();
        loop {
            let stream = match listener.accept().await {
                Ok((stream, _)) => stream,
                // Out of file descriptors, say: wait rather than spin.
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            // Finished connections are reaped as new ones arrive.
            while connections.try_join_next().is_some() {}
            connections.spawn(scrape(stream, handle.clone()));
        }
    })
}

async fn scrape(stream: tokio::net::TcpStream, handle: PrometheusHandle) {
    let service = hyper::service::service_fn(move |request: Request<hyper::body::Incoming>| {
        let reply = if request.method() == Method::GET && request.uri().path() == "/metrics" {
            Response::builder()
                .header(http::header::CONTENT_TYPE, "text/plain; version=0.0.4")
                .body(Full::new(Bytes::from(handle.render())))
        } else {
            Response::builder().status(StatusCode::NOT_FOUND).body(Full::new(Bytes::from_static(b"not found\n")))
        };
        std::future::ready(Ok::<_, Infallible>(reply.unwrap_or_default()))
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder.timer(hyper_util::rt::TokioTimer::new()).header_read_timeout(HEADER_TIMEOUT);
    // A scraper that hangs up early is its own business.
    let _ = builder.serve_connection(hyper_util::rt::TokioIo::new(stream), service).await;
}

/// Aborts the task when the server's future is dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
