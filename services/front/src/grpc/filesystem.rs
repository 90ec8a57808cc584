//! The `FileSystem` service: what agents call.

use agentvfs_proto::v1 as pb;
use agentvfs_proto::v1::file_system_server::FileSystem;
use tonic::codegen::BoxStream;
use tonic::{Request, Response, Status};

use super::access::Access;
use super::page_token::{PageToken, fingerprint};
use super::{
    Front, Services, Target, convert, edit, handler, idempotency, non_empty, not_a_file, page_size, read, session_mark,
    transfer, upsert_written,
};
use crate::auth::Need;
use crate::error::{Error, Reason, Result};
use crate::glob::{Glob, GlobError};
use crate::grep::{self, GrepQuery};
use crate::media;
use crate::path::SpacePath;
use crate::store::{Actor, Entry, Kind, ScanOptions, SpaceRecord, Store, WriteBody, WriteMode, WriteOp};

/// Default and largest `List` / `Find` page.
const DEFAULT_PAGE: usize = 100;
const MAX_PAGE: usize = 200;
/// History keys one `List` / `Find` page may examine before it returns a
/// short page with a token (bounds the latency of sparse filters).
const SCAN_BUDGET: usize = 20_000;

#[tonic::async_trait]
impl FileSystem for Services {
    async fn resolve(&self, request: Request<pb::ResolveRequest>) -> Result<Response<pb::ResolveResponse>, Status> {
        let front = self.front.clone();
        let caller = front.caller(&request)?;
        let req = request.into_inner();
        handler::run(&front, move |front| {
            let target = front.target(&caller, &req.space, &req.reference, &req.base, "reference", Need::Read)?;
            let entry = front.existing(&target, None)?;
            let role = caller.role(&target.space);
            let writable = role.is_some_and(|r| r >= crate::store::Role::Editor) && !caller.read_only;
            Ok(pb::ResolveResponse {
                space_id: target.space.id.to_string(),
                node_id: entry.node.to_string(),
                canonical_reference: format!("{}{}", crate::reference::ITEM_PREFIX, entry.node),
                uri: crate::reference::uri(target.space.id, &target.path),
                path: target.path.to_string(),
                kind: convert::kind(entry.kind),
                version: entry.version,
                size: entry.size,
                capabilities: Some(pb::Capabilities {
                    read: true,
                    write: writable,
                    admin: role == Some(crate::store::Role::Owner) && !caller.read_only,
                }),
                revision: target.space.revision,
            })
        })
        .await
    }

    async fn list(&self, request: Request<pb::ListRequest>) -> Result<Response<pb::ListResponse>, Status> {
        let front = self.front.clone();
        let caller = front.caller(&request)?;
        let req = request.into_inner();
        handler::run(&front, move |front| {
            let limit = page_size(req.page_size, DEFAULT_PAGE, MAX_PAGE, "page_size")?;
            let glob = parse_glob(&req.glob, "glob")?;
            let target = front.target(&caller, &req.space, &req.path, &req.base, "path", Need::Read)?;
            let bound = fingerprint(&[
                "list",
                &target.space.id.to_string(),
                target.path.as_str(),
                if req.recursive { "r" } else { "" },
                &req.glob,
            ]);
            let (revision, after) = pin(&target.space, &req.page_token, req.at_revision, bound)?;
            directory(front, &target, revision)?;
            let filter = |path: &SpacePath, _: &Entry| glob.as_ref().is_none_or(|g| g.matches(&target.path, path));
            let page = front.store.scan(
                target.space.id,
                &ScanOptions {
                    root: &target.path,
                    revision,
                    recursive: req.recursive,
                    after: after.as_deref(),
                    from: None,
                    limit,
                    budget: SCAN_BUDGET,
                    filter: &filter,
                },
            )?;
            Ok(pb::ListResponse {
                entries: page.entries.iter().map(|(path, entry)| convert::entry(path, entry)).collect(),
                next_page_token: next_token(bound, revision, page.resume_after),
                revision,
            })
        })
        .await
    }

