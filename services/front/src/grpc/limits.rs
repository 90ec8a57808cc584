//! Limits every call shares, applied around the services:
//!
//! - Time: a call may run for the server's limit, or the client's deadline
//!   (`grpc-timeout`) when that is shorter. A call past it is dropped, which
//!   frees what it holds, and answered with OVERLOADED. Work already handed
//!   to the store still commits: the caller learns the outcome by retrying
//!   with the same idempotency key. Streamed responses are not cut: the limit
//!   covers producing the response, not sending its messages.
//! - Size: tonic refuses an oversized message with a bare OUT_OF_RANGE before
//!   any handler runs; clients get TOO_LARGE with ErrorInfo like every other
//!   error.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use crate::error::{Error, Reason};

/// See the module docs.
#[derive(Debug, Clone, Copy)]
pub struct CallLimitsLayer {
    /// Largest message, in bytes.
    pub message_bytes: usize,
    /// Longest a call may run.
    pub timeout: Duration,
}

impl<S> tower::Layer<S> for CallLimitsLayer {
    type Service = CallLimits<S>;

    fn layer(&self, inner: S) -> CallLimits<S> {
        CallLimits { inner, limits: *self }
    }
}

/// See [`CallLimitsLayer`].
#[derive(Debug, Clone)]
pub struct CallLimits<S> {
    inner: S,
    limits: CallLimitsLayer,
}

impl<S, B, R> tower::Service<http::Request<B>> for CallLimits<S>
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
        let CallLimitsLayer { message_bytes, timeout } = self.limits;
        let client = request.headers().get("grpc-timeout").and_then(|v| v.to_str().ok()).and_then(parse_grpc_timeout);
        let timeout = client.map_or(timeout, |client| client.min(timeout));
        let response = self.inner.call(request);
        Box::pin(async move {
            let Ok(response) = tokio::time::timeout(timeout, response).await else {
                let status = Error::new(
                    Reason::Overloaded,
                    format!(
                        "The call did not finish within {:.3} s. Retry later; a change sent with an \
                         idempotency key is applied at most once.",
                        timeout.as_secs_f64()
                    ),
                )
                .with("limitMs", timeout.as_millis())
                .into_status();
                return Ok(status.into_http());
            };
            let response = response?;
            if response.headers().get("grpc-status").is_none_or(|v| v != "11") {
                return Ok(response);
            }
            let status = Error::new(
                Reason::TooLarge,
                format!(
                    "The request is larger than the {message_bytes}-byte message limit; use Upload for large files."
                ),
            )
            .with("limit", message_bytes)
            .into_status();
            Ok(status.into_http())
        })
    }
}

/// A `grpc-timeout` header value: up to 8 digits and a unit.
pub fn parse_grpc_timeout(value: &str) -> Option<Duration> {
    if !value.is_ascii() {
        return None;
    }
    let (digits, unit) = value.split_at(value.len().checked_sub(1)?);
    if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n * 3600),
        "M" => Duration::from_secs(n * 60),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeouts_parse_by_unit_and_refuse_the_malformed() {
        assert_eq!(parse_grpc_timeout("5S"), Some(Duration::from_secs(5)));
        assert_eq!(parse_grpc_timeout("250m"), Some(Duration::from_millis(250)));
        assert_eq!(parse_grpc_timeout("2H"), Some(Duration::from_secs(7200)));
        assert_eq!(parse_grpc_timeout("99999999n"), Some(Duration::from_nanos(99_999_999)));
        for bad in ["", "S", "5", "5s", "123456789S", "-1S", "1.5S", "é"] {
            assert_eq!(parse_grpc_timeout(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn handlers_read_the_deadline_with_the_same_rules() {
        let deadline = |value: &str| {
            let mut metadata = tonic::metadata::MetadataMap::new();
            metadata.insert("grpc-timeout", value.parse().unwrap());
            crate::grpc::deadline(&metadata)
        };
        assert_eq!(deadline("250m"), Some(Duration::from_millis(250)));
        // What the layer refuses, a handler must not take as a deadline.
        for bad in ["+5S", "123456789S", "5s", "99999999999999H"] {
            assert_eq!(deadline(bad), None, "{bad:?}");
            assert_eq!(deadline(bad), parse_grpc_timeout(bad), "{bad:?}");
        }
        assert_eq!(crate::grpc::deadline(&tonic::metadata::MetadataMap::new()), None);
    }
}
