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
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams), into_params(parameter_in = Query))]
pub struct ReadParams {
    /// Linearizable (default) or serializable.
    #[serde(default)]
    pub consistency: Consistency,
}

/// `GET /v1/locks`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams), into_params(parameter_in = Query))]
pub struct LockListParams {
    /// Only names under this prefix.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", param(pattern = "{text}"))]
    pub prefix: String,
    /// At most this many (default 1 000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", param(nullable = false, minimum = 0))]
    pub limit: Option<usize>,
    /// Only names after this one (the last name of the previous page).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", param(nullable = false))]
    pub after: Option<String>,
    /// Linearizable (default) or serializable.
    #[serde(default)]
    pub consistency: Consistency,
}

/// `GET /v1/leases`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams), into_params(parameter_in = Query))]
pub struct LeaseListParams {
    /// At most this many (default 1 000; with `detail`, default and maximum 200).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", param(nullable = false, minimum = 0))]
    pub limit: Option<usize>,
    /// Only leases with a greater id (the last id of the previous page).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", param(nullable = false))]
    pub after: Option<u64>,
    /// Also each lease's remaining TTL (asked of the leader), keys and claims.
    #[serde(default)]
    pub detail: bool,
    /// Linearizable (default) or serializable.
    #[serde(default)]
    pub consistency: Consistency,
}

/// `GET /v1/stats/locks`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams), into_params(parameter_in = Query))]
pub struct LockStatsParams {
    /// Only names under this prefix.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", param(pattern = "{text}"))]
    pub prefix: String,
    /// Only this kind (default: every kind).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", param(nullable = false))]
    pub kind: Option<crate::ResourceKind>,
    /// At most this many, most contended first (default 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", param(nullable = false, minimum = 0))]
    pub limit: Option<usize>,
}

/// `GET /v1/kv?prefix=`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams), into_params(parameter_in = Query))]
pub struct RangeParams {
    /// Only keys under this prefix.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", param(pattern = "{text}"))]
    pub prefix: String,
    /// At most this many (default 1 000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", param(nullable = false, minimum = 1))]
    pub limit: Option<usize>,
    /// Linearizable (default) or serializable.
    #[serde(default)]
    pub consistency: Consistency,
}

/// `DELETE /v1/kv/{key}`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams), into_params(parameter_in = Query))]
pub struct DeleteParams {
    /// Compare-and-set on `mod_revision`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", param(nullable = false))]
    pub prev_revision: Option<u64>,
}

/// `DELETE /v1/kv?prefix=` (the prefix must not be empty).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams), into_params(parameter_in = Query))]
pub struct DeletePrefixParams {
    /// The prefix: a name (not empty, no `.` or `..` segment).
    #[cfg_attr(feature = "openapi", param(min_length = 1, pattern = "{name}"))]
    pub prefix: String,
}

/// `GET /v1/watch`: filters, and where to start. Several filters combine: an event is
/// delivered when it passes every one of them (none: every event).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams), into_params(parameter_in = Query))]
pub struct WatchParams {
    /// One key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "openapi",
        param(nullable = false, min_length = 1, pattern = "{name}")
    )]
    pub key: Option<String>,
    /// Keys under a prefix.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", param(nullable = false, pattern = "{text}"))]
    pub prefix: Option<String>,
    /// One lock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "openapi",
        param(nullable = false, min_length = 1, pattern = "{name}")
    )]
    pub lock: Option<String>,
    /// One semaphore.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "openapi",
        param(nullable = false, min_length = 1, pattern = "{name}")
    )]
    pub semaphore: Option<String>,
    /// One election.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "openapi",
        param(nullable = false, min_length = 1, pattern = "{name}")
    )]
    pub election: Option<String>,
    /// One lease and everything it owns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", param(nullable = false))]
    pub lease: Option<u64>,
    /// The first revision to deliver (default: the next one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", param(nullable = false))]
    pub start_revision: Option<u64>,
}
