//! Path leases: a holder's claim on a subtree. While a lease has not
//! expired, a commit that changes its subtree is refused with LEASE_HELD
//! unless the call carries the lease.
//!
//! Leases live in their space's record, which every commit reads: checking
//! them costs no read, and taking, renewing or releasing one is a commit of
//! the space, so a change planned before a lease was taken is planned again
//! (its space moved on) and sees it. Expiry needs no commit: a lease past
//! its time is ignored, and pruned by the next lease change.
//!
//! Which leases a call carries (`x-agentvfs-lease`) reaches the commits it
//! plans through [`carrying`], which the call's blocking task runs it in.

use std::cell::RefCell;
use std::time::Duration;

use super::Store;
use super::commit::Commit;
use super::records::{LeaseChange, LeaseEvent, LeaseRecord, SpaceRecord, now_ms};
use crate::error::{Error, Reason, Result};
use crate::ids::{LeaseId, SpaceId};
use crate::path::SpacePath;

/// The longest lease, and the one given when a call asks for none.
pub const MAX_LEASE_SECONDS: u64 = 3600;
pub const DEFAULT_LEASE_SECONDS: u64 = 60;

thread_local! {
    static CARRIED: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
}

/// Runs `work` as a call that carries `leases`: the commits it plans may
/// change what those leases cover.
///
/// The thread's leases are put back even when `work` panics: the thread
/// runs other calls next.
pub fn carrying<T>(leases: &[String], work: impl FnOnce() -> T) -> T {
    /// Puts the leases carried before back when it drops.
    struct Restore(Vec<String>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let before = std::mem::take(&mut self.0);
            CARRIED.with(|carried| *carried.borrow_mut() = before);
        }
    }
    let _restore = Restore(CARRIED.with(|carried| std::mem::replace(&mut *carried.borrow_mut(), leases.to_vec())));
    work()
}

/// The leases the running call carries.
pub(super) fn carried() -> Vec<String> {
    CARRIED.with(|carried| carried.borrow().clone())
}

impl Commit {
    /// Refuses the commit when it changes a path under a lease that has not
    /// expired and that the call does not carry.
    pub fn check_leases(&self) -> Result<()> {
        if self.space.leases.is_empty() {
            return Ok(());
        }
        let now = now_ms();
        for lease in &self.space.leases {
            if lease.expires_ms <= now || self.carried.iter().any(|id| *id == lease.id.to_string()) {
                continue;
            }
            let root = SpacePath::from_stored(lease.path.clone());
            let covered = |path: &str| SpacePath::from_stored(path.to_owned()).starts_with(&root);
            let touched = self.changes.iter().find(|change| {
                // A move into another space leaves the source an empty path.
                (change.path != "/" || change.old_path.is_none()) && covered(&change.path)
                    || change.old_path.as_deref().is_some_and(covered)
            });
            if let Some(change) = touched {
                let path = if covered(&change.path) { &change.path } else { change.old_path.as_deref().unwrap_or("") };
                return Err(held(lease, &format!("{path} is under a lease")));
            }
        }
        Ok(())
    }
}

/// LEASE_HELD for `lease`, the message starting with `what`.
fn held(lease: &LeaseRecord, what: &str) -> Error {
    let left = Duration::from_millis(u64::try_from(lease.expires_ms - now_ms()).unwrap_or(0));
    Error::new(
        Reason::LeaseHeld,
        format!("{what} that {} holds on {} for {} more seconds.", lease.holder, lease.path, left.as_secs().max(1)),
    )
    .with("holder", &lease.holder)
    .with("path", &lease.path)
    .with("leaseId", lease.id)
    .with("expiresAt", lease.expires_ms)
    .retry_after(left)
}

/// The TTL a call asks for, checked; 0 takes the default.
pub fn lease_ttl(ttl_seconds: u64) -> Result<Duration> {
    match ttl_seconds {
        0 => Ok(Duration::from_secs(DEFAULT_LEASE_SECONDS)),
        1..=MAX_LEASE_SECONDS => Ok(Duration::from_secs(ttl_seconds)),
        _ => Err(Error::new(
            Reason::InvalidArgument,
            format!("ttl_seconds is at most {MAX_LEASE_SECONDS} (one hour); renew a lease to keep it longer."),
        )
        .with("limit", MAX_LEASE_SECONDS)
        .field("ttl_seconds")),
    }
}

