//! Lock commands: acquire (exclusive or shared, re-entrant, try or queue), release (owner
//! only, optionally naming the fence) and the admin force-release.

use crate::claims::ClaimRequest;
use crate::error::Error;
use crate::ids::{Fence, LeaseId};
use crate::limits::Limits;
use crate::machine::{Ctx, StateMachine};
use crate::outcome::Response;
use crate::resource::{Claimant, Demand, Policy, ResourceId, ResourceKind};
use serde::{Deserialize, Serialize};

/// A lock mode.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Mode {
    /// One holder.
    #[default]
    Exclusive,
    /// Many shared holders, no exclusive one.
    Shared,
}

/// Acquire a lock. `wait_ms == 0` is a try-lock that never queues; otherwise a busy lock
/// queues the request and the leader later proposes [`AcquireTimeout`](super::AcquireTimeout)
/// at the deadline.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockAcquire {
    /// The lock.
    pub name: String,
    /// The lease that will own the hold.
    pub lease: LeaseId,
    /// The owner within the lease.
    pub owner: String,
    /// Exclusive or shared.
    pub mode: Mode,
    /// How long to wait; 0 never queues.
    pub wait_ms: u64,
    /// After this holder's lease expires, keep the lock ungranted this long.
    pub lock_delay_ms: u64,
}

/// Release one count of a lock or semaphore hold, or cancel a queued acquire (when no
/// fence is named). Carried by `Command::LockRelease` and `Command::SemaphoreRelease`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Release {
    /// The lock or semaphore.
    pub name: String,
    /// The holder's lease.
    pub lease: LeaseId,
    /// The holder's owner.
    pub owner: String,
    /// If given, only the grant with this fence is released.
    pub fence: Option<Fence>,
}

/// Admin force-release of every holder of a lock, semaphore or election.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForceRelease {
    /// The resource.
    pub resource: ResourceId,
}

impl LockAcquire {
    pub(crate) fn validate(&self, limits: &Limits) -> Result<(), Error> {
        limits.check_name("name", &self.name)?;
        limits.check_owner(&self.owner)?;
        limits.check_wait_ms(self.wait_ms)?;
        limits.check_lock_delay_ms(self.lock_delay_ms)
    }

    pub(crate) fn apply(self, sm: &mut StateMachine, ctx: &mut Ctx) -> Response {
        let demand = match self.mode {
            Mode::Exclusive => Demand::Exclusive,
            Mode::Shared => Demand::Shared,
        };
        let request = ClaimRequest {
            claimant: Claimant::new(self.lease, self.owner),
            policy: Policy::Lock,
            demand,
            wait_ms: self.wait_ms,
            lock_delay_ms: self.lock_delay_ms,
            value: None,
        };
        sm.acquire(ctx, ResourceId::lock(self.name), request)
    }
}

impl Release {
    pub(crate) fn validate(&self, limits: &Limits) -> Result<(), Error> {
        limits.check_name("name", &self.name)?;
        limits.check_owner(&self.owner)
    }

    pub(crate) fn apply(
        self,
        kind: ResourceKind,
        sm: &mut StateMachine,
        ctx: &mut Ctx,
    ) -> Response {
        let id = ResourceId {
            kind,
            name: self.name,
        };
        let claimant = Claimant::new(self.lease, self.owner);
        sm.release(ctx, id, claimant, self.fence, false)
    }
}

impl ForceRelease {
    pub(crate) fn validate(&self, limits: &Limits) -> Result<(), Error> {
        limits.check_name("name", &self.resource.name)
    }

    pub(crate) fn apply(self, sm: &mut StateMachine, ctx: &mut Ctx) -> Response {
        sm.force_release(ctx, self.resource)
    }
}

#[cfg(test)]
mod tests {
    use crate::testing::*;
    use crate::*;

    #[test]
    fn exclusive_lock_has_at_most_one_holder_and_try_lock_never_queues() {
        let mut sm = StateMachine::default();
        let a = grant(&mut sm, 10_000);
        let b = grant(&mut sm, 10_000);
        assert!(matches!(
            acquire(&mut sm, "L", a, "w", 0),
            Response::Granted(_)
        ));
        let before = sm.clone();
        let refused = acquire(&mut sm, "L", b, "w", 0);
        let Response::Rejected(Rejection::LockHeld {
            holders, queue_len, ..
        }) = refused
        else {
            panic!("expected lock_held, got {refused:?}");
        };
        assert_eq!(holders[0].lease, a);
        assert_eq!(queue_len, 0);
        assert_eq!(sm, before, "a refused try-lock changes nothing");
    }

