//! Inbound peer routes on the peer port: `/raft/{append,vote,snapshot}` for openraft and
//! `/baton/{propose,read_index,keepalive,lease_remaining,leases_remaining,status,membership}`
//! for requests a
//! follower forwards to the leader (a forwarded proposal is validated as one from the API),
//! and `/baton/identity` for the membership probe. Every body is bincode; every reply is a
//! bincode `Result` (the answer to a forwarded proposal may also name its committed entry
//! in [`COMMITTED_HEADER`]).

use super::{
    COMMITTED_HEADER, FRAMED_HEADER, ForwardFrame, PEER_BODY_BYTES_MAX, SECRET_HEADER,
    format_log_id,
};
use crate::codec;
use crate::error::NodeError;
use crate::membership::{self, CHANGE_PATH, IDENTITY_PATH, Identity, IdentityProbe, MemberChange};
use crate::node::Node;
use crate::types::{NodeAddr, NodeId};
use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, RawQuery, Request, State};
use axum::http::{HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use baton_state_machine::{Applied, LeaseId, Proposal};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

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
        .route("/raft/append", post(append))
        .route("/raft/vote", post(vote))
        .route("/raft/snapshot", post(snapshot))
        .route("/baton/propose", post(propose))
        .route("/baton/read_index", post(read_index))
        .route("/baton/keepalive", post(keepalive))
        .route("/baton/lease_remaining", post(lease_remaining))
        .route("/baton/leases_remaining", post(leases_remaining))
        .route("/baton/status", post(leader_status))
        .route(IDENTITY_PATH, post(identity))
        .route(CHANGE_PATH, post(membership))
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
        && request.uri().path() != IDENTITY_PATH
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

/// A forwarded proposal; `?from=<id>` names the follower that forwarded it,
/// `&notice=1` says it reads [`COMMITTED_HEADER`] and `&flushed=1` that it reads the answer
/// in frames (all absent from older versions; a `from` that is not a node id is ignored).
/// The header (or the last frame) names the committed entry that carried the proposal, so
/// that follower can commit and apply it at once (decision #131); the first frame says
/// where the proposal is as soon as this node has flushed it (#146).
async fn propose(State(node): State<Node>, RawQuery(query): RawQuery, body: Bytes) -> Response {
    let query = query.unwrap_or_default();
    let from = forwarded_from(&query);
    let notice = forwarded_with_notice(&query);
    let proposal: Proposal = match decode(&body) {
        Ok(proposal) => proposal,
        Err(refused) => return refused,
    };
    if query_value(&query, crate::node::FLUSH_NOTICE) == Some("1") {
        return framed_proposal(node, proposal, from);
    }
    match node.propose_forwarded(proposal, from, notice, None).await {
        Ok((applied, committed)) => {
            let mut response = reply(&Ok::<_, PeerFailure>(applied));
            let header = committed.and_then(|id| HeaderValue::from_str(&format_log_id(&id)).ok());
            if let Some(value) = header {
                response.headers_mut().insert(COMMITTED_HEADER, value);
            }
            response
        }
        Err(e) => reply(&Err::<Applied, _>(PeerFailure::from(e))),
    }
}

/// The answer in frames: [`ForwardFrame::Flushed`] once this node has flushed the entry
/// (if it does before the outcome is known), then [`ForwardFrame::Answer`].
fn framed_proposal(node: Node, proposal: Proposal, from: Option<NodeId>) -> Response {
    let (flushed_to, flushed) = oneshot::channel();
    let outcome = Box::pin(async move {
        let outcome = node
            .propose_forwarded(proposal, from, true, Some(flushed_to))
            .await;
        let (result, committed) = match outcome {
            Ok((applied, committed)) => (Ok(applied), committed),
            Err(e) => (Err(PeerFailure::from(e)), None),
        };
        ForwardFrame::Answer { result, committed }
    });
    let frames = futures_util::stream::unfold(
        (Some(flushed), Some(outcome)),
        |(flushed, outcome)| async move {
            let mut outcome = outcome?;
            let frame = match flushed {
                Some(mut flushed) => tokio::select! {
                    biased;
                    answer = &mut outcome => return Some((answer, (None, None))),
                    Ok(at) = &mut flushed => ForwardFrame::Flushed(at),
                    else => return None,
                },
                None => return Some(((&mut outcome).await, (None, None))),
            };
            Some((frame, (None, Some(outcome))))
        },
    );
    let bytes = futures_util::StreamExt::map(frames, |frame| frame.encode());
    let mut response = axum::body::Body::from_stream(bytes).into_response();
    response
        .headers_mut()
        .insert(FRAMED_HEADER, HeaderValue::from_static("1"));
    response
}

/// The value of `name` in a query string.
fn query_value<'q>(query: &'q str, name: &str) -> Option<&'q str> {
    query
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value)
}

/// The node id in a forwarded request's query string.
fn forwarded_from(query: &str) -> Option<NodeId> {
    query_value(query, crate::node::FORWARDED_FROM).and_then(|id| id.parse().ok())
}

/// Whether the forwarding node reads the committed entry from the answer.
fn forwarded_with_notice(query: &str) -> bool {
    query_value(query, crate::node::COMMIT_NOTICE) == Some("1")
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

/// A forwarded read index; `?from=<id>` names the follower that asked (decision #136).
async fn read_index(State(node): State<Node>, RawQuery(query): RawQuery, body: Bytes) -> Response {
    let from = forwarded_from(&query.unwrap_or_default());
    serve(body, |(): ()| async move {
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

#[cfg(test)]
mod tests {
    use super::{forwarded_from, forwarded_with_notice};

    #[test]
    fn a_forwarded_proposal_names_its_follower_in_the_query() {
        assert_eq!(forwarded_from("from=2"), Some(2));
        assert_eq!(forwarded_from("other=1&from=3"), Some(3));
        assert_eq!(forwarded_from("from=two"), None);
        assert_eq!(forwarded_from("from"), None);
        assert_eq!(forwarded_from(""), None);
        assert!(forwarded_with_notice("from=2&notice=1"));
        assert!(!forwarded_with_notice("from=2"));
        assert!(!forwarded_with_notice("from=2&notice=0"));
    }
}