    async fn find(&self, request: Request<pb::FindRequest>) -> Result<Response<pb::FindResponse>, Status> {
        let front = self.front.clone();
        let caller = front.caller(&request)?;
        let req = request.into_inner();
        handler::run(&front, move |front| {
            let limit = page_size(req.page_size, DEFAULT_PAGE, MAX_PAGE, "page_size")?;
            let glob = parse_glob(&req.pattern, "pattern")?;
            let target = front.target(&caller, &req.space, &req.path, &req.base, "path", Need::Read)?;
            let bound = fingerprint(&["find", &target.space.id.to_string(), target.path.as_str(), &req.pattern]);
            let (revision, after) = pin(&target.space, &req.page_token, req.at_revision, bound)?;
            directory(front, &target, revision)?;
            let filter = |path: &SpacePath, entry: &Entry| {
                entry.kind == Kind::File && glob.as_ref().is_none_or(|g| g.matches(&target.path, path))
            };
            let page = front.store.scan(
                target.space.id,
                &ScanOptions {
                    root: &target.path,
                    revision,
                    recursive: true,
                    after: after.as_deref(),
                    from: None,
                    limit,
                    budget: SCAN_BUDGET,
                    filter: &filter,
                },
            )?;
            Ok(pb::FindResponse {
                matches: page
                    .entries
                    .iter()
                    .map(|(path, entry)| pb::FindMatch {
                        path: path.to_string(),
                        node_id: entry.node.to_string(),
                        size: entry.size,
                        version: entry.version,
                        modified_time: convert::timestamp(entry.modified_ms),
                        mime_type: media::shown(entry.is_text, &entry.mime_type).to_owned(),
                    })
                    .collect(),
                next_page_token: next_token(bound, revision, page.resume_after),
                revision,
            })
        })
        .await
    }

    async fn read(&self, request: Request<pb::ReadRequest>) -> Result<Response<pb::ReadResponse>, Status> {
        let front = self.front.clone();
        let caller = front.caller(&request)?;
        let req = request.into_inner();
        let located = read::locate(&front, &caller, &req, u64::MAX)?;
        if located.inline() {
            return Ok(Response::new(read::finish(&front, &caller, located)?));
        }
        handler::run(&front, move |front| read::finish(front, &caller, located)).await
    }

    async fn read_many(&self, request: Request<pb::ReadManyRequest>) -> Result<Response<pb::ReadManyResponse>, Status> {
        let front = self.front.clone();
        let caller = front.caller(&request)?;
        let req = request.into_inner();
        handler::run(&front, move |front| read::read_many(front, &caller, &req)).await
    }

    async fn edit(&self, request: Request<pb::EditRequest>) -> Result<Response<pb::EditResponse>, Status> {
        let front = self.front.clone();
        let caller = front.caller(&request)?;
        let req = request.into_inner();
        if req.dry_run {
            handler::run(&front, move |front| caller.carrying(|| edit::edit(front, &caller, req))).await
        } else {
            let turn = req.space.clone();
            handler::run_change(&front, &turn, move |front| caller.carrying(|| edit::edit(front, &caller, req))).await
        }
    }

    async fn diff(&self, request: Request<pb::DiffRequest>) -> Result<Response<pb::DiffResponse>, Status> {
        let front = self.front.clone();
        let caller = front.caller(&request)?;
        let req = request.into_inner();
        handler::run(&front, move |front| edit::diff(front, &caller, &req)).await
    }

    async fn upload(
        &self,
        request: Request<tonic::Streaming<pb::UploadChunk>>,
    ) -> Result<Response<pb::UploadResponse>, Status> {
        let front = self.front.clone();
        let caller = front.caller(&request)?;
        let mut stream = request.into_inner();
        let header = transfer::receive_header(&mut stream).await?;
        // Refused before the bytes arrive when the caller may not write
        // there; checked again when the bytes are stored, since rights can
        // change while they arrive.
        handler::blocking(&front, {
            let (caller, header) = (caller.clone(), header.clone());
            move |front| front.target(&caller, &header.space, &header.path, &header.base, "header.path", Need::Write)
        })
        .await?;
        let limit = front.store.limits().max_file_bytes;
        let received = transfer::receive_data(&front.store, &mut stream, &header, limit).await?;
        let turn = header.space.clone();
        handler::run_change(&front, &turn, move |front| {
            caller.carrying(|| transfer::store_upload(front, &caller, header, received))
        })
        .await
    }

