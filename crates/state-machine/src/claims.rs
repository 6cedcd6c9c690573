//! The queue code shared by locks, semaphores and elections: acquire, release, withdraw,
//! force-release, lease end and the handoff that grants waiters in the same revision as
//! the event that freed the resource.
//!
//! Costs: an acquire, release or withdrawal is O(log n) in holders and waiters; a handoff
//! pops the head of the queue, so its cost does not grow with the queue's length.

use crate::event::{CancelReason, EventKind, Leader, ReleaseReason};
use crate::ids::{Fence, LeaseId, Revision};
use crate::lease::ClaimRef;
use crate::machine::{Ctx, StateMachine, slot};
use crate::outcome::{Grant, HolderInfo, LOCK_HELD_HOLDERS_MAX, Rejection, Response};
use crate::resource::{
    Claimant, Demand, Holder, LockDelay, Policy, Resource, ResourceId, ResourceKind, Waiter,
};

/// A request to hold a resource, built by the lock, semaphore and election commands.
pub(crate) struct ClaimRequest {
    pub(crate) claimant: Claimant,
    pub(crate) policy: Policy,
    pub(crate) demand: Demand,
    pub(crate) wait_ms: u64,
    pub(crate) lock_delay_ms: u64,
    pub(crate) value: Option<String>,
}

/// How a lease ended, for the reasons events carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LeaseEnd {
    Revoked,
    Expired,
}

impl StateMachine {
    /// Grants at once, re-enters, queues or refuses (try-acquire) a claim.
    pub(crate) fn acquire(&mut self, ctx: &mut Ctx, id: ResourceId, req: ClaimRequest) -> Response {
        let lease = req.claimant.lease;
        if !self.leases.contains_key(&lease) {
            return Rejection::LeaseNotFound { lease }.into();
        }
        if let Some(res) = self.resources.get_mut(&id) {
            if let (Policy::Semaphore { limit }, Policy::Semaphore { limit: asked }) =
                (res.policy, req.policy)
                && limit != asked
            {
                return Rejection::LimitMismatch { limit }.into();
            }
            if let Some(holder) = res.holders.get_mut(&req.claimant) {
                return reenter(ctx, &id, &req.claimant, holder, req.demand);
            }
            if let Some(&enqueued) = res.queued().get(&req.claimant) {
                let position = res.position(enqueued);
                return Response::Queued { enqueued, position };
            }
            if !res.grantable_now(req.demand) {
                if req.wait_ms == 0 {
                    return lock_held(res);
                }
                if res.queue().len() >= self.bounds.queue_len_max {
                    let queue_len_max = self.bounds.queue_len_max as u64;
                    return Rejection::QueueFull { queue_len_max }.into();
                }
                return self.enqueue(ctx, id, req);
            }
        }
        self.grant_now(ctx, id, req)
    }

    fn grant_now(&mut self, ctx: &mut Ctx, id: ResourceId, req: ClaimRequest) -> Response {
        let fence = ctx.fence();
        let claimant = req.claimant;
        let holder = Holder {
            demand: req.demand,
            fence,
            count: 1,
            enqueued: None,
            lock_delay_ms: Holder::delay_ms(req.lock_delay_ms),
            value: req.value.as_deref().map(Box::from),
        };
        self.resources.update_or_insert_with(
            &id,
            || {
                self.tallies.resources[slot(id.kind)] += 1;
                Resource::new(req.policy)
            },
            |res| res.insert_holder(claimant.clone(), holder),
        );
        self.tallies.holders[slot(id.kind)] += 1;
        self.link_claim(&id, &claimant, req.value.as_ref().map_or(0, String::len));
        ctx.emit(EventKind::Granted {
            resource: id.clone(),
            lease: claimant.lease,
            owner: claimant.owner.clone(),
            demand: req.demand,
            fence,
            enqueued: None,
        });
        if id.kind == ResourceKind::Election {
            self.emit_leader(ctx, &id);
        }
        Response::Granted(Grant {
            resource: id,
            holder: HolderInfo {
                lease: claimant.lease,
                owner: claimant.owner,
                demand: req.demand,
                fence,
                count: 1,
                value: req.value,
                enqueued: None,
            },
        })
    }

