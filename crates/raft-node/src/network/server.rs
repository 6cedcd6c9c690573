//! Inbound peer routes on the peer port (`paths`): openraft's RPCs, the requests a
//! follower forwards to the leader (a forwarded proposal is validated as one from the
//! API), and the membership probe. Every body is bincode; every reply is a bincode
//! `Result`.

use super::{PEER_BODY_BYTES_MAX, SECRET_HEADER, paths};
use crate::codec;
use crate::error::NodeError;
use crate::membership::{self, Identity, IdentityProbe, MemberChange};
use crate::node::{Forwarded, Node};
use crate::types::{NodeAddr, NodeId};
use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use baton_state_machine::LeaseId;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// A forwarded request's failure, as it travels between nodes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum PeerFailure {
    /// The receiver is not the leader either.
    ForwardToLeader(Option<(NodeId, NodeAddr)>),
    /// No leader known.
    NoLeader,
    /// Outcome unknown.
    Indeterminate(String),
    /// No quorum answered.
    Unavailable(String),
    /// A membership change was refused.
    Membership(String),
    /// The request breaks a rule (a limit, a command only the leader's clock may issue).
    Invalid(String),
    /// Refused for another reason.
    Other(String),
}

impl From<NodeError> for PeerFailure {
    fn from(e: NodeError) -> PeerFailure {
        match e {
            NodeError::ForwardToLeader { leader } => PeerFailure::ForwardToLeader(leader),
            NodeError::NoLeader => PeerFailure::NoLeader,
            NodeError::Indeterminate(m) => PeerFailure::Indeterminate(m),
            NodeError::Unavailable(m) => PeerFailure::Unavailable(m),
            NodeError::Membership(m) => PeerFailure::Membership(m),
            NodeError::Invalid(e) => PeerFailure::Invalid(e.to_string()),
            other => PeerFailure::Other(other.to_string()),
        }
    }
}

impl From<PeerFailure> for NodeError {
    fn from(f: PeerFailure) -> NodeError {
        match f {
            PeerFailure::ForwardToLeader(leader) => NodeError::ForwardToLeader { leader },
            PeerFailure::NoLeader => NodeError::NoLeader,
            PeerFailure::Indeterminate(m) => NodeError::Indeterminate(m),
            PeerFailure::Unavailable(m) => NodeError::Unavailable(m),
            PeerFailure::Membership(m) => NodeError::Membership(m),
            PeerFailure::Invalid(reason) => {
                NodeError::Invalid(baton_state_machine::Error::Invalid {
                    field: "request",
                    reason,
                })
            }
            PeerFailure::Other(m) => NodeError::Indeterminate(m),
        }
    }
}

/// The peer router for `node`, with the body limit and the secret check.
pub fn router(node: Node) -> Router {
    let secret = node.config().cluster_secret.clone();
    Router::new()
        .route(paths::APPEND, post(append))
        .route(paths::VOTE, post(vote))
        .route(paths::SNAPSHOT, post(snapshot))
        .route(paths::PROPOSE, post(propose))
        .route(paths::READ_INDEX, post(read_index))
        .route(paths::KEEPALIVE, post(keepalive))
        .route(paths::LEASE_REMAINING, post(lease_remaining))
        .route(paths::LEASES_REMAINING, post(leases_remaining))
        .route(paths::STATUS, post(leader_status))
        .route(paths::IDENTITY, post(identity))
        .route(paths::MEMBERSHIP, post(membership))
        .layer(DefaultBodyLimit::max(PEER_BODY_BYTES_MAX))
        .layer(middleware::from_fn_with_state(secret, check_secret))
        .with_state(node)
}

