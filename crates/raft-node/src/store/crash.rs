//! Test-only crash points (only with the `unsafe-test-hooks` feature; see `hooks`), off
//! unless their environment variable is set. They abort the
//! process (no unwinding, no flush: what a `kill -9` or a power cut leaves behind) at the
//! two moments where the applied state is ahead of what is persisted:
//! - `BATON_TEST_CRASH_AFTER_APPLY=N`: right after entry N is applied in memory, before its
//!   reply is returned and before any snapshot covers it;
//! - `BATON_TEST_CRASH_BEFORE_SNAPSHOT_PERSIST=N`: on the Nth snapshot build, after encoding
//!   into its temporary file and before that file is made the current snapshot.

use std::sync::atomic::{AtomicU64, Ordering};

/// Environment variable of the apply crash point.
pub const CRASH_AFTER_APPLY: &str = "BATON_TEST_CRASH_AFTER_APPLY";
/// Environment variable of the snapshot crash point.
pub const CRASH_BEFORE_SNAPSHOT_PERSIST: &str = "BATON_TEST_CRASH_BEFORE_SNAPSHOT_PERSIST";

#[derive(Debug, Default)]
pub(crate) struct CrashHooks {
    after_apply_index: Option<u64>,
    before_snapshot_persist: Option<u64>,
    snapshots: AtomicU64,
}

impl CrashHooks {
    /// The crash points armed in the environment; none in a build without
    /// `unsafe-test-hooks` (`hooks::check_environment` refuses to start one that has them set).
    pub(crate) fn from_env() -> CrashHooks {
        if !crate::hooks::COMPILED {
            return CrashHooks::default();
        }
        let read = |name: &str| std::env::var(name).ok().and_then(|v| v.parse().ok());
        let hooks = CrashHooks {
            after_apply_index: read(CRASH_AFTER_APPLY),
            before_snapshot_persist: read(CRASH_BEFORE_SNAPSHOT_PERSIST),
            snapshots: AtomicU64::new(0),
        };
        if hooks.after_apply_index.is_some() || hooks.before_snapshot_persist.is_some() {
            tracing::warn!(?hooks, "test crash hooks armed");
        }
        hooks
    }

    pub(crate) fn applied(&self, index: u64) {
        if self.after_apply_index.is_some_and(|n| index >= n) {
            tracing::warn!(index, "test hook: crashing after apply");
            std::process::abort();
        }
    }

    pub(crate) fn before_snapshot_persist(&self) {
        let nth = self.snapshots.fetch_add(1, Ordering::Relaxed) + 1;
        if self.before_snapshot_persist == Some(nth) {
            tracing::warn!(nth, "test hook: crashing before a snapshot is persisted");
            std::process::abort();
        }
    }
}
