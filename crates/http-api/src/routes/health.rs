//! `/healthz`, `/readyz`, `/metrics`, `/v1/openapi.json` and the plain `/` page.

use crate::metrics;
use crate::state::AppState;
use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use baton_wire::{HealthResponse, ReadyResponse};

/// The process is up.
#[utoipa::path(get, path = "/healthz", operation_id = "health_healthz",
    responses((status = 200, description = "The process serves", body = HealthResponse)))]
pub(crate) async fn healthz() -> Json<HealthResponse> {
    Json(HealthResponse {
        status: "ok".into(),
    })
}

/// A leader is known and this node has applied what it knows to be committed.
#[utoipa::path(get, path = "/readyz", operation_id = "health_readyz", responses(
    (status = 200, description = "Ready", body = ReadyResponse),
    (status = 503, description = "Not ready: no leader known, or behind the commit index", body = ReadyResponse),
))]
pub(crate) async fn readyz(State(state): State<AppState>) -> Response {
    let status = state.node.status();
    let caught_up = status.applied_index >= status.committed_index;
    let ready = status.leader.is_some() && caught_up;
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
#[utoipa::path(get, path = "/metrics", operation_id = "health_metrics", responses((status = 200, description = "Prometheus text exposition",
        content_type = "text/plain; version=0.0.4", body = String)))]
pub(crate) async fn metrics(State(state): State<AppState>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        metrics::render(&state),
    )
        .into_response()
}

/// This document: generated from the handlers and wire types, with the limits this node
/// enforces filled in.
#[utoipa::path(get, path = "/v1/openapi.json", operation_id = "health_openapi",
    responses((status = 200, description = "The OpenAPI 3.1 document", body = Object)))]
pub(crate) async fn openapi(State(state): State<AppState>) -> Json<serde_json::Value> {
    Json(crate::openapi::document(
        state.limits(),
        state.config.body_bytes_max,
    ))
}

/// A plain page: which node this is, and where the API is.
#[utoipa::path(get, path = "/", operation_id = "health_index",
    responses((status = 200, description = "An HTML page", content_type = "text/html", body = String)))]
pub(crate) async fn index(State(state): State<AppState>) -> Html<String> {
    let s = state.node.status();
    let leader = s
        .leader
        .map_or_else(|| "unknown".to_owned(), |l| l.to_string());
    Html(format!(
        "<!doctype html><html><head><title>baton node {id}</title></head><body>\
         <h1>baton</h1><p>Node <b>{id}</b> ({state}), leader: <b>{leader}</b>, term {term}, \
         revision {revision}.</p><ul>\
         <li><a href=\"/v1/cluster\">/v1/cluster</a>: the cluster</li>\
         <li><a href=\"/v1/locks\">/v1/locks</a>: locks in use</li>\
         <li><a href=\"/v1/leases\">/v1/leases</a>: live leases</li>\
         <li><a href=\"/v1/openapi.json\">/v1/openapi.json</a>: the API</li>\
         <li><a href=\"/metrics\">/metrics</a>: Prometheus metrics</li>\
         </ul></body></html>",
        id = s.id,
        state = s.state.to_lowercase(),
        term = s.term,
        revision = s.revision.0,
    ))
}
