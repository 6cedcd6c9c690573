//! `baton lock NAME -- CMD…`: runs CMD while holding the lock.
//!
//! CMD runs in its own process group, under `baton supervise` (which stops the group if
//! this process dies, even by SIGKILL), with `BATON_FENCE`, `BATON_LOCK` and `BATON_LEASE`
//! in its environment, while the lease is kept alive in the background.
//! - SIGINT, SIGTERM and SIGHUP to baton are forwarded to CMD's group; baton waits for it
//!   (SIGKILL after `--kill-after-ms`, and always before the lease's safe-until), then
//!   releases and revokes, and exits with CMD's status.
//! - If the lease's safe-until deadline (send time of the last acknowledged keepalive +
//!   TTL − margin) approaches, the group gets SIGTERM, and SIGKILL at the deadline,
//!   *before* the server could expire the lease; baton then exits 3.
//! - If the hold ends on the server in any other way (an admin's force-release, the lease
//!   revoked), the group gets SIGTERM and SIGKILL after a short grace; baton exits 3.
//! - Otherwise baton exits with CMD's code and releases the lock.

use super::Global;
use anyhow::Context;
use baton_client::{Lease, LockGuard, LockOptions};
use clap::Args;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use std::time::Duration;
use tokio::time::Instant;

/// Exit code when CMD was stopped because the hold could no longer be counted on (the
/// lease in doubt, the grant ended on the server, or `baton lock` itself died).
pub const EXIT_LOCK_LOST: i32 = 3;

/// Exit code when the lock was not acquired: held (with `--wait-ms 0`) or the wait ran out.
pub const EXIT_NOT_ACQUIRED: i32 = 2;

/// Options of `baton lock`.
#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  baton lock nightly-report -- ./report.sh\n  baton lock --wait-ms 60000 --ttl-ms 15000 db-migrate -- sh -c 'migrate --fence $BATON_FENCE'\n  baton lock -n 3 encoders -- ./encode.sh     # one of 3 permits\n  baton lock maintenance                       # hold until Ctrl-C\n\nExit codes: CMD's own (128 + n if signal n ended it); 1 baton's error; 2 not acquired\n(held with --wait-ms 0, or the wait ran out); 3 the hold was lost and CMD was stopped."
)]
pub struct LockArgs {
    /// The lock's name.
    pub name: String,
    /// Lease TTL in milliseconds.
    #[arg(long, default_value_t = 10_000)]
    pub ttl_ms: u64,
    /// How long to wait for the lock (0: fail at once if it is held; absent: wait as long
    /// as it takes, keeping the lease alive).
    #[arg(long)]
    pub wait_ms: Option<u64>,
    /// Take the lock shared (a read lock).
    #[arg(long, conflicts_with = "limit")]
    pub shared: bool,
    /// Use a semaphore of N permits instead of a lock (take one permit).
    #[arg(short = 'n', long = "limit", value_name = "N")]
    pub limit: Option<u32>,
    /// After this holder's lease expires, keep the lock ungranted this long.
    #[arg(long, conflicts_with = "limit")]
    pub lock_delay_ms: Option<u64>,
    /// Owner string within the lease (default: hostname-pid).
    #[arg(long)]
    pub owner: Option<String>,
    /// After forwarding SIGINT, SIGTERM or SIGHUP, how long CMD has to exit before SIGKILL
    /// (never past the lease's safe-until).
    #[arg(long, default_value_t = 10_000)]
    pub kill_after_ms: u64,
    /// Pass BATON_TOKEN (and BATON_TOKEN_FILE) on to CMD. Without it CMD does not see
    /// baton's token: a command that needs to call baton itself must ask for it.
    #[arg(long)]
    pub pass_token: bool,
    /// The command and its arguments (none: hold the lock until SIGINT or SIGTERM).
    #[arg(last = true)]
    pub command: Vec<String>,
}

/// Secrets of baton's own that a command run under a lock never sees (the token only with
/// `--pass-token`).
const WITHHELD: [&str; 5] = [
    "BATON_CLUSTER_SECRET",
    "BATON_CLUSTER_SECRET_FILE",
    "BATON_ADMIN_TOKEN",
    "BATON_ADMIN_TOKEN_FILE",
    "BATON_AUTH_FILE",
];
/// The client's token, passed on only with `--pass-token`.
const TOKEN_VARIABLES: [&str; 2] = ["BATON_TOKEN", "BATON_TOKEN_FILE"];

