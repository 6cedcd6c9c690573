//! `baton locks ls|show|release`: who holds what; `release` is the admin force-release.

use super::Global;
use clap::Subcommand;

/// Lock inspection commands.
#[derive(Subcommand, Debug)]
pub enum LocksCommand {
    /// Locks in use (holder, fence, queue length).
    #[command(
        after_help = "Examples:\n  baton locks ls\n  baton locks ls jobs/\n  baton --json locks ls"
    )]
    Ls {
        /// Name prefix.
        #[arg(default_value = "")]
        prefix: String,
    },
    /// One lock's holders and queue.
    #[command(
        after_help = "Examples:\n  baton locks show reports\n  baton --json locks show reports"
    )]
    Show {
        /// The lock.
        name: String,
    },
    /// Admin force-release of every holder.
    #[command(after_help = "Examples:\n  baton locks release stuck-job")]
    Release {
        /// The lock.
        name: String,
    },
    /// Whether a fence is the lock's current grant (for storage that checks fences).
    #[command(after_help = "Examples:\n  baton locks check reports 42 && echo current")]
    Check {
        /// The lock.
        name: String,
        /// The fence to check.
        fence: u64,
    },
}

/// Runs a locks command.
pub fn run(global: &Global, command: LocksCommand) -> anyhow::Result<i32> {
    let client = global.client()?;
    super::runtime()?.block_on(async move {
        match command {
            LocksCommand::Ls { prefix } => {
                let v = client.locks(&prefix).await?;
                global.print(&v, || {
                    v.locks
                        .iter()
                        .map(|l| {
                            let holder = match l.holders.first() {
                                Some(h) => format!(
                                    "holder lease {} owner {} fence {}",
                                    h.lease_id, h.owner, h.fence
                                ),
                                None => "no holder".to_owned(),
                            };
                            format!("{}\t{holder}\tqueue {}", l.name, l.queue_len)
                        })
                        .collect::<Vec<_>>()
                        .join("\n")
                });
            }
            LocksCommand::Show { name } => {
                let v = client.lock_state(&name).await?;
                global.print(&v, || describe(&v));
            }
            LocksCommand::Check { name, fence } => {
                let v = client.check_fence(&name, fence).await?;
                global.print(&v, || {
                    if v.current {
                        format!("{name}: fence {fence} is the current grant")
                    } else {
                        match v.fence {
                            Some(now) => format!("{name}: fence {fence} is stale (now {now})"),
                            None => format!("{name}: fence {fence} is stale (no holder)"),
                        }
                    }
                });
                return Ok(if v.current { 0 } else { 1 });
            }
            LocksCommand::Release { name } => {
                let v = client.force_release(&name).await?;
                global.print(&v, || {
                    format!("{name}: {} holders released", v.holders_released)
                });
            }
        }
        Ok(0)
    })
}

/// A lock's state in words: holders, then the queue in grant order, then any lock-delay.
fn describe(v: &baton_client::wire::LockStateResponse) -> String {
    use baton_client::wire::HoldMode;
    let mode = |m: HoldMode, permits: Option<u32>| match m {
        HoldMode::Exclusive => "exclusive".to_owned(),
        HoldMode::Shared => "shared".to_owned(),
        HoldMode::Permits => format!("{} permits", permits.unwrap_or(1)),
    };
    let mut lines = vec![format!("{} (revision {})", v.name, v.revision)];
    if v.holders.is_empty() {
        lines.push("  no holder".into());
    }
    for h in &v.holders {
        lines.push(format!(
            "  held by lease {} owner {} ({}), fence {}, count {}",
            h.lease_id,
            h.owner,
            mode(h.mode, h.permits),
            h.fence,
            h.count
        ));
    }
    for w in &v.queue {
        lines.push(format!(
            "  {}. waiting: lease {} owner {} ({}), since revision {}, for up to {} ms",
            w.position,
            w.lease_id,
            w.owner,
            mode(w.mode, w.permits),
            w.enqueued_revision,
            w.wait_ms
        ));
    }
    if let Some(delay) = &v.lock_delay {
        lines.push(format!(
            "  lock-delay of {} ms since revision {}",
            delay.delay_ms, delay.since_revision
        ));
    }
    lines.join("\n")
}
