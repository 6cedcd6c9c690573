//! `baton cluster status|add|remove`.

use super::Global;
use baton_client::wire::MemberRole;
use clap::Subcommand;

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
                client.add_member(id, &peer, &api).await?
            }
            ClusterCommand::Remove { id } => {
                client.find_leader().await;
                client.remove_member(id).await?
            }
        };
        global.print(&v, || {
            let members: Vec<String> = v
                .members
                .iter()
                .map(|m| {
                    let role = match m.role {
                        MemberRole::Leader => "leader",
                        MemberRole::Voter => "voter",
                        MemberRole::Learner => "learner",
                    };
                    format!("  {} {role} api {} peer {}", m.id, m.api, m.peer)
                })
                .collect();
            let leader = v
                .leader
                .map_or_else(|| "none".to_owned(), |id| id.to_string());
            format!(
                "leader {leader} term {} revision {} commit {}\n{}",
                v.term,
                v.revision,
                v.commit_index,
                members.join("\n")
            )
        });
        Ok(0)
    })
}
