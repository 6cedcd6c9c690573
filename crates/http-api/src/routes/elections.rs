//! Elections: campaign (held open while queued), proclaim, resign, leader.

use super::shared;
use crate::convert;
use crate::error::{ApiError, ApiResult};
use crate::extract::{ApiPath, ApiQuery, IdempotencyKey, JsonBody};
use crate::queue;
use crate::state::AppState;
use axum::Json;
use axum::extract::State;
use baton_state_machine::{Command, Fence, LeaseId, Proclaim, Resign, Response};
use baton_wire::*;

/// Campaigns: leads at once, or waits as a candidate (held open) up to `wait_ms`.
#[utoipa::path(post, path = "/v1/elections/{name}/campaign", request_body = CampaignRequest,
    responses((status = 200, body = GrantResponse), (status = 409, description = "lock_held or timeout")))]
pub(crate) async fn campaign(
    State(state): State<AppState>,
    IdempotencyKey(key): IdempotencyKey,
    ApiPath(raw): ApiPath<String>,
    JsonBody(body): JsonBody<CampaignRequest>,
) -> ApiResult<Json<GrantResponse>> {
    Ok(Json(queue::acquire(&state, key, &raw, body).await?))
}

/// The leader sets a new value.
#[utoipa::path(post, path = "/v1/elections/{name}/proclaim", request_body = ProclaimRequest,
    responses((status = 200, body = ProclaimResponse), (status = 409, description = "not_holder")))]
pub(crate) async fn proclaim(
    State(state): State<AppState>,
    IdempotencyKey(key): IdempotencyKey,
    ApiPath(raw): ApiPath<String>,
    JsonBody(body): JsonBody<ProclaimRequest>,
) -> ApiResult<Json<ProclaimResponse>> {
    let command = Command::Proclaim(Proclaim {
        name: state.name("name", &raw)?,
        lease: LeaseId(body.lease_id),
        fence: body.fence.map(Fence),
        value: body.value,
    });
    let applied = state.propose(key, command).await?;
    match applied.response {
        Response::Proclaimed { fence } => Ok(Json(ProclaimResponse {
            fence: fence.0,
            revision: applied.revision.0,
        })),
        other => Err(ApiError::internal(other)),
    }
}

/// The leader steps down (the next candidate leads at once), or a candidate withdraws.
#[utoipa::path(post, path = "/v1/elections/{name}/resign", request_body = ResignRequest,
    responses((status = 200, body = ReleaseResponse), (status = 409, description = "not_holder")))]
pub(crate) async fn resign(
    State(state): State<AppState>,
    IdempotencyKey(key): IdempotencyKey,
    ApiPath(raw): ApiPath<String>,
    JsonBody(body): JsonBody<ResignRequest>,
) -> ApiResult<Json<ReleaseResponse>> {
    let command = Command::Resign(Resign {
        name: state.name("name", &raw)?,
        lease: LeaseId(body.lease_id),
        fence: body.fence.map(Fence),
    });
    shared::release_with(&state, key, command).await
}

/// The current leader, its value and fence.
#[utoipa::path(get, path = "/v1/elections/{name}", responses((status = 200, body = ElectionResponse)))]
pub(crate) async fn get(
    State(state): State<AppState>,
    ApiPath(raw): ApiPath<String>,
    ApiQuery(params): ApiQuery<ReadParams>,
) -> ApiResult<Json<ElectionResponse>> {
    let name = state.name("name", &raw)?;
    let (leader, revision) = state
        .read(params.consistency, |sm| sm.election_leader(&name))
        .await?;
    Ok(Json(ElectionResponse {
        name,
        leader: leader.as_ref().map(convert::leader),
        revision: revision.0,
    }))
}
