//! The leader's lease clock (spec §2). Only the leader keeps deadlines, on its monotonic
//! clock; nothing here is replicated except the commands it proposes:
//! - `LeaseExpire` when a lease's deadline passes (after re-confirming leadership),
//! - `AcquireTimeout` when a blocking acquire's wait ends,
//! - `LockDelayElapsed` when a lock-delay is over,
//! - `LeaseCheckpoint` every checkpoint interval for leases not kept alive recently.
//!
//! # Layout
//! - `deadlines.rs`: the pure bookkeeping ([`Deadlines`], `promote`, `observe`): takes
//!   `now` and the applied state as arguments, reads no clock and no environment.
//! - `port.rs`: [`ClockPort`], everything the task needs from its node (leadership, applied
//!   state and events, confirm leadership, propose); `node/lease.rs` implements it.
//! - this file: the task ([`run`]) and its settings ([`ClockConfig`], read once at start).
//!
//! Owns: the deadlines. Woken by: leadership changes (the server metrics, not the full
//! ones, which openraft sends on every turn of its loop), keepalive and remaining-TTL
//! requests, and while leader also applied events, the earliest deadline and the
//! checkpoint tick.
//! Stops: when the node's token is cancelled.

mod deadlines;
mod port;

pub(crate) use deadlines::{Expiry, KeepaliveAnswer};
pub(crate) use port::ClockPort;

use crate::config::NodeConfig;
use crate::store::AppliedBatch;
use crate::types::{ServerMetrics, leading_term};
use baton_state_machine::{Command, LeaseCheckpoint, LeaseId, Proposal};
use deadlines::{Deadlines, Due, observe, promote};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{broadcast, mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;

/// A request from the node to the clock.
pub(crate) enum ClockRequest {
    /// Reset a lease's deadline (leadership already confirmed).
    Keepalive {
        lease: LeaseId,
        ttl_ms: u64,
        reply: oneshot::Sender<KeepaliveAnswer>,
    },
    /// The reset a keepalive's answer asked for (with this mark) is committed.
    ResetCommitted { lease: LeaseId, mark: u64 },
    /// Remaining TTL on this leader's clock, if the lease is tracked.
    Remaining {
        lease: LeaseId,
        reply: oneshot::Sender<Option<u64>>,
    },
}

/// The clock's settings, fixed when the node starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ClockConfig {
    /// The most a promotion adds to a lease's recorded deadline (the longest election).
    pub(crate) election_timeout_ms: u64,
    /// How often leases not kept alive recently are checkpointed.
    pub(crate) checkpoint_interval_ms: u64,
    /// How long after a failed arming or proposal the clock tries again (a heartbeat).
    pub(crate) retry_ms: u64,
    /// How lease deadlines are set.
    pub(crate) expiry: Expiry,
}

impl ClockConfig {
    /// The settings for a node with `config`; the canary switch is read from the
    /// environment here, once.
    pub(crate) fn new(config: &NodeConfig) -> ClockConfig {
        ClockConfig {
            election_timeout_ms: config.election_timeout_max_ms,
            checkpoint_interval_ms: config.lease_checkpoint_interval_ms,
            retry_ms: config.heartbeat_ms,
            expiry: expiry_from_env(),
        }
    }
}

/// TEST ONLY: the `expire-early` canary (`hooks`) makes this server end leases early, for
/// the Jepsen harness. Never in a build without `unsafe-test-hooks`.
fn expiry_from_env() -> Expiry {
    if crate::hooks::canary() == Some(crate::hooks::Canary::ExpireEarly) {
        Expiry::UnsafeEarly
    } else {
        Expiry::OnTime
    }
}

use super::clock_now as now;

