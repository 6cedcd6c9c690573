//! `append`: Elle-style list-append transactions over `/v1/txn`, checked for strict
//! serializability by `checker::elle`.
//!
//! Each key `a/<gen>-<slot>/` holds a comma-separated list of unique integers. A
//! transaction is 1–4 micro-operations on the generation's keys: appends and whole-list
//! reads. It runs as one read-only txn (the current lists and their `mod_revision`s) and
//! one guarded txn: a compare per appended key on that `mod_revision`, then, in order, a
//! `range` for each read and a `put` of the longer list for each append. A failed compare
//! means nothing happened (`fail`); the reads' lists come from the guarded txn itself.
//! Keys end in `/`, so a range over one key's name matches that key only.

use super::{Worker, process_number};
use crate::client::Reply;
use crate::history::Kind;
use rand::Rng;
use reqwest::Method;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::atomic::Ordering;

/// Transactions per generation of keys before the workload moves to fresh keys (keeps the
/// lists short).
const TXNS_PER_GEN: u64 = 300;
/// Keys of a generation.
const KEYS: u64 = 5;

/// One micro-operation the workload chose.
enum Micro {
    Append(String, u64),
    Read(String),
}

/// Runs list-append transactions until the run ends.
pub async fn append(mut w: Worker) {
    let mut seq = 0u64;
    while w.ctx.running() {
        w.gap().await;
        let n = w.ctx.append_ops.fetch_add(1, Ordering::Relaxed);
        let generation = n / TXNS_PER_GEN;
        let micros: Vec<Micro> = (0..w.rng.random_range(1..=4))
            .map(|_| {
                let key = format!("a/{generation}-{}/", w.rng.random_range(0..KEYS));
                if w.rng.random_bool(0.5) {
                    seq += 1;
                    // Unique across the run: the process number is never reused.
                    Micro::Append(key, process_number(w.process) * 1_000_000 + seq)
                } else {
                    Micro::Read(key)
                }
            })
            .collect();
        transact(&mut w, &micros).await;
    }
}

/// The history's form of the micro-operations: reads with `lists` filled in when known.
fn recorded(micros: &[Micro], lists: Option<&[Vec<u64>]>) -> Value {
    let mut read = 0;
    Value::Array(
        micros
            .iter()
            .map(|m| match m {
                Micro::Append(k, v) => json!(["append", k, v]),
                Micro::Read(k) => {
                    let list = lists.and_then(|l| l.get(read)).map(|l| json!(l));
                    read += 1;
                    json!(["r", k, list])
                }
            })
            .collect(),
    )
}

/// Parses a stored list ("" is empty).
fn parse_list(text: &str) -> Option<Vec<u64>> {
    if text.is_empty() {
        return Some(Vec::new());
    }
    text.split(',').map(|e| e.parse().ok()).collect()
}

/// The (value, mod_revision) of the one key a range result holds, or ("", 0).
fn range_entry(result: &Value) -> Option<(String, u64)> {
    let kvs = result.get("kvs")?.as_array()?;
    match kvs.first() {
        None => Some((String::new(), 0)),
        Some(kv) => Some((
            kv.get("value")?.as_str()?.to_owned(),
            kv.get("mod_revision")?.as_u64()?,
        )),
    }
}

/// Runs one transaction and records it as one operation `txn`.
async fn transact(w: &mut Worker, micros: &[Micro]) {
    let (_, name, url) = w.ctx.pick(&mut w.rng);
    let rec = &w.ctx.rec;
    let args = recorded(micros, None);
    rec.record(
        Kind::Invoke,
        w.process,
        "txn",
        None,
        args,
        Some(&name),
        None,
    );
    let outcome = run(w, &url, micros).await;
    let rec = &w.ctx.rec;
    match outcome {
        Ok(lists) => {
            let result = recorded(micros, Some(&lists));
            rec.record(Kind::Ok, w.process, "txn", None, result, Some(&name), None);
        }
        Err(Reply::Fail { code, .. }) => {
            let args = recorded(micros, None);
            rec.record(
                Kind::Fail,
                w.process,
                "txn",
                None,
                args,
                Some(&name),
                Some(code),
            );
        }
        Err(other) => {
            let error = other.error().unwrap_or_else(|| "unknown".into());
            rec.record(
                Kind::Info,
                w.process,
                "txn",
                None,
                Value::Null,
                Some(&name),
                Some(error),
            );
            w.process = rec.new_process();
        }
    }
}

