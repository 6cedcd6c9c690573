//! Every checker rejects a hand-written history that shows its anomaly, and passes the
//! mirror history that differs from it only where the anomaly is. Each test tells one
//! short story with the builder [`H`]; the last one splices stale values, read by read,
//! into a valid register history and expects every splice to be caught.
//!
//! A mirror is asserted "not invalid and no anomaly", and valid only where the checker has
//! enough data: most checkers answer unknown below a minimum number of operations, and
//! these histories are small on purpose.

use jepsen::checker::{
    Anomaly, CheckConfig, CheckResult, Truth, Validity, lock, register, session, watch,
};
use jepsen::fenced::STALE;
use jepsen::history::{Event, HistoryError, Kind, Op, Process, pair};
use jepsen::workload::SEMAPHORE;
use serde_json::{Value, json};

/// One millisecond in the history's unit (ns).
const MS: u64 = 1_000_000;
/// The register key most stories use.
const KEY: &str = "r/0-0";
/// The lock the lock stories use.
const LOCK: &str = "lock-0";
/// The TTL of the lock stories' leases.
const TTL_MS: u64 = 3_000;

// ---------------------------------------------------------------- the builder

/// A history under construction. Every event gets the next index and happens 1 ms after
/// the one before, so "completed before it was invoked" is plain event order; `wait_ms`
/// lets time pass.
#[derive(Default)]
struct H {
    events: Vec<Event>,
    /// The time of the last event (ns).
    t: u64,
}

impl H {
    fn record(
        &mut self,
        kind: Kind,
        process: Process,
        f: &str,
        key: Option<&str>,
        value: Value,
        error: Option<&str>,
    ) -> u64 {
        self.t += MS;
        let i = self.events.len() as u64;
        self.events.push(Event {
            i,
            kind,
            process,
            f: f.to_owned(),
            key: key.map(str::to_owned),
            value,
            node: Some("n1".to_owned()),
            error: error.map(str::to_owned),
            time: self.t,
        });
        i
    }

    /// Client `p` invokes `f`; returns the event's index, which is the op's `index`.
    fn invoke(&mut self, p: u64, f: &str, key: &str, args: Value) -> u64 {
        self.record(Kind::Invoke, Process::Client(p), f, Some(key), args, None)
    }

    fn ok(&mut self, p: u64, f: &str, key: &str, result: Value) -> u64 {
        self.record(Kind::Ok, Process::Client(p), f, Some(key), result, None)
    }

    fn fail(&mut self, p: u64, f: &str, key: &str, error: &str) -> u64 {
        let c = Process::Client(p);
        self.record(Kind::Fail, c, f, Some(key), Value::Null, Some(error))
    }

    fn info(&mut self, p: u64, f: &str, key: &str, error: &str) -> u64 {
        let c = Process::Client(p);
        self.record(Kind::Info, c, f, Some(key), Value::Null, Some(error))
    }

    /// An operation that completes ok 1 ms after its invocation; returns the invoke index.
    fn call(&mut self, p: u64, f: &str, key: &str, args: Value, result: Value) -> u64 {
        let i = self.invoke(p, f, key, args);
        self.ok(p, f, key, result);
        i
    }

    /// An operation refused with `error`; returns the invoke index.
    fn refused(&mut self, p: u64, f: &str, key: &str, args: Value, error: &str) -> u64 {
        let i = self.invoke(p, f, key, args);
        self.fail(p, f, key, error);
        i
    }

    /// A nemesis action on all three nodes that completes ok.
    fn nemesis(&mut self, f: &str) {
        self.nemesis_on(f, &["n1", "n2", "n3"]);
    }

    /// A nemesis action on `nodes` that completes ok.
    fn nemesis_on(&mut self, f: &str, nodes: &[&str]) {
        let (n, nodes) = (Process::Nemesis, json!({ "nodes": nodes }));
        self.record(Kind::Invoke, n, f, None, Value::Null, None);
        self.record(Kind::Ok, n, f, None, nodes, None);
    }

    fn wait_ms(&mut self, ms: u64) {
        self.t += ms * MS;
    }

    /// The time of event `i` (ns).
    fn time(&self, i: u64) -> u64 {
        self.events[i as usize].time
    }

    fn ops(&self) -> Vec<Op> {
        pair(&self.events).expect("the builder makes well-formed histories")
    }

    // Register operations, shaped as the register workload records them.

    fn write(&mut self, p: u64, key: &str, value: &str, rev: u64) -> u64 {
        self.call(
            p,
            "write",
            key,
            json!({"value": value}),
            json!({"rev": rev}),
        )
    }

    /// After `ms`, a write by client 9 that the cluster acknowledges: background traffic
    /// showing the cluster commits (revisions from 1 000 up).
    fn write_after(&mut self, ms: u64) -> u64 {
        self.wait_ms(ms);
        let rev = 1_000 + self.events.len() as u64;
        self.write(9, KEY, &format!("9-{rev}"), rev)
    }

    /// A read of `value` last changed at `mod_rev`, served at header revision `rev`.
    fn read(&mut self, p: u64, key: &str, value: &str, mod_rev: u64, rev: u64) -> u64 {
        let result = json!({"value": value, "mod_rev": mod_rev, "rev": rev});
        self.call(p, "read", key, Value::Null, result)
    }

    fn cas_args(value: &str, prev_rev: u64) -> Value {
        json!({"value": value, "prev_rev": prev_rev})
    }

    // Lease and lock operations, shaped as the lock workload records them. Client `p`
    // uses lease `p` and owner `p{p}`; a lease's keeper is process 1 000 000 + lease.

    fn grant_lease(&mut self, p: u64, ttl_ms: u64, rev: u64) -> u64 {
        let result = json!({"lease": p, "rev": rev});
        self.call(
            p,
            "lease-grant",
            &p.to_string(),
            json!({"ttl_ms": ttl_ms}),
            result,
        )
    }

    /// The lease workload's look-up of `lease`, answered: still alive.
    fn lease_alive(&mut self, lease: u64) -> u64 {
        let key = lease.to_string();
        let args = json!({"lease": lease});
        self.call(lease, "lease-get", &key, args, json!({"remaining_ms": 1}))
    }

    fn keepalive(&mut self, lease: u64, ttl_ms: u64) -> u64 {
        let args = json!({"lease": lease, "ttl_ms": ttl_ms});
        self.call(
            1_000_000 + lease,
            "keepalive",
            &lease.to_string(),
            args,
            json!({}),
        )
    }

    fn acquire_args(p: u64) -> Value {
        json!({"lease": p, "owner": format!("p{p}"), "wait_ms": 2_000, "ttl_ms": TTL_MS})
    }

    fn acquire(&mut self, p: u64, fence: u64) -> u64 {
        let result = json!({"fence": fence, "rev": fence});
        self.call(p, "acquire", LOCK, H::acquire_args(p), result)
    }

    fn release(&mut self, p: u64, fence: u64, rev: u64) -> u64 {
        self.release_leaving(p, fence, rev, 0)
    }

    /// A release that leaves the re-entrant count at `count` (0: the hold ended).
    fn release_leaving(&mut self, p: u64, fence: u64, rev: u64, count: u64) -> u64 {
        let args = json!({"lease": p, "owner": format!("p{p}"), "fence": fence});
        let result = json!({"rev": rev, "count": count});
        self.call(p, "release", LOCK, args, result)
    }

    fn store_read(&mut self, p: u64, fence: u64, value: u64, seq: u64) -> u64 {
        let result = json!({"value": value, "seq": seq});
        self.call(p, "store-read", LOCK, json!({"fence": fence}), result)
    }

