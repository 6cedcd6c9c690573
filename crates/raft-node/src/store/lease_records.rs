//! When this node applied each lease's latest record, on its own monotonic clock. Not
//! replicated and not persisted: every node keeps its own, as it applies entries, so that
//! whichever node becomes leader can start a lease's deadline from when the record reached
//! it rather than from its own election (spec §2, decision #86).
//!
//! A lease's *record* is the latest log entry that said something about its deadline: its
//! grant, a checkpoint (`LeaseCheckpoint` with remaining < TTL) or a reset (a
//! `LeaseCheckpoint` with remaining = TTL, committed by a keepalive). For a checkpoint the
//! node keeps the local time it applied it, for a grant or a reset the entry's term; it
//! also keeps when it first applied an entry of each term. After a restart or a snapshot install, what the node
//! replays counts from the moment it replayed it, and a lease whose record is inside the
//! snapshot counts as recorded at the restart or install, in the snapshot's last term
//! (both later than the truth: never early).
//!
//! Owns: the records. Woken by: nothing (the state-machine store calls it while applying).
//! Stops: with the store.

use crate::tick::Tick;
#[cfg(test)]
use baton_state_machine::{Command, LeaseCheckpoint, LeaseGrant, Response};
use baton_state_machine::{EventKind, LeaseId, PackedMap, StateMachine};
use std::collections::BTreeMap;
use std::time::Instant;

/// One lease's latest record as this node applied it, in one word (decision #121): a
/// promotion needs only the time a checkpoint was applied, or only the term of a grant or
/// a reset, never both. So a checkpoint's record is when this node applied it (a [`Tick`],
/// far below 2^63 nanoseconds), and a grant's or reset's is its entry's term with the
/// [`TERM`] bit set. A record and a lease's state always agree on which came last (both
/// follow the same entries); should they not, the promotion starts the lease at the
/// latest deadline it can have, never earlier.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Record(u64);

/// The bit that marks a [`Record`] as a term.
const TERM: u64 = 1 << 63;

impl Record {
    /// A checkpoint applied at `at`.
    fn checkpoint(at: Instant) -> Record {
        Record(Tick::of(at).0 & !TERM)
    }

    /// A grant or a reset carried by an entry of `term`.
    fn reset(term: u64) -> Record {
        Record(term | TERM)
    }

    /// When the checkpoint was applied, if it is one.
    fn checkpointed_at(self) -> Option<Instant> {
        (self.0 & TERM == 0).then(|| Tick(self.0).instant())
    }

    /// The term of the grant or reset, if it is one.
    fn reset_term(self) -> Option<u64> {
        (self.0 & TERM != 0).then_some(self.0 & !TERM)
    }
}

/// Every live lease's latest record, and when each term's first entry was applied.
#[derive(Debug)]
pub(crate) struct LeaseRecords {
    /// Packed: a hash table of 24-byte entries cost about 50 bytes per lease just past
    /// a doubling (decision #115); 16 bytes each since #121.
    leases: PackedMap<LeaseId, Record>,
    term_starts: BTreeMap<u64, Instant>,
    /// For a lease this node has no record of (its state came from a snapshot): when the
    /// snapshot was loaded or installed, and the term of its last entry.
    loaded_at: Instant,
    loaded_term: u64,
}

