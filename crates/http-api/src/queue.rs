//! Queue acquires: the one handler shared by locks, semaphores and elections, held open
//! while the request is queued. It proposes the acquire; if the request is queued, it
//! follows this node's applied events until its entry is granted or removed. The deadline
//! is a replicated command (the leader's `AcquireTimeout`, or the handler's own after a
//! grace period), so a grant racing the deadline is returned as a grant. A client that goes
//! away drops the handler; its guard (`claim_guard.rs`, over the whole request) then cancels
//! the entry or releases the grant the client never saw.

use crate::auth::{Access, Authz, Namespace};
use crate::claim_guard::ClaimGuard;
use crate::convert;
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use baton_state_machine::{
    AcquireTimeout, Campaign, CancelReason, Claimant, Command, EventFilter, EventKind, Fence,
    HolderInfo, LeaseId, LockAcquire, Mode, ResourceId, ResourceKind, Response, Revision,
    SemaphoreAcquire, StateMachine,
};
use baton_wire::{
    AcquireRequest, CampaignRequest, ErrorDetail, GrantResponse, SemaphoreAcquireRequest,
};
use std::time::Duration;
use tokio::time::Instant;

/// A request that takes a place in a resource's queue.
pub(crate) trait QueueRequest {
    /// What kind of resource it queues on.
    const KIND: ResourceKind;
    /// Who asks, how long it may wait, and the command that asks for resource `name`.
    fn into_claim(self, name: String) -> (Claimant, u64, Command);
}

impl QueueRequest for AcquireRequest {
    const KIND: ResourceKind = ResourceKind::Lock;
    fn into_claim(self, name: String) -> (Claimant, u64, Command) {
        let claimant = Claimant::new(LeaseId(self.lease_id), self.owner.clone());
        let command = Command::LockAcquire(LockAcquire {
            name,
            lease: LeaseId(self.lease_id),
            owner: self.owner,
            mode: match self.mode {
                baton_wire::Mode::Exclusive => Mode::Exclusive,
                baton_wire::Mode::Shared => Mode::Shared,
            },
            wait_ms: self.wait_ms,
            lock_delay_ms: self.lock_delay_ms,
        });
        (claimant, self.wait_ms, command)
    }
}

impl QueueRequest for SemaphoreAcquireRequest {
    const KIND: ResourceKind = ResourceKind::Semaphore;
    fn into_claim(self, name: String) -> (Claimant, u64, Command) {
        let claimant = Claimant::new(LeaseId(self.lease_id), self.owner.clone());
        let command = Command::SemaphoreAcquire(SemaphoreAcquire {
            name,
            lease: LeaseId(self.lease_id),
            owner: self.owner,
            limit: self.limit,
            permits: self.permits,
            wait_ms: self.wait_ms,
        });
        (claimant, self.wait_ms, command)
    }
}

impl QueueRequest for CampaignRequest {
    const KIND: ResourceKind = ResourceKind::Election;
    fn into_claim(self, name: String) -> (Claimant, u64, Command) {
        // One candidacy per lease: elections use the empty owner.
        let claimant = Claimant::new(LeaseId(self.lease_id), "");
        let command = Command::Campaign(Campaign {
            name,
            lease: LeaseId(self.lease_id),
            value: self.value,
            wait_ms: self.wait_ms,
        });
        (claimant, self.wait_ms, command)
    }
}

/// How a queued claim ended.
enum Outcome {
    Granted(HolderInfo, Revision),
    TimedOut,
    Cancelled(CancelReason),
    /// The entry is gone and its grant (if any) already ended.
    Lost,
}

/// What a scan of the new events found.
enum Scan {
    Found(Outcome),
    Pending(Revision),
}

