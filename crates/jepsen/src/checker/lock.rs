//! Locks, semaphores and elections (spec §5.1, 5.2, 5.4): no lost update through the
//! fence, no early grant while the previous holder's lease must still live, fences in
//! real-time order (see `register::revisions`), try-lock linearizability against a fenced
//! owner-mutex, FIFO grants in the server's log, semaphore limits, one leader per fence.

use super::linear::{self, Operation, Verdict};
use super::models::{FencedOwnerMutex, MutexIn, MutexOut};
use super::{Anomaly, CheckConfig, CheckResult, Truth, realtime_pairs};
use crate::history::{Kind, Op};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

/// Replays one store's accepted accesses in order: each accepted write must be exactly
/// one more than the value when it was written (else an update was lost). Returns the
/// accesses, the lost updates and the final value.
fn replay_store<'a>(ops: &[&'a Op], read: &str, write: &str) -> (usize, Vec<&'a Op>, u64) {
    let mut accesses: Vec<&Op> = ops
        .iter()
        .copied()
        .filter(|o| (o.f == read || o.f == write) && o.is_ok())
        .collect();
    accesses.sort_by_key(|o| o.result_u64("seq"));
    let mut value = 0;
    let mut lost = Vec::new();
    for a in &accesses {
        if a.f == write {
            let v = a.arg_u64("value").unwrap_or_default();
            if v != value + 1 {
                lost.push(*a);
            }
            value = v;
        }
    }
    (accesses.len(), lost, value)
}

/// The fenced store never loses an update; no lock is granted while the previous holder
/// can still believe its lease alive. Reports the unfenced shadow store's lost updates
/// (the test's teeth) and overlapping believed-holding intervals.
pub fn fencing(ops: &[Op], config: &CheckConfig) -> CheckResult {
    let mut anomalies = Vec::new();
    let mut by_lock: BTreeMap<&str, Vec<&Op>> = BTreeMap::new();
    for op in ops.iter().filter(|o| {
        matches!(
            o.f.as_str(),
            "acquire" | "release" | "store-read" | "store-write" | "shadow-read" | "shadow-write"
        )
    }) {
        if let Some(k) = &op.key {
            by_lock.entry(k).or_default().push(op);
        }
    }
    let leases = LeaseTimes::from(ops, config);
    let mut stats = serde_json::Map::new();
    let mut grants_total = 0;
    for (name, lock_ops) in &by_lock {
        let (accesses, lost, value) = replay_store(lock_ops, "store-read", "store-write");
        for w in &lost {
            anomalies.push(Anomaly::new(
                "lost-update",
                &[w],
                format!("{name}: a write through the fence overwrote another"),
            ));
        }
        let (_, shadow_lost, shadow_value) = replay_store(lock_ops, "shadow-read", "shadow-write");
        let mut grants: Vec<&Op> = lock_ops
            .iter()
            .copied()
            .filter(|o| o.f == "acquire" && o.is_ok())
            .collect();
        grants.sort_by_key(|o| o.result_u64("fence"));
        // Re-entrant acquires repeat their holder's fence: one grant each.
        grants.dedup_by_key(|o| o.result_u64("fence"));
        grants_total += grants.len();
        for pair in grants.windows(2) {
            let (a, b) = (pair[0], pair[1]);
            let Some(b_done) = b.ret else { continue };
            if let Some(end) = leases.holder_end(a, lock_ops, "release", b_done)
                && b_done < end
            {
                anomalies.push(Anomaly::new(
                    "early-grant",
                    &[a, b],
                    format!(
                        "{name}: fence {:?} granted {:.0} ms before the holder of fence {:?} released or could lose its lease",
                        b.result_u64("fence"),
                        (end - b_done) as f64 / 1e6,
                        a.result_u64("fence")
                    ),
                ));
            }
        }
        // Believed-holding intervals (acquire ok .. release invoked) that overlap.
        let mut intervals: Vec<(u64, u64)> = Vec::new();
        for g in &grants {
            let end = lock_ops
                .iter()
                .find(|o| {
                    o.f == "release"
                        && o.outcome != Kind::Fail
                        && o.process == g.process
                        && o.call >= g.ret.unwrap_or(0)
                })
                .map(|o| o.call)
                .unwrap_or(u64::MAX);
            intervals.push((g.ret.unwrap_or(0), end));
        }
        intervals.sort();
        let overlaps = intervals.windows(2).filter(|w| w[1].0 < w[0].1).count();
        stats.insert(
            (*name).to_owned(),
            json!({
                "grants": grants.len(), "store_accesses": accesses, "store_value": value,
                "shadow_lost_updates": shadow_lost.len(), "shadow_value": shadow_value,
                "believed_overlaps": overlaps,
            }),
        );
    }
    CheckResult::from(
        "lock-fencing",
        "5.1 mutual exclusion through the fence; no grant while the last holder's lease may live",
        anomalies,
        grants_total >= 5,
        Value::Object(stats),
    )
}

