//! Principals, permissions, lease ownership, quotas and safe defaults, over a real
//! `baton serve --auth FILE` process on loopback.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{Cluster, free_port};
use reqwest::Method;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const ORDERS: &str = "orders-token";
const READER: &str = "reader-token";
const OPS: &str = "ops-token";
const STRANGER: &str = "stranger-token";
const LIMITED: &str = "limited-token";

fn hash(token: &str) -> String {
    baton_http_api::auth::token_hash(token)
}

fn auth_file(with_orders: bool) -> String {
    let mut text = String::new();
    if with_orders {
        text += &format!(
            r#"
[[principal]]
name = "orders"
token_sha256 = "{}"
rules = [
  {{ namespace = "locks", prefix = "orders/", access = "write" }},
  {{ namespace = "semaphores", prefix = "orders/", access = "write" }},
  {{ namespace = "elections", prefix = "orders/", access = "write" }},
  {{ namespace = "keys", prefix = "orders/", access = "write" }},
  {{ namespace = "watches", prefix = "orders/", access = "read" }},
]
"#,
            hash(ORDERS)
        );
    }
    text += &format!(
        r#"
[[principal]]
name = "reader"
token_sha256 = "{}"
rules = [{{ namespace = "*", prefix = "orders/", access = "read" }}]

[[principal]]
name = "ops"
token_sha256 = "{}"
admin = true

[[principal]]
name = "stranger"
token_sha256 = "{}"

[[principal]]
name = "limited"
token_sha256 = "{}"
rules = [{{ namespace = "*", prefix = "lim/", access = "write" }}]
quota = {{ leases = 1, keys = 2, key_bytes = 64, waiters = 1, watches = 1, requests_per_second = 0.01, burst = 1000 }}
"#,
        hash(READER),
        hash(OPS),
        hash(STRANGER),
        hash(LIMITED)
    );
    text
}

/// One cell of the permission table: who, method, path, body, the status expected.
type Cell<'a> = (Option<&'a str>, Method, String, Option<Value>, u16);

struct Authed {
    cluster: Cluster,
    file: PathBuf,
}

impl Authed {
    async fn start() -> Authed {
        let dir = tempfile::TempDir::new().unwrap().keep();
        let file = dir.join("auth.toml");
        std::fs::write(&file, auth_file(true)).unwrap();
        let cluster = Cluster::single_with(&["--auth", file.to_str().unwrap()]).await;
        Authed { cluster, file }
    }

