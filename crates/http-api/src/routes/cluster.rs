//! `/v1/cluster`: status and online membership changes.

use crate::convert;
use crate::error::{ApiError, ApiResult};
use crate::extract::{ApiPath, JsonBody, require_admin};
use crate::state::AppState;
use axum::Json;
use axum::extract::State;
use axum::http::HeaderMap;
use baton_raft_node::{NodeAddr, NodeError};
use baton_wire::{AddMemberRequest, ClusterStatus, Member, MemberRole};

/// The cluster as this node sees it: leader, term, revision, commit index, members with
/// roles, addresses and replication progress (on the leader), and the limits on input.
#[utoipa::path(get, path = "/v1/cluster", responses((status = 200, body = ClusterStatus)))]
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
        members,
        limits: convert::limits(state.limits(), state.config.body_bytes_max),
    }
}

/// Adds a member: it joins as a learner, catches up, then votes. Start the new node with
/// `--join` first.
#[utoipa::path(post, path = "/v1/cluster/members", request_body = AddMemberRequest,
    responses((status = 200, body = ClusterStatus)))]
pub(crate) async fn add_member(
    State(state): State<AppState>,
    headers: HeaderMap,
    JsonBody(body): JsonBody<AddMemberRequest>,
) -> ApiResult<Json<ClusterStatus>> {
    require_admin(&state, &headers)?;
    if body.id == 0 || body.peer.is_empty() || body.api.is_empty() {
        return Err(ApiError::bad_request(
            "id must be positive, peer and api set",
        ));
    }
    let addr = NodeAddr {
        peer: body.peer,
        api: body.api,
    };
    state
        .node
        .add_member(body.id, addr)
        .await
        .map_err(leader_only)?;
    Ok(Json(status_of(&state)))
}

/// Removes a member (stop the removed node afterwards).
#[utoipa::path(delete, path = "/v1/cluster/members/{id}", responses((status = 200, body = ClusterStatus)))]
pub(crate) async fn remove_member(
    State(state): State<AppState>,
    headers: HeaderMap,
    ApiPath(id): ApiPath<u64>,
) -> ApiResult<Json<ClusterStatus>> {
    require_admin(&state, &headers)?;
    state.node.remove_member(id).await.map_err(leader_only)?;
    Ok(Json(status_of(&state)))
}

/// Membership changes run on the leader; a follower says where it is.
fn leader_only(e: NodeError) -> ApiError {
    match e {
        NodeError::ForwardToLeader {
            leader: Some((id, addr)),
        } => ApiError::from(NodeError::Membership(format!(
            "send membership changes to the leader: node {id} at http://{}",
            addr.api
        ))),
        other => ApiError::from(other),
    }
}
