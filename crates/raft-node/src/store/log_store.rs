//! `RaftLogStorage` on sled. An append is one insert per entry, in index order (a crash
//! leaves a prefix of them, decisions #101 and #142); a purge writes its pointer at once
//! and removes the entries below it on a thread of its own, a few at a time (#143); every
//! other operation is one insert or one atomic `Batch`. Nothing is reported saved before a
//! flush that began after it returned (sled loses unflushed writes even on
//! a plain crash). Flushes run on the node's tokio workers (`flusher.rs`).

use super::flusher::Flusher;
use crate::codec;
use crate::error::NodeError;
use crate::types::{Entry, LogId, NodeId, StorageError, TypeConfig, Vote};
use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{RaftLogReader, StorageIOError};
use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

/// The sled tree of the log, the vote and the pointers.
const TREE: &str = "raft";
const ENTRY: u8 = 0x01;
const VOTE_KEY: &[u8] = b"\x00vote";
const COMMITTED_KEY: &[u8] = b"\x00committed";
const PURGED_KEY: &[u8] = b"\x00last_purged";

/// Bytes of entries one replication read returns at most (at least one entry).
pub(crate) const READ_BYTES_MAX: usize = 4 << 20;

/// Purged entries the remover takes out between two pauses.
const PURGE_CHUNK_ENTRIES: u64 = 64;

/// The remover's pause after each chunk, so that it takes a small share of a CPU the
/// node's workers may need.
const PURGE_PAUSE: Duration = Duration::from_millis(1);

/// Encoded bytes of an append kept in memory as the log's tail (a bigger append is read
/// back from sled).
const TAIL_BYTES_MAX: usize = 256 << 10;

/// The entries of the last append (without a gap), less those a truncation or a purge has
/// removed since: the reads that follow an append at once (a leader's replication tasks
/// sending the entries, then the apply once they commit) are answered from here instead
/// of sled when they ask for nothing else (decision #141).
#[derive(Default)]
struct Tail(Vec<Entry>);

impl Tail {
    /// The entries of `start..end`, if this tail holds every one of them (a read reaching
    /// past the tail, such as an open-ended one, goes to sled).
    fn read(&self, start: u64, end: u64) -> Option<Vec<Entry>> {
        let first = self.0.first()?.log_id.index;
        let past = first.checked_add(self.0.len() as u64)?;
        if start < first || end > past || end <= start {
            return None;
        }
        let from = usize::try_from(start - first).ok()?;
        let to = usize::try_from(end - first).ok()?;
        Some(self.0[from..to].to_vec())
    }
}

/// The removal of purged entries. A purge only moves the pointer (one insert, and the
/// first index kept here, which reads start from); a remover thread then takes the
/// entries below it out of sled in chunks with pauses between them. Removing 10 000
/// entries in one go on `RaftCore`'s task stalled every write for 35-45 ms (#143).
struct Purger {
    tree: sled::Tree,
    /// The first index not purged (0: nothing purged): reads start no lower.
    kept_from: AtomicU64,
    /// Whether a remover is running. Changed, as `kept_from` is, under this lock.
    removing: Mutex<bool>,
}

impl Purger {
    fn removing(&self) -> MutexGuard<'_, bool> {
        self.removing
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Moves the purge point to `kept_from` and makes sure a remover runs.
    fn purge_below(self: &Arc<Self>, kept_from: u64) {
        let mut removing = self.removing();
        self.kept_from.fetch_max(kept_from, Ordering::AcqRel);
        if *removing {
            return;
        }
        *removing = true;
        drop(removing);
        let purger = Arc::downgrade(self);
        let spawned = std::thread::Builder::new()
            .name("log purge".into())
            .spawn(move || remove_purged(&purger, PURGE_PAUSE));
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "no thread for the log purge: removing here");
            remove_purged(&Arc::downgrade(self), Duration::ZERO);
        }
    }
}

/// The remover: takes purged entries out of sled, `PURGE_CHUNK_ENTRIES` at a time with a
/// `pause` after each, until none is left below the purge point (which may move on
/// meanwhile), or until the store is dropped. Each removal is one insert of its own, so
/// sled's other writers never wait for a batch; a crash leaves some entries below the
/// pointer, which reads skip and the next purge removes. A failed read or removal stops
/// it the same way (the next purge starts a remover again).
fn remove_purged(purger: &Weak<Purger>, pause: Duration) {
    if let Err(e) = remove_until_done(purger, pause) {
        tracing::warn!(error = %e, "log purge stopped; the next purge resumes it");
        if let Some(p) = purger.upgrade() {
            *p.removing() = false;
        }
    }
}

