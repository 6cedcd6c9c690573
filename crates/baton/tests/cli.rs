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
    wait_held(&c, "y", true).await;
    let out = baton(&eps)
        .args(["lock", "y", "--wait-ms", "0", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "not acquired has its own code");
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
    wait_for_text(&beats, "").await; // the command started
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

/// Waits (at most 10 s) until `file` exists and holds `text`.
async fn wait_for_text(file: &std::path::Path, text: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !std::fs::read_to_string(file).is_ok_and(|t| t.contains(text)) {
        assert!(
            Instant::now() < deadline,
            "{} never said {text}",
            file.display()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits (at most 10 s) until lock `name` is held (`held`) or has no holder.
async fn wait_held(c: &Cluster, name: &str, held: bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, state) = c.get(1, &format!("/v1/locks/{name}")).await.unwrap();
        if state["holders"]
            .as_array()
            .is_some_and(|h| h.is_empty() != held)
        {
            return;
        }
        assert!(Instant::now() < deadline, "held is not {held}: {state}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn signal(pid: u32, name: &str) {
    assert!(
        Command::new("kill")
            .arg(format!("-{name}"))
            .arg(pid.to_string())
            .status()
            .unwrap()
            .success()
    );
}

/// The last line of a file of millisecond timestamps, and its length now.
fn last_beat(file: &std::path::Path) -> (u128, usize) {
    let text = std::fs::read_to_string(file).unwrap();
    let last = text
        .lines()
        .last()
        .and_then(|l| l.parse().ok())
        .unwrap_or(0);
    (last, text.len())
}

const BEATING: &str = "while true; do date +%s%3N >> \"$BEATS\"; sleep 0.05; done";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_and_sigterm_are_forwarded_and_baton_exits_with_the_commands_status() {
    let c = Cluster::single().await;
    for (i, name) in ["INT", "TERM", "HUP"].iter().enumerate() {
        let log = c.data_dir().join(format!("signal-{name}.log"));
        let script = format!(
            "trap 'echo got-{name} >> {log}; exit 5' {name}; echo started >> {log}; \
             while true; do sleep 0.05; done",
            log = log.display()
        );
        let mut cli = baton(&endpoints(&c))
            .args([
                "lock",
                "--ttl-ms",
                "5000",
                &format!("sig-{i}"),
                "--",
                "sh",
                "-c",
            ])
            .arg(script)
            .spawn()
            .unwrap();
        wait_for_text(&log, "started").await;
        signal(cli.id(), name);
        let status = tokio::task::spawn_blocking(move || cli.wait().unwrap())
            .await
            .unwrap();
        assert_eq!(
            status.code(),
            Some(5),
            "SIG{name}: the command's own status"
        );
        assert!(
            std::fs::read_to_string(&log)
                .unwrap()
                .contains(&format!("got-{name}")),
            "SIG{name} reached the command"
        );
        // Released and revoked at once, not at the lease's expiry.
        let (_, state) = c.get(1, &format!("/v1/locks/sig-{i}")).await.unwrap();
        assert!(state["holders"].as_array().unwrap().is_empty(), "{state}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_never_outlives_a_killed_baton_lock_by_more_than_the_ttl() {
    let c = Cluster::single().await;
    let beats = c.data_dir().join("orphan-beats");
    let ttl_ms = 3_000u128;
    let mut cli = baton(&endpoints(&c))
        .args([
            "lock", "--ttl-ms", "3000", "orphan", "--", "sh", "-c", BEATING,
        ])
        .env("BEATS", &beats)
        .spawn()
        .unwrap();
    wait_for_text(&beats, "").await; // the command started
    let killed_at = now_ms();
    signal(cli.id(), "KILL");
    let _ = cli.wait();
    // The command stops (its supervisor saw baton die); wait until the beats stop.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut seen = last_beat(&beats).1;
    loop {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let (_, len) = last_beat(&beats);
        if len == seen {
            break;
        }
        seen = len;
        assert!(Instant::now() < deadline, "the command kept running");
    }
    let (last, _) = last_beat(&beats);
    assert!(
        last < killed_at + ttl_ms,
        "the command beat {} ms after baton was killed",
        last.saturating_sub(killed_at)
    );
    // Nobody released: the lease expires and the lock is free again.
    wait_held(&c, "orphan", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admins_force_release_stops_the_command() {
    let c = Cluster::single().await;
    let beats = c.data_dir().join("forced-beats");
    let cli = baton(&endpoints(&c))
        .args([
            "lock", "--ttl-ms", "10000", "forced", "--", "sh", "-c", BEATING,
        ])
        .env("BEATS", &beats)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_text(&beats, "").await; // the command started
    let (status, body) = c.delete(1, "/v1/locks/forced").await;
    assert_eq!(status, 200, "{body}");
    let forced_at = now_ms();
    let output = tokio::task::spawn_blocking(move || cli.wait_with_output().unwrap())
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("ended on the server"), "{stderr}");
    // Stopped well before the lease's TTL (10 s) could have freed anything.
    let (last, len) = last_beat(&beats);
    assert!(
        last < forced_at + 5_000,
        "beat {} ms after the release",
        last.saturating_sub(forced_at)
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(last_beat(&beats).1, len, "the command stopped");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_without_a_command_holds_until_interrupted_and_semaphores_take_permits() {
    let c = Cluster::single().await;
    let eps = endpoints(&c);
    // Hold without a command: the fence on stdout, the lock held, Ctrl-C releases it.
    let mut holder = baton(&eps)
        .args(["lock", "held"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = std::io::BufReader::new(holder.stdout.take().unwrap());
    let line = tokio::task::spawn_blocking(move || {
        use std::io::BufRead;
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        line
    })
    .await
    .unwrap();
    assert!(line.contains("lock held held: fence"), "{line}");
    let (_, state) = c.get(1, "/v1/locks/held").await.unwrap();
    assert_eq!(state["holders"].as_array().unwrap().len(), 1, "{state}");
    signal(holder.id(), "INT");
    let status = tokio::task::spawn_blocking(move || holder.wait().unwrap())
        .await
        .unwrap();
    assert_eq!(status.code(), Some(0));
    wait_held(&c, "held", false).await;
    // A semaphore of two permits: two hold, a third is not acquired (exit 2).
    let permits: Vec<_> = (0..2)
        .map(|_| {
            baton(&eps)
                .args(["lock", "-n", "2", "pool", "--", "sleep", "3"])
                .spawn()
                .unwrap()
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, state) = c.get(1, "/v1/semaphores/pool").await.unwrap();
        if state["holders"].as_array().is_some_and(|h| h.len() == 2) {
            break;
        }
        assert!(Instant::now() < deadline, "{state}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let third = baton(&eps)
        .args(["lock", "-n", "2", "--wait-ms", "0", "pool", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(
        third.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&third.stderr)
    );
    for mut p in permits {
        assert_eq!(p.wait().unwrap().code(), Some(0));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_keepalive_keeps_going_until_interrupted_or_the_lease_is_gone() {
    let c = Cluster::single().await;
    let eps = endpoints(&c);
    let lease = c.lease(1, 2_000).await;
    let mut keeper = baton(&eps)
        .args(["lease", "keepalive", &lease.to_string()])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    // Longer than the TTL: the lease lives because the keeper keeps it alive.
    tokio::time::sleep(Duration::from_millis(3_000)).await;
    let (status, _) = c.get(1, &format!("/v1/leases/{lease}")).await.unwrap();
    assert_eq!(status, 200, "the lease was kept alive");
    signal(keeper.id(), "TERM");
    let code = tokio::task::spawn_blocking(move || keeper.wait().unwrap())
        .await
        .unwrap();
    assert_eq!(code.code(), Some(0));
    // A keeper whose lease is revoked exits 3.
    let lease = c.lease(1, 2_000).await;
    let keeper = baton(&eps)
        .args(["lease", "keepalive", &lease.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    c.delete(1, &format!("/v1/leases/{lease}")).await;
    let out = tokio::task::spawn_blocking(move || keeper.wait_with_output().unwrap())
        .await
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Completion scripts for the common shells.
    for shell in ["bash", "zsh", "fish"] {
        let script = baton(&eps).args(["completions", shell]).output().unwrap();
        assert!(script.status.success());
        assert!(String::from_utf8_lossy(&script.stdout).contains("baton"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_advertises_what_it_is_told_and_never_an_unspecified_address() {
    // Listening on 127.0.0.1, advertised under the name `localhost`.
    let port = free_port();
    let c = Cluster::single_with(&["--advertise-api", &format!("localhost:{port}")]).await;
    let (_, status) = c.get(1, "/v1/cluster").await.unwrap();
    assert_eq!(
        status["members"][0]["api"],
        format!("localhost:{port}"),
        "{status}"
    );
    // An address nobody can reach is refused before anything is bound.
    let dir = tempfile::TempDir::new().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_baton"))
        .args(["serve", "--api", "0.0.0.0:1", "--data-dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--advertise-api"), "{stderr}");
    // Raft timings from flags.
    let out = Command::new(env!("CARGO_BIN_EXE_baton"))
        .args(["serve", "--election-timeout-ms", "900-100"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "a bad range is a usage error");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_baton_lock_tells_its_place_in_the_queue() {
    let c = Cluster::single().await;
    let eps = endpoints(&c);
    let mut holder = baton(&eps)
        .args(["lock", "q"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    wait_held(&c, "q", true).await;
    let log = c.data_dir().join("queued.log");
    let mut waiter = baton(&eps)
        .args(["lock", "q", "--wait-ms", "20000", "--", "true"])
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    wait_for_text(&log, "waiting for q: position 1 of 1").await;
    signal(holder.id(), "INT");
    assert_eq!(holder.wait().unwrap().code(), Some(0));
    let status = tokio::task::spawn_blocking(move || waiter.wait().unwrap())
        .await
        .unwrap();
    assert_eq!(status.code(), Some(0));
}

/// `script` (util-linux) runs `baton lock` on a new pseudo-terminal as its controlling
/// terminal, the way a login shell would. The command reads a line from the terminal: it
/// can only do so as the foreground process group (otherwise SIGTTIN stops it and the run
/// never ends), and baton can only exit cleanly if it takes the terminal back without
/// being stopped by SIGTTOU.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interactive_command_gets_the_terminal_and_baton_takes_it_back() {
    if Command::new("script").arg("--version").output().is_err() {
        panic!("`script` (util-linux) is needed; .ci/deps installs bsdutils");
    }
    let c = Cluster::single().await;
    let inner = format!(
        "{bin} lock tty-test -- sh -c 'read line; echo \"got:$line\"'",
        bin = env!("CARGO_BIN_EXE_baton")
    );
    let mut run = Command::new("script")
        .args(["-qec", &inner, "/dev/null"])
        .env("BATON_ENDPOINTS", endpoints(&c))
        .env("RUST_LOG", "error")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    let mut input = run.stdin.take().unwrap();
    input.write_all(b"hello\n").unwrap();
    input.flush().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = run.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() > deadline {
            let _ = run.kill();
            let _ = run.wait();
            break None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    drop(input);
    let mut out = String::new();
    std::io::Read::read_to_string(&mut run.stdout.take().unwrap(), &mut out).unwrap();
    let status = status
        .unwrap_or_else(|| panic!("the run never ended (stopped by SIGTTIN or SIGTTOU?):\n{out}"));
    assert!(status.success(), "{status}:\n{out}");
    assert!(out.contains("got:hello"), "{out}");
    // The lock was released when the command ended.
    let (_, lock) = c.get(1, "/v1/locks/tty-test").await.unwrap();
    assert_eq!(lock["holders"], serde_json::json!([]), "{lock}");
}
