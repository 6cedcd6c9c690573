//! Leases: grant, keepalive, get, list, revoke.

use crate::convert;
use crate::error::{ApiError, ApiResult};
use crate::extract::{ApiPath, ApiQuery, IdempotencyKey, JsonBody};
use crate::openapi::*;
use crate::state::AppState;
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use baton_state_machine::{Command, LeaseGrant, LeaseId, LeaseRevoke, Response};
use baton_wire::*;

/// Grants a lease.
#[utoipa::path(post, path = "/v1/leases", operation_id = "leases_grant", request_body = LeaseGrantRequest,
    params(
        ("Idempotency-Key" = Option<String>, Header, description = "Makes a retry safe: 1..=`idempotency_key_bytes_max` bytes of visible ASCII; a retry with the same key returns the first outcome", nullable = false, min_length = 1, pattern = r"^[!-~]+$"),
    ),
    responses(
        (status = 201, description = "The lease", body = LeaseResponse),
        BadRequest,
        TooLarge,
        KeyReused,
        Internal,
        Unavailable,
        Indeterminate,
    ))]
pub(crate) async fn grant(
    State(state): State<AppState>,
    IdempotencyKey(key): IdempotencyKey,
    JsonBody(body): JsonBody<LeaseGrantRequest>,
) -> ApiResult<(StatusCode, Json<LeaseResponse>)> {
    let applied = state
        .propose(
            key,
            Command::LeaseGrant(LeaseGrant {
                ttl_ms: body.ttl_ms,
            }),
        )
        .await?;
    let Response::LeaseGranted { lease, ttl_ms } = applied.response else {
        return Err(ApiError::internal(&applied.response));
    };
    Ok((
        StatusCode::CREATED,
        Json(LeaseResponse {
            lease_id: lease.0,
            ttl_ms,
            revision: applied.revision.0,
        }),
    ))
}

/// Keeps a lease alive; the answer's TTL counts from when the request was sent.
#[utoipa::path(post, path = "/v1/leases/{id}/keepalive", operation_id = "leases_keepalive",
    params(("id" = u64, Path, description = "The lease id")),
    responses(
        (status = 200, description = "Kept alive", body = KeepaliveResponse),
        LeaseNotFound,
        BadRequest,
        Internal,
        Unavailable,
        Indeterminate,
    ))]
pub(crate) async fn keepalive(
    State(state): State<AppState>,
    ApiPath(id): ApiPath<u64>,
) -> ApiResult<Json<KeepaliveResponse>> {
    match state.node.keepalive(LeaseId(id)).await? {
        Some(ttl_ms) => Ok(Json(KeepaliveResponse {
            lease_id: id,
            ttl_ms,
        })),
        None => Err(lease_not_found(id)),
    }
}

/// A lease, its remaining TTL on the leader's clock, and what it owns.
#[utoipa::path(get, path = "/v1/leases/{id}", operation_id = "leases_get",
    params(
        ("id" = u64, Path, description = "The lease id"),
        ReadParams,
    ),
    responses(
        (status = 200, description = "The lease", body = LeaseInfoResponse),
        LeaseNotFound,
        BadRequest,
        Internal,
        Unavailable,
        Indeterminate,
    ))]
pub(crate) async fn get(
    State(state): State<AppState>,
    ApiPath(id): ApiPath<u64>,
    ApiQuery(params): ApiQuery<ReadParams>,
) -> ApiResult<Json<LeaseInfoResponse>> {
    let (info, revision) = state
        .read(params.consistency, |sm| sm.lease(LeaseId(id)))
        .await?;
    let info = info.ok_or_else(|| lease_not_found(id))?;
    // The remaining TTL lives on the leader's clock only; unknown if it cannot be asked.
    let remaining_ms = state
        .node
        .lease_remaining_ms(LeaseId(id))
        .await
        .ok()
        .flatten();
    Ok(Json(LeaseInfoResponse {
        lease_id: id,
        ttl_ms: info.ttl_ms,
        remaining_ms,
        granted_revision: info.granted.0,
        keys: info.keys,
        claims: info
            .claims
            .into_iter()
            .map(|(resource, owner)| Claim {
                kind: convert::kind(resource.kind),
                name: resource.name,
                owner,
            })
            .collect(),
        revision: revision.0,
    }))
}

/// Every live lease.
#[utoipa::path(get, path = "/v1/leases", operation_id = "leases_list",
    params(ReadParams),
    responses(
        (status = 200, description = "Live leases", body = LeaseListResponse),
        BadRequest,
        Internal,
        Unavailable,
        Indeterminate,
    ))]
pub(crate) async fn list(
    State(state): State<AppState>,
    ApiQuery(params): ApiQuery<ReadParams>,
) -> ApiResult<Json<LeaseListResponse>> {
    let (leases, revision) = state
        .read(params.consistency, |sm| sm.lease_clock())
        .await?;
    Ok(Json(LeaseListResponse {
        leases: leases
            .into_iter()
            .map(|l| LeaseSummary {
                lease_id: l.lease.0,
                ttl_ms: l.ttl_ms,
            })
            .collect(),
        revision: revision.0,
    }))
}

/// Revokes a lease: everything it owns goes in the same revision.
#[utoipa::path(delete, path = "/v1/leases/{id}", operation_id = "leases_revoke",
    params(
        ("id" = u64, Path, description = "The lease id"),
        ("Idempotency-Key" = Option<String>, Header, description = "Makes a retry safe: 1..=`idempotency_key_bytes_max` bytes of visible ASCII; a retry with the same key returns the first outcome", nullable = false, min_length = 1, pattern = r"^[!-~]+$"),
    ),
    responses(
        (status = 200, description = "Revoked", body = RevokeResponse),
        LeaseNotFound,
        BadRequest,
        KeyReused,
        Internal,
        Unavailable,
        Indeterminate,
    ))]
pub(crate) async fn revoke(
    State(state): State<AppState>,
    IdempotencyKey(key): IdempotencyKey,
    ApiPath(id): ApiPath<u64>,
) -> ApiResult<Json<RevokeResponse>> {
    let applied = state
        .propose(
            key,
            Command::LeaseRevoke(LeaseRevoke { lease: LeaseId(id) }),
        )
        .await?;
    let Response::LeaseEnded {
        keys_deleted,
        holds_released,
        waits_cancelled,
        ..
    } = applied.response
    else {
        return Err(ApiError::internal(&applied.response));
    };
    Ok(Json(RevokeResponse {
        lease_id: id,
        keys_deleted,
        holds_released,
        waits_cancelled,
        revision: applied.revision.0,
    }))
}

fn lease_not_found(id: u64) -> ApiError {
    ApiError::new(ErrorDetail::LeaseNotFound, format!("lease {id} not found"))
}
