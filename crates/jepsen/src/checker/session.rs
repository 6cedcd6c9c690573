//! Leases (spec §5.6): never gone before TTL after the last acknowledged keepalive, and
//! gone within TTL + checkpoint interval + election timeout after keepalives stop.

use super::{Anomaly, CheckConfig, CheckResult};
use crate::history::{Kind, Op, Process, fault_windows};
use serde_json::json;
use std::collections::BTreeMap;

/// Everything the history says about one lease.
#[derive(Default)]
struct LeaseOps<'a> {
    grant: Option<&'a Op>,
    ttl_ms: u64,
    /// Keepalives (any outcome).
    keepalives: Vec<&'a Op>,
    /// Operations that found the lease gone.
    gone: Vec<&'a Op>,
    /// Lookups that found it alive.
    alive: Vec<&'a Op>,
    revoked_at: Option<u64>,
}

fn lease_of(op: &Op) -> Option<u64> {
    op.arg_u64("lease").or_else(|| op.result_u64("lease"))
}

/// Early expiry anywhere (every lease of every workload); late expiry for the `lease`
/// workload's leases, whose keepalives stop on purpose.
pub fn leases(ops: &[Op], config: &CheckConfig) -> CheckResult {
    let mut all: BTreeMap<u64, LeaseOps> = BTreeMap::new();
    for op in ops {
        let Some(id) = lease_of(op) else { continue };
        let e = all.entry(id).or_default();
        let not_found = op.outcome == Kind::Fail && op.error.as_deref() == Some("lease_not_found");
        match op.f.as_str() {
            "lease-grant" if op.is_ok() => {
                e.grant = Some(op);
                e.ttl_ms = op.arg_u64("ttl_ms").unwrap_or_default();
            }
            "keepalive" => {
                if not_found {
                    e.gone.push(op);
                } else {
                    e.keepalives.push(op);
                }
            }
            "lease-get" if op.is_ok() => e.alive.push(op),
            "lease-revoke" | "try-revoke" => {
                e.revoked_at = Some(e.revoked_at.map_or(op.call, |t| t.min(op.call)));
            }
            _ if not_found => e.gone.push(op),
            _ => {}
        }
    }
    // While no majority runs, no clock measures a lease, and a restarted cluster starts
    // every lease afresh once it has a leader. So the bound counts only time a leader
    // could exist: each kill or pause of a majority, until the first operation that
    // succeeds after the nodes are back (the first sign of a leader), is added to it. (A
    // leader that still runs beside a paused majority cannot commit an expiry either.)
    let mut ok_times: Vec<u64> = ops
        .iter()
        // Watches are recorded ok whatever ended them.
        .filter(|o| answered(o) && o.f != "watch")
        .filter_map(|o| o.completed_at)
        .collect();
    ok_times.sort_unstable();
    let windows = fault_windows(ops);
    // Where a node may have restarted, or caught up through a snapshot, and so counts
    // the leases it knows from then: during and after every fault but a clock jump. A
    // node restarts somewhere inside its window (the recorded end comes after the
    // harness verified it), so an observation inside the window is covered too.
    let rejoins: Vec<(u64, u64)> = windows
        .iter()
        .filter(|w| w.kind != "clock")
        .map(|w| (w.start, w.end))
        .collect();
    let mut outages: Vec<(u64, u64)> = windows
        .into_iter()
        .filter(|w| {
            let killed = w.detail["nodes"].as_array().map_or(0, Vec::len);
            // A partition with a kill inside may leave no majority anywhere: counted whole.
            (matches!(w.kind.as_str(), "kill" | "kill-all" | "pause") && killed * 2 > config.nodes)
                || w.kind == "mixed"
        })
        .map(|w| {
            let back = ok_times.partition_point(|t| *t <= w.end);
            (w.start, ok_times.get(back).copied().unwrap_or(u64::MAX))
        })
        .collect();
    // An expiry is a commit: while nothing commits, whatever the cause, no lease can end.
    // Stretches longer than STALL_NS with no acknowledged mutation count as outages (a
    // leader whose lease clock stalls while other writes commit is still caught).
    let stalls = stalls(ops);
    let longest_stall = stalls.iter().map(|(s, e)| e - s).max().unwrap_or(0);
    let stall_count = stalls.len();
    outages.extend(stalls);
    let outages = merge(outages);
    let mut anomalies = Vec::new();
    let (mut early_checked, mut late_checked) = (0, 0);
    for (id, l) in &all {
        let Some(grant) = l.grant else { continue };
        let ttl = l.ttl_ms * 1_000_000;
        for g in &l.gone {
            let Some(seen) = g.ret else { continue };
            if l.revoked_at.is_some_and(|r| r < seen) {
                continue;
            }
            early_checked += 1;
            // The deadline was reset no earlier than the last acknowledged renewal's call.
            let last = l
                .keepalives
                .iter()
                .filter(|k| k.is_ok() && k.call < seen)
                .map(|k| k.call)
                .chain([grant.call])
                .max()
                .unwrap_or(grant.call);
            if seen < last + config.shortest(ttl) {
                anomalies.push(Anomaly::new(
                    "lease-expired-early",
                    &[grant, g],
                    format!(
                        "lease {id} (ttl {} ms) was gone {:.0} ms after its last acknowledged renewal",
                        l.ttl_ms,
                        (seen - last) as f64 / 1e6
                    ),
                ));
            }
        }
        // Late expiry: only where keepalives stopped on purpose and none is unknown.
        let on_purpose = l.alive.iter().any(|o| o.f == "lease-get");
        if !on_purpose || l.keepalives.iter().any(|k| k.outcome == Kind::Info) {
            continue;
        }
        let stopped = l
            .keepalives
            .iter()
            .filter_map(|k| k.completed_at)
            .chain(grant.completed_at)
            .max()
            .unwrap_or(grant.call);
        late_checked += 1;
        let bound = config.longest(config.lease_late_bound_ms(l.ttl_ms) * 1_000_000);
        let rejoin_bound = config.longest(config.lease_rejoin_bound_ms(l.ttl_ms) * 1_000_000);
        // Outage time between the keepalives' end and `t` (none when `t` is before it: a
        // fault window may begin while the keepalives still run).
        let outage_until = |t: u64| {
            outages
                .iter()
                .filter(|(s, e)| *e > stopped && *s < t)
                .map(|(s, e)| e.min(&t).saturating_sub(*s.max(&stopped)))
                .sum::<u64>()
        };
        let overdue_at = |t: u64| t > stopped + bound + outage_until(t);
        let late = l.alive.iter().find(|a| {
            // A fault that began before the lease was overdue and before this sighting
            // may have restarted the node that answered: it counts from its restart.
            let rejoined = rejoins.iter().any(|(start, end)| {
                *end > stopped
                    && *start < a.call
                    && !overdue_at(*start)
                    && a.call <= end + rejoin_bound
            });
            overdue_at(a.call) && !rejoined
        });
        if let Some(late) = late {
            anomalies.push(Anomaly::new(
                "lease-expired-late",
                &[grant, late],
                format!(
                    "lease {id} (ttl {} ms) still alive {:.0} ms after its last keepalive (bound {} ms)",
                    l.ttl_ms,
                    (late.call - stopped) as f64 / 1e6,
                    config.lease_late_bound_ms(l.ttl_ms)
                ),
            ));
        }
    }
    CheckResult::from(
        "leases",
        "5.6 a lease ends no earlier than TTL after its last acknowledged keepalive, and within the bound",
        anomalies,
        early_checked + late_checked > 0,
        json!({
            "leases": all.len(),
            "gone_observations": early_checked,
            "expiries_timed": late_checked,
            "stalls": stall_count,
            "longest_stall_ms": longest_stall / 1_000_000,
        }),
    )
}

