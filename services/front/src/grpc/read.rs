//! `Read` and `ReadMany`: bounded slices of text files, and with `media`
//! whole files that are not text, with their MIME type.

use agentvfs_proto::v1 as pb;

use super::{Front, Target, convert, text_version, upsert_session};
use crate::auth::{Caller, Need};
use crate::error::{Error, Reason, Result};
use crate::media;
use crate::path::SpacePath;
use crate::store::{Entry, VersionRecord};
use crate::text::tokens::{MIN_MAX_TOKENS, TokenBudget};
use crate::text::{self, SliceError, SliceRequest};

/// `Read` defaults and bounds (UTF-16 units and lines).
const DEFAULT_MAX_CHARS: u64 = 32_768;
const MAX_MAX_CHARS: u64 = 131_072;
const DEFAULT_LINES: u64 = 200;
/// The largest file a media read returns.
const MAX_MEDIA_BYTES: u64 = 8 << 20;
/// `ReadMany`: most reads and the shared output budget in UTF-16 units.
const MAX_READS: usize = 10;
const READ_MANY_BUDGET: u64 = 262_144;

/// Files up to this size are read on the async runtime: their content is
/// one cached chunk, so the read costs microseconds, less than handing it to
/// the blocking pool. Larger files are read on the blocking pool. The
/// lookups that locate a read (space, entry, version) are point reads of
/// cached pages and run inline for every read. Measured with `cargo bench
/// -p agentvfs-front --bench rpc -- reads` (200-byte files, c=64, three
/// alternating runs): 39,100–42,050 reads/s inline, 30,190–36,880/s with the
/// whole read on the blocking pool.
const INLINE_BYTES: u64 = super::super::store::content::CHUNK_SIZE as u64;
/// The largest file whose tokens are counted on the async runtime (about
/// a quarter of a millisecond of counting).
const INLINE_TOKEN_BYTES: u64 = 8 << 10;

/// A read resolved to one version, its content not fetched yet.
#[derive(Debug)]
pub(super) struct Located {
    target: Target,
    entry: Entry,
    number: u64,
    pub(super) version: VersionRecord,
    request: SliceRequest,
    tokens: Option<TokenBudget>,
    /// A media read of a file that is not text: its bytes, whole.
    media: bool,
}

impl Located {
    /// Whether the read is cheap enough to finish on the async runtime.
    pub(super) fn inline(&self) -> bool {
        let limit = if self.tokens.is_some() { INLINE_TOKEN_BYTES } else { INLINE_BYTES };
        self.version.size <= limit
    }
}

/// One read of a [`read_many`], within what is left of its budgets.
fn read_within(
    front: &Front,
    caller: &Caller,
    req: &pb::ReadRequest,
    budget: u64,
    tokens: Option<TokenBudget>,
) -> Result<pb::ReadResponse> {
    let mut located = locate(front, caller, req, budget)?;
    if let Some(shared) = tokens {
        located.tokens = match located.tokens {
            Some(own) if own.tokenizer != shared.tokenizer => {
                return Err(Error::invalid_argument(
                    "tokenizer",
                    "A read of a ReadMany with a budget in tokens counts them with the ReadMany's tokenizer.",
                ));
            }
            Some(own) => Some(TokenBudget { max: own.max.min(shared.max), ..shared }),
            None => Some(shared),
        };
    }
    finish(front, caller, located)
}

/// Validates a read and finds the version it reads (metadata only).
pub(super) fn locate(front: &Front, caller: &Caller, req: &pb::ReadRequest, budget: u64) -> Result<Located> {
    let max_chars = match req.max_chars {
        0 => DEFAULT_MAX_CHARS,
        n if (2..=MAX_MAX_CHARS).contains(&n) => n,
        n => {
            return Err(Error::new(
                Reason::InvalidArgument,
                format!("max_chars must be between 2 and {MAX_MAX_CHARS}, not {n}."),
            )
            .with("limit", MAX_MAX_CHARS)
            .field("max_chars"));
        }
    };
    let request = SliceRequest {
        start_line: req.offset.max(1),
        start_char: req.start_char,
        max_lines: if req.limit == 0 { DEFAULT_LINES } else { req.limit },
        max_chars: max_chars.min(budget).max(2),
    };
    let tokens = TokenBudget::parse(req.max_tokens, &req.tokenizer)?;
    let (target, entry) = front.file_target(caller, &req.space, &req.path, &req.base, Need::Read, req.at_revision)?;
    let number = match req.version {
        0 => entry.version,
        n if n <= entry.version => n,
        n => {
            return Err(Error::new(
                Reason::NotFound,
                format!("{} has no version {n}; its latest is {}.", target.path, entry.version),
            )
            .with("path", &target.path)
            .with("currentVersion", entry.version));
        }
    };
    if req.media {
        let version = front
            .store
            .version(target.space.id, entry.node, number)?
            .ok_or_else(|| Error::not_found(format!("version {number} of {}", target.path)))?;
        if !version.text.is_text {
            if version.size > MAX_MEDIA_BYTES {
                return Err(Error::new(
                    Reason::TooLarge,
                    format!(
                        "{} is {} bytes, over the {MAX_MEDIA_BYTES}-byte limit of a media read; Download fetches it.",
                        target.path, version.size
                    ),
                )
                .with("path", &target.path)
                .with("size", version.size)
                .with("limit", MAX_MEDIA_BYTES));
            }
            return Ok(Located { target, entry, number, version, request, tokens, media: true });
        }
    }
    let version = text_version(front, &target, &entry, number)?;
    Ok(Located { target, entry, number, version, request, tokens, media: false })
}

