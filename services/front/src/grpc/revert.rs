//! `Revert` (SPEC §12): a file or folder made what it was at an earlier
//! revision, as one commit planned by [`crate::store::Commit::revert`].

use agentvfs_proto::v1 as pb;

use super::{Front, convert, idempotency, watch};
use crate::auth::{Caller, Need};
use crate::error::{Error, Result};
use crate::store::{Actor, ChangeKind, Reverted};

/// Previews or applies `req`'s revert.
pub(super) fn revert(front: &Front, caller: &Caller, req: &pb::RevertRequest) -> Result<pb::RevertResponse> {
    if !req.dry_run && req.idempotency_key.is_empty() {
        return Err(Error::invalid_argument(
            "idempotency_key",
            "Applying a revert needs an idempotency_key, so a retry can never apply it twice.",
        ));
    }
    let need = if req.dry_run { Need::Read } else { Need::Write };
    let target = front.target(caller, &req.space, &req.path, &req.base, "path", need)?;
    // Dry runs never consume a key.
    let key = if req.dry_run { "" } else { req.idempotency_key.as_str() };
    let fingerprint = idempotency::fingerprint(key, req);
    let scope = target.space.id.to_string();
    let store = &front.store;
    idempotency::run(front, caller, &scope, "Revert", key, fingerprint, |claim| {
        let receipt = claim.map(|c| c.receipt(pb::RevertResponse::clone));
        let (response, _) = store.mutate(target.space.id, &caller.principal, !req.dry_run, |store, commit| {
            commit.operation = "revert";
            let actor = Actor {
                principal: caller.principal.clone(),
                tool_call: caller.tool_call.clone(),
                idempotency_key: (!key.is_empty()).then(|| key.to_owned()),
            };
            let changes = commit.revert(store, &target.path, req.to_revision, &actor)?;
            let saved = !req.dry_run && !changes.is_empty();
            let response = pb::RevertResponse {
                changes: changes.iter().map(|change| reverted(change, req.dry_run)).collect(),
                revision: if saved { commit.revision() } else { commit.revision() - 1 },
                dry_run: req.dry_run,
            };
            commit.receipt = receipt.as_ref().map(|receipt| receipt.seal(&response));
            Ok(response)
        })?;
        // A revert that changed nothing still answers its retries the same way.
        if response.changes.is_empty() {
            store.keep_receipt(receipt.as_ref(), &response)?;
        }
        Ok(response)
    })
}

fn reverted(change: &Reverted, dry_run: bool) -> pb::RevertedChange {
    let created = matches!(change.kind, ChangeKind::Created | ChangeKind::Mkdir);
    pb::RevertedChange {
        path: change.path.to_string(),
        old_path: change.old_path.as_ref().map(ToString::to_string).unwrap_or_default(),
        kind: watch::kind(change.kind) as i32,
        node_kind: convert::kind(change.node_kind),
        node_id: if dry_run && created { String::new() } else { change.node.to_string() },
        from_version: change.from_version,
        to_version: change.to_version,
    }
}
