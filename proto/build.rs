//! Compiles `agentvfs/v1/*.proto` with `protox` (pure Rust, so no system
//! `protoc` is needed) and generates prost messages and tonic services into
//! `OUT_DIR`. Code is generated at build time rather than checked in: the
//! protos are the single source and can never drift from the Rust types.
//!
//! The descriptor set written for server reflection also holds
//! `google/rpc/status.proto` and `google/rpc/error_details.proto` (copied
//! from googleapis), the types every error carries in its details as `Any`
//! (`ErrorInfo`, `BadRequest`, `PreconditionFailure`, `QuotaFailure`,
//! `RetryInfo`), so that a reflection client such as grpcurl can decode
//! them. Their Rust types are `tonic_types::pb`'s, not generated here.

use std::path::PathBuf;

use prost::Message as _;

const PROTOS: &[&str] = &[
    "agentvfs/v1/common.proto",
    "agentvfs/v1/filesystem.proto",
    "agentvfs/v1/admin.proto",
    "agentvfs/v1/worker.proto",
    "google/rpc/status.proto",
    "google/rpc/error_details.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    for proto in PROTOS {
        println!("cargo:rerun-if-changed={proto}");
    }
    let fds = protox::compile(PROTOS, ["."])?;
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(out_dir.join("agentvfs_descriptor.bin"), fds.encode_to_vec())?;
    tonic_prost_build::configure()
        // Requests that fail to decode must be INVALID_ARGUMENT, not tonic's INTERNAL.
        .codec_path("crate::codec::ProtoCodec")
        // RPCs a server does not implement answer UNIMPLEMENTED.
        .generate_default_stubs(true)
        // Content is sliced from the receive buffer rather than copied out of it.
        .bytes(".agentvfs.v1.ContentChunk.data")
        // The error detail types are tonic-types' own, which encode them.
        .extern_path(".google.rpc", "::tonic_types::pb")
        .compile_fds(fds)?;
    Ok(())
}