/// The two requests of a transaction. `Ok`: the reads' lists in order; `Err(Fail)`:
/// nothing happened; `Err(Info)`: the guarded txn's outcome is unknown.
async fn run(w: &Worker, url: &str, micros: &[Micro]) -> Result<Vec<Vec<u64>>, Reply> {
    let timeout = w.ctx.op_timeout;
    let txn_url = format!("{url}/v1/txn");
    let fail = |code: &str| Reply::Fail {
        status: 0,
        code: code.into(),
        body: Value::Null,
    };
    // The current lists of the appended keys (a read: an unknown outcome changed nothing).
    let mut appended: Vec<&str> = micros
        .iter()
        .filter_map(|m| match m {
            Micro::Append(k, _) => Some(k.as_str()),
            Micro::Read(_) => None,
        })
        .collect();
    appended.sort_unstable();
    appended.dedup();
    let mut current: HashMap<&str, (String, u64)> = HashMap::new();
    if !appended.is_empty() {
        let ranges: Vec<Value> = appended
            .iter()
            .map(|k| json!({"op": "range", "prefix": k}))
            .collect();
        let body = json!({"success": ranges});
        let reply = w
            .ctx
            .http
            .send(Method::POST, &txn_url, Some(&body), timeout)
            .await;
        let Reply::Ok(answer) = reply else {
            return Err(match reply {
                Reply::Info(e) => fail(&format!("pre-read: {e}")),
                other => other,
            });
        };
        let results = answer.get("results").and_then(Value::as_array);
        for (i, k) in appended.iter().enumerate() {
            let entry = results
                .and_then(|r| r.get(i))
                .and_then(range_entry)
                .ok_or_else(|| Reply::Info(format!("unreadable pre-read: {answer}")))?;
            current.insert(k, entry);
        }
    }
    let compare: Vec<Value> = appended
        .iter()
        .map(|k| json!({"key": k, "target": "mod_revision", "op": "equal", "value": current[k].1}))
        .collect();
    let mut lists: HashMap<&str, String> =
        current.iter().map(|(k, (v, _))| (*k, v.clone())).collect();
    let success: Vec<Value> = micros
        .iter()
        .map(|m| match m {
            Micro::Read(k) => json!({"op": "range", "prefix": k}),
            Micro::Append(k, v) => {
                let list = lists.entry(k).or_default();
                if !list.is_empty() {
                    list.push(',');
                }
                list.push_str(&v.to_string());
                json!({"op": "put", "key": k, "value": list})
            }
        })
        .collect();
    let body = json!({"compare": compare, "success": success});
    let answer = match w
        .ctx
        .http
        .send(Method::POST, &txn_url, Some(&body), timeout)
        .await
    {
        Reply::Ok(answer) => answer,
        other => return Err(other),
    };
    if answer.get("succeeded") == Some(&Value::Bool(false)) {
        return Err(fail("compare-failed"));
    }
    let results = answer
        .get("results")
        .and_then(Value::as_array)
        .ok_or_else(|| Reply::Info(format!("unreadable txn answer: {answer}")))?;
    let mut reads = Vec::new();
    for (m, result) in micros.iter().zip(results) {
        if let Micro::Read(_) = m {
            let list = range_entry(result)
                .and_then(|(v, _)| parse_list(&v))
                .ok_or_else(|| Reply::Info(format!("unreadable read: {result}")))?;
            reads.push(list);
        }
    }
    Ok(reads)
}
