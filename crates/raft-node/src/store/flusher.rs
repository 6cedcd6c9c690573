//! How a node makes sled's writes durable: every flush runs on a tokio worker, blocking it
//! for the length of the flush, instead of being handed to a thread and reported back
//! (each hand-off a thread wake-up on the path of a commit; decisions #109 and #133).
//!
//! A caller that has nothing to do until its flush ends (a follower's append, a vote)
//! flushes at once ([`Flusher::flush`]). A leader's own appends queue a request
//! ([`Flusher::flush_queued`]): one task per node drains the queue, and one flush answers
//! every request queued before it began, in the order they were queued. While there are
//! followers the task first lets the worker run its other ready tasks, so the
//! AppendEntries that the append allows go out before the flush blocks the worker (#132).

use prometheus_client::metrics::histogram::Histogram;
use std::sync::{Arc, Mutex, MutexGuard};

/// What a flush's outcome is handed to, on the worker that flushed.
type Waiter = Box<dyn FnOnce(Result<(), String>) + Send>;

/// Test-only: a lock taken before each flush, so a test that holds it stalls the node's
/// disk (see [`crate::Node::log_flush_gate`]).
#[cfg(feature = "unsafe-test-hooks")]
pub type FlushGate = Arc<tokio::sync::Mutex<()>>;

/// The requests waiting for the queue's next flush.
#[derive(Default)]
struct Queue {
    waiters: Vec<Waiter>,
    /// Whether a task is draining the queue (it takes every request queued until it ends).
    draining: bool,
}

/// Flushes one node's database; clones share the queue.
#[derive(Clone)]
pub(crate) struct Flusher {
    db: sled::Db,
    queue: Arc<Mutex<Queue>>,
    /// Where the time from each request to its flush's end is recorded, once set.
    seconds: Option<Histogram>,
    #[cfg(feature = "unsafe-test-hooks")]
    gate: FlushGate,
}

impl Flusher {
    /// A flusher for `db`.
    pub(crate) fn new(db: sled::Db) -> Flusher {
        Flusher {
            db,
            queue: Arc::default(),
            seconds: None,
            #[cfg(feature = "unsafe-test-hooks")]
            gate: FlushGate::default(),
        }
    }

    /// Test-only: the lock taken before each flush.
    #[cfg(feature = "unsafe-test-hooks")]
    pub(crate) fn gate(&self) -> FlushGate {
        self.gate.clone()
    }

    /// Records, from now on, how long each request waits for its flush in `histogram`.
    pub(crate) fn observe(&mut self, histogram: Histogram) {
        self.seconds = Some(histogram);
    }

    /// Makes everything written to `db` before the call durable, on the calling worker,
    /// which it blocks for the length of one flush.
    pub(crate) async fn flush(&self) -> std::io::Result<()> {
        let started = std::time::Instant::now();
        let flushed = self.gated_flush().await;
        if let Some(h) = &self.seconds {
            h.observe(started.elapsed().as_secs_f64());
        }
        flushed
    }

    /// [`flush_now`](Self::flush_now) once a test's stall of the disk, if any, has ended.
    async fn gated_flush(&self) -> std::io::Result<()> {
        #[cfg(feature = "unsafe-test-hooks")]
        let _stalled = self.gate.lock().await;
        self.flush_now()
    }

    fn flush_now(&self) -> std::io::Result<()> {
        let flushed = self.db.flush().map(|_| ()).map_err(std::io::Error::other);
        if let Err(e) = &flushed {
            tracing::error!(error = %e, "log flush failed");
        }
        flushed
    }

