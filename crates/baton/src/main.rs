//! The one baton binary: `baton serve` runs a node; the other subcommands are the client
//! CLI (`lock`, `lease`, `kv`, `watch`, `elect`, `locks`, `cluster`).

mod cmd;
mod serve;

use clap::{Parser, Subcommand};

/// jemalloc, not glibc's malloc: smaller blocks for short strings and freed memory given
/// back to the system (decision #114).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// baton: a CP lock server with fair, fenced, lease-bound locks.
#[derive(Parser)]
#[command(
    name = "baton",
    version,
    about,
    long_about = None,
    after_help = "Examples:\n  baton serve\n  baton lock reports -- ./report.sh\n  BATON_ENDPOINTS=10.0.0.1:7070,10.0.0.2:7070 baton cluster status"
)]
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
    Serve(Box<serve::ServeArgs>),
    /// Run a command while holding a lock (the fence in BATON_FENCE).
    Lock(cmd::run_locked::LockArgs),
    /// Leases.
    #[command(
        subcommand,
        after_help = "Examples:\n  baton lease grant --ttl-ms 15000\n  baton lease keepalive 7\n  baton lease show 7\n  baton lease revoke 7"
    )]
    Lease(cmd::lease::LeaseCommand),
    /// Keys.
    #[command(
        subcommand,
        after_help = "Examples:\n  baton kv put app/config '{\"debug\": true}'\n  baton kv put app/leader me --prev-revision 0\n  baton kv get app/config\n  baton kv ls app/"
    )]
    Kv(cmd::kv::KvCommand),
    /// Print events as they happen.
    Watch(cmd::watch::WatchArgs),
    /// Campaign in an election and hold it, or observe it.
    Elect(cmd::elect::ElectArgs),
    /// Who holds which lock; admin force-release.
    #[command(
        subcommand,
        after_help = "Examples:\n  baton locks ls\n  baton locks show reports\n  baton locks release reports"
    )]
    Locks(cmd::locks::LocksCommand),
    /// Cluster status and membership.
    #[command(
        subcommand,
        after_help = "Examples:\n  baton cluster status\n  baton cluster add 4 10.0.0.4:7071 10.0.0.4:7070\n  baton cluster remove 4"
    )]
    Cluster(cmd::cluster::ClusterCommand),
    /// Tokens and their hashes for the auth file of `baton serve --auth`.
    #[command(
        subcommand,
        after_help = "Examples:\n  baton auth token\n  printf '%s' \"$TOKEN\" | baton auth hash"
    )]
    Auth(cmd::auth::AuthCommand),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    #[command(
        after_help = "Examples:\n  baton completions bash > /etc/bash_completion.d/baton\n  baton completions zsh > \"${fpath[1]}/_baton\"\n  baton completions fish > ~/.config/fish/completions/baton.fish"
    )]
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Internal: the process between `baton lock` and its command.
    #[command(hide = true)]
    Supervise(cmd::supervise::SuperviseArgs),
}

#[allow(clippy::print_stderr)]
fn main() {
    let cli = Cli::parse();
    let global = cli.global;
    let result = match cli.command {
        Command::Serve(args) => serve::run(*args).map(|()| 0),
        Command::Lock(args) => cmd::run_locked::run(&global, args),
        Command::Auth(c) => cmd::auth::run(c),
        Command::Lease(c) => cmd::lease::run(&global, c),
        Command::Kv(c) => cmd::kv::run(&global, c),
        Command::Watch(a) => cmd::watch::run(&global, a),
        Command::Elect(a) => cmd::elect::run(&global, a),
        Command::Locks(c) => cmd::locks::run(&global, c),
        Command::Cluster(c) => cmd::cluster::run(&global, c),
        Command::Supervise(a) => cmd::supervise::run(a),
        Command::Completions { shell } => {
            use clap::CommandFactory;
            clap_complete::generate(shell, &mut Cli::command(), "baton", &mut std::io::stdout());
            Ok(0)
        }
    };
    match result {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("baton: {e:#}");
            std::process::exit(1);
        }
    }
}
