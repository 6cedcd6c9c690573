//! Locks: acquire (held open while queued, `queue.rs`), release, fence check, state, list,
//! admin force-release.

use super::shared;
use crate::auth::{Access, Authz, Namespace};
use crate::convert;
use crate::error::{ApiError, ApiResult};
use crate::extract::{ApiPath, ApiQuery, IdempotencyKey, JsonBody};
use crate::openapi::*;
use crate::queue;
use crate::state::AppState;
use axum::Json;
use axum::extract::State;
use axum::http::HeaderMap;
use baton_state_machine::{Fence, ResourceId, ResourceKind, Response};
use baton_wire::*;

/// Acquires a lock; with `wait_ms > 0` the request is held open until the grant or the
/// deadline.
#[utoipa::path(post, path = baton_wire::paths::LOCK_ACQUIRE, operation_id = "locks_acquire", request_body = AcquireRequest,
    params(
        ("name" = String, Path, description = "The lock's name, one path segment (encode `/` as `%2F`): 1..=`name_bytes_max` bytes of UTF-8, no control characters, no `.` or `..` segment", min_length = 1, pattern = "{name}"),
        ("Idempotency-Key" = Option<String>, Header, description = "Makes a retry safe: 1..=`idempotency_key_bytes_max` bytes of visible ASCII; a retry with the same key returns the first outcome", nullable = false, min_length = 1, pattern = "{idempotency_key}"),
    ),
    responses(
        (status = 200, description = "Granted", body = GrantResponse),
        LeaseNotFound,
        StillWaiting,
        QueueConflict,
        BadRequest,
        TooLarge,
        KeyReused,
        Internal,
        Unavailable,
        Indeterminate,
        QueueFull,
    ))]
pub(crate) async fn acquire(
    State(state): State<AppState>,
    authz: Authz,
    IdempotencyKey(key): IdempotencyKey,
    ApiPath(raw): ApiPath<String>,
    JsonBody(body): JsonBody<AcquireRequest>,
) -> ApiResult<queue::Acquired> {
    queue::acquire(&state, &authz, key, &raw, body).await
}

/// Releases a lock (one re-entrant count), or cancels a queued acquire.
#[utoipa::path(post, path = baton_wire::paths::LOCK_RELEASE, operation_id = "locks_release", request_body = ReleaseRequest,
    params(
        ("name" = String, Path, description = "The lock's name, one path segment (encode `/` as `%2F`): 1..=`name_bytes_max` bytes of UTF-8, no control characters, no `.` or `..` segment", min_length = 1, pattern = "{name}"),
        ("Idempotency-Key" = Option<String>, Header, description = "Makes a retry safe: 1..=`idempotency_key_bytes_max` bytes of visible ASCII; a retry with the same key returns the first outcome", nullable = false, min_length = 1, pattern = "{idempotency_key}"),
    ),
    responses(
        (status = 200, description = "Released, or the queued acquire cancelled", body = ReleaseResponse),
        LeaseNotFound,
        NotHolder,
        BadRequest,
        TooLarge,
        KeyReused,
        Internal,
        Unavailable,
        Indeterminate,
    ))]
pub(crate) async fn release(
    State(state): State<AppState>,
    authz: Authz,
    IdempotencyKey(key): IdempotencyKey,
    ApiPath(raw): ApiPath<String>,
    JsonBody(body): JsonBody<ReleaseRequest>,
) -> ApiResult<Json<ReleaseResponse>> {
    let name = state.checked_name(&authz, Namespace::Locks, &raw, Access::Write)?;
    shared::release_with(&state, &authz, key, convert::lock_release(name, body)).await
}

/// Whether a fence is the current grant (linearizable).
#[utoipa::path(post, path = baton_wire::paths::LOCK_CHECK, operation_id = "locks_check", request_body = CheckRequest,
    params(
        ("name" = String, Path, description = "The lock's name, one path segment (encode `/` as `%2F`): 1..=`name_bytes_max` bytes of UTF-8, no control characters, no `.` or `..` segment", min_length = 1, pattern = "{name}"),
    ),
    responses(
        (status = 200, description = "Whether the fence is current", body = CheckResponse),
        BadRequest,
        TooLarge,
        Internal,
        Unavailable,
        Indeterminate,
    ))]
