//! `baton locks ls|show|release`: who holds what; `release` is the admin force-release.

use super::Global;
use baton_client::{Method, segment_name};
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
                let v = client
                    .request(
                        Method::GET,
                        &format!("/v1/locks?prefix={}", segment_name(&prefix)),
                        None,
                        false,
                    )
                    .await?;
                global.print(&v, || {
                    v["locks"]
                        .as_array()
                        .map(|a| {
                            a.iter()
                                .map(|l| {
                                    let holder = &l["holders"][0];
                                    format!(
                                        "{}\tholder lease {} owner {} fence {}\tqueue {}",
                                        l["name"].as_str().unwrap_or_default(),
                                        holder["lease_id"],
                                        holder["owner"],
                                        holder["fence"],
                                        l["queue_len"]
                                    )
                                })
                                .collect::<Vec<_>>()
                                .join("\n")
                        })
                        .unwrap_or_default()
                });
            }
            LocksCommand::Show { name } => {
                let v = client
                    .request(
                        Method::GET,
                        &format!("/v1/locks/{}", segment_name(&name)),
                        None,
                        false,
                    )
                    .await?;
                global.print(&v, || serde_json::to_string_pretty(&v).unwrap_or_default());
            }
            LocksCommand::Release { name } => {
                let v = client
                    .request(
                        Method::DELETE,
                        &format!("/v1/locks/{}", segment_name(&name)),
                        None,
                        true,
                    )
                    .await?;
                global.print(&v, || {
                    format!("{name}: {} holders released", v["holders_released"])
                });
            }
        }
        Ok(0)
    })
}
