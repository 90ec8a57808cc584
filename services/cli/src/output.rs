//! Printing results: human text, or with `--json` one line of canonical proto
//! JSON per response message (the same field names and encodings as gRPC
//! transcoding, produced from the proto descriptors rather than by hand).
//!
//! Results go to stdout; notes about them (page tokens, skipped files, cut
//! reads) go to stderr, so that stdout stays exactly the results.

use std::io::{self, Write as _};

use prost_reflect::{DescriptorPool, DynamicMessage};

use crate::errors::CliError;

#[derive(Debug)]
pub struct Output {
    json: Option<DescriptorPool>,
}

impl Output {
    pub fn new(json: bool) -> Result<Output, CliError> {
        let json = json.then(descriptors).transpose()?;
        Ok(Output { json })
    }

    pub fn is_json(&self) -> bool {
        self.json.is_some()
    }

    /// Prints `message` (of proto type `agentvfs.v1.<name>`) as one JSON line.
    pub fn message<M: prost::Message>(&self, name: &str, message: &M) -> Result<(), CliError> {
        let Some(pool) = &self.json else { return Ok(()) };
        let text = serde_json::to_string(&dynamic(pool, name, message)?)
            .map_err(|error| CliError::Other(format!("cannot print agentvfs.v1.{name} as JSON: {error}")))?;
        line(&text)
    }

    /// Tells the caller how to continue a listing that was not followed to the end.
    pub fn next_page(&self, token: &str) {
        if !token.is_empty() && !self.is_json() {
            eprintln!("next page token: {token}");
        }
    }
}

/// Loads the descriptors of the agentvfs proto files, which give proto JSON its field names.
pub fn descriptors() -> Result<DescriptorPool, CliError> {
    DescriptorPool::decode(agentvfs_proto::FILE_DESCRIPTOR_SET)
        .map_err(|error| CliError::Other(format!("cannot load the proto descriptors: {error}")))
}

/// `message` as the dynamic message `agentvfs.v1.<name>`, which serializes as proto JSON.
pub fn dynamic<M: prost::Message>(pool: &DescriptorPool, name: &str, message: &M) -> Result<DynamicMessage, CliError> {
    let full_name = format!("agentvfs.v1.{name}");
    let descriptor = pool
        .get_message_by_name(&full_name)
        .ok_or_else(|| CliError::Other(format!("no descriptor for {full_name}")))?;
    DynamicMessage::decode(descriptor, message.encode_to_vec().as_slice())
        .map_err(|error| CliError::Other(format!("cannot re-decode {full_name}: {error}")))
}

/// One line on stdout.
pub fn line(text: &str) -> Result<(), CliError> {
    let mut stdout = io::stdout().lock();
    stdout.write_all(text.as_bytes())?;
    stdout.write_all(b"\n")?;
    Ok(())
}

/// Text as it is, with a final newline added when it lacks one.
pub fn text(text: &str) -> Result<(), CliError> {
    let mut stdout = io::stdout().lock();
    stdout.write_all(text.as_bytes())?;
    if !text.is_empty() && !text.ends_with('\n') {
        stdout.write_all(b"\n")?;
    }
    Ok(())
}

/// A note about the results, on stderr.
pub fn note(text: &str) {
    eprintln!("{text}");
}

/// `2026-01-02T03:04:05Z`, or `-` when unset.
pub fn time(timestamp: Option<&prost_types::Timestamp>) -> String {
    timestamp.map_or_else(|| "-".to_owned(), ToString::to_string)
}
