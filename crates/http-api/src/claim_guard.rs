//! The guard of a held-open acquire: it covers the whole request, from before the proposal
//! is sent to the answer, so a client that goes away at any moment leaves no queue entry
//! behind and no grant held by nobody.
//!
//! - The proposal runs in a task of its own: dropping the request cannot lose its outcome.
//!   If the client went away while it ran, the task cleans up what it made.
//! - Afterwards the guard knows the entry (queued at a revision) or the grant (its fence);
//!   dropped before the answer is sent, it cancels the entry or releases the grant.
//! - A request with an `Idempotency-Key` is kept for a grace period instead
//!   (`ApiConfig::reattach_grace_ms`): a retry with the same key on this node takes the
//!   place up again (or gets the grant). Only when no request has taken it up when the grace
//!   ends is the entry cancelled or the grant released.

use crate::auth::Authz;
use crate::convert;
use crate::error::ApiResult;
use crate::state::AppState;
use baton_state_machine::{
    Applied, Claimant, Command, Fence, LeaseId, ResourceId, Response, Revision,
};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Where a held-open acquire is, as its guard sees it.
#[derive(Clone, Copy, Debug)]
enum Stage {
    /// The acquire is being proposed; its outcome is not known yet.
    Proposing,
    /// Queued: the entry's enqueue revision.
    Queued(Revision),
    /// Granted with this fence; the client has not been answered yet.
    Granted(Fence),
    /// Answered, or nothing was made: nothing to clean up.
    Settled,
    /// The client went away while the proposal ran: the proposing task cleans up.
    Abandoned,
}

impl Stage {
    /// What a proposal's result leaves behind.
    fn after(result: &ApiResult<Applied>) -> Stage {
        match result.as_ref().map(|a| &a.response) {
            Ok(Response::Queued { enqueued, .. }) => Stage::Queued(*enqueued),
            Ok(Response::Granted(g)) => Stage::Granted(g.holder.fence),
            _ => Stage::Settled,
        }
    }
}

/// One claim: the resource, who claims, and the key the client may retry with.
#[derive(Clone)]
struct Claim {
    state: AppState,
    /// The principal the acquire is proposed for.
    authz: Authz,
    resource: ResourceId,
    claimant: Claimant,
    key: Option<String>,
}

/// Guards one held-open acquire; see the module documentation.
pub(crate) struct ClaimGuard {
    claim: Claim,
    stage: Arc<Mutex<Stage>>,
    /// Whether this request counts as a waiter of its key in [`Detached`].
    attached: bool,
}

impl ClaimGuard {
    /// A guard for a claim not yet proposed.
    pub(crate) fn new(
        state: &AppState,
        authz: &Authz,
        resource: ResourceId,
        claimant: Claimant,
        key: Option<String>,
    ) -> ClaimGuard {
        ClaimGuard {
            claim: Claim {
                state: state.clone(),
                authz: authz.clone(),
                resource,
                claimant,
                key,
            },
            stage: Arc::new(Mutex::new(Stage::Proposing)),
            attached: false,
        }
    }

    /// Proposes the acquire in a task of its own and records what it made. A retry with the
    /// key of a request whose client went away takes its place up again.
    pub(crate) async fn propose(&mut self, command: Command) -> ApiResult<Applied> {
        let claim = self.claim.clone();
        let stage = self.stage.clone();
        let task = self.claim.state.tracker.spawn(async move {
            let result = claim
                .state
                .propose(&claim.authz, claim.key.clone(), command)
                .await;
            let next = Stage::after(&result);
            let abandoned = {
                let mut now = lock(&stage);
                let abandoned = matches!(*now, Stage::Abandoned);
                if !abandoned {
                    *now = next;
                }
                abandoned
            };
            if abandoned {
                claim.clean_up(next).await;
            }
            result
        });
        let result = match task.await {
            Ok(result) => result,
            Err(_) => Err(crate::error::ApiError::shutting_down()),
        };
        if result.is_ok() {
            self.count_key();
        }
        result
    }

    /// Takes up a place an earlier request queued at `enqueued` (it answered `202`): this
    /// request now guards it as if it had queued it.
    pub(crate) fn adopt(&mut self, enqueued: Revision) {
        *lock(&self.stage) = Stage::Queued(enqueued);
        self.count_key();
    }

    /// Counts this request as a waiter of its key, so a retry with the key finds the claim.
    fn count_key(&mut self) {
        if let Some(key) = &self.claim.key {
            self.claim
                .state
                .detached
                .attach(self.claim.claimant.lease, key);
            self.attached = true;
        }
    }

    /// The client is answered (or nothing is left to clean up): disarms the guard.
    pub(crate) fn settle(mut self) {
        *lock(&self.stage) = Stage::Settled;
        self.leave();
    }

    /// Stops counting this request as a waiter of its key; `true` if others still wait.
    fn leave(&mut self) -> bool {
        match (&self.claim.key, std::mem::take(&mut self.attached)) {
            (Some(key), true) => self
                .claim
                .state
                .detached
                .leave(self.claim.claimant.lease, key),
            _ => false,
        }
    }
}

impl Drop for ClaimGuard {
    fn drop(&mut self) {
        let stage = std::mem::replace(&mut *lock(&self.stage), Stage::Abandoned);
        let others_wait = self.leave();
        if others_wait || matches!(stage, Stage::Proposing | Stage::Settled | Stage::Abandoned) {
            return;
        }
        tracing::info!(
            resource = %self.claim.resource.name,
            lease = %self.claim.claimant.lease,
            ?stage,
            "client gone before its answer"
        );
        let claim = self.claim.clone();
        self.claim
            .state
            .tracker
            .spawn(async move { claim.clean_up(stage).await });
    }
}

