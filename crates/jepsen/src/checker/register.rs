//! Keys: linearizability of read/write/CAS per key (the search), the cheap checks the
//! server's revisions allow (spec §5.3), and durability of acknowledged writes (§5.5).

use super::linear::{self, Operation, Verdict};
use super::models::{RegIn, RegOut, RevRegister};
use super::{Anomaly, CheckConfig, CheckResult, Truth, realtime_pairs};
use crate::history::{Kind, Op};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

fn is_register(op: &Op) -> bool {
    matches!(op.f.as_str(), "read" | "write" | "cas")
}

/// A read's observation: `(value, mod_revision)`; an absent key reads `(None, 0)`.
pub fn read_value(op: &Op) -> Option<(Option<String>, u64)> {
    match op.outcome {
        Kind::Ok => Some((
            op.result
                .get("value")
                .and_then(Value::as_str)
                .map(str::to_owned),
            op.result_u64("mod_rev").unwrap_or(0),
        )),
        Kind::Fail if op.error.as_deref() == Some("key_not_found") => Some((None, 0)),
        _ => None,
    }
}

/// The final range read's keys, as `(key, value, mod_revision)`.
fn final_kvs(op: &Op) -> Vec<(String, String, u64)> {
    op.result
        .get("kvs")
        .and_then(Value::as_array)
        .map(|kvs| {
            kvs.iter()
                .filter_map(|kv| {
                    Some((
                        kv.get("key")?.as_str()?.to_owned(),
                        kv.get("value")?.as_str()?.to_owned(),
                        kv.get("mod_revision")?.as_u64()?,
                    ))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Per-key partitions for the search (the final range read becomes one read per key),
/// without the writes and CAS of unknown outcome whose value no read returned.
pub fn partitions(ops: &[Op]) -> BTreeMap<String, Vec<Operation<RegIn, RegOut>>> {
    let mut parts = all_partitions(ops);
    for part in parts.values_mut() {
        prune_unobserved(part);
    }
    parts
}

/// Drops the writes and CAS of unknown outcome whose value no read returned. Values are
/// unique per write, so such an operation, if it happened, was never seen: it can always
/// be linearized after everything else (it has no return), where it changes no answer;
/// and the register with it is linearizable exactly when the register without it is.
/// Each one left in could double what the search has to try.
fn prune_unobserved(part: &mut Vec<Operation<RegIn, RegOut>>) {
    let observed: std::collections::HashSet<String> = part
        .iter()
        .filter_map(|o| match &o.output {
            Some(RegOut::Read(Some(v), _)) => Some(v.clone()),
            _ => None,
        })
        .collect();
    part.retain(|o| match (&o.input, &o.output) {
        (RegIn::Write(v) | RegIn::Cas { value: v, .. }, None) => observed.contains(v),
        _ => true,
    });
}

/// Per-key partitions with every operation.
fn all_partitions(ops: &[Op]) -> BTreeMap<String, Vec<Operation<RegIn, RegOut>>> {
    let mut parts: BTreeMap<String, Vec<Operation<RegIn, RegOut>>> = BTreeMap::new();
    for op in ops.iter().filter(|o| is_register(o)) {
        let Some(key) = &op.key else { continue };
        let process = crate::workload::process_number(op.process);
        let value = op.arg_str("value").unwrap_or_default().to_owned();
        let (input, output) = match op.f.as_str() {
            "read" => match read_value(op) {
                Some((v, r)) => (RegIn::Read, Some(RegOut::Read(v, r))),
                None => continue,
            },
            "write" => (RegIn::Write(value), op.result_u64("rev").map(RegOut::Rev)),
            _ => (
                RegIn::Cas {
                    prev: op.arg_u64("prev_rev").unwrap_or(0),
                    value,
                },
                op.result_u64("rev").map(RegOut::Rev),
            ),
        };
        if op.outcome == Kind::Fail && !matches!(input, RegIn::Read) {
            continue;
        }
        let output = if op.outcome == Kind::Info {
            None
        } else {
            output
        };
        parts.entry(key.clone()).or_default().push(Operation {
            process,
            call: op.call,
            ret: if output.is_some() { op.ret } else { None },
            input,
            output,
        });
    }
    for op in ops.iter().filter(|o| o.f == "final-read" && o.is_ok()) {
        let found: HashMap<String, (String, u64)> = final_kvs(op)
            .into_iter()
            .map(|(k, v, r)| (k, (v, r)))
            .collect();
        for (key, part) in parts.iter_mut() {
            let (v, r) = found
                .get(key)
                .map(|(v, r)| (Some(v.clone()), *r))
                .unwrap_or((None, 0));
            part.push(Operation {
                process: u64::MAX,
                call: op.call,
                ret: op.ret,
                input: RegIn::Read,
                output: Some(RegOut::Read(v, r)),
            });
        }
    }
    parts
}

/// Linearizability of every key's reads, writes and CAS (WGL search with a budget).
pub fn linearizable(ops: &[Op], config: &CheckConfig) -> CheckResult {
    let parts = partitions(ops);
    let keys: Vec<&String> = parts.keys().collect();
    let lists: Vec<Vec<Operation<RegIn, RegOut>>> = parts.values().cloned().collect();
    let total: usize = lists.iter().map(Vec::len).sum();
    let verdict =
        linear::check_partitions(&RevRegister, &lists, Duration::from_secs(config.budget_s));
    let mut anomalies = Vec::new();
    let mut unknown = false;
    match &verdict {
        Verdict::Linearizable => {}
        Verdict::Unknown => unknown = true,
        Verdict::NotLinearizable {
            partition,
            longest_prefix,
        } => {
            let key = keys[*partition];
            let involved: Vec<&Op> = ops
                .iter()
                .filter(|o| is_register(o) && o.key.as_ref() == Some(key))
                .collect();
            anomalies.push(Anomaly::new(
                "not-linearizable",
                &involved,
                format!(
                    "key {key}: no linearization of its {} operations (longest prefix {longest_prefix})",
                    lists[*partition].len()
                ),
            ));
        }
    }
    let ok = ops.iter().filter(|o| is_register(o) && o.is_ok()).count();
    CheckResult::from(
        "register-linearizable",
        "5.3 keys and CAS are linearizable",
        anomalies,
        !unknown && ok >= config_min(config),
        json!({"keys": keys.len(), "operations": total, "ok": ok, "verdict": format!("{verdict:?}")}),
    )
}

fn config_min(config: &CheckConfig) -> usize {
    config.min_ok_ops.min(20)
}

/// Revisions of mutations that must be unique: writes, CAS, lease grants and every fence.
fn unique_revision(op: &Op) -> Option<u64> {
    if !op.is_ok() {
        return None;
    }
    match op.f.as_str() {
        "write" | "cas" | "lease-grant" => op.result_u64("rev"),
        "acquire" | "try-acquire" | "sem-acquire" | "campaign" => op.result_u64("fence"),
        _ => None,
    }
}

/// An ok release (count 0), resign or revoke of `first`'s hold that completed after
/// `first` began and before `again` was invoked: the hold had ended, so `again` is not a
/// re-entry.
fn hold_ended_between<'a>(ops: &'a [Op], first: &Op, again: &Op, fence: u64) -> Option<&'a Op> {
    let lease = first.arg_u64("lease");
    ops.iter().find(|r| {
        let in_between = r.is_ok() && r.call > first.call && r.ret.is_some_and(|t| t < again.call);
        let releases = matches!(
            r.f.as_str(),
            "release" | "try-release" | "sem-release" | "resign"
        ) && r.key == first.key
            && r.arg_u64("lease") == lease
            && r.arg_str("owner") == first.arg_str("owner")
            && r.arg_u64("fence").is_none_or(|f| f == fence)
            && r.result_u64("count").unwrap_or(0) == 0;
        let revokes =
            matches!(r.f.as_str(), "lease-revoke" | "try-revoke") && r.arg_u64("lease") == lease;
        in_between && (releases || revokes)
    })
}

/// The cheap checks (O(n log n)) from revisions: unique revisions and fences, mutations
/// ordered in real time, header revisions never going back, no phantom or stale reads.
pub fn revisions(ops: &[Op]) -> CheckResult {
    let mut anomalies = Vec::new();
    // A re-entrant acquire (same object, lease and owner) answers with the fence it
    // already holds: it is not a new grant, but only while that hold lives. The same
    // fence again after a release or revoke that ended the hold is a fence handed out
    // twice.
    type Hold = (Option<String>, u64, Option<u64>, Option<String>);
    let mut holds: HashMap<Hold, &Op> = HashMap::new();
    let mut mutations: Vec<&Op> = Vec::new();
    for o in ops.iter().filter(|o| unique_revision(o).is_some()) {
        let Some(fence) = o.result_u64("fence") else {
            mutations.push(o);
            continue;
        };
        let hold = (
            o.key.clone(),
            fence,
            o.arg_u64("lease"),
            o.arg_str("owner").map(str::to_owned),
        );
        match holds.get(&hold) {
            None => {
                holds.insert(hold, o);
                mutations.push(o);
            }
            Some(first) => {
                if let Some(end) = hold_ended_between(ops, first, o, fence) {
                    anomalies.push(Anomaly::new(
                        "fence-reused",
                        &[first, end, o],
                        format!(
                            "{}: fence {fence} granted again after {} ended the hold it named",
                            o.key.as_deref().unwrap_or_default(),
                            end.f
                        ),
                    ));
                }
            }
        }
    }
    // One revision is one command: it makes one write, or grants. A command that frees
    // several locks at once (a lease end) grants each in that revision, so two grants may
    // share a fence if they are of different objects (`docs/decisions.md` #46).
    let mut seen: HashMap<u64, Vec<&Op>> = HashMap::new();
    for op in &mutations {
        let r = unique_revision(op).unwrap_or_default();
        let same = seen.entry(r).or_default();
        let is_grant = |o: &Op| o.result_u64("fence").is_some();
        if let Some(other) = same
            .iter()
            .find(|o| !(is_grant(o) && is_grant(op) && o.key != op.key))
        {
            anomalies.push(Anomaly::new(
                "duplicate-revision",
                &[other, op],
                format!("{} and {} both got revision {r}", other.f, op.f),
            ));
        }
        same.push(op);
    }
    realtime_pairs(
        &mutations,
        |o| unique_revision(o).unwrap_or_default(),
        |before, after| {
            let (a, b) = (
                unique_revision(before).unwrap_or_default(),
                unique_revision(after).unwrap_or_default(),
            );
            if a >= b {
                anomalies.push(Anomaly::new(
                    "revision-order",
                    &[before, after],
                    format!(
                        "{} (revision {a}) completed before {} (revision {b}) began",
                        before.f, after.f
                    ),
                ));
            }
        },
    );
    let headers: Vec<&Op> = ops
        .iter()
        .filter(|o| o.is_ok() && o.result_u64("rev").is_some())
        .collect();
    realtime_pairs(
        &headers,
        |o| o.result_u64("rev").unwrap_or_default(),
        |before, after| {
            let (a, b) = (
                before.result_u64("rev").unwrap_or_default(),
                after.result_u64("rev").unwrap_or_default(),
            );
            if a > b {
                anomalies.push(Anomaly::new(
                    "revision-went-back",
                    &[before, after],
                    format!(
                        "{} saw revision {b} after {} completed at revision {a}",
                        after.f, before.f
                    ),
                ));
            }
        },
    );
    // Reads against the writes of their key.
    let mut writes: HashMap<&str, Vec<&Op>> = HashMap::new();
    for op in ops
        .iter()
        .filter(|o| matches!(o.f.as_str(), "write" | "cas") && o.outcome != Kind::Fail)
    {
        if let Some(k) = &op.key {
            writes.entry(k).or_default().push(op);
        }
    }
    let mut reads = 0;
    for read in ops.iter().filter(|o| o.f == "read") {
        let (Some(key), Some((value, mod_rev))) = (&read.key, read_value(read)) else {
            continue;
        };
        reads += 1;
        let empty = Vec::new();
        let ws = writes.get(key.as_str()).unwrap_or(&empty);
        if let Some(v) = &value {
            let source = ws.iter().find(|w| w.arg_str("value") == Some(v));
            match source {
                None => anomalies.push(Anomaly::new(
                    "phantom-read",
                    &[read],
                    format!("read {key} = {v:?}, which nobody wrote"),
                )),
                Some(w) if w.call > read.ret.unwrap_or(u64::MAX) => anomalies.push(Anomaly::new(
                    "future-read",
                    &[w, read],
                    format!("read {key} = {v:?} before its write began"),
                )),
                Some(w) if w.is_ok() && w.result_u64("rev") != Some(mod_rev) => {
                    anomalies.push(Anomaly::new(
                        "wrong-revision",
                        &[w, read],
                        format!(
                            "read {key} = {v:?} at mod_revision {mod_rev}, written at {:?}",
                            w.result_u64("rev")
                        ),
                    ))
                }
                _ => {}
            }
        }
        if let Some(w) = ws.iter().find(|w| {
            w.is_ok()
                && w.result_u64("rev").is_some_and(|r| r > mod_rev)
                && w.ret.is_some_and(|t| t < read.call)
        }) {
            anomalies.push(Anomaly::new(
                "stale-read",
                &[w, read],
                format!(
                    "read {key} at mod_revision {mod_rev} after a write at {:?} had completed",
                    w.result_u64("rev")
                ),
            ));
        }
    }
    CheckResult::from(
        "revisions",
        "5.2/5.3 revisions and fences unique and in real-time order; no stale or phantom read",
        anomalies,
        mutations.len() >= 10,
        json!({"mutations": mutations.len(), "headers": headers.len(), "reads": reads}),
    )
}

/// Every acknowledged write survives killing every node: the final read after the
/// restart shows each key at or after its last acknowledged write, and the server's
/// event log holds every acknowledged write with its value.
pub fn durability(ops: &[Op], truth: &Truth) -> CheckResult {
    let mut anomalies = Vec::new();
    let acked: Vec<&Op> = ops
        .iter()
        .filter(|o| matches!(o.f.as_str(), "write" | "cas") && o.is_ok())
        .collect();
    let finals: Vec<&Op> = ops
        .iter()
        .filter(|o| o.f == "final-read" && o.is_ok())
        .collect();
    let restarted = ops.iter().any(|o| o.f == "kill-all-stop");
    if let Some(last) = finals.last() {
        let found: HashMap<String, u64> = final_kvs(last)
            .into_iter()
            .map(|(k, _, r)| (k, r))
            .collect();
        let mut latest: HashMap<&str, &Op> = HashMap::new();
        for w in &acked {
            let Some(k) = w.key.as_deref() else { continue };
            let e = latest.entry(k).or_insert(w);
            if w.result_u64("rev") > e.result_u64("rev") {
                *e = w;
            }
        }
        for (key, w) in latest {
            let rev = w.result_u64("rev").unwrap_or_default();
            if found.get(key).copied().unwrap_or(0) < rev {
                anomalies.push(Anomaly::new(
                    "lost-write",
                    &[w, last],
                    format!(
                        "{key}: acknowledged at revision {rev}, final read shows {:?}",
                        found.get(key)
                    ),
                ));
            }
        }
    }
    let logged = truth.events.get("prefix=r/");
    if let Some(events) = logged {
        let by_rev: HashMap<u64, &Value> = events
            .iter()
            .filter_map(|e| Some((e.get("revision")?.as_u64()?, e)))
            .collect();
        for w in &acked {
            let rev = w.result_u64("rev").unwrap_or_default();
            let matches = by_rev.get(&rev).is_some_and(|e| {
                e.get("key").and_then(Value::as_str) == w.key.as_deref()
                    && e.get("value").and_then(Value::as_str) == w.arg_str("value")
            });
            if !matches {
                anomalies.push(Anomaly::new(
                    "write-missing-from-log",
                    &[w],
                    format!(
                        "{:?} = {:?} acknowledged at revision {rev}, but the log has {:?}",
                        w.key,
                        w.arg_str("value"),
                        by_rev.get(&rev)
                    ),
                ));
            }
        }
    }
    CheckResult::from(
        "durability",
        "5.5 no acknowledged write lost when all nodes are killed and restarted",
        anomalies,
        restarted && !finals.is_empty() && logged.is_some() && !acked.is_empty(),
        json!({"acknowledged_writes": acked.len(), "final_reads": finals.len(), "killed_all": restarted}),
    )
}