/// When each lease was last known to be renewed, and when it was given up.
struct LeaseTimes {
    /// Invoke times of the grant and every ok keepalive, per lease.
    renewals: HashMap<u64, Vec<u64>>,
    /// Earliest invoke of a revoke that was not refused, per lease.
    revoked: HashMap<u64, u64>,
    /// The clock drift allowed (a lease may end early by it).
    allowed: CheckConfig,
}

impl LeaseTimes {
    fn from(ops: &[Op], config: &CheckConfig) -> LeaseTimes {
        let mut renewals: HashMap<u64, Vec<u64>> = HashMap::new();
        let mut revoked: HashMap<u64, u64> = HashMap::new();
        for op in ops {
            match op.f.as_str() {
                "lease-grant" if op.is_ok() => {
                    if let Some(l) = op.result_u64("lease") {
                        renewals.entry(l).or_default().push(op.call);
                    }
                }
                "keepalive" if op.is_ok() => {
                    if let Some(l) = op.arg_u64("lease") {
                        renewals.entry(l).or_default().push(op.call);
                    }
                }
                // A refused revoke ended nothing (`lease_not_found`: the lease was already
                // gone, which its expiry bound covers).
                "lease-revoke" | "try-revoke" if op.outcome != Kind::Fail => {
                    if let Some(l) = op.arg_u64("lease") {
                        let e = revoked.entry(l).or_insert(op.call);
                        *e = (*e).min(op.call);
                    }
                }
                _ => {}
            }
        }
        LeaseTimes {
            renewals,
            revoked,
            allowed: config.clone(),
        }
    }

    /// The last renewal of `lease` invoked before `t`.
    fn last_renewal(&self, lease: u64, t: u64) -> Option<u64> {
        self.renewals
            .get(&lease)?
            .iter()
            .copied()
            .filter(|r| *r < t)
            .max()
    }

    /// The earliest time holder `a` can have stopped holding, as seen at `t`: the
    /// invocation of its first `release` (by name: release or resign) or revoke that was
    /// not refused, or its lease's last renewal before `t` plus the TTL. A refused release
    /// ends nothing: the holder still holds.
    fn holder_end(&self, a: &Op, ops: &[&Op], release: &str, t: u64) -> Option<u64> {
        let lease = a.arg_u64("lease")?;
        let ttl = a.arg_u64("ttl_ms")? * 1_000_000;
        let release = ops
            .iter()
            .filter(|o| {
                o.f == release
                    && o.outcome != Kind::Fail
                    && o.process == a.process
                    && o.call >= a.call
            })
            .map(|o| o.call)
            .min();
        let expiry = self
            .last_renewal(lease, t)
            .map(|k| k + self.allowed.shortest(ttl));
        [release, self.revoked.get(&lease).copied(), expiry]
            .into_iter()
            .flatten()
            .min()
    }
}