fn remove_until_done(purger: &Weak<Purger>, pause: Duration) -> Result<(), sled::Error> {
    let mut next: Option<u64> = None;
    loop {
        let Some(p) = purger.upgrade() else {
            return Ok(());
        };
        let end = p.kept_from.load(Ordering::Acquire);
        // The first entry still there below the purge point (entries have consecutive
        // indexes, so each one after it is removed by its key, never read).
        let from = match next {
            Some(n) => n,
            None => match p.tree.range(entry_key(0)..entry_key(end)).next() {
                Some(item) => index_of(&item?.0).unwrap_or(end),
                None => end,
            },
        };
        if from >= end {
            let mut removing = p.removing();
            if p.kept_from.load(Ordering::Acquire) <= from {
                *removing = false;
                return Ok(());
            }
            next = Some(from);
            continue;
        }
        let to = end.min(from.saturating_add(PURGE_CHUNK_ENTRIES));
        for index in from..to {
            p.tree.remove(entry_key(index))?;
        }
        next = Some(to);
        drop(p);
        if !pause.is_zero() {
            std::thread::sleep(pause);
        }
    }
}

/// The index an entry's key stands for (`None` for a key that is not an entry's).
fn index_of(key: &[u8]) -> Option<u64> {
    match key {
        [ENTRY, index @ ..] => Some(u64::from_be_bytes(index.try_into().ok()?)),
        _ => None,
    }
}

fn entry_key(index: u64) -> [u8; 9] {
    let mut key = [ENTRY; 9];
    key[1..].copy_from_slice(&index.to_be_bytes());
    key
}

/// Test-only: leaves a stopped node's log as a crash before its last flushes would have:
/// the entries after `index` and the commit pointer are gone. Returns how many entries
/// were removed.
#[cfg(feature = "unsafe-test-hooks")]
pub fn lose_log_after(db: &sled::Db, index: u64) -> Result<usize, NodeError> {
    let storage = |e: sled::Error| NodeError::Storage(e.to_string());
    let tree = db.open_tree(TREE).map_err(storage)?;
    let mut batch = sled::Batch::default();
    let mut removed = 0;
    for item in tree.range(entry_key(index.saturating_add(1))..=entry_key(u64::MAX)) {
        let (key, _) = item.map_err(storage)?;
        batch.remove(key);
        removed += 1;
    }
    batch.remove(COMMITTED_KEY);
    tree.apply_batch(batch).map_err(storage)?;
    db.flush().map_err(storage)?;
    Ok(removed)
}

/// The Raft log, vote and commit pointer. Cloning shares the same tree.
#[derive(Clone)]
pub struct LogStore {
    flusher: Flusher,
    /// This node's id, once known: entries another leader made are flushed inline.
    node: Option<NodeId>,
    tree: sled::Tree,
    /// The last committed index this node saved, for status reports (0: none).
    committed: Arc<AtomicU64>,
    /// Whether the membership has another voter, so that a leader's own flush is one of
    /// several copies a commit can count (set by the node; decision #132).
    replicating: Arc<AtomicBool>,
    /// The entries of the last append, while they are the end of the log.
    tail: Arc<Mutex<Tail>>,
    /// Where the log starts, and the removal of what a purge left below that.
    purger: Arc<Purger>,
}

