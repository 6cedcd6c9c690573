//! The write path. A proposal gets a [`RequestId`] and a wait in this node's registry
//! (`store::waiting`) before it goes anywhere; then it is proposed here if this node
//! leads, or forwarded to the leader, whose answer says only where its entry landed (a
//! committed log id). This node's apply of that entry answers the wait, on the leader
//! and on a forwarding follower alike: a caller is answered only once its node shows the
//! write (spec §3), and by nothing but the apply.

use super::Node;
use super::route::Route;
use crate::error::NodeError;
use crate::store::Wait;
use crate::types::{LogId, NodeId, RequestId};
use crate::worker::proposer::Pending;
use baton_state_machine::{Applied, Proposal};
use serde::{Deserialize, Serialize};
use std::time::Duration;
use tokio::sync::oneshot;

/// A proposal on its way to the leader, with the id of the request that waits for it
/// (the body of a forwarded proposal on the peer port).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Forwarded {
    /// The request that waits, on the node that forwards it.
    pub id: RequestId,
    /// The proposal.
    pub proposal: Proposal,
}

impl Node {
    /// Proposes a command (forwarded to the leader if this node is not) and returns its
    /// result from this node's apply. On timeout the outcome is unknown
    /// (`Indeterminate`), never reported as failed.
    pub async fn propose(&self, proposal: Proposal) -> Result<Applied, NodeError> {
        proposal.validate_from_outside(&self.inner.config.limits)?;
        let budget = Duration::from_millis(self.inner.config.propose_timeout_ms);
        let deadline = tokio::time::Instant::now() + budget;
        let mut wait = self.inner.sm.waiting().register();
        let request = Forwarded {
            id: wait.id(),
            proposal,
        };
        let routed = self.routed::<_, LogId>(request, Route::Propose);
        tokio::pin!(routed);
        // This node's apply may come before the leader's answer (which then is dropped).
        let landed = tokio::select! {
            biased;
            Some((applied, _)) = wait.answered() => return Ok(applied),
            landed = &mut routed => landed,
        };
        match landed {
            Ok(landed) => self.answer(&mut wait, landed).await,
            // Sent, and no answer: the entry may still land, and the apply answers it if
            // it does within the request's budget.
            Err(e) if e.is_indeterminate() => {
                match tokio::time::timeout_at(deadline, wait.answered()).await {
                    Ok(Some((applied, _))) => Ok(applied),
                    _ => Err(e),
                }
            }
            Err(e) => wait.try_answered().map(|(applied, _)| applied).ok_or(e),
        }
    }

    /// Proposes on this node, which must be the leader (the lease clock's commands).
    pub(crate) async fn propose_here(&self, proposal: Proposal) -> Result<Applied, NodeError> {
        let mut wait = self.inner.sm.waiting().register();
        let landed = self.submit(wait.id(), proposal).await?;
        self.answer(&mut wait, landed).await
    }

    /// A proposal a follower forwarded: checked exactly as one from the API (limits, and
    /// never a command only the leader's clock may issue), then proposed here. The answer
    /// is the committed entry that carried it: the follower commits up to it and its own
    /// apply answers the request (decision #131).
    pub(crate) async fn propose_forwarded(&self, request: Forwarded) -> Result<LogId, NodeError> {
        let Forwarded { id, proposal } = request;
        proposal.validate_from_outside(&self.inner.config.limits)?;
        if self.inner.config.callers_required && proposal.caller.is_none() {
            // With auth on, a proposal without a principal would skip every rule in
            // `apply`: only this process's own clock may send one, never a peer.
            return Err(invalid(
                "caller",
                "this cluster runs with authentication: a forwarded proposal must name its \
                 principal",
            ));
        }
        if id.node == self.id() {
            // This node's apply would take it for one of its own requests.
            return Err(invalid(
                "id",
                "a forwarded proposal names the leader as its origin",
            ));
        }
        self.for_follower(id.node, self.submit(id, proposal)).await
    }

    /// Runs `work` for a follower that serves clients through this leader. That follower
    /// is never a spare for a while, so it receives new entries at once instead of in
    /// batches (decision #136) and can apply what it forwarded without waiting. It is
    /// preferred before `work` and again after it, since a held-open acquire may outlast
    /// a preference and the follower must then receive the entry.
    pub(super) async fn for_follower<T>(
        &self,
        follower: NodeId,
        work: impl Future<Output = T>,
    ) -> T {
        self.inner.raft.prefer_replication_to(follower);
        let out = work.await;
        self.inner.raft.prefer_replication_to(follower);
        out
    }

    /// Hands the proposal of request `id` to the proposer; where its entry landed. A node
    /// that does not lead says so (`ForwardToLeader`) before it hands anything over, so the
    /// request can go to the leader. Once handed over, a refusal from Raft means the leader
    /// stepped down and the entry may still commit: `Indeterminate`, never a redirect, or
    /// the write could be applied twice (`worker::proposer::report`).
    pub(super) async fn submit(
        &self,
        id: RequestId,
        proposal: Proposal,
    ) -> Result<LogId, NodeError> {
        self.require_leader()?;
        let bytes = bincode::serialized_size(&proposal).unwrap_or(0) as usize;
        let joins_queue = self.inner.config.queue_join_hold_us > 0
            && proposal
                .command
                .waiting_claim()
                .is_some_and(|(id, lease, owner)| {
                    self.inner.sm.query(|sm| sm.joins_queue(&id, lease, owner))
                });
        let (landed, fate) = oneshot::channel();
        let pending = Pending {
            id,
            proposal,
            bytes,
            landed,
            joins_queue,
        };
        self.inner
            .proposals
            .send(pending)
            .await
            .map_err(|_| NodeError::Stopped)?;
        fate.await
            .map_err(|_| NodeError::Indeterminate("the proposer dropped the proposal".into()))?
    }

    /// The result this node's apply gives the request of `wait`, whose entry landed at
    /// `landed` (committed). At once on the leader, which answers only after its apply;
    /// on a follower, once it has applied the entry. If this node cannot show it within
    /// `propose_timeout_ms` (cut off from the leader since), or receives it inside a
    /// snapshot, the write is committed but its result unknown here: `Indeterminate`.
    async fn answer(&self, wait: &mut Wait, landed: LogId) -> Result<Applied, NodeError> {
        if let Some((applied, _)) = wait.try_answered() {
            return Ok(applied);
        }
        let within = Duration::from_millis(self.inner.config.propose_timeout_ms);
        let mut installed = self.inner.sm.installed();
        let answered = tokio::time::timeout(within, async {
            tokio::select! {
                biased;
                answered = wait.answered() => answered,
                _ = installed.wait_for(|index| *index >= landed.index) => None,
            }
        })
        .await;
        match answered.ok().flatten() {
            Some((applied, _)) => Ok(applied),
            None => Err(NodeError::Indeterminate(format!(
                "the write committed at index {} but this node did not apply it within {} ms \
                 (or it came in a snapshot)",
                landed.index,
                within.as_millis()
            ))),
        }
    }
}

fn invalid(field: &'static str, reason: &str) -> NodeError {
    NodeError::Invalid(baton_state_machine::Error::Invalid {
        field,
        reason: reason.into(),
    })
}
