//! Leases: grant, keepalive, look up, list, revoke.

use serde::{Deserialize, Serialize};

/// `POST /v1/leases`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LeaseGrantRequest {
    /// Time to live without a keepalive, in milliseconds.
    pub ttl_ms: u64,
}

/// A granted lease (201).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LeaseResponse {
    /// Its id.
    pub lease_id: u64,
    /// Its TTL: it lives at least this long after the request was sent.
    pub ttl_ms: u64,
    /// The revision that granted it.
    pub revision: u64,
}

/// `POST /v1/leases/{id}/keepalive`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct KeepaliveResponse {
    /// The lease.
    pub lease_id: u64,
    /// The lease lives at least this long after the keepalive was sent.
    pub ttl_ms: u64,
}

/// What kind of resource a claim, event or filter is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum ResourceKind {
    /// A lock.
    Lock,
    /// A semaphore.
    Semaphore,
    /// An election.
    Election,
}

impl ResourceKind {
    /// Its name in paths, event types and claims.
    pub fn as_str(self) -> &'static str {
        match self {
            ResourceKind::Lock => "lock",
            ResourceKind::Semaphore => "semaphore",
            ResourceKind::Election => "election",
        }
    }
}

/// A hold or queue entry a lease owns.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Claim {
    /// What it is on.
    pub kind: ResourceKind,
    /// The resource's name.
    pub name: String,
    /// The owner within the lease.
    pub owner: String,
}

/// `GET /v1/leases/{id}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LeaseInfoResponse {
    /// The lease.
    pub lease_id: u64,
    /// Its TTL.
    pub ttl_ms: u64,
    /// Remaining TTL on the leader's clock (null if the leader could not be asked).
    pub remaining_ms: Option<u64>,
    /// The revision that granted it.
    pub granted_revision: u64,
    /// Ephemeral keys it owns.
    pub keys: Vec<String>,
    /// Holds and queue entries it owns.
    pub claims: Vec<Claim>,
    /// The revision read.
    pub revision: u64,
}

/// One lease in a listing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LeaseSummary {
    /// The lease.
    pub lease_id: u64,
    /// Its TTL.
    pub ttl_ms: u64,
    /// With `detail=true`: remaining TTL on the leader's clock (null if the leader could
    /// not be asked).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remaining_ms: Option<u64>,
    /// With `detail=true`: the revision that granted it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub granted_revision: Option<u64>,
    /// With `detail=true`: ephemeral keys it owns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keys: Option<Vec<String>>,
    /// With `detail=true`: holds and queue entries it owns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claims: Option<Vec<Claim>>,
}

/// `GET /v1/leases`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LeaseListResponse {
    /// Live leases in id order.
    pub leases: Vec<LeaseSummary>,
    /// The revision read.
    pub revision: u64,
}

/// `DELETE /v1/leases/{id}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RevokeResponse {
    /// The lease.
    pub lease_id: u64,
    /// Ephemeral keys deleted.
    pub keys_deleted: u64,
    /// Holds released.
    pub holds_released: u64,
    /// Queue entries cancelled.
    pub waits_cancelled: u64,
    /// The revision of the revoke.
    pub revision: u64,
}
