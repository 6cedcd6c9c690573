//! Query strings of the `GET` and `DELETE` endpoints (unknown parameters are refused).

use serde::{Deserialize, Serialize};

/// `?consistency=` of every read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum Consistency {
    /// Through the leader's read index (the default).
    #[default]
    Linearizable,
    /// This node's applied state, possibly stale.
    Serializable,
}

/// Reads of one object (`GET /v1/kv/{key}`, `/v1/locks/{name}`, …).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReadParams {
    /// Linearizable (default) or serializable.
    #[serde(default)]
    pub consistency: Consistency,
}

/// `GET /v1/locks`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LockListParams {
    /// Only names under this prefix.
    #[serde(default)]
    pub prefix: String,
    /// At most this many (default 1 000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
    /// Only names after this one (the last name of the previous page).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
    /// Linearizable (default) or serializable.
    #[serde(default)]
    pub consistency: Consistency,
}

/// `GET /v1/kv?prefix=`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RangeParams {
    /// Only keys under this prefix.
    #[serde(default)]
    pub prefix: String,
    /// At most this many (default 1 000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
    /// Linearizable (default) or serializable.
    #[serde(default)]
    pub consistency: Consistency,
}

/// `DELETE /v1/kv/{key}`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeleteParams {
    /// Compare-and-set on `mod_revision`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prev_revision: Option<u64>,
}

/// `DELETE /v1/kv?prefix=` (the prefix must not be empty).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeletePrefixParams {
    /// The prefix.
    pub prefix: String,
}

/// `GET /v1/watch`: at most one filter, and where to start.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WatchParams {
    /// One key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// Keys under a prefix.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    /// One lock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lock: Option<String>,
    /// One semaphore.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub semaphore: Option<String>,
    /// One election.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub election: Option<String>,
    /// One lease and everything it owns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<u64>,
    /// The first revision to deliver (default: the next one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_revision: Option<u64>,
}
