//! The one baton binary: `baton serve` runs a node; the other subcommands are the client
//! CLI (`lock`, `lease`, `kv`, `watch`, `elect`, `locks`, `cluster`).

mod cmd;
mod serve;

use clap::{Parser, Subcommand};

/// baton: a CP lock server with fair, fenced, lease-bound locks.
#[derive(Parser)]
#[command(name = "baton", version, about, long_about = None)]
struct Cli {
    #[command(flatten)]
    global: cmd::Global,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a node (with no arguments: a single-node cluster, data in ./baton-data, API on
    /// 127.0.0.1:7070, peers on 127.0.0.1:7071).
    Serve(serve::ServeArgs),
    /// Run a command while holding a lock (the fence in BATON_FENCE).
    Lock(cmd::lock::LockArgs),
    /// Leases.
    #[command(subcommand)]
    Lease(cmd::lease::LeaseCommand),
    /// Keys.
    #[command(subcommand)]
    Kv(cmd::kv::KvCommand),
    /// Print events as they happen.
    Watch(cmd::watch::WatchArgs),
    /// Campaign in an election and hold it, or observe it.
    Elect(cmd::elect::ElectArgs),
    /// Who holds which lock; admin force-release.
    #[command(subcommand)]
    Locks(cmd::locks::LocksCommand),
    /// Cluster status and membership.
    #[command(subcommand)]
    Cluster(cmd::cluster::ClusterCommand),
}

#[allow(clippy::print_stderr)]
fn main() {
    let cli = Cli::parse();
    let global = cli.global;
    let result = match cli.command {
        Command::Serve(args) => serve::run(args).map(|()| 0),
        Command::Lock(args) => cmd::lock::run(&global, args),
        Command::Lease(c) => cmd::lease::run(&global, c),
        Command::Kv(c) => cmd::kv::run(&global, c),
        Command::Watch(a) => cmd::watch::run(&global, a),
        Command::Elect(a) => cmd::elect::run(&global, a),
        Command::Locks(c) => cmd::locks::run(&global, c),
        Command::Cluster(c) => cmd::cluster::run(&global, c),
    };
    match result {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("baton: {e:#}");
            std::process::exit(1);
        }
    }
}
