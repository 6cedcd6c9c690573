//! `/healthz`, `/readyz`, `/metrics` and `/v1/openapi.json`.

use crate::auth::Authz;
use crate::metrics;
use crate::state::AppState;
use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use baton_wire::{HealthResponse, ReadyResponse};

/// The process is up.
#[utoipa::path(get, path = baton_wire::paths::HEALTHZ, operation_id = "health_healthz",
    responses((status = 200, description = "The process serves", body = HealthResponse)))]
pub(crate) async fn healthz() -> Json<HealthResponse> {
    Json(HealthResponse {
        status: "ok".into(),
    })
}

/// This node is a member of the configuration it knows, a leader is known, and it has
/// applied what it knows to be committed.
#[utoipa::path(get, path = baton_wire::paths::READYZ, operation_id = "health_readyz", responses(
    (status = 200, description = "Ready", body = ReadyResponse),
    (status = 503, description = "Not ready: not (or not yet, or no longer) a member, no leader known, or behind the commit index", body = ReadyResponse),
))]
pub(crate) async fn readyz(State(state): State<AppState>) -> Response {
    let status = state.node.status();
    let ready = status.ready();
    let body = Json(ReadyResponse {
        ready,
        leader: status.leader,
        applied_index: status.applied_index,
        commit_index: status.committed_index,
    });
    if ready {
        body.into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, body).into_response()
    }
}

/// Prometheus text exposition.
#[utoipa::path(get, path = baton_wire::paths::METRICS, operation_id = "health_metrics", responses((status = 200, description = "Prometheus metrics in the OpenMetrics text format",
        content_type = "application/openmetrics-text; version=1.0.0; charset=utf-8", body = String)))]
pub(crate) async fn metrics(State(state): State<AppState>, authz: Authz) -> Response {
    // Per-lock and per-principal series name what they count: an admin (or a node without
    // auth) sees them all, another principal only what it may read and itself, and an
    // anonymous scrape of `--metrics-open` none.
    let view = match (&state.auth, &authz) {
        (None, _) => metrics::View::All,
        (Some(_), Authz::Principal(p, _)) if p.admin => metrics::View::All,
        (Some(_), Authz::Principal(..)) => metrics::View::Principal(&authz),
        (Some(_), Authz::Open) => metrics::View::Anonymous,
    };
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        metrics::render(&state, &view),
    )
        .into_response()
}

/// This document: generated from the handlers and wire types, with the limits this node
/// enforces filled in.
#[utoipa::path(get, path = baton_wire::paths::OPENAPI, operation_id = "health_openapi",
    responses((status = 200, description = "The OpenAPI 3.1 document", body = Object)))]
pub(crate) async fn openapi(State(state): State<AppState>) -> Json<serde_json::Value> {
    Json(crate::openapi::document(
        state.limits(),
        state.config.body_bytes_max,
        state.auth.is_some(),
    ))
}
