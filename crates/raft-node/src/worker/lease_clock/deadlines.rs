//! The lease clock's bookkeeping: which deadline ends when, and what becomes due. Pure:
//! every function takes `now` (a `std::time::Instant` on the leader's monotonic clock) and
//! the applied state as arguments; nothing here reads a clock or the environment, spawns
//! or awaits, so its tests are plain `#[test]`s.
//!
//! On promotion every lease starts from its latest record as this node applied it
//! ([`promote`], decision #86), plus a grace of at most an election timeout and never
//! beyond `now + ttl`; every pending wait starts at `now + wait_ms` and every lock-delay at
//! `now + delay`; on demotion everything is forgotten. Keepalives reset deadlines in memory
//! only, except the first of each lease after a checkpoint or a promotion, which commits a
//! reset first.
//!
//! Owns: the deadlines and the leases whose expiry or checkpoint is proposed.
//! Woken by: nothing; the clock task calls it. Stops: with the task that holds it.

use crate::store::LeaseRecords;
use crate::tick::Tick;
use baton_state_machine::{
    AcquireTimeout, Command, EventKind, LeaseExpire, LeaseId, LockDelayElapsed, PackedMap,
    ResourceId, Revision, StateMachine,
};
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

/// The clock's answer to a keepalive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum KeepaliveAnswer {
    /// The deadline is reset to now + `ttl_ms`. With `reset: Some(mark)`, a checkpoint of
    /// this lease was proposed or recorded since its last committed reset, or this leader
    /// was promoted since: the node must commit a reset before acknowledging (or a new
    /// leader could end the lease early) and then report [`Deadlines::reset_committed`]
    /// with the mark.
    Ack { ttl_ms: u64, reset: Option<u64> },
    /// The lease's expiry is already proposed.
    Gone,
    /// This node's clock is not (yet) the leader's.
    NotLeader,
}

/// How lease deadlines are set. Decided once when the node starts, never per call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Expiry {
    /// A lease ends `ttl` after its last reset (spec §2).
    #[default]
    OnTime,
    /// TEST ONLY, the Jepsen harness's canary: a lease ends a quarter of its TTL after each
    /// reset, breaking spec §2 on purpose so the harness can show that it notices.
    UnsafeEarly,
}

/// Something that becomes due, and the command the clock proposes for it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Due {
    /// A lease's TTL has passed since its last reset.
    Lease(LeaseId),
    /// A blocking acquire's wait is over.
    Wait {
        resource: ResourceId,
        lease: LeaseId,
        owner: String,
        enqueued: Revision,
    },
    /// A lock-delay is over.
    Delay {
        resource: ResourceId,
        since: Revision,
    },
}

impl Due {
    /// The command that ends it: `LeaseExpire`, `AcquireTimeout` or `LockDelayElapsed`.
    pub(crate) fn command(&self) -> Command {
        match self.clone() {
            Due::Lease(lease) => Command::LeaseExpire(LeaseExpire { lease }),
            Due::Wait {
                resource,
                lease,
                owner,
                enqueued,
            } => Command::AcquireTimeout(AcquireTimeout {
                resource,
                lease,
                owner,
                enqueued,
            }),
            Due::Delay { resource, since } => {
                Command::LockDelayElapsed(LockDelayElapsed { resource, since })
            }
        }
    }
}

/// One lease's deadline: 24 bytes (decisions #105, #114), its reset mark included
/// (decision #120), where a table of marks beside it took 16 bytes more per marked lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct LeaseDeadline {
    /// When it ends.
    at: Tick,
    /// The TTL, saturated at 49 days: only the checkpoint's "kept alive recently" test
    /// reads it, and a saturated TTL can only skip a checkpoint, which makes a new leader
    /// end the lease later, never earlier.
    ttl_ms: u32,
    /// Whether its next keepalive must commit a reset ([`MARKED`]), and the lease's own
    /// count of marks in the low bits: a reset committed for an older mark does not clear
    /// a newer one. Kept across keepalives, which replace the rest of the deadline.
    mark: u32,
    /// How much of it, in whole microseconds (rounded down, so a checkpoint never records
    /// less than the deadline without it), a promotion added beyond the lease's recorded
    /// deadline: checkpoints record the deadline without it, so graces never add up across
    /// leader changes. A grace is at most an election timeout; 71 minutes saturate.
    grace_us: u32,
    /// The remaining time a committed checkpoint of this very deadline recorded, or
    /// [`NOT_RECORDED`]; a new deadline (keepalive, promotion) starts without one.
    recorded_ms: u32,
}

/// `recorded_ms` of a deadline no committed checkpoint recorded. A remaining time of 49
/// days or more is not recorded either: such a lease is named at every checkpoint,
/// which is correct, only not economical.
const NOT_RECORDED: u32 = u32::MAX;

/// The bit of [`LeaseDeadline::mark`] set while a reset is owed; the other bits count
/// the lease's marks (wrapping after 2^31, one per checkpoint or promotion at most).
const MARKED: u32 = 1 << 31;

impl LeaseDeadline {
    /// When it ends.
    fn at(&self) -> Instant {
        self.at.instant()
    }

    /// The deadline without the promotion grace.
    fn graceless(&self) -> Tick {
        let grace_ns = u64::from(self.grace_us) * 1_000;
        self.at.0.checked_sub(grace_ns).map_or(self.at, Tick)
    }

