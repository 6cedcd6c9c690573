//! The exhaustive checks: Raft's safety properties hold in every reachable state with
//! baton's rules (and with openraft 0.9.25's own), and each guard that baton's changes to
//! those rules rely on is necessary: without it, the checker finds a counter-example.
//!
//! Bounds: three nodes, terms up to 2, one client write, one crash, two messages in flight
//! at once (any of them may be lost, delayed or reordered). The check of baton's rules
//! visits about 5 million distinct states (symmetry-reduced) in about two minutes on two
//! cores; `examples/check.rs` runs it with other bounds.

use baton_raft_model::{Bounds, RaftModel, Rules, State};
use stateright::{Checker, HasDiscoveries, Model};

const SAFETY: [&str; 4] = [
    "election safety",
    "log matching",
    "leader completeness",
    "state machine safety",
];

const BOUNDS: Bounds = Bounds {
    terms: 2,
    writes: 1,
    crashes: 1,
    in_flight: 2,
};

/// The model under `rules` within [`BOUNDS`], explored up to node renaming.
fn model(rules: Rules) -> stateright::CheckerBuilder<RaftModel> {
    RaftModel {
        bounds: BOUNDS,
        rules,
    }
    .checker()
    .symmetry_fn(State::representative)
}

/// Explores every state within [`BOUNDS`] under `rules`.
fn exhaust(rules: Rules) -> impl Checker<RaftModel> {
    let checker = model(rules).spawn_dfs().join();
    println!(
        "{rules:?}: {} states, {} unique, depth {}",
        checker.state_count(),
        checker.unique_state_count(),
        checker.max_depth()
    );
    checker
}

/// Explores under `rules` until a safety property fails; the properties that failed.
fn counter_examples(rules: Rules) -> Vec<&'static str> {
    let checker = model(rules)
        .finish_when(HasDiscoveries::AnyFailures)
        .spawn_dfs()
        .join();
    let found: Vec<_> = SAFETY
        .into_iter()
        .filter(|p| checker.discovery(p).is_some())
        .collect();
    for name in &found {
        if let Some(path) = checker.discovery(name) {
            println!("{name}:");
            for action in path.into_actions() {
                println!("  {action:?}");
            }
        }
    }
    found
}

#[test]
fn raft_stays_safe_under_batons_rules() {
    let checker = exhaust(Rules::baton());
    assert!(checker.is_done(), "explored every state within the bounds");
    checker.assert_properties();
}

#[test]
fn raft_stays_safe_under_openraft_0_9_25() {
    let checker = exhaust(Rules::upstream());
    assert!(checker.is_done());
    checker.assert_properties();
}

/// Patch 0003 (#117): restored as leader in its old term after losing entries it had
/// already sent, a node writes new entries at indexes whose old ones its followers hold.
#[test]
fn a_leader_restored_in_its_old_term_breaks_safety() {
    let found = counter_examples(Rules {
        restarted_leader_campaigns: false,
        ..Rules::baton()
    });
    assert!(!found.is_empty(), "no counter-example without the guard");
}

/// Patch 0001 (#106): a leader that counts entries it has sent but not flushed commits
/// an entry that only one node holds on its disk.
#[test]
fn a_leader_counting_its_unflushed_entries_breaks_safety() {
    let found = counter_examples(Rules {
        leader_counts_only_flushed: false,
        ..Rules::baton()
    });
    assert!(!found.is_empty(), "no counter-example without the guard");
}

/// Patch 0004 (#131): a follower that believes any commit notice commits entries of an
/// old leader that the new one replaces.
#[test]
fn a_follower_believing_any_commit_notice_breaks_safety() {
    let found = counter_examples(Rules {
        commit_notice_guard: false,
        ..Rules::baton()
    });
    assert!(!found.is_empty(), "no counter-example without the guard");
}
