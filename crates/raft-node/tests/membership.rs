//! Online membership change: 3 → 5 → 3 voters while a writer keeps writing; no
//! acknowledged write is lost and the status reflects every step.

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
