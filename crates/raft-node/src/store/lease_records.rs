//! When this node applied each lease's latest record, on its own monotonic clock. Not
//! replicated and not persisted: every node keeps its own, as it applies entries, so that
//! whichever node becomes leader can start a lease's deadline from when the record reached
//! it rather than from its own election (spec §2, decision #86).
//!
//! A lease's *record* is the latest log entry that said something about its deadline: its
//! grant, a checkpoint (`LeaseCheckpoint` with remaining < TTL) or a reset (a
//! `LeaseCheckpoint` with remaining = TTL, committed by a keepalive). For each the node
//! keeps the local time it applied it and the entry's term; it also keeps when it first
//! applied an entry of each term. After a restart or a snapshot install, what the node
//! replays counts from the moment it replayed it, and a lease whose record is inside the
//! snapshot counts as recorded at the restart or install, in the snapshot's last term
//! (both later than the truth: never early).
//!
//! Owns: the records. Woken by: nothing (the state-machine store calls it while applying).
//! Stops: with the store.

use crate::tick::Tick;
use baton_state_machine::{EventKind, LeaseId, PackedMap, StateMachine};
use std::collections::BTreeMap;
use std::time::Instant;

/// One lease's latest record as this node applied it: 16 bytes (decision #114).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Record {
    /// When this node applied it (its own monotonic clock).
    applied_at: Tick,
    /// The term of the entry that carried it.
    pub(crate) term: u64,
}

impl Record {
    /// A record applied at `applied_at` in `term`.
    pub(crate) fn new(applied_at: Instant, term: u64) -> Record {
        Record {
            applied_at: Tick::of(applied_at),
            term,
        }
    }

    /// When this node applied it.
    pub(crate) fn applied_at(&self) -> Instant {
        self.applied_at.instant()
    }
}

/// Every live lease's latest record, and when each term's first entry was applied.
#[derive(Debug)]
pub(crate) struct LeaseRecords {
    /// Packed: a hash table of 24-byte entries cost about 50 bytes per lease just past
    /// a doubling (decision #115).
    leases: PackedMap<LeaseId, Record>,
    term_starts: BTreeMap<u64, Instant>,
    /// The record of a lease this node has none for: its state came from a snapshot
    /// loaded or installed at `applied_at`, whose last entry is of `term`.
    fallback: Record,
}

impl LeaseRecords {
    /// No records yet; the state was loaded at `loaded_at` from a snapshot whose last
    /// entry is of `term` (0 without one).
    pub(crate) fn new(loaded_at: Instant, term: u64) -> LeaseRecords {
        LeaseRecords {
            leases: PackedMap::new(),
            term_starts: BTreeMap::new(),
            fallback: Record::new(loaded_at, term),
        }
    }

    /// An entry of `term` is being applied at `now`.
    pub(crate) fn entry(&mut self, term: u64, now: Instant) {
        // Terms only grow along the log, so the last key is the newest term seen.
        if self
            .term_starts
            .last_key_value()
            .is_none_or(|(t, _)| *t < term)
        {
            self.term_starts.insert(term, now);
        }
    }

    /// A checkpoint or reset of `leases` applied at `now` in `term`; leases the state no
    /// longer has are skipped (the command changes nothing for them).
    pub(crate) fn checkpoint(
        &mut self,
        leases: impl IntoIterator<Item = LeaseId>,
        sm: &StateMachine,
        term: u64,
        now: Instant,
    ) {
        for lease in leases {
            if sm.has_lease(lease) {
                self.leases.insert(lease, Record::new(now, term));
            }
        }
    }

    /// Follows an applied event: a grant is a lease's first record; an expiry or revoke
    /// forgets it.
    pub(crate) fn event(&mut self, kind: &EventKind, term: u64, now: Instant) {
        match kind {
            EventKind::LeaseGranted { lease, .. } => {
                let record = Record::new(now, term);
                self.leases.insert(*lease, record);
            }
            EventKind::LeaseRevoked { lease } | EventKind::LeaseExpired { lease } => {
                self.leases.remove(lease);
            }
            _ => {}
        }
    }

    /// The lease's latest record as this node applied it, or the snapshot's if it
    /// applied none since it loaded one.
    pub(crate) fn get(&self, lease: LeaseId) -> Record {
        self.leases.get(&lease).copied().unwrap_or(self.fallback)
    }

    /// When this node first applied an entry of a term later than `term`: every
    /// keepalive a leader of `term` acknowledged was sent before then.
    pub(crate) fn next_term_start(&self, term: u64) -> Option<Instant> {
        self.term_starts
            .range(term.saturating_add(1)..)
            .next()
            .map(|(_, at)| *at)
    }

    /// How many leases have a record.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.leases.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_term_start_is_the_first_entry_of_a_later_term() {
        let t0 = Instant::now();
        let mut r = LeaseRecords::new(t0, 0);
        r.entry(3, t0);
        r.entry(3, t0 + Duration::from_millis(5));
        r.entry(5, t0 + Duration::from_millis(10));
        r.entry(5, t0 + Duration::from_millis(20));
        assert_eq!(r.next_term_start(2), Some(t0));
        assert_eq!(r.next_term_start(3), Some(t0 + Duration::from_millis(10)));
        assert_eq!(r.next_term_start(4), Some(t0 + Duration::from_millis(10)));
        assert_eq!(r.next_term_start(5), None);
    }

    #[test]
    fn grants_and_checkpoints_are_recorded_and_ends_forgotten() {
        let sm = StateMachine::default();
        let loaded = Instant::now();
        let mut r = LeaseRecords::new(loaded, 1);
        let t0 = loaded + Duration::from_millis(7);
        let lease = LeaseId(1);
        r.event(&EventKind::LeaseGranted { lease, ttl_ms: 10 }, 2, t0);
        let granted = Record::new(t0, 2);
        assert_eq!(r.get(lease), granted);
        // The state has no such lease: a checkpoint of it records nothing new.
        r.checkpoint([lease, LeaseId(9)], &sm, 4, t0 + Duration::from_millis(1));
        assert_eq!(r.get(lease), granted);
        let from_the_snapshot = Record::new(loaded, 1);
        assert_eq!(r.get(LeaseId(9)), from_the_snapshot);
        r.event(&EventKind::LeaseExpired { lease }, 4, t0);
        assert_eq!(r.len(), 0);
    }
}