    fn store_write_args(fence: u64, value: u64) -> Value {
        json!({"fence": fence, "value": value})
    }
}

// ---------------------------------------------------------------- verdicts and logs

/// The checker's verdict is invalid and it reports an anomaly of `kind`; returns the
/// invoke indices of the operations the first such anomaly names.
/// The operations of the lease checker's `lease-expired-late` anomaly (it must find one).
fn late_sightings(ops: &[Op], config: &CheckConfig) -> Vec<u64> {
    flagged(&session::leases(ops, config), "lease-expired-late")
}

fn flagged(r: &CheckResult, kind: &str) -> Vec<u64> {
    assert_eq!(r.valid, Validity::Invalid, "expected {kind}: {r:#?}");
    let found: Option<&Anomaly> = r.anomalies.iter().find(|a| a.kind == kind);
    found
        .unwrap_or_else(|| panic!("expected an anomaly {kind}: {r:#?}"))
        .ops
        .clone()
}

/// The checker finds nothing wrong (its verdict may be unknown: the history is small).
fn passes(r: &CheckResult) {
    assert_ne!(r.valid, Validity::Invalid, "{r:#?}");
    assert!(r.anomalies.is_empty(), "{r:#?}");
}

fn truth(filter: &str, events: Vec<Value>) -> Truth {
    let mut t = Truth::default();
    t.events.insert(filter.to_owned(), events);
    t
}

/// A put of the server's log.
fn put_logged(revision: u64, key: &str, value: &str) -> Value {
    json!({
        "type": "key_put", "key": key, "value": value, "revision": revision,
        "mod_revision": revision,
    })
}

/// A lock or semaphore event of the server's log (`resource` is `lock` or `semaphore`).
/// Client `who` holds lease `who` and is owner `p{who}`; a grant's fence is its revision.
fn logged(resource: &str, what: &str, revision: u64, who: u64) -> Value {
    json!({
        "type": format!("{resource}_{what}"), "lease_id": who, "owner": format!("p{who}"),
        "revision": revision,
    })
}

fn queued(resource: &str, revision: u64, who: u64) -> Value {
    logged(resource, "queued", revision, who)
}

fn granted(resource: &str, revision: u64, who: u64, enqueued: Option<u64>) -> Value {
    let mut e = logged(resource, "granted", revision, who);
    e["fence"] = json!(revision);
    e["enqueued_revision"] = json!(enqueued);
    e
}

fn released(resource: &str, revision: u64, who: u64, fence: u64) -> Value {
    let mut e = logged(resource, "released", revision, who);
    e["fence"] = json!(fence);
    e
}

/// The clients saw exactly the grants of `log`: one ok `f` on `key` per grant.
fn grants_seen(log: &[Value], f: &str, key: &str) -> Vec<Op> {
    let mut h = H::default();
    for e in log
        .iter()
        .filter(|e| e["type"].as_str().is_some_and(|t| t.ends_with("_granted")))
    {
        let (who, fence) = (
            e["lease_id"].as_u64().expect("a grant names its lease"),
            e["fence"].as_u64().expect("a grant has a fence"),
        );
        let result = json!({"fence": fence, "rev": fence});
        h.call(who, f, key, H::acquire_args(who), result);
    }
    h.ops()
}

// ---------------------------------------------------------------- registers

#[test]
fn stale_read_after_a_completed_write_is_rejected() {
    let story = |value: &str, mod_rev: u64| {
        let mut h = H::default();
        h.write(1, KEY, "1-1", 3);
        let w = h.write(2, KEY, "2-1", 5);
        // Invoked after the write at revision 5 completed; the header is current.
        let r = h.read(3, KEY, value, mod_rev, 5);
        (h.ops(), w, r)
    };
    let (ops, w, r) = story("1-1", 3);
    let a = flagged(&register::revisions(&ops), "stale-read");
    assert_eq!(a, [w, r]);
    flagged(
        &register::linearizable(&ops, &CheckConfig::default()),
        "not-linearizable",
    );

    let (ops, _, _) = story("2-1", 5);
    passes(&register::revisions(&ops));
    passes(&register::linearizable(&ops, &CheckConfig::default()));
}

/// Writes of unknown outcome that no read saw are left out of the search (they can always
/// go last): forty of them at once leave an answer instead of a search that runs out of
/// budget, and a stale read among them is still caught.
#[test]
fn unseen_writes_of_unknown_outcome_do_not_exhaust_the_search() {
    let story = |stale: bool| {
        let mut h = H::default();
        h.write(1, KEY, "1-1", 3);
        for p in 10..50 {
            h.invoke(p, "write", KEY, json!({"value": format!("{p}-1")}));
        }
        h.write(2, KEY, "2-1", 5);
        let r = if stale {
            h.read(3, KEY, "1-1", 3, 5)
        } else {
            h.read(3, KEY, "2-1", 5, 5)
        };
        for p in 10..50 {
            h.info(p, "write", KEY, "timeout");
        }
        (h.ops(), r)
    };
    let config = CheckConfig {
        budget_s: 1,
        ..CheckConfig::default()
    };
    let (ops, _) = story(false);
    passes(&register::linearizable(&ops, &config));
    // The stale read must be found, not given up on: without the pruning the search
    // tries the subsets of the forty writes and runs out of budget.
    let (ops, r) = story(true);
    let result = register::linearizable(&ops, &config);
    assert!(flagged(&result, "not-linearizable").contains(&r));
}

#[test]
fn acknowledged_write_lost_to_a_later_read_is_not_linearizable() {
    // The same read of the first write, either overlapping the second write (it may
    // linearize before it) or invoked after the second write was acknowledged (it may not).
    let story = |read_after_ack: bool| {
        let mut h = H::default();
        h.write(1, KEY, "1-1", 3);
        h.invoke(2, "write", KEY, json!({"value": "2-1"}));
        if read_after_ack {
            h.ok(2, "write", KEY, json!({"rev": 5}));
        }
        let r = h.invoke(3, "read", KEY, Value::Null);
        h.ok(
            3,
            "read",
            KEY,
            json!({"value": "1-1", "mod_rev": 3, "rev": 3}),
        );
        if !read_after_ack {
            h.ok(2, "write", KEY, json!({"rev": 5}));
        }
        (h.ops(), r)
    };
    let (ops, r) = story(true);
    let result = register::linearizable(&ops, &CheckConfig::default());
    assert!(flagged(&result, "not-linearizable").contains(&r));

    let (ops, _) = story(false);
    passes(&register::linearizable(&ops, &CheckConfig::default()));
    passes(&register::revisions(&ops));
}

#[test]
fn two_successful_cas_from_the_same_revision_are_not_linearizable() {
    // Two overlapping CAS expect revision 1; whichever goes first, the other must fail.
    let story = |second: Result<u64, &str>| {
        let mut h = H::default();
        h.write(1, KEY, "1-1", 1);
        h.invoke(2, "cas", KEY, H::cas_args("2-1", 1));
        h.invoke(3, "cas", KEY, H::cas_args("3-1", 1));
        h.ok(2, "cas", KEY, json!({"rev": 2}));
        match second {
            Ok(rev) => h.ok(3, "cas", KEY, json!({"rev": rev})),
            Err(code) => h.fail(3, "cas", KEY, code),
        };
        h.ops()
    };
    let ops = story(Ok(3));
    flagged(
        &register::linearizable(&ops, &CheckConfig::default()),
        "not-linearizable",
    );

    let ops = story(Err("cas_failed"));
    passes(&register::linearizable(&ops, &CheckConfig::default()));
    passes(&register::revisions(&ops));
}

