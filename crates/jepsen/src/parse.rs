//! Readers for histories recorded by other tools, used to validate the checker.

use crate::checker::linear::Operation;
use crate::checker::models::{KvOp, RegisterOp, RegisterOut};
use std::collections::BTreeMap;

/// Why a history could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError(pub String);

impl std::fmt::Display for ParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ParseError {}

struct Pending<I> {
    call: u64,
    input: I,
}

/// A Jepsen etcd log (`INFO  jepsen.util - P\t:type\t:f\tvalue`) as register operations.
/// Failed operations did not happen and are dropped; `info` and missing completions are
/// unknown outcomes (reads among them are dropped: they changed nothing).
pub fn jepsen_register_log(
    text: &str,
) -> Result<Vec<Operation<RegisterOp, RegisterOut>>, ParseError> {
    let mut pending: BTreeMap<u64, Pending<RegisterOp>> = BTreeMap::new();
    let mut ops = Vec::new();
    for (time, line) in text.lines().enumerate() {
        let time = time as u64;
        let Some((_, rest)) = line.split_once(" - ") else {
            continue;
        };
        let fields: Vec<&str> = rest.split('\t').collect();
        if fields.len() < 4 {
            continue;
        }
        let process: u64 = fields[0]
            .trim()
            .parse()
            .map_err(|_| ParseError(format!("process in {line:?}")))?;
        let (kind, f, value) = (fields[1], fields[2], fields[3].trim());
        match kind {
            ":invoke" => {
                let input = match f {
                    ":read" => RegisterOp::Read,
                    ":write" => RegisterOp::Write(int(value)?),
                    ":cas" => {
                        let inner = value.trim_start_matches('[').trim_end_matches(']');
                        let mut parts = inner.split_whitespace();
                        let from = int(parts.next().unwrap_or(""))?;
                        let to = int(parts.next().unwrap_or(""))?;
                        RegisterOp::Cas { from, to }
                    }
                    other => return Err(ParseError(format!("unknown function {other}"))),
                };
                pending.insert(process, Pending { call: time, input });
            }
            ":ok" => {
                let p = pending
                    .remove(&process)
                    .ok_or_else(|| ParseError(format!("ok without invoke: {line:?}")))?;
                let output = match p.input {
                    RegisterOp::Read => RegisterOut::Value(if value == "nil" {
                        None
                    } else {
                        Some(int(value)?)
                    }),
                    _ => RegisterOut::Done,
                };
                ops.push(Operation {
                    process,
                    call: p.call,
                    ret: Some(time),
                    input: p.input,
                    output: Some(output),
                });
            }
            ":fail" => {
                pending.remove(&process);
            }
            ":info" => {
                if let Some(p) = pending.remove(&process) {
                    push_unknown(&mut ops, process, p);
                }
            }
            _ => {}
        }
    }
    for (process, p) in pending {
        push_unknown(&mut ops, process, p);
    }
    Ok(ops)
}

fn push_unknown(
    ops: &mut Vec<Operation<RegisterOp, RegisterOut>>,
    process: u64,
    p: Pending<RegisterOp>,
) {
    if p.input != RegisterOp::Read {
        ops.push(Operation {
            process,
            call: p.call,
            ret: None,
            input: p.input,
            output: None,
        });
    }
}

fn int(s: &str) -> Result<i64, ParseError> {
    s.trim()
        .parse()
        .map_err(|_| ParseError(format!("not an integer: {s:?}")))
}

/// A Porcupine key-value history (one EDN map per line) as operations partitioned by key.
pub fn porcupine_kv(text: &str) -> Result<Vec<Vec<Operation<KvOp, String>>>, ParseError> {
    let mut pending: BTreeMap<u64, (u64, String, KvOp)> = BTreeMap::new();
    let mut by_key: BTreeMap<String, Vec<Operation<KvOp, String>>> = BTreeMap::new();
    for (time, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let time = time as u64;
        let process: u64 = int(&edn_field(line, ":process")?)? as u64;
        let kind = edn_field(line, ":type")?;
        let f = edn_field(line, ":f")?;
        let key = edn_field(line, ":key")?;
        let value = edn_field(line, ":value")?;
        match kind.as_str() {
            ":invoke" => {
                let input = match f.as_str() {
                    ":get" => KvOp::Get,
                    ":put" => KvOp::Put(value),
                    ":append" => KvOp::Append(value),
                    other => return Err(ParseError(format!("unknown function {other}"))),
                };
                pending.insert(process, (time, key, input));
            }
            ":ok" => {
                let (call, key, input) = pending
                    .remove(&process)
                    .ok_or_else(|| ParseError(format!("ok without invoke: {line}")))?;
                let output = match input {
                    KvOp::Get => value,
                    _ => String::new(),
                };
                by_key.entry(key).or_default().push(Operation {
                    process,
                    call,
                    ret: Some(time),
                    input,
                    output: Some(output),
                });
            }
            other => return Err(ParseError(format!("unexpected type {other}"))),
        }
    }
    for (process, (call, key, input)) in pending {
        if input != KvOp::Get {
            by_key.entry(key).or_default().push(Operation {
                process,
                call,
                ret: None,
                input,
                output: None,
            });
        }
    }
    Ok(by_key.into_values().collect())
}

/// The value after `name` in a one-line EDN map: a keyword, a number, `nil` (""), or a string.
fn edn_field(line: &str, name: &str) -> Result<String, ParseError> {
    let start = line
        .find(&format!("{name} "))
        .ok_or_else(|| ParseError(format!("no {name} in {line}")))?
        + name.len()
        + 1;
    let rest = &line[start..];
    if let Some(quoted) = rest.strip_prefix('"') {
        let end = quoted
            .find('"')
            .ok_or_else(|| ParseError(format!("unterminated string in {line}")))?;
        return Ok(quoted[..end].to_owned());
    }
    let end = rest.find([',', '}']).unwrap_or(rest.len());
    let token = rest[..end].trim();
    Ok(if token == "nil" {
        String::new()
    } else {
        token.to_owned()
    })
}
