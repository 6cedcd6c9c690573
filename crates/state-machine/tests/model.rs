//! Model test: random command sequences from several leases, applied to the real state
//! machine and to a small, obviously-correct reference model (vectors and linear scans).
//! After every step the two must agree on the response kind, the revision, every key,
//! and every lock's holders and queue order; invariants run inside `apply` (debug build);
//! fences of exclusive grants strictly increase per lock; snapshots round-trip.

#![allow(clippy::unwrap_used)] // a test: a missing value is a failure to report

use baton_state_machine::*;
use proptest::prelude::*;
use std::collections::BTreeMap;

const LOCKS: [&str; 2] = ["A", "B"];
const OWNERS: [&str; 2] = ["x", "y"];
const KEYS: [&str; 3] = ["k1", "k2", "k3"];

#[derive(Clone, Debug)]
enum Op {
    Grant,
    Revoke(usize),
    Expire(usize),
    Put(usize, Option<usize>),
    Delete(usize),
    Acquire {
        lock: usize,
        lease: usize,
        owner: usize,
        shared: bool,
        wait: bool,
    },
    Release {
        lock: usize,
        lease: usize,
        owner: usize,
    },
    Timeout {
        lock: usize,
        nth: usize,
    },
    Force(usize),
}

fn op() -> impl Strategy<Value = Op> {
    let idx = || 0usize..4;
    prop_oneof![
        2 => Just(Op::Grant),
        1 => idx().prop_map(Op::Revoke),
        1 => idx().prop_map(Op::Expire),
        2 => (0..KEYS.len(), proptest::option::of(idx())).prop_map(|(k, l)| Op::Put(k, l)),
        1 => (0..KEYS.len()).prop_map(Op::Delete),
        6 => (0..LOCKS.len(), idx(), 0..OWNERS.len(), any::<bool>(), any::<bool>()).prop_map(
            |(lock, lease, owner, shared, wait)| Op::Acquire { lock, lease, owner, shared, wait }
        ),
        4 => (0..LOCKS.len(), idx(), 0..OWNERS.len())
            .prop_map(|(lock, lease, owner)| Op::Release { lock, lease, owner }),
        1 => (0..LOCKS.len(), 0usize..3).prop_map(|(lock, nth)| Op::Timeout { lock, nth }),
        1 => (0..LOCKS.len()).prop_map(Op::Force),
    ]
}

#[derive(Clone, Debug, PartialEq)]
struct MHolder {
    lease: u64,
    owner: String,
    shared: bool,
    fence: u64,
    count: u32,
}

#[derive(Clone, Debug, PartialEq)]
struct MWaiter {
    lease: u64,
    owner: String,
    shared: bool,
    enqueued: u64,
}

#[derive(Default, Debug)]
struct MLock {
    holders: Vec<MHolder>,
    queue: Vec<MWaiter>,
}

/// What a response amounts to, for comparison.
#[derive(Debug, PartialEq)]
enum Kind {
    Granted { fence: u64, count: u32 },
    Queued { enqueued: u64 },
    Released { released: bool },
    Cancelled,
    TimedOut,
    Refused(&'static str),
    Other,
}

#[derive(Default, Debug)]
struct Model {
    revision: u64,
    next_lease: u64,
    leases: Vec<u64>,
    keys: BTreeMap<String, (String, Option<u64>)>,
    locks: BTreeMap<String, MLock>,
}

impl Model {
    fn new() -> Model {
        Model {
            next_lease: 1,
            ..Model::default()
        }
    }

    fn lease_at(&self, i: usize) -> u64 {
        // Index into live leases, or a lease id that never existed.
        self.leases.get(i).copied().unwrap_or(1_000 + i as u64)
    }

    fn bump(&mut self) -> u64 {
        self.revision += 1;
        self.revision
    }

    fn admits(lock: &MLock, shared: bool) -> bool {
        if shared {
            lock.holders.iter().all(|h| h.shared)
        } else {
            lock.holders.is_empty()
        }
    }

