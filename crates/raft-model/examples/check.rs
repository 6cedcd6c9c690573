//! Runs the model check with other bounds and prints what it found:
//! `cargo run --release -p baton-raft-model --example check -- <terms> <writes> <crashes>
//! <in-flight> [upstream|no-restart-guard|no-flush-guard|no-notice-guard] [seconds]`.

use baton_raft_model::{Bounds, RaftModel, Rules};
use stateright::{Checker, Model};
use std::time::{Duration, Instant};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let number =
        |i: usize, default: u64| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(default);
    let bounds = Bounds {
        terms: number(0, 2) as u8,
        writes: number(1, 1) as u8,
        crashes: number(2, 1) as u8,
        in_flight: number(3, 3) as usize,
    };
    let rules = match args.get(4).map(String::as_str) {
        Some("upstream") => Rules::upstream(),
        Some("no-restart-guard") => Rules {
            restarted_leader_campaigns: false,
            ..Rules::baton()
        },
        Some("no-flush-guard") => Rules {
            leader_counts_only_flushed: false,
            ..Rules::baton()
        },
        Some("no-notice-guard") => Rules {
            commit_notice_guard: false,
            ..Rules::baton()
        },
        _ => Rules::baton(),
    };
    let seconds = number(5, 600);
    let started = Instant::now();
    let checker = RaftModel { bounds, rules }
        .checker()
        .symmetry_fn(baton_raft_model::State::representative)
        .timeout(Duration::from_secs(seconds))
        .spawn_dfs()
        .join();
    println!(
        "{rules:?}\n{bounds:?}\n{} states, {} unique, depth {}, {:.1} s, done: {}",
        checker.state_count(),
        checker.unique_state_count(),
        checker.max_depth(),
        started.elapsed().as_secs_f64(),
        checker.is_done()
    );
    for (name, path) in checker.discoveries() {
        let actions = path.into_actions();
        println!("{name}: {} steps", actions.len());
        if name != "a write is applied" {
            for action in actions {
                println!("  {action:?}");
            }
        }
    }
}
