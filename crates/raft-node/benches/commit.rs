//! Commit throughput and latency of a 3-node cluster on loopback, fsync on (sled flush
//! before every acknowledged append), with C concurrent proposers on the leader.
//!
//! Run: `cargo bench -p baton-raft-node --bench commit` (`-- quick` for a short run).
//! Prints, per C: committed commands/s, p50/p99 commit latency, and proposals per Raft
//! entry (the leader flushes once per entry, so this is commits per fsync).

#![allow(clippy::print_stdout, clippy::unwrap_used, missing_docs)]

use baton_raft_node::{Node, NodeAddr, NodeConfig};
use baton_state_machine::{Command, Proposal, Put};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use tokio::net::TcpListener;

async fn start_cluster(dir: &std::path::Path) -> Vec<Node> {
    let mut listeners = Vec::new();
    let mut members = BTreeMap::new();
    for id in 1..=3u64 {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let peer = listener.local_addr().unwrap().to_string();
        members.insert(
            id,
            NodeAddr {
                peer: peer.clone(),
                api: peer,
            },
        );
        listeners.push((id, listener));
    }
    let mut nodes = Vec::new();
    for (id, listener) in listeners {
        let mut config = NodeConfig::single(id, members[&id].clone(), dir.join(format!("n{id}")));
        config.members = members.clone();
        config.propose_timeout_ms = 30_000;
        nodes.push(Node::start_on(config, listener).await.unwrap());
    }
    nodes
}

async fn leader(nodes: &[Node]) -> Node {
    loop {
        if let Some(n) = nodes.iter().find(|n| n.is_leader()) {
            return n.clone();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn put(key: String) -> Proposal {
    Proposal::from(Command::Put(Put {
        key,
        value: "x".repeat(64),
        lease: None,
        prev_revision: None,
    }))
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

async fn measure(node: &Node, proposers: usize, per_proposer: usize) {
    let entries_before = node.status().last_log_index;
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for p in 0..proposers {
        let node = node.clone();
        tasks.spawn(async move {
            let mut latencies = Vec::with_capacity(per_proposer);
            for i in 0..per_proposer {
                let sent = Instant::now();
                node.propose(put(format!("c{proposers}/p{p}/{i}")))
                    .await
                    .unwrap();
                latencies.push(sent.elapsed());
            }
            latencies
        });
    }
    let mut latencies = Vec::new();
    while let Some(done) = tasks.join_next().await {
        latencies.extend(done.unwrap());
    }
    let elapsed = start.elapsed();
    let entries = node.status().last_log_index - entries_before;
    latencies.sort();
    let total = latencies.len();
    println!(
        "{proposers:>3} proposers: {total} commands in {:.2} s = {:.0} commands/s, p50 {:.2} ms, p99 {:.2} ms, {:.1} commands per entry ({entries} entries)",
        elapsed.as_secs_f64(),
        total as f64 / elapsed.as_secs_f64(),
        percentile(&latencies, 0.50).as_secs_f64() * 1e3,
        percentile(&latencies, 0.99).as_secs_f64() * 1e3,
        total as f64 / entries.max(1) as f64,
    );
}

fn main() {
    let quick = std::env::args().any(|a| a == "quick");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let dir = tempfile::TempDir::new_in(".").unwrap();
        let nodes = start_cluster(dir.path()).await;
        let node = leader(&nodes).await;
        let scale = if quick { 5 } else { 1 };
        measure(&node, 1, 1_000 / scale).await;
        measure(&node, 16, 1_000 / scale).await;
        measure(&node, 256, 400 / scale).await;
        for n in &nodes {
            n.shutdown().await;
        }
    });
}
