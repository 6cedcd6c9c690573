//! openraft's storage contract suite on the sled stores.

use baton_raft_node::store::{self, LogStore, SmStore};
use baton_raft_node::{StorageError, TypeConfig};
use openraft::testing::{StoreBuilder, Suite};
use openraft::StorageIOError;
use tempfile::TempDir;

struct SledBuilder;

impl StoreBuilder<TypeConfig, LogStore, SmStore, TempDir> for SledBuilder {
    async fn build(&self) -> Result<(TempDir, LogStore, SmStore), StorageError> {
        let dir = TempDir::new().map_err(|e| StorageIOError::write(&e))?;
        let db = store::open_db(dir.path(), 16 << 20).map_err(|e| StorageIOError::write(&e))?;
        let (log, sm) = store::open(&db).map_err(|e| StorageIOError::write(&e))?;
        Ok((dir, log, sm))
    }
}

#[test]
fn sled_stores_pass_openraft_storage_suite() -> Result<(), StorageError> {
    Suite::test_all(SledBuilder)?;
    Ok(())
}
