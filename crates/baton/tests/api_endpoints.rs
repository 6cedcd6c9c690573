//! Every endpoint answers as spec §3 says, and every bad input gets its 4xx with the spec
//! error shape and changes nothing. Real `baton serve` processes, HTTP only.

#![allow(clippy::unwrap_used)] // tests: a failure is reported by the panic

mod common;

use common::*;
use reqwest::Method;
use serde_json::{Value, json};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_cas_sequential_range_delete_and_txn() {
    let c = Cluster::single().await;
    let (status, put) = c
        .put(
            1,
            "/v1/kv/app/config",
            json!({"value": "v1", "prev_revision": 0}),
        )
        .await;
    assert_eq!(status, 200, "{put}");
    let rev = put["revision"].as_u64().unwrap();
    let (status, err) = c
        .put(
            1,
            "/v1/kv/app/config",
            json!({"value": "v2", "prev_revision": 0}),
        )
        .await;
    assert_eq!(
        (status, err["error"]["code"].as_str()),
        (409, Some("cas_failed"))
    );
    assert_eq!(err["error"]["current"]["value"], "v1");
    let (status, _) = c
        .put(
            1,
            "/v1/kv/app/config",
            json!({"value": "v2", "prev_revision": rev}),
        )
        .await;
    assert_eq!(status, 200);
    let (status, kv) = c
        .get(1, "/v1/kv/app/config?consistency=serializable")
        .await
        .unwrap();
    assert_eq!(
        (status, kv["value"].as_str(), kv["version"].as_u64()),
        (200, Some("v2"), Some(2))
    );
    let (status, seq) = c.post(1, "/v1/kv/jobs/", json!({"value": "job"})).await;
    assert_eq!(status, 201);
    assert!(
        seq["key"].as_str().unwrap().starts_with("jobs/0000"),
        "{seq}"
    );
    let (_, range) = c.get(1, "/v1/kv?prefix=app/&limit=10").await.unwrap();
    assert_eq!(range["kvs"].as_array().unwrap().len(), 1);
    let (status, txn) = c
        .post(1, "/v1/txn", json!({
            "compare": [{"key": "app/config", "target": "value", "op": "equal", "value": "v2"}],
            "success": [{"op": "put", "key": "app/a", "value": "1"}, {"op": "range", "prefix": "app/"}],
            "failure": [],
        }))
        .await;
    assert_eq!(status, 200, "{txn}");
    assert_eq!(txn["succeeded"], true);
    assert_eq!(txn["results"][1]["kvs"].as_array().unwrap().len(), 2);
    let (status, err) = c.delete(1, "/v1/kv/app/a?prev_revision=1").await;
    assert_eq!(
        (status, err["error"]["code"].as_str()),
        (409, Some("cas_failed"))
    );
    let (status, del) = c.delete(1, "/v1/kv?prefix=app/").await;
    assert_eq!((status, del["deleted"].as_u64()), (200, Some(2)));
    let (status, err) = c.delete(1, "/v1/kv/app/a").await;
    assert_eq!(
        (status, err["error"]["code"].as_str()),
        (404, Some("key_not_found"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphores_elections_lock_listing_and_force_release() {
    let c = Cluster::single().await;
    let a = c.lease(1, 60_000).await;
    let b = c.lease(1, 60_000).await;
    let sem = |lease: u64, limit: u32, permits: u32| json!({"lease_id": lease, "limit": limit, "permits": permits});
    let (status, g) = c.post(1, "/v1/semaphores/pool/acquire", sem(a, 3, 2)).await;
    assert_eq!((status, g["permits"].as_u64()), (200, Some(2)), "{g}");
    let (status, err) = c.post(1, "/v1/semaphores/pool/acquire", sem(b, 4, 1)).await;
    assert_eq!(
        (
            status,
            err["error"]["code"].as_str(),
            err["error"]["limit"].as_u64()
        ),
        (409, Some("limit_mismatch"), Some(3))
    );
    let (status, err) = c.post(1, "/v1/semaphores/pool/acquire", sem(b, 3, 2)).await;
    assert_eq!(
        (status, err["error"]["code"].as_str()),
        (409, Some("lock_held"))
    );
    let (_, state) = c.get(1, "/v1/semaphores/pool").await.unwrap();
    assert_eq!(state["limit"].as_u64(), Some(3));
    let (status, _) = c
        .post(1, "/v1/semaphores/pool/release", json!({"lease_id": a}))
        .await;
    assert_eq!(status, 200);

    let (status, lead) = c
        .post(
            1,
            "/v1/elections/e/campaign",
            json!({"lease_id": a, "value": "node-a"}),
        )
        .await;
    assert_eq!(status, 200, "{lead}");
    let (status, _) = c
        .post(
            1,
            "/v1/elections/e/proclaim",
            json!({"lease_id": a, "value": "node-a2"}),
        )
        .await;
    assert_eq!(status, 200);
    let (status, err) = c
        .post(
            1,
            "/v1/elections/e/proclaim",
            json!({"lease_id": b, "value": "x"}),
        )
        .await;
    assert_eq!(
        (status, err["error"]["code"].as_str()),
        (409, Some("not_holder"))
    );
    let (_, leader) = c.get(1, "/v1/elections/e").await.unwrap();
    assert_eq!(leader["leader"]["value"], "node-a2");
    let (status, _) = c
        .post(1, "/v1/elections/e/resign", json!({"lease_id": a}))
        .await;
    assert_eq!(status, 200);
    let (_, leader) = c.get(1, "/v1/elections/e").await.unwrap();
    assert_eq!(leader["leader"], Value::Null);

    for name in ["x/1", "x/2", "y"] {
        c.post(
            1,
            &format!("/v1/locks/{}/acquire", name.replace('/', "%2F")),
            json!({"lease_id": a}),
        )
        .await;
    }
    let (_, list) = c.get(1, "/v1/locks?prefix=x/").await.unwrap();
    let names: Vec<&str> = list["locks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["x/1", "x/2"]);
    let (status, forced) = c.delete(1, "/v1/locks/y").await;
    assert_eq!(
        (status, forced["holders_released"].as_u64()),
        (200, Some(1))
    );
    let (status, err) = c.delete(1, "/v1/locks/y").await;
    assert_eq!(
        (status, err["error"]["code"].as_str()),
        (404, Some("lock_not_found"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_health_metrics_openapi_and_index() {
    let c = Cluster::single().await;
    let (status, cluster) = c.get(1, "/v1/cluster").await.unwrap();
    assert_eq!((status, cluster["leader"].as_u64()), (200, Some(1)));
    assert_eq!(cluster["members"][0]["role"], "leader");
    assert_eq!(c.get(1, "/healthz").await.unwrap().0, 200);
    assert_eq!(c.get(1, "/readyz").await.unwrap().0, 200);
    let lease = c.lease(1, 10_000).await;
    c.post(1, "/v1/locks/m/acquire", json!({"lease_id": lease}))
        .await;
    let (status, metrics) = c.get(1, "/metrics").await.unwrap();
    let metrics = metrics.as_str().unwrap().to_owned();
    assert_eq!(status, 200);
    for name in [
        "baton_http_requests_total{route=\"/v1/leases\",method=\"POST\",status=\"201\"} 1",
        "baton_http_request_duration_seconds_bucket",
        "baton_raft_term 1",
        "baton_locks_held 1",
        "baton_leases 1",
        "baton_queue_waiters 0",
        "baton_watches_open 0",
        "baton_raft_leader_changes_total",
    ] {
        assert!(metrics.contains(name), "missing {name} in\n{metrics}");
    }
    let (status, doc) = c.get(1, "/v1/openapi.json").await.unwrap();
    assert_eq!(status, 200);
    assert!(doc["paths"]["/v1/locks/{name}/acquire"]["post"].is_object());
    assert!(doc["components"]["schemas"]["AcquireRequest"].is_object());
    // Every /v1 operation documents the refusals of `--auth`.
    for status in ["401", "403", "429"] {
        assert!(
            doc["paths"]["/v1/locks/{name}/acquire"]["post"]["responses"][status].is_object(),
            "{status}"
        );
    }
    assert_eq!(
        doc["components"]["securitySchemes"]["bearer"]["scheme"],
        "bearer"
    );
    // The console: the page at `/` and any view path, its script, under a strict policy.
    for path in ["/", "/ui", "/ui/locks/a%2Fb"] {
        let page = c.http.get(c.node(1).url(path)).send().await.unwrap();
        assert!(page.headers().contains_key("x-request-id"));
        let policy = page.headers()["content-security-policy"].to_str().unwrap();
        assert!(policy.contains("script-src 'self'"), "{policy}");
        assert!(
            page.text()
                .await
                .unwrap()
                .contains("<title>baton console</title>")
        );
    }
    let script = c
        .http
        .get(c.node(1).url("/ui/assets/console.js"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        script.headers()["content-type"],
        "text/javascript; charset=utf-8"
    );
    assert!(script.text().await.unwrap().contains("/v1/watch"));
}

/// What the console reads: ages of holds and waits, listings of semaphores and elections,
/// leases with their remaining TTL and holdings, per-lock statistics, replication from the
/// leader on a follower, and the new metrics.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_reads_ages_listings_statistics_replication_and_metrics() {
    let c = Cluster::three().await;
    let leader = c.leader(1).await;
    let follower = (1..=3).find(|id| *id != leader).unwrap();
    let a = c.lease(follower, 30_000).await;
    let b = c.lease(follower, 30_000).await;
    let (status, grant) = c
        .post(
            follower,
            "/v1/locks/hot/acquire",
            json!({"lease_id": a, "owner": "one"}),
        )
        .await;
    assert_eq!(status, 200, "{grant}");
    let fence = grant["fence"].as_u64().unwrap();
    assert!(
        grant.get("held_for").is_none(),
        "no age in a grant: {grant}"
    );
    // A waiter that times out, then one that is granted after a short wait.
    let (status, timeout) = c
        .post(
            follower,
            "/v1/locks/hot/acquire",
            json!({"lease_id": b, "owner": "two", "wait_ms": 200}),
        )
        .await;
    assert_eq!(
        (status, timeout["error"]["code"].as_str()),
        (409, Some("timeout"))
    );
    let waiting = {
        let http = c.http.clone();
        let url = c.node(follower).url("/v1/locks/hot/acquire");
        tokio::spawn(async move {
            let body = json!({"lease_id": b, "owner": "two", "wait_ms": 20_000});
            http.post(url)
                .json(&body)
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        })
    };
    while c.lock_queue(follower, "hot").await.is_empty() {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    tokio::time::sleep(std::time::Duration::from_millis(150)).await;
    let (_, state) = c.get(follower, "/v1/locks/hot").await.unwrap();
    let held = &state["holders"][0]["held_for"];
    assert_eq!(held["at_least"], false, "{state}");
    assert!(held["ms"].as_u64().unwrap() >= 150, "{state}");
    let waited = &state["queue"][0]["waiting_for"];
    assert!(waited["ms"].as_u64().unwrap() >= 150, "{state}");
    let (_, list) = c.get(follower, "/v1/locks?prefix=ho").await.unwrap();
    assert!(
        list["locks"][0]["holders"][0]["held_for"]["ms"].is_u64(),
        "{list}"
    );
    let (status, release) = c
        .post(
            follower,
            "/v1/locks/hot/release",
            json!({"lease_id": a, "owner": "one", "fence": fence}),
        )
        .await;
    assert_eq!(status, 200, "{release}");
    assert_eq!(waiting.await.unwrap(), 200);

    // Semaphores and elections are listed; leases with detail say what they hold.
    let (status, _) = c
        .post(
            follower,
            "/v1/semaphores/pool/acquire",
            json!({"lease_id": a, "owner": "one", "limit": 4, "permits": 3}),
        )
        .await;
    assert_eq!(status, 200);
    let (status, _) = c
        .post(
            follower,
            "/v1/elections/boss/campaign",
            json!({"lease_id": a, "value": "me"}),
        )
        .await;
    assert_eq!(status, 200);
    let (_, sems) = c.get(follower, "/v1/semaphores").await.unwrap();
    assert_eq!(sems["semaphores"][0]["name"], "pool", "{sems}");
    assert_eq!(sems["semaphores"][0]["limit"], 4, "{sems}");
    assert_eq!(sems["semaphores"][0]["holders"][0]["permits"], 3, "{sems}");
    let (_, elections) = c.get(follower, "/v1/elections?prefix=b").await.unwrap();
    assert_eq!(
        elections["elections"][0]["leader"]["value"], "me",
        "{elections}"
    );
    assert!(
        elections["elections"][0]["leading_for"]["ms"].is_u64(),
        "{elections}"
    );
    let (_, leases) = c.get(follower, "/v1/leases?detail=true").await.unwrap();
    let mine = leases["leases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["lease_id"] == a)
        .unwrap()
        .clone();
    let remaining = mine["remaining_ms"].as_u64().unwrap();
    assert!(remaining > 0 && remaining <= 30_000, "{mine}");
    assert_eq!(mine["claims"].as_array().unwrap().len(), 2, "{mine}");
    let (_, plain) = c
        .get(follower, &format!("/v1/leases?after={a}"))
        .await
        .unwrap();
    assert!(
        plain["leases"]
            .as_array()
            .unwrap()
            .iter()
            .all(|l| l["lease_id"].as_u64() > Some(a) && l.get("remaining_ms").is_none()),
        "{plain}"
    );

    // Statistics: one grant waited, one timed out, holds ended.
    let (_, stats) = c.get(follower, "/v1/stats/locks?kind=lock").await.unwrap();
    let hot = &stats["locks"][0];
    assert_eq!(hot["name"], "hot", "{stats}");
    assert_eq!(
        (hot["grants"].as_u64(), hot["timeouts"].as_u64()),
        (Some(2), Some(1)),
        "{stats}"
    );
    assert!(hot["wait_p99_ms"].as_u64().unwrap() >= 150, "{stats}");
    assert!(hot["hold_p50_ms"].is_u64(), "{stats}");
    assert_eq!(stats["node_id"], follower, "{stats}");

    // Replication, asked of a follower, comes from the leader.
    let (status, rep) = c.get(follower, "/v1/cluster/replication").await.unwrap();
    assert_eq!(status, 200, "{rep}");
    assert_eq!(rep["leader"], leader, "{rep}");
    assert_eq!(rep["members"].as_array().unwrap().len(), 3, "{rep}");
    assert!(
        rep["members"]
            .as_array()
            .unwrap()
            .iter()
            .all(|m| m["matched_index"].is_u64()),
        "{rep}"
    );

    // Metrics: OpenMetrics, with the commit path, waits by outcome, forwarding, hot locks.
    let response = c
        .http
        .get(c.node(follower).url("/metrics"))
        .send()
        .await
        .unwrap();
    let content_type = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        content_type.starts_with("application/openmetrics-text"),
        "{content_type}"
    );
    let text = response.text().await.unwrap();
    assert!(text.ends_with("# EOF\n"), "{text}");
    for needle in [
        "baton_held_open_waits_total{kind=\"lock\",outcome=\"granted\"} 1",
        "baton_held_open_waits_total{kind=\"lock\",outcome=\"timed_out\"} 1",
        "baton_forwarded_requests_total{route=\"/baton/propose\"}",
        "baton_raft_commit_notices_total",
        "baton_answer_waits 0\n",
        "baton_lock_grants_per_second{kind=\"lock\",name=\"hot\"}",
        "baton_lock_wait_seconds{kind=\"lock\",name=\"hot\",quantile=\"0.99\"}",
        "baton_raft_apply_lag_entries",
        "baton_raft_fsync_seconds_bucket",
    ] {
        assert!(text.contains(needle), "missing {needle} in\n{text}");
    }
    let (_, on_leader) = c.get(leader, "/metrics").await.unwrap();
    let on_leader = on_leader.as_str().unwrap().to_owned();
    assert!(
        on_leader.contains("baton_raft_commit_seconds_count"),
        "{on_leader}"
    );
    assert!(
        on_leader.contains("baton_raft_proposals_per_entry_bucket"),
        "{on_leader}"
    );
}

/// The served OpenAPI document: 3.1, every `{param}` of a path declared as a path
/// parameter, every operation's error statuses documented with the `ErrorBody` schema, and
/// the limits the node enforces stated as schema constraints.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openapi_document_is_complete_and_states_the_served_limits() {
    let c = Cluster::from_file(1, "[limits]\nname_bytes_max = 100\nwait_ms_max = 7000\n").await;
    let (status, doc) = c.get(1, "/v1/openapi.json").await.unwrap();
    assert_eq!(status, 200);
    assert!(
        doc["openapi"].as_str().unwrap().starts_with("3.1"),
        "{}",
        doc["openapi"]
    );
    let paths = doc["paths"].as_object().unwrap();
    let mut operations = 0;
    for (path, item) in paths {
        let templated: Vec<&str> = path
            .split('/')
            .filter_map(|s| s.strip_prefix('{').and_then(|s| s.strip_suffix('}')))
            .collect();
        for (method, op) in item.as_object().unwrap() {
            operations += 1;
            let what = format!("{} {path}", method.to_uppercase());
            let params = op["parameters"].as_array().cloned().unwrap_or_default();
            for name in &templated {
                assert!(
                    params
                        .iter()
                        .any(|p| p["in"] == "path" && p["name"] == *name && p["required"] == true),
                    "{what}: path parameter {name} is not declared"
                );
            }
            let responses = op["responses"].as_object().unwrap();
            assert!(
                responses.keys().any(|s| s.starts_with('2')),
                "{what}: no success"
            );
            for (code, response) in responses {
                let status: u16 = code.parse().unwrap();
                let html_or_ready = path == "/readyz";
                if status >= 400 && !html_or_ready {
                    assert_eq!(
                        response["content"]["application/json"]["schema"]["$ref"],
                        "#/components/schemas/ErrorBody",
                        "{what} {status}"
                    );
                }
                if status == 503 && !html_or_ready {
                    assert!(
                        response["headers"]["Retry-After"].is_object(),
                        "{what}: 503 without Retry-After"
                    );
                }
            }
            let is_api = path.starts_with("/v1/") && path != "/v1/openapi.json";
            // Answered from this node's memory: no Raft round, so no 503/504.
            let local = ["/v1/cluster", "/v1/watch", "/v1/stats/locks"];
            let reaches_raft = is_api && !local.contains(&path.as_str());
            // No input at all, so nothing to refuse with a 400.
            let no_input = ["/v1/cluster", "/v1/cluster/replication"];
            if is_api {
                for status in ["400", "500"] {
                    if no_input.contains(&path.as_str()) && status == "400" {
                        continue;
                    }
                    assert!(responses.contains_key(status), "{what}: no {status}");
                }
            }
            if reaches_raft {
                for status in ["503", "504"] {
                    assert!(responses.contains_key(status), "{what}: no {status}");
                }
            }
            if op["requestBody"].is_object() {
                assert!(responses.contains_key("413"), "{what}: a body and no 413");
            }
            let idempotent = params.iter().any(|p| p["name"] == "Idempotency-Key");
            if idempotent {
                assert!(responses.contains_key("422"), "{what}: no 422");
            }
            if matches!(method.as_str(), "post" | "put" | "delete")
                && is_api
                && !path.starts_with("/v1/cluster")
                && !path.ends_with("/check")
                && !path.ends_with("/keepalive")
            {
                assert!(idempotent, "{what}: a mutation without Idempotency-Key");
            }
        }
    }
    assert!(operations >= 32, "{operations} operations");
    for admin in [
        ("/v1/locks/{name}", "delete"),
        ("/v1/cluster/members", "post"),
    ] {
        let responses = &doc["paths"][admin.0][admin.1]["responses"];
        assert!(
            responses["401"].is_object() && responses["403"].is_object(),
            "{admin:?}"
        );
    }
    let watch = &doc["paths"]["/v1/watch"]["get"]["responses"]["200"]["content"];
    assert!(watch["text/event-stream"].is_object(), "{watch}");
    // The numbers are this node's, not the defaults.
    let acquire = &doc["paths"]["/v1/locks/{name}/acquire"]["post"];
    let name = acquire["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "name")
        .unwrap();
    assert_eq!(name["schema"]["maxLength"], 100);
    assert_eq!(name["schema"]["minLength"], 1);
    let schemas = &doc["components"]["schemas"];
    assert_eq!(
        schemas["AcquireRequest"]["properties"]["wait_ms"]["maximum"],
        7000
    );
    assert_eq!(
        schemas["LeaseGrantRequest"]["properties"]["ttl_ms"]["minimum"],
        1000
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_come_from_the_cluster_file_for_edge_and_node_and_are_reported() {
    let long = "n".repeat(600);
    let acquire = |lease: u64| json!({"lease_id": lease, "wait_ms": 100_000_000});
    // Defaults: a 600-byte name and a 100 000 s wait are refused at the edge.
    let c = Cluster::single().await;
    let lease = c.lease(1, 10_000).await;
    let (status, err) = c
        .post(1, &format!("/v1/locks/{long}/acquire"), acquire(lease))
        .await;
    assert_eq!(
        (status, err["error"]["code"].as_str()),
        (400, Some("bad_request"))
    );
    let (_, cluster) = c.get(1, "/v1/cluster").await.unwrap();
    assert_eq!(cluster["limits"]["name_bytes_max"], 512);
    assert_eq!(cluster["limits"]["wait_ms_max"], 86_400_000);
    assert_eq!(cluster["limits"]["hold_ms_max"], 300_000);
    drop(c);
    // A deployment that raises them is served by them, and says so.
    let c = Cluster::from_file(
        1,
        "[limits]\nname_bytes_max = 1024\nwait_ms_max = 200000000\n",
    )
    .await;
    let lease = c.lease(1, 10_000).await;
    let (status, grant) = c
        .post(1, &format!("/v1/locks/{long}/acquire"), acquire(lease))
        .await;
    assert_eq!(status, 200, "{grant}");
    assert_eq!(grant["name"].as_str(), Some(long.as_str()));
    let (_, cluster) = c.get(1, "/v1/cluster").await.unwrap();
    assert_eq!(cluster["limits"]["name_bytes_max"], 1024);
    assert_eq!(cluster["limits"]["wait_ms_max"], 200_000_000);
    assert_eq!(cluster["limits"]["body_bytes_max"], 2 << 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_calls_need_the_admin_token_when_one_is_set() {
    let c = Cluster::single_with(&["--admin-token", "t0ken"]).await;
    let lease = c.lease(1, 10_000).await;
    c.post(1, "/v1/locks/adm/acquire", json!({"lease_id": lease}))
        .await;
    let (status, err) = c.delete(1, "/v1/locks/adm").await;
    assert_eq!(
        (status, err["error"]["code"].as_str()),
        (401, Some("unauthenticated"))
    );
    let wrong = c
        .http
        .delete(c.node(1).url("/v1/locks/adm"))
        .bearer_auth("nope")
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 403);
    let right = c
        .http
        .delete(c.node(1).url("/v1/locks/adm"))
        .bearer_auth("t0ken")
        .send()
        .await
        .unwrap();
    assert_eq!(right.status(), 200);
}

/// (method, path, raw body, expected status, expected code)
type BadInput = (Method, String, Option<Vec<u8>>, u16, &'static str);

fn bad_inputs(lease: u64) -> Vec<BadInput> {
    let long = "x".repeat(513);
    let big_value = format!("{{\"value\": \"{}\"}}", "v".repeat((1 << 20) + 1));
    let huge_body = vec![b' '; (2 << 20) + 10];
    let body = |s: &str| Some(s.as_bytes().to_vec());
    vec![
        (
            Method::POST,
            "/v1/leases".into(),
            body("{\"ttl_ms\": 10}"),
            400,
            "bad_request",
        ),
        (
            Method::POST,
            "/v1/leases".into(),
            body("{\"ttl_ms\": 99999999999}"),
            400,
            "bad_request",
        ),
        (
            Method::POST,
            "/v1/leases".into(),
            body("{\"ttl_ms\": \"ten\"}"),
            400,
            "bad_request",
        ),
        (
            Method::POST,
            "/v1/leases".into(),
            body("{\"ttl_ms\": 5000, \"extra\": 1}"),
            400,
            "bad_request",
        ),
        (
            Method::POST,
            "/v1/leases".into(),
            body("{not json"),
            400,
            "bad_request",
        ),
        (
            Method::POST,
            "/v1/leases".into(),
            Some(vec![b'{', 0xff, 0xfe, b'}']),
            400,
            "bad_request",
        ),
        (
            Method::POST,
            "/v1/leases".into(),
            Some(huge_body),
            413,
            "payload_too_large",
        ),
        (
            Method::POST,
            "/v1/leases/abc/keepalive".into(),
            None,
            400,
            "bad_request",
        ),
        (
            Method::POST,
            "/v1/leases/999/keepalive".into(),
            None,
            404,
            "lease_not_found",
        ),
        (
            Method::GET,
            "/v1/leases/999".into(),
            None,
            404,
            "lease_not_found",
        ),
        (
            Method::DELETE,
            "/v1/leases/999".into(),
            None,
            404,
            "lease_not_found",
        ),
        (
            Method::POST,
            "/v1/locks/L/acquire".into(),
            body("{\"owner\": \"w\"}"),
            400,
            "bad_request",
        ),
        (
            Method::POST,
            "/v1/locks/L/acquire".into(),
            body("{\"lease_id\": 999}"),
            404,
            "lease_not_found",
        ),
        (
            Method::POST,
            "/v1/locks/L/acquire".into(),
            body(&format!(
                "{{\"lease_id\": {lease}, \"mode\": \"sideways\"}}"
            )),
            400,
            "bad_request",
        ),
        (
            Method::POST,
            "/v1/locks/L/acquire".into(),
            body(&format!("{{\"lease_id\": {lease}, \"wait_ms\": 86400001}}")),
            400,
            "bad_request",
        ),
        (
            // Taking up a place checks the request as a new one would be.
            Method::POST,
            "/v1/locks/L/acquire".into(),
            body(&format!(
                "{{\"lease_id\": {lease}, \"wait_ms\": 86400001, \"enqueued\": 1}}"
            )),
            400,
            "bad_request",
        ),
        (
            Method::POST,
            "/v1/locks/L/acquire".into(),
            body(&format!("{{\"lease_id\": {lease}, \"enqueued\": -1}}")),
            400,
            "bad_request",
        ),
        (
            Method::POST,
            format!("/v1/locks/{long}/acquire"),
            body(&format!("{{\"lease_id\": {lease}}}")),
            400,
            "bad_request",
        ),
        (
            Method::POST,
            "/v1/locks/a%0Ab/acquire".into(),
            body(&format!("{{\"lease_id\": {lease}}}")),
            400,
            "bad_request",
        ),
        (
            Method::POST,
            "/v1/locks/..%2F..%2Fetc/acquire".into(),
            body(&format!("{{\"lease_id\": {lease}}}")),
            400,
            "bad_request",
        ),
        (
            Method::POST,
            "/v1/locks/%FF%FE/acquire".into(),
            body(&format!("{{\"lease_id\": {lease}}}")),
            400,
            "bad_request",
        ),
        (
            Method::POST,
            "/v1/locks/L/release".into(),
            body(&format!("{{\"lease_id\": {lease}}}")),
            409,
            "not_holder",
        ),
        (
            Method::POST,
            "/v1/locks/L/check".into(),
            body("{\"fence\": -1}"),
            400,
            "bad_request",
        ),
        (
            Method::POST,
            "/v1/semaphores/S/acquire".into(),
            body(&format!(
                "{{\"lease_id\": {lease}, \"limit\": 2, \"permits\": 3}}"
            )),
            400,
            "bad_request",
        ),
        (
            Method::POST,
            "/v1/semaphores/S/acquire".into(),
            body(&format!("{{\"lease_id\": {lease}, \"limit\": 0}}")),
            400,
            "bad_request",
        ),
        (
            Method::PUT,
            "/v1/kv/k".into(),
            Some(big_value.into_bytes()),
            413,
            "payload_too_large",
        ),
        (
            Method::PUT,
            "/v1/kv/k".into(),
            body("{\"value\": 5}"),
            400,
            "bad_request",
        ),
        (
            Method::PUT,
            "/v1/kv/k".into(),
            body("{\"value\": \"v\", \"lease_id\": 999}"),
            404,
            "lease_not_found",
        ),
        (
            Method::PUT,
            "/v1/kv/a%2F..%2Fb".into(),
            body("{\"value\": \"v\"}"),
            400,
            "bad_request",
        ),
        (
            Method::GET,
            "/v1/kv/missing".into(),
            None,
            404,
            "key_not_found",
        ),
        (
            Method::GET,
            "/v1/kv?prefix=a&limit=0".into(),
            None,
            400,
            "bad_request",
        ),
        (
            Method::GET,
            "/v1/kv?consistency=maybe".into(),
            None,
            400,
            "bad_request",
        ),
        (
            Method::GET,
            "/v1/kv?bogus=1".into(),
            None,
            400,
            "bad_request",
        ),
        (Method::DELETE, "/v1/kv".into(), None, 400, "bad_request"),
        (
            Method::POST,
            "/v1/txn".into(),
            body(
                "{\"compare\": [{\"key\": \"k\", \"target\": \"colour\", \"op\": \"equal\", \"value\": 1}]}",
            ),
            400,
            "bad_request",
        ),
        (
            Method::POST,
            "/v1/txn".into(),
            body("{\"success\": [{\"op\": \"explode\"}]}"),
            400,
            "bad_request",
        ),
        (
            Method::GET,
            "/v1/watch?start_revision=x".into(),
            None,
            400,
            "bad_request",
        ),
        (Method::GET, "/v1/nowhere".into(), None, 404, "not_found"),
        (
            Method::PATCH,
            "/v1/leases".into(),
            None,
            405,
            "method_not_allowed",
        ),
        (
            Method::POST,
            "/v1/cluster/members".into(),
            body("{\"id\": 0, \"peer\": \"\", \"api\": \"\"}"),
            400,
            "bad_request",
        ),
        (
            Method::DELETE,
            "/v1/cluster/members/77".into(),
            None,
            409,
            "membership_change_refused",
        ),
        // The console's reads refuse what they do not know.
        (
            Method::GET,
            "/v1/stats/locks?kind=table".into(),
            None,
            400,
            "bad_request",
        ),
        (
            Method::GET,
            "/v1/stats/locks?limit=-1".into(),
            None,
            400,
            "bad_request",
        ),
        (
            Method::GET,
            "/v1/leases?detail=maybe".into(),
            None,
            400,
            "bad_request",
        ),
        (
            Method::GET,
            "/v1/leases?after=x".into(),
            None,
            400,
            "bad_request",
        ),
        (
            Method::GET,
            "/v1/semaphores?nope=1".into(),
            None,
            400,
            "bad_request",
        ),
        (
            Method::GET,
            format!("/v1/elections?prefix={}", "p".repeat(600)),
            None,
            400,
            "bad_request",
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_bad_input_gets_its_4xx_with_the_error_shape_and_changes_nothing() {
    let c = Cluster::single().await;
    let lease = c.lease(1, 60_000).await;
    c.put(1, "/v1/kv/k", json!({"value": "original"})).await;
    let before = c.revision(1).await;
    for (method, path, body, status, code) in bad_inputs(lease) {
        let mut request = c.http.request(method.clone(), c.node(1).url(&path));
        if let Some(body) = body {
            request = request
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(body);
        }
        let response = request.send().await.unwrap();
        let got = response.status().as_u16();
        let text = response.text().await.unwrap();
        let json: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        assert_eq!(got, status, "{method} {path}: {text}");
        assert_eq!(json["error"]["code"], code, "{method} {path}: {text}");
        assert!(
            json["error"]["message"].is_string(),
            "{method} {path}: {text}"
        );
    }
    assert_eq!(c.revision(1).await, before, "no bad input changed anything");
    let (_, kv) = c.get(1, "/v1/kv/k").await.unwrap();
    assert_eq!(kv["value"], "original");
    assert!(
        !c.node(1).log().contains("panicked"),
        "no panic:\n{}",
        c.node(1).log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_queue_is_429_rate_limited() {
    let c = Cluster::single_with(&["--queue-len-max", "1"]).await;
    let [holder, first, second] = [
        c.lease(1, 60_000).await,
        c.lease(1, 60_000).await,
        c.lease(1, 60_000).await,
    ];
    c.post(1, "/v1/locks/full/acquire", json!({"lease_id": holder}))
        .await;
    let waiting = c
        .http
        .post(c.node(1).url("/v1/locks/full/acquire"))
        .json(&json!({"lease_id": first, "wait_ms": 5_000}))
        .send();
    let waiting = tokio::spawn(waiting);
    loop {
        let (_, state) = c.get(1, "/v1/locks/full").await.unwrap();
        if state["queue"].as_array().unwrap().len() == 1 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let (status, err) = c
        .post(
            1,
            "/v1/locks/full/acquire",
            json!({"lease_id": second, "wait_ms": 5_000}),
        )
        .await;
    assert_eq!(
        (status, err["error"]["code"].as_str()),
        (429, Some("rate_limited")),
        "{err}"
    );
    assert_eq!(err["error"]["queue_len_max"].as_u64(), Some(1));
    c.post(1, "/v1/locks/full/release", json!({"lease_id": holder}))
        .await;
    assert_eq!(waiting.await.unwrap().unwrap().status(), 200);
}
