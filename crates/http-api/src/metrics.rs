//! Prometheus text metrics: requests by route and status with latency histograms (kept
//! here), and Raft and state gauges (read from the node when scraped).

use crate::state::AppState;
use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::Response;
use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Instant;

/// Upper bounds of the latency buckets, in seconds (held-open acquires reach minutes).
const BUCKETS_SECONDS: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 30.0, 120.0, 300.0,
];

#[derive(Default, Clone)]
struct Histogram {
    buckets: [u64; BUCKETS_SECONDS.len()],
    count: u64,
    sum_seconds: f64,
}

/// Counters kept by the API layer.
#[derive(Default)]
pub struct Metrics {
    // A std mutex: held for a map update, never across an await.
    requests: Mutex<BTreeMap<(String, String, u16), Histogram>>,
    /// Watches streaming now.
    pub open_watches: AtomicI64,
    /// Leader changes this node has seen.
    pub leader_changes: AtomicU64,
}

impl Metrics {
    fn observe(&self, method: &str, route: &str, status: u16, seconds: f64) {
        let mut requests = self.requests.lock().unwrap_or_else(|p| p.into_inner());
        let h = requests
            .entry((route.to_owned(), method.to_owned(), status))
            .or_default();
        h.count += 1;
        h.sum_seconds += seconds;
        for (bucket, bound) in h.buckets.iter_mut().zip(BUCKETS_SECONDS) {
            if seconds <= bound {
                *bucket += 1;
            }
        }
    }

    fn render_requests(&self, out: &mut String) {
        let requests = self
            .requests
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        out.push_str(
            "# HELP baton_http_requests_total HTTP requests by route, method and status.\n",
        );
        out.push_str("# TYPE baton_http_requests_total counter\n");
        for ((route, method, status), h) in &requests {
            let _ = writeln!(
                out,
                "baton_http_requests_total{{route=\"{route}\",method=\"{method}\",status=\"{status}\"}} {}",
                h.count
            );
        }
        out.push_str("# HELP baton_http_request_duration_seconds HTTP request latency.\n");
        out.push_str("# TYPE baton_http_request_duration_seconds histogram\n");
        for ((route, method, status), h) in &requests {
            let labels = format!("route=\"{route}\",method=\"{method}\",status=\"{status}\"");
            for (bucket, bound) in h.buckets.iter().zip(BUCKETS_SECONDS) {
                let _ = writeln!(
                    out,
                    "baton_http_request_duration_seconds_bucket{{{labels},le=\"{bound}\"}} {bucket}"
                );
            }
            let _ = writeln!(
                out,
                "baton_http_request_duration_seconds_bucket{{{labels},le=\"+Inf\"}} {}",
                h.count
            );
            let _ = writeln!(
                out,
                "baton_http_request_duration_seconds_sum{{{labels}}} {}",
                h.sum_seconds
            );
            let _ = writeln!(
                out,
                "baton_http_request_duration_seconds_count{{{labels}}} {}",
                h.count
            );
        }
    }
}

/// Middleware: counts every request by its route template, method and status.
pub async fn track(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |p| p.as_str().to_owned());
    let method = request.method().as_str().to_owned();
    let started = Instant::now();
    let response = next.run(request).await;
    let seconds = started.elapsed().as_secs_f64();
    state
        .metrics
        .observe(&method, &route, response.status().as_u16(), seconds);
    response
}

fn gauge(out: &mut String, name: &str, help: &str, value: impl std::fmt::Display) {
    let _ = writeln!(
        out,
        "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}"
    );
}

