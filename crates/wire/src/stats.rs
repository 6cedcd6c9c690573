//! What the console reads besides the resources themselves: ages by this node's clock,
//! per-resource statistics over a recent window, and replication as the leader sees it.

use crate::lease::ResourceKind;
use serde::{Deserialize, Serialize};

/// How long ago something happened, by the answering node's clock (when it applied the
/// revision). `at_least`: the revision is older than the node's memory of apply times (or
/// than the process), so `ms` is a lower bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Age {
    /// Milliseconds.
    pub ms: u64,
    /// Whether `ms` is only a lower bound.
    pub at_least: bool,
}

/// One resource's statistics over the window (`GET /v1/stats/locks`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LockStats {
    /// Lock, semaphore or election.
    pub kind: ResourceKind,
    /// The resource's name.
    pub name: String,
    /// Grants in the window.
    pub grants: u64,
    /// Grants per second over the window.
    pub grants_per_second: f64,
    /// Grants that came from the queue with a known wait.
    pub waited: u64,
    /// Milliseconds waited in total by those grants (the contention order).
    pub wait_total_ms: u64,
    /// Median wait of a queued grant, milliseconds.
    pub wait_p50_ms: Option<u64>,
    /// 99th percentile wait of a queued grant, milliseconds.
    pub wait_p99_ms: Option<u64>,
    /// Median hold, milliseconds (holds that ended in the window).
    pub hold_p50_ms: Option<u64>,
    /// 99th percentile hold, milliseconds.
    pub hold_p99_ms: Option<u64>,
    /// Queued acquires that reached their deadline.
    pub timeouts: u64,
    /// Holds ended by their lease's expiry.
    pub expiries: u64,
}

/// `GET /v1/stats/locks`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LockStatsResponse {
    /// The node that answered (statistics are per node).
    pub node_id: u64,
    /// The window, milliseconds.
    pub window_ms: u64,
    /// Most contended first: time waited, then timeouts, then grants.
    pub locks: Vec<LockStats>,
}

/// One member's replication progress as the leader sees it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MemberReplication {
    /// The member.
    pub id: u64,
    /// Whether it votes.
    pub voter: bool,
    /// The last log index the leader knows it holds (null: not known yet).
    pub matched_index: Option<u64>,
    /// Entries it is behind the leader's last log index (null: not known).
    pub lag_entries: Option<u64>,
}

/// `GET /v1/cluster/replication`: read from the leader, whichever node is asked.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ReplicationResponse {
    /// The leader.
    pub leader: u64,
    /// Its term.
    pub term: u64,
    /// Its last log index.
    pub last_log_index: u64,
    /// Its commit index.
    pub commit_index: u64,
    /// Its applied index.
    pub applied_index: u64,
    /// Every member, the leader included.
    pub members: Vec<MemberReplication>,
}
