//! `/v1/cluster`: status and online membership changes.

use crate::error::{ApiError, ApiResult};
use crate::extract::{ApiPath, JsonBody, require_admin};
use crate::state::AppState;
use crate::wire::AddMemberRequest;
use axum::Json;
use axum::extract::State;
use axum::http::HeaderMap;
use baton_raft_node::{ClusterStatus, NodeAddr, NodeError};
use serde_json::{Value, json};

/// The cluster as this node sees it: leader, term, revision, commit index, members with
/// roles, addresses and replication progress (on the leader).
#[utoipa::path(get, path = "/v1/cluster", responses((status = 200, description = "cluster status")))]
pub(crate) async fn status(State(state): State<AppState>) -> Json<Value> {
    Json(status_json(&state.node.status()))
}

pub(crate) fn status_json(s: &ClusterStatus) -> Value {
    let leader_api = s
        .members
        .iter()
        .find(|m| Some(m.id) == s.leader)
        .map(|m| m.addr.api.clone());
    json!({
        "cluster": "baton",
        "node_id": s.id,
        "state": s.state.to_lowercase(),
        "leader": s.leader,
        "leader_api": leader_api,
        "term": s.term,
        "revision": s.revision.0,
        "commit_index": s.committed_index,
        "applied_index": s.applied_index,
        "last_log_index": s.last_log_index,
        "snapshot_index": s.snapshot_index,
        "purged_index": s.purged_index,
        "members": s.members.iter().map(|m| json!({
            "id": m.id,
            "role": if Some(m.id) == s.leader { "leader" } else if m.voter { "voter" } else { "learner" },
            "voter": m.voter,
            "api": m.addr.api,
            "peer": m.addr.peer,
            "matched_index": m.matched_index,
        })).collect::<Vec<_>>(),
    })
}

/// Adds a member: it joins as a learner, catches up, then votes. Start the new node with
/// `--join` first.
#[utoipa::path(post, path = "/v1/cluster/members", request_body = AddMemberRequest,
    responses((status = 200, description = "the new status")))]
pub(crate) async fn add_member(
    State(state): State<AppState>,
    headers: HeaderMap,
    JsonBody(body): JsonBody<AddMemberRequest>,
) -> ApiResult<Json<Value>> {
    require_admin(&state, &headers)?;
    if body.id == 0 || body.peer.is_empty() || body.api.is_empty() {
        return Err(ApiError::BadRequest(
            "id must be positive, peer and api set".into(),
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
    Ok(Json(status_json(&state.node.status())))
}

/// Removes a member (stop the removed node afterwards).
#[utoipa::path(delete, path = "/v1/cluster/members/{id}", responses((status = 200, description = "the new status")))]
pub(crate) async fn remove_member(
    State(state): State<AppState>,
    headers: HeaderMap,
    ApiPath(id): ApiPath<u64>,
) -> ApiResult<Json<Value>> {
    require_admin(&state, &headers)?;
    state.node.remove_member(id).await.map_err(leader_only)?;
    Ok(Json(status_json(&state.node.status())))
}

/// Membership changes run on the leader; a follower says where it is.
fn leader_only(e: NodeError) -> ApiError {
    match e {
        NodeError::ForwardToLeader {
            leader: Some((id, addr)),
        } => ApiError::Node(NodeError::Membership(format!(
            "send membership changes to the leader: node {id} at http://{}",
            addr.api
        ))),
        other => ApiError::Node(other),
    }
}
