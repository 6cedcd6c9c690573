//! The leader's lease clock (spec §2). Only the leader keeps deadlines, on its monotonic
//! clock; nothing here is replicated except the commands it proposes:
//! - `LeaseExpire` when a lease's deadline passes (after re-confirming leadership),
//! - `AcquireTimeout` when a blocking acquire's wait ends,
//! - `LockDelayElapsed` when a lock-delay is over,
//! - `LeaseCheckpoint` every checkpoint interval for leases not kept alive recently.
//!
//! On promotion every lease starts at `now + min(ttl, checkpointed remaining + election
//! timeout)`, every pending wait at `now + wait_ms` and every lock-delay at `now + delay`;
//! on demotion everything is forgotten. Keepalives reset deadlines in memory only.
//!
//! Owns: the deadlines. Woken by: applied events, leadership changes, keepalive and
//! remaining-TTL requests, the earliest deadline, the checkpoint tick.
//! Stops: when the node's token is cancelled.

use crate::node::Node;
use baton_state_machine::{
    AcquireTimeout, Command, EventKind, LeaseCheckpoint, LeaseExpire, LeaseId, LockDelayElapsed,
    Proposal, ResourceId, Revision, StateMachine,
};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;
use tokio::sync::{broadcast, mpsc, oneshot};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// The clock's answer to a keepalive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum KeepaliveAnswer {
    /// The deadline is reset to now + `ttl_ms`. If `reset_checkpoint`, a checkpoint of this
    /// lease was proposed or recorded since its last reset, and the node must commit a reset
    /// before acknowledging (or a new leader could end the lease early).
    Ack { ttl_ms: u64, reset_checkpoint: bool },
    /// The lease's expiry is already proposed.
    Gone,
    /// This node's clock is not (yet) the leader's.
    NotLeader,
}

/// A request from the node to the clock.
pub(crate) enum ClockRequest {
    /// Reset a lease's deadline (leadership already confirmed).
    Keepalive {
        lease: LeaseId,
        ttl_ms: u64,
        reply: oneshot::Sender<KeepaliveAnswer>,
    },
    /// Remaining TTL on this leader's clock, if the lease is tracked.
    Remaining {
        lease: LeaseId,
        reply: oneshot::Sender<Option<u64>>,
    },
}

/// Something that becomes due.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Due {
    Lease(LeaseId),
    Wait {
        resource: ResourceId,
        lease: LeaseId,
        owner: String,
        enqueued: Revision,
    },
    Delay {
        resource: ResourceId,
        since: Revision,
    },
}

/// TEST ONLY, the Jepsen harness's canary: with `BATON_UNSAFE_EXPIRE_EARLY=1` in the
/// environment the leader ends every lease a quarter of its TTL after each reset, breaking
/// spec §2 on purpose so the harness can show that it notices. Off unless set.
fn unsafe_expire_early() -> bool {
    static FLAG: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *FLAG.get_or_init(|| {
        let on = std::env::var_os("BATON_UNSAFE_EXPIRE_EARLY").is_some_and(|v| v == "1");
        if on {
            tracing::error!(
                "BATON_UNSAFE_EXPIRE_EARLY=1: leases expire early; this server is UNSAFE (test only)"
            );
        }
        on
    })
}

/// Deadlines keyed for rescheduling and ordered for firing. Pure bookkeeping: callers pass
/// `now`, so it is tested without a runtime.
#[derive(Default)]
pub(crate) struct Deadlines {
    order: BTreeSet<(Instant, Due)>,
    leases: BTreeMap<LeaseId, (Instant, u64)>,
    waits: BTreeMap<(ResourceId, LeaseId, String), (Instant, Revision)>,
    delays: BTreeMap<ResourceId, (Instant, Revision)>,
    /// Leases whose expiry is proposed, with their TTL: a keepalive must not resurrect them.
    expiring: BTreeMap<LeaseId, u64>,
    /// Leases with a checkpoint proposed or recorded since their last reset.
    checkpointed: BTreeSet<LeaseId>,
}

