//! The client commands: each is one gRPC call to the front, or a sequence of
//! pages of one call.

use crate::client::Client;
use crate::errors::CliError;
use crate::output::Output;

pub mod admin;
pub mod batch;
pub mod edits;
pub mod files;
pub mod grep_search;
pub mod history;
pub mod patch;

/// What every client command works with.
#[derive(Debug)]
pub struct Context {
    pub client: Client,
    /// The `--space` every request names.
    pub space: String,
    /// Whether a `--session` was given, which remembers reads between runs.
    pub session: bool,
    pub out: Output,
}

/// Paging flags of every paginated command.
#[derive(Debug, Clone, clap::Args)]
pub struct Paging {
    /// Follow page tokens to the end instead of printing the next one.
    #[arg(long)]
    pub all: bool,
    /// Continue a listing from this token.
    #[arg(long, value_name = "TOKEN", default_value = "", allow_hyphen_values = true)]
    pub page_token: String,
    /// Entries per page (0 = the server default).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub page_size: u32,
}

/// A budget in tokens.
#[derive(Debug, clap::Args)]
pub struct TokenArgs {
    /// Output budget in tokens (at least 4): the output ends at the last whole line that fits.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub max_tokens: u64,
    /// The vocabulary tokens are counted in: o200k_base (GPT-4o and later) or cl100k_base.
    #[arg(long, value_name = "NAME", default_value = "o200k_base")]
    pub tokenizer: String,
}

impl Paging {
    /// Whether to ask for the page after one that returned `next`; when not,
    /// prints `next` so that no result is dropped silently.
    pub fn follow(&self, out: &Output, next: &str) -> Option<String> {
        if next.is_empty() {
            return None;
        }
        if self.all {
            return Some(next.to_owned());
        }
        out.next_page(next);
        None
    }
}

/// Reads a local input file (`-` is stdin) as text.
pub fn read_input(path: &std::path::Path) -> Result<String, CliError> {
    let result =
        if path.as_os_str() == "-" { std::io::read_to_string(std::io::stdin()) } else { std::fs::read_to_string(path) };
    result.map_err(|error| CliError::Usage(format!("cannot read {}: {error}", path.display())))
}

/// Parses a JSON array of proto messages of type `agentvfs.v1.<name>` written
/// in canonical proto JSON, into the generated type.
pub fn proto_json_array<M: prost::Message + Default>(text: &str, name: &str) -> Result<Vec<M>, CliError> {
    use prost_reflect::{DescriptorPool, DynamicMessage};
    let pool = DescriptorPool::decode(agentvfs_proto::FILE_DESCRIPTOR_SET)
        .map_err(|error| CliError::Other(format!("cannot load the proto descriptors: {error}")))?;
    let descriptor = pool
        .get_message_by_name(&format!("agentvfs.v1.{name}"))
        .ok_or_else(|| CliError::Other(format!("no descriptor for {name}")))?;
    let items: Vec<serde_json::Value> =
        serde_json::from_str(text).map_err(|error| CliError::Usage(format!("expected a JSON array: {error}")))?;
    items
        .into_iter()
        .enumerate()
        .map(|(index, item)| {
            let dynamic = DynamicMessage::deserialize(descriptor.clone(), item)
                .map_err(|error| CliError::Usage(format!("item {index} is not a valid {name}: {error}")))?;
            M::decode(prost::Message::encode_to_vec(&dynamic).as_slice())
                .map_err(|error| CliError::Other(format!("item {index}: {error}")))
        })
        .collect()
}
