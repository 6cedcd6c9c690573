//! Starting a node: its stores, Raft, the peer port, the workers, and the first election
//! of a new cluster.

use super::{Node, NodeInner};
use crate::config::NodeConfig;
use crate::error::NodeError;
use crate::network::{self, NetworkFactory, PeerClient};
use crate::store::{self, Waiting};
use crate::types::{Raft, RaftError, ServerMetrics};
use crate::worker::lease_clock::{self, ClockConfig, ClockRequest};
use crate::worker::proposer::{self, BatchBounds, Pending};
use crate::worker::reader::{self, ReadReply};
use crate::worker::snapshot;
use openraft::error::InitializeError;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Queued proposals, reads and clock requests before callers wait for room.
const QUEUE_LEN_MAX: usize = 16_384;

/// A number for this run of the node, drawn from the system's random source: the ids of
/// its requests (`RequestId::incarnation`) never match those of an earlier run.
fn incarnation() -> Result<u64, NodeError> {
    let bytes = crate::secret::random_bytes::<8>()
        .ok_or_else(|| NodeError::Config("no random source for the run's id".into()))?;
    Ok(u64::from_le_bytes(bytes).max(1))
}

impl Node {
    /// Starts a node listening for peers on `config.listen_addr().peer`.
    pub async fn start(config: NodeConfig) -> Result<Node, NodeError> {
        let listen = config.listen_addr().peer.clone();
        let listener = TcpListener::bind(&listen)
            .await
            .map_err(|e| NodeError::Config(format!("bind {listen}: {e}")))?;
        Node::start_on(config, listener).await
    }

    /// Starts a node on an already bound peer listener. A fresh node whose id is the lowest
    /// of `config.members` initialises the cluster; a node with data rejoins from it.
    pub async fn start_on(config: NodeConfig, listener: TcpListener) -> Result<Node, NodeError> {
        crate::hooks::check_environment()?;
        config.validate()?;
        std::fs::create_dir_all(&config.data_dir)
            .map_err(|e| NodeError::Storage(format!("{}: {e}", config.data_dir.display())))?;
        let db = store::open_db(&config.data_dir, config.sled_cache_bytes).await?;
        let waiting = Arc::new(Waiting::new(config.id, incarnation()?));
        let (mut log, sm) =
            store::open_with(&db, &config.data_dir, config.bounds.clone(), waiting)?;
        let stats = crate::stats::NodeStats::default();
        log.observe_fsync(stats.fsync_seconds.clone());
        log.set_node(config.id);
        let committed = log.committed_index();
        let replicating = log.replicating();
        #[cfg(feature = "unsafe-test-hooks")]
        let flush_gate = log.flush_gate();
        let shared = sm.shared();
        let peers = PeerClient::new(config.cluster_secret.clone(), config.peer_tls.clone())
            .map_err(|e| NodeError::Config(e.to_string()))?;
        let peer_tls = match &config.peer_tls {
            Some(tls) => Some(
                crate::tls::ReloadableTls::load(tls.server_files())
                    .map_err(|e| NodeError::Config(format!("peer TLS: {e}")))?,
            ),
            None => None,
        };
        let raft_config = Arc::new(config.raft_config()?);
        let raft = Raft::new(
            config.id,
            raft_config,
            NetworkFactory::new(peers.clone()),
            log,
            sm,
        )
        .await
        .map_err(|e| NodeError::Storage(e.to_string()))?;
        raft.pace_spare_followers(Duration::from_millis(config.spare_batch_ms));
        let peer_addr = listener
            .local_addr()
            .map_err(|e| NodeError::Config(e.to_string()))?;
        let (proposals, proposal_queue) = mpsc::channel(QUEUE_LEN_MAX);
        let (reads, read_queue) = mpsc::channel(QUEUE_LEN_MAX);
        let (clock, clock_queue) = mpsc::channel(QUEUE_LEN_MAX);
        let cancel = CancellationToken::new();
        let tracker = TaskTracker::new();
        let node = Node {
            inner: Arc::new(NodeInner {
                config,
                raft: raft.clone(),
                sm: shared,
                peers,
                peer_tls,
                proposals,
                reads,
                clock,
                committed,
                membership: tokio::sync::Mutex::new(()),
                peer_addr,
                stats,
                cancel: cancel.clone(),
                tracker: tracker.clone(),
                db,
                #[cfg(feature = "unsafe-test-hooks")]
                flush_gate,
            }),
        };
        tracker.spawn(follow_voters(
            raft.server_metrics(),
            replicating,
            cancel.clone(),
        ));
        node.spawn_workers(listener, proposal_queue, read_queue, clock_queue);
        node.bootstrap().await?;
        tracing::info!(id = node.id(), peer = %peer_addr, "node started");
        Ok(node)
    }

