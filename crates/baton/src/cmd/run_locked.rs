//! `baton lock NAME -- CMD…`: runs CMD while holding the lock.
//!
//! CMD runs in its own process group with `BATON_FENCE`, `BATON_LOCK` and `BATON_LEASE` in
//! its environment, while the lease is kept alive in the background. If the lease's
//! safe-until deadline (send time of the last acknowledged keepalive + TTL − margin)
//! approaches, the group gets SIGTERM, and SIGKILL at the deadline, *before* the server
//! could expire the lease; baton then exits 3. Otherwise baton exits with CMD's code and
//! releases the lock.

use super::Global;
use anyhow::Context;
use baton_client::{Lease, LockOptions};
use clap::Args;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use std::time::Duration;
use tokio::time::Instant;

/// Exit code when CMD was stopped because the lease could no longer be counted on.
pub const EXIT_LEASE_LOST: i32 = 3;

/// Options of `baton lock`.
#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  baton lock nightly-report -- ./report.sh\n  baton lock --wait-ms 60000 --ttl-ms 15000 db-migrate -- sh -c 'migrate --fence $BATON_FENCE'"
)]
pub struct LockArgs {
    /// The lock's name.
    pub name: String,
    /// Lease TTL in milliseconds.
    #[arg(long, default_value_t = 10_000)]
    pub ttl_ms: u64,
    /// How long to wait for the lock (0: fail at once if it is held).
    #[arg(long, default_value_t = 300_000)]
    pub wait_ms: u64,
    /// Take the lock shared (a read lock).
    #[arg(long)]
    pub shared: bool,
    /// Owner string within the lease (default: hostname-pid).
    #[arg(long)]
    pub owner: Option<String>,
    /// The command and its arguments.
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
}

/// Runs the command; returns the exit code for baton.
pub fn run(global: &Global, args: LockArgs) -> anyhow::Result<i32> {
    super::runtime()?.block_on(run_async(global, args))
}

#[allow(clippy::print_stderr)]
async fn run_async(global: &Global, args: LockArgs) -> anyhow::Result<i32> {
    let client = global.client()?;
    let ttl = Duration::from_millis(args.ttl_ms);
    let lease = Lease::grant(&client, ttl).await.context("grant a lease")?;
    let owner = args
        .owner
        .clone()
        .unwrap_or_else(|| format!("{}-{}", hostname(), std::process::id()));
    let options = LockOptions {
        owner,
        shared: args.shared,
        wait: (args.wait_ms > 0).then(|| Duration::from_millis(args.wait_ms)),
        lock_delay: None,
    };
    let guard = match lease.lock_with(&args.name, options).await {
        Ok(g) => g,
        Err(e) => {
            let _ = lease.close().await;
            anyhow::bail!("lock {}: {e}", args.name);
        }
    };
    let mut child = tokio::process::Command::new(&args.command[0])
        .args(&args.command[1..])
        .env("BATON_FENCE", guard.fence().to_string())
        .env("BATON_LOCK", &args.name)
        .env("BATON_LEASE", lease.id().to_string())
        .process_group(0)
        .spawn()
        .with_context(|| format!("start {}", args.command[0]))?;
    let pgid = Pid::from_raw(child.id().context("child pid")? as i32);
    let grace = (ttl / 10).clamp(Duration::from_millis(100), Duration::from_secs(1));
    let status = loop {
        let Some(safe_until) = lease.safe_until() else {
            break None;
        };
        tokio::select! {
            status = child.wait() => break Some(status?),
            () = tokio::time::sleep_until(safe_until.checked_sub(grace).unwrap_or(safe_until)) => {
                // Re-check: a keepalive may have moved the deadline meanwhile.
                if lease.safe_until().is_some_and(|s| s > safe_until) {
                    continue;
                }
                break None;
            }
        }
    };
    let code = match status {
        Some(status) => {
            let _ = guard.release().await;
            let _ = lease.close().await;
            exit_code(status)
        }
        None => {
            let deadline = lease.safe_until().unwrap_or_else(Instant::now);
            let _ = killpg(pgid, Signal::SIGTERM);
            tokio::select! {
                _ = child.wait() => {}
                () = tokio::time::sleep_until(deadline) => {
                    let _ = killpg(pgid, Signal::SIGKILL);
                    let _ = child.wait().await;
                }
            }
            eprintln!(
                "baton: lock {}: keepalives of lease {} were not acknowledged in time; the command was stopped before the lease could expire",
                args.name,
                lease.id()
            );
            EXIT_LEASE_LOST
        }
    };
    Ok(code)
}

fn exit_code(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(1)
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "host".into())
}
