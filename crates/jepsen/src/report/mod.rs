//! A run's report directory: `results.json`, `summary.txt`, `timeline.html`, and latency
//! and throughput plots (SVG) with fault windows shaded.

pub mod plots;
pub mod timeline;

use crate::Error;
use crate::checker::{CheckResult, Validity, overall};
use crate::history::{FaultWindow, Kind, Op, Process, fault_windows};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

/// Counts of client operations by function and outcome, and how many ended badly inside
/// fault windows versus outside (did the faults bite?).
pub fn op_stats(ops: &[Op], windows: &[FaultWindow]) -> Value {
    let mut counts: BTreeMap<String, BTreeMap<&str, usize>> = BTreeMap::new();
    let (mut in_fault, mut in_fault_bad, mut outside, mut outside_bad) = (0, 0, 0, 0);
    for op in ops.iter().filter(|o| o.process != Process::Nemesis) {
        let outcome = match op.outcome {
            Kind::Ok => "ok",
            Kind::Fail => "fail",
            Kind::Info | Kind::Invoke => "info",
        };
        *counts
            .entry(op.f.clone())
            .or_default()
            .entry(outcome)
            .or_default() += 1;
        let faulty = windows
            .iter()
            .any(|w| op.call >= w.start && op.call <= w.end);
        let bad = outcome != "ok";
        if faulty {
            in_fault += 1;
            in_fault_bad += bad as usize;
        } else {
            outside += 1;
            outside_bad += bad as usize;
        }
    }
    let mut faults: BTreeMap<&str, usize> = BTreeMap::new();
    for w in windows {
        *faults.entry(w.kind.as_str()).or_default() += 1;
    }
    json!({
        "operations": counts,
        "faults": faults,
        "during_faults": {"ops": in_fault, "not_ok": in_fault_bad},
        "outside_faults": {"ops": outside, "not_ok": outside_bad},
    })
}

fn verdict_word(v: Validity) -> &'static str {
    match v {
        Validity::Valid => "valid",
        Validity::Invalid => "INVALID",
        Validity::Unknown => "unknown",
    }
}

/// The human summary.
pub fn summary(title: &str, results: &[CheckResult], stats: &Value) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "{title}");
    let _ = writeln!(s, "verdict: {}", verdict_word(overall(results)));
    let _ = writeln!(s, "\nchecks:");
    for r in results {
        let _ = writeln!(
            s,
            "  {:<22} {:<8} {} ({})",
            r.name,
            verdict_word(r.valid),
            r.stats,
            r.guarantee
        );
        for a in &r.anomalies {
            let _ = writeln!(s, "      {}: {} (ops {:?})", a.kind, a.message, a.ops);
        }
    }
    let _ = writeln!(s, "\noperations (ok/fail/info):");
    if let Some(ops) = stats.get("operations").and_then(Value::as_object) {
        for (f, c) in ops {
            let n = |k: &str| c.get(k).and_then(Value::as_u64).unwrap_or(0);
            let _ = writeln!(
                s,
                "  {f:<14} {:>7} {:>7} {:>7}",
                n("ok"),
                n("fail"),
                n("info")
            );
        }
    }
    let _ = writeln!(s, "\nfaults: {}", stats["faults"]);
    let _ = writeln!(
        s,
        "not ok during faults: {} of {}; outside: {} of {}",
        stats["during_faults"]["not_ok"],
        stats["during_faults"]["ops"],
        stats["outside_faults"]["not_ok"],
        stats["outside_faults"]["ops"]
    );
    let passed = results
        .iter()
        .filter(|r| r.valid == Validity::Valid)
        .count();
    let failed = results
        .iter()
        .filter(|r| r.valid == Validity::Invalid)
        .count();
    let unknown = results.len() - passed - failed;
    // Repeated last, so that the tail of a log (all CI keeps) says which checks did not
    // pass and what they saw.
    let _ = writeln!(s);
    for r in results.iter().filter(|r| r.valid != Validity::Valid) {
        let _ = writeln!(
            s,
            "not passed: {} {} {}",
            r.name,
            verdict_word(r.valid),
            r.stats
        );
        for a in r.anomalies.iter().take(3) {
            let _ = writeln!(
                s,
                "  {}: {} (ops {:?})",
                a.kind,
                a.message,
                a.ops.iter().take(8).collect::<Vec<_>>()
            );
        }
    }
    let _ = writeln!(s, "{passed} passed, {failed} failed, {unknown} unknown");
    s
}

/// Writes every report file into `dir`; returns the summary text.
pub fn write(
    dir: &Path,
    title: &str,
    ops: &[Op],
    results: &[CheckResult],
    config: &Value,
) -> Result<String, Error> {
    let io = |e: std::io::Error| Error::Report(e.to_string());
    let windows = fault_windows(ops);
    let stats = op_stats(ops, &windows);
    let results_json = json!({
        "valid": overall(results),
        "config": config,
        "checks": results,
        "stats": stats,
        "faults": windows,
    });
    let text =
        serde_json::to_string_pretty(&results_json).map_err(|e| Error::Report(e.to_string()))?;
    std::fs::write(dir.join("results.json"), text).map_err(io)?;
    let summary = summary(title, results, &stats);
    std::fs::write(dir.join("summary.txt"), &summary).map_err(io)?;
    let highlight: Vec<u64> = results
        .iter()
        .flat_map(|r| r.anomalies.iter().flat_map(|a| a.ops.iter().copied()))
        .collect();
    std::fs::write(
        dir.join("timeline.html"),
        timeline::render(title, ops, &windows, &highlight),
    )
    .map_err(io)?;
    let latency = plots::latency_svg(ops, &windows).map_err(|e| Error::Report(e.to_string()))?;
    std::fs::write(dir.join("latency.svg"), latency).map_err(io)?;
    let rate = plots::rate_svg(ops, &windows).map_err(|e| Error::Report(e.to_string()))?;
    std::fs::write(dir.join("rate.svg"), rate).map_err(io)?;
    Ok(summary)
}
