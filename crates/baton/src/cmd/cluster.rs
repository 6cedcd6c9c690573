//! `baton cluster status|add|remove`.

use super::Global;
use baton_client::wire::MemberRole;
use clap::Subcommand;

/// Cluster commands.
#[derive(Subcommand, Debug)]
pub enum ClusterCommand {
    /// Leader, term, revision and members.
    #[command(
        after_help = "Examples:\n  baton cluster status\n  baton --json cluster status | jq .leader"
    )]
    Status,
    /// Add a member (start it with `baton serve --join` first); any node forwards it to the
    /// leader. It votes once caught up, or is removed again and the call fails.
    #[command(after_help = "Examples:\n  baton cluster add 4 10.0.0.4:7071 10.0.0.4:7070")]
    Add {
        /// Its id.
        id: u64,
        /// Its peer address.
        peer: String,
        /// Its API address.
        api: String,
    },
    /// Remove a member (refused if fewer reachable voters than a quorum would be left);
    /// stop its process afterwards.
    #[command(after_help = "Examples:\n  baton cluster remove 4")]
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
