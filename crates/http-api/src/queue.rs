//! Queue acquires: the one handler shared by locks, semaphores and elections, held open
//! while the request is queued. It proposes the acquire; if the request is queued, it
//! waits until this node applies the grant or removal of its entry (it is woken for that
//! entry only, `Node::wait_claim`). The deadline
//! is a replicated command (the leader's `AcquireTimeout`, or the handler's own after a
//! grace period), so a grant racing the deadline is returned as a grant. A client that goes
//! away drops the handler; its guard (`claim_guard.rs`, over the whole request) then cancels
//! the entry or releases the grant the client never saw.

use crate::auth::{Access, Authz, Namespace};
use crate::claim_guard::ClaimGuard;
use crate::convert;
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use axum::Json;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use baton_state_machine::{
    CancelReason, Claimant, Command, EventFilter, EventKind, Fence, HolderInfo, LeaseId,
    ResourceId, ResourceKind, Response, Revision, StateMachine,
};
use baton_wire::{
    AcquireRequest, CampaignRequest, ErrorDetail, GrantResponse, SemaphoreAcquireRequest,
    WaitingResponse,
};
use std::time::Duration;
use tokio::time::Instant;

/// A request that takes a place in a resource's queue.
pub(crate) trait QueueRequest {
    /// What kind of resource it queues on.
    const KIND: ResourceKind;
    /// Who asks, how long it may wait, and the command that asks for resource `name`.
    fn into_claim(self, name: String) -> Claim;
}

/// What a queue request asks for.
pub(crate) struct Claim {
    claimant: Claimant,
    wait_ms: u64,
    command: Command,
    /// The place an earlier request of this claimant took (it answered `202`).
    enqueued: Option<Revision>,
}

impl QueueRequest for AcquireRequest {
    const KIND: ResourceKind = ResourceKind::Lock;
    fn into_claim(self, name: String) -> Claim {
        let claimant = Claimant::new(LeaseId(self.lease_id), self.owner.clone());
        let (wait_ms, enqueued) = (self.wait_ms, self.enqueued.map(Revision));
        Claim {
            claimant,
            wait_ms,
            command: convert::lock_acquire(name, self),
            enqueued,
        }
    }
}

impl QueueRequest for SemaphoreAcquireRequest {
    const KIND: ResourceKind = ResourceKind::Semaphore;
    fn into_claim(self, name: String) -> Claim {
        let claimant = Claimant::new(LeaseId(self.lease_id), self.owner.clone());
        let (wait_ms, enqueued) = (self.wait_ms, self.enqueued.map(Revision));
        Claim {
            claimant,
            wait_ms,
            command: convert::semaphore_acquire(name, self),
            enqueued,
        }
    }
}

impl QueueRequest for CampaignRequest {
    const KIND: ResourceKind = ResourceKind::Election;
    fn into_claim(self, name: String) -> Claim {
        // One candidacy per lease: elections use the empty owner.
        let claimant = Claimant::new(LeaseId(self.lease_id), "");
        let (wait_ms, enqueued) = (self.wait_ms, self.enqueued.map(Revision));
        Claim {
            claimant,
            wait_ms,
            command: convert::campaign(name, self),
            enqueued,
        }
    }
}

/// How a queued claim ended.
enum Outcome {
    Granted(HolderInfo, Revision),
    TimedOut,
    Cancelled(CancelReason),
    /// The entry is gone and its grant (if any) already ended.
    Lost,
    /// Still queued when the request reached the server's hold limit: the place is kept.
    Waiting,
}

/// What a scan of the new events found.
enum Scan {
    Found(Outcome),
    Pending(Revision),
}

/// When a held-open request stops waiting.
#[derive(Clone, Copy)]
enum Until {
    /// The request's own wait (plus a grace) is over: it proposes the timeout itself if the
    /// leader's has not come.
    Timeout(Instant),
    /// The server's hold limit: answer `202` and keep the place.
    Hold(Instant),
}

impl Until {
    /// The limit for a request that waits `wait_ms`: its own deadline if the server holds
    /// a request that long, else the hold limit.
    fn of(state: &AppState, wait_ms: u64) -> Until {
        let hold_ms = state.limits().hold_ms_max;
        if wait_ms <= hold_ms {
            Until::Timeout(
                Instant::now() + Duration::from_millis(wait_ms + state.config.wait_grace_ms),
            )
        } else {
            Until::hold(state)
        }
    }

    fn hold(state: &AppState) -> Until {
        Until::Hold(Instant::now() + Duration::from_millis(state.limits().hold_ms_max))
    }

    fn at(self) -> Instant {
        match self {
            Until::Timeout(at) | Until::Hold(at) => at,
        }
    }
}