    async fn download(
        &self,
        request: Request<pb::DownloadRequest>,
    ) -> Result<Response<BoxStream<pb::DownloadChunk>>, Status> {
        let front = self.front.clone();
        let caller = front.caller(&request)?;
        let req = request.into_inner();
        let download = handler::blocking(&front, move |front| transfer::open_download(front, &caller, &req)).await?;
        Ok(Response::new(transfer::send_download(front.store.clone(), download)))
    }

    async fn write(&self, request: Request<pb::WriteRequest>) -> Result<Response<pb::WriteResponse>, Status> {
        let front = self.front.clone();
        let caller = front.caller(&request)?;
        let req = request.into_inner();
        let fingerprint = idempotency::fingerprint(&req.idempotency_key, &req);
        let limits = front.store.limits();
        let body = match req.body {
            Some(pb::write_request::Body::Content(text)) => {
                too_large("content", text.len() as u64, limits.max_text_bytes)?;
                WriteBody::Text { text, encoding: convert::charset("encoding", &req.encoding)? }
            }
            Some(pb::write_request::Body::Data(_)) if !req.encoding.is_empty() => {
                return Err(Error::invalid_argument(
                    "encoding",
                    "An encoding applies to text `content`; `data` is stored as it is.",
                )
                .into());
            }
            Some(pb::write_request::Body::Data(bytes)) => {
                too_large("data", bytes.len() as u64, limits.max_file_bytes)?;
                WriteBody::Bytes(bytes)
            }
            None => {
                return Err(
                    Error::invalid_argument("content", "Give the file's `content` (text) or `data` (bytes).").into()
                );
            }
        };
        let mode = match pb::WriteMode::try_from(req.mode) {
            Ok(pb::WriteMode::Overwrite) => WriteMode::Overwrite,
            Ok(pb::WriteMode::Append) => WriteMode::Append,
            Ok(pb::WriteMode::CreateNew) => WriteMode::CreateNew,
            Err(_) => {
                return Err(Error::invalid_argument("mode", format!("Unknown write mode {}.", req.mode)).into());
            }
        };
        let (space, path, base, expected_version, executable, key) =
            (req.space, req.path, req.base, req.expected_version, req.executable, req.idempotency_key);
        // A replayed or unchanged answer also waits for the flush: the
        // original change may not be on disk yet.
        let turn = space.clone();
        handler::run_change(&front, &turn, move |front| {
            caller.carrying(|| {
                let target = front.target(&caller, &space, &path, &base, "path", Need::Write)?;
                let space_id = target.space.id.to_string();
                idempotency::run(front, &caller, &space_id, "Write", &key, fingerprint, |claim| {
                    let response_path = target.path.clone();
                    let outcome = front.store.write(WriteOp {
                        space: target.space.id,
                        path: target.path,
                        body,
                        mode,
                        expected_version,
                        executable,
                        operation: match mode {
                            WriteMode::Append => "append",
                            WriteMode::CreateNew => "create",
                            WriteMode::Overwrite => "write",
                        },
                        actor: Actor {
                            principal: caller.principal.clone(),
                            tool_call: caller.tool_call.clone(),
                            idempotency_key: non_empty(key.clone()),
                        },
                        receipt: claim.map(|c| {
                            let path = response_path.clone();
                            c.receipt(move |outcome| write_response(&path, outcome))
                        }),
                        session: session_mark(front, &caller),
                    })?;
                    upsert_written(front, &caller, outcome.node, outcome.version);
                    Ok(write_response(&response_path, &outcome))
                })
            })
        })
        .await
    }

    async fn batch(&self, request: Request<pb::BatchRequest>) -> Result<Response<pb::BatchResponse>, Status> {
        let front = self.front.clone();
        let caller = front.caller(&request)?;
        let req = request.into_inner();
        // Also for replays and kept failures: their receipts must be on disk.
        let turn = req.space.clone();
        handler::run_change(&front, &turn, move |front| caller.carrying(|| super::batch::batch(front, &caller, &req)))
            .await
    }

    async fn apply_patch(
        &self,
        request: Request<pb::ApplyPatchRequest>,
    ) -> Result<Response<pb::ApplyPatchResponse>, Status> {
        let front = self.front.clone();
        let caller = front.caller(&request)?;
        let req = request.into_inner();
        // Also for replays and unchanged answers: their receipts must be on disk.
        let turn = req.space.clone();
        handler::run_change(&front, &turn, move |front| {
            caller.carrying(|| super::patch::apply_patch(front, &caller, &req))
        })
        .await
    }

