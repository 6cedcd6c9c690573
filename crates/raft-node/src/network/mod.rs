//! Peer traffic on the peer port: Raft RPCs (append, vote, snapshot) and the node's own
//! forwarding (proposals, read index, keepalives) to the leader. Bodies are bincode; an
//! optional shared secret must be presented in [`SECRET_HEADER`].

mod client;
mod link;
pub mod paths;
mod server;

pub use client::{NetworkFactory, PeerClient, PeerError};
pub use server::{PeerFailure, router};

use crate::types::NodeId;

/// Where a peer call goes: a member's id and its peer address. Under mutual TLS the
/// certificate presented at that address must name that member (`tls::member_id`).
#[derive(Clone, Copy, Debug)]
pub struct Target<'a> {
    /// The member's id (0: any member, for tests of the transport alone).
    pub id: NodeId,
    /// Its peer address, `host:port`.
    pub addr: &'a str,
}

/// The header that carries the cluster secret.
pub const SECRET_HEADER: &str = "x-baton-cluster-secret";
/// Largest peer request body: room for snapshot chunks and big AppendEntries.
pub const PEER_BODY_BYTES_MAX: usize = 64 << 20;