    /// The promotion's grace.
    fn grace(&self) -> Duration {
        Duration::from_micros(u64::from(self.grace_us))
    }

    /// The remaining time the last committed checkpoint of this deadline recorded.
    fn recorded(&self) -> Option<u64> {
        (self.recorded_ms != NOT_RECORDED).then_some(u64::from(self.recorded_ms))
    }
}

/// Deadlines keyed for rescheduling and ordered for firing.
#[derive(Default)]
pub(crate) struct Deadlines {
    expiry: Expiry,
    /// Lease deadlines in firing order, apart from the other kinds: a lease's key is 16
    /// bytes where a `Due` is 80, and there is one per lease (decisions #95, #105). The
    /// per-lease tables are packed maps, which stay full when leases are granted one
    /// after another (decision #115).
    lease_order: PackedMap<(Tick, LeaseId), ()>,
    /// Waits and lock-delays in firing order.
    order: BTreeSet<(Instant, Due)>,
    leases: PackedMap<LeaseId, LeaseDeadline>,
    waits: BTreeMap<(ResourceId, LeaseId, String), (Instant, Revision)>,
    delays: BTreeMap<ResourceId, (Instant, Revision)>,
    /// Leases whose expiry is proposed, with their TTL: a keepalive must not resurrect them.
    /// (Which leases owe a reset, because of a checkpoint proposed or recorded or a
    /// promotion since their last committed reset, is in each deadline's `mark`.)
    expiring: BTreeMap<LeaseId, u64>,
}

impl Deadlines {
    /// No deadlines; leases will be set according to `expiry`.
    pub(crate) fn new(expiry: Expiry) -> Deadlines {
        Deadlines {
            expiry,
            ..Deadlines::default()
        }
    }

    /// Forgets every deadline (on demotion, or before re-arming).
    pub(crate) fn clear(&mut self) {
        *self = Deadlines::new(self.expiry);
    }

    /// How many leases have a deadline.
    pub(crate) fn lease_count(&self) -> usize {
        self.leases.len()
    }

    /// Sets a lease's deadline at `at` (replacing any), with its TTL.
    /// Returns its mark, which stays.
    pub(crate) fn set_lease(&mut self, lease: LeaseId, at: Instant, ttl_ms: u64) -> u32 {
        self.set_lease_with_grace(lease, at, ttl_ms, Duration::ZERO)
    }

    /// Sets a lease's deadline at `at`, of which `grace` is a promotion's grace; its mark
    /// stays, and is returned.
    fn set_lease_with_grace(
        &mut self,
        lease: LeaseId,
        at: Instant,
        ttl_ms: u64,
        grace: Duration,
    ) -> u32 {
        let mut deadline = self.deadline(at, ttl_ms, grace);
        match self.leases.get_mut(&lease) {
            Some(old) => {
                let old_at = old.at;
                deadline.mark = old.mark;
                *old = deadline;
                self.lease_order.remove(&(old_at, lease));
            }
            None => {
                self.leases.insert(lease, deadline);
            }
        }
        self.lease_order.insert((deadline.at, lease), ());
        deadline.mark
    }

    /// A deadline at `at` (moved earlier for the unsafe canary), not yet recorded.
    fn deadline(&self, at: Instant, ttl_ms: u64, grace: Duration) -> LeaseDeadline {
        let at = match self.expiry {
            Expiry::OnTime => at,
            Expiry::UnsafeEarly => at
                .checked_sub(Duration::from_millis(ttl_ms * 3 / 4))
                .unwrap_or(at),
        };
        LeaseDeadline {
            at: Tick::of(at),
            ttl_ms: u32::try_from(ttl_ms).unwrap_or(u32::MAX),
            mark: 0,
            grace_us: u32::try_from(grace.as_micros()).unwrap_or(u32::MAX),
            recorded_ms: NOT_RECORDED,
        }
    }

    /// Forgets a lease that is revoked or expired, with its proposed expiry or checkpoint.
    pub(crate) fn forget_lease(&mut self, lease: LeaseId) {
        if let Some(old) = self.leases.remove(&lease) {
            self.lease_order.remove(&(old.at, lease));
        }
        self.expiring.remove(&lease);
    }

    /// A keepalive: the deadline moves to `now + ttl` unless the expiry is proposed.
    pub(crate) fn keepalive(
        &mut self,
        lease: LeaseId,
        ttl_ms: u64,
        now: Instant,
    ) -> KeepaliveAnswer {
        if self.expiring.contains_key(&lease) {
            return KeepaliveAnswer::Gone;
        }
        let mark = self.set_lease(lease, now + Duration::from_millis(ttl_ms), ttl_ms);
        KeepaliveAnswer::Ack {
            ttl_ms,
            reset: (mark & MARKED != 0).then_some(u64::from(mark & !MARKED)),
        }
    }

    /// A reset for `mark` committed: the lease's keepalives need no more until its next
    /// checkpoint (a later mark stays).
    pub(crate) fn reset_committed(&mut self, lease: LeaseId, mark: u64) {
        if let Some(d) = self.leases.get_mut(&lease)
            && d.mark & MARKED != 0
            && u64::from(d.mark & !MARKED) == mark
        {
            d.mark &= !MARKED;
        }
    }

