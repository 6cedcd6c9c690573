//! Peer traffic on the peer port: Raft RPCs (append, vote, snapshot) and the node's own
//! forwarding (proposals, read index, keepalives) to the leader. Bodies are bincode; an
//! optional shared secret must be presented in [`SECRET_HEADER`].

mod client;
mod link;
mod server;

pub use client::{NetworkFactory, PeerClient, PeerError};
pub use server::{PeerFailure, router};

/// The header that carries the cluster secret.
pub const SECRET_HEADER: &str = "x-baton-cluster-secret";
/// Largest peer request body: room for snapshot chunks and big AppendEntries.
pub const PEER_BODY_BYTES_MAX: usize = 64 << 20;
