//! Election commands, as in etcd's election API: campaign (an exclusive claim carrying a
//! value), proclaim (the leader changes its value) and resign. The leader is the holder;
//! its fence is the revision it became leader.

use crate::claims::ClaimRequest;
use crate::error::Error;
use crate::event::CancelReason;
use crate::ids::{Fence, LeaseId};
use crate::limits::Limits;
use crate::machine::{Ctx, StateMachine};
use crate::outcome::{Rejection, Response};
use crate::resource::{Claimant, Demand, Policy, ResourceId};
use serde::{Deserialize, Serialize};

/// Campaign: become leader now, or queue as a candidate.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Campaign {
    /// The election.
    pub name: String,
    /// The candidate's lease (one candidacy per lease and election).
    pub lease: LeaseId,
    /// The value to proclaim on winning.
    pub value: String,
    /// How long to wait; 0 never queues.
    pub wait_ms: u64,
}

/// Proclaim: the leader sets a new value.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Proclaim {
    /// The election.
    pub name: String,
    /// The leader's lease.
    pub lease: LeaseId,
    /// If given, must be the leader's fence.
    pub fence: Option<Fence>,
    /// The new value.
    pub value: String,
}

/// Resign: the leader steps down (the next candidate leads in the same revision), or a
/// queued candidate withdraws.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resign {
    /// The election.
    pub name: String,
    /// The leader's or candidate's lease.
    pub lease: LeaseId,
    /// If given, must be the leader's fence.
    pub fence: Option<Fence>,
}

fn candidate(lease: LeaseId) -> Claimant {
    Claimant::new(lease, String::new())
}

impl Campaign {
    pub(crate) fn validate(&self, limits: &Limits) -> Result<(), Error> {
        limits.check_name("name", &self.name)?;
        limits.check_value("value", &self.value)?;
        limits.check_wait_ms(self.wait_ms)
    }

    pub(crate) fn apply(self, sm: &mut StateMachine, ctx: &mut Ctx) -> Response {
        let request = ClaimRequest {
            claimant: candidate(self.lease),
            policy: Policy::Election,
            demand: Demand::Exclusive,
            wait_ms: self.wait_ms,
            lock_delay_ms: 0,
            value: Some(self.value),
        };
        sm.acquire(ctx, ResourceId::election(self.name), request)
    }
}

impl Proclaim {
    pub(crate) fn validate(&self, limits: &Limits) -> Result<(), Error> {
        limits.check_name("name", &self.name)?;
        limits.check_value("value", &self.value)
    }

    pub(crate) fn apply(self, sm: &mut StateMachine, ctx: &mut Ctx) -> Response {
        let id = ResourceId::election(self.name);
        let Some(res) = sm.resources.get_mut(&id) else {
            return Rejection::NotHolder {
                current_fence: None,
            }
            .into();
        };
        let current_fence = res.holders.values().next().map(|h| h.fence);
        let Some(holder) = res.holders.get_mut(&candidate(self.lease)) else {
            return Rejection::NotHolder { current_fence }.into();
        };
        if self.fence.is_some_and(|f| f != holder.fence) {
            return Rejection::NotHolder { current_fence }.into();
        }
        let old_len = holder.value.as_ref().map_or(0, |v| v.len());
        let new_len = self.value.len();
        holder.value = Some(self.value.into_boxed_str());
        let fence = holder.fence;
        if let Some(owner) = sm.leases.get(&self.lease).and_then(|l| l.owner.as_deref()) {
            crate::caller::usage_in(&mut sm.usage, owner, |u| {
                u.claim_bytes = (u.claim_bytes + new_len as u64).saturating_sub(old_len as u64);
            });
        }
        sm.emit_leader(ctx, &id);
        Response::Proclaimed { fence }
    }
}

impl Resign {
    pub(crate) fn validate(&self, limits: &Limits) -> Result<(), Error> {
        limits.check_name("name", &self.name)
    }

