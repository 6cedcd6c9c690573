//! The one place a write's result reaches its caller: the node's registry of waiting
//! requests (etcd's `wait.Wait`). Every proposal carries a [`RequestId`] (the node that took
//! it from a client, that node's incarnation, a number); the node registers the id before
//! it proposes or forwards the proposal, and only this node's apply of the entry that
//! carries it answers the wait, on the leader and on a forwarding follower alike.
//!
//! A [`Wait`] dropped before its answer (the caller gave up, or the request failed)
//! removes itself: the registry holds only requests somebody still waits for, and
//! [`Waiting::len`] (`/metrics`: `baton_answer_waits`) returns to 0 when none is in flight.

use crate::types::{LogId, NodeId, RequestId};
use baton_state_machine::Applied;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::oneshot;

/// A request's result: its own [`Applied`], and the entry that carried it.
pub(crate) type Answered = (Applied, LogId);

/// The registry of one node (shared by its proposers and its apply).
pub struct Waiting {
    node: NodeId,
    /// Drawn at start, never 0: ids of an earlier run of this node (re-applied from the log
    /// after a restart) never match a wait of this one.
    incarnation: u64,
    next: AtomicU64,
    waits: Mutex<HashMap<u64, oneshot::Sender<Answered>>>,
    /// `waits.len()`, readable without the lock (the apply's fast path, `/metrics`).
    count: AtomicUsize,
}

impl Waiting {
    /// The registry of node `node`, for the run `incarnation` (0 is taken as 1).
    pub(crate) fn new(node: NodeId, incarnation: u64) -> Waiting {
        Waiting {
            node,
            incarnation: incarnation.max(1),
            next: AtomicU64::new(0),
            waits: Mutex::default(),
            count: AtomicUsize::new(0),
        }
    }

    /// A new request id of this node, and the wait its apply answers.
    pub(crate) fn register(self: &Arc<Waiting>) -> Wait {
        let seq = self.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        {
            let mut waits = self.lock();
            waits.insert(seq, tx);
            self.count.store(waits.len(), Ordering::Relaxed);
        }
        Wait {
            id: RequestId {
                node: self.node,
                incarnation: self.incarnation,
                seq,
            },
            answer: rx,
            registry: self.clone(),
        }
    }

    /// Whether `id` may have a wait here: one of this node's requests, of this run.
    pub(crate) fn is_mine(&self, id: &RequestId) -> bool {
        id.node == self.node && id.incarnation == self.incarnation
    }

    /// Requests waiting for their answer now.
    pub fn len(&self) -> usize {
        self.count.load(Ordering::Relaxed)
    }

    /// Whether no request waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Answers the waits of `results` (ids of this node's run, with what the apply gave
    /// them); a request nobody waits for any more is skipped.
    pub(crate) fn answer(&self, results: Vec<(u64, Answered)>) {
        if results.is_empty() {
            return;
        }
        let senders: Vec<_> = {
            let mut waits = self.lock();
            let senders = results
                .into_iter()
                .filter_map(|(seq, answered)| waits.remove(&seq).map(|tx| (tx, answered)))
                .collect();
            self.count.store(waits.len(), Ordering::Relaxed);
            senders
        };
        for (tx, answered) in senders {
            // The caller may have given up since: its wait is gone with it.
            let _ = tx.send(answered);
        }
    }

    fn forget(&self, seq: u64) {
        let mut waits = self.lock();
        waits.remove(&seq);
        self.count.store(waits.len(), Ordering::Relaxed);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, oneshot::Sender<Answered>>> {
        self.waits.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// One request's wait for its result; dropping it withdraws the request from the
/// registry.
pub(crate) struct Wait {
    id: RequestId,
    answer: oneshot::Receiver<Answered>,
    registry: Arc<Waiting>,
}

impl Wait {
    /// The id the proposal carries.
    pub(crate) fn id(&self) -> RequestId {
        self.id
    }

    /// The result, once this node's apply has given it. `None` if the registry was
    /// dropped (the node stopped).
    pub(crate) async fn answered(&mut self) -> Option<Answered> {
        (&mut self.answer).await.ok()
    }

    /// The result if the apply has already given it.
    pub(crate) fn try_answered(&mut self) -> Option<Answered> {
        self.answer.try_recv().ok()
    }
}

impl Drop for Wait {
    fn drop(&mut self) {
        self.registry.forget(self.id.seq);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests: a failure is reported by the panic
mod tests {
    use super::*;
    use baton_state_machine::{Response, Revision};

    fn applied(revision: u64) -> Applied {
        Applied {
            revision: Revision(revision),
            response: Response::Deleted { deleted: 0 },
            events: Vec::new(),
            replayed: false,
        }
    }

    fn at(index: u64) -> LogId {
        LogId::new(openraft::CommittedLeaderId::new(1, 1), index)
    }

    /// Each wait gets its own result once; an id of another node or of an earlier run of
    /// this node answers nobody; a dropped wait leaves the registry.
    #[tokio::test]
    async fn a_wait_gets_its_own_result_and_leaves_when_dropped() {
        let registry = Arc::new(Waiting::new(2, 77));
        let mut first = registry.register();
        let mut second = registry.register();
        let gone = registry.register();
        assert_eq!(registry.len(), 3);
        assert_ne!(first.id(), second.id());
        assert!(registry.is_mine(&first.id()));
        let earlier_run = RequestId {
            incarnation: 76,
            ..first.id()
        };
        let other_node = RequestId {
            node: 3,
            ..first.id()
        };
        assert!(!registry.is_mine(&earlier_run) && !registry.is_mine(&other_node));

        let gone_seq = gone.id().seq;
        drop(gone);
        assert_eq!(registry.len(), 2, "a caller that gives up leaves");
        registry.answer(vec![
            (second.id().seq, (applied(11), at(5))),
            (gone_seq, (applied(12), at(5))),
        ]);
        assert_eq!(second.answered().await.unwrap(), (applied(11), at(5)));
        assert!(first.try_answered().is_none());
        registry.answer(vec![(first.id().seq, (applied(13), at(6)))]);
        assert_eq!(first.try_answered().unwrap(), (applied(13), at(6)));
        // Answered twice (an entry applied again after a restart cannot, but a retry
        // could): the second finds nobody.
        registry.answer(vec![(first.id().seq, (applied(14), at(7)))]);
        drop((first, second));
        assert!(registry.is_empty());
    }
}
