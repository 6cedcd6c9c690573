//! Sending a request to the leader: served here when this node leads, else sent over the
//! peer port to the leader it knows, and sent again after a leader change until the
//! request's budget runs out.

use super::Node;
use super::propose::Forwarded;
use super::status::ClusterStatus;
use crate::error::NodeError;
use crate::network::{PeerError, PeerFailure, Target, paths};
use crate::types::{LogId, NodeId};
use baton_state_machine::LeaseId;
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::time::Duration;

/// How many times a request is re-routed after a leader change before giving up (the
/// caller's deadline usually ends it first).
const ROUTE_ATTEMPTS_MAX: u32 = 100;

/// Requests that can be routed to the leader.
#[derive(Clone, Copy)]
pub(super) enum Route {
    Propose,
    ReadIndex,
    Keepalive,
    Remaining,
    RemainingMany,
    Status,
}

impl Route {
    /// The error for a request that was sent and got no answer in `budget`.
    fn no_answer(self, budget: Duration) -> NodeError {
        let message = format!("no answer within {} ms", budget.as_millis());
        match self {
            Route::Propose => NodeError::Indeterminate(message),
            Route::ReadIndex
            | Route::Keepalive
            | Route::Remaining
            | Route::RemainingMany
            | Route::Status => NodeError::Unavailable(message),
        }
    }

    /// The peer path the request goes to.
    fn path(self) -> &'static str {
        match self {
            Route::Propose => paths::PROPOSE,
            Route::ReadIndex => paths::READ_INDEX,
            Route::Keepalive => paths::KEEPALIVE,
            Route::Remaining => paths::LEASE_REMAINING,
            Route::RemainingMany => paths::LEASES_REMAINING,
            Route::Status => paths::STATUS,
        }
    }
}

impl Node {
    /// Sends a request to the leader (this node or another), re-routing after leader
    /// changes until `propose_timeout_ms` has passed. A request that was never sent (no
    /// leader known or reachable) ends as `NoLeader`; one that was sent and got no answer
    /// ends as `Indeterminate` (a proposal) or `Unavailable` (anything else).
    pub(super) async fn routed<Req, Resp>(
        &self,
        request: Req,
        route: Route,
    ) -> Result<Resp, NodeError>
    where
        Req: Serialize + Clone + Send + Sync,
        Resp: DeserializeOwned + RouteLocal<Req>,
    {
        let budget = Duration::from_millis(self.inner.config.propose_timeout_ms);
        let deadline = tokio::time::Instant::now() + budget;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let attempt_result = async {
                match self.leader() {
                    Some((id, _)) if id == self.id() => {
                        Resp::here(self, route, request.clone()).await
                    }
                    Some((leader, addr)) => {
                        self.inner.stats.forwarded(route.path());
                        let to = Target {
                            id: leader,
                            addr: &addr.peer,
                        };
                        Resp::there(self, to, route, &request).await
                    }
                    None => Err(NodeError::NoLeader),
                }
            };
            let result = match tokio::time::timeout_at(deadline, attempt_result).await {
                Ok(result) => result,
                Err(_) => Err(route.no_answer(budget)),
            };
            match result {
                Err(NodeError::ForwardToLeader { .. } | NodeError::NoLeader)
                    if attempt < ROUTE_ATTEMPTS_MAX =>
                {
                    if tokio::time::timeout_at(deadline, self.await_leader_change())
                        .await
                        .is_err()
                    {
                        return Err(NodeError::NoLeader);
                    }
                }
                Err(NodeError::ForwardToLeader { .. }) => return Err(NodeError::NoLeader),
                other => return other,
            }
        }
    }

    /// Sends `request` to the leader `to` on `path` and decodes its answer.
    async fn forward<Req: Serialize, Resp: DeserializeOwned>(
        &self,
        to: Target<'_>,
        path: &str,
        request: &Req,
    ) -> Result<Resp, NodeError> {
        let timeout = Duration::from_millis(self.inner.config.propose_timeout_ms);
        let reply: Result<Resp, PeerFailure> = self
            .inner
            .peers
            .call(to, path, request, timeout)
            .await
            .map_err(forward_failure)?;
        reply.map_err(NodeError::from)
    }

    /// The leader said the entry `log_id` is committed: Raft commits up to it here if this
    /// node follows the leader that made it, and holds it (decision #131).
    async fn learn_commit(&self, log_id: LogId) {
        self.inner.stats.commit_notices.inc();
        if self
            .inner
            .raft
            .trigger()
            .commit_notice(log_id)
            .await
            .is_err()
        {
            tracing::debug!("no commit notice: raft has stopped");
        }
    }

    /// Waits a heartbeat, then for the next change of Raft state (at most an election
    /// timeout): enough for a new leader to be known or a stale one to be corrected.
    async fn await_leader_change(&self) {
        let mut metrics = self.inner.raft.metrics();
        metrics.borrow_and_update();
        tokio::time::sleep(Duration::from_millis(self.inner.config.heartbeat_ms)).await;
        let wait = Duration::from_millis(self.inner.config.election_timeout_min_ms);
        let _ = tokio::time::timeout(wait, metrics.changed()).await;
    }
}

