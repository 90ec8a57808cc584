//! The `Admin` service: spaces and their settings, for the host application.

use agentvfs_proto::v1 as pb;
use agentvfs_proto::v1::admin_server::Admin;
use tonic::{Request, Response, Status};

use super::page_token::{PageToken, fingerprint};
use super::{Services, convert, idempotency, page_size};
use crate::auth::{Caller, Need};
use crate::error::{Error, Reason};
use crate::path::SpacePath;
use crate::reference::Reference;
use crate::store::Generated;
use crate::store::{NewSpace, Quota, Role, SpaceRecord, Store, Ticket};
use crate::system_files::{Function, valid_function_name};
use prost::Message as _;

/// Most functions in one registration.
const MAX_FUNCTIONS: usize = 500;

const DEFAULT_PAGE: usize = 100;
const MAX_PAGE: usize = 200;

#[tonic::async_trait]
impl Admin for Services {
    async fn create_space(&self, request: Request<pb::CreateSpaceRequest>) -> Result<Response<pb::Space>, Status> {
        let front = self.front.clone();
        let caller = front.caller(&request)?;
        if !caller.admin {
            return Err(Error::new(Reason::PermissionDenied, "Only administrators can create spaces.").into());
        }
        if caller.read_only {
            return Err(
                Error::new(Reason::PermissionDenied, "The request is in read-only mode (x-agentvfs-mode).").into()
            );
        }
        let req = request.into_inner();
        let fingerprint = idempotency::fingerprint(&req.idempotency_key, &req);
        let quota = req.quota.unwrap_or_default();
        let new = NewSpace {
            name: req.name,
            owner: caller.principal.clone(),
            quota: Quota { max_bytes: quota.max_bytes, max_files: quota.max_files },
        };
        let key = req.idempotency_key;
        let response = front
            .store
            .clone()
            .blocking(move |store| {
                idempotency::run(&front, &caller, "", "CreateSpace", &key, fingerprint, |ticket| {
                    let render = |space: &crate::store::SpaceRecord| convert::space(space).encode_to_vec();
                    let space = store.create_space(new, ticket.map(|t| (t, &render as &dyn Fn(&_) -> Vec<u8>)))?;
                    Ok(convert::space(&space))
                })
            })
            .await?;
        self.front.store.durable().await?;
        Ok(Response::new(response))
    }

    async fn get_space(&self, request: Request<pb::GetSpaceRequest>) -> Result<Response<pb::Space>, Status> {
        let front = self.front.clone();
        let caller = front.caller(&request)?;
        let req = request.into_inner();
        let space = front.store.clone().blocking(move |_| front.space(&caller, &req.space, Need::Read)).await?;
        Ok(Response::new(convert::space(&space)))
    }

    async fn list_spaces(
        &self,
        request: Request<pb::ListSpacesRequest>,
    ) -> Result<Response<pb::ListSpacesResponse>, Status> {
        let front = self.front.clone();
        let caller = front.caller(&request)?;
        let req = request.into_inner();
        let response = front
            .store
            .clone()
            .blocking(move |store| {
                let limit = page_size(req.page_size, DEFAULT_PAGE, MAX_PAGE, "page_size")?;
                let bound = fingerprint(&["spaces", &caller.principal]);
                let after = match req.page_token.as_str() {
                    "" => None,
                    token => Some(PageToken::decode(token, bound)?.after),
                };
                let mut spaces = Vec::with_capacity(limit);
                let mut more = false;
                for space in store.spaces_by_name(after.as_deref()) {
                    let space = space?;
                    if caller.role(&space).is_none() {
                        continue;
                    }
                    if spaces.len() == limit {
                        more = true;
                        break;
                    }
                    spaces.push(space);
                }
                let next_page_token = match spaces.last() {
                    Some(last) if more => {
                        PageToken { fingerprint: bound, revision: 0, after: last.name.clone(), position: 0, line: 0 }
                            .encode()
                    }
                    _ => String::new(),
                };
                Ok(pb::ListSpacesResponse { spaces: spaces.iter().map(convert::space).collect(), next_page_token })
            })
            .await?;
        Ok(Response::new(response))
    }

