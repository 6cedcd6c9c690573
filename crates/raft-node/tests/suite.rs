//! openraft's storage contract suite on the sled stores.

use baton_raft_node::store::{self, LogStore, SmStore};
use baton_raft_node::{StorageError, TypeConfig};
use openraft::StorageIOError;
use openraft::testing::{StoreBuilder, Suite};
use tempfile::TempDir;

struct SledBuilder;

impl StoreBuilder<TypeConfig, LogStore, SmStore, TempDir> for SledBuilder {
    async fn build(&self) -> Result<(TempDir, LogStore, SmStore), StorageError> {
        let dir = TempDir::new().map_err(|e| StorageIOError::write(&e))?;
        let db = store::open_db(dir.path(), 16 << 20)
            .await
            .map_err(|e| StorageIOError::write(&e))?;
        let (log, sm) = store::open(&db, dir.path()).map_err(|e| StorageIOError::write(&e))?;
        Ok((dir, log, sm))
    }
}

#[test]
fn sled_stores_pass_openraft_storage_suite() {
    if let Err(e) = Suite::test_all(SledBuilder) {
        panic!("storage suite failed: {e}");
    }
}

/// The log id of entry `index`, all of term 1 from node 1.
fn log_id(index: u64) -> baton_raft_node::LogId {
    baton_raft_node::LogId::new(openraft::CommittedLeaderId::new(1, 1), index)
}

/// Applies entries 1..=`n`, each granting one lease, and builds a snapshot of them.
async fn grant_and_snapshot(sm: &mut SmStore, n: u64) {
    use baton_raft_node::Batch;
    use baton_state_machine::{Command, LeaseGrant, Proposal};
    use openraft::storage::RaftStateMachine;
    use openraft::{Entry, EntryPayload, RaftSnapshotBuilder};

    let grant = Proposal::from(Command::LeaseGrant(LeaseGrant { ttl_ms: 5_000 }));
    let entries: Vec<_> = (1..=n)
        .map(|i| Entry::<TypeConfig> {
            log_id: log_id(i),
            payload: EntryPayload::Normal(Batch::new(vec![grant.clone()])),
        })
        .collect();
    sm.apply(entries).await.expect("apply the grants");
    sm.get_snapshot_builder()
        .await
        .build_snapshot()
        .await
        .expect("build a snapshot");
}

/// What the suite does not cover: the stores survive closing and reopening the database
/// (the vote, the committed pointer, and the state machine from its snapshot). Log entries
/// are appended only by openraft (their flush callback cannot be built outside it); the
/// cluster tests restart nodes with entries in their logs.
#[test]
fn sled_stores_reopen_with_vote_committed_pointer_and_snapshot() {
    use baton_raft_node::Vote;
    use openraft::storage::{RaftLogStorage, RaftStateMachine};

    let runtime = tokio::runtime::Runtime::new().unwrap();
    let dir = TempDir::new().unwrap();
    runtime.block_on(async {
        let db = store::open_db(dir.path(), 8 << 20).await.unwrap();
        let (mut log, mut sm) = store::open(&db, dir.path()).unwrap();
        log.save_vote(&Vote::new(1, 1)).await.unwrap();
        grant_and_snapshot(&mut sm, 3).await;
        log.save_committed(Some(log_id(3))).await.unwrap();
        drop((log, sm));
        db.flush().unwrap();
    });
    runtime.block_on(async {
        let db = store::open_db(dir.path(), 8 << 20).await.unwrap();
        let (mut log, mut sm) = store::open(&db, dir.path()).unwrap();
        assert_eq!(log.read_vote().await.unwrap(), Some(Vote::new(1, 1)));
        assert_eq!(log.read_committed().await.unwrap(), Some(log_id(3)));
        let (applied, _) = sm.applied_state().await.unwrap();
        assert_eq!(
            applied,
            Some(log_id(3)),
            "the state machine restarts from its snapshot"
        );
        let leases = sm.shared().query(|s| s.counts().leases);
        assert_eq!(leases, 3);
    });
}

/// A data directory from before snapshot files (decision #122) kept the snapshot's bytes
/// in sled: they are read, and the next snapshot moves them to a file. A file sled does
/// not name (what a crash between writing a snapshot and naming it leaves) is removed
/// when the store opens.
#[test]
fn a_snapshot_an_older_build_kept_in_sled_is_read_then_moved_to_a_file() {
    use openraft::RaftSnapshotBuilder;
    use openraft::storage::RaftStateMachine;

    let runtime = tokio::runtime::Runtime::new().unwrap();
    let dir = TempDir::new().unwrap();
    let snapshots = dir.path().join("snapshots");
    let files = || -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(&snapshots)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    };
    runtime.block_on(async {
        let db = store::open_db(dir.path(), 8 << 20).await.unwrap();
        let (_log, mut sm) = store::open(&db, dir.path()).unwrap();
        grant_and_snapshot(&mut sm, 2).await;
        assert_eq!(files(), vec!["snapshot-00000000000000000002.bin"]);
        // Make it what an older build wrote: the bytes in sled, no file.
        let tree = db.open_tree("snapshot").unwrap();
        let bytes = std::fs::read(snapshots.join(&files()[0])).unwrap();
        tree.insert("data", bytes).unwrap();
        tree.remove("file").unwrap();
        std::fs::remove_file(snapshots.join(&files()[0])).unwrap();
        std::fs::write(
            snapshots.join("snapshot-00000000000000000009.bin.0.tmp"),
            b"x",
        )
        .unwrap();
        drop((_log, sm));
        db.flush().unwrap();
    });
    runtime.block_on(async {
        let db = store::open_db(dir.path(), 8 << 20).await.unwrap();
        let (_log, mut sm) = store::open(&db, dir.path()).unwrap();
        assert!(files().is_empty(), "the orphan is removed: {:?}", files());
        let (applied, _) = sm.applied_state().await.unwrap();
        assert_eq!(applied, Some(log_id(2)));
        assert_eq!(sm.shared().query(|s| s.counts().leases), 2);
        let current = sm
            .get_current_snapshot()
            .await
            .unwrap()
            .expect("a snapshot");
        assert_eq!(current.meta.last_log_id, Some(log_id(2)));
        sm.get_snapshot_builder()
            .await
            .build_snapshot()
            .await
            .unwrap();
        assert_eq!(files(), vec!["snapshot-00000000000000000002.bin"]);
        let tree = db.open_tree("snapshot").unwrap();
        assert!(tree.get("data").unwrap().is_none(), "moved out of sled");
        let again = sm
            .get_current_snapshot()
            .await
            .unwrap()
            .expect("a snapshot");
        assert_eq!(again.snapshot.into_inner(), current.snapshot.into_inner());
    });
}
