//! `agentvfs-front`: the gRPC file system that AI agents drive through their
//! backends.
//!
//! The front owns every byte of state in an embedded sled store ([`store`]):
//! spaces, the versioned path tree, immutable file versions and their
//! content. It authenticates and authorizes each call ([`auth`]), turns proto
//! requests into validated domain values at the boundary ([`grpc`]), runs
//! them through the application ([`app`]: grep paging, the workers, the
//! index feed) against the store, and answers with errors that follow one
//! closed set of reasons ([`error`]). Modules depend downwards only:
//! adapter → application → store.
//!
//! Paths are validated once, at the edge:
//!
//! ```
//! use agentvfs_front::path::SpacePath;
//!
//! let path = SpacePath::parse("notes//plan.md/").unwrap();
//! assert_eq!(path.as_str(), "/notes/plan.md");
//! assert!(SpacePath::parse("/notes/../etc").is_err());
//! ```

/// A fault point for crash tests: with the `failpoints` feature, the action
/// `FAILPOINTS` gives it (see the `fail` crate) runs here; otherwise nothing.
macro_rules! fault_point {
    ($name:literal) => {
        #[cfg(feature = "failpoints")]
        fail::fail_point!($name);
    };
}

pub mod admission;
pub mod app;
pub mod auth;
pub mod config;
pub mod diff;
pub mod discovery;
pub mod edit;
pub mod error;
pub mod glob;
pub mod grep;
pub mod grpc;
pub mod ids;
pub mod indexer;
pub mod media;
pub mod metrics;
pub mod migrate;
pub mod openapi;
pub mod page_token;
pub mod patch;
pub mod path;
#[doc(hidden)]
pub mod properties;
pub mod reference;
pub mod rest;
pub mod server;
pub mod sessions;
pub mod store;
pub mod system_files;
pub mod text;
pub mod turns;
pub mod workers;