    async fn revert(&self, request: Request<pb::RevertRequest>) -> Result<Response<pb::RevertResponse>, Status> {
        let front = self.front.clone();
        let caller = front.caller(&request)?;
        let req = request.into_inner();
        // Also for replays and unchanged answers: their receipts must be on disk.
        let turn = req.space.clone();
        handler::run_change(&front, &turn, move |front| caller.carrying(|| super::revert::revert(front, &caller, &req)))
            .await
    }

    async fn acquire_lease(&self, request: Request<pb::AcquireLeaseRequest>) -> Result<Response<pb::Lease>, Status> {
        let front = self.front.clone();
        let caller = front.caller(&request)?;
        let req = request.into_inner();
        handler::run_change(&front, &req.space.clone(), move |front| super::leases::acquire(front, &caller, &req)).await
    }

    async fn renew_lease(&self, request: Request<pb::RenewLeaseRequest>) -> Result<Response<pb::Lease>, Status> {
        let front = self.front.clone();
        let caller = front.caller(&request)?;
        let req = request.into_inner();
        handler::run_change(&front, &req.space.clone(), move |front| super::leases::renew(front, &caller, &req)).await
    }

    async fn release_lease(&self, request: Request<pb::ReleaseLeaseRequest>) -> Result<Response<pb::Lease>, Status> {
        let front = self.front.clone();
        let caller = front.caller(&request)?;
        let req = request.into_inner();
        handler::run_change(&front, &req.space.clone(), move |front| super::leases::release(front, &caller, &req)).await
    }

    async fn list_leases(
        &self,
        request: Request<pb::ListLeasesRequest>,
    ) -> Result<Response<pb::ListLeasesResponse>, Status> {
        let front = self.front.clone();
        let caller = front.caller(&request)?;
        let req = request.into_inner();
        handler::run(&front, move |front| super::leases::list(front, &caller, &req)).await
    }

    async fn watch(&self, request: Request<pb::WatchRequest>) -> Result<Response<BoxStream<pb::WatchEvent>>, Status> {
        let front = self.front.clone();
        let mut caller = front.caller(&request)?;
        // A stream may stay open for hours: it does not hold a call slot.
        caller.admission = None;
        let req = request.into_inner();
        let target = handler::blocking(&front, {
            let (caller, req) = (caller.clone(), req.clone());
            move |front| front.target(&caller, &req.space, &req.path, "", "path", Need::Read)
        })
        .await?;
        let access = Access::new(&caller, Need::Read, &target, &req.space, &req.path);
        Ok(Response::new(super::watch::follow(&front, target, access, req.from_revision)?))
    }

    async fn search(&self, request: Request<pb::SearchRequest>) -> Result<Response<pb::SearchResponse>, Status> {
        let front = self.front.clone();
        let caller = front.caller(&request)?;
        let deadline = super::deadline(request.metadata());
        let req = request.into_inner();
        let (target, plan) = {
            let (front, caller) = (front.clone(), caller.clone());
            front
                .store
                .clone()
                .blocking(move |_| {
                    let target = front.target(&caller, &req.space, &req.path, &req.base, "path", Need::Read)?;
                    let plan = super::search::plan(&target, &req)?;
                    Ok((target, plan))
                })
                .await?
        };
        let request_id = caller.request_id.as_deref();
        Ok(Response::new(super::search::run(&front, &target, plan, deadline, request_id).await?))
    }

    async fn grep(&self, request: Request<pb::GrepRequest>) -> Result<Response<pb::GrepResponse>, Status> {
        let front = self.front.clone();
        let caller = front.caller(&request)?;
        let deadline = super::deadline(request.metadata());
        let req = request.into_inner();
        let query = GrepQuery::parse(&req)?;
        let target = {
            let (front, caller, req) = (front.clone(), caller.clone(), req.clone());
            front
                .store
                .clone()
                .blocking(move |_| front.target(&caller, &req.space, &req.path, &req.base, "path", Need::Read))
                .await?
        };
        let scope = grep::Scope { space: target.space, root: target.path };
        let response = grep::page(&front.grep, &scope, &query, &req, deadline, caller.request_id.as_deref()).await?;
        Ok(Response::new(response))
    }

