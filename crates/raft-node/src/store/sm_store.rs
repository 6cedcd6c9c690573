//! `RaftStateMachine`: applies committed entries to the in-memory [`StateMachine`] and keeps
//! snapshots in files, their metadata in sled (decision #122). Readers (the node's queries,
//! watches, the lease clock) share the same state through [`SmShared`].

use super::claim_waits::{ClaimWait, ClaimWaits};
use super::crash::CrashHooks;
use super::lease_records::LeaseRecords;
use super::observers::{ApplyObserver, Observers, Observing, ProgressAlarm};
use super::snapshot_files::{SnapshotFiles, Written};
use super::waiting::Waiting;
use crate::codec;
use crate::error::NodeError;
use crate::types::{
    BatchReply, Entry, LogId, NodeId, Snapshot, SnapshotMeta, StorageError, StoredMembership,
    TypeConfig,
};
use crate::worker::clock_now;
use baton_state_machine::{Command, Event, ResourceId, Revision, StateMachine};
use openraft::storage::RaftStateMachine;
use openraft::{EntryPayload, RaftSnapshotBuilder, StorageIOError};
use std::io::{Cursor, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};
use tokio::sync::{broadcast, watch};

const SNAPSHOT_META_KEY: &[u8] = b"meta";
/// The current snapshot's file name (in the `snapshots` directory).
const SNAPSHOT_FILE_KEY: &[u8] = b"file";
/// The snapshot's bytes, where builds before decision #122 kept them: still read.
const SNAPSHOT_DATA_KEY: &[u8] = b"data";
/// Applied batches a slow subscriber may fall behind by before it must resync from the
/// state machine's event window.
const EVENT_CHANNEL_CAPACITY: usize = 4_096;

/// How far this node has applied the log.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AppliedProgress {
    /// The last applied log index (0: none).
    pub log_index: u64,
    /// The state machine's revision after it.
    pub revision: Revision,
    /// Proposals this process has applied since it started (snapshot pacing).
    pub commands: u64,
}

/// The events of one `apply` call (one or more entries), in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AppliedBatch {
    /// The revision after the batch.
    pub revision: Revision,
    /// Its events; each carries its own revision.
    pub events: Vec<Event>,
}

/// The applied state and what watches it.
pub(crate) struct SmState {
    pub(crate) machine: StateMachine,
    /// When this node applied each lease's latest record (for the lease clock).
    pub(crate) records: LeaseRecords,
    last_applied: Option<LogId>,
    membership: StoredMembership,
}

/// State shared by the state-machine store and the node's readers.
pub struct SmShared {
    // A std lock: held only for synchronous work (apply, a query, a snapshot encode), never
    // across an `.await`.
    state: RwLock<SmState>,
    progress: watch::Sender<AppliedProgress>,
    events: broadcast::Sender<Arc<AppliedBatch>>,
    /// Held-open acquires, woken when their queue entry is granted or cancelled.
    claim_waits: Arc<ClaimWaits>,
    /// Told of each applied batch on the apply path.
    observers: Arc<Observers>,
    /// Wakes the snapshot pacer once progress reaches its marks.
    alarm: ProgressAlarm,
    /// This node's requests waiting for their result, answered by the apply alone.
    waiting: Arc<Waiting>,
    /// The last index a snapshot install brought (0: none): a request whose entry it
    /// covered is never answered by an apply.
    installed: watch::Sender<u64>,
    /// Test-only: the lock taken before each apply.
    #[cfg(feature = "unsafe-test-hooks")]
    pub(crate) apply_gate: super::FlushGate,
}

