//! Resolving a ghz `call` to an agentvfs method, turning scenario JSON into
//! request bytes with the compiled-in descriptors, and a codec that sends
//! those bytes as they are.

use http::uri::PathAndQuery;
use prost::Message as _;
use prost::bytes::{Buf as _, BufMut as _, Bytes};
use prost_reflect::{DescriptorPool, DeserializeOptions, DynamicMessage, Kind, MessageDescriptor, MethodDescriptor};
use serde_json::{Map, Value};
use tonic::Status;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};

use crate::template::MethodNames;

/// Every agentvfs service, message and method.
pub fn descriptors() -> Result<DescriptorPool, String> {
    DescriptorPool::decode(agentvfs_proto::FILE_DESCRIPTOR_SET)
        .map_err(|error| format!("the compiled-in agentvfs descriptors do not load: {error}"))
}

/// A unary method ready to be called.
#[derive(Debug, Clone)]
pub struct Method {
    pub input: MessageDescriptor,
    /// The HTTP/2 path, `/package.Service/Method`.
    pub path: PathAndQuery,
    pub names: MethodNames,
}

impl Method {
    /// Resolves `call` in ghz's forms: `package.Service.Method` or
    /// `package.Service/Method`, with or without a leading `/`.
    pub fn resolve(pool: &DescriptorPool, call: &str) -> Result<Method, String> {
        let trimmed = call.trim().trim_start_matches('/');
        let split = trimmed.rfind('/').or_else(|| trimmed.rfind('.'));
        let Some(split) = split.filter(|&at| at > 0 && at + 1 < trimmed.len()) else {
            return Err(format!("`call` {call:?} must look like \"agentvfs.v1.FileSystem.Read\""));
        };
        let (service_name, method_name) = (&trimmed[..split], &trimmed[split + 1..]);
        let service = pool.get_service_by_name(service_name).ok_or_else(|| {
            let known: Vec<String> = pool.services().map(|service| service.full_name().to_owned()).collect();
            format!("unknown service {service_name:?} in `call` {call:?}; services are {}", known.join(", "))
        })?;
        let method = service.methods().find(|method| method.name() == method_name).ok_or_else(|| {
            let known: Vec<String> = service.methods().map(|method| method.name().to_owned()).collect();
            format!("unknown method {method_name:?} of {service_name}; its methods are {}", known.join(", "))
        })?;
        if method.is_client_streaming() || method.is_server_streaming() {
            return Err(format!("{} is a streaming method; only unary methods are supported", method.full_name()));
        }
        let path = format!("/{}/{}", service.full_name(), method.name());
        let path =
            PathAndQuery::from_maybe_shared(path.clone()).map_err(|error| format!("bad path {path:?}: {error}"))?;
        Ok(Method { input: method.input(), path, names: names(&method) })
    }

    /// The request bytes for `data`, which must be the proto3 JSON form of
    /// the input message; unknown fields are an error.
    pub fn encode(&self, data: Value) -> Result<Bytes, String> {
        let message = match DynamicMessage::deserialize_with_options(self.input.clone(), &data, &OPTIONS) {
            Ok(message) => message,
            Err(error) => {
                let at = failing_field(&self.input, &data).map(|path| format!(" field `{path}`:")).unwrap_or_default();
                return Err(format!("`data` is not a valid {}:{at} {error}", self.input.full_name()));
            }
        };
        Ok(Bytes::from(message.encode_to_vec()))
    }
}

const OPTIONS: DeserializeOptions = DeserializeOptions::new().deny_unknown_fields(true);

/// The dotted path of the first field that fails on its own. The
/// deserializer's errors say what is wrong but not where, which is what a
/// scenario's author needs.
fn failing_field(message: &MessageDescriptor, value: &Value) -> Option<String> {
    let Value::Object(fields) = value else { return None };
    fields.iter().find_map(|(key, item)| {
        let alone = Value::Object(Map::from_iter([(key.clone(), item.clone())]));
        DynamicMessage::deserialize_with_options(message.clone(), &alone, &OPTIONS).err()?;
        let field = message.get_field_by_json_name(key).or_else(|| message.get_field_by_name(key));
        let nested = field.and_then(|field| match field.kind() {
            Kind::Message(nested) if !field.is_list() && !field.is_map() => failing_field(&nested, item),
            _ => None,
        });
        Some(nested.map_or_else(|| key.clone(), |rest| format!("{key}.{rest}")))
    })
}

