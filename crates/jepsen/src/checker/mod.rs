//! Checkers, one per guarantee of spec §5. Each is a pure function of the history (and of
//! the server's own event log read back at the end), so re-checking a saved run gives the
//! same report.

pub mod elle;
pub mod faults;
pub mod linear;
pub mod lock;
pub mod models;
pub mod register;
pub mod session;
pub mod watch;

use crate::history::Op;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// A three-valued verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Validity {
    /// The guarantee held.
    Valid,
    /// It was violated.
    Invalid,
    /// The checker could not tell (budget, too little data).
    Unknown,
}

impl Serialize for Validity {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Validity::Valid => s.serialize_bool(true),
            Validity::Invalid => s.serialize_bool(false),
            Validity::Unknown => s.serialize_str("unknown"),
        }
    }
}

/// One violation, with the events that show it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Anomaly {
    /// Its kind, e.g. `stale-read`, `duplicate-fence`, `early-grant`.
    pub kind: String,
    /// Invoke indices of the operations involved.
    pub ops: Vec<u64>,
    /// What happened, in words.
    pub message: String,
}

impl Anomaly {
    /// An anomaly of `kind` over `ops`.
    pub fn new(kind: &str, ops: &[&Op], message: String) -> Anomaly {
        Anomaly {
            kind: kind.to_owned(),
            ops: ops.iter().map(|o| o.index).collect(),
            message,
        }
    }
}

/// What one checker found.
#[derive(Clone, Debug, Serialize)]
pub struct CheckResult {
    /// The checker's name.
    pub name: String,
    /// The guarantee it checks (spec §5 item).
    pub guarantee: String,
    /// Its verdict.
    pub valid: Validity,
    /// Violations (at most 20 kept per kind).
    pub anomalies: Vec<Anomaly>,
    /// Counts and observations that are not verdicts.
    pub stats: Value,
}

impl CheckResult {
    /// A result: invalid if there are anomalies, else `Unknown` when `enough` is false.
    pub fn from(
        name: &str,
        guarantee: &str,
        mut anomalies: Vec<Anomaly>,
        enough: bool,
        stats: Value,
    ) -> CheckResult {
        let valid = if !anomalies.is_empty() {
            Validity::Invalid
        } else if enough {
            Validity::Valid
        } else {
            Validity::Unknown
        };
        let mut per_kind: BTreeMap<String, usize> = BTreeMap::new();
        anomalies.retain(|a| {
            let n = per_kind.entry(a.kind.clone()).or_default();
            *n += 1;
            *n <= 20
        });
        CheckResult {
            name: name.into(),
            guarantee: guarantee.into(),
            valid,
            anomalies,
            stats,
        }
    }
}

/// The server's own record: per watch filter, every event from revision 1, read back after
/// the run, or followed during it by the archivist when the event window is smaller than
/// the run (`--event-window`); where both exist they must agree.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Truth {
    /// Events by filter (`prefix=r/`, `lock=lock-0`, …), in revision order.
    pub events: BTreeMap<String, Vec<Value>>,
    /// Filters with no trustworthy log, with why (neither read back nor archived, or the
    /// two disagree).
    pub missing: BTreeMap<String, String>,
    /// Filters whose log is the archivist's record (it could not be read back after the
    /// run: a small event window), with why.
    #[serde(default)]
    pub archived: BTreeMap<String, String>,
    /// Per node, the lines of its log that are panics or errors (read after every server
    /// stopped; see `faults::classify`).
    #[serde(default)]
    pub server_logs: BTreeMap<String, Vec<String>>,
    /// How many error lines the faults explain (openraft's failed RPCs, 503/504 answers).
    #[serde(default)]
    pub server_log_expected: u64,
}

/// Settings the checkers need.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CheckConfig {
    /// Budget of the linearizability search per partition, in seconds.
    pub budget_s: u64,
    /// The servers' lease checkpoint interval (ms), for the late bound.
    #[serde(default = "checkpoint_interval_ms")]
    pub checkpoint_interval_ms: u64,
    /// The servers' longest election timeout (ms), for the late bound.
    #[serde(default = "election_timeout_max_ms")]
    pub election_timeout_max_ms: u64,
    /// Fewest ok client operations for a verdict other than unknown.
    pub min_ok_ops: usize,
    /// Voting members (a kill of a majority stops every lease clock).
    #[serde(default = "three")]
    pub nodes: usize,
    /// The clock drift the servers ran with (spec §2): a lease may end TTL / (1 + drift)
    /// after its renewal, and as late as the bound / (1 − drift).
    #[serde(default)]
    pub clock_drift: f64,
}

impl CheckConfig {
    /// The earliest a lease of `ttl` (ns) may end after a renewal, at the allowed drift.
    pub fn shortest(&self, ttl: u64) -> u64 {
        (ttl as f64 / (1.0 + self.clock_drift)) as u64
    }

