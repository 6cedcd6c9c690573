//! The `baton` CLI end to end against real clusters.

#![allow(clippy::unwrap_used)] // tests: a failure is reported by the panic

mod common;

use common::*;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

fn baton(endpoints: &str) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_baton"));
    command
        .env("BATON_ENDPOINTS", endpoints)
        .env("RUST_LOG", "error");
    command
}

fn endpoints(c: &Cluster) -> String {
    c.nodes
        .values()
        .map(|s| s.api.clone())
        .collect::<Vec<_>>()
        .join(",")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_shell_loops_under_baton_lock_never_interleave_and_fences_increase() {
    let c = Cluster::three().await;
    let file = c.data_dir().join("shared.log");
    let script = format!(
        "for i in 1 2 3 4 5; do {bin} lock --wait-ms 60000 shared -- sh -c 'echo \"start $BATON_FENCE\" >> {f}; sleep 0.05; echo \"end $BATON_FENCE\" >> {f}' || exit 1; done",
        bin = env!("CARGO_BIN_EXE_baton"),
        f = file.display()
    );
    let loops: Vec<_> = (0..2)
        .map(|_| {
            Command::new("sh")
                .args(["-c", &script])
                .env("BATON_ENDPOINTS", endpoints(&c))
                .env("RUST_LOG", "error")
                .spawn()
                .unwrap()
        })
        .collect();
    for mut l in loops {
        assert!(l.wait().unwrap().success());
    }
    let text = std::fs::read_to_string(&file).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 20, "{text}");
    let mut last_fence = 0;
    for pair in lines.chunks(2) {
        let start: u64 = pair[0].strip_prefix("start ").unwrap().parse().unwrap();
        let end: u64 = pair[1].strip_prefix("end ").unwrap().parse().unwrap();
        assert_eq!(start, end, "no interleaving:\n{text}");
        assert!(start > last_fence, "fences increase:\n{text}");
        last_fence = start;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_codes_propagate_and_errors_are_one_line() {
    let c = Cluster::single().await;
    let eps = endpoints(&c);
    let status = baton(&eps)
        .args(["lock", "x", "--", "sh", "-c", "exit 7"])
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(7));
    let ok = baton(&eps)
        .args(["lock", "x", "--", "true"])
        .status()
        .unwrap();
    assert_eq!(ok.code(), Some(0));
    // A held lock with --wait-ms 0 fails at once with one clear line.
    let holder = baton(&eps)
        .args(["lock", "y", "--", "sleep", "3"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, state) = c.get(1, "/v1/locks/y").await.unwrap();
        if !state["holders"].as_array().unwrap().is_empty() {
            break;
        }
        assert!(Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let out = baton(&eps)
        .args(["lock", "y", "--wait-ms", "0", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("lock held"), "{stderr}");
    let mut holder = holder;
    holder.wait().unwrap();
    // The other commands work and fail clearly.
    let put = baton(&eps).args(["kv", "put", "k", "v"]).output().unwrap();
    assert!(put.status.success());
    let get = baton(&eps).args(["kv", "get", "k"]).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&get.stdout).trim(), "v");
    let missing = baton(&eps).args(["kv", "get", "nope"]).output().unwrap();
    assert_eq!(missing.status.code(), Some(1));
    let status = baton(&eps)
        .args(["--json", "cluster", "status"])
        .output()
        .unwrap();
    let json: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(json["leader"].as_u64(), Some(1));
    let help = baton(&eps).args(["lock", "--help"]).output().unwrap();
    assert!(String::from_utf8_lossy(&help.stdout).contains("Examples"));
}

fn now_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn baton_lock_kills_its_command_before_the_lease_can_expire_when_keepalives_stop() {
    let c = Cluster::three().await;
    let beats = c.data_dir().join("beats");
    let ttl_ms = 3_000u128;
    let mut cli = baton(&endpoints(&c))
        .args(["lock", "--ttl-ms", "3000", "paused", "--", "sh", "-c"])
        .arg(format!(
            "while true; do date +%s%3N >> {}; sleep 0.05; done",
            beats.display()
        ))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Let the command run, then freeze the whole cluster: no keepalive is acknowledged.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !beats.exists() {
        assert!(Instant::now() < deadline, "the command started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let pids: Vec<String> = c
        .nodes
        .values()
        .filter_map(|s| s.pid())
        .map(|p| p.to_string())
        .collect();
    let stopped_at = now_ms();
    Command::new("kill")
        .arg("-STOP")
        .args(&pids)
        .status()
        .unwrap();
    let status = tokio::task::spawn_blocking(move || {
        let status = cli.wait().unwrap();
        let mut stderr = String::new();
        use std::io::Read;
        cli.stderr
            .take()
            .unwrap()
            .read_to_string(&mut stderr)
            .unwrap();
        (status, stderr)
    })
    .await
    .unwrap();
    Command::new("kill")
        .arg("-CONT")
        .args(&pids)
        .status()
        .unwrap();
    let (status, stderr) = status;
    assert_eq!(status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains("stopped before the lease could expire"),
        "{stderr}"
    );
    // The last keepalive was acknowledged before the freeze, so the server could not expire
    // the lease before stopped_at + TTL: the command's last heartbeat came before that.
    let text = std::fs::read_to_string(&beats).unwrap();
    let last: u128 = text.lines().last().unwrap().parse().unwrap();
    assert!(
        last < stopped_at + ttl_ms,
        "last beat {} ms after the freeze",
        last - stopped_at
    );
    // And it really stopped: no beat after the CLI exited.
    let before = std::fs::read_to_string(&beats).unwrap().len();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(std::fs::read_to_string(&beats).unwrap().len(), before);
}

#[test]
fn serve_refuses_a_test_hook_variable_it_cannot_honour() {
    // A build with the hooks refuses an unknown canary; a build without them (a release,
    // or `cargo test -p baton` alone, where no dev-dependency turns the feature on) refuses
    // any such variable. Either way before anything listens.
    let dir = tempfile::TempDir::new().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_baton"))
        .args(["serve", "--api", &format!("127.0.0.1:{}", free_port())])
        .args(["--peer", &format!("127.0.0.1:{}", free_port())])
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .env("BATON_UNSAFE_CANARY", "no-such-canary")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("not a canary") || stderr.contains("has no test hooks"),
        "{stderr}"
    );
}