#[test]
fn read_of_a_value_nobody_wrote_is_a_phantom() {
    let story = |value: &str| {
        let mut h = H::default();
        h.write(1, KEY, "1-1", 3);
        let r = h.read(2, KEY, value, 3, 3);
        (h.ops(), r)
    };
    let (ops, r) = story("9-9");
    assert_eq!(flagged(&register::revisions(&ops), "phantom-read"), [r]);
    flagged(
        &register::linearizable(&ops, &CheckConfig::default()),
        "not-linearizable",
    );

    let (ops, _) = story("1-1");
    passes(&register::revisions(&ops));
    passes(&register::linearizable(&ops, &CheckConfig::default()));
}

#[test]
fn read_of_a_refused_write_value_is_a_phantom() {
    // The CAS expects the current revision; it is refused before proposing (`fail`: it
    // definitely did not happen) or times out (`info`: it may have happened).
    let story = |outcome: Kind| {
        let mut h = H::default();
        h.write(1, KEY, "1-1", 3);
        h.invoke(2, "cas", KEY, H::cas_args("2-1", 3));
        match outcome {
            Kind::Fail => h.fail(2, "cas", KEY, "no_leader"),
            _ => h.info(2, "cas", KEY, "timeout"),
        };
        let r = h.read(3, KEY, "2-1", 4, 4);
        (h.ops(), r)
    };
    let (ops, r) = story(Kind::Fail);
    flagged(
        &register::linearizable(&ops, &CheckConfig::default()),
        "not-linearizable",
    );
    assert_eq!(flagged(&register::revisions(&ops), "phantom-read"), [r]);

    let (ops, _) = story(Kind::Info);
    passes(&register::linearizable(&ops, &CheckConfig::default()));
    passes(&register::revisions(&ops));
}

#[test]
fn unknown_write_once_seen_cannot_be_unseen() {
    // Process 2's write times out (info): it may take effect at any time, or never.
    let story = |first: (&str, u64), second: (&str, u64)| {
        let mut h = H::default();
        h.write(1, KEY, "1-1", 1);
        h.invoke(2, "write", KEY, json!({"value": "2-1"}));
        h.info(2, "write", KEY, "timeout");
        h.read(3, KEY, first.0, first.1, first.1);
        let r = h.read(1, KEY, second.0, second.1, second.1);
        (h.ops(), r)
    };
    let (ops, r) = story(("2-1", 2), ("1-1", 1));
    let result = register::linearizable(&ops, &CheckConfig::default());
    assert!(flagged(&result, "not-linearizable").contains(&r));

    // Seen twice, or never seen: both are fine.
    for (first, second) in [(("2-1", 2), ("2-1", 2)), (("1-1", 1), ("1-1", 1))] {
        let (ops, _) = story(first, second);
        passes(&register::linearizable(&ops, &CheckConfig::default()));
        passes(&register::revisions(&ops));
    }
}

#[test]
fn acknowledged_write_missing_after_killing_every_node_is_lost() {
    let story = |kvs: Value| {
        let mut h = H::default();
        h.write(1, KEY, "1-1", 2);
        let w = h.write(2, KEY, "2-1", 3);
        h.write(3, "r/0-1", "3-1", 4);
        h.nemesis("kill-all-start");
        h.nemesis("kill-all-stop");
        let result = json!({"kvs": kvs, "more": false, "rev": 4});
        let f = h.call(9, "final-read", "r/", Value::Null, result);
        let log = [(2, KEY, "1-1"), (3, KEY, "2-1"), (4, "r/0-1", "3-1")]
            .map(|(rev, key, value)| put_logged(rev, key, value))
            .to_vec();
        (h.ops(), truth("prefix=r/", log), w, f)
    };
    let kv =
        |key: &str, value: &str, rev: u64| json!({"key": key, "value": value, "mod_revision": rev});
    // The key is gone, or rolled back to the write before the acknowledged one.
    for kvs in [
        json!([kv("r/0-1", "3-1", 4)]),
        json!([kv(KEY, "1-1", 2), kv("r/0-1", "3-1", 4)]),
    ] {
        let (ops, truth, w, f) = story(kvs);
        let a = flagged(&register::durability(&ops, &truth), "lost-write");
        assert_eq!(a, [w, f]);
    }

    let (ops, truth, _, _) = story(json!([kv(KEY, "2-1", 3), kv("r/0-1", "3-1", 4)]));
    let result = register::durability(&ops, &truth);
    passes(&result);
    assert_eq!(result.valid, Validity::Valid);
    passes(&register::linearizable(&ops, &CheckConfig::default()));
}

// ---------------------------------------------------------------- fences

#[test]
fn two_grants_with_the_same_fence_are_a_duplicate_revision() {
    let story = |second_fence: u64| {
        let mut h = H::default();
        let a = h.acquire(1, 7);
        h.release(1, 7, 8);
        let b = h.acquire(2, second_fence);
        (h.ops(), a, b)
    };
    let (ops, a, b) = story(7);
    let found = flagged(&register::revisions(&ops), "duplicate-revision");
    assert_eq!(found, [a, b]);

    let (ops, _, _) = story(9);
    passes(&register::revisions(&ops));
}

#[test]
fn a_fence_granted_again_after_its_hold_ended_is_reused() {
    // Holder 1 takes fence 7, then acquires again: re-entry while it holds (or still holds
    // after a release that left a count), but a fence handed out twice once the release
    // ended the hold.
    let story = |count_left: Option<u64>| {
        let mut h = H::default();
        let first = h.acquire(1, 7);
        let end = count_left.map(|count| h.release_leaving(1, 7, 8, count));
        // A re-entry is a command of its own: it answers with the fence it holds and a
        // later revision.
        let again = h.call(
            1,
            "acquire",
            LOCK,
            H::acquire_args(1),
            json!({"fence": 7, "rev": 9}),
        );
        (h.ops(), first, end, again)
    };
    let (ops, first, end, again) = story(Some(0));
    let found = flagged(&register::revisions(&ops), "fence-reused");
    assert_eq!(found, [first, end.expect("a release"), again]);

    for count_left in [None, Some(1)] {
        let (ops, _, _, _) = story(count_left);
        passes(&register::revisions(&ops));
    }
}

/// One lease end frees two locks and grants both waiters in one revision: a shared fence
/// across different locks is the spec's handoff rule (`docs/decisions.md` #46); within one
/// lock it is a double grant, and a write never shares a revision with a grant.
#[test]
fn grants_of_different_locks_may_share_a_revision_but_nothing_else_may() {
    let grant = |h: &mut H, p: u64, lock: &str| {
        let args = H::acquire_args(p);
        h.call(p, "acquire", lock, args, json!({"fence": 20, "rev": 20}))
    };
    // Both waited in their queues before the lease ended: the calls overlap.
    let mut h = H::default();
    h.invoke(1, "acquire", "lock-0", H::acquire_args(1));
    h.invoke(2, "acquire", "lock-1", H::acquire_args(2));
    h.ok(1, "acquire", "lock-0", json!({"fence": 20, "rev": 20}));
    h.ok(2, "acquire", "lock-1", json!({"fence": 20, "rev": 20}));
    passes(&register::revisions(&h.ops()));

    let mut h = H::default();
    let a = grant(&mut h, 1, "lock-0");
    let b = grant(&mut h, 2, "lock-0");
    assert_eq!(
        flagged(&register::revisions(&h.ops()), "duplicate-revision"),
        [a, b]
    );

    let mut h = H::default();
    let a = grant(&mut h, 1, "lock-0");
    let b = h.call(2, "write", KEY, json!({"value": "2-1"}), json!({"rev": 20}));
    assert_eq!(
        flagged(&register::revisions(&h.ops()), "duplicate-revision"),
        [a, b]
    );
}

