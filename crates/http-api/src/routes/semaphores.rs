//! Semaphores: acquire permits (held open while queued), release, state.

use super::ReadParams;
use crate::error::ApiResult;
use crate::extract::{ApiPath, ApiQuery, IdempotencyKey, JsonBody, name};
use crate::routes::locks::{release_of, release_with, state_of};
use crate::state::AppState;
use crate::wait;
use crate::wire::*;
use axum::Json;
use axum::extract::State;
use baton_state_machine::{Claimant, Command, LeaseId, ResourceId, SemaphoreAcquire};

/// Acquires permits of a semaphore of `limit` permits.
#[utoipa::path(post, path = "/v1/semaphores/{name}/acquire", request_body = SemaphoreAcquireRequest,
    responses((status = 200, body = GrantResponse), (status = 409, description = "lock_held, timeout or limit_mismatch")))]
pub(crate) async fn acquire(
    State(state): State<AppState>,
    IdempotencyKey(key): IdempotencyKey,
    ApiPath(raw): ApiPath<String>,
    JsonBody(body): JsonBody<SemaphoreAcquireRequest>,
) -> ApiResult<Json<GrantResponse>> {
    let name = name("name", &raw)?;
    let command = Command::SemaphoreAcquire(SemaphoreAcquire {
        name: name.clone(),
        lease: LeaseId(body.lease_id),
        owner: body.owner.clone(),
        limit: body.limit,
        permits: body.permits,
        wait_ms: body.wait_ms,
    });
    let claimant = Claimant::new(LeaseId(body.lease_id), body.owner);
    let resource = ResourceId::semaphore(name);
    Ok(Json(
        wait::acquire(&state, key, command, resource, claimant, body.wait_ms).await?,
    ))
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
    let release = release_of(&raw, body)?;
    release_with(&state, key, Command::SemaphoreRelease(release)).await
}

/// A semaphore's holders, queue and limit.
#[utoipa::path(get, path = "/v1/semaphores/{name}", responses((status = 200, body = LockStateResponse)))]
pub(crate) async fn get(
    State(state): State<AppState>,
    ApiPath(raw): ApiPath<String>,
    ApiQuery(params): ApiQuery<ReadParams>,
) -> ApiResult<Json<LockStateResponse>> {
    state_of(
        &state,
        ResourceId::semaphore(name("name", &raw)?),
        params.consistency,
    )
    .await
}
