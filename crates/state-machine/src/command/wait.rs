//! Commands about waiting: cancel a queued claim (the client went away), time out a blocking
//! acquire (the leader's deadline), and end a lock-delay (the leader's clock).

use crate::error::Error;
use crate::event::CancelReason;
use crate::ids::{LeaseId, Revision};
use crate::limits::Limits;
use crate::machine::{Ctx, StateMachine};
use crate::outcome::Response;
use crate::resource::{Claimant, ResourceId};
use serde::{Deserialize, Serialize};

/// Withdraw a queued claim. If it was granted meanwhile, the answer is the grant and
/// nothing changes (the caller decides whether to release it).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cancel {
    /// The resource.
    pub resource: ResourceId,
    /// The waiter's lease.
    pub lease: LeaseId,
    /// The waiter's owner.
    pub owner: String,
    /// The enqueue revision, if known: only that queue entry is withdrawn.
    pub enqueued: Option<Revision>,
}

/// A blocking acquire's deadline passed. Atomically removes the queue entry unless it was
/// already granted, in which case the grant is returned: a grant racing the deadline is
/// never lost.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AcquireTimeout {
    /// The resource.
    pub resource: ResourceId,
    /// The waiter's lease.
    pub lease: LeaseId,
    /// The waiter's owner.
    pub owner: String,
    /// The enqueue revision of the entry whose deadline passed.
    pub enqueued: Revision,
}

/// A lock-delay is due on the leader's clock: the lock may be granted again.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockDelayElapsed {
    /// The resource.
    pub resource: ResourceId,
    /// The `since` revision of the delay the leader timed; a newer delay is left alone.
    pub since: Revision,
}

/// A command naming one claim on one resource: its name and owner within the limits.
fn check_claim(limits: &Limits, resource: &ResourceId, owner: &str) -> Result<(), Error> {
    limits.check_name("name", &resource.name)?;
    limits.check_owner(owner)
}

impl Cancel {
    pub(crate) fn validate(&self, limits: &Limits) -> Result<(), Error> {
        check_claim(limits, &self.resource, &self.owner)
    }

    pub(crate) fn apply(self, sm: &mut StateMachine, ctx: &mut Ctx) -> Response {
        let claimant = Claimant::new(self.lease, self.owner);
        sm.withdraw(
            ctx,
            self.resource,
            claimant,
            self.enqueued,
            CancelReason::Cancelled,
        )
    }
}

impl AcquireTimeout {
    pub(crate) fn validate(&self, limits: &Limits) -> Result<(), Error> {
        check_claim(limits, &self.resource, &self.owner)
    }

    pub(crate) fn apply(self, sm: &mut StateMachine, ctx: &mut Ctx) -> Response {
        let claimant = Claimant::new(self.lease, self.owner);
        sm.withdraw(
            ctx,
            self.resource,
            claimant,
            Some(self.enqueued),
            CancelReason::TimedOut,
        )
    }
}

impl LockDelayElapsed {
    pub(crate) fn validate(&self, limits: &Limits) -> Result<(), Error> {
        limits.check_name("name", &self.resource.name)
    }

    pub(crate) fn apply(self, sm: &mut StateMachine, ctx: &mut Ctx) -> Response {
        sm.delay_elapsed(ctx, self.resource, self.since)
    }
}

#[cfg(test)]
mod tests {
    use crate::testing::*;
    use crate::*;

    fn timeout(lease: LeaseId, enqueued: Revision) -> Command {
        Command::AcquireTimeout(AcquireTimeout {
            resource: ResourceId::lock("L"),
            lease,
            owner: "w".into(),
            enqueued,
        })
    }

    #[test]
    fn timeout_removes_the_queue_entry_atomically() {
        let mut sm = StateMachine::default();
        let [a, b, c] = [0; 3].map(|_| grant(&mut sm, 10_000));
        acquire(&mut sm, "L", a, "w", 0);
        let Response::Queued { enqueued, .. } = acquire(&mut sm, "L", b, "w", 100) else {
            panic!("queued");
        };
        acquire(&mut sm, "L", c, "w", 5_000);
        let applied = sm.apply_command(timeout(b, enqueued));
        assert_eq!(applied.response, Response::TimedOut { enqueued });
        let state = sm.lock_state(&ResourceId::lock("L")).unwrap();
        assert_eq!(state.queue.len(), 1);
        assert_eq!(state.queue[0].lease, c);
        assert!(sm.lease(b).unwrap().claims.is_empty());
    }

