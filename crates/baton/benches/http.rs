//! Load generator over HTTP/1.1 keep-alive against a real 3-node cluster of `baton serve`
//! processes (started and stopped here, on free loopback ports).
//!
//! Run: `cargo bench -p baton --bench http` (`-- quick` for a shorter run). Measures:
//! - uncontended lock cycles (acquire + release; each client its own lock and lease) with
//!   1, 16 and 64 clients;
//! - contended handoffs with 16 clients on one lock (each acquires with a wait, releases).
//!
//! Requests go to the leader's API port (a follower adds one forwarding hop).

#![allow(
    clippy::print_stdout,
    clippy::unwrap_used,
    clippy::expect_used,
    missing_docs
)]

use serde_json::{Value, json};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Node(Child);

impl Drop for Node {
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

fn start(dir: &std::path::Path) -> (Vec<Node>, Vec<String>) {
    let mut file = String::new();
    let mut apis = Vec::new();
    for id in 1..=3 {
        let api = format!("127.0.0.1:{}", free_port());
        let peer = format!("127.0.0.1:{}", free_port());
        file.push_str(&format!(
            "[[node]]\nid = {id}\napi = \"{api}\"\npeer = \"{peer}\"\ndata_dir = \"n{id}\"\n\n"
        ));
        apis.push(api);
    }
    let path = dir.join("cluster.toml");
    std::fs::write(&path, file).unwrap();
    let nodes = (1..=3)
        .map(|id| {
            Node(
                Command::new(env!("CARGO_BIN_EXE_baton"))
                    .args([
                        "serve",
                        "--config",
                        &path.display().to_string(),
                        "--node",
                        &id.to_string(),
                    ])
                    .env("RUST_LOG", "error")
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .unwrap(),
            )
        })
        .collect();
    (nodes, apis)
}

async fn leader_api(http: &reqwest::Client, apis: &[String]) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        for api in apis {
            if let Ok(r) = http.get(format!("http://{api}/v1/cluster")).send().await
                && let Ok(v) = r.json::<Value>().await
                && v["state"] == "leader"
            {
                return api.clone();
            }
        }
        assert!(Instant::now() < deadline, "no leader");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn post(http: &reqwest::Client, url: &str, body: Value) -> Value {
    let r = http.post(url).json(&body).send().await.unwrap();
    assert!(r.status().is_success(), "{url}: {}", r.status());
    r.json().await.unwrap()
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize].as_secs_f64() * 1e3
}

fn report(label: &str, ops: usize, elapsed: Duration, mut latencies: Vec<Duration>) {
    latencies.sort();
    println!(
        "{label}: {ops} in {:.2} s = {:.0}/s, p50 {:.2} ms, p99 {:.2} ms",
        elapsed.as_secs_f64(),
        ops as f64 / elapsed.as_secs_f64(),
        percentile(&latencies, 0.5),
        percentile(&latencies, 0.99)
    );
}

/// Uncontended: each client its own lock, latency of acquire + release. Contended: all
/// clients on one lock with waiting acquires, latency of the acquire (a handoff each).
#[derive(Clone, Copy, PartialEq)]
enum Workload {
    Uncontended,
    Contended,
}

async fn lock_cycles(api: &str, workload: Workload, clients: usize, cycles: usize) {
    let mut tasks = tokio::task::JoinSet::new();
    let started = Instant::now();
    for c in 0..clients {
        let api = api.to_owned();
        tasks.spawn(async move {
            let http = reqwest::Client::new();
            let leases = format!("http://{api}/v1/leases");
            let lease = post(&http, &leases, json!({"ttl_ms": 60_000})).await;
            let lease = lease["lease_id"].as_u64().unwrap();
            let (lock, wait_ms) = match workload {
                Workload::Uncontended => (format!("http://{api}/v1/locks/u{clients}-{c}"), 0),
                Workload::Contended => (format!("http://{api}/v1/locks/hot"), 60_000),
            };
            let owner = format!("c{c}");
            let mut latencies = Vec::with_capacity(cycles);
            for _ in 0..cycles {
                let t = Instant::now();
                let acquire = json!({"lease_id": lease, "owner": owner, "wait_ms": wait_ms});
                post(&http, &format!("{lock}/acquire"), acquire).await;
                if workload == Workload::Contended {
                    latencies.push(t.elapsed());
                }
                let release = json!({"lease_id": lease, "owner": owner});
                post(&http, &format!("{lock}/release"), release).await;
                if workload == Workload::Uncontended {
                    latencies.push(t.elapsed());
                }
            }
            latencies
        });
    }
    let mut latencies = Vec::new();
    while let Some(done) = tasks.join_next().await {
        latencies.extend(done.unwrap());
    }
    let label = match workload {
        Workload::Uncontended => {
            format!("uncontended lock cycles, {clients:>2} clients (acquire+release)")
        }
        Workload::Contended => {
            format!("contended handoffs, {clients} clients on one lock (acquire latency)")
        }
    };
    report(&label, latencies.len(), started.elapsed(), latencies);
}

fn main() {
    let quick = std::env::args().any(|a| a == "quick");
    let scale = if quick { 5 } else { 1 };
    let dir = tempfile::TempDir::new_in(".").unwrap();
    let (nodes, apis) = start(dir.path());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let http = reqwest::Client::new();
        let api = leader_api(&http, &apis).await;
        lock_cycles(&api, Workload::Uncontended, 1, 1_000 / scale).await;
        lock_cycles(&api, Workload::Uncontended, 16, 300 / scale).await;
        lock_cycles(&api, Workload::Uncontended, 64, 100 / scale).await;
        lock_cycles(&api, Workload::Contended, 16, 100 / scale).await;
    });
    drop(nodes);
}