/// Acquires on the resource named `raw` (checked): proposes the request and, if it
/// queued, waits for its outcome.
pub(crate) async fn acquire<R: QueueRequest>(
    state: &AppState,
    authz: &Authz,
    idempotency_key: Option<String>,
    raw: &str,
    request: R,
) -> ApiResult<GrantResponse> {
    let name = state.checked_name(authz, Namespace::of(R::KIND), raw, Access::Write)?;
    let resource = ResourceId {
        kind: R::KIND,
        name: name.clone(),
    };
    let (claimant, wait_ms, command) = request.into_claim(name);
    if wait_ms == 0 {
        // A try-acquire is not held open: it is answered at once, and a grant whose client
        // left before the answer belongs to the lease like any answered one (its TTL bounds
        // it; a retry with the key returns it). Releasing it behind an indeterminate answer
        // would take the hold from a client that may believe it has it.
        let applied = state.propose(authz, idempotency_key, command).await?;
        return match applied.response {
            Response::Granted(g) => Ok(grant_response(
                &resource.name,
                &g.holder,
                None,
                applied.revision,
            )),
            other => Err(ApiError::internal(other)),
        };
    }
    // Counted against the principal's held-open waits on this node until answered.
    let _waiting = authz.enter(false)?;
    let mut guard = ClaimGuard::new(
        state,
        authz,
        resource.clone(),
        claimant.clone(),
        idempotency_key,
    );
    let applied = guard.propose(command).await?;
    let (enqueued, position) = match applied.response {
        Response::Granted(g) => {
            let answer = grant_response(&resource.name, &g.holder, None, applied.revision);
            guard.settle();
            return Ok(answer);
        }
        Response::Queued { enqueued, position } => (enqueued, position),
        other => {
            guard.settle();
            return Err(ApiError::internal(other));
        }
    };
    let outcome = wait(state, &resource, &claimant, enqueued, wait_ms).await?;
    guard.settle();
    match outcome {
        Outcome::Granted(holder, revision) => Ok(grant_response(
            &resource.name,
            &holder,
            Some(position),
            revision,
        )),
        Outcome::TimedOut => Err(ApiError::new(
            ErrorDetail::Timeout { wait_ms },
            format!("no grant within {wait_ms} ms"),
        )),
        Outcome::Cancelled(CancelReason::LeaseExpired | CancelReason::LeaseRevoked) => {
            Err(ApiError::new(
                ErrorDetail::LeaseNotFound,
                format!("lease {} ended while waiting", claimant.lease),
            ))
        }
        Outcome::Cancelled(_) | Outcome::Lost => {
            Err(baton_state_machine::Rejection::NotWaiting.into())
        }
    }
}

/// The answer for a grant.
fn grant_response(
    name: &str,
    holder: &HolderInfo,
    queued_position: Option<u64>,
    revision: Revision,
) -> GrantResponse {
    let mut holder = convert::holder(holder);
    if baton_raft_node::hooks::canary() == Some(baton_raft_node::hooks::Canary::DuplicateFence) {
        holder.fence = duplicate_fence(name, holder.fence);
        holder.since_revision = holder.fence;
    }
    GrantResponse {
        name: name.to_owned(),
        holder,
        queued_position,
        revision: revision.0,
    }
}

/// TEST ONLY, the `duplicate-fence` canary: every fifth grant this node answers for a
/// resource carries the fence of the grant before it.
fn duplicate_fence(name: &str, fence: u64) -> u64 {
    static SEEN: std::sync::Mutex<Option<std::collections::HashMap<String, (u64, u64)>>> =
        std::sync::Mutex::new(None);
    let mut seen = SEEN.lock().unwrap_or_else(|p| p.into_inner());
    let (count, last) = seen
        .get_or_insert_with(Default::default)
        .entry(name.to_owned())
        .or_insert((0, fence));
    *count += 1;
    let answer = if *count % 5 == 0 { *last } else { fence };
    *last = fence;
    answer
}

async fn wait(
    state: &AppState,
    resource: &ResourceId,
    claimant: &Claimant,
    enqueued: Revision,
    wait_ms: u64,
) -> ApiResult<Outcome> {
    let deadline = Instant::now() + Duration::from_millis(wait_ms + state.config.wait_grace_ms);
    let mut progress = state.node.progress();
    let mut from = enqueued.next();
    loop {
        progress.borrow_and_update();
        match state
            .node
            .read_local(|sm| scan(sm, resource, claimant, enqueued, from))
        {
            Scan::Found(outcome) => return Ok(outcome),
            Scan::Pending(next) => from = next,
        }
        tokio::select! {
            changed = progress.changed() => if changed.is_err() { return Err(ApiError::shutting_down()) },
            () = tokio::time::sleep_until(deadline) => {
                return decide_timeout(state, resource, claimant, enqueued).await;
            }
            () = state.shutdown.cancelled() => return Err(ApiError::shutting_down()),
        }
    }
}

