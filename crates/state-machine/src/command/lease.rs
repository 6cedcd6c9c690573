//! Lease commands: grant, revoke, expire (frees everything owned in one revision) and the
//! leader's checkpoint of remaining TTLs.

use crate::claims::LeaseEnd;
use crate::error::Error;
use crate::event::EventKind;
use crate::ids::LeaseId;
use crate::lease::{Lease, TTL_MS_MAX};
use crate::limits::Limits;
use crate::machine::{Ctx, StateMachine};
use crate::outcome::{Rejection, Response};
use serde::{Deserialize, Serialize};

/// Grant a lease with a TTL; its id comes from a counter.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseGrant {
    /// Time to live without a keepalive, on the leader's clock.
    pub ttl_ms: u64,
}

/// Revoke a lease: everything it owns goes in the same revision.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseRevoke {
    /// The lease.
    pub lease: LeaseId,
}

/// Expire a lease: proposed by the leader when its deadline passed on the leader's clock.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseExpire {
    /// The lease.
    pub lease: LeaseId,
}

/// Record what a new leader needs to bound lease lifetimes: each lease's remaining TTL on
/// the current leader's clock. A remaining TTL at or above the lease's TTL resets it (the
/// leader proposes that after a keepalive of a checkpointed lease). Leases that no longer
/// exist are skipped. Bookkeeping only: it makes no event and keeps the revision.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseCheckpoint {
    /// (lease, remaining TTL in milliseconds).
    pub remaining_ms: Vec<(LeaseId, u64)>,
}

impl LeaseGrant {
    pub(crate) fn validate(&self, limits: &Limits) -> Result<(), Error> {
        limits.check_ttl_ms(self.ttl_ms)
    }

    pub(crate) fn apply(self, sm: &mut StateMachine, ctx: &mut Ctx) -> Response {
        if self.ttl_ms == 0 {
            return Rejection::InvalidArgument {
                reason: "ttl_ms must be positive".into(),
            }
            .into();
        }
        let Ok(ttl_ms) = u32::try_from(self.ttl_ms) else {
            return Rejection::InvalidArgument {
                reason: format!("ttl_ms must be at most {TTL_MS_MAX}"),
            }
            .into();
        };
        let lease = LeaseId(sm.next_lease_id);
        sm.next_lease_id += 1;
        sm.leases
            .insert(lease, Lease::new(ttl_ms, ctx.revision, ctx.owner.clone()));
        if let Some(owner) = &ctx.owner {
            sm.usage_mut(owner, |u| u.leases += 1);
        }
        ctx.emit(EventKind::LeaseGranted {
            lease,
            ttl_ms: self.ttl_ms,
        });
        Response::LeaseGranted {
            lease,
            ttl_ms: self.ttl_ms,
        }
    }
}

impl LeaseRevoke {
    pub(crate) fn apply(self, sm: &mut StateMachine, ctx: &mut Ctx) -> Response {
        end_lease(sm, ctx, self.lease, LeaseEnd::Revoked)
    }
}

impl LeaseExpire {
    pub(crate) fn apply(self, sm: &mut StateMachine, ctx: &mut Ctx) -> Response {
        end_lease(sm, ctx, self.lease, LeaseEnd::Expired)
    }
}

impl LeaseCheckpoint {
    pub(crate) fn apply(self, sm: &mut StateMachine) -> Response {
        let mut leases = 0;
        for (id, remaining_ms) in self.remaining_ms {
            if let Some(lease) = sm.leases.get_mut(&id) {
                lease.set_checkpoint_remaining_ms(Some(remaining_ms));
                leases += 1;
            }
        }
        Response::LeasesCheckpointed { leases }
    }
}

/// Ends a lease and everything it owns, in one revision. Costs what the lease owns.
fn end_lease(sm: &mut StateMachine, ctx: &mut Ctx, id: LeaseId, end: LeaseEnd) -> Response {
    let Some(mut lease) = sm.leases.remove(&id) else {
        return Rejection::LeaseNotFound { lease: id }.into();
    };
    if let Some(owner) = &lease.owner {
        sm.usage_mut(owner, |u| u.leases = u.leases.saturating_sub(1));
    }
    ctx.emit(match end {
        LeaseEnd::Revoked => EventKind::LeaseRevoked { lease: id },
        LeaseEnd::Expired => EventKind::LeaseExpired { lease: id },
    });
    let mut keys_deleted = 0;
    for key in lease.keys() {
        if sm.delete_key(ctx, key) {
            keys_deleted += 1;
        }
    }
    let (holds_released, waits_cancelled) = sm.end_claims_of(
        ctx,
        id,
        lease.owner.as_deref(),
        std::mem::take(&mut lease.claims).into_sorted_vec(),
        end,
    );
    let mut outcome_bytes = 0;
    for key in lease.idempotency().values() {
        outcome_bytes += sm.idempotency.remove_owned(key) as u64;
    }
    if let Some(owner) = &lease.owner {
        sm.charge_outcome(owner, outcome_bytes, false);
    }
    Response::LeaseEnded {
        lease: id,
        keys_deleted,
        holds_released,
        waits_cancelled,
    }
}

