//! Group commit. openraft 0.9 writes and flushes one entry per `client_write`, so the
//! proposer gathers queued proposals into one `Batch` entry (bounded by count and bytes)
//! and keeps up to `batches_in_flight_max` entries in flight.
//!
//! The proposer never hands out a result: each proposal carries the id of the request
//! waiting for it, and the apply answers that request (`store::waiting`). The proposer
//! tells each proposal's submitter only where its entry landed, from openraft's answer:
//! the committed log id, or why there is none (not the leader, or outcome unknown).
//!
//! openraft answers an entry when it applies it or truncates it, and never when a snapshot
//! install covers it: the uncommitted entries of a leader that was cut off, then caught up
//! through a snapshot, are never answered (bug #5). So an entry in flight holds its place in
//! the pipeline for at most `answer_within`; its submitters then learn that its outcome is
//! unknown (it may still commit, as after any timeout).
//!
//! Owns: the proposal queue. Woken by: a proposal arriving, a batch completing or timing
//! out. Stops: when the node's token is cancelled; queued submitters then get `Stopped`.

use crate::error::NodeError;
use crate::stats::NodeStats;
use crate::types::{Batch, ClientWriteError, LogId, Raft, RequestId, TypeConfig};
use baton_state_machine::Proposal;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Semaphore, mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// What openraft eventually says about one entry.
pub(crate) type WriteAnswer =
    Result<openraft::raft::ClientWriteResponse<TypeConfig>, ClientWriteError>;

/// Where batches go: openraft's `client_write_ff` (or a test double).
pub(crate) trait Log: Send + 'static {
    /// Appends `batch` as one entry; the receiver gets its answer. `Err` means Raft stopped.
    fn write(
        &self,
        batch: Batch,
    ) -> impl Future<Output = Result<oneshot::Receiver<WriteAnswer>, String>> + Send;
}

impl Log for Raft {
    async fn write(&self, batch: Batch) -> Result<oneshot::Receiver<WriteAnswer>, String> {
        self.client_write_ff(batch).await.map_err(|e| e.to_string())
    }
}

/// Where a proposal's entry landed: committed and applied at that log id, or why not.
pub(crate) type Landed = Result<LogId, NodeError>;

/// A proposal waiting for its entry.
pub(crate) struct Pending {
    /// The request that waits for its result (on this node or on the follower that
    /// forwarded it).
    pub(crate) id: RequestId,
    /// The proposal.
    pub(crate) proposal: Proposal,
    /// Its encoded size, counted against `BatchBounds::bytes_max`.
    pub(crate) bytes: usize,
    /// Where its entry's fate goes.
    pub(crate) landed: oneshot::Sender<Landed>,
    /// It is an acquire that will only join a queue (`StateMachine::joins_queue`): it may
    /// wait up to `BatchBounds::queue_join_hold` for company.
    pub(crate) joins_queue: bool,
}

/// Bounds of one batch and of the pipeline.
#[derive(Clone, Copy)]
pub(crate) struct BatchBounds {
    /// Proposals in one entry.
    pub(crate) proposals_max: usize,
    /// Encoded bytes of proposals in one entry (a bigger single proposal goes alone).
    pub(crate) bytes_max: usize,
    /// Entries proposed whose outcome is not known yet.
    pub(crate) in_flight_max: usize,
    /// How long an entry in flight may hold its place before its callers are told that
    /// its outcome is unknown.
    pub(crate) answer_within: Duration,
    /// How long an entry made only of acquires that will join a queue waits, once it could
    /// go, for a proposal of another kind to carry with it (zero: it goes at once).
    pub(crate) queue_join_hold: Duration,
}

