//! Apply throughput of the state machine, on one core, no I/O.
//!
//! Run: `cargo bench -p baton-state-machine --bench apply`
//! (add `-- quick` for a shorter run, `-- memory` for the memory line alone). Prints one
//! line per measurement; the figures and the command are recorded in `docs/performance.md`.

#![allow(clippy::print_stdout, clippy::unwrap_used)]

use baton_state_machine::*;
use std::hint::black_box;
use std::time::{Duration, Instant};

/// The `baton` binary's allocator, so the memory line is what a node pays (decision #114).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// This process's resident memory in bytes (`VmRSS`), 0 where `/proc` is missing.
fn resident_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

fn grant(sm: &mut StateMachine) -> LeaseId {
    match sm
        .apply_command(Command::LeaseGrant(LeaseGrant { ttl_ms: 60_000 }))
        .response
    {
        Response::LeaseGranted { lease, .. } => lease,
        other => panic!("grant refused: {other:?}"),
    }
}

fn acquire(name: &str, lease: LeaseId, wait_ms: u64) -> Command {
    Command::LockAcquire(LockAcquire {
        name: name.into(),
        lease,
        owner: "worker".into(),
        mode: Mode::Exclusive,
        wait_ms,
        lock_delay_ms: 0,
    })
}

fn release(name: &str, lease: LeaseId) -> Command {
    Command::LockRelease(Release {
        name: name.into(),
        lease,
        owner: "worker".into(),
        fence: None,
    })
}

fn per_second(count: u64, elapsed: Duration) -> f64 {
    count as f64 / elapsed.as_secs_f64()
}

/// Acquire then release one free lock, `cycles` times: 2 commands per cycle.
fn uncontended(cycles: u64) {
    let mut sm = StateMachine::default();
    let lease = grant(&mut sm);
    // Commands are built outside the timed loop: the bench measures apply, not allocation
    // of the input (which arrives decoded from the log in the real node).
    let commands: Vec<(Command, Command)> = (0..cycles)
        .map(|_| (acquire("bench", lease, 0), release("bench", lease)))
        .collect();
    let start = Instant::now();
    for (a, r) in commands {
        black_box(sm.apply_command(a));
        black_box(sm.apply_command(r));
    }
    let elapsed = start.elapsed();
    println!(
        "uncontended acquire+release: {} commands in {:.3} s = {:.0} commands/s ({:.0} ns/command)",
        cycles * 2,
        elapsed.as_secs_f64(),
        per_second(cycles * 2, elapsed),
        elapsed.as_nanos() as f64 / (cycles * 2) as f64
    );
}

/// A lock with `waiters` queued; time rounds of `handoffs` releases, each granting the next
/// waiter, and report the median round. The queue never drops below `waiters - 10 *
/// handoffs`, so the cost is measured at that queue length.
fn handoff(waiters: u64, handoffs: u64) {
    const ROUNDS: u64 = 10;
    let mut sm = StateMachine::default();
    let leases: Vec<LeaseId> = (0..=waiters + ROUNDS * handoffs)
        .map(|_| grant(&mut sm))
        .collect();
    sm.apply_command(acquire("hot", leases[0], 0));
    for lease in &leases[1..] {
        sm.apply_command(acquire("hot", *lease, 60_000));
    }
    let mut rounds: Vec<f64> = Vec::new();
    for round in 0..ROUNDS {
        let first = (round * handoffs) as usize;
        let releases: Vec<Command> = leases[first..first + handoffs as usize]
            .iter()
            .map(|l| release("hot", *l))
            .collect();
        let start = Instant::now();
        for r in releases {
            black_box(sm.apply_command(r));
        }
        rounds.push(start.elapsed().as_nanos() as f64 / handoffs as f64);
    }
    rounds.sort_by(f64::total_cmp);
    println!(
        "handoff with {waiters} waiters queued: median of {ROUNDS} rounds of {handoffs} handoffs = {:.0} ns/handoff",
        rounds[rounds.len() / 2]
    );
}

