//! `baton lease grant|keepalive|revoke|list|show`.

use super::Global;
use clap::Subcommand;
use std::time::Duration;

/// Lease commands.
#[derive(Subcommand, Debug)]
pub enum LeaseCommand {
    /// Grant a lease (it is not kept alive: use it from a script and keep it alive).
    #[command(
        after_help = "Examples:\n  baton lease grant --ttl-ms 60000\n  LEASE=$(baton --json lease grant | jq .lease_id)"
    )]
    Grant {
        /// TTL in milliseconds.
        #[arg(long, default_value_t = 10_000)]
        ttl_ms: u64,
    },
    /// Keep a lease alive until interrupted (Ctrl-C), a keepalive every third of its TTL;
    /// exits 3 if the lease is gone.
    #[command(
        after_help = "Examples:\n  baton lease keepalive 7 &\n  baton lease keepalive 7 --once"
    )]
    Keepalive {
        /// The lease id.
        id: u64,
        /// One keepalive, then exit.
        #[arg(long)]
        once: bool,
    },
    /// Revoke a lease and everything it holds.
    #[command(after_help = "Examples:\n  baton lease revoke 7")]
    Revoke {
        /// The lease id.
        id: u64,
    },
    /// List live leases.
    #[command(after_help = "Examples:\n  baton lease list\n  baton --json lease list")]
    List,
    /// Show a lease, its remaining TTL and what it owns.
    #[command(after_help = "Examples:\n  baton lease show 7")]
    Show {
        /// The lease id.
        id: u64,
    },
}

/// Exit code when the lease to keep alive is gone.
const EXIT_LEASE_GONE: i32 = 3;

/// Keeps lease `id` alive, printing each acknowledgement, until SIGINT or SIGTERM (exit 0)
/// or the lease is gone (exit 3). A keepalive that fails for another reason is retried
/// after half a second.
#[allow(clippy::print_stderr)]
async fn keep_alive(
    global: &Global,
    client: &baton_client::Client,
    id: u64,
    once: bool,
) -> anyhow::Result<i32> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut terminate = signal(SignalKind::terminate())?;
    loop {
        let pause = match client.keepalive(id).await {
            Ok(v) => {
                global.print(&v, || format!("lease {id} alive for {} ms", v.ttl_ms));
                if once {
                    return Ok(0);
                }
                Duration::from_millis(v.ttl_ms / 3)
            }
            Err(baton_client::Error::LeaseNotFound) => {
                eprintln!("baton: lease {id} is gone (expired or revoked)");
                return Ok(EXIT_LEASE_GONE);
            }
            Err(e) if once => return Err(e.into()),
            Err(e) => {
                eprintln!("baton: keepalive of lease {id}: {e}; retrying");
                Duration::from_millis(500)
            }
        };
        tokio::select! {
            () = tokio::time::sleep(pause) => {}
            _ = interrupt.recv() => return Ok(0),
            _ = terminate.recv() => return Ok(0),
        }
    }
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
            LeaseCommand::Keepalive { id, once } => {
                return keep_alive(global, &client, id, once).await;
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
                        .map(|c| format!("{} {} (owner {})", c.kind.as_str(), c.name, c.owner))
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