impl LeaseRecords {
    /// No records yet; the state was loaded at `loaded_at` from a snapshot whose last
    /// entry is of `term` (0 without one).
    pub(crate) fn new(loaded_at: Instant, term: u64) -> LeaseRecords {
        LeaseRecords {
            leases: PackedMap::new(),
            term_starts: BTreeMap::new(),
            loaded_at,
            loaded_term: term,
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

    /// A `LeaseCheckpoint` of `leases` has just been applied to `sm` at `now`, in an entry
    /// of `term`: each lease the state still has is recorded as checkpointed or reset, as
    /// the state now says (the command resets a lease whose remaining time is not below
    /// its TTL). Leases the state no longer has are skipped.
    pub(crate) fn checkpoint(
        &mut self,
        leases: impl IntoIterator<Item = LeaseId>,
        sm: &StateMachine,
        term: u64,
        now: Instant,
    ) {
        for lease in leases {
            if let Some(entry) = sm.lease_clock_entry(lease) {
                let record = match entry.checkpoint_remaining_ms {
                    Some(_) => Record::checkpoint(now),
                    None => Record::reset(term),
                };
                self.leases.insert(lease, record);
            }
        }
    }

    /// Follows an applied event: a grant is a lease's first record; an expiry or revoke
    /// forgets it.
    pub(crate) fn event(&mut self, kind: &EventKind, term: u64) {
        match kind {
            EventKind::LeaseGranted { lease, .. } => {
                self.leases.insert(*lease, Record::reset(term));
            }
            EventKind::LeaseRevoked { lease } | EventKind::LeaseExpired { lease } => {
                self.leases.remove(lease);
            }
            _ => {}
        }
    }

    /// When this node applied the lease's latest checkpoint, if a checkpoint is its latest
    /// record (the snapshot's load if it applied none since). `None` if its latest record
    /// is a grant or a reset.
    pub(crate) fn checkpointed_at(&self, lease: LeaseId) -> Option<Instant> {
        match self.leases.get(&lease) {
            Some(record) => record.checkpointed_at(),
            None => Some(self.loaded_at),
        }
    }

    /// The term of the lease's latest grant or reset, if one of those is its latest
    /// record (the snapshot's last term if it applied none since). `None` if its latest
    /// record is a checkpoint.
    pub(crate) fn reset_term(&self, lease: LeaseId) -> Option<u64> {
        match self.leases.get(&lease) {
            Some(record) => record.reset_term(),
            None => Some(self.loaded_term),
        }
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
    fn grants_checkpoints_and_resets_are_recorded_as_the_state_says_and_ends_forgotten() {
        let mut sm = StateMachine::default();
        let loaded = Instant::now();
        let mut r = LeaseRecords::new(loaded, 1);
        let t0 = loaded + Duration::from_millis(7);
        let granted = sm.apply_command(Command::LeaseGrant(LeaseGrant { ttl_ms: 10_000 }));
        let Response::LeaseGranted { lease, .. } = granted.response else {
            panic!("{granted:?}")
        };
        r.event(&granted.events[0].kind, 2);
        assert_eq!(
            (r.reset_term(lease), r.checkpointed_at(lease)),
            (Some(2), None)
        );
        // A lease the state does not have: nothing recorded; it reads as the snapshot's.
        let checkpoint = |sm: &mut StateMachine, remaining_ms| {
            sm.apply_command(Command::LeaseCheckpoint(LeaseCheckpoint {
                remaining_ms: vec![(lease, remaining_ms), (LeaseId(9), 5)],
            }));
        };
        checkpoint(&mut sm, 4_000);
        r.checkpoint([lease, LeaseId(9)], &sm, 3, t0);
        assert_eq!(
            (r.reset_term(lease), r.checkpointed_at(lease)),
            (None, Some(t0))
        );
        assert_eq!(r.reset_term(LeaseId(9)), Some(1));
        assert_eq!(r.checkpointed_at(LeaseId(9)), Some(loaded));
        // A remaining time not below the TTL is a reset: its term is what counts.
        checkpoint(&mut sm, 10_000);
        r.checkpoint([lease], &sm, 4, t0 + Duration::from_millis(1));
        assert_eq!(
            (r.reset_term(lease), r.checkpointed_at(lease)),
            (Some(4), None)
        );
        r.event(&EventKind::LeaseExpired { lease }, 4);
        assert_eq!(r.len(), 0);
        assert_eq!(std::mem::size_of::<(LeaseId, Record)>(), 16);
    }

    #[test]
    fn a_record_keeps_a_tick_or_a_term_apart() {
        let at = Instant::now() + Duration::from_secs(3600);
        assert_eq!(Record::checkpoint(at).checkpointed_at(), Some(at));
        assert_eq!(Record::checkpoint(at).reset_term(), None);
        for term in [0, 1, u64::MAX >> 1] {
            assert_eq!(Record::reset(term).reset_term(), Some(term));
            assert_eq!(Record::reset(term).checkpointed_at(), None);
        }
    }
}