/// One lease holds `locks` locks, each with one waiter; time the one expiry command.
fn lease_expiry(locks: u64) {
    let mut sm = StateMachine::default();
    let doomed = grant(&mut sm);
    let next = grant(&mut sm);
    for i in 0..locks {
        let name = format!("lock-{i}");
        sm.apply_command(acquire(&name, doomed, 0));
        sm.apply_command(acquire(&name, next, 60_000));
    }
    let start = Instant::now();
    let applied = sm.apply_command(Command::LeaseExpire(LeaseExpire { lease: doomed }));
    let elapsed = start.elapsed();
    assert!(
        matches!(applied.response, Response::LeaseEnded { holds_released, .. } if holds_released == locks)
    );
    println!(
        "lease expiry releasing {locks} locks (and granting {locks} waiters): {:.3} ms, {} events in one revision",
        elapsed.as_secs_f64() * 1e3,
        applied.events.len()
    );
}

/// `keys` keys of 32-byte values; time snapshot and restore.
fn snapshot_restore(keys: u64) {
    let mut sm = StateMachine::new(Bounds {
        // Keep the event window small so the snapshot measures the keyspace.
        event_window_revisions: 1_000,
        ..Bounds::default()
    });
    for i in 0..keys {
        sm.apply_command(Command::Put(Put {
            key: format!("key/{i:012}"),
            value: format!("{:032}", i),
            lease: None,
            prev_revision: None,
        }));
    }
    let start = Instant::now();
    let bytes = sm.snapshot().unwrap();
    let snap = start.elapsed();
    let start = Instant::now();
    let back = StateMachine::restore(&bytes).unwrap();
    let restore = start.elapsed();
    assert_eq!(back.revision(), sm.revision());
    println!(
        "snapshot+restore of {keys} keys: snapshot {:.3} s, restore {:.3} s (with invariant check), total {:.3} s, {} MiB",
        snap.as_secs_f64(),
        restore.as_secs_f64(),
        (snap + restore).as_secs_f64(),
        bytes.len() >> 20
    );
}

/// Resident bytes the state machine adds per held lock with its own lease (the HTTP scale
/// bench's names, `held-N`), its event window included; then the cost of
/// lock cycles on a few other locks at that size.
fn held_lock_memory(locks: u64) {
    let before = resident_bytes();
    let mut sm = StateMachine::default();
    for i in 0..locks {
        let lease = grant(&mut sm);
        black_box(sm.apply_command(acquire(&format!("held-{i}"), lease, 0)));
    }
    let after = resident_bytes();
    println!(
        "held locks in the state machine: {locks} locks, {:.1} MiB more resident: {:.0} bytes per lock with its lease",
        after.saturating_sub(before) as f64 / (1 << 20) as f64,
        after.saturating_sub(before) as f64 / locks as f64
    );
    let lease = grant(&mut sm);
    // Where the cycled names sort among the held ones changes how far a lookup searches:
    // before every held name, among them, after all of them.
    for (place, prefix) in [
        ("before", "cycle-"),
        ("among", "held-5-cycle-"),
        ("after", "zz-cycle-"),
    ] {
        const CYCLES: u64 = 200_000;
        let cycles: Vec<(Command, Command)> = (0..CYCLES)
            .map(|i| {
                let name = format!("{prefix}{}", i % 16);
                (acquire(&name, lease, 0), release(&name, lease))
            })
            .collect();
        let start = Instant::now();
        for (a, r) in cycles {
            black_box(sm.apply_command(a));
            black_box(sm.apply_command(r));
        }
        println!(
            "acquire+release of 16 locks {place} {locks} held: {:.0} ns/command",
            start.elapsed().as_nanos() as f64 / (2 * CYCLES) as f64
        );
    }
    black_box(sm);
}

fn main() {
    let quick = std::env::args().any(|a| a == "quick");
    let scale = if quick { 10 } else { 1 };
    // First, while nothing freed is there to be reused: it reads the growth of `VmRSS`.
    held_lock_memory(1_000_000 / scale);
    if std::env::args().any(|a| a == "memory") {
        return;
    }
    uncontended(2_000_000 / scale);
    handoff(1_000, 1_000);
    handoff(100_000, 1_000);
    lease_expiry(10_000);
    snapshot_restore(1_000_000 / scale);
}
