//! Histories: invoke/ok/fail/info events as JSON Lines, their pairing into operations, and
//! the well-formedness checks that come before any checker.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::path::Path;

/// What an event records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// An operation starts.
    Invoke,
    /// It happened, with this result.
    Ok,
    /// It definitely did not happen.
    Fail,
    /// Its outcome is unknown (timeout, reset after sending, error after proposing).
    Info,
}

/// Who ran an operation: a client process or the nemesis.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Process {
    /// A client process; a worker gets a new one after an `info`.
    Client(u64),
    /// The fault injector, written `"nemesis"`.
    #[serde(with = "nemesis_name")]
    Nemesis,
}

mod nemesis_name {
    use serde::{Deserialize, Deserializer, Serializer, de::Error};

    pub fn serialize<S: Serializer>(s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str("nemesis")
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<(), D::Error> {
        let name = String::deserialize(d)?;
        if name == "nemesis" {
            Ok(())
        } else {
            Err(D::Error::custom(format!("unknown process {name:?}")))
        }
    }
}

/// One line of `history.jsonl`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// Position in the history (0-based, in time order).
    pub i: u64,
    /// Invoke, ok, fail or info.
    #[serde(rename = "type")]
    pub kind: Kind,
    /// Who ran it.
    pub process: Process,
    /// The function: `read`, `write`, `cas`, `acquire`, `kill-start`, …
    pub f: String,
    /// The key, lock, lease or other object it concerns, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// Arguments (invoke) or results (completion).
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub value: Value,
    /// The node the request went to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// Why it failed or is unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Nanoseconds since the test started, on the harness's monotonic clock.
    pub time: u64,
}

/// An invocation paired with its completion.
#[derive(Clone, Debug, PartialEq)]
pub struct Op {
    /// Who ran it.
    pub process: Process,
    /// The function.
    pub f: String,
    /// The object.
    pub key: Option<String>,
    /// The invocation's arguments.
    pub args: Value,
    /// How it ended; `Info` also for an operation still open when the history ends.
    pub outcome: Kind,
    /// The completion's value (results), `Null` if none.
    pub result: Value,
    /// The completion's error, if any.
    pub error: Option<String>,
    /// The node it went to.
    pub node: Option<String>,
    /// Invocation time (ns).
    pub call: u64,
    /// Completion time (ns); `None` for `info` (it may take effect until the end).
    pub ret: Option<u64>,
    /// Completion time as recorded, even for `info` (for plots and reports).
    pub completed_at: Option<u64>,
    /// Index of the invoke event.
    pub index: u64,
}

impl Op {
    /// True if it completed `ok`.
    pub fn is_ok(&self) -> bool {
        self.outcome == Kind::Ok
    }

    /// An unsigned field of the result.
    pub fn result_u64(&self, field: &str) -> Option<u64> {
        self.result.get(field).and_then(Value::as_u64)
    }

    /// An unsigned field of the arguments.
    pub fn arg_u64(&self, field: &str) -> Option<u64> {
        self.args.get(field).and_then(Value::as_u64)
    }

    /// A string field of the arguments.
    pub fn arg_str(&self, field: &str) -> Option<&str> {
        self.args.get(field).and_then(Value::as_str)
    }

    /// Latency in ns, if it completed.
    pub fn latency(&self) -> Option<u64> {
        self.completed_at.map(|t| t.saturating_sub(self.call))
    }
}

/// A history that is not well formed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum HistoryError {
    /// Event `i` has the wrong position.
    #[error("event {0} is out of sequence")]
    OutOfSequence(u64),
    /// Time went backwards at event `i`.
    #[error("time goes backwards at event {0}")]
    TimeBackwards(u64),
    /// A process invoked while it had an operation open.
    #[error("process {process:?} invokes at event {i} with an operation open")]
    DoubleInvoke {
        /// The process.
        process: Process,
        /// The event.
        i: u64,
    },
    /// A completion without an open invocation.
    #[error("event {0} completes nothing")]
    Orphan(u64),
    /// A completion whose function differs from its invocation's.
    #[error("event {0} completes a different function")]
    Mismatch(u64),
    /// A client process acted again after an `info`.
    #[error("process {process:?} acts again at event {i} after an info")]
    AfterInfo {
        /// The process.
        process: Process,
        /// The event.
        i: u64,
    },
    /// A line is not an event.
    #[error("line {line}: {message}")]
    Parse {
        /// 1-based line number.
        line: usize,
        /// What was wrong.
        message: String,
    },
    /// Reading or writing the file failed.
    #[error("{0}")]
    Io(String),
}