    async fn call(
        &self,
        token: Option<&str>,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut request = self
            .cluster
            .http
            .request(method, self.cluster.node(1).url(path))
            .timeout(Duration::from_secs(10));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let is_stream = response
            .headers()
            .get("content-type")
            .is_some_and(|v| v.to_str().unwrap_or("").starts_with("text/event-stream"));
        if is_stream {
            return (status, Value::Null);
        }
        let text = response.text().await.unwrap();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    async fn revision(&self) -> u64 {
        let (status, body) = self.call(Some(OPS), Method::GET, "/v1/cluster", None).await;
        assert_eq!(status, 200, "{body}");
        body["revision"].as_u64().unwrap()
    }

    async fn lease(&self, token: &str) -> u64 {
        let (status, body) = self
            .call(
                Some(token),
                Method::POST,
                "/v1/leases",
                Some(json!({"ttl_ms": 30_000})),
            )
            .await;
        assert_eq!(status, 201, "{body}");
        body["lease_id"].as_u64().unwrap()
    }
}

impl Drop for Authed {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(self.file.parent().unwrap());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_cell_of_the_permission_table_gives_its_status_and_refusals_change_nothing() {
    let a = Authed::start().await;
    let orders_lease = a.lease(ORDERS).await;
    let reader_lease = a.lease(READER).await;
    let stranger_lease = a.lease(STRANGER).await;
    // A lock held by `orders` and a key it wrote, for the reads below.
    let (status, body) = a
        .call(
            Some(ORDERS),
            Method::POST,
            "/v1/locks/orders%2Fheld/acquire",
            Some(json!({"lease_id": orders_lease, "owner": "o"})),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let (status, _) = a
        .call(
            Some(ORDERS),
            Method::PUT,
            "/v1/kv/orders/k",
            Some(json!({"value": "v"})),
        )
        .await;
    assert_eq!(status, 200);

    let acquire = |lease: u64| Some(json!({"lease_id": lease, "owner": "x"}));
    let release = |lease: u64| Some(json!({"lease_id": lease, "owner": "x"}));
    let put = Some(json!({"value": "v"}));
    let campaign = |lease: u64| Some(json!({"lease_id": lease, "value": "me"}));
    let semaphore = |lease: u64| Some(json!({"lease_id": lease, "owner": "x", "limit": 2}));
    let txn = |key: &str| {
        Some(
            json!({"compare": [], "success": [{"op": "put", "key": key, "value": "1"}], "failure": []}),
        )
    };
    // (who, method, path, body, status). Every refusal must leave the revision as it was.
    let table: Vec<Cell> = vec![
        // No token, or a wrong one: 401 everywhere under /v1 and on /metrics.
        (None, Method::GET, "/v1/locks".into(), None, 401),
        (
            None,
            Method::POST,
            "/v1/leases".into(),
            Some(json!({"ttl_ms": 5000})),
            401,
        ),
        (Some("wrong"), Method::GET, "/v1/cluster".into(), None, 401),
        (None, Method::GET, "/metrics".into(), None, 401),
        (None, Method::GET, "/healthz".into(), None, 200),
        (None, Method::GET, "/readyz".into(), None, 200),
        // Locks inside and outside the prefix.
        (
            Some(ORDERS),
            Method::POST,
            "/v1/locks/orders%2Fa/acquire".into(),
            acquire(orders_lease),
            200,
        ),
        (
            Some(ORDERS),
            Method::POST,
            "/v1/locks/billing%2Fa/acquire".into(),
            acquire(orders_lease),
            403,
        ),
        (
            Some(ORDERS),
            Method::POST,
            "/v1/locks/orders%2Fa/release".into(),
            release(orders_lease),
            200,
        ),
        (
            Some(ORDERS),
            Method::GET,
            "/v1/locks/orders%2Fheld".into(),
            None,
            200,
        ),
        (
            Some(ORDERS),
            Method::GET,
            "/v1/locks/billing%2Fa".into(),
            None,
            403,
        ),
        (
            Some(READER),
            Method::GET,
            "/v1/locks/orders%2Fheld".into(),
            None,
            200,
        ),
        (
            Some(READER),
            Method::POST,
            "/v1/locks/orders%2Fb/acquire".into(),
            acquire(reader_lease),
            403,
        ),
        (
            Some(STRANGER),
            Method::GET,
            "/v1/locks/orders%2Fheld".into(),
            None,
            403,
        ),
        (
            Some(STRANGER),
            Method::POST,
            "/v1/locks/orders%2Fb/acquire".into(),
            acquire(stranger_lease),
            403,
        ),
        // Another principal's lease cannot be used, kept alive, shown or revoked.
        (
            Some(READER),
            Method::POST,
            "/v1/locks/orders%2Fc/acquire".into(),
            acquire(orders_lease),
            403,
        ),
        (
            Some(STRANGER),
            Method::POST,
            format!("/v1/leases/{orders_lease}/keepalive"),
            None,
            403,
        ),
        (
            Some(STRANGER),
            Method::GET,
            format!("/v1/leases/{orders_lease}"),
            None,
            403,
        ),
        (
            Some(STRANGER),
            Method::DELETE,
            format!("/v1/leases/{orders_lease}"),
            None,
            403,
        ),
        (
            Some(STRANGER),
            Method::POST,
            "/v1/locks/orders%2Fheld/release".into(),
            release(orders_lease),
            403,
        ),
        (
            Some(ORDERS),
            Method::POST,
            format!("/v1/leases/{orders_lease}/keepalive"),
            None,
            200,
        ),
        (
            Some(ORDERS),
            Method::GET,
            format!("/v1/leases/{orders_lease}"),
            None,
            200,
        ),
        // Semaphores and elections.
        (
            Some(ORDERS),
            Method::POST,
            "/v1/semaphores/orders%2Fs/acquire".into(),
            semaphore(orders_lease),
            200,
        ),
        (
            Some(ORDERS),
            Method::POST,
            "/v1/semaphores/billing%2Fs/acquire".into(),
            semaphore(orders_lease),
            403,
        ),
        (
            Some(READER),
            Method::GET,
            "/v1/semaphores/orders%2Fs".into(),
            None,
            200,
        ),
        (
            Some(STRANGER),
            Method::GET,
            "/v1/semaphores/orders%2Fs".into(),
            None,
            403,
        ),
        (
            Some(ORDERS),
            Method::POST,
            "/v1/elections/orders%2Fe/campaign".into(),
            campaign(orders_lease),
            200,
        ),
        (
            Some(ORDERS),
            Method::POST,
            "/v1/elections/billing%2Fe/campaign".into(),
            campaign(orders_lease),
            403,
        ),
        (
            Some(READER),
            Method::GET,
            "/v1/elections/orders%2Fe".into(),
            None,
            200,
        ),
        (
            Some(STRANGER),
            Method::GET,
            "/v1/elections/orders%2Fe".into(),
            None,
            403,
        ),
        // Keys and transactions.
        (
            Some(ORDERS),
            Method::PUT,
            "/v1/kv/orders/k2".into(),
            put.clone(),
            200,
        ),
        (
            Some(ORDERS),
            Method::PUT,
            "/v1/kv/billing/k".into(),
            put.clone(),
            403,
        ),
        (
            Some(READER),
            Method::GET,
            "/v1/kv/orders/k".into(),
            None,
            200,
        ),
        (
            Some(READER),
            Method::PUT,
            "/v1/kv/orders/k".into(),
            put.clone(),
            403,
        ),
        (
            Some(READER),
            Method::DELETE,
            "/v1/kv/orders/k".into(),
            None,
            403,
        ),
        (
            Some(STRANGER),
            Method::GET,
            "/v1/kv/orders/k".into(),
            None,
            403,
        ),
        (
            Some(ORDERS),
            Method::POST,
            "/v1/txn".into(),
            txn("orders/t"),
            200,
        ),
        (
            Some(ORDERS),
            Method::POST,
            "/v1/txn".into(),
            txn("billing/t"),
            403,
        ),
        (
            Some(READER),
            Method::POST,
            "/v1/txn".into(),
            txn("orders/t"),
            403,
        ),
        // Watches: read on `watches` for what is watched.
        (
            Some(ORDERS),
            Method::GET,
            "/v1/watch?prefix=orders/".into(),
            None,
            200,
        ),
        (
            Some(ORDERS),
            Method::GET,
            "/v1/watch?prefix=billing/".into(),
            None,
            403,
        ),
        (Some(ORDERS), Method::GET, "/v1/watch".into(), None, 403),
        (
            Some(STRANGER),
            Method::GET,
            "/v1/watch?lock=orders%2Fheld".into(),
            None,
            403,
        ),
        // Admin only: force-release, membership, /metrics.
        (
            Some(ORDERS),
            Method::DELETE,
            "/v1/locks/orders%2Fheld".into(),
            None,
            403,
        ),
        (
            Some(ORDERS),
            Method::DELETE,
            "/v1/cluster/members/9".into(),
            None,
            403,
        ),
        (Some(ORDERS), Method::GET, "/metrics".into(), None, 403),
        (Some(OPS), Method::GET, "/metrics".into(), None, 200),
        (Some(STRANGER), Method::GET, "/v1/cluster".into(), None, 200),
        (
            Some(OPS),
            Method::GET,
            format!("/v1/leases/{orders_lease}"),
            None,
            200,
        ),
    ];
    for (who, method, path, body, expected) in table {
        let before = a.revision().await;
        let (status, answer) = a.call(who, method.clone(), &path, body).await;
        assert_eq!(status, expected, "{who:?} {method} {path}: {answer}");
        match status {
            401 => assert_eq!(answer["error"]["code"], "unauthenticated", "{path}"),
            403 => assert_eq!(answer["error"]["code"], "permission_denied", "{path}"),
            _ => {}
        }
        if status >= 400 {
            assert_eq!(
                a.revision().await,
                before,
                "{who:?} {method} {path} changed state"
            );
        }
    }

    // Lists show only what the principal may read.
    let (_, locks) = a.call(Some(READER), Method::GET, "/v1/locks", None).await;
    let names: Vec<&str> = locks["locks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"orders/held"), "{locks}");
    let (_, locks) = a.call(Some(STRANGER), Method::GET, "/v1/locks", None).await;
    assert_eq!(locks["locks"], json!([]), "{locks}");
    let (_, leases) = a
        .call(Some(STRANGER), Method::GET, "/v1/leases", None)
        .await;
    let ids: Vec<u64> = leases["leases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["lease_id"].as_u64().unwrap())
        .collect();
    assert_eq!(ids, vec![stranger_lease]);

    // The admin frees the lock `orders` holds.
    let (status, body) = a
        .call(Some(OPS), Method::DELETE, "/v1/locks/orders%2Fheld", None)
        .await;
    assert_eq!(status, 200, "{body}");
    // The principal shows in /v1/leases/{id} and its counters in /metrics.
    let (_, metrics) = a.call(Some(OPS), Method::GET, "/metrics", None).await;
    let metrics = metrics.as_str().unwrap().to_owned();
    assert!(
        metrics.contains(
            "baton_principal_refused_total{principal=\"stranger\",reason=\"permission_denied\"}"
        ),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quotas_refuse_with_429_and_change_nothing() {
    let a = Authed::start().await;
    let lease = a.lease(LIMITED).await;
    let before = a.revision().await;
    let (status, body) = a
        .call(
            Some(LIMITED),
            Method::POST,
            "/v1/leases",
            Some(json!({"ttl_ms": 5000})),
        )
        .await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (429, &json!("quota_exceeded")),
        "{body}"
    );
    assert_eq!(body["error"]["resource"], "leases");
    assert_eq!(a.revision().await, before);
    // Keys: two fit, a third does not; bytes: 64 at most.
    for key in ["lim/a", "lim/b"] {
        let (status, body) = a
            .call(
                Some(LIMITED),
                Method::PUT,
                &format!("/v1/kv/{key}"),
                Some(json!({"value": "v"})),
            )
            .await;
        assert_eq!(status, 200, "{body}");
    }
    let before = a.revision().await;
    let (status, body) = a
        .call(
            Some(LIMITED),
            Method::PUT,
            "/v1/kv/lim/c",
            Some(json!({"value": "v"})),
        )
        .await;
    assert_eq!(
        (status, &body["error"]["resource"]),
        (429, &json!("keys")),
        "{body}"
    );
    let (status, body) = a
        .call(
            Some(LIMITED),
            Method::PUT,
            "/v1/kv/lim/a",
            Some(json!({"value": "x".repeat(100)})),
        )
        .await;
    assert_eq!(
        (status, &body["error"]["resource"]),
        (429, &json!("key_bytes")),
        "{body}"
    );
    assert_eq!(a.revision().await, before);
    // One held-open wait per node: a second is refused while the first waits.
    let (status, _) = a
        .call(
            Some(LIMITED),
            Method::POST,
            "/v1/locks/lim%2Fl/acquire",
            Some(json!({"lease_id": lease, "owner": "holder"})),
        )
        .await;
    assert_eq!(status, 200);
    let waiter = {
        let url = a.cluster.node(1).url("/v1/locks/lim%2Fl/acquire");
        let http = a.cluster.http.clone();
        tokio::spawn(async move {
            http.post(url)
                .bearer_auth(LIMITED)
                .json(&json!({"lease_id": lease, "owner": "w1", "wait_ms": 20_000}))
                .send()
                .await
                .map(|r| r.status().as_u16())
        })
    };
    // Wait until the first waiter is queued.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (_, lock) = a
            .call(Some(LIMITED), Method::GET, "/v1/locks/lim%2Fl", None)
            .await;
        if lock["queue"].as_array().is_some_and(|q| q.len() == 1) {
            break;
        }
        assert!(Instant::now() < deadline, "the waiter never queued: {lock}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (status, body) = a
        .call(
            Some(LIMITED),
            Method::POST,
            "/v1/locks/lim%2Fl/acquire",
            Some(json!({"lease_id": lease, "owner": "w2", "wait_ms": 20_000})),
        )
        .await;
    assert_eq!(
        (status, &body["error"]["resource"]),
        (429, &json!("waiters")),
        "{body}"
    );
    let (status, _) = a
        .call(
            Some(LIMITED),
            Method::POST,
            "/v1/locks/lim%2Fl/release",
            Some(json!({"lease_id": lease, "owner": "holder"})),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(waiter.await.unwrap().unwrap(), 200);
    // The rate: 0.01 per second with a bucket of 1 000; spend it, then 429 with Retry-After.
    let mut refused = None;
    for _ in 0..1_100 {
        let response = a
            .cluster
            .http
            .get(a.cluster.node(1).url("/v1/cluster"))
            .bearer_auth(LIMITED)
            .send()
            .await
            .unwrap();
        if response.status().as_u16() == 429 {
            refused = Some(response);
            break;
        }
    }
    let refused = refused.expect("the bucket never ran out");
    assert!(refused.headers().contains_key("retry-after"));
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["error"]["code"], "rate_limited");
    assert!(body["error"]["retry_after_ms"].as_u64().unwrap() > 1_000);
    // Other principals are not slowed.
    let (status, _) = a.call(Some(OPS), Method::GET, "/v1/cluster", None).await;
    assert_eq!(status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_removed_from_the_file_stops_working_on_sighup_and_a_broken_file_is_refused() {
    let a = Authed::start().await;
    let (status, _) = a.call(Some(ORDERS), Method::GET, "/v1/cluster", None).await;
    assert_eq!(status, 200);
    std::fs::write(&a.file, auth_file(false)).unwrap();
    hangup(&a.cluster);
    wait_for_status(&a, ORDERS, 401).await;
    // A broken file is refused and the rules in force stay.
    std::fs::write(&a.file, "[[principal]]\nname = \"x\"\n").unwrap();
    hangup(&a.cluster);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !a.cluster.node(1).log().contains("auth file refused") {
        assert!(Instant::now() < deadline, "{}", a.cluster.node(1).log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (status, _) = a.call(Some(OPS), Method::GET, "/v1/cluster", None).await;
    assert_eq!(status, 200);
    let (status, _) = a.call(Some(ORDERS), Method::GET, "/v1/cluster", None).await;
    assert_eq!(status, 401);
    // And the log never shows a token or its hash.
    let log = a.cluster.node(1).log();
    assert!(!log.contains(ORDERS) && !log.contains(&hash(OPS)), "{log}");
}

fn hangup(cluster: &Cluster) {
    let pid = cluster.node(1).pid().unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGHUP,
    )
    .unwrap();
}

async fn wait_for_status(a: &Authed, token: &str, expected: u16) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (status, _) = a.call(Some(token), Method::GET, "/v1/cluster", None).await;
        if status == expected {
            return;
        }
        assert!(Instant::now() < deadline, "still {status}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `baton serve` with these flags, expected to refuse to start: its stderr.
fn refused_start(dir: &Path, extra: &[&str]) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_baton"))
        .arg("serve")
        .arg("--data-dir")
        .arg(dir.join("data"))
        .args(extra)
        .env_remove("BATON_CLUSTER_SECRET")
        .env_remove("BATON_AUTH_FILE")
        .output()
        .unwrap();
    assert!(!out.status.success(), "it started: {out:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ports_beyond_loopback_without_protection_are_refused_at_start_unless_allowed() {
    let dir = tempfile::TempDir::new().unwrap();
    let api = format!("0.0.0.0:{}", free_port());
    let loopback_peer = format!("127.0.0.1:{}", free_port());
    let advertise = format!("127.0.0.1:{}", free_port());
    let err = refused_start(
        dir.path(),
        &[
            "--api",
            &api,
            "--advertise-api",
            &advertise,
            "--peer",
            &loopback_peer,
        ],
    );
    assert!(
        err.contains("without --auth") && err.contains("refusing to start"),
        "{err}"
    );
    let peer = format!("0.0.0.0:{}", free_port());
    let advertise_peer = format!("127.0.0.1:{}", free_port());
    let err = refused_start(
        dir.path(),
        &[
            "--api",
            &advertise,
            "--peer",
            &peer,
            "--advertise-peer",
            &advertise_peer,
        ],
    );
    assert!(err.contains("without mutual TLS"), "{err}");
    // Allowed explicitly: it starts, and says so in /v1/cluster.
    let port = free_port();
    let data = dir.path().join("open");
    let args = [
        "serve".to_string(),
        "--insecure-allow-open".into(),
        "--api".into(),
        format!("0.0.0.0:{port}"),
        "--advertise-api".into(),
        format!("127.0.0.1:{port}"),
        "--peer".into(),
        format!("127.0.0.1:{}", free_port()),
        "--data-dir".into(),
        data.display().to_string(),
    ];
    let mut c = Cluster::empty(tempfile::TempDir::new().unwrap());
    c.add(1, format!("127.0.0.1:{port}"), args.to_vec());
    c.wait_ready().await;
    let (status, body) = c.get(1, "/v1/cluster").await.unwrap();
    assert_eq!(status, 200);
    let warnings = body["warnings"].as_array().unwrap();
    assert!(
        warnings[0]
            .as_str()
            .unwrap()
            .contains("--insecure-allow-open"),
        "{body}"
    );
    assert_eq!(body["security"]["auth"], false);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_sends_its_token_from_a_file_or_the_environment() {
    let a = Authed::start().await;
    let dir = tempfile::TempDir::new().unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, format!("{OPS}\n")).unwrap();
    let endpoint = a.cluster.node(1).api.clone();
    let baton = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_baton"))
            .args(["--endpoints", &endpoint])
            .args(args)
            .env_remove("BATON_TOKEN")
            .output()
            .unwrap()
    };
    let without = baton(&["cluster", "status"]);
    assert!(!without.status.success());
    assert!(String::from_utf8_lossy(&without.stderr).contains("unauthenticated"));
    let with_file = baton(&[
        "--token-file",
        token_file.to_str().unwrap(),
        "cluster",
        "status",
    ]);
    assert!(with_file.status.success(), "{with_file:?}");
    let with_env = std::process::Command::new(env!("CARGO_BIN_EXE_baton"))
        .args([
            "--endpoints",
            &endpoint,
            "lease",
            "grant",
            "--ttl-ms",
            "5000",
        ])
        .env("BATON_TOKEN", ORDERS)
        .output()
        .unwrap();
    assert!(with_env.status.success(), "{with_env:?}");
    // `baton auth hash` prints what the file stores.
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_baton"))
        .args(["auth", "hash"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(format!("{OPS}\n").as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), hash(OPS));
}