    #[test]
    fn timeout_racing_a_grant_returns_the_grant() {
        let mut sm = StateMachine::default();
        let [a, b] = [0; 2].map(|_| grant(&mut sm, 10_000));
        acquire(&mut sm, "L", a, "w", 0);
        let Response::Queued { enqueued, .. } = acquire(&mut sm, "L", b, "w", 100) else {
            panic!("queued");
        };
        release(&mut sm, "L", a, "w", None);
        let rev = sm.revision();
        let applied = sm.apply_command(timeout(b, enqueued));
        let Response::Granted(g) = applied.response else {
            panic!("expected the grant, got {:?}", applied.response);
        };
        assert_eq!(g.holder.lease, b);
        assert_eq!(sm.revision(), rev, "nothing changes");
        assert_eq!(
            sm.lock_state(&ResourceId::lock("L")).unwrap().holders[0].lease,
            b
        );
    }

    #[test]
    fn timeout_of_a_vanished_entry_is_not_waiting() {
        let mut sm = StateMachine::default();
        let b = grant(&mut sm, 10_000);
        assert_eq!(
            sm.apply_command(timeout(b, Revision(1))).response,
            Response::Rejected(Rejection::NotWaiting)
        );
    }

    #[test]
    fn cancel_of_a_queued_entry_lets_the_next_one_in() {
        let mut sm = StateMachine::default();
        let [r, w, r2] = [0; 3].map(|_| grant(&mut sm, 10_000));
        sm.apply_command(lock_cmd("L", r, "r", Mode::Shared, 0));
        sm.apply_command(lock_cmd("L", w, "w", Mode::Exclusive, 5_000));
        sm.apply_command(lock_cmd("L", r2, "r", Mode::Shared, 5_000));
        // The writer gives up: the reader behind it may now share the lock.
        let applied = sm.apply_command(Command::Cancel(Cancel {
            resource: ResourceId::lock("L"),
            lease: w,
            owner: "w".into(),
            enqueued: None,
        }));
        assert!(matches!(applied.response, Response::Cancelled { .. }));
        assert_eq!(
            sm.lock_state(&ResourceId::lock("L")).unwrap().holders.len(),
            2
        );
    }

    #[test]
    fn lock_delay_keeps_the_lock_ungranted_until_the_leader_ends_it() {
        let mut sm = StateMachine::default();
        let [a, b] = [0; 2].map(|_| grant(&mut sm, 10_000));
        sm.apply_command(Command::LockAcquire(LockAcquire {
            name: "L".into(),
            lease: a,
            owner: "w".into(),
            mode: Mode::Exclusive,
            wait_ms: 0,
            lock_delay_ms: 2_000,
        }));
        acquire(&mut sm, "L", b, "w", 10_000);
        let expired = sm.apply_command(Command::LeaseExpire(LeaseExpire { lease: a }));
        let id = ResourceId::lock("L");
        let state = sm.lock_state(&id).unwrap();
        assert!(state.holders.is_empty(), "no grant during the lock-delay");
        let delay = state.delay.unwrap();
        assert_eq!(delay.since, expired.revision);
        assert_eq!(delay.delay_ms, 2_000);
        assert_eq!(sm.pending_lock_delays(), vec![(id.clone(), delay)]);
        // A try-lock during the delay is refused and says why.
        let c = grant(&mut sm, 10_000);
        assert!(matches!(
            acquire(&mut sm, "L", c, "x", 0),
            Response::Rejected(Rejection::LockHeld { delayed: true, .. })
        ));
        // A stale proposal changes nothing; the right one grants the waiter.
        let stale = sm.apply_command(Command::LockDelayElapsed(LockDelayElapsed {
            resource: id.clone(),
            since: Revision(1),
        }));
        assert_eq!(stale.response, Response::Rejected(Rejection::Stale));
        let ended = sm.apply_command(Command::LockDelayElapsed(LockDelayElapsed {
            resource: id.clone(),
            since: delay.since,
        }));
        assert_eq!(ended.response, Response::DelayEnded { granted: 1 });
        assert_eq!(sm.lock_state(&id).unwrap().holders[0].lease, b);
        assert!(sm.pending_lock_delays().is_empty());
    }

    #[test]
    fn lock_delay_applies_to_expiry_not_to_a_clean_release_or_revoke() {
        let mut sm = StateMachine::default();
        let [a, b] = [0; 2].map(|_| grant(&mut sm, 10_000));
        let acquire_delayed = |lease| {
            Command::LockAcquire(LockAcquire {
                name: "L".into(),
                lease,
                owner: "w".into(),
                mode: Mode::Exclusive,
                wait_ms: 0,
                lock_delay_ms: 2_000,
            })
        };
        sm.apply_command(acquire_delayed(a));
        release(&mut sm, "L", a, "w", None);
        assert!(sm.lock_state(&ResourceId::lock("L")).is_none());
        sm.apply_command(acquire_delayed(b));
        revoke(&mut sm, b);
        assert!(sm.lock_state(&ResourceId::lock("L")).is_none());
    }
}
