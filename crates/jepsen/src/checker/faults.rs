//! The run itself: every fault took effect (a fault that did not apply is no fault
//! window, and the run cannot claim to have tested it), and the servers' logs hold no
//! panic and no error of baton's own (Jepsen's crash checker).

use super::{Anomaly, CheckResult, Truth, Validity};
use crate::history::{Op, Process};
use serde_json::{Value, json};

/// Every nemesis step that ran reports no `unapplied` reason; otherwise the run is
/// unknown (not invalid: the server did nothing wrong, the test did not do what it says).
pub fn applied(ops: &[Op]) -> CheckResult {
    let steps: Vec<&Op> = ops
        .iter()
        .filter(|o| o.process == Process::Nemesis && o.is_ok())
        .collect();
    let unapplied: Vec<Value> = steps
        .iter()
        .filter_map(|o| {
            let why = o.result.get("unapplied")?.as_array()?;
            (!why.is_empty()).then(|| json!({"op": o.index, "f": o.f, "why": why}))
        })
        .collect();
    let stats = json!({"steps": steps.len(), "unapplied": unapplied});
    let mut result = CheckResult::from(
        "faults-applied",
        "every injected fault took effect (else the run is unknown)",
        Vec::new(),
        true,
        stats,
    );
    if !unapplied.is_empty() {
        result.valid = Validity::Unknown;
    }
    result
}

/// What a server log line is, for the crash checker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogLine {
    /// A panic: always a bug.
    Panic,
    /// An error logged by baton's own code, or a 500 answer: a bug.
    Error,
    /// An error the faults cause by design (openraft's failed RPCs, 503/504 answers).
    Expected,
    /// Anything else.
    Other,
}

/// Classifies one line of a server log (ANSI colours already stripped): by its level, and
/// for errors by the tracing target that logged it.
pub fn classify(line: &str) -> LogLine {
    if line.contains("panicked at") {
        return LogLine::Panic;
    }
    let Some((_, after)) = line.split_once(" ERROR ") else {
        return LogLine::Other;
    };
    // The target is the first `name:` token outside the spans (`request{…}: target: msg`).
    let target = after
        .split_whitespace()
        .filter_map(|t| t.strip_suffix(':'))
        .find(|t| !t.contains(['{', '}', '=']))
        .unwrap_or_default();
    if target.starts_with("openraft") {
        // Failed RPCs and leadership confirmations while peers are down or cut off.
        LogLine::Expected
    } else if target == "tower_http::trace::on_failure"
        && line.contains("classification=Status code: 5")
        && !line.contains("classification=Status code: 500")
    {
        // 503 (no leader) and 504 (indeterminate) answers, by design under faults.
        LogLine::Expected
    } else {
        LogLine::Error
    }
}

/// No server log holds a panic or an error of baton's own.
pub fn server_logs(truth: &Truth) -> CheckResult {
    let mut anomalies = Vec::new();
    let mut scanned = 0;
    for (node, lines) in &truth.server_logs {
        scanned += 1;
        for line in lines {
            let kind = match classify(line) {
                LogLine::Panic => "server-panic",
                LogLine::Error => "server-error",
                LogLine::Expected | LogLine::Other => continue,
            };
            anomalies.push(Anomaly {
                kind: kind.into(),
                ops: vec![],
                message: format!("{node}: {}", line.chars().take(300).collect::<String>()),
            });
        }
    }
    CheckResult::from(
        "server-logs",
        "no server panicked or logged an error of its own",
        anomalies,
        scanned > 0,
        json!({"logs": scanned, "expected_errors": truth.server_log_expected}),
    )
}

#[cfg(test)]
mod tests {
    use super::{LogLine, classify};

    #[test]
    fn fault_noise_is_expected_and_our_errors_are_not() {
        let at = "2026-11-23T07:43:14.021923Z";
        assert_eq!(
            classify(&format!(
                "{at} ERROR openraft::replication: RPCError err=NetworkError"
            )),
            LogLine::Expected
        );
        assert_eq!(
            classify(&format!(
                "{at} ERROR request{{method=POST}}: tower_http::trace::on_failure: response failed classification=Status code: 503 Service Unavailable"
            )),
            LogLine::Expected
        );
        assert_eq!(
            classify(&format!(
                "{at} ERROR request{{}}: tower_http::trace::on_failure: response failed classification=Status code: 500 Internal Server Error"
            )),
            LogLine::Error
        );
        assert_eq!(
            classify(&format!(
                "{at} ERROR request{{}}: baton_http_api::error: internal inconsistency"
            )),
            LogLine::Error
        );
        assert_eq!(
            classify("thread 'tokio-runtime-worker' panicked at src/x.rs:1:2:"),
            LogLine::Panic
        );
        assert_eq!(
            classify(&format!("{at}  INFO baton: serving")),
            LogLine::Other
        );
    }
}