#[test]
fn fence_lower_than_one_granted_before_is_out_of_order() {
    let story = |second_fence: u64| {
        let mut h = H::default();
        let a = h.acquire(1, 10);
        let b = h.acquire(2, second_fence);
        (h.ops(), a, b)
    };
    let (ops, a, b) = story(8);
    let found = flagged(&register::revisions(&ops), "revision-order");
    assert_eq!(found, [a, b]);

    let (ops, _, _) = story(12);
    passes(&register::revisions(&ops));
}

#[test]
fn stale_holder_write_accepted_by_the_store_is_a_lost_update() {
    // Holder 1 reads the store, pauses past its TTL (no keepalive), holder 2 takes the
    // lock after the lease could have expired and increments; then holder 1 wakes and
    // writes its stale increment with fence 3, which the store must refuse.
    let story = |stale_write_accepted: bool| {
        let mut h = H::default();
        h.grant_lease(1, TTL_MS, 1);
        h.grant_lease(2, TTL_MS, 2);
        h.acquire(1, 3);
        h.store_read(1, 3, 0, 1);
        h.wait_ms(TTL_MS + 500);
        h.acquire(2, 4);
        h.store_read(2, 4, 0, 2);
        let args = H::store_write_args(4, 1);
        h.call(2, "store-write", LOCK, args, json!({"seq": 3}));
        h.release(2, 4, 5);
        let args = H::store_write_args(3, 1);
        let stale = if stale_write_accepted {
            h.call(1, "store-write", LOCK, args, json!({"seq": 4}))
        } else {
            h.refused(1, "store-write", LOCK, args, STALE)
        };
        let args = json!({"lease": 1, "owner": "p1", "fence": 3});
        h.refused(1, "release", LOCK, args, "not_holder");
        (h.ops(), stale)
    };
    let (ops, stale) = story(true);
    assert_eq!(
        flagged(&lock::fencing(&ops, &CheckConfig::default()), "lost-update"),
        [stale]
    );

    let (ops, _) = story(false);
    passes(&lock::fencing(&ops, &CheckConfig::default()));
    passes(&register::revisions(&ops));
}

/// How holder 1's tenure ends in the early-grant story.
#[derive(Clone, Copy, PartialEq)]
enum Tenure {
    /// It never releases; holder 2 is granted within a TTL of its last keepalive.
    Held,
    /// It releases before holder 2 is granted.
    Released,
    /// Its release is refused (`not_holder` for a wrong fence): it still holds.
    RefusedRelease,
    /// It never releases, but its lease could have expired before holder 2 is granted.
    Expired,
}

#[test]
fn grant_while_the_last_holder_may_still_hold_is_early() {
    let story = |tenure: Tenure| {
        let mut h = H::default();
        h.grant_lease(1, TTL_MS, 1);
        h.grant_lease(2, TTL_MS, 2);
        let a = h.acquire(1, 3);
        h.wait_ms(1_000);
        let keep = h.keepalive(1, TTL_MS);
        let b = h.invoke(2, "acquire", LOCK, H::acquire_args(2));
        match tenure {
            Tenure::Held => {}
            Tenure::Released => {
                h.release(1, 3, 4);
            }
            Tenure::RefusedRelease => {
                let args = json!({"lease": 1, "owner": "p1", "fence": 2});
                h.refused(1, "release", LOCK, args, "not_holder");
            }
            Tenure::Expired => h.wait_ms(TTL_MS),
        }
        h.wait_ms(1_000);
        let b_done = h.ok(2, "acquire", LOCK, json!({"fence": 5, "rev": 5}));
        let within_ttl = h.time(b_done) < h.time(keep) + TTL_MS * MS;
        assert_eq!(within_ttl, tenure != Tenure::Expired);
        (h.ops(), a, b)
    };
    for tenure in [Tenure::Held, Tenure::RefusedRelease] {
        let (ops, a, b) = story(tenure);
        let found = flagged(&lock::fencing(&ops, &CheckConfig::default()), "early-grant");
        assert_eq!(found, [a, b]);
    }

    for tenure in [Tenure::Released, Tenure::Expired] {
        let (ops, _, _) = story(tenure);
        passes(&lock::fencing(&ops, &CheckConfig::default()));
        passes(&register::revisions(&ops));
    }
}

#[test]
fn try_lock_granted_to_a_second_owner_without_a_release_is_not_linearizable() {
    let story = |release_between: bool| {
        let mut h = H::default();
        let args = |p: u64| json!({"lease": p, "owner": format!("p{p}")});
        h.call(
            1,
            "try-acquire",
            "try-0",
            args(1),
            json!({"fence": 5, "rev": 5}),
        );
        if release_between {
            let release = json!({"lease": 1, "owner": "p1", "fence": 5});
            h.call(1, "try-release", "try-0", release, json!({"rev": 6}));
        }
        h.call(
            2,
            "try-acquire",
            "try-0",
            args(2),
            json!({"fence": 7, "rev": 7}),
        );
        h.ops()
    };
    let ops = story(false);
    flagged(
        &lock::trylock(&ops, &CheckConfig::default()),
        "trylock-not-linearizable",
    );

    let ops = story(true);
    passes(&lock::trylock(&ops, &CheckConfig::default()));
    passes(&register::revisions(&ops));
}

#[test]
fn try_lock_holders_are_told_apart_by_lease_as_well_as_owner_name() {
    // p1 holds try-0 under lease 1; its release and its revoke never reach a leader, so it
    // gives the lease up (still holding) and takes lease 2 under the same name. The server
    // refuses lease 2 (another holder); the same name under lease 1 would have re-entered.
    let story = |second_lease: u64| {
        let mut h = H::default();
        let args = |lease: u64| json!({"lease": lease, "owner": "p1"});
        h.call(
            1,
            "try-acquire",
            "try-0",
            args(1),
            json!({"fence": 5, "rev": 5}),
        );
        let release = json!({"lease": 1, "owner": "p1", "fence": 5});
        h.refused(1, "try-release", "try-0", release, "connect");
        h.refused(1, "try-revoke", "1", args(1), "connect");
        h.refused(1, "try-acquire", "try-0", args(second_lease), "lock_held");
        h.ops()
    };
    passes(&lock::trylock(&story(2), &CheckConfig::default()));
    flagged(
        &lock::trylock(&story(1), &CheckConfig::default()),
        "trylock-not-linearizable",
    );
}

// ---------------------------------------------------------------- queues, semaphores, elections

#[test]
fn grant_to_a_waiter_behind_the_head_of_the_queue_breaks_fifo() {
    // Client 1 holds; 2 then 3 queue; 1 releases and the lock passes to `next`.
    let story = |next: u64, enqueued: u64| {
        let log = vec![
            granted("lock", 10, 1, None),
            queued("lock", 11, 2),
            queued("lock", 12, 3),
            released("lock", 13, 1, 10),
            granted("lock", 13, next, Some(enqueued)),
        ];
        (
            grants_seen(&log, "acquire", LOCK),
            truth("lock=lock-0", log),
        )
    };
    let (ops, truth) = story(3, 12);
    flagged(&lock::queues(&ops, &truth), "fifo");

    let (ops, truth) = story(2, 11);
    let result = lock::queues(&ops, &truth);
    passes(&result);
    assert_eq!(result.valid, Validity::Valid);
}

