//! The command line end to end, as one test binary: the real `agentvfs`
//! binary against a real front and worker on loopback ports, its MCP server
//! driven by an MCP client, and a space mounted with FUSE.

mod support;

mod commands;
mod mcp;
mod mount;
mod sync;
mod up;
