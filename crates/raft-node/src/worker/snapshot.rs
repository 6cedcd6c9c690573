//! Snapshots paced by the size of the state. openraft's `LogsSinceLast(n)` builds one every
//! n entries whatever the state holds, and a snapshot is encoded under the state's lock
//! (apply waits) and written whole: with a million locks that cost came back every few
//! seconds under load. This job asks openraft for a snapshot once both hold:
//! - at least `snapshot_logs_since_last` entries were applied since the last one, and
//! - at least half as many commands as the state has items (keys, leases, locks,
//!   semaphores, elections) were applied since this job last asked.
//!
//! So a snapshot's cost, proportional to the state, is spread over commands in proportion
//! to the state (constant per command at any size), and the log replayed on a restart stays
//! within about half the state's item count in commands beyond the entry floor.
//!
//! Owns: nothing. Woken by: applied progress. Stops: when the node's token is cancelled.

use crate::store::SmShared;
use crate::types::Raft;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// Commands to apply between snapshots, per item of the state.
const COMMANDS_PER_ITEM: u64 = 2;

/// Whether a snapshot is due: `entries` applied since the last snapshot, `commands` applied
/// since the last request, `items` in the state.
pub(crate) fn due(entries: u64, floor: u64, commands: u64, items: u64) -> bool {
    entries >= floor && commands.saturating_mul(COMMANDS_PER_ITEM) >= items
}

/// The snapshot task: asks openraft for a snapshot whenever [`due`] says so, until `cancel`.
pub(crate) async fn run(raft: Raft, sm: Arc<SmShared>, floor: u64, cancel: CancellationToken) {
    let mut progress = sm.progress();
    let metrics = raft.metrics();
    // Commands applied (by this process's count) when a snapshot was last asked for.
    let mut asked_at = progress.borrow().commands;
    loop {
        tokio::select! {
            changed = progress.changed() => if changed.is_err() { break },
            () = cancel.cancelled() => break,
        }
        let applied = *progress.borrow_and_update();
        let snapshot = metrics.borrow().snapshot.map_or(0, |l| l.index);
        let entries = applied.log_index.saturating_sub(snapshot);
        if entries < floor {
            // Below the floor nothing is due: skip the state lock on this apply.
            continue;
        }
        let items = sm.query(|s| {
            let c = s.counts();
            c.keys + c.leases + c.locks + c.semaphores + c.elections
        });
        if due(entries, floor, applied.commands - asked_at, items) {
            // openraft ignores the request while a snapshot is being built (only at
            // start-up, when it builds one itself after a purge); the next request then
            // comes after as many commands again.
            if raft.trigger().snapshot().await.is_err() {
                break;
            }
            asked_at = applied.commands;
            tracing::debug!(index = applied.log_index, items, "snapshot requested");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::due;

    #[test]
    fn small_states_follow_the_entry_floor_and_big_ones_wait_for_half_their_size() {
        assert!(!due(9_999, 10_000, 1_000_000, 10));
        assert!(due(10_000, 10_000, 10_000, 10));
        // A million locks with their leases: two million items, a snapshot per million
        // commands, however many entries they came in.
        assert!(!due(50_000, 10_000, 999_999, 2_000_000));
        assert!(due(50_000, 10_000, 1_000_000, 2_000_000));
    }
}