impl Deadlines {
    pub(crate) fn clear(&mut self) {
        *self = Deadlines::default();
    }

    /// Sets a lease's deadline at `at` (replacing any), with its TTL.
    pub(crate) fn set_lease(&mut self, lease: LeaseId, at: Instant, ttl_ms: u64) {
        let at = if unsafe_expire_early() {
            at.checked_sub(Duration::from_millis(ttl_ms * 3 / 4))
                .unwrap_or(at)
        } else {
            at
        };
        if let Some((old, _)) = self.leases.insert(lease, (at, ttl_ms)) {
            self.order.remove(&(old, Due::Lease(lease)));
        }
        self.order.insert((at, Due::Lease(lease)));
    }

    pub(crate) fn forget_lease(&mut self, lease: LeaseId) {
        if let Some((at, _)) = self.leases.remove(&lease) {
            self.order.remove(&(at, Due::Lease(lease)));
        }
        self.expiring.remove(&lease);
        self.checkpointed.remove(&lease);
    }

    /// A keepalive: the deadline moves to `now + ttl` unless the expiry is proposed.
    pub(crate) fn keepalive(
        &mut self,
        lease: LeaseId,
        ttl_ms: u64,
        now: Instant,
    ) -> KeepaliveAnswer {
        if self.expiring.contains_key(&lease) {
            return KeepaliveAnswer::Gone;
        }
        self.set_lease(lease, now + Duration::from_millis(ttl_ms), ttl_ms);
        KeepaliveAnswer::Ack {
            ttl_ms,
            reset_checkpoint: self.checkpointed.remove(&lease),
        }
    }

    pub(crate) fn remaining_ms(&self, lease: LeaseId, now: Instant) -> Option<u64> {
        let (at, _) = self.leases.get(&lease)?;
        Some(at.saturating_duration_since(now).as_millis() as u64)
    }

    pub(crate) fn set_wait(
        &mut self,
        resource: ResourceId,
        lease: LeaseId,
        owner: String,
        enqueued: Revision,
        at: Instant,
    ) {
        self.forget_wait(&resource, lease, &owner);
        let key = (resource.clone(), lease, owner.clone());
        self.waits.insert(key, (at, enqueued));
        let due = Due::Wait {
            resource,
            lease,
            owner,
            enqueued,
        };
        self.order.insert((at, due));
    }

    pub(crate) fn forget_wait(&mut self, resource: &ResourceId, lease: LeaseId, owner: &str) {
        let key = (resource.clone(), lease, owner.to_owned());
        if let Some((at, enqueued)) = self.waits.remove(&key) {
            let (resource, lease, owner) = key;
            let due = Due::Wait {
                resource,
                lease,
                owner,
                enqueued,
            };
            self.order.remove(&(at, due));
        }
    }

    pub(crate) fn set_delay(&mut self, resource: ResourceId, since: Revision, at: Instant) {
        if let Some((old_at, old_since)) = self.delays.insert(resource.clone(), (at, since)) {
            self.order.remove(&(
                old_at,
                Due::Delay {
                    resource: resource.clone(),
                    since: old_since,
                },
            ));
        }
        self.order.insert((at, Due::Delay { resource, since }));
    }

    pub(crate) fn forget_delay(&mut self, resource: &ResourceId) {
        if let Some((at, since)) = self.delays.remove(resource) {
            self.order.remove(&(
                at,
                Due::Delay {
                    resource: resource.clone(),
                    since,
                },
            ));
        }
    }

    /// The earliest deadline.
    pub(crate) fn next(&self) -> Option<Instant> {
        self.order.first().map(|(at, _)| *at)
    }

    /// Removes and returns everything due at `now`. Due leases are marked expiring.
    pub(crate) fn take_due(&mut self, now: Instant) -> Vec<Due> {
        let mut due = Vec::new();
        while let Some((at, _)) = self.order.first() {
            if *at > now {
                break;
            }
            let Some((_, d)) = self.order.pop_first() else {
                break;
            };
            match &d {
                Due::Lease(l) => {
                    if let Some((_, ttl_ms)) = self.leases.remove(l) {
                        self.expiring.insert(*l, ttl_ms);
                    }
                }
                Due::Wait {
                    resource,
                    lease,
                    owner,
                    ..
                } => {
                    self.waits
                        .remove(&(resource.clone(), *lease, owner.clone()));
                }
                Due::Delay { resource, .. } => {
                    self.delays.remove(resource);
                }
            }
            due.push(d);
        }
        due
    }

