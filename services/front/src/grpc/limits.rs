//! Gives tonic's own refusal of an oversized message the service's error
//! format: tonic answers OUT_OF_RANGE with a bare message before any
//! handler runs; clients get TOO_LARGE with ErrorInfo like every other error.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::error::{Error, Reason};

/// See the module docs.
#[derive(Debug, Clone, Copy, Default)]
pub struct MessageLimitLayer {
    pub limit: usize,
}

impl<S> tower::Layer<S> for MessageLimitLayer {
    type Service = MessageLimit<S>;

    fn layer(&self, inner: S) -> MessageLimit<S> {
        MessageLimit { inner, limit: self.limit }
    }
}

/// See [`MessageLimitLayer`].
#[derive(Debug, Clone)]
pub struct MessageLimit<S> {
    inner: S,
    limit: usize,
}

impl<S, B, R> tower::Service<http::Request<B>> for MessageLimit<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<R>> + Send,
    S::Future: Send + 'static,
    R: Default + Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let limit = self.limit;
        let response = self.inner.call(request);
        Box::pin(async move {
            let response = response.await?;
            let out_of_range = response.headers().get("grpc-status").is_some_and(|v| v == "11");
            if !out_of_range {
                return Ok(response);
            }
            let status = Error::new(
                Reason::TooLarge,
                format!("The request is larger than the {limit}-byte message limit; use Upload for large files."),
            )
            .with("limit", limit)
            .into_status();
            Ok(status.into_http())
        })
    }
}