    /// Its next keepalive must commit a reset before it is acknowledged.
    fn mark(&mut self, lease: LeaseId) {
        if let Some(d) = self.leases.get_mut(&lease) {
            d.mark = next_mark(d.mark);
        }
    }

    /// A lease's remaining TTL at `now`, if it has a deadline.
    pub(crate) fn remaining_ms(&self, lease: LeaseId, now: Instant) -> Option<u64> {
        let deadline = self.leases.get(&lease)?;
        Some(deadline.at().saturating_duration_since(now).as_millis() as u64)
    }

    /// Sets the end of a queued acquire's wait at `at` (replacing any).
    pub(crate) fn set_wait(
        &mut self,
        resource: ResourceId,
        lease: LeaseId,
        owner: String,
        enqueued: Revision,
        at: Instant,
    ) {
        self.forget_wait(&resource, lease, &owner);
        let key = (resource.clone(), lease, owner.clone());
        self.waits.insert(key, (at, enqueued));
        let due = Due::Wait {
            resource,
            lease,
            owner,
            enqueued,
        };
        self.order.insert((at, due));
    }

    /// Forgets a wait that ended otherwise (granted or cancelled).
    pub(crate) fn forget_wait(&mut self, resource: &ResourceId, lease: LeaseId, owner: &str) {
        let key = (resource.clone(), lease, owner.to_owned());
        if let Some((at, enqueued)) = self.waits.remove(&key) {
            let (resource, lease, owner) = key;
            let due = Due::Wait {
                resource,
                lease,
                owner,
                enqueued,
            };
            self.order.remove(&(at, due));
        }
    }

    /// Sets the end of a resource's lock-delay, started at revision `since`, at `at`.
    pub(crate) fn set_delay(&mut self, resource: ResourceId, since: Revision, at: Instant) {
        if let Some((old_at, old_since)) = self.delays.insert(resource.clone(), (at, since)) {
            self.order.remove(&(
                old_at,
                Due::Delay {
                    resource: resource.clone(),
                    since: old_since,
                },
            ));
        }
        self.order.insert((at, Due::Delay { resource, since }));
    }

    /// Forgets a lock-delay that ended.
    pub(crate) fn forget_delay(&mut self, resource: &ResourceId) {
        if let Some((at, since)) = self.delays.remove(resource) {
            self.order.remove(&(
                at,
                Due::Delay {
                    resource: resource.clone(),
                    since,
                },
            ));
        }
    }

    /// The earliest deadline.
    pub(crate) fn next(&self) -> Option<Instant> {
        let lease = self
            .lease_order
            .first_key_value()
            .map(|((at, _), ())| at.instant());
        let other = self.order.first().map(|(at, _)| *at);
        lease.into_iter().chain(other).min()
    }

    /// The earliest of the two orders, if due at `now`; a lease first on a tie.
    fn pop_due(&mut self, now: Instant) -> Option<Due> {
        let lease = self
            .lease_order
            .first_key_value()
            .map(|((at, _), ())| at.instant());
        let other = self.order.first().map(|(at, _)| *at);
        match (lease, other) {
            (Some(l), o) if l <= now && o.is_none_or(|o| l <= o) => self
                .lease_order
                .pop_first()
                .map(|((_, lease), ())| Due::Lease(lease)),
            (_, Some(o)) if o <= now => self.order.pop_first().map(|(_, d)| d),
            _ => None,
        }
    }

    /// Removes and returns everything due at `now`. Due leases are marked expiring.
    pub(crate) fn take_due(&mut self, now: Instant) -> Vec<Due> {
        let mut due = Vec::new();
        while let Some(d) = self.pop_due(now) {
            match &d {
                Due::Lease(l) => {
                    if let Some(old) = self.leases.remove(l) {
                        self.expiring.insert(*l, u64::from(old.ttl_ms));
                    }
                }
                Due::Wait {
                    resource,
                    lease,
                    owner,
                    ..
                } => {
                    self.waits
                        .remove(&(resource.clone(), *lease, owner.clone()));
                }
                Due::Delay { resource, .. } => {
                    self.delays.remove(resource);
                }
            }
            due.push(d);
        }
        due
    }

    /// An expiry proposal failed (e.g. leadership lost mid-way): try again at `at`.
    pub(crate) fn retry_lease(&mut self, lease: LeaseId, at: Instant) {
        // It stays marked expiring: its deadline has passed and the failed proposal may
        // still commit, so no keepalive may be acknowledged for it any more.
        if let Some(ttl_ms) = self.expiring.get(&lease).copied() {
            self.set_lease(lease, at, ttl_ms);
        }
    }

    /// Puts back what was due but not proposed, to fire again at `at`.
    pub(crate) fn requeue(&mut self, due: Vec<Due>, at: Instant) {
        for d in due {
            match d {
                Due::Lease(lease) => self.retry_lease(lease, at),
                Due::Wait {
                    resource,
                    lease,
                    owner,
                    enqueued,
                } => self.set_wait(resource, lease, owner, enqueued, at),
                Due::Delay { resource, since } => self.set_delay(resource, since, at),
            }
        }
    }