    /// How long after its last keepalive a lease of `ttl_ms` may still be alive, outages
    /// aside (spec §2): `ttl + min(ttl, 2 × checkpoint interval)`, two election timeouts
    /// for the failover, one for the new leader's grace, and [`LATE_MARGIN_MS`].
    pub fn lease_late_bound_ms(&self, ttl_ms: u64) -> u64 {
        ttl_ms
            + ttl_ms.min(2 * self.checkpoint_interval_ms)
            + 3 * self.election_timeout_max_ms
            + LATE_MARGIN_MS
    }

    /// How long after a node restarted or rejoined a lease of `ttl_ms` may still be
    /// alive: that node counts what it replayed or installed from then (spec §2), plus
    /// the grace and [`LATE_MARGIN_MS`].
    pub fn lease_rejoin_bound_ms(&self, ttl_ms: u64) -> u64 {
        ttl_ms + self.election_timeout_max_ms + LATE_MARGIN_MS
    }

    /// The longest `bound` (ns) of the leader's clock may take in real time, at the
    /// allowed drift.
    pub fn longest(&self, bound: u64) -> u64 {
        (bound as f64 / (1.0 - self.clock_drift).max(0.5)) as u64
    }
}

/// Added to the late bounds for the expiry's own commit and the observation of it.
pub const LATE_MARGIN_MS: u64 = 1_000;

fn three() -> usize {
    3
}

/// The server's default lease checkpoint interval.
fn checkpoint_interval_ms() -> u64 {
    5_000
}

/// The server's default longest election timeout.
fn election_timeout_max_ms() -> u64 {
    1_000
}

impl Default for CheckConfig {
    fn default() -> Self {
        CheckConfig {
            budget_s: 10,
            checkpoint_interval_ms: checkpoint_interval_ms(),
            election_timeout_max_ms: election_timeout_max_ms(),
            min_ok_ops: 50,
            nodes: 3,
            clock_drift: 0.0,
        }
    }
}

/// Runs every checker whose workload ran (a checker with none of its operations in the
/// history is left out rather than reported unknown).
pub fn check_all(ops: &[Op], truth: &Truth, config: &CheckConfig) -> Vec<CheckResult> {
    let has = |fs: &[&str]| ops.iter().any(|o| fs.contains(&o.f.as_str()));
    let mut results = Vec::new();
    if has(&["read", "write", "cas"]) {
        results.push(register::linearizable(ops, config));
    }
    results.push(register::revisions(ops));
    if has(&["acquire"]) {
        results.push(lock::fencing(ops, config));
    }
    if has(&["try-acquire"]) {
        results.push(lock::trylock(ops, config));
    }
    if has(&["acquire", "sem-acquire", "campaign"]) {
        results.push(lock::queues(ops, truth));
    }
    if has(&["sem-acquire"]) {
        results.push(lock::semaphore(ops, truth));
    }
    if has(&["campaign", "observe"]) {
        results.push(lock::election(ops, config));
    }
    if has(&["keepalive", "lease-get"]) {
        results.push(session::leases(ops, config));
    }
    if has(&["watch"]) {
        results.push(watch::watches(ops, truth));
    }
    if has(&["txn"]) {
        results.push(elle::list_append(ops, config));
    }
    if has(&["write", "cas"]) {
        results.push(register::durability(ops, truth));
    }
    results.push(faults::applied(ops));
    if !truth.server_logs.is_empty() {
        results.push(faults::server_logs(truth));
    }
    results
}

/// The overall verdict: invalid if any checker says so, else unknown if any is unsure.
pub fn overall(results: &[CheckResult]) -> Validity {
    if results.iter().any(|r| r.valid == Validity::Invalid) {
        Validity::Invalid
    } else if results.iter().any(|r| r.valid == Validity::Unknown) {
        Validity::Unknown
    } else {
        Validity::Valid
    }
}

/// Indices of ops sorted by call time, and a sweep that, for each op in call order, knows
/// the completed op (by `ret`) with the largest key before that call: the building block
/// of every "A completed before B was invoked" check, in O(n log n).
pub(crate) fn realtime_pairs<'a, K: Ord + Copy>(
    ops: &[&'a Op],
    key: impl Fn(&Op) -> K,
    mut visit: impl FnMut(&'a Op, &'a Op),
) {
    let mut by_ret: Vec<&Op> = ops.iter().copied().filter(|o| o.ret.is_some()).collect();
    by_ret.sort_by_key(|o| o.ret);
    let mut by_call: Vec<&Op> = ops.to_vec();
    by_call.sort_by_key(|o| o.call);
    let mut best: Option<&Op> = None;
    let mut i = 0;
    for op in by_call {
        while i < by_ret.len() && by_ret[i].ret.is_some_and(|r| r < op.call) {
            if best.is_none_or(|b| key(by_ret[i]) > key(b)) {
                best = Some(by_ret[i]);
            }
            i += 1;
        }
        if let Some(b) = best {
            visit(b, op);
        }
    }
}
