//! The peer port trusts nothing it did not check: a proposal forwarded by a peer is
//! validated exactly as one from the API, and the commands only the leader's own clock may
//! issue are refused whoever sends them.

#![allow(clippy::unwrap_used)] // tests: a failure is reported by the panic

mod common;

use baton_raft_node::network::{PeerClient, PeerFailure};
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
                &peer,
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
        .call_noting(&peer, "/baton/propose", &put("old"), timeout)
        .await
        .unwrap();
    assert!(reply.is_ok(), "{reply:?}");
    assert_eq!(committed, None);

    let path = format!("/baton/propose?from={}&notice=1", leader.id());
    let (reply, committed): (Result<Applied, PeerFailure>, _) = peers
        .call_noting(&peer, &path, &put("new"), timeout)
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
