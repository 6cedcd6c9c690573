//! Peer traffic on the peer port: Raft RPCs (append, vote, snapshot) and the node's own
//! forwarding (proposals, read index, keepalives) to the leader. Bodies are bincode; an
//! optional shared secret must be presented in [`SECRET_HEADER`].

mod client;
mod framed;
mod link;
mod server;

pub use client::{NetworkFactory, PeerClient, PeerError};
pub(crate) use framed::FramedCall;
pub use framed::{FRAMED_HEADER, ForwardFrame};
pub use server::{PeerFailure, router};

use crate::types::{LogId, NodeId};

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
/// The header of the leader's answer to a forwarded proposal that names the committed
/// entry which carried it (decision #131), as [`format_log_id`] writes it.
pub const COMMITTED_HEADER: &str = "x-baton-committed";

/// `term-node-index`: a log id as [`COMMITTED_HEADER`] carries it.
pub fn format_log_id(log_id: &LogId) -> String {
    let leader = &log_id.leader_id;
    format!("{}-{}-{}", leader.term, leader.node_id, log_id.index)
}

/// Reads [`format_log_id`]'s form back; `None` if it is not one.
pub fn parse_log_id(text: &str) -> Option<LogId> {
    let mut parts = text.split('-').map(|p| p.parse::<u64>().ok());
    let (term, node, index) = (parts.next()??, parts.next()??, parts.next()??);
    if parts.next().is_some() {
        return None;
    }
    let leader = openraft::CommittedLeaderId::new(term, node);
    Some(LogId::new(leader, index))
}

/// The committed entry an answer's [`COMMITTED_HEADER`] names, if it names one.
pub(crate) fn committed_in(headers: &hyper::HeaderMap) -> Option<LogId> {
    headers
        .get(COMMITTED_HEADER)
        .and_then(|v| v.to_str().ok())
        .and_then(parse_log_id)
}

/// Largest peer request body: room for snapshot chunks and big AppendEntries.
pub const PEER_BODY_BYTES_MAX: usize = 64 << 20;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_id_reads_back_from_its_header_form() {
        let id = LogId::new(openraft::CommittedLeaderId::new(7, 3), 12_345);
        assert_eq!(format_log_id(&id), "7-3-12345");
        assert_eq!(parse_log_id(&format_log_id(&id)), Some(id));
        for bad in ["", "7-3", "7-3-x", "7-3-1-2", "-3-1", "7--1"] {
            assert_eq!(parse_log_id(bad), None, "{bad:?}");
        }
    }
}
