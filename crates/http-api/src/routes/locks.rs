//! Locks: acquire (held open while queued, `queue.rs`), release, fence check, state, list,
//! admin force-release.

use super::LIST_LIMIT_DEFAULT;
use super::shared;
use crate::convert;
use crate::error::{ApiError, ApiResult};
use crate::extract::{ApiPath, ApiQuery, IdempotencyKey, JsonBody, require_admin};
use crate::queue;
use crate::state::AppState;
use axum::Json;
use axum::extract::State;
use axum::http::HeaderMap;
use baton_state_machine::{Command, Fence, ForceRelease, ResourceId, ResourceKind, Response};
use baton_wire::*;

/// Acquires a lock; with `wait_ms > 0` the request is held open until the grant or the
/// deadline.
#[utoipa::path(post, path = "/v1/locks/{name}/acquire", request_body = AcquireRequest,
    responses((status = 200, body = GrantResponse), (status = 409, description = "lock_held or timeout"),
        (status = 404, description = "lease_not_found")))]
pub(crate) async fn acquire(
    State(state): State<AppState>,
    IdempotencyKey(key): IdempotencyKey,
    ApiPath(raw): ApiPath<String>,
    JsonBody(body): JsonBody<AcquireRequest>,
) -> ApiResult<Json<GrantResponse>> {
    Ok(Json(queue::acquire(&state, key, &raw, body).await?))
}

/// Releases a lock (one re-entrant count), or cancels a queued acquire.
#[utoipa::path(post, path = "/v1/locks/{name}/release", request_body = ReleaseRequest,
    responses((status = 200, body = ReleaseResponse), (status = 409, description = "not_holder")))]
pub(crate) async fn release(
    State(state): State<AppState>,
    IdempotencyKey(key): IdempotencyKey,
    ApiPath(raw): ApiPath<String>,
    JsonBody(body): JsonBody<ReleaseRequest>,
) -> ApiResult<Json<ReleaseResponse>> {
    let release = shared::release_of(&state, &raw, body)?;
    shared::release_with(&state, key, Command::LockRelease(release)).await
}

/// Whether a fence is the current grant (linearizable).
#[utoipa::path(post, path = "/v1/locks/{name}/check", request_body = CheckRequest,
    responses((status = 200, body = CheckResponse)))]
pub(crate) async fn check(
    State(state): State<AppState>,
    ApiPath(raw): ApiPath<String>,
    JsonBody(body): JsonBody<CheckRequest>,
) -> ApiResult<Json<CheckResponse>> {
    let id = ResourceId::lock(state.name("name", &raw)?);
    let (check, revision) = state
        .read(Consistency::Linearizable, |sm| {
            sm.check_fence(&id, Fence(body.fence))
        })
        .await?;
    Ok(Json(CheckResponse {
        current: check.current,
        fence: check.fence.map(|f| f.0),
        revision: revision.0,
    }))
}

/// A lock's holders and queue (empty if it is free).
#[utoipa::path(get, path = "/v1/locks/{name}", responses((status = 200, body = LockStateResponse)))]
pub(crate) async fn get(
    State(state): State<AppState>,
    ApiPath(raw): ApiPath<String>,
    ApiQuery(params): ApiQuery<ReadParams>,
) -> ApiResult<Json<LockStateResponse>> {
    let id = ResourceId::lock(state.name("name", &raw)?);
    shared::state_of(&state, id, params.consistency).await
}

/// Locks in use, by name prefix.
#[utoipa::path(get, path = "/v1/locks", responses((status = 200, body = LockListResponse)))]
pub(crate) async fn list(
    State(state): State<AppState>,
    ApiQuery(params): ApiQuery<LockListParams>,
) -> ApiResult<Json<LockListResponse>> {
    let prefix = state.prefix("prefix", &params.prefix)?;
    let limit = params
        .limit
        .unwrap_or(LIST_LIMIT_DEFAULT)
        .clamp(1, LIST_LIMIT_DEFAULT * 10);
    let after = params.after;
    let (locks, revision) = state
        .read(params.consistency, |sm| {
            sm.list_resources(ResourceKind::Lock, &prefix, after.as_deref(), limit)
        })
        .await?;
    Ok(Json(LockListResponse {
        locks: locks.iter().map(convert::lock_summary).collect(),
        revision: revision.0,
    }))
}

/// Admin force-release: every holder goes; needs the admin token when one is configured.
#[utoipa::path(delete, path = "/v1/locks/{name}",
    responses((status = 200, body = ForceReleaseResponse), (status = 404, description = "lock_not_found")))]
pub(crate) async fn force_release(
    State(state): State<AppState>,
    headers: HeaderMap,
    IdempotencyKey(key): IdempotencyKey,
    ApiPath(raw): ApiPath<String>,
) -> ApiResult<Json<ForceReleaseResponse>> {
    require_admin(&state, &headers)?;
    let resource = ResourceId::lock(state.name("name", &raw)?);
    let applied = state
        .propose(key, Command::ForceRelease(ForceRelease { resource }))
        .await?;
    match applied.response {
        Response::ForceReleased { holders } => Ok(Json(ForceReleaseResponse {
            holders_released: holders,
            revision: applied.revision.0,
        })),
        other => Err(ApiError::internal(other)),
    }
}
