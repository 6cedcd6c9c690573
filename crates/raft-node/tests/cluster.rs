//! In-process 3-node clusters over real loopback sockets: replication, failover, restart,
//! snapshots, durability and group commit.

#![allow(clippy::unwrap_used)] // tests: a failure is reported by the panic

mod common;

use baton_raft_node::{NodeConfig, NodeError, NodeId};
use baton_state_machine::*;
use common::*;
use std::time::Duration;

fn value_of(node: &baton_raft_node::Node, key: &str) -> Option<String> {
    node.read_local(|sm| sm.get(key).map(|kv| kv.value))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_through_any_node_replicate_to_every_node() {
    let cluster = Cluster::start(3, |_| {}).await;
    let leader = cluster.leader().await;
    let follower = cluster.follower().await;
    tracing::info!(
        leader,
        follower,
        "writing through the leader and a follower"
    );
    let a = cluster.node(leader).propose(put("a", "1")).await.unwrap();
    let b = cluster.node(follower).propose(put("b", "2")).await.unwrap();
    assert!(matches!(a.response, Response::Put { .. }));
    assert!(matches!(b.response, Response::Put { .. }));
    assert!(b.revision > a.revision);
    let index = cluster.node(leader).status().applied_index;
    cluster.wait_applied(index).await;
    for node in cluster.nodes.values() {
        assert_eq!(value_of(node, "a").as_deref(), Some("1"));
        assert_eq!(value_of(node, "b").as_deref(), Some("2"));
    }
    // A linearizable read on a follower sees the write it did not take part in.
    let seen = cluster
        .node(follower)
        .read(|sm| sm.revision())
        .await
        .unwrap();
    assert!(seen >= b.revision);
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_killed_new_leader_elected_and_no_committed_write_lost() {
    let mut cluster = Cluster::start(3, |_| {}).await;
    let old = cluster.leader().await;
    for i in 0..20 {
        cluster
            .node(old)
            .propose(put(&format!("k{i}"), "v"))
            .await
            .unwrap();
    }
    tracing::info!(old, "stopping the leader");
    cluster.stop(old).await;
    let new = cluster.leader().await;
    assert_ne!(new, old);
    for i in 0..20 {
        let key = format!("k{i}");
        let found = cluster.node(new).read(|sm| sm.get(&key)).await.unwrap();
        assert!(found.is_some(), "{key} lost after failover");
    }
    cluster.node(new).propose(put("after", "x")).await.unwrap();
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarted_node_catches_up_from_its_data() {
    let mut cluster = Cluster::start(3, |_| {}).await;
    let follower = cluster.follower().await;
    let leader = cluster.leader().await;
    cluster
        .node(leader)
        .propose(put("before", "1"))
        .await
        .unwrap();
    cluster.stop(follower).await;
    for i in 0..10 {
        cluster
            .node(leader)
            .propose(put(&format!("during{i}"), "2"))
            .await
            .unwrap();
    }
    cluster.restart(follower).await;
    let index = cluster.node(leader).status().applied_index;
    cluster.wait_applied(index).await;
    let node = cluster.node(follower);
    assert_eq!(value_of(node, "before").as_deref(), Some("1"));
    assert_eq!(value_of(node, "during9").as_deref(), Some("2"));
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_far_behind_receives_a_snapshot() {
    let mut cluster = Cluster::start(3, |c| {
        c.snapshot_logs_since_last = 20;
        c.logs_kept_behind_snapshot = 5;
    })
    .await;
    let follower = cluster.follower().await;
    let leader = cluster.leader().await;
    cluster.stop(follower).await;
    for i in 0..120 {
        cluster
            .node(leader)
            .propose(put(&format!("k{i:03}"), "v"))
            .await
            .unwrap();
    }
    // openraft purges after the snapshot is built, and defers it while a replication to
    // the stopped follower may still read those entries: wait for it (bounded).
    let mut metrics = cluster.node(leader).raft().metrics();
    let purged = metrics.wait_for(|m| m.purged.is_some());
    // The `Ref` it returns holds the metrics' lock: keep only whether it came.
    let purged = matches!(
        tokio::time::timeout(Duration::from_secs(30), purged).await,
        Ok(Ok(_))
    );
    let status = cluster.node(leader).status();
    assert!(
        purged && status.purged_index.is_some(),
        "the leader purged its log: {status:?}"
    );
    cluster.restart(follower).await;
    cluster.wait_applied(status.applied_index).await;
    let node = cluster.node(follower);
    let follower_status = node.status();
    assert!(
        follower_status.snapshot_index.is_some(),
        "{follower_status:?}"
    );
    assert_eq!(value_of(node, "k000").as_deref(), Some("v"));
    assert_eq!(value_of(node, "k119").as_deref(), Some("v"));
    assert_eq!(
        node.read_local(|sm| sm.revision()),
        cluster.node(leader).read_local(|sm| sm.revision())
    );
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_nodes_stopped_and_restarted_keep_every_acknowledged_write() {
    let mut cluster = Cluster::start(3, |_| {}).await;
    let leader = cluster.leader().await;
    let mut acknowledged = Vec::new();
    for i in 0..30 {
        let key = format!("durable{i}");
        cluster.node(leader).propose(put(&key, "v")).await.unwrap();
        acknowledged.push(key);
    }
    for id in [1, 2, 3] {
        cluster.stop(id).await;
    }
    for id in [1, 2, 3] {
        cluster.restart(id).await;
    }
    let leader = cluster.leader().await;
    for key in &acknowledged {
        let found = cluster.node(leader).read(|sm| sm.get(key)).await.unwrap();
        assert!(found.is_some(), "{key} lost across a full restart");
    }
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_proposals_are_batched_and_each_gets_its_own_response() {
    let cluster = Cluster::start(3, |_| {}).await;
    let leader = cluster.leader().await;
    let node = cluster.node(leader).clone();
    let before = node.status().last_log_index;
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..300 {
        let node = node.clone();
        tasks.spawn(async move {
            let key = format!("batch{i}");
            let applied = node.propose(put(&key, &i.to_string())).await.unwrap();
            (key, applied)
        });
    }
    let mut revisions = Vec::new();
    while let Some(joined) = tasks.join_next().await {
        let (key, applied) = joined.unwrap();
        match applied.response {
            Response::Put { key: written, .. } => assert_eq!(written, key),
            other => panic!("unexpected {other:?}"),
        }
        revisions.push(applied.revision);
    }
    revisions.sort();
    revisions.dedup();
    assert_eq!(revisions.len(), 300, "every proposal has its own revision");
    let entries = node.status().last_log_index - before;
    tracing::info!(entries, "300 proposals in {entries} log entries");
    assert!(
        entries < 300,
        "group commit put several proposals in one entry ({entries} entries)"
    );
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proposal_over_the_limits_is_refused_before_the_log() {
    let cluster = Cluster::start(1, |_| {}).await;
    let leader = cluster.leader().await;
    let node = cluster.node(leader);
    let before = node.status().last_log_index;
    let err = node.propose(put("", "v")).await.unwrap_err();
    assert!(
        matches!(err, baton_raft_node::NodeError::Invalid(_)),
        "{err:?}"
    );
    assert_eq!(node.status().last_log_index, before);
    let _ = Duration::ZERO;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peers_must_present_the_cluster_secret() {
    let cluster = Cluster::start(3, |c| {
        c.cluster_secret = Some("s3cret-s3cret-s3cret".into())
    })
    .await;
    let leader = cluster.leader().await;
    // The members share the secret, so the cluster works...
    cluster.node(leader).propose(put("k", "v")).await.unwrap();
    // ...and a caller without it is refused before anything is decoded.
    let peer = cluster.node(leader).peer_addr();
    let refused = reqwest::Client::new()
        .post(format!("http://{peer}/raft/vote"))
        .body(vec![0u8; 8])
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status().as_u16(), 401);
    let wrong =
        baton_raft_node::network::PeerClient::new(Some("guess-guess-guess".into()), None).unwrap();
    let err = wrong
        .call::<(), Result<u64, baton_raft_node::network::PeerFailure>>(
            baton_raft_node::network::Target {
                id: 0,
                addr: &peer.to_string(),
            },
            "/baton/read_index",
            &(),
            Duration::from_secs(2),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, baton_raft_node::network::PeerError::Refused(401)),
        "{err:?}"
    );
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_boot_from_a_cluster_file() {
    use baton_raft_node::{ClusterFile, Node};
    init_tracing();
    let dir = tempfile::TempDir::new().unwrap();
    let mut listeners = Vec::new();
    let mut text = String::new();
    for id in 1..=3 {
        let peer = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let peer_addr = peer.local_addr().unwrap();
        text.push_str(&format!(
            "[[node]]\nid = {id}\napi = \"127.0.0.1:{}\"\npeer = \"{peer_addr}\"\n\n",
            peer_addr.port() + 1
        ));
        listeners.push((id, peer));
    }
    let path = dir.path().join("cluster.toml");
    std::fs::write(&path, text).unwrap();
    let file = ClusterFile::load(&path).unwrap();
    let mut nodes = Vec::new();
    for (id, listener) in listeners {
        let mut config = file.node_config(id, dir.path()).unwrap();
        tune(&mut config);
        nodes.push(Node::start_on(config, listener).await.unwrap());
    }
    let applied = nodes[2].propose(put("booted", "yes")).await.unwrap();
    assert!(matches!(applied.response, Response::Put { .. }));
    let status = nodes[0].status();
    assert_eq!(status.members.len(), 3);
    assert!(status.members.iter().all(|m| m.voter));
    assert!(dir.path().join("baton-data/node-2").exists());
    for node in nodes {
        node.shutdown().await;
    }
}

/// A leader sends new entries to its followers while its own flush runs (decision #106)
/// and counts its own copy only once that flush has ended, so a write commits on a
/// majority of durable copies and never on fewer. Disks are stalled with the test hook
/// that holds a node's next flush: the leader's, which its flush queue runs once the
/// entries have gone out (decisions #132, #133), and the follower's, which it runs on the
/// appending task (decision #109).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_replicates_during_its_own_flush_and_counts_its_copy_only_after_it() {
    // Long election timeouts: a follower whose disk stalls stops answering for a while,
    // and nothing here should turn that into an election.
    let cluster = Cluster::start(3, timing(100, (3_000, 6_000))).await;
    let leader = cluster.leader().await;
    let follower = cluster.follower().await;
    let node = cluster.node(leader).clone();
    let leader_disk = node.log_flush_gate();
    let follower_disk = cluster.node(follower).log_flush_gate();

    // The leader's disk stalls: the two followers' copies are a majority, so the write
    // commits and is applied without waiting for the leader's flush.
    let held = leader_disk.clone().lock_owned().await;
    let a = tokio::time::timeout(Duration::from_secs(20), node.propose(put("a", "1")))
        .await
        .expect("committed by the followers while the leader's disk stalls")
        .unwrap();
    assert!(matches!(a.response, Response::Put { .. }));
    assert_eq!(value_of(&node, "a").as_deref(), Some("1"));
    drop(held);

    // The leader's disk and one follower's stall: only the other follower can make the
    // entry durable, one copy of three. The leader's unflushed copy must not count.
    let held = leader_disk.clone().lock_owned().await;
    let held_follower = follower_disk.clone().lock_owned().await;
    let pending = tokio::spawn({
        let node = node.clone();
        async move { node.propose(put("b", "2")).await }
    });
    tokio::time::sleep(Duration::from_millis(600)).await;
    if pending.is_finished() {
        let answer = pending.await;
        panic!("a write committed with one durable copy of three: {answer:?}");
    }
    assert_eq!(value_of(&node, "b"), None);

    // The leader's flush ends: its copy and the free follower's are a majority.
    drop(held);
    let b = tokio::time::timeout(Duration::from_secs(20), pending)
        .await
        .expect("committed once the leader's flush ended")
        .unwrap()
        .unwrap();
    assert!(b.revision > a.revision);
    assert_eq!(value_of(&node, "b").as_deref(), Some("2"));
    drop(held_follower);
    cluster.shutdown().await;
}

/// A leader that crashes loses what it had not flushed, and since it sends entries before
/// its own flush ends (decision #106) its followers may hold entries it lost. Were it to
/// lead again in the same term after its restart (openraft 0.9.25 restores a leader that
/// way), it would write new entries under log ids the followers already hold, and they,
/// seeing ids they have, would keep their old entries: the logs diverge and a committed,
/// acknowledged write is lost on the restarted node (the Jepsen harness found it after a
/// whole-cluster kill). A restarted leader campaigns in a new term instead (decision #117).
///
/// The crash is simulated: the leader's disk is stalled while a write commits on the
/// followers, every node is stopped, and the entries the leader never made durable are
/// removed from its log, as a `kill -9` before its flush would have left it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_that_lost_its_unflushed_tail_does_not_lead_again_in_its_old_term() {
    let mut cluster = Cluster::start(3, timing(100, (1_000, 2_000))).await;
    let leader = cluster.leader().await;
    let node = cluster.node(leader).clone();
    node.propose(put("a", "1")).await.unwrap();
    let kept = node.status().last_log_index;

    // The leader's disk stalls: "b" commits on the followers' copies alone.
    let held = node.log_flush_gate().lock_owned().await;
    tokio::time::timeout(Duration::from_secs(20), node.propose(put("b", "2")))
        .await
        .expect("committed by the followers while the leader's disk stalls")
        .unwrap();
    assert!(node.status().last_log_index > kept);
    drop(node);
    let ids: Vec<_> = cluster.nodes.keys().copied().collect();
    for id in &ids {
        cluster.stop(*id).await;
    }
    drop(held);

    // What the crash left on the leader's disk: its log up to "a", no commit pointer past it.
    let dir = cluster.configs[&leader].data_dir.clone();
    let db = baton_raft_node::store::open_db(&dir, 8 << 20)
        .await
        .unwrap();
    let lost = baton_raft_node::store::lose_log_after(&db, kept).unwrap();
    assert!(lost > 0, "the leader's log held the stalled entry");
    drop(db);

    // The old leader comes back first, then the followers.
    cluster.restart(leader).await;
    for id in ids.iter().filter(|id| **id != leader) {
        cluster.restart(*id).await;
    }
    // The followers may come up after the old leader's first campaigns have failed: wait
    // for the three to agree on a leader (bounded, 30 s) before writing through it.
    let new_leader = cluster.leader().await;
    let c = cluster
        .node(new_leader)
        .propose(put("c", "3"))
        .await
        .expect("the elected leader takes the write");
    assert!(matches!(c.response, Response::Put { .. }));
    let index = cluster.node(new_leader).status().last_log_index;
    cluster.wait_applied(index).await;
    for id in &ids {
        let node = cluster.node(*id);
        for (key, value) in [("a", "1"), ("b", "2"), ("c", "3")] {
            assert_eq!(
                value_of(node, key).as_deref(),
                Some(value),
                "node {id} disagrees on {key}"
            );
        }
    }
    assert_ne!(
        new_leader, leader,
        "a node without the committed \"b\" leads"
    );
    cluster.shutdown().await;
}

/// A single node's write is answered only after its own flush: with one voter, the
/// leader's copy is the whole majority.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_node_answers_a_write_only_after_its_flush() {
    let cluster = Cluster::start(1, |_| {}).await;
    let node = cluster.node(cluster.leader().await).clone();
    node.propose(put("warm", "up")).await.unwrap();
    let held = node.log_flush_gate().lock_owned().await;
    let pending = tokio::spawn({
        let node = node.clone();
        async move { node.propose(put("k", "v")).await }
    });
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(!pending.is_finished(), "answered before its flush");
    assert_eq!(value_of(&node, "k"), None);
    drop(held);
    tokio::time::timeout(Duration::from_secs(20), pending)
        .await
        .expect("answered once the flush ended")
        .unwrap()
        .unwrap();
    assert_eq!(value_of(&node, "k").as_deref(), Some("v"));
    cluster.shutdown().await;
}

/// Three nodes whose heartbeats are ten seconds apart, node 1 elected at once: no periodic
/// heartbeat brings a commit index to a follower during a test.
async fn cluster_without_heartbeats() -> Cluster {
    cluster_without_heartbeats_and(|_| {}).await
}

/// [`cluster_without_heartbeats`], with `tweak` applied to each node's configuration too.
async fn cluster_without_heartbeats_and(tweak: impl Fn(&mut NodeConfig)) -> Cluster {
    let slow_heartbeats = timing(10_000, (30_000, 40_000));
    let cluster = Cluster::start(3, |c| {
        slow_heartbeats(c);
        tweak(c);
    })
    .await;
    // Timeouts this long would keep the cluster leaderless for half a minute.
    cluster.node(1).campaign().await.unwrap();
    cluster
}

/// A leader no longer sends a new commit index to its followers at once: it rides on the
/// next entries or heartbeat, and goes on its own a few milliseconds after the commit
/// when nothing else does (decision #108). With heartbeats ten seconds apart, followers
/// must still apply a lone write long before the next heartbeat.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn followers_apply_a_lone_write_without_waiting_for_a_heartbeat() {
    let cluster = cluster_without_heartbeats().await;
    let leader = cluster.leader().await;
    let node = cluster.node(leader).clone();
    for (key, value) in [("a", "1"), ("b", "2")] {
        let written = node.propose(put(key, value)).await.unwrap();
        let index = node.status().applied_index;
        for (id, follower) in &cluster.nodes {
            tokio::time::timeout(
                Duration::from_secs(5),
                follower.wait_applied(index, Duration::from_secs(5)),
            )
            .await
            .unwrap_or_else(|_| panic!("node {id} did not apply the write before a heartbeat"))
            .unwrap();
            assert_eq!(value_of(follower, key).as_deref(), Some(value));
        }
        assert!(matches!(written.response, Response::Put { .. }));
    }
    cluster.shutdown().await;
}

/// A write forwarded by a follower is answered only once that follower has applied it
/// (spec §3), so a serializable read on the same node sees it at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_through_a_follower_is_applied_there_before_it_is_answered() {
    let cluster = cluster_without_heartbeats().await;
    let follower = cluster.follower().await;
    let node = cluster.node(follower).clone();
    for i in 0..20 {
        let (key, value) = (format!("k{i}"), format!("v{i}"));
        let written = node.propose(put(&key, &value)).await.unwrap();
        assert!(matches!(written.response, Response::Put { .. }));
        assert_eq!(
            value_of(&node, &key).as_deref(),
            Some(value.as_str()),
            "write {i} answered before the forwarding node applied it"
        );
        assert!(node.read_local(|sm| sm.revision()) >= written.revision);
    }
    // The leader's answer to each write named its committed entry, and the follower
    // committed up to it (#131) and answered from its own apply.
    assert_eq!(node.stats().commit_notices.get(), 20);
    assert_eq!(node.answer_waits(), 0, "every request left the registry");
    cluster.shutdown().await;
}

/// A write's result comes from the apply of the node that took it, and from nothing
/// else: on the leader, and on a follower whose leader never answers (its apply is
/// stalled, so the answer it sends after its apply never leaves) and which learns the
/// commit from the leader's next AppendEntries instead. The registry is empty after each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_is_answered_by_the_apply_of_the_node_that_took_it() {
    let cluster = Cluster::start(3, |_| {}).await;
    let leader = cluster.node(cluster.leader().await).clone();
    let follower = cluster.node(cluster.follower().await).clone();
    let written = leader.propose(put("a", "1")).await.unwrap();
    assert!(matches!(written.response, Response::Put { .. }));
    assert_eq!(leader.answer_waits(), 0);

    let held = leader.apply_gate().lock_owned().await;
    let written = tokio::time::timeout(PROMPTLY, follower.propose(put("b", "2")))
        .await
        .expect("answered without the leader's answer")
        .unwrap();
    assert!(matches!(written.response, Response::Put { .. }));
    assert_eq!(value_of(&follower, "b").as_deref(), Some("2"));
    assert_eq!(
        value_of(&leader, "b"),
        None,
        "the leader has not applied it"
    );
    assert_eq!(follower.answer_waits(), 0);
    drop(held);
    let index = leader.status().last_log_index;
    cluster.wait_applied(index).await;
    assert_eq!(value_of(&leader, "b").as_deref(), Some("2"));
    cluster.shutdown().await;
}

/// A forwarded write whose entry is committed while leadership moves to a new term (the
/// old leader's answer never came: its apply is stalled) is answered once, by the
/// forwarding node's apply, with the result every node computed; the write is applied
/// once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forwarded_write_is_answered_once_across_a_leader_change() {
    let cluster = Cluster::start(3, |_| {}).await;
    let old = cluster.leader().await;
    let through = cluster.follower().await;
    let next = *cluster
        .nodes
        .keys()
        .find(|id| **id != old && **id != through)
        .unwrap();
    let follower = cluster.node(through).clone();
    follower.propose(put("a", "1")).await.unwrap();
    let index = cluster.node(old).status().last_log_index + 1;
    // Neither the old leader nor the forwarding node can apply: the write commits, and
    // nobody can answer it yet.
    let held_old = cluster.node(old).apply_gate().lock_owned().await;
    let held_here = follower.apply_gate().lock_owned().await;
    let write = {
        let follower = follower.clone();
        tokio::spawn(async move { follower.propose(put("b", "2")).await })
    };
    let committed = async {
        while cluster.node(next).status().applied_index < index {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(PROMPTLY, committed)
        .await
        .expect("committed and applied on the third node");
    assert_eq!(follower.answer_waits(), 1);
    let term = cluster.node(old).status().term;
    cluster.node(next).campaign().await.unwrap();
    // Some node leads in a later term (the third one, or another if an election timer
    // fires first on this busy machine).
    tokio::time::timeout(PROMPTLY, async {
        while !cluster
            .nodes
            .values()
            .any(|n| n.is_leader() && n.status().term > term)
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("leadership moves to a new term");
    assert!(!write.is_finished(), "answered before its node applied it");
    drop(held_here);
    let written = tokio::time::timeout(PROMPTLY, write)
        .await
        .expect("answered once its node applies it")
        .unwrap()
        .unwrap();
    let Response::Put { .. } = written.response else {
        panic!("{written:?}")
    };
    assert_eq!(follower.answer_waits(), 0);
    drop(held_old);
    let last = cluster.node(next).status().last_log_index;
    cluster.wait_applied(last).await;
    for node in cluster.nodes.values() {
        let b = node.read_local(|sm| sm.get("b")).unwrap();
        assert_eq!(b.value, "2");
        assert_eq!(b.version, 1, "applied once");
        assert_eq!(b.mod_revision, written.revision);
    }
    cluster.shutdown().await;
}

/// A caller that gives up (its future dropped at a deadline) leaves nothing in the
/// registry, on the leader and on a forwarding follower, while the write it sent is
/// still unanswered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_that_gives_up_leaves_the_registry() {
    let cluster = Cluster::start(3, |_| {}).await;
    let leader = cluster.node(cluster.leader().await).clone();
    let follower = cluster.node(cluster.follower().await).clone();
    let held = [
        leader.apply_gate().lock_owned().await,
        follower.apply_gate().lock_owned().await,
    ];
    for (i, node) in [&leader, &follower].into_iter().enumerate() {
        let key = format!("k{i}");
        let waiting = async {
            while node.answer_waits() == 0 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        };
        tokio::select! {
            _ = node.propose(put(&key, "v")) => panic!("answered while its node cannot apply"),
            () = async { waiting.await; tokio::time::sleep(Duration::from_millis(100)).await } => {}
        }
        assert_eq!(node.answer_waits(), 0, "the request left with its caller");
    }
    drop(held);
    cluster.shutdown().await;
}

/// A 3-node cluster without heartbeats for the notice tests: one write applied on the
/// `follower` (not `stalled`), and the index and term the next entry will have.
struct NoticeCase {
    cluster: Cluster,
    leader: NodeId,
    stalled: NodeId,
    node: baton_raft_node::Node,
    follower: baton_raft_node::Node,
    index: u64,
    term: u64,
}

impl NoticeCase {
    /// Two entries in flight at a time.
    async fn start() -> NoticeCase {
        let cluster = cluster_without_heartbeats_and(|c| c.batches_in_flight_max = 2).await;
        let leader = cluster.leader().await;
        let mut followers = cluster.nodes.keys().copied().filter(|id| *id != leader);
        let (free, stalled) = (followers.next().unwrap(), followers.next().unwrap());
        let node = cluster.node(leader).clone();
        node.propose(put("a", "1")).await.unwrap();
        let follower = cluster.node(free).clone();
        let index = node.status().applied_index + 1;
        follower
            .wait_applied(index - 1, Duration::from_secs(5))
            .await
            .unwrap();
        let term = node.raft().metrics().borrow().current_term;
        NoticeCase {
            cluster,
            leader,
            stalled,
            node,
            follower,
            index,
            term,
        }
    }

    /// The log id `index` of the leader `by` in `term`.
    fn id(term: u64, by: NodeId, index: u64) -> openraft::LogId<NodeId> {
        openraft::LogId::new(openraft::CommittedLeaderId::new(term, by), index)
    }

    /// Proposes `key` on the leader in a task of its own.
    fn propose(&self, key: &'static str) -> tokio::task::JoinHandle<Result<Applied, NodeError>> {
        let node = self.node.clone();
        tokio::spawn(async move { node.propose(put(key, "v")).await })
    }

    /// Waits until the follower holds the entry `index`.
    async fn holds(&self, index: u64) {
        tokio::time::timeout(Duration::from_secs(5), async {
            while self.follower.status().last_log_index < index {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .expect("the free follower holds the new entry");
    }

    /// A while later the follower still has not applied `key`, and its write waits.
    async fn still_pending(
        &self,
        key: &str,
        write: &tokio::task::JoinHandle<Result<Applied, NodeError>>,
        why: &str,
    ) {
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(value_of(&self.follower, key), None, "{why}");
        assert!(!write.is_finished());
    }

    /// The follower applies the entry `index`, which wrote `key`.
    async fn applies(&self, index: u64, key: &str, why: &str) {
        self.follower
            .wait_applied(index, Duration::from_secs(5))
            .await
            .expect(why);
        assert_eq!(value_of(&self.follower, key).as_deref(), Some("v"));
    }

    /// Lets the disks go, waits for `writes` to commit, and stops the cluster.
    async fn finish(
        self,
        held: [tokio::sync::OwnedMutexGuard<()>; 2],
        writes: Vec<tokio::task::JoinHandle<Result<Applied, NodeError>>>,
    ) {
        drop(held);
        for write in writes {
            tokio::time::timeout(Duration::from_secs(20), write)
                .await
                .expect("committed once the disks are back")
                .unwrap()
                .unwrap();
        }
        self.cluster.shutdown().await;
    }

    /// Stalls the leader's disk and the other follower's: nothing commits.
    async fn stall(&self) -> [tokio::sync::OwnedMutexGuard<()>; 2] {
        [
            self.node.log_flush_gate().lock_owned().await,
            self.cluster
                .node(self.stalled)
                .log_flush_gate()
                .lock_owned()
                .await,
        ]
    }
}

/// A follower commits on a commit notice (the leader's answer to a write it forwarded)
/// only when the notice names an entry of the leader it follows now, as it trusts only
/// that leader's AppendEntries; a notice of an entry it does not hold yet waits for that
/// entry (decision #131). The entries here are not yet committed (the leader's disk and
/// the other follower's stall), so applying them shows the notices alone moved the commit;
/// a real leader names an entry only after committing it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_notice_is_believed_only_from_the_leader_that_made_the_entry() {
    let case = NoticeCase::start().await;
    let (leader, stalled, index, term) = (case.leader, case.stalled, case.index, case.term);
    let (id, follower) = (NoticeCase::id, case.follower.clone());
    let held = case.stall().await;
    // From a later term, or from another node in this term: not this follower's leader.
    let trigger = follower.raft().trigger();
    trigger
        .commit_notice(id(term + 1, leader, index))
        .await
        .unwrap();
    trigger
        .commit_notice(id(term, stalled, index))
        .await
        .unwrap();
    let b = case.propose("b");
    case.holds(index).await;
    case.still_pending("b", &b, "a notice from another leader")
        .await;

    // From its leader: the entry it holds is committed and applied at once; the notice of
    // the next one waits for that entry and commits it when it arrives.
    trigger
        .commit_notice(id(term, leader, index + 1))
        .await
        .unwrap();
    let why = "the notice of its own leader commits the entry it holds";
    case.applies(index, "b", why).await;
    let c = case.propose("c");
    let why = "the kept notice commits the entry when it arrives";
    case.applies(index + 1, "c", why).await;

    case.finish(held, vec![b, c]).await;
}

/// Three nodes whose leader holds entries for a spare follower for a minute (decision
/// #136), with heartbeats (and so AppendEntries timeouts) ten seconds apart: within five
/// seconds, only the pacer's own wake-ups can move a spare. Returns the cluster, its
/// leader, the follower a commit needs (the lower id) and the spare.
async fn cluster_with_a_spare() -> (Cluster, NodeId, NodeId, NodeId) {
    let cluster = cluster_without_heartbeats_and(|c| c.spare_batch_ms = 60_000).await;
    let leader = cluster.leader().await;
    let mut followers = (1..=3).filter(|id| *id != leader);
    let (needed, spare) = (followers.next().unwrap(), followers.next().unwrap());
    (cluster, leader, needed, spare)
}

/// Long enough for any wake-up on this machine, far shorter than a batch or an RPC timeout.
const PROMPTLY: Duration = Duration::from_secs(5);

/// With one follower enough for a commit, a leader sends new entries to the other (the
/// spare) at most once per batch interval; writes commit on the leader's copy and the
/// first follower's. When that follower stops, the spare stands in at once instead of at
/// its next batch, a minute away.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spare_follower_gets_entries_in_batches_and_stands_in_when_the_other_stops() {
    let (mut cluster, leader, needed, spare) = cluster_with_a_spare().await;
    let node = cluster.node(leader).clone();
    for i in 0..20 {
        node.propose(put(&format!("k{i}"), "v")).await.unwrap();
    }
    let last = node.status().last_log_index;
    assert_eq!(cluster.node(needed).status().last_log_index, last);
    let spare_last = cluster.node(spare).status().last_log_index;
    assert!(
        spare_last < last,
        "the spare holds every entry ({spare_last} of {last}): it was not batched"
    );

    cluster.stop(needed).await;
    let written = tokio::time::timeout(PROMPTLY, node.propose(put("after", "1")))
        .await
        .expect("committed with the spare's copy long before its next batch")
        .unwrap();
    assert!(matches!(written.response, Response::Put { .. }));
    let spare_node = cluster.node(spare).clone();
    spare_node
        .wait_applied(node.status().applied_index, PROMPTLY)
        .await
        .unwrap();
    assert_eq!(value_of(&spare_node, "after").as_deref(), Some("1"));
    assert_eq!(value_of(&spare_node, "k19").as_deref(), Some("v"));
    cluster.shutdown().await;
}

/// A spare that stalls does not slow commits: when the follower a commit needs stops
/// answering (its disk stalls), the spare is sent its entries without waiting out its
/// batch interval.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_whose_disk_stalls_hands_its_place_to_the_spare() {
    let (cluster, leader, needed, spare) = cluster_with_a_spare().await;
    let node = cluster.node(leader).clone();
    node.propose(put("a", "1")).await.unwrap();
    let held = cluster
        .node(needed)
        .log_flush_gate()
        .clone()
        .lock_owned()
        .await;
    let written = tokio::time::timeout(PROMPTLY, node.propose(put("b", "2")))
        .await
        .expect("committed with the spare's copy while the other follower's disk stalls")
        .unwrap();
    assert!(matches!(written.response, Response::Put { .. }));
    let spare_last = cluster.node(spare).status().last_log_index;
    assert!(spare_last >= node.status().committed_index);
    drop(held);
    cluster.shutdown().await;
}

/// A follower that forwards writes and reads is never a spare while it does: the write
/// it forwards is applied there, and its linearizable read answered, without waiting for
/// a spare's batch (here a minute).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_serving_clients_is_not_held_as_a_spare() {
    let (cluster, leader, _needed, spare) = cluster_with_a_spare().await;
    cluster
        .node(leader)
        .propose(put("first", "1"))
        .await
        .unwrap();
    let node = cluster.node(spare).clone();
    for i in 0..5 {
        let (key, value) = (format!("k{i}"), format!("v{i}"));
        let written = tokio::time::timeout(PROMPTLY, node.propose(put(&key, &value)))
            .await
            .expect("a write through the spare is answered long before its next batch")
            .unwrap();
        assert!(matches!(written.response, Response::Put { .. }));
        assert_eq!(value_of(&node, &key).as_deref(), Some(value.as_str()));
    }
    // A write on the leader reaches the follower that now serves clients at once, and its
    // linearizable read sees it.
    cluster
        .node(leader)
        .propose(put("late", "2"))
        .await
        .unwrap();
    let read = tokio::time::timeout(PROMPTLY, node.read(|sm| sm.revision()))
        .await
        .expect("a read through the spare is answered long before its next batch")
        .unwrap();
    assert!(read >= cluster.node(leader).read_local(|sm| sm.revision()));
    assert_eq!(value_of(&node, "late").as_deref(), Some("2"));
    cluster.shutdown().await;
}