#[test]
fn immediate_grant_while_others_wait_is_barging() {
    // Client 1 holds; 2 queues; 1 releases and the lock goes to `enqueued` (2 from the
    // queue) or, with `None`, straight to newcomer 3.
    let story = |next: u64, enqueued: Option<u64>| {
        let log = vec![
            granted("lock", 10, 1, None),
            queued("lock", 11, 2),
            released("lock", 12, 1, 10),
            granted("lock", 13, next, enqueued),
        ];
        (
            grants_seen(&log, "acquire", LOCK),
            truth("lock=lock-0", log),
        )
    };
    let (ops, truth) = story(3, None);
    flagged(&lock::queues(&ops, &truth), "barging");

    let (ops, truth) = story(2, Some(11));
    let result = lock::queues(&ops, &truth);
    passes(&result);
    assert_eq!(result.valid, Validity::Valid);
}

#[test]
fn immediate_grant_while_others_wait_is_barging_for_semaphores_and_elections_too() {
    for (resource, filter, f, key) in [
        (
            "semaphore",
            format!("semaphore={}", SEMAPHORE.0),
            "sem-acquire",
            SEMAPHORE.0,
        ),
        (
            "election",
            "election=elect-0".to_owned(),
            "campaign",
            "elect-0",
        ),
    ] {
        // 1 holds (a permit or the leadership); 2 queues; 1 releases and the resource goes
        // to the queued 2, or straight to newcomer 3.
        let story = |next: u64, enqueued: Option<u64>| {
            let log = vec![
                granted(resource, 10, 1, None),
                queued(resource, 11, 2),
                released(resource, 12, 1, 10),
                granted(resource, 13, next, enqueued),
            ];
            (grants_seen(&log, f, key), truth(&filter, log))
        };
        let (ops, truth) = story(3, None);
        flagged(&lock::queues(&ops, &truth), "barging");

        let (ops, truth) = story(2, Some(11));
        passes(&lock::queues(&ops, &truth));
    }
}

#[test]
fn a_second_exclusive_holder_in_the_log_is_a_double_holder() {
    // 1 holds; 2 is granted at once, with or without 1 releasing first (or both shared).
    let story = |release_first: bool, mode: &str| {
        let mut first = granted("lock", 10, 1, None);
        first["mode"] = json!(mode);
        let mut log = vec![first];
        if release_first {
            log.push(released("lock", 11, 1, 10));
        }
        let mut second = granted("lock", 12, 2, None);
        second["mode"] = json!(mode);
        log.push(second);
        (
            grants_seen(&log, "acquire", LOCK),
            truth("lock=lock-0", log),
        )
    };
    let (ops, truth) = story(false, "exclusive");
    flagged(&lock::queues(&ops, &truth), "double-holder");

    for (release_first, mode) in [(true, "exclusive"), (false, "shared")] {
        let (ops, truth) = story(release_first, mode);
        passes(&lock::queues(&ops, &truth));
    }
}

#[test]
fn semaphore_with_more_holders_than_permits_is_over_limit() {
    let (name, limit) = SEMAPHORE;
    let filter = format!("semaphore={name}");
    // `limit` holders, then one more, with or without one of them releasing first.
    let story = |release_first: bool| {
        let mut log: Vec<Value> = (1..=u64::from(limit))
            .map(|who| granted("semaphore", 10 + who, who, None))
            .collect();
        let mut rev = 20;
        if release_first {
            log.push(released("semaphore", rev, 1, 11));
            rev += 1;
        }
        log.push(granted("semaphore", rev, 9, None));
        (grants_seen(&log, "sem-acquire", name), truth(&filter, log))
    };
    let (ops, truth) = story(false);
    flagged(&lock::semaphore(&ops, &truth), "over-limit");

    let (ops, truth) = story(true);
    let result = lock::semaphore(&ops, &truth);
    passes(&result);
    assert_eq!(result.valid, Validity::Valid);
}

#[test]
fn a_second_leader_before_the_first_could_have_lost_its_lease_is_two_at_once() {
    // Lease 5 wins fence 20; lease 6 wins fence 22 while lease 5 was kept alive, unless 5
    // resigned first.
    let story = |resign_first: bool| {
        let mut h = H::default();
        let args = |p: u64| json!({"lease": p, "value": format!("p{p}-1"), "ttl_ms": TTL_MS});
        let won = |fence: u64| json!({"fence": fence, "rev": fence});
        let a = h.call(5, "campaign", "elect-0", args(5), won(20));
        h.keepalive(5, TTL_MS);
        if resign_first {
            let resign = json!({"lease": 5, "fence": 20});
            h.call(
                5,
                "resign",
                "elect-0",
                resign,
                json!({"rev": 21, "count": 0}),
            );
        }
        let b = h.call(6, "campaign", "elect-0", args(6), won(22));
        (h.ops(), a, b)
    };
    let (ops, a, b) = story(false);
    assert_eq!(
        flagged(
            &lock::election(&ops, &CheckConfig::default()),
            "two-leaders-at-once"
        ),
        [a, b]
    );

    let (ops, _, _) = story(true);
    passes(&lock::election(&ops, &CheckConfig::default()));
}

#[test]
fn one_fence_naming_two_leases_is_two_leaders() {
    let story = |observed_lease: u64| {
        let mut h = H::default();
        let args = json!({"lease": 5, "value": "p5-1"});
        let c = h.call(
            5,
            "campaign",
            "elect-0",
            args,
            json!({"fence": 20, "rev": 20}),
        );
        let seen = json!({"lease": observed_lease, "fence": 20, "value": "p5-1", "rev": 20});
        let o = h.call(2, "observe", "elect-0", Value::Null, seen);
        (h.ops(), c, o)
    };
    let (ops, c, o) = story(6);
    assert_eq!(
        flagged(
            &lock::election(&ops, &CheckConfig::default()),
            "two-leaders"
        ),
        [c, o]
    );

    let (ops, _, _) = story(5);
    passes(&lock::election(&ops, &CheckConfig::default()));
}

// ---------------------------------------------------------------- leases

#[test]
fn lease_gone_before_its_ttl_after_a_keepalive_expired_early() {
    let story = |gone_after_ms: u64| {
        let mut h = H::default();
        let grant = h.grant_lease(7, TTL_MS, 1);
        h.wait_ms(1_000);
        let keep = h.keepalive(7, TTL_MS);
        h.wait_ms(gone_after_ms);
        let args = json!({"lease": 7, "ttl_ms": TTL_MS});
        let gone = h.refused(1_000_007, "keepalive", "7", args, "lease_not_found");
        let early = h.time(gone + 1) < h.time(keep) + TTL_MS * MS;
        assert_eq!(early, gone_after_ms < TTL_MS);
        (h.ops(), grant, gone)
    };
    let (ops, grant, gone) = story(1_000);
    let config = CheckConfig::default();
    let found = flagged(&session::leases(&ops, &config), "lease-expired-early");
    assert_eq!(found, [grant, gone]);

    let (ops, _, _) = story(TTL_MS + 500);
    let result = session::leases(&ops, &config);
    passes(&result);
    assert_eq!(result.valid, Validity::Valid);
}