/// Fetches the content of a located read and takes the slice.
pub(super) fn finish(front: &Front, caller: &Caller, located: Located) -> Result<pb::ReadResponse> {
    let Located { target, entry, number, version, request, tokens, media } = located;
    let bytes = front.store.content(version.hash)?;
    if media {
        upsert_session(front, caller, entry.node, number);
        return Ok(pb::ReadResponse {
            node_id: entry.node.to_string(),
            version: number,
            hash: version.hash.to_hex(),
            text: Some(convert::text_info(&version.text, version.charset())),
            path: target.path.to_string(),
            size: version.size,
            mime_type: media::detect(&bytes).to_owned(),
            data: bytes,
            ..Default::default()
        });
    }
    let charset = version.charset();
    let content = charset.decode(&bytes).ok_or_else(|| Error::internal("text content does not decode"))?;
    let mut slice = text::slice(&content, request).map_err(|e| slice_error(e, &target.path))?;
    let tokens = tokens.map_or(0, |budget| slice.within_tokens(request, budget));
    upsert_session(front, caller, entry.node, number);
    Ok(pb::ReadResponse {
        content: slice.content,
        node_id: entry.node.to_string(),
        version: number,
        hash: version.hash.to_hex(),
        total_lines: version.text.line_count,
        first_line: slice.first_line,
        last_line: slice.last_line,
        truncated: slice.truncated,
        next: slice.next.map(|(start_line, start_char)| pb::TextPosition { start_line, start_char }),
        text: Some(convert::text_info(&version.text, charset)),
        path: target.path.to_string(),
        size: version.size,
        mime_type: media::shown(true, &version.mime_type).to_owned(),
        data: Vec::new(),
        tokens,
    })
}

/// Up to ten reads under one shared budget; each outcome stands alone.
pub(super) fn read_many(front: &Front, caller: &Caller, req: &pb::ReadManyRequest) -> Result<pb::ReadManyResponse> {
    if req.reads.is_empty() || req.reads.len() > MAX_READS {
        return Err(Error::new(
            Reason::InvalidArgument,
            format!("ReadMany takes 1 to {MAX_READS} reads, not {}.", req.reads.len()),
        )
        .with("limit", MAX_READS)
        .field("reads"));
    }
    let mut budget = READ_MANY_BUDGET;
    let mut tokens = TokenBudget::parse(req.max_tokens, &req.tokenizer)?;
    let mut response = pb::ReadManyResponse::default();
    for (i, one) in req.reads.iter().enumerate() {
        let mut one = one.clone();
        if one.space.is_empty() {
            one.space.clone_from(&req.space);
        }
        let outcome = if one.media {
            Err(Error::invalid_argument(
                &format!("reads[{i}].media"),
                "ReadMany reads text; read media with Read, one file at a time.",
            ))
        } else if budget < 2 || tokens.is_some_and(|t| t.max < MIN_MAX_TOKENS) {
            Err(Error::new(
                Reason::TooLarge,
                "The shared output budget of this ReadMany is used up; read this file on its own.",
            )
            .with("limit", READ_MANY_BUDGET)
            .field(format!("reads[{i}]")))
        } else {
            read_within(front, caller, &one, budget, tokens)
        };
        let outcome = match outcome {
            Ok(read) => {
                budget -= text::utf16_len(&read.content);
                if let Some(shared) = &mut tokens {
                    shared.max -= read.tokens;
                }
                response.incomplete |= read.truncated;
                pb::read_many_result::Outcome::Read(read)
            }
            Err(error) => {
                response.incomplete = true;
                pb::read_many_result::Outcome::Error(pb::ReadError {
                    code: error.reason.code() as i32,
                    reason: error.reason.as_str().to_owned(),
                    message: error.message().to_owned(),
                    metadata: error.info_metadata(),
                })
            }
        };
        response.results.push(pb::ReadManyResult { outcome: Some(outcome) });
    }
    Ok(response)
}

fn slice_error(error: SliceError, path: &SpacePath) -> Error {
    let field = match error {
        SliceError::LinePastEnd { .. } => "offset",
        SliceError::CharPastEnd { .. } | SliceError::InsideSurrogatePair { .. } => "start_char",
    };
    let mut err = Error::new(Reason::InvalidArgument, format!("{path}: {error}.")).with("path", path);
    if let SliceError::LinePastEnd { total_lines, .. } = error {
        err = err.with("lines", total_lines);
    }
    err.field(field)
}