    pub(crate) fn apply(self, sm: &mut StateMachine, ctx: &mut Ctx) -> Response {
        let id = ResourceId::election(self.name);
        let claimant = candidate(self.lease);
        let queued = sm
            .resources
            .get(&id)
            .is_some_and(|r| r.queued().contains_key(&claimant));
        if queued && self.fence.is_none() {
            return sm.withdraw(ctx, id, claimant, None, CancelReason::Cancelled);
        }
        sm.release(ctx, id, claimant, self.fence, true)
    }
}

#[cfg(test)]
mod tests {
    use crate::testing::*;
    use crate::*;

    fn campaign(sm: &mut StateMachine, lease: LeaseId, value: &str, wait_ms: u64) -> Applied {
        sm.apply_command(Command::Campaign(Campaign {
            name: "E".into(),
            lease,
            value: value.into(),
            wait_ms,
        }))
    }

    fn resign(sm: &mut StateMachine, lease: LeaseId) -> Applied {
        sm.apply_command(Command::Resign(Resign {
            name: "E".into(),
            lease,
            fence: None,
        }))
    }

    #[test]
    fn election_campaign_makes_one_leader_and_queues_the_rest() {
        let mut sm = StateMachine::default();
        let [a, b] = [0; 2].map(|_| grant(&mut sm, 10_000));
        let won = campaign(&mut sm, a, "node-a", 0);
        assert!(matches!(won.response, Response::Granted(_)));
        assert!(won.events.iter().any(|e| matches!(
            &e.kind,
            EventKind::LeaderChanged { leader: Some(l), .. } if l.value == "node-a"
        )));
        assert!(matches!(
            campaign(&mut sm, b, "node-b", 5_000).response,
            Response::Queued { .. }
        ));
        let leader = sm.election_leader("E").unwrap();
        assert_eq!((leader.lease, leader.value.as_str()), (a, "node-a"));
        // A repeated campaign by the leader changes nothing.
        let rev = sm.revision();
        assert!(matches!(
            campaign(&mut sm, a, "again", 0).response,
            Response::Granted(_)
        ));
        assert_eq!(sm.revision(), rev);
    }

    #[test]
    fn election_resign_hands_leadership_to_the_next_candidate() {
        let mut sm = StateMachine::default();
        let [a, b] = [0; 2].map(|_| grant(&mut sm, 10_000));
        campaign(&mut sm, a, "node-a", 0);
        campaign(&mut sm, b, "node-b", 5_000);
        let applied = resign(&mut sm, a);
        let leader = sm.election_leader("E").unwrap();
        assert_eq!((leader.lease, leader.fence), (b, applied.revision.fence()));
        assert!(applied.events.iter().any(|e| matches!(
            &e.kind,
            EventKind::LeaderChanged { leader: Some(l), .. } if l.lease == b
        )));
        resign(&mut sm, b);
        assert!(sm.election_leader("E").is_none());
    }

    #[test]
    fn election_proclaim_is_for_the_leader_only() {
        let mut sm = StateMachine::default();
        let [a, b] = [0; 2].map(|_| grant(&mut sm, 10_000));
        campaign(&mut sm, a, "v1", 0);
        campaign(&mut sm, b, "x", 5_000);
        let proclaim = |lease| {
            Command::Proclaim(Proclaim {
                name: "E".into(),
                lease,
                fence: None,
                value: "v2".into(),
            })
        };
        assert!(matches!(
            sm.apply_command(proclaim(b)).response,
            Response::Rejected(Rejection::NotHolder { .. })
        ));
        assert!(matches!(
            sm.apply_command(proclaim(a)).response,
            Response::Proclaimed { .. }
        ));
        assert_eq!(sm.election_leader("E").unwrap().value, "v2");
    }

    #[test]
    fn election_leader_lost_with_its_lease() {
        let mut sm = StateMachine::default();
        let [a, b] = [0; 2].map(|_| grant(&mut sm, 10_000));
        campaign(&mut sm, a, "node-a", 0);
        campaign(&mut sm, b, "node-b", 5_000);
        sm.apply_command(Command::LeaseExpire(LeaseExpire { lease: a }));
        assert_eq!(sm.election_leader("E").unwrap().lease, b);
    }
}
