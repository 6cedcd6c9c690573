//! [`Node`]: one member of a baton cluster. Start it, propose commands, read the state
//! linearizably or locally, follow applied events, keep leases alive, change membership,
//! and shut it down. Followers forward proposals, read-index requests and keepalives to
//! the leader over the peer port; callers never look for the leader themselves.

use crate::config::NodeConfig;
use crate::error::NodeError;
use crate::membership::{self, MemberChange};
use crate::network::{
    self, ForwardFrame, FramedCall, NetworkFactory, PeerClient, PeerError, PeerFailure, Target,
};
use crate::store::{
    self, AppliedBatch, AppliedProgress, ApplyObserver, ClaimWait, LeaseRecords, Observing,
    SmShared,
};
use crate::types::{
    FlushedAt, LogId, NodeAddr, NodeId, Raft, RaftError, ServerMetrics, leading_term,
};
use crate::worker::lease_clock::{self, ClockConfig, ClockPort, ClockRequest, KeepaliveAnswer};
use crate::worker::proposer::{self, BatchBounds, Pending};
use crate::worker::reader::{self, ReadReply};
use crate::worker::snapshot;
use baton_state_machine::{
    Applied, Command, LeaseCheckpoint, LeaseId, Proposal, ResourceId, Revision, StateMachine,
};
use openraft::error::InitializeError;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{broadcast, mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// How many times a request is re-routed after a leader change before giving up (the
/// caller's deadline usually ends it first).
const ROUTE_ATTEMPTS_MAX: u32 = 100;
/// Queued proposals, reads and clock requests before callers wait for room.
const QUEUE_LEN_MAX: usize = 16_384;
/// How long shutdown waits for tasks and open peer connections.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// The query parameter of a forwarded proposal that names the forwarding node.
pub(crate) const FORWARDED_FROM: &str = "from";

/// The query parameter (`=1`) of a forwarded proposal whose node reads the committed entry
/// from the leader's answer (decision #131).
pub(crate) const COMMIT_NOTICE: &str = "notice";

/// The query parameter (`=1`) of a forwarded proposal whose node reads the leader's
/// answer in frames, the first as soon as the leader has flushed the entry (#146).
pub(crate) const FLUSH_NOTICE: &str = "flushed";

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
    /// Where this node forwards a proposal: `/baton/propose?from=<this node>&notice=1`, so
    /// the leader's answer names the committed entry (#131; a leader of an older version
    /// ignores the query and sends this node a heartbeat, or every node one). Built once.
    forwarded_propose_path: String,
    /// The same with `&flushed=1`: the answer comes in frames, the first once the leader
    /// has flushed the entry (#146). Used where the leader and this node are a majority.
    flush_noticed_propose_path: String,
    /// Where this node forwards a read index: `/baton/read_index?from=<this node>`, so
    /// the leader does not treat it as a spare (#136). Built once.
    forwarded_read_path: String,
    cancel: CancellationToken,
    tracker: TaskTracker,
    db: sled::Db,
    /// Test-only: the lock taken before each of the log's flushes.
    #[cfg(feature = "unsafe-test-hooks")]
    flush_gate: crate::store::FlushGate,
}

/// The cluster as one node sees it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterStatus {
    /// This node.
    pub id: NodeId,
    /// Leader, Follower, Candidate, Learner or Shutdown.
    pub state: String,
    /// The current leader, if known.
    pub leader: Option<NodeId>,
    /// The current term.
    pub term: u64,
    /// Last log index on this node.
    pub last_log_index: u64,
    /// Last committed index this node knows.
    pub committed_index: u64,
    /// Last applied index on this node.
    pub applied_index: u64,
    /// The state machine's revision on this node.
    pub revision: Revision,
    /// Index of the last snapshot, if any.
    pub snapshot_index: Option<u64>,
    /// Index up to which the log is purged, if any.
    pub purged_index: Option<u64>,
    /// Every member, voters and learners.
    pub members: Vec<MemberStatus>,
}