    fn enqueue(&mut self, ctx: &mut Ctx, id: ResourceId, req: ClaimRequest) -> Response {
        let Some(res) = self.resources.get_mut(&id) else {
            return Rejection::Stale.into();
        };
        let enqueued = ctx.revision;
        let claimant = req.claimant;
        let value_len = req.value.as_ref().map_or(0, String::len);
        let position = res.enqueue(
            enqueued,
            Waiter {
                claimant: claimant.clone(),
                demand: req.demand,
                wait_ms: req.wait_ms,
                lock_delay_ms: req.lock_delay_ms,
                value: req.value,
            },
        );
        self.tallies.waiters[slot(id.kind)] += 1;
        self.link_claim(&id, &claimant, value_len);
        ctx.emit(EventKind::Queued {
            resource: id,
            lease: claimant.lease,
            owner: claimant.owner,
            demand: req.demand,
            position,
            wait_ms: req.wait_ms,
        });
        Response::Queued { enqueued, position }
    }

    /// Releases one count of a hold (all of it if `whole`), or withdraws a queue entry when
    /// no fence is named. A named fence must match the hold's.
    pub(crate) fn release(
        &mut self,
        ctx: &mut Ctx,
        id: ResourceId,
        claimant: Claimant,
        fence: Option<Fence>,
        whole: bool,
    ) -> Response {
        let Some(res) = self.resources.get_mut(&id) else {
            return Rejection::NotHolder {
                current_fence: None,
            }
            .into();
        };
        let Some(holder) = res.holders.get_mut(&claimant) else {
            if fence.is_none() && res.queued().contains_key(&claimant) {
                return self.withdraw(ctx, id, claimant, None, CancelReason::Cancelled);
            }
            return not_holder(res);
        };
        if fence.is_some_and(|f| f != holder.fence) {
            return Rejection::NotHolder {
                current_fence: Some(holder.fence),
            }
            .into();
        }
        let fence = holder.fence;
        if !whole && holder.count > 1 {
            holder.count -= 1;
            let count = holder.count;
            ctx.emit(EventKind::CountChanged {
                resource: id,
                lease: claimant.lease,
                owner: claimant.owner,
                fence,
                count,
            });
            return Response::Released {
                released: false,
                count,
                fence,
            };
        }
        self.drop_holder(ctx, &id, &claimant, ReleaseReason::Released);
        self.settle(ctx, &id, true);
        Response::Released {
            released: true,
            count: 0,
            fence,
        }
    }

    /// Removes a queue entry (cancel, timeout). If the claim was granted meanwhile, returns
    /// the grant unchanged: a grant that races a deadline is never lost.
    pub(crate) fn withdraw(
        &mut self,
        ctx: &mut Ctx,
        id: ResourceId,
        claimant: Claimant,
        enqueued: Option<Revision>,
        reason: CancelReason,
    ) -> Response {
        let Some(res) = self.resources.get(&id) else {
            return Rejection::NotWaiting.into();
        };
        let queued = res.queued().get(&claimant).copied();
        if let Some(at) = queued.filter(|at| enqueued.is_none_or(|e| e == *at)) {
            self.drop_waiter(ctx, &id, &claimant, reason);
            self.settle(ctx, &id, false);
            return match reason {
                CancelReason::TimedOut => Response::TimedOut { enqueued: at },
                _ => Response::Cancelled { enqueued: at },
            };
        }
        match res.holders.get(&claimant) {
            Some(h) if enqueued.is_none() || h.enqueued() == enqueued => {
                Response::Granted(grant_of(&id, &claimant, h))
            }
            _ => Rejection::NotWaiting.into(),
        }
    }

