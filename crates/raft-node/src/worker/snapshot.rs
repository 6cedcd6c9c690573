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
//! Owns: nothing. Woken by: the store's progress alarm, set to the next index and command
//! count at which a snapshot could be due (not by every apply). Stops: when the node's
//! token is cancelled.

use crate::store::SmShared;
use crate::types::Raft;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// Commands to apply between snapshots, per item of the state.
const COMMANDS_PER_ITEM: u64 = 2;

/// Whether a snapshot is due: `entries` applied since the last snapshot, `commands` applied
/// since the last request (at least one: a request is never repeated before a new command,
/// so one that openraft is still building is not asked for again and again), `items` in
/// the state.
pub(crate) fn due(entries: u64, floor: u64, commands: u64, items: u64) -> bool {
    entries >= floor && commands >= 1 && commands.saturating_mul(COMMANDS_PER_ITEM) >= items
}

/// The earliest progress at which [`due`] can hold again: the log index `floor` entries
/// past the snapshot at `snapshot`, and the command count that covers `items` (and at
/// least one command) after `asked_at`.
pub(crate) fn next_marks(snapshot: u64, floor: u64, asked_at: u64, items: u64) -> (u64, u64) {
    (
        snapshot.saturating_add(floor),
        asked_at.saturating_add(items.div_ceil(COMMANDS_PER_ITEM).max(1)),
    )
}

/// The snapshot task: asks openraft for a snapshot whenever [`due`] says so, until `cancel`.
/// Between checks it sleeps until progress reaches [`next_marks`]; the marks are taken
/// with the snapshot index and item count of the check, so a snapshot that completes or a
/// state that grows in between only makes the next check come early (and set new marks).
pub(crate) async fn run(raft: Raft, sm: Arc<SmShared>, floor: u64, cancel: CancellationToken) {
    let progress = sm.progress();
    let metrics = raft.metrics();
    // Commands applied (by this process's count) when a snapshot was last asked for.
    let mut asked_at = progress.borrow().commands;
    loop {
        let applied = *progress.borrow();
        let snapshot = metrics.borrow().snapshot.map_or(0, |l| l.index);
        let entries = applied.log_index.saturating_sub(snapshot);
        let items = if entries < floor {
            // Below the floor nothing is due: the item count can wait for the floor.
            0
        } else {
            let items = sm.query(|s| {
                let c = s.counts();
                c.keys + c.leases + c.locks + c.semaphores + c.elections
            });
            if due(entries, floor, applied.commands - asked_at, items) {
                // openraft ignores the request while a snapshot is being built (only at
                // start-up, when it builds one itself after a purge); the next request
                // then comes after as many commands again.
                if raft.trigger().snapshot().await.is_err() {
                    break;
                }
                asked_at = applied.commands;
                tracing::debug!(index = applied.log_index, items, "snapshot requested");
            }
            items
        };
        let (index, commands) = next_marks(snapshot, floor, asked_at, items);
        sm.alarm().set(index, commands);
        tokio::select! {
            () = sm.alarm().rung() => {}
            () = cancel.cancelled() => break,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{due, next_marks};

    #[test]
    fn small_states_follow_the_entry_floor_and_big_ones_wait_for_half_their_size() {
        assert!(!due(9_999, 10_000, 1_000_000, 10));
        assert!(due(10_000, 10_000, 10_000, 10));
        // A million locks with their leases: two million items, a snapshot per million
        // commands, however many entries they came in.
        assert!(!due(50_000, 10_000, 999_999, 2_000_000));
        assert!(due(50_000, 10_000, 1_000_000, 2_000_000));
    }

    #[test]
    fn the_next_marks_are_where_due_can_first_hold() {
        let (index, commands) = next_marks(50_000, 10_000, 300, 2_000_001);
        assert_eq!((index, commands), (60_000, 1_000_301));
        assert!(due(index - 50_000, 10_000, commands - 300, 2_000_001));
        assert!(!due(index - 50_000, 10_000, commands - 301, 2_000_001));
        assert!(!due(index - 50_001, 10_000, commands - 300, 2_000_001));
    }

    #[test]
    fn an_empty_state_waits_for_a_new_command_between_requests() {
        // Right after a request, openraft's snapshot index has not moved yet: with no
        // items, only a new command may make the next one due (no loop of requests).
        assert!(!due(20_000, 10_000, 0, 0));
        assert!(due(20_000, 10_000, 1, 0));
        assert_eq!(next_marks(0, 10_000, 500, 0), (10_000, 501));
    }
}