impl LogStore {
    pub(crate) fn open(db: sled::Db) -> Result<LogStore, NodeError> {
        let tree = db
            .open_tree(TREE)
            .map_err(|e| NodeError::Storage(e.to_string()))?;
        let flusher = Flusher::new(db);
        let purger = Arc::new(Purger {
            tree: tree.clone(),
            kept_from: AtomicU64::new(0),
            removing: Mutex::new(false),
        });
        let store = LogStore {
            flusher,
            node: None,
            tree,
            committed: Arc::new(AtomicU64::new(0)),
            replicating: Arc::new(AtomicBool::new(false)),
            tail: Arc::default(),
            purger,
        };
        let purged: Option<LogId> = store
            .get(PURGED_KEY)
            .map_err(|e| NodeError::Storage(e.to_string()))?;
        if let Some(p) = purged {
            let kept_from = p.index.saturating_add(1);
            store.purger.kept_from.store(kept_from, Ordering::Release);
        }
        let committed: Option<LogId> = store
            .get::<Option<LogId>>(COMMITTED_KEY)
            .map_err(|e| NodeError::Storage(e.to_string()))?
            .flatten();
        if let Some(c) = committed {
            store.committed.store(c.index, Ordering::Relaxed);
        }
        Ok(store)
    }

    /// A handle on the committed index, for status reports.
    pub fn committed_index(&self) -> Arc<AtomicU64> {
        self.committed.clone()
    }

    /// The switch the node sets while the membership has another voter: a leader then
    /// asks for its own flush once its entries have gone out, and at once otherwise.
    pub(crate) fn replicating(&self) -> Arc<AtomicBool> {
        self.replicating.clone()
    }

    fn get<T: serde::de::DeserializeOwned>(
        &self,
        key: &[u8],
    ) -> Result<Option<T>, StorageIOError<NodeId>> {
        match self.tree.get(key).map_err(|e| StorageIOError::read(&e))? {
            Some(bytes) => codec::decode(&bytes)
                .map(Some)
                .map_err(|e| StorageIOError::read(&e)),
            None => Ok(None),
        }
    }

    /// Test-only: the lock taken before each of the node's log flushes.
    #[cfg(feature = "unsafe-test-hooks")]
    pub(crate) fn flush_gate(&self) -> super::flusher::FlushGate {
        self.flusher.gate()
    }

    /// Tells the store this node's id: from then on it flushes entries that another
    /// leader made (a follower's appends) on the appending task, before `append` returns.
    pub(crate) fn set_node(&mut self, id: NodeId) {
        self.node = Some(id);
    }

    /// Records how long each flush takes in `histogram`.
    pub(crate) fn observe_fsync(
        &mut self,
        histogram: prometheus_client::metrics::histogram::Histogram,
    ) {
        self.flusher.observe(histogram);
    }

    fn last_entry_id(&self) -> Result<Option<LogId>, StorageIOError<NodeId>> {
        match self.tree.scan_prefix([ENTRY]).next_back() {
            Some(item) => {
                let (_, bytes) = item.map_err(|e| StorageIOError::read_logs(&e))?;
                let entry: Entry =
                    codec::decode(&bytes).map_err(|e| StorageIOError::read_logs(&e))?;
                Ok(Some(entry.log_id))
            }
            None => Ok(None),
        }
    }

    /// The tail, even if a holder panicked (no change to it can stop halfway).
    fn lock_tail(&self) -> MutexGuard<'_, Tail> {
        self.tail
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn read_range(
        &self,
        start: u64,
        end: u64,
        bytes_max: usize,
    ) -> Result<Vec<Entry>, StorageError> {
        // Purged entries the remover has not reached yet are not part of the log.
        let start = start.max(self.purger.kept_from.load(Ordering::Acquire));
        if start >= end {
            return Ok(Vec::new());
        }
        // The tail is at most TAIL_BYTES_MAX encoded, below any `bytes_max` used here.
        if bytes_max >= TAIL_BYTES_MAX
            && let Some(entries) = self.lock_tail().read(start, end)
        {
            return Ok(entries);
        }
        let mut out = Vec::new();
        let mut bytes_total = 0;
        for item in self.tree.range(entry_key(start)..entry_key(end)) {
            let (_, bytes) = item.map_err(|e| StorageIOError::read_logs(&e))?;
            bytes_total += bytes.len();
            if !out.is_empty() && bytes_total > bytes_max {
                break;
            }
            out.push(codec::decode(&bytes).map_err(|e| StorageIOError::read_logs(&e))?);
        }
        Ok(out)
    }
}

