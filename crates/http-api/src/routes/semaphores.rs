//! Semaphores: acquire permits (held open while queued), release, state.

use super::shared;
use crate::error::ApiResult;
use crate::extract::{ApiPath, ApiQuery, IdempotencyKey, JsonBody};
use crate::queue;
use crate::state::AppState;
use axum::Json;
use axum::extract::State;
use baton_state_machine::{Command, ResourceId};
use baton_wire::*;

/// Acquires permits of a semaphore of `limit` permits.
#[utoipa::path(post, path = "/v1/semaphores/{name}/acquire", request_body = SemaphoreAcquireRequest,
    responses((status = 200, body = GrantResponse), (status = 409, description = "lock_held, timeout or limit_mismatch")))]
pub(crate) async fn acquire(
    State(state): State<AppState>,
    IdempotencyKey(key): IdempotencyKey,
    ApiPath(raw): ApiPath<String>,
    JsonBody(body): JsonBody<SemaphoreAcquireRequest>,
) -> ApiResult<Json<GrantResponse>> {
    Ok(Json(queue::acquire(&state, key, &raw, body).await?))
}

/// Releases a semaphore hold, or cancels a queued acquire.
#[utoipa::path(post, path = "/v1/semaphores/{name}/release", request_body = ReleaseRequest,
    responses((status = 200, body = ReleaseResponse), (status = 409, description = "not_holder")))]
pub(crate) async fn release(
    State(state): State<AppState>,
    IdempotencyKey(key): IdempotencyKey,
    ApiPath(raw): ApiPath<String>,
    JsonBody(body): JsonBody<ReleaseRequest>,
) -> ApiResult<Json<ReleaseResponse>> {
    let release = shared::release_of(&state, &raw, body)?;
    shared::release_with(&state, key, Command::SemaphoreRelease(release)).await
}

/// A semaphore's holders, queue and limit.
#[utoipa::path(get, path = "/v1/semaphores/{name}", responses((status = 200, body = LockStateResponse)))]
pub(crate) async fn get(
    State(state): State<AppState>,
    ApiPath(raw): ApiPath<String>,
    ApiQuery(params): ApiQuery<ReadParams>,
) -> ApiResult<Json<LockStateResponse>> {
    let id = ResourceId::semaphore(state.name("name", &raw)?);
    shared::state_of(&state, id, params.consistency).await
}