/// Looks for the entry's outcome in the events after `from`; falls back to the state if
/// the window no longer holds them.
fn scan(
    sm: &StateMachine,
    resource: &ResourceId,
    claimant: &Claimant,
    enqueued: Revision,
    from: Revision,
) -> Scan {
    let filter = EventFilter::Resource(resource.clone());
    let Ok(events) = sm.events_since(from, &filter, usize::MAX) else {
        return from_state(sm, resource, claimant, enqueued);
    };
    for event in &events {
        match &event.kind {
            EventKind::Granted {
                lease,
                owner,
                enqueued: Some(at),
                fence,
                ..
            } if *at == enqueued && *lease == claimant.lease && *owner == claimant.owner => {
                return Scan::Found(current_grant(sm, resource, claimant, Some(*fence)));
            }
            EventKind::Cancelled {
                enqueued: at,
                lease,
                owner,
                reason,
                ..
            } if *at == enqueued && *lease == claimant.lease && *owner == claimant.owner => {
                return Scan::Found(match reason {
                    CancelReason::TimedOut => Outcome::TimedOut,
                    other => Outcome::Cancelled(*other),
                });
            }
            _ => {}
        }
    }
    Scan::Pending(sm.revision().next())
}

fn from_state(
    sm: &StateMachine,
    resource: &ResourceId,
    claimant: &Claimant,
    enqueued: Revision,
) -> Scan {
    let state = sm.lock_state(resource);
    let waiting = state
        .as_ref()
        .is_some_and(|s| s.queue.iter().any(|w| w.enqueued == enqueued));
    if waiting {
        return Scan::Pending(sm.revision().next());
    }
    let holder = state.and_then(|s| {
        s.holders.into_iter().find(|h| {
            h.lease == claimant.lease && h.owner == claimant.owner && h.enqueued == Some(enqueued)
        })
    });
    match holder {
        Some(h) => Scan::Found(Outcome::Granted(h, sm.revision())),
        None => Scan::Found(Outcome::Lost),
    }
}

/// The claimant's hold now, if it is still the grant with `fence`.
fn current_grant(
    sm: &StateMachine,
    resource: &ResourceId,
    claimant: &Claimant,
    fence: Option<Fence>,
) -> Outcome {
    let holder = sm.lock_state(resource).and_then(|s| {
        s.holders.into_iter().find(|h| {
            h.lease == claimant.lease
                && h.owner == claimant.owner
                && fence.is_none_or(|f| h.fence == f)
        })
    });
    match holder {
        Some(h) => Outcome::Granted(h, sm.revision()),
        None => Outcome::Lost,
    }
}

/// The leader's timeout did not arrive in time (a failover, a slow leader): propose it.
/// The state machine decides atomically between the grant and the timeout.
async fn decide_timeout(
    state: &AppState,
    resource: &ResourceId,
    claimant: &Claimant,
    enqueued: Revision,
) -> ApiResult<Outcome> {
    let command = Command::AcquireTimeout(AcquireTimeout {
        resource: resource.clone(),
        lease: claimant.lease,
        owner: claimant.owner.clone(),
        enqueued,
    });
    let applied = state.node.propose(command.into()).await?;
    Ok(match applied.response {
        Response::TimedOut { .. } => Outcome::TimedOut,
        Response::Granted(g) => Outcome::Granted(g.holder, applied.revision),
        // Decided by someone else just now: read what happened.
        _ => match state
            .node
            .read_local(|sm| from_state(sm, resource, claimant, enqueued))
        {
            Scan::Found(outcome) => outcome,
            Scan::Pending(_) => Outcome::Lost,
        },
    })
}