    /// Admin force-release: every holder goes, a pending lock-delay ends, waiters get
    /// their turn.
    pub(crate) fn force_release(&mut self, ctx: &mut Ctx, id: ResourceId) -> Response {
        let Some(res) = self.resources.get(&id) else {
            return Rejection::LockNotFound { resource: id }.into();
        };
        let holders: Vec<Claimant> = res.holders.keys().cloned().collect();
        let delayed = res.delay().is_some();
        for claimant in &holders {
            self.drop_holder(ctx, &id, claimant, ReleaseReason::Forced);
        }
        if delayed {
            self.end_delay(ctx, &id);
        }
        self.settle(ctx, &id, true);
        Response::ForceReleased {
            holders: holders.len() as u64,
        }
    }

    /// Ends a lock-delay the leader found due; stale if the delay changed since.
    pub(crate) fn delay_elapsed(
        &mut self,
        ctx: &mut Ctx,
        id: ResourceId,
        since: Revision,
    ) -> Response {
        let due = self
            .resources
            .get(&id)
            .and_then(|r| r.delay())
            .is_some_and(|d| d.since == since);
        if !due {
            return Rejection::Stale.into();
        }
        self.end_delay(ctx, &id);
        let granted = self.settle(ctx, &id, false);
        Response::DelayEnded { granted }
    }

    /// Ends every hold and queue entry of a lease that is ending. Returns (holds, waits).
    pub(crate) fn end_claims_of(
        &mut self,
        ctx: &mut Ctx,
        lease: LeaseId,
        principal: Option<&str>,
        claims: Vec<ClaimRef>,
        end: LeaseEnd,
    ) -> (u64, u64) {
        let mut charged = 0;
        let (release_reason, cancel_reason) = match end {
            LeaseEnd::Revoked => (ReleaseReason::LeaseRevoked, CancelReason::LeaseRevoked),
            LeaseEnd::Expired => (ReleaseReason::LeaseExpired, CancelReason::LeaseExpired),
        };
        let (mut holds, mut waits) = (0, 0);
        let mut touched: Vec<(ResourceId, bool)> = Vec::new();
        for claim in claims {
            let (resource, owner) = claim.into_parts();
            let claimant = Claimant { lease, owner };
            let held = self
                .resources
                .get(&resource)
                .is_some_and(|r| r.holders.contains_key(&claimant));
            if held {
                let holder = self.drop_holder(ctx, &resource, &claimant, release_reason);
                let value_len = holder
                    .as_ref()
                    .and_then(|h| h.value.as_ref())
                    .map_or(0, |v| v.len());
                charged += crate::caller::claim_bytes(&claimant.owner, value_len);
                if end == LeaseEnd::Expired {
                    self.start_delay(
                        ctx,
                        &resource,
                        holder.map_or(0, |h| u64::from(h.lock_delay_ms)),
                    );
                }
                holds += 1;
            } else {
                let value_len = self
                    .drop_waiter(ctx, &resource, &claimant, cancel_reason)
                    .unwrap_or(0);
                charged += crate::caller::claim_bytes(&claimant.owner, value_len);
                waits += 1;
            }
            match touched.last_mut() {
                Some((last, any_held)) if *last == resource => *any_held |= held,
                _ => touched.push((resource, held)),
            }
        }
        for (resource, holder_removed) in touched {
            self.settle(ctx, &resource, holder_removed);
        }
        self.charge_claims(principal, holds + waits, charged, false);
        (holds, waits)
    }

