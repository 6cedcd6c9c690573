//! One thread per node that makes sled's writes durable. sled's own `flush_async` runs the
//! flush on sled's shared I/O pool, whose every new task wakes all seven of its idle
//! threads (a `notify_all`); a flush then hands its write to that pool again. Flushing from
//! a thread of our own skips the first of those two hand-offs. The thread blocks on its
//! queue while idle, and one flush answers every request queued before it began. A caller
//! that has nothing to do until its flush ends (a follower's append) flushes on its own
//! thread instead ([`Flusher::flush_here`]), sparing the hand-off to this one and back. A
//! leader's own appends are queued once the replication they allow has gone out
//! ([`Flusher::submit_after_ready`]).

use prometheus_client::metrics::histogram::Histogram;
use std::sync::mpsc;
use tokio::sync::oneshot;

/// What a flush's outcome is handed to, on the flush thread.
type Waiter = Box<dyn FnOnce(Result<(), String>) + Send>;

/// Test-only: a lock the flush thread takes before each flush, so a test that holds it
/// stalls the node's disk (see [`crate::Node::log_flush_gate`]).
#[cfg(feature = "unsafe-test-hooks")]
pub type FlushGate = std::sync::Arc<tokio::sync::Mutex<()>>;

/// The handle on the flush thread; the thread ends when the last handle is dropped.
#[derive(Clone)]
pub(crate) struct Flusher {
    requests: mpsc::Sender<Waiter>,
    /// For flushes on the caller's thread ([`Flusher::flush_here`]).
    db: sled::Db,
    /// Where the time from each request to its flush's end is recorded, once set.
    seconds: Option<Histogram>,
    #[cfg(feature = "unsafe-test-hooks")]
    gate: FlushGate,
}

impl Flusher {
    /// Starts the flush thread for `db`.
    pub(crate) fn start(db: sled::Db) -> std::io::Result<Flusher> {
        let (requests, queue) = mpsc::channel();
        #[cfg(feature = "unsafe-test-hooks")]
        let gate = FlushGate::default();
        #[cfg(feature = "unsafe-test-hooks")]
        let held = gate.clone();
        let thread_db = db.clone();
        std::thread::Builder::new()
            .name("baton-log-flush".into())
            .spawn(move || {
                run(&thread_db, &queue, || {
                    #[cfg(feature = "unsafe-test-hooks")]
                    drop(held.blocking_lock());
                })
            })?;
        Ok(Flusher {
            requests,
            db,
            seconds: None,
            #[cfg(feature = "unsafe-test-hooks")]
            gate,
        })
    }

    /// Test-only: the lock taken before each flush, on the thread or by [`Flusher::flush_here`].
    #[cfg(feature = "unsafe-test-hooks")]
    pub(crate) fn gate(&self) -> FlushGate {
        self.gate.clone()
    }

    /// Records, from now on, how long each request waits for its flush in `histogram`.
    pub(crate) fn observe(&mut self, histogram: Histogram) {
        self.seconds = Some(histogram);
    }

    /// Returns once everything written to `db` before the call is durable.
    pub(crate) async fn flush(&self) -> std::io::Result<()> {
        let (waiter, outcome) = oneshot::channel();
        self.submit(move |flushed| {
            // A requester that stopped waiting (its node shutting down) is not an error.
            let _ = waiter.send(flushed);
        })?;
        match outcome.await {
            Ok(flushed) => flushed,
            Err(_) => Err(stopped()),
        }
    }

    /// Flushes everything written to `db` before the call on the calling thread, blocking it
    /// for the length of one flush. For a caller that would only wait for the flush thread:
    /// it saves the two thread wake-ups of the hand-off (decision #109).
    pub(crate) async fn flush_here(&self) -> std::io::Result<()> {
        #[cfg(feature = "unsafe-test-hooks")]
        let _stalled = self.gate.lock().await;
        let started = std::time::Instant::now();
        let flushed = self.db.flush().map(|_| ()).map_err(std::io::Error::other);
        if let Err(e) = &flushed {
            tracing::error!(error = %e, "log flush failed");
        }
        if let Some(h) = &self.seconds {
            h.observe(started.elapsed().as_secs_f64());
        }
        flushed
    }

    /// Queues a flush of everything written to `db` before the call and returns at once;
    /// `done` runs on the flush thread with the outcome once that flush has ended.
    pub(crate) fn submit(
        &self,
        done: impl FnOnce(std::io::Result<()>) + Send + 'static,
    ) -> std::io::Result<()> {
        self.requests.send(self.waiter(done)).map_err(|_| stopped())
    }

