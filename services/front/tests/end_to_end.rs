//! The front's end-to-end suite as one test binary: the real `agentvfs-front`
//! and `agentvfs-worker` processes on loopback ports, driven through their
//! public interfaces, on both storage engines. One binary is linked once and
//! shares one PostgreSQL cluster; each module below is one area of the
//! contract. The soak, which measures the front it drives, and the crash
//! loops, which run all at once after the rest, have binaries of their own
//! (see `Cargo.toml`).

#[macro_use]
mod support;

mod core;
mod damage;
mod discovery;
mod editing;
mod encodings;
mod fronts;
mod grep;
mod grep_oracle;
mod grep_pages;
mod history;
mod hostile;
mod http;
mod idempotency;
mod isolation;
mod long_calls;
mod mcp_http;
mod migrate;
mod openapi;
mod operations;
mod patch;
mod reflection;
mod search;
mod storage_full;
mod store_health;
mod tenancy;
mod worker_contract;
mod workflows;
