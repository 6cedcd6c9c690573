//! [`Node`]: one member of a baton cluster. Start it, propose commands, read the state
//! linearizably or locally, follow applied events, keep leases alive, change membership,
//! and shut it down. Followers forward proposals, read-index requests and keepalives to
//! the leader over the peer port; callers never look for the leader themselves.
//!
//! The node's jobs, a file each:
//! - `start.rs`: opening the stores, starting Raft and the workers, the first election;
//! - `propose.rs`: the write path (a proposal's id, the registry wait, the apply's answer);
//! - `route.rs`: sending a request to the leader, this node or another;
//! - `read.rs`: read indexes and reads;
//! - `lease.rs`: keepalives and remaining TTLs on the leader's clock;
//! - `status.rs`: the cluster as a node sees it, and membership changes.

mod lease;
mod propose;
mod read;
mod route;
mod start;
mod status;

pub use propose::Forwarded;
pub use status::{ClusterStatus, MemberStatus};

use crate::config::NodeConfig;
use crate::error::NodeError;
use crate::network::PeerClient;
use crate::store::{AppliedBatch, AppliedProgress, ApplyObserver, ClaimWait, Observing, SmShared};
use crate::types::{NodeAddr, NodeId, Raft, leading_term};
use crate::worker::lease_clock::ClockRequest;
use crate::worker::proposer::Pending;
use crate::worker::reader::ReadReply;
use baton_state_machine::{ResourceId, Revision};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;
use tokio::sync::{broadcast, mpsc, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// How long shutdown waits for tasks and open peer connections.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// A member of the cluster. Cheap to clone.
#[derive(Clone)]
pub struct Node {
    inner: Arc<NodeInner>,
}

struct NodeInner {
    config: NodeConfig,
    raft: Raft,
    sm: Arc<SmShared>,
    peers: PeerClient,
    /// The peer port's TLS (mutual), re-read by [`Node::reload_tls`].
    peer_tls: Option<Arc<crate::tls::ReloadableTls>>,
    proposals: mpsc::Sender<Pending>,
    reads: mpsc::Sender<ReadReply>,
    clock: mpsc::Sender<ClockRequest>,
    committed: Arc<AtomicU64>,
    /// One membership change at a time.
    membership: tokio::sync::Mutex<()>,
    peer_addr: SocketAddr,
    /// What this node measures about itself (`/metrics`).
    stats: crate::stats::NodeStats,
    cancel: CancellationToken,
    tracker: TaskTracker,
    db: sled::Db,
    /// Test-only: the lock taken before each of the log's flushes.
    #[cfg(feature = "unsafe-test-hooks")]
    flush_gate: crate::store::FlushGate,
}

impl Node {
    /// Re-reads the peer port's certificate, key and CA (server and client side); on an
    /// error the ones in force are kept.
    pub fn reload_tls(&self) -> Result<(), NodeError> {
        if let Some(tls) = &self.inner.peer_tls {
            tls.reload()
                .map_err(|e| NodeError::Config(format!("peer TLS: {e}")))?;
            self.inner
                .peers
                .reload_tls()
                .map_err(|e| NodeError::Config(format!("peer TLS: {e}")))?;
        }
        Ok(())
    }

    /// This node's id.
    pub fn id(&self) -> NodeId {
        self.inner.config.id
    }

    /// This node's configuration.
    pub fn config(&self) -> &NodeConfig {
        &self.inner.config
    }

    /// The peer address this node listens on.
    pub fn peer_addr(&self) -> SocketAddr {
        self.inner.peer_addr
    }

    /// What this node measures about itself: commit and fsync latency, proposals per
    /// entry, forwarded requests, commit notices.
    pub fn stats(&self) -> &crate::stats::NodeStats {
        &self.inner.stats
    }

    /// Requests of this node waiting for their result from its apply (`/metrics`:
    /// `baton_answer_waits`); 0 when none is in flight.
    pub fn answer_waits(&self) -> usize {
        self.inner.sm.waiting().len()
    }

    /// The Raft handle (for the peer server and tests).
    pub fn raft(&self) -> &Raft {
        &self.inner.raft
    }

    /// Test-only: the lock taken before each of this node's log flushes. Holding it
    /// stalls the node's disk: its writes stay readable but none becomes durable.
    #[cfg(feature = "unsafe-test-hooks")]
    pub fn log_flush_gate(&self) -> crate::store::FlushGate {
        self.inner.flush_gate.clone()
    }

    /// Test-only: the lock taken before each of this node's applies. Holding it stalls the
    /// node's state machine: entries commit, none is applied.
    #[cfg(feature = "unsafe-test-hooks")]
    pub fn apply_gate(&self) -> crate::store::FlushGate {
        self.inner.sm.apply_gate.clone()
    }

    /// Whether this node is the leader right now (as far as it knows).
    pub fn is_leader(&self) -> bool {
        leading_term(&self.inner.raft.server_metrics().borrow()).is_some()
    }

    /// The leader this node knows of, with its addresses.
    pub fn leader(&self) -> Option<(NodeId, NodeAddr)> {
        let m = self.inner.raft.metrics();
        let m = m.borrow();
        let id = m.current_leader?;
        let addr = m.membership_config.membership().get_node(&id)?.clone();
        Some((id, addr))
    }

    /// `Ok` if this node is the leader as far as it knows, else where to forward. Every
    /// leader-only path starts here; a quorum confirms it with `read_index_here`.
    fn require_leader(&self) -> Result<(), NodeError> {
        if self.is_leader() {
            Ok(())
        } else {
            Err(NodeError::ForwardToLeader {
                leader: self.leader(),
            })
        }
    }

    /// Applied progress (index and revision), to wait for a revision.
    pub fn progress(&self) -> watch::Receiver<AppliedProgress> {
        self.inner.sm.progress()
    }

    /// Events as this node applies them. A receiver that lags must re-read from the state
    /// machine's event window (`events_since`).
    pub fn events(&self) -> broadcast::Receiver<Arc<AppliedBatch>> {
        self.inner.sm.events()
    }

    /// Registers a wait for a queue entry (`resource`, enqueued at `enqueued`): its
    /// `notified()` completes when a grant or cancel of that entry is applied here.
    pub fn wait_claim(&self, resource: ResourceId, enqueued: Revision) -> ClaimWait {
        self.inner.sm.wait_claim(resource, enqueued)
    }

    /// Tells `observer` of every batch this node applies, on the apply path, until the
    /// returned handle is dropped (see [`ApplyObserver`]).
    pub fn observe_applied(&self, observer: Arc<dyn ApplyObserver>) -> Observing {
        self.inner.sm.observe(observer)
    }

    /// The peer client (membership probes).
    pub(crate) fn peers(&self) -> &PeerClient {
        &self.inner.peers
    }

    /// The lock that keeps membership changes one at a time.
    pub(crate) fn membership_lock(&self) -> &tokio::sync::Mutex<()> {
        &self.inner.membership
    }

    /// Starts an election on this node at once, as when its election timer fires: with a
    /// log as long as a quorum's it becomes leader in a new term. Moves leadership for
    /// maintenance and for tests that need leader changes without stopping a process.
    pub async fn campaign(&self) -> Result<(), NodeError> {
        self.inner
            .raft
            .trigger()
            .elect()
            .await
            .map_err(|_| NodeError::Stopped)
    }

    /// Stops the node: workers, the peer server and Raft; then flushes sled.
    pub async fn shutdown(&self) {
        let inner = &self.inner;
        inner.cancel.cancel();
        if let Err(e) = inner.raft.shutdown().await {
            tracing::warn!(error = %e, "raft shutdown");
        }
        inner.tracker.close();
        if tokio::time::timeout(SHUTDOWN_GRACE, inner.tracker.wait())
            .await
            .is_err()
        {
            tracing::warn!("node tasks did not stop within the grace period");
        }
        if let Err(e) = inner.db.flush_async().await {
            tracing::warn!(error = %e, "final flush");
        }
        tracing::info!(id = self.id(), "node stopped");
    }
}