    /// Leases to checkpoint: those not kept alive within the last `interval` (remaining <
    /// ttl − interval), with their remaining TTL without any promotion grace. Recently
    /// kept-alive leases are skipped: a new leader starts them from the first entry of the
    /// term after their last reset, which ends them within ttl + interval + a failover of
    /// their last keepalive (spec §2). So is a lease whose deadline a committed checkpoint
    /// already recorded, until its remaining time has halved since (decision #94): the
    /// record already gives every node that applied it this deadline; the halving only
    /// refreshes it for a node that replayed it after a restart.
    /// The leases chosen are remembered until their next keepalive.
    pub(crate) fn checkpoint(&mut self, now: Instant, interval_ms: u64) -> Vec<(LeaseId, u64)> {
        let now = Tick::of(now);
        let chosen: Vec<(LeaseId, u64)> = self
            .leases
            .iter()
            .filter_map(|(lease, deadline)| {
                let remaining = checkpoint_remaining(deadline, now);
                let stale = deadline.recorded().is_none_or(|r| remaining * 2 <= r);
                (stale && remaining + interval_ms < u64::from(deadline.ttl_ms))
                    .then_some((*lease, remaining))
            })
            .collect();
        for (lease, _) in &chosen {
            self.mark(*lease);
        }
        chosen
    }

    /// A checkpoint chosen at `now` committed: each lease whose deadline is still the one
    /// it recorded is not named again until its remaining time halves.
    pub(crate) fn checkpoint_committed(&mut self, chosen: &[(LeaseId, u64)], now: Instant) {
        let now = Tick::of(now);
        for (lease, remaining) in chosen {
            if let Some(deadline) = self.leases.get_mut(lease)
                && checkpoint_remaining(deadline, now) == *remaining
            {
                deadline.recorded_ms = u32::try_from(*remaining).unwrap_or(NOT_RECORDED);
            }
        }
    }

    /// After missed events: `fresh` (promoted from the current state) replaces these
    /// deadlines, except that what these already knew is kept: a lease's deadline, and
    /// which leases are checkpointed or expiring. What was missed is armed as if newly seen.
    pub(crate) fn resync(&mut self, mut fresh: Deadlines) {
        // A lease this clock already knew needs a reset only if it needed one before, and
        // keeps its count of marks (a reset in flight for an older mark stays stale).
        for (lease, known) in self.leases.iter() {
            if let Some(d) = fresh.leases.get_mut(lease) {
                d.mark = known.mark;
                let ttl_ms = u64::from(known.ttl_ms);
                fresh.set_lease_with_grace(*lease, known.at(), ttl_ms, known.grace());
            }
        }
        fresh
            .expiring
            .extend(self.expiring.iter().map(|(l, t)| (*l, *t)));
        *self = fresh;
    }
}

/// The mark after `mark`: owed, with the count one higher.
fn next_mark(mark: u32) -> u32 {
    ((mark & !MARKED).wrapping_add(1) & !MARKED) | MARKED
}

/// What a checkpoint at `now` records for a deadline: its remaining time without grace.
/// Computed in ticks: the checkpoint scans every lease, and a tick is one subtraction.
fn checkpoint_remaining(deadline: &LeaseDeadline, now: Tick) -> u64 {
    deadline.graceless().0.saturating_sub(now.0) / 1_000_000
}

/// Starting deadlines on promotion, from the applied state and when this node applied each
/// lease's latest record (decision #86). A lease's recorded deadline is:
/// - after a checkpoint (remaining < TTL): when this node applied it + remaining. The old
///   leader proposed it before, with its own deadline `remaining` later, and acknowledged no
///   keepalive after it without committing a reset;
/// - after a grant or a reset (remaining = TTL): when this node first applied an entry of a
///   later term + TTL. Keepalives the leader of the record's term acknowledged were sent
///   before a quorum voted in a later term, and leaders of later terms acknowledge none
///   without committing a reset (every lease is marked below).
///
/// A lease whose record came in a snapshot counts as recorded when the snapshot was loaded
/// (`LeaseRecords`). The deadline is the recorded one plus `grace_ms`, never beyond `now + ttl`; the grace is
/// kept apart so that checkpoints record the deadline without it.
pub(crate) fn promote(
    d: &mut Deadlines,
    sm: &StateMachine,
    records: &LeaseRecords,
    now: Instant,
    grace_ms: u64,
) {
    d.clear();
    // In lease-id order (the state machine's): the maps below are built from sorted
    // entries, every run full (decisions #114, #115).
    let mut leases = Vec::new();
    for entry in sm.lease_clock() {
        let ttl = Duration::from_millis(entry.ttl_ms);
        // A record of the other kind than the state's (which no log makes) counts as
        // recorded now: the latest deadline the lease can have.
        let recorded = match entry.checkpoint_remaining_ms {
            Some(r) if r < entry.ttl_ms => records
                .checkpointed_at(entry.lease)
                .map(|at| at + Duration::from_millis(r)),
            _ => records
                .reset_term(entry.lease)
                .map(|term| records.next_term_start(term).unwrap_or(now) + ttl),
        };
        let recorded = recorded.map_or(now + ttl, |at| at.min(now + ttl));
        let at = (recorded + Duration::from_millis(grace_ms)).min(now + ttl);
        let grace = at.saturating_duration_since(recorded);
        leases.push((entry.lease, d.deadline(at, entry.ttl_ms, grace)));
    }
    // (`collect` sorts before it builds.)
    d.lease_order = leases.iter().map(|(l, dl)| ((dl.at, *l), ())).collect();
    // The first keepalive in this term commits a reset before it is acknowledged, so that
    // the next leader knows of it: every lease is marked.
    for (_, deadline) in &mut leases {
        deadline.mark = next_mark(deadline.mark);
    }
    d.leases = leases.into_iter().collect();
    for w in sm.pending_waits() {
        d.set_wait(
            w.resource,
            w.lease,
            w.owner,
            w.enqueued,
            now + Duration::from_millis(w.wait_ms),
        );
    }
    for (resource, delay) in sm.pending_lock_delays() {
        d.set_delay(
            resource,
            delay.since,
            now + Duration::from_millis(delay.delay_ms),
        );
    }
}

