//! Watches (spec §5.7), against the server's own log read back from revision 1: every
//! stretch of a watch is in revision order, without duplicates, matches its filter, and
//! holds exactly the logged events from its start revision to the last one it received
//! (so nothing was skipped and a resumed watch starts at the right place); the log agrees
//! with the writes clients made.

use super::{Anomaly, CheckResult, Truth};
use crate::history::Op;
use serde_json::{Value, json};
use std::collections::HashMap;

fn rev(e: &Value) -> Option<u64> {
    e.get("revision").and_then(Value::as_u64)
}

/// The watch checks.
pub fn watches(ops: &[Op], truth: &Truth) -> CheckResult {
    let mut anomalies = Vec::new();
    let Some(log) = truth.events.get("prefix=r/") else {
        return CheckResult::from(
            "watch",
            "5.7 watches are ordered, gap-free, resumable, without duplicates",
            anomalies,
            false,
            json!({"log": "missing"}),
        );
    };
    let log_revs: Vec<u64> = log.iter().filter_map(rev).collect();
    let by_rev: HashMap<u64, &Value> = log.iter().filter_map(|e| Some((rev(e)?, e))).collect();
    // The log's events must come from writes clients made.
    let mut written: HashMap<(&str, &str), &Op> = HashMap::new();
    for op in ops.iter().filter(|o| {
        matches!(o.f.as_str(), "write" | "cas") && o.outcome != crate::history::Kind::Fail
    }) {
        if let (Some(k), Some(v)) = (&op.key, op.arg_str("value")) {
            written.insert((k, v), op);
        }
    }
    for e in log {
        let key = e.get("key").and_then(Value::as_str).unwrap_or_default();
        let value = e.get("value").and_then(Value::as_str).unwrap_or_default();
        if e.get("type").and_then(Value::as_str) == Some("key_put")
            && !written.contains_key(&(key, value))
        {
            anomalies.push(Anomaly {
                kind: "phantom-event".into(),
                ops: vec![],
                message: format!(
                    "the log has {key} = {value:?} at {:?}, which nobody wrote",
                    rev(e)
                ),
            });
        }
    }
    let mut streams = 0;
    let mut delivered = 0;
    let mut compacted = 0;
    for op in ops.iter().filter(|o| o.f == "watch" && o.is_ok()) {
        // A 410 must name an oldest revision after the start it refused.
        if let Some(oldest) = op.result.get("oldest_revision").and_then(Value::as_u64) {
            compacted += 1;
            let start = op.arg_u64("start_revision").unwrap_or(1);
            if oldest <= start {
                anomalies.push(Anomaly::new(
                    "false-compaction",
                    &[op],
                    format!(
                        "start {start} refused as compacted, but the window held from {oldest}"
                    ),
                ));
            }
        }
        let Some(events) = op.result.get("events").and_then(Value::as_array) else {
            continue;
        };
        let events: Vec<&Value> = events.iter().filter(|e| rev(e).is_some()).collect();
        streams += 1;
        delivered += events.len();
        let start = op.arg_u64("start_revision").unwrap_or(1);
        let prefix = op.arg_str("prefix").unwrap_or_default();
        let mut last = 0;
        for e in &events {
            let r = rev(e).unwrap_or_default();
            if r <= last {
                anomalies.push(Anomaly::new(
                    if r == last {
                        "duplicate-event"
                    } else {
                        "out-of-order-event"
                    },
                    &[op],
                    format!("revision {r} after {last}"),
                ));
            }
            last = last.max(r);
            let key = e.get("key").and_then(Value::as_str).unwrap_or_default();
            if !key.starts_with(prefix) {
                anomalies.push(Anomaly::new(
                    "filter",
                    &[op],
                    format!("event for {key} on a watch of {prefix}"),
                ));
            }
            match by_rev.get(&r) {
                Some(l) if l.get("key") == e.get("key") && l.get("value") == e.get("value") => {}
                other => anomalies.push(Anomaly::new(
                    "event-mismatch",
                    &[op],
                    format!("delivered {e} at {r}, the log has {other:?}"),
                )),
            }
        }
        let mut got: Vec<u64> = events.iter().filter_map(|e| rev(e)).collect();
        got.sort_unstable();
        got.dedup();
        let Some(end) = got.last().copied() else {
            continue;
        };
        // Exactly the logged events in [start, end].
        let lo = log_revs.partition_point(|r| *r < start);
        let hi = log_revs.partition_point(|r| *r <= end);
        let expected = &log_revs[lo..hi];
        let first = events.first().and_then(|e| rev(e));
        if first.as_ref() != expected.first() {
            anomalies.push(Anomaly::new(
                "resume",
                &[op],
                format!(
                    "opened at {start}: first event {:?}, the log's first is {:?}",
                    first,
                    expected.first()
                ),
            ));
        } else if let Some(missing) = expected.iter().find(|r| got.binary_search(r).is_err()) {
            anomalies.push(Anomaly::new(
                "gap",
                &[op],
                format!("opened at {start}, received up to {end}, but skipped revision {missing}"),
            ));
        }
    }
    CheckResult::from(
        "watch",
        "5.7 watches are ordered, gap-free, resumable, without duplicates",
        anomalies,
        streams > 0 && delivered > 0,
        json!({"streams": streams, "events_delivered": delivered, "logged": log.len(), "compacted": compacted}),
    )
}
