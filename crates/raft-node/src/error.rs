//! `NodeError`: the one error enum of this crate. The HTTP layer maps it to status codes once.

use crate::types::{NodeAddr, NodeId};

/// Why a node operation did not produce an answer from the state machine.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NodeError {
    /// This node is not the leader and could not forward; the leader, if known.
    #[error("not the leader (leader: {leader:?})")]
    ForwardToLeader {
        /// The leader's id and addresses, if one is known.
        leader: Option<(NodeId, NodeAddr)>,
    },
    /// No leader is known (an election is under way, or no quorum). Retry later.
    #[error("no leader")]
    NoLeader,
    /// The command may or may not have been applied: the deadline passed or the connection
    /// broke after sending. Never report this as a failure.
    #[error("outcome unknown: {0}")]
    Indeterminate(String),
    /// A quorum did not answer (a read-index round failed); nothing was changed.
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// The proposal breaks a limit; nothing was proposed.
    #[error("invalid: {0}")]
    Invalid(#[from] baton_state_machine::Error),
    /// A membership change was refused.
    #[error("membership change refused: {0}")]
    Membership(String),
    /// The configuration is not usable.
    #[error("config: {0}")]
    Config(String),
    /// Local storage failed; the node stops.
    #[error("storage: {0}")]
    Storage(String),
    /// This node is stopped or stopping.
    #[error("node stopped")]
    Stopped,
}

impl NodeError {
    /// Whether the operation's outcome is unknown (it may have been applied).
    pub fn is_indeterminate(&self) -> bool {
        matches!(self, NodeError::Indeterminate(_))
    }
}
