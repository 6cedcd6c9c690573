//! `baton supervise` (hidden): the process between `baton lock` and its command. It runs in
//! the command's process group, asks the kernel for a signal when `baton lock` dies
//! (`PR_SET_PDEATHSIG`), and then stops the whole group: SIGTERM, and SIGKILL after the
//! grace period. So even a `kill -9` of `baton lock` cannot leave the command running
//! unprotected once the lease runs out. Otherwise it waits for the command and exits with
//! its status (128 + signal number if a signal ended it).

use super::run_locked::{EXIT_LOCK_LOST, exit_code};
use clap::Args;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::{Pid, getpgrp, getppid};
use std::time::Duration;
use tokio::signal::unix::{SignalKind, signal};

/// Options of the hidden `baton supervise`.
#[derive(Args, Debug)]
pub struct SuperviseArgs {
    /// The pid of the `baton lock` that started this process.
    #[arg(long)]
    pub parent: i32,
    /// How long the command has between SIGTERM and SIGKILL if `baton lock` dies.
    #[arg(long)]
    pub grace_ms: u64,
    /// The command and its arguments.
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
}

/// Runs the command under supervision; returns the exit code.
pub fn run(args: SuperviseArgs) -> anyhow::Result<i32> {
    super::runtime()?.block_on(supervise(args))
}

#[allow(clippy::print_stderr)]
async fn supervise(args: SuperviseArgs) -> anyhow::Result<i32> {
    // Asked before anything else, then checked: a parent that died before the request was
    // made sends no signal, but this process has been re-parented already.
    nix::sys::prctl::set_pdeathsig(Signal::SIGUSR2)?;
    let mut orphaned = signal(SignalKind::user_defined2())?;
    if getppid() != Pid::from_raw(args.parent) {
        eprintln!("baton: the lock holder exited before the command could start");
        return Ok(EXIT_LOCK_LOST);
    }
    // `baton lock` forwards signals to the whole group: the command gets them directly,
    // and this process stays to report the command's status.
    let _interrupt = signal(SignalKind::interrupt())?;
    let _terminate = signal(SignalKind::terminate())?;
    let _hangup = signal(SignalKind::hangup())?;
    let mut child = tokio::process::Command::new(&args.command[0])
        .args(&args.command[1..])
        .spawn()?;
    tokio::select! {
        status = child.wait() => Ok(exit_code(status?)),
        _ = orphaned.recv() => {
            let group = getpgrp();
            eprintln!("baton: the lock holder died; stopping the command");
            let _ = killpg(group, Signal::SIGTERM);
            let grace = Duration::from_millis(args.grace_ms);
            if tokio::time::timeout(grace, child.wait()).await.is_err() {
                let _ = killpg(group, Signal::SIGKILL);
            }
            Ok(EXIT_LOCK_LOST)
        }
    }
}
