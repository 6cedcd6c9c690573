//! The checker gives the known answer for every history in `crates/jepsen/testdata` (see its
//! README for where each set comes from): 102 Jepsen etcd register histories (23
//! linearizable, 79 not) and Porcupine's key-value histories.

use jepsen::checker::linear::{Verdict, check, check_partitions};
use jepsen::checker::models::{CasRegister, KvKey};
use jepsen::parse::{jepsen_register_log, porcupine_kv};
use std::path::PathBuf;
use std::time::Duration;

fn testdata() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("testdata");
    assert!(dir.is_dir(), "missing {}", dir.display());
    dir
}

const BUDGET: Duration = Duration::from_secs(30);

#[test]
fn every_jepsen_etcd_history_gets_its_known_answer() {
    let dir = testdata().join("jepsen-etcd");
    let expected = std::fs::read_to_string(dir.join("EXPECTED")).unwrap();
    let mut checked = 0;
    let mut unknown = Vec::new();
    for line in expected.lines().filter(|l| !l.trim().is_empty()) {
        let (file, answer) = line.split_once(' ').unwrap();
        let history =
            jepsen_register_log(&std::fs::read_to_string(dir.join(file)).unwrap()).unwrap();
        let t = std::time::Instant::now();
        let verdict = check(&CasRegister, &history, BUDGET);
        if t.elapsed() > Duration::from_millis(500) {
            eprintln!("SLOW {file} {:?} {} ops", t.elapsed(), history.len());
        }
        match (answer.trim(), &verdict) {
            ("linearizable", Verdict::Linearizable)
            | ("not-linearizable", Verdict::NotLinearizable { .. }) => {}
            (_, Verdict::Unknown) => unknown.push(file.to_owned()),
            (want, got) => panic!("{file}: expected {want}, got {got:?}"),
        }
        checked += 1;
    }
    assert_eq!(checked, 102);
    assert!(unknown.is_empty(), "ran out of budget on {unknown:?}");
}

#[test]
fn every_porcupine_kv_history_gets_its_known_answer() {
    let dir = testdata().join("porcupine-kv");
    for clients in ["c01", "c10", "c50"] {
        for (suffix, linearizable) in [("ok", true), ("bad", false)] {
            let file = format!("{clients}-{suffix}.txt");
            let partitions =
                porcupine_kv(&std::fs::read_to_string(dir.join(&file)).unwrap()).unwrap();
            let verdict = check_partitions(&KvKey, &partitions, BUDGET);
            match (linearizable, &verdict) {
                (true, Verdict::Linearizable) | (false, Verdict::NotLinearizable { .. }) => {}
                _ => panic!("{file}: expected linearizable={linearizable}, got {verdict:?}"),
            }
        }
    }
}

#[test]
fn out_of_budget_is_unknown_never_a_guess() {
    let dir = testdata().join("porcupine-kv");
    let partitions =
        porcupine_kv(&std::fs::read_to_string(dir.join("c50-ok.txt")).unwrap()).unwrap();
    // A zero budget stops the search at its first clock check (after 1 024 steps): the
    // largest partition needs more, so the answer is Unknown, not Linearizable.
    let largest = partitions.iter().max_by_key(|p| p.len()).unwrap();
    assert_eq!(check(&KvKey, largest, Duration::ZERO), Verdict::Unknown);
    assert_eq!(
        check_partitions(&KvKey, &partitions, Duration::ZERO),
        Verdict::Unknown
    );
}
