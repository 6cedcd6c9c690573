//! The cluster as a node sees it, and membership changes (run on the leader).

use super::Node;
use super::route::Route;
use crate::error::NodeError;
use crate::membership::{self, MemberChange};
use crate::network::{PeerError, PeerFailure, Target, paths};
use crate::types::{NodeAddr, NodeId};
use baton_state_machine::Revision;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::sync::atomic::Ordering;
use std::time::Duration;

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

    /// The cluster as the leader sees it (with every member's replication progress).
    pub async fn leader_status(&self) -> Result<ClusterStatus, NodeError> {
        self.routed((), Route::Status).await
    }

    /// This node's status; this node must be the leader.
    pub(crate) fn leader_status_here(&self) -> Result<ClusterStatus, NodeError> {
        self.require_leader()?;
        Ok(self.status())
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
                        paths::MEMBERSHIP,
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
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
