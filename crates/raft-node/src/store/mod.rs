//! The only code that knows sled. One `sled::Db` per node with two trees:
//! - `raft`: the vote, the committed log id, the last purged log id and the entries, keyed
//!   `0x00|name` and `0x01|big-endian index` (byte order = numeric order).
//! - `snapshot`: the current snapshot's metadata and the name of its file (the bytes live in
//!   `snapshot_files.rs`'s directory), written in one batch.
//!
//! The apply answers this node's waiting requests (`waiting.rs`), and nothing else does.
//!
//! The state machine lives in memory and is rebuilt on start from the last snapshot plus
//! the committed entries after it, which openraft re-applies (`read_committed`). So an
//! entry is never lost (it is in the flushed log) and never applied twice (the snapshot
//! records the last entry it contains).

mod claim_waits;
pub mod crash;
mod flusher;
mod lease_records;
mod log_store;
mod observers;
mod sm_store;
mod snapshot_files;
mod waiting;

pub use claim_waits::ClaimWait;
#[cfg(feature = "unsafe-test-hooks")]
pub use flusher::FlushGate;
pub(crate) use lease_records::LeaseRecords;
pub use log_store::LogStore;
#[cfg(feature = "unsafe-test-hooks")]
pub use log_store::lose_log_after;
pub use observers::{ApplyObserver, Observing};
pub use sm_store::{AppliedBatch, AppliedProgress, SmShared, SmStore};
pub(crate) use waiting::Wait;
pub use waiting::Waiting;

use crate::error::NodeError;
use std::path::Path;

/// How long opening waits for a previous owner of the directory (a process still exiting,
/// or a node of this process still being dropped) to let go of sled's lock.
const OPEN_LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Opens (or creates) the node's sled database.
pub async fn open_db(dir: &Path, cache_bytes: u64) -> Result<sled::Db, NodeError> {
    let deadline = tokio::time::Instant::now() + OPEN_LOCK_WAIT;
    loop {
        match sled::Config::new()
            .path(dir)
            .cache_capacity(cache_bytes)
            .open()
        {
            Ok(db) => {
                // sled syncs its files' contents, not their names: make the files a fresh
                // database just created durable in its directory (and that directory in
                // its parent) before anything written to them is reported durable.
                let synced = |dir: &Path| {
                    sync_dir(dir).map_err(|e| {
                        NodeError::Storage(format!("sync directory {}: {e}", dir.display()))
                    })
                };
                synced(dir)?;
                if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
                    synced(parent)?;
                }
                return Ok(db);
            }
            Err(e) if is_locked(&e) && tokio::time::Instant::now() < deadline => {
                tracing::info!(dir = %dir.display(), "data directory still locked; waiting");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            Err(e) => return Err(NodeError::Storage(format!("open {}: {e}", dir.display()))),
        }
    }
}

/// Makes the entries of directory `dir` (names created, renamed or removed in it) durable:
/// an `fsync` of the directory.
pub(crate) fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

/// Whether opening failed because another owner holds the directory's lock. sled 0.34.7
/// reports that as an `Io` error of kind `Other` whose message carries the lock's
/// `WouldBlock` (`config.rs`), so the message is what identifies it.
fn is_locked(e: &sled::Error) -> bool {
    matches!(e, sled::Error::Io(io) if io.kind() == std::io::ErrorKind::WouldBlock
        || io.to_string().starts_with("could not acquire lock"))
}

/// Opens both stores on one database in `data_dir` (snapshot files go beside it); a fresh
/// state machine gets the default bounds, and no request waits for its applies (storage
/// tests).
pub fn open(db: &sled::Db, data_dir: &Path) -> Result<(LogStore, SmStore), NodeError> {
    let nobody = std::sync::Arc::new(Waiting::new(0, 1));
    open_with(db, data_dir, baton_state_machine::Bounds::default(), nobody)
}

/// Opens both stores; `bounds` shape a fresh state machine (a snapshot keeps its own), and
/// the apply answers the requests of `waiting`.
pub fn open_with(
    db: &sled::Db,
    data_dir: &Path,
    bounds: baton_state_machine::Bounds,
    waiting: std::sync::Arc<Waiting>,
) -> Result<(LogStore, SmStore), NodeError> {
    let log = LogStore::open(db.clone())?;
    let sm = SmStore::open(db.clone(), data_dir, bounds, waiting)?;
    Ok((log, sm))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn opening_waits_for_the_previous_owner_to_let_go_of_the_directory() {
        let dir = tempfile::tempdir().expect("temp dir");
        let first = open_db(dir.path(), 1 << 20).await.expect("first open");
        let direct = sled::Config::new().path(dir.path()).open();
        assert!(
            direct.as_ref().is_err_and(is_locked),
            "a second open while the first holds the lock: {direct:?}"
        );
        let release = tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
            drop(first);
        });
        let second = open_db(dir.path(), 1 << 20)
            .await
            .expect("opened once released");
        release.await.expect("release task");
        drop(second);
    }
}