/// With clock drift allowed (spec §2), a lease may end TTL / (1 + drift) after its
/// renewal: gone at 0.96 × TTL is early for real clocks, within a 5 % drift, and early
/// again at 0.9 × TTL.
#[test]
fn the_early_bound_allows_the_stated_clock_drift_and_no_more() {
    let story = |gone_after_ms: u64| {
        let mut h = H::default();
        h.grant_lease(7, TTL_MS, 1);
        let keep = h.keepalive(7, TTL_MS);
        let ends = h.time(keep) + gone_after_ms * MS;
        let args = json!({"lease": 7, "ttl_ms": TTL_MS});
        // The lookup is invoked and answered right at `ends`.
        h.wait_ms(gone_after_ms.saturating_sub(2));
        let gone = h.refused(1_000_007, "keepalive", "7", args, "lease_not_found");
        assert!(h.time(gone + 1) <= ends + MS);
        h.ops()
    };
    let drift = CheckConfig {
        clock_drift: 0.05,
        ..CheckConfig::default()
    };
    let at = |fraction: f64| story((TTL_MS as f64 * fraction) as u64);
    let early = |ops: &[Op], config: &CheckConfig| {
        session::leases(ops, config)
            .anomalies
            .iter()
            .any(|a| a.kind == "lease-expired-early")
    };
    assert!(early(&at(0.96), &CheckConfig::default()));
    assert!(!early(&at(0.96), &drift));
    assert!(early(&at(0.90), &drift));
}

#[test]
fn lease_alive_long_after_its_keepalives_stopped_expired_late() {
    const TTL: u64 = 2_000;
    let config = CheckConfig::default();
    let bound_ms = config.lease_late_bound_ms(TTL);
    // Keepalives stop; the lease is looked up `alive_at_ms` later, then found gone a TTL
    // after that.
    let story = |alive_at_ms: u64| {
        let mut h = H::default();
        let grant = h.grant_lease(8, TTL, 1);
        h.keepalive(8, TTL);
        h.wait_ms(alive_at_ms);
        let get = h.lease_alive(8);
        h.wait_ms(TTL);
        h.refused(8, "lease-get", "8", json!({"lease": 8}), "lease_not_found");
        (h.ops(), grant, get)
    };
    let (ops, grant, get) = story(bound_ms + 1_000);
    let found = late_sightings(&ops, &config);
    assert_eq!(found, [grant, get]);

    let (ops, _, _) = story(TTL - 500);
    let result = session::leases(&ops, &config);
    passes(&result);
    assert_eq!(result.valid, Validity::Valid);
}

/// No clock measures a lease while a majority is down: the late bound grows by the outage,
/// counted until the first request that succeeds after the restart.
#[test]
fn the_late_bound_of_a_lease_leaves_out_a_whole_cluster_outage() {
    const TTL: u64 = 2_000;
    let config = CheckConfig::default();
    let story = |alive_after_restart_ms: u64| {
        let mut h = H::default();
        let grant = h.grant_lease(8, TTL, 1);
        h.keepalive(8, TTL);
        h.wait_ms(1_000);
        h.nemesis("kill-start");
        h.wait_ms(20_000);
        h.nemesis("kill-stop");
        // Elections take a while; the first answer after the restart is this write.
        h.wait_ms(5_000);
        h.call(9, "write", KEY, json!({"value": "9-1"}), json!({"rev": 40}));
        h.wait_ms(alive_after_restart_ms);
        let get = h.lease_alive(8);
        (h.ops(), grant, get)
    };
    // A new leader starts the lease afresh: alive a TTL after the cluster is back is fine.
    let (ops, _, _) = story(TTL - 500);
    let result = session::leases(&ops, &config);
    passes(&result);
    // Alive longer than the whole bound after the cluster is back is not.
    let (ops, grant, get) = story(config.lease_late_bound_ms(TTL) + 1_000);
    let found = late_sightings(&ops, &config);
    assert_eq!(found, [grant, get]);
}

/// A node that restarted or caught up through a snapshot counts the leases it knows from
/// then (spec §2): after a fault ends, a lease may live `ttl + election timeout + margin`
/// past it, even beyond the bound from its last keepalive, and no longer.
#[test]
fn the_late_bound_of_a_lease_allows_a_restart_or_rejoin_and_no_more() {
    const TTL: u64 = 2_000;
    let config = CheckConfig::default();
    let bound = config.lease_late_bound_ms(TTL);
    let rejoin = config.lease_rejoin_bound_ms(TTL);
    let story = |alive_at_ms: u64| {
        let mut h = H::default();
        let grant = h.grant_lease(8, TTL, 1);
        h.keepalive(8, TTL);
        h.wait_ms(3_000);
        h.nemesis("partition-start");
        h.wait_ms(2_000);
        h.nemesis("partition-stop");
        h.wait_ms(alive_at_ms - 5_000);
        let get = h.lease_alive(8);
        (h.ops(), grant, get)
    };
    // Past the bound from the keepalive, within the rejoin bound from the heal.
    assert!(5_000 + rejoin > bound + 500);
    let (ops, _, _) = story(bound + 500);
    passes(&session::leases(&ops, &config));
    // Past both.
    let (ops, grant, get) = story(5_000 + rejoin + 500);
    let found = late_sightings(&ops, &config);
    assert_eq!(found, [grant, get]);
}

/// An expiry is a commit, so a stretch in which the cluster commits nothing (whatever its
/// cause) does not count against the late bound; while other writes commit, it does.
#[test]
fn the_late_bound_of_a_lease_leaves_out_a_stall_and_nothing_else() {
    const TTL: u64 = 2_000;
    let config = CheckConfig::default();
    let bound = config.lease_late_bound_ms(TTL);
    // Writes every 500 ms for `total_ms` after the keepalive, except none for `stall_ms`
    // from 1 s in; the lease is looked up alive at the end.
    let story = |total_ms: u64, stall_ms: u64| {
        let mut h = H::default();
        let grant = h.grant_lease(8, TTL, 1);
        h.keepalive(8, TTL);
        let mut elapsed = 0;
        while elapsed < total_ms {
            let pause = if elapsed == 1_000 { stall_ms } else { 500 };
            h.write_after(pause);
            elapsed += pause;
        }
        let get = h.lease_alive(8);
        (h.ops(), grant, get)
    };
    // Alive past the bound while writes commit all along: late.
    let (ops, grant, get) = story(bound + 1_500, 500);
    let found = late_sightings(&ops, &config);
    assert_eq!(found, [grant, get]);
    // The same, with 10 s in which nothing committed: within the bound of committing time.
    let (ops, _, _) = story(bound + 1_500, 10_000);
    let result = session::leases(&ops, &config);
    passes(&result);
    assert_eq!(result.stats["stalls"], 1);
    // Past the bound even leaving the stall out: late again.
    let (ops, grant, get) = story(bound + 12_000, 10_000);
    let found = late_sightings(&ops, &config);
    assert_eq!(found, [grant, get]);
}

/// A fault window that began while the keepalives still ran (found checking a long run:
/// the debug build overflowed) covers a sighting inside it like any other window.
#[test]
fn a_window_that_began_before_the_keepalives_stopped_covers_a_sighting_inside_it() {
    const TTL: u64 = 2_000;
    let config = CheckConfig::default();
    let bound = config.lease_late_bound_ms(TTL);
    let mut h = H::default();
    h.grant_lease(8, TTL, 1);
    h.write_after(100);
    h.nemesis_on("kill-start", &["n1"]);
    h.keepalive(8, TTL);
    // A stall that spans the keepalive, then writes again.
    h.write_after(2_000);
    for _ in 0..bound / 500 {
        h.write_after(500);
    }
    h.lease_alive(8);
    h.wait_ms(300);
    h.nemesis_on("kill-stop", &["n1"]);
    passes(&session::leases(&h.ops(), &config));
}

