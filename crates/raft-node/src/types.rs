//! openraft's type configuration for baton, short names for its generic types, and the one
//! reading of leadership from Raft metrics ([`leading_term`]).

use baton_state_machine::{Applied, Proposal};
use serde::{Deserialize, Serialize};
use std::io::Cursor;

/// A Raft node id.
pub type NodeId = u64;

/// Where a node listens: its peer port (Raft RPCs) and its client API port.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeAddr {
    /// `host:port` of the peer API (Raft traffic, forwarding).
    pub peer: String,
    /// `host:port` of the client API (HTTP/JSON), what clients are redirected to.
    pub api: String,
}

impl std::fmt::Display for NodeAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "peer={} api={}", self.peer, self.api)
    }
}

/// One Raft entry's payload: many proposals gathered by group commit.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Batch {
    /// The proposals, applied in order.
    pub proposals: Vec<Proposal>,
    /// Who to tell once the leader that made this entry has flushed it (never encoded:
    /// only the leader's own copy, on its way to its log, carries any; decision #146).
    #[serde(skip)]
    pub(crate) notices: FlushNotices,
    /// Who to answer once this node applies the entry (never encoded: only the copy of
    /// the node whose proposer made the entry carries any; decision #147).
    #[serde(skip)]
    pub(crate) callers: Callers,
}

impl Batch {
    /// A batch of `proposals` that tells nobody of its flush.
    pub fn new(proposals: Vec<Proposal>) -> Batch {
        Batch {
            proposals,
            notices: FlushNotices::default(),
            callers: Callers::default(),
        }
    }
}

/// Where a leader's own flush of an entry is told: the entry's log id, and the place of
/// a forwarded proposal in its batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlushedAt {
    /// The entry's log id.
    pub log_id: LogId,
    /// The proposal's place in the entry's batch.
    pub slot: u32,
}

/// A proposal waiting for the leader's flush of its entry: its place in the batch and
/// where to tell it.
pub(crate) type FlushWait = (u32, tokio::sync::oneshot::Sender<FlushedAt>);

/// The proposals of a batch that wait for the leader's flush of their entry.
pub(crate) type FlushNotices = Handoff<FlushWait>;

/// Where the callers of a batch's proposals are answered, in the batch's order: the
/// proposer's, handed to the apply of this node's own copy of the entry (decision #147).
pub(crate) type Callers = Handoff<tokio::sync::oneshot::Sender<crate::worker::proposer::Answer>>;

/// Values that ride along with a batch on its way through this node, never encoded:
/// shared by the clones of the entry and taken once, by whoever comes first.
pub(crate) struct Handoff<T>(Option<std::sync::Arc<std::sync::Mutex<Vec<T>>>>);

impl<T> Handoff<T> {
    /// A handoff of `values`; none if it is empty.
    pub(crate) fn new(values: Vec<T>) -> Self {
        Handoff((!values.is_empty()).then(|| std::sync::Arc::new(values.into())))
    }

    /// Takes the values out (the first call only gets any).
    pub(crate) fn take(&self) -> Vec<T> {
        match &self.0 {
            Some(shared) => std::mem::take(&mut *shared.lock().unwrap_or_else(|e| e.into_inner())),
            None => Vec::new(),
        }
    }
}

impl<T> Clone for Handoff<T> {
    fn clone(&self) -> Self {
        Handoff(self.0.clone())
    }
}

impl<T> Default for Handoff<T> {
    fn default() -> Self {
        Handoff(None)
    }
}

impl<T> std::fmt::Debug for Handoff<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Handoff")
    }
}

/// What rides along is not part of an entry's value: two batches of the same proposals
/// are equal.
impl<T> PartialEq for Handoff<T> {
    fn eq(&self, _: &Handoff<T>) -> bool {
        true
    }
}

impl<T> Eq for Handoff<T> {}

/// One Raft entry's result: one [`Applied`] per proposal (empty for blank and membership
/// entries).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchReply {
    /// Results, in the order of the batch's proposals.
    pub applied: Vec<Applied>,
}

openraft::declare_raft_types!(
    /// baton's openraft configuration: batches in, replies out, u64 ids, two addresses.
    pub TypeConfig:
        D = Batch,
        R = BatchReply,
        NodeId = NodeId,
        Node = NodeAddr,
);

/// A log id.
pub type LogId = openraft::LogId<NodeId>;
/// A log entry.
pub type Entry = openraft::Entry<TypeConfig>;
/// A vote.
pub type Vote = openraft::Vote<NodeId>;
/// A snapshot.
pub type Snapshot = openraft::Snapshot<TypeConfig>;
/// A snapshot's metadata.
pub type SnapshotMeta = openraft::SnapshotMeta<NodeId, NodeAddr>;
/// The membership recorded with the applied state.
pub type StoredMembership = openraft::StoredMembership<NodeId, NodeAddr>;
/// A storage error as openraft wants it.
pub type StorageError = openraft::StorageError<NodeId>;
/// The Raft handle.
pub type Raft = openraft::Raft<TypeConfig>;
/// Raft metrics.
pub type RaftMetrics = openraft::RaftMetrics<NodeId, NodeAddr>;
/// The server part of the Raft metrics (vote, role, leader, membership): published only
/// when one of them changes, unlike [`RaftMetrics`], which is sent on every turn of
/// openraft's loop, so a task that follows leadership should watch this one.
pub type ServerMetrics = openraft::metrics::RaftServerMetrics<NodeId, NodeAddr>;
/// openraft's error wrapper, with an API error `E`.
pub type RaftError<E = openraft::error::Infallible> = openraft::error::RaftError<NodeId, E>;
/// An RPC error towards a peer.
pub type RpcError<E = openraft::error::Infallible> =
    openraft::error::RPCError<NodeId, NodeAddr, RaftError<E>>;
/// The client-write error.
pub type ClientWriteError = openraft::error::ClientWriteError<NodeId, NodeAddr>;
/// The read-index error.
pub type CheckIsLeaderError = openraft::error::CheckIsLeaderError<NodeId, NodeAddr>;

/// The term this node leads, as its own Raft server metrics show: `Some(term)` when it is
/// the leader and names itself leader, `None` otherwise. The crate's one leadership check; a
/// quorum confirms it with a read index (`worker::reader::read_index`).
pub(crate) fn leading_term(metrics: &ServerMetrics) -> Option<u64> {
    let leads = metrics.state == openraft::ServerState::Leader
        && metrics.current_leader == Some(metrics.id);
    leads.then(|| metrics.vote.leader_id().get_term())
}