#[cfg(test)]
mod tests {
    use crate::testing::*;
    use crate::*;

    #[test]
    fn lease_ids_come_from_a_counter() {
        let mut sm = StateMachine::default();
        assert_eq!(grant(&mut sm, 10_000), LeaseId(1));
        assert_eq!(grant(&mut sm, 10_000), LeaseId(2));
        revoke(&mut sm, LeaseId(1));
        assert_eq!(grant(&mut sm, 10_000), LeaseId(3));
    }

    #[test]
    fn a_grant_of_no_ttl_or_beyond_the_longest_is_refused_and_changes_nothing() {
        let mut sm = StateMachine::default();
        let before = sm.clone();
        for ttl_ms in [0, TTL_MS_MAX + 1, u64::MAX] {
            let applied = sm.apply_command(Command::LeaseGrant(LeaseGrant { ttl_ms }));
            assert!(
                matches!(
                    applied.response,
                    Response::Rejected(Rejection::InvalidArgument { .. })
                ),
                "{ttl_ms}: {:?}",
                applied.response
            );
            assert_eq!(sm, before);
        }
        let lease = grant(&mut sm, TTL_MS_MAX);
        assert_eq!(sm.lease(lease).unwrap().ttl_ms, TTL_MS_MAX);
    }

    #[test]
    fn revoke_of_an_unknown_lease_is_lease_not_found_and_changes_nothing() {
        let mut sm = StateMachine::default();
        let before = sm.clone();
        let applied = sm.apply_command(Command::LeaseRevoke(LeaseRevoke { lease: LeaseId(9) }));
        assert_eq!(
            applied.response,
            Response::Rejected(Rejection::LeaseNotFound { lease: LeaseId(9) })
        );
        assert_eq!(sm, before);
    }

    #[test]
    fn lease_end_frees_keys_holds_and_waits_in_one_revision() {
        let mut sm = StateMachine::default();
        let a = grant(&mut sm, 10_000);
        let b = grant(&mut sm, 10_000);
        put(&mut sm, "eph", "v", Some(a));
        acquire(&mut sm, "L", a, "w", 0);
        acquire(&mut sm, "M", b, "w", 0);
        acquire(&mut sm, "M", a, "w", 5_000);
        let before = sm.revision();
        let applied = sm.apply_command(Command::LeaseExpire(LeaseExpire { lease: a }));
        assert_eq!(applied.revision, before.next());
        assert_eq!(
            applied.response,
            Response::LeaseEnded {
                lease: a,
                keys_deleted: 1,
                holds_released: 1,
                waits_cancelled: 1
            }
        );
        assert!(
            applied
                .events
                .iter()
                .all(|e| e.revision == applied.revision)
        );
        assert!(sm.get("eph").is_none());
        assert!(sm.lock_state(&ResourceId::lock("L")).is_none());
        let m = sm.lock_state(&ResourceId::lock("M")).unwrap();
        assert_eq!(m.holders.len(), 1);
        assert!(m.queue.is_empty());
        assert!(sm.lease(a).is_none());
    }

    #[test]
    fn lease_end_grants_the_next_waiter_in_the_same_revision() {
        let mut sm = StateMachine::default();
        let a = grant(&mut sm, 10_000);
        let b = grant(&mut sm, 10_000);
        acquire(&mut sm, "L", a, "w", 0);
        acquire(&mut sm, "L", b, "w", 5_000);
        let applied = sm.apply_command(Command::LeaseExpire(LeaseExpire { lease: a }));
        let holder = &sm.lock_state(&ResourceId::lock("L")).unwrap().holders[0];
        assert_eq!(holder.lease, b);
        assert_eq!(holder.fence, applied.revision.fence());
    }

    #[test]
    fn checkpoint_records_remaining_ttl_without_a_revision() {
        let mut sm = StateMachine::default();
        let a = grant(&mut sm, 10_000);
        let rev = sm.revision();
        let applied = sm.apply_command(Command::LeaseCheckpoint(LeaseCheckpoint {
            remaining_ms: vec![(a, 4_000), (LeaseId(77), 1)],
        }));
        assert_eq!(applied.response, Response::LeasesCheckpointed { leases: 1 });
        assert_eq!(sm.revision(), rev);
        assert!(applied.events.is_empty());
        let clock = sm.lease_clock();
        assert_eq!(clock[0].checkpoint_remaining_ms, Some(4_000));
        // A remaining TTL at the full TTL resets the checkpoint (a keepalive happened).
        sm.apply_command(Command::LeaseCheckpoint(LeaseCheckpoint {
            remaining_ms: vec![(a, 10_000)],
        }));
        assert_eq!(sm.lease_clock()[0].checkpoint_remaining_ms, None);
    }
}
