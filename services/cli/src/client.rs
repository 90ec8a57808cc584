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

/// Adds `authorization`, `x-agentvfs-session` and `x-agentvfs-tool-call`
/// to each request.
#[derive(Debug, Clone, Default)]
pub struct Metadata {
    authorization: Option<MetadataValue<Ascii>>,
    session: Option<MetadataValue<Ascii>>,
    tool_call: Option<MetadataValue<Ascii>>,
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
    pub fn new(addr: &str, token: Option<&str>, session: Option<&str>) -> Result<Client, CliError> {
        Self::with_tool_call(addr, token, session, None)
    }

    /// [`Client::new`], with every call made on behalf of `tool_call`.
    pub fn with_tool_call(
        addr: &str,
        token: Option<&str>,
        session: Option<&str>,
        tool_call: Option<&str>,
    ) -> Result<Client, CliError> {
        let service = service_with(addr, token, session, tool_call)?;
        let fs = FileSystemClient::new(service.clone())
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES);
        let admin = AdminClient::new(service)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES);
        Ok(Client { fs, admin })
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
    let uri = if addr.contains("://") { addr.to_owned() } else { format!("http://{addr}") };
    let endpoint =
        Endpoint::from_shared(uri).map_err(|error| CliError::Usage(format!("bad --addr {addr:?}: {error}")))?;
    let metadata = Metadata {
        authorization: token.map(|token| ascii(&format!("Bearer {token}"), "--token")).transpose()?,
        session: session.map(|session| ascii(session, "--session")).transpose()?,
        tool_call: tool_call.map(|id| ascii(id, "--tool-call")).transpose()?,
    };
    Ok(InterceptedService::new(endpoint.connect_lazy(), metadata))
}

fn ascii(value: &str, flag: &str) -> Result<MetadataValue<Ascii>, CliError> {
    value.parse().map_err(|_| CliError::Usage(format!("{flag} must be printable ASCII")))
}
