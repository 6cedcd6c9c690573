//! `baton lease grant|keepalive|revoke|list|show`.

use super::Global;
use clap::Subcommand;
use std::time::Duration;

/// Lease commands.
#[derive(Subcommand, Debug)]
pub enum LeaseCommand {
    /// Grant a lease (it is not kept alive: use it from a script and keep it alive).
    Grant {
        /// TTL in milliseconds.
        #[arg(long, default_value_t = 10_000)]
        ttl_ms: u64,
    },
    /// Keep a lease alive once.
    Keepalive {
        /// The lease id.
        id: u64,
    },
    /// Revoke a lease and everything it holds.
    Revoke {
        /// The lease id.
        id: u64,
    },
    /// List live leases.
    List,
    /// Show a lease, its remaining TTL and what it owns.
    Show {
        /// The lease id.
        id: u64,
    },
}

/// Runs a lease command.
pub fn run(global: &Global, command: LeaseCommand) -> anyhow::Result<i32> {
    let client = global.client()?;
    super::runtime()?.block_on(async move {
        match command {
            LeaseCommand::Grant { ttl_ms } => {
                let v = client.grant_lease(Duration::from_millis(ttl_ms)).await?;
                global.print(&v, || {
                    format!("lease {} granted, ttl {} ms", v.lease_id, v.ttl_ms)
                });
            }
            LeaseCommand::Keepalive { id } => {
                let v = client.keepalive(id).await?;
                global.print(&v, || format!("lease {id} alive for {} ms", v.ttl_ms));
            }
            LeaseCommand::Revoke { id } => {
                let v = client.revoke_lease(id).await?;
                global.print(&v, || {
                    format!(
                        "lease {id} revoked: {} keys deleted, {} holds released",
                        v.keys_deleted, v.holds_released
                    )
                });
            }
            LeaseCommand::List => {
                let v = client.leases().await?;
                global.print(&v, || {
                    v.leases
                        .iter()
                        .map(|l| format!("{}\tttl {} ms", l.lease_id, l.ttl_ms))
                        .collect::<Vec<_>>()
                        .join("\n")
                });
            }
            LeaseCommand::Show { id } => {
                let v = client.lease_info(id).await?;
                global.print(&v, || {
                    let remaining = v
                        .remaining_ms
                        .map_or_else(|| "unknown".to_owned(), |ms| format!("{ms} ms"));
                    let claims: Vec<String> = v
                        .claims
                        .iter()
                        .map(|c| format!("{} {} (owner {:?})", c.kind.as_str(), c.name, c.owner))
                        .collect();
                    format!(
                        "lease {id}: ttl {} ms, remaining {remaining}, keys [{}], claims [{}]",
                        v.ttl_ms,
                        v.keys.join(", "),
                        claims.join(", ")
                    )
                });
            }
        }
        Ok(0)
    })
}
