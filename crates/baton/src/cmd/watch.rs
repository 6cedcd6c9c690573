//! `baton watch`: prints events as they happen (one line each), resuming across failures.

use super::Global;
use baton_client::WatchFilter;
use clap::Args;
use futures_util::StreamExt;

/// Options of `baton watch`.
#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  baton watch --prefix app/\n  baton watch --lock reports --from 1\n  baton watch --lease 7"
)]
pub struct WatchArgs {
    /// Keys under a prefix.
    #[arg(long, group = "filter")]
    prefix: Option<String>,
    /// One key.
    #[arg(long, group = "filter")]
    key: Option<String>,
    /// One lock.
    #[arg(long, group = "filter")]
    lock: Option<String>,
    /// One election.
    #[arg(long, group = "filter")]
    election: Option<String>,
    /// A lease and everything it owns.
    #[arg(long, group = "filter")]
    lease: Option<u64>,
    /// Start at this revision (default: from now).
    #[arg(long)]
    from: Option<u64>,
    /// Stop after this many events.
    #[arg(long)]
    count: Option<usize>,
}

/// Runs the watch until interrupted (or `--count` events).
pub fn run(global: &Global, args: WatchArgs) -> anyhow::Result<i32> {
    let client = global.client()?;
    let filter = if let Some(p) = args.prefix {
        WatchFilter::Prefix(p)
    } else if let Some(k) = args.key {
        WatchFilter::Key(k)
    } else if let Some(l) = args.lock {
        WatchFilter::Lock(l)
    } else if let Some(e) = args.election {
        WatchFilter::Election(e)
    } else if let Some(l) = args.lease {
        WatchFilter::Lease(l)
    } else {
        WatchFilter::All
    };
    super::runtime()?.block_on(async move {
        let mut events = Box::pin(client.watch(filter, args.from));
        let mut seen = 0;
        while let Some(event) = events.next().await {
            let event = event?;
            global.print(&event, || {
                let json = serde_json::to_string(&event).unwrap_or_default();
                format!("{}\t{}\t{json}", event.revision, event.event.type_name())
            });
            seen += 1;
            if args.count.is_some_and(|n| seen >= n) {
                break;
            }
        }
        Ok(0)
    })
}