    async fn delete_space(
        &self,
        request: Request<pb::DeleteSpaceRequest>,
    ) -> Result<Response<pb::DeleteSpaceResponse>, Status> {
        self.owner_mutation(request, "DeleteSpace", |store, _, space, req, ticket| {
            if req.confirm != space.name {
                return Err(Error::new(
                    Reason::InvalidArgument,
                    "Deleting a space needs `confirm` set to the space's exact name.",
                )
                .field("confirm"));
            }
            let response = pb::DeleteSpaceResponse { space_id: space.id.to_string() };
            store.delete_space(space.id, ticket.map(|t| (t, response.encode_to_vec())))?;
            Ok(response)
        })
        .await
    }

    async fn register_functions(
        &self,
        request: Request<pb::RegisterFunctionsRequest>,
    ) -> Result<Response<pb::RegisterFunctionsResponse>, Status> {
        let functions = parse_functions(request.get_ref().functions.clone())?;
        self.owner_mutation(request, "RegisterFunctions", move |store, caller, space, _, ticket| {
            let render = |g: &Generated| registered(g).encode_to_vec();
            let ticket = ticket.map(|t| (t, &render as &dyn Fn(&Generated) -> Vec<u8>));
            Ok(registered(&store.register_functions(space.id, functions, &caller.principal, ticket)?))
        })
        .await
    }

    async fn restore_default(
        &self,
        request: Request<pb::RestoreDefaultRequest>,
    ) -> Result<Response<pb::RestoreDefaultResponse>, Status> {
        let path = SpacePath::parse(&request.get_ref().path).map_err(|e| {
            super::reference_error(crate::reference::ReferenceError::Path(e), "path", &request.get_ref().path)
        })?;
        self.owner_mutation(request, "RestoreDefault", move |store, caller, space, _, ticket| {
            let render = |g: &Generated| restored_default(g).encode_to_vec();
            let ticket = ticket.map(|t| (t, &render as &dyn Fn(&Generated) -> Vec<u8>));
            Ok(restored_default(&store.restore_default(space.id, &path, &caller.principal, ticket)?))
        })
        .await
    }

    async fn set_access(&self, request: Request<pb::SetAccessRequest>) -> Result<Response<pb::Space>, Status> {
        let req = request.get_ref();
        let role = match pb::Role::try_from(req.role) {
            Ok(pb::Role::Unspecified) => None,
            Ok(pb::Role::Viewer) => Some(Role::Viewer),
            Ok(pb::Role::Editor) => Some(Role::Editor),
            Ok(pb::Role::Owner) => Some(Role::Owner),
            Err(_) => return Err(Error::invalid_argument("role", format!("Unknown role {}.", req.role)).into()),
        };
        if req.principal.is_empty() || req.principal.len() > 256 || req.principal.chars().any(char::is_control) {
            return Err(Error::invalid_argument("principal", "principal must be 1-256 printable characters.").into());
        }
        self.owner_mutation(request, "SetAccess", move |store, caller, space, req, ticket| {
            let change = |space: &mut SpaceRecord| {
                space.access.retain(|(p, _)| p != &req.principal);
                if let Some(role) = role {
                    space.access.push((req.principal.clone(), role));
                    space.access.sort();
                }
                if !space.access.iter().any(|(_, r)| *r == Role::Owner) {
                    return Err(Error::new(Reason::InvalidArgument, "A space keeps at least one owner.").field("role"));
                }
                Ok(())
            };
            update_space(store, caller, space, change, ticket)
        })
        .await
    }

    async fn set_quota(&self, request: Request<pb::SetQuotaRequest>) -> Result<Response<pb::Space>, Status> {
        self.owner_mutation(request, "SetQuota", |store, caller, space, req, ticket| {
            let requested = req.quota.unwrap_or_default();
            let quota = store.effective_quota(Quota { max_bytes: requested.max_bytes, max_files: requested.max_files });
            let change = |space: &mut SpaceRecord| {
                space.quota = quota;
                Ok(())
            };
            update_space(store, caller, space, change, ticket)
        })
        .await
    }