    /// Grants waiters that fit now, announces an election's new leader, and forgets the
    /// resource if nothing is left in it. Returns the number of grants.
    pub(crate) fn settle(&mut self, ctx: &mut Ctx, id: &ResourceId, holder_removed: bool) -> u64 {
        let Some(res) = self.resources.get_mut(id) else {
            return 0;
        };
        let mut granted = 0;
        while let Some((enqueued, waiter)) = res.pop_admissible() {
            let fence = ctx.fence();
            let Waiter {
                claimant,
                demand,
                lock_delay_ms,
                value,
                ..
            } = waiter;
            ctx.emit(EventKind::Granted {
                resource: id.clone(),
                lease: claimant.lease,
                owner: claimant.owner.clone(),
                demand,
                fence,
                enqueued: Some(enqueued),
            });
            res.insert_holder(
                claimant,
                Holder {
                    demand,
                    fence,
                    count: 1,
                    enqueued: Holder::from_queue(enqueued),
                    lock_delay_ms: Holder::delay_ms(lock_delay_ms),
                    value: value.map(String::into_boxed_str),
                },
            );
            granted += 1;
        }
        let idle = res.is_idle();
        let kind = slot(id.kind);
        self.tallies.waiters[kind] -= granted;
        self.tallies.holders[kind] += granted;
        if id.kind == ResourceKind::Election && (holder_removed || granted > 0) {
            self.emit_leader(ctx, id);
        }
        if idle {
            self.resources.remove(id);
            self.tallies.resources[kind] -= 1;
        }
        granted
    }

    fn drop_holder(
        &mut self,
        ctx: &mut Ctx,
        id: &ResourceId,
        claimant: &Claimant,
        reason: ReleaseReason,
    ) -> Option<Holder> {
        let holder = self.resources.get_mut(id)?.remove_holder(claimant)?;
        self.tallies.holders[slot(id.kind)] -= 1;
        self.unlink_claim(id, claimant, holder.value.as_ref().map_or(0, |v| v.len()));
        ctx.emit(EventKind::Released {
            resource: id.clone(),
            lease: claimant.lease,
            owner: claimant.owner.clone(),
            fence: holder.fence,
            reason,
        });
        Some(holder)
    }

    fn drop_waiter(
        &mut self,
        ctx: &mut Ctx,
        id: &ResourceId,
        claimant: &Claimant,
        reason: CancelReason,
    ) -> Option<usize> {
        let (enqueued, waiter) = self
            .resources
            .get_mut(id)
            .and_then(|r| r.dequeue(claimant))?;
        self.tallies.waiters[slot(id.kind)] -= 1;
        let value_len = waiter.value.as_ref().map_or(0, String::len);
        self.unlink_claim(id, claimant, value_len);
        ctx.emit(EventKind::Cancelled {
            resource: id.clone(),
            lease: claimant.lease,
            owner: claimant.owner.clone(),
            enqueued,
            reason,
        });
        Some(value_len)
    }

    /// Starts (or extends) a lock-delay after a holder with `delay_ms > 0` was lost.
    fn start_delay(&mut self, ctx: &mut Ctx, id: &ResourceId, delay_ms: u64) {
        if delay_ms == 0 {
            return;
        }
        let Some(res) = self.resources.get_mut(id) else {
            return;
        };
        // A pending delay is extended from now by the longer of the two, never shortened.
        let delay_ms = res.delay().map_or(delay_ms, |d| d.delay_ms.max(delay_ms));
        res.set_delay(Some(LockDelay {
            since: ctx.revision,
            delay_ms,
        }));
        self.delayed.insert(id.clone());
        ctx.emit(EventKind::DelayStarted {
            resource: id.clone(),
            delay_ms,
        });
    }

    fn end_delay(&mut self, ctx: &mut Ctx, id: &ResourceId) {
        if let Some(res) = self.resources.get_mut(id) {
            res.set_delay(None);
        }
        self.delayed.remove(id);
        ctx.emit(EventKind::DelayEnded {
            resource: id.clone(),
        });
    }

    pub(crate) fn emit_leader(&self, ctx: &mut Ctx, id: &ResourceId) {
        ctx.emit(EventKind::LeaderChanged {
            election: id.name.clone(),
            leader: self.election_leader(&id.name),
        });
    }

