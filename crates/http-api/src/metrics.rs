//! `/metrics` in the OpenMetrics text format, through the Prometheus project's client
//! (`prometheus-client`). Two registries make one exposition: a long-lived one for what is
//! counted as it happens (requests, held-open waits, and the node's own commit, fsync,
//! batch and forwarding measurements), and one built at each scrape for what is read then
//! (Raft progress, the state's tallies, per-principal usage, the hot locks).
//!
//! Cardinality is bounded: routes are templates, statuses and outcomes are few, principals
//! come from the auth file, and per-lock series are the `HOT_LOCKS_MAX` most contended
//! resources plus one `other` series that sums the rest.

use crate::state::AppState;
use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::Response;
use baton_raft_node::NodeStats;
use baton_raft_node::listener::ConnStats;
use prometheus_client::encoding::text::{encode_eof, encode_registry};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// Per-lock series at most (plus `other`).
pub(crate) const HOT_LOCKS_MAX: usize = 20;

/// Upper bounds of the request latency buckets, in seconds (held-open acquires reach
/// minutes).
const BUCKETS_SECONDS: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 30.0, 120.0, 300.0,
];

/// Labels of a request: route template, method, status.
type RequestLabels = [(&'static str, String); 3];
/// Labels of a held-open wait: resource kind and how it ended.
type WaitLabels = [(&'static str, &'static str); 2];

fn request_histogram() -> Histogram {
    Histogram::new(BUCKETS_SECONDS)
}

/// What the API layer counts as it happens. Cheap to share (`Arc` in `AppState`).
#[derive(Debug)]
pub struct Metrics {
    requests: Family<RequestLabels, Counter>,
    durations: Family<RequestLabels, Histogram, fn() -> Histogram>,
    waits: Family<WaitLabels, Counter>,
    /// Watches streaming now.
    pub open_watches: Gauge,
    /// Leader changes this node has seen.
    pub leader_changes: AtomicU64,
    /// The client API port's connections (`baton_raft_node::listener`).
    pub api_connections: std::sync::Arc<ConnStats>,
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics {
            requests: Family::default(),
            durations: Family::new_with_constructor(request_histogram),
            waits: Family::default(),
            open_watches: Gauge::default(),
            leader_changes: AtomicU64::new(0),
            api_connections: std::sync::Arc::default(),
        }
    }
}

impl Metrics {
    fn observe(&self, method: &'static str, route: &str, status: u16, seconds: f64) {
        let labels: RequestLabels = [
            ("route", route.to_owned()),
            ("method", method.to_owned()),
            ("status", status.to_string()),
        ];
        self.requests.get_or_create(&labels).inc();
        self.durations.get_or_create(&labels).observe(seconds);
    }

    /// Counts a held-open wait of a `kind` resource that ended as `outcome`.
    pub(crate) fn wait_ended(&self, kind: &'static str, outcome: &'static str) {
        self.waits
            .get_or_create(&[("kind", kind), ("outcome", outcome)])
            .inc();
    }

    /// The long-lived registry: these metrics and the node's own.
    fn registry(&self, node: &NodeStats) -> Registry {
        let mut r = Registry::default();
        r.register(
            "baton_http_requests",
            "HTTP requests by route, method and status",
            self.requests.clone(),
        );
        r.register(
            "baton_http_request_duration_seconds",
            "HTTP request latency",
            self.durations.clone(),
        );
        r.register(
            "baton_held_open_waits",
            "Queued acquires held open, by how they ended: granted, timed_out, cancelled (the entry left the queue), lease_ended, still_waiting (202 at the hold limit), abandoned (the client went away), error",
            self.waits.clone(),
        );
        r.register(
            "baton_watches_open",
            "Open watch streams on this node",
            self.open_watches.clone(),
        );
        r.register(
            "baton_raft_commit_seconds",
            "From handing an entry to Raft to its commit and apply on this leader",
            node.commit_seconds.clone(),
        );
        r.register(
            "baton_raft_fsync_seconds",
            "One flush of the Raft log to disk",
            node.fsync_seconds.clone(),
        );
        r.register(
            "baton_raft_proposals_per_entry",
            "Proposals gathered into one Raft entry (group commit)",
            node.proposals_per_entry.clone(),
        );
        r.register(
            "baton_forwarded_requests",
            "Requests this node sent to the leader, by peer route",
            node.forwarded.clone(),
        );
        r.register(
            "baton_raft_commit_notices",
            "Commits this node learned from the leader's answers to writes it forwarded",
            node.commit_notices.clone(),
        );
        r
    }
}

/// The metrics label of a request's method: one of the standard methods, or `other` (a
/// method is any token a client sends; a label per method would be state a client
/// chooses).
fn method_label(method: &axum::http::Method) -> &'static str {
    use axum::http::Method;
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        Method::PATCH => "PATCH",
        Method::CONNECT => "CONNECT",
        Method::TRACE => "TRACE",
        _ => "other",
    }
}