/// The clock task.
pub(crate) async fn run<P: ClockPort>(
    port: P,
    config: ClockConfig,
    mut requests: mpsc::Receiver<ClockRequest>,
    cancel: CancellationToken,
) {
    let checkpoint_every = Duration::from_millis(config.checkpoint_interval_ms);
    let retry = Duration::from_millis(config.retry_ms);
    let mut metrics = port.metrics();
    // Applied events, followed only while this node leads: a follower's clock has nothing
    // to do with them, and a subscription would wake it on every apply.
    let mut events = None;
    let mut deadlines = Deadlines::new(config.expiry);
    // The term this clock armed its deadlines in; `None` when not leader. A node that is
    // leader again in a later term re-arms: another leader may have acknowledged
    // keepalives in between.
    let mut armed_term: Option<u64> = None;
    let mut next_checkpoint = now() + checkpoint_every;
    loop {
        let leading = leading_term(&metrics.borrow_and_update());
        if let Some(term) = leading.filter(|term| armed_term != Some(*term)) {
            armed_term = None;
            // Events applied while arming arrive again through the new subscription;
            // observing them twice is harmless.
            events = Some(port.events());
            if arm(&port, &mut deadlines, config).await {
                armed_term = Some(term);
                next_checkpoint = now() + checkpoint_every;
                tracing::info!(term, leases = deadlines.lease_count(), "lease clock armed");
            }
        } else if leading.is_none() && armed_term.is_some() {
            armed_term = None;
            events = None;
            deadlines.clear();
            tracing::info!("lease clock: not leader, deadlines dropped");
        }
        let leader = armed_term.is_some();
        let wake = next_wake(
            leading.is_some(),
            leader,
            &deadlines,
            next_checkpoint,
            retry,
            now(),
        );
        // A node that is not leader has no deadline: it waits for events, requests and
        // leadership changes only (an `Instant` in the past would make every turn ready).
        let sleep = async move {
            match wake {
                Some(at) => tokio::time::sleep_until(at.into()).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = cancel.cancelled() => break,
            changed = metrics.changed() => if changed.is_err() { break },
            batch = next_batch(&mut events) => match batch {
                Ok(batch) => if leader {
                    let now = now();
                    for e in &batch.events {
                        observe(&mut deadlines, e.revision, &e.kind, now);
                    }
                },
                Err(broadcast::error::RecvError::Lagged(n)) => {
                    tracing::warn!(missed = n, "lease clock lagged; re-reading the state");
                    if leader {
                        resync(&port, &mut deadlines, config);
                    }
                }
                Err(broadcast::error::RecvError::Closed) => break,
            },
            request = requests.recv() => match request {
                Some(r) => {
                    let armed = armed_now(&metrics, armed_term);
                    answer(&port, &mut deadlines, armed, r);
                }
                None => break,
            },
            () = sleep => if leader {
                let now = now();
                if now >= next_checkpoint {
                    next_checkpoint = now + checkpoint_every;
                    let interval_ms = config.checkpoint_interval_ms;
                    propose_checkpoint(&port, &mut deadlines, now, interval_ms).await;
                }
                fire(&port, &metrics, &mut deadlines, armed_term, retry).await;
            },
        }
    }
}

/// The next applied batch, or never without a subscription.
async fn next_batch(
    events: &mut Option<broadcast::Receiver<Arc<AppliedBatch>>>,
) -> Result<Arc<AppliedBatch>, broadcast::error::RecvError> {
    match events {
        Some(events) => events.recv().await,
        None => std::future::pending().await,
    }
}

/// Arms the deadlines of a new term from the applied state. The state is read only once
/// leadership is confirmed and everything committed before this term is applied, so no
/// checkpoint of an earlier leader is missed. Returns whether the deadlines are armed.
async fn arm<P: ClockPort>(port: &P, deadlines: &mut Deadlines, config: ClockConfig) -> bool {
    deadlines.clear();
    match port.confirm_leadership().await {
        Ok(_) => {
            let now = now();
            port.query_records(|sm, records| {
                promote(deadlines, sm, records, now, config.election_timeout_ms)
            });
            true
        }
        Err(e) => {
            // At info: a leader that cannot arm leaves every lease unmeasured (bug #5).
            tracing::info!(error = %e, "lease clock: promotion not confirmed yet");
            false
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
    now: Instant,
) -> Option<Instant> {
    match (is_leader, armed) {
        (true, false) => Some(now + retry),
        (_, true) => Some(
            deadlines
                .next()
                .map_or(next_checkpoint, |n| n.min(next_checkpoint)),
        ),
        (false, false) => None,
    }
}

/// Whether the deadlines were armed in the term this node leads now.
fn armed_now(metrics: &watch::Receiver<ServerMetrics>, armed_term: Option<u64>) -> bool {
    armed_term.is_some() && leading_term(&metrics.borrow()) == armed_term
}

/// After missed events: keeps what the deadlines know, arms what they missed as if newly
/// seen.
fn resync<P: ClockPort>(port: &P, deadlines: &mut Deadlines, config: ClockConfig) {
    let now = now();
    let mut fresh = Deadlines::new(config.expiry);
    port.query_records(|sm, records| {
        promote(&mut fresh, sm, records, now, config.election_timeout_ms)
    });
    deadlines.resync(fresh);
}

fn answer<P: ClockPort>(port: &P, deadlines: &mut Deadlines, leader: bool, request: ClockRequest) {
    let now = now();
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
            let exists = port.query(|sm| sm.lease_clock_entry(lease).is_some());
            let answer = if !leader {
                KeepaliveAnswer::NotLeader
            } else if !exists {
                KeepaliveAnswer::Gone
            } else {
                deadlines.keepalive(lease, ttl_ms, now)
            };
            let _ = reply.send(answer);
        }
        ClockRequest::ResetCommitted { lease, mark } => deadlines.reset_committed(lease, mark),
        ClockRequest::Remaining { lease, reply } => {
            let _ = reply.send(deadlines.remaining_ms(lease, now));
        }
    }
}

async fn propose_checkpoint<P: ClockPort>(
    port: &P,
    deadlines: &mut Deadlines,
    now: Instant,
    interval_ms: u64,
) {
    let remaining_ms = deadlines.checkpoint(now, interval_ms);
    if remaining_ms.is_empty() {
        return;
    }
    let command = Command::LeaseCheckpoint(LeaseCheckpoint {
        remaining_ms: remaining_ms.clone(),
    });
    match port.propose_here(Proposal::from(command)).await {
        Ok(_) => deadlines.checkpoint_committed(&remaining_ms, now),
        Err(e) => tracing::warn!(error = %e, "lease checkpoint not proposed"),
    }
}

/// Proposes everything due. Leadership is re-confirmed first; a proposal that fails is
/// retried `retry` later rather than forgotten.
async fn fire<P: ClockPort>(
    port: &P,
    metrics: &watch::Receiver<ServerMetrics>,
    deadlines: &mut Deadlines,
    armed_term: Option<u64>,
    retry: Duration,
) {
    if !armed_now(metrics, armed_term) {
        // Leadership changed since the deadlines were armed: the loop re-arms first.
        return;
    }
    let due = deadlines.take_due(now());
    if due.is_empty() {
        return;
    }
    let retry_at = now() + retry;
    let confirmed = port.confirm_leadership().await;
    if let Err(e) = confirmed {
        tracing::warn!(error = %e, due = due.len(), "lease clock: leadership not confirmed");
        deadlines.requeue(due, retry_at);
        return;
    }
    if !armed_now(metrics, armed_term) {
        deadlines.requeue(due, retry_at);
        return;
    }
    let failed = propose_all(port, due).await;
    deadlines.requeue(failed, retry_at);
}

/// Proposes one command per due item, concurrently so the proposer can put them in one
/// entry. Returns the items whose proposal failed.
async fn propose_all<P: ClockPort>(port: &P, due: Vec<Due>) -> Vec<Due> {
    let mut proposals = tokio::task::JoinSet::new();
    for d in due {
        let port = port.clone();
        proposals.spawn(async move {
            let result = port.propose_here(Proposal::from(d.command())).await;
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
    failed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::NodeError;
    use crate::store::LeaseRecords;
    use baton_state_machine::{Applied, LeaseGrant, Response, StateMachine};
    use openraft::{ServerState, Vote};
    use std::sync::Mutex;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn only_a_leader_has_a_wake_up_even_with_a_checkpoint_long_past() {
        let mut d = Deadlines::default();
        let past = Instant::now();
        let now = past + ms(10_000);
        let retry = ms(100);
        // The bug this guards against: a follower woke at a checkpoint time in the past on
        // every turn of its loop, spinning a core.
        assert_eq!(next_wake(false, false, &d, past, retry, now), None);
        assert_eq!(
            next_wake(true, false, &d, past, retry, now),
            Some(now + retry),
            "a leader not yet armed retries a heartbeat later"
        );
        assert_eq!(next_wake(true, true, &d, past, retry, now), Some(past));
        d.set_lease(LeaseId(1), past - ms(1), 1_000);
        assert_eq!(
            next_wake(true, true, &d, past, retry, now),
            Some(past - ms(1))
        );
    }

    /// A node of one, standing in for `Node`: it leads while its metrics say so, applies
    /// what is proposed at once and records it.
    #[derive(Clone)]
    struct OneNode {
        metrics: Arc<watch::Sender<ServerMetrics>>,
        events: broadcast::Sender<Arc<AppliedBatch>>,
        sm: Arc<Mutex<StateMachine>>,
        proposed: Arc<Mutex<Vec<Command>>>,
    }

    impl OneNode {
        fn leading(term: u64) -> OneNode {
            let node = OneNode {
                metrics: Arc::new(
                    watch::channel(ServerMetrics {
                        id: 1,
                        ..ServerMetrics::default()
                    })
                    .0,
                ),
                events: broadcast::channel(64).0,
                sm: Arc::default(),
                proposed: Arc::default(),
            };
            node.lead(term);
            node
        }

        fn lead(&self, term: u64) {
            self.metrics.send_modify(|m| {
                m.state = ServerState::Leader;
                m.current_leader = Some(m.id);
                m.vote = Vote::new_committed(term, m.id);
            });
        }

        fn follow(&self) {
            self.metrics.send_modify(|m| {
                m.state = ServerState::Follower;
                m.current_leader = Some(2);
            });
        }

        fn apply(&self, command: Command) -> Applied {
            let applied = self.sm.lock().unwrap().apply_command(command);
            let batch = AppliedBatch {
                revision: applied.revision,
                events: applied.events.clone(),
            };
            // Nobody listens before the clock starts.
            let _ = self.events.send(Arc::new(batch));
            applied
        }

        fn grant(&self, ttl_ms: u64) -> LeaseId {
            match self
                .apply(Command::LeaseGrant(LeaseGrant { ttl_ms }))
                .response
            {
                Response::LeaseGranted { lease, .. } => lease,
                other => panic!("{other:?}"),
            }
        }

        fn expired(&self) -> Vec<LeaseId> {
            let proposed = self.proposed.lock().unwrap();
            proposed
                .iter()
                .filter_map(|c| match c {
                    Command::LeaseExpire(e) => Some(e.lease),
                    _ => None,
                })
                .collect()
        }
    }

    impl ClockPort for OneNode {
        fn metrics(&self) -> watch::Receiver<ServerMetrics> {
            self.metrics.subscribe()
        }

        fn events(&self) -> broadcast::Receiver<Arc<AppliedBatch>> {
            self.events.subscribe()
        }

        fn query<R>(&self, f: impl FnOnce(&StateMachine) -> R) -> R {
            f(&self.sm.lock().unwrap())
        }

        fn query_records<R>(&self, f: impl FnOnce(&StateMachine, &LeaseRecords) -> R) -> R {
            // No records and no term starts: every lease starts at promotion + ttl.
            f(&self.sm.lock().unwrap(), &LeaseRecords::new(now(), 0))
        }

        async fn confirm_leadership(&self) -> Result<u64, NodeError> {
            match leading_term(&self.metrics.borrow()) {
                Some(_) => Ok(0),
                None => Err(NodeError::NoLeader),
            }
        }

        async fn propose_here(&self, proposal: Proposal) -> Result<Applied, NodeError> {
            self.confirm_leadership().await?;
            self.proposed.lock().unwrap().push(proposal.command.clone());
            Ok(self.apply(proposal.command))
        }
    }

    async fn keepalive(requests: &mpsc::Sender<ClockRequest>, lease: LeaseId) -> KeepaliveAnswer {
        let (reply, answer) = oneshot::channel();
        let request = ClockRequest::Keepalive {
            lease,
            ttl_ms: 1_000,
            reply,
        };
        requests.send(request).await.unwrap();
        answer.await.unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn only_the_armed_leader_expires_leases_ttl_after_their_last_reset() {
        let node = OneNode::leading(1);
        let lease = node.grant(1_000);
        let config = ClockConfig {
            election_timeout_ms: 300,
            checkpoint_interval_ms: 60_000,
            retry_ms: 50,
            expiry: Expiry::OnTime,
        };
        let (requests, queue) = mpsc::channel(8);
        let cancel = CancellationToken::new();
        let clock = tokio::spawn(run(node.clone(), config, queue, cancel.clone()));

        tracing::info!("phase: armed on promotion; a keepalive moves the deadline");
        tokio::time::sleep(ms(500)).await;
        // Promoted: the first keepalive asks for a reset (the port commits it).
        assert!(matches!(
            keepalive(&requests, lease).await,
            KeepaliveAnswer::Ack {
                ttl_ms: 1_000,
                reset: Some(_)
            }
        ));
        tokio::time::sleep(ms(999)).await;
        assert!(
            node.expired().is_empty(),
            "not before ttl after the keepalive"
        );
        tokio::time::sleep(ms(2)).await;
        assert_eq!(node.expired(), vec![lease]);
        assert_eq!(keepalive(&requests, lease).await, KeepaliveAnswer::Gone);

        tracing::info!("phase: a follower keeps no deadline and acknowledges nothing");
        let other = node.grant(1_000);
        node.follow();
        tokio::time::sleep(ms(2_000)).await;
        assert_eq!(node.expired(), vec![lease]);
        assert_eq!(
            keepalive(&requests, other).await,
            KeepaliveAnswer::NotLeader
        );

        tracing::info!("phase: leader again in a later term, every deadline restarts at ttl");
        node.lead(2);
        tokio::time::sleep(ms(999)).await;
        assert_eq!(node.expired(), vec![lease]);
        tokio::time::sleep(ms(2)).await;
        assert_eq!(node.expired(), vec![lease, other]);

        cancel.cancel();
        clock.await.unwrap();
    }
}
