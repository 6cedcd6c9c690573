//! The middleware: bearer token to principal (401), rate (429), the [`Authz`] for the
//! handlers, the access log.

use super::*;
use crate::error::error_response;
use crate::state::AppState;
use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderValue, header};
use axum::middleware::Next;
use axum::response::Response;
use baton_wire::{ErrorCode, ErrorDetail, paths};
use std::sync::atomic::Ordering;
use std::time::Instant;

/// Paths that never need a token: health, and the console's page (its data calls are `/v1`
/// requests with the user's token); every path under `/ui/` (its script and style) too.
pub const OPEN_PATHS: [&str; 4] = ["/", "/ui", paths::HEALTHZ, paths::READYZ];

/// Whether `path` answers without a token ([`OPEN_PATHS`], or under `/ui/`).
pub fn is_open_path(path: &str) -> bool {
    OPEN_PATHS.contains(&path) || path.starts_with("/ui/")
}

/// Middleware: authenticates the bearer token (401), applies the principal's rate (429),
/// hands the handlers an [`Authz`], counts refusals per principal, and writes the access
/// log line when it is on.
pub async fn authenticate(
    State(state): State<AppState>,
    mut request: Request,
    next: Next,
) -> Response {
    let started = Instant::now();
    // What the access log line needs, taken only when the log is on.
    let logged = state.config.access_log.then(|| {
        let route = request
            .extensions()
            .get::<MatchedPath>()
            .map_or_else(|| request.uri().path(), MatchedPath::as_str)
            .to_owned();
        let request_id = request
            .headers()
            .get("x-request-id")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("-")
            .to_owned();
        (
            route,
            request.uri().path().to_owned(),
            request.method().clone(),
            request_id,
        )
    });
    let (authz, response) = match admit(&state, &request) {
        Ok(authz) => {
            request.extensions_mut().insert(authz.clone());
            (Some(authz), next.run(request).await)
        }
        Err(refusal) => (None, *refusal),
    };
    let principal = match &authz {
        Some(Authz::Principal(p, flow)) => {
            if response.status().as_u16() == 429
                && response.extensions().get::<ErrorCode>() == Some(&ErrorCode::QuotaExceeded)
            {
                flow.quota_exceeded.fetch_add(1, Ordering::Relaxed);
            }
            p.name.as_str()
        }
        _ => "-",
    };
    if let Some((route, path, method, request_id)) = logged {
        tracing::info!(
            target: "baton::access",
            principal,
            method = %method,
            route = %route,
            path = %path,
            status = response.status().as_u16(),
            latency_ms = started.elapsed().as_secs_f64() * 1e3,
            request_id = %request_id,
            "access"
        );
    }
    response
}

pub(super) fn admit(state: &AppState, request: &Request) -> Result<Authz, Box<Response>> {
    let path = request.uri().path();
    let Some(auth) = &state.auth else {
        return Ok(Authz::Open);
    };
    if is_open_path(path) || (path == paths::METRICS && state.config.metrics_open) {
        return Ok(Authz::Open);
    }
    let token = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    let principal = token.and_then(|t| auth.rules().authenticate(t));
    let Some(principal) = principal else {
        let mut response = error_response(
            ErrorDetail::Unauthenticated,
            if token.is_some() {
                "the bearer token is not valid".into()
            } else {
                "this server needs `Authorization: Bearer <token>`".into()
            },
        );
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Bearer realm=\"baton\""),
        );
        return Err(Box::new(response));
    };
    let flow = auth.flow(&principal.name);
    flow.requests.fetch_add(1, Ordering::Relaxed);
    if path == paths::METRICS && !(principal.admin || principal.metrics) {
        flow.permission_denied.fetch_add(1, Ordering::Relaxed);
        return Err(Box::new(error_response(
            ErrorDetail::PermissionDenied,
            format!("principal {:?} may not read /metrics", principal.name),
        )));
    }
    if let Err(wait) = flow.take(&principal.quota) {
        flow.rate_limited.fetch_add(1, Ordering::Relaxed);
        let wait_ms = wait.as_millis().max(1) as u64;
        let mut response = error_response(
            ErrorDetail::RateLimited {
                queue_len_max: None,
                retry_after_ms: Some(wait_ms),
            },
            format!(
                "principal {:?} is over its {} requests per second",
                principal.name,
                principal.quota.requests_per_second.unwrap_or_default()
            ),
        );
        response.headers_mut().insert(
            header::RETRY_AFTER,
            HeaderValue::from(wait_ms.div_ceil(1_000).max(1)),
        );
        return Err(Box::new(response));
    }
    Ok(Authz::Principal(principal, flow))
}
