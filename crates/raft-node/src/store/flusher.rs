//! One thread per node that makes sled's writes durable. sled's own `flush_async` runs the
//! flush on sled's shared I/O pool, whose every new task wakes all seven of its idle
//! threads (a `notify_all`); a flush then hands its write to that pool again. Flushing from
//! a thread of our own skips the first of those two hand-offs. The thread blocks on its
//! queue while idle, and one flush answers every request queued before it began.

use std::sync::mpsc;
use tokio::sync::oneshot;

/// Where a flush's outcome is sent.
type Waiter = oneshot::Sender<Result<(), String>>;

/// The handle on the flush thread; the thread ends when the last handle is dropped.
#[derive(Clone)]
pub(crate) struct Flusher {
    requests: mpsc::Sender<Waiter>,
}

impl Flusher {
    /// Starts the flush thread for `db`.
    pub(crate) fn start(db: sled::Db) -> std::io::Result<Flusher> {
        let (requests, queue) = mpsc::channel();
        std::thread::Builder::new()
            .name("baton-log-flush".into())
            .spawn(move || run(&db, &queue))?;
        Ok(Flusher { requests })
    }

    /// Returns once everything written to `db` before the call is durable.
    pub(crate) async fn flush(&self) -> std::io::Result<()> {
        let (waiter, outcome) = oneshot::channel();
        let stopped = || std::io::Error::other("the log flush thread has stopped");
        self.requests.send(waiter).map_err(|_| stopped())?;
        match outcome.await {
            Ok(flushed) => flushed.map_err(std::io::Error::other),
            Err(_) => Err(stopped()),
        }
    }
}

/// Serves flush requests until every handle is gone. A flush covers every write made before
/// it began, so the requests that queued while one ran share the next one.
fn run(db: &sled::Db, queue: &mpsc::Receiver<Waiter>) {
    while let Ok(first) = queue.recv() {
        let mut waiters = vec![first];
        waiters.extend(queue.try_iter());
        let flushed = db.flush().map(|_| ()).map_err(|e| e.to_string());
        if let Err(e) = &flushed {
            tracing::error!(error = %e, "log flush failed");
        }
        for waiter in waiters {
            // A requester that stopped waiting (its node shutting down) is not an error.
            let _ = waiter.send(flushed.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_flush_answers_and_the_thread_ends_with_its_last_handle() {
        let dir = tempfile::tempdir().expect("temp dir");
        let db = sled::Config::new().path(dir.path()).open().expect("open");
        let tree = db.open_tree("t").expect("tree");
        let flusher = Flusher::start(db.clone()).expect("start");
        tree.insert(b"k", b"v".as_slice()).expect("insert");
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
