//! Group commit. openraft 0.9 writes and flushes one entry per `client_write`, so the
//! proposer gathers queued proposals into one `Batch` entry (bounded by count and bytes)
//! and keeps up to `batches_in_flight_max` entries in flight. Each caller gets its own
//! proposal's `Applied`.
//!
//! Owns: the proposal queue. Woken by: a proposal arriving, a batch completing.
//! Stops: when the node's token is cancelled; queued callers then get `Stopped`.

use crate::error::NodeError;
use crate::types::{Batch, ClientWriteError, Raft};
use baton_state_machine::{Applied, Proposal};
use std::sync::Arc;
use tokio::sync::{Semaphore, mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// A proposal waiting for its entry, and where its answer goes.
pub(crate) struct Pending {
    /// The proposal.
    pub(crate) proposal: Proposal,
    /// Its encoded size, counted against `BatchBounds::bytes_max`.
    pub(crate) bytes: usize,
    /// Where its own `Applied` (or why there is none) goes.
    pub(crate) reply: oneshot::Sender<Result<Applied, NodeError>>,
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
}

/// The proposer task: batches the queue into entries until `cancel`.
pub(crate) async fn run(
    raft: Raft,
    mut queue: mpsc::Receiver<Pending>,
    bounds: BatchBounds,
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
            if bytes + next.bytes > bounds.bytes_max {
                carry = Some(next);
                break;
            }
            bytes += next.bytes;
            batch.push(next);
        }
        let (proposals, replies): (Vec<_>, Vec<_>) =
            batch.into_iter().map(|p| (p.proposal, p.reply)).unzip();
        tracing::trace!(proposals = proposals.len(), bytes, "proposing a batch");
        match raft.client_write_ff(Batch { proposals }).await {
            Ok(receiver) => {
                tracker.spawn(async move {
                    let outcome = receiver.await;
                    distribute(outcome, replies);
                    drop(permit);
                });
            }
            Err(fatal) => {
                tracing::warn!(%fatal, "raft stopped; refusing proposals");
                for reply in replies {
                    let _ = reply.send(Err(NodeError::Stopped));
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

fn stop(pending: Pending) {
    let _ = pending.reply.send(Err(NodeError::Stopped));
}

type WriteOutcome = Result<
    Result<openraft::raft::ClientWriteResponse<crate::types::TypeConfig>, ClientWriteError>,
    tokio::sync::oneshot::error::RecvError,
>;

fn distribute(outcome: WriteOutcome, replies: Vec<oneshot::Sender<Result<Applied, NodeError>>>) {
    match outcome {
        Ok(Ok(response)) => {
            let applied = response.data.applied;
            debug_assert_eq!(applied.len(), replies.len(), "one reply per proposal");
            let mut applied = applied.into_iter();
            for reply in replies {
                let result = applied
                    .next()
                    .ok_or_else(|| NodeError::Indeterminate("the entry's reply is missing".into()));
                let _ = reply.send(result);
            }
        }
        Ok(Err(ClientWriteError::ForwardToLeader(f))) => {
            let leader = f.leader_id.zip(f.leader_node);
            for reply in replies {
                let _ = reply.send(Err(NodeError::ForwardToLeader {
                    leader: leader.clone(),
                }));
            }
        }
        Ok(Err(other)) => {
            for reply in replies {
                let _ = reply.send(Err(NodeError::Indeterminate(other.to_string())));
            }
        }
        Err(_) => {
            // Raft dropped the responder: the entry may still commit elsewhere.
            for reply in replies {
                let _ = reply.send(Err(NodeError::Indeterminate(
                    "raft dropped the write before answering".into(),
                )));
            }
        }
    }
}
