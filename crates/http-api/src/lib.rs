//! The public `/v1` HTTP/JSON API of baton (spec §3), served by axum over a [`Node`].
//!
//! # Layout
//! - `routes/`: one module per resource (leases, locks, semaphores, elections, kv, txn,
//!   watch, cluster, health); handlers are thin: parse, propose or read, shape the answer.
//! - `queue.rs`: the one acquire handler of locks, semaphores and elections, held open while
//!   queued, and its replicated deadline.
//! - `claim_guard.rs`: the guard over a whole held-open acquire: a client gone at any moment
//!   leaves no entry and no grant behind; a retry with its `Idempotency-Key` takes it up.
//! - `convert/`: the only place that knows both the state machine's types and the wire's
//!   (`baton-wire` holds the contract). `to_wire.rs` turns state into answers and events;
//!   `to_command.rs` turns requests into the commands handlers propose.
//! - `auth/`: the auth file and its rules (`file.rs`), what a principal may do (`authz.rs`),
//!   its token bucket and held-open counts (`flow.rs`), the token check and the access log
//!   (`middleware.rs`).
//! - `origin.rs`: the `Host` and `Origin` checks (no DNS rebinding, no cross-site calls).
//! - `extract.rs`: extractors that turn bad input into a 4xx; the admin token.
//! - `error.rs`: [`ApiError`], each refusal mapped once to its typed error body and status.
//! - `state.rs`: [`AppState`]: propose, read, names checked against the node's limits.
//! - `activity.rs`: when this node applied recent revisions (ages of holds and waits) and
//!   per-resource statistics over a recent window (the console's hot locks).
//! - `console.rs`: the web console, embedded in the binary.
//! - `metrics.rs` (Prometheus, through `prometheus-client`), `openapi.rs`.

pub mod activity;
pub mod auth;
mod claim_guard;
mod console;
mod convert;
mod error;
mod extract;
mod metrics;
mod openapi;
pub mod origin;
mod queue;
mod routes;
mod state;

pub use error::ApiError;
pub use metrics::Metrics;
pub use state::{ApiConfig, AppState, Shared};

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderName, Request};
use axum::middleware;
use axum::routing::{get, post};
use baton_raft_node::Node;
use baton_raft_node::listener::{ConnLimits, Serving};
use baton_wire::{ErrorDetail, paths};
use routes::*;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::trace::TraceLayer;

/// How long shutdown waits for the cancels of abandoned waits.
const DRAIN_GRACE: Duration = Duration::from_secs(5);

impl AppState {
    /// State for a router over `node`.
    pub fn new(node: Node, config: ApiConfig) -> AppState {
        AppState::from_shared(state::Shared {
            node,
            config: Arc::new(config),
            metrics: Arc::new(Metrics::default()),
            shutdown: CancellationToken::new(),
            tracker: TaskTracker::new(),
            detached: Arc::default(),
            auth: None,
            activity: Arc::default(),
        })
    }
}