    fn spawn_workers(
        &self,
        listener: TcpListener,
        proposal_queue: mpsc::Receiver<Pending>,
        read_queue: mpsc::Receiver<ReadReply>,
        clock_queue: mpsc::Receiver<ClockRequest>,
    ) {
        let inner = &self.inner;
        let (cancel, tracker) = (inner.cancel.clone(), inner.tracker.clone());
        let app = network::router(self.clone());
        let serving = crate::listener::Serving {
            tls: inner.peer_tls.clone(),
            check: inner.peer_tls.as_ref().map(|_| self.member_check()),
        };
        let limits = inner.config.peer_conn_limits.unwrap_or_else(|| {
            crate::listener::ConnLimits::peer_default(crate::listener::descriptor_limit())
        });
        tracker.spawn(crate::listener::serve(
            listener,
            app,
            serving,
            limits,
            inner.stats.peer_connections.clone(),
            cancel.clone(),
        ));
        let bounds = BatchBounds {
            proposals_max: inner.config.batch_proposals_max,
            bytes_max: inner.config.batch_bytes_max,
            in_flight_max: inner.config.batches_in_flight_max,
            answer_within: Duration::from_millis(inner.config.propose_timeout_ms),
            queue_join_hold: Duration::from_micros(inner.config.queue_join_hold_us),
        };
        tracker.spawn(proposer::run(
            inner.raft.clone(),
            proposal_queue,
            bounds,
            inner.stats.clone(),
            tracker.clone(),
            cancel.clone(),
        ));
        let retry = Duration::from_millis(inner.config.heartbeat_ms);
        tracker.spawn(reader::run(
            inner.raft.clone(),
            read_queue,
            retry,
            cancel.clone(),
        ));
        tracker.spawn(snapshot::run(
            inner.raft.clone(),
            inner.sm.clone(),
            inner.config.snapshot_logs_since_last,
            cancel.clone(),
        ));
        let clock_config = ClockConfig::new(&inner.config);
        tracker.spawn(lease_clock::run(
            self.clone(),
            clock_config,
            clock_queue,
            cancel,
        ));
    }

    async fn bootstrap(&self) -> Result<(), NodeError> {
        let config = &self.inner.config;
        let initialized = self
            .inner
            .raft
            .is_initialized()
            .await
            .map_err(|_| NodeError::Stopped)?;
        let lowest = config.members.keys().next() == Some(&config.id);
        if initialized || !lowest || config.join_existing {
            return Ok(());
        }
        tracing::info!(members = config.members.len(), "initialising a new cluster");
        match self.inner.raft.initialize(config.members.clone()).await {
            Ok(()) | Err(RaftError::APIError(InitializeError::NotAllowed(_))) => Ok(()),
            Err(e) => Err(NodeError::Config(format!("initialise: {e}"))),
        }
    }

    /// The peer port's check of a client certificate under mutual TLS: it must name one
    /// member (`tls::member_id`) of the membership this node knows; while it knows none
    /// yet (a fresh cluster, a node waiting to be added) any member certificate will do,
    /// as the node holds nothing yet.
    fn member_check(&self) -> crate::listener::PeerCheck {
        let metrics = self.inner.raft.metrics();
        Arc::new(move |certs| {
            let leaf = certs
                .first()
                .ok_or_else(|| "no client certificate".to_owned())?;
            let id = crate::tls::member_id(leaf)?;
            let known = {
                let m = metrics.borrow();
                let membership = m.membership_config.membership();
                let empty = membership.nodes().next().is_none();
                empty || membership.get_node(&id).is_some()
            };
            if known {
                Ok(())
            } else {
                Err(format!("node {id} is not a member"))
            }
        })
    }
}

/// Keeps `replicating` true while the membership has a voter besides this node, so the log
/// store knows whether a leader's own flush can wait for its entries to go out first
/// (decision #132). Wakes only when openraft's server metrics change.
async fn follow_voters(
    mut metrics: watch::Receiver<ServerMetrics>,
    replicating: Arc<AtomicBool>,
    cancel: CancellationToken,
) {
    loop {
        let others = {
            let m = metrics.borrow_and_update();
            m.membership_config
                .membership()
                .voter_ids()
                .any(|id| id != m.id)
        };
        replicating.store(others, Ordering::Relaxed);
        tokio::select! {
            changed = metrics.changed() => if changed.is_err() { return },
            () = cancel.cancelled() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{NodeAddr, NodeId};
    use std::collections::BTreeMap;

    /// Server metrics of node 1 with `voters` voting and `learners` learning.
    fn metrics_with(voters: &[NodeId], learners: &[NodeId]) -> ServerMetrics {
        let addr = |id: &NodeId| {
            (
                *id,
                NodeAddr {
                    peer: format!("127.0.0.1:{}", 7100 + id),
                    api: format!("127.0.0.1:{}", 7000 + id),
                },
            )
        };
        let nodes: BTreeMap<NodeId, NodeAddr> = voters.iter().chain(learners).map(addr).collect();
        let membership = openraft::Membership::new(vec![voters.iter().copied().collect()], nodes);
        ServerMetrics {
            id: 1,
            vote: openraft::Vote::default(),
            state: openraft::ServerState::Leader,
            current_leader: Some(1),
            membership_config: Arc::new(openraft::StoredMembership::new(None, membership)),
        }
    }

    /// The switch follows the membership: on with another voter, off alone or with only
    /// learners beside this node.
    #[tokio::test]
    async fn the_replicating_switch_follows_the_other_voters() {
        let (tx, rx) = watch::channel(metrics_with(&[1], &[]));
        let replicating = Arc::new(AtomicBool::new(true));
        let cancel = CancellationToken::new();
        let task = tokio::spawn(follow_voters(rx, replicating.clone(), cancel.clone()));
        let becomes = |want: bool| {
            let replicating = replicating.clone();
            async move {
                let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
                while replicating.load(Ordering::Relaxed) != want {
                    assert!(
                        tokio::time::Instant::now() < deadline,
                        "switch never {want}"
                    );
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
        };
        becomes(false).await;
        tx.send_replace(metrics_with(&[1, 2, 3], &[]));
        becomes(true).await;
        tx.send_replace(metrics_with(&[1], &[2]));
        becomes(false).await;
        cancel.cancel();
        task.await.expect("the task ends when cancelled");
    }
}
