//! The list-append checker (`checker::elle`): each anomaly it names is caught in a short
//! hand-written history, its mirror (the same story without the anomaly) passes, and a
//! long serial execution of random transactions is valid.

use jepsen::checker::{CheckConfig, CheckResult, Validity, elle};
use jepsen::history::{Kind, Op, Process};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// One millisecond in the history's unit (ns).
const MS: u64 = 1_000_000;

/// A transaction from `call` to `ret` (ms); `micros` as the history records them (reads
/// with their lists for an ok one).
fn txn(index: u64, call: u64, ret: u64, outcome: Kind, micros: Value) -> Op {
    let ok = outcome == Kind::Ok;
    Op {
        process: Process::Client(index),
        f: "txn".into(),
        key: None,
        args: micros.clone(),
        outcome,
        result: if ok { micros } else { Value::Null },
        error: None,
        node: Some("n1".into()),
        call: call * MS,
        ret: (outcome != Kind::Info).then_some(ret * MS),
        completed_at: Some(ret * MS),
        index,
    }
}

fn ok(index: u64, call: u64, ret: u64, micros: Value) -> Op {
    txn(index, call, ret, Kind::Ok, micros)
}

fn check(ops: &[Op]) -> CheckResult {
    elle::list_append(ops, &CheckConfig::default())
}

fn kinds(result: &CheckResult) -> Vec<String> {
    result.anomalies.iter().map(|a| a.kind.clone()).collect()
}

/// The history is rejected with exactly these anomaly kinds.
fn rejects(ops: &[Op], expected: &[&str]) {
    let result = check(ops);
    assert_eq!(result.valid, Validity::Invalid, "{:?}", result.anomalies);
    assert_eq!(kinds(&result), expected, "{:?}", result.anomalies);
}

/// The history shows no anomaly (small ones are unknown, not valid).
fn passes(ops: &[Op]) {
    let result = check(ops);
    assert_ne!(result.valid, Validity::Invalid, "{:?}", result.anomalies);
    assert!(result.anomalies.is_empty(), "{:?}", result.anomalies);
}

#[test]
fn g0_write_cycle() {
    // T1 and T2 append to x and y in opposite orders: ww both ways.
    let story = |y: Value| {
        vec![
            ok(1, 0, 10, json!([["append", "x", 1], ["append", "y", 4]])),
            ok(2, 0, 10, json!([["append", "x", 2], ["append", "y", 3]])),
            ok(3, 20, 30, json!([["r", "x", [1, 2]], ["r", "y", y]])),
        ]
    };
    rejects(&story(json!([3, 4])), &["G0"]);
    passes(&story(json!([4, 3])));
}

#[test]
fn g1c_circular_information_flow() {
    // Each reads the other's append: wr both ways.
    let story = |x_seen: Value| {
        vec![
            ok(1, 0, 10, json!([["append", "x", 1], ["r", "y", [2]]])),
            ok(2, 0, 10, json!([["append", "y", 2], ["r", "x", x_seen]])),
        ]
    };
    rejects(&story(json!([1])), &["G1c"]);
    passes(&story(json!([])));
}

#[test]
fn g_single_read_skew() {
    // T2 sees T1's append to y but not its append to x.
    let story = |x_seen: Value| {
        vec![
            ok(1, 0, 10, json!([["append", "x", 1], ["append", "y", 2]])),
            ok(2, 0, 10, json!([["r", "x", x_seen], ["r", "y", [2]]])),
            ok(3, 20, 30, json!([["r", "x", [1]]])),
        ]
    };
    rejects(&story(json!([])), &["G-single"]);
    passes(&story(json!([1])));
}

#[test]
fn g2_write_skew() {
    // Each reads the key the other appends to, before the other's append.
    let story = |y_seen: Value| {
        vec![
            ok(1, 0, 10, json!([["r", "x", []], ["append", "y", 1]])),
            ok(2, 0, 10, json!([["r", "y", y_seen], ["append", "x", 2]])),
            ok(3, 20, 30, json!([["r", "x", [2]], ["r", "y", [1]]])),
        ]
    };
    rejects(&story(json!([])), &["G2"]);
    passes(&story(json!([1])));
}

#[test]
fn a_stale_read_after_the_append_completed_is_a_realtime_cycle() {
    // T1's append completed at 10 ms; T2 began at 20 ms and did not see it. Serializable
    // (T2 before T1), but not strictly: the mirror starts T2 before T1 completed.
    let story = |t2_call: u64| {
        vec![
            ok(1, 0, 10, json!([["append", "x", 1]])),
            ok(2, t2_call, 30, json!([["r", "x", []]])),
            ok(3, 40, 50, json!([["r", "x", [1]]])),
        ]
    };
    rejects(&story(20), &["G-single-realtime"]);
    passes(&story(5));
}

