//! The `Admin` service: spaces and their settings, for the host application.

use agentvfs_proto::v1 as pb;
use agentvfs_proto::v1::admin_server::Admin;
use tonic::{Request, Response, Status};

use super::idempotency::{self, Claim};
use super::page_token::{PageToken, fingerprint};
use super::{Services, convert, handler, page_size};
use crate::auth::{Caller, Need};
use crate::error::{Error, Reason};
use crate::path::SpacePath;
use crate::reference::Reference;
use crate::store::Generated;
use crate::store::{NewFork, NewSpace, Quota, Role, SpaceRecord, Store};
use crate::system_files::{Function, valid_function_name};

/// Most functions in one registration.
const MAX_FUNCTIONS: usize = 500;

const DEFAULT_PAGE: usize = 100;
const MAX_PAGE: usize = 200;

#[tonic::async_trait]
impl Admin for Services {
    async fn create_space(&self, request: Request<pb::CreateSpaceRequest>) -> Result<Response<pb::Space>, Status> {
        let front = self.front.clone();
        let caller = front.caller(&request)?;
        may_create_spaces(&caller)?;
        let req = request.into_inner();
        let fingerprint = idempotency::fingerprint(&req.idempotency_key, &req);
        let quota = req.quota.unwrap_or_default();
        let new = NewSpace {
            name: req.name,
            owner: caller.principal.clone(),
            quota: Quota { max_bytes: quota.max_bytes, max_files: quota.max_files },
        };
        let key = req.idempotency_key;
        handler::run_durable(&front, move |front| {
            idempotency::run(front, &caller, "", "CreateSpace", &key, fingerprint, |claim| {
                let space = front.store.create_space(new, claim.map(|c| c.receipt(convert::space)))?;
                Ok(convert::space(&space))
            })
        })
        .await
    }

    async fn fork_space(&self, request: Request<pb::ForkSpaceRequest>) -> Result<Response<pb::Space>, Status> {
        let front = self.front.clone();
        let caller = front.caller(&request)?;
        may_create_spaces(&caller)?;
        let req = request.into_inner();
        if req.source.is_empty() {
            return Err(
                Error::invalid_argument("source", "The request must name the space to fork (ID or name).").into()
            );
        }
        let fingerprint = idempotency::fingerprint(&req.idempotency_key, &req);
        handler::run_durable(&front, move |front| {
            let source = front.space(&caller, &req.source, Need::Read)?;
            let new = NewFork {
                source: source.id,
                at_revision: req.at_revision,
                name: req.name.clone(),
                owner: caller.principal.clone(),
            };
            idempotency::run(front, &caller, "", "ForkSpace", &req.idempotency_key, fingerprint, |claim| {
                let space = front.store.fork_space(&new, claim.map(|c| c.receipt(convert::space)))?;
                Ok(convert::space(&space))
            })
        })
        .await
    }

    async fn get_space(&self, request: Request<pb::GetSpaceRequest>) -> Result<Response<pb::Space>, Status> {
        let front = self.front.clone();
        let caller = front.caller(&request)?;
        let req = request.into_inner();
        handler::run(&front, move |front| Ok(convert::space(&front.space(&caller, &req.space, Need::Read)?))).await
    }