/// A request the cluster answered ok (not a harness-local store access, not the nemesis).
fn answered(op: &Op) -> bool {
    op.is_ok() && op.node.is_some() && op.process != Process::Nemesis
}

/// A stretch without an acknowledged mutation this long (ns) is a stall.
const STALL_NS: u64 = 1_000_000_000;

/// Operations whose success means the cluster committed something (reads, lookups,
/// watches and keepalives, which a leader may answer without a commit, do not count).
fn is_mutation(op: &Op) -> bool {
    !matches!(
        op.f.as_str(),
        "read" | "lease-get" | "observe" | "watch" | "keepalive" | "final-read"
    )
}

/// The stretches between consecutive acknowledged mutations (by completion) longer than
/// [`STALL_NS`], from the first to the last.
fn stalls(ops: &[Op]) -> Vec<(u64, u64)> {
    let mut done: Vec<u64> = ops
        .iter()
        .filter(|o| answered(o) && is_mutation(o))
        .filter_map(|o| o.completed_at)
        .collect();
    done.sort_unstable();
    done.windows(2)
        .filter(|w| w[1] - w[0] > STALL_NS)
        .map(|w| (w[0], w[1]))
        .collect()
}

/// Sorted, non-overlapping intervals covering the same time as `intervals`.
fn merge(mut intervals: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    intervals.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::with_capacity(intervals.len());
    for (s, e) in intervals {
        match merged.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => merged.push((s, e)),
        }
    }
    merged
}
