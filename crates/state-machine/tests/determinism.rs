//! Determinism: two machines fed the same commands end byte-identical, and a machine
//! restored from a snapshot halfway and fed the rest ends byte-identical too. The commands
//! come from a seeded xorshift so every run sees the same mix of every command kind.

use baton_state_machine::*;

struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Picks leases among the last eight granted (ids come from a counter starting at 1).
fn command(rng: &mut XorShift, grants: &mut u64) -> Proposal {
    let lease = LeaseId((*grants).saturating_sub(rng.below(8)).max(1));
    let name = format!("r{}", rng.below(4));
    let owner = format!("o{}", rng.below(2));
    let key = format!("k/{}", rng.below(6));
    let command = match rng.below(18) {
        0 | 1 | 16 => {
            *grants += 1;
            Command::LeaseGrant(LeaseGrant { ttl_ms: 5_000 })
        }
        2 => Command::LeaseRevoke(LeaseRevoke { lease }),
        3 => Command::LeaseExpire(LeaseExpire { lease }),
        4 => Command::LeaseCheckpoint(LeaseCheckpoint {
            remaining_ms: vec![(lease, rng.below(6_000))],
        }),
        5 => Command::Put(Put {
            key,
            value: rng.next().to_string(),
            lease: (rng.below(2) == 0).then_some(lease),
            prev_revision: None,
        }),
        6 => Command::PutSequential(PutSequential {
            prefix: "seq/".into(),
            value: String::new(),
            lease: None,
        }),
        7 => Command::Txn(Txn {
            compare: vec![Compare {
                key: key.clone(),
                target: CompareTarget::Version(rng.below(3)),
                op: CompareOp::Greater,
            }],
            success: vec![TxnOp::Delete { key }],
            failure: vec![TxnOp::Range {
                prefix: "k/".into(),
                limit: 3,
            }],
        }),
        8 | 9 | 17 => Command::LockAcquire(LockAcquire {
            name,
            lease,
            owner,
            mode: if rng.below(3) == 0 {
                Mode::Shared
            } else {
                Mode::Exclusive
            },
            wait_ms: rng.below(2) * 1_000,
            lock_delay_ms: rng.below(2) * 500,
        }),
        10 => Command::LockRelease(Release {
            name,
            lease,
            owner,
            fence: None,
        }),
        11 => Command::SemaphoreAcquire(SemaphoreAcquire {
            name,
            lease,
            owner,
            limit: 3,
            permits: 1 + rng.below(3) as u32,
            wait_ms: 1_000,
        }),
        12 => Command::SemaphoreRelease(Release {
            name,
            lease,
            owner,
            fence: None,
        }),
        13 => Command::Campaign(Campaign {
            name,
            lease,
            value: owner,
            wait_ms: 1_000,
        }),
        14 => Command::Resign(Resign {
            name,
            lease,
            fence: None,
        }),
        _ => Command::LockDelayElapsed(LockDelayElapsed {
            resource: ResourceId::lock(name),
            since: Revision(rng.below(100)),
        }),
    };
    Proposal {
        idempotency_key: (rng.below(4) == 0).then(|| format!("idem-{}", rng.next())),
        command,
        // One in eight from a named principal, with small quotas, sometimes an admin.
        caller: (rng.below(8) == 0).then(|| {
            let n = rng.below(3);
            Caller {
                principal: format!("p{n}"),
                admin: n == 2,
                quota: Quota {
                    leases: Some(1_000),
                    keys: Some(30),
                    key_bytes: Some(2_000),
                    claims: Some(40),
                    state_bytes: Some(20_000),
                },
            }
        }),
    }
}

/// The proposals, with one in eight a retry of the one before (same idempotency key).
fn proposals(count: usize) -> Vec<Proposal> {
    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
    let mut grants = 0;
    let mut out: Vec<Proposal> = Vec::with_capacity(count);
    while out.len() < count {
        match out.last() {
            Some(last) if last.idempotency_key.is_some() && rng.below(2) == 0 => {
                out.push(last.clone())
            }
            _ => out.push(command(&mut rng, &mut grants)),
        }
    }
    out
}

#[test]
fn same_commands_give_byte_identical_snapshots() {
    let proposals = proposals(3_000);
    let mut a = StateMachine::default();
    let mut b = StateMachine::default();
    let mut restored: Option<StateMachine> = None;
    for (i, p) in proposals.iter().enumerate() {
        let ra = a.apply(p.clone());
        let rb = b.apply(p.clone());
        assert_eq!(ra, rb, "command {i} diverged");
        if i == proposals.len() / 2 {
            let bytes = a.snapshot().unwrap();
            restored = Some(StateMachine::restore(&bytes).unwrap());
        } else if let Some(r) = restored.as_mut() {
            assert_eq!(r.apply(p.clone()), ra, "restored machine diverged at {i}");
        }
    }
    let bytes = a.snapshot().unwrap();
    assert_eq!(bytes, b.snapshot().unwrap());
    assert_eq!(bytes, restored.unwrap().snapshot().unwrap());
    let counts = a.counts();
    assert!(
        counts.revision.0 > 1_000,
        "the mix made progress: {counts:?}"
    );
    assert!(
        counts.locks + counts.semaphores + counts.elections > 0,
        "{counts:?}"
    );
}
