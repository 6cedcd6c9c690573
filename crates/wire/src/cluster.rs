//! The cluster: status (with the limits this deployment enforces), membership, health.

use serde::{Deserialize, Serialize};

/// `POST /v1/cluster/members`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AddMemberRequest {
    /// The new member's id (positive; not the id of a member).
    #[cfg_attr(feature = "openapi", schema(minimum = 1))]
    pub id: u64,
    /// Its peer address, `host:port`: an IP or a name that resolves, and a port 1..=65535
    /// (the document's pattern states the IPv4 form; a resolvable name is accepted too).
    #[cfg_attr(feature = "openapi", schema(pattern = "{addr}"))]
    pub peer: String,
    /// Its client API address, `host:port` as for `peer`, and not the same as `peer`.
    #[cfg_attr(feature = "openapi", schema(pattern = "{addr}"))]
    pub api: String,
}

/// A member's role.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum MemberRole {
    /// The current leader.
    Leader,
    /// A voter that does not lead.
    Voter,
    /// A learner: replicated to, does not vote.
    Learner,
}

/// One member of the cluster.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Member {
    /// Its id.
    pub id: u64,
    /// Leader, voter or learner.
    pub role: MemberRole,
    /// Whether it votes.
    pub voter: bool,
    /// Its client API address.
    pub api: String,
    /// Its peer address.
    pub peer: String,
    /// On the leader: the last log index replicated to it.
    pub matched_index: Option<u64>,
}

/// The limits on client input this deployment enforces (one source: the nodes'
/// configuration). Clients read them here instead of keeping a copy.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Limits {
    /// Longest key, lock, semaphore or election name, in bytes.
    pub name_bytes_max: u64,
    /// Longest owner, in bytes.
    pub owner_bytes_max: u64,
    /// Longest value, in bytes.
    pub value_bytes_max: u64,
    /// Shortest lease TTL.
    pub ttl_ms_min: u64,
    /// Longest lease TTL.
    pub ttl_ms_max: u64,
    /// Longest wait of an acquire in the queue (across requests).
    pub wait_ms_max: u64,
    /// Longest time one request is held open; a longer wait answers `202` and keeps its
    /// place (0 from a server that predates it).
    #[serde(default)]
    pub hold_ms_max: u64,
    /// Longest lock-delay.
    pub lock_delay_ms_max: u64,
    /// Largest semaphore limit.
    pub semaphore_limit_max: u32,
    /// Most compares plus operations in one txn.
    pub txn_ops_max: u64,
    /// Most keys one range returns.
    pub range_limit_max: u64,
    /// Longest `Idempotency-Key`, in bytes.
    pub idempotency_key_bytes_max: u64,
    /// Largest request body, in bytes.
    pub body_bytes_max: u64,
}

/// `GET /v1/cluster`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ClusterStatus {
    /// Always "baton".
    pub cluster: String,
    /// The node that answered.
    pub node_id: u64,
    /// Its Raft state: leader, follower, candidate, learner or shutdown.
    pub state: String,
    /// The leader's id, if known.
    pub leader: Option<u64>,
    /// The leader's client API address, if known.
    pub leader_api: Option<String>,
    /// The current term.
    pub term: u64,
    /// The revision this node has applied.
    pub revision: u64,
    /// The last committed log index this node knows.
    pub commit_index: u64,
    /// The last log index this node applied.
    pub applied_index: u64,
    /// The last log index this node holds.
    pub last_log_index: u64,
    /// The index of its last snapshot.
    pub snapshot_index: Option<u64>,
    /// The index up to which its log is purged.
    pub purged_index: Option<u64>,
    /// Leader changes this node has seen since it started.
    #[serde(default)]
    pub leader_changes: u64,
    /// Every member.
    pub members: Vec<Member>,
    /// The limits on client input.
    pub limits: Limits,
    /// How this node protects itself: `auth` (tokens required), `tls` (HTTPS).
    #[serde(default)]
    pub security: Security,
    /// Warnings for operators, e.g. a port open beyond loopback without protection.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// How a node protects its API.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Security {
    /// Every `/v1` request needs a bearer token.
    pub auth: bool,
    /// The API is served over TLS.
    pub tls: bool,
}

/// `GET /healthz`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HealthResponse {
    /// Always "ok" while the process serves.
    pub status: String,
}

/// `GET /readyz` (200 when ready, 503 otherwise, with the same body).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ReadyResponse {
    /// A leader is known and this node has applied what it knows committed.
    pub ready: bool,
    /// The leader's id, if known.
    pub leader: Option<u64>,
    /// The last log index this node applied.
    pub applied_index: u64,
    /// The last committed log index this node knows.
    pub commit_index: u64,
}