/// Try-lock and release are linearizable against a fenced owner-mutex, per lock.
pub fn trylock(ops: &[Op], config: &CheckConfig) -> CheckResult {
    let mut parts: BTreeMap<String, Vec<Operation<MutexIn, MutexOut>>> = BTreeMap::new();
    let mut revokes: Vec<Operation<MutexIn, MutexOut>> = Vec::new();
    let mut owner_locks: HashMap<String, Vec<String>> = HashMap::new();
    for op in ops {
        // The server knows a holder by (lease, owner): the same owner name under another
        // lease is another holder (a worker keeps its name after giving up on a lease
        // whose revoke did not get through, and that lease may still hold the lock).
        let owner = format!(
            "{}@{}",
            op.arg_str("owner").unwrap_or_default(),
            op.arg_u64("lease")
                .map_or_else(String::new, |l| l.to_string())
        );
        let error = op.error.as_deref().unwrap_or_default();
        let (input, output) = match (op.f.as_str(), op.outcome) {
            ("try-acquire", Kind::Ok) => (
                MutexIn::Acquire(owner.clone()),
                Some(MutexOut::Granted(op.result_u64("fence").unwrap_or(0))),
            ),
            ("try-acquire", Kind::Fail) if error == "lock_held" => {
                (MutexIn::Acquire(owner.clone()), Some(MutexOut::Held))
            }
            ("try-acquire", Kind::Info) => (MutexIn::Acquire(owner.clone()), None),
            ("try-release", Kind::Ok) => (MutexIn::Release(owner.clone()), Some(MutexOut::Done)),
            ("try-release", Kind::Fail) if error == "not_holder" => {
                (MutexIn::Release(owner.clone()), Some(MutexOut::NotHolder))
            }
            ("try-release", Kind::Info) => (MutexIn::Release(owner.clone()), None),
            ("try-revoke", Kind::Ok | Kind::Info) => (MutexIn::Revoke(owner.clone()), None),
            ("try-revoke", Kind::Fail) if error == "lease_not_found" => {
                (MutexIn::Revoke(owner.clone()), None)
            }
            _ => continue,
        };
        let operation = Operation {
            process: crate::workload::process_number(op.process),
            call: op.call,
            ret: if output.is_some() { op.ret } else { None },
            input,
            output,
        };
        match &op.key {
            Some(k) if op.f != "try-revoke" => {
                owner_locks.entry(owner).or_default().push(k.clone());
                parts.entry(k.clone()).or_default().push(operation);
            }
            _ => revokes.push(operation),
        }
    }
    // A revoke frees whatever its owner holds: add it to every lock that owner touched.
    for r in revokes {
        let owner = match &r.input {
            MutexIn::Revoke(o) => o.clone(),
            _ => continue,
        };
        for lock in owner_locks.get(&owner).into_iter().flatten() {
            if let Some(p) = parts.get_mut(lock)
                && !p.iter().any(|o| o.call == r.call && o.input == r.input)
            {
                p.push(r.clone());
            }
        }
    }
    for p in parts.values_mut() {
        p.sort_by_key(|o| o.call);
    }
    let names: Vec<&String> = parts.keys().collect();
    let lists: Vec<_> = parts.values().cloned().collect();
    let verdict = linear::check_partitions(
        &FencedOwnerMutex,
        &lists,
        Duration::from_secs(config.budget_s),
    );
    let mut anomalies = Vec::new();
    if let Verdict::NotLinearizable { partition, .. } = &verdict {
        let name = names[*partition];
        let involved: Vec<&Op> = ops
            .iter()
            .filter(|o| o.key.as_ref() == Some(name))
            .collect();
        anomalies.push(Anomaly::new(
            "trylock-not-linearizable",
            &involved,
            format!("{name}: try-lock/release has no linearization as a fenced owner-mutex"),
        ));
    }
    let ok = ops
        .iter()
        .filter(|o| o.f.starts_with("try-") && o.is_ok())
        .count();
    CheckResult::from(
        "trylock-linearizable",
        "5.3 lock operations are linearizable (fenced owner-mutex model)",
        anomalies,
        verdict != Verdict::Unknown && ok >= 10,
        json!({"locks": names.len(), "ok": ok, "verdict": format!("{verdict:?}")}),
    )
}

fn ev_str<'a>(e: &'a Value, f: &str) -> &'a str {
    e.get(f).and_then(Value::as_str).unwrap_or_default()
}

/// An event's kind without its resource prefix (`lock_granted` → `granted`).
fn kind(e: &Value) -> &str {
    let t = ev_str(e, "type");
    ["lock_", "semaphore_", "election_"]
        .iter()
        .find_map(|p| t.strip_prefix(p))
        .unwrap_or(t)
}

fn ev_u64(e: &Value, f: &str) -> Option<u64> {
    e.get(f).and_then(Value::as_u64)
}

