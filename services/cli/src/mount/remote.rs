//! The mount's calls to the front: each bounded by a deadline, retried a
//! few times when the front says a retry can succeed, and failed with the
//! `errno` a local file system would give (SPEC §14).

use std::future::Future;
use std::time::{Duration, SystemTime};

use agentvfs_proto::v1 as pb;
use fuser::Errno;
use tonic::Code;
use tonic_types::StatusExt as _;

use crate::client::Client;

/// How long one call may take before the operation fails with `EIO`.
pub const DEADLINE: Duration = Duration::from_secs(15);
/// Retries of a call the front says may succeed later (rate limit,
/// overload, a key still in progress), waiting 0.1 s, 0.2 s, 0.4 s.
const RETRIES: u32 = 3;
/// Content up to this size goes in one `Write`; more streams as `Upload`.
const ONE_MESSAGE: usize = 4 << 20;
/// Bytes per upload message.
const UPLOAD_CHUNK: usize = 1 << 20;
/// Entries per `List` page.
const PAGE: u32 = 200;

/// What went wrong, in the terms of the operation that asked.
#[derive(Debug, Clone)]
pub enum Failure {
    /// The file changed on the server since it was opened.
    Conflict(String),
    /// Any other failure, as the `errno` the operation returns.
    Errno(Errno, String),
}

impl Failure {
    pub fn errno(&self) -> Errno {
        match self {
            Failure::Conflict(_) => Errno::EIO,
            Failure::Errno(errno, _) => *errno,
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Conflict(message) | Failure::Errno(_, message) => f.write_str(message),
        }
    }
}

/// The `errno` for a status from the front.
fn failure(status: &tonic::Status) -> Failure {
    let reason = status.get_details_error_info().map(|info| info.reason).unwrap_or_default();
    failure_of(status.code(), &reason, status.message())
}

/// The `errno` for a failure with a gRPC code, a reason (SPEC §6) and a message.
fn failure_of(code: Code, reason: &str, message: &str) -> Failure {
    let message = format!("{}: {message}", if reason.is_empty() { "error" } else { reason });
    let errno = match (code, reason) {
        (_, "VERSION_CONFLICT" | "FILE_MODIFIED_SINCE_READ") => return Failure::Conflict(message),
        (Code::NotFound, _) => Errno::ENOENT,
        (Code::AlreadyExists, _) => Errno::EEXIST,
        (Code::PermissionDenied | Code::Unauthenticated, _) => Errno::EACCES,
        (_, "NOT_A_DIRECTORY") => Errno::ENOTDIR,
        (_, "NOT_A_FILE") => Errno::EISDIR,
        (_, "FILE_TOO_LARGE" | "TOO_LARGE") => Errno::EFBIG,
        (_, "QUOTA_EXCEEDED") => Errno::EDQUOT,
        (_, "STORAGE_FULL") => Errno::ENOSPC,
        (_, "INVALID_PATH" | "PATH_TRAVERSAL") => Errno::EINVAL,
        _ => Errno::EIO,
    };
    Failure::Errno(errno, message)
}

fn retryable(status: &tonic::Status) -> bool {
    let info = status.get_details_error_info();
    info.is_some_and(|info| info.metadata.get("retryable").is_some_and(|value| value == "true"))
}

/// One directory entry as the front lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Child {
    pub name: String,
    pub directory: bool,
    pub size: u64,
    pub version: u64,
    pub hash: String,
    pub modified: SystemTime,
    pub executable: bool,
}

impl Child {
    fn from_entry(entry: pb::Entry) -> Child {
        let modified =
            entry.modified_time.and_then(|time| SystemTime::try_from(time).ok()).unwrap_or(SystemTime::UNIX_EPOCH);
        Child {
            directory: entry.kind == pb::NodeKind::Directory as i32,
            name: entry.name,
            size: entry.size,
            version: entry.version,
            hash: entry.hash,
            modified,
            executable: entry.executable,
        }
    }
}

/// A file saved: its new version and content hash.
#[derive(Debug, Clone)]
pub struct Saved {
    pub version: u64,
    pub hash: String,
    /// The space revision the save made.
    pub revision: u64,
}

/// The front, as the mount calls it: one space, the mount's session and
/// tool call on every request (see [`Client`]).
#[derive(Debug, Clone)]
pub struct Remote {
    client: Client,
    space: String,
    runtime: tokio::runtime::Handle,
}

impl Remote {
    pub fn new(client: Client, space: String, runtime: tokio::runtime::Handle) -> Remote {
        Remote { client, space, runtime }
    }

    /// Runs `call` on the runtime from a FUSE thread, within [`DEADLINE`],
    /// retrying what may succeed later.
    fn run<T, F, Fut>(&self, what: &str, mut call: F) -> Result<T, Failure>
    where
        F: FnMut(Client) -> Fut,
        Fut: Future<Output = Result<T, tonic::Status>>,
    {
        self.runtime.block_on(async {
            let attempts = async {
                let mut attempt = 0;
                loop {
                    match call(self.client.clone()).await {
                        Ok(value) => return Ok(value),
                        Err(status) if retryable(&status) && attempt < RETRIES => {
                            attempt += 1;
                            tokio::time::sleep(Duration::from_millis(50 << attempt)).await;
                        }
                        Err(status) => return Err(failure(&status)),
                    }
                }
            };
            match tokio::time::timeout(DEADLINE, attempts).await {
                Ok(result) => result,
                Err(_) => {
                    Err(Failure::Errno(Errno::EIO, format!("{what}: no answer from the front within {DEADLINE:?}")))
                }
            }
        })
    }

