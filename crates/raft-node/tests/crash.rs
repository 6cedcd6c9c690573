//! Crashes between apply and persistence lose and repeat nothing.
//!
//! The test re-runs its own binary as a child process with a crash point armed (see
//! `store::crash`). The child runs a single-node cluster and acquires one lock re-entrantly,
//! one proposal per entry, recording each acknowledged acquire in a file before the next;
//! the crash point aborts it mid-stream. The parent then restarts the node from the same
//! directory and checks that the re-entrant count and the revision show every acknowledged
//! acquire exactly once (plus at most the one in flight when the process died).

#![allow(clippy::unwrap_used)] // tests: a failure is reported by the panic

mod common;

use baton_raft_node::store::crash::{CRASH_AFTER_APPLY, CRASH_BEFORE_SNAPSHOT_PERSIST};
use baton_raft_node::{Node, NodeConfig};
use baton_state_machine::*;
use common::*;
use std::io::Write;
use std::path::Path;
use tokio::net::TcpListener;

const CHILD_DIR: &str = "BATON_CRASH_TEST_DIR";
const ACQUIRES_MAX: u32 = 60;

fn config(dir: &Path, peer: &str) -> NodeConfig {
    let mut config = NodeConfig::single(1, addr(peer), dir.join("node"));
    tune(&mut config);
    // Snapshots every few entries, so the crash lands both before and after snapshots.
    config.snapshot_logs_since_last = 7;
    config.logs_kept_behind_snapshot = 2;
    config
}

fn acquire(lease: LeaseId) -> Proposal {
    Proposal::from(Command::LockAcquire(LockAcquire {
        name: "L".into(),
        lease,
        owner: "w".into(),
        mode: Mode::Exclusive,
        wait_ms: 0,
        lock_delay_ms: 0,
    }))
}

/// The child: acquire until the crash point aborts the process.
fn child(dir: &Path) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let peer = listener.local_addr().unwrap().to_string();
        std::fs::write(dir.join("peer"), &peer).unwrap();
        let node = Node::start_on(config(dir, &peer), listener).await.unwrap();
        let lease = grant_lease(&node, 60_000).await;
        let mut acked = std::fs::File::create(dir.join("acked")).unwrap();
        for _ in 0..ACQUIRES_MAX {
            let applied = node.propose(acquire(lease)).await.unwrap();
            assert!(matches!(applied.response, Response::Granted(_)));
            writeln!(acked, "ok").unwrap();
            acked.sync_all().unwrap();
        }
    });
    panic!("the crash point never fired");
}

fn run_child(hook: &str, value: &str) -> (tempfile::TempDir, usize) {
    let dir = tempfile::TempDir::new().unwrap();
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "crash_child", "--nocapture", "--test-threads=1"])
        .env(CHILD_DIR, dir.path())
        .env(hook, value)
        .status()
        .unwrap();
    assert!(!status.success(), "the child must die at the crash point");
    let acked = std::fs::read_to_string(dir.path().join("acked"))
        .unwrap_or_default()
        .lines()
        .count();
    (dir, acked)
}

async fn check_restart(dir: &Path, acked: usize) {
    init_tracing();
    let peer = std::fs::read_to_string(dir.join("peer")).unwrap();
    let listener = TcpListener::bind(&peer).await.unwrap();
    let node = Node::start_on(config(dir, &peer), listener).await.unwrap();
    let (count, revision) = node
        .read(|sm| {
            let count = sm
                .lock_state(&ResourceId::lock("L"))
                .map_or(0, |s| s.holders[0].count as usize);
            (count, sm.revision().0 as usize)
        })
        .await
        .unwrap();
    tracing::info!(acked, count, revision, "after the crash");
    assert!(acked > 0, "the child acknowledged some acquires");
    assert!(
        count == acked || count == acked + 1,
        "{acked} acknowledged acquires, {count} applied: an entry was lost or applied twice"
    );
    assert_eq!(
        revision,
        count + 1,
        "one revision per acquire after the lease grant"
    );
    node.shutdown().await;
}

/// Runs only as the child process of the tests below.
#[test]
fn crash_child() {
    if let Ok(dir) = std::env::var(CHILD_DIR) {
        child(Path::new(&dir));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_after_apply_before_snapshot_loses_and_repeats_nothing() {
    // Entry 0 is the initial membership, 1 the leader's blank, 2 the lease grant.
    let (dir, acked) = run_child(CRASH_AFTER_APPLY, "20");
    assert_eq!(
        acked, 17,
        "entries 3..=19 were acknowledged before the crash at 20"
    );
    check_restart(dir.path(), acked).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_while_persisting_a_snapshot_loses_and_repeats_nothing() {
    let (dir, acked) = run_child(CRASH_BEFORE_SNAPSHOT_PERSIST, "3");
    check_restart(dir.path(), acked).await;
}