/// Pairs invocations with completions, checking that the history is well formed: events
/// in sequence, time never going back, one open operation per process, completions that
/// match their invocation, and no client acting after an `info`. Operations still open at
/// the end become `info`.
pub fn pair(events: &[Event]) -> Result<Vec<Op>, HistoryError> {
    let mut open: HashMap<Process, usize> = HashMap::new();
    let mut crashed: HashMap<Process, ()> = HashMap::new();
    let mut ops: Vec<Op> = Vec::new();
    let mut last_time = 0;
    for (n, e) in events.iter().enumerate() {
        if e.i != n as u64 {
            return Err(HistoryError::OutOfSequence(e.i));
        }
        if e.time < last_time {
            return Err(HistoryError::TimeBackwards(e.i));
        }
        last_time = e.time;
        if crashed.contains_key(&e.process) {
            return Err(HistoryError::AfterInfo {
                process: e.process,
                i: e.i,
            });
        }
        match e.kind {
            Kind::Invoke => {
                if open.contains_key(&e.process) {
                    return Err(HistoryError::DoubleInvoke {
                        process: e.process,
                        i: e.i,
                    });
                }
                open.insert(e.process, ops.len());
                ops.push(Op {
                    process: e.process,
                    f: e.f.clone(),
                    key: e.key.clone(),
                    args: e.value.clone(),
                    outcome: Kind::Info,
                    result: Value::Null,
                    error: None,
                    node: e.node.clone(),
                    call: e.time,
                    ret: None,
                    completed_at: None,
                    index: e.i,
                });
            }
            kind => {
                let at = open.remove(&e.process).ok_or(HistoryError::Orphan(e.i))?;
                let op = &mut ops[at];
                if op.f != e.f {
                    return Err(HistoryError::Mismatch(e.i));
                }
                op.outcome = kind;
                op.result = e.value.clone();
                op.error = e.error.clone();
                op.completed_at = Some(e.time);
                op.ret = (kind != Kind::Info).then_some(e.time);
                if kind == Kind::Info && matches!(e.process, Process::Client(_)) {
                    crashed.insert(e.process, ());
                }
            }
        }
    }
    Ok(ops)
}

/// Reads `history.jsonl`.
pub fn read(path: &Path) -> Result<Vec<Event>, HistoryError> {
    let file = std::fs::File::open(path).map_err(|e| HistoryError::Io(e.to_string()))?;
    let mut events = Vec::new();
    for (n, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line.map_err(|e| HistoryError::Io(e.to_string()))?;
        if line.trim().is_empty() {
            continue;
        }
        events.push(
            serde_json::from_str(&line).map_err(|e| HistoryError::Parse {
                line: n + 1,
                message: e.to_string(),
            })?,
        );
    }
    Ok(events)
}

/// Writes events as JSON Lines.
pub fn write(path: &Path, events: &[Event]) -> Result<(), HistoryError> {
    let file = std::fs::File::create(path).map_err(|e| HistoryError::Io(e.to_string()))?;
    let mut out = std::io::BufWriter::new(file);
    for e in events {
        let line = serde_json::to_string(e).map_err(|e| HistoryError::Io(e.to_string()))?;
        writeln!(out, "{line}").map_err(|e| HistoryError::Io(e.to_string()))?;
    }
    out.flush().map_err(|e| HistoryError::Io(e.to_string()))
}

