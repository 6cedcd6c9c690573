//! [`ClockPort`]: what the lease clock task needs from its node, and nothing more. `node/lease.rs`
//! implements it for `Node`; the clock never names `Node`, so the two modules do not depend
//! on each other both ways, and the task can be driven by a stand-in in tests.
//!
//! Owns: nothing. Woken by: nothing (a trait). Stops: n/a.

use crate::error::NodeError;
use crate::store::{AppliedBatch, LeaseRecords};
use crate::types::ServerMetrics;
use baton_state_machine::{Applied, Proposal, StateMachine};
use std::sync::Arc;
use tokio::sync::{broadcast, watch};

/// The lease clock's view of its node: leadership, applied state and events, and the two
/// leader-only operations it performs (confirm leadership, propose).
pub(crate) trait ClockPort: Clone + Send + Sync + 'static {
    /// This node's Raft server metrics, to follow leadership changes (read them with
    /// `types::leading_term`); they change only with the vote, role or membership.
    fn metrics(&self) -> watch::Receiver<ServerMetrics>;

    /// Events as this node applies them, from now on.
    fn events(&self) -> broadcast::Receiver<Arc<AppliedBatch>>;

    /// Runs `f` on this node's applied state (a std lock: `f` must not block).
    fn query<R>(&self, f: impl FnOnce(&StateMachine) -> R) -> R;

    /// Runs `f` on the applied state and this node's lease records (when it applied each
    /// lease's latest record), under the same lock.
    fn query_records<R>(&self, f: impl FnOnce(&StateMachine, &LeaseRecords) -> R) -> R;

    /// Confirms with a quorum that this node is the leader, then waits until it has applied
    /// that read index. Fails if it is not the leader or no quorum answers.
    fn confirm_leadership(&self) -> impl Future<Output = Result<u64, NodeError>> + Send;

    /// Proposes on this node, which must be the leader, and waits for the outcome.
    fn propose_here(
        &self,
        proposal: Proposal,
    ) -> impl Future<Output = Result<Applied, NodeError>> + Send;
}