    async fn remove(&self, request: Request<pb::RemoveRequest>) -> Result<Response<pb::RemoveResponse>, Status> {
        let path = &request.get_ref().path;
        let reference = Reference::parse(path).map_err(|e| super::reference_error(e, "path", path))?;
        self.owner_mutation(request, "Remove", move |store, caller, space, req, ticket| {
            let (response, _) = store.mutate(space.id, &caller.principal, true, |store, commit| {
                let removed = match &reference {
                    Reference::Item(node) if store.trashed(space.id, *node)?.is_some() => {
                        commit.remove_trashed(store, *node)?
                    }
                    Reference::Item(node) => {
                        let record = store.node(*node)?.filter(|r| r.space == space.id);
                        let record = record.ok_or_else(|| Error::not_found(&req.path))?;
                        remove_live(store, commit, &SpacePath::from_stored(record.path), req.recursive)?
                    }
                    Reference::Absolute(path) | Reference::Relative(path) => {
                        remove_live(store, commit, path, req.recursive)?
                    }
                    _ => {
                        return Err(Error::invalid_argument(
                            "path",
                            "Name a path or an agentvfs:item: reference in this space.",
                        ));
                    }
                };
                let response = pb::RemoveResponse { removed: removed as u64, revision: commit.revision() };
                commit.receipt = ticket.map(|t| (t.key, t.receipt(response.encode_to_vec())));
                Ok(response)
            })?;
            Ok(response)
        })
        .await
    }

    async fn restore(&self, request: Request<pb::RestoreRequest>) -> Result<Response<pb::RestoreResponse>, Status> {
        let given = &request.get_ref().reference;
        let reference = Reference::parse(given).map_err(|e| super::reference_error(e, "reference", given))?;
        self.owner_mutation(request, "Restore", move |store, caller, space, _, ticket| {
            let node = match reference {
                Reference::Item(node) => node,
                Reference::Absolute(path) | Reference::Relative(path) => store
                    .trashed_at(space.id, &path)?
                    .ok_or_else(|| Error::not_found(format!("{path} in the trash")))?,
                _ => {
                    return Err(Error::invalid_argument("reference", "Name a trashed item by ID or original path."));
                }
            };
            let (response, _) = store.mutate(space.id, &caller.principal, true, |store, commit| {
                let (path, restored) = commit.restore(store, node)?;
                let response = pb::RestoreResponse {
                    path: path.to_string(),
                    restored: restored as u64,
                    revision: commit.revision(),
                };
                commit.receipt = ticket.map(|t| (t.key, t.receipt(response.encode_to_vec())));
                Ok(response)
            })?;
            Ok(response)
        })
        .await
    }

    async fn compact(&self, request: Request<pb::CompactRequest>) -> Result<Response<pb::CompactResponse>, Status> {
        let front = self.front.clone();
        let caller = front.caller(&request)?;
        let req = request.into_inner();
        let compacted = front
            .store
            .clone()
            .blocking(move |store| {
                let space = front.space(&caller, &req.space, Need::Admin)?;
                store.compact(space.id, &caller.principal, req.revision)
            })
            .await?;
        self.front.store.durable().await?;
        Ok(Response::new(pb::CompactResponse {
            compacted_revision: compacted.revision,
            versions_dropped: compacted.versions_dropped,
            bytes_freed: compacted.bytes_freed,
        }))
    }

    async fn reindex(&self, request: Request<pb::ReindexRequest>) -> Result<Response<pb::ReindexResponse>, Status> {
        let front = self.front.clone();
        let caller = front.caller(&request)?;
        let req = request.into_inner();
        let response = front
            .store
            .clone()
            .blocking(move |store| {
                let space = front.space(&caller, &req.space, Need::Admin)?;
                let queued = store.enqueue_reindex(space.id)?;
                Ok(pb::ReindexResponse { queued: queued as u64, revision: space.revision })
            })
            .await?;
        self.front.store.durable().await?;
        Ok(Response::new(response))
    }
}

/// Admin requests that change one space, named by `space`, under `idempotency_key`.
trait SpaceMutation: prost::Message + Send + 'static {
    fn space(&self) -> &str;
    fn key(&self) -> &str;
}

macro_rules! space_mutation {
    ($($request:ty),* $(,)?) => {$(
        impl SpaceMutation for $request {
            fn space(&self) -> &str {
                &self.space
            }
            fn key(&self) -> &str {
                &self.idempotency_key
            }
        }
    )*};
}

space_mutation!(
    pb::DeleteSpaceRequest,
    pb::SetAccessRequest,
    pb::SetQuotaRequest,
    pb::RemoveRequest,
    pb::RestoreRequest,
    pb::RegisterFunctionsRequest,
    pb::RestoreDefaultRequest,
);

