//! `GetContent`, called and read straight from its HTTP/2 frames.
//!
//! tonic's streaming decoder copies each received message into a buffer of
//! its own and, when the message is already there whole by the time its
//! length prefix is read, reserves room for it once more, which copies it a
//! second time. Content is nearly all the worker receives, so this call reads
//! the gRPC length-prefixed messages from the response body itself: a message
//! that arrived in one HTTP/2 frame (the worker takes frames larger than any
//! batch; see [`crate::server`]) is decoded where it landed, its content left
//! in the frame's buffer; a message split across frames is put together once,
//! in a buffer of its announced length.

use agentvfs_proto::v1::{ContentBatch, GetContentRequest};
use http_body_util::{BodyExt, Full};
use prost::Message;
use prost::bytes::{Buf, BufMut, Bytes, BytesMut};
use tonic::transport::Channel;
use tonic::{Code, Status};
use tower::ServiceExt;

const PATH: &str = "/agentvfs.v1.ContentStore/GetContent";
/// The length prefix of a gRPC message: a compression flag, then the
/// message length as a big-endian `u32`.
const PREFIX: usize = 5;

/// The answer to one `GetContent` call, message by message.
#[derive(Debug)]
pub struct ContentStream {
    body: tonic::body::Body,
    messages: Deframer,
    /// Whether the call has ended with an OK status.
    finished: bool,
}

/// Calls `GetContent` on the front behind `channel`, with `token` as its
/// bearer token; messages longer than `max_message` bytes fail the call.
pub async fn get_content(
    channel: Channel,
    request: GetContentRequest,
    token: Option<&str>,
    max_message: usize,
) -> Result<ContentStream, Status> {
    let length = u32::try_from(request.encoded_len()).map_err(|_| Status::internal("the request is too large"))?;
    let mut body = BytesMut::with_capacity(PREFIX + length as usize);
    body.put_u8(0);
    body.put_u32(length);
    request.encode_raw(&mut body);
    let mut call = http::Request::builder()
        .method(http::Method::POST)
        .version(http::Version::HTTP_2)
        .uri(PATH)
        .header(http::header::CONTENT_TYPE, "application/grpc")
        .header(http::header::TE, "trailers")
        .body(tonic::body::Body::new(Full::new(body.freeze())))
        .map_err(|e| Status::internal(format!("cannot build the request: {e}")))?;
    if let Some(token) = token {
        let value =
            format!("Bearer {token}").parse().map_err(|_| Status::internal("the token is not a valid header"))?;
        call.headers_mut().insert(http::header::AUTHORIZATION, value);
    }
    let response = channel.oneshot(call).await.map_err(|e| Status::from_error(Box::new(e)))?;
    let (head, body) = response.into_parts();
    // A call that fails at once answers with its status in the headers.
    let status = Status::from_header_map(&head.headers);
    if let Some(status) = &status
        && status.code() != Code::Ok
    {
        return Err(status.clone());
    }
    if head.status != http::StatusCode::OK {
        return Err(Status::unknown(format!("the front answered HTTP {}", head.status)));
    }
    Ok(ContentStream { body, messages: Deframer::new(max_message), finished: status.is_some() })
}

impl ContentStream {
    /// The next message, or `None` once the call has ended with an OK status.
    pub async fn message(&mut self) -> Result<Option<ContentBatch>, Status> {
        loop {
            if let Some(message) = self.messages.next()? {
                let batch = ContentBatch::decode(message)
                    .map_err(|e| Status::internal(format!("the front sent a malformed message: {e}")))?;
                return Ok(Some(batch));
            }
            if self.finished {
                return Ok(None);
            }
            let Some(frame) = self.body.frame().await.transpose()? else {
                return Err(Status::internal("the front's answer ended without a status"));
            };
            match frame.into_data() {
                Ok(data) => self.messages.push(data),
                Err(frame) => {
                    let status = frame.trailers_ref().and_then(Status::from_header_map);
                    match status {
                        Some(status) if status.code() == Code::Ok => self.finished = true,
                        Some(status) => return Err(status),
                        None => return Err(Status::internal("the front's answer ended without a status")),
                    }
                    if !self.messages.is_between_messages() {
                        return Err(Status::internal("the front's answer ended inside a message"));
                    }
                }
            }
        }
    }
}

/// Splits received bytes into length-prefixed messages.
#[derive(Debug)]
struct Deframer {
    max_message: usize,
    /// The unread rest of the last frame.
    received: Bytes,
    /// A length prefix split across frames: its bytes so far.
    prefix: [u8; PREFIX],
    prefix_len: usize,
    /// A message split across frames, and its announced length.
    partial: Option<(BytesMut, usize)>,
}

impl Deframer {
    fn new(max_message: usize) -> Self {
        Self { max_message, received: Bytes::new(), prefix: [0; PREFIX], prefix_len: 0, partial: None }
    }

    /// Takes a frame; call only once [`Deframer::next`] has returned `None`.
    fn push(&mut self, data: Bytes) {
        debug_assert!(self.received.is_empty(), "the last frame is not read to its end");
        self.received = data;
    }