/// Nodes restart somewhere inside a kill window, before the harness records its end: a
/// lease seen alive then, after the restart, is covered like one seen just after the end.
#[test]
fn a_lease_seen_alive_inside_the_window_that_restarted_its_nodes_is_covered() {
    const TTL: u64 = 2_000;
    let config = CheckConfig::default();
    let bound = config.lease_late_bound_ms(TTL);
    let story = |kill_at_ms: u64| {
        let mut h = H::default();
        let grant = h.grant_lease(8, TTL, 1);
        h.keepalive(8, TTL);
        for _ in 0..kill_at_ms / 500 {
            h.write_after(500);
        }
        // One node of three: no outage, but it restarts inside the window.
        h.nemesis_on("kill-start", &["n1"]);
        h.wait_ms(4_000);
        let get = h.lease_alive(8);
        h.wait_ms(300);
        h.nemesis_on("kill-stop", &["n1"]);
        (h.ops(), grant, get)
    };
    // Killed before the lease was overdue, seen alive past the bound inside the window.
    let (ops, _, _) = story(bound - 1_000);
    passes(&session::leases(&ops, &config));
    // Killed when the lease was already overdue: the restart excuses nothing.
    let (ops, grant, get) = story(bound + 5_000);
    let found = late_sightings(&ops, &config);
    assert_eq!(found, [grant, get]);
}

// ---------------------------------------------------------------- watches

/// Five writes to two keys (revisions 1 to 5), the server's log of them, and one watch
/// opened at `start` that delivered the logged events of `delivered`, in that order.
fn watch_story(start: u64, delivered: &[u64]) -> (Vec<Op>, Truth, u64) {
    let mut h = H::default();
    let mut log = Vec::new();
    for rev in 1..=5 {
        let (key, value) = (format!("r/0-{}", rev % 2), format!("1-{rev}"));
        h.write(1, &key, &value, rev);
        log.push(put_logged(rev, &key, &value));
    }
    let events: Vec<Value> = delivered
        .iter()
        .map(|r| log[*r as usize - 1].clone())
        .collect();
    let args = json!({"prefix": "r/", "start_revision": start});
    let result = json!({"events": events, "ended": null});
    let w = h.call(2, "watch", "r/", args, result);
    (h.ops(), truth("prefix=r/", log), w)
}

/// The watch story with `delivered` is flagged `kind` against that very watch; the same
/// watch delivering every event from `start` passes.
fn watch_flags(start: u64, delivered: &[u64], kind: &str) {
    let (ops, truth, w) = watch_story(start, delivered);
    let found = flagged(&watch::watches(&ops, &truth), kind);
    assert_eq!(found, [w]);

    let all: Vec<u64> = (start..=5).collect();
    let (ops, truth, _) = watch_story(start, &all);
    let result = watch::watches(&ops, &truth);
    passes(&result);
    assert_eq!(result.valid, Validity::Valid);
}

#[test]
fn watch_that_skips_a_logged_revision_has_a_gap() {
    watch_flags(1, &[1, 2, 4, 5], "gap");
}

#[test]
fn watch_that_delivers_a_revision_twice_has_a_duplicate() {
    watch_flags(1, &[1, 2, 2, 3], "duplicate-event");
}

#[test]
fn watch_that_delivers_a_revision_after_a_later_one_is_out_of_order() {
    watch_flags(1, &[1, 3, 2, 4], "out-of-order-event");
}

#[test]
fn watch_resumed_at_a_revision_must_start_there() {
    // Replaying the revision before the start, or skipping the start revision.
    watch_flags(3, &[2, 3, 4, 5], "resume");
    watch_flags(3, &[4, 5], "resume");
}

/// A watch refused with 410 `compacted` names the oldest revision held; that must be
/// after the start it refused, and the watch resumed there must start at the log's first
/// event from it.
#[test]
fn a_compacted_watch_resumes_at_the_oldest_revision_held() {
    let story = |refused_start: u64, oldest: u64, resumed: &[u64]| {
        let (mut ops, truth, _) = watch_story(oldest, resumed);
        let mut h = H::default();
        h.wait_ms(100_000);
        let args = json!({"prefix": "r/", "start_revision": refused_start});
        let result = json!({"events": [], "ended": "compacted", "oldest_revision": oldest});
        let refused = h.call(3, "watch", "r/", args, result);
        ops.extend(h.ops());
        (ops, truth, refused)
    };
    let (ops, truth, _) = story(1, 3, &[3, 4, 5]);
    let result = watch::watches(&ops, &truth);
    passes(&result);
    assert_eq!(result.stats["compacted"], 1);
    // The server claims the start is compacted although it holds it.
    let (ops, truth, _) = story(3, 3, &[3, 4, 5]);
    let result = watch::watches(&ops, &truth);
    assert!(
        result
            .anomalies
            .iter()
            .any(|a| a.kind == "false-compaction"),
        "{:?}",
        result.anomalies
    );
    // Resumed at the oldest revision, but the first event is a later one.
    let (ops, truth, _) = story(1, 3, &[4, 5]);
    let result = watch::watches(&ops, &truth);
    assert!(result.anomalies.iter().any(|a| a.kind == "resume"));
}

#[test]
fn logged_put_of_a_refused_write_is_a_phantom_event() {
    // The server's log, and a watch, show a put of a value whose write was refused
    // before proposing (`fail`), or timed out (`info`: it may have happened).
    let story = |outcome: Kind| {
        let mut h = H::default();
        h.write(1, KEY, "1-1", 1);
        h.invoke(2, "write", KEY, json!({"value": "2-1"}));
        match outcome {
            Kind::Fail => h.fail(2, "write", KEY, "no_leader"),
            _ => h.info(2, "write", KEY, "timeout"),
        };
        let log = vec![put_logged(1, KEY, "1-1"), put_logged(2, KEY, "2-1")];
        let args = json!({"prefix": "r/", "start_revision": 1});
        let result = json!({"events": log.clone(), "ended": null});
        h.call(3, "watch", "r/", args, result);
        (h.ops(), truth("prefix=r/", log))
    };
    let (ops, truth) = story(Kind::Fail);
    flagged(&watch::watches(&ops, &truth), "phantom-event");

    let (ops, truth) = story(Kind::Info);
    let result = watch::watches(&ops, &truth);
    passes(&result);
    assert_eq!(result.valid, Validity::Valid);
}

// ---------------------------------------------------------------- histories

#[test]
fn malformed_histories_are_refused_before_any_checker() {
    let mut h = H::default();
    h.invoke(1, "write", KEY, json!({"value": "1-1"}));
    h.invoke(1, "read", KEY, Value::Null);
    let double = HistoryError::DoubleInvoke {
        process: Process::Client(1),
        i: 1,
    };
    assert_eq!(pair(&h.events), Err(double));

    let mut h = H::default();
    h.write(1, KEY, "1-1", 1);
    let orphan = h.ok(
        2,
        "read",
        KEY,
        json!({"value": "1-1", "mod_rev": 1, "rev": 1}),
    );
    assert_eq!(pair(&h.events), Err(HistoryError::Orphan(orphan)));
}

/// A read of the sequential register history, for splicing stale values into it.
struct ReadAt {
    /// Index of its ok event.
    ok_event: usize,
    /// The value's revision and the header revision it saw.
    rev: u64,
    /// Every `(value, revision)` overwritten before it.
    overwritten: Vec<(String, u64)>,
}

/// 30 sequential operations on one key by 3 processes: 18 writes with unique values and
/// increasing revisions, 12 reads of the current value.
fn sequential_register() -> (H, Vec<ReadAt>) {
    let mut h = H::default();
    let mut written: Vec<(String, u64)> = Vec::new();
    let mut reads = Vec::new();
    for n in 0..30 {
        let p = n % 3 + 1;
        if matches!(n % 5, 2 | 4) {
            let (value, rev) = written.last().cloned().expect("writes come first");
            h.read(p, KEY, &value, rev, rev);
            reads.push(ReadAt {
                ok_event: h.events.len() - 1,
                rev,
                overwritten: written[..written.len() - 1].to_vec(),
            });
        } else {
            let (value, rev) = (format!("{p}-{n}"), 10 + 2 * n);
            h.write(p, KEY, &value, rev);
            written.push((value, rev));
        }
    }
    (h, reads)
}