    /// An expiry proposal failed (e.g. leadership lost mid-way): try again at `at`.
    pub(crate) fn retry_lease(&mut self, lease: LeaseId, at: Instant) {
        // It stays marked expiring: its deadline has passed and the failed proposal may
        // still commit, so no keepalive may be acknowledged for it any more.
        if let Some(ttl_ms) = self.expiring.get(&lease).copied() {
            self.set_lease(lease, at, ttl_ms);
        }
    }

    /// Leases to checkpoint: those not kept alive within the last `interval` (remaining <
    /// ttl − interval), with their remaining TTL. Recently kept-alive leases are skipped:
    /// a new leader's `now + ttl` still ends them within ttl + interval + election timeout
    /// of their last keepalive.
    /// The leases chosen are remembered until their next keepalive.
    pub(crate) fn checkpoint(&mut self, now: Instant, interval_ms: u64) -> Vec<(LeaseId, u64)> {
        let chosen: Vec<(LeaseId, u64)> = self
            .leases
            .iter()
            .filter_map(|(lease, (at, ttl_ms))| {
                let remaining = at.saturating_duration_since(now).as_millis() as u64;
                (remaining + interval_ms < *ttl_ms).then_some((*lease, remaining))
            })
            .collect();
        self.checkpointed.extend(chosen.iter().map(|(l, _)| *l));
        chosen
    }
}

/// Starting deadlines on promotion, from the applied state.
pub(crate) fn promote(
    d: &mut Deadlines,
    sm: &StateMachine,
    now: Instant,
    election_timeout_ms: u64,
) {
    d.clear();
    for entry in sm.lease_clock() {
        let start_ms = entry.checkpoint_remaining_ms.map_or(entry.ttl_ms, |r| {
            entry.ttl_ms.min(r.saturating_add(election_timeout_ms))
        });
        d.set_lease(
            entry.lease,
            now + Duration::from_millis(start_ms),
            entry.ttl_ms,
        );
        if entry.checkpoint_remaining_ms.is_some() {
            d.checkpointed.insert(entry.lease);
        }
    }
    for w in sm.pending_waits() {
        d.set_wait(
            w.resource,
            w.lease,
            w.owner,
            w.enqueued,
            now + Duration::from_millis(w.wait_ms),
        );
    }
    for (resource, delay) in sm.pending_lock_delays() {
        d.set_delay(
            resource,
            delay.since,
            now + Duration::from_millis(delay.delay_ms),
        );
    }
}

/// Follows one applied event on the leader.
pub(crate) fn observe(d: &mut Deadlines, revision: Revision, kind: &EventKind, now: Instant) {
    match kind {
        EventKind::LeaseGranted { lease, ttl_ms } => {
            d.set_lease(*lease, now + Duration::from_millis(*ttl_ms), *ttl_ms);
        }
        EventKind::LeaseRevoked { lease } | EventKind::LeaseExpired { lease } => {
            d.forget_lease(*lease)
        }
        EventKind::Queued {
            resource,
            lease,
            owner,
            wait_ms,
            ..
        } if *wait_ms > 0 => {
            let at = now + Duration::from_millis(*wait_ms);
            d.set_wait(resource.clone(), *lease, owner.clone(), revision, at);
        }
        EventKind::Granted {
            resource,
            lease,
            owner,
            enqueued: Some(_),
            ..
        }
        | EventKind::Cancelled {
            resource,
            lease,
            owner,
            ..
        } => d.forget_wait(resource, *lease, owner),
        EventKind::DelayStarted { resource, delay_ms } => {
            d.set_delay(
                resource.clone(),
                revision,
                now + Duration::from_millis(*delay_ms),
            );
        }
        EventKind::DelayEnded { resource } => d.forget_delay(resource),
        _ => {}
    }
}