    /// Links a new claim to its lease and charges it to the lease's principal.
    fn link_claim(&mut self, id: &ResourceId, claimant: &Claimant, value_len: usize) {
        if let Some(lease) = self.leases.get_mut(&claimant.lease) {
            lease.claims.insert(ClaimRef::new(id, &claimant.owner));
            if let Some(owner) = lease.owner.as_deref() {
                let bytes = crate::caller::claim_bytes(&claimant.owner, value_len);
                crate::caller::charge_claims_in(&mut self.usage, owner, 1, bytes, true);
            }
        }
    }

    /// Unlinks a claim that ended and gives its charge back. Lease end takes the whole set
    /// first, with the lease already gone: then there is nothing to unlink here, and
    /// [`end_claims_of`](Self::end_claims_of) gives the charge back for all of them.
    fn unlink_claim(&mut self, id: &ResourceId, claimant: &Claimant, value_len: usize) {
        if let Some(lease) = self.leases.get_mut(&claimant.lease) {
            lease.claims.remove(&ClaimRef::new(id, &claimant.owner));
            if let Some(owner) = lease.owner.as_deref() {
                let bytes = crate::caller::claim_bytes(&claimant.owner, value_len);
                crate::caller::charge_claims_in(&mut self.usage, owner, 1, bytes, false);
            }
        }
    }

    /// The current leader of an election.
    pub fn election_leader(&self, name: &str) -> Option<Leader> {
        let res = self.resources.get(&ResourceId::election(name))?;
        let (claimant, holder) = res.leader()?;
        Some(Leader {
            lease: claimant.lease,
            value: holder.value.as_deref().unwrap_or_default().to_owned(),
            fence: holder.fence,
        })
    }
}

fn reenter(
    ctx: &mut Ctx,
    id: &ResourceId,
    claimant: &Claimant,
    holder: &mut Holder,
    demand: Demand,
) -> Response {
    if holder.demand != demand {
        return Rejection::InvalidArgument {
            reason: format!("already held as {:?}", holder.demand),
        }
        .into();
    }
    // A repeated campaign by the leader is answered with its leadership, unchanged.
    if id.kind == ResourceKind::Election {
        return Response::Granted(grant_of(id, claimant, holder));
    }
    let Some(count) = holder.count.checked_add(1) else {
        return Rejection::InvalidArgument {
            reason: "re-entrant count overflow".into(),
        }
        .into();
    };
    holder.count = count;
    ctx.emit(EventKind::CountChanged {
        resource: id.clone(),
        lease: claimant.lease,
        owner: claimant.owner.clone(),
        fence: holder.fence,
        count,
    });
    Response::Granted(grant_of(id, claimant, holder))
}

pub(crate) fn grant_of(id: &ResourceId, claimant: &Claimant, holder: &Holder) -> Grant {
    Grant {
        resource: id.clone(),
        holder: holder_info(claimant, holder),
    }
}

pub(crate) fn holder_info(claimant: &Claimant, holder: &Holder) -> HolderInfo {
    HolderInfo {
        lease: claimant.lease,
        owner: claimant.owner.clone(),
        demand: holder.demand,
        fence: holder.fence,
        count: holder.count,
        value: holder.value.as_deref().map(str::to_owned),
        enqueued: holder.enqueued(),
    }
}

fn lock_held(res: &Resource) -> Response {
    Rejection::LockHeld {
        holders: res
            .holders
            .iter()
            .take(LOCK_HELD_HOLDERS_MAX)
            .map(|(c, h)| holder_info(c, h))
            .collect(),
        queue_len: res.queue().len() as u64,
        delayed: res.delay().is_some(),
    }
    .into()
}

fn not_holder(res: &Resource) -> Response {
    Rejection::NotHolder {
        current_fence: res.holders.values().map(|h| h.fence).max(),
    }
    .into()
}
