//! The findings of the second security review (`docs/security.md`, "Findings and the tests
//! that cover them"), each over real `baton serve` processes on loopback.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{Cluster, free_port};
use reqwest::Method;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const ORDERS: &str = "orders-token-of-the-security-tests";
const BILLING: &str = "billing-token-of-the-security-tests";
const OPS: &str = "ops-token-of-the-security-tests";
const SMALL: &str = "small-token-of-the-security-tests";

fn hash(token: &str) -> String {
    baton_http_api::auth::token_hash(token)
}

/// Three principals: `orders` and `billing` may write locks and keys under their own
/// prefix; `ops` is an admin.
fn auth_file(dir: &Path) -> PathBuf {
    let text = format!(
        r#"
[[principal]]
name = "orders"
token_sha256 = "{}"
rules = [
  {{ namespace = "locks", prefix = "orders/", access = "write" }},
  {{ namespace = "keys", prefix = "orders/", access = "write" }},
  {{ namespace = "elections", prefix = "orders/", access = "write" }},
  {{ namespace = "watches", prefix = "orders/", access = "read" }},
]

[[principal]]
name = "billing"
token_sha256 = "{}"
rules = [
  {{ namespace = "locks", prefix = "billing/", access = "write" }},
  {{ namespace = "keys", prefix = "billing/", access = "write" }},
]

[[principal]]
name = "ops"
token_sha256 = "{}"
admin = true

[[principal]]
name = "small"
token_sha256 = "{}"
rules = [{{ namespace = "*", prefix = "small/", access = "write" }}]
quota = {{ claims = 2, state_bytes = 64 }}
"#,
        hash(ORDERS),
        hash(BILLING),
        hash(OPS),
        hash(SMALL)
    );
    let path = dir.join("auth.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// A request as `token`; the status and the JSON body.
async fn call(
    c: &Cluster,
    token: &str,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut request = c
        .http
        .request(method, c.node(1).url(path))
        .bearer_auth(token);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// Puts `v` at `path` as `token`, which must succeed.
async fn put_as(c: &Cluster, token: &str, path: &str) {
    let (status, body) = call(c, token, Method::PUT, path, Some(json!({"value": "v"}))).await;
    assert_eq!(status, 200, "{path}: {body}");
}

/// A new lease of `token`'s principal (60 s).
async fn lease_as(c: &Cluster, token: &str) -> u64 {
    let (status, body) = call(
        c,
        token,
        Method::POST,
        "/v1/leases",
        Some(json!({"ttl_ms": 60_000})),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    body["lease_id"].as_u64().unwrap()
}

/// A lease of `token`'s principal holding lock `name`.
async fn hold(c: &Cluster, token: &str, name: &str) -> u64 {
    let lease = lease_as(c, token).await;
    let (status, body) = call(
        c,
        token,
        Method::POST,
        &format!("/v1/locks/{}/acquire", name.replace('/', "%2F")),
        Some(json!({"lease_id": lease, "owner": "w"})),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    lease
}

/// A single `--auth` node with its peer port on `peer`.
async fn auth_node(peer: &str) -> Cluster {
    let dir = tempfile::TempDir::new().unwrap();
    let file = auth_file(dir.path());
    let api = format!("127.0.0.1:{}", free_port());
    let args = [
        "serve",
        "--api",
        &api,
        "--peer",
        peer,
        "--data-dir",
        &dir.path().join("data").display().to_string(),
        "--auth",
        &file.display().to_string(),
    ]
    .map(String::from)
    .to_vec();
    let mut c = Cluster::empty(dir);
    c.add(1, api, args);
    c.wait_ready().await;
    c
}

/// Finding 1: with `--auth`, the peer port of a single node was open to any local process:
/// a forged bincode `ForceRelease` posted to `/baton/propose` answered 200 and released
/// another team's lock. Now the node protects its peer port with a secret it generated
/// (mode 0600 in its data directory, never logged), and the forgery changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_proposal_on_the_peer_port_of_an_auth_node_is_refused() {
    use baton_state_machine::{Command, ForceRelease, Proposal, ResourceId};
    let peer = format!("127.0.0.1:{}", free_port());
    let c = auth_node(&peer).await;
    hold(&c, ORDERS, "orders/job").await;
    let (_, before) = call(&c, OPS, Method::GET, "/v1/cluster", None).await;
    let forged = bincode::serialize(&Proposal {
        idempotency_key: None,
        command: Command::ForceRelease(ForceRelease {
            resource: ResourceId::lock("orders/job"),
        }),
        caller: None,
    })
    .unwrap();
    let http = reqwest::Client::new();
    for secret in [None, Some("a-guess-at-the-cluster-secret")] {
        let mut request = http
            .post(format!("http://{peer}/baton/propose"))
            .body(forged.clone());
        if let Some(secret) = secret {
            request = request.header(baton_raft_node::network::SECRET_HEADER, secret);
        }
        let status = request.send().await.unwrap().status().as_u16();
        assert_eq!(status, 401, "secret {secret:?}");
    }
    // Every peer route needs the credential.
    for route in [
        "/raft/append",
        "/raft/vote",
        "/raft/snapshot",
        "/baton/keepalive",
        "/baton/status",
        "/baton/membership",
    ] {
        let status = http
            .post(format!("http://{peer}{route}"))
            .body(Vec::<u8>::new())
            .send()
            .await
            .unwrap()
            .status()
            .as_u16();
        assert_eq!(status, 401, "{route}");
    }
    let (_, after) = call(&c, OPS, Method::GET, "/v1/cluster", None).await;
    assert_eq!(after["revision"], before["revision"], "nothing was applied");
    let (_, lock) = call(&c, ORDERS, Method::GET, "/v1/locks/orders%2Fjob", None).await;
    assert_eq!(lock["holders"].as_array().unwrap().len(), 1, "{lock}");
    // The generated secret: in the data directory, for its owner only, never logged.
    let file = c.data_dir().join("data").join("cluster-secret");
    let secret = std::fs::read_to_string(&file).unwrap();
    assert!(secret.trim().len() >= 32, "{secret:?}");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    assert!(!c.node(1).log().contains(secret.trim()));
}

/// Finding 1: a cluster of several nodes with `--auth` and neither mutual TLS nor a secret
/// on its peer ports does not start, on loopback too; nor does one with a short secret.
#[test]
fn an_auth_cluster_without_peer_protection_or_with_a_short_secret_does_not_start() {
    let dir = tempfile::TempDir::new().unwrap();
    let file = auth_file(dir.path());
    let mut cluster = String::new();
    for id in 1..=3 {
        cluster += &format!(
            "[[node]]\nid = {id}\napi = \"127.0.0.1:{}\"\npeer = \"127.0.0.1:{}\"\ndata_dir = \"node-{id}\"\n\n",
            free_port(),
            free_port()
        );
    }
    let path = dir.path().join("cluster.toml");
    std::fs::write(&path, &cluster).unwrap();
    let start = |extra: &[&str], secret: Option<&str>| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_baton"));
        command
            .args([
                "serve",
                "--config",
                &path.display().to_string(),
                "--node",
                "1",
            ])
            .args(["--auth", &file.display().to_string()])
            .args(extra)
            .env_remove("BATON_CLUSTER_SECRET")
            .env_remove("BATON_CLUSTER_SECRET_FILE");
        if let Some(secret) = secret {
            command.env("BATON_CLUSTER_SECRET", secret);
        }
        let out = command.output().unwrap();
        assert!(!out.status.success(), "it started: {out:?}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let err = start(&[], None);
    assert!(err.contains("with --auth the peer port needs"), "{err}");
    let err = start(&[], Some("short"));
    assert!(err.contains("at least 16"), "{err}");
    let empty = dir.path().join("empty-secret");
    std::fs::write(&empty, "\n").unwrap();
    let err = start(&["--secret-file", &empty.display().to_string()], None);
    assert!(err.contains("is empty"), "{err}");
}

/// The resident set of process `pid`, in bytes.
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap();
    kib * 1024
}

/// Sends `count` requests to `addr` on one connection, pipelined in rounds of 100, the
/// `i`th with the method `method(i)`; returns once every answer has come.
async fn pipelined(addr: &str, count: usize, method: impl Fn(usize) -> String) {
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    let mut buf = vec![0u8; 1 << 16];
    let mut i = 0;
    while i < count {
        let round = 100.min(count - i);
        let mut out = String::new();
        for j in i..i + round {
            out += &format!(
                "{} /v1/cluster HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n",
                method(j)
            );
        }
        tcp.write_all(out.as_bytes()).await.unwrap();
        // Each answer is one status line; count them as they come.
        let mut seen = 0;
        let mut tail = Vec::new();
        while seen < round {
            let n = tcp.read(&mut buf).await.unwrap();
            assert!(n > 0, "the server closed the connection");
            tail.extend_from_slice(&buf[..n]);
            let text = String::from_utf8_lossy(&tail);
            let found = text.matches("HTTP/1.1 ").count();
            if found > seen {
                seen = found;
            }
        }
        i += round;
    }
}

/// Finding 2: every distinct HTTP method made a metrics series of its own (3 000 requests
/// with distinct 20 KB methods grew the node by 145 MiB, no token needed). Now a method
/// outside the standard set is counted as `other`: 100 000 distinct methods leave the
/// node's memory within 10 MiB of where it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn distinct_method_strings_leave_the_memory_where_it_was() {
    let c = Cluster::single().await;
    let pid = c.node(1).pid().unwrap();
    let addr = c.node(1).api.clone();
    let method = |i: usize| format!("M{i:07}{}", "X".repeat(120));
    // Warm the allocator and the connection paths with as many standard requests.
    let warm: Vec<_> = (0..4)
        .map(|_| {
            let addr = addr.clone();
            tokio::spawn(async move { pipelined(&addr, 5_000, |_| "GET".into()).await })
        })
        .collect();
    for w in warm {
        w.await.unwrap();
    }
    let before = rss(pid);
    let senders: Vec<_> = (0..4)
        .map(|k| {
            let addr = addr.clone();
            tokio::spawn(
                async move { pipelined(&addr, 25_000, move |i| method(k * 25_000 + i)).await },
            )
        })
        .collect();
    for s in senders {
        s.await.unwrap();
    }
    let after = rss(pid);
    let grown = after.saturating_sub(before);
    assert!(
        grown < 10 << 20,
        "RSS grew by {} KiB over 100 000 distinct methods ({before} -> {after})",
        grown >> 10
    );
    let (_, metrics) = c.get(1, "/metrics").await.unwrap();
    let metrics = metrics.as_str().unwrap().to_owned();
    assert!(metrics.contains("method=\"other\""));
    assert!(!metrics.contains("M0000001"));
}

/// A `baton serve` started by `sh` with its descriptors limited to `nofile` (a common
/// default): killed by PID on drop.
struct Limited {
    child: Child,
    api: String,
    _dir: tempfile::TempDir,
}

impl Drop for Limited {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn limited_node(nofile: u32) -> Limited {
    let dir = tempfile::TempDir::new().unwrap();
    let api = format!("127.0.0.1:{}", free_port());
    let peer = format!("127.0.0.1:{}", free_port());
    let child = Command::new("sh")
        .arg("-c")
        .arg(format!("ulimit -n {nofile} && exec \"$0\" \"$@\""))
        .arg(env!("CARGO_BIN_EXE_baton"))
        .args(["serve", "--api", &api, "--peer", &peer, "--data-dir"])
        .arg(dir.path().join("data"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let node = Limited {
        child,
        api,
        _dir: dir,
    };
    let http = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !http
        .get(format!("http://{}/readyz", node.api))
        .send()
        .await
        .is_ok_and(|r| r.status().is_success())
    {
        assert!(Instant::now() < deadline, "the node did not become ready");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    node
}

/// One request on a new connection; its time, or `None` if it took over `within`.
async fn timed_get(api: &str, within: Duration) -> Option<Duration> {
    let started = Instant::now();
    let answer = tokio::time::timeout(within, async {
        let mut tcp = TcpStream::connect(api).await.ok()?;
        tcp.write_all(b"GET /v1/cluster HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n\r\n")
            .await
            .ok()?;
        let mut text = String::new();
        tcp.read_to_string(&mut text).await.ok()?;
        text.starts_with("HTTP/1.1 200").then_some(())
    })
    .await;
    matches!(answer, Ok(Some(()))).then(|| started.elapsed())
}

/// Finding 3: a request that sent half its headers stayed open for good, so a slowloris
/// could take every descriptor of the node. Now, with the node limited to 1 024
/// descriptors, 2 000 half-sent requests do not stop a normal client: at the cap the
/// oldest of them makes room for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_thousand_half_sent_requests_do_not_stop_a_normal_client() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    if soft < 4_096 {
        setrlimit(Resource::RLIMIT_NOFILE, hard.min(8_192), hard).unwrap();
    }
    let node = limited_node(1_024).await;
    let within = Duration::from_secs(3);
    let mut usual = Vec::new();
    for _ in 0..10 {
        usual.push(
            timed_get(&node.api, within)
                .await
                .expect("served before the attack"),
        );
    }
    let mut slow = Vec::new();
    for _ in 0..2_000 {
        let mut tcp = TcpStream::connect(&node.api).await.unwrap();
        tcp.write_all(b"GET /v1/cluster HTTP/1.1\r\nhost: 127.0.0.1\r\nx-slow: ")
            .await
            .unwrap();
        slow.push(tcp);
    }
    usual.sort();
    let median = usual[usual.len() / 2];
    for i in 0..10 {
        let took = timed_get(&node.api, within).await;
        let took = took.unwrap_or_else(|| {
            panic!("request {i} not served within {within:?} during the attack")
        });
        assert!(
            took < median * 20 + Duration::from_millis(500),
            "request {i} took {took:?}, usually {median:?}"
        );
    }
    let metrics = reqwest::get(format!("http://{}/metrics", node.api))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let evicted = metrics
        .lines()
        .find(|l| l.starts_with("baton_connections_closed_total{port=\"api\",reason=\"evicted\"}"))
        .and_then(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .unwrap_or(0);
    assert!(evicted > 0, "{metrics}");
    drop(slow);
}

/// Finding 4: a listing applied its limit before the permission filter, so
/// `GET /v1/locks?limit=1` answered `[]` to a principal holding a lock of its own when
/// another team's lock sorted first, and names could be bisected with `after`. Now every
/// listing gives a principal the same answer whatever the other teams hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listings_give_the_same_answer_whatever_other_teams_hold() {
    let peer = format!("127.0.0.1:{}", free_port());
    let c = auth_node(&peer).await;
    hold(&c, ORDERS, "orders/job").await;
    put_as(&c, ORDERS, "/v1/kv/orders/k").await;
    let views = [
        "/v1/locks?limit=1",
        "/v1/locks?limit=1&after=a",
        "/v1/locks?limit=1&after=billing%2Fz",
        "/v1/kv?prefix=&limit=1",
        "/v1/kv?prefix=b&limit=1",
        "/v1/stats/locks?limit=1",
    ];
    let answers = async |c: &Cluster| {
        let mut out = Vec::new();
        for path in views {
            let (status, mut body) = call(c, ORDERS, Method::GET, path, None).await;
            assert_eq!(status, 200, "{path}: {body}");
            if let Some(object) = body.as_object_mut() {
                object.remove("revision");
                // Ages and rates move with time; the names and counts must not.
                for list in ["locks"] {
                    if let Some(items) = object.get_mut(list).and_then(Value::as_array_mut) {
                        for item in items {
                            if let Some(holders) =
                                item.get_mut("holders").and_then(Value::as_array_mut)
                            {
                                for h in holders {
                                    h.as_object_mut().unwrap().remove("held_for");
                                }
                            }
                            for moving in [
                                "grants_per_second",
                                "hold_p50_ms",
                                "hold_p99_ms",
                                "wait_p50_ms",
                                "wait_p99_ms",
                            ] {
                                item.as_object_mut().unwrap().remove(moving);
                            }
                        }
                    }
                }
            }
            out.push((path, body));
        }
        out
    };
    let alone = answers(&c).await;
    assert_eq!(
        alone[0].1["locks"][0]["name"], "orders/job",
        "{:?}",
        alone[0]
    );
    assert_eq!(alone[3].1["kvs"][0]["key"], "orders/k", "{:?}", alone[3]);
    // Another team's locks and keys, sorting before and between.
    for name in ["billing/a", "billing/b"] {
        hold(&c, BILLING, name).await;
    }
    for key in ["billing/k1", "billing/k2", "billing/k3"] {
        put_as(&c, BILLING, &format!("/v1/kv/{key}")).await;
    }
    let beside = answers(&c).await;
    for ((path, a), (_, b)) in alone.iter().zip(&beside) {
        assert_eq!(a, b, "{path}");
    }
}

/// Finding 8: `baton lock` handed `BATON_TOKEN` to the command it runs, so any command run
/// under a lock could act as the lock's principal. Now the command sees the token only
/// with `--pass-token`, and never the server's own secrets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn baton_lock_passes_its_token_to_the_command_only_when_asked() {
    let peer = format!("127.0.0.1:{}", free_port());
    let c = auth_node(&peer).await;
    let endpoint = c.node(1).api.clone();
    let run = |extra: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_baton"))
            .args(["--endpoints", &endpoint, "lock"])
            .args(extra)
            .args([
                "orders/cron",
                "--",
                "sh",
                "-c",
                "echo \"token=${BATON_TOKEN:-none} secret=${BATON_CLUSTER_SECRET:-none} fence=$BATON_FENCE\"",
            ])
            .env("BATON_TOKEN", ORDERS)
            .env("BATON_CLUSTER_SECRET", "not-for-the-command-either")
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let withheld = run(&[]);
    assert!(
        withheld.contains("token=none secret=none fence="),
        "{withheld}"
    );
    let passed = run(&["--pass-token"]);
    assert!(
        passed.contains(&format!("token={ORDERS} secret=none")),
        "{passed}"
    );
}

/// Finding 6: the open loopback API was a web page's API: a page could post `text/plain`
/// cross-site without a preflight, and a page whose name was rebound to 127.0.0.1 could
/// read the answers. Now a body without `Content-Type: application/json` is 415, a `Host`
/// that is not an address or a name of the node is 403, and so is another site's
/// `Origin`; none of them changes anything. The node's own console (same origin) works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_refuses_what_a_web_page_could_send() {
    let c = Cluster::single().await;
    let api = c.node(1).api.clone();
    let before = c.revision(1).await;
    let http = reqwest::Client::new();
    let url = format!("http://{api}/v1/leases");
    let status = |r: reqwest::Response| r.status().as_u16();
    // A form or text body, as a page can send cross-site without asking first.
    for content_type in [
        None,
        Some("text/plain"),
        Some("application/x-www-form-urlencoded"),
    ] {
        let mut request = http.post(&url).body(r#"{"ttl_ms": 60000}"#);
        if let Some(t) = content_type {
            request = request.header("content-type", t);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status().as_u16(), 415, "{content_type:?}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["code"], "unsupported_media_type");
    }
    // DNS rebinding: a name this node was never told it has.
    let rebound = http
        .post(&url)
        .header(
            "host",
            format!("evil.example:{}", api.rsplit(':').next().unwrap()),
        )
        .json(&json!({"ttl_ms": 60_000}))
        .send()
        .await
        .unwrap();
    assert_eq!(status(rebound), 403);
    let read = http
        .get(format!("http://{api}/v1/locks"))
        .header("host", "evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(status(read), 403);
    // A cross-site page, and a sandboxed one.
    for origin in ["http://evil.example", "null", "http://localhost:1"] {
        let cross = http
            .post(&url)
            .header("origin", origin)
            .json(&json!({"ttl_ms": 60_000}))
            .send()
            .await
            .unwrap();
        assert_eq!(status(cross), 403, "{origin}");
    }
    assert_eq!(c.revision(1).await, before, "nothing was applied");
    // The console's own calls: same origin, JSON.
    let own = http
        .post(&url)
        .header("origin", format!("http://{api}"))
        .json(&json!({"ttl_ms": 60_000}))
        .send()
        .await
        .unwrap();
    assert_eq!(status(own), 201);
    // `localhost` is the node's own.
    let local = http
        .get(format!("http://{api}/v1/cluster"))
        .header(
            "host",
            format!("localhost:{}", api.rsplit(':').next().unwrap()),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(status(local), 200);
}

/// Reads `response`'s SSE stream until a chunk holds `needle`; the text read so far.
async fn read_until(response: reqwest::Response, needle: &str, within: Duration) -> String {
    use futures_util::StreamExt;
    let mut stream = response.bytes_stream();
    let mut text = String::new();
    let found = tokio::time::timeout(within, async {
        while let Some(chunk) = stream.next().await {
            text.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
            if text.contains(needle) {
                return true;
            }
        }
        false
    })
    .await;
    assert!(
        matches!(found, Ok(true)),
        "no {needle:?} within {within:?}: {text}"
    );
    text
}

/// Finding 7: a SIGHUP that removed a principal stopped its new requests, but its open
/// watches and held-open acquires went on. Now they end within a second: the watch with an
/// `error` event, the acquire with 401 (its queue place is cancelled); a principal whose
/// rules no longer allow what it watches is told `permission_denied`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_that_revokes_a_principal_ends_its_open_streams() {
    let peer = format!("127.0.0.1:{}", free_port());
    let c = auth_node(&peer).await;
    let file = c.data_dir().join("auth.toml");
    let original = std::fs::read_to_string(&file).unwrap();
    hold(&c, ORDERS, "orders/job").await;
    let waiter_lease = lease_as(&c, ORDERS).await;
    let watch = |token: &'static str| {
        c.http
            .get(c.node(1).url("/v1/watch?prefix=orders/"))
            .bearer_auth(token)
            .send()
    };
    let hup = || {
        let pid = c.node(1).pid().unwrap().to_string();
        assert!(
            Command::new("kill")
                .args(["-HUP", &pid])
                .status()
                .unwrap()
                .success()
        );
    };
    // Narrowed: orders may no longer watch. Its watch ends with permission_denied.
    let narrowed_watch = watch(ORDERS).await.unwrap();
    assert_eq!(narrowed_watch.status(), 200);
    std::fs::write(
        &file,
        original.replace(
            "  { namespace = \"watches\", prefix = \"orders/\", access = \"read\" },\n",
            "",
        ),
    )
    .unwrap();
    hup();
    let text = read_until(narrowed_watch, "permission_denied", Duration::from_secs(1)).await;
    assert!(text.contains("event: error"), "{text}");
    // Removed: orders is gone from the file. Its held-open acquire answers 401 and its
    // queue place is cancelled; a watch of the admin's goes on.
    std::fs::write(&file, &original).unwrap();
    hup();
    let deadline = Instant::now() + Duration::from_secs(5);
    let orders_watch = loop {
        let w = watch(ORDERS).await.unwrap();
        if w.status() == 200 {
            break w;
        }
        assert!(Instant::now() < deadline, "the restored file did not take");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let ops_watch = watch(OPS).await.unwrap();
    let waiter = {
        let http = c.http.clone();
        let url = c.node(1).url("/v1/locks/orders%2Fjob/acquire");
        tokio::spawn(async move {
            http.post(url)
                .bearer_auth(ORDERS)
                .json(&json!({"lease_id": waiter_lease, "owner": "waiter", "wait_ms": 60_000}))
                .send()
                .await
                .unwrap()
        })
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while c.lock_queue_as(ORDERS, "orders%2Fjob").await.is_empty() {
        assert!(Instant::now() < deadline, "the waiter did not queue");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let without_orders = original
        .split("[[principal]]")
        .filter(|p| !p.contains("name = \"orders\""))
        .collect::<Vec<_>>()
        .join("[[principal]]");
    std::fs::write(&file, without_orders).unwrap();
    let revoked_at = Instant::now();
    hup();
    let text = read_until(orders_watch, "unauthenticated", Duration::from_secs(1)).await;
    assert!(text.contains("event: error"), "{text}");
    let answer = tokio::time::timeout(Duration::from_secs(1), waiter)
        .await
        .expect("the held-open acquire ended within a second")
        .unwrap();
    assert_eq!(answer.status(), 401);
    assert!(revoked_at.elapsed() < Duration::from_secs(2));
    // Its place is gone (cancelled as for a client that left); the admin still watches.
    let deadline = Instant::now() + Duration::from_secs(5);
    while !c.lock_queue_as(OPS, "orders%2Fjob").await.is_empty() {
        assert!(
            Instant::now() < deadline,
            "the revoked waiter kept its place"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    put_as(&c, OPS, "/v1/kv/orders/after").await;
    read_until(ops_watch, "orders/after", Duration::from_secs(2)).await;
}

trait QueueAs {
    /// The queue of lock `name` (encoded) as `token` sees it.
    async fn lock_queue_as(&self, token: &str, name: &str) -> Vec<Value>;
}

impl QueueAs for Cluster {
    async fn lock_queue_as(&self, token: &str, name: &str) -> Vec<Value> {
        let (_, state) = call(self, token, Method::GET, &format!("/v1/locks/{name}"), None).await;
        state["queue"].as_array().cloned().unwrap_or_default()
    }
}

/// Finding 5: quotas counted leases and keys only, so a principal could hold or queue for
/// any number of locks and store owner strings and election values without bound. Now
/// holds, queue places (those a 202 keeps included), owner strings and election values
/// are counted too: over the quota is 429 `quota_exceeded` and nothing changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quotas_count_holds_queue_places_owner_strings_and_election_values() {
    let peer = format!("127.0.0.1:{}", free_port());
    let c = auth_node(&peer).await;
    let (status, body) = call(
        &c,
        SMALL,
        Method::POST,
        "/v1/leases",
        Some(json!({"ttl_ms": 60_000})),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let lease = body["lease_id"].as_u64().unwrap();
    let acquire = async |name: &str, owner: &str| {
        let path = format!("/v1/locks/small%2F{name}/acquire");
        let body = json!({"lease_id": lease, "owner": owner});
        call(&c, SMALL, Method::POST, &path, Some(body)).await
    };
    assert_eq!(acquire("a", "w").await.0, 200);
    // An owner string over the bytes left is refused, and so is a third claim.
    let (_, cluster) = call(&c, OPS, Method::GET, "/v1/cluster", None).await;
    let before = cluster["revision"].as_u64().unwrap();
    let (status, body) = acquire("b", &"o".repeat(100)).await;
    assert_eq!(
        (status, &body["error"]["resource"]),
        (429, &json!("state_bytes")),
        "{body}"
    );
    assert_eq!(acquire("b", "w").await.0, 200);
    let (status, body) = acquire("c", "w").await;
    assert_eq!(
        (status, &body["error"]["resource"]),
        (429, &json!("claims")),
        "{body}"
    );
    let (status, body) = call(
        &c,
        SMALL,
        Method::POST,
        "/v1/elections/small%2Fe/campaign",
        Some(json!({"lease_id": lease, "value": "v"})),
    )
    .await;
    assert_eq!(
        (status, &body["error"]["resource"]),
        (429, &json!("claims")),
        "{body}"
    );
    let (_, cluster) = call(&c, OPS, Method::GET, "/v1/cluster", None).await;
    assert_eq!(
        cluster["revision"].as_u64().unwrap(),
        before + 1,
        "only the one grant"
    );
}

/// Finding 9: names could hold bidirectional controls and zero-width characters, so the
/// console and the logs showed another name than the one stored; and an election's leader
/// changes reached admins only. Now such names are a clear 400, and a principal that may
/// read an election sees its `election_leader` events.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hidden_characters_are_refused_and_leader_changes_reach_readers() {
    let peer = format!("127.0.0.1:{}", free_port());
    let c = auth_node(&peer).await;
    let (_, cluster) = call(&c, OPS, Method::GET, "/v1/cluster", None).await;
    for path in [
        "/v1/kv/orders/a%E2%80%AEb",
        "/v1/kv/orders/zero%E2%80%8Bwidth",
    ] {
        let (status, body) = call(&c, ORDERS, Method::PUT, path, Some(json!({"value": "v"}))).await;
        assert_eq!(status, 400, "{path}: {body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("zero-width"),
            "{body}"
        );
    }
    let (_, after) = call(&c, OPS, Method::GET, "/v1/cluster", None).await;
    assert_eq!(after["revision"], cluster["revision"]);
    // A reader of the election sees its leader change.
    let watch = c
        .http
        .get(c.node(1).url("/v1/watch?election=orders/e"))
        .bearer_auth(ORDERS)
        .send()
        .await
        .unwrap();
    assert_eq!(watch.status(), 200);
    let lease = lease_as(&c, ORDERS).await;
    let (status, body) = call(
        &c,
        ORDERS,
        Method::POST,
        "/v1/elections/orders%2Fe/campaign",
        Some(json!({"lease_id": lease, "value": "me"})),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let text = read_until(watch, "election_leader", Duration::from_secs(5)).await;
    assert!(text.contains("\"value\":\"me\""), "{text}");
}

/// Finding 2 (the part a client sees): the ranges of one transaction branch were bounded
/// one by one only; now they are bounded together, before anything is proposed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transactions_ranges_are_bounded_together() {
    let c = Cluster::single().await;
    let before = c.revision(1).await;
    let range = json!({"op": "range", "prefix": "", "limit": 6000});
    let (status, body) = c
        .post(1, "/v1/txn", json!({"success": [range.clone(), range]}))
        .await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("12000 values"),
        "{body}"
    );
    assert_eq!(c.revision(1).await, before);
}