    async fn list_spaces(
        &self,
        request: Request<pb::ListSpacesRequest>,
    ) -> Result<Response<pb::ListSpacesResponse>, Status> {
        let front = self.front.clone();
        let caller = front.caller(&request)?;
        let req = request.into_inner();
        handler::run(&front, move |front| {
            let store = &front.store;
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
        .await
    }

    async fn delete_space(
        &self,
        request: Request<pb::DeleteSpaceRequest>,
    ) -> Result<Response<pb::DeleteSpaceResponse>, Status> {
        self.owner_mutation(request, "DeleteSpace", |store, _, space, req, claim| {
            if req.confirm != space.name {
                return Err(Error::new(
                    Reason::InvalidArgument,
                    "Deleting a space needs `confirm` set to the space's exact name.",
                )
                .field("confirm"));
            }
            let deleted = |space: &SpaceRecord| pb::DeleteSpaceResponse { space_id: space.id.to_string() };
            Ok(deleted(&store.delete_space(space.id, claim.map(|c| c.receipt(deleted)))?))
        })
        .await
    }

    async fn register_functions(
        &self,
        request: Request<pb::RegisterFunctionsRequest>,
    ) -> Result<Response<pb::RegisterFunctionsResponse>, Status> {
        let functions = parse_functions(request.get_ref().functions.clone())?;
        self.owner_mutation(request, "RegisterFunctions", move |store, caller, space, _, claim| {
            let receipt = claim.map(|c| c.receipt(registered));
            Ok(registered(&store.register_functions(space.id, functions, &caller.principal, receipt)?))
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
        self.owner_mutation(request, "RestoreDefault", move |store, caller, space, _, claim| {
            let receipt = claim.map(|c| c.receipt(restored_default));
            Ok(restored_default(&store.restore_default(space.id, &path, &caller.principal, receipt)?))
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
        self.owner_mutation(request, "SetAccess", move |store, caller, space, req, claim| {
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
            update_space(store, caller, space, change, claim)
        })
        .await
    }

    async fn set_quota(&self, request: Request<pb::SetQuotaRequest>) -> Result<Response<pb::Space>, Status> {
        self.owner_mutation(request, "SetQuota", |store, caller, space, req, claim| {
            let requested = req.quota.unwrap_or_default();
            let quota = store.effective_quota(Quota { max_bytes: requested.max_bytes, max_files: requested.max_files });
            let change = |space: &mut SpaceRecord| {
                space.quota = quota;
                Ok(())
            };
            update_space(store, caller, space, change, claim)
        })
        .await
    }

    async fn remove(&self, request: Request<pb::RemoveRequest>) -> Result<Response<pb::RemoveResponse>, Status> {
        let path = &request.get_ref().path;
        let reference = Reference::parse(path).map_err(|e| super::reference_error(e, "path", path))?;
        self.owner_mutation(request, "Remove", move |store, caller, space, req, claim| {
            let receipt = claim.map(|c| c.receipt(pb::RemoveResponse::clone));
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
                commit.receipt = receipt.as_ref().map(|receipt| receipt.seal(&response));
                Ok(response)
            })?;
            Ok(response)
        })
        .await
    }

    async fn restore(&self, request: Request<pb::RestoreRequest>) -> Result<Response<pb::RestoreResponse>, Status> {
        let given = &request.get_ref().reference;
        let reference = Reference::parse(given).map_err(|e| super::reference_error(e, "reference", given))?;
        self.owner_mutation(request, "Restore", move |store, caller, space, _, claim| {
            let node = match reference {
                Reference::Item(node) => node,
                Reference::Absolute(path) | Reference::Relative(path) => store
                    .trashed_at(space.id, &path)?
                    .ok_or_else(|| Error::not_found(format!("{path} in the trash")))?,
                _ => {
                    return Err(Error::invalid_argument("reference", "Name a trashed item by ID or original path."));
                }
            };
            let receipt = claim.map(|c| c.receipt(pb::RestoreResponse::clone));
            let (response, _) = store.mutate(space.id, &caller.principal, true, |store, commit| {
                let (path, restored) = commit.restore(store, node)?;
                let response = pb::RestoreResponse {
                    path: path.to_string(),
                    restored: restored as u64,
                    revision: commit.revision(),
                };
                commit.receipt = receipt.as_ref().map(|receipt| receipt.seal(&response));
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
        handler::run_durable(&front, move |front| {
            let space = front.space(&caller, &req.space, Need::Admin)?;
            let compacted = front.store.compact(space.id, &caller.principal, req.revision)?;
            Ok(pb::CompactResponse {
                compacted_revision: compacted.revision,
                versions_dropped: compacted.versions_dropped,
                bytes_freed: compacted.bytes_freed,
            })
        })
        .await
    }

    async fn reindex(&self, request: Request<pb::ReindexRequest>) -> Result<Response<pb::ReindexResponse>, Status> {
        let front = self.front.clone();
        let caller = front.caller(&request)?;
        let req = request.into_inner();
        handler::run_durable(&front, move |front| {
            let space = front.space(&caller, &req.space, Need::Admin)?;
            let queued = front.store.enqueue_reindex(space.id)?;
            Ok(pb::ReindexResponse { queued: queued as u64, revision: space.revision })
        })
        .await
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
        op: impl FnOnce(&Store, &Caller, &SpaceRecord, &Req, Option<&Claim<'_>>) -> Result<Resp, Error> + Send + 'static,
    ) -> Result<Response<Resp>, Status>
    where
        Req: SpaceMutation,
        Resp: prost::Message + Default + Send + 'static,
    {
        let front = self.front.clone();
        let caller = front.caller(&request)?;
        let req = request.into_inner();
        let fingerprint = idempotency::fingerprint(req.key(), &req);
        handler::run_durable(&front, move |front| {
            let space = front.space(&caller, req.space(), Need::Admin)?;
            let scope = space.id.to_string();
            idempotency::run(front, &caller, &scope, method, req.key(), fingerprint, |claim| {
                caller.carrying(|| op(&front.store, &caller, &space, &req, claim))
            })
        })
        .await
    }
}

/// Refuses a caller that may not create spaces: only administrators may,
/// and not in read-only mode.
fn may_create_spaces(caller: &Caller) -> Result<(), Error> {
    if !caller.admin {
        return Err(Error::new(Reason::PermissionDenied, "Only administrators can create spaces."));
    }
    if caller.read_only {
        return Err(Error::new(Reason::PermissionDenied, "The request is in read-only mode (x-agentvfs-mode)."));
    }
    Ok(())
}

/// Changes a space's settings, leaving the receipt of the reply with them.
fn update_space(
    store: &Store,
    caller: &Caller,
    space: &SpaceRecord,
    change: impl Fn(&mut SpaceRecord) -> Result<(), Error>,
    claim: Option<&Claim<'_>>,
) -> Result<pb::Space, Error> {
    let receipt = claim.map(|c| c.receipt(convert::space));
    Ok(convert::space(&store.update_space(space.id, &caller.principal, change, receipt)?))
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