fn names(method: &MethodDescriptor) -> MethodNames {
    MethodNames {
        fully_qualified: method.full_name().to_owned(),
        method: method.name().to_owned(),
        service: method.parent_service().full_name().to_owned(),
        input: method.input().full_name().to_owned(),
        output: method.output().full_name().to_owned(),
        client_streaming: method.is_client_streaming(),
        server_streaming: method.is_server_streaming(),
    }
}

/// Sends already-encoded request bytes and hands back the response bytes
/// undecoded: the report needs only the status, so decoding would only
/// cost the client time it should spend calling.
#[derive(Debug, Clone, Copy, Default)]
pub struct RawCodec;

impl Codec for RawCodec {
    type Encode = Bytes;
    type Decode = Bytes;
    type Encoder = RawCodec;
    type Decoder = RawCodec;

    fn encoder(&mut self) -> RawCodec {
        RawCodec
    }

    fn decoder(&mut self) -> RawCodec {
        RawCodec
    }
}

impl Encoder for RawCodec {
    type Item = Bytes;
    type Error = Status;

    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

impl Decoder for RawCodec {
    type Item = Bytes;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, Status> {
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn resolve(call: &str) -> Result<Method, String> {
        Method::resolve(&descriptors().expect("descriptors"), call)
    }

    #[test]
    fn both_call_forms_resolve() {
        for call in ["agentvfs.v1.FileSystem.Read", "agentvfs.v1.FileSystem/Read", "/agentvfs.v1.FileSystem/Read"] {
            let method = resolve(call).expect("resolves");
            assert_eq!(method.path.as_str(), "/agentvfs.v1.FileSystem/Read");
            assert_eq!(method.names.input, "agentvfs.v1.ReadRequest");
        }
        assert_eq!(resolve("agentvfs.v1.Admin.CreateSpace").expect("resolves").names.method, "CreateSpace");
    }

    #[test]
    fn unknown_and_streaming_methods_are_rejected() {
        assert!(resolve("agentvfs.v1.FileSystem.Nope").expect_err("unknown").contains("unknown method"));
        assert!(resolve("agentvfs.v1.Nope.Read").expect_err("unknown").contains("unknown service"));
        assert!(resolve("Read").is_err());
        assert!(resolve("agentvfs.v1.FileSystem.Watch").expect_err("streaming").contains("streaming"));
        assert!(resolve("agentvfs.v1.FileSystem/Upload").expect_err("streaming").contains("streaming"));
    }

    #[test]
    fn json_encodes_to_the_generated_message() {
        let method = resolve("agentvfs.v1.FileSystem.Write").expect("resolves");
        let bytes = method
            .encode(json!({"space": "sp", "path": "/a.txt", "content": "hi", "expectedVersion": "0"}))
            .expect("encodes");
        let decoded = agentvfs_proto::v1::WriteRequest::decode(bytes).expect("decodes");
        assert_eq!(decoded.path, "/a.txt");
        assert_eq!(decoded.expected_version, Some(0));
        assert_eq!(decoded.body, Some(agentvfs_proto::v1::write_request::Body::Content("hi".into())));
        let error = method.encode(json!({"space": "sp", "pth": "/a"})).expect_err("unknown field");
        assert!(error.contains("pth"), "{error}");
        let error = method.encode(json!({"path": "/a", "expectedVersion": "x"})).expect_err("bad value");
        assert!(error.contains("field `expectedVersion`"), "{error}");
        let create = resolve("agentvfs.v1.Admin.CreateSpace").expect("resolves");
        let error = create.encode(json!({"name": "s", "quota": {"maxFiles": "10", "maxBytes": "lots"}}));
        let error = error.expect_err("bad nested value");
        assert!(error.contains("field `quota.maxBytes`"), "{error}");
    }
}