/// The proposer task: batches the queue into entries until `cancel`.
pub(crate) async fn run<L: Log>(
    log: L,
    mut queue: mpsc::Receiver<Pending>,
    bounds: BatchBounds,
    stats: NodeStats,
    tracker: TaskTracker,
    cancel: CancellationToken,
) {
    let in_flight = Arc::new(Semaphore::new(bounds.in_flight_max));
    let mut carry: Option<Pending> = None;
    loop {
        let first = match carry.take() {
            Some(p) => p,
            None => tokio::select! {
                p = queue.recv() => match p { Some(p) => p, None => break },
                () = cancel.cancelled() => break,
            },
        };
        // Wait for room in the pipeline first: proposals keep queueing meanwhile, so a
        // busy node sends fuller batches.
        let permit = tokio::select! {
            p = in_flight.clone().acquire_owned() => match p { Ok(p) => p, Err(_) => break },
            () = cancel.cancelled() => { stop(first); break }
        };
        let mut bytes = first.bytes;
        let mut batch = vec![first];
        while batch.len() < bounds.proposals_max {
            let Ok(next) = queue.try_recv() else { break };
            if !admit(&mut batch, &mut bytes, &mut carry, next, bounds) {
                break;
            }
        }
        // An acquire that will only join a queue cannot be granted before some other
        // command changes its resource, typically the holder's release, which is often a
        // few microseconds behind it. Hold such an entry briefly so that the release goes
        // in it instead of waiting for its commit (decision #138).
        if carry.is_none() && batch.iter().all(|p| p.joins_queue) {
            let until = tokio::time::Instant::now() + bounds.queue_join_hold;
            while batch.len() < bounds.proposals_max {
                let next = tokio::select! {
                    p = queue.recv() => p,
                    () = tokio::time::sleep_until(until) => break,
                    () = cancel.cancelled() => break,
                };
                let Some(next) = next else { break };
                let urgent = !next.joins_queue;
                if !admit(&mut batch, &mut bytes, &mut carry, next, bounds) || urgent {
                    break;
                }
            }
        }
        let mut proposals = Vec::with_capacity(batch.len());
        let mut landed = Vec::with_capacity(batch.len());
        for p in batch {
            proposals.push((p.id, p.proposal));
            landed.push(p.landed);
        }
        tracing::trace!(proposals = proposals.len(), bytes, "proposing a batch");
        stats.proposals_per_entry.observe(proposals.len() as f64);
        let started = std::time::Instant::now();
        match log.write(Batch { proposals }).await {
            Ok(receiver) => {
                let within = bounds.answer_within;
                let commit_seconds = stats.commit_seconds.clone();
                tracker.spawn(async move {
                    let outcome = tokio::time::timeout(within, receiver).await.ok();
                    if matches!(outcome, Some(Ok(Ok(_)))) {
                        commit_seconds.observe(started.elapsed().as_secs_f64());
                    }
                    report(outcome, within, landed);
                    drop(permit);
                });
            }
            Err(fatal) => {
                tracing::warn!(%fatal, "raft stopped; refusing proposals");
                for to in landed {
                    let _ = to.send(Err(NodeError::Stopped));
                }
                break;
            }
        }
    }
    if let Some(p) = carry {
        stop(p);
    }
    queue.close();
    while let Ok(p) = queue.try_recv() {
        stop(p);
    }
}

/// Adds `next` to `batch` if it fits in `bounds.bytes_max`; otherwise keeps it in `carry`
/// for the next entry and says the batch is full.
fn admit(
    batch: &mut Vec<Pending>,
    bytes: &mut usize,
    carry: &mut Option<Pending>,
    next: Pending,
    bounds: BatchBounds,
) -> bool {
    if *bytes + next.bytes > bounds.bytes_max {
        *carry = Some(next);
        return false;
    }
    *bytes += next.bytes;
    batch.push(next);
    true
}

fn stop(pending: Pending) {
    let _ = pending.landed.send(Err(NodeError::Stopped));
}

/// An entry's answer, `None` if none came in time.
type WriteOutcome = Option<Result<WriteAnswer, oneshot::error::RecvError>>;

