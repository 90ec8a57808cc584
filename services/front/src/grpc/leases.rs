//! Path leases (SPEC §12): `AcquireLease`, `RenewLease`, `ReleaseLease` and
//! `ListLeases`, over [`crate::store::leases`].

use agentvfs_proto::v1 as pb;

use super::{Front, convert};
use crate::auth::{Caller, Need};
use crate::error::{Error, Result};
use crate::ids::LeaseId;
use crate::path::SpacePath;
use crate::store::leases::{lease_ttl, live_leases};

pub(super) fn acquire(front: &Front, caller: &Caller, req: &pb::AcquireLeaseRequest) -> Result<pb::Lease> {
    let ttl = lease_ttl(req.ttl_seconds)?;
    let target = front.target(caller, &req.space, &req.path, &req.base, "path", Need::Write)?;
    let (lease, revision) = front.store.acquire_path_lease(target.space.id, &target.path, &caller.principal, ttl)?;
    Ok(convert::lease(&lease, revision))
}

pub(super) fn renew(front: &Front, caller: &Caller, req: &pb::RenewLeaseRequest) -> Result<pb::Lease> {
    let ttl = lease_ttl(req.ttl_seconds)?;
    let id = lease_id(&req.lease_id)?;
    let space = front.space(caller, &req.space, Need::Write)?;
    let (lease, revision) = front.store.renew_path_lease(space.id, id, &caller.principal, ttl)?;
    Ok(convert::lease(&lease, revision))
}

pub(super) fn release(front: &Front, caller: &Caller, req: &pb::ReleaseLeaseRequest) -> Result<pb::Lease> {
    let id = lease_id(&req.lease_id)?;
    let space = front.space(caller, &req.space, Need::Write)?;
    let owner = caller.role(&space) == Some(crate::store::Role::Owner);
    let (lease, revision) = front.store.release_path_lease(space.id, id, &caller.principal, owner)?;
    Ok(convert::lease(&lease, revision))
}

pub(super) fn list(front: &Front, caller: &Caller, req: &pb::ListLeasesRequest) -> Result<pb::ListLeasesResponse> {
    let space = front.space(caller, &req.space, Need::Read)?;
    let path = match req.path.as_str() {
        "" => SpacePath::root(),
        path => front.target(caller, &req.space, path, "", "path", Need::Read)?.path,
    };
    let leases = live_leases(&space, &path).map(|lease| convert::lease(lease, space.revision)).collect();
    Ok(pb::ListLeasesResponse { leases, revision: space.revision })
}

fn lease_id(id: &str) -> Result<LeaseId> {
    id.parse().map_err(|()| {
        Error::invalid_argument("lease_id", format!("{id:?} is not a lease ID (`ls_` and 26 characters)."))
    })
}
