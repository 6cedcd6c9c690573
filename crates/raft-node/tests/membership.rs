//! Online membership change: 3 → 5 → 3 voters while a writer keeps writing; no
//! acknowledged write is lost and the status reflects every step. And the changes that
//! could cost the quorum: a member that never catches up, a removal that would leave too
//! few reachable voters, changes sent to a follower.

#![allow(clippy::unwrap_used)] // tests: a failure is reported by the panic

mod common;

use common::*;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

fn voters(node: &baton_raft_node::Node) -> Vec<u64> {
    node.status()
        .members
        .iter()
        .filter(|m| m.voter)
        .map(|m| m.id)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn membership_grows_to_five_and_shrinks_to_three_under_writes() {
    let mut cluster = Cluster::start(3, |_| {}).await;
    let leader_id = cluster.leader().await;
    let leader = cluster.node(leader_id).clone();
    let stop = Arc::new(AtomicBool::new(false));
    let written = Arc::new(AtomicUsize::new(0));
    let writer = {
        let (node, stop) = (cluster.node(cluster.follower().await).clone(), stop.clone());
        let written = written.clone();
        tokio::spawn(async move {
            let mut acknowledged = Vec::new();
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                let key = format!("w{i}");
                // Only acknowledged writes count; an unknown outcome is not a failure.
                if node.propose(put(&key, "v")).await.is_ok() {
                    acknowledged.push(key);
                    written.fetch_add(1, Ordering::Relaxed);
                }
                i += 1;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            acknowledged
        })
    };
    // Every step waits for more acknowledged writes, so writes interleave with each change.
    let progress = |n: usize| {
        let written = written.clone();
        async move {
            let target = written.load(Ordering::Relaxed) + n;
            while written.load(Ordering::Relaxed) < target {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    };
    for id in [4, 5] {
        progress(10).await;
        let addr = cluster.spawn_joiner(id, |_| {}).await;
        tracing::info!(id, "adding a member");
        leader.add_member(id, addr).await.unwrap();
    }
    assert_eq!(voters(&leader), vec![1, 2, 3, 4, 5]);
    let index = leader.status().applied_index;
    cluster.wait_applied(index).await;
    for id in [4, 5] {
        progress(10).await;
        tracing::info!(id, "removing a member");
        leader.remove_member(id).await.unwrap();
        cluster.stop(id).await;
    }
    assert_eq!(voters(&leader), vec![1, 2, 3]);
    assert!(leader.status().members.iter().all(|m| m.id <= 3));
    progress(10).await;
    stop.store(true, Ordering::Relaxed);
    let acknowledged = writer.await.unwrap();
    assert!(
        acknowledged.len() >= 50,
        "the writer made progress: {}",
        acknowledged.len()
    );
    for key in &acknowledged {
        let found = leader.read(|sm| sm.get(key)).await.unwrap();
        assert!(found.is_some(), "{key} lost during membership changes");
    }
    let err = leader.remove_member(9).await.unwrap_err();
    assert!(
        matches!(err, baton_raft_node::NodeError::Membership(_)),
        "{err:?}"
    );
    cluster.shutdown().await;
}

/// A process that answers the identity probe as node `id` and refuses everything else: a
/// member that is "up" but can never catch up.
async fn impostor(id: u64) -> (String, tokio::task::JoinHandle<()>) {
    use axum::http::StatusCode;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let identity = bincode::serialize(&baton_raft_node::Identity { id, proof: None }).unwrap();
    let app = axum::Router::new()
        .route(
            "/baton/identity",
            axum::routing::post(move || async move { identity }),
        )
        .fallback(|| async { StatusCode::SERVICE_UNAVAILABLE });
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (addr, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_learner_that_does_not_catch_up_is_removed_again_and_the_voters_are_unchanged() {
    let cluster = Cluster::start(3, |c| c.member_catchup_timeout_ms = 1_500).await;
    let leader = cluster.node(cluster.leader().await).clone();
    let members = |node: &baton_raft_node::Node| -> Vec<(u64, baton_raft_node::NodeAddr, bool)> {
        node.status()
            .members
            .into_iter()
            .map(|m| (m.id, m.addr, m.voter))
            .collect()
    };
    let before = members(&leader);
    let (peer, task) = impostor(7).await;
    let api = format!("127.0.0.1:{}", free_port());
    let err = leader
        .add_member(7, baton_raft_node::NodeAddr { peer, api })
        .await
        .unwrap_err();
    let message = err.to_string();
    assert!(
        matches!(err, baton_raft_node::NodeError::Membership(_)) && message.contains("catch up"),
        "{message}"
    );
    assert_eq!(members(&leader), before, "{message}");
    assert!(leader.propose(put("after", "v")).await.is_ok());
    task.abort();
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removals_that_would_leave_no_quorum_are_refused_and_followers_forward_changes() {
    let mut cluster = Cluster::start(3, |_| {}).await;
    let leader_id = cluster.leader().await;
    let leader = cluster.node(leader_id).clone();
    let follower_id = cluster.follower().await;
    // One voter down: removing a live one would leave 1 reachable of 2, no quorum.
    let down = *cluster
        .nodes
        .keys()
        .find(|id| **id != leader_id && **id != follower_id)
        .unwrap();
    cluster.stop(down).await;
    let err = leader.remove_member(follower_id).await.unwrap_err();
    assert!(err.to_string().contains("fewer than a quorum"), "{err:?}");
    assert_eq!(voters(&leader).len(), 3);
    // Removing the one that is down is fine (2 of 2 reachable), and a follower forwards it.
    let follower = cluster.node(follower_id).clone();
    follower.remove_member(down).await.unwrap();
    assert_eq!(voters(&leader).len(), 2);
    assert!(follower.propose(put("after", "v")).await.is_ok());
    cluster.shutdown().await;
}

/// The membership probe sends no cluster secret to an address not yet proven to be a
/// member: the process there must first answer a random challenge with an HMAC under the
/// secret. An impostor that answers the probe with the right id but cannot prove it holds
/// the secret is refused, and it never sees the secret.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_member_proves_it_holds_the_secret_before_it_is_sent_the_secret() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    const SECRET: &str = "the-cluster-secret-of-this-test";
    let cluster = Cluster::start(3, |c| c.cluster_secret = Some(SECRET.into())).await;
    let leader = cluster.node(cluster.leader().await).clone();
    // An impostor that says it is node 7 and notes every request that carried the secret.
    let leaked = std::sync::Arc::new(AtomicUsize::new(0));
    let seen = std::sync::Arc::new(AtomicUsize::new(0));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let peer = listener.local_addr().unwrap().to_string();
    let identity = bincode::serialize(&baton_raft_node::Identity { id: 7, proof: None }).unwrap();
    let (l, s) = (leaked.clone(), seen.clone());
    let app = axum::Router::new().fallback(move |headers: axum::http::HeaderMap| {
        let (l, s, identity) = (l.clone(), s.clone(), identity.clone());
        async move {
            s.fetch_add(1, Ordering::SeqCst);
            if headers.contains_key(baton_raft_node::network::SECRET_HEADER) {
                l.fetch_add(1, Ordering::SeqCst);
            }
            identity
        }
    });
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    let api = format!("127.0.0.1:{}", free_port());
    let err = leader
        .add_member(7, baton_raft_node::NodeAddr { peer, api })
        .await
        .unwrap_err();
    assert!(err.to_string().contains("cannot prove"), "{err}");
    assert!(seen.load(Ordering::SeqCst) >= 1, "the impostor was probed");
    assert_eq!(
        leaked.load(Ordering::SeqCst),
        0,
        "the secret reached the impostor"
    );
    task.abort();
    assert_eq!(voters(&leader), vec![1, 2, 3]);
    // A real node holding the secret proves it and is added.
    let mut cluster = cluster;
    let addr = cluster
        .spawn_joiner(4, |c| c.cluster_secret = Some(SECRET.into()))
        .await;
    leader.add_member(4, addr).await.unwrap();
    assert_eq!(voters(&leader), vec![1, 2, 3, 4]);
    cluster.shutdown().await;
}
