//! Jepsen-style harness for baton: a real cluster in network namespaces on this machine,
//! concurrent clients, faults on a seeded schedule, a recorded history, and one checker
//! per guarantee of spec §5. See `docs/jepsen.md`.
//!
//! A black box on purpose: this crate depends on none of the server's crates (not the
//! state machine, not `baton-wire`, not the client). It speaks HTTP and JSON of its own and
//! reads answers by hand, so a mistake in the server's types or a change of the wire
//! contract shows up here as a failed check instead of being shared and hidden.
//!
//! # Layout
//! - `cluster.rs`: namespaces, bridge, iptables partitions, server processes, libfaketime
//!   clocks, and the cleanup registry.
//! - `client.rs`: the history recorder and a raw HTTP client mapping answers to
//!   ok/fail/info; `workload/`: the clients, one module per workload on a shared core
//!   (`Worker`, the `Op` builder); `fenced.rs`: the stores locks protect.
//! - `nemesis.rs`: kill, pause, partition, clock and membership faults.
//! - `history.rs`: events, pairing, well-formedness; `checker/`: the checkers (the
//!   linearizability search in `linear.rs`); `report/`: summary, results, timeline, plots.
//! - `run.rs`: one run end to end; `parse.rs`: readers for external histories.

pub mod archivist;
pub mod checker;
pub mod client;
pub mod cluster;
pub mod fenced;
pub mod history;
pub mod nemesis;
pub mod parse;
pub mod report;
pub mod run;
pub mod workload;

/// What can stop a run (checker verdicts are not errors).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The machine or the cluster could not be set up.
    #[error("setup: {0}")]
    Setup(String),
    /// A node slot that does not exist.
    #[error("no node slot {0}")]
    NoSuchNode(usize),
    /// Writing or reading a report failed.
    #[error("report: {0}")]
    Report(String),
}
