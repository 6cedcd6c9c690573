//! Forwarded proposals that wait for their result from this node's own apply (decision
//! #146). A follower that forwarded a write and learned from the leader where it landed
//! (the entry's log id and the proposal's place in it) may commit that entry before the
//! leader answers; the state machine is deterministic, so the result this node's apply
//! computes for that place is the leader's.
//!
//! A wait is registered only while the entry is not applied yet (the state machine's
//! lock is held across the check and the registration), and is answered by the apply of
//! exactly that log id; a wait whose index was applied with another log id, or covered by
//! a snapshot, is dropped at the next apply, and its caller falls back on the leader's
//! answer.

use crate::types::{BatchReply, FlushedAt, LogId};
use baton_state_machine::Applied;
use std::sync::Mutex;
use tokio::sync::oneshot;

/// The waits, in no particular order (a handful at most: one per forwarded write in
/// flight).
#[derive(Default)]
pub(crate) struct ResultWaits(Mutex<Vec<(FlushedAt, oneshot::Sender<Applied>)>>);

/// The waits an `apply` call took out, answered as its entries are applied.
#[must_use = "the waits not answered go back with `ResultWaits::keep`"]
pub(crate) struct Taken {
    waiting: Vec<(FlushedAt, oneshot::Sender<Applied>)>,
    answered: Vec<(oneshot::Sender<Applied>, Applied)>,
}

impl ResultWaits {
    /// Registers a wait for the result at `at`; the caller must hold the state machine's
    /// lock and have checked that `at` is not applied yet.
    pub(crate) fn register(&self, at: FlushedAt) -> oneshot::Receiver<Applied> {
        let (tx, rx) = oneshot::channel();
        self.lock().push((at, tx));
        rx
    }

    /// Takes every wait out for an `apply` call (under the state machine's write lock).
    pub(crate) fn take(&self) -> Taken {
        Taken {
            waiting: std::mem::take(&mut *self.lock()),
            answered: Vec::new(),
        }
    }

    /// Puts back the waits `taken` did not answer whose entries are still to be applied
    /// (past `applied`), and returns the answers to send.
    pub(crate) fn keep(
        &self,
        taken: Taken,
        applied: u64,
    ) -> Vec<(oneshot::Sender<Applied>, Applied)> {
        let later: Vec<_> = taken
            .waiting
            .into_iter()
            .filter(|(at, tx)| at.log_id.index > applied && !tx.is_closed())
            .collect();
        if !later.is_empty() {
            self.lock().extend(later);
        }
        taken.answered
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(FlushedAt, oneshot::Sender<Applied>)>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Taken {
    /// Whether no wait was taken (the usual case: nothing to look at per entry).
    pub(crate) fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    /// The entry `log_id` was applied with `reply`: answers the waits for it.
    pub(crate) fn applied(&mut self, log_id: LogId, reply: &BatchReply) {
        let mut i = 0;
        while i < self.waiting.len() {
            let at = self.waiting[i].0;
            if at.log_id != log_id {
                i += 1;
                continue;
            }
            let (_, tx) = self.waiting.swap_remove(i);
            if let Some(applied) = reply.applied.get(at.slot as usize) {
                self.answered.push((tx, applied.clone()));
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests: a failure is reported by the panic
mod tests {
    use super::ResultWaits;
    use crate::types::{BatchReply, FlushedAt, LogId};
    use baton_state_machine::{Applied, Response, Revision};
    use openraft::CommittedLeaderId;

    fn id(term: u64, index: u64) -> LogId {
        LogId::new(CommittedLeaderId::new(term, 1), index)
    }

    fn applied(revision: u64) -> Applied {
        Applied {
            revision: Revision(revision),
            response: Response::Deleted { deleted: 0 },
            events: Vec::new(),
            replayed: false,
        }
    }

    #[test]
    fn a_wait_gets_the_result_at_its_place_in_its_own_entry_only() {
        let waits = ResultWaits::default();
        let mut mine = waits.register(FlushedAt {
            log_id: id(2, 5),
            slot: 1,
        });
        let mut replaced = waits.register(FlushedAt {
            log_id: id(1, 5),
            slot: 0,
        });
        let mut later = waits.register(FlushedAt {
            log_id: id(2, 6),
            slot: 0,
        });

        let mut taken = waits.take();
        let reply = BatchReply {
            applied: vec![applied(10), applied(11)],
        };
        taken.applied(id(2, 5), &reply);
        for (tx, applied) in waits.keep(taken, 5) {
            tx.send(applied).unwrap();
        }

        assert_eq!(mine.try_recv().unwrap(), applied(11));
        // Index 5 was applied with another term's entry: that wait is dropped, unanswered.
        assert!(replaced.try_recv().is_err());
        assert!(later.try_recv().is_err(), "index 6 is not applied yet");
        let mut taken = waits.take();
        assert!(!taken.is_empty(), "the wait for index 6 was kept");
        taken.applied(
            id(2, 6),
            &BatchReply {
                applied: vec![applied(12)],
            },
        );
        for (tx, applied) in waits.keep(taken, 6) {
            tx.send(applied).unwrap();
        }
        assert_eq!(later.try_recv().unwrap(), applied(12));
        assert!(waits.take().is_empty());
    }
}
