//! What the lock, semaphore and election routes share: the release answer, the state of a
//! queued resource, and the read parameters.

use crate::auth::{Access, Authz, Namespace};
use crate::convert;
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use axum::Json;
use baton_state_machine::{Command, ResourceId, Response};
use baton_wire::{Consistency, LockListParams, LockStateResponse, ReleaseResponse};

/// Proposes a release-like command (release, resign, cancel) and shapes its answer.
pub(crate) async fn release_with(
    state: &AppState,
    authz: &Authz,
    key: Option<String>,
    command: Command,
) -> ApiResult<Json<ReleaseResponse>> {
    let applied = state.propose(authz, key, command).await?;
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
        other => Err(ApiError::internal(other)),
    }
}

/// The state of a lock or semaphore.
pub(crate) async fn state_of(
    state: &AppState,
    id: ResourceId,
    consistency: Consistency,
) -> ApiResult<Json<LockStateResponse>> {
    let (lock, revision) = state.read(consistency, |sm| sm.lock_state(&id)).await?;
    let mut answer = convert::lock_state(&id.name, lock, revision.0);
    state.with_ages(&mut answer.holders);
    for w in &mut answer.queue {
        w.waiting_for = state.activity.age(w.enqueued_revision);
    }
    Ok(Json(answer))
}

/// One page of the resources of `kind` a listing asks for (prefix, after, limit clamped
/// to 1..=10 000), read at its consistency, only those the principal may read (the page
/// may come back shorter), with the revision read.
pub(crate) async fn list_of(
    state: &AppState,
    authz: &Authz,
    kind: baton_state_machine::ResourceKind,
    params: LockListParams,
) -> ApiResult<(Vec<baton_state_machine::LockSummary>, u64)> {
    let prefix = state.prefix("prefix", &params.prefix)?;
    let limit = params
        .limit
        .unwrap_or(super::LIST_LIMIT_DEFAULT)
        .clamp(1, super::LIST_LIMIT_DEFAULT * 10);
    let after = params.after;
    let ns = Namespace::of(kind);
    // Only readable names, filtered before the limit: a page is full of what the
    // principal may see, and says nothing about the rest.
    let (found, revision) = state
        .read(params.consistency, |sm| {
            sm.list_resources(kind, &prefix, after.as_deref(), limit, |name| {
                authz.can(ns, name, Access::Read)
            })
        })
        .await?;
    Ok((found, revision.0))
}
