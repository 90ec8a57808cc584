//! Rights re-checked by calls that outlive their first check.
//!
//! A `Watch` or a `Download` stream can stay open long after the call was
//! authorized, and the space's access list can change (`Admin.SetAccess`) or
//! the space go away (`Admin.DeleteSpace`) meanwhile. Such a call checks the
//! caller's rights again against the space's current record each time it
//! hands out more data, and ends with exactly the error a fresh call would
//! get: NOT_FOUND for a space the caller can no longer see, PERMISSION_DENIED
//! when it sees the space but its role does not allow the call.

use super::{Target, echo};
use crate::auth::{Caller, Need};
use crate::error::{Error, Result};
use crate::ids::SpaceId;
use crate::reference::Reference;
use crate::store::{SpaceRecord, Store};

/// What a long call needs in its space, and how the request named the space.
#[derive(Debug, Clone)]
pub(super) struct Access {
    caller: Caller,
    need: Need,
    space: SpaceId,
    /// The space as the caller named it, echoed in NOT_FOUND.
    shown: String,
    /// The space was named by the reference (an item, a space root or a
    /// URI), not by the request's `space` field: a fresh call then answers
    /// NOT_FOUND for the reference.
    by_reference: bool,
}

impl Access {
    /// The rights `need` of `caller` on `target`, which the request named
    /// with `space` and `reference`. The call's admission is not kept: a
    /// stream that stays open does not hold a call slot.
    pub(super) fn new(caller: &Caller, need: Need, target: &Target, space: &str, reference: &str) -> Self {
        let by_reference = matches!(
            Reference::parse(reference),
            Ok(Reference::Item(_) | Reference::SpaceRoot(_) | Reference::Uri(..))
        );
        let caller = Caller { admission: None, ..caller.clone() };
        let shown = echo(if by_reference { reference } else { space });
        Self { caller, need, space: target.space.id, shown, by_reference }
    }

    /// Checks the rights against the space's current record; returns it.
    pub(super) fn recheck(&self, store: &Store) -> Result<SpaceRecord> {
        let record = store.space(self.space)?;
        self.check(record.as_ref())?;
        record.ok_or_else(|| self.not_found())
    }

    /// Checks the rights against `record` (`None`: the space is gone).
    pub(super) fn check(&self, record: Option<&SpaceRecord>) -> Result<()> {
        match record {
            Some(record) if self.caller.role(record).is_some() => {
                self.caller.authorize(record, self.need, &self.shown).map(drop)
            }
            _ => Err(self.not_found()),
        }
    }

    fn not_found(&self) -> Error {
        if self.by_reference { Error::not_found(&self.shown) } else { Error::space_not_found(&self.shown) }
    }
}