/// FIFO in the server's log: a grant from the queue goes to the earliest waiter still
/// queued, and nobody is granted straight away while others wait. Every client-seen
/// grant appears in the log with its owner and fence.
pub fn queues(ops: &[Op], truth: &Truth) -> CheckResult {
    let mut anomalies = Vec::new();
    let mut checked = 0;
    let mut grants = 0;
    for (filter, events) in &truth.events {
        let Some(name) = filter
            .strip_prefix("lock=")
            .or_else(|| filter.strip_prefix("semaphore="))
            .or_else(|| filter.strip_prefix("election="))
        else {
            continue;
        };
        checked += 1;
        // Waiters by (lease, owner) → enqueue revision.
        let mut queue: BTreeMap<u64, (u64, String)> = BTreeMap::new();
        let mut granted: HashMap<(String, u64), u64> = HashMap::new();
        // Holders now, (lease, owner) → shared; semaphores have their own checker.
        let mut holders: HashMap<(u64, String), bool> = HashMap::new();
        let exclusive_kind = !filter.starts_with("semaphore=");
        for e in events {
            let lease = ev_u64(e, "lease_id").unwrap_or_default();
            let owner = ev_str(e, "owner").to_owned();
            let rev = ev_u64(e, "revision").unwrap_or_default();
            match kind(e) {
                "queued" => {
                    queue.insert(rev, (lease, owner));
                }
                "granted" => {
                    grants += 1;
                    granted.insert((owner.clone(), ev_u64(e, "fence").unwrap_or_default()), rev);
                    let shared = ev_str(e, "mode") == "shared";
                    let clash = holders.iter().any(|(who, other_shared)| {
                        *who != (lease, owner.clone()) && !(shared && *other_shared)
                    });
                    if exclusive_kind && clash {
                        anomalies.push(Anomaly {
                            kind: "double-holder".into(),
                            ops: vec![],
                            message: format!(
                                "{name}: revision {rev} granted {owner} while {} held it",
                                holders.len()
                            ),
                        });
                    }
                    holders.insert((lease, owner.clone()), shared);
                    match ev_u64(e, "enqueued_revision") {
                        Some(enq) => {
                            let head = queue.iter().next().map(|(r, _)| *r);
                            if head != Some(enq) {
                                anomalies.push(Anomaly {
                                    kind: "fifo".into(),
                                    ops: vec![],
                                    message: format!(
                                        "{name}: revision {rev} granted the waiter queued at {enq}, but the head was queued at {head:?}"
                                    ),
                                });
                            }
                            queue.remove(&enq);
                        }
                        // Every queue is strictly first come, first served: an immediate
                        // grant while anyone waits jumped the queue.
                        None if !queue.is_empty() => {
                            anomalies.push(Anomaly {
                                kind: "barging".into(),
                                ops: vec![],
                                message: format!(
                                    "{name}: revision {rev} granted {owner} at once while {} waited",
                                    queue.len()
                                ),
                            });
                        }
                        None => {}
                    }
                }
                "cancelled" | "timed_out" => {
                    if let Some(enq) = ev_u64(e, "enqueued_revision") {
                        queue.remove(&enq);
                    }
                }
                "released" | "expired" | "force_released" => {
                    holders.remove(&(lease, owner));
                }
                _ => {}
            }
        }
        // Client-seen grants must be in the log.
        for op in ops.iter().filter(|o| {
            o.key.as_deref() == Some(name)
                && o.is_ok()
                && matches!(o.f.as_str(), "acquire" | "sem-acquire")
        }) {
            let owner = op.arg_str("owner").unwrap_or_default().to_owned();
            let fence = op.result_u64("fence").unwrap_or_default();
            if !granted.contains_key(&(owner.clone(), fence)) {
                anomalies.push(Anomaly::new(
                    "grant-missing-from-log",
                    &[op],
                    format!("{name}: {owner} was granted fence {fence}, which the log lacks"),
                ));
            }
        }
    }
    CheckResult::from(
        "fair-queue",
        "5.4 grants follow enqueue order; one exclusive holder at a time in the log",
        anomalies,
        checked > 0 && grants > 0,
        json!({"queues": checked, "grants": grants, "missing": truth.missing}),
    )
}

