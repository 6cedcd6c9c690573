//! The web console as a person sees it: real `baton serve` processes, a real headless
//! Chromium, and what the page shows (its text, updated live, its confirmations, its
//! banners), with screenshots in `target/console-screenshots/` to look at.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod browser;
mod common;

use browser::Browser;
use common::Cluster;
use serde_json::json;
use std::path::PathBuf;
use std::time::Duration;

fn shot(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../target/console-screenshots")
        .join(format!("{name}.png"))
}

/// Holders, queues, fences, ages and history of locks; semaphores, elections, leases and
/// hot locks; a live update without a reload; a force-release behind a confirmation that
/// names the fence it frees.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_shows_who_holds_and_who_waits_live_and_force_releases_after_confirmation() {
    let c = Cluster::single().await;
    let mut b = Browser::start().await;

    // A lock held by worker-1, with worker-2 waiting behind it (a held-open request).
    let first = c.lease(1, 60_000).await;
    let second = c.lease(1, 60_000).await;
    let (status, grant) = c
        .post(
            1,
            "/v1/locks/orders%2Fdb/acquire",
            json!({"lease_id": first, "owner": "worker-1"}),
        )
        .await;
    assert_eq!(status, 200, "{grant}");
    let fence = grant["fence"].as_u64().unwrap();
    let waiter = {
        let http = c.http.clone();
        let url = c.node(1).url("/v1/locks/orders%2Fdb/acquire");
        tokio::spawn(async move {
            let body = json!({"lease_id": second, "owner": "worker-2", "wait_ms": 60_000});
            let response = http.post(url).json(&body).send().await.unwrap();
            let status = response.status().as_u16();
            (status, response.json::<serde_json::Value>().await.unwrap())
        })
    };
    while c.lock_queue(1, "orders%2Fdb").await.is_empty() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A semaphore, an election and an ephemeral key.
    let (status, permits) = c
        .post(
            1,
            "/v1/semaphores/pool/acquire",
            json!({"lease_id": first, "owner": "worker-1", "limit": 3, "permits": 2}),
        )
        .await;
    assert_eq!(status, 200, "{permits}");
    let permits_fence = permits["fence"].as_u64().unwrap();
    let (status, _) = c
        .post(
            1,
            "/v1/elections/leader%2Fapi/campaign",
            json!({"lease_id": second, "value": "node-a.example:8080"}),
        )
        .await;
    assert_eq!(status, 200);

    // The locks view: holder, fence, queue length, and a held-for time by the node's clock.
    b.open(&c.node(1).url("/ui/locks")).await;
    b.wait_for_text(&["orders/db", "worker-1", &fence.to_string(), "held"])
        .await;
    b.wait_for(
        "document.querySelector('#live').textContent.startsWith('live')",
        "the live stream",
    )
    .await;
    b.screenshot(&shot("locks")).await;

    // The lock's page: holder, queue in order with its wait and deadline, history.
    b.open(&c.node(1).url("/ui/locks/orders%2Fdb")).await;
    b.wait_for_text(&[
        "Holders",
        "worker-1",
        "worker-2",
        "lock_granted",
        "lock_queued",
    ])
    .await;
    let text = b.text().await;
    assert!(text.contains("Queue, in grant order"), "{text}");
    b.screenshot(&shot("lock")).await;

    // Live: the holder releases over the API; the page shows worker-2 holding with a new
    // fence, without a reload (a marker set in the page survives).
    b.eval("window.__kept = 'same page'; true").await;
    let (status, body) = c
        .post(
            1,
            "/v1/locks/orders%2Fdb/release",
            json!({"lease_id": first, "owner": "worker-1"}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let (status, granted) = waiter.await.unwrap();
    assert_eq!(status, 200, "{granted}");
    let new_fence = granted["fence"].as_u64().unwrap();
    assert!(new_fence > fence);
    b.wait_for_text(&["lock_released", &new_fence.to_string(), "Nobody waits."])
        .await;
    assert_eq!(b.eval("window.__kept").await, json!("same page"));

    // Force-release through the page: the confirmation names the fence it frees, and the
    // lock is free afterwards.
    b.eval("document.querySelector('main button.danger').click(); true")
        .await;
    b.wait_for(
        "document.querySelector('#confirm-dialog').open",
        "the confirmation",
    )
    .await;
    let confirm = b
        .eval("document.querySelector('#confirm-dialog').innerText")
        .await;
    let confirm = confirm.as_str().unwrap();
    assert!(confirm.contains(&format!("fence {new_fence}")), "{confirm}");
    assert!(confirm.contains("worker-2"), "{confirm}");
    b.screenshot(&shot("force-release")).await;
    b.eval("document.querySelector('#confirm-ok').click(); true")
        .await;
    b.wait_for_text(&["lock_force_released", "Free."]).await;
    let (_, state) = c.get(1, "/v1/locks/orders%2Fdb").await.unwrap();
    assert_eq!(state["holders"], json!([]), "{state}");

    // Semaphores, elections, leases (a countdown from the leader's clock), hot locks.
    b.open(&c.node(1).url("/ui/semaphores")).await;
    b.wait_for_text(&["pool", "worker-1", "×2"]).await;
    b.open(&c.node(1).url("/ui/elections")).await;
    b.wait_for_text(&["leader/api", "node-a.example:8080"])
        .await;
    b.open(&c.node(1).url("/ui/leases")).await;
    b.wait_for_text(&[&first.to_string(), "pool", "leader/api", "Revoke"])
        .await;
    let remaining = b
        .eval("document.querySelector('.tick[data-dir=down]').dataset.base")
        .await;
    let remaining: u64 = remaining.as_str().unwrap().parse().unwrap();
    assert!(remaining > 0 && remaining <= 60_000, "{remaining}");
    b.screenshot(&shot("leases")).await;

    // Revoke through the page: the confirmation names the fence of the permits it frees.
    b.eval(&format!(
        "[...document.querySelectorAll('main tbody tr')].find(r => r.cells[0].innerText === '{first}').querySelector('button.danger').click(); true"
    ))
    .await;
    b.wait_for_text(&[&format!("fence {permits_fence} freed")])
        .await;
    b.eval("document.querySelector('#confirm-ok').click(); true")
        .await;
    b.wait_for(
        "!document.querySelector('#confirm-dialog').open",
        "the dialog to close",
    )
    .await;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while c.get(1, &format!("/v1/leases/{first}")).await.unwrap().0 != 404 {
        assert!(
            std::time::Instant::now() < deadline,
            "lease {first} revoked"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    b.open(&c.node(1).url("/ui/hot")).await;
    b.wait_for_text(&["orders/db", "grants/s"]).await;
    b.screenshot(&shot("hot-locks")).await;
    b.open(&c.node(1).url("/ui/events")).await;
    b.wait_for_text(&["Events"]).await;
}

/// Against a follower: the cluster view with replication read from the leader; with the
/// quorum gone a banner says so; after it returns, the stream resumes from the last
/// revision it saw and no event is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_on_a_follower_warns_without_a_leader_and_resumes_without_losing_events() {
    let mut c = Cluster::three().await;
    let leader = c.leader(1).await;
    let follower = (1..=3).find(|id| *id != leader).unwrap();
    let other = (1..=3).find(|id| *id != leader && *id != follower).unwrap();
    let mut b = Browser::start().await;

    b.open(&c.node(follower).url("/ui/cluster")).await;
    b.wait_for_text(&[
        &format!("This page talks to node {follower}"),
        "leader",
        "healthy",
    ])
    .await;
    b.screenshot(&shot("cluster")).await;

    b.open(&c.node(follower).url("/ui/events")).await;
    b.wait_for(
        "document.querySelector('#live').textContent.startsWith('live')",
        "the live stream",
    )
    .await;
    for i in 0..3 {
        let (status, _) = c
            .put(
                follower,
                &format!("/v1/kv/console/{i}"),
                json!({"value": "x"}),
            )
            .await;
        assert_eq!(status, 200);
    }
    b.wait_for_text(&["console/0", "console/1", "console/2"])
        .await;

    // The other two nodes go: no quorum, no leader; the page says so.
    c.nodes.get_mut(&leader).unwrap().kill();
    c.nodes.get_mut(&other).unwrap().kill();
    b.wait_for_text(&["No leader"]).await;
    b.screenshot(&shot("no-leader")).await;

    // They come back; writes made while the page reconnects all show, once each.
    c.start_again(leader);
    c.start_again(other);
    c.wait_ready().await;
    for i in 3..6 {
        let (status, body) = c
            .put(
                follower,
                &format!("/v1/kv/console/{i}"),
                json!({"value": "y"}),
            )
            .await;
        assert_eq!(status, 200, "{body}");
    }
    b.wait_for_text(&["console/3", "console/4", "console/5"])
        .await;
    b.wait_for(
        "!document.body.innerText.includes('No leader')",
        "the banner to go",
    )
    .await;
    let puts = b
        .eval(
            "[...document.querySelectorAll('main tbody tr')].map(r => r.innerText).filter(t => t.includes('key_put') && t.includes('console/')).length",
        )
        .await;
    assert_eq!(puts, json!(6), "each put once");
}

/// With `--auth`: the page asks for a token, keeps it in the tab, shows only what the
/// token's principal may read, says when live updates are not allowed, and an admin action
/// with a token that is not an admin's is refused and says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_asks_for_a_token_and_shows_only_what_it_may_read() {
    let hash = baton_http_api::auth::token_hash;
    let dir = tempfile::TempDir::new().unwrap();
    let file = dir.path().join("auth.toml");
    std::fs::write(
        &file,
        format!(
            r#"
[[principal]]
name = "reader"
token_sha256 = "{}"
rules = [{{ namespace = "*", prefix = "orders/", access = "read" }}]

[[principal]]
name = "ops"
token_sha256 = "{}"
admin = true
"#,
            hash("reader-token"),
            hash("ops-token")
        ),
    )
    .unwrap();
    let c = Cluster::single_with(&["--auth", file.to_str().unwrap()]).await;
    let acquire = |name: &'static str| {
        let http = c.http.clone();
        let base = c.node(1).url("");
        async move {
            let lease: serde_json::Value = http
                .post(format!("{base}/v1/leases"))
                .bearer_auth("ops-token")
                .json(&json!({"ttl_ms": 60_000}))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            let response = http
                .post(format!("{base}/v1/locks/{name}/acquire"))
                .bearer_auth("ops-token")
                .json(&json!({"lease_id": lease["lease_id"], "owner": "svc"}))
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), 200);
        }
    };
    acquire("orders%2Fvisible").await;
    acquire("payroll%2Fhidden").await;

    let mut b = Browser::start().await;
    b.open(&c.node(1).url("/ui/locks")).await;
    b.wait_for_text(&["requires a token"]).await;

    // The reader's token, typed into the dialog.
    b.eval("document.querySelector('#token-button').click(); true")
        .await;
    b.eval("document.querySelector('#token-input').value = 'reader-token'; document.querySelector('#token-form button[value=save]').click(); true")
        .await;
    b.wait_for_text(&["orders/visible", "No live updates"])
        .await;
    assert!(!b.text().await.contains("payroll/hidden"));
    assert_eq!(
        b.eval("sessionStorage.getItem('baton.token')").await,
        json!("reader-token")
    );

    // Not an admin: the force-release is refused and the page says why.
    b.eval("document.querySelector('main button.danger').click(); true")
        .await;
    b.wait_for(
        "document.querySelector('#confirm-dialog').open",
        "the confirmation",
    )
    .await;
    b.eval("document.querySelector('#confirm-ok').click(); true")
        .await;
    b.wait_for_text(&["Refused", "admin token"]).await;
    b.screenshot(&shot("refused")).await;
    let held: serde_json::Value = c
        .http
        .get(c.node(1).url("/v1/locks/orders%2Fvisible"))
        .bearer_auth("ops-token")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(held["holders"][0]["owner"], "svc", "{held}");
}