impl SmShared {
    pub(crate) fn read(&self) -> RwLockReadGuard<'_, SmState> {
        self.state
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, SmState> {
        self.state
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Runs a query against the applied state.
    pub fn query<R>(&self, f: impl FnOnce(&StateMachine) -> R) -> R {
        f(&self.read().machine)
    }

    /// Runs a query against the applied state and this node's lease records.
    pub(crate) fn query_records<R>(&self, f: impl FnOnce(&StateMachine, &LeaseRecords) -> R) -> R {
        let state = self.read();
        f(&state.machine, &state.records)
    }

    /// Applied progress, to wait for an index or a revision.
    pub fn progress(&self) -> watch::Receiver<AppliedProgress> {
        self.progress.subscribe()
    }

    /// Events as they are applied.
    pub fn events(&self) -> broadcast::Receiver<Arc<AppliedBatch>> {
        self.events.subscribe()
    }

    /// Registers a wait for the queue entry enqueued at `enqueued` on `resource`.
    pub fn wait_claim(&self, resource: ResourceId, enqueued: Revision) -> ClaimWait {
        self.claim_waits.register(resource, enqueued)
    }

    /// The registry of this node's requests waiting for their result.
    pub fn waiting(&self) -> &Arc<Waiting> {
        &self.waiting
    }

    /// The last index a snapshot install brought to this node.
    pub(crate) fn installed(&self) -> watch::Receiver<u64> {
        self.installed.subscribe()
    }

    /// Registers `observer` for every applied batch until the handle is dropped.
    pub fn observe(&self, observer: Arc<dyn ApplyObserver>) -> Observing {
        self.observers.register(observer)
    }

    /// Publishes applied progress to its watchers and the snapshot pacer's alarm.
    fn publish(&self, progress: AppliedProgress) {
        self.progress.send_replace(progress);
        self.alarm.progress(progress);
    }

    /// The alarm the snapshot pacer sleeps on.
    pub(crate) fn alarm(&self) -> &ProgressAlarm {
        &self.alarm
    }
}

/// The state-machine store handed to openraft.
pub struct SmStore {
    shared: Arc<SmShared>,
    snapshots: sled::Tree,
    files: Arc<SnapshotFiles>,
    db: sled::Db,
    builds: Arc<AtomicU64>,
    crash: Arc<CrashHooks>,
}

impl SmStore {
    pub(crate) fn open(
        db: sled::Db,
        data_dir: &Path,
        bounds: baton_state_machine::Bounds,
        waiting: Arc<Waiting>,
    ) -> Result<SmStore, NodeError> {
        let snapshots = db
            .open_tree("snapshot")
            .map_err(|e| NodeError::Storage(e.to_string()))?;
        let files = SnapshotFiles::open(data_dir)
            .map_err(|e| NodeError::Storage(format!("snapshot directory: {e}")))?;
        let current = current_file(&snapshots).map_err(|e| NodeError::Storage(e.to_string()))?;
        files
            .remove_all_but(current.as_deref())
            .map_err(|e| NodeError::Storage(format!("snapshot directory: {e}")))?;
        let loaded =
            load_snapshot(&snapshots, &files).map_err(|e| NodeError::Storage(e.to_string()))?;
        let state = match loaded {
            Some((meta, data)) => SmState {
                machine: StateMachine::restore(&data)
                    .map_err(|e| NodeError::Storage(format!("restore snapshot: {e}")))?,
                records: LeaseRecords::new(clock_now(), last_term(&meta)),
                last_applied: meta.last_log_id,
                membership: meta.last_membership,
            },
            None => SmState {
                machine: StateMachine::new(bounds),
                records: LeaseRecords::new(clock_now(), 0),
                last_applied: None,
                membership: StoredMembership::default(),
            },
        };
        let progress = AppliedProgress {
            log_index: state.last_applied.map_or(0, |l| l.index),
            revision: state.machine.revision(),
            commands: 0,
        };
        let shared = Arc::new(SmShared {
            state: RwLock::new(state),
            progress: watch::channel(progress).0,
            events: broadcast::channel(EVENT_CHANNEL_CAPACITY).0,
            claim_waits: Arc::default(),
            observers: Arc::default(),
            alarm: ProgressAlarm::new(progress),
            waiting,
            installed: watch::channel(0).0,
            #[cfg(feature = "unsafe-test-hooks")]
            apply_gate: super::FlushGate::default(),
        });
        Ok(SmStore {
            shared,
            snapshots,
            files: Arc::new(files),
            db,
            builds: Arc::new(AtomicU64::new(0)),
            crash: Arc::new(CrashHooks::from_env()),
        })
    }

    /// The state shared with readers.
    pub fn shared(&self) -> Arc<SmShared> {
        self.shared.clone()
    }