/// Runs the command; returns the exit code for baton.
pub fn run(global: &Global, args: LockArgs) -> anyhow::Result<i32> {
    super::runtime()?.block_on(run_async(global, args))
}

/// Why CMD's run ended.
enum End {
    /// CMD exited by itself.
    Exited(std::process::ExitStatus),
    /// baton got this signal: CMD's group got it too.
    Signalled(Signal),
    /// The lease's safe-until is (nearly) reached without an acknowledged keepalive.
    LeaseInDoubt,
    /// The grant ended on the server (force-release, lease revoked or gone).
    HoldLost,
}

#[allow(clippy::print_stderr)]
async fn run_async(global: &Global, args: LockArgs) -> anyhow::Result<i32> {
    // Before anything else: a signal from now on is ours to forward, not a sudden death.
    let mut signals = Signals::new()?;
    let client = global.client()?;
    let ttl = Duration::from_millis(args.ttl_ms);
    let lease = Lease::grant(&client, ttl).await.context("grant a lease")?;
    let owner = args
        .owner
        .clone()
        .unwrap_or_else(|| format!("{}-{}", hostname(), std::process::id()));
    let guard = tokio::select! {
        never = report_queue(&lease, &args) => match never {},
        acquired = acquire(&lease, &args, owner) => match acquired {
            Ok(g) => g,
            Err(e) => {
                let _ = lease.close().await;
                if matches!(e, baton_client::Error::LockHeld { .. } | baton_client::Error::Timeout) {
                    eprintln!("baton: lock {}: not acquired: {e}", args.name);
                    return Ok(EXIT_NOT_ACQUIRED);
                }
                anyhow::bail!("lock {}: {e}", args.name);
            }
        },
        signal = signals.recv() => {
            let _ = lease.close().await;
            eprintln!("baton: lock {}: {signal} while waiting; nothing was run", args.name);
            return Ok(128 + signal as i32);
        }
    };
    if args.command.is_empty() {
        return hold(global, &args, lease, guard, signals).await;
    }
    let grace = (ttl / 10).clamp(Duration::from_millis(100), Duration::from_secs(1));
    let mut command = tokio::process::Command::new(std::env::current_exe()?);
    for name in WITHHELD {
        command.env_remove(name);
    }
    if !args.pass_token {
        for name in TOKEN_VARIABLES {
            command.env_remove(name);
        }
    }
    let mut child = command
        .arg("supervise")
        .arg("--parent")
        .arg(std::process::id().to_string())
        .arg("--grace-ms")
        .arg(grace.as_millis().to_string())
        .arg("--")
        .args(&args.command)
        .env("BATON_FENCE", guard.fence().to_string())
        .env("BATON_LOCK", &args.name)
        .env("BATON_LEASE", lease.id().to_string())
        .process_group(0)
        .spawn()
        .with_context(|| format!("start {}", args.command[0]))?;
    let pgid = Pid::from_raw(child.id().context("child pid")? as i32);
    // An interactive CMD reads the terminal: give it the foreground, and take it back
    // when it is done (whatever ends it).
    let terminal = Terminal::hand_to(pgid);
    let end = {
        // Scoped: the watch behind `lost` ends before the guard is released.
        let lost = guard.lost();
        tokio::pin!(lost);
        loop {
            let Some(safe_until) = lease.safe_until() else {
                break End::LeaseInDoubt;
            };
            tokio::select! {
                status = child.wait() => break End::Exited(status?),
                signal = signals.recv() => break End::Signalled(signal),
                () = &mut lost => break End::HoldLost,
                () = tokio::time::sleep_until(safe_until.checked_sub(grace).unwrap_or(safe_until)) => {
                    // Re-check: a keepalive may have moved the deadline meanwhile.
                    if lease.safe_until().is_some_and(|s| s > safe_until) {
                        continue;
                    }
                    break End::LeaseInDoubt;
                }
            }
        }
    };
    if let Some(terminal) = terminal {
        terminal.take_back();
    }
    let code = match end {
        End::Exited(status) => {
            if let Err(
                e @ (baton_client::Error::NotHolder { .. } | baton_client::Error::LeaseNotFound),
            ) = guard.release().await
            {
                eprintln!(
                    "baton: lock {}: the hold was already gone when the command ended ({e}); it may have run unprotected",
                    args.name
                );
            }
            let _ = lease.close().await;
            exit_code(status)
        }
        End::Signalled(signal) => {
            let _ = killpg(pgid, signal);
            let limit = Instant::now() + Duration::from_millis(args.kill_after_ms);
            let deadline = lease.safe_until().map_or(limit, |s| s.min(limit));
            let status = stop(&mut child, pgid, deadline, &mut signals).await;
            let _ = guard.release().await;
            let _ = lease.close().await;
            status.map_or(128 + Signal::SIGKILL as i32, exit_code)
        }
        End::LeaseInDoubt | End::HoldLost => {
            let deadline = match end {
                End::HoldLost => Instant::now() + grace,
                _ => lease.safe_until().unwrap_or_else(Instant::now),
            };
            let _ = killpg(pgid, Signal::SIGTERM);
            stop(&mut child, pgid, deadline, &mut signals).await;
            let why = match end {
                End::HoldLost => format!(
                    "the hold of lease {} ended on the server (force-released, or the lease is gone); the command was stopped",
                    lease.id()
                ),
                _ => format!(
                    "keepalives of lease {} were not acknowledged in time; the command was stopped before the lease could expire",
                    lease.id()
                ),
            };
            eprintln!("baton: lock {}: {why}", args.name);
            // The cluster answered about a lost hold: give the lease back. A lease in doubt
            // is left to expire (the cluster is not answering).
            if matches!(end, End::HoldLost) {
                let _ = lease.close().await;
            }
            EXIT_LOCK_LOST
        }
    };
    Ok(code)
}