    /// Whether no message has been started and not finished.
    fn is_between_messages(&self) -> bool {
        self.received.is_empty() && self.prefix_len == 0 && self.partial.is_none()
    }

    /// The next whole message, or `None` when more bytes are needed.
    fn next(&mut self) -> Result<Option<Bytes>, Status> {
        if let Some((message, length)) = &mut self.partial {
            let take = (*length - message.len()).min(self.received.len());
            message.extend_from_slice(&self.received.split_to(take));
            if message.len() < *length {
                return Ok(None);
            }
            let (message, _) = self.partial.take().expect("a partial message is present");
            return Ok(Some(message.freeze()));
        }
        let take = (PREFIX - self.prefix_len).min(self.received.len());
        self.received.copy_to_slice(&mut self.prefix[self.prefix_len..self.prefix_len + take]);
        self.prefix_len += take;
        if self.prefix_len < PREFIX {
            return Ok(None);
        }
        self.prefix_len = 0;
        let [compressed, length @ ..] = self.prefix;
        if compressed != 0 {
            return Err(Status::internal("the front sent a compressed message, which was never asked for"));
        }
        let length = u32::from_be_bytes(length) as usize;
        if length > self.max_message {
            return Err(Status::out_of_range(format!(
                "the front sent a message of {length} bytes, more than the {} allowed",
                self.max_message
            )));
        }
        if self.received.len() >= length {
            return Ok(Some(self.received.split_to(length)));
        }
        self.partial = Some((BytesMut::with_capacity(length), length));
        self.next()
    }
}

#[cfg(test)]
mod tests {
    use agentvfs_proto::v1::ContentChunk;
    use proptest::prelude::*;

    use super::*;

    fn batch(seed: u8, chunks: usize) -> ContentBatch {
        let chunks = (0..chunks)
            .map(|i| ContentChunk {
                index: i as u32,
                first: true,
                size: 40,
                data: Bytes::from(vec![seed.wrapping_add(i as u8); 40]),
                error: String::new(),
            })
            .collect();
        ContentBatch { chunks }
    }

    fn framed(batches: &[ContentBatch]) -> Vec<u8> {
        let mut out = Vec::new();
        for batch in batches {
            out.push(0);
            out.extend_from_slice(&(batch.encoded_len() as u32).to_be_bytes());
            batch.encode(&mut out).unwrap();
        }
        out
    }

    /// Feeds `wire` cut at `cuts` and decodes every message.
    fn deframe(wire: &[u8], cuts: &[usize], max_message: usize) -> Result<(Vec<ContentBatch>, bool), Status> {
        let mut deframer = Deframer::new(max_message);
        let mut bounds: Vec<usize> = cuts.iter().map(|&c| c.min(wire.len())).collect();
        bounds.extend([0, wire.len()]);
        bounds.sort_unstable();
        let mut out = Vec::new();
        for pair in bounds.windows(2) {
            deframer.push(Bytes::copy_from_slice(&wire[pair[0]..pair[1]]));
            while let Some(message) = deframer.next()? {
                out.push(ContentBatch::decode(message).unwrap());
            }
        }
        Ok((out, deframer.is_between_messages()))
    }

    proptest! {
        #[test]
        fn messages_come_out_whole_however_the_frames_cut_them(
            sizes in prop::collection::vec(0usize..6, 1..5),
            cuts in prop::collection::vec(0usize..2_000, 0..12),
        ) {
            let batches: Vec<ContentBatch> = sizes.iter().enumerate().map(|(i, &n)| batch(i as u8, n)).collect();
            let wire = framed(&batches);
            let (read, between) = deframe(&wire, &cuts, 1 << 20).unwrap();
            prop_assert_eq!(read, batches);
            prop_assert!(between);
        }
    }

    #[test]
    fn a_message_inside_one_frame_is_decoded_where_it_landed() {
        let wire = Bytes::from(framed(&[batch(1, 3), batch(2, 1)]));
        let mut deframer = Deframer::new(1 << 20);
        deframer.push(wire.clone());
        let first = ContentBatch::decode(deframer.next().unwrap().unwrap()).unwrap();
        assert!(wire.as_ptr_range().contains(&first.chunks[2].data.as_ptr()), "content not copied");
        assert!(deframer.next().unwrap().is_some());
        assert!(deframer.next().unwrap().is_none());
        assert!(deframer.is_between_messages());
    }

    #[test]
    fn a_stream_cut_inside_a_message_is_not_between_messages() {
        let wire = framed(&[batch(1, 2)]);
        let (read, between) = deframe(&wire[..wire.len() - 1], &[], 1 << 20).unwrap();
        assert!(read.is_empty() && !between);
        let (_, between) = deframe(&wire[..3], &[], 1 << 20).unwrap();
        assert!(!between, "a prefix cut short");
    }

    #[test]
    fn oversized_and_compressed_messages_are_refused() {
        let wire = framed(&[batch(1, 4)]);
        let status = deframe(&wire, &[], 100).unwrap_err();
        assert_eq!(status.code(), Code::OutOfRange);
        let mut compressed = wire.clone();
        compressed[0] = 1;
        assert_eq!(deframe(&compressed, &[2], 1 << 20).unwrap_err().code(), Code::Internal);
    }
}
