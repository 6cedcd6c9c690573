//! The leader's lease clock on real 3-node clusters: expiry never earlier than TTL after the
//! last acknowledged keepalive (across leader changes too), not kept alive by repeated
//! leader changes, wait deadlines and lock-delays proposed when due.
//!
//! Safety assertions ("not before") are sound on any machine: a linearizable read that
//! *finished* before the earliest allowed expiry must still see the lease. Liveness
//! assertions ("gone by") use generous bounds.

#![allow(clippy::unwrap_used)] // tests: a failure is reported by the panic

mod common;

use baton_raft_node::Node;
use baton_state_machine::*;
use common::*;
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

const TTL_MS: u64 = 1_500;

/// Polls until the lease is gone, asserting every read that finished before `not_before`
/// still saw it. Returns when it was first seen gone.
async fn watch_expiry(
    node: &Node,
    lease: LeaseId,
    not_before: Instant,
    give_up: Instant,
) -> Instant {
    loop {
        // A read refused during an election observed nothing: try again.
        let Ok(alive) = node.read(|sm| sm.has_lease(lease)).await else {
            assert!(
                Instant::now() < give_up,
                "no read succeeded before the bound"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let finished = Instant::now();
        if !alive {
            assert!(
                finished >= not_before,
                "lease {lease} expired {:?} before its TTL after the last keepalive",
                not_before - finished
            );
            return finished;
        }
        assert!(
            finished < give_up,
            "lease {lease} still alive long after its bound"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Keeps `lease` alive through `node` `times` times; returns the send time of the last
/// acknowledged keepalive.
async fn keep_alive(node: &Node, lease: LeaseId, times: u32) -> Instant {
    let mut last = Instant::now();
    for _ in 0..times {
        let sent = Instant::now();
        let ttl = node.keepalive(lease).await.unwrap();
        assert_eq!(ttl, Some(TTL_MS));
        last = sent;
        tokio::time::sleep(Duration::from_millis(TTL_MS / 3)).await;
    }
    last
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_expires_on_the_leader_clock_never_before_ttl_after_the_last_keepalive() {
    let cluster = Cluster::start(3, |_| {}).await;
    let follower = cluster.node(cluster.follower().await).clone();
    let lease = grant_lease(&follower, TTL_MS).await;
    tracing::info!(%lease, "keepalives through a follower, forwarded to the leader");
    let last = keep_alive(&follower, lease, 4).await;
    let not_before = last + Duration::from_millis(TTL_MS);
    let bound = Duration::from_millis(TTL_MS + 500 + 500) + Duration::from_secs(5);
    let gone = watch_expiry(&follower, lease, not_before, last + bound).await;
    tracing::info!(after_ms = (gone - last).as_millis() as u64, "expired");
    assert_eq!(
        follower.keepalive(lease).await.unwrap(),
        None,
        "a gone lease is not revived"
    );
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_outlives_a_leader_change_until_its_ttl() {
    let mut cluster = Cluster::start(3, |_| {}).await;
    let leader = cluster.leader().await;
    let follower = cluster.follower().await;
    let client = cluster.node(follower).clone();
    let lease = grant_lease(&client, TTL_MS).await;
    let last = keep_alive(&client, lease, 2).await;
    tracing::info!(leader, "stopping the leader right after the last keepalive");
    cluster.stop(leader).await;
    let not_before = last + Duration::from_millis(TTL_MS);
    let give_up = last + Duration::from_secs(15);
    watch_expiry(&client, lease, not_before, give_up).await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeated_leader_changes_do_not_keep_a_dead_clients_lease_alive() {
    let mut cluster = Cluster::start(3, |c| c.lease_checkpoint_interval_ms = 300).await;
    let ttl_ms = 4_000;
    let first = cluster.leader().await;
    let lease = grant_lease(cluster.node(first), ttl_ms).await;
    let granted = Instant::now();
    // Without checkpoints each new leader would restart the lease at its full TTL, and a
    // change every ~1.3 s would keep it alive forever.
    let mut changes = 0;
    loop {
        let leader = cluster.leader().await;
        let alive = cluster
            .node(leader)
            .read(|sm| sm.has_lease(lease))
            .await
            .unwrap();
        if !alive {
            break;
        }
        assert!(
            granted.elapsed() < Duration::from_secs(40),
            "lease alive after {changes} leader changes"
        );
        tokio::time::sleep(Duration::from_millis(1_000)).await;
        tracing::info!(leader, changes, "forcing a leader change");
        cluster.stop(leader).await;
        cluster.leader().await;
        cluster.restart(leader).await;
        changes += 1;
    }
    tracing::info!(
        changes,
        elapsed_ms = granted.elapsed().as_millis() as u64,
        "lease ended"
    );
    assert!(changes >= 2, "the test made leader changes ({changes})");
    assert!(granted.elapsed() >= Duration::from_millis(ttl_ms));
    cluster.shutdown().await;
}

/// Spec §2's late bound under leader churn: a dead client's lease ends within `ttl +
/// min(ttl, 2 × checkpoint interval) + failover + election timeout` of its last keepalive,
/// however many leader changes happen meanwhile; a live client's lease never ends earlier
/// than ttl after an acknowledged keepalive. Leadership moves every 400 ms (at least 25
/// times) without stopping any process (a restarted node counts what it replays from its
/// restart: spec §2), faster than any leader could checkpoint. Whether the live client's
/// keepalives get through such churn depends on the machine's speed, so that is logged,
/// not asserted: on a loaded machine one can be refused or delayed for a whole TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_churn_ends_a_dead_clients_lease_within_one_bound_and_keeps_a_live_one() {
    let interval_ms = 500;
    let cluster = Cluster::start(3, |c| c.lease_checkpoint_interval_ms = interval_ms).await;
    let election_max_ms = cluster.configs[&1].election_timeout_max_ms;
    let ttl_ms = 3_000;
    let first = cluster.leader().await;
    let node = cluster.node(first).clone();
    let dead = grant_lease(&node, ttl_ms).await;
    let live = grant_lease(&node, ttl_ms).await;
    let mut last_dead = Instant::now();
    for _ in 0..3 {
        let sent = Instant::now();
        assert_eq!(node.keepalive(dead).await.unwrap(), Some(ttl_ms));
        last_dead = sent;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The live client keeps alive every ttl/4 through whichever node answers, and retries
    // a refusal after 100 ms, until told to stop. A keepalive may be refused while
    // leadership moves; what must never happen is the lease ending earlier than ttl after
    // an acknowledged keepalive was sent.
    let stop_keeper = CancellationToken::new();
    let keeper = {
        let (node, stop) = (node.clone(), stop_keeper.clone());
        tokio::spawn(async move {
            let mut acked: Vec<Instant> = Vec::new();
            // Refusals since the last acknowledgement: (sent, why).
            let mut refused: Vec<(Instant, String)> = Vec::new();
            while !stop.is_cancelled() {
                let sent = Instant::now();
                let pause = match node.keepalive(live).await {
                    Ok(Some(_)) => {
                        acked.push(sent);
                        refused.clear();
                        ttl_ms / 4
                    }
                    Ok(None) => {
                        let last = acked.last().copied().unwrap_or(sent);
                        let since = |t: Instant| t.saturating_duration_since(last).as_millis();
                        let refusals: Vec<_> =
                            refused.iter().map(|(t, e)| (since(*t), e)).collect();
                        let gone_after = since(Instant::now());
                        assert!(
                            gone_after >= u128::from(ttl_ms),
                            "the live lease ended {gone_after} ms after an acknowledged \
                             keepalive was sent: early; refusals since (ms, why): {refusals:?}"
                        );
                        return (acked, Some((gone_after, refusals.len())));
                    }
                    Err(e) => {
                        tracing::info!(error = %e, "keepalive refused; retrying");
                        refused.push((sent, e.to_string()));
                        100
                    }
                };
                tokio::time::sleep(Duration::from_millis(pause)).await;
            }
            (acked, None)
        })
    };
    // The lease's whole life and then some, with a leader change every 400 ms: at least 10 s
    // and 25 changes, however long those take on this machine.
    const CHANGES: u32 = 25;
    let mut changes = 0;
    let mut gone_at = None;
    let churn_until = last_dead + Duration::from_secs(10);
    let give_up = last_dead + Duration::from_secs(120);
    while changes < CHANGES || Instant::now() < churn_until {
        assert!(
            Instant::now() < give_up,
            "only {changes} leader changes in 120 s"
        );
        let leader = cluster.leader().await;
        let follower = *cluster.nodes.keys().find(|id| **id != leader).unwrap();
        if let Ok(alive) = cluster.node(follower).read(|sm| sm.has_lease(dead)).await {
            let finished = Instant::now();
            if !alive && gone_at.is_none() {
                gone_at = Some(finished);
            }
            if alive {
                assert!(
                    gone_at.is_none(),
                    "the lease came back after it was seen gone"
                );
            }
        }
        cluster.node(follower).campaign().await.unwrap();
        changes += 1;
        tokio::time::sleep(Duration::from_millis(400)).await;
    }
    let live_alive = cluster
        .node(first)
        .read(|sm| sm.has_lease(live))
        .await
        .unwrap();
    let live_read = Instant::now();
    stop_keeper.cancel();
    let (acked, lost) = keeper.await.unwrap();
    let gone_at = gone_at.expect("the dead client's lease ended during the churn");
    let after = gone_at - last_dead;
    let bound = ttl_ms + ttl_ms.min(2 * interval_ms) + 2 * election_max_ms + election_max_ms;
    tracing::info!(
        changes,
        after_ms = after.as_millis() as u64,
        bound,
        acknowledged = acked.len(),
        ?lost,
        live_alive,
        "dead lease ended"
    );
    assert!(
        after >= Duration::from_millis(ttl_ms),
        "ended {after:?} after its last keepalive: early"
    );
    // The margin on top of the bound is for the expiry's own commit and this poll.
    assert!(
        after <= Duration::from_millis(bound + 1_000),
        "ended {after:?} after its last keepalive, {changes} leader changes; bound {bound} ms"
    );
    // The live lease survived, or ended only a whole TTL after the last acknowledged
    // keepalive was sent (every later one was refused, so the client knew); never early.
    if !live_alive {
        let last = acked
            .last()
            .copied()
            .expect("the live client was heard at least once");
        assert!(
            live_read - last >= Duration::from_millis(ttl_ms),
            "the live lease was gone {:?} after an acknowledged keepalive was sent",
            live_read - last
        );
        tracing::warn!(
            ?lost,
            "the live client's keepalives were refused for a whole TTL"
        );
    }
    cluster.shutdown().await;
}

fn acquire(name: &str, lease: LeaseId, wait_ms: u64, lock_delay_ms: u64) -> Proposal {
    Proposal::from(Command::LockAcquire(LockAcquire {
        name: name.into(),
        lease,
        owner: "w".into(),
        mode: Mode::Exclusive,
        wait_ms,
        lock_delay_ms,
    }))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocking_acquire_deadline_is_proposed_as_a_timeout() {
    let cluster = Cluster::start(3, |_| {}).await;
    let node = cluster.node(cluster.follower().await).clone();
    let holder = grant_lease(&node, 60_000).await;
    let waiter = grant_lease(&node, 60_000).await;
    node.propose(acquire("L", holder, 0, 0)).await.unwrap();
    let mut events = node.events();
    let queued_at = Instant::now();
    let applied = node.propose(acquire("L", waiter, 400, 0)).await.unwrap();
    let Response::Queued { enqueued, .. } = applied.response else {
        panic!("expected queued, got {:?}", applied.response);
    };
    let timed_out = loop {
        let batch = tokio::time::timeout(Duration::from_secs(10), events.recv())
            .await
            .expect("a timeout event")
            .unwrap();
        let found = batch.events.iter().find(|e| {
            matches!(&e.kind, EventKind::Cancelled { reason: CancelReason::TimedOut, enqueued: at, .. } if *at == enqueued)
        });
        if found.is_some() {
            break Instant::now();
        }
    };
    assert!(
        timed_out - queued_at >= Duration::from_millis(400),
        "timed out early"
    );
    let queue = node
        .read(|sm| sm.lock_state(&ResourceId::lock("L")).unwrap().queue)
        .await
        .unwrap();
    assert!(queue.is_empty());
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_delay_grant_is_proposed_when_due_after_a_lease_expiry() {
    let cluster = Cluster::start(3, |_| {}).await;
    let node = cluster.node(cluster.leader().await).clone();
    // The lease's TTL starts when the leader applies the grant, after this instant; the
    // expiry comes at least 1 000 ms later and the grant at least 700 ms after that.
    let before_grant = Instant::now();
    let doomed = grant_lease(&node, 1_000).await;
    let next = grant_lease(&node, 60_000).await;
    node.propose(acquire("L", doomed, 0, 700)).await.unwrap();
    node.propose(acquire("L", next, 30_000, 0)).await.unwrap();
    let mut events = node.events();
    let (mut expired_at, mut granted_at) = (None, None);
    while granted_at.is_none() {
        let batch = tokio::time::timeout(Duration::from_secs(10), events.recv())
            .await
            .expect("events")
            .unwrap();
        for e in &batch.events {
            match &e.kind {
                EventKind::LeaseExpired { lease } if *lease == doomed => {
                    expired_at = Some(Instant::now())
                }
                EventKind::Granted { lease, .. } if *lease == next => {
                    granted_at = Some(Instant::now())
                }
                _ => {}
            }
        }
    }
    let (expired_at, granted_at) = (expired_at.unwrap(), granted_at.unwrap());
    assert!(expired_at < granted_at, "the expiry came first");
    assert!(
        granted_at - before_grant >= Duration::from_millis(1_700),
        "granted {:?} after the lease grant: before TTL plus lock-delay",
        granted_at - before_grant
    );
    cluster.shutdown().await;
}