    #[test]
    fn fence_is_the_revision_of_the_grant() {
        let mut sm = StateMachine::default();
        let a = grant(&mut sm, 10_000);
        let applied = sm.apply_command(lock_cmd("L", a, "w", Mode::Exclusive, 0));
        let Response::Granted(g) = applied.response else {
            panic!("expected a grant");
        };
        assert_eq!(g.holder.fence, applied.revision.fence());
    }

    #[test]
    fn fifo_queue_grants_in_enqueue_order_with_strictly_increasing_fences() {
        let mut sm = StateMachine::default();
        let holder = grant(&mut sm, 10_000);
        acquire(&mut sm, "L", holder, "h", 0);
        let waiters: Vec<LeaseId> = (0..10).map(|_| grant(&mut sm, 10_000)).collect();
        for (i, w) in waiters.iter().enumerate() {
            let r = acquire(&mut sm, "L", *w, "w", 5_000);
            assert!(matches!(r, Response::Queued { position, .. } if position == i as u64 + 1));
        }
        let mut current = (holder, "h");
        let mut fences = Vec::new();
        for w in &waiters {
            release(&mut sm, "L", current.0, current.1, None);
            let state = sm.lock_state(&ResourceId::lock("L")).unwrap();
            assert_eq!(state.holders[0].lease, *w, "grants follow enqueue order");
            fences.push(state.holders[0].fence);
            current = (*w, "w");
        }
        assert!(fences.windows(2).all(|f| f[0] < f[1]));
    }

    #[test]
    fn grant_happens_in_the_same_revision_as_the_release() {
        let mut sm = StateMachine::default();
        let a = grant(&mut sm, 10_000);
        let b = grant(&mut sm, 10_000);
        acquire(&mut sm, "L", a, "w", 0);
        acquire(&mut sm, "L", b, "w", 5_000);
        let applied = sm.apply_command(release_cmd("L", a, "w", None));
        assert_eq!(applied.events.len(), 2);
        assert!(matches!(applied.events[1].kind, EventKind::Granted { lease, .. } if lease == b));
        let state = sm.lock_state(&ResourceId::lock("L")).unwrap();
        assert_eq!(state.holders[0].fence, applied.revision.fence());
    }

    #[test]
    fn shared_holders_coexist_and_exclude_an_exclusive_one() {
        let mut sm = StateMachine::default();
        let [a, b, c] = [0; 3].map(|_| grant(&mut sm, 10_000));
        assert!(matches!(
            sm.apply_command(lock_cmd("L", a, "r", Mode::Shared, 0))
                .response,
            Response::Granted(_)
        ));
        assert!(matches!(
            sm.apply_command(lock_cmd("L", b, "r", Mode::Shared, 0))
                .response,
            Response::Granted(_)
        ));
        assert!(matches!(
            sm.apply_command(lock_cmd("L", c, "w", Mode::Exclusive, 0))
                .response,
            Response::Rejected(Rejection::LockHeld { .. })
        ));
    }

    #[test]
    fn shared_request_behind_a_queued_exclusive_one_waits() {
        let mut sm = StateMachine::default();
        let [a, b, c] = [0; 3].map(|_| grant(&mut sm, 10_000));
        sm.apply_command(lock_cmd("L", a, "r", Mode::Shared, 0));
        let writer = sm.apply_command(lock_cmd("L", b, "w", Mode::Exclusive, 5_000));
        assert!(matches!(writer.response, Response::Queued { .. }));
        let reader = sm.apply_command(lock_cmd("L", c, "r", Mode::Shared, 5_000));
        assert!(
            matches!(reader.response, Response::Queued { position: 2, .. }),
            "no writer starvation: the reader queues behind the writer"
        );
        // The writer gets it when the first reader leaves, then the second reader.
        release(&mut sm, "L", a, "r", None);
        assert_eq!(
            sm.lock_state(&ResourceId::lock("L")).unwrap().holders[0].lease,
            b
        );
        release(&mut sm, "L", b, "w", None);
        assert_eq!(
            sm.lock_state(&ResourceId::lock("L")).unwrap().holders[0].lease,
            c
        );
    }

