//! The peer port trusts nothing it did not check: a proposal forwarded by a peer is
//! validated exactly as one from the API, and the commands only the leader's own clock may
//! issue are refused whoever sends them.

#![allow(clippy::unwrap_used)] // tests: a failure is reported by the panic

mod common;

use baton_raft_node::network::{PeerClient, PeerFailure, Target, paths};
use baton_raft_node::{Forwarded, LogId, RequestId};
use baton_state_machine::*;
use common::*;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarded_proposals_are_validated_and_clock_commands_refused() {
    let cluster = Cluster::start(1, |_| {}).await;
    let leader = cluster.node(cluster.leader().await).clone();
    let lease = grant_lease(&leader, 60_000).await;
    let peers = PeerClient::new(None, None).unwrap();
    let peer = leader.peer_addr().to_string();
    let revision = leader.status().revision;
    let forged = [
        Command::LeaseExpire(LeaseExpire { lease }),
        Command::LeaseCheckpoint(LeaseCheckpoint {
            remaining_ms: vec![(lease, 1)],
        }),
        Command::LockDelayElapsed(LockDelayElapsed {
            resource: ResourceId::lock("L"),
            since: Revision(1),
        }),
        // Over the limits: an empty key.
        Command::Put(Put {
            key: String::new(),
            value: "v".into(),
            lease: None,
            prev_revision: None,
        }),
    ];
    for command in forged {
        let reply: Result<LogId, PeerFailure> = peers
            .call(
                Target { id: 0, addr: &peer },
                paths::PROPOSE,
                &forwarded(Proposal::from(command.clone())),
                Duration::from_secs(5),
            )
            .await
            .unwrap();
        assert!(
            matches!(reply, Err(PeerFailure::Invalid(_))),
            "{command:?} -> {reply:?}"
        );
        // The same through the node's own API.
        assert!(leader.propose(Proposal::from(command)).await.is_err());
    }
    assert_eq!(leader.status().revision, revision, "nothing was applied");
    assert!(leader.read(|sm| sm.lease(lease).is_some()).await.unwrap());
    cluster.shutdown().await;
}

/// A proposal as node 9 would forward it.
fn forwarded(proposal: Proposal) -> Forwarded {
    Forwarded {
        id: RequestId {
            node: 9,
            incarnation: 1,
            seq: 0,
        },
        proposal,
    }
}

/// The leader's answer to a forwarded proposal names the committed entry that carried it
/// (decision #131), and nothing else: the result is the forwarding node's apply's to give.
/// A proposal that names the leader itself as the node waiting for it is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forwarded_proposal_is_answered_with_its_committed_entry() {
    let cluster = Cluster::start(1, |_| {}).await;
    let leader = cluster.node(cluster.leader().await).clone();
    let peers = PeerClient::new(None, None).unwrap();
    let peer = leader.peer_addr().to_string();
    let put = |key: &str| {
        Proposal::from(Command::Put(Put {
            key: key.into(),
            value: "v".into(),
            lease: None,
            prev_revision: None,
        }))
    };
    let to = Target { id: 0, addr: &peer };
    let timeout = Duration::from_secs(5);
    let committed: Result<LogId, PeerFailure> = peers
        .call(to, paths::PROPOSE, &forwarded(put("new")), timeout)
        .await
        .unwrap();
    let committed = committed.unwrap();
    let status = leader.status();
    assert_eq!(committed.index, status.applied_index);
    assert_eq!(committed.leader_id.term, status.term);
    assert_eq!(committed.leader_id.node_id, leader.id());
    assert_eq!(leader.answer_waits(), 0, "the leader waits for nobody");

    let mut own = forwarded(put("own"));
    own.id.node = leader.id();
    let refused: Result<LogId, PeerFailure> =
        peers.call(to, paths::PROPOSE, &own, timeout).await.unwrap();
    assert!(
        matches!(refused, Err(PeerFailure::Invalid(_))),
        "{refused:?}"
    );
    assert_eq!(leader.status().applied_index, committed.index);
    cluster.shutdown().await;
}

/// With authentication on, a proposal that arrives on the peer port must name its
/// principal: without one it would skip every rule in `apply`. So even a caller that holds
/// the cluster secret is refused, and nothing is applied; one that names a principal is
/// checked by `apply` like a request through the API.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_auth_on_a_proposal_without_a_principal_is_refused_on_the_peer_port() {
    const SECRET: &str = "a-cluster-secret-for-tests";
    let cluster = Cluster::start(1, |c| {
        c.cluster_secret = Some(SECRET.into());
        c.callers_required = true;
    })
    .await;
    let leader = cluster.node(cluster.leader().await).clone();
    let peer = leader.peer_addr().to_string();
    let to = Target { id: 0, addr: &peer };
    let timeout = Duration::from_secs(5);
    let put = Command::Put(Put {
        key: "team-b/k".into(),
        value: "forged".into(),
        lease: None,
        prev_revision: None,
    });
    let revision = leader.status().revision;
    // No secret: refused before anything is decoded.
    let open = PeerClient::new(None, None).unwrap();
    let err = open
        .call::<_, Result<LogId, PeerFailure>>(
            to,
            paths::PROPOSE,
            &forwarded(Proposal::from(put.clone())),
            timeout,
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, baton_raft_node::network::PeerError::Refused(401)),
        "{err:?}"
    );
    // The secret but no principal: refused.
    let member = PeerClient::new(Some(SECRET.into()), None).unwrap();
    let reply: Result<LogId, PeerFailure> = member
        .call(
            to,
            paths::PROPOSE,
            &forwarded(Proposal::from(put.clone())),
            timeout,
        )
        .await
        .unwrap();
    assert!(matches!(reply, Err(PeerFailure::Invalid(_))), "{reply:?}");
    assert_eq!(leader.status().revision, revision, "nothing was applied");
    // A principal, as a member's API names it: applied.
    let named = Proposal {
        caller: Some(Caller {
            principal: "team-b".into(),
            admin: false,
            quota: Quota::default(),
        }),
        ..Proposal::from(put)
    };
    let reply: Result<LogId, PeerFailure> = member
        .call(to, paths::PROPOSE, &forwarded(named), timeout)
        .await
        .unwrap();
    assert!(reply.is_ok(), "{reply:?}");
    assert!(leader.status().revision > revision);
    cluster.shutdown().await;
}
