//! baton against etcd 3.4 in the same run: a real 3-node cluster of each on loopback
//! (started and stopped here, on free ports), the same workloads through each one's
//! HTTP/JSON API, requests to the leader (one row through a follower, which forwards),
//! HTTP/1.1 keep-alive, one connection per client.
//!
//! Run: `cargo bench -p baton --bench http` (all rows, 10 s windows, 3 fresh-cluster runs,
//! medians). Arguments after `--`:
//! - `quick`: 3 s windows, one run;
//! - `runs=N`, `secs=S`: runs per system and window length;
//! - `only=baton` or `only=etcd`;
//! - `rows=a;b`: only the rows whose label contains one of these strings;
//! - `server_threads=N`: tokio worker threads per baton server (default one per core);
//! - `etcd_procs=N`: `GOMAXPROCS` of each etcd server (default one per core);
//! - `baton=PATH`: the baton binary to start (default: this build's), to compare builds;
//! - `versus=PATH`: a second baton binary measured in the same run, beside the first and
//!   etcd (rows alternate between the three clusters), with the ratio of the two builds.
//!
//! - `scale` (or `scale=N`): instead of the comparison, one node holding 1 000 000 (or N)
//!   locks, each with its own lease: memory per lock, restart time, and lock-cycle
//!   throughput at that size against empty (the same node before the fill, and an empty
//!   twin node in interleaved windows).
//!
//! - `disk`: instead of the comparison, how this machine's disk serves the flushes a commit
//!   waits for: one small write + `fdatasync` alone, and three at the same instant (three
//!   nodes on one disk, as in the comparison), where a commit needs the second to finish;
//!   two at once for comparison.
//!
//! - `floor`: instead of the comparison, three attempts of: the second of three concurrent
//!   flushes, a loopback round trip between two threads (also with both pinned to one
//!   CPU and to two, which shows what waking an idle CPU costs), and a single-client put
//!   on a baton and an etcd cluster (`secs=S` windows); prints a put's floor on this machine
//!   (two round trips plus that flush, no CPU spent anywhere) against both puts and half
//!   of etcd's, which is what 2x etcd's throughput needs.
//!
//! etcd is `etcd` on the PATH (Debian `etcd-server`); without it, baton runs alone. Each
//! row prints throughput, p50/p99 latency and the servers' CPU time per operation (user +
//! system, all three processes, from `/proc/<pid>/stat`), and with both systems the ratios
//! baton / etcd of throughput and of CPU per operation. Both clusters run through a whole
//! run and each row is measured on one and then the other (which goes first alternates),
//! so a ratio compares windows taken back to back; the table's ratios are the medians of
//! the runs' own ratios. The idle CPU of each cluster is measured first, over the same
//! window. The first line printed says how the machine's CPUs idle (cpuidle driver and
//! governor, and `guest_halt_poll_ns` on a VM guest with `haltpoll`), which moves the
//! single-client rows of both systems.

#![allow(
    clippy::print_stdout,
    clippy::unwrap_used,
    clippy::expect_used,
    missing_docs
)]

use base64::Engine;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

const VALUE_64: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

/// User + system CPU seconds of a process so far.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let Some(paren) = stat.rfind(')') else {
        return 0.0;
    };
    let fields: Vec<&str> = stat[paren + 2..].split_whitespace().collect();
    let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    ticks / 100.0
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum System {
    /// baton: `Baton(0)` is `baton=` (or this build), `Baton(1)` is `versus=`.
    Baton(usize),
    Etcd,
}

impl System {
    fn name(self) -> &'static str {
        match self {
            System::Baton(0) => "baton",
            System::Baton(_) => "versus",
            System::Etcd => "etcd",
        }
    }

    /// The binary of a baton system.
    fn binary(self) -> String {
        match self {
            System::Baton(1) => versus_binary().unwrap_or_else(baton_binary),
            _ => baton_binary(),
        }
    }
}

/// A running 3-node cluster and the leader's client address.
struct Cluster {
    system: System,
    procs: Vec<Proc>,
    leader: String,
    /// The client address of a node that is not the leader.
    follower: String,
    _dir: tempfile::TempDir,
}

impl Cluster {
    fn cpu(&self) -> f64 {
        self.procs.iter().map(|p| cpu_seconds(p.0.id())).sum()
    }
}

fn spawn_baton(binary: &str, config: &std::path::Path, id: u64) -> Proc {
    Proc(
        Command::new(binary)
            .args(["serve", "--config", &config.display().to_string()])
            .args(["--node", &id.to_string()])
            .env("RUST_LOG", "error")
            .envs(server_threads().map(|n| ("TOKIO_WORKER_THREADS", n)))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    )
}

/// `baton=PATH`: another baton binary to measure (e.g. a build to compare with).
fn baton_binary() -> String {
    std::env::args()
        .find_map(|a| a.strip_prefix("baton=").map(str::to_owned))
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_baton").to_owned())
}

/// `versus=PATH`: a second baton binary measured in the same run.
fn versus_binary() -> Option<String> {
    std::env::args().find_map(|a| a.strip_prefix("versus=").map(str::to_owned))
}

/// `server_threads=N`: tokio worker threads of each baton server (default: one per core).
fn server_threads() -> Option<String> {
    std::env::args().find_map(|a| a.strip_prefix("server_threads=").map(str::to_owned))
}

/// `etcd_procs=N`: Go scheduler threads (`GOMAXPROCS`) of each etcd server (default: one
/// per core), to compare with `server_threads=N`.
fn etcd_procs() -> Option<String> {
    std::env::args().find_map(|a| a.strip_prefix("etcd_procs=").map(str::to_owned))
}

