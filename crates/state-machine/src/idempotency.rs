//! The bounded table of first outcomes keyed by `Idempotency-Key`.
//!
//! An outcome owned by a live lease (the command named one) stays while the lease lives,
//! up to [`Bounds::idempotency_per_lease_max`] per lease; the rest, and whatever a lease
//! sheds, live in a shared window bounded in revisions, entries and bytes. A lease's end
//! drops what it owns.

use crate::ids::{LeaseId, Revision};
use crate::limits::Bounds;
use crate::outcome::Response;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One remembered outcome.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Entry {
    pub(crate) seq: u64,
    pub(crate) revision: Revision,
    /// What the command was (kind and target), to refuse a key reused for another one.
    pub(crate) fingerprint: String,
    pub(crate) response: Response,
    pub(crate) owner: Option<LeaseId>,
    pub(crate) bytes: usize,
}

/// The table. Leases hold their own index of owned entries (see `Lease::idempotency`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct IdempotencyTable {
    pub(crate) entries: BTreeMap<String, Entry>,
    /// Entries owned by no lease, oldest first: sequence number → key.
    pub(crate) window: BTreeMap<u64, String>,
    pub(crate) window_bytes: usize,
    pub(crate) next_seq: u64,
}

impl IdempotencyTable {
    pub(crate) fn get(&self, key: &str) -> Option<&Entry> {
        self.entries.get(key)
    }

    /// Records a first outcome. Returns its sequence number; the caller indexes it under
    /// the owning lease when there is one.
    pub(crate) fn insert(
        &mut self,
        key: String,
        revision: Revision,
        fingerprint: String,
        response: Response,
        owner: Option<LeaseId>,
    ) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        let bytes = approx_bytes(&key, &fingerprint, &response);
        if owner.is_none() {
            self.window.insert(seq, key.clone());
            self.window_bytes += bytes;
        }
        let entry = Entry {
            seq,
            revision,
            fingerprint,
            response,
            owner,
            bytes,
        };
        self.entries.insert(key, entry);
        seq
    }

    /// Moves an entry a lease sheds into the shared window.
    pub(crate) fn disown(&mut self, key: &str) {
        if let Some(entry) = self.entries.get_mut(key) {
            entry.owner = None;
            self.window.insert(entry.seq, key.to_owned());
            self.window_bytes += entry.bytes;
        }
    }

    /// Forgets an entry owned by a lease that ended; its bytes.
    pub(crate) fn remove_owned(&mut self, key: &str) -> usize {
        let removed = self.entries.remove(key);
        debug_assert!(removed.as_ref().is_some_and(|e| e.owner.is_some()));
        removed.map_or(0, |e| e.bytes)
    }

    /// Drops the oldest unowned entries beyond the bounds.
    pub(crate) fn prune(&mut self, current: Revision, bounds: &Bounds) {
        let keep_after = current
            .0
            .saturating_sub(bounds.idempotency_window_revisions);
        while let Some((_, key)) = self.window.first_key_value() {
            let Some(entry) = self.entries.get(key) else {
                break;
            };
            let over = self.window.len() > bounds.idempotency_entries_max
                || self.window_bytes > bounds.idempotency_bytes_max
                || entry.revision.0 <= keep_after;
            if !over {
                break;
            }
            let bytes = entry.bytes;
            if let Some((_, key)) = self.window.pop_first() {
                self.entries.remove(&key);
                self.window_bytes -= bytes;
            }
        }
    }
}

/// Approximate bytes of an entry, deterministic on every node.
pub(crate) fn approx_bytes(key: &str, fingerprint: &str, response: &Response) -> usize {
    const ENTRY_OVERHEAD_BYTES: usize = 96;
    let payload = bincode::serialized_size(response).unwrap_or(0) as usize;
    ENTRY_OVERHEAD_BYTES + key.len() + fingerprint.len() + payload
}

#[cfg(test)]
mod tests {
    use crate::testing::*;
    use crate::*;

    fn keyed(key: &str, command: Command) -> Proposal {
        Proposal {
            idempotency_key: Some(key.into()),
            command,
            caller: None,
        }
    }

    #[test]
    fn idempotent_retry_of_acquire_never_queues_twice_or_bumps_the_count_twice() {
        let mut sm = StateMachine::default();
        let [a, b] = [0; 2].map(|_| grant(&mut sm, 10_000));
        let first = sm.apply(keyed("k1", lock_cmd("L", a, "w", Mode::Exclusive, 0)));
        let retry = sm.apply(keyed("k1", lock_cmd("L", a, "w", Mode::Exclusive, 0)));
        assert!(retry.replayed);
        assert_eq!(retry.response, first.response);
        assert_eq!(retry.revision, first.revision);
        assert!(retry.events.is_empty());
        assert_eq!(
            sm.lock_state(&ResourceId::lock("L")).unwrap().holders[0].count,
            1
        );
        let queued = sm.apply(keyed("k2", lock_cmd("L", b, "w", Mode::Exclusive, 5_000)));
        let rev = sm.revision();
        let again = sm.apply(keyed("k2", lock_cmd("L", b, "w", Mode::Exclusive, 5_000)));
        assert_eq!(again.response, queued.response);
        assert_eq!(sm.revision(), rev);
        assert_eq!(
            sm.lock_state(&ResourceId::lock("L")).unwrap().queue.len(),
            1
        );
    }

