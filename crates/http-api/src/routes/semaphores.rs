//! Semaphores: acquire permits (held open while queued), release, state.

use super::shared;
use crate::auth::{Access, Authz, Namespace};
use crate::convert;
use crate::error::ApiResult;
use crate::extract::{ApiPath, ApiQuery, IdempotencyKey, JsonBody};
use crate::openapi::*;
use crate::queue;
use crate::state::AppState;
use axum::Json;
use axum::extract::State;
use baton_state_machine::{ResourceId, ResourceKind};
use baton_wire::*;

/// Acquires permits of a semaphore of `limit` permits.
#[utoipa::path(post, path = baton_wire::paths::SEMAPHORE_ACQUIRE, operation_id = "semaphores_acquire", request_body = SemaphoreAcquireRequest,
    params(
        ("name" = String, Path, description = "The semaphore's name, one path segment (encode `/` as `%2F`): 1..=`name_bytes_max` bytes of UTF-8, no control characters, no `.` or `..` segment", min_length = 1, pattern = "{name}"),
        ("Idempotency-Key" = Option<String>, Header, description = "Makes a retry safe: 1..=`idempotency_key_bytes_max` bytes of visible ASCII; a retry with the same key returns the first outcome", nullable = false, min_length = 1, pattern = "{idempotency_key}"),
    ),
    responses(
        (status = 200, description = "Granted", body = GrantResponse),
        StillWaiting,
        LeaseNotFound,
        (status = 409, description = "`lock_held`, `timeout`, `not_waiting` (as for locks), or `limit_mismatch` (the semaphore is in use with another `limit`)", body = ErrorBody),
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
    JsonBody(body): JsonBody<SemaphoreAcquireRequest>,
) -> ApiResult<queue::Acquired> {
    queue::acquire(&state, &authz, key, &raw, body).await
}

/// Releases a semaphore hold, or cancels a queued acquire.
#[utoipa::path(post, path = baton_wire::paths::SEMAPHORE_RELEASE, operation_id = "semaphores_release", request_body = ReleaseRequest,
    params(
        ("name" = String, Path, description = "The semaphore's name, one path segment (encode `/` as `%2F`): 1..=`name_bytes_max` bytes of UTF-8, no control characters, no `.` or `..` segment", min_length = 1, pattern = "{name}"),
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
    let name = state.checked_name(&authz, Namespace::Semaphores, &raw, Access::Write)?;
    shared::release_with(&state, &authz, key, convert::semaphore_release(name, body)).await
}

/// A semaphore's holders, queue and limit.
#[utoipa::path(get, path = baton_wire::paths::SEMAPHORE, operation_id = "semaphores_get",
    params(
        ("name" = String, Path, description = "The semaphore's name, one path segment (encode `/` as `%2F`): 1..=`name_bytes_max` bytes of UTF-8, no control characters, no `.` or `..` segment", min_length = 1, pattern = "{name}"),
        ReadParams,
    ),
    responses(
        (status = 200, description = "The semaphore", body = LockStateResponse),
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
    let id = ResourceId::semaphore(state.checked_name(
        &authz,
        Namespace::Semaphores,
        &raw,
        Access::Read,
    )?);
    shared::state_of(&state, id, params.consistency).await
}

/// Semaphores in use, by name prefix.
#[utoipa::path(get, path = baton_wire::paths::SEMAPHORES, operation_id = "semaphores_list",
    params(LockListParams),
    responses(
        (status = 200, description = "Semaphores in use", body = SemaphoreListResponse),
        BadRequest,
        Internal,
        Unavailable,
        Indeterminate,
    ))]
pub(crate) async fn list(
    State(state): State<AppState>,
    authz: Authz,
    ApiQuery(params): ApiQuery<LockListParams>,
) -> ApiResult<Json<SemaphoreListResponse>> {
    let (found, revision) =
        shared::list_of(&state, &authz, ResourceKind::Semaphore, params).await?;
    let semaphores = found
        .iter()
        .map(|s| {
            let mut holders: Vec<Holder> = s.holders.iter().map(convert::holder).collect();
            state.with_ages(&mut holders);
            SemaphoreSummary {
                name: s.resource.name.clone(),
                limit: s.limit,
                holders,
                queue_len: s.queue_len,
            }
        })
        .collect();
    Ok(Json(SemaphoreListResponse {
        semaphores,
        revision,
    }))
}