/// Takes the lock (or one permit of the semaphore) as the options say; with no
/// `--wait-ms`, in waits of the cluster's longest until granted.
async fn acquire(
    lease: &Lease,
    args: &LockArgs,
    owner: String,
) -> Result<LockGuard, baton_client::Error> {
    let forever = args.wait_ms.is_none();
    let wait = match args.wait_ms {
        Some(ms) => Duration::from_millis(ms),
        None => Duration::from_millis(lease.client().limits().await?.wait_ms_max),
    };
    loop {
        let attempt = match args.limit {
            Some(limit) => lease.semaphore(&args.name, limit, 1, wait).await,
            None => {
                let options = LockOptions {
                    owner: owner.clone(),
                    shared: args.shared,
                    wait: (!wait.is_zero()).then_some(wait),
                    lock_delay: args.lock_delay_ms.map(Duration::from_millis),
                };
                lease.lock_with(&args.name, options).await
            }
        };
        match attempt {
            Err(baton_client::Error::Timeout) if forever => continue,
            other => return other,
        }
    }
}

/// Tells on stderr where this lease waits in the queue, again at each change (it follows
/// the lock's events; nothing is polled). Never returns.
#[allow(clippy::print_stderr)]
async fn report_queue(lease: &Lease, args: &LockArgs) -> std::convert::Infallible {
    use baton_client::WatchFilter;
    use futures_util::StreamExt;
    let client = lease.client();
    let semaphore = args.limit.is_some();
    let mut told = None;
    loop {
        let state = if semaphore {
            client.semaphore_state(&args.name).await
        } else {
            client.lock_state(&args.name).await
        };
        let from = match state {
            Ok(state) => {
                let place = state
                    .queue
                    .iter()
                    .find(|w| w.lease_id == lease.id())
                    .map(|w| (w.position, state.queue.len()));
                if place.is_some() && place != told {
                    if let Some((position, of)) = place {
                        eprintln!(
                            "baton: waiting for {}: position {position} of {of} ({} holding)",
                            args.name,
                            state.holders.len()
                        );
                    }
                    told = place;
                }
                Some(state.revision + 1)
            }
            Err(_) => None,
        };
        let filter = if semaphore {
            WatchFilter::Semaphore(args.name.clone())
        } else {
            WatchFilter::Lock(args.name.clone())
        };
        // The next change of the resource (or, if the state could not be read, a pause).
        match from {
            Some(from) => {
                let _ = client.watch(filter, Some(from)).next().await;
            }
            None => tokio::time::sleep(Duration::from_secs(1)).await,
        }
    }
}