#[test]
fn every_stale_value_spliced_into_a_valid_history_is_caught() {
    let config = CheckConfig::default();
    let (h, reads) = sequential_register();
    assert_eq!(reads.len(), 12);
    let result = register::linearizable(&h.ops(), &config);
    assert_eq!(result.valid, Validity::Valid, "{result:#?}");
    let result = register::revisions(&h.ops());
    assert_eq!(result.valid, Validity::Valid, "{result:#?}");

    let mut mutations = 0;
    for read in &reads {
        for (value, old_rev) in &read.overwritten {
            // The stale value with its own revision (a consistent old state), or with the
            // current revision.
            for mod_rev in [*old_rev, read.rev] {
                let mut events = h.events.clone();
                events[read.ok_event].value =
                    json!({"value": value, "mod_rev": mod_rev, "rev": read.rev});
                let result = register::linearizable(&pair(&events).unwrap(), &config);
                assert_eq!(
                    result.valid,
                    Validity::Invalid,
                    "event {} reading {value:?} at {mod_rev}: {result:#?}",
                    read.ok_event
                );
                assert_eq!(result.anomalies[0].kind, "not-linearizable");
                mutations += 1;
            }
        }
    }
    // Each read can be given every value overwritten before it, two ways.
    let expected: usize = reads.iter().map(|r| 2 * r.overwritten.len()).sum();
    assert_eq!(mutations, expected);
    assert!(mutations > 100, "{mutations}");
}

// ---------------------------------------------------------------- the remaining kinds

#[test]
fn read_of_a_value_before_its_write_began_is_a_future_read() {
    let story = |read_first: bool| {
        let mut h = H::default();
        let (r, w);
        if read_first {
            r = h.read(1, KEY, "2-1", 5, 5);
            w = h.write(2, KEY, "2-1", 5);
        } else {
            w = h.write(2, KEY, "2-1", 5);
            r = h.read(1, KEY, "2-1", 5, 5);
        }
        (h.ops(), w, r)
    };
    let (ops, w, r) = story(true);
    assert_eq!(flagged(&register::revisions(&ops), "future-read"), [w, r]);
    let (ops, _, _) = story(false);
    passes(&register::revisions(&ops));
}

#[test]
fn read_naming_another_revision_than_its_write_is_wrong() {
    let story = |mod_rev: u64| {
        let mut h = H::default();
        let w = h.write(2, KEY, "2-1", 5);
        let r = h.read(1, KEY, "2-1", mod_rev, 9);
        (h.ops(), w, r)
    };
    let (ops, w, r) = story(4);
    assert_eq!(
        flagged(&register::revisions(&ops), "wrong-revision"),
        [w, r]
    );
    let (ops, _, _) = story(5);
    passes(&register::revisions(&ops));
}

#[test]
fn header_revision_lower_than_one_seen_before_went_back() {
    let story = |header: u64| {
        let mut h = H::default();
        let a = h.read(1, KEY, "", 0, 10);
        let b = h.read(2, "r/0-1", "", 0, header);
        (h.ops(), a, b)
    };
    // Reads of absent keys (a 404) carry no header; give them one through a found key.
    let (mut ops, a, b) = story(8);
    for op in &mut ops {
        op.result["value"] = Value::Null;
    }
    assert_eq!(
        flagged(&register::revisions(&ops), "revision-went-back"),
        [a, b]
    );
    let (mut ops, _, _) = story(10);
    for op in &mut ops {
        op.result["value"] = Value::Null;
    }
    passes(&register::revisions(&ops));
}

#[test]
fn observed_leadership_that_goes_back_in_time_is_refused() {
    let story = |second_fence: u64| {
        let mut h = H::default();
        let seen = |fence: u64| json!({"lease": fence, "fence": fence, "value": "v", "rev": fence});
        let a = h.call(1, "observe", "elect-0", Value::Null, seen(20));
        let b = h.call(2, "observe", "elect-0", Value::Null, seen(second_fence));
        (h.ops(), a, b)
    };
    let (ops, a, b) = story(12);
    assert_eq!(
        flagged(
            &lock::election(&ops, &CheckConfig::default()),
            "leader-went-back"
        ),
        [a, b]
    );
    let (ops, _, _) = story(30);
    passes(&lock::election(&ops, &CheckConfig::default()));
}

#[test]
fn watch_event_outside_its_prefix_breaks_the_filter() {
    let mut h = H::default();
    h.write(1, KEY, "1-1", 1);
    h.write(1, "other/x", "1-2", 2);
    let log = vec![put_logged(1, KEY, "1-1"), put_logged(2, "other/x", "1-2")];
    let args = json!({"prefix": "r/", "start_revision": 1});
    let result = json!({"events": log.clone(), "ended": null});
    let w = h.call(2, "watch", "r/", args, result);
    let found = flagged(
        &watch::watches(&h.ops(), &truth("prefix=r/", log)),
        "filter",
    );
    assert_eq!(found, [w]);
}

#[test]
fn watch_event_that_differs_from_the_log_is_a_mismatch() {
    let story = |value: &str| {
        let mut h = H::default();
        h.write(1, KEY, "1-1", 1);
        let log = vec![put_logged(1, KEY, "1-1")];
        let args = json!({"prefix": "r/", "start_revision": 1});
        let result = json!({"events": [put_logged(1, KEY, value)], "ended": null});
        let w = h.call(2, "watch", "r/", args, result);
        (h.ops(), truth("prefix=r/", log), w)
    };
    let (ops, t, w) = story("9-9");
    assert_eq!(flagged(&watch::watches(&ops, &t), "event-mismatch"), [w]);
    let (ops, t, _) = story("1-1");
    passes(&watch::watches(&ops, &t));
}

#[test]
fn grant_a_client_saw_must_be_in_the_log() {
    let story = |logged_fence: u64| {
        let mut h = H::default();
        let a = h.acquire(1, 7);
        let log = vec![
            queued("lock", 6, 1),
            granted("lock", logged_fence, 1, Some(6)),
        ];
        (h.ops(), truth(&format!("lock={LOCK}"), log), a)
    };
    let (ops, t, a) = story(8);
    assert_eq!(
        flagged(&lock::queues(&ops, &t), "grant-missing-from-log"),
        [a]
    );
    let (ops, t, _) = story(7);
    passes(&lock::queues(&ops, &t));
}

#[test]
fn acknowledged_write_the_log_lacks_is_missing_from_it() {
    let story = |logged: bool| {
        let mut h = H::default();
        let w = h.write(1, KEY, "1-1", 4);
        h.nemesis("kill-all-start");
        h.nemesis("kill-all-stop");
        let kvs = json!({"kvs": [{"key": KEY, "value": "1-1", "mod_revision": 4}]});
        h.call(9, "final-read", "r/", Value::Null, kvs);
        let log = if logged {
            vec![put_logged(4, KEY, "1-1")]
        } else {
            vec![put_logged(3, KEY, "0-0")]
        };
        (h.ops(), truth("prefix=r/", log), w)
    };
    let (ops, t, w) = story(false);
    assert_eq!(
        flagged(&register::durability(&ops, &t), "write-missing-from-log"),
        [w]
    );
    let (ops, t, _) = story(true);
    passes(&register::durability(&ops, &t));
}
