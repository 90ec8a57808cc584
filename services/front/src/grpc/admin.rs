//! The `Admin` service: spaces and their settings, for the host application.

use agentvfs_proto::v1 as pb;
use agentvfs_proto::v1::admin_server::Admin;
use tonic::{Request, Response, Status};

use super::page_token::{PageToken, fingerprint};
use super::{Services, convert, page_size};
use crate::auth::Need;
use crate::error::{Error, Reason};
use crate::path::SpacePath;
use crate::store::{NewSpace, Quota};
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
        if !caller.admin {
            return Err(Error::new(Reason::PermissionDenied, "Only administrators can create spaces.").into());
        }
        if caller.read_only {
            return Err(
                Error::new(Reason::PermissionDenied, "The request is in read-only mode (x-agentvfs-mode).").into()
            );
        }
        let req = request.into_inner();
        let quota = req.quota.unwrap_or_default();
        let new = NewSpace {
            name: req.name,
            owner: caller.principal.clone(),
            quota: Quota { max_bytes: quota.max_bytes, max_files: quota.max_files },
        };
        let space = front.store.blocking(move |store| store.create_space(new)).await?;
        front.store.durable().await?;
        Ok(Response::new(convert::space(&space)))
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
        let front = self.front.clone();
        let caller = front.caller(&request)?;
        let req = request.into_inner();
        let deleted = front
            .store
            .clone()
            .blocking(move |store| {
                let space = front.space(&caller, &req.space, Need::Admin)?;
                if req.confirm != space.name {
                    return Err(Error::new(
                        Reason::InvalidArgument,
                        "Deleting a space needs `confirm` set to the space's exact name.",
                    )
                    .field("confirm"));
                }
                store.delete_space(space.id)
            })
            .await?;
        self.front.store.durable().await?;
        Ok(Response::new(pb::DeleteSpaceResponse { space_id: deleted.id.to_string() }))
    }

    async fn register_functions(
        &self,
        request: Request<pb::RegisterFunctionsRequest>,
    ) -> Result<Response<pb::RegisterFunctionsResponse>, Status> {
        let front = self.front.clone();
        let caller = front.caller(&request)?;
        let req = request.into_inner();
        let functions = parse_functions(req.functions)?;
        let generated = front
            .store
            .clone()
            .blocking(move |store| {
                let space = front.space(&caller, &req.space, Need::Admin)?;
                store.register_functions(space.id, functions, &caller.principal)
            })
            .await?;
        self.front.store.durable().await?;
        Ok(Response::new(pb::RegisterFunctionsResponse {
            written: generated.written,
            skipped_user_modified: generated.skipped_user_modified,
            revision: generated.revision,
        }))
    }

    async fn restore_default(
        &self,
        request: Request<pb::RestoreDefaultRequest>,
    ) -> Result<Response<pb::RestoreDefaultResponse>, Status> {
        let front = self.front.clone();
        let caller = front.caller(&request)?;
        let req = request.into_inner();
        let generated = front
            .store
            .clone()
            .blocking(move |store| {
                let space = front.space(&caller, &req.space, Need::Admin)?;
                let path = SpacePath::parse(&req.path).map_err(|e| {
                    super::reference_error(crate::reference::ReferenceError::Path(e), "path", &req.path)
                })?;
                store.restore_default(space.id, &path, &caller.principal)
            })
            .await?;
        self.front.store.durable().await?;
        Ok(Response::new(pb::RestoreDefaultResponse {
            version: generated.version,
            changed: !generated.written.is_empty(),
            revision: generated.revision,
        }))
    }
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