/// The whole exposition.
pub fn render(state: &AppState) -> String {
    let mut out = String::new();
    state.metrics.render_requests(&mut out);
    let status = state.node.status();
    let counts = state.node.read_local(|sm| sm.counts());
    gauge(
        &mut out,
        "baton_raft_term",
        "Current Raft term.",
        status.term,
    );
    gauge(
        &mut out,
        "baton_raft_commit_index",
        "Last committed index known here.",
        status.committed_index,
    );
    gauge(
        &mut out,
        "baton_raft_applied_index",
        "Last applied index.",
        status.applied_index,
    );
    gauge(
        &mut out,
        "baton_raft_last_log_index",
        "Last log index.",
        status.last_log_index,
    );
    gauge(
        &mut out,
        "baton_raft_is_leader",
        "1 if this node is the leader.",
        u8::from(state.node.is_leader()),
    );
    let _ = writeln!(
        out,
        "# HELP baton_raft_leader_changes_total Leader changes seen by this node.\n# TYPE baton_raft_leader_changes_total counter\nbaton_raft_leader_changes_total {}",
        state.metrics.leader_changes.load(Ordering::Relaxed)
    );
    gauge(
        &mut out,
        "baton_revision",
        "State machine revision.",
        counts.revision.0,
    );
    gauge(&mut out, "baton_keys", "Keys stored.", counts.keys);
    gauge(&mut out, "baton_leases", "Live leases.", counts.leases);
    gauge(
        &mut out,
        "baton_locks_held",
        "Lock holds.",
        counts.lock_holders,
    );
    gauge(
        &mut out,
        "baton_semaphore_holders",
        "Semaphore holds.",
        counts.semaphore_holders,
    );
    gauge(
        &mut out,
        "baton_election_leaders",
        "Elections with a leader.",
        counts.election_leaders,
    );
    gauge(
        &mut out,
        "baton_queue_waiters",
        "Queued acquires, all kinds.",
        counts.waiters,
    );
    gauge(
        &mut out,
        "baton_lock_delays",
        "Locks under a lock-delay.",
        counts.lock_delays,
    );
    gauge(
        &mut out,
        "baton_watches_open",
        "Open watch streams on this node.",
        state.metrics.open_watches.load(Ordering::Relaxed),
    );
    gauge(
        &mut out,
        "baton_events_window",
        "Events held for watches.",
        counts.events,
    );
    if let Some(auth) = &state.auth {
        render_principals(&mut out, state, auth);
    }
    out
}

/// A per-principal gauge: its name, its help, and its value from the principal's usage.
type UsageGauge = (
    &'static str,
    &'static str,
    fn(&baton_state_machine::Usage) -> u64,
);

/// Per principal (a bounded set: the auth file's): requests, refusals by reason, and what
/// it owns in the replicated state.
fn render_principals(out: &mut String, state: &AppState, auth: &crate::auth::Auth) {
    let flows = auth.flows();
    out.push_str("# HELP baton_principal_requests_total Authenticated requests per principal.\n# TYPE baton_principal_requests_total counter\n");
    for (name, flow) in &flows {
        let _ = writeln!(
            out,
            "baton_principal_requests_total{{principal=\"{name}\"}} {}",
            flow.requests.load(Ordering::Relaxed)
        );
    }
    out.push_str("# HELP baton_principal_refused_total Requests refused per principal and reason.\n# TYPE baton_principal_refused_total counter\n");
    for (name, flow) in &flows {
        for (reason, counter) in [
            ("rate_limited", &flow.rate_limited),
            ("quota_exceeded", &flow.quota_exceeded),
            ("permission_denied", &flow.permission_denied),
        ] {
            let _ = writeln!(
                out,
                "baton_principal_refused_total{{principal=\"{name}\",reason=\"{reason}\"}} {}",
                counter.load(Ordering::Relaxed)
            );
        }
    }
    let usage: Vec<_> = state
        .node
        .read_local(|sm| flows.iter().map(|(name, _)| sm.usage(name)).collect());
    let gauges: [UsageGauge; 3] = [
        (
            "baton_principal_leases",
            "Live leases per principal.",
            |u| u.leases,
        ),
        (
            "baton_principal_keys",
            "Keys written by each principal.",
            |u| u.keys,
        ),
        ("baton_principal_key_bytes", "Bytes of those keys.", |u| {
            u.key_bytes
        }),
    ];
    for (metric, help, value) in gauges {
        let _ = writeln!(out, "# HELP {metric} {help}\n# TYPE {metric} gauge");
        for ((name, _), u) in flows.iter().zip(&usage) {
            let _ = writeln!(out, "{metric}{{principal=\"{name}\"}} {}", value(u));
        }
    }
}