/// Middleware: counts every request by its route template (from the router, never the
/// path: `unmatched` for a path no route has), method and status.
pub async fn track(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |p| p.as_str().to_owned());
    let method = method_label(request.method());
    let started = Instant::now();
    let response = next.run(request).await;
    let seconds = started.elapsed().as_secs_f64();
    state
        .metrics
        .observe(method, &route, response.status().as_u16(), seconds);
    response
}

fn gauge(r: &mut Registry, name: &str, help: &str, value: u64) {
    r.register(name, help, ConstGauge::new(value));
}

/// Who scrapes, for the series that name locks and principals.
pub enum View<'a> {
    /// Everything: an admin, or a node without authentication.
    All,
    /// A principal that is not an admin: the hot locks it may read, and its own series.
    Principal(&'a crate::auth::Authz),
    /// An anonymous scrape (`--metrics-open` with authentication on): no names at all.
    Anonymous,
}

/// The whole exposition, as `view` may see it.
pub fn render(state: &AppState, view: &View<'_>) -> String {
    let mut out = String::new();
    let lasting = state.metrics.registry(state.node.stats());
    let now = scrape_registry(state, view);
    // Writing to a String cannot fail.
    let _ = encode_registry(&mut out, &lasting)
        .and_then(|()| encode_registry(&mut out, &now))
        .and_then(|()| encode_eof(&mut out));
    out
}

/// What is read at scrape time.
fn scrape_registry(state: &AppState, view: &View<'_>) -> Registry {
    let mut r = Registry::default();
    let status = state.node.status();
    let counts = state.node.read_local(|sm| sm.counts());
    gauge(&mut r, "baton_raft_term", "Current Raft term", status.term);
    gauge(
        &mut r,
        "baton_raft_commit_index",
        "Last committed index known here",
        status.committed_index,
    );
    gauge(
        &mut r,
        "baton_raft_applied_index",
        "Last applied index",
        status.applied_index,
    );
    gauge(
        &mut r,
        "baton_raft_apply_lag_entries",
        "Committed entries this node has not applied yet",
        status.committed_index.saturating_sub(status.applied_index),
    );
    gauge(
        &mut r,
        "baton_answer_waits",
        "Writes taken on this node that wait for its apply to answer them",
        state.node.answer_waits() as u64,
    );
    gauge(
        &mut r,
        "baton_raft_last_log_index",
        "Last log index",
        status.last_log_index,
    );
    gauge(
        &mut r,
        "baton_raft_is_leader",
        "1 if this node is the leader",
        u64::from(state.node.is_leader()),
    );
    r.register(
        "baton_raft_leader_changes",
        "Leader changes seen by this node",
        ConstCounter::new(state.metrics.leader_changes.load(Ordering::Relaxed)),
    );
    gauge(
        &mut r,
        "baton_revision",
        "State machine revision",
        counts.revision.0,
    );
    gauge(&mut r, "baton_keys", "Keys stored", counts.keys);
    gauge(&mut r, "baton_leases", "Live leases", counts.leases);
    gauge(
        &mut r,
        "baton_locks_held",
        "Lock holds",
        counts.lock_holders,
    );
    gauge(
        &mut r,
        "baton_semaphore_holders",
        "Semaphore holds",
        counts.semaphore_holders,
    );
    gauge(
        &mut r,
        "baton_election_leaders",
        "Elections with a leader",
        counts.election_leaders,
    );
    gauge(
        &mut r,
        "baton_queue_waiters",
        "Queued acquires, all kinds",
        counts.waiters,
    );
    gauge(
        &mut r,
        "baton_lock_delays",
        "Locks under a lock-delay",
        counts.lock_delays,
    );
    gauge(
        &mut r,
        "baton_events_window",
        "Events held for watches",
        counts.events,
    );
    connections(
        &mut r,
        &[
            ("api", &state.metrics.api_connections),
            ("peer", &state.node.stats().peer_connections),
        ],
    );
    match view {
        View::All => {
            hot_locks(&mut r, state, &|_, _| true);
            if let Some(auth) = &state.auth {
                principals(&mut r, state, auth, None);
            }
        }
        View::Principal(authz) => {
            hot_locks(&mut r, state, &|kind, name| {
                authz.can(
                    crate::auth::Namespace::of(kind),
                    name,
                    crate::auth::Access::Read,
                )
            });
            if let (Some(auth), crate::auth::Authz::Principal(p, _)) = (&state.auth, authz) {
                principals(&mut r, state, auth, Some(&p.name));
            }
        }
        View::Anonymous => {}
    }
    r
}

