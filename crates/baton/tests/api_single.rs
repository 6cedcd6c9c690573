//! The /v1 API through HTTP only, against a real single-node `baton serve`.

#![allow(clippy::unwrap_used)] // tests: a failure is reported by the panic

mod common;

use common::*;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

fn acquire_body(lease: u64, owner: &str, wait_ms: u64) -> Value {
    json!({"lease_id": lease, "owner": owner, "wait_ms": wait_ms})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_grant_keepalive_get_list_revoke() {
    let c = Cluster::single().await;
    let lease = c.lease(1, 5_000).await;
    let (status, body) = c
        .post(1, &format!("/v1/leases/{lease}/keepalive"), json!(null))
        .await;
    assert_eq!(
        (status, body["ttl_ms"].as_u64()),
        (200, Some(5_000)),
        "{body}"
    );
    c.put(1, "/v1/kv/eph", json!({"value": "v", "lease_id": lease}))
        .await;
    c.post(1, "/v1/locks/L/acquire", acquire_body(lease, "w", 0))
        .await;
    let (status, info) = c.get(1, &format!("/v1/leases/{lease}")).await.unwrap();
    assert_eq!(status, 200);
    assert_eq!(info["keys"], json!(["eph"]));
    assert_eq!(info["claims"][0]["name"], "L");
    let remaining = info["remaining_ms"].as_u64().unwrap();
    assert!(remaining > 0 && remaining <= 5_000, "{info}");
    let (_, list) = c.get(1, "/v1/leases").await.unwrap();
    assert_eq!(list["leases"][0]["lease_id"].as_u64(), Some(lease));
    let (status, revoked) = c.delete(1, &format!("/v1/leases/{lease}")).await;
    assert_eq!(status, 200);
    assert_eq!(
        (
            revoked["keys_deleted"].as_u64(),
            revoked["holds_released"].as_u64()
        ),
        (Some(1), Some(1))
    );
    let (status, err) = c
        .post(1, &format!("/v1/leases/{lease}/keepalive"), json!(null))
        .await;
    assert_eq!(
        (status, err["error"]["code"].as_str()),
        (404, Some("lease_not_found"))
    );
    let (status, _) = c.get(1, "/v1/kv/eph").await.unwrap();
    assert_eq!(status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_queue_of_ten_waiters_is_granted_in_order_with_increasing_fences() {
    let c = std::sync::Arc::new(Cluster::single().await);
    let holder = c.lease(1, 60_000).await;
    let (status, first) = c
        .post(1, "/v1/locks/Q/acquire", acquire_body(holder, "h", 0))
        .await;
    assert_eq!(status, 200, "{first}");
    let mut waiters = Vec::new();
    for i in 0..10u64 {
        let lease = c.lease(1, 60_000).await;
        let cc = c.clone();
        waiters.push((
            lease,
            tokio::spawn(async move {
                cc.post(1, "/v1/locks/Q/acquire", acquire_body(lease, "w", 60_000))
                    .await
            }),
        ));
        // Enqueue strictly one after another.
        loop {
            let (_, state) = c.get(1, "/v1/locks/Q").await.unwrap();
            if state["queue"].as_array().unwrap().len() as u64 == i + 1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    let mut current = (holder, "h".to_string());
    let mut fences = vec![first["fence"].as_u64().unwrap()];
    for (i, (lease, task)) in waiters.into_iter().enumerate() {
        let (status, _) = c
            .post(
                1,
                "/v1/locks/Q/release",
                json!({"lease_id": current.0, "owner": current.1}),
            )
            .await;
        assert_eq!(status, 200);
        let (status, grant) = task.await.unwrap();
        assert_eq!(status, 200, "{grant}");
        assert_eq!(
            grant["lease_id"].as_u64(),
            Some(lease),
            "grant order follows enqueue order"
        );
        assert_eq!(grant["queued_position"].as_u64(), Some(i as u64 + 1));
        fences.push(grant["fence"].as_u64().unwrap());
        current = (lease, "w".into());
    }
    assert!(fences.windows(2).all(|w| w[0] < w[1]), "fences {fences:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reentrancy_owner_only_release_and_stale_fence_release() {
    let c = Cluster::single().await;
    let a = c.lease(1, 60_000).await;
    let b = c.lease(1, 60_000).await;
    let (_, g1) = c
        .post(1, "/v1/locks/R/acquire", acquire_body(a, "w", 0))
        .await;
    let (_, g2) = c
        .post(1, "/v1/locks/R/acquire", acquire_body(a, "w", 0))
        .await;
    assert_eq!(g2["fence"], g1["fence"], "re-entry keeps the fence");
    assert_eq!(g2["count"].as_u64(), Some(2));
    // Only the holder may release.
    let (status, err) = c
        .post(
            1,
            "/v1/locks/R/release",
            json!({"lease_id": b, "owner": "w"}),
        )
        .await;
    assert_eq!(
        (status, err["error"]["code"].as_str()),
        (409, Some("not_holder"))
    );
    assert_eq!(err["error"]["fence"], g1["fence"]);
    let (_, r1) = c
        .post(
            1,
            "/v1/locks/R/release",
            json!({"lease_id": a, "owner": "w"}),
        )
        .await;
    assert_eq!(
        (r1["released"].as_bool(), r1["count"].as_u64()),
        (Some(false), Some(1))
    );
    let old = g1["fence"].as_u64().unwrap();
    let (_, r2) = c
        .post(
            1,
            "/v1/locks/R/release",
            json!({"lease_id": a, "owner": "w", "fence": old}),
        )
        .await;
    assert_eq!(r2["released"].as_bool(), Some(true));
    let (_, g3) = c
        .post(1, "/v1/locks/R/acquire", acquire_body(a, "w", 0))
        .await;
    // A retried release of the old grant must not free the new one.
    let (status, err) = c
        .post(
            1,
            "/v1/locks/R/release",
            json!({"lease_id": a, "owner": "w", "fence": old}),
        )
        .await;
    assert_eq!(
        (status, err["error"]["code"].as_str()),
        (409, Some("not_holder"))
    );
    let (_, state) = c.get(1, "/v1/locks/R").await.unwrap();
    assert_eq!(state["holders"][0]["fence"], g3["fence"]);
    // The fence check knows which grant is current.
    let (_, check) = c.post(1, "/v1/locks/R/check", json!({"fence": old})).await;
    assert_eq!(
        (check["current"].as_bool(), &check["fence"]),
        (Some(false), &g3["fence"])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeout_racing_a_grant_never_loses_the_grant() {
    let c = std::sync::Arc::new(Cluster::single().await);
    let holder = c.lease(1, 60_000).await;
    let waiter = c.lease(1, 60_000).await;
    let (mut grants, mut timeouts) = (0, 0);
    for trial in 0..12u64 {
        let name = format!("/v1/locks/race{trial}");
        c.post(1, &format!("{name}/acquire"), acquire_body(holder, "h", 0))
            .await;
        let cc = c.clone();
        let n = name.clone();
        let wait = tokio::spawn(async move {
            cc.post(1, &format!("{n}/acquire"), acquire_body(waiter, "w", 300))
                .await
        });
        // Release around the deadline: sometimes before, sometimes after.
        tokio::time::sleep(Duration::from_millis(240 + trial * 10)).await;
        c.post(
            1,
            &format!("{name}/release"),
            json!({"lease_id": holder, "owner": "h"}),
        )
        .await;
        let (status, body) = wait.await.unwrap();
        let (_, state) = c.get(1, &name).await.unwrap();
        let holds = state["holders"]
            .as_array()
            .unwrap()
            .iter()
            .any(|h| h["lease_id"].as_u64() == Some(waiter));
        match status {
            200 => {
                grants += 1;
                assert!(holds, "a 200 grant must be held: {state}");
            }
            409 => {
                timeouts += 1;
                assert_eq!(body["error"]["code"], "timeout");
                assert!(!holds, "a timeout must not leave a hold: {state}");
                assert!(state["queue"].as_array().unwrap().is_empty());
            }
            other => panic!("unexpected {other}: {body}"),
        }
    }
    assert_eq!(grants + timeouts, 12);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_disconnect_cancels_its_wait() {
    let c = Cluster::single().await;
    let holder = c.lease(1, 60_000).await;
    let waiter = c.lease(1, 60_000).await;
    c.post(1, "/v1/locks/D/acquire", acquire_body(holder, "h", 0))
        .await;
    let impatient = reqwest::Client::builder()
        .timeout(Duration::from_millis(400))
        .build()
        .unwrap();
    let gone = impatient
        .post(c.node(1).url("/v1/locks/D/acquire"))
        .json(&acquire_body(waiter, "w", 60_000))
        .send()
        .await;
    assert!(gone.is_err(), "the client gave up");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, state) = c.get(1, "/v1/locks/D").await.unwrap();
        if state["queue"].as_array().unwrap().is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the abandoned wait stayed queued: {state}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The holder releases: nobody (least of all the departed waiter) gets the lock.
    c.post(
        1,
        "/v1/locks/D/release",
        json!({"lease_id": holder, "owner": "h"}),
    )
    .await;
    let (_, state) = c.get(1, "/v1/locks/D").await.unwrap();
    assert!(state["holders"].as_array().unwrap().is_empty(), "{state}");
}

/// Waits (at most 10 s) until lock `name` has neither holders other than `keep` nor waiters.
async fn wait_until_only(c: &Cluster, name: &str, keep: Option<u64>) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, state) = c.get(1, &format!("/v1/locks/{name}")).await.unwrap();
        let holders: Vec<u64> = state["holders"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h["lease_id"].as_u64().unwrap())
            .collect();
        if state["queue"].as_array().unwrap().is_empty() && holders == Vec::from_iter(keep) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "a client that went away left something behind: {state}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Clients that give up at many points of a held-open acquire on a held lock (before the
/// request reaches the server, while it is proposed, while it waits) leave no queue entry
/// behind, and the lock's next grant goes to a client that is there. (A grant the server
/// has already answered belongs to the lease: if the answer is lost on the way, the lease's
/// TTL bounds it, or a retry with its `Idempotency-Key` gets it back; see spec §2.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_dropped_at_any_moment_leave_no_waiter_and_no_grant_behind() {
    let c = Cluster::single().await;
    let lease = c.lease(1, 60_000).await;
    let holder = c.lease(1, 60_000).await;
    let (status, _) = c
        .post(1, "/v1/locks/R/acquire", acquire_body(holder, "h", 0))
        .await;
    assert_eq!(status, 200);
    // Timeouts spread over the life of a request; the pattern repeats so each lands at
    // several points whatever this machine's speed.
    let gives_up_after_ms = [1, 2, 3, 5, 8, 13, 21, 34, 55, 89];
    for (i, ms) in gives_up_after_ms.iter().cycle().take(40).enumerate() {
        let impatient = reqwest::Client::builder()
            .timeout(Duration::from_millis(*ms))
            .build()
            .unwrap();
        let _ = impatient
            .post(c.node(1).url("/v1/locks/R/acquire"))
            .json(&acquire_body(lease, &format!("w{i}"), 60_000))
            .send()
            .await;
    }
    wait_until_only(&c, "R", Some(holder)).await;
    // The holder releases: nobody who left gets the lock; a new client gets it at once.
    c.post(
        1,
        "/v1/locks/R/release",
        json!({"lease_id": holder, "owner": "h"}),
    )
    .await;
    wait_until_only(&c, "R", None).await;
    let (status, body) = c
        .post(1, "/v1/locks/R/acquire", acquire_body(lease, "last", 0))
        .await;
    assert_eq!(status, 200, "{body}");
}

/// A held-open acquire whose connection dropped keeps its place for a retry with the same
/// `Idempotency-Key`: the retry is served from that place (ahead of a later waiter) instead
/// of `not_waiting`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_with_its_key_takes_up_the_place_of_a_dropped_wait() {
    let c = std::sync::Arc::new(Cluster::single().await);
    let holder = c.lease(1, 60_000).await;
    let first = c.lease(1, 60_000).await;
    let later = c.lease(1, 60_000).await;
    c.post(1, "/v1/locks/K/acquire", acquire_body(holder, "h", 0))
        .await;
    let acquire_with_key = |timeout_ms: u64| {
        let c = c.clone();
        async move {
            let client = reqwest::Client::builder()
                .timeout(Duration::from_millis(timeout_ms))
                .build()
                .unwrap();
            let response = client
                .post(c.node(1).url("/v1/locks/K/acquire"))
                .header("idempotency-key", "first-try-1")
                .json(&acquire_body(first, "f", 30_000))
                .send()
                .await?;
            let status = response.status().as_u16();
            Ok::<_, reqwest::Error>((status, response.json::<Value>().await?))
        }
    };
    // The first try queues, then its connection drops.
    assert!(acquire_with_key(500).await.is_err(), "the client gave up");
    // Another client queues behind it.
    let behind = {
        let c = c.clone();
        tokio::spawn(async move {
            c.post(1, "/v1/locks/K/acquire", acquire_body(later, "l", 30_000))
                .await
        })
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, state) = c.get(1, "/v1/locks/K").await.unwrap();
        let queue: Vec<u64> = state["queue"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w["lease_id"].as_u64().unwrap())
            .collect();
        if queue == [first, later] {
            break;
        }
        assert!(Instant::now() < deadline, "queue: {state}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The retry takes the place up; the holder releases; the retry gets the lock.
    let retry = tokio::spawn(acquire_with_key(30_000));
    tokio::time::sleep(Duration::from_millis(300)).await;
    c.post(
        1,
        "/v1/locks/K/release",
        json!({"lease_id": holder, "owner": "h"}),
    )
    .await;
    let (status, granted) = retry.await.unwrap().unwrap();
    assert_eq!(status, 200, "{granted}");
    assert_eq!(granted["lease_id"].as_u64(), Some(first), "{granted}");
    // The later waiter is next, after the retry's release, not before.
    assert!(!behind.is_finished());
    c.post(
        1,
        "/v1/locks/K/release",
        json!({"lease_id": first, "owner": "f"}),
    )
    .await;
    let (status, body) = behind.await.unwrap();
    assert_eq!((status, body["lease_id"].as_u64()), (200, Some(later)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_expiry_frees_locks_and_grants_the_next_waiter_after_the_lock_delay() {
    let c = std::sync::Arc::new(Cluster::single().await);
    // The leader starts the TTL when it applies the grant, after this instant.
    let started = Instant::now();
    let doomed = c.lease(1, 1_000).await;
    let next = c.lease(1, 60_000).await;
    let (status, _) = c
        .post(
            1,
            "/v1/locks/E/acquire",
            json!({"lease_id": doomed, "owner": "d", "lock_delay_ms": 1_000}),
        )
        .await;
    assert_eq!(status, 200);
    let cc = c.clone();
    let wait = tokio::spawn(async move {
        cc.post(1, "/v1/locks/E/acquire", acquire_body(next, "n", 30_000))
            .await
    });
    let (status, grant) = wait.await.unwrap();
    let waited = started.elapsed();
    assert_eq!(status, 200, "{grant}");
    // TTL 1 s (not kept alive) and then a 1 s lock-delay on the leader's clock.
    assert!(
        waited >= Duration::from_millis(2_000),
        "granted after {waited:?}"
    );
    let (status, _) = c.get(1, &format!("/v1/leases/{doomed}")).await.unwrap();
    assert_eq!(status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotent_retry_of_an_acquire_never_queues_twice() {
    let c = Cluster::single().await;
    let holder = c.lease(1, 60_000).await;
    let waiter = c.lease(1, 60_000).await;
    c.post(1, "/v1/locks/I/acquire", acquire_body(holder, "h", 0))
        .await;
    let send = |key: &'static str| {
        c.http
            .post(c.node(1).url("/v1/locks/I/acquire"))
            .header("Idempotency-Key", key)
            .json(&acquire_body(waiter, "w", 300))
            .send()
    };
    let first = send("retry-1").await.unwrap();
    assert_eq!(first.status(), 409);
    let revision = c.revision(1).await;
    let again = send("retry-1").await.unwrap();
    assert_eq!(again.status(), 409, "the retry returns the same outcome");
    let (_, state) = c.get(1, "/v1/locks/I").await.unwrap();
    assert!(state["queue"].as_array().unwrap().is_empty());
    assert_eq!(c.revision(1).await, revision, "the retry changed nothing");
    // A re-entrant acquire retried with its key is counted once.
    for _ in 0..2 {
        let r = c
            .http
            .post(c.node(1).url("/v1/locks/I/acquire"))
            .header("Idempotency-Key", "reenter-1")
            .json(&acquire_body(holder, "h", 0))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }
    let (_, state) = c.get(1, "/v1/locks/I").await.unwrap();
    assert_eq!(state["holders"][0]["count"].as_u64(), Some(2));
}

async fn read_events(
    c: &Cluster,
    query: &str,
    last_event_id: Option<u64>,
    count: usize,
) -> Vec<(u64, String)> {
    use futures_util::StreamExt;
    let mut request = c.http.get(c.node(1).url(&format!("/v1/watch?{query}")));
    if let Some(id) = last_event_id {
        request = request.header("Last-Event-ID", id.to_string());
    }
    let response = request.send().await.unwrap();
    assert_eq!(response.status(), 200);
    let mut stream = response.bytes_stream();
    let mut text = String::new();
    let mut events = Vec::new();
    while events.len() < count {
        let chunk = tokio::time::timeout(Duration::from_secs(10), stream.next())
            .await
            .expect("events in time")
            .unwrap()
            .unwrap();
        text.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = text.find("\n\n") {
            let block: String = text.drain(..end + 2).collect();
            let id = block
                .lines()
                .find_map(|l| l.strip_prefix("id: "))
                .map(|v| v.parse::<u64>().unwrap());
            let kind = block
                .lines()
                .find_map(|l| l.strip_prefix("event: "))
                .map(str::to_owned);
            if let (Some(id), Some(kind)) = (id, kind)
                && kind != "progress"
            {
                events.push((id, kind));
            }
        }
    }
    events
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_resumes_without_gap_or_duplicate() {
    let c = Cluster::single().await;
    for i in 0..10 {
        c.put(
            1,
            &format!("/v1/kv/app/{i}"),
            json!({"value": i.to_string()}),
        )
        .await;
        c.put(1, "/v1/kv/other", json!({"value": "x"})).await;
    }
    let first = read_events(&c, "prefix=app/&start_revision=1", None, 4).await;
    let last_seen = first.last().unwrap().0;
    let rest = read_events(&c, "prefix=app/", Some(last_seen), 6).await;
    let all: Vec<u64> = first.iter().chain(&rest).map(|(id, _)| *id).collect();
    assert_eq!(
        all,
        (0..10).map(|i| 1 + 2 * i).collect::<Vec<_>>(),
        "ordered, no gap, no duplicate"
    );
    assert!(first.iter().chain(&rest).all(|(_, kind)| kind == "key_put"));
    // Several filters combine: only what passes every one of them.
    let both = read_events(&c, "prefix=app/&key=app/3&start_revision=1", None, 1).await;
    assert_eq!(both.iter().map(|(id, _)| *id).collect::<Vec<_>>(), [7]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_start_older_than_the_window_is_410_compacted() {
    let c = Cluster::single_with(&["--event-window", "5"]).await;
    for i in 0..12 {
        c.put(1, "/v1/kv/k", json!({"value": i.to_string()})).await;
    }
    let (status, body) = c.get(1, "/v1/watch?start_revision=2").await.unwrap();
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (410, Some("compacted")),
        "{body}"
    );
    assert_eq!(body["error"]["oldest_revision"].as_u64(), Some(8));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_node_restart_keeps_its_data() {
    let mut c = Cluster::single().await;
    c.put(1, "/v1/kv/durable", json!({"value": "yes"})).await;
    let lease = c.lease(1, 60_000).await;
    let (_, grant) = c
        .post(1, "/v1/locks/keep/acquire", acquire_body(lease, "w", 0))
        .await;
    c.restart_cleanly(1).await;
    let (status, kv) = c.get(1, "/v1/kv/durable").await.unwrap();
    assert_eq!((status, kv["value"].as_str()), (200, Some("yes")));
    let (_, state) = c.get(1, "/v1/locks/keep").await.unwrap();
    assert_eq!(state["holders"][0]["fence"], grant["fence"]);
    // And after a crash (SIGKILL) too.
    c.restart(1);
    c.wait_ready().await;
    let (status, _) = c.get(1, "/v1/kv/durable").await.unwrap();
    assert_eq!(status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_mib_storage_cache_serves_more_log_than_it_holds_and_restarts() {
    let mut c = Cluster::single_with(&["--storage-cache-mib", "1"]).await;
    // About 1.2 MiB of log behind a 1 MiB cache: 300 puts of 4 KiB values.
    let value = "v".repeat(4096);
    for i in 0..300 {
        c.put(1, &format!("/v1/kv/big/{i}"), json!({ "value": value }))
            .await;
    }
    c.restart_cleanly(1).await;
    for i in [0, 150, 299] {
        let (status, kv) = c.get(1, &format!("/v1/kv/big/{i}")).await.unwrap();
        assert_eq!((status, kv["value"].as_str()), (200, Some(value.as_str())));
    }
}

#[test]
fn a_storage_cache_of_zero_mib_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_baton"))
        .arg("serve")
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .args(["--storage-cache-mib", "0"])
        .output()
        .unwrap();
    assert!(!out.status.success(), "it started: {out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--storage-cache-mib"), "{stderr}");
    assert!(!dir.path().join("data").exists(), "nothing was created");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_answers_held_open_requests_and_exits_cleanly() {
    let mut c = Cluster::single().await;
    let holder = c.lease(1, 60_000).await;
    let waiter = c.lease(1, 60_000).await;
    c.post(1, "/v1/locks/S/acquire", acquire_body(holder, "h", 0))
        .await;
    let request = c
        .http
        .post(c.node(1).url("/v1/locks/S/acquire"))
        .json(&acquire_body(waiter, "w", 120_000))
        .send();
    let pending = tokio::spawn(request);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = Instant::now();
    let server = c.nodes.get_mut(&1).unwrap();
    let pid = server.pid().unwrap();
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status();
    let response = pending.await.unwrap().unwrap();
    assert_eq!(
        response.status(),
        503,
        "the held-open request is answered at once"
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(server.terminate(), "the server exits cleanly");
}

/// A wait longer than the server holds one request open keeps its place: the request is
/// answered 202 with its place, the place stays in the queue (same position, same enqueue
/// revision) while nobody waits on it, a request naming it waits in it again, and gets the
/// grant there; a place that is gone is `not_waiting`, and a dropped take-up cancels it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_longer_than_one_request_keeps_its_place_in_the_queue() {
    let c = Cluster::from_file(1, "[limits]\nhold_ms_max = 1000\n").await;
    let (_, cluster) = c.get(1, "/v1/cluster").await.unwrap();
    assert_eq!(cluster["limits"]["hold_ms_max"], 1_000, "{cluster}");
    let [holder, first, second] = [
        c.lease(1, 60_000).await,
        c.lease(1, 60_000).await,
        c.lease(1, 60_000).await,
    ];
    c.post(1, "/v1/locks/P/acquire", acquire_body(holder, "h", 0))
        .await;

    // Two waiters of a minute each: each request is answered 202 after the hold limit.
    let (status, waiting) = c
        .post(1, "/v1/locks/P/acquire", acquire_body(first, "w", 60_000))
        .await;
    assert_eq!(status, 202, "{waiting}");
    assert_eq!(waiting["position"], 1, "{waiting}");
    let place = waiting["enqueued"].as_u64().unwrap();
    let (status, behind) = c
        .post(1, "/v1/locks/P/acquire", acquire_body(second, "w", 60_000))
        .await;
    assert_eq!((status, &behind["position"]), (202, &json!(2)), "{behind}");
    assert_eq!(c.lock_queue(1, "P").await[0], (first, place));

    // Taking the place up: held again, answered 202 again, and still first in line.
    let mut take_up = acquire_body(first, "w", 60_000);
    take_up["enqueued"] = json!(place);
    let (status, again) = c.post(1, "/v1/locks/P/acquire", take_up.clone()).await;
    assert_eq!(status, 202, "{again}");
    assert_eq!(
        (again["enqueued"].as_u64(), again["position"].as_u64()),
        (Some(place), Some(1))
    );
    let queue = c.lock_queue(1, "P").await;
    assert_eq!(queue.len(), 2, "{queue:?}");
    assert_eq!(queue[0], (first, place), "the place and its order are kept");

    // The holder releases while a take-up waits: that request gets the grant.
    let waiter = {
        let http = c.http.clone();
        let url = c.node(1).url("/v1/locks/P/acquire");
        let body = take_up.clone();
        tokio::spawn(async move {
            let response = http.post(url).json(&body).send().await.unwrap();
            let status = response.status().as_u16();
            (status, response.json::<Value>().await.unwrap())
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (status, _) = c
        .post(
            1,
            "/v1/locks/P/release",
            json!({"lease_id": holder, "owner": "h"}),
        )
        .await;
    assert_eq!(status, 200);
    let (status, grant) = waiter.await.unwrap();
    assert_eq!(status, 200, "{grant}");
    assert_eq!(grant["lease_id"], first, "{grant}");
    let fence = grant["fence"].as_u64().unwrap();

    // Naming the place again returns that grant (not a second count); another place is gone.
    let (status, same) = c.post(1, "/v1/locks/P/acquire", take_up).await;
    assert_eq!(
        (status, same["fence"].as_u64(), same["count"].as_u64()),
        (200, Some(fence), Some(1)),
        "{same}"
    );
    let mut unknown = acquire_body(first, "w", 60_000);
    unknown["enqueued"] = json!(place + 1);
    let (status, gone) = c.post(1, "/v1/locks/P/acquire", unknown).await;
    assert_eq!(
        (status, gone["error"]["code"].as_str()),
        (409, Some("not_waiting")),
        "{gone}"
    );

    // A client that drops its take-up request leaves no place behind.
    let second_place = behind["enqueued"].as_u64().unwrap();
    let mut take_up = acquire_body(second, "w", 60_000);
    take_up["enqueued"] = json!(second_place);
    let impatient = reqwest::Client::builder()
        .timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let dropped = impatient
        .post(c.node(1).url("/v1/locks/P/acquire"))
        .json(&take_up)
        .send()
        .await;
    assert!(dropped.is_err(), "the client gave up");
    wait_until_only(&c, "P", Some(first)).await;
}

/// A log that goes to a file (here, the test's log of the node's stderr) is plain text:
/// no terminal colour codes, which journald and log files would otherwise keep.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_written_to_a_file_has_no_colour_codes() {
    let c = Cluster::single().await;
    let (status, _) = c.get(1, "/v1/cluster").await.unwrap();
    assert_eq!(status, 200);
    let log = c.node(1).log();
    assert!(log.contains("INFO"), "nothing logged at info: {log}");
    assert!(!log.contains('\u{1b}'), "colour codes in {log:?}");
}