/// Follows one applied event on the leader.
pub(crate) fn observe(d: &mut Deadlines, revision: Revision, kind: &EventKind, now: Instant) {
    match kind {
        EventKind::LeaseGranted { lease, ttl_ms } => {
            d.set_lease(*lease, now + Duration::from_millis(*ttl_ms), *ttl_ms);
        }
        EventKind::LeaseRevoked { lease } | EventKind::LeaseExpired { lease } => {
            d.forget_lease(*lease)
        }
        EventKind::Queued {
            resource,
            lease,
            owner,
            wait_ms,
            ..
        } if *wait_ms > 0 => {
            let at = now + Duration::from_millis(*wait_ms);
            d.set_wait(resource.clone(), *lease, owner.clone(), revision, at);
        }
        EventKind::Granted {
            resource,
            lease,
            owner,
            enqueued: Some(_),
            ..
        }
        | EventKind::Cancelled {
            resource,
            lease,
            owner,
            ..
        } => d.forget_wait(resource, *lease, owner),
        EventKind::DelayStarted { resource, delay_ms } => {
            d.set_delay(
                resource.clone(),
                revision,
                now + Duration::from_millis(*delay_ms),
            );
        }
        EventKind::DelayEnded { resource } => d.forget_delay(resource),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use baton_state_machine::{Demand, LeaseCheckpoint, LeaseGrant, Response};

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn grant(sm: &mut StateMachine, ttl_ms: u64) -> LeaseId {
        match sm
            .apply_command(Command::LeaseGrant(LeaseGrant { ttl_ms }))
            .response
        {
            Response::LeaseGranted { lease, .. } => lease,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_lease_deadline_takes_24_bytes_and_keeps_its_grace_and_record() {
        assert_eq!(std::mem::size_of::<LeaseDeadline>(), 24);
        assert_eq!(std::mem::size_of::<(Tick, LeaseId)>(), 16);
        let mut d = Deadlines::new(Expiry::OnTime);
        let at = Instant::now() + ms(10_000);
        d.set_lease_with_grace(LeaseId(1), at, 10_000, Duration::from_nanos(1_500_999));
        let deadline = *d.leases.get(&LeaseId(1)).expect("a deadline");
        assert_eq!(deadline.at(), at);
        // Rounded down to the microsecond: the deadline without it is never earlier.
        assert_eq!(deadline.grace(), Duration::from_micros(1_500));
        assert_eq!(
            deadline.graceless(),
            Tick::of(at - Duration::from_micros(1_500))
        );
        assert_eq!(deadline.recorded(), None);
        let now = at - ms(4_000);
        let chosen = d.checkpoint(now, 1_000);
        assert_eq!(chosen.len(), 1);
        d.checkpoint_committed(&chosen, now);
        let deadline = d.leases.get(&LeaseId(1)).expect("a deadline");
        assert_eq!(deadline.recorded(), Some(chosen[0].1));
    }

    #[test]
    fn promotion_starts_each_lease_from_when_its_record_was_applied_plus_a_grace() {
        let mut sm = StateMachine::default();
        let t0 = Instant::now();
        // Loaded at t0 from a snapshot whose last entry is of term 1.
        let mut records = LeaseRecords::new(t0, 1);
        records.entry(2, t0);
        let mut granted = Vec::new();
        for recorded in [true, true, true, false] {
            let lease = grant(&mut sm, 5_000);
            if recorded {
                records.event(
                    &EventKind::LeaseGranted {
                        lease,
                        ttl_ms: 5_000,
                    },
                    2,
                );
            }
            granted.push(lease);
        }
        let [checkpointed, fresh, nearly_full, unrecorded] = granted[..] else {
            unreachable!()
        };
        let remaining = vec![
            (checkpointed, 3_000),
            (nearly_full, 4_900),
            (unrecorded, 300),
        ];
        sm.apply_command(Command::LeaseCheckpoint(LeaseCheckpoint {
            remaining_ms: remaining,
        }));
        records.checkpoint([checkpointed, nearly_full], &sm, 2, t0 + ms(1_000));
        // Entries of later terms: the first one of term 3 bounds term 2's keepalives.
        records.entry(3, t0 + ms(2_000));
        records.entry(4, t0 + ms(2_900));
        let now = t0 + ms(3_000);
        let mut d = Deadlines::default();
        promote(&mut d, &sm, &records, now, 500);
        // Applied at t0+1s with 3 s left: t0+4s, plus the grace.
        assert_eq!(d.remaining_ms(checkpointed, now), Some(1_500));
        // A grant of term 2: from the start of term 3 (t0+2s) + ttl, plus the grace.
        assert_eq!(d.remaining_ms(fresh, now), Some(4_500));
        // t0+1s + 4.9 s + grace.
        assert_eq!(d.remaining_ms(nearly_full, now), Some(3_400));
        // Its checkpoint is not recorded (it came in the snapshot): counted from the
        // snapshot's load at t0, 300 ms then plus the grace is past.
        assert_eq!(d.remaining_ms(unrecorded, now), Some(0));
        // Never beyond ttl from now.
        let mut late = Deadlines::default();
        promote(&mut late, &sm, &LeaseRecords::new(now, 0), now, 500);
        assert_eq!(late.remaining_ms(fresh, now), Some(5_000));
        assert_eq!(late.remaining_ms(nearly_full, now), Some(5_000));

        // Checkpoints record the deadline without the grace, so the next leader adds its
        // grace to the same deadline, not to this one's.
        let chosen = d.checkpoint(now, 100);
        assert!(chosen.contains(&(checkpointed, 1_000)), "{chosen:?}");
        assert!(chosen.contains(&(fresh, 4_000)), "{chosen:?}");
    }

    #[test]
    fn a_record_that_disagrees_with_the_state_starts_the_lease_at_its_latest_deadline() {
        let mut sm = StateMachine::default();
        let t0 = Instant::now();
        let mut records = LeaseRecords::new(t0, 1);
        records.entry(2, t0);
        let lease = grant(&mut sm, 5_000);
        let granted = EventKind::LeaseGranted {
            lease,
            ttl_ms: 5_000,
        };
        records.event(&granted, 2);
        // The state says checkpointed with 300 ms left; the record still says granted.
        sm.apply_command(Command::LeaseCheckpoint(LeaseCheckpoint {
            remaining_ms: vec![(lease, 300)],
        }));
        let now = t0 + ms(3_000);
        let mut d = Deadlines::default();
        promote(&mut d, &sm, &records, now, 500);
        assert_eq!(d.remaining_ms(lease, now), Some(5_000));
        // The other way round: the record says checkpointed, the state reset.
        records.checkpoint([lease], &sm, 2, t0);
        sm.apply_command(Command::LeaseCheckpoint(LeaseCheckpoint {
            remaining_ms: vec![(lease, 5_000)],
        }));
        promote(&mut d, &sm, &records, now, 500);
        assert_eq!(d.remaining_ms(lease, now), Some(5_000));
    }

    #[test]
    fn after_a_promotion_or_a_checkpoint_a_keepalive_commits_a_reset_until_one_is_committed() {
        let mut sm = StateMachine::default();
        let lease = grant(&mut sm, 5_000);
        let now = Instant::now();
        let mut d = Deadlines::default();
        promote(&mut d, &sm, &LeaseRecords::new(now, 0), now, 500);
        let KeepaliveAnswer::Ack {
            reset: Some(first), ..
        } = d.keepalive(lease, 5_000, now)
        else {
            panic!("a promoted lease's first keepalive commits a reset");
        };
        // Until that reset is known committed, every keepalive asks for one.
        assert!(matches!(
            d.keepalive(lease, 5_000, now),
            KeepaliveAnswer::Ack { reset: Some(m), .. } if m == first
        ));
        d.reset_committed(lease, first);
        assert!(matches!(
            d.keepalive(lease, 5_000, now),
            KeepaliveAnswer::Ack { reset: None, .. }
        ));
        // A checkpoint marks it again; a late report of the old reset does not clear that.
        let later = now + ms(4_000);
        assert_eq!(d.checkpoint(later, 100), vec![(lease, 1_000)]);
        d.reset_committed(lease, first);
        let KeepaliveAnswer::Ack {
            reset: Some(second),
            ..
        } = d.keepalive(lease, 5_000, later)
        else {
            panic!("a checkpointed lease's keepalive commits a reset");
        };
        assert_ne!(first, second);
        d.reset_committed(lease, second);
        assert!(matches!(
            d.keepalive(lease, 5_000, later),
            KeepaliveAnswer::Ack { reset: None, .. }
        ));
    }

    #[test]
    fn lease_is_due_only_after_its_ttl_since_the_last_keepalive() {
        let lease = LeaseId(1);
        let start = Instant::now();
        let mut d = Deadlines::default();
        d.set_lease(lease, start + ms(1_000), 1_000);
        d.keepalive(lease, 1_000, start + ms(900));
        assert!(
            d.take_due(start + ms(1_899)).is_empty(),
            "not due before ttl after the keepalive"
        );
        let now = start + ms(1_900);
        assert_eq!(d.take_due(now), vec![Due::Lease(lease)]);
        // Its expiry is proposed: a keepalive must not bring it back...
        assert_eq!(d.keepalive(lease, 1_000, now), KeepaliveAnswer::Gone);
        // A failed proposal is retried, and the lease stays past its deadline: the
        // failed proposal may still commit, so keepalives are still refused.
        d.retry_lease(lease, now + ms(50));
        assert_eq!(d.next(), Some(now + ms(50)));
        assert_eq!(d.keepalive(lease, 1_000, now), KeepaliveAnswer::Gone);
        assert_eq!(d.take_due(now + ms(50)), vec![Due::Lease(lease)]);
    }

    #[test]
    fn the_unsafe_canary_ends_a_lease_a_quarter_of_its_ttl_after_each_reset() {
        let lease = LeaseId(1);
        let now = Instant::now();
        let mut safe = Deadlines::new(Expiry::OnTime);
        let mut early = Deadlines::new(Expiry::UnsafeEarly);
        safe.keepalive(lease, 1_000, now);
        early.keepalive(lease, 1_000, now);
        assert_eq!(safe.remaining_ms(lease, now), Some(1_000));
        assert_eq!(early.remaining_ms(lease, now), Some(250));
        early.clear();
        early.keepalive(lease, 1_000, now);
        assert_eq!(
            early.remaining_ms(lease, now),
            Some(250),
            "kept across a clear"
        );
    }

    #[test]
    fn checkpoint_skips_leases_kept_alive_within_the_interval() {
        let lease = LeaseId(1);
        let start = Instant::now();
        let mut d = Deadlines::default();
        d.keepalive(lease, 5_000, start);
        assert!(d.checkpoint(start + ms(1_000), 2_000).is_empty());
        let now = start + ms(3_500);
        assert_eq!(d.checkpoint(now, 2_000), vec![(lease, 1_500)]);
        let KeepaliveAnswer::Ack {
            reset: Some(mark), ..
        } = d.keepalive(lease, 5_000, now)
        else {
            panic!("a checkpointed lease's keepalive commits a reset");
        };
        d.reset_committed(lease, mark);
        assert!(matches!(
            d.keepalive(lease, 5_000, now),
            KeepaliveAnswer::Ack { reset: None, .. }
        ));
    }

    #[test]
    fn a_committed_checkpoint_is_not_repeated_until_the_remaining_time_halves() {
        let (idle, kept) = (LeaseId(1), LeaseId(2));
        let start = Instant::now();
        let mut d = Deadlines::default();
        d.keepalive(idle, 60_000, start);
        d.keepalive(kept, 60_000, start);
        let first = start + ms(10_000);
        let chosen = d.checkpoint(first, 5_000);
        assert_eq!(chosen, vec![(idle, 50_000), (kept, 50_000)]);
        d.checkpoint_committed(&chosen, first);
        // The same deadlines: nothing new to record.
        assert!(d.checkpoint(start + ms(15_000), 5_000).is_empty());
        // A keepalive moves one deadline; the other stays recorded.
        d.keepalive(kept, 60_000, start + ms(16_000));
        let later = start + ms(30_000);
        let chosen = d.checkpoint(later, 5_000);
        assert_eq!(chosen, vec![(kept, 46_000)]);
        d.checkpoint_committed(&chosen, later);
        // Halved since its record (50 s → 25 s): named again, for restarted nodes.
        assert!(d.checkpoint(start + ms(34_000), 5_000).is_empty());
        assert_eq!(
            d.checkpoint(start + ms(35_000), 5_000),
            vec![(idle, 25_000)]
        );
        // That checkpoint did not commit: proposed again at the next tick.
        assert_eq!(
            d.checkpoint(start + ms(40_000), 5_000),
            vec![(idle, 20_000)]
        );
    }

    #[test]
    fn a_checkpoint_does_not_count_as_recorded_for_a_deadline_moved_since() {
        let lease = LeaseId(1);
        let start = Instant::now();
        let mut d = Deadlines::default();
        d.keepalive(lease, 60_000, start);
        let at = start + ms(10_000);
        let chosen = d.checkpoint(at, 5_000);
        d.keepalive(lease, 60_000, start + ms(11_000));
        d.checkpoint_committed(&chosen, at);
        assert_eq!(
            d.checkpoint(start + ms(20_000), 5_000),
            vec![(lease, 51_000)]
        );
    }

    #[test]
    fn leases_waits_and_delays_fire_in_one_time_order() {
        let t0 = Instant::now();
        let mut d = Deadlines::default();
        let resource = ResourceId::lock("L");
        d.set_lease(LeaseId(1), t0 + ms(20), 1_000);
        d.set_wait(
            resource.clone(),
            LeaseId(2),
            "w".into(),
            Revision(7),
            t0 + ms(10),
        );
        d.set_delay(resource.clone(), Revision(9), t0 + ms(30));
        d.set_lease(LeaseId(3), t0 + ms(30), 1_000);
        d.set_lease(LeaseId(4), t0 + ms(50), 1_000);
        assert_eq!(d.next(), Some(t0 + ms(10)));
        assert!(d.take_due(t0 + ms(5)).is_empty());
        let wait = Due::Wait {
            resource: resource.clone(),
            lease: LeaseId(2),
            owner: "w".into(),
            enqueued: Revision(7),
        };
        let delay = Due::Delay {
            resource,
            since: Revision(9),
        };
        // On a tie a lease comes first, as `Due`'s order has it.
        assert_eq!(
            d.take_due(t0 + ms(30)),
            vec![wait, Due::Lease(LeaseId(1)), Due::Lease(LeaseId(3)), delay]
        );
        assert_eq!(d.next(), Some(t0 + ms(50)));
        // A rescheduled lease leaves no stale entry behind.
        d.set_lease(LeaseId(4), t0 + ms(70), 1_000);
        assert!(d.take_due(t0 + ms(60)).is_empty());
        assert_eq!(d.take_due(t0 + ms(70)), vec![Due::Lease(LeaseId(4))]);
        assert_eq!(d.next(), None);
    }

    #[test]
    fn waits_and_delays_are_armed_by_events_and_disarmed_by_grants() {
        let mut d = Deadlines::default();
        let now = Instant::now();
        let resource = ResourceId::lock("L");
        let queued = EventKind::Queued {
            resource: resource.clone(),
            lease: LeaseId(2),
            owner: "w".into(),
            demand: Demand::Exclusive,
            position: 1,
            wait_ms: 300,
        };
        observe(&mut d, Revision(7), &queued, now);
        assert_eq!(d.next(), Some(now + ms(300)));
        let granted = EventKind::Granted {
            resource: resource.clone(),
            lease: LeaseId(2),
            owner: "w".into(),
            demand: Demand::Exclusive,
            fence: baton_state_machine::Fence(9),
            enqueued: Some(Revision(7)),
        };
        observe(&mut d, Revision(9), &granted, now);
        assert_eq!(d.next(), None, "a granted wait needs no timeout");
        observe(&mut d, Revision(7), &queued, now);
        let due = d.take_due(now + ms(300));
        assert!(matches!(
            due[0].command(),
            Command::AcquireTimeout(AcquireTimeout {
                enqueued: Revision(7),
                ..
            })
        ));
        let now = now + ms(300);
        let delay = EventKind::DelayStarted {
            resource: resource.clone(),
            delay_ms: 100,
        };
        observe(&mut d, Revision(12), &delay, now);
        let ended = EventKind::DelayEnded {
            resource: resource.clone(),
        };
        observe(&mut d, Revision(13), &ended, now);
        assert_eq!(d.next(), None);
        observe(&mut d, Revision(14), &delay, now);
        let due = d.take_due(now + ms(100));
        assert!(matches!(
            due[0].command(),
            Command::LockDelayElapsed(LockDelayElapsed {
                since: Revision(14),
                ..
            })
        ));
    }

    #[test]
    fn requeued_due_items_fire_again_at_the_retry_time() {
        let now = Instant::now();
        let resource = ResourceId::lock("L");
        let mut d = Deadlines::default();
        d.set_lease(LeaseId(1), now, 1_000);
        d.set_wait(resource.clone(), LeaseId(2), "w".into(), Revision(3), now);
        d.set_delay(resource.clone(), Revision(4), now);
        let due = d.take_due(now);
        assert_eq!(due.len(), 3);
        d.requeue(due.clone(), now + ms(50));
        assert!(d.take_due(now + ms(49)).is_empty());
        let mut again = d.take_due(now + ms(50));
        again.sort();
        let mut expected = due;
        expected.sort();
        assert_eq!(again, expected);
    }

    #[test]
    fn resync_keeps_known_deadlines_and_arms_missed_leases() {
        let mut sm = StateMachine::default();
        let known = grant(&mut sm, 5_000);
        let quiet = grant(&mut sm, 5_000);
        let start = Instant::now();
        let mut d = Deadlines::default();
        let none = LeaseRecords::new(start, 0);
        promote(&mut d, &sm, &none, start, 500);
        for lease in [known, quiet] {
            if let KeepaliveAnswer::Ack { reset: Some(m), .. } = d.keepalive(lease, 5_000, start) {
                d.reset_committed(lease, m);
            }
        }
        // `quiet` is kept alive just before the checkpoint, so only `known` is marked.
        assert!(matches!(
            d.keepalive(quiet, 5_000, start + ms(4_000)),
            KeepaliveAnswer::Ack { reset: None, .. }
        ));
        assert_eq!(d.checkpoint(start + ms(4_000), 1_000), vec![(known, 1_000)]);
        let mark = d.leases.get(&known).map_or(0, |dl| dl.mark);
        assert!(mark & MARKED != 0, "a checkpointed lease owes a reset");
        let owed = u64::from(mark & !MARKED);
        // Events are missed meanwhile: a new lease is granted.
        let missed = grant(&mut sm, 2_000);
        let now = start + ms(4_000);
        let mut fresh = Deadlines::default();
        promote(&mut fresh, &sm, &none, now, 500);
        d.resync(fresh);
        assert_eq!(d.remaining_ms(known, now), Some(1_000), "kept");
        assert_eq!(d.remaining_ms(missed, now), Some(2_000), "armed as if new");
        // What each known lease owed, and the count of its marks, survive the resync.
        assert!(matches!(
            d.keepalive(quiet, 5_000, now),
            KeepaliveAnswer::Ack { reset: None, .. }
        ));
        assert!(matches!(
            d.keepalive(known, 5_000, now),
            KeepaliveAnswer::Ack { reset: Some(m), .. } if m == owed
        ));
        d.reset_committed(known, owed);
        assert!(matches!(
            d.keepalive(known, 5_000, now),
            KeepaliveAnswer::Ack { reset: None, .. }
        ));
        assert!(
            matches!(
                d.keepalive(missed, 2_000, now),
                KeepaliveAnswer::Ack { reset: Some(_), .. }
            ),
            "a lease armed by the resync needs a reset like a promoted one"
        );
    }
}