    #[test]
    fn consecutive_shared_waiters_are_granted_together() {
        let mut sm = StateMachine::default();
        let [w, r1, r2, x] = [0; 4].map(|_| grant(&mut sm, 10_000));
        sm.apply_command(lock_cmd("L", w, "w", Mode::Exclusive, 0));
        sm.apply_command(lock_cmd("L", r1, "r", Mode::Shared, 5_000));
        sm.apply_command(lock_cmd("L", r2, "r", Mode::Shared, 5_000));
        sm.apply_command(lock_cmd("L", x, "w", Mode::Exclusive, 5_000));
        let applied = sm.apply_command(release_cmd("L", w, "w", None));
        let state = sm.lock_state(&ResourceId::lock("L")).unwrap();
        assert_eq!(state.holders.len(), 2);
        assert!(
            state
                .holders
                .iter()
                .all(|h| h.fence == applied.revision.fence())
        );
        assert_eq!(state.queue.len(), 1);
    }

    #[test]
    fn reentrant_acquire_keeps_the_fence_and_needs_as_many_releases() {
        let mut sm = StateMachine::default();
        let a = grant(&mut sm, 10_000);
        let Response::Granted(first) = acquire(&mut sm, "L", a, "w", 0) else {
            panic!("expected a grant");
        };
        let Response::Granted(second) = acquire(&mut sm, "L", a, "w", 0) else {
            panic!("expected a re-entrant grant");
        };
        assert_eq!(second.holder.fence, first.holder.fence);
        assert_eq!(second.holder.count, 2);
        assert_eq!(
            release(&mut sm, "L", a, "w", None),
            Response::Released {
                released: false,
                count: 1,
                fence: first.holder.fence
            }
        );
        assert_eq!(
            release(&mut sm, "L", a, "w", None),
            Response::Released {
                released: true,
                count: 0,
                fence: first.holder.fence
            }
        );
        assert!(sm.lock_state(&ResourceId::lock("L")).is_none());
    }

    #[test]
    fn owner_only_release() {
        let mut sm = StateMachine::default();
        let a = grant(&mut sm, 10_000);
        let b = grant(&mut sm, 10_000);
        let Response::Granted(g) = acquire(&mut sm, "L", a, "w", 0) else {
            panic!("expected a grant");
        };
        let before = sm.clone();
        for (lease, owner) in [(b, "w"), (a, "other")] {
            assert_eq!(
                release(&mut sm, "L", lease, owner, None),
                Response::Rejected(Rejection::NotHolder {
                    current_fence: Some(g.holder.fence)
                })
            );
        }
        assert_eq!(sm, before);
    }

    #[test]
    fn release_naming_a_stale_fence_never_frees_a_newer_grant() {
        let mut sm = StateMachine::default();
        let a = grant(&mut sm, 10_000);
        let Response::Granted(old) = acquire(&mut sm, "L", a, "w", 0) else {
            panic!("expected a grant");
        };
        release(&mut sm, "L", a, "w", Some(old.holder.fence));
        let Response::Granted(new) = acquire(&mut sm, "L", a, "w", 0) else {
            panic!("expected a grant");
        };
        // A retried release of the old grant arrives late.
        assert_eq!(
            release(&mut sm, "L", a, "w", Some(old.holder.fence)),
            Response::Rejected(Rejection::NotHolder {
                current_fence: Some(new.holder.fence)
            })
        );
        assert_eq!(
            sm.lock_state(&ResourceId::lock("L")).unwrap().holders[0].fence,
            new.holder.fence
        );
    }

    #[test]
    fn release_of_a_queued_entry_cancels_it() {
        let mut sm = StateMachine::default();
        let a = grant(&mut sm, 10_000);
        let b = grant(&mut sm, 10_000);
        acquire(&mut sm, "L", a, "w", 0);
        let Response::Queued { enqueued, .. } = acquire(&mut sm, "L", b, "w", 5_000) else {
            panic!("expected queued");
        };
        assert_eq!(
            release(&mut sm, "L", b, "w", None),
            Response::Cancelled { enqueued }
        );
        assert!(
            sm.lock_state(&ResourceId::lock("L"))
                .unwrap()
                .queue
                .is_empty()
        );
    }