impl ClusterStatus {
    /// Ready to serve: this node is a member of the configuration it holds, knows a leader
    /// and has applied what it knows to be committed. A node without the configuration (not
    /// received yet, or removed) never starts an election, so the leader it last heard of
    /// would otherwise stay "known" after that leader died.
    pub fn ready(&self) -> bool {
        let member = self.members.iter().any(|m| m.id == self.id);
        member && self.leader.is_some() && self.applied_index >= self.committed_index
    }
}

/// One member in a [`ClusterStatus`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberStatus {
    /// Its id.
    pub id: NodeId,
    /// Its addresses.
    pub addr: NodeAddr,
    /// Voter or learner.
    pub voter: bool,
    /// On the leader: the last index replicated to it.
    pub matched_index: Option<u64>,
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
        let (mut log, sm) = store::open_with(&db, &config.data_dir, config.bounds.clone())?;
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
        let forwarded_propose_path = format!(
            "{}?{FORWARDED_FROM}={}&{COMMIT_NOTICE}=1",
            Route::Propose.path(),
            config.id
        );
        let flush_noticed_propose_path = format!("{forwarded_propose_path}&{FLUSH_NOTICE}=1");
        let forwarded_read_path =
            format!("{}?{FORWARDED_FROM}={}", Route::ReadIndex.path(), config.id);
        let node = Node {
            inner: Arc::new(NodeInner {
                forwarded_propose_path,
                flush_noticed_propose_path,
                forwarded_read_path,
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

    /// What this node measures about itself: commit and fsync latency, proposals per
    /// entry, forwarded requests, commit notices.
    pub fn stats(&self) -> &crate::stats::NodeStats {
        &self.inner.stats
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

    /// Whether `leader` and this node are a majority of every configuration of the
    /// membership this node knows (a cluster of three): then a write this node forwards
    /// is committed once both have flushed it, and the leader's flush notice lets Raft
    /// commit it here (decision #146; Raft checks the same again).
    fn majority_with(&self, leader: NodeId) -> bool {
        let m = self.inner.raft.metrics();
        let m = m.borrow();
        let pair = [leader, self.id()];
        let configs = m.membership_config.membership().get_joint_config();
        configs.iter().all(|voters| {
            let present = pair.iter().filter(|id| voters.contains(id)).count();
            present * 2 > voters.len()
        })
    }

    /// Proposes a command (forwarded to the leader if this node is not). On timeout the
    /// outcome is unknown (`Indeterminate`), never reported as failed.
    pub async fn propose(&self, proposal: Proposal) -> Result<Applied, NodeError> {
        proposal.validate_from_outside(&self.inner.config.limits)?;
        let applied: Applied = self.routed(proposal, Route::Propose).await?;
        self.catch_up_to(applied.revision).await;
        Ok(applied)
    }

    /// Waits until this node has applied `revision`, so that a write it forwarded is
    /// answered only once this node shows it (spec §3), as the leader's answer does. At
    /// once on the leader. The write is committed whatever happens here: if this node
    /// cannot catch up within `propose_timeout_ms` (cut off from the leader since), it
    /// answers anyway and logs why.
    async fn catch_up_to(&self, revision: Revision) {
        let mut progress = self.inner.sm.progress();
        if progress.borrow().revision >= revision {
            return;
        }
        let timeout = Duration::from_millis(self.inner.config.propose_timeout_ms);
        let reached = progress.wait_for(|p| p.revision >= revision);
        if !matches!(tokio::time::timeout(timeout, reached).await, Ok(Ok(_))) {
            tracing::warn!(
                revision = revision.0,
                "a forwarded write is answered before this node applied it"
            );
        }
    }

    /// A proposal a follower forwarded: checked exactly as one from the API (limits, and
    /// never a command only the leader's clock may issue), then proposed here. The
    /// follower (`from`) answers only once it has applied the write, so it must learn
    /// the commit at once (it would otherwise wait for the next entries or 2 ms, decision
    /// #108). A follower that reads notices (`notice`) gets the entry's log id in the
    /// answer and commits up to it itself, at once or when the entry reaches it (decision
    /// #131). One that does not (an older version) gets a heartbeat carrying the commit
    /// index, and every follower gets one if it did not say who it is (#111, #127).
    ///
    /// `flushed`, if given, is told where the proposal is once this node has flushed its
    /// entry (decision #146).
    pub(crate) async fn propose_forwarded(
        &self,
        proposal: Proposal,
        from: Option<NodeId>,
        notice: bool,
        flushed: Option<oneshot::Sender<FlushedAt>>,
    ) -> Result<(Applied, Option<LogId>), NodeError> {
        proposal.validate_from_outside(&self.inner.config.limits)?;
        if self.inner.config.callers_required && proposal.caller.is_none() {
            // With auth on, a proposal without a principal would skip every rule in
            // `apply`: only this process's own clock may send one, never a peer.
            return Err(NodeError::Invalid(baton_state_machine::Error::Invalid {
                field: "caller",
                reason: "this cluster runs with authentication: a forwarded proposal must \
                         name its principal"
                    .into(),
            }));
        }
        let (applied, log_id) = self
            .for_follower(from, self.propose_logged(proposal, flushed))
            .await?;
        if notice {
            return Ok((applied, Some(log_id)));
        }
        let trigger = self.inner.raft.trigger();
        let sent = match from {
            Some(follower) => trigger.heartbeat_to(follower).await,
            None => trigger.heartbeat().await,
        };
        if sent.is_err() {
            tracing::debug!("no heartbeat after a forwarded write: raft has stopped");
        }
        Ok((applied, None))
    }

    /// Runs `work` for a follower (`from`, if it said) that serves clients through this
    /// leader. That follower is never a spare for a while, so it receives new entries at
    /// once instead of in batches (decision #136) and can apply what it forwarded without
    /// waiting. It is preferred before `work` and again after it, since a held-open
    /// acquire may outlast a preference and the follower must then receive the entry.
    async fn for_follower<T>(&self, from: Option<NodeId>, work: impl Future<Output = T>) -> T {
        let prefer = || {
            if let Some(follower) = from {
                self.inner.raft.prefer_replication_to(follower);
            }
        };
        prefer();
        let out = work.await;
        prefer();
        out
    }

    /// A read index a follower (`from`, if it said) asked for: as
    /// [`read_index_here`](Self::read_index_here), and that follower is preferred.
    pub(crate) async fn read_index_forwarded(
        &self,
        from: Option<NodeId>,
    ) -> Result<u64, NodeError> {
        self.for_follower(from, self.read_index_here()).await
    }

    /// Proposes on this node, which must be the leader.
    pub(crate) async fn propose_here(&self, proposal: Proposal) -> Result<Applied, NodeError> {
        Ok(self.propose_logged(proposal, None).await?.0)
    }

    /// [`propose_here`](Self::propose_here), with the id of the entry that carried it;
    /// `flushed` is told where the proposal is once this node has flushed the entry.
    async fn propose_logged(
        &self,
        proposal: Proposal,
        flushed: Option<oneshot::Sender<FlushedAt>>,
    ) -> Result<(Applied, LogId), NodeError> {
        let bytes = bincode::serialized_size(&proposal).unwrap_or(0) as usize;
        let joins_queue = self.inner.config.queue_join_hold_us > 0
            && proposal
                .command
                .waiting_claim()
                .is_some_and(|(id, lease, owner)| {
                    self.inner.sm.query(|sm| sm.joins_queue(&id, lease, owner))
                });
        let (reply, answer) = oneshot::channel();
        self.inner
            .proposals
            .send(Pending {
                proposal,
                bytes,
                reply,
                joins_queue,
                flushed,
            })
            .await
            .map_err(|_| NodeError::Stopped)?;
        answer
            .await
            .map_err(|_| NodeError::Indeterminate("the proposer dropped the proposal".into()))?
    }

    /// A linearizable read index: the leader confirmed its leadership after the call began,
    /// and this node has applied at least that far.
    pub async fn read_index(&self) -> Result<u64, NodeError> {
        let timeout = Duration::from_millis(self.inner.config.propose_timeout_ms);
        let index = self.routed((), Route::ReadIndex).await?;
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

    /// The cluster as the leader sees it (with every member's replication progress).
    pub async fn leader_status(&self) -> Result<ClusterStatus, NodeError> {
        self.routed((), Route::Status).await
    }

    /// This node's status; this node must be the leader.
    pub(crate) fn leader_status_here(&self) -> Result<ClusterStatus, NodeError> {
        self.require_leader()?;
        Ok(self.status())
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

    /// The cluster as this node sees it.
    pub fn status(&self) -> ClusterStatus {
        let m = self.inner.raft.metrics().borrow().clone();
        let progress = *self.inner.sm.progress().borrow();
        let membership = m.membership_config.membership();
        let voters: BTreeSet<NodeId> = membership.voter_ids().collect();
        let members = membership
            .nodes()
            .map(|(id, addr)| MemberStatus {
                id: *id,
                addr: addr.clone(),
                voter: voters.contains(id),
                matched_index: m
                    .replication
                    .as_ref()
                    .and_then(|r| r.get(id).cloned().flatten())
                    .map(|l| l.index),
            })
            .collect();
        ClusterStatus {
            id: self.id(),
            state: format!("{:?}", m.state),
            leader: m.current_leader,
            term: m.current_term,
            last_log_index: m.last_log_index.unwrap_or(0),
            committed_index: self.inner.committed.load(Ordering::Relaxed),
            applied_index: progress.log_index,
            revision: progress.revision,
            snapshot_index: m.snapshot.map(|l| l.index),
            purged_index: m.purged.map(|l| l.index),
            members,
        }
    }

    /// Adds a member: its addresses are checked and it must answer with its id; it joins as
    /// a learner and votes once caught up, or is removed again at the deadline. Forwarded
    /// to the leader; one change at a time (`membership.rs`).
    pub async fn add_member(&self, id: NodeId, addr: NodeAddr) -> Result<(), NodeError> {
        self.change_membership(MemberChange::Add { id, addr }).await
    }

    /// Removes a member (voter or learner), unless fewer reachable, caught-up voters than a
    /// quorum would be left. Forwarded to the leader. Stop the removed node afterwards: it
    /// does not learn of its removal.
    pub async fn remove_member(&self, id: NodeId) -> Result<(), NodeError> {
        self.change_membership(MemberChange::Remove { id }).await
    }

    /// Runs a membership change here if this node leads, else on the leader (one attempt:
    /// a change may take the catch-up deadline, longer than any routed request).
    async fn change_membership(&self, change: MemberChange) -> Result<(), NodeError> {
        match self.leader() {
            Some((id, _)) if id == self.id() => membership::change_here(self, change).await,
            Some((leader, addr)) => {
                let config = &self.inner.config;
                let budget = Duration::from_millis(
                    config.member_catchup_timeout_ms + 2 * config.propose_timeout_ms,
                );
                let reply: Result<(), PeerFailure> = self
                    .inner
                    .peers
                    .call(
                        Target {
                            id: leader,
                            addr: &addr.peer,
                        },
                        membership::CHANGE_PATH,
                        &change,
                        budget,
                    )
                    .await
                    .map_err(|e| match e {
                        PeerError::Unreachable(_) => NodeError::NoLeader,
                        other => NodeError::Unavailable(format!(
                            "the leader did not answer the membership change: {other}"
                        )),
                    })?;
                reply.map_err(NodeError::from)
            }
            None => Err(NodeError::NoLeader),
        }
    }

    /// The peer client (membership probes).
    pub(crate) fn peers(&self) -> &PeerClient {
        &self.inner.peers
    }

    /// The lock that keeps membership changes one at a time.
    pub(crate) fn membership_lock(&self) -> &tokio::sync::Mutex<()> {
        &self.inner.membership
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

    /// Sends a request to the leader (this node or another), re-routing after leader
    /// changes until `propose_timeout_ms` has passed. A request that was never sent (no
    /// leader known or reachable) ends as `NoLeader`; one that was sent and got no answer
    /// ends as `Indeterminate` (a proposal) or `Unavailable` (anything else).
    async fn routed<Req, Resp>(&self, request: Req, route: Route) -> Result<Resp, NodeError>
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
                        let path = match route {
                            Route::Propose if self.majority_with(leader) => {
                                &self.inner.flush_noticed_propose_path
                            }
                            Route::Propose => &self.inner.forwarded_propose_path,
                            Route::ReadIndex => &self.inner.forwarded_read_path,
                            _ => route.path(),
                        };
                        let to = Target {
                            id: leader,
                            addr: &addr.peer,
                        };
                        Resp::there(self, to, path, &request).await
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

    /// Sends `request` to the leader `to`; the reply, and the committed entry the
    /// leader named in it (answers to forwarded proposals only).
    async fn forward<Req: Serialize, Resp: DeserializeOwned>(
        &self,
        to: Target<'_>,
        path: &str,
        request: &Req,
    ) -> Result<(Resp, Option<LogId>), NodeError> {
        let timeout = Duration::from_millis(self.inner.config.propose_timeout_ms);
        let (reply, committed): (Result<Resp, PeerFailure>, _) = self
            .inner
            .peers
            .call_noting(to, path, request, timeout)
            .await
            .map_err(forward_failure)?;
        Ok((reply.map_err(NodeError::from)?, committed))
    }

    /// Forwards `proposal` to the leader at `addr` and reads its answer in frames. Once the
    /// leader says it has flushed the entry carrying the proposal, this node tells its Raft
    /// (which commits the entry once it holds it too, where the two nodes are a quorum)
    /// and answers with whichever comes first: the result of its own apply of that entry,
    /// or the leader's answer (decision #146). The rest of the leader's answer is read in
    /// the background, so that its connection can carry the next call.
    async fn forward_proposal(
        &self,
        to: Target<'_>,
        path: &str,
        proposal: &Proposal,
    ) -> Result<Applied, NodeError> {
        let timeout = Duration::from_millis(self.inner.config.propose_timeout_ms);
        let body = crate::codec::encode(proposal)
            .map_err(|e| forward_failure(PeerError::Network(e.to_string())))?;
        let mut call = FramedCall::start(&self.inner.peers, to, path, body)
            .await
            .map_err(forward_failure)?;
        loop {
            let at = match call.next().await.map_err(forward_failure)? {
                ForwardFrame::Flushed(at) => at,
                answer => return self.leaders_answer(answer).await,
            };
            // Registered before Raft hears of it: the apply cannot come first.
            let Some(mut own) = self.inner.sm.await_result(at) else {
                continue;
            };
            if self
                .inner
                .raft
                .trigger()
                .flush_notice(at.log_id)
                .await
                .is_err()
            {
                tracing::debug!("no flush notice: raft has stopped");
            }
            tokio::select! {
                biased;
                Ok(applied) = &mut own => {
                    self.inner.stats.early_commits.inc();
                    let rest = call.finish(timeout);
                    self.inner.tracker.spawn(rest);
                    return Ok(applied);
                }
                frame = call.next() => {
                    return self.leaders_answer(frame.map_err(forward_failure)?).await;
                }
            }
        }
    }

    /// The outcome the leader's last frame gives a forwarded proposal, after learning the
    /// commit it names (a second `Flushed` frame is a leader's error).
    async fn leaders_answer(&self, frame: ForwardFrame) -> Result<Applied, NodeError> {
        match frame {
            ForwardFrame::Answer { result, committed } => {
                if let Some(log_id) = committed {
                    self.learn_commit(log_id).await;
                }
                result.map_err(NodeError::from)
            }
            ForwardFrame::Flushed(_) => Err(NodeError::Indeterminate(
                "the leader said twice where a proposal is".to_owned(),
            )),
        }
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

/// Requests that can be routed to the leader.
#[derive(Clone, Copy)]
enum Route {
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

    fn path(self) -> &'static str {
        match self {
            Route::Propose => "/baton/propose",
            Route::ReadIndex => "/baton/read_index",
            Route::Keepalive => "/baton/keepalive",
            Route::Remaining => "/baton/lease_remaining",
            Route::RemainingMany => "/baton/leases_remaining",
            Route::Status => "/baton/status",
        }
    }
}

/// How the leader answers a routed request itself.
trait RouteLocal<Req: Serialize + Sync>: Sized + DeserializeOwned + Send {
    fn here(
        node: &Node,
        route: Route,
        request: Req,
    ) -> impl Future<Output = Result<Self, NodeError>> + Send;

    /// Sends `request` to the leader at `addr` (its peer address) on `path`; learns the
    /// commit the leader's answer names, if it names one.
    fn there(
        node: &Node,
        to: Target<'_>,
        path: &str,
        request: &Req,
    ) -> impl Future<Output = Result<Self, NodeError>> + Send {
        async move {
            let (reply, committed) = node.forward(to, path, request).await?;
            if let Some(log_id) = committed {
                node.learn_commit(log_id).await;
            }
            Ok(reply)
        }
    }
}

impl RouteLocal<Proposal> for Applied {
    async fn here(node: &Node, _: Route, request: Proposal) -> Result<Applied, NodeError> {
        node.propose_here(request).await
    }

    async fn there(
        node: &Node,
        to: Target<'_>,
        path: &str,
        request: &Proposal,
    ) -> Result<Applied, NodeError> {
        node.forward_proposal(to, path, request).await
    }
}

impl RouteLocal<()> for u64 {
    async fn here(node: &Node, _: Route, (): ()) -> Result<u64, NodeError> {
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
fn forward_failure(e: PeerError) -> NodeError {
    match e {
        // Nothing was sent: the caller may route again.
        PeerError::Unreachable(_) => NodeError::NoLeader,
        PeerError::Network(m) => NodeError::Indeterminate(m),
        PeerError::Refused(status) => {
            NodeError::Unavailable(format!("leader refused with status {status}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn routes_have_distinct_paths() {
        let paths: BTreeMap<&str, ()> = [
            Route::Propose,
            Route::ReadIndex,
            Route::Keepalive,
            Route::Remaining,
            Route::RemainingMany,
            Route::Status,
        ]
        .into_iter()
        .map(|r| (r.path(), ()))
        .collect();
        assert_eq!(paths.len(), 6);
    }

    /// Node 2 of a 3-node cluster that knows leader 1, with `members` in its configuration.
    fn follower_status(members: &[NodeId]) -> ClusterStatus {
        ClusterStatus {
            id: 2,
            state: "Follower".into(),
            leader: Some(1),
            term: 1,
            last_log_index: 0,
            committed_index: 0,
            applied_index: 0,
            revision: Revision::default(),
            snapshot_index: None,
            purged_index: None,
            members: members
                .iter()
                .map(|id| MemberStatus {
                    id: *id,
                    addr: NodeAddr::default(),
                    voter: true,
                    matched_index: None,
                })
                .collect(),
        }
    }

    /// A follower that heard from the leader before it received the configuration (the
    /// leader died in between) is not ready: it will never elect, and its leader is gone.
    #[test]
    fn readiness_needs_membership_a_leader_and_the_commit_applied() {
        assert!(follower_status(&[1, 2, 3]).ready());
        assert!(!follower_status(&[]).ready(), "no configuration yet");
        assert!(!follower_status(&[1, 3]).ready(), "removed");
        let mut leaderless = follower_status(&[1, 2, 3]);
        leaderless.leader = None;
        assert!(!leaderless.ready());
        let mut behind = follower_status(&[1, 2, 3]);
        behind.committed_index = 5;
        behind.applied_index = 4;
        assert!(!behind.ready());
    }

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