/// The first of `urls` that is not the leader's (the leader's own for a single node).
fn other_than(leader: &str, mut urls: impl Iterator<Item = String>) -> String {
    urls.find(|url| url != leader)
        .unwrap_or_else(|| leader.to_owned())
}

async fn start_baton(http: &reqwest::Client, nodes: u64, system: System) -> Cluster {
    let binary = system.binary();
    let dir = tempfile::TempDir::new_in(".").unwrap();
    let mut file = String::new();
    let mut apis = Vec::new();
    for id in 1..=nodes {
        let api = format!("127.0.0.1:{}", free_port());
        let peer = format!("127.0.0.1:{}", free_port());
        file.push_str(&format!(
            "[[node]]\nid = {id}\napi = \"{api}\"\npeer = \"{peer}\"\ndata_dir = \"n{id}\"\n\n"
        ));
        apis.push(api);
    }
    let path = dir.path().join("cluster.toml");
    std::fs::write(&path, file).unwrap();
    let procs = (1..=nodes)
        .map(|id| spawn_baton(&binary, &path, id))
        .collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    let leader = 'found: loop {
        for api in &apis {
            if let Some(v) = baton_status(http, &format!("http://{api}")).await
                && v["state"] == "leader"
            {
                break 'found format!("http://{api}");
            }
        }
        assert!(Instant::now() < deadline, "no baton leader");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let follower = other_than(&leader, apis.iter().map(|api| format!("http://{api}")));
    Cluster {
        system,
        procs,
        leader,
        follower,
        _dir: dir,
    }
}