/// Tells each submitter of an entry where it landed, from openraft's `outcome`.
fn report(outcome: WriteOutcome, within: Duration, landed: Vec<oneshot::Sender<Landed>>) {
    let fate = match outcome {
        Some(Ok(Ok(response))) => Ok(response.log_id),
        // openraft says this both when it refuses an entry (not the leader) and when it
        // truncates an uncommitted one, which may still commit on a node that holds a copy
        // and wins the next election: sending the proposal again could apply it twice. The
        // submitter checked leadership before handing it over (`Node::submit`), so it is
        // the second case or a step-down in between: unknown, and the apply answers the
        // request if the entry commits after all.
        Some(Ok(Err(ClientWriteError::ForwardToLeader(f)))) => {
            Err(NodeError::Indeterminate(format!(
                "the leader stepped down before the entry committed (leader now: {:?}); it may still commit",
                f.leader_id
            )))
        }
        Some(Ok(Err(other))) => Err(NodeError::Indeterminate(other.to_string())),
        // Raft dropped the responder: the entry may still commit elsewhere.
        Some(Err(_)) => Err(NodeError::Indeterminate(
            "raft dropped the write before answering".into(),
        )),
        None => {
            tracing::warn!(
                proposals = landed.len(),
                within_ms = within.as_millis() as u64,
                "raft did not answer an entry in time; its outcome is unknown"
            );
            Err(NodeError::Indeterminate(format!(
                "raft did not answer the entry within {} ms",
                within.as_millis()
            )))
        }
    };
    for to in landed {
        // A submitter that gave up is fine.
        let _ = to.send(fate.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use baton_state_machine::{Command, LeaseGrant};
    use std::sync::Mutex;

    /// A log that never answers its first entry (as openraft does for an entry a snapshot
    /// install covered) and answers every later one `ForwardToLeader`, as openraft does
    /// when it truncates an uncommitted entry.
    #[derive(Default)]
    struct Forgetful {
        kept: Arc<Mutex<Vec<oneshot::Sender<WriteAnswer>>>>,
    }

    impl Log for Forgetful {
        fn write(
            &self,
            _batch: Batch,
        ) -> impl Future<Output = Result<oneshot::Receiver<WriteAnswer>, String>> + Send {
            let (tx, rx) = oneshot::channel();
            let mut kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
            if kept.is_empty() {
                kept.push(tx);
            } else {
                let refused =
                    ClientWriteError::ForwardToLeader(openraft::error::ForwardToLeader::empty());
                let _ = tx.send(Err(refused));
            }
            async move { Ok(rx) }
        }
    }

    /// A log that keeps every entry unanswered and records its size and when it came.
    #[derive(Default, Clone)]
    struct Recording {
        entries: Arc<Mutex<Vec<(usize, tokio::time::Instant)>>>,
        kept: Arc<Mutex<Vec<oneshot::Sender<WriteAnswer>>>>,
    }

    impl Recording {
        fn entries(&self) -> Vec<(usize, tokio::time::Instant)> {
            self.entries
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone()
        }
    }

    impl Log for Recording {
        fn write(
            &self,
            batch: Batch,
        ) -> impl Future<Output = Result<oneshot::Receiver<WriteAnswer>, String>> + Send {
            let (tx, rx) = oneshot::channel();
            self.entries
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push((batch.proposals.len(), tokio::time::Instant::now()));
            self.kept.lock().unwrap_or_else(|p| p.into_inner()).push(tx);
            async move { Ok(rx) }
        }
    }

    fn propose(queue: &mpsc::Sender<Pending>) -> oneshot::Receiver<Landed> {
        propose_as(queue, false)
    }

    fn propose_as(queue: &mpsc::Sender<Pending>, joins_queue: bool) -> oneshot::Receiver<Landed> {
        let (landed, fate) = oneshot::channel();
        let proposal = Proposal::from(Command::LeaseGrant(LeaseGrant { ttl_ms: 1_000 }));
        queue
            .try_send(Pending {
                id: RequestId::NOBODY,
                proposal,
                bytes: 8,
                landed,
                joins_queue,
            })
            .expect("room in the queue");
        fate
    }

    /// A log that commits each entry at once at index 7.
    struct Committing;

    impl Log for Committing {
        fn write(
            &self,
            _batch: Batch,
        ) -> impl Future<Output = Result<oneshot::Receiver<WriteAnswer>, String>> + Send {
            let (tx, rx) = oneshot::channel();
            let _ = tx.send(Ok(openraft::raft::ClientWriteResponse {
                log_id: LogId::new(openraft::CommittedLeaderId::new(1, 1), 7),
                data: crate::types::BatchReply,
                membership: None,
            }));
            async move { Ok(rx) }
        }
    }

    /// Every submitter of an entry learns where it landed.
    #[tokio::test]
    async fn each_submitter_learns_where_its_entry_landed() {
        let (queue, cancel, task) = start(Committing);
        // Both are queued before the proposer first runs (one thread): one entry.
        let fates = [propose(&queue), propose(&queue)];
        for fate in fates {
            let log_id = fate.await.expect("told").expect("landed");
            assert_eq!(log_id.index, 7);
        }
        cancel.cancel();
        task.await.expect("the proposer stops");
    }

    /// Long beside tokio's 1 ms timer resolution.
    const HOLD: Duration = Duration::from_millis(40);

    /// Starts a proposer on `log` with one entry in flight and [`HOLD`].
    fn start<L: Log>(
        log: L,
    ) -> (
        mpsc::Sender<Pending>,
        CancellationToken,
        tokio::task::JoinHandle<()>,
    ) {
        let (queue, receiver) = mpsc::channel(8);
        let bounds = BatchBounds {
            proposals_max: 16,
            bytes_max: 1 << 20,
            in_flight_max: 1,
            answer_within: Duration::from_secs(60),
            queue_join_hold: HOLD,
        };
        let cancel = CancellationToken::new();
        let task = tokio::spawn(run(
            log,
            receiver,
            bounds,
            NodeStats::default(),
            TaskTracker::new(),
            cancel.clone(),
        ));
        (queue, cancel, task)
    }

    /// An acquire that will only queue waits for the release behind it, and both go in
    /// one entry as soon as the release arrives, without waiting out the hold.
    #[tokio::test(start_paused = true)]
    async fn a_queued_acquire_waits_for_the_release_behind_it() {
        let log = Recording::default();
        let (queue, cancel, task) = start(log.clone());
        let started = tokio::time::Instant::now();
        let _acquire = propose_as(&queue, true);
        tokio::time::sleep(HOLD / 4).await;
        assert!(log.entries().is_empty(), "the acquire is held");
        let _release = propose_as(&queue, false);
        tokio::time::sleep(HOLD / 8).await;
        let entries = log.entries();
        assert_eq!(entries.len(), 1, "{entries:?}");
        assert_eq!(
            entries[0].0,
            2,
            "the acquire and the release share the entry: {:?}",
            entries[0].1 - started
        );
        assert!(
            entries[0].1 - started < HOLD / 2,
            "sent when the release came"
        );
        cancel.cancel();
        task.await.expect("the proposer stops");
    }

    /// With nothing else to carry, acquires that will only queue go together once the
    /// hold has passed; any other proposal goes at once.
    #[tokio::test(start_paused = true)]
    async fn queued_acquires_alone_go_after_the_hold_and_others_at_once() {
        let log = Recording::default();
        let (queue, cancel, task) = start(log.clone());
        let started = tokio::time::Instant::now();
        let _first = propose_as(&queue, true);
        let _second = propose_as(&queue, true);
        tokio::time::sleep(HOLD * 3).await;
        let entries = log.entries();
        assert_eq!(entries.len(), 1, "{entries:?}");
        assert_eq!(entries[0].0, 2);
        assert_eq!(
            entries[0].1 - started,
            HOLD,
            "held exactly as long as the hold"
        );
        cancel.cancel();
        task.await.expect("the proposer stops");

        let log = Recording::default();
        let (queue, cancel, task) = start(log.clone());
        let started = tokio::time::Instant::now();
        let _put = propose_as(&queue, false);
        tokio::time::sleep(HOLD * 3).await;
        let entries = log.entries();
        assert_eq!(entries.len(), 1, "{entries:?}");
        assert_eq!(entries[0].1, started, "not held");
        cancel.cancel();
        task.await.expect("the proposer stops");
    }

    /// An entry raft never answers holds the one-entry pipeline for `answer_within` and no
    /// longer: its caller learns the outcome is unknown, and the next proposal goes out.
    #[tokio::test(start_paused = true)]
    async fn an_entry_raft_never_answers_frees_the_pipeline_after_answer_within() {
        let (queue, receiver) = mpsc::channel(8);
        let bounds = BatchBounds {
            proposals_max: 1,
            bytes_max: 1 << 20,
            in_flight_max: 1,
            answer_within: Duration::from_secs(5),
            queue_join_hold: HOLD,
        };
        let (tracker, cancel) = (TaskTracker::new(), CancellationToken::new());
        let task = tokio::spawn(run(
            Forgetful::default(),
            receiver,
            bounds,
            NodeStats::default(),
            tracker.clone(),
            cancel.clone(),
        ));
        let first = propose(&queue);
        let second = propose(&queue);
        let started = tokio::time::Instant::now();
        // Time is paused: it advances only while every task waits on a timer.
        let second = tokio::time::timeout(Duration::from_secs(60), second)
            .await
            .expect("the second proposal goes out within a minute")
            .expect("the second caller is answered");
        // Handed over, then refused: it may have been appended, so never a redirect.
        assert!(
            matches!(second, Err(NodeError::Indeterminate(_))),
            "{second:?}"
        );
        assert!(started.elapsed() >= Duration::from_secs(5));
        let first = first.await.expect("the first caller is answered");
        assert!(
            matches!(first, Err(NodeError::Indeterminate(_))),
            "{first:?}"
        );
        cancel.cancel();
        task.await.expect("the proposer stops");
    }
}