    fn promote(&mut self, name: &str) {
        let rev = self.revision;
        if let Some(lock) = self.locks.get_mut(name) {
            while let Some(head) = lock.queue.first() {
                if !Self::admits(lock, head.shared) {
                    break;
                }
                let w = lock.queue.remove(0);
                lock.holders.push(MHolder {
                    lease: w.lease,
                    owner: w.owner,
                    shared: w.shared,
                    fence: rev,
                    count: 1,
                });
            }
            if lock.holders.is_empty() && lock.queue.is_empty() {
                self.locks.remove(name);
            }
        }
    }

    fn end_lease(&mut self, lease: u64) -> Kind {
        if !self.leases.contains(&lease) {
            return Kind::Refused("lease_not_found");
        }
        self.bump();
        self.leases.retain(|l| *l != lease);
        self.keys.retain(|_, (_, l)| *l != Some(lease));
        let names: Vec<String> = self.locks.keys().cloned().collect();
        for name in &names {
            let lock = self.locks.get_mut(name).unwrap();
            lock.holders.retain(|h| h.lease != lease);
            lock.queue.retain(|w| w.lease != lease);
        }
        for name in &names {
            self.promote(name);
        }
        Kind::Other
    }

    fn acquire(&mut self, name: &str, lease: u64, owner: &str, shared: bool, wait: bool) -> Kind {
        if !self.leases.contains(&lease) {
            return Kind::Refused("lease_not_found");
        }
        let lock = self.locks.entry(name.into()).or_default();
        if let Some(h) = lock
            .holders
            .iter_mut()
            .find(|h| h.lease == lease && h.owner == owner)
        {
            if h.shared != shared {
                return Kind::Refused("invalid");
            }
            h.count += 1;
            let (fence, count) = (h.fence, h.count);
            self.bump();
            return Kind::Granted { fence, count };
        }
        if let Some(w) = lock
            .queue
            .iter()
            .find(|w| w.lease == lease && w.owner == owner)
        {
            return Kind::Queued {
                enqueued: w.enqueued,
            };
        }
        let grantable = lock.queue.is_empty() && Self::admits(lock, shared);
        if !grantable && !wait {
            if lock.holders.is_empty() && lock.queue.is_empty() {
                self.locks.remove(name);
            }
            return Kind::Refused("lock_held");
        }
        let rev = self.revision + 1;
        self.revision = rev;
        let lock = self.locks.get_mut(name).unwrap();
        if grantable {
            lock.holders.push(MHolder {
                lease,
                owner: owner.into(),
                shared,
                fence: rev,
                count: 1,
            });
            Kind::Granted {
                fence: rev,
                count: 1,
            }
        } else {
            lock.queue.push(MWaiter {
                lease,
                owner: owner.into(),
                shared,
                enqueued: rev,
            });
            Kind::Queued { enqueued: rev }
        }
    }

    fn release(&mut self, name: &str, lease: u64, owner: &str) -> Kind {
        let Some(lock) = self.locks.get_mut(name) else {
            return Kind::Refused("not_holder");
        };
        if let Some(i) = lock
            .holders
            .iter()
            .position(|h| h.lease == lease && h.owner == owner)
        {
            self.bump();
            let lock = self.locks.get_mut(name).unwrap();
            if lock.holders[i].count > 1 {
                lock.holders[i].count -= 1;
                return Kind::Released { released: false };
            }
            lock.holders.remove(i);
            self.promote(name);
            return Kind::Released { released: true };
        }
        if let Some(i) = lock
            .queue
            .iter()
            .position(|w| w.lease == lease && w.owner == owner)
        {
            lock.queue.remove(i);
            self.bump();
            self.promote(name);
            return Kind::Cancelled;
        }
        Kind::Refused("not_holder")
    }

    fn timeout(&mut self, name: &str, waiter: &MWaiter) -> Kind {
        let Some(lock) = self.locks.get_mut(name) else {
            return Kind::Refused("not_waiting");
        };
        if let Some(i) = lock.queue.iter().position(|w| w == waiter) {
            lock.queue.remove(i);
            self.bump();
            self.promote(name);
            return Kind::TimedOut;
        }
        Kind::Refused("not_waiting")
    }

