//! The Rust client against real 3-node clusters: every feature, failover when the leader
//! is killed, and watch resumption across a killed node.

#![allow(clippy::unwrap_used)] // tests: a failure is reported by the panic

mod common;

use baton_client::wire::{Compare, CompareOp, CompareTarget, CompareValue, TxnOp, TxnRequest};
use baton_client::{Client, Error, Lease, LeaseStatus, WatchFilter};
use common::*;
use futures_util::StreamExt;
use std::time::Duration;

fn client_for(c: &Cluster, order: &[u64]) -> Client {
    Client::new(order.iter().map(|id| c.node(*id).api.clone())).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_semaphores_elections_and_keys_through_the_client() {
    let c = Cluster::three().await;
    let client = client_for(&c, &[1, 2, 3]);
    let a = Lease::grant(&client, Duration::from_secs(10))
        .await
        .unwrap();
    let b = Lease::grant(&client, Duration::from_secs(10))
        .await
        .unwrap();
    assert!(a.safe_until().is_some());
    let guard = a.lock("res").await.unwrap();
    assert!(guard.fence() > 0);
    assert!(matches!(
        b.try_lock("res").await,
        Err(Error::LockHeld { .. })
    ));
    assert!(matches!(
        b.lock_timeout("res", Duration::from_millis(300)).await,
        Err(Error::Timeout)
    ));
    let fence = guard.fence();
    guard.release().await.unwrap();
    let next = b.lock_timeout("res", Duration::from_secs(5)).await.unwrap();
    assert!(next.fence() > fence, "fences increase");
    drop(next); // released in the background
    let sem = a.semaphore("pool", 2, 2, Duration::ZERO).await.unwrap();
    assert!(matches!(
        b.semaphore("pool", 3, 1, Duration::ZERO).await,
        Err(Error::LimitMismatch { limit: 2 })
    ));
    sem.release().await.unwrap();

    let rev = client.put("k", "v1").await.unwrap();
    assert!(matches!(
        client.cas("k", "v2", rev + 100).await,
        Err(Error::CasFailed { .. })
    ));
    client.cas("k", "v2", rev).await.unwrap();
    assert_eq!(client.get("k").await.unwrap().unwrap().value, "v2");
    let seq = client
        .create_sequential("q/", "job", Some(a.id()))
        .await
        .unwrap();
    assert!(seq.starts_with("q/"));
    assert_eq!(client.range("q/", 10).await.unwrap().len(), 1);
    let txn = client
        .txn(&TxnRequest {
            compare: vec![Compare {
                key: "k".into(),
                target: CompareTarget::Value,
                op: CompareOp::Equal,
                value: CompareValue::Text("v2".into()),
            }],
            success: vec![TxnOp::Delete { key: "k".into() }],
            failure: vec![],
        })
        .await
        .unwrap();
    assert!(txn.succeeded);
    assert!(client.get("k").await.unwrap().is_none());
    assert!(matches!(client.delete("k").await, Err(Error::KeyNotFound)));

    let leadership = a.campaign("e", "node-a", Duration::ZERO).await.unwrap();
    leadership.proclaim("node-a2").await.unwrap();
    let mut observed = Box::pin(client.observe("e").await.unwrap());
    assert_eq!(
        observed.next().await.unwrap().unwrap().unwrap().value,
        "node-a2"
    );
    leadership.resign().await.unwrap();
    assert_eq!(
        observed.next().await.unwrap().unwrap(),
        None,
        "the leader resigned"
    );
    assert!(client.leader("e").await.unwrap().is_none());
    a.close().await.unwrap();
    b.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_lost_resolves_when_the_server_says_it_is_gone() {
    let c = Cluster::single().await;
    let client = client_for(&c, &[1]);
    let lease = Lease::grant(&client, Duration::from_millis(1_500))
        .await
        .unwrap();
    client.revoke_lease(lease.id()).await.unwrap();
    tokio::time::timeout(Duration::from_secs(5), lease.lost())
        .await
        .expect("lost() resolves");
    assert_eq!(lease.status(), LeaseStatus::Lost);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_fails_over_when_the_leader_is_killed() {
    let mut c = Cluster::three().await;
    let leader = c.leader(1).await;
    let mut order = vec![leader];
    order.extend((1..=3).filter(|id| *id != leader));
    let client = client_for(&c, &order);
    let lease = Lease::grant(&client, Duration::from_secs(6)).await.unwrap();
    client.put("before", "1").await.unwrap();
    c.nodes.get_mut(&leader).unwrap().kill();
    client.put("after", "2").await.unwrap();
    assert_eq!(client.get("before").await.unwrap().unwrap().value, "1");
    // The lease is still kept alive through the new leader.
    let first = lease.safe_until().unwrap();
    tokio::time::sleep(Duration::from_secs(4)).await;
    let later = lease.safe_until().expect("the lease is still safe");
    assert!(later > first, "keepalives continued after the failover");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_resumes_across_a_killed_node_without_gap_or_duplicate() {
    let mut c = Cluster::three().await;
    let leader = c.leader(1).await;
    let watched = (1..=3).find(|id| *id != leader).unwrap();
    let other = (1..=3).find(|id| *id != leader && *id != watched).unwrap();
    let watcher = client_for(&c, &[watched, other, leader]);
    let writer = client_for(&c, &[leader, other]);
    let start = writer.put("w/0", "0").await.unwrap();
    let mut events = Box::pin(watcher.watch(WatchFilter::Prefix("w/".into()), Some(start)));
    for i in 1..5 {
        writer.put(&format!("w/{i}"), "x").await.unwrap();
    }
    let mut seen = Vec::new();
    while seen.len() < 5 {
        seen.push(events.next().await.unwrap().unwrap().revision);
    }
    c.nodes.get_mut(&watched).unwrap().kill();
    for i in 5..10 {
        writer.put(&format!("w/{i}"), "x").await.unwrap();
    }
    while seen.len() < 10 {
        let event = tokio::time::timeout(Duration::from_secs(20), events.next())
            .await
            .expect("the watch resumed")
            .unwrap()
            .unwrap();
        seen.push(event.revision);
    }
    let mut sorted = seen.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted, seen, "ordered, no duplicate: {seen:?}");
    assert_eq!(seen.len(), 10, "no gap");
}

/// The client's promises about ownership and outcomes: two guards on one lease are two
/// owners (re-entrancy only when asked), a release after the hold ended says so, `lost()`
/// fires on a force-release, and a call repeated with its idempotency key acts once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guards_own_their_holds_and_report_their_loss() {
    let c = Cluster::single().await;
    let client = client_for(&c, &[1]);
    let lease = Lease::grant(&client, Duration::from_secs(30))
        .await
        .unwrap();
    let first = lease.try_lock("own").await.unwrap();
    // Another task with the same lease is another owner: the exclusive lock is held.
    assert!(matches!(
        lease.try_lock("own").await,
        Err(Error::LockHeld { .. })
    ));
    // Re-entrancy by choice: the same owner twice.
    let options = || baton_client::LockOptions {
        owner: "me".into(),
        ..Default::default()
    };
    let again = lease.lock_with("mine", options()).await.unwrap();
    let reentered = lease.lock_with("mine", options()).await.unwrap();
    assert_eq!(reentered.count(), 2);
    drop((again, reentered));
    // A force-release ends the hold: lost() fires, and release() says the hold was gone.
    let watcher = async { first.lost().await };
    let force = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        client.force_release("own").await.unwrap();
    };
    tokio::time::timeout(Duration::from_secs(10), async {
        tokio::join!(watcher, force)
    })
    .await
    .expect("lost() fired after the force-release");
    assert!(matches!(
        first.release().await,
        Err(Error::NotHolder { .. })
    ));
    // The same call through a handle with a fixed key acts once.
    let keyed = client.with_idempotency_key("write-once-1");
    let r1 = keyed.put("once", "v").await.unwrap();
    let r2 = keyed.put("once", "v").await.unwrap();
    assert_eq!(r1, r2, "the repeat answered the first outcome");
    assert_eq!(client.get("once").await.unwrap().unwrap().version, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_builder_sets_attempts_and_timeouts() {
    let c = Cluster::single().await;
    let dead = format!("127.0.0.1:{}", free_port());
    // One attempt at a port where nothing listens: unreachable, nothing retried elsewhere.
    let once = Client::builder([dead.clone()])
        .attempts(1)
        .connect_timeout(Duration::from_millis(200))
        .build()
        .unwrap();
    assert!(matches!(once.get("k").await, Err(Error::Unreachable(_))));
    // With the live node after the dead one and enough attempts, the call succeeds.
    let both = Client::builder([dead, c.node(1).api.clone()])
        .attempts(3)
        .request_timeout(Duration::from_secs(5))
        .retry_pause(Duration::from_millis(50))
        .build()
        .unwrap();
    both.put("k", "v").await.unwrap();
    assert_eq!(both.get("k").await.unwrap().unwrap().value, "v");
}

/// The client waits across the server's per-request hold limit without losing its place:
/// the first waiter stays first (same enqueue revision) through several `202` answers and
/// is the one granted when the lock is released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_wait_keeps_its_place_across_the_hold_limit() {
    let c = Cluster::from_file(1, "[limits]\nhold_ms_max = 1000\n").await;
    let client = client_for(&c, &[1]);
    let ttl = Duration::from_secs(30);
    let holder = Lease::grant(&client, ttl).await.unwrap();
    let [first, second] = [
        Lease::grant(&client, ttl).await.unwrap(),
        Lease::grant(&client, ttl).await.unwrap(),
    ];
    let held = holder.lock("long").await.unwrap();
    let wait = |lease: Lease| {
        tokio::spawn(async move { lease.lock_timeout("long", Duration::from_secs(60)).await })
    };
    let first_wait = wait(first.clone());
    let place = loop {
        if let Some(&entry) = c.lock_queue(1, "long").await.first() {
            break entry;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(place.0, first.id());
    let second_wait = wait(second.clone());
    // Longer than two hold limits: each waiter's request has been answered 202 and sent again.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let now = c.lock_queue(1, "long").await;
    assert_eq!(now.len(), 2, "{now:?}");
    assert_eq!(now[0], place, "the first waiter kept its place");
    held.release().await.unwrap();
    let granted = first_wait.await.unwrap().unwrap();
    assert_eq!(granted.lease().id(), first.id());
    assert_eq!(
        c.lock_queue(1, "long").await.len(),
        1,
        "the second still waits, behind"
    );
    let fence = granted.fence();
    granted.release().await.unwrap();
    let next = second_wait.await.unwrap().unwrap();
    assert!(next.fence() > fence);
}