fn command_for(due: &Due) -> Command {
    match due.clone() {
        Due::Lease(lease) => Command::LeaseExpire(LeaseExpire { lease }),
        Due::Wait {
            resource,
            lease,
            owner,
            enqueued,
        } => Command::AcquireTimeout(AcquireTimeout {
            resource,
            lease,
            owner,
            enqueued,
        }),
        Due::Delay { resource, since } => {
            Command::LockDelayElapsed(LockDelayElapsed { resource, since })
        }
    }
}

/// The clock task.
pub(crate) async fn run(
    node: Node,
    mut requests: mpsc::Receiver<ClockRequest>,
    cancel: CancellationToken,
) {
    let config = node.config().clone();
    let election_ms = config.election_timeout_max_ms;
    let checkpoint_every = Duration::from_millis(config.lease_checkpoint_interval_ms);
    let mut metrics = node.raft().metrics();
    let mut events = node.sm().events();
    let mut deadlines = Deadlines::default();
    // The term this clock armed its deadlines in; `None` when not leader. A node that is
    // leader again in a later term re-arms: another leader may have acknowledged
    // keepalives in between.
    let mut armed_term: Option<u64> = None;
    let mut next_checkpoint = Instant::now() + checkpoint_every;
    let retry = Duration::from_millis(config.heartbeat_ms);
    loop {
        let (is_leader, term) = {
            let m = metrics.borrow_and_update();
            (
                m.state == openraft::ServerState::Leader && m.current_leader == Some(node.id()),
                m.current_term,
            )
        };
        if is_leader && armed_term != Some(term) {
            armed_term = None;
            deadlines.clear();
            // Read the state only once everything committed before this term is applied,
            // so no checkpoint of an earlier leader is missed. Events applied meanwhile
            // arrive again through the new subscription; observing them twice is harmless.
            events = node.sm().events();
            match node.read_index_here().await {
                Ok(_) => {
                    armed_term = Some(term);
                    node.sm()
                        .query(|sm| promote(&mut deadlines, sm, Instant::now(), election_ms));
                    next_checkpoint = Instant::now() + checkpoint_every;
                    tracing::info!(term, leases = deadlines.leases.len(), "lease clock armed");
                }
                Err(e) => tracing::debug!(error = %e, "lease clock: promotion not confirmed yet"),
            }
        } else if !is_leader && armed_term.is_some() {
            armed_term = None;
            deadlines.clear();
            tracing::info!("lease clock: not leader, deadlines dropped");
        }
        let leader = armed_term.is_some();
        let wake = next_wake(is_leader, leader, &deadlines, next_checkpoint, retry);
        // A node that is not leader has no deadline: it waits for events, requests and
        // leadership changes only (an `Instant` in the past would make every turn ready).
        let sleep = async move {
            match wake {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = cancel.cancelled() => break,
            changed = metrics.changed() => if changed.is_err() { break },
            batch = events.recv() => match batch {
                Ok(batch) => if leader {
                    let now = Instant::now();
                    for e in &batch.events {
                        observe(&mut deadlines, e.revision, &e.kind, now);
                    }
                },
                Err(broadcast::error::RecvError::Lagged(n)) => {
                    tracing::warn!(missed = n, "lease clock lagged; re-reading the state");
                    if leader {
                        resync(&node, &mut deadlines, election_ms);
                    }
                }
                Err(broadcast::error::RecvError::Closed) => break,
            },
            request = requests.recv() => match request {
                Some(r) => answer(&node, &mut deadlines, armed_now(&node, armed_term), r),
                None => break,
            },
            () = sleep => if leader {
                let now = Instant::now();
                if now >= next_checkpoint {
                    next_checkpoint = now + checkpoint_every;
                    let interval_ms = config.lease_checkpoint_interval_ms;
                    propose_checkpoint(&node, &mut deadlines, now, interval_ms).await;
                }
                fire(&node, &mut deadlines, armed_term).await;
            },
        }
    }
}

/// When the clock must wake next: a leader not yet armed retries after `retry`; an armed
/// leader at its earliest deadline or checkpoint; any other node never (`None`).
fn next_wake(
    is_leader: bool,
    armed: bool,
    deadlines: &Deadlines,
    next_checkpoint: Instant,
    retry: Duration,
) -> Option<Instant> {
    match (is_leader, armed) {
        (true, false) => Some(Instant::now() + retry),
        (_, true) => Some(
            deadlines
                .next()
                .map_or(next_checkpoint, |n| n.min(next_checkpoint)),
        ),
        (false, false) => None,
    }
}

/// Whether the deadlines were armed in the term this node leads now.
fn armed_now(node: &Node, armed_term: Option<u64>) -> bool {
    let m = node.raft().metrics();
    let m = m.borrow();
    m.state == openraft::ServerState::Leader && armed_term == Some(m.current_term)
}

fn resync(node: &Node, deadlines: &mut Deadlines, election_ms: u64) {
    // Keep what we know; arm what we missed as if newly seen.
    let now = Instant::now();
    let mut fresh = Deadlines::default();
    node.sm()
        .query(|sm| promote(&mut fresh, sm, now, election_ms));
    for (lease, (at, ttl)) in &deadlines.leases {
        if fresh.leases.contains_key(lease) {
            fresh.set_lease(*lease, *at, *ttl);
        }
    }
    fresh
        .checkpointed
        .extend(deadlines.checkpointed.iter().copied());
    fresh
        .expiring
        .extend(deadlines.expiring.iter().map(|(l, t)| (*l, *t)));
    *deadlines = fresh;
}

fn answer(node: &Node, deadlines: &mut Deadlines, leader: bool, request: ClockRequest) {
    let now = Instant::now();
    match request {
        ClockRequest::Keepalive {
            lease,
            ttl_ms,
            reply,
        } => {
            // The caller saw the lease in the state before sending; an expiry this clock
            // proposed may have been applied since (found by the Jepsen harness: the
            // keepalive was acknowledged for a lease that had just ended). Only this task
            // proposes expiries and it is here now, so the state read here is final.
            let exists = node.sm().query(|sm| sm.lease_clock_entry(lease).is_some());
            let answer = if !leader {
                KeepaliveAnswer::NotLeader
            } else if !exists {
                KeepaliveAnswer::Gone
            } else {
                deadlines.keepalive(lease, ttl_ms, now)
            };
            let _ = reply.send(answer);
        }
        ClockRequest::Remaining { lease, reply } => {
            let _ = reply.send(deadlines.remaining_ms(lease, now));
        }
    }
}

async fn propose_checkpoint(
    node: &Node,
    deadlines: &mut Deadlines,
    now: Instant,
    interval_ms: u64,
) {
    let remaining_ms = deadlines.checkpoint(now, interval_ms);
    if remaining_ms.is_empty() {
        return;
    }
    let command = Command::LeaseCheckpoint(LeaseCheckpoint { remaining_ms });
    if let Err(e) = node.propose_here(Proposal::from(command)).await {
        tracing::warn!(error = %e, "lease checkpoint not proposed");
    }
}

/// Proposes everything due. Leadership is re-confirmed first; a proposal that fails is
/// retried a heartbeat later rather than forgotten.
async fn fire(node: &Node, deadlines: &mut Deadlines, armed_term: Option<u64>) {
    if !armed_now(node, armed_term) {
        // Leadership changed since the deadlines were armed: the loop re-arms first.
        return;
    }
    let due = deadlines.take_due(Instant::now());
    if due.is_empty() {
        return;
    }
    let retry_at = Instant::now() + Duration::from_millis(node.config().heartbeat_ms);
    let confirmed = node.read_index_here().await;
    if let Err(e) = confirmed {
        tracing::warn!(error = %e, due = due.len(), "lease clock: leadership not confirmed");
        requeue(deadlines, due, retry_at);
        return;
    }
    if !armed_now(node, armed_term) {
        requeue(deadlines, due, retry_at);
        return;
    }
    // Proposed concurrently so the proposer can put them in one entry.
    let mut proposals = tokio::task::JoinSet::new();
    for d in due {
        let node = node.clone();
        proposals.spawn(async move {
            let result = node.propose_here(Proposal::from(command_for(&d))).await;
            (d, result)
        });
    }
    let mut failed = Vec::new();
    while let Some(joined) = proposals.join_next().await {
        match joined {
            Ok((_, Ok(_))) => {}
            Ok((d, Err(e))) => {
                tracing::warn!(error = %e, due = ?d, "lease clock proposal failed; will retry");
                failed.push(d);
            }
            Err(e) => tracing::error!(error = %e, "lease clock proposal task failed"),
        }
    }
    requeue(deadlines, failed, retry_at);
}

fn requeue(deadlines: &mut Deadlines, due: Vec<Due>, at: Instant) {
    for d in due {
        match d {
            Due::Lease(lease) => deadlines.retry_lease(lease, at),
            Due::Wait {
                resource,
                lease,
                owner,
                enqueued,
            } => deadlines.set_wait(resource, lease, owner, enqueued, at),
            Due::Delay { resource, since } => deadlines.set_delay(resource, since, at),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use baton_state_machine::{Demand, LockAcquire, Mode, Response};

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn grant(sm: &mut StateMachine, ttl_ms: u64) -> LeaseId {
        match sm
            .apply_command(Command::LeaseGrant(baton_state_machine::LeaseGrant {
                ttl_ms,
            }))
            .response
        {
            Response::LeaseGranted { lease, .. } => lease,
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn promotion_starts_each_lease_at_min_of_ttl_and_checkpoint_plus_election_timeout() {
        let mut sm = StateMachine::default();
        let checkpointed = grant(&mut sm, 5_000);
        let fresh = grant(&mut sm, 5_000);
        let nearly_full = grant(&mut sm, 5_000);
        sm.apply_command(Command::LeaseCheckpoint(LeaseCheckpoint {
            remaining_ms: vec![(checkpointed, 300), (nearly_full, 4_900)],
        }));
        let now = Instant::now();
        let mut d = Deadlines::default();
        promote(&mut d, &sm, now, 500);
        assert_eq!(d.remaining_ms(checkpointed, now), Some(800));
        assert_eq!(d.remaining_ms(fresh, now), Some(5_000));
        assert_eq!(
            d.remaining_ms(nearly_full, now),
            Some(5_000),
            "never beyond the TTL"
        );
        // A checkpointed lease needs a reset before its next keepalive is acknowledged.
        assert!(matches!(
            d.keepalive(checkpointed, 5_000, now),
            KeepaliveAnswer::Ack {
                reset_checkpoint: true,
                ..
            }
        ));
        assert!(matches!(
            d.keepalive(fresh, 5_000, now),
            KeepaliveAnswer::Ack {
                reset_checkpoint: false,
                ..
            }
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn only_a_leader_has_a_wake_up_even_with_a_checkpoint_long_past() {
        let mut d = Deadlines::default();
        let past = Instant::now();
        tokio::time::advance(ms(10_000)).await;
        let retry = ms(100);
        // The bug this guards against: a follower woke at a checkpoint time in the past on
        // every turn of its loop, spinning a core.
        assert_eq!(next_wake(false, false, &d, past, retry), None);
        assert_eq!(
            next_wake(true, false, &d, past, retry),
            Some(Instant::now() + retry),
            "a leader not yet armed retries a heartbeat later"
        );
        assert_eq!(next_wake(true, true, &d, past, retry), Some(past));
        d.set_lease(LeaseId(1), past - ms(1), 1_000);
        assert_eq!(next_wake(true, true, &d, past, retry), Some(past - ms(1)));
    }

    #[tokio::test(start_paused = true)]
    async fn lease_is_due_only_after_its_ttl_since_the_last_keepalive() {
        let lease = LeaseId(1);
        let mut d = Deadlines::default();
        d.set_lease(lease, Instant::now() + ms(1_000), 1_000);
        tokio::time::advance(ms(900)).await;
        d.keepalive(lease, 1_000, Instant::now());
        tokio::time::advance(ms(999)).await;
        assert!(
            d.take_due(Instant::now()).is_empty(),
            "not due before ttl after the keepalive"
        );
        tokio::time::advance(ms(1)).await;
        assert_eq!(d.take_due(Instant::now()), vec![Due::Lease(lease)]);
        // Its expiry is proposed: a keepalive must not bring it back...
        assert_eq!(
            d.keepalive(lease, 1_000, Instant::now()),
            KeepaliveAnswer::Gone
        );
        // A failed proposal is retried, and the lease stays past its deadline: the
        // failed proposal may still commit, so keepalives are still refused.
        d.retry_lease(lease, Instant::now() + ms(50));
        assert_eq!(d.next(), Some(Instant::now() + ms(50)));
        assert_eq!(
            d.keepalive(lease, 1_000, Instant::now()),
            KeepaliveAnswer::Gone
        );
        tokio::time::advance(ms(50)).await;
        assert_eq!(d.take_due(Instant::now()), vec![Due::Lease(lease)]);
    }

    #[tokio::test(start_paused = true)]
    async fn checkpoint_skips_leases_kept_alive_within_the_interval() {
        let lease = LeaseId(1);
        let mut d = Deadlines::default();
        d.keepalive(lease, 5_000, Instant::now());
        tokio::time::advance(ms(1_000)).await;
        assert!(d.checkpoint(Instant::now(), 2_000).is_empty());
        tokio::time::advance(ms(2_500)).await;
        assert_eq!(d.checkpoint(Instant::now(), 2_000), vec![(lease, 1_500)]);
        assert!(matches!(
            d.keepalive(lease, 5_000, Instant::now()),
            KeepaliveAnswer::Ack {
                reset_checkpoint: true,
                ..
            }
        ));
        assert!(matches!(
            d.keepalive(lease, 5_000, Instant::now()),
            KeepaliveAnswer::Ack {
                reset_checkpoint: false,
                ..
            }
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn waits_and_delays_are_armed_by_events_and_disarmed_by_grants() {
        let mut d = Deadlines::default();
        let now = Instant::now();
        let resource = ResourceId::lock("L");
        let queued = EventKind::Queued {
            resource: resource.clone(),
            lease: LeaseId(2),
            owner: "w".into(),
            demand: Demand::Exclusive,
            position: 1,
            wait_ms: 300,
        };
        observe(&mut d, Revision(7), &queued, now);
        assert_eq!(d.next(), Some(now + ms(300)));
        let granted = EventKind::Granted {
            resource: resource.clone(),
            lease: LeaseId(2),
            owner: "w".into(),
            demand: Demand::Exclusive,
            fence: baton_state_machine::Fence(9),
            enqueued: Some(Revision(7)),
        };
        observe(&mut d, Revision(9), &granted, now);
        assert_eq!(d.next(), None, "a granted wait needs no timeout");
        observe(&mut d, Revision(7), &queued, now);
        tokio::time::advance(ms(300)).await;
        let due = d.take_due(Instant::now());
        assert!(matches!(
            command_for(&due[0]),
            Command::AcquireTimeout(AcquireTimeout {
                enqueued: Revision(7),
                ..
            })
        ));
        let delay = EventKind::DelayStarted {
            resource: resource.clone(),
            delay_ms: 100,
        };
        observe(&mut d, Revision(12), &delay, Instant::now());
        observe(
            &mut d,
            Revision(13),
            &EventKind::DelayEnded {
                resource: resource.clone(),
            },
            Instant::now(),
        );
        assert_eq!(d.next(), None);
        observe(&mut d, Revision(14), &delay, Instant::now());
        tokio::time::advance(ms(100)).await;
        let due = d.take_due(Instant::now());
        assert!(matches!(
            command_for(&due[0]),
            Command::LockDelayElapsed(LockDelayElapsed {
                since: Revision(14),
                ..
            })
        ));
        let _ = (Mode::Exclusive, std::any::type_name::<LockAcquire>());
    }
}
