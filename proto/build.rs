//! Compiles `agentvfs/v1/*.proto` with `protox` (pure Rust, so no system
//! `protoc` is needed) and generates prost messages and tonic services into
//! `OUT_DIR`. Code is generated at build time rather than checked in: the
//! protos are the single source and can never drift from the Rust types.

use std::path::PathBuf;

use prost::Message as _;

const PROTOS: &[&str] = &[
    "agentvfs/v1/common.proto",
    "agentvfs/v1/filesystem.proto",
    "agentvfs/v1/admin.proto",
    "agentvfs/v1/worker.proto",
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
        .compile_fds(fds)?;
    Ok(())
}