impl Store {
    /// Leases `path` in `space` to `holder` for `ttl`; LEASE_HELD when a
    /// lease that has not expired covers it, or lies below it.
    pub fn acquire_path_lease(
        &self,
        space: SpaceId,
        path: &SpacePath,
        holder: &str,
        ttl: Duration,
    ) -> Result<(LeaseRecord, u64)> {
        self.change_leases(space, holder, |leases, now| {
            if let Some(lease) = leases.iter().find(|lease| {
                let leased = SpacePath::from_stored(lease.path.clone());
                path.starts_with(&leased) || leased.starts_with(path)
            }) {
                return Err(held(lease, &format!("{path} overlaps a lease")));
            }
            let lease = LeaseRecord {
                id: LeaseId::generate(),
                path: path.to_string(),
                holder: holder.to_owned(),
                acquired_ms: now,
                expires_ms: expiry(now, ttl),
            };
            leases.push(lease.clone());
            Ok((lease, LeaseChange::Acquired))
        })
    }

    /// Extends `holder`'s lease to `ttl` from now; NOT_FOUND when it expired
    /// or was released.
    pub fn renew_path_lease(
        &self,
        space: SpaceId,
        id: LeaseId,
        holder: &str,
        ttl: Duration,
    ) -> Result<(LeaseRecord, u64)> {
        self.change_leases(space, holder, |leases, now| {
            let lease =
                leases.iter_mut().find(|lease| lease.id == id && lease.holder == holder).ok_or_else(|| gone(id))?;
            lease.expires_ms = expiry(now, ttl);
            Ok((lease.clone(), LeaseChange::Renewed))
        })
    }

    /// Ends a lease. Its holder may release it; so may `breaker`, an
    /// owner of the space breaking someone else's.
    pub fn release_path_lease(
        &self,
        space: SpaceId,
        id: LeaseId,
        principal: &str,
        breaker: bool,
    ) -> Result<(LeaseRecord, u64)> {
        self.change_leases(space, principal, |leases, _| {
            let at = leases.iter().position(|lease| lease.id == id).ok_or_else(|| gone(id))?;
            if leases[at].holder != principal && !breaker {
                return Err(Error::new(
                    Reason::PermissionDenied,
                    format!(
                        "The lease {id} is {}'s; only its holder or an owner of the space may release it.",
                        leases[at].holder
                    ),
                ));
            }
            Ok((leases.remove(at), LeaseChange::Released))
        })
    }

    /// Changes the leases of `space` as one commit, with those that
    /// expired pruned first; returns the lease `change` returns and the
    /// space's new revision.
    fn change_leases(
        &self,
        space: SpaceId,
        principal: &str,
        mut change: impl FnMut(&mut Vec<LeaseRecord>, i64) -> Result<(LeaseRecord, LeaseChange)>,
    ) -> Result<(LeaseRecord, u64)> {
        self.mutate(space, principal, true, |_, commit| {
            let now = now_ms();
            commit.space.leases.retain(|lease| lease.expires_ms > now);
            let (lease, change) = change(&mut commit.space.leases, now)?;
            commit.lease_events.push(LeaseEvent { change, lease: lease.clone() });
            Ok(lease)
        })
    }
}

/// `ttl` after `now`, in ms.
fn expiry(now: i64, ttl: Duration) -> i64 {
    now.saturating_add(i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX))
}

/// The leases of `space` that have not expired, at or below `path`, or above it.
pub fn live_leases<'a>(space: &'a SpaceRecord, path: &'a SpacePath) -> impl Iterator<Item = &'a LeaseRecord> {
    let now = now_ms();
    space.leases.iter().filter(move |lease| {
        let leased = SpacePath::from_stored(lease.path.clone());
        lease.expires_ms > now && (leased.starts_with(path) || path.starts_with(&leased))
    })
}

fn gone(id: LeaseId) -> Error {
    Error::new(Reason::NotFound, format!("The lease {id} has expired or was released."))
        .with("leaseId", id)
        .next_action("Acquire the path again with AcquireLease.")
}