/// A semaphore never has more permits out than its limit (server log), and the grants
/// clients saw carry unique fences.
pub fn semaphore(ops: &[Op], truth: &Truth) -> CheckResult {
    let mut anomalies = Vec::new();
    let (name, limit) = crate::workload::SEMAPHORE;
    let filter = format!("semaphore={name}");
    let mut max_held = 0;
    if let Some(events) = truth.events.get(&filter) {
        let mut holders: HashMap<(u64, String), u64> = HashMap::new();
        for e in events {
            let k = (
                ev_u64(e, "lease_id").unwrap_or_default(),
                ev_str(e, "owner").to_owned(),
            );
            match kind(e) {
                "granted" => {
                    holders.insert(k, ev_u64(e, "fence").unwrap_or_default());
                }
                "released" | "expired" | "force_released" => {
                    holders.remove(&k);
                }
                _ => {}
            }
            max_held = max_held.max(holders.len());
            if holders.len() > limit as usize {
                anomalies.push(Anomaly {
                    kind: "over-limit".into(),
                    ops: vec![],
                    message: format!(
                        "{name}: {} holders at revision {:?}, limit {limit}",
                        holders.len(),
                        ev_u64(e, "revision")
                    ),
                });
            }
        }
    }
    let ok = ops
        .iter()
        .filter(|o| o.f == "sem-acquire" && o.is_ok())
        .count();
    CheckResult::from(
        "semaphore-limit",
        "semaphore holders never exceed the limit",
        anomalies,
        truth.events.contains_key(&filter) && ok > 0,
        json!({"grants_seen": ok, "max_holders": max_held, "limit": limit}),
    )
}

/// At most one leader per fence: every observation of a fence names the lease that won
/// it, and observations never go back to an older leadership.
pub fn election(ops: &[Op], config: &CheckConfig) -> CheckResult {
    let mut anomalies = Vec::new();
    let mut winner: HashMap<u64, &Op> = HashMap::new();
    let lease_of = |o: &Op| {
        if o.f == "campaign" {
            o.arg_u64("lease")
        } else {
            o.result_u64("lease")
        }
    };
    let seen: Vec<&Op> = ops
        .iter()
        .filter(|o| {
            matches!(o.f.as_str(), "campaign" | "observe")
                && o.is_ok()
                && o.result_u64("fence").is_some()
        })
        .collect();
    for op in &seen {
        let fence = op.result_u64("fence").unwrap_or_default();
        let first = *winner.entry(fence).or_insert(op);
        if lease_of(first) != lease_of(op) {
            anomalies.push(Anomaly::new(
                "two-leaders",
                &[first, op],
                format!(
                    "fence {fence} names lease {:?} and lease {:?}",
                    lease_of(first),
                    lease_of(op)
                ),
            ));
        }
    }
    // Leaderships of different fences whose tenures overlap: the later campaign completed
    // before the earlier leader could have resigned or lost its lease.
    let leases = LeaseTimes::from(ops, config);
    let election_ops: Vec<&Op> = ops
        .iter()
        .filter(|o| matches!(o.f.as_str(), "campaign" | "resign"))
        .collect();
    let mut won: Vec<&Op> = seen.iter().copied().filter(|o| o.f == "campaign").collect();
    won.sort_by_key(|o| o.result_u64("fence"));
    won.dedup_by_key(|o| o.result_u64("fence"));
    for pair in won.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        let Some(b_done) = b.ret else { continue };
        if let Some(end) = leases.holder_end(a, &election_ops, "resign", b_done)
            && b_done < end
        {
            anomalies.push(Anomaly::new(
                "two-leaders-at-once",
                &[a, b],
                format!(
                    "fence {:?} led {:.0} ms before the leader of fence {:?} resigned or could lose its lease",
                    b.result_u64("fence"),
                    (end - b_done) as f64 / 1e6,
                    a.result_u64("fence")
                ),
            ));
        }
    }
    realtime_pairs(
        &seen,
        |o| o.result_u64("fence").unwrap_or_default(),
        |before, after| {
            let (a, b) = (
                before.result_u64("fence").unwrap_or_default(),
                after.result_u64("fence").unwrap_or_default(),
            );
            if after.f == "observe" && b < a {
                anomalies.push(Anomaly::new(
                    "leader-went-back",
                    &[before, after],
                    format!("saw leader fence {b} after fence {a} was seen"),
                ));
            }
        },
    );
    CheckResult::from(
        "election",
        "at most one leader per fence and at a time; leadership never goes back",
        anomalies,
        seen.len() >= 5,
        json!({"observations": seen.len(), "fences": winner.len()}),
    )
}
