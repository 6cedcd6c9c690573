//! Leases on the leader's clock: keepalives and remaining TTLs, and the port through which
//! the lease clock sees the node.

use super::Node;
use super::route::Route;
use crate::error::NodeError;
use crate::store::{AppliedBatch, LeaseRecords};
use crate::types::ServerMetrics;
use crate::worker::lease_clock::{ClockPort, ClockRequest, KeepaliveAnswer};
use baton_state_machine::{Applied, Command, LeaseCheckpoint, LeaseId, Proposal, StateMachine};
use std::sync::Arc;
use tokio::sync::{broadcast, oneshot, watch};

impl Node {
    /// Keeps a lease alive on the leader's clock. `Some(ttl_ms)`: the lease lives at least
    /// `ttl_ms` from when this call was sent; `None`: the lease is gone.
    pub async fn keepalive(&self, lease: LeaseId) -> Result<Option<u64>, NodeError> {
        self.routed(lease, Route::Keepalive).await
    }

    /// Keeps a lease alive on this node's clock; this node must be the confirmed leader.
    pub(crate) async fn keepalive_here(&self, lease: LeaseId) -> Result<Option<u64>, NodeError> {
        // Only a confirmed leader may acknowledge: a deposed one must not extend a lease.
        self.read_index_here().await?;
        let Some(entry) = self.inner.sm.query(|sm| sm.lease_clock_entry(lease)) else {
            return Ok(None);
        };
        let (reply, answer) = oneshot::channel();
        let request = ClockRequest::Keepalive {
            lease,
            ttl_ms: entry.ttl_ms,
            reply,
        };
        self.inner
            .clock
            .send(request)
            .await
            .map_err(|_| NodeError::Stopped)?;
        match answer.await.map_err(|_| NodeError::Stopped)? {
            KeepaliveAnswer::Ack { ttl_ms, reset } => {
                if let Some(mark) = reset {
                    // A checkpoint of this lease is recorded or on its way, or this leader
                    // was promoted since the lease's last reset: commit a reset first, or a
                    // new leader could end the lease earlier than ttl after this keepalive.
                    let command = Command::LeaseCheckpoint(LeaseCheckpoint {
                        remaining_ms: vec![(lease, ttl_ms)],
                    });
                    self.propose_here(Proposal::from(command)).await?;
                    let committed = ClockRequest::ResetCommitted { lease, mark };
                    // A clock that stopped needs no news.
                    let _ = self.inner.clock.send(committed).await;
                }
                Ok(Some(ttl_ms))
            }
            KeepaliveAnswer::Gone => Ok(None),
            KeepaliveAnswer::NotLeader => Err(NodeError::NoLeader),
        }
    }

    /// The lease's remaining TTL on the leader's clock, if the leader tracks it.
    pub async fn lease_remaining_ms(&self, lease: LeaseId) -> Result<Option<u64>, NodeError> {
        self.routed(lease, Route::Remaining).await
    }

    /// The remaining TTLs of `leases` on the leader's clock, in the same order (`None`
    /// where the leader does not track the lease).
    pub async fn leases_remaining_ms(
        &self,
        leases: Vec<LeaseId>,
    ) -> Result<Vec<Option<u64>>, NodeError> {
        self.routed(leases, Route::RemainingMany).await
    }

    /// The remaining TTLs of `leases` on this node's clock; this node must be the leader.
    pub(crate) async fn leases_remaining_here(
        &self,
        leases: Vec<LeaseId>,
    ) -> Result<Vec<Option<u64>>, NodeError> {
        let mut remaining = Vec::with_capacity(leases.len());
        for lease in leases {
            remaining.push(self.lease_remaining_here(lease).await?);
        }
        Ok(remaining)
    }

    /// The lease's remaining TTL on this node's clock; this node must be the leader.
    pub(crate) async fn lease_remaining_here(
        &self,
        lease: LeaseId,
    ) -> Result<Option<u64>, NodeError> {
        self.require_leader()?;
        let (reply, answer) = oneshot::channel();
        self.inner
            .clock
            .send(ClockRequest::Remaining { lease, reply })
            .await
            .map_err(|_| NodeError::Stopped)?;
        answer.await.map_err(|_| NodeError::Stopped)
    }
}

/// The lease clock's view of the node: it sees the node only through this port.
impl ClockPort for Node {
    fn metrics(&self) -> watch::Receiver<ServerMetrics> {
        self.inner.raft.server_metrics()
    }

    fn events(&self) -> broadcast::Receiver<Arc<AppliedBatch>> {
        self.inner.sm.events()
    }

    fn query<R>(&self, f: impl FnOnce(&StateMachine) -> R) -> R {
        self.inner.sm.query(f)
    }

    fn query_records<R>(&self, f: impl FnOnce(&StateMachine, &LeaseRecords) -> R) -> R {
        self.inner.sm.query_records(f)
    }

    fn confirm_leadership(&self) -> impl Future<Output = Result<u64, NodeError>> + Send {
        self.read_index_here()
    }

    fn propose_here(
        &self,
        proposal: Proposal,
    ) -> impl Future<Output = Result<Applied, NodeError>> + Send {
        Node::propose_here(self, proposal)
    }
}
