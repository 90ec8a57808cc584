//! The protobuf codec used by every generated client and server.
//!
//! It is prost's codec with two differences. A message that fails to decode
//! (bad wire format, invalid UTF-8 in a `string` field) becomes
//! `INVALID_ARGUMENT` with an `ErrorInfo` whose reason is `INVALID_ARGUMENT`:
//! tonic's default answers `INTERNAL`, which would tell a client that the
//! server is at fault for what is a malformed request. And a message is
//! encoded into room reserved for its whole length, where prost's encoder
//! grows the buffer as it writes and copies a large message several times.

use std::collections::HashMap;
use std::marker::PhantomData;

use prost::Message;
use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

use crate::ERROR_DOMAIN;

/// Prost encoding, with malformed input reported as `INVALID_ARGUMENT`.
#[derive(Debug, Clone)]
pub struct ProtoCodec<T, U> {
    _pd: PhantomData<(T, U)>,
}

impl<T, U> Default for ProtoCodec<T, U> {
    fn default() -> Self {
        Self { _pd: PhantomData }
    }
}

impl<T, U> Codec for ProtoCodec<T, U>
where
    T: Message + Send + 'static,
    U: Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProtoEncoder<T>;
    type Decoder = ProtoDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ProtoEncoder { _pd: PhantomData }
    }

    fn decoder(&mut self) -> Self::Decoder {
        ProtoDecoder { _pd: PhantomData }
    }
}

/// Encodes `T` into room reserved for all of it.
#[derive(Debug, Clone)]
pub struct ProtoEncoder<T> {
    _pd: PhantomData<T>,
}

impl<T: Message> Encoder for ProtoEncoder<T> {
    type Item = T;
    type Error = Status;

    fn encode(&mut self, item: T, buf: &mut EncodeBuf<'_>) -> Result<(), Status> {
        buf.reserve(item.encoded_len());
        item.encode_raw(buf);
        Ok(())
    }

    fn buffer_settings(&self) -> BufferSettings {
        BufferSettings::default()
    }
}

/// Decodes `U`, mapping decode failures to `INVALID_ARGUMENT`.
#[derive(Debug, Clone)]
pub struct ProtoDecoder<U> {
    _pd: PhantomData<U>,
}

impl<U: Message + Default> Decoder for ProtoDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        U::decode(buf).map(Some).map_err(|error| malformed_message(&error))
    }
}

/// The status for a message that is not valid protobuf for its type.
pub fn malformed_message(error: &prost::DecodeError) -> Status {
    let metadata = HashMap::from([
        ("retryable".to_owned(), "false".to_owned()),
        (
            "nextAction".to_owned(),
            "Send a well-formed protobuf message with valid UTF-8 in every string field.".to_owned(),
        ),
    ]);
    Status::with_error_details(
        Code::InvalidArgument,
        format!("The request is not a valid protobuf message: {error}."),
        ErrorDetails::with_error_info("INVALID_ARGUMENT", ERROR_DOMAIN, metadata),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malformed_message_is_invalid_argument_with_error_info() {
        let error = crate::v1::ReadRequest::decode(&[0x0a, 0x02, 0xff, 0xfe][..])
            .expect_err("invalid UTF-8 in a string field must not decode");
        let status = malformed_message(&error);
        assert_eq!(status.code(), Code::InvalidArgument);
        let info = status.get_details_error_info().expect("error info");
        assert_eq!(info.reason, "INVALID_ARGUMENT");
        assert_eq!(info.domain, "agentvfs");
        assert_eq!(info.metadata["retryable"], "false");
    }
}
