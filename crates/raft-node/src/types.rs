//! openraft's type configuration for baton, short names for its generic types, and the one
//! reading of leadership from Raft metrics ([`leading_term`]).

use baton_state_machine::Proposal;
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

/// Who waits for a proposal's result: the node that took it from a client, that node's
/// run, and the request's number in that run (`store::waiting`). Only that node's apply
/// answers it; every other node applies the proposal and answers nobody.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RequestId {
    /// The node that waits.
    pub node: NodeId,
    /// Its run: drawn at start, never 0, so a restarted node never takes an entry of its
    /// earlier run for one of its own requests.
    pub incarnation: u64,
    /// The request's number in that run.
    pub seq: u64,
}

impl RequestId {
    /// The id of a proposal nobody waits for (no run has incarnation 0).
    pub const NOBODY: RequestId = RequestId {
        node: 0,
        incarnation: 0,
        seq: 0,
    };
}

/// One Raft entry's payload: many proposals gathered by group commit, each with the id of
/// the request that waits for its result.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Batch {
    /// The proposals, applied in order.
    pub proposals: Vec<(RequestId, Proposal)>,
}

impl Batch {
    /// A batch of `proposals` that nobody waits for (tests, tools).
    pub fn new(proposals: Vec<Proposal>) -> Batch {
        Batch {
            proposals: proposals
                .into_iter()
                .map(|p| (RequestId::NOBODY, p))
                .collect(),
        }
    }
}

/// What openraft hands back for one entry: nothing. The results reach their callers
/// through the registry of waiting requests (`store::waiting`), and openraft's answer to
/// the proposer only says where the entry landed, or why it did not.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchReply;

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
/// the leader and names itself leader, `None` otherwise. The check of leader-only paths
/// (`routed` goes by the known leader's id); a quorum confirms it with a read index
/// (`worker::reader::read_index`).
pub(crate) fn leading_term(metrics: &ServerMetrics) -> Option<u64> {
    let leads = metrics.state == openraft::ServerState::Leader
        && metrics.current_leader == Some(metrics.id);
    leads.then(|| metrics.vote.leader_id().get_term())
}
