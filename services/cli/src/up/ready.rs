//! Waiting until a freshly started front serves, and making sure a space
//! exists on it.

use std::time::Duration;

use agentvfs_proto::v1::CreateSpaceRequest;
use agentvfs_proto::v1::admin_client::AdminClient;
use tokio::time::Instant;
use tonic::transport::{Channel, Endpoint};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

/// How long a front that is listening may take to report SERVING.
const HEALTH_TIMEOUT: Duration = Duration::from_secs(20);
const POLL_INTERVAL: Duration = Duration::from_millis(50);
/// The service whose health means the file system answers agents.
const HEALTH_SERVICE: &str = "agentvfs.v1.FileSystem";

#[derive(Debug, thiserror::Error)]
pub enum ReadyError {
    #[error("{addr} is not a usable front address: {source}")]
    Address { addr: String, source: tonic::transport::Error },
    #[error("the front at {addr} did not report SERVING within {} s (last: {last})", HEALTH_TIMEOUT.as_secs())]
    NotServing { addr: String, last: String },
    #[error("cannot create the space {name:?}: {}: {}", .status.code(), .status.message())]
    CreateSpace { name: String, status: tonic::Status },
}

/// Polls the front's health until it reports SERVING; returns a channel to it.
pub async fn serving(addr: &str) -> Result<Channel, ReadyError> {
    let endpoint = Endpoint::from_shared(format!("http://{addr}"))
        .map_err(|source| ReadyError::Address { addr: addr.to_owned(), source })?
        .connect_timeout(Duration::from_secs(1))
        .timeout(Duration::from_secs(10));
    let deadline = Instant::now() + HEALTH_TIMEOUT;
    loop {
        let last = match check(&endpoint).await {
            Ok(channel) => return Ok(channel),
            Err(last) => last,
        };
        if Instant::now() >= deadline {
            return Err(ReadyError::NotServing { addr: addr.to_owned(), last });
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

/// One health check; the error says what stood in the way.
async fn check(endpoint: &Endpoint) -> Result<Channel, String> {
    let channel = endpoint.connect().await.map_err(|error| chain(&error))?;
    let request = HealthCheckRequest { service: HEALTH_SERVICE.to_owned() };
    let response = HealthClient::new(channel.clone())
        .check(request)
        .await
        .map_err(|status| format!("{}: {}", status.code(), status.message()))?;
    match response.into_inner().status() {
        ServingStatus::Serving => Ok(channel),
        other => Err(format!("health is {}", other.as_str_name())),
    }
}

/// Creates the space `name` unless one by that name already exists.
pub async fn ensure_space(channel: Channel, name: &str) -> Result<(), ReadyError> {
    let request = CreateSpaceRequest { name: name.to_owned(), ..Default::default() };
    match AdminClient::new(channel).create_space(request).await {
        Ok(_) => Ok(()),
        Err(status) if status.code() == tonic::Code::AlreadyExists => Ok(()),
        Err(status) => Err(ReadyError::CreateSpace { name: name.to_owned(), status }),
    }
}

/// An error with its sources, since transport errors say little on their own.
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
