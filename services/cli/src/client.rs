//! The connection to the front: one lazily connected channel shared by the
//! `FileSystem` and `Admin` clients, with the caller's token and session
//! attached to every request.

use agentvfs_proto::v1::admin_client::AdminClient;
use agentvfs_proto::v1::file_system_client::FileSystemClient;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};

use crate::errors::CliError;

/// Responses may carry a whole 10 MiB grep page plus framing; tonic's 4 MiB
/// default would refuse them.
const MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;

pub type Service = InterceptedService<Channel, Metadata>;

/// Adds `authorization`, `x-agentvfs-session`, `x-agentvfs-tool-call` and
/// `x-agentvfs-lease` to each request.
#[derive(Debug, Clone, Default)]
pub struct Metadata {
    authorization: Option<MetadataValue<Ascii>>,
    session: Option<MetadataValue<Ascii>>,
    tool_call: Option<MetadataValue<Ascii>>,
    lease: Option<MetadataValue<Ascii>>,
}

impl Interceptor for Metadata {
    fn call(&mut self, mut request: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(value) = &self.authorization {
            request.metadata_mut().insert("authorization", value.clone());
        }
        if let Some(value) = &self.session {
            request.metadata_mut().insert("x-agentvfs-session", value.clone());
        }
        if let Some(value) = &self.tool_call {
            request.metadata_mut().insert("x-agentvfs-tool-call", value.clone());
        }
        if let Some(value) = &self.lease {
            request.metadata_mut().insert("x-agentvfs-lease", value.clone());
        }
        Ok(request)
    }
}

#[derive(Debug, Clone)]
pub struct Client {
    pub fs: FileSystemClient<Service>,
    pub admin: AdminClient<Service>,
}

impl Client {
    /// Connects lazily, so that an unreachable front surfaces as the first
    /// call's `UNAVAILABLE` status (exit 6) like any other retryable failure.
    /// Every call carries the path lease `lease`, if given.
    pub fn carrying(
        addr: &str,
        token: Option<&str>,
        session: Option<&str>,
        lease: Option<&str>,
    ) -> Result<Client, CliError> {
        let mut metadata = metadata(token, session, None)?;
        metadata.lease = lease.map(|id| ascii(id, "--lease")).transpose()?;
        Ok(Self::over(InterceptedService::new(channel(addr)?, metadata)))
    }

    /// [`Client::carrying`] without a lease, every call made on behalf of `tool_call`.
    pub fn with_tool_call(
        addr: &str,
        token: Option<&str>,
        session: Option<&str>,
        tool_call: Option<&str>,
    ) -> Result<Client, CliError> {
        Ok(Self::over(service_with(addr, token, session, tool_call)?))
    }

    fn over(service: Service) -> Client {
        let fs = FileSystemClient::new(service.clone())
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES);
        let admin = AdminClient::new(service)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES);
        Client { fs, admin }
    }
}

/// A lazily connected channel to the front at `addr` that adds the token
/// and session to each request.
pub fn service(addr: &str, token: Option<&str>, session: Option<&str>) -> Result<Service, CliError> {
    service_with(addr, token, session, None)
}

fn service_with(
    addr: &str,
    token: Option<&str>,
    session: Option<&str>,
    tool_call: Option<&str>,
) -> Result<Service, CliError> {
    Ok(InterceptedService::new(channel(addr)?, metadata(token, session, tool_call)?))
}

/// A lazily connected channel to `addr`.
fn channel(addr: &str) -> Result<Channel, CliError> {
    let uri = if addr.contains("://") { addr.to_owned() } else { format!("http://{addr}") };
    let endpoint =
        Endpoint::from_shared(uri).map_err(|error| CliError::Usage(format!("bad --addr {addr:?}: {error}")))?;
    Ok(endpoint.connect_lazy())
}

fn metadata(token: Option<&str>, session: Option<&str>, tool_call: Option<&str>) -> Result<Metadata, CliError> {
    Ok(Metadata {
        authorization: token.map(|token| ascii(&format!("Bearer {token}"), "--token")).transpose()?,
        session: session.map(|session| ascii(session, "--session")).transpose()?,
        tool_call: tool_call.map(|id| ascii(id, "--tool-call")).transpose()?,
        lease: None,
    })
}

fn ascii(value: &str, flag: &str) -> Result<MetadataValue<Ascii>, CliError> {
    value.parse().map_err(|_| CliError::Usage(format!("{flag} must be printable ASCII")))
}
