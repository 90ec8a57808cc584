//! `agentvfs mcp`: a Model Context Protocol server on stdin/stdout that gives
//! an agent the file system as the tools of [`agentvfs_mcp`], each one call
//! of the `FileSystem` service of the front at `--addr`. The whole MCP
//! session is one agentvfs session (`--session` or a fresh `mcp-<ULID>`).

use rmcp::ServiceExt as _;

use crate::client;
use crate::errors::CliError;

/// Serves MCP on stdin/stdout until the client closes stdin.
pub async fn run(addr: &str, token: Option<&str>, space: String, session: Option<String>) -> Result<(), CliError> {
    let session = session.unwrap_or_else(|| format!("mcp-{}", ulid::Ulid::generate()));
    let grpc = agentvfs_mcp::grpc(client::service(addr, token, None)?);
    let server = agentvfs_mcp::Server::new(grpc, space, Some(&session))
        .map_err(|error| CliError::Other(format!("cannot set up the MCP tools: {error}")))?;
    // stdout carries the protocol; notes go to stderr, which MCP clients log.
    eprintln!("agentvfs mcp: serving space {} of {addr} on stdio, session {session}", server.space());
    let running = server
        .serve(rmcp::transport::stdio_pipes())
        .await
        .map_err(|error| CliError::Other(format!("the MCP client did not initialize: {error}")))?;
    running.waiting().await.map_err(|error| CliError::Other(format!("the MCP server stopped: {error}")))?;
    Ok(())
}
