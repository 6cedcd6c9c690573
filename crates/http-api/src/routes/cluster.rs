//! `/v1/cluster`: status and online membership changes.

use crate::auth::Authz;
use crate::convert;
use crate::error::ApiResult;
use crate::extract::{ApiPath, JsonBody};
use crate::state::AppState;
use axum::Json;
use axum::extract::State;
use axum::http::HeaderMap;
use baton_raft_node::NodeAddr;
use baton_wire::{
    AddMemberRequest, ClusterStatus, Member, MemberReplication, MemberRole, ReplicationResponse,
    Security,
};

/// The cluster as this node sees it: leader, term, revision, commit index, members with
/// roles, addresses and replication progress (on the leader), and the limits on input.
#[utoipa::path(get, path = baton_wire::paths::CLUSTER, operation_id = "cluster_status",
    responses(
        (status = 200, description = "The cluster as this node sees it", body = ClusterStatus),
        crate::openapi::Internal,
    ))]
pub(crate) async fn status(State(state): State<AppState>) -> Json<ClusterStatus> {
    Json(status_of(&state))
}

/// This node's view of the cluster, on the wire.
pub(crate) fn status_of(state: &AppState) -> ClusterStatus {
    let s = state.node.status();
    let leader_api = s
        .members
        .iter()
        .find(|m| Some(m.id) == s.leader)
        .map(|m| m.addr.api.clone());
    let members = s
        .members
        .iter()
        .map(|m| Member {
            id: m.id,
            role: if Some(m.id) == s.leader {
                MemberRole::Leader
            } else if m.voter {
                MemberRole::Voter
            } else {
                MemberRole::Learner
            },
            voter: m.voter,
            api: m.addr.api.clone(),
            peer: m.addr.peer.clone(),
            matched_index: m.matched_index,
        })
        .collect();
    ClusterStatus {
        security: Security {
            auth: state.auth.is_some(),
            tls: state.config.tls,
        },
        warnings: state.config.warnings.clone(),
        cluster: "baton".into(),
        node_id: s.id,
        state: s.state.to_lowercase(),
        leader: s.leader,
        leader_api,
        term: s.term,
        revision: s.revision.0,
        commit_index: s.committed_index,
        applied_index: s.applied_index,
        last_log_index: s.last_log_index,
        snapshot_index: s.snapshot_index,
        purged_index: s.purged_index,
        leader_changes: state
            .metrics
            .leader_changes
            .load(std::sync::atomic::Ordering::Relaxed),
        members,
        limits: convert::limits(state.limits(), state.config.body_bytes_max),
    }
}

/// Replication as the leader sees it: each member's matched index and how many entries it
/// is behind. Any node answers, by asking the leader.
#[utoipa::path(get, path = baton_wire::paths::CLUSTER_REPLICATION, operation_id = "cluster_replication",
    responses(
        (status = 200, description = "Each member's replication progress, from the leader", body = ReplicationResponse),
        crate::openapi::Internal,
        crate::openapi::Unavailable,
        crate::openapi::Indeterminate,
    ))]
pub(crate) async fn replication(
    State(state): State<AppState>,
) -> ApiResult<Json<ReplicationResponse>> {
    let s = state.node.leader_status().await?;
    let members = s
        .members
        .iter()
        .map(|m| {
            // The leader itself holds its whole log.
            let matched = if m.id == s.id {
                Some(s.last_log_index)
            } else {
                m.matched_index
            };
            MemberReplication {
                id: m.id,
                voter: m.voter,
                matched_index: matched,
                lag_entries: matched.map(|i| s.last_log_index.saturating_sub(i)),
            }
        })
        .collect();
    Ok(Json(ReplicationResponse {
        leader: s.id,
        term: s.term,
        last_log_index: s.last_log_index,
        commit_index: s.committed_index,
        applied_index: s.applied_index,
        members,
    }))
}

/// Adds a member. Its addresses are checked (`host:port`, resolvable, not an existing
/// member's) and it must answer on its peer port with its id: start it with `--join` first.
/// It joins as a learner and votes once caught up; if it does not catch up in time it is
/// removed again and the call fails with the voters unchanged. Any node takes the call and
/// forwards it to the leader.
#[utoipa::path(post, path = baton_wire::paths::CLUSTER_MEMBERS, operation_id = "cluster_add_member", request_body = AddMemberRequest,
    responses(
        (status = 200, description = "Added; the cluster after the change", body = ClusterStatus),
        (status = 409, description = "`membership_change_refused`: the new member does not answer with its id or did not catch up in time, an address already in use, another change in progress", body = baton_wire::ErrorBody),
        crate::openapi::AdminRefused,
        crate::openapi::BadRequest,
        crate::openapi::TooLarge,
        crate::openapi::Internal,
        crate::openapi::Unavailable,
        crate::openapi::Indeterminate,
    ))]
pub(crate) async fn add_member(
    State(state): State<AppState>,
    authz: Authz,
    headers: HeaderMap,
    JsonBody(body): JsonBody<AddMemberRequest>,
) -> ApiResult<Json<ClusterStatus>> {
    state.require_admin(&authz, &headers)?;
    let addr = NodeAddr {
        peer: body.peer,
        api: body.api,
    };
    state.node.add_member(body.id, addr).await?;
    Ok(Json(status_of(&state)))
}

/// Removes a member, unless fewer reachable, caught-up voters than a quorum would be left
/// (stop the removed node afterwards). Any node takes the call and forwards it.
#[utoipa::path(delete, path = baton_wire::paths::CLUSTER_MEMBER, operation_id = "cluster_remove_member",
    params(("id" = u64, Path, description = "The member's node id")),
    responses(
        (status = 200, description = "Removed; the cluster after the change", body = ClusterStatus),
        (status = 409, description = "`membership_change_refused`: an unknown member, the last voter, a change that would leave fewer reachable caught-up voters than a quorum, another change in progress", body = baton_wire::ErrorBody),
        crate::openapi::AdminRefused,
        crate::openapi::BadRequest,
        crate::openapi::Internal,
        crate::openapi::Unavailable,
        crate::openapi::Indeterminate,
    ))]
pub(crate) async fn remove_member(
    State(state): State<AppState>,
    authz: Authz,
    headers: HeaderMap,
    ApiPath(id): ApiPath<u64>,
) -> ApiResult<Json<ClusterStatus>> {
    state.require_admin(&authz, &headers)?;
    state.node.remove_member(id).await?;
    Ok(Json(status_of(&state)))
}