/// A queue request's answer: the grant, or (`202`) the place it keeps.
pub(crate) enum Acquired {
    /// `200`: granted.
    Granted(GrantResponse),
    /// `202`: still queued at the hold limit.
    Waiting(WaitingResponse),
}

impl IntoResponse for Acquired {
    fn into_response(self) -> axum::response::Response {
        match self {
            Acquired::Granted(grant) => Json(grant).into_response(),
            Acquired::Waiting(waiting) => (StatusCode::ACCEPTED, Json(waiting)).into_response(),
        }
    }
}

/// Acquires on the resource named `raw` (checked): proposes the request and, if it
/// queued, waits for its outcome. A request naming `enqueued` takes up that place instead.
pub(crate) async fn acquire<R: QueueRequest>(
    state: &AppState,
    authz: &Authz,
    idempotency_key: Option<String>,
    raw: &str,
    request: R,
) -> ApiResult<Acquired> {
    let name = state.checked_name(authz, Namespace::of(R::KIND), raw, Access::Write)?;
    let resource = ResourceId {
        kind: R::KIND,
        name: name.clone(),
    };
    let Claim {
        claimant,
        wait_ms,
        command,
        enqueued,
    } = request.into_claim(name);
    if let Some(enqueued) = enqueued {
        // Nothing is proposed, so the request is checked here as a proposal would be.
        command.validate(state.limits())?;
        if let Some(key) = &idempotency_key {
            state.limits().check_idempotency_key(key)?;
        }
        return take_up(state, authz, idempotency_key, &resource, claimant, enqueued).await;
    }
    if wait_ms == 0 {
        // A try-acquire is not held open: it is answered at once, and a grant whose client
        // left before the answer belongs to the lease like any answered one (its TTL bounds
        // it; a retry with the key returns it). Releasing it behind an indeterminate answer
        // would take the hold from a client that may believe it has it.
        let applied = state.propose(authz, idempotency_key, command).await?;
        return match applied.response {
            Response::Granted(g) => Ok(Acquired::Granted(grant_response(
                &resource.name,
                &g.holder,
                None,
                applied.revision,
            ))),
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
    let until = Until::of(state, wait_ms);
    let applied = guard.propose(command).await?;
    let (enqueued, position) = match applied.response {
        Response::Granted(g) => {
            let answer = grant_response(&resource.name, &g.holder, None, applied.revision);
            guard.settle();
            return Ok(Acquired::Granted(answer));
        }
        Response::Queued { enqueued, position } => (enqueued, position),
        other => {
            guard.settle();
            return Err(ApiError::internal(other));
        }
    };
    let mut counted = WaitCount::new(state, R::KIND);
    let outcome = counted.of(wait(state, authz, &resource, &claimant, enqueued, until).await)?;
    guard.settle();
    answer(
        state,
        &resource,
        &claimant,
        enqueued,
        Some(position),
        wait_ms,
        outcome,
    )
}

/// Takes up the place `claimant` queued at `enqueued` in an earlier request: waits in it
/// up to the hold limit, or answers its grant if it was granted meanwhile. Nothing is
/// proposed; a place that is gone is `not_waiting`.
async fn take_up(
    state: &AppState,
    authz: &Authz,
    idempotency_key: Option<String>,
    resource: &ResourceId,
    claimant: Claimant,
    enqueued: Revision,
) -> ApiResult<Acquired> {
    let _waiting = authz.enter(false)?;
    let (found, owner) = state
        .node
        .read(|sm| {
            (
                from_state(sm, resource, &claimant, enqueued),
                sm.lease_owner(claimant.lease).map(|o| o.map(str::to_owned)),
            )
        })
        .await?;
    match owner {
        None => return Err(crate::routes::leases::lease_not_found(claimant.lease.0)),
        Some(owner) if !authz.sees_all() && !authz.owns(owner.as_deref()) => {
            return Err(crate::routes::leases::not_yours(claimant.lease.0));
        }
        Some(_) => {}
    }
    let outcome = match found {
        Scan::Found(outcome) => outcome,
        Scan::Pending(_) => {
            let mut guard = ClaimGuard::new(
                state,
                authz,
                resource.clone(),
                claimant.clone(),
                idempotency_key,
            );
            guard.adopt(enqueued);
            let mut counted = WaitCount::new(state, resource.kind);
            let waited = wait(
                state,
                authz,
                resource,
                &claimant,
                enqueued,
                Until::hold(state),
            )
            .await;
            let outcome = counted.of(waited)?;
            guard.settle();
            outcome
        }
    };
    answer(state, resource, &claimant, enqueued, None, 0, outcome)
}

/// Counts one held-open wait by how it ended (`baton_held_open_waits_total`), once:
/// `abandoned` if the handler is dropped (the client went away) before it is told.
struct WaitCount<'a> {
    state: &'a AppState,
    kind: &'static str,
    outcome: &'static str,
}

impl<'a> WaitCount<'a> {
    fn new(state: &'a AppState, kind: ResourceKind) -> WaitCount<'a> {
        WaitCount {
            state,
            kind: kind.as_str(),
            outcome: "abandoned",
        }
    }

    /// Notes how the wait ended and passes its result on.
    fn of(&mut self, result: ApiResult<Outcome>) -> ApiResult<Outcome> {
        self.outcome = match &result {
            Ok(Outcome::Granted(..)) => "granted",
            Ok(Outcome::TimedOut) => "timed_out",
            Ok(Outcome::Cancelled(CancelReason::LeaseExpired | CancelReason::LeaseRevoked)) => {
                "lease_ended"
            }
            Ok(Outcome::Cancelled(_) | Outcome::Lost) => "cancelled",
            Ok(Outcome::Waiting) => "still_waiting",
            Err(_) => "error",
        };
        result
    }
}

impl Drop for WaitCount<'_> {
    fn drop(&mut self) {
        self.state.metrics.wait_ended(self.kind, self.outcome);
    }
}

/// The answer for how a wait in the place queued at `enqueued` ended.
fn answer(
    state: &AppState,
    resource: &ResourceId,
    claimant: &Claimant,
    enqueued: Revision,
    position: Option<u64>,
    wait_ms: u64,
    outcome: Outcome,
) -> ApiResult<Acquired> {
    match outcome {
        Outcome::Granted(holder, revision) => Ok(Acquired::Granted(grant_response(
            &resource.name,
            &holder,
            position,
            revision,
        ))),
        Outcome::Waiting => Ok(Acquired::Waiting(waiting_response(
            state, resource, enqueued,
        ))),
        Outcome::TimedOut => Err(ApiError::new(
            ErrorDetail::Timeout { wait_ms },
            format!("no grant within the wait of the place queued at revision {enqueued}"),
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

/// The `202` answer: the place queued at `enqueued` and its position now.
fn waiting_response(
    state: &AppState,
    resource: &ResourceId,
    enqueued: Revision,
) -> WaitingResponse {
    let (position, revision) = state.node.read_local(|sm| {
        let position = sm
            .lock_state(resource)
            .and_then(|s| s.queue.iter().position(|w| w.enqueued == enqueued))
            .map_or(0, |i| i as u64 + 1);
        (position, sm.revision())
    });
    WaitingResponse {
        name: resource.name.clone(),
        enqueued: enqueued.0,
        position,
        revision: revision.0,
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
    authz: &Authz,
    resource: &ResourceId,
    claimant: &Claimant,
    enqueued: Revision,
    until: Until,
) -> ApiResult<Outcome> {
    // Woken only when this entry is granted or cancelled here, not on every apply.
    let claim = state.node.wait_claim(resource.clone(), enqueued);
    let mut from = enqueued.next();
    let mut reloads = match authz {
        Authz::Principal(..) => state.auth.as_ref().map(|a| a.reloads()),
        Authz::Open => None,
    };
    loop {
        let mut ended = std::pin::pin!(claim.notified());
        // Enabled before the scan, so an outcome applied after the scan still wakes it.
        ended.as_mut().enable();
        match state
            .node
            .read_local(|sm| scan(sm, resource, claimant, enqueued, from))
        {
            Scan::Found(outcome) => return Ok(outcome),
            Scan::Pending(next) => from = next,
        }
        tokio::select! {
            () = ended => {}
            () = tokio::time::sleep_until(until.at()) => {
                return match until {
                    Until::Timeout(_) => decide_timeout(state, resource, claimant, enqueued).await,
                    // One last look: an outcome applied since the scan is answered.
                    Until::Hold(_) => Ok(match state
                        .node
                        .read_local(|sm| scan(sm, resource, claimant, enqueued, from))
                    {
                        Scan::Found(outcome) => outcome,
                        Scan::Pending(_) => Outcome::Waiting,
                    }),
                };
            }
            () = state.shutdown.cancelled() => return Err(ApiError::shutting_down()),
            () = crate::auth::reloaded(&mut reloads) => {
                // Revoked or narrowed by a reload: answered with the refusal, and the
                // queue entry is cancelled as for a client that went away.
                let now = authz.refreshed(state.auth.as_deref())?;
                now.allow(Namespace::of(resource.kind), &resource.name, Access::Write)?;
            }
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
    let waiting = state.as_ref().is_some_and(|s| {
        s.queue.iter().any(|w| {
            w.enqueued == enqueued && w.lease == claimant.lease && w.owner == claimant.owner
        })
    });
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
    let command = convert::acquire_timeout(resource, claimant, enqueued);
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