async fn check_secret(
    State(secret): State<Option<crate::Secret>>,
    request: Request,
    next: Next,
) -> Response {
    // The membership probe comes without the secret (`membership::probe`): its answer
    // proves this node holds the secret without revealing it.
    if let Some(expected) = &secret
        && request.uri().path() != paths::IDENTITY
    {
        let presented = request.headers().get(SECRET_HEADER).map(|v| v.as_bytes());
        if !presented.is_some_and(|p| expected.matches(p)) {
            return (StatusCode::UNAUTHORIZED, "cluster secret required").into_response();
        }
    }
    next.run(request).await
}

fn decode<T: DeserializeOwned>(body: &Bytes) -> Result<T, Response> {
    codec::decode(body).map_err(|e| (StatusCode::BAD_REQUEST, e.to_string()).into_response())
}

fn reply<T: Serialize>(value: &T) -> Response {
    match codec::encode(value) {
        Ok(bytes) => bytes.into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

/// Decodes the body, runs `handle`, encodes its result (whatever it is: a Raft `Result`
/// or a forwarded request's `Result<_, PeerFailure>`).
async fn serve<Req, Resp, Fut>(body: Bytes, handle: impl FnOnce(Req) -> Fut) -> Response
where
    Req: DeserializeOwned,
    Resp: Serialize,
    Fut: Future<Output = Resp>,
{
    match decode(&body) {
        Ok(request) => reply(&handle(request).await),
        Err(refused) => refused,
    }
}

async fn append(State(node): State<Node>, body: Bytes) -> Response {
    serve(
        body,
        |rpc| async move { node.raft().append_entries(rpc).await },
    )
    .await
}

async fn vote(State(node): State<Node>, body: Bytes) -> Response {
    serve(body, |rpc| async move { node.raft().vote(rpc).await }).await
}

async fn snapshot(State(node): State<Node>, body: Bytes) -> Response {
    serve(body, |rpc| async move {
        node.raft().install_snapshot(rpc).await
    })
    .await
}

/// A forwarded proposal, with the id of the request that waits for it on the follower;
/// the answer is the committed entry that carried it (decision #131).
async fn propose(State(node): State<Node>, body: Bytes) -> Response {
    serve(body, |request: Forwarded| async move {
        node.propose_forwarded(request)
            .await
            .map_err(PeerFailure::from)
    })
    .await
}

async fn identity(State(node): State<Node>, body: Bytes) -> Response {
    serve(body, |probe: IdentityProbe| async move {
        let id = node.id();
        let proof = node
            .config()
            .cluster_secret
            .as_ref()
            .map(|secret| membership::identity_proof(secret, &probe.nonce, id));
        Identity { id, proof }
    })
    .await
}

async fn membership(State(node): State<Node>, body: Bytes) -> Response {
    serve(body, |change: MemberChange| async move {
        membership::change_here(&node, change)
            .await
            .map_err(PeerFailure::from)
    })
    .await
}

/// A forwarded read index; the body names the follower that asked (decision #136).
async fn read_index(State(node): State<Node>, body: Bytes) -> Response {
    serve(body, |from: NodeId| async move {
        node.read_index_forwarded(from)
            .await
            .map_err(PeerFailure::from)
    })
    .await
}

async fn keepalive(State(node): State<Node>, body: Bytes) -> Response {
    serve(body, |lease: LeaseId| async move {
        node.keepalive_here(lease).await.map_err(PeerFailure::from)
    })
    .await
}

async fn lease_remaining(State(node): State<Node>, body: Bytes) -> Response {
    serve(body, |lease: LeaseId| async move {
        node.lease_remaining_here(lease)
            .await
            .map_err(PeerFailure::from)
    })
    .await
}

async fn leases_remaining(State(node): State<Node>, body: Bytes) -> Response {
    serve(body, |leases: Vec<LeaseId>| async move {
        node.leases_remaining_here(leases)
            .await
            .map_err(PeerFailure::from)
    })
    .await
}

async fn leader_status(State(node): State<Node>, body: Bytes) -> Response {
    serve(body, |(): ()| async move {
        node.leader_status_here().map_err(PeerFailure::from)
    })
    .await
}
