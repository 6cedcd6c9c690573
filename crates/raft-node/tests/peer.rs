//! The peer port trusts nothing it did not check: a proposal forwarded by a peer is
//! validated exactly as one from the API, and the commands only the leader's own clock may
//! issue are refused whoever sends them.

#![allow(clippy::unwrap_used)] // tests: a failure is reported by the panic

mod common;

use baton_raft_node::network::{PeerClient, PeerFailure, Target};
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
        let reply: Result<Applied, PeerFailure> = peers
            .call(
                Target { id: 0, addr: &peer },
                "/baton/propose",
                &Proposal::from(command.clone()),
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

/// The leader's answer to a forwarded proposal names the committed entry that carried it
/// only when the follower asks (`notice=1`, decision #131): an older follower's request,
/// without the query, gets the answer it always got and no header.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forwarded_proposal_names_its_entry_only_when_asked() {
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
    let timeout = Duration::from_secs(5);

    let (reply, committed): (Result<Applied, PeerFailure>, _) = peers
        .call_noting(
            Target { id: 0, addr: &peer },
            "/baton/propose",
            &put("old"),
            timeout,
        )
        .await
        .unwrap();
    assert!(reply.is_ok(), "{reply:?}");
    assert_eq!(committed, None);

    let path = format!("/baton/propose?from={}&notice=1", leader.id());
    let (reply, committed): (Result<Applied, PeerFailure>, _) = peers
        .call_noting(Target { id: 0, addr: &peer }, &path, &put("new"), timeout)
        .await
        .unwrap();
    assert!(reply.is_ok(), "{reply:?}");
    let committed = committed.expect("the answer names the entry");
    let status = leader.status();
    assert_eq!(committed.index, status.applied_index);
    assert_eq!(committed.leader_id.term, status.term);
    assert_eq!(committed.leader_id.node_id, leader.id());
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
        .call::<_, Result<Applied, PeerFailure>>(
            to,
            "/baton/propose",
            &Proposal::from(put.clone()),
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
    let reply: Result<Applied, PeerFailure> = member
        .call(to, "/baton/propose", &Proposal::from(put.clone()), timeout)
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
    let reply: Result<Applied, PeerFailure> = member
        .call(to, "/baton/propose", &named, timeout)
        .await
        .unwrap();
    assert!(reply.is_ok(), "{reply:?}");
    assert!(leader.status().revision > revision);
    cluster.shutdown().await;
}
