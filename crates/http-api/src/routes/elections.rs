//! Elections: campaign (held open while queued), proclaim, resign, leader.

use super::ReadParams;
use crate::error::ApiResult;
use crate::extract::{ApiPath, ApiQuery, IdempotencyKey, JsonBody, name};
use crate::routes::leases::unexpected;
use crate::routes::locks::release_with;
use crate::state::AppState;
use crate::wait;
use crate::wire::*;
use axum::Json;
use axum::extract::State;
use baton_state_machine::{
    Campaign, Claimant, Command, Fence, LeaseId, Proclaim, Resign, ResourceId, Response,
};
use serde::Serialize;
use utoipa::ToSchema;

/// Campaigns: leads at once, or waits as a candidate (held open) up to `wait_ms`.
#[utoipa::path(post, path = "/v1/elections/{name}/campaign", request_body = CampaignRequest,
    responses((status = 200, body = GrantResponse), (status = 409, description = "lock_held or timeout")))]
pub(crate) async fn campaign(
    State(state): State<AppState>,
    IdempotencyKey(key): IdempotencyKey,
    ApiPath(raw): ApiPath<String>,
    JsonBody(body): JsonBody<CampaignRequest>,
) -> ApiResult<Json<GrantResponse>> {
    let name = name("name", &raw)?;
    let command = Command::Campaign(Campaign {
        name: name.clone(),
        lease: LeaseId(body.lease_id),
        value: body.value,
        wait_ms: body.wait_ms,
    });
    let claimant = Claimant::new(LeaseId(body.lease_id), "");
    let resource = ResourceId::election(name);
    Ok(Json(
        wait::acquire(&state, key, command, resource, claimant, body.wait_ms).await?,
    ))
}

/// A proclaim's answer.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ProclaimResponse {
    /// The leader's fence.
    fence: u64,
    /// The revision of the proclaim.
    revision: u64,
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
        name: name("name", &raw)?,
        lease: LeaseId(body.lease_id),
        fence: body.fence.map(Fence),
        value: body.value,
    });
    let applied = state.apply(key, command).await?;
    match applied.response {
        Response::Proclaimed { fence } => Ok(Json(ProclaimResponse {
            fence: fence.0,
            revision: applied.revision.0,
        })),
        other => Err(unexpected(&other)),
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
        name: name("name", &raw)?,
        lease: LeaseId(body.lease_id),
        fence: body.fence.map(Fence),
    });
    release_with(&state, key, command).await
}

/// The current leader, its value and fence.
#[utoipa::path(get, path = "/v1/elections/{name}", responses((status = 200, body = ElectionResponse)))]
pub(crate) async fn get(
    State(state): State<AppState>,
    ApiPath(raw): ApiPath<String>,
    ApiQuery(params): ApiQuery<ReadParams>,
) -> ApiResult<Json<ElectionResponse>> {
    let name = name("name", &raw)?;
    let (leader, revision) = state
        .read(params.consistency, |sm| sm.election_leader(&name))
        .await?;
    Ok(Json(ElectionResponse {
        name,
        leader: leader.as_ref().map(leader_dto),
        revision: revision.0,
    }))
}