    #[test]
    fn idempotent_retry_returns_the_first_outcome_even_after_the_state_moved_on() {
        let mut sm = StateMachine::default();
        let put = |v: &str| {
            keyed(
                "p",
                Command::Put(Put {
                    key: "k".into(),
                    value: v.into(),
                    lease: None,
                    prev_revision: Some(Revision(0)),
                }),
            )
        };
        let first = sm.apply(put("v"));
        assert!(matches!(first.response, Response::Put { .. }));
        // Without the key, the same CAS would now fail; with it, the first outcome returns.
        let retry = sm.apply(put("v"));
        assert_eq!(retry.response, first.response);
        assert_eq!(sm.get("k").unwrap().version, 1);
    }

    #[test]
    fn idempotency_key_reused_for_another_command_is_refused() {
        let mut sm = StateMachine::default();
        let a = grant(&mut sm, 10_000);
        sm.apply(keyed("k", lock_cmd("L", a, "w", Mode::Exclusive, 0)));
        let before = sm.clone();
        let other = sm.apply(keyed("k", lock_cmd("M", a, "w", Mode::Exclusive, 0)));
        assert_eq!(
            other.response,
            Response::Rejected(Rejection::IdempotencyKeyReused)
        );
        assert_eq!(sm, before);
    }

    #[test]
    fn the_same_key_with_any_other_field_is_refused_not_replayed() {
        let mut sm = StateMachine::default();
        let a = grant(&mut sm, 10_000);
        sm.apply(keyed("k", lock_cmd("L", a, "w", Mode::Exclusive, 5_000)));
        let before = sm.clone();
        // Same kind, same name, same lease: only the owner, the mode or the wait differ.
        for other in [
            lock_cmd("L", a, "x", Mode::Exclusive, 5_000),
            lock_cmd("L", a, "w", Mode::Shared, 5_000),
            lock_cmd("L", a, "w", Mode::Exclusive, 6_000),
        ] {
            let refused = sm.apply(keyed("k", other));
            assert_eq!(
                refused.response,
                Response::Rejected(Rejection::IdempotencyKeyReused)
            );
            assert_eq!(sm, before);
        }
    }

    #[test]
    fn keys_are_scoped_to_the_lease_so_clients_never_see_each_others_outcomes() {
        let mut sm = StateMachine::default();
        let [a, b] = [0; 2].map(|_| grant(&mut sm, 10_000));
        let first = sm.apply(keyed("k", lock_cmd("L", a, "w", Mode::Exclusive, 0)));
        assert!(matches!(first.response, Response::Granted(_)));
        // Another lease, the same key and name: its own request, its own answer (busy).
        let second = sm.apply(keyed("k", lock_cmd("L", b, "w", Mode::Exclusive, 0)));
        assert!(!second.replayed);
        assert!(
            matches!(
                second.response,
                Response::Rejected(Rejection::LockHeld { .. })
            ),
            "{:?}",
            second.response
        );
        // And the first lease still gets its own replay.
        let retry = sm.apply(keyed("k", lock_cmd("L", a, "w", Mode::Exclusive, 0)));
        assert!(retry.replayed);
        assert_eq!(retry.response, first.response);
    }

    #[test]
    fn idempotency_outcomes_owned_by_a_lease_go_with_it() {
        let mut sm = StateMachine::default();
        let a = grant(&mut sm, 10_000);
        sm.apply(keyed("k", lock_cmd("L", a, "w", Mode::Exclusive, 0)));
        assert_eq!(sm.counts().idempotency_entries, 1);
        revoke(&mut sm, a);
        assert_eq!(sm.counts().idempotency_entries, 0);
    }

    #[test]
    fn idempotency_window_is_bounded_in_entries_and_revisions() {
        let mut sm = StateMachine::new(Bounds {
            idempotency_entries_max: 3,
            idempotency_window_revisions: 5,
            ..Bounds::default()
        });
        for i in 0..5 {
            sm.apply(keyed(&format!("k{i}"), put_cmd("x", &i.to_string())));
        }
        assert_eq!(sm.counts().idempotency_entries, 3, "entry bound");
        for _ in 0..5 {
            put(&mut sm, "y", "v", None);
        }
        assert_eq!(sm.counts().idempotency_entries, 0, "revision window");
    }

    #[test]
    fn idempotency_per_lease_bound_moves_the_oldest_to_the_shared_window() {
        let mut sm = StateMachine::new(Bounds {
            idempotency_per_lease_max: 2,
            ..Bounds::default()
        });
        let a = grant(&mut sm, 10_000);
        for i in 0..4 {
            sm.apply(keyed(
                &format!("k{i}"),
                lock_cmd("L", a, "w", Mode::Exclusive, 0),
            ));
        }
        assert_eq!(
            sm.lease(a).map(|_| sm.counts().idempotency_entries),
            Some(4)
        );
        revoke(&mut sm, a);
        // The two the lease shed stay in the shared window; its own two went with it.
        assert_eq!(sm.counts().idempotency_entries, 2);
    }

    fn put_cmd(key: &str, value: &str) -> Command {
        Command::Put(Put {
            key: key.into(),
            value: value.into(),
            lease: None,
            prev_revision: None,
        })
    }
}
