//! `baton locks ls|show|release`: who holds what; `release` is the admin force-release.

use super::Global;
use clap::Subcommand;

/// Lock inspection commands.
#[derive(Subcommand, Debug)]
pub enum LocksCommand {
    /// Locks in use (holder, fence, queue length).
    Ls {
        /// Name prefix.
        #[arg(default_value = "")]
        prefix: String,
    },
    /// One lock's holders and queue.
    Show {
        /// The lock.
        name: String,
    },
    /// Admin force-release of every holder.
    Release {
        /// The lock.
        name: String,
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
                                    "holder lease {} owner {:?} fence {}",
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
                global.print(&v, || serde_json::to_string_pretty(&v).unwrap_or_default());
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