    #[test]
    fn repeated_acquire_while_queued_never_queues_twice() {
        let mut sm = StateMachine::default();
        let a = grant(&mut sm, 10_000);
        let b = grant(&mut sm, 10_000);
        acquire(&mut sm, "L", a, "w", 0);
        let first = acquire(&mut sm, "L", b, "w", 5_000);
        let rev = sm.revision();
        assert_eq!(acquire(&mut sm, "L", b, "w", 5_000), first);
        assert_eq!(sm.revision(), rev);
        assert_eq!(
            sm.lock_state(&ResourceId::lock("L")).unwrap().queue.len(),
            1
        );
    }

    #[test]
    fn acquire_with_an_unknown_lease_is_refused() {
        let mut sm = StateMachine::default();
        assert_eq!(
            acquire(&mut sm, "L", LeaseId(42), "w", 0),
            Response::Rejected(Rejection::LeaseNotFound { lease: LeaseId(42) })
        );
    }

    #[test]
    fn admin_force_release_frees_holders_and_grants_the_next_waiter() {
        let mut sm = StateMachine::default();
        let a = grant(&mut sm, 10_000);
        let b = grant(&mut sm, 10_000);
        acquire(&mut sm, "L", a, "w", 0);
        acquire(&mut sm, "L", b, "w", 5_000);
        let applied = sm.apply_command(Command::ForceRelease(ForceRelease {
            resource: ResourceId::lock("L"),
        }));
        assert_eq!(applied.response, Response::ForceReleased { holders: 1 });
        assert_eq!(
            sm.lock_state(&ResourceId::lock("L")).unwrap().holders[0].lease,
            b
        );
        assert!(sm.lease(a).unwrap().claims.is_empty());
        let missing = sm.apply_command(Command::ForceRelease(ForceRelease {
            resource: ResourceId::lock("nope"),
        }));
        assert!(matches!(
            missing.response,
            Response::Rejected(Rejection::LockNotFound { .. })
        ));
    }

    #[test]
    fn fence_check_is_true_only_for_the_current_grant() {
        let mut sm = StateMachine::default();
        let a = grant(&mut sm, 10_000);
        let Response::Granted(g) = acquire(&mut sm, "L", a, "w", 0) else {
            panic!("expected a grant");
        };
        let id = ResourceId::lock("L");
        assert_eq!(
            sm.check_fence(&id, g.holder.fence),
            FenceCheck {
                current: true,
                fence: Some(g.holder.fence)
            }
        );
        assert!(!sm.check_fence(&id, Fence(g.holder.fence.0 - 1)).current);
        release(&mut sm, "L", a, "w", None);
        assert_eq!(
            sm.check_fence(&id, g.holder.fence),
            FenceCheck {
                current: false,
                fence: None
            }
        );
    }

    #[test]
    fn mode_mismatch_on_reentry_is_refused() {
        let mut sm = StateMachine::default();
        let a = grant(&mut sm, 10_000);
        sm.apply_command(lock_cmd("L", a, "w", Mode::Shared, 0));
        assert!(matches!(
            sm.apply_command(lock_cmd("L", a, "w", Mode::Exclusive, 0))
                .response,
            Response::Rejected(Rejection::InvalidArgument { .. })
        ));
    }

    #[test]
    fn queue_length_is_bounded() {
        let mut sm = StateMachine::new(Bounds {
            queue_len_max: 2,
            ..Bounds::default()
        });
        let holder = grant(&mut sm, 10_000);
        acquire(&mut sm, "L", holder, "h", 0);
        for i in 0..2 {
            let w = grant(&mut sm, 10_000);
            assert!(matches!(
                acquire(&mut sm, "L", w, &i.to_string(), 1),
                Response::Queued { .. }
            ));
        }
        let w = grant(&mut sm, 10_000);
        assert_eq!(
            acquire(&mut sm, "L", w, "x", 1),
            Response::Rejected(Rejection::QueueFull { queue_len_max: 2 })
        );
    }
}
