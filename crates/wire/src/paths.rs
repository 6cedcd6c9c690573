//! Every path of the HTTP API, written once. The server's router and its OpenAPI document
//! use these constants; the client fills their one parameter with [`fill`].
//!
//! A parameter is written `{name}` as in OpenAPI. `{key}` in [`KV_KEY`] takes the rest of
//! the path, slashes included (the router registers it as a wildcard). Every other
//! parameter is one path segment: a `/` inside a name is sent as `%2F`.

/// The OpenAPI document of the running server.
pub const OPENAPI: &str = "/v1/openapi.json";
/// Liveness (no authentication).
pub const HEALTHZ: &str = "/healthz";
/// Readiness (no authentication).
pub const READYZ: &str = "/readyz";
/// Prometheus metrics.
pub const METRICS: &str = "/metrics";

/// Grant a lease (`POST`), list leases (`GET`).
pub const LEASES: &str = "/v1/leases";
/// One lease: read (`GET`), revoke (`DELETE`).
pub const LEASE: &str = "/v1/leases/{id}";
/// Keep a lease alive.
pub const LEASE_KEEPALIVE: &str = "/v1/leases/{id}/keepalive";

/// List locks.
pub const LOCKS: &str = "/v1/locks";
/// One lock: read (`GET`), force-release (`DELETE`).
pub const LOCK: &str = "/v1/locks/{name}";
/// Acquire a lock.
pub const LOCK_ACQUIRE: &str = "/v1/locks/{name}/acquire";
/// Release a lock.
pub const LOCK_RELEASE: &str = "/v1/locks/{name}/release";
/// Check that a fence still holds a lock.
pub const LOCK_CHECK: &str = "/v1/locks/{name}/check";

/// List semaphores.
pub const SEMAPHORES: &str = "/v1/semaphores";
/// One semaphore.
pub const SEMAPHORE: &str = "/v1/semaphores/{name}";
/// Acquire permits.
pub const SEMAPHORE_ACQUIRE: &str = "/v1/semaphores/{name}/acquire";
/// Release permits.
pub const SEMAPHORE_RELEASE: &str = "/v1/semaphores/{name}/release";

/// List elections.
pub const ELECTIONS: &str = "/v1/elections";
/// One election.
pub const ELECTION: &str = "/v1/elections/{name}";
/// Campaign for leadership.
pub const ELECTION_CAMPAIGN: &str = "/v1/elections/{name}/campaign";
/// Change the leader's value.
pub const ELECTION_PROCLAIM: &str = "/v1/elections/{name}/proclaim";
/// Give up leadership or candidacy.
pub const ELECTION_RESIGN: &str = "/v1/elections/{name}/resign";

/// Range over keys (`GET`), delete a prefix (`DELETE`).
pub const KV: &str = "/v1/kv";
/// One key: read, put, create a sequential key under it, delete. `{key}` may contain `/`.
pub const KV_KEY: &str = "/v1/kv/{key}";
/// A transaction.
pub const TXN: &str = "/v1/txn";
/// A watch (server-sent events).
pub const WATCH: &str = "/v1/watch";

/// The hottest locks of a recent window.
pub const STATS_LOCKS: &str = "/v1/stats/locks";
/// The cluster's status.
pub const CLUSTER: &str = "/v1/cluster";
/// Replication progress of each follower (on the leader).
pub const CLUSTER_REPLICATION: &str = "/v1/cluster/replication";
/// Add a member.
pub const CLUSTER_MEMBERS: &str = "/v1/cluster/members";
/// Remove a member.
pub const CLUSTER_MEMBER: &str = "/v1/cluster/members/{id}";

/// Every path above, for checks that the router, the OpenAPI document and this list agree.
pub const ALL: &[&str] = &[
    OPENAPI,
    HEALTHZ,
    READYZ,
    METRICS,
    LEASES,
    LEASE,
    LEASE_KEEPALIVE,
    LOCKS,
    LOCK,
    LOCK_ACQUIRE,
    LOCK_RELEASE,
    LOCK_CHECK,
    SEMAPHORES,
    SEMAPHORE,
    SEMAPHORE_ACQUIRE,
    SEMAPHORE_RELEASE,
    ELECTIONS,
    ELECTION,
    ELECTION_CAMPAIGN,
    ELECTION_PROCLAIM,
    ELECTION_RESIGN,
    KV,
    KV_KEY,
    TXN,
    WATCH,
    STATS_LOCKS,
    CLUSTER,
    CLUSTER_REPLICATION,
    CLUSTER_MEMBERS,
    CLUSTER_MEMBER,
];

/// `path` with its one `{…}` parameter replaced by `value`, which the caller has already
/// percent-encoded (a name as one segment; a key segment by segment). A path without a
/// parameter comes back unchanged.
pub fn fill(path: &str, value: &str) -> String {
    match (path.find('{'), path.find('}')) {
        (Some(open), Some(close)) if open < close => {
            format!("{}{value}{}", &path[..open], &path[close + 1..])
        }
        _ => path.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_replaces_the_one_parameter() {
        assert_eq!(fill(LOCK_ACQUIRE, "a%2Fb"), "/v1/locks/a%2Fb/acquire");
        assert_eq!(fill(KV_KEY, "a/b"), "/v1/kv/a/b");
        assert_eq!(fill(LEASE_KEEPALIVE, "7"), "/v1/leases/7/keepalive");
        assert_eq!(fill(LOCKS, "x"), "/v1/locks");
    }

    #[test]
    fn every_path_is_listed_once_and_has_at_most_one_parameter() {
        let mut seen = std::collections::BTreeSet::new();
        for path in ALL {
            assert!(seen.insert(*path), "{path} is listed twice");
            assert!(path.starts_with('/'), "{path}");
            assert!(path.matches('{').count() <= 1, "{path}");
        }
    }
}
