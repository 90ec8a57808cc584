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

/// The encoded `FileDescriptorSet` of every agentvfs proto, for server
/// reflection, with every file they import and the `google.rpc` status and
/// error detail types that errors carry as `Any`.
pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("agentvfs_descriptor");

/// The `google.rpc.ErrorInfo` domain of every agentvfs error.
pub const ERROR_DOMAIN: &str = "agentvfs";

/// The canonical name of a gRPC code (`NOT_FOUND`), as Google's JSON error
/// body and a reason without `ErrorInfo` spell it.
pub fn code_name(code: tonic::Code) -> &'static str {
    use tonic::Code;
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::collections::HashMap;

    use prost::Message as _;
    use prost_types::{DescriptorProto, FileDescriptorSet};

    fn messages(set: &[u8]) -> HashMap<String, DescriptorProto> {
        let set = FileDescriptorSet::decode(set).unwrap();
        set.file
            .into_iter()
            .flat_map(|file| {
                let package = file.package().to_owned();
                file.message_type.into_iter().map(move |m| (format!("{package}.{}", m.name()), m))
            })
            .collect()
    }

    /// The error detail descriptors served by reflection describe the very
    /// messages tonic-types encodes, field for field.
    #[test]
    fn error_detail_descriptors_are_those_of_the_encoded_types() {
        let ours = messages(super::FILE_DESCRIPTOR_SET);
        let theirs = messages(tonic_types::pb::FILE_DESCRIPTOR_SET);
        for name in [
            "google.rpc.Status",
            "google.rpc.ErrorInfo",
            "google.rpc.BadRequest",
            "google.rpc.PreconditionFailure",
            "google.rpc.QuotaFailure",
            "google.rpc.RetryInfo",
        ] {
            assert_eq!(ours.get(name), theirs.get(name), "{name}");
            assert!(ours.contains_key(name), "{name} is missing from the descriptor set");
        }
        let files: Vec<String> = FileDescriptorSet::decode(super::FILE_DESCRIPTOR_SET)
            .unwrap()
            .file
            .into_iter()
            .map(|f| f.name().to_owned())
            .collect();
        for import in ["google/protobuf/any.proto", "google/protobuf/duration.proto"] {
            assert!(files.iter().any(|f| f == import), "{import} is missing: {files:?}");
        }
    }
}