    async fn list_versions(
        &self,
        request: Request<pb::ListVersionsRequest>,
    ) -> Result<Response<pb::ListVersionsResponse>, Status> {
        let front = self.front.clone();
        let caller = front.caller(&request)?;
        let req = request.into_inner();
        handler::run(&front, move |front| {
            let limit = page_size(req.page_size, DEFAULT_PAGE, MAX_PAGE, "page_size")?;
            let target = front.target(&caller, &req.space, &req.path, &req.base, "path", Need::Read)?;
            let entry = front.existing(&target, None)?;
            if entry.is_dir() {
                return Err(not_a_file(&target.path));
            }
            let bound = fingerprint(&["versions", &target.space.id.to_string(), &entry.node.to_string()]);
            let before = if req.page_token.is_empty() {
                None
            } else {
                let token = PageToken::decode(&req.page_token, bound)?;
                Some(token.after.parse::<u64>().map_err(|_| {
                    Error::new(Reason::CursorInvalid, "The page token is not valid.").field("page_token")
                })?)
            };
            let versions = front.store.versions(target.space.id, entry.node, before, limit + 1)?;
            let more = versions.len() > limit;
            let versions = &versions[..versions.len().min(limit)];
            let next_page_token = match versions.last() {
                Some((number, _)) if more => {
                    PageToken { fingerprint: bound, revision: 0, after: number.to_string(), position: 0, line: 0 }
                        .encode()
                }
                _ => String::new(),
            };
            Ok(pb::ListVersionsResponse {
                versions: versions.iter().map(|(n, record)| convert::version_info(*n, record)).collect(),
                next_page_token,
                node_id: entry.node.to_string(),
            })
        })
        .await
    }
}

/// The revision and resume point of a paginated call: from its token, or
/// pinned now (or at `at_revision`) for a first page.
fn pin(space: &SpaceRecord, token: &str, at_revision: u64, bound: [u8; 16]) -> Result<(u64, Option<String>)> {
    if !token.is_empty() {
        let token = PageToken::decode(token, bound)?;
        Store::check_revision(space, token.revision)?;
        return Ok((token.revision, Some(token.after)));
    }
    let revision = if at_revision == 0 { space.revision } else { at_revision };
    Store::check_revision(space, revision)?;
    Ok((revision, None))
}

fn next_token(bound: [u8; 16], revision: u64, resume_after: Option<String>) -> String {
    resume_after
        .map(|after| PageToken { fingerprint: bound, revision, after, position: 0, line: 0 }.encode())
        .unwrap_or_default()
}

/// Checks that the target is a directory as of `revision`.
fn directory(front: &Front, target: &Target, revision: u64) -> Result<()> {
    match front.store.entry(target.space.id, &target.path, Some(revision))? {
        Some(entry) if entry.is_dir() => Ok(()),
        Some(_) => Err(Error::new(Reason::NotADirectory, format!("{} is a file, not a directory.", target.path))
            .with("path", &target.path)),
        None => Err(Error::not_found(&target.path)),
    }
}

fn parse_glob(pattern: &str, field: &str) -> Result<Option<Glob>> {
    if pattern.is_empty() {
        return Ok(None);
    }
    Glob::new(pattern).map(Some).map_err(|error| {
        let reason = match error {
            GlobError::TooLong => Reason::TooLarge,
            GlobError::Invalid(_) => Reason::InvalidPattern,
        };
        Error::new(reason, format!("The glob {pattern:?} is not usable: {error}.")).field(field)
    })
}

fn too_large(field: &str, size: u64, limit: u64) -> Result<()> {
    if size <= limit {
        return Ok(());
    }
    Err(Error::new(Reason::TooLarge, format!("{field} is {size} bytes, over the limit of {limit} bytes."))
        .with("size", size)
        .with("limit", limit)
        .field(field))
}

/// The `Write` reply for an outcome (also what its receipt stores).
fn write_response(path: &SpacePath, outcome: &crate::store::WriteOutcome) -> pb::WriteResponse {
    pb::WriteResponse {
        node_id: outcome.node.to_string(),
        version: outcome.version,
        hash: outcome.hash.to_hex(),
        total_length: outcome.text.utf16_len,
        created: outcome.created,
        written: outcome.written,
        size: outcome.size,
        revision: outcome.revision,
        path: path.to_string(),
    }
}