/// The whole `/v1` router with its layers.
pub fn router(state: AppState) -> Router {
    let request_id = HeaderName::from_static("x-request-id");
    let api = Router::new()
        .route("/", get(console::page))
        .route("/ui", get(console::page))
        .route("/ui/{*path}", get(console::ui))
        .route(paths::HEALTHZ, get(health::healthz))
        .route(paths::READYZ, get(health::readyz))
        .route(paths::METRICS, get(health::metrics))
        .route(paths::OPENAPI, get(health::openapi))
        .route(paths::LEASES, post(leases::grant).get(leases::list))
        .route(paths::LEASE, get(leases::get).delete(leases::revoke))
        .route(paths::LEASE_KEEPALIVE, post(leases::keepalive))
        .route(paths::LOCKS, get(locks::list))
        .route(paths::SEMAPHORES, get(semaphores::list))
        .route(paths::ELECTIONS, get(elections::list))
        .route(paths::STATS_LOCKS, get(stats::locks))
        .route(paths::CLUSTER_REPLICATION, get(cluster::replication))
        .route(paths::LOCK, get(locks::get).delete(locks::force_release))
        .route(paths::LOCK_ACQUIRE, post(locks::acquire))
        .route(paths::LOCK_RELEASE, post(locks::release))
        .route(paths::LOCK_CHECK, post(locks::check))
        .route(paths::SEMAPHORE, get(semaphores::get))
        .route(paths::SEMAPHORE_ACQUIRE, post(semaphores::acquire))
        .route(paths::SEMAPHORE_RELEASE, post(semaphores::release))
        .route(paths::ELECTION, get(elections::get))
        .route(paths::ELECTION_CAMPAIGN, post(elections::campaign))
        .route(paths::ELECTION_PROCLAIM, post(elections::proclaim))
        .route(paths::ELECTION_RESIGN, post(elections::resign))
        .route(paths::KV, get(kv::range).delete(kv::delete_prefix))
        .route(
            &paths::KV_KEY.replace("{key}", "{*key}"),
            get(kv::get)
                .put(kv::put)
                .post(kv::create_sequential)
                .delete(kv::delete),
        )
        .route(paths::TXN, post(txn::txn))
        .route(paths::WATCH, get(watch::watch))
        .route(paths::CLUSTER, get(cluster::status))
        .route(paths::CLUSTER_MEMBERS, post(cluster::add_member))
        .route(
            paths::CLUSTER_MEMBER,
            axum::routing::delete(cluster::remove_member),
        )
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            auth::authenticate,
        ))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(state.config.body_bytes_max))
        .layer(middleware::from_fn_with_state(state.clone(), origin::guard))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            metrics::track,
        ))
        .with_state(state);
    api.layer(PropagateRequestIdLayer::new(request_id.clone()))
        .layer(
            TraceLayer::new_for_http().make_span_with(|request: &Request<_>| {
                let id = request
                    .headers()
                    .get("x-request-id")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("-")
                    .to_owned();
                tracing::info_span!("request", method = %request.method(), uri = %request.uri(), request_id = %id)
            }),
        )
        .layer(SetRequestIdLayer::new(request_id, MakeRequestUuid))
}

async fn not_found() -> ApiError {
    ApiError::new(ErrorDetail::NotFound, "no such endpoint")
}

async fn method_not_allowed() -> ApiError {
    ApiError::new(
        ErrorDetail::MethodNotAllowed,
        "method not allowed on this endpoint",
    )
}

/// Serves the API on `listener` (plain or TLS, as `serving` says, within `limits`:
/// `baton_raft_node::listener`) until `shutdown` resolves. Then held-open requests are
/// answered at once (503) and their queue entries cancelled, watches end, and in-flight
/// requests finish before this returns.
pub async fn serve(
    listener: tokio::net::TcpListener,
    serving: Serving,
    limits: ConnLimits,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let leader_watch = state.tracker.spawn(count_leader_changes(state.clone()));
    let _activity = state.node.observe_applied(state.activity.clone());
    let stop = state.shutdown.clone();
    tokio::spawn(async move {
        shutdown.await;
        tracing::info!("shutting down: draining held-open requests");
        stop.cancel();
    });
    baton_raft_node::listener::serve(
        listener,
        router(state.clone()),
        serving,
        limits,
        state.metrics.api_connections.clone(),
        state.shutdown.clone(),
    )
    .await;
    let result = Ok(());
    state.shutdown.cancel();
    leader_watch.abort();
    state.tracker.close();
    if tokio::time::timeout(DRAIN_GRACE, state.tracker.wait())
        .await
        .is_err()
    {
        tracing::warn!("some cancels of abandoned waits did not finish");
    }
    result
}

async fn count_leader_changes(state: AppState) {
    // The server metrics change only with the vote, role or membership; the full metrics
    // are sent on every turn of openraft's loop and would wake this task for each entry.
    let mut metrics = state.node.raft().server_metrics();
    let mut leader = metrics.borrow().current_leader;
    loop {
        tokio::select! {
            changed = metrics.changed() => if changed.is_err() { return },
            () = state.shutdown.cancelled() => return,
        }
        let now = metrics.borrow().current_leader;
        if now != leader {
            leader = now;
            state
                .metrics
                .leader_changes
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }
}