    /// Makes a written snapshot file the current snapshot: renames it into place, names
    /// it in sled with `meta` (dropping a pre-#122 copy of the bytes there) and flushes,
    /// then removes every other file.
    async fn persist_snapshot(
        &self,
        meta: &SnapshotMeta,
        written: &Written,
    ) -> Result<(), StorageError> {
        let sig = Some(meta.signature());
        let meta_bytes =
            codec::encode(meta).map_err(|e| StorageIOError::write_snapshot(sig.clone(), &e))?;
        self.files
            .publish(written)
            .map_err(|e| StorageIOError::write_snapshot(sig.clone(), &e))?;
        let mut batch = sled::Batch::default();
        batch.insert(SNAPSHOT_META_KEY, meta_bytes);
        batch.insert(SNAPSHOT_FILE_KEY, written.name.as_bytes());
        batch.remove(SNAPSHOT_DATA_KEY);
        self.snapshots
            .apply_batch(batch)
            .map_err(|e| StorageIOError::write_snapshot(sig.clone(), &e))?;
        self.db
            .flush_async()
            .await
            .map_err(|e| StorageIOError::write_snapshot(sig.clone(), &e))?;
        self.files
            .remove_all_but(Some(&written.name))
            .map_err(|e| StorageIOError::write_snapshot(sig, &e))?;
        Ok(())
    }
}

/// The current snapshot's file name, if one is named.
fn current_file(tree: &sled::Tree) -> Result<Option<String>, StorageIOError<NodeId>> {
    let name = tree
        .get(SNAPSHOT_FILE_KEY)
        .map_err(|e| StorageIOError::read_snapshot(None, &e))?;
    Ok(name.map(|n| String::from_utf8_lossy(&n).into_owned()))
}

/// The current snapshot's metadata and bytes, read from its file (or from sled, where a
/// build before #122 left them).
fn load_snapshot(
    tree: &sled::Tree,
    files: &SnapshotFiles,
) -> Result<Option<(SnapshotMeta, Vec<u8>)>, StorageIOError<NodeId>> {
    let Some(meta) = tree
        .get(SNAPSHOT_META_KEY)
        .map_err(|e| StorageIOError::read_snapshot(None, &e))?
    else {
        return Ok(None);
    };
    let meta: SnapshotMeta =
        codec::decode(&meta).map_err(|e| StorageIOError::read_snapshot(None, &e))?;
    let sig = Some(meta.signature());
    let data = match current_file(tree)? {
        Some(name) => files
            .read(&name)
            .map_err(|e| StorageIOError::read_snapshot(sig, &e))?,
        None => match tree
            .get(SNAPSHOT_DATA_KEY)
            .map_err(|e| StorageIOError::read_snapshot(sig, &e))?
        {
            Some(data) => data.to_vec(),
            None => return Ok(None),
        },
    };
    Ok(Some((meta, data)))
}

/// Builds snapshots from a consistent view: it encodes under the read lock, so apply
/// waits for the encode and never interleaves with it.
pub struct SnapshotBuilder {
    store: SmStore,
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    async fn build_snapshot(&mut self) -> Result<Snapshot, StorageError> {
        let store = self.store.clone();
        // Encoded straight into its file under the read lock, on a blocking thread: no copy
        // of the whole encoding in memory (decision #122). Synced after the lock is let go.
        let built = tokio::task::spawn_blocking(move || {
            let state = store.shared.read();
            let build = store.builds.fetch_add(1, Ordering::Relaxed);
            let snapshot_id = match state.last_applied {
                Some(l) => format!(
                    "{}-{}-{}-{build}",
                    l.leader_id.term, l.leader_id.node_id, l.index
                ),
                None => format!("0-0-0-{build}"),
            };
            let meta = SnapshotMeta {
                last_log_id: state.last_applied,
                last_membership: state.membership.clone(),
                snapshot_id,
            };
            let name = SnapshotFiles::name_for(state.last_applied.map_or(0, |l| l.index));
            let written = store.files.write(name, |out| {
                state
                    .machine
                    .snapshot_into(out)
                    .map_err(std::io::Error::other)
            });
            drop(state);
            let written = written.and_then(|w| w.sync().map(|()| w));
            (store, meta, written)
        })
        .await;
        let (store, meta, written) = built.map_err(|e| StorageIOError::write_snapshot(None, &e))?;
        let written =
            written.map_err(|e| StorageIOError::write_snapshot(Some(meta.signature()), &e))?;
        store.crash.before_snapshot_persist();
        store.persist_snapshot(&meta, &written).await?;
        tracing::info!(snapshot = %meta.snapshot_id, bytes = written.bytes, "snapshot built");
        // openraft 0.9.25 keeps only the metadata of a snapshot it asked for
        // (`sm::worker::build_snapshot`); a follower that needs the bytes gets them from
        // `get_current_snapshot`, which reads the file.
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(Vec::new())),
        })
    }
}

