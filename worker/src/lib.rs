//! `agentvfs-worker`: runs grep jobs for the front (and, later, keeps the
//! full-text index behind `Search`).
//!
//! The worker owns no data. The front resolves which files a grep page
//! covers and sends their hashes; the worker fetches content it lacks from
//! the front by hash into a bounded cache (content is immutable, so the
//! cache never goes stale) and scans it with ripgrep's `grep-searcher` on
//! every core.
//!
//! ```
//! use agentvfs_worker::scan::{Mode, Options, Query};
//!
//! let options = Options {
//!     fixed_strings: false,
//!     case_insensitive: true,
//!     multiline: false,
//!     mode: Mode::Content,
//!     before_context: 0,
//!     after_context: 0,
//! };
//! let query = Query::new("todo", options).unwrap();
//! let found = query.scanner().scan(b"fn a() {}\n// TODO: b\n", 0, 10);
//! assert_eq!(found.hits[0].line.number, 2);
//! ```

/// A fault point for crash tests: with the `failpoints` feature, the action
/// `FAILPOINTS` gives it (see the `fail` crate) runs here; otherwise nothing.
macro_rules! fault_point {
    ($name:literal) => {
        #[cfg(feature = "failpoints")]
        fail::fail_point!($name);
    };
}

pub mod cache;
pub mod config;
pub mod error;
pub mod fetch;
pub mod grpc;
pub mod index;
pub mod job;
pub mod queries;
pub mod scan;
pub mod server;
pub mod slab;
pub mod wire;