    /// Queues a flush of everything written to `db` before the call and returns at once;
    /// `done` gets the outcome once that flush has ended, after the requests queued before
    /// it. With `after_ready`, the flush waits until the tasks that are ready on this
    /// worker have run: a leader's replication tasks sending the entries its append allows
    /// (decision #132). Outside a runtime the flush runs at once, on the calling thread.
    pub(crate) fn flush_queued(
        &self,
        after_ready: bool,
        done: impl FnOnce(std::io::Result<()>) + Send + 'static,
    ) {
        let waiter = self.waiter(done);
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            waiter(self.flush_now().map_err(|e| e.to_string()));
            return;
        };
        let mut queue = self.lock_queue();
        queue.waiters.push(waiter);
        if !queue.draining {
            queue.draining = true;
            runtime.spawn(self.clone().drain(after_ready));
        }
    }

    /// Flushes for the queued requests until none is left. A request that queues while a
    /// flush runs (or while a test stalls it) waits for the next one: that flush may have
    /// begun before the request's write. The task is spawned with a request queued, and
    /// ends, without another turn of the worker, once a flush leaves none.
    async fn drain(self, after_ready: bool) {
        loop {
            if after_ready {
                // Runs again only after the worker has polled its other ready tasks and
                // the I/O driver (tokio defers a yielded task until then).
                tokio::task::yield_now().await;
            }
            let waiters = std::mem::take(&mut self.lock_queue().waiters);
            let flushed = self.gated_flush().await.map_err(|e| e.to_string());
            for waiter in waiters {
                waiter(flushed.clone());
            }
            let mut queue = self.lock_queue();
            if queue.waiters.is_empty() {
                queue.draining = false;
                return;
            }
        }
    }

    /// The queue, even if a waiter panicked while it was held (it holds no invariant a
    /// panic could break: the requests are still owed a flush).
    fn lock_queue(&self) -> MutexGuard<'_, Queue> {
        self.queue
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// `done` as the queue calls it, recording the wait in the histogram if set.
    fn waiter(&self, done: impl FnOnce(std::io::Result<()>) + Send + 'static) -> Waiter {
        let started = std::time::Instant::now();
        let seconds = self.seconds.clone();
        Box::new(move |flushed| {
            if let Some(h) = &seconds {
                h.observe(started.elapsed().as_secs_f64());
            }
            done(flushed.map_err(std::io::Error::other));
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::oneshot;

    /// A database in a temporary directory with one unflushed write in tree `t`, and a
    /// flusher for it.
    fn written() -> (tempfile::TempDir, sled::Db, sled::Tree, Flusher) {
        let dir = tempfile::tempdir().expect("temp dir");
        let db = sled::Config::new().path(dir.path()).open().expect("open");
        let tree = db.open_tree("t").expect("tree");
        let flusher = Flusher::new(db.clone());
        tree.insert(b"k", b"v".as_slice()).expect("insert");
        (dir, db, tree, flusher)
    }

    /// A request queued to run after the ready tasks is not flushed while the task that
    /// queued it keeps the runtime's only thread, and is flushed after the tasks that became
    /// ready meanwhile (as a leader's replication tasks do once its append returns).
    #[tokio::test]
    async fn a_deferred_request_waits_for_the_ready_tasks_and_is_answered() {
        let (_dir, _db, _tree, flusher) = written();
        let order = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = oneshot::channel();
        let flushed_order = order.clone();
        flusher.flush_queued(true, move |flushed| {
            flushed_order.lock().expect("order").push("flushed");
            let _ = tx.send(flushed);
        });
        let sent_order = order.clone();
        let sent = tokio::spawn(async move { sent_order.lock().expect("order").push("sent") });
        // This test's runtime has one thread, held here: nothing can have run.
        std::thread::sleep(std::time::Duration::from_millis(200));
        assert!(
            order.lock().expect("order").is_empty(),
            "ran before the runtime did"
        );
        rx.await.expect("answered").expect("flushed");
        sent.await.expect("sent");
        assert_eq!(*order.lock().expect("order"), ["sent", "flushed"]);
    }

    /// Requests are answered in the order they were queued, also when some queue while an
    /// earlier flush runs and the runtime has workers to run flushes side by side.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn queued_requests_are_answered_in_order_by_a_later_flush() {
        let (_dir, _db, tree, flusher) = written();
        let answers = Arc::new(Mutex::new(Vec::new()));
        let mut outcomes = Vec::new();
        for i in 0..40u32 {
            tree.insert(i.to_be_bytes(), b"x".as_slice())
                .expect("insert");
            let (tx, rx) = oneshot::channel();
            let answers = answers.clone();
            flusher.flush_queued(i % 2 == 0, move |flushed| {
                answers.lock().expect("answers").push(i);
                let _ = tx.send(flushed);
            });
            outcomes.push(rx);
            if i % 3 == 0 {
                tokio::task::yield_now().await;
            }
        }
        for rx in outcomes {
            rx.await.expect("answered").expect("flushed");
        }
        let answered = answers.lock().expect("answers").clone();
        assert_eq!(answered, (0..40).collect::<Vec<_>>());
    }

    /// Outside a runtime the flush runs at once, on the caller's thread.
    #[test]
    fn outside_a_runtime_a_request_is_flushed_at_once() {
        let (_dir, _db, _tree, flusher) = written();
        let (tx, rx) = std::sync::mpsc::channel();
        flusher.flush_queued(true, move |flushed| {
            let _ = tx.send(flushed.is_ok());
        });
        assert_eq!(rx.try_recv(), Ok(true));
    }

    #[tokio::test]
    async fn a_flush_makes_the_write_durable() {
        let (dir, db, tree, flusher) = written();
        let second = flusher.clone();
        let (a, b) = tokio::join!(flusher.flush(), second.flush());
        a.expect("first flush");
        b.expect("second flush");
        drop((flusher, second, tree, db));
        let db = sled::Config::new().path(dir.path()).open().expect("reopen");
        assert_eq!(
            db.open_tree("t")
                .expect("tree")
                .get(b"k")
                .expect("get")
                .as_deref(),
            Some(&b"v"[..])
        );
    }
}
