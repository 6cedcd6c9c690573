//! Locks: acquire (held open while queued), release, fence check, state, list, admin
//! force-release. Semaphores and elections reuse the release and state helpers here.

use super::{LIST_LIMIT_DEFAULT, ReadParams};
use crate::error::ApiResult;
use crate::extract::{ApiPath, ApiQuery, IdempotencyKey, JsonBody, name, prefix, require_admin};
use crate::routes::leases::unexpected;
use crate::state::{AppState, Consistency};
use crate::wait;
use crate::wire::*;
use axum::Json;
use axum::extract::State;
use axum::http::HeaderMap;
use baton_state_machine::{
    Claimant, Command, Fence, ForceRelease, LeaseId, LockAcquire, Mode, Release, ResourceId,
    ResourceKind, Response,
};
use serde::Deserialize;

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
    let name = name("name", &raw)?;
    let command = Command::LockAcquire(LockAcquire {
        name: name.clone(),
        lease: LeaseId(body.lease_id),
        owner: body.owner.clone(),
        mode: match body.mode {
            ModeDto::Exclusive => Mode::Exclusive,
            ModeDto::Shared => Mode::Shared,
        },
        wait_ms: body.wait_ms,
        lock_delay_ms: body.lock_delay_ms,
    });
    let claimant = Claimant::new(LeaseId(body.lease_id), body.owner);
    let resource = ResourceId::lock(name);
    Ok(Json(
        wait::acquire(&state, key, command, resource, claimant, body.wait_ms).await?,
    ))
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
    let release = release_of(&raw, body)?;
    release_with(&state, key, Command::LockRelease(release)).await
}

/// The release payload of a lock or semaphore release request.
pub(crate) fn release_of(raw: &str, body: ReleaseRequest) -> ApiResult<Release> {
    Ok(Release {
        name: name("name", raw)?,
        lease: LeaseId(body.lease_id),
        owner: body.owner,
        fence: body.fence.map(Fence),
    })
}

/// Proposes a release-like command and shapes its answer.
pub(crate) async fn release_with(
    state: &AppState,
    key: Option<String>,
    command: Command,
) -> ApiResult<Json<ReleaseResponse>> {
    let applied = state.apply(key, command).await?;
    let revision = applied.revision.0;
    match applied.response {
        Response::Released {
            released, count, ..
        } => Ok(Json(ReleaseResponse {
            released,
            count,
            cancelled: false,
            revision,
        })),
        Response::Cancelled { .. } => Ok(Json(ReleaseResponse {
            released: false,
            count: 0,
            cancelled: true,
            revision,
        })),
        other => Err(unexpected(&other)),
    }
}

/// Whether a fence is the current grant (linearizable).
#[utoipa::path(post, path = "/v1/locks/{name}/check", request_body = CheckRequest,
    responses((status = 200, body = CheckResponse)))]
pub(crate) async fn check(
    State(state): State<AppState>,
    ApiPath(raw): ApiPath<String>,
    JsonBody(body): JsonBody<CheckRequest>,
) -> ApiResult<Json<CheckResponse>> {
    let id = ResourceId::lock(name("name", &raw)?);
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
    state_of(
        &state,
        ResourceId::lock(name("name", &raw)?),
        params.consistency,
    )
    .await
}

/// The state of a lock or semaphore.
pub(crate) async fn state_of(
    state: &AppState,
    id: ResourceId,
    consistency: Consistency,
) -> ApiResult<Json<LockStateResponse>> {
    let (lock, revision) = state.read(consistency, |sm| sm.lock_state(&id)).await?;
    Ok(Json(lock_state_response(&id.name, lock, revision.0)))
}

/// `GET /v1/locks` parameters.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListParams {
    #[serde(default)]
    prefix: String,
    limit: Option<usize>,
    after: Option<String>,
    #[serde(default)]
    consistency: Consistency,
}

/// Locks in use, by name prefix.
#[utoipa::path(get, path = "/v1/locks", responses((status = 200, body = LockListResponse)))]
pub(crate) async fn list(
    State(state): State<AppState>,
    ApiQuery(params): ApiQuery<ListParams>,
) -> ApiResult<Json<LockListResponse>> {
    let prefix = prefix("prefix", &params.prefix)?;
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
        locks: locks.iter().map(lock_summary_dto).collect(),
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
    let resource = ResourceId::lock(name("name", &raw)?);
    let applied = state
        .apply(key, Command::ForceRelease(ForceRelease { resource }))
        .await?;
    match applied.response {
        Response::ForceReleased { holders } => Ok(Json(ForceReleaseResponse {
            holders_released: holders,
            revision: applied.revision.0,
        })),
        other => Err(unexpected(&other)),
    }
}