/// Holds the lock without a command: prints it, then waits for SIGINT, SIGTERM or SIGHUP
/// (release, revoke, exit 0) or the loss of the hold (exit 3).
#[allow(clippy::print_stderr)]
async fn hold(
    global: &Global,
    args: &LockArgs,
    lease: Lease,
    guard: LockGuard,
    mut signals: Signals,
) -> anyhow::Result<i32> {
    let held = serde_json::json!({
        "name": args.name,
        "lease_id": lease.id(),
        "fence": guard.fence(),
        "count": guard.count(),
    });
    global.print(&held, || {
        format!(
            "lock {} held: fence {}, lease {} (Ctrl-C to release)",
            args.name,
            guard.fence(),
            lease.id()
        )
    });
    let lost = {
        let lost = guard.lost();
        tokio::pin!(lost);
        tokio::select! {
            () = &mut lost => true,
            _ = signals.recv() => false,
        }
    };
    if lost {
        eprintln!(
            "baton: lock {}: the hold ended (force-released, or lease {} lost)",
            args.name,
            lease.id()
        );
        return Ok(EXIT_LOCK_LOST);
    }
    let _ = guard.release().await;
    let _ = lease.close().await;
    Ok(0)
}

/// Waits for CMD's group to exit, forwarding further signals; SIGKILL at `deadline`.
/// Returns the supervisor's status if it exited before the deadline.
async fn stop(
    child: &mut tokio::process::Child,
    pgid: Pid,
    deadline: Instant,
    signals: &mut Signals,
) -> Option<std::process::ExitStatus> {
    loop {
        tokio::select! {
            status = child.wait() => return status.ok(),
            signal = signals.recv() => { let _ = killpg(pgid, signal); }
            () = tokio::time::sleep_until(deadline) => {
                let _ = killpg(pgid, Signal::SIGKILL);
                let _ = child.wait().await;
                return None;
            }
        }
    }
}

/// SIGINT, SIGTERM and SIGHUP, caught for forwarding.
struct Signals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
    hangup: tokio::signal::unix::Signal,
}

impl Signals {
    fn new() -> anyhow::Result<Signals> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Signals {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
            hangup: signal(SignalKind::hangup())?,
        })
    }

    /// The next of them to arrive.
    async fn recv(&mut self) -> Signal {
        tokio::select! {
            _ = self.interrupt.recv() => Signal::SIGINT,
            _ = self.terminate.recv() => Signal::SIGTERM,
            _ = self.hangup.recv() => Signal::SIGHUP,
        }
    }
}

/// baton's exit code for a process's status: its code, or 128 + the signal that ended it.
pub(crate) fn exit_code(status: std::process::ExitStatus) -> i32 {
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

/// The controlling terminal handed to CMD's process group while it runs, as a shell does
/// for a foreground job.
struct Terminal {
    fd: std::os::fd::OwnedFd,
    own: Pid,
}

impl Terminal {
    /// When stdin is the terminal and baton is in its foreground, makes `pgid` the
    /// foreground process group (and wakes it, in case CMD already read and was stopped).
    fn hand_to(pgid: Pid) -> Option<Terminal> {
        use std::io::IsTerminal;
        let stdin = std::io::stdin();
        if !stdin.is_terminal() {
            return None;
        }
        let own = nix::unistd::getpgrp();
        if nix::unistd::tcgetpgrp(&stdin).ok()? != own {
            return None;
        }
        let fd = std::os::fd::AsFd::as_fd(&stdin).try_clone_to_owned().ok()?;
        if let Err(e) = nix::unistd::tcsetpgrp(&fd, pgid) {
            tracing::debug!(error = %e, "could not give the terminal to the command");
            return None;
        }
        let _ = killpg(pgid, Signal::SIGCONT);
        Some(Terminal { fd, own })
    }

    /// Makes baton's group the foreground again. baton is a background group by then, so
    /// SIGTTOU is blocked on this thread around the call (POSIX then allows it).
    fn take_back(self) {
        let mut ttou = nix::sys::signal::SigSet::empty();
        ttou.add(Signal::SIGTTOU);
        if ttou.thread_block().is_ok() {
            if let Err(e) = nix::unistd::tcsetpgrp(&self.fd, self.own) {
                tracing::debug!(error = %e, "could not take the terminal back");
            }
            let _ = ttou.thread_unblock();
        }
    }
}
