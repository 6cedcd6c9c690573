//! Every path of the peer port, in one place: the router serves these, and the node's
//! clients (Raft links, forwarding, membership probes) call them.

/// openraft's AppendEntries.
pub const APPEND: &str = "/raft/append";
/// openraft's RequestVote.
pub const VOTE: &str = "/raft/vote";
/// openraft's InstallSnapshot (one chunk a call).
pub const SNAPSHOT: &str = "/raft/snapshot";
/// A proposal a follower forwards ([`Forwarded`](crate::node::Forwarded)); the answer
/// names the committed entry that carried it.
pub const PROPOSE: &str = "/baton/propose";
/// A read index a follower asks for (the body names the follower).
pub const READ_INDEX: &str = "/baton/read_index";
/// A keepalive on the leader's clock.
pub const KEEPALIVE: &str = "/baton/keepalive";
/// One lease's remaining TTL on the leader's clock.
pub const LEASE_REMAINING: &str = "/baton/lease_remaining";
/// Several leases' remaining TTLs on the leader's clock.
pub const LEASES_REMAINING: &str = "/baton/leases_remaining";
/// The cluster as the leader sees it.
pub const STATUS: &str = "/baton/status";
/// The membership probe: a node's id and its proof that it holds the cluster secret.
pub const IDENTITY: &str = "/baton/identity";
/// A membership change, run on the leader.
pub const MEMBERSHIP: &str = "/baton/membership";

/// Every path, for tests and for the secret check's single exception.
pub const ALL: [&str; 11] = [
    APPEND,
    VOTE,
    SNAPSHOT,
    PROPOSE,
    READ_INDEX,
    KEEPALIVE,
    LEASE_REMAINING,
    LEASES_REMAINING,
    STATUS,
    IDENTITY,
    MEMBERSHIP,
];

#[cfg(test)]
mod tests {
    #[test]
    fn paths_are_distinct() {
        let distinct: std::collections::BTreeSet<_> = super::ALL.into_iter().collect();
        assert_eq!(distinct.len(), super::ALL.len());
    }
}