impl Services {
    /// Runs a change of one space for its owner, on the blocking pool:
    /// idempotent under the request's key (scoped to the space and
    /// `method`), and on disk before the reply.
    async fn owner_mutation<Req, Resp>(
        &self,
        request: Request<Req>,
        method: &'static str,
        op: impl FnOnce(&Store, &Caller, &SpaceRecord, &Req, Option<Ticket>) -> Result<Resp, Error> + Send + 'static,
    ) -> Result<Response<Resp>, Status>
    where
        Req: SpaceMutation,
        Resp: prost::Message + Default + Send + 'static,
    {
        let front = self.front.clone();
        let caller = front.caller(&request)?;
        let req = request.into_inner();
        let fingerprint = idempotency::fingerprint(req.key(), &req);
        let response = front
            .store
            .clone()
            .blocking(move |store| {
                let space = front.space(&caller, req.space(), Need::Admin)?;
                let scope = space.id.to_string();
                idempotency::run(&front, &caller, &scope, method, req.key(), fingerprint, |ticket| {
                    op(store, &caller, &space, &req, ticket)
                })
            })
            .await?;
        self.front.store.durable().await?;
        Ok(Response::new(response))
    }
}

/// Changes a space's settings, leaving the receipt of the reply with them.
fn update_space(
    store: &Store,
    caller: &Caller,
    space: &SpaceRecord,
    change: impl FnOnce(&mut SpaceRecord) -> Result<(), Error>,
    ticket: Option<Ticket>,
) -> Result<pb::Space, Error> {
    let render = |space: &SpaceRecord| convert::space(space).encode_to_vec();
    let ticket = ticket.map(|t| (t, &render as &dyn Fn(&SpaceRecord) -> Vec<u8>));
    Ok(convert::space(&store.update_space(space.id, &caller.principal, change, ticket)?))
}

fn parse_functions(functions: Vec<pb::FunctionSpec>) -> Result<Vec<Function>, Error> {
    if functions.len() > MAX_FUNCTIONS {
        return Err(Error::new(Reason::InvalidArgument, format!("At most {MAX_FUNCTIONS} functions per call."))
            .with("limit", MAX_FUNCTIONS)
            .field("functions"));
    }
    functions
        .into_iter()
        .enumerate()
        .map(|(i, f)| {
            if !valid_function_name(&f.name) {
                return Err(Error::invalid_argument(
                    &format!("functions[{i}].name"),
                    "Function names are 1-64 characters of letters, digits, `_`, `.` and `-`.",
                ));
            }
            let schema = if f.parameters_json_schema.trim().is_empty() { "{}" } else { &f.parameters_json_schema };
            if !serde_json::from_str::<serde_json::Value>(schema).is_ok_and(|v| v.is_object()) {
                return Err(Error::invalid_argument(
                    &format!("functions[{i}].parameters_json_schema"),
                    "parameters_json_schema must be a JSON object.",
                ));
            }
            Ok(Function {
                name: f.name,
                description: f.description,
                parameters_json_schema: schema.to_owned(),
                returns: f.returns,
                examples: f.examples.into_iter().map(|e| (e.title, e.arguments, e.result)).collect(),
            })
        })
        .collect()
}

/// Removes a live path; a folder with contents needs `recursive`.
fn remove_live(
    store: &crate::store::Store,
    commit: &mut crate::store::Commit,
    path: &SpacePath,
    recursive: bool,
) -> Result<usize, Error> {
    let subtree = commit.subtree(store, path)?;
    if subtree.len() > 1 && !recursive {
        return Err(Error::new(
            Reason::InvalidArgument,
            format!("{path} is a folder with {} entries; set recursive to remove it all.", subtree.len() - 1),
        )
        .field("recursive"));
    }
    commit.remove(store, path)
}

fn registered(generated: &Generated) -> pb::RegisterFunctionsResponse {
    pb::RegisterFunctionsResponse {
        written: generated.written.clone(),
        skipped_user_modified: generated.skipped_user_modified.clone(),
        revision: generated.revision,
    }
}

fn restored_default(generated: &Generated) -> pb::RestoreDefaultResponse {
    pb::RestoreDefaultResponse {
        version: generated.version,
        changed: !generated.written.is_empty(),
        revision: generated.revision,
    }
}
