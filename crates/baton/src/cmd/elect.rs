//! `baton elect NAME [VALUE]`: campaign and hold leadership until interrupted (the lease is
//! kept alive; resigns on Ctrl-C), or `--observe` to print the leader as it changes.

use super::Global;
use baton_client::Lease;
use clap::Args;
use futures_util::StreamExt;
use serde_json::json;
use std::time::Duration;

/// Options of `baton elect`.
#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  baton elect scheduler node-a\n  baton elect scheduler --observe"
)]
pub struct ElectArgs {
    /// The election.
    name: String,
    /// The value to proclaim (required unless --observe).
    value: Option<String>,
    /// Follow the leader instead of campaigning.
    #[arg(long)]
    observe: bool,
    /// Lease TTL in milliseconds.
    #[arg(long, default_value_t = 10_000)]
    ttl_ms: u64,
}

/// Runs the election command.
pub fn run(global: &Global, args: ElectArgs) -> anyhow::Result<i32> {
    let client = global.client()?;
    super::runtime()?.block_on(async move {
        if args.observe {
            let mut leaders = Box::pin(client.observe(&args.name).await?);
            while let Some(leader) = leaders.next().await {
                let leader = leader?;
                let value =
                    json!(leader.as_ref().map(
                        |l| json!({"lease_id": l.lease_id, "value": l.value, "fence": l.fence})
                    ));
                global.print(&value, || match &leader {
                    Some(l) => format!(
                        "leader: {} (lease {}, fence {})",
                        l.value, l.lease_id, l.fence
                    ),
                    None => "no leader".into(),
                });
            }
            return Ok(0);
        }
        let value = args
            .value
            .ok_or_else(|| anyhow::anyhow!("a VALUE is required to campaign"))?;
        let lease = Lease::grant(&client, Duration::from_millis(args.ttl_ms)).await?;
        let leadership = loop {
            match lease
                .campaign(&args.name, &value, Duration::from_secs(300))
                .await
            {
                Err(baton_client::Error::Timeout) => continue,
                other => break other?,
            }
        };
        global.print(&json!({"fence": leadership.fence()}), || {
            format!(
                "elected leader of {} with fence {}",
                args.name,
                leadership.fence()
            )
        });
        tokio::select! {
            () = leadership.lost() => {
                anyhow::bail!("leadership of {} lost: the lease could not be kept alive", args.name)
            }
            _ = tokio::signal::ctrl_c() => {}
        }
        leadership.resign().await?;
        lease.close().await?;
        Ok(0)
    })
}