fn bounds(range: &impl RangeBounds<u64>) -> (u64, u64) {
    let start = match range.start_bound() {
        Bound::Included(s) => *s,
        Bound::Excluded(s) => s.saturating_add(1),
        Bound::Unbounded => 0,
    };
    let end = match range.end_bound() {
        Bound::Included(e) => e.saturating_add(1),
        Bound::Excluded(e) => *e,
        Bound::Unbounded => u64::MAX,
    };
    (start, end)
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        let (start, end) = bounds(&range);
        self.read_range(start, end, usize::MAX)
    }

    async fn limited_get_log_entries(
        &mut self,
        start: u64,
        end: u64,
    ) -> Result<Vec<Entry>, StorageError> {
        self.read_range(start, end, READ_BYTES_MAX)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError> {
        let last_purged_log_id: Option<LogId> = self.get(PURGED_KEY)?;
        // Entries below the pointer may still be there (the remover's work): the log
        // ends at the pointer unless an entry above it is there.
        let last_log_id = std::cmp::max(self.last_entry_id()?, last_purged_log_id);
        Ok(LogState {
            last_purged_log_id,
            last_log_id,
        })
    }

    async fn get_log_reader(&mut self) -> LogStore {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), StorageError> {
        let bytes = codec::encode(vote).map_err(|e| StorageIOError::write_vote(&e))?;
        self.tree
            .insert(VOTE_KEY, bytes)
            .map_err(|e| StorageIOError::write_vote(&e))?;
        self.flusher
            .flush()
            .await
            .map_err(|e| StorageIOError::write_vote(&e))?;
        Ok(())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, StorageError> {
        Ok(self.get(VOTE_KEY)?)
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), StorageError> {
        // No flush of its own: the next log flush covers it. A stale value after a crash
        // only delays applying on restart; reads do not trust it (a leader restored in its
        // old term takes its last log index as the read index, `worker::reader`).
        let bytes = codec::encode(&committed).map_err(|e| StorageIOError::write(&e))?;
        self.tree
            .insert(COMMITTED_KEY, bytes)
            .map_err(|e| StorageIOError::write(&e))?;
        if let Some(c) = committed {
            self.committed.store(c.index, Ordering::Relaxed);
        }
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, StorageError> {
        Ok(self.get::<Option<LogId>>(COMMITTED_KEY)?.flatten())
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError>
    where
        I: IntoIterator<Item = Entry> + Send,
        I::IntoIter: Send,
    {
        // Each entry is a plain insert, in index order. sled recovers its log up to the
        // first torn message, so a crash leaves a prefix of these entries, never a hole,
        // and none of them was reported flushed. A `sled::Batch` would add nothing to
        // that and costs two extra buffer writes, each with its own `fdatasync` (sled
        // seals and writes its I/O buffer before and after a batch): three flushes for
        // every AppendEntries of several entries a follower receives (decision #142).
        let mut kept = Vec::new();
        let mut kept_bytes = 0;
        let mut leader = None;
        for entry in entries {
            leader.get_or_insert(entry.log_id.leader_id.node_id);
            let bytes = codec::encode(&entry).map_err(|e| StorageIOError::write_logs(&e))?;
            kept_bytes += bytes.len();
            self.tree
                .insert(entry_key(entry.log_id.index), bytes)
                .map_err(|e| StorageIOError::write_logs(&e))?;
            kept.push(entry);
        }
        // The tail follows the inserts: openraft reads only entries it appended, after
        // the append returns, and until then a read of these indexes goes to sled.
        *self.lock_tail() = if kept_bytes <= TAIL_BYTES_MAX {
            Tail(kept)
        } else {
            Tail::default()
        };
        // Entries another leader made reach a follower, whose `RaftCore` waits for their
        // flush before it does anything else: flushing here spares the hand-off to another
        // task and back, on the path of every commit (decision #109).
        if let (Some(me), Some(by)) = (self.node, leader)
            && by != me
        {
            callback.log_io_completed(self.flusher.flush().await);
            return Ok(());
        }
        // Readable now; durable only once a flush that began after this insert has ended,
        // and only then reported. Returning before that lets the leader replicate while its
        // own flush runs (decision #106); openraft still waits for the report before the
        // leader counts its own copy. The flush runs on a worker of this node (#133): with
        // other voters once the entries have gone out to them (#132); alone, this flush is
        // the commit, and it runs as soon as the worker is free.
        let replicating = self.replicating.load(Ordering::Relaxed);
        self.flusher.flush_queued(replicating, move |flushed| {
            callback.log_io_completed(flushed)
        });
        Ok(())
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError> {
        self.lock_tail().0.retain(|e| e.log_id.index < log_id.index);
        let mut batch = sled::Batch::default();
        for item in self
            .tree
            .range(entry_key(log_id.index)..entry_key(u64::MAX))
        {
            let (key, _) = item.map_err(|e| StorageIOError::write_logs(&e))?;
            batch.remove(key);
        }
        self.tree
            .apply_batch(batch)
            .map_err(|e| StorageIOError::write_logs(&e))?;
        self.flusher
            .flush()
            .await
            .map_err(|e| StorageIOError::write_logs(&e))?;
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        self.lock_tail().0.retain(|e| e.log_id.index > log_id.index);
        // The pointer first: sled recovers a prefix of its writes, so no removal that
        // follows can survive a crash without it, and there is never a hole in the log
        // without a pointer above it. Reads skip what is below it from now on; the
        // entries themselves go on the remover's thread (#143). No flush: openraft does
        // not ask for one, and the next flush of the log covers the pointer.
        let pointer = codec::encode(&log_id).map_err(|e| StorageIOError::write_logs(&e))?;
        self.tree
            .insert(PURGED_KEY, pointer)
            .map_err(|e| StorageIOError::write_logs(&e))?;
        self.purger.purge_below(log_id.index.saturating_add(1));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::Batch;
    use openraft::{CommittedLeaderId, EntryPayload};

    fn entry(index: u64) -> Entry {
        Entry {
            log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
            payload: EntryPayload::Normal(Batch::new(vec![])),
        }
    }

    fn indexes(entries: Option<Vec<Entry>>) -> Option<Vec<u64>> {
        entries.map(|es| es.iter().map(|e| e.log_id.index).collect())
    }

    /// A purge moves the log's start at once (reads, the log state), and the entries
    /// below it leave sled afterwards, on the remover's thread.
    #[tokio::test]
    async fn a_purge_moves_the_start_at_once_and_removes_the_entries_after() {
        let db = sled::Config::new().temporary(true).open().expect("sled");
        let mut store = LogStore::open(db).expect("store");
        for index in 1..=300 {
            let bytes = codec::encode(&entry(index)).expect("encode");
            store.tree.insert(entry_key(index), bytes).expect("insert");
        }
        let id = |index| LogId::new(CommittedLeaderId::new(1, 1), index);
        store.purge(id(200)).await.expect("purge");
        let read = store.try_get_log_entries(0..=300).await.expect("read");
        assert_eq!(indexes(Some(read)), Some((201..=300).collect()));
        let state = store.get_log_state().await.expect("state");
        assert_eq!(state.last_purged_log_id, Some(id(200)));
        assert_eq!(state.last_log_id, Some(id(300)));
        // Past the last entry (as after a snapshot install): the log ends at the pointer
        // even while entries below it are still in sled.
        store.purge(id(400)).await.expect("purge all");
        assert!(
            store
                .try_get_log_entries(0..500)
                .await
                .expect("read")
                .is_empty()
        );
        let state = store.get_log_state().await.expect("state");
        assert_eq!(state.last_log_id, Some(id(400)));
        let mut left = usize::MAX;
        for _ in 0..1_000 {
            left = store.tree.scan_prefix([ENTRY]).count();
            if left == 0 && !*store.purger.removing() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(left, 0, "the remover took every purged entry out of sled");
    }

    /// The tail answers a read only when it holds every entry of the read's range.
    #[test]
    fn the_tail_answers_only_reads_it_covers() {
        let tail = Tail((5..8).map(entry).collect());
        assert_eq!(indexes(tail.read(5, 8)), Some(vec![5, 6, 7]));
        assert_eq!(indexes(tail.read(6, 7)), Some(vec![6]));
        assert_eq!(indexes(tail.read(7, u64::MAX)), None, "open-ended");
        assert_eq!(indexes(tail.read(6, 9)), None, "ends past the tail");
        assert_eq!(indexes(tail.read(4, 8)), None, "starts before the tail");
        assert_eq!(indexes(tail.read(8, 9)), None, "starts after the tail");
        assert_eq!(indexes(tail.read(6, 6)), None, "empty range");
        assert_eq!(indexes(Tail::default().read(0, 1)), None, "empty tail");
    }
}
