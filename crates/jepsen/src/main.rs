//! `cargo run -p jepsen -- …`: run a Jepsen-style test against a real baton cluster, or
//! re-check a saved run. Exit codes: 0 valid, 1 invalid, 2 unknown or setup error.

use clap::{Args, Parser, Subcommand};
use jepsen::checker::{CheckConfig, Validity};
use jepsen::cluster;
use jepsen::nemesis::Fault;
use jepsen::run::{DEFAULT_EVENT_WINDOW, Plan, Workload, check_dir, random_seed, run};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(
    name = "jepsen",
    about = "Jepsen-style tests for baton: real nodes in network namespaces, faults, checked histories",
    args_conflicts_with_subcommands = true,
    after_help = "Examples:\n  cargo run -p jepsen -- --nodes 3 --time-limit 90 --nemesis all --workload all --seed 7\n  cargo run -p jepsen -- --nodes 5 --time-limit 600 --nemesis partition,kill,pause,clock,member --workload all --seed 42\n  cargo run -p jepsen -- check results/20261122T050000Z-register-kill-seed7"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    test: TestArgs,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Re-check a saved run directory and rewrite its report.
    Check {
        /// The run directory (holds history.jsonl).
        dir: PathBuf,
    },
}

#[derive(Args, Debug)]
struct TestArgs {
    /// Voting members (3 or 5).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u8).range(3..=5))]
    nodes: u8,
    /// Seconds of workload (faults stop 10 s before the end).
    #[arg(long, default_value_t = 60)]
    time_limit: u64,
    /// Faults: any of kill, pause, partition, clock, member, mixed; or all, or none.
    #[arg(long, default_value = "all", value_parser = parse_faults)]
    nemesis: Faults,
    /// Workloads: any of register, lock, trylock, semaphore, election, lease, watch, append;
    /// or all.
    #[arg(long, default_value = "all", value_parser = parse_workloads)]
    workload: Workloads,
    /// Seed of the plan (random if not given; always printed).
    #[arg(long)]
    seed: Option<u64>,
    /// Mean seconds between faults.
    #[arg(long, default_value_t = 8)]
    interval: u64,
    /// Target client operations per second, all workers together.
    #[arg(long, default_value_t = 80.0)]
    rate: f64,
    /// TTL of the lock, semaphore and election leases (ms).
    #[arg(long, default_value_t = 3_000)]
    ttl_ms: u64,
    /// Directory for run directories.
    #[arg(long, default_value = "results")]
    out: PathBuf,
    /// The baton binary (default: built with cargo, in the same profile as this one).
    #[arg(long)]
    baton_bin: Option<PathBuf>,
    /// Budget of the linearizability search per key, in seconds.
    #[arg(long, default_value_t = 10)]
    budget_s: u64,
    /// TEST ONLY: start servers that misbehave in one known way, which the checkers must
    /// catch: expire-early, duplicate-fence, barging, drop-watch-event or stale-read. Needs a
    /// baton built with `--features unsafe-test-hooks` (the test builds are).
    #[arg(long, value_name = "CANARY", value_parser = clap::builder::PossibleValuesParser::new(jepsen::cluster::CANARIES))]
    unsafe_canary: Option<String>,
    /// Clock drift: every clock of each server (monotonic included, through libfaketime)
    /// runs at a fixed rate, spread over the slots from 1 + DRIFT to 1 − DRIFT, and the
    /// checkers allow that drift (spec §2). 0: real clocks. Not with the clock fault.
    #[arg(long, default_value_t = 0.0, value_parser = parse_drift)]
    clock_drift: f64,
    /// TEST ONLY: every server's clocks run RATE times too fast (> 1), beyond the drift the
    /// checkers allow: early lease ends and early grants must be caught.
    #[arg(long, value_name = "RATE", value_parser = parse_fast)]
    clock_fast: Option<f64>,
    /// Revisions of events the servers keep for watches. Small values make watches hit 410
    /// `compacted` and resume; the checkers then use the archivist's record of the log.
    #[arg(long, value_name = "REVISIONS", default_value_t = DEFAULT_EVENT_WINDOW, value_parser = clap::value_parser!(u64).range(10..))]
    event_window: u64,
}

fn parse_drift(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(d) if (0.0..0.5).contains(&d) => Ok(d),
        _ => Err("a drift in [0, 0.5), e.g. 0.05".into()),
    }
}

fn parse_fast(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(r) if r > 1.0 && r <= 10.0 => Ok(r),
        _ => Err("a rate above 1 (at most 10), e.g. 1.5".into()),
    }
}