    /// [`submit`](Self::submit), but the request reaches the flush thread only once the
    /// tasks that are ready on this runtime worker have run: a leader's append is followed
    /// by its replication tasks sending the entries, and waking the flush thread first put
    /// that wake-up (a system call and, on an idle core, an interrupt to it) and the flush
    /// thread's start on the way of the AppendEntries (decision #132). `done` gets an error
    /// if the thread has stopped. Outside a runtime the request goes at once.
    pub(crate) fn submit_after_ready(
        &self,
        done: impl FnOnce(std::io::Result<()>) + Send + 'static,
    ) {
        let waiter = self.waiter(done);
        let requests = self.requests.clone();
        let send = move || {
            if let Err(mpsc::SendError(waiter)) = requests.send(waiter) {
                waiter(Err(stopped().to_string()));
            }
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move {
                    // Runs again only after the worker has polled its other ready tasks
                    // and the I/O driver (tokio defers a yielded task until then).
                    tokio::task::yield_now().await;
                    send();
                });
            }
            Err(_) => send(),
        }
    }

    /// `done` as the flush thread calls it, recording the wait in the histogram if set.
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

/// The error of a flush asked of a thread that has ended.
fn stopped() -> std::io::Error {
    std::io::Error::other("the log flush thread has stopped")
}

/// Serves flush requests until every handle is gone. A flush covers every write made before
/// it began, so the requests that queued while one ran share the next one.
/// `before` runs before each flush (a test's stall; nothing in other builds), after the
/// flush's requests are taken: a request that queues while a test holds the stall waits
/// for the next flush, and so for the stall to end, instead of riding along with a flush
/// that was already past it.
fn run(db: &sled::Db, queue: &mpsc::Receiver<Waiter>, before: impl Fn()) {
    while let Ok(first) = queue.recv() {
        let mut waiters = vec![first];
        waiters.extend(queue.try_iter());
        before();
        let flushed = db.flush().map(|_| ()).map_err(|e| e.to_string());
        if let Err(e) = &flushed {
            tracing::error!(error = %e, "log flush failed");
        }
        for waiter in waiters {
            waiter(flushed.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// A database in a temporary directory with one unflushed write in tree `t`, and a
    /// flush thread for it.
    fn written() -> (tempfile::TempDir, sled::Db, sled::Tree, Flusher) {
        let dir = tempfile::tempdir().expect("temp dir");
        let db = sled::Config::new().path(dir.path()).open().expect("open");
        let tree = db.open_tree("t").expect("tree");
        let flusher = Flusher::start(db.clone()).expect("start");
        tree.insert(b"k", b"v".as_slice()).expect("insert");
        (dir, db, tree, flusher)
    }

    /// A request queued with `submit_after_ready` is not flushed while the task that
    /// queued it keeps the runtime's only thread, and is answered once it lets go.
    #[tokio::test]
    async fn a_deferred_request_waits_for_the_ready_tasks_and_is_answered() {
        let (_dir, _db, _tree, flusher) = written();
        let answered = Arc::new(AtomicBool::new(false));
        let (tx, rx) = oneshot::channel();
        let seen = answered.clone();
        flusher.submit_after_ready(move |flushed| {
            seen.store(true, Ordering::SeqCst);
            let _ = tx.send(flushed);
        });
        // This test's runtime has one thread, held here: the request cannot have gone.
        std::thread::sleep(std::time::Duration::from_millis(200));
        assert!(
            !answered.load(Ordering::SeqCst),
            "flushed before the runtime ran"
        );
        rx.await.expect("answered").expect("flushed");
        assert!(answered.load(Ordering::SeqCst));
    }

    /// A deferred request to a flush thread that has stopped gets an error, not silence.
    #[tokio::test]
    async fn a_deferred_request_to_a_stopped_thread_gets_an_error() {
        let dir = tempfile::tempdir().expect("temp dir");
        let db = sled::Config::new().path(dir.path()).open().expect("open");
        let (requests, queue) = mpsc::channel();
        drop(queue);
        let flusher = Flusher {
            requests,
            db,
            seconds: None,
            #[cfg(feature = "unsafe-test-hooks")]
            gate: FlushGate::default(),
        };
        let (tx, rx) = oneshot::channel();
        flusher.submit_after_ready(move |flushed| {
            let _ = tx.send(flushed);
        });
        let outcome = rx.await.expect("answered");
        assert!(outcome.is_err(), "a stopped thread reported a flush");
    }

    #[tokio::test]
    async fn a_flush_answers_and_the_thread_ends_with_its_last_handle() {
        let (dir, db, tree, flusher) = written();
        let second = flusher.clone();
        let (a, b) = tokio::join!(flusher.flush(), second.flush());
        a.expect("first flush");
        b.expect("second flush");
        drop((flusher, second));
        // The thread's clone of the database goes with the thread: the last one here can be
        // dropped and the directory opened again.
        drop((tree, db));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            match sled::Config::new().path(dir.path()).open() {
                Ok(db) => {
                    assert_eq!(
                        db.open_tree("t")
                            .expect("tree")
                            .get(b"k")
                            .expect("get")
                            .as_deref(),
                        Some(&b"v"[..])
                    );
                    break;
                }
                Err(e) => {
                    assert!(std::time::Instant::now() < deadline, "not reopened: {e}");
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
            }
        }
    }
}
