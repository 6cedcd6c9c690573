//! `/v1/stats/locks`: per-resource statistics over a recent window, as this node saw them
//! (`activity.rs`), for the console's hot locks.

use crate::auth::{Access, Authz, Namespace};
use crate::error::ApiResult;
use crate::extract::ApiQuery;
use crate::openapi::*;
use crate::state::AppState;
use axum::Json;
use axum::extract::State;
use baton_wire::{LockStatsParams, LockStatsResponse};

/// Entries one answer holds by default.
const STATS_LIMIT_DEFAULT: usize = 100;

/// Locks, semaphores and elections active in the last minute on this node, most
/// contended first: grants per second, wait and hold percentiles, timeouts, expiries.
#[utoipa::path(get, path = baton_wire::paths::STATS_LOCKS, operation_id = "stats_locks",
    params(LockStatsParams),
    responses(
        (status = 200, description = "Per-resource statistics over the window", body = LockStatsResponse),
        BadRequest,
        Internal,
    ))]
pub(crate) async fn locks(
    State(state): State<AppState>,
    authz: Authz,
    ApiQuery(params): ApiQuery<LockStatsParams>,
) -> ApiResult<Json<LockStatsResponse>> {
    let prefix = state.prefix("prefix", &params.prefix)?;
    let limit = params
        .limit
        .unwrap_or(STATS_LIMIT_DEFAULT)
        .clamp(1, STATS_LIMIT_DEFAULT * 100);
    let kind = params.kind.map(crate::convert::kind_from_wire);
    let mut locks = state.activity.stats(kind, &prefix, |k, name| {
        authz.can(Namespace::of(k), name, Access::Read)
    });
    locks.truncate(limit);
    Ok(Json(LockStatsResponse {
        node_id: state.node.id(),
        window_ms: crate::activity::WINDOW.as_millis() as u64,
        locks,
    }))
}
