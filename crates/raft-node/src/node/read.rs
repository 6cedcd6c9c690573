//! Reads: a linearizable read index (confirmed by a quorum through the leader), reads on
//! the state after it, and local (serializable) reads.

use super::Node;
use super::route::Route;
use crate::error::NodeError;
use crate::types::NodeId;
use baton_state_machine::StateMachine;
use std::time::Duration;
use tokio::sync::oneshot;

impl Node {
    /// A linearizable read index: the leader confirmed its leadership after the call began,
    /// and this node has applied at least that far.
    pub async fn read_index(&self) -> Result<u64, NodeError> {
        let timeout = Duration::from_millis(self.inner.config.propose_timeout_ms);
        let index = self.routed(self.id(), Route::ReadIndex).await?;
        self.wait_applied(index, timeout).await?;
        Ok(index)
    }

    /// A read index confirmed by a quorum, on this node, which must be the leader.
    pub(crate) async fn read_index_here(&self) -> Result<u64, NodeError> {
        self.require_leader()?;
        let (reply, answer) = oneshot::channel();
        self.inner
            .reads
            .send(reply)
            .await
            .map_err(|_| NodeError::Stopped)?;
        let index = answer.await.map_err(|_| NodeError::Stopped)??;
        // The index may be past what this leader has applied (see `reader::read_index`).
        let timeout = Duration::from_millis(self.inner.config.propose_timeout_ms);
        self.wait_applied(index, timeout).await?;
        Ok(index)
    }

    /// Runs `f` on the state after a linearizable read index.
    pub async fn read<R>(&self, f: impl FnOnce(&StateMachine) -> R) -> Result<R, NodeError> {
        // TEST ONLY: the `stale-read` canary answers on followers from a copy of the state
        // up to a second old, without a read index.
        if crate::hooks::canary() == Some(crate::hooks::Canary::StaleRead) && !self.is_leader() {
            return Ok(crate::hooks::stale_view(&self.inner.sm, f));
        }
        self.read_index().await?;
        Ok(self.inner.sm.query(f))
    }

    /// Runs `f` on this node's applied state (serializable, possibly stale).
    pub fn read_local<R>(&self, f: impl FnOnce(&StateMachine) -> R) -> R {
        self.inner.sm.query(f)
    }

    /// A read index a follower (`from`) asked for: as
    /// [`read_index_here`](Self::read_index_here), and that follower is preferred.
    pub(crate) async fn read_index_forwarded(&self, from: NodeId) -> Result<u64, NodeError> {
        self.for_follower(from, self.read_index_here()).await
    }

    /// Waits until this node has applied `index`.
    pub async fn wait_applied(&self, index: u64, timeout: Duration) -> Result<(), NodeError> {
        let mut progress = self.inner.sm.progress();
        let reached = progress.wait_for(|p| p.log_index >= index);
        match tokio::time::timeout(timeout, reached).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(_)) => Err(NodeError::Stopped),
            Err(_) => Err(NodeError::Unavailable(format!(
                "index {index} not applied in time"
            ))),
        }
    }
}