async fn start_etcd(http: &reqwest::Client) -> Cluster {
    let dir = tempfile::TempDir::new_in(".").unwrap();
    let ports: Vec<(u16, u16)> = (0..3).map(|_| (free_port(), free_port())).collect();
    let initial: Vec<String> = ports
        .iter()
        .enumerate()
        .map(|(i, (_, peer))| format!("n{i}=http://127.0.0.1:{peer}"))
        .collect();
    let initial = initial.join(",");
    let procs = ports
        .iter()
        .enumerate()
        .map(|(i, (client, peer))| {
            let client = format!("http://127.0.0.1:{client}");
            let peer = format!("http://127.0.0.1:{peer}");
            Proc(
                Command::new("etcd")
                    .args(["--name", &format!("n{i}")])
                    .args([
                        "--data-dir",
                        &dir.path().join(format!("n{i}")).display().to_string(),
                    ])
                    .args([
                        "--listen-client-urls",
                        &client,
                        "--advertise-client-urls",
                        &client,
                    ])
                    .args([
                        "--listen-peer-urls",
                        &peer,
                        "--initial-advertise-peer-urls",
                        &peer,
                    ])
                    .args([
                        "--initial-cluster",
                        &initial,
                        "--initial-cluster-state",
                        "new",
                    ])
                    .args(["--initial-cluster-token", "bench", "--log-level", "error"])
                    .args(["--logger", "zap"])
                    .envs(etcd_procs().map(|n| ("GOMAXPROCS", n)))
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .expect("start etcd"),
            )
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    let leader = 'found: loop {
        for (client, _) in &ports {
            let url = format!("http://127.0.0.1:{client}");
            if let Ok(r) = http
                .post(format!("{url}/v3/maintenance/status"))
                .json(&json!({}))
                .send()
                .await
                && let Ok(v) = r.json::<Value>().await
                && v["leader"].is_string()
                && v["leader"] == v["header"]["member_id"]
            {
                break 'found url;
            }
        }
        assert!(Instant::now() < deadline, "no etcd leader");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let follower = other_than(
        &leader,
        ports
            .iter()
            .map(|(client, _)| format!("http://127.0.0.1:{client}")),
    );
    Cluster {
        system: System::Etcd,
        procs,
        leader,
        follower,
        _dir: dir,
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Workload {
    /// Acquire + release of the client's own lock with its own lease.
    LockCycle,
    /// Every client on one lock: a waiting acquire (a handoff each), then a release.
    Handoff,
    /// Keepalives of the client's own lease.
    Keepalive,
    /// Puts of 64-byte values to distinct keys.
    Put,
    /// Linearizable gets of an existing key.
    Get,
    /// Serializable (local) gets: an HTTP round trip with no consensus, for the floor.
    LocalGet,
    /// Compare-and-set on the key's mod revision, each client its own key.
    Cas,
}

struct Row {
    label: &'static str,
    workload: Workload,
    clients: usize,
    /// Requests go to a follower, which forwards them (both systems), instead of the leader.
    via_follower: bool,
}

const ROWS: &[Row] = &[
    Row {
        label: "lock cycle, 1 client",
        workload: Workload::LockCycle,
        clients: 1,
        via_follower: false,
    },
    Row {
        label: "lock cycle, 16 clients",
        workload: Workload::LockCycle,
        clients: 16,
        via_follower: false,
    },
    Row {
        label: "lock cycle, 64 clients",
        workload: Workload::LockCycle,
        clients: 64,
        via_follower: false,
    },
    Row {
        label: "contended handoffs, 16 clients on one lock",
        workload: Workload::Handoff,
        clients: 16,
        via_follower: false,
    },
    Row {
        label: "lease keepalives, 16 clients",
        workload: Workload::Keepalive,
        clients: 16,
        via_follower: false,
    },
    Row {
        label: "kv put, 1 client",
        workload: Workload::Put,
        clients: 1,
        via_follower: false,
    },
    Row {
        label: "kv put through a follower, 1 client",
        workload: Workload::Put,
        clients: 1,
        via_follower: true,
    },
    Row {
        label: "kv put, 16 clients",
        workload: Workload::Put,
        clients: 16,
        via_follower: false,
    },
    Row {
        label: "kv put, 64 clients",
        workload: Workload::Put,
        clients: 64,
        via_follower: false,
    },
    Row {
        label: "linearizable kv get, 16 clients",
        workload: Workload::Get,
        clients: 16,
        via_follower: false,
    },
    Row {
        label: "serializable kv get, 1 client",
        workload: Workload::LocalGet,
        clients: 1,
        via_follower: false,
    },
    Row {
        label: "CAS on mod_revision, 16 clients",
        workload: Workload::Cas,
        clients: 16,
        via_follower: false,
    },
];

/// What one row measured.
#[derive(Clone, Debug)]
struct Measured {
    per_sec: f64,
    p50_ms: f64,
    p99_ms: f64,
    cpu_ms_per_op: f64,
    /// baton only: entries its leader's log grew by over the window, per operation (an
    /// entry carries a batch of commands, and each is one commit).
    entries_per_op: Option<f64>,
}

/// A baton node's `/v1/cluster` answer (`base` is `http://host:port`), if it gave one.
async fn baton_status(http: &reqwest::Client, base: &str) -> Option<Value> {
    let r = http.get(format!("{base}/v1/cluster")).send().await.ok()?;
    r.json::<Value>().await.ok()
}

/// The last index of the leader's log, for baton (etcd's entries hold one request each,
/// so their count says nothing about its batching).
async fn log_index(cluster: &Cluster) -> Option<u64> {
    if cluster.system == System::Etcd {
        return None;
    }
    let status = baton_status(&reqwest::Client::new(), &cluster.leader).await?;
    status["last_log_index"].as_u64()
}

async fn send(http: &reqwest::Client, method: reqwest::Method, url: &str, body: Value) -> Value {
    let r = http.request(method, url).json(&body).send().await.unwrap();
    let status = r.status();
    let text = r.text().await.unwrap();
    assert!(status.is_success(), "{url}: {status} {text}");
    serde_json::from_str(&text).unwrap_or(Value::Null)
}

async fn post(http: &reqwest::Client, url: &str, body: Value) -> Value {
    send(http, reqwest::Method::POST, url, body).await
}

/// The string or number at `v` as a u64 (etcd's gateway writes 64-bit numbers as strings).
fn num(v: &Value) -> u64 {
    v.as_u64()
        .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
        .unwrap_or(0)
}

/// One client's connection and whatever it set up before the window.
struct ClientState {
    http: reqwest::Client,
    base: String,
    system: System,
    id: usize,
    lease: u64,
    seq: u64,
    mod_revision: u64,
    lock: String,
}

impl ClientState {
    async fn setup(system: System, base: &str, workload: Workload, id: usize) -> ClientState {
        let http = reqwest::Client::builder()
            .pool_max_idle_per_host(1)
            .tcp_nodelay(true)
            .build()
            .unwrap();
        let mut c = ClientState {
            http,
            base: base.to_owned(),
            system,
            id,
            lease: 0,
            seq: 0,
            mod_revision: 0,
            lock: match workload {
                Workload::Handoff => "hot".into(),
                _ => format!("own-{id}-{}", uuid_ish()),
            },
        };
        if matches!(
            workload,
            Workload::LockCycle | Workload::Handoff | Workload::Keepalive
        ) {
            c.lease = match system {
                System::Baton(_) => {
                    let url = format!("{base}/v1/leases");
                    num(&post(&c.http, &url, json!({"ttl_ms": 60_000})).await["lease_id"])
                }
                System::Etcd => {
                    let url = format!("{base}/v3/lease/grant");
                    num(&post(&c.http, &url, json!({"TTL": 60})).await["ID"])
                }
            };
        }
        if matches!(workload, Workload::Get | Workload::LocalGet | Workload::Cas) {
            c.mod_revision = c.put(&c.key()).await;
        }
        c
    }

    fn key(&self) -> String {
        format!("bench-{}-{}", self.id, self.seq)
    }

    /// Writes the key; returns its new mod revision.
    async fn put(&self, key: &str) -> u64 {
        match self.system {
            System::Baton(_) => {
                let url = format!("{}/v1/kv/{key}", self.base);
                let body = json!({"value": VALUE_64});
                num(&send(&self.http, reqwest::Method::PUT, &url, body).await["revision"])
            }
            System::Etcd => {
                let url = format!("{}/v3/kv/put", self.base);
                let body = json!({"key": b64(key), "value": b64(VALUE_64)});
                num(&post(&self.http, &url, body).await["header"]["revision"])
            }
        }
    }

    /// One operation of `workload`; returns when it is answered. For a handoff, the
    /// latency that counts is the acquire's, returned as `Some`.
    async fn op(&mut self, workload: Workload) -> Option<Duration> {
        let (base, http) = (&self.base, &self.http);
        match (workload, self.system) {
            (Workload::LockCycle | Workload::Handoff, System::Baton(_)) => {
                let t = Instant::now();
                let wait_ms = if workload == Workload::Handoff {
                    60_000
                } else {
                    0
                };
                let url = format!("{base}/v1/locks/{}", self.lock);
                let owner = format!("c{}", self.id);
                let body = json!({"lease_id": self.lease, "owner": owner, "wait_ms": wait_ms});
                post(http, &format!("{url}/acquire"), body).await;
                let acquired = t.elapsed();
                let body = json!({"lease_id": self.lease, "owner": owner});
                post(http, &format!("{url}/release"), body).await;
                (workload == Workload::Handoff).then_some(acquired)
            }
            (Workload::LockCycle | Workload::Handoff, System::Etcd) => {
                let t = Instant::now();
                let body = json!({"name": b64(&self.lock), "lease": self.lease.to_string()});
                let key = post(http, &format!("{base}/v3/lock/lock"), body).await["key"].clone();
                let acquired = t.elapsed();
                post(http, &format!("{base}/v3/lock/unlock"), json!({"key": key})).await;
                (workload == Workload::Handoff).then_some(acquired)
            }
            (Workload::Keepalive, System::Baton(_)) => {
                let url = format!("{base}/v1/leases/{}/keepalive", self.lease);
                post(http, &url, json!({})).await;
                None
            }
            (Workload::Keepalive, System::Etcd) => {
                let body = json!({"ID": self.lease.to_string()});
                let r = post(http, &format!("{base}/v3/lease/keepalive"), body).await;
                assert!(num(&r["result"]["TTL"]) > 0, "keepalive: {r}");
                None
            }
            (Workload::Put, _) => {
                self.seq += 1;
                self.put(&self.key()).await;
                None
            }
            (Workload::Get | Workload::LocalGet, System::Baton(_)) => {
                let local = if workload == Workload::LocalGet {
                    "?consistency=serializable"
                } else {
                    ""
                };
                let url = format!("{base}/v1/kv/{}{local}", self.key());
                let r = http.get(url).send().await.unwrap();
                assert!(r.status().is_success());
                r.bytes().await.unwrap();
                None
            }
            (Workload::Get | Workload::LocalGet, System::Etcd) => {
                let serializable = workload == Workload::LocalGet;
                let body = json!({"key": b64(&self.key()), "serializable": serializable});
                let r = post(http, &format!("{base}/v3/kv/range"), body).await;
                assert_eq!(num(&r["count"]), 1, "{r}");
                None
            }
            (Workload::Cas, System::Baton(_)) => {
                let url = format!("{base}/v1/kv/{}", self.key());
                let body = json!({"value": VALUE_64, "prev_revision": self.mod_revision});
                let r = send(http, reqwest::Method::PUT, &url, body).await;
                self.mod_revision = num(&r["revision"]);
                None
            }
            (Workload::Cas, System::Etcd) => {
                let key = b64(&self.key());
                let body = json!({
                    "compare": [{"target": "MOD", "key": key, "mod_revision": self.mod_revision.to_string()}],
                    "success": [{"request_put": {"key": key, "value": b64(VALUE_64)}}],
                });
                let r = post(http, &format!("{base}/v3/kv/txn"), body).await;
                assert_eq!(r["succeeded"], true, "CAS failed: {r}");
                self.mod_revision = num(&r["header"]["revision"]);
                None
            }
        }
    }
}

/// A name no earlier run used (lock names stay in etcd's keyspace as deleted keys).
fn uuid_ish() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize].as_secs_f64() * 1e3
}

async fn measure(cluster: &Cluster, row: &Row, window: Duration) -> Measured {
    let mut clients = Vec::new();
    let base = if row.via_follower {
        &cluster.follower
    } else {
        &cluster.leader
    };
    for id in 0..row.clients {
        clients.push(ClientState::setup(cluster.system, base, row.workload, id).await);
    }
    let start = Arc::new(tokio::sync::Barrier::new(row.clients + 1));
    let mut tasks = tokio::task::JoinSet::new();
    for mut client in clients {
        let start = start.clone();
        let workload = row.workload;
        tasks.spawn(async move {
            start.wait().await;
            let began = Instant::now();
            let end = began + window;
            let mut latencies = Vec::new();
            loop {
                let t = Instant::now();
                let acquired = client.op(workload).await;
                let done = Instant::now();
                if done > end {
                    break;
                }
                latencies.push(acquired.unwrap_or(done - t));
            }
            latencies
        });
    }
    start.wait().await;
    let cpu_before = cluster.cpu();
    let began = Instant::now();
    let index_before = log_index(cluster).await;
    tokio::time::sleep(window.saturating_sub(began.elapsed())).await;
    let cpu = cluster.cpu() - cpu_before;
    let elapsed = began.elapsed();
    let index_after = log_index(cluster).await;
    let mut latencies = Vec::new();
    while let Some(done) = tasks.join_next().await {
        latencies.extend(done.unwrap());
    }
    latencies.sort();
    let ops = latencies.len() as f64;
    Measured {
        per_sec: ops / elapsed.as_secs_f64(),
        p50_ms: percentile(&latencies, 0.5),
        p99_ms: percentile(&latencies, 0.99),
        cpu_ms_per_op: cpu * 1e3 / ops.max(1.0),
        entries_per_op: index_before
            .zip(index_after)
            .map(|(a, b)| b.saturating_sub(a) as f64 / ops.max(1.0)),
    }
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(|a, b| a.total_cmp(b));
    xs[xs.len() / 2]
}

struct Options {
    runs: usize,
    window: Duration,
    systems: Vec<System>,
    rows: Vec<String>,
}

fn options() -> Options {
    let mut o = Options {
        runs: 3,
        window: Duration::from_secs(10),
        systems: vec![System::Baton(0), System::Etcd],
        rows: Vec::new(),
    };
    for arg in std::env::args().skip(1) {
        if arg == "quick" {
            o.runs = 1;
            o.window = Duration::from_secs(3);
        } else if let Some(n) = arg.strip_prefix("runs=") {
            o.runs = n.parse().expect("runs=N");
        } else if let Some(s) = arg.strip_prefix("secs=") {
            o.window = Duration::from_secs_f64(s.parse().expect("secs=S"));
        } else if let Some(s) = arg.strip_prefix("only=") {
            o.systems = match s {
                "baton" => vec![System::Baton(0)],
                "etcd" => vec![System::Etcd],
                other => panic!("only=baton|etcd, not {other}"),
            };
        } else if let Some(r) = arg.strip_prefix("rows=") {
            o.rows = r.split(';').map(str::to_owned).collect();
        }
    }
    let etcd = Command::new("etcd").arg("--version").output().is_ok();
    if !etcd && o.systems.contains(&System::Etcd) {
        println!("etcd not found on the PATH (Debian etcd-server): measuring baton alone");
        o.systems.retain(|s| *s != System::Etcd);
    }
    if versus_binary().is_some() {
        o.systems.insert(1, System::Baton(1));
    }
    o
}

/// Resident memory of a process, in bytes (`VmRSS`).
fn rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .unwrap_or(0)
        * 1024
}

/// Waits until the single node answers `/readyz` and returns how long that took.
async fn ready(http: &reqwest::Client, base: &str, since: Instant) -> Duration {
    loop {
        if let Ok(r) = http.get(format!("{base}/readyz")).send().await
            && r.status().is_success()
        {
            return since.elapsed();
        }
        assert!(since.elapsed() < Duration::from_secs(600), "not ready");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Rounds of the scale bench's interleaved comparison (a window on an empty twin node and
/// one on the full node, each half the usual window, in alternating order).
const INTERLEAVED_ROUNDS: u32 = 4;

/// `scale`: one node holding `locks` locks, each with its own lease. Prints resident
/// memory per held lock, restart time with them, and lock-cycle throughput (16 clients) at
/// that size against the same node empty and, in interleaved windows, against an empty twin.
async fn scale(locks: usize, window: Duration) {
    let http = reqwest::Client::new();
    let mut cluster = start_baton(&http, 1, System::Baton(0)).await;
    let base = cluster.leader.clone();
    let row = Row {
        label: "lock cycle, 16 clients",
        workload: Workload::LockCycle,
        clients: 16,
        via_follower: false,
    };
    let twin = start_baton(&http, 1, System::Baton(0)).await;
    let empty = measure(&cluster, &row, window).await;
    println!(
        "empty node: lock cycle, 16 clients: {:.0}/s, p99 {:.2} ms",
        empty.per_sec, empty.p99_ms
    );
    let pid = cluster.procs[0].0.id();
    let rss_before = rss_bytes(pid);
    let filled = Instant::now();
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..128 {
        let (next, base) = (next.clone(), base.clone());
        tasks.spawn(async move {
            let http = reqwest::Client::new();
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= locks {
                    break;
                }
                let lease = post(
                    &http,
                    &format!("{base}/v1/leases"),
                    json!({"ttl_ms": 3_600_000}),
                )
                .await;
                let body = json!({"lease_id": lease["lease_id"], "owner": "o"});
                post(&http, &format!("{base}/v1/locks/held-{i}/acquire"), body).await;
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.unwrap();
    }
    let fill = filled.elapsed();
    // Let the checkpoints and a snapshot settle before reading memory.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let rss_after = rss_bytes(pid);
    println!(
        "filled {locks} leases + held locks in {:.1} s ({:.0} commands/s)",
        fill.as_secs_f64(),
        2.0 * locks as f64 / fill.as_secs_f64()
    );
    println!(
        "resident memory: {:.1} MiB empty, {:.1} MiB with {locks} held locks: {:.0} bytes per lock (with its lease)",
        rss_before as f64 / 1048576.0,
        rss_after as f64 / 1048576.0,
        (rss_after.saturating_sub(rss_before)) as f64 / locks as f64
    );
    let full = measure(&cluster, &row, window).await;
    println!(
        "with {locks} locks: lock cycle, 16 clients: {:.0}/s, p99 {:.2} ms ({:.0} % of empty)",
        full.per_sec,
        full.p99_ms,
        100.0 * full.per_sec / empty.per_sec
    );
    // The two windows above are minutes apart, and this shared machine's speed drifts by
    // more than the goal's 10 % in that time. So compare again with short windows taken in
    // turn on this node and on an empty twin (started at the beginning, idle since).
    let (mut at_size, mut at_empty) = (0.0, 0.0);
    for round in 1..=INTERLEAVED_ROUNDS {
        // Alternate which goes first, so that a steady drift favours neither.
        let (e, f) = if round % 2 == 1 {
            let e = measure(&twin, &row, window / 2).await;
            (e, measure(&cluster, &row, window / 2).await)
        } else {
            let f = measure(&cluster, &row, window / 2).await;
            (measure(&twin, &row, window / 2).await, f)
        };
        println!(
            "interleaved round {round}: empty twin {:.0}/s (p99 {:.2} ms), with {locks} locks {:.0}/s (p99 {:.2} ms): {:.0} %",
            e.per_sec,
            e.p99_ms,
            f.per_sec,
            f.p99_ms,
            100.0 * f.per_sec / e.per_sec
        );
        at_empty += e.per_sec;
        at_size += f.per_sec;
    }
    println!(
        "interleaved, {INTERLEAVED_ROUNDS} rounds of {:.0} s each: with {locks} locks {:.0}/s vs empty {:.0}/s ({:.0} % of empty)",
        window.as_secs_f64() / 2.0,
        at_size / f64::from(INTERLEAVED_ROUNDS),
        at_empty / f64::from(INTERLEAVED_ROUNDS),
        100.0 * at_size / at_empty
    );
    drop(twin);
    // Restart: a clean stop (SIGTERM), then a new process on the same data.
    let child = &mut cluster.procs[0].0;
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let _ = child.wait();
    let config = cluster._dir.path().join("cluster.toml");
    let started = Instant::now();
    cluster.procs[0] = spawn_baton(&baton_binary(), &config, 1);
    let up = ready(&http, &base, started).await;
    let last = http
        .get(format!("{base}/v1/locks/held-{}", locks - 1))
        .send()
        .await
        .unwrap()
        .json::<Value>()
        .await
        .unwrap();
    assert!(
        !last["holders"].as_array().unwrap().is_empty(),
        "lost a lock: {last}"
    );
    let at_ready = rss_bytes(cluster.procs[0].0.id());
    // The lease clock arms its deadlines once the node leads: read again after that.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let settled = rss_bytes(cluster.procs[0].0.id());
    println!(
        "restart with {locks} locks: ready in {:.2} s, resident {:.1} MiB then, {:.1} MiB 5 s later ({} bytes per lock over the empty node)",
        up.as_secs_f64(),
        at_ready as f64 / 1048576.0,
        settled as f64 / 1048576.0,
        settled.saturating_sub(rss_before) / locks as u64
    );
}

/// Rounds per measurement of `disk`, and the bytes each flush writes (about one entry).
const DISK_ROUNDS: usize = 400;
const DISK_WRITE: usize = 200;

/// What [`flush_round`] measured, medians in µs.
struct Flushes {
    /// From a round's release until the first, second, ... flush ended.
    kth_end: Vec<f64>,
    /// Each thread's own write and flush, from its start (after its stagger) to its end.
    own: Vec<f64>,
}

/// One thread's round in [`flush_round`].
struct Round {
    released: Instant,
    /// After the thread's stagger.
    started: Instant,
    ended: Instant,
}

/// `flushers` threads, each with its own file (written once, so a flush changes no file
/// size, as in sled's preallocated segments), released together `DISK_ROUNDS` times; each
/// writes `DISK_WRITE` bytes and `fdatasync`s, thread `i` starting `i * stagger_us` µs
/// after the release (spinning, so that its start is not a wake-up's).
fn flush_round(dir: &std::path::Path, flushers: usize, stagger_us: u64) -> Flushes {
    use std::os::unix::fs::FileExt;
    let barrier = Arc::new(std::sync::Barrier::new(flushers));
    let threads: Vec<_> = (0..flushers)
        .map(|i| {
            let path = dir.join(format!("flush-{flushers}-{i}"));
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                let file = std::fs::OpenOptions::new()
                    .create(true)
                    .truncate(true)
                    .read(true)
                    .write(true)
                    .open(&path)
                    .unwrap();
                file.write_all_at(&vec![0; DISK_ROUNDS * DISK_WRITE + 4096], 0)
                    .unwrap();
                file.sync_all().unwrap();
                let data = [b'x'; DISK_WRITE];
                let stagger = Duration::from_micros(stagger_us * i as u64);
                let mut ends = Vec::with_capacity(DISK_ROUNDS);
                for round in 0..DISK_ROUNDS {
                    barrier.wait();
                    let released = Instant::now();
                    while released.elapsed() < stagger {
                        std::hint::spin_loop();
                    }
                    let started = Instant::now();
                    file.write_all_at(&data, (round * DISK_WRITE) as u64)
                        .unwrap();
                    file.sync_data().unwrap();
                    ends.push(Round {
                        released,
                        started,
                        ended: Instant::now(),
                    });
                }
                ends
            })
        })
        .collect();
    let per_thread: Vec<Vec<Round>> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let own = per_thread
        .iter()
        .map(|t| {
            median(
                t.iter()
                    .map(|r| (r.ended - r.started).as_secs_f64() * 1e6)
                    .collect(),
            )
        })
        .collect();
    // The k-th flush to end in each round, measured from the earliest release of that round.
    let mut kth: Vec<Vec<f64>> = vec![Vec::new(); flushers];
    for round in 0..DISK_ROUNDS {
        let start = per_thread.iter().map(|t| t[round].released).min().unwrap();
        let mut ends: Vec<f64> = per_thread
            .iter()
            .map(|t| (t[round].ended - start).as_secs_f64() * 1e6)
            .collect();
        ends.sort_by(f64::total_cmp);
        for (k, end) in ends.into_iter().enumerate() {
            kth[k].push(end);
        }
    }
    Flushes {
        kth_end: kth.into_iter().map(median).collect(),
        own,
    }
}

/// Prints how this machine's CPUs idle. A virtual machine that halts an idle vCPU without
/// polling first (Linux's `haltpoll` with `guest_halt_poll_ns` 0) pays a round trip to the
/// host on every wake-up, which the single-client rows feel most (docs/performance.md).
fn print_cpu_idle() {
    let read = |path: &str| {
        std::fs::read_to_string(path).map_or_else(|_| "-".to_string(), |s| s.trim().to_string())
    };
    println!(
        "cpu idle: driver {}, governor {}, guest_halt_poll_ns {}",
        read("/sys/devices/system/cpu/cpuidle/current_driver"),
        read("/sys/devices/system/cpu/cpuidle/current_governor"),
        read("/sys/module/haltpoll/parameters/guest_halt_poll_ns"),
    );
}

/// `disk`: a lone flush, two at once and three at once, in turn, three times; then two
/// flushes with the second started 0 to 120 µs after the first, as a leader's own flush
/// and its follower's are when the nodes share one disk.
fn disk() {
    let dir = tempfile::tempdir().unwrap();
    let (mut lone, mut second, mut pair) = (Vec::new(), Vec::new(), Vec::new());
    for attempt in 0..3 {
        let one = flush_round(dir.path(), 1, 0).kth_end;
        let two = flush_round(dir.path(), 2, 0).kth_end;
        let three = flush_round(dir.path(), 3, 0).kth_end;
        println!(
            "attempt {attempt}: one flush alone {:.0} µs; two at once: first {:.0}, second {:.0} µs; three at once: first {:.0}, second {:.0}, third {:.0} µs",
            one[0], two[0], two[1], three[0], three[1], three[2]
        );
        lone.push(one[0]);
        pair.push(two[1]);
        second.push(three[1]);
    }
    let (lone, second, pair) = (median(lone), median(second), median(pair));
    println!(
        "medians of 3: a flush alone {lone:.0} µs; the second of three at once (a commit's quorum of durable copies) {second:.0} µs, {:.2}x; the second of two at once {pair:.0} µs, {:.2}x",
        second / lone,
        pair / lone
    );
    for stagger in [0, 10, 20, 30, 40, 60, 90, 120] {
        let own = flush_round(dir.path(), 2, stagger).own;
        println!(
            "two flushes, the second {stagger:>3} µs after the first: each from its own start {:.0} and {:.0} µs",
            own[0], own[1]
        );
    }
}

/// Round trips of `LOOPBACK_ROUNDS` messages of `DISK_WRITE` bytes between two threads
/// over one loopback TCP connection, each end asleep in `read` until the other writes (as
/// an idle server is); the median, in µs. With `cpus`, the two ends are pinned to those
/// CPUs: the same one, so that each wake-up happens on the CPU that is about to go to
/// sleep, or two, so that each wakes a CPU that may be idle (on a VM guest, halted). The
/// caller's own CPU set is restored after. Unpinned, the scheduler picks, and a run can
/// come out either way.
fn loopback_round_trip(cpus: Option<(usize, usize)>) -> f64 {
    use nix::sched::{CpuSet, sched_getaffinity, sched_setaffinity};
    use nix::unistd::Pid;
    use std::io::{Read, Write};
    let pin = |cpu: Option<usize>| {
        if let Some(cpu) = cpu {
            let mut one = CpuSet::new();
            one.set(cpu).unwrap();
            sched_setaffinity(Pid::from_raw(0), &one).unwrap();
        }
    };
    let before = sched_getaffinity(Pid::from_raw(0)).unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let echo = std::thread::spawn(move || {
        pin(cpus.map(|c| c.1));
        let (mut stream, _) = listener.accept().unwrap();
        stream.set_nodelay(true).unwrap();
        let mut buf = [0u8; DISK_WRITE];
        while stream.read_exact(&mut buf).is_ok() {
            if stream.write_all(&buf).is_err() {
                break;
            }
        }
    });
    pin(cpus.map(|c| c.0));
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream.set_nodelay(true).unwrap();
    let mut buf = [b'x'; DISK_WRITE];
    let mut times = Vec::with_capacity(LOOPBACK_ROUNDS);
    for _ in 0..LOOPBACK_ROUNDS {
        let sent = Instant::now();
        stream.write_all(&buf).unwrap();
        stream.read_exact(&mut buf).unwrap();
        times.push(sent.elapsed().as_secs_f64() * 1e6);
    }
    drop(stream);
    echo.join().unwrap();
    sched_setaffinity(Pid::from_raw(0), &before).unwrap();
    median(times)
}

/// How long fresh clusters are left to settle before anything is measured on them.
const SETTLE: Duration = Duration::from_secs(2);

/// Round trips per loopback measurement of `floor`.
const LOOPBACK_ROUNDS: usize = 2_000;

/// `floor`: the lowest time a single-client put could take on this machine, with no CPU
/// spent anywhere (two loopback round trips, client to leader and leader to follower, plus
/// the second of three concurrent flushes), next to etcd's and baton's measured puts in
/// the same attempts, and half of etcd's (what 2x etcd's throughput needs).
/// Without etcd on the PATH (`options` says so), the floor and baton's put only.
fn floor(o: &Options) {
    let window = o.window;
    let row = ROWS.iter().find(|r| r.label == "kv put, 1 client").unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    runtime.block_on(async {
        let http = reqwest::Client::new();
        let baton = start_baton(&http, 3, System::Baton(0)).await;
        let etcd = if o.systems.contains(&System::Etcd) {
            Some(start_etcd(&http).await)
        } else {
            None
        };
        tokio::time::sleep(SETTLE).await;
        // The CPUs this process may run on, for the pinned round trips.
        let allowed = {
            let set = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)).unwrap();
            (0..nix::sched::CpuSet::count())
                .filter(|&cpu| set.is_set(cpu).unwrap_or(false))
                .collect::<Vec<_>>()
        };
        let (mut floors, mut batons, mut etcds) = (Vec::new(), Vec::new(), Vec::new());
        for attempt in 0..3 {
            let flushes = flush_round(dir.path(), 3, 0).kth_end;
            let trip = loopback_round_trip(None);
            let one_cpu = loopback_round_trip(Some((allowed[0], allowed[0])));
            let two_cpus = match allowed.get(1) {
                Some(&second) => format!(
                    ", on two: {:.0} µs",
                    loopback_round_trip(Some((allowed[0], second)))
                ),
                None => String::new(),
            };
            let floor_ms = (2.0 * trip + flushes[1]) / 1e3;
            let ours = measure(&baton, row, window).await.p50_ms;
            let theirs = match &etcd {
                Some(etcd) => measure(etcd, row, window).await.p50_ms,
                None => f64::NAN,
            };
            println!(
                "attempt {attempt}: loopback round trip {trip:.0} µs (both ends on one CPU: {one_cpu:.0} µs{two_cpus}), second of three flushes {:.0} µs: floor {floor_ms:.3} ms; put p50: baton {ours:.3} ms, etcd {theirs:.3} ms (half: {:.3} ms)",
                flushes[1],
                theirs / 2.0
            );
            floors.push(floor_ms);
            batons.push(ours);
            etcds.push(theirs);
        }
        let (floor_ms, ours, theirs) = (median(floors), median(batons), median(etcds));
        println!(
            "medians of 3: a single-client put's floor {floor_ms:.3} ms; baton's put p50 {ours:.3} ms ({:.2}x the floor); etcd's {theirs:.3} ms, half of it {:.3} ms ({:.2}x the floor)",
            ours / floor_ms,
            theirs / 2.0,
            theirs / 2.0 / floor_ms
        );
    });
}

fn main() {
    if std::env::args().any(|a| a == "floor") {
        floor(&options());
        return;
    }
    if std::env::args().any(|a| a == "disk") {
        disk();
        return;
    }
    if let Some(arg) = std::env::args().find(|a| a.starts_with("scale")) {
        let locks = arg
            .strip_prefix("scale=")
            .map_or(1_000_000, |n| n.parse().expect("scale=N"));
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(scale(locks, Duration::from_secs(10)));
        return;
    }
    let o = options();
    print_cpu_idle();
    let rows: Vec<&Row> = ROWS
        .iter()
        .filter(|r| o.rows.is_empty() || o.rows.iter().any(|w| r.label.contains(w.as_str())))
        .collect();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    // results[system][row label] = one Measured per run; idle[system] = CPU-s per run.
    let mut results: BTreeMap<(usize, &str), Vec<Measured>> = BTreeMap::new();
    let mut idle: BTreeMap<usize, Vec<f64>> = BTreeMap::new();
    runtime.block_on(async {
        let http = reqwest::Client::new();
        for run in 0..o.runs {
            // Every system's cluster runs for the whole run, so that each row is measured
            // on each system back to back: this machine's speed drifts by more than the
            // differences measured over the minutes a run of every row takes.
            let mut clusters = Vec::new();
            for system in &o.systems {
                clusters.push(match system {
                    System::Baton(_) => start_baton(&http, 3, *system).await,
                    System::Etcd => start_etcd(&http).await,
                });
            }
            // Idle: settle, then the same window with no client (the other cluster idles
            // too).
            tokio::time::sleep(SETTLE).await;
            for (s, cluster) in clusters.iter().enumerate() {
                let before = cluster.cpu();
                tokio::time::sleep(o.window).await;
                let idle_share = (cluster.cpu() - before) / o.window.as_secs_f64();
                println!(
                    "run {run} {} idle: {:.2} % of one core",
                    cluster.system.name(),
                    idle_share * 100.0
                );
                idle.entry(s).or_default().push(idle_share);
            }
            for (r, row) in rows.iter().enumerate() {
                // Which system goes first alternates between rows and between runs.
                let mut order: Vec<usize> = (0..clusters.len()).collect();
                if (run + r) % 2 == 1 {
                    order.reverse();
                }
                for s in order {
                    let cluster = &clusters[s];
                    let m = measure(cluster, row, o.window).await;
                    let entries = m
                        .entries_per_op
                        .map_or(String::new(), |e| format!(", {e:.2} log entries/op"));
                    println!(
                        "run {run} {} {}: {:.0}/s, p50 {:.2} ms, p99 {:.2} ms, CPU {:.3} ms/op{entries}",
                        cluster.system.name(), row.label, m.per_sec, m.p50_ms, m.p99_ms, m.cpu_ms_per_op
                    );
                    results.entry((s, row.label)).or_default().push(m);
                }
            }
        }
    });
    println!(
        "\nmedians of {} run(s), {} s windows (ratios: medians of each run's ratio)",
        o.runs,
        o.window.as_secs_f64()
    );
    let names: Vec<String> = o.systems.iter().map(|s| s.name().to_owned()).collect();
    let etcd = o.systems.iter().position(|s| *s == System::Etcd);
    let versus = o.systems.iter().position(|s| *s == System::Baton(1));
    for (s, name) in names.iter().enumerate() {
        println!(
            "idle CPU, {name}: {:.2} % of one core",
            median(idle[&s].clone()) * 100.0
        );
    }
    println!(
        "| workload | {} | baton / etcd | CPU baton / etcd |{}",
        names
            .iter()
            .map(|n| format!("{n} /s (p50, p99 ms; CPU ms/op)"))
            .collect::<Vec<_>>()
            .join(" | "),
        if versus.is_some() {
            " versus / etcd | baton / versus |"
        } else {
            ""
        }
    );
    for row in &rows {
        let mut cells = Vec::new();
        for s in 0..o.systems.len() {
            let runs = &results[&(s, row.label)];
            let rate = median(runs.iter().map(|m| m.per_sec).collect());
            let p50 = median(runs.iter().map(|m| m.p50_ms).collect());
            let p99 = median(runs.iter().map(|m| m.p99_ms).collect());
            let cpu = median(runs.iter().map(|m| m.cpu_ms_per_op).collect());
            cells.push(format!("{rate:.0} ({p50:.2}, {p99:.2}; {cpu:.3})"));
        }
        // The ratios are medians of each run's own ratio (its two windows were taken back
        // to back), not ratios of the medians above.
        let ratio = |a: Option<usize>, b: Option<usize>, of: fn(&Measured) -> f64| {
            let runs = |s: Option<usize>| s.and_then(|s| results.get(&(s, row.label)));
            match (runs(a), runs(b)) {
                (Some(a), Some(b)) => format!(
                    "{:.2}",
                    median(a.iter().zip(b).map(|(x, y)| of(x) / of(y)).collect())
                ),
                _ => "-".into(),
            }
        };
        let rate = |m: &Measured| m.per_sec;
        let extra = if versus.is_some() {
            format!(
                " {} | {} |",
                ratio(versus, etcd, rate),
                ratio(Some(0), versus, rate)
            )
        } else {
            String::new()
        };
        println!(
            "| {} | {} | {} | {} |{extra}",
            row.label,
            cells.join(" | "),
            ratio(Some(0), etcd, rate),
            ratio(Some(0), etcd, |m| m.cpu_ms_per_op)
        );
    }
    if let Some(s) = o.systems.iter().position(|s| *s == System::Baton(0)) {
        println!("\nbaton's log entries per operation (medians; each entry is one commit):");
        for row in &rows {
            let entries: Vec<f64> = results[&(s, row.label)]
                .iter()
                .filter_map(|m| m.entries_per_op)
                .collect();
            if !entries.is_empty() {
                println!("  {}: {:.2}", row.label, median(entries));
            }
        }
    }
}