    /// Every entry of the folder `path`, page by page.
    pub fn list(&self, path: &str) -> Result<Vec<Child>, Failure> {
        let mut children = Vec::new();
        let mut token = String::new();
        loop {
            let request = pb::ListRequest {
                space: self.space.clone(),
                path: path.to_owned(),
                page_size: PAGE,
                page_token: token,
                ..Default::default()
            };
            let page = self.run("list", |mut client| {
                let request = request.clone();
                async move { client.fs.list(request).await.map(tonic::Response::into_inner) }
            })?;
            children.extend(page.entries.into_iter().map(Child::from_entry));
            if page.next_page_token.is_empty() {
                return Ok(children);
            }
            token = page.next_page_token;
        }
    }

    /// The bytes of `version` of the file at `path`.
    pub fn download(&self, path: &str, version: u64) -> Result<Vec<u8>, Failure> {
        let request =
            pb::DownloadRequest { space: self.space.clone(), path: path.to_owned(), version, ..Default::default() };
        self.run("read", |mut client| {
            let request = request.clone();
            async move {
                let mut stream = client.fs.download(request).await?.into_inner();
                let mut bytes = Vec::new();
                while let Some(chunk) = stream.message().await? {
                    bytes.extend_from_slice(&chunk.data);
                }
                Ok(bytes)
            }
        })
    }

    /// Saves `bytes` as a new version of `path`, only if its latest version
    /// is `expected` (0: only if it does not exist).
    pub fn save(&self, path: &str, expected: u64, executable: bool, bytes: &[u8]) -> Result<Saved, Failure> {
        let key = ulid::Ulid::generate().to_string();
        if bytes.len() <= ONE_MESSAGE {
            let request = pb::WriteRequest {
                space: self.space.clone(),
                path: path.to_owned(),
                body: Some(pb::write_request::Body::Data(bytes.to_vec())),
                expected_version: Some(expected),
                executable: Some(executable),
                idempotency_key: key,
                ..Default::default()
            };
            let reply = self.run("save", |mut client| {
                let request = request.clone();
                async move { client.fs.write(request).await.map(tonic::Response::into_inner) }
            })?;
            return Ok(Saved { version: reply.version, hash: reply.hash, revision: reply.revision });
        }
        use pb::upload_chunk::Part;
        let header = pb::UploadHeader {
            space: self.space.clone(),
            path: path.to_owned(),
            expected_version: Some(expected),
            executable: Some(executable),
            hash: blake3::hash(bytes).to_hex().to_string(),
            idempotency_key: key,
            ..Default::default()
        };
        let reply = self.run("save", |mut client| {
            let header = header.clone();
            // Each attempt streams the bytes again, a chunk at a time.
            let chunks = std::iter::once(pb::UploadChunk { part: Some(Part::Header(header)) })
                .chain(bytes.chunks(UPLOAD_CHUNK).map(|data| pb::UploadChunk { part: Some(Part::Data(data.to_vec())) }))
                .collect::<Vec<_>>();
            async move { client.fs.upload(tokio_stream::iter(chunks)).await.map(tonic::Response::into_inner) }
        })?;
        Ok(Saved { version: reply.version, hash: reply.hash, revision: reply.revision })
    }

    /// Applies `actions` as one atomic batch; returns the revision it made.
    pub fn batch(&self, actions: Vec<pb::batch_action::Action>) -> Result<u64, Failure> {
        let request = pb::BatchRequest {
            space: self.space.clone(),
            actions: actions.into_iter().map(|action| pb::BatchAction { action: Some(action) }).collect(),
            apply: true,
            idempotency_key: ulid::Ulid::generate().to_string(),
            ..Default::default()
        };
        let reply = self.run("change", |mut client| {
            let request = request.clone();
            async move { client.fs.batch(request).await.map(tonic::Response::into_inner) }
        })?;
        // A failed action fails the batch, which then changed nothing.
        match reply.failed_index.and_then(|index| reply.outcomes.into_iter().find(|o| o.index == index)) {
            Some(outcome) => {
                let error = outcome.error.unwrap_or_default();
                Err(failure_of(Code::from_i32(error.code), &error.reason, &error.message))
            }
            None => Ok(reply.revision),
        }
    }

    /// Change events at or below `path`, from now on.
    pub async fn watch(&self, path: &str) -> Result<tonic::Streaming<pb::WatchEvent>, tonic::Status> {
        let request = pb::WatchRequest { space: self.space.clone(), path: path.to_owned(), from_revision: 0 };
        Ok(self.client.clone().fs.watch(request).await?.into_inner())
    }
}
