//! Leases: grant, keepalive, get, list, revoke.

use crate::auth::Authz;
use crate::convert;
use crate::error::{ApiError, ApiResult};
use crate::extract::{ApiPath, ApiQuery, IdempotencyKey, JsonBody};
use crate::openapi::*;
use crate::state::AppState;
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use baton_state_machine::{LeaseId, Response};
use baton_wire::*;

/// Grants a lease.
#[utoipa::path(post, path = baton_wire::paths::LEASES, operation_id = "leases_grant", request_body = LeaseGrantRequest,
    params(
        ("Idempotency-Key" = Option<String>, Header, description = "Makes a retry safe: 1..=`idempotency_key_bytes_max` bytes of visible ASCII; a retry with the same key returns the first outcome", nullable = false, min_length = 1, pattern = "{idempotency_key}"),
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
    authz: Authz,
    IdempotencyKey(key): IdempotencyKey,
    JsonBody(body): JsonBody<LeaseGrantRequest>,
) -> ApiResult<(StatusCode, Json<LeaseResponse>)> {
    let applied = state
        .propose(&authz, key, convert::lease_grant(body))
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
#[utoipa::path(post, path = baton_wire::paths::LEASE_KEEPALIVE, operation_id = "leases_keepalive",
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
    authz: Authz,
    ApiPath(id): ApiPath<u64>,
) -> ApiResult<Json<KeepaliveResponse>> {
    check_owner(&state, &authz, id).await?;
    match state.node.keepalive(LeaseId(id)).await? {
        Some(ttl_ms) => Ok(Json(KeepaliveResponse {
            lease_id: id,
            ttl_ms,
        })),
        None => Err(lease_not_found(id)),
    }
}

/// A lease, its remaining TTL on the leader's clock, and what it owns.
#[utoipa::path(get, path = baton_wire::paths::LEASE, operation_id = "leases_get",
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
    authz: Authz,
    ApiPath(id): ApiPath<u64>,
    ApiQuery(params): ApiQuery<ReadParams>,
) -> ApiResult<Json<LeaseInfoResponse>> {
    let (info, revision) = state
        .read(params.consistency, |sm| sm.lease(LeaseId(id)))
        .await?;
    let info = info.ok_or_else(|| lease_not_found(id))?;
    if !authz.owns(info.principal.as_deref()) {
        return Err(not_yours(id));
    }
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
        claims: claims(info.claims),
        revision: revision.0,
    }))
}

/// Live leases in id order; with `detail`, each one's remaining TTL (asked of the leader
/// in one round), keys and claims.
#[utoipa::path(get, path = baton_wire::paths::LEASES, operation_id = "leases_list",
    params(LeaseListParams),
    responses(
        (status = 200, description = "Live leases", body = LeaseListResponse),
        BadRequest,
        Internal,
        Unavailable,
        Indeterminate,
    ))]
pub(crate) async fn list(
    State(state): State<AppState>,
    authz: Authz,
    ApiQuery(params): ApiQuery<LeaseListParams>,
) -> ApiResult<Json<LeaseListResponse>> {
    let limit_max = if params.detail {
        LEASE_DETAIL_LIMIT_MAX
    } else {
        usize::MAX
    };
    let limit = params.limit.unwrap_or(limit_max).clamp(1, limit_max);
    let after = params.after.unwrap_or(0);
    let detail = params.detail;
    // A principal sees its own leases; admins (and everyone without auth) see all.
    let (leases, revision) = state
        .read(params.consistency, |sm| {
            let mut leases = sm.lease_clock();
            leases.retain(|l| l.lease.0 > after);
            if !authz.sees_all() {
                leases.retain(|l| authz.owns(sm.lease_owner(l.lease).flatten()));
            }
            leases.truncate(limit);
            leases
                .into_iter()
                .map(|l| {
                    let info = detail.then(|| sm.lease(l.lease)).flatten();
                    (l, info)
                })
                .collect::<Vec<_>>()
        })
        .await?;
    let remaining = if detail {
        let ids = leases.iter().map(|(l, _)| l.lease).collect();
        // Unknown (null) when the leader cannot be asked, as for one lease.
        state.node.leases_remaining_ms(ids).await.ok()
    } else {
        None
    };
    Ok(Json(LeaseListResponse {
        leases: leases
            .into_iter()
            .enumerate()
            .map(|(i, (l, info))| {
                let (granted, keys, held) = match info {
                    Some(info) => (Some(info.granted.0), Some(info.keys), Some(info.claims)),
                    None => (None, None, None),
                };
                LeaseSummary {
                    lease_id: l.lease.0,
                    ttl_ms: l.ttl_ms,
                    remaining_ms: remaining.as_ref().and_then(|r| r.get(i).copied().flatten()),
                    granted_revision: granted,
                    keys,
                    claims: held.map(claims),
                }
            })
            .collect(),
        revision: revision.0,
    }))
}

/// Leases one detailed listing returns at most (each costs the leader a clock lookup).
const LEASE_DETAIL_LIMIT_MAX: usize = 200;

fn claims(claims: Vec<(baton_state_machine::ResourceId, String)>) -> Vec<Claim> {
    claims
        .into_iter()
        .map(|(resource, owner)| Claim {
            kind: convert::kind(resource.kind),
            name: resource.name,
            owner,
        })
        .collect()
}

/// Revokes a lease: everything it owns goes in the same revision.
#[utoipa::path(delete, path = baton_wire::paths::LEASE, operation_id = "leases_revoke",
    params(
        ("id" = u64, Path, description = "The lease id"),
        ("Idempotency-Key" = Option<String>, Header, description = "Makes a retry safe: 1..=`idempotency_key_bytes_max` bytes of visible ASCII; a retry with the same key returns the first outcome", nullable = false, min_length = 1, pattern = "{idempotency_key}"),
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
    authz: Authz,
    IdempotencyKey(key): IdempotencyKey,
    ApiPath(id): ApiPath<u64>,
) -> ApiResult<Json<RevokeResponse>> {
    let applied = state
        .propose(&authz, key, convert::lease_revoke(id))
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

/// Refuses a keepalive of another principal's lease. Owners never change, so the local
/// state answers when it has the lease; a node that does not have it yet asks the leader
/// (a lease granted a moment ago elsewhere).
async fn check_owner(state: &AppState, authz: &Authz, id: u64) -> ApiResult<()> {
    if authz.sees_all() {
        return Ok(());
    }
    let owner = |sm: &baton_state_machine::StateMachine| {
        sm.lease_owner(LeaseId(id)).map(|o| o.map(str::to_owned))
    };
    let owner = match state.node.read_local(owner) {
        Some(owner) => Some(owner),
        None => state.node.read(owner).await?,
    };
    match owner {
        Some(owner) if !authz.owns(owner.as_deref()) => Err(not_yours(id)),
        _ => Ok(()),
    }
}

/// `permission_denied`: lease `id` belongs to another principal.
pub(crate) fn not_yours(id: u64) -> ApiError {
    ApiError::new(
        ErrorDetail::PermissionDenied,
        format!("lease {id} belongs to another principal"),
    )
}

/// `lease_not_found` for lease `id`.
pub(crate) fn lease_not_found(id: u64) -> ApiError {
    ApiError::new(ErrorDetail::LeaseNotFound, format!("lease {id} not found"))
}
