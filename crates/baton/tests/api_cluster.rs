//! The /v1 API against a real 3-node cluster of `baton serve` processes: any node answers,
//! followers forward, a killed leader never leaves a held-open request hanging, and with
//! no leader the answer is 503 with Retry-After.

#![allow(clippy::unwrap_used)] // tests: a failure is reported by the panic

mod common;

use common::*;
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_node_answers_and_followers_forward_to_the_leader() {
    let c = Cluster::three().await;
    let leader = c.leader(1).await;
    let followers: Vec<u64> = (1..=3).filter(|id| *id != leader).collect();
    let (a, b) = (followers[0], followers[1]);
    // Writes through one follower, linearizable reads through the other.
    let (status, put) = c.put(a, "/v1/kv/shared", json!({"value": "from-a"})).await;
    assert_eq!(status, 200, "{put}");
    let (status, kv) = c.get(b, "/v1/kv/shared").await.unwrap();
    assert_eq!((status, kv["value"].as_str()), (200, Some("from-a")));
    assert!(kv["revision"].as_u64() >= put["revision"].as_u64());
    // Leases and locks through followers, keepalive forwarded to the leader's clock.
    let lease = c.lease(a, 10_000).await;
    let (status, grant) = c
        .post(
            b,
            "/v1/locks/F/acquire",
            json!({"lease_id": lease, "owner": "x"}),
        )
        .await;
    assert_eq!(status, 200, "{grant}");
    let (status, ka) = c
        .post(b, &format!("/v1/leases/{lease}/keepalive"), json!(null))
        .await;
    assert_eq!((status, ka["ttl_ms"].as_u64()), (200, Some(10_000)));
    let (_, info) = c.get(a, &format!("/v1/leases/{lease}")).await.unwrap();
    assert!(
        info["remaining_ms"].as_u64().is_some(),
        "remaining from the leader's clock: {info}"
    );
    // A serializable read is answered locally (it may lag, but it answers).
    let (status, _) = c
        .get(b, "/v1/kv/shared?consistency=serializable")
        .await
        .unwrap();
    assert!(status == 200 || status == 404);
    let (_, cluster) = c.get(a, "/v1/cluster").await.unwrap();
    assert_eq!(cluster["members"].as_array().unwrap().len(), 3);
    assert_eq!(cluster["leader"].as_u64(), Some(leader));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_killed_during_a_blocking_acquire_never_hangs() {
    let c = Arc::new(tokio::sync::Mutex::new(Cluster::three().await));
    let (follower, leader, holder, waiter) = {
        let c = c.lock().await;
        let leader = c.leader(1).await;
        let follower = (1..=3).find(|id| *id != leader).unwrap();
        let holder = c.lease(follower, 60_000).await;
        let waiter = c.lease(follower, 60_000).await;
        let (status, _) = c
            .post(follower, "/v1/locks/K/acquire", json!({"lease_id": holder}))
            .await;
        assert_eq!(status, 200);
        (follower, leader, holder, waiter)
    };
    let wait_ms = 3_000;
    let request = {
        let c = c.lock().await;
        c.http
            .post(c.node(follower).url("/v1/locks/K/acquire"))
            .json(&json!({"lease_id": waiter, "wait_ms": wait_ms}))
            .timeout(Duration::from_millis(wait_ms + 30_000))
            .send()
    };
    let started = Instant::now();
    let pending = tokio::spawn(request);
    tokio::time::sleep(Duration::from_millis(500)).await;
    c.lock().await.nodes.get_mut(&leader).unwrap().kill();
    let response = pending.await.unwrap().expect("an answer, not a hang");
    let elapsed = started.elapsed();
    let status = response.status().as_u16();
    let body: serde_json::Value = response.json().await.unwrap();
    assert!(
        matches!(status, 409 | 503 | 504),
        "the holder still holds: a timeout or a clear error, got {status}: {body}"
    );
    assert!(body["error"]["code"].is_string());
    assert!(
        elapsed < Duration::from_millis(wait_ms + 20_000),
        "answered after {elapsed:?}"
    );
    let _ = holder;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_leader_requests_get_503_no_leader_with_retry_after() {
    let mut c = Cluster::three().await;
    let leader = c.leader(1).await;
    let survivor = (1..=3).find(|id| *id != leader).unwrap();
    for id in (1..=3).filter(|id| *id != survivor) {
        c.nodes.get_mut(&id).unwrap().kill();
    }
    let response = c
        .http
        .post(c.node(survivor).url("/v1/leases"))
        .json(&json!({"ttl_ms": 5_000}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 503);
    assert!(response.headers().contains_key("retry-after"));
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "no_leader", "{body}");
    // Health still answers; readiness does not, once the survivor's election timer has
    // fired and it no longer names the dead leader (bounded: a loaded machine may be slow).
    assert_eq!(c.get(survivor, "/healthz").await.unwrap().0, 200);
    c.wait_unready(survivor, "still ready without a quorum")
        .await;
}

/// Every node killed at once and restarted: openraft brings the old leader back in its
/// old term, and the first linearizable read must still see the last acknowledged write
/// (the committed index it reloads can be stale; found by the Jepsen harness).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_read_after_killing_every_node_sees_the_last_acknowledged_write() {
    let mut c = Cluster::three().await;
    for round in 0..3 {
        let leader = c.leader(1).await;
        let last = 40;
        for i in 0..=last {
            let (status, _) = c
                .put(
                    leader,
                    "/v1/kv/counter",
                    json!({"value": format!("{round}-{i}")}),
                )
                .await;
            assert_eq!(status, 200);
        }
        // The leader first, so it comes back first and resumes its term.
        let order: Vec<u64> = std::iter::once(leader)
            .chain((1..=3).filter(|id| *id != leader))
            .collect();
        for id in &order {
            c.nodes.get_mut(id).unwrap().kill();
        }
        for id in &order {
            c.start_again(*id);
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        let value = loop {
            let mut seen = None;
            for id in &order {
                if let Ok((200, body)) = c.get(*id, "/v1/kv/counter").await {
                    seen = body["value"].as_str().map(str::to_owned);
                    break;
                }
            }
            if let Some(v) = seen {
                break v;
            }
            assert!(
                Instant::now() < deadline,
                "no read succeeded after the restart"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        assert_eq!(
            value,
            format!("{round}-{last}"),
            "stale read after a full restart"
        );
    }
}

/// A watch served by a node that has lost its leader ends with a `no_leader` error event
/// (etcd's require-leader) instead of sending progress forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_on_a_node_without_a_leader_ends_with_an_error_event() {
    use futures_util::StreamExt;
    let mut c = Cluster::three().await;
    let leader = c.leader(1).await;
    let survivor = (1..=3).find(|id| *id != leader).unwrap();
    let response = c
        .http
        .get(c.node(survivor).url("/v1/watch?prefix=w/"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    for id in (1..=3).filter(|id| *id != survivor) {
        c.nodes.get_mut(&id).unwrap().kill();
    }
    let mut body = response.bytes_stream();
    let mut text = String::new();
    let read = async {
        while let Some(chunk) = body.next().await {
            text.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(20), read)
        .await
        .expect("the stream ended");
    assert!(text.contains("event: error"), "{text}");
    assert!(text.contains("\"code\":\"no_leader\""), "{text}");
}