/// Labels of a connection count: the port, and why connections closed.
type PortLabels = [(&'static str, &'static str); 1];
/// Labels of closed connections: the port and the reason.
type ClosedLabels = [(&'static str, &'static str); 2];

/// Each port's connections: open now, accepted, and closed by the bounds (`listener`).
fn connections(r: &mut Registry, ports: &[(&'static str, &ConnStats)]) {
    let open: Family<PortLabels, Gauge> = Family::default();
    let accepted: Family<PortLabels, Counter> = Family::default();
    let closed: Family<ClosedLabels, Counter> = Family::default();
    for (port, stats) in ports {
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        open.get_or_create(&[("port", port)])
            .set(i64::try_from(load(&stats.open)).unwrap_or(i64::MAX));
        accepted
            .get_or_create(&[("port", port)])
            .inc_by(load(&stats.accepted));
        for (reason, counter) in [
            ("evicted", &stats.evicted),
            ("refused", &stats.refused),
            ("header_timeout", &stats.header_timeouts),
            ("idle_timeout", &stats.idle_timeouts),
            ("handshake_failed", &stats.handshake_failures),
        ] {
            closed
                .get_or_create(&[("port", port), ("reason", reason)])
                .inc_by(load(counter));
        }
    }
    r.register(
        "baton_connections_open",
        "Connections open now, per port (api, peer)",
        open,
    );
    r.register(
        "baton_connections_accepted",
        "Connections accepted, per port",
        accepted,
    );
    r.register(
        "baton_connections_closed",
        "Connections the server closed by its bounds, per port and reason: evicted (made room at the cap), refused (at the cap, all busy), header_timeout, idle_timeout, handshake_failed",
        closed,
    );
}

/// Labels of a per-lock series.
type LockLabels = [(&'static str, String); 2];
/// Labels of a per-lock quantile.
type QuantileLabels = [(&'static str, String); 3];

/// The most contended resources over the window that `visible` admits, and `other` for
/// the rest of those.
fn hot_locks(
    r: &mut Registry,
    state: &AppState,
    visible: &dyn Fn(baton_state_machine::ResourceKind, &str) -> bool,
) {
    let stats = state.activity.stats(None, "", visible);
    let grants: Family<LockLabels, Gauge<f64, std::sync::atomic::AtomicU64>> = Family::default();
    let timeouts: Family<LockLabels, Gauge> = Family::default();
    let expiries: Family<LockLabels, Gauge> = Family::default();
    let waited: Family<LockLabels, Gauge<f64, std::sync::atomic::AtomicU64>> = Family::default();
    let waits: Family<QuantileLabels, Gauge<f64, std::sync::atomic::AtomicU64>> = Family::default();
    let holds: Family<QuantileLabels, Gauge<f64, std::sync::atomic::AtomicU64>> = Family::default();
    for (i, s) in stats.iter().enumerate() {
        let (kind, name) = if i < HOT_LOCKS_MAX {
            (s.kind.as_str().to_owned(), s.name.clone())
        } else {
            ("other".to_owned(), "other".to_owned())
        };
        let labels: LockLabels = [("kind", kind.clone()), ("name", name.clone())];
        grants.get_or_create(&labels).inc_by(s.grants_per_second);
        timeouts.get_or_create(&labels).inc_by(s.timeouts as i64);
        expiries.get_or_create(&labels).inc_by(s.expiries as i64);
        waited
            .get_or_create(&labels)
            .inc_by(s.wait_total_ms as f64 / 1_000.0);
        if i >= HOT_LOCKS_MAX {
            continue;
        }
        for (family, quantiles) in [
            (&waits, [("0.5", s.wait_p50_ms), ("0.99", s.wait_p99_ms)]),
            (&holds, [("0.5", s.hold_p50_ms), ("0.99", s.hold_p99_ms)]),
        ] {
            for (q, ms) in quantiles {
                if let Some(ms) = ms {
                    let labels: QuantileLabels = [
                        ("kind", kind.clone()),
                        ("name", name.clone()),
                        ("quantile", q.to_owned()),
                    ];
                    family.get_or_create(&labels).set(ms as f64 / 1_000.0);
                }
            }
        }
    }
    r.register(
        "baton_lock_grants_per_second",
        "Grants per second over the last minute, per hot resource (top 20 by contention, then other)",
        grants,
    );
    r.register(
        "baton_lock_waited_seconds",
        "Seconds waited in the queue by grants of the last minute, per hot resource",
        waited,
    );
    r.register(
        "baton_lock_timeouts",
        "Queued acquires that timed out in the last minute, per hot resource",
        timeouts,
    );
    r.register(
        "baton_lock_expiries",
        "Holds ended by a lease expiry in the last minute, per hot resource",
        expiries,
    );
    r.register(
        "baton_lock_wait_seconds",
        "Wait of a queued grant over the last minute (quantiles 0.5, 0.99), per hot resource",
        waits,
    );
    r.register(
        "baton_lock_hold_seconds",
        "Hold time over the last minute (quantiles 0.5, 0.99), per hot resource",
        holds,
    );
}

/// Labels of a per-principal series.
type PrincipalLabels = [(&'static str, String); 1];
/// Labels of a per-principal refusal.
type RefusalLabels = [(&'static str, String); 2];

/// Per principal (a bounded set: the auth file's): requests, refusals by reason, and what
/// it owns in the replicated state.
fn principals(r: &mut Registry, state: &AppState, auth: &crate::auth::Auth, only: Option<&str>) {
    let mut flows = auth.flows();
    if let Some(name) = only {
        flows.retain(|(n, _)| n == name);
    }
    let requests: Family<PrincipalLabels, Counter> = Family::default();
    let refused: Family<RefusalLabels, Counter> = Family::default();
    for (name, flow) in &flows {
        requests
            .get_or_create(&[("principal", name.clone())])
            .inc_by(flow.requests.load(Ordering::Relaxed));
        for (reason, counter) in [
            ("rate_limited", &flow.rate_limited),
            ("quota_exceeded", &flow.quota_exceeded),
            ("permission_denied", &flow.permission_denied),
        ] {
            refused
                .get_or_create(&[("principal", name.clone()), ("reason", reason.to_owned())])
                .inc_by(counter.load(Ordering::Relaxed));
        }
    }
    // Counters kept by the auth layer (the encoder adds `_total`).
    r.register(
        "baton_principal_requests",
        "Authenticated requests per principal",
        requests,
    );
    r.register(
        "baton_principal_refused",
        "Requests refused per principal and reason",
        refused,
    );
    let usage: Vec<_> = state
        .node
        .read_local(|sm| flows.iter().map(|(name, _)| sm.usage(name)).collect());
    let leases: Family<PrincipalLabels, Gauge> = Family::default();
    let keys: Family<PrincipalLabels, Gauge> = Family::default();
    let bytes: Family<PrincipalLabels, Gauge> = Family::default();
    for ((name, _), u) in flows.iter().zip(&usage) {
        let labels = [("principal", name.clone())];
        leases.get_or_create(&labels).set(u.leases as i64);
        keys.get_or_create(&labels).set(u.keys as i64);
        bytes.get_or_create(&labels).set(u.key_bytes as i64);
    }
    r.register(
        "baton_principal_leases",
        "Live leases per principal",
        leases,
    );
    r.register(
        "baton_principal_keys",
        "Keys written by each principal",
        keys,
    );
    r.register("baton_principal_key_bytes", "Bytes of those keys", bytes);
}
