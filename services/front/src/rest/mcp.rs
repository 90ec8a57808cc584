//! `/mcp`: the Model Context Protocol's Streamable HTTP transport (rmcp's
//! server side), serving the tools of [`agentvfs_mcp`] — the same tools as
//! `agentvfs mcp` on stdio — whose calls go to this front's own services in
//! process, with the headers of the HTTP request that carried them.
//!
//! - Every request must authenticate as a gRPC call would (`Authorization:
//!   Bearer`, or nothing in `--dev` mode): one that does not is refused with
//!   401 before the MCP layer reads it, and each tool call is authorized
//!   again by the front like any other call.
//! - A client of a protocol revision with sessions gets one (`Mcp-Session-Id`)
//!   when it initializes; it is the agentvfs session `mcp-<id>` of every tool
//!   call it makes, and it ends after `--session-idle-seconds` without a
//!   request. A stateless client names its agentvfs session with
//!   `X-Agentvfs-Session`, or passes `base_version` to `edit`.
//! - DNS rebinding: a request whose `Origin` is not in
//!   `--http-allowed-origins` is refused (with no list, every request that
//!   carries an `Origin` is: MCP clients other than browsers send none); in
//!   `--dev` mode, which needs no token, so is one whose `Host` is not
//!   loopback.

use std::sync::Arc;
use std::time::Duration;

use http::{Request, Response, StatusCode, header};
use prost_reflect::DescriptorPool;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tower::ServiceExt as _;

use super::{Body, Failure, Grpc};
use crate::auth::Authenticator;

/// The route of the MCP endpoint.
pub const ROUTE: &str = "/mcp";

/// What `/mcp` needs from the front's configuration.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Browser origins that may call (`https://app.example:443`, `http://localhost:*`).
    pub allowed_origins: Vec<String>,
    /// An MCP session ends after this long without a request.
    pub session_idle: Duration,
    /// The largest request body.
    pub max_body: usize,
}

pub struct Mcp {
    service: StreamableHttpService<agentvfs_mcp::Server, LocalSessionManager>,
    auth: Authenticator,
}

impl std::fmt::Debug for Mcp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mcp").finish_non_exhaustive()
    }
}

impl Mcp {
    pub fn new(grpc: Grpc, auth: Authenticator, dev: bool, settings: Settings) -> Result<Mcp, agentvfs_mcp::Error> {
        let tools = agentvfs_mcp::Server::new(agentvfs_mcp::grpc(grpc), "default".to_owned(), None)?;
        let mut sessions = LocalSessionManager::default();
        sessions.session_config.keep_alive = Some(settings.session_idle);
        let mut config = StreamableHttpServerConfig::default()
            .with_allowed_origins(settings.allowed_origins)
            .enforce_origin_validation()
            .with_max_request_body_bytes(settings.max_body);
        if !dev {
            // Bearer tokens, which a rebinding page cannot present, guard
            // a front that names itself by any host.
            config = config.disable_allowed_hosts();
        }
        let service = StreamableHttpService::new(move || Ok(tools.clone()), Arc::new(sessions), config);
        Ok(Mcp { service, auth })
    }

    pub async fn handle(&self, request: Request<hyper::body::Incoming>, pool: &DescriptorPool) -> Response<Body> {
        let metadata = tonic::metadata::MetadataMap::from_headers(request.headers().clone());
        if let Err(error) = self.auth.authenticate(&metadata) {
            let mut response = Failure::from_status(pool, &error.into_status()).into_response();
            if response.status() == StatusCode::UNAUTHORIZED {
                response.headers_mut().insert(header::WWW_AUTHENTICATE, http::HeaderValue::from_static("Bearer"));
            }
            return response;
        }
        let response = self.service.clone().oneshot(request).await.unwrap_or_else(|never| match never {});
        response.map(http_body_util::BodyExt::boxed)
    }
}