impl Claim {
    /// Cancels the entry or releases the grant that nobody will receive; with a key, only
    /// if no retry takes it up within the grace period.
    async fn clean_up(self, stage: Stage) {
        if matches!(stage, Stage::Queued(_) | Stage::Granted(_))
            && let Some(key) = &self.key
        {
            let Some(taken_up) = self.state.detached.detach(self.claimant.lease, key) else {
                return;
            };
            let grace = Duration::from_millis(self.state.config.reattach_grace_ms);
            tokio::select! {
                () = taken_up.cancelled() => return,
                () = tokio::time::sleep(grace) => {}
                () = self.state.shutdown.cancelled() => {}
            }
            if !self
                .state
                .detached
                .expire(self.claimant.lease, key, &taken_up)
            {
                return;
            }
        }
        match stage {
            Stage::Queued(enqueued) => self.cancel(enqueued).await,
            Stage::Granted(fence) => self.release(fence).await,
            Stage::Proposing | Stage::Settled | Stage::Abandoned => {}
        }
    }

    async fn cancel(&self, enqueued: Revision) {
        let cancel = convert::cancel_wait(&self.resource, &self.claimant, enqueued);
        match self.state.node.propose(cancel.into()).await {
            // Granted just before the cancel: release what nobody received.
            Ok(applied) => {
                if let Response::Granted(g) = applied.response {
                    self.release(g.holder.fence).await;
                }
            }
            Err(e) => tracing::warn!(error = %e, "cancel of an abandoned wait failed"),
        }
    }

    async fn release(&self, fence: Fence) {
        let command = convert::release_grant(&self.resource, &self.claimant, fence);
        if let Err(e) = self.state.node.propose(command.into()).await {
            tracing::warn!(error = %e, "release of a grant nobody received failed");
        }
    }
}

/// Held-open acquires with an `Idempotency-Key`, by lease and key: how many requests wait on
/// each, and for one whose last request went away, the token a retry cancels to take it up.
#[derive(Default)]
pub(crate) struct Detached {
    slots: Mutex<HashMap<(LeaseId, String), Slot>>,
}

#[derive(Default)]
struct Slot {
    waiters: usize,
    detached: Option<CancellationToken>,
}

impl Detached {
    /// A request now waits on (lease, key); a claim kept for the grace period is taken up.
    fn attach(&self, lease: LeaseId, key: &str) {
        let mut slots = lock(&self.slots);
        let slot = slots.entry((lease, key.to_owned())).or_default();
        slot.waiters += 1;
        if let Some(token) = slot.detached.take() {
            tracing::info!(%lease, "a retry took up a held-open acquire");
            token.cancel();
        }
    }

    /// A request stopped waiting; `true` if other requests still wait on the same claim.
    fn leave(&self, lease: LeaseId, key: &str) -> bool {
        let mut slots = lock(&self.slots);
        let id = (lease, key.to_owned());
        let Some(slot) = slots.get_mut(&id) else {
            return false;
        };
        slot.waiters = slot.waiters.saturating_sub(1);
        let others = slot.waiters > 0;
        if !others && slot.detached.is_none() {
            slots.remove(&id);
        }
        others
    }

    /// Keeps a claim nobody waits on for the grace period: the token a retry cancels, or
    /// `None` if a request waits on it already.
    fn detach(&self, lease: LeaseId, key: &str) -> Option<CancellationToken> {
        let mut slots = lock(&self.slots);
        let slot = slots.entry((lease, key.to_owned())).or_default();
        if slot.waiters > 0 {
            return None;
        }
        let token = CancellationToken::new();
        slot.detached = Some(token.clone());
        Some(token)
    }

    /// The grace period is over: forgets the claim; `false` if a retry took it up first.
    fn expire(&self, lease: LeaseId, key: &str, token: &CancellationToken) -> bool {
        let mut slots = lock(&self.slots);
        let id = (lease, key.to_owned());
        let Some(slot) = slots.get_mut(&id) else {
            return !token.is_cancelled();
        };
        if token.is_cancelled() || slot.waiters > 0 {
            return false;
        }
        slots.remove(&id);
        true
    }

    /// Claims tracked now (requests waiting with a key, or kept for their grace period).
    #[cfg(test)]
    fn len(&self) -> usize {
        lock(&self.slots).len()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_retry_takes_up_a_detached_claim_and_the_last_waiter_decides() {
        let d = Detached::default();
        let lease = LeaseId(7);
        // Two requests on one claim: the first leaving hands nothing over.
        d.attach(lease, "k");
        d.attach(lease, "k");
        assert!(d.leave(lease, "k"));
        assert!(d.detach(lease, "k").is_none(), "one still waits");
        assert!(!d.leave(lease, "k"));
        // Nobody waits: kept for the grace period, and a retry takes it up.
        let token = d.detach(lease, "k").unwrap();
        d.attach(lease, "k");
        assert!(token.is_cancelled());
        assert!(!d.expire(lease, "k", &token));
        assert!(!d.leave(lease, "k"));
        assert_eq!(d.len(), 0);
        // Nobody comes back: the grace period ends it.
        let token = d.detach(lease, "k").unwrap();
        assert!(d.expire(lease, "k", &token));
        assert_eq!(d.len(), 0);
    }
}
