//! Elections: campaign (held open while queued), proclaim, resign, leader.

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
use baton_state_machine::{ResourceKind, Response};
use baton_wire::*;

/// Campaigns: leads at once, or waits as a candidate (held open) up to `wait_ms`.
#[utoipa::path(post, path = baton_wire::paths::ELECTION_CAMPAIGN, operation_id = "elections_campaign", request_body = CampaignRequest,
    params(
        ("name" = String, Path, description = "The election's name, one path segment (encode `/` as `%2F`): 1..=`name_bytes_max` bytes of UTF-8, no control characters, no `.` or `..` segment", min_length = 1, pattern = "{name}"),
        ("Idempotency-Key" = Option<String>, Header, description = "Makes a retry safe: 1..=`idempotency_key_bytes_max` bytes of visible ASCII; a retry with the same key returns the first outcome", nullable = false, min_length = 1, pattern = "{idempotency_key}"),
    ),
    responses(
        (status = 200, description = "Leading", body = GrantResponse),
        StillWaiting,
        LeaseNotFound,
        QueueConflict,
        BadRequest,
        TooLarge,
        KeyReused,
        Internal,
        Unavailable,
        Indeterminate,
        QueueFull,
    ))]
pub(crate) async fn campaign(
    State(state): State<AppState>,
    authz: Authz,
    IdempotencyKey(key): IdempotencyKey,
    ApiPath(raw): ApiPath<String>,
    JsonBody(body): JsonBody<CampaignRequest>,
) -> ApiResult<queue::Acquired> {
    queue::acquire(&state, &authz, key, &raw, body).await
}

/// The leader sets a new value.
#[utoipa::path(post, path = baton_wire::paths::ELECTION_PROCLAIM, operation_id = "elections_proclaim", request_body = ProclaimRequest,
    params(
        ("name" = String, Path, description = "The election's name, one path segment (encode `/` as `%2F`): 1..=`name_bytes_max` bytes of UTF-8, no control characters, no `.` or `..` segment", min_length = 1, pattern = "{name}"),
        ("Idempotency-Key" = Option<String>, Header, description = "Makes a retry safe: 1..=`idempotency_key_bytes_max` bytes of visible ASCII; a retry with the same key returns the first outcome", nullable = false, min_length = 1, pattern = "{idempotency_key}"),
    ),
    responses(
        (status = 200, description = "Proclaimed", body = ProclaimResponse),
        LeaseNotFound,
        (status = 409, description = "`not_holder`: the lease does not lead (or the fence is not the leader's)", body = ErrorBody),
        BadRequest,
        TooLarge,
        KeyReused,
        Internal,
        Unavailable,
        Indeterminate,
    ))]
pub(crate) async fn proclaim(
    State(state): State<AppState>,
    authz: Authz,
    IdempotencyKey(key): IdempotencyKey,
    ApiPath(raw): ApiPath<String>,
    JsonBody(body): JsonBody<ProclaimRequest>,
) -> ApiResult<Json<ProclaimResponse>> {
    let name = state.checked_name(&authz, Namespace::Elections, &raw, Access::Write)?;
    let command = convert::proclaim(name, body);
    let applied = state.propose(&authz, key, command).await?;
    match applied.response {
        Response::Proclaimed { fence } => Ok(Json(ProclaimResponse {
            fence: fence.0,
            revision: applied.revision.0,
        })),
        other => Err(ApiError::internal(other)),
    }
}

/// The leader steps down (the next candidate leads at once), or a candidate withdraws.
#[utoipa::path(post, path = baton_wire::paths::ELECTION_RESIGN, operation_id = "elections_resign", request_body = ResignRequest,
    params(
        ("name" = String, Path, description = "The election's name, one path segment (encode `/` as `%2F`): 1..=`name_bytes_max` bytes of UTF-8, no control characters, no `.` or `..` segment", min_length = 1, pattern = "{name}"),
        ("Idempotency-Key" = Option<String>, Header, description = "Makes a retry safe: 1..=`idempotency_key_bytes_max` bytes of visible ASCII; a retry with the same key returns the first outcome", nullable = false, min_length = 1, pattern = "{idempotency_key}"),
    ),
    responses(
        (status = 200, description = "Resigned, or the candidacy withdrawn", body = ReleaseResponse),
        LeaseNotFound,
        NotHolder,
        BadRequest,
        TooLarge,
        KeyReused,
        Internal,
        Unavailable,
        Indeterminate,
    ))]
pub(crate) async fn resign(
    State(state): State<AppState>,
    authz: Authz,
    IdempotencyKey(key): IdempotencyKey,
    ApiPath(raw): ApiPath<String>,
    JsonBody(body): JsonBody<ResignRequest>,
) -> ApiResult<Json<ReleaseResponse>> {
    let name = state.checked_name(&authz, Namespace::Elections, &raw, Access::Write)?;
    let command = convert::resign(name, body);
    shared::release_with(&state, &authz, key, command).await
}

/// The current leader, its value and fence.
#[utoipa::path(get, path = baton_wire::paths::ELECTION, operation_id = "elections_get",
    params(
        ("name" = String, Path, description = "The election's name, one path segment (encode `/` as `%2F`): 1..=`name_bytes_max` bytes of UTF-8, no control characters, no `.` or `..` segment", min_length = 1, pattern = "{name}"),
        ReadParams,
    ),
    responses(
        (status = 200, description = "The leader, if any", body = ElectionResponse),
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
) -> ApiResult<Json<ElectionResponse>> {
    let name = state.checked_name(&authz, Namespace::Elections, &raw, Access::Read)?;
    let (leader, revision) = state
        .read(params.consistency, |sm| sm.election_leader(&name))
        .await?;
    Ok(Json(ElectionResponse {
        name,
        leader: leader.as_ref().map(convert::leader),
        revision: revision.0,
    }))
}

/// Elections with a leader or candidates, by name prefix.
#[utoipa::path(get, path = baton_wire::paths::ELECTIONS, operation_id = "elections_list",
    params(LockListParams),
    responses(
        (status = 200, description = "Elections in use", body = ElectionListResponse),
        BadRequest,
        Internal,
        Unavailable,
        Indeterminate,
    ))]
pub(crate) async fn list(
    State(state): State<AppState>,
    authz: Authz,
    ApiQuery(params): ApiQuery<LockListParams>,
) -> ApiResult<Json<ElectionListResponse>> {
    let (found, revision) = shared::list_of(&state, &authz, ResourceKind::Election, params).await?;
    let elections = found
        .iter()
        .map(|e| {
            let leader = e.holders.first().map(|h| Leader {
                lease_id: h.lease.0,
                value: h.value.clone().unwrap_or_default(),
                fence: h.fence.0,
            });
            ElectionSummary {
                name: e.resource.name.clone(),
                leading_for: leader.as_ref().and_then(|l| state.activity.age(l.fence)),
                leader,
                candidates: e.queue_len,
            }
        })
        .collect();
    Ok(Json(ElectionListResponse {
        elections,
        revision,
    }))
}
