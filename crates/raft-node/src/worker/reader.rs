//! Read-index coalescing. `ensure_linearizable` costs a heartbeat round to a quorum per
//! call, so the reader takes every read queued before it starts a round, runs one round
//! (retrying a transient quorum failure), and answers them all with the same read index.
//!
//! Owns: the read queue. Woken by: a read arriving. Stops: when the token is cancelled.

use crate::error::NodeError;
use crate::types::{CheckIsLeaderError, Raft, RaftError};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

/// Rounds tried before a read is answered `Unavailable`.
const ROUNDS_MAX: u32 = 3;

pub(crate) type ReadReply = oneshot::Sender<Result<u64, NodeError>>;

pub(crate) async fn run(
    raft: Raft,
    mut queue: mpsc::Receiver<ReadReply>,
    retry_after: Duration,
    cancel: CancellationToken,
) {
    loop {
        let first = tokio::select! {
            r = queue.recv() => match r { Some(r) => r, None => break },
            () = cancel.cancelled() => break,
        };
        let mut waiters = vec![first];
        while let Ok(next) = queue.try_recv() {
            waiters.push(next);
        }
        let result = tokio::select! {
            r = read_index(&raft, retry_after) => r,
            () = cancel.cancelled() => Err(NodeError::Stopped),
        };
        for waiter in waiters {
            let _ = waiter.send(result.clone());
        }
    }
}

/// One confirmed read index, retried on a transient quorum failure.
pub(crate) async fn read_index(raft: &Raft, retry_after: Duration) -> Result<u64, NodeError> {
    let mut round = 0;
    loop {
        round += 1;
        match raft.ensure_linearizable().await {
            Ok(log_id) => return Ok(log_id.map_or(0, |l| l.index)),
            Err(RaftError::APIError(CheckIsLeaderError::ForwardToLeader(f))) => {
                return Err(NodeError::ForwardToLeader {
                    leader: f.leader_id.zip(f.leader_node),
                });
            }
            Err(RaftError::APIError(CheckIsLeaderError::QuorumNotEnough(q))) => {
                if round >= ROUNDS_MAX {
                    return Err(NodeError::Unavailable(q.to_string()));
                }
                tokio::time::sleep(retry_after).await;
            }
            Err(RaftError::Fatal(_)) => return Err(NodeError::Stopped),
        }
    }
}
