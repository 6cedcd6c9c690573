//! Idle means idle: a cluster with nothing to do must not burn CPU. Each test starts real
//! `baton serve` processes, lets them settle, and reads their CPU time from
//! `/proc/<pid>/stat` over a 10 s window. The bound (5 % of one core for all processes
//! together) is a resource bound with a wide margin, not a speed assertion: a busy loop
//! uses 100 % of a core, the heartbeats of an idle cluster well under 1 %.

// The measured figures are printed for `--nocapture` readers; the assertion is the test.
#![allow(clippy::print_stderr)]

mod common;

use common::Cluster;
use serde_json::json;
use std::time::Duration;

/// Length of the measured idle window.
const WINDOW: Duration = Duration::from_secs(10);
/// At most this share of one core, for all processes together.
const SHARE_MAX: f64 = 0.05;

/// Clock ticks per second of `/proc/<pid>/stat` (`getconf CLK_TCK`, 100 on Linux).
fn clock_ticks() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

/// User plus system CPU seconds a process has used so far.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("read /proc stat");
    // The command name (field 2) may hold spaces: count fields after its closing paren.
    let rest = &stat[stat.rfind(')').expect("stat has a comm field") + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // rest starts at field 3 (state): utime is field 14, stime field 15.
    let utime: f64 = fields[11].parse().expect("utime");
    let stime: f64 = fields[12].parse().expect("stime");
    (utime + stime) / clock_ticks()
}

/// CPU seconds the cluster's processes use over `WINDOW`, per node.
async fn idle_cpu(cluster: &Cluster) -> Vec<(u64, f64)> {
    let pids: Vec<(u64, u32)> = cluster
        .nodes
        .values()
        .map(|s| (s.id, s.pid().expect("running")))
        .collect();
    let before: Vec<f64> = pids.iter().map(|(_, p)| cpu_seconds(*p)).collect();
    tokio::time::sleep(WINDOW).await;
    pids.iter()
        .zip(before)
        .map(|((id, pid), b)| (*id, cpu_seconds(*pid) - b))
        .collect()
}

fn assert_idle(what: &str, used: &[(u64, f64)]) {
    let total: f64 = used.iter().map(|(_, s)| s).sum();
    let share = total / WINDOW.as_secs_f64();
    eprintln!(
        "{what}: {total:.3} CPU-s in {} s ({:.2} % of one core); per node {used:?}",
        WINDOW.as_secs(),
        share * 100.0
    );
    assert!(
        share < SHARE_MAX,
        "{what} used {total:.2} CPU-seconds in {} idle seconds ({:.1} % of a core, bound {} %): \
         something is spinning; per node {used:?}",
        WINDOW.as_secs(),
        share * 100.0,
        SHARE_MAX * 100.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_three_node_cluster_uses_almost_no_cpu() {
    let cluster = Cluster::three().await;
    let leader = cluster.leader(1).await;
    // One write so that every node has applied something and armed what it arms.
    let (status, body) = cluster
        .put(leader, "/v1/kv/idle", json!({ "value": "x" }))
        .await;
    assert_eq!(status, 200, "{body}");
    // Settle: the leader's checkpoint interval (5 s) passes once before the window.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let used = idle_cpu(&cluster).await;
    assert_idle("3-node cluster, idle", &used);
    assert_eq!(cluster.leader(1).await, leader, "no election while idle");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_node_holding_leases_locks_and_waiters_idles() {
    let cluster = Cluster::single().await;
    let mut leases = Vec::with_capacity(1_000);
    for _ in 0..1_000 {
        // Long enough to outlive the test with no keepalive: nothing changes while idle.
        leases.push(cluster.lease(1, 600_000).await);
    }
    for (i, lease) in leases.iter().take(100).enumerate() {
        let (status, body) = cluster
            .post(
                1,
                &format!("/v1/locks/idle-{i}/acquire"),
                json!({ "lease_id": lease, "owner": "holder" }),
            )
            .await;
        assert_eq!(status, 200, "{body}");
    }
    // Two held-open waiters per lock, each on its own lease, waiting the longest allowed.
    let mut waiters = tokio::task::JoinSet::new();
    for (i, lease) in leases.iter().skip(100).take(200).enumerate() {
        let request = cluster
            .http
            .post(
                cluster
                    .node(1)
                    .url(&format!("/v1/locks/idle-{}/acquire", i % 100)),
            )
            .timeout(Duration::from_secs(120))
            .json(&json!({ "lease_id": lease, "owner": "waiter", "wait_ms": 300_000 }));
        waiters.spawn(async move { request.send().await.map(|r| r.status()) });
    }
    // Every waiter is queued before the window starts.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (_, body) = cluster.get(1, "/v1/locks/idle-99").await.unwrap();
        let (_, first) = cluster.get(1, "/v1/locks/idle-0").await.unwrap();
        let queued = |b: &serde_json::Value| b["queue"].as_array().map_or(0, Vec::len);
        if queued(&body) == 2 && queued(&first) == 2 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "waiters not queued: {body}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Settle past one lease checkpoint (every 5 s) so the window sees the steady state.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let used = idle_cpu(&cluster).await;
    assert_idle("1 node, 1 000 leases, 100 locks, 200 waiters", &used);
    assert!(
        waiters.try_join_next().is_none(),
        "no waiter ended while idle"
    );
    waiters.abort_all();
}