/// How a routed request is served on the leader, and sent to it.
pub(super) trait RouteLocal<Req: Serialize + Sync>: Sized + DeserializeOwned + Send {
    /// Serves `request` on this node, the leader.
    fn here(
        node: &Node,
        route: Route,
        request: Req,
    ) -> impl Future<Output = Result<Self, NodeError>> + Send;

    /// Sends `request` to the leader `to`.
    fn there(
        node: &Node,
        to: Target<'_>,
        route: Route,
        request: &Req,
    ) -> impl Future<Output = Result<Self, NodeError>> + Send {
        node.forward(to, route.path(), request)
    }
}

/// A proposal lands at a log id; the leader commits it before it answers.
impl RouteLocal<Forwarded> for LogId {
    async fn here(node: &Node, _: Route, request: Forwarded) -> Result<LogId, NodeError> {
        node.submit(request.id, request.proposal).await
    }

    async fn there(
        node: &Node,
        to: Target<'_>,
        route: Route,
        request: &Forwarded,
    ) -> Result<LogId, NodeError> {
        let landed: LogId = node.forward(to, route.path(), request).await?;
        // This node commits and applies the entry as soon as it holds it, and its apply
        // answers the request.
        node.learn_commit(landed).await;
        Ok(landed)
    }
}

/// A read index: the forwarding node names itself, so the leader prefers it (#136).
impl RouteLocal<NodeId> for u64 {
    async fn here(node: &Node, _: Route, _from: NodeId) -> Result<u64, NodeError> {
        node.read_index_here().await
    }
}

impl RouteLocal<LeaseId> for Option<u64> {
    async fn here(node: &Node, route: Route, lease: LeaseId) -> Result<Option<u64>, NodeError> {
        match route {
            Route::Remaining => node.lease_remaining_here(lease).await,
            _ => node.keepalive_here(lease).await,
        }
    }
}

impl RouteLocal<Vec<LeaseId>> for Vec<Option<u64>> {
    async fn here(
        node: &Node,
        _: Route,
        leases: Vec<LeaseId>,
    ) -> Result<Vec<Option<u64>>, NodeError> {
        node.leases_remaining_here(leases).await
    }
}

impl RouteLocal<()> for ClusterStatus {
    async fn here(node: &Node, _: Route, (): ()) -> Result<ClusterStatus, NodeError> {
        node.leader_status_here()
    }
}

/// What a failed call to the leader means for the request it carried.
pub(super) fn forward_failure(e: PeerError) -> NodeError {
    match e {
        // Nothing was sent: the caller may route again.
        PeerError::Unreachable(_) => NodeError::NoLeader,
        PeerError::Network(m) => NodeError::Indeterminate(m),
        PeerError::Refused(status) => {
            NodeError::Unavailable(format!("leader refused with status {status}"))
        }
    }
}