pub(crate) async fn check(
    State(state): State<AppState>,
    authz: Authz,
    ApiPath(raw): ApiPath<String>,
    JsonBody(body): JsonBody<CheckRequest>,
) -> ApiResult<Json<CheckResponse>> {
    let id = ResourceId::lock(state.checked_name(&authz, Namespace::Locks, &raw, Access::Read)?);
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
#[utoipa::path(get, path = baton_wire::paths::LOCK, operation_id = "locks_get",
    params(
        ("name" = String, Path, description = "The lock's name, one path segment (encode `/` as `%2F`): 1..=`name_bytes_max` bytes of UTF-8, no control characters, no `.` or `..` segment", min_length = 1, pattern = "{name}"),
        ReadParams,
    ),
    responses(
        (status = 200, description = "The lock", body = LockStateResponse),
        BadRequest,
        Internal,
        Unavailable,
        Indeterminate,
    ))]
pub(crate) async fn get(
    State(state): State<AppState>,
    authz: Authz,
    ApiPath(raw): ApiPath<String>,
    ApiQuery(params): ApiQuery<ReadParams>,
) -> ApiResult<Json<LockStateResponse>> {
    let id = ResourceId::lock(state.checked_name(&authz, Namespace::Locks, &raw, Access::Read)?);
    shared::state_of(&state, id, params.consistency).await
}

/// Locks in use, by name prefix.
#[utoipa::path(get, path = baton_wire::paths::LOCKS, operation_id = "locks_list",
    params(LockListParams),
    responses(
        (status = 200, description = "Locks in use", body = LockListResponse),
        BadRequest,
        Internal,
        Unavailable,
        Indeterminate,
    ))]
pub(crate) async fn list(
    State(state): State<AppState>,
    authz: Authz,
    ApiQuery(params): ApiQuery<LockListParams>,
) -> ApiResult<Json<LockListResponse>> {
    let (found, revision) = shared::list_of(&state, &authz, ResourceKind::Lock, params).await?;
    let mut locks: Vec<LockSummary> = found.iter().map(convert::lock_summary).collect();
    for l in &mut locks {
        state.with_ages(&mut l.holders);
    }
    Ok(Json(LockListResponse { locks, revision }))
}

/// Admin force-release: every holder goes; needs the admin token when one is configured.
#[utoipa::path(delete, path = baton_wire::paths::LOCK, operation_id = "locks_force_release",
    params(
        ("name" = String, Path, description = "The lock's name, one path segment (encode `/` as `%2F`): 1..=`name_bytes_max` bytes of UTF-8, no control characters, no `.` or `..` segment", min_length = 1, pattern = "{name}"),
        ("Idempotency-Key" = Option<String>, Header, description = "Makes a retry safe: 1..=`idempotency_key_bytes_max` bytes of visible ASCII; a retry with the same key returns the first outcome", nullable = false, min_length = 1, pattern = "{idempotency_key}"),
    ),
    responses(
        (status = 200, description = "Every holder released", body = ForceReleaseResponse),
        (status = 404, description = "`lock_not_found`: the lock has no holder or waiter", body = ErrorBody),
        AdminRefused,
        BadRequest,
        KeyReused,
        Internal,
        Unavailable,
        Indeterminate,
    ))]
pub(crate) async fn force_release(
    State(state): State<AppState>,
    authz: Authz,
    headers: HeaderMap,
    IdempotencyKey(key): IdempotencyKey,
    ApiPath(raw): ApiPath<String>,
) -> ApiResult<Json<ForceReleaseResponse>> {
    state.require_admin(&authz, &headers)?;
    let name = state.name("name", &raw)?;
    let applied = state
        .propose(&authz, key, convert::force_release(name))
        .await?;
    match applied.response {
        Response::ForceReleased { holders } => Ok(Json(ForceReleaseResponse {
            holders_released: holders,
            revision: applied.revision.0,
        })),
        other => Err(ApiError::internal(other)),
    }
}
