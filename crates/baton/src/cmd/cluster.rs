//! `baton cluster status|add|remove`.

use super::Global;
use baton_client::Method;
use clap::Subcommand;
use serde_json::json;

/// Cluster commands.
#[derive(Subcommand, Debug)]
pub enum ClusterCommand {
    /// Leader, term, revision and members.
    Status,
    /// Add a member (start it with `baton serve --join` first); send to the leader.
    Add {
        /// Its id.
        id: u64,
        /// Its peer address.
        peer: String,
        /// Its API address.
        api: String,
    },
    /// Remove a member; stop its process afterwards.
    Remove {
        /// Its id.
        id: u64,
    },
}

/// Runs a cluster command.
pub fn run(global: &Global, command: ClusterCommand) -> anyhow::Result<i32> {
    let client = global.client()?;
    super::runtime()?.block_on(async move {
        let v = match command {
            ClusterCommand::Status => client.cluster().await?,
            ClusterCommand::Add { id, peer, api } => {
                client.find_leader().await;
                let body = json!({"id": id, "peer": peer, "api": api});
                client
                    .request(Method::POST, "/v1/cluster/members", Some(&body), false)
                    .await?
            }
            ClusterCommand::Remove { id } => {
                client.find_leader().await;
                client
                    .request(
                        Method::DELETE,
                        &format!("/v1/cluster/members/{id}"),
                        None,
                        false,
                    )
                    .await?
            }
        };
        global.print(&v, || {
            let members: Vec<String> = v["members"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .map(|m| {
                            format!(
                                "  {} {} api {} peer {}",
                                m["id"],
                                m["role"].as_str().unwrap_or(""),
                                m["api"],
                                m["peer"]
                            )
                        })
                        .collect()
                })
                .unwrap_or_default();
            format!(
                "leader {} term {} revision {} commit {}\n{}",
                v["leader"],
                v["term"],
                v["revision"],
                v["commit_index"],
                members.join("\n")
            )
        });
        Ok(0)
    })
}
