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

    /// Forgets an entry owned by a lease that ended.
    pub(crate) fn remove_owned(&mut self, key: &str) {
        let removed = self.entries.remove(key);
        debug_assert!(removed.is_some_and(|e| e.owner.is_some()));
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
fn approx_bytes(key: &str, fingerprint: &str, response: &Response) -> usize {
    const ENTRY_OVERHEAD_BYTES: usize = 96;
    let payload = bincode::serialized_size(response).unwrap_or(0) as usize;
    ENTRY_OVERHEAD_BYTES + key.len() + fingerprint.len() + payload
}
