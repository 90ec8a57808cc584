//! The agentvfs gRPC contract: the `agentvfs.v1` protobuf package and the
//! tonic clients and servers generated from it.
//!
//! The `.proto` files under `agentvfs/v1/` are the single source of truth; the
//! front, the worker and every client are built from them. Code is generated
//! at build time by `protox` (no system `protoc`).
//!
//! ```
//! use agentvfs_proto::v1::{ReadRequest, file_system_client::FileSystemClient};
//!
//! let request = ReadRequest { space: "default".into(), path: "/AGENT.md".into(), ..Default::default() };
//! assert_eq!(request.path, "/AGENT.md");
//! # let _ = std::marker::PhantomData::<FileSystemClient<tonic::transport::Channel>>;
//! ```

pub mod codec;

/// Messages and services of `agentvfs.v1`.
#[allow(clippy::all, unreachable_pub, missing_debug_implementations)]
pub mod v1 {
    tonic::include_proto!("agentvfs.v1");
}

/// The encoded `FileDescriptorSet` of every agentvfs proto, for server reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("agentvfs_descriptor");

/// The `google.rpc.ErrorInfo` domain of every agentvfs error.
pub const ERROR_DOMAIN: &str = "agentvfs";
