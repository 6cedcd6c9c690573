//! Semaphore commands: acquire permits (release is the lock's [`Release`](super::Release)). Same queue code as locks; the limit is
//! fixed while the semaphore has holders or waiters, and an acquire naming another limit is
//! refused with `limit_mismatch`.

use crate::claims::ClaimRequest;
use crate::error::Error;
use crate::ids::LeaseId;
use crate::limits::Limits;
use crate::machine::{Ctx, StateMachine};
use crate::outcome::{Rejection, Response};
use crate::resource::{Claimant, Demand, Policy, ResourceId};
use serde::{Deserialize, Serialize};

/// Acquire `permits` of a semaphore of `limit` permits.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SemaphoreAcquire {
    /// The semaphore.
    pub name: String,
    /// The lease that will own the hold.
    pub lease: LeaseId,
    /// The owner within the lease.
    pub owner: String,
    /// The semaphore's limit; must match while it exists.
    pub limit: u32,
    /// Permits to take (1..=limit).
    pub permits: u32,
    /// How long to wait; 0 never queues.
    pub wait_ms: u64,
}

impl SemaphoreAcquire {
    pub(crate) fn validate(&self, limits: &Limits) -> Result<(), Error> {
        limits.check_name("name", &self.name)?;
        limits.check_owner(&self.owner)?;
        limits.check_permits(self.limit, self.permits)?;
        limits.check_wait_ms(self.wait_ms)
    }

    pub(crate) fn apply(self, sm: &mut StateMachine, ctx: &mut Ctx) -> Response {
        if self.limit == 0 || self.permits == 0 || self.permits > self.limit {
            return Rejection::InvalidArgument {
                reason: "permits must be in 1..=limit".into(),
            }
            .into();
        }
        let request = ClaimRequest {
            claimant: Claimant::new(self.lease, self.owner),
            policy: Policy::Semaphore { limit: self.limit },
            demand: Demand::Permits(self.permits),
            wait_ms: self.wait_ms,
            lock_delay_ms: 0,
            value: None,
        };
        sm.acquire(ctx, ResourceId::semaphore(self.name), request)
    }
}

#[cfg(test)]
mod tests {
    use crate::testing::*;
    use crate::*;

    #[test]
    fn semaphore_permits_never_exceed_the_limit_and_waiters_queue_fifo() {
        let mut sm = StateMachine::default();
        let [a, b, c, d] = [0; 4].map(|_| grant(&mut sm, 10_000));
        assert!(matches!(sem(&mut sm, a, 3, 2, 0), Response::Granted(_)));
        assert!(matches!(sem(&mut sm, b, 3, 1, 0), Response::Granted(_)));
        assert!(matches!(
            sem(&mut sm, c, 3, 1, 0),
            Response::Rejected(Rejection::LockHeld { .. })
        ));
        assert!(matches!(
            sem(&mut sm, c, 3, 2, 5_000),
            Response::Queued { position: 1, .. }
        ));
        assert!(matches!(
            sem(&mut sm, d, 3, 1, 5_000),
            Response::Queued { position: 2, .. }
        ));
        // Releasing one permit is not enough for c's two, and d waits behind c (FIFO).
        sem_release(&mut sm, b);
        assert_eq!(sm.lock_state(&sem_id()).unwrap().holders.len(), 1);
        sem_release(&mut sm, a);
        let state = sm.lock_state(&sem_id()).unwrap();
        let leases: Vec<LeaseId> = state.holders.iter().map(|h| h.lease).collect();
        assert_eq!(leases, vec![c, d]);
    }

    #[test]
    fn semaphore_limit_mismatch_is_refused() {
        let mut sm = StateMachine::default();
        let [a, b] = [0; 2].map(|_| grant(&mut sm, 10_000));
        sem(&mut sm, a, 3, 1, 0);
        assert_eq!(
            sem(&mut sm, b, 4, 1, 0),
            Response::Rejected(Rejection::LimitMismatch { limit: 3 })
        );
    }

    #[test]
    fn semaphore_grants_are_fenced() {
        let mut sm = StateMachine::default();
        let [a, b] = [0; 2].map(|_| grant(&mut sm, 10_000));
        let Response::Granted(ga) = sem(&mut sm, a, 2, 1, 0) else {
            panic!("grant");
        };
        let Response::Granted(gb) = sem(&mut sm, b, 2, 1, 0) else {
            panic!("grant");
        };
        assert!(ga.holder.fence < gb.holder.fence);
        assert!(sm.check_fence(&sem_id(), ga.holder.fence).current);
    }

    #[test]
    fn permits_outside_the_limit_are_invalid() {
        let mut sm = StateMachine::default();
        let a = grant(&mut sm, 10_000);
        assert!(matches!(
            sem(&mut sm, a, 2, 3, 0),
            Response::Rejected(Rejection::InvalidArgument { .. })
        ));
        assert!(matches!(
            sem(&mut sm, a, 0, 0, 0),
            Response::Rejected(Rejection::InvalidArgument { .. })
        ));
    }

    fn sem_id() -> ResourceId {
        ResourceId::semaphore("S")
    }

    fn sem(
        sm: &mut StateMachine,
        lease: LeaseId,
        limit: u32,
        permits: u32,
        wait_ms: u64,
    ) -> Response {
        sm.apply_command(Command::SemaphoreAcquire(SemaphoreAcquire {
            name: "S".into(),
            lease,
            owner: "o".into(),
            limit,
            permits,
            wait_ms,
        }))
        .response
    }

    fn sem_release(sm: &mut StateMachine, lease: LeaseId) -> Response {
        sm.apply_command(Command::SemaphoreRelease(Release {
            name: "S".into(),
            lease,
            owner: "o".into(),
            fence: None,
        }))
        .response
    }
}