#[test]
fn lost_append_that_no_read_ever_shows() {
    let story = |t2_call: u64| {
        vec![
            ok(1, 0, 10, json!([["append", "x", 1]])),
            ok(2, t2_call, 30, json!([["r", "x", []]])),
        ]
    };
    rejects(&story(20), &["lost-append"]);
    passes(&story(5));
}

#[test]
fn g1a_aborted_read_and_garbage_read() {
    let history = vec![
        txn(1, 0, 10, Kind::Fail, json!([["append", "x", 9]])),
        ok(2, 20, 30, json!([["r", "x", [9]]])),
    ];
    rejects(&history, &["G1a"]);
    rejects(
        &[ok(2, 20, 30, json!([["r", "x", [7]]]))],
        &["garbage-read"],
    );
    // An append whose outcome is unknown may be seen.
    passes(&[
        txn(1, 0, 10, Kind::Info, json!([["append", "x", 9]])),
        ok(2, 20, 30, json!([["r", "x", [9]]])),
    ]);
}

#[test]
fn g1b_intermediate_read() {
    let story = |seen: Value| {
        vec![
            ok(1, 0, 10, json!([["append", "x", 1], ["append", "x", 2]])),
            ok(2, 0, 10, json!([["r", "x", seen]])),
            ok(3, 20, 30, json!([["r", "x", [1, 2]]])),
        ]
    };
    // Reading the first of T1's two appends also puts T2 both after T1 (wr) and before
    // it (rw): the cycle is reported too.
    rejects(&story(json!([1])), &["G1b", "G-single"]);
    passes(&story(json!([1, 2])));
}

#[test]
fn reads_that_disagree_on_the_order_and_duplicates() {
    let story = |second: Value| {
        vec![
            ok(1, 0, 10, json!([["append", "x", 1]])),
            ok(2, 0, 10, json!([["append", "x", 2]])),
            ok(3, 20, 30, json!([["r", "x", [1, 2]]])),
            ok(4, 20, 30, json!([["r", "x", second]])),
        ]
    };
    rejects(&story(json!([2, 1])), &["incompatible-order"]);
    let duplicated = check(&story(json!([1, 2, 2])));
    assert!(
        kinds(&duplicated).contains(&"duplicate-elements".to_owned()),
        "{:?}",
        duplicated.anomalies
    );
    passes(&story(json!([1, 2])));
    // A read that misses an append completed before it began is a real-time cycle.
    rejects(&story(json!([1])), &["G-single-realtime"]);
}

#[test]
fn a_txn_that_does_not_see_its_own_append() {
    let story = |seen: Value| vec![ok(1, 0, 10, json!([["append", "x", 5], ["r", "x", seen]]))];
    rejects(&story(json!([])), &["internal"]);
    passes(&story(json!([5])));
    // A second read shows the first plus what the txn appended in between.
    let twice = |second: Value| {
        vec![ok(
            1,
            0,
            10,
            json!([
                ["append", "x", 5],
                ["r", "x", [5]],
                ["append", "x", 6],
                ["r", "x", second]
            ]),
        )]
    };
    rejects(&twice(json!([5])), &["internal"]);
    passes(&twice(json!([5, 6])));
}

/// Random transactions run one after another against a model of the lists: strictly
/// serializable by construction, so valid (and with enough transactions for a verdict).
/// Swapping two elements in one late read breaks the order every later read agrees on.
#[test]
fn a_long_serial_execution_is_valid_and_a_tampered_read_is_caught() {
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let mut lists: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    let mut history = Vec::new();
    let mut next = 0;
    for i in 0..400u64 {
        let micros: Vec<Value> = (0..rng.random_range(1..5))
            .map(|_| {
                let key = format!("k{}", rng.random_range(0..6));
                let list = lists.entry(key.clone()).or_default();
                if rng.random_bool(0.5) {
                    next += 1;
                    list.push(next);
                    json!(["append", key, next])
                } else {
                    json!(["r", key, list.clone()])
                }
            })
            .collect();
        history.push(ok(i, i * 10, i * 10 + 5, Value::Array(micros)));
    }
    let result = check(&history);
    assert_eq!(result.valid, Validity::Valid, "{:?}", result.anomalies);

    let tampered = history
        .iter()
        .rposition(|op| {
            op.result.as_array().unwrap().iter().any(|m| {
                m[0] == "r"
                    && m[2].as_array().unwrap().len() >= 2
                    && !op.result.to_string().contains("append")
            })
        })
        .unwrap();
    let mut bad = history.clone();
    for m in bad[tampered].result.as_array_mut().unwrap() {
        if m[0] == "r" && m[2].as_array().unwrap().len() >= 2 {
            m[2].as_array_mut().unwrap().swap(0, 1);
            break;
        }
    }
    let result = check(&bad);
    assert_eq!(result.valid, Validity::Invalid);
    assert!(
        kinds(&result).iter().any(|k| k == "incompatible-order"),
        "{:?}",
        result.anomalies
    );
}