    fn force(&mut self, name: &str) -> Kind {
        let Some(lock) = self.locks.get_mut(name) else {
            return Kind::Refused("lock_not_found");
        };
        lock.holders.clear();
        self.bump();
        self.promote(name);
        Kind::Other
    }
}

fn kind(response: &Response) -> Kind {
    match response {
        Response::Granted(g) => Kind::Granted {
            fence: g.holder.fence.0,
            count: g.holder.count,
        },
        Response::Queued { enqueued, .. } => Kind::Queued {
            enqueued: enqueued.0,
        },
        Response::Released { released, .. } => Kind::Released {
            released: *released,
        },
        Response::Cancelled { .. } => Kind::Cancelled,
        Response::TimedOut { .. } => Kind::TimedOut,
        Response::Rejected(r) => Kind::Refused(match r {
            Rejection::LeaseNotFound { .. } => "lease_not_found",
            Rejection::LockHeld { .. } => "lock_held",
            Rejection::NotHolder { .. } => "not_holder",
            Rejection::NotWaiting => "not_waiting",
            Rejection::LockNotFound { .. } => "lock_not_found",
            Rejection::InvalidArgument { .. } => "invalid",
            Rejection::KeyNotFound { .. } => "key_not_found",
            other => panic!("unexpected refusal {other:?}"),
        }),
        _ => Kind::Other,
    }
}

/// Runs one op on both; returns the real machine's applied result.
fn step(sm: &mut StateMachine, model: &mut Model, op: &Op) -> Applied {
    let (command, expected) = match op {
        Op::Grant => {
            let id = model.next_lease;
            model.next_lease += 1;
            model.leases.push(id);
            model.bump();
            (
                Command::LeaseGrant(LeaseGrant { ttl_ms: 5_000 }),
                Kind::Other,
            )
        }
        Op::Revoke(i) | Op::Expire(i) => {
            let lease = LeaseId(model.lease_at(*i));
            let expected = model.end_lease(lease.0);
            let command = match op {
                Op::Revoke(_) => Command::LeaseRevoke(LeaseRevoke { lease }),
                _ => Command::LeaseExpire(LeaseExpire { lease }),
            };
            (command, expected)
        }
        Op::Put(k, l) => {
            let lease = l.map(|i| model.lease_at(i));
            let expected = match lease {
                Some(l) if !model.leases.contains(&l) => Kind::Refused("lease_not_found"),
                _ => {
                    model.bump();
                    model
                        .keys
                        .insert(KEYS[*k].into(), (model.revision.to_string(), lease));
                    Kind::Other
                }
            };
            let command = Command::Put(Put {
                key: KEYS[*k].into(),
                value: model.revision.to_string(),
                lease: lease.map(LeaseId),
                prev_revision: None,
            });
            (command, expected)
        }
        Op::Delete(k) => {
            let expected = match model.keys.remove(KEYS[*k]) {
                Some(_) => {
                    model.bump();
                    Kind::Other
                }
                None => Kind::Refused("key_not_found"),
            };
            let command = Command::Delete(Delete {
                key: KEYS[*k].into(),
                prev_revision: None,
            });
            (command, expected)
        }
        Op::Acquire {
            lock,
            lease,
            owner,
            shared,
            wait,
        } => {
            let lease = model.lease_at(*lease);
            let expected = model.acquire(LOCKS[*lock], lease, OWNERS[*owner], *shared, *wait);
            let command = Command::LockAcquire(LockAcquire {
                name: LOCKS[*lock].into(),
                lease: LeaseId(lease),
                owner: OWNERS[*owner].into(),
                mode: if *shared {
                    Mode::Shared
                } else {
                    Mode::Exclusive
                },
                wait_ms: if *wait { 1_000 } else { 0 },
                lock_delay_ms: 0,
            });
            (command, expected)
        }
        Op::Release { lock, lease, owner } => {
            let lease = model.lease_at(*lease);
            let expected = model.release(LOCKS[*lock], lease, OWNERS[*owner]);
            let command = Command::LockRelease(Release {
                name: LOCKS[*lock].into(),
                lease: LeaseId(lease),
                owner: OWNERS[*owner].into(),
                fence: None,
            });
            (command, expected)
        }
        Op::Timeout { lock, nth } => {
            let name = LOCKS[*lock];
            let waiter = model
                .locks
                .get(name)
                .and_then(|l| l.queue.get(*nth).cloned())
                .unwrap_or(MWaiter {
                    lease: 999,
                    owner: "x".into(),
                    shared: false,
                    enqueued: 1,
                });
            let expected = model.timeout(name, &waiter);
            let command = Command::AcquireTimeout(AcquireTimeout {
                resource: ResourceId::lock(name),
                lease: LeaseId(waiter.lease),
                owner: waiter.owner.clone(),
                enqueued: Revision(waiter.enqueued),
            });
            (command, expected)
        }
        Op::Force(lock) => {
            let expected = model.force(LOCKS[*lock]);
            let command = Command::ForceRelease(ForceRelease {
                resource: ResourceId::lock(LOCKS[*lock]),
            });
            (command, expected)
        }
    };
    let applied = sm.apply_command(command);
    let actual = kind(&applied.response);
    match (&expected, &actual) {
        (Kind::Other, _) => assert!(
            applied.response.rejection().is_none(),
            "{op:?}: expected success, got {:?}",
            applied.response
        ),
        _ => assert_eq!(actual, expected, "{op:?}"),
    }
    applied
}

fn assert_same(sm: &StateMachine, model: &Model) {
    assert_eq!(sm.revision().0, model.revision, "revision");
    for key in KEYS {
        let real = sm.get(key).map(|kv| (kv.value, kv.lease.map(|l| l.0)));
        assert_eq!(real, model.keys.get(key).cloned(), "key {key}");
    }
    for name in LOCKS {
        let real = sm.lock_state(&ResourceId::lock(name));
        let expected = model.locks.get(name);
        let (Some(real), Some(expected)) = (&real, expected) else {
            assert!(
                real.is_none() && expected.is_none(),
                "lock {name}: {real:?} vs {expected:?}"
            );
            continue;
        };
        let mut real_holders: Vec<(u64, String, u64, u32)> = real
            .holders
            .iter()
            .map(|h| (h.lease.0, h.owner.clone(), h.fence.0, h.count))
            .collect();
        let mut model_holders: Vec<(u64, String, u64, u32)> = expected
            .holders
            .iter()
            .map(|h| (h.lease, h.owner.clone(), h.fence, h.count))
            .collect();
        real_holders.sort();
        model_holders.sort();
        assert_eq!(real_holders, model_holders, "lock {name} holders");
        let real_queue: Vec<(u64, String, u64)> = real
            .queue
            .iter()
            .map(|w| (w.lease.0, w.owner.clone(), w.enqueued.0))
            .collect();
        let model_queue: Vec<(u64, String, u64)> = expected
            .queue
            .iter()
            .map(|w| (w.lease, w.owner.clone(), w.enqueued))
            .collect();
        assert_eq!(real_queue, model_queue, "lock {name} queue");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn state_machine_agrees_with_the_reference_model(ops in proptest::collection::vec(op(), 1..80)) {
        let mut sm = StateMachine::default();
        let mut model = Model::new();
        let mut changing_applies = 0u64;
        let mut last_exclusive_fence: BTreeMap<String, Fence> = BTreeMap::new();
        for (i, op) in ops.iter().enumerate() {
            let applied = step(&mut sm, &mut model, op);
            if !applied.events.is_empty() {
                changing_applies += 1;
            }
            prop_assert_eq!(sm.revision().0, changing_applies, "revision counts changing applies");
            for event in &applied.events {
                if let EventKind::Granted { resource, fence, demand: Demand::Exclusive, .. } = &event.kind {
                    let previous = last_exclusive_fence.insert(resource.name.clone(), *fence);
                    prop_assert!(previous.is_none_or(|p| p < *fence), "fence went back on {}", resource.name);
                }
            }
            assert_same(&sm, &model);
            if i % 10 == 9 {
                let bytes = sm.snapshot().unwrap();
                prop_assert_eq!(&StateMachine::restore(&bytes).unwrap(), &sm);
            }
        }
        sm.check_invariants();
    }
}
