//! `baton kv get|put|del|ls`.

use super::Global;
use clap::Subcommand;
use serde_json::json;

/// Key commands.
#[derive(Subcommand, Debug)]
pub enum KvCommand {
    /// Print a key's value.
    #[command(after_help = "Examples:\n  baton kv get app/config")]
    Get {
        /// The key.
        key: String,
    },
    /// Write a key.
    #[command(
        after_help = "Examples:\n  baton kv put app/config v2\n  baton kv put app/leader me --prev-revision 0\n  baton kv put workers/w1 up --lease 7"
    )]
    Put {
        /// The key.
        key: String,
        /// The value.
        value: String,
        /// Bind it to a lease (ephemeral).
        #[arg(long)]
        lease: Option<u64>,
        /// Compare-and-set: the key's mod_revision must be this (0: must not exist).
        #[arg(long)]
        prev_revision: Option<u64>,
    },
    /// Delete a key.
    #[command(after_help = "Examples:\n  baton kv del app/config")]
    Del {
        /// The key.
        key: String,
    },
    /// List keys under a prefix.
    #[command(after_help = "Examples:\n  baton kv ls app/\n  baton --json kv ls app/ --limit 10")]
    Ls {
        /// The prefix (default: everything).
        #[arg(default_value = "")]
        prefix: String,
        /// At most this many.
        #[arg(long, default_value_t = 1_000)]
        limit: usize,
    },
}

/// Runs a key command.
pub fn run(global: &Global, command: KvCommand) -> anyhow::Result<i32> {
    let client = global.client()?;
    super::runtime()?.block_on(async move {
        match command {
            KvCommand::Get { key } => match client.get(&key).await? {
                Some(kv) => global.print(
                    &json!({"key": kv.key, "value": kv.value, "mod_revision": kv.mod_revision, "version": kv.version}),
                    || kv.value.clone(),
                ),
                None => anyhow::bail!("key {key:?} not found"),
            },
            KvCommand::Put { key, value, lease, prev_revision } => {
                let revision = client.put_with(&key, &value, lease, prev_revision).await?;
                global.print(&json!({"key": key, "revision": revision}), || format!("ok (revision {revision})"));
            }
            KvCommand::Del { key } => {
                let revision = client.delete(&key).await?;
                global.print(&json!({"key": key, "revision": revision}), || format!("deleted (revision {revision})"));
            }
            KvCommand::Ls { prefix, limit } => {
                let kvs = client.range(&prefix, limit).await?;
                let json = json!(kvs.iter().map(|kv| json!({"key": kv.key, "value": kv.value})).collect::<Vec<_>>());
                global.print(&json, || {
                    kvs.iter().map(|kv| format!("{}\t{}", kv.key, kv.value)).collect::<Vec<_>>().join("\n")
                });
            }
        }
        Ok(0)
    })
}