impl Clone for SmStore {
    fn clone(&self) -> SmStore {
        SmStore {
            shared: self.shared.clone(),
            snapshots: self.snapshots.clone(),
            files: self.files.clone(),
            db: self.db.clone(),
            builds: self.builds.clone(),
            crash: self.crash.clone(),
        }
    }
}

impl RaftStateMachine<TypeConfig> for SmStore {
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), StorageError> {
        let state = self.shared.read();
        Ok((state.last_applied, state.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<BatchReply>, StorageError>
    where
        I: IntoIterator<Item = Entry> + Send,
        I::IntoIter: Send,
    {
        #[cfg(feature = "unsafe-test-hooks")]
        let _stalled = self.shared.apply_gate.clone().lock_owned().await;
        let mut replies = Vec::new();
        let mut events = Vec::new();
        // The results of this node's own requests, for the registry (nobody else's).
        let mut answers = Vec::new();
        let waiting = &self.shared.waiting;
        let anyone_waits = !waiting.is_empty();
        let mut commands = self.shared.progress.borrow().commands;
        let progress = {
            let mut state = self.shared.write();
            let now = clock_now();
            for entry in entries {
                state.last_applied = Some(entry.log_id);
                let term = entry.log_id.leader_id.term;
                state.records.entry(term, now);
                match entry.payload {
                    EntryPayload::Blank => {}
                    EntryPayload::Normal(batch) => {
                        commands += batch.proposals.len() as u64;
                        let SmState {
                            machine, records, ..
                        } = &mut *state;
                        for (id, p) in batch.proposals {
                            let checkpointed = match &p.command {
                                Command::LeaseCheckpoint(c) => {
                                    c.remaining_ms.iter().map(|(l, _)| *l).collect()
                                }
                                _ => Vec::new(),
                            };
                            let applied = machine.apply(p);
                            // After the apply: the state says which were reset.
                            records.checkpoint(checkpointed, machine, term, now);
                            for e in &applied.events {
                                records.event(&e.kind, term);
                            }
                            if anyone_waits && waiting.is_mine(&id) {
                                events.extend(applied.events.iter().cloned());
                                answers.push((id.seq, (applied, entry.log_id)));
                            } else {
                                // Nobody here waits for this result: its events move.
                                events.extend(applied.events);
                            }
                        }
                    }
                    EntryPayload::Membership(m) => {
                        state.membership = StoredMembership::new(Some(entry.log_id), m);
                    }
                }
                replies.push(BatchReply);
                self.crash.applied(entry.log_id.index);
            }
            AppliedProgress {
                log_index: state.last_applied.map_or(0, |l| l.index),
                revision: state.machine.revision(),
                commands,
            }
        };
        if !events.is_empty() {
            self.shared.claim_waits.wake(&events);
            let batch = Arc::new(AppliedBatch {
                revision: progress.revision,
                events,
            });
            self.shared.observers.applied(&batch);
            // Nobody listening is fine: watches subscribe when they start.
            let _ = self.shared.events.send(batch);
        }
        self.shared.publish(progress);
        // After the progress: an answered caller finds its write in every view of this
        // node (its state, its applied index).
        waiting.answer(answers);
        Ok(replies)
    }

    async fn get_snapshot_builder(&mut self) -> SnapshotBuilder {
        SnapshotBuilder {
            store: self.clone(),
        }
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, StorageError> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError> {
        let data = snapshot.into_inner();
        let machine = StateMachine::restore(&data)
            .map_err(|e| StorageIOError::read_snapshot(Some(meta.signature()), &e))?;
        // Persist first: a crash after this point restarts from the new snapshot.
        let sig = Some(meta.signature());
        let name = SnapshotFiles::name_for(meta.last_log_id.map_or(0, |l| l.index));
        let files = self.files.clone();
        let written = tokio::task::spawn_blocking(move || {
            let written = files
                .write(name, |out| out.write_all(&data))
                .and_then(|w| w.sync().map(|()| w));
            (data, written)
        })
        .await
        .map_err(|e| StorageIOError::write_snapshot(sig.clone(), &e))?;
        let (data, written) = written;
        let written = written.map_err(|e| StorageIOError::write_snapshot(sig, &e))?;
        drop(data);
        self.persist_snapshot(meta, &written).await?;
        let progress = {
            let mut state = self.shared.write();
            // Replace everything: nothing of the old state survives an install.
            *state = SmState {
                machine,
                records: LeaseRecords::new(clock_now(), last_term(meta)),
                last_applied: meta.last_log_id,
                membership: meta.last_membership.clone(),
            };
            AppliedProgress {
                log_index: state.last_applied.map_or(0, |l| l.index),
                revision: state.machine.revision(),
                commands: self.shared.progress.borrow().commands,
            }
        };
        tracing::info!(snapshot = %meta.snapshot_id, revision = %progress.revision, "snapshot installed");
        // The events of the skipped entries were never applied here: every waiter looks
        // at the new state.
        self.shared.claim_waits.wake_all();
        self.shared.observers.replaced();
        self.shared.publish(progress);
        self.shared.installed.send_replace(progress.log_index);
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot>, StorageError> {
        Ok(
            load_snapshot(&self.snapshots, &self.files)?.map(|(meta, data)| Snapshot {
                meta,
                snapshot: Box::new(Cursor::new(data)),
            }),
        )
    }
}

/// The term of a snapshot's last entry (0 for an empty one).
fn last_term(meta: &SnapshotMeta) -> u64 {
    meta.last_log_id.map_or(0, |l| l.leader_id.term)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{Batch, RequestId};
    use baton_state_machine::{LeaseGrant, Proposal};

    /// An entry at `index` of two lease grants, from the requests `ids`.
    fn grants(index: u64, ids: [RequestId; 2]) -> Entry {
        let grant = Proposal::from(Command::LeaseGrant(LeaseGrant { ttl_ms: 5_000 }));
        Entry {
            log_id: LogId::new(openraft::CommittedLeaderId::new(1, 1), index),
            payload: EntryPayload::Normal(Batch {
                proposals: ids.into_iter().map(|id| (id, grant.clone())).collect(),
            }),
        }
    }

    /// The apply answers the waits of this node's own requests, each with its own result,
    /// and nobody for the requests of another node or of an earlier run of this one.
    #[tokio::test]
    async fn the_apply_answers_this_nodes_requests_only() {
        let dir = tempfile::tempdir().expect("temp dir");
        let db = crate::store::open_db(dir.path(), 8 << 20)
            .await
            .expect("open");
        let waiting = Arc::new(Waiting::new(1, 9));
        let (_log, mut sm) = crate::store::open_with(
            &db,
            dir.path(),
            baton_state_machine::Bounds::default(),
            waiting.clone(),
        )
        .expect("stores");
        let (mut first, mut second) = (waiting.register(), waiting.register());
        let other_node = RequestId {
            node: 2,
            ..first.id()
        };
        let earlier_run = RequestId {
            incarnation: 8,
            ..second.id()
        };
        let mine = grants(1, [first.id(), second.id()]);
        sm.apply([mine.clone(), grants(2, [other_node, earlier_run])])
            .await
            .expect("apply");
        let (first, first_at) = first.try_answered().expect("answered");
        let (second, second_at) = second.try_answered().expect("answered");
        assert_eq!((first_at, second_at), (mine.log_id, mine.log_id));
        assert!(first.revision < second.revision, "each has its own grant");
        assert!(waiting.is_empty());
        assert_eq!(sm.shared().progress().borrow().log_index, 2);
    }
}