/// A fault window: from a nemesis `*-start` invoke to its matching `*-stop` completion.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FaultWindow {
    /// The fault kind (`kill`, `pause`, `partition`, `clock`, `member`).
    pub kind: String,
    /// What it did (targets), as recorded.
    pub detail: Value,
    /// Start (ns).
    pub start: u64,
    /// End (ns); the end of the history if it never stopped.
    pub end: u64,
}

/// The nemesis's fault windows.
pub fn fault_windows(ops: &[Op]) -> Vec<FaultWindow> {
    let end = ops
        .iter()
        .map(|o| o.completed_at.unwrap_or(o.call))
        .max()
        .unwrap_or(0);
    let mut windows: Vec<FaultWindow> = Vec::new();
    let mut open: HashMap<String, usize> = HashMap::new();
    for op in ops.iter().filter(|o| o.process == Process::Nemesis) {
        if let Some(kind) = op.f.strip_suffix("-start") {
            open.insert(kind.to_owned(), windows.len());
            windows.push(FaultWindow {
                kind: kind.to_owned(),
                detail: op.result.clone(),
                start: op.call,
                end,
            });
        } else if let Some(kind) = op.f.strip_suffix("-stop")
            && let Some(w) = open.remove(kind)
        {
            windows[w].end = op.completed_at.unwrap_or(op.call);
        }
    }
    windows
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ev(i: u64, kind: Kind, process: Process, f: &str, time: u64) -> Event {
        Event {
            i,
            kind,
            process,
            f: f.into(),
            key: Some("k".into()),
            value: json!({"x": 1}),
            node: None,
            error: None,
            time,
        }
    }

    #[test]
    fn events_round_trip_through_json() {
        let e = ev(0, Kind::Invoke, Process::Nemesis, "kill-start", 5);
        let line = serde_json::to_string(&e).unwrap();
        assert!(line.contains("\"process\":\"nemesis\""), "{line}");
        assert_eq!(serde_json::from_str::<Event>(&line).unwrap(), e);
        let c = ev(1, Kind::Info, Process::Client(3), "write", 9);
        let line = serde_json::to_string(&c).unwrap();
        assert!(line.contains("\"type\":\"info\""), "{line}");
        assert_eq!(serde_json::from_str::<Event>(&line).unwrap(), c);
    }

    #[test]
    fn pairing_leaves_info_open_to_the_end() {
        let p = Process::Client(1);
        let ops = pair(&[
            ev(0, Kind::Invoke, p, "write", 1),
            ev(1, Kind::Info, p, "write", 2),
            ev(2, Kind::Invoke, Process::Client(2), "read", 3),
        ])
        .unwrap();
        assert_eq!(ops[0].ret, None);
        assert_eq!(ops[0].completed_at, Some(2));
        assert_eq!(ops[1].outcome, Kind::Info);
    }

    #[test]
    fn malformed_histories_are_refused() {
        let p = Process::Client(1);
        assert_eq!(
            pair(&[
                ev(0, Kind::Invoke, p, "write", 1),
                ev(1, Kind::Invoke, p, "read", 2)
            ]),
            Err(HistoryError::DoubleInvoke { process: p, i: 1 })
        );
        assert_eq!(
            pair(&[ev(0, Kind::Ok, p, "write", 1)]),
            Err(HistoryError::Orphan(0))
        );
        assert_eq!(
            pair(&[
                ev(0, Kind::Invoke, p, "write", 1),
                ev(1, Kind::Ok, p, "read", 2)
            ]),
            Err(HistoryError::Mismatch(1))
        );
        assert_eq!(
            pair(&[
                ev(0, Kind::Invoke, p, "write", 5),
                ev(1, Kind::Ok, p, "write", 2)
            ]),
            Err(HistoryError::TimeBackwards(1))
        );
        assert_eq!(
            pair(&[
                ev(0, Kind::Invoke, p, "write", 1),
                ev(1, Kind::Info, p, "write", 2),
                ev(2, Kind::Invoke, p, "write", 3)
            ]),
            Err(HistoryError::AfterInfo { process: p, i: 2 })
        );
    }
}
