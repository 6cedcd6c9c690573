//! `baton lease grant|keepalive|revoke|list|show`.

use super::Global;
use baton_client::Method;
use clap::Subcommand;
use serde_json::json;

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
        let (method, path, body, mutation) = match &command {
            LeaseCommand::Grant { ttl_ms } => (
                Method::POST,
                "/v1/leases".to_owned(),
                Some(json!({"ttl_ms": ttl_ms})),
                true,
            ),
            LeaseCommand::Keepalive { id } => (
                Method::POST,
                format!("/v1/leases/{id}/keepalive"),
                None,
                false,
            ),
            LeaseCommand::Revoke { id } => (Method::DELETE, format!("/v1/leases/{id}"), None, true),
            LeaseCommand::List => (Method::GET, "/v1/leases".to_owned(), None, false),
            LeaseCommand::Show { id } => (Method::GET, format!("/v1/leases/{id}"), None, false),
        };
        let v = client
            .request(method, &path, body.as_ref(), mutation)
            .await?;
        global.print(&v, || match &command {
            LeaseCommand::Grant { .. } => {
                format!("lease {} granted, ttl {} ms", v["lease_id"], v["ttl_ms"])
            }
            LeaseCommand::Keepalive { id } => format!("lease {id} alive for {} ms", v["ttl_ms"]),
            LeaseCommand::Revoke { id } => format!(
                "lease {id} revoked: {} keys deleted, {} holds released",
                v["keys_deleted"], v["holds_released"]
            ),
            LeaseCommand::List => v["leases"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .map(|l| format!("{}\tttl {} ms", l["lease_id"], l["ttl_ms"]))
                        .collect::<Vec<_>>()
                        .join("\n")
                })
                .unwrap_or_default(),
            LeaseCommand::Show { id } => format!(
                "lease {id}: ttl {} ms, remaining {} ms, keys {}, claims {}",
                v["ttl_ms"], v["remaining_ms"], v["keys"], v["claims"]
            ),
        });
        Ok(0)
    })
}