#[derive(Clone, Debug)]
struct Faults(Vec<Fault>);
#[derive(Clone, Debug)]
struct Workloads(Vec<Workload>);

fn parse_list<T: clap::ValueEnum + Clone + Ord>(s: &str, all: &[T]) -> Result<Vec<T>, String> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part {
            "all" => out.extend_from_slice(all),
            "none" => {}
            p => out.push(T::from_str(p, true)?),
        }
    }
    out.sort();
    out.dedup();
    Ok(out)
}

fn parse_faults(s: &str) -> Result<Faults, String> {
    parse_list(s, &Fault::ALL).map(Faults)
}

fn parse_workloads(s: &str) -> Result<Workloads, String> {
    let list = parse_list(s, &Workload::ALL)?;
    if list.is_empty() {
        return Err("give at least one workload".into());
    }
    Ok(Workloads(list))
}

/// Finds the baton binary beside this one, building it first when run through cargo
/// (with the test-only hooks when a canary needs them, without them otherwise).
fn baton_binary(given: Option<PathBuf>, hooks: bool) -> Result<PathBuf, String> {
    if let Some(p) = given {
        return Ok(p);
    }
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let dir = exe.parent().ok_or("no directory for this binary")?;
    if let Ok(cargo) = std::env::var("CARGO") {
        let mut cmd = std::process::Command::new(cargo);
        cmd.args(["build", "-p", "baton", "--bin", "baton"]);
        if hooks {
            cmd.args(["--features", "unsafe-test-hooks"]);
        }
        if dir.ends_with("release") {
            cmd.arg("--release");
        }
        let status = cmd.status().map_err(|e| e.to_string())?;
        if !status.success() {
            return Err("cargo build -p baton failed".into());
        }
    }
    let binary = dir.join("baton");
    if binary.exists() {
        Ok(binary)
    } else {
        Err(format!(
            "{} not found: build it with `cargo build -p baton` or pass --baton-bin",
            binary.display()
        ))
    }
}

#[allow(clippy::print_stdout, clippy::print_stderr)]
fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        cluster::cleanup();
        default_hook(info);
    }));
    let cli = Cli::parse();
    if let Some(Command::Check { dir }) = cli.command {
        return match check_dir(&dir) {
            Ok(v) => {
                print_summary(&dir);
                exit(v)
            }
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::from(2)
            }
        };
    }
    let t = cli.test;
    let binary = match baton_binary(t.baton_bin, t.unsafe_canary.is_some()) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let plan = Plan {
        nodes: usize::from(t.nodes),
        time_limit: t.time_limit,
        faults: t.nemesis.0,
        workloads: t.workload.0,
        seed: t.seed.unwrap_or_else(random_seed),
        interval: t.interval.max(1),
        rate: t.rate,
        ttl_ms: t.ttl_ms,
        out: t.out,
        binary,
        canary: t.unsafe_canary,
        clock_drift: t.clock_drift,
        clock_fast: t.clock_fast,
        event_window: t.event_window,
        check: CheckConfig {
            budget_s: t.budget_s,
            nodes: usize::from(t.nodes),
            clock_drift: t.clock_drift,
            ..CheckConfig::default()
        },
    };
    eprintln!(
        "seed {}; repeat this plan with:\n  {}",
        plan.seed,
        plan.command()
    );
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let outcome = runtime.block_on(async {
        tokio::select! {
            r = run(plan.clone()) => Some(r),
            _ = interrupted() => None,
        }
    });
    // Whatever happened, nothing the run started survives it.
    cluster::cleanup();
    match outcome {
        None => {
            eprintln!("interrupted: every process and namespace the run made is gone");
            ExitCode::from(130)
        }
        Some(Err(e)) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
        Some(Ok((verdict, dir))) => {
            print_summary(&dir);
            eprintln!(
                "seed {}; report in {}; repeat with:\n  {}",
                plan.seed,
                dir.display(),
                plan.command()
            );
            exit(verdict)
        }
    }
}

#[allow(clippy::print_stdout)]
fn print_summary(dir: &Path) {
    if let Ok(s) = std::fs::read_to_string(dir.join("summary.txt")) {
        println!("{s}");
    }
}

fn exit(v: Validity) -> ExitCode {
    match v {
        Validity::Valid => ExitCode::SUCCESS,
        Validity::Invalid => ExitCode::from(1),
        Validity::Unknown => ExitCode::from(2),
    }
}

async fn interrupted() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(t) => t,
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
