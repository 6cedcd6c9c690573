//! The one baton binary: `baton serve` runs a node. (The client subcommands arrive with
//! the client issue.)

mod serve;

use clap::{Parser, Subcommand};

/// baton: a CP lock server with fair, fenced, lease-bound locks.
#[derive(Parser)]
#[command(name = "baton", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a node (with no arguments: a single-node cluster, data in ./baton-data, API on
    /// 127.0.0.1:7070, peers on 127.0.0.1:7071).
    Serve(serve::ServeArgs),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(args) => serve::run(args),
    }
}
