//! PATCH (baton): spare followers get their entries in batches (decision #136).
//!
//! A commit needs a majority of durable copies. With the leader's own copy counted, a
//! 3-voter cluster needs one follower's, a 5-voter cluster two. The other followers (the
//! *spares*) are needed only if one of those fails or falls behind. While every follower
//! that ranks before a spare is healthy, the spare's replication task holds its next
//! AppendEntries until `batch` has passed since its previous one, so a spare receives,
//! writes and flushes one batch per interval instead of one round per write.
//!
//! Ranking: followers that recently served clients through this leader (forwarded a
//! write or a read, [`Pacer::prefer`]) come first, the others follow by node id. A
//! follower is *healthy* when its last AppendEntries succeeded, it holds everything known
//! to be committed, and its request in flight (if any) has not stalled. A spare whose
//! elders stop being healthy is woken at once and replicates like any other follower.
//!
//! Off (`batch` zero) until the application turns it on. Learners and joint
//! configurations are never paced. Safety does not depend on any of this: Raft lets any
//! follower lag, and a spare still acknowledges only what it made durable.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::MutexGuard;
use std::time::Duration;

use tokio::sync::Notify;

use crate::type_config::alias::InstantOf;
use crate::type_config::TypeConfigExt;
use crate::RaftTypeConfig;

/// How long a follower that served a client stays ranked first.
const PREFER_FOR: Duration = Duration::from_secs(2);

/// A request in flight is stalled after this many times its target's usual answer time...
const STALL_FACTOR: u32 = 4;
/// ...and never sooner than this.
const STALL_MIN: Duration = Duration::from_millis(1);

/// Shared by a node's `RaftCore`, its replication tasks and its `Raft` handle.
pub(crate) struct Pacer<C>
where C: RaftTypeConfig
{
    state: Mutex<State<C>>,
    /// Wakes spares holding a batch when the set of spares may have shrunk.
    changed: Notify,
}

struct State<C>
where C: RaftTypeConfig
{
    /// Zero: pacing is off.
    batch: Duration,
    /// The voters other than the leader, by node id.
    followers: Vec<C::NodeId>,
    /// How many followers' copies a commit needs besides the leader's.
    needed: usize,
    /// False in a joint configuration: nobody is paced.
    uniform: bool,
    targets: BTreeMap<C::NodeId, Target>,
    /// Until when each follower that served clients ranks first.
    preferred: BTreeMap<C::NodeId, InstantOf<C>>,
}

#[derive(Clone, Copy, Debug, Default)]
struct Target {
    /// The last AppendEntries succeeded.
    ok: bool,
    /// Its matching log id had reached the commit index the task knew then.
    caught_up: bool,
    /// The request in flight has taken longer than the stall threshold.
    stalled: bool,
    /// Moving average of successful answer times, in µs.
    answer_us: u64,
}

impl Target {
    fn healthy(&self) -> bool {
        self.ok && self.caught_up && !self.stalled
    }
}

impl<C> Default for Pacer<C>
where C: RaftTypeConfig
{
    fn default() -> Self {
        Self {
            state: Mutex::new(State {
                batch: Duration::ZERO,
                followers: Vec::new(),
                needed: 0,
                uniform: false,
                targets: BTreeMap::new(),
                preferred: BTreeMap::new(),
            }),
            changed: Notify::new(),
        }
    }
}

impl<C> Pacer<C>
where C: RaftTypeConfig
{
    fn state(&self) -> MutexGuard<'_, State<C>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sets the batch interval of spares; zero turns pacing off.
    pub(crate) fn set_batch(&self, batch: Duration) {
        self.state().batch = batch;
        self.changed.notify_waiters();
    }

    /// The batch interval, zero when pacing is off.
    pub(crate) fn batch(&self) -> Duration {
        self.state().batch
    }

    /// A new set of replication tasks: `voters` of the effective configuration (in a
    /// uniform one; `uniform` false for a joint one), `leader` the node that now leads.
    /// Every follower starts unhealthy until its first answer.
    pub(crate) fn reset(&self, leader: &C::NodeId, voters: impl Iterator<Item = C::NodeId>, uniform: bool) {
        let voters: Vec<C::NodeId> = voters.collect();
        let majority = voters.len() / 2 + 1;
        let leader_votes = voters.contains(leader);
        let mut state = self.state();
        state.followers = voters.into_iter().filter(|v| v != leader).collect();
        state.followers.sort();
        state.needed = majority - usize::from(leader_votes);
        state.uniform = uniform;
        state.targets.clear();
        let State { followers, preferred, .. } = &mut *state;
        preferred.retain(|id, _| followers.contains(id));
        drop(state);
        self.changed.notify_waiters();
    }

    /// `target` served a client through this node: rank it first until `PREFER_FOR` from
    /// now, and wake it if it was holding a batch.
    pub(crate) fn prefer(&self, target: C::NodeId) {
        let now = C::now();
        let mut state = self.state();
        // Only this leader's followers: the map stays as small as the configuration.
        if !state.followers.contains(&target) {
            return;
        }
        let was = state.preferred.get(&target).is_some_and(|until| *until > now);
        state.preferred.insert(target, now + PREFER_FOR);
        drop(state);
        if !was {
            self.changed.notify_waiters();
        }
    }

    /// How long `target`'s request may be in flight before it counts as stalled, or
    /// `None` when no follower can be a spare now (pacing off, a joint configuration, or
    /// no more followers than a commit needs), so that stalls are not worth watching.
    pub(crate) fn stall_after(&self, target: &C::NodeId) -> Option<Duration> {
        let state = self.state();
        if state.batch.is_zero() || !state.uniform || state.followers.len() <= state.needed {
            return None;
        }
        let usual = state.targets.get(target).map_or(0, |t| t.answer_us);
        Some((Duration::from_micros(usual) * STALL_FACTOR).clamp(STALL_MIN, state.batch.max(STALL_MIN)))
    }

    /// `target`'s request has been in flight longer than [`stall_after`](Self::stall_after).
    pub(crate) fn stalled(&self, target: &C::NodeId) {
        let mut state = self.state();
        let entry = state.targets.entry(target.clone()).or_default();
        let was_healthy = entry.healthy();
        entry.stalled = true;
        drop(state);
        if was_healthy {
            self.changed.notify_waiters();
        }
    }

    /// `target`'s AppendEntries ended: `ok` if it succeeded, then `caught_up` if the target
    /// now holds everything known to be committed, and `took` its answer time when it
    /// carried entries (heartbeats say little about a follower's flush).
    pub(crate) fn answered(&self, target: &C::NodeId, took: Option<Duration>, ok: bool, caught_up: bool) {
        let mut state = self.state();
        let entry = state.targets.entry(target.clone()).or_default();
        let was_healthy = entry.healthy();
        entry.stalled = false;
        entry.ok = ok;
        entry.caught_up = ok && caught_up;
        if let Some(took) = took.filter(|_| ok) {
            let took = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
            entry.answer_us = if entry.answer_us == 0 {
                took
            } else {
                (entry.answer_us.saturating_mul(7).saturating_add(took)) / 8
            };
        }
        let healthy = entry.healthy();
        drop(state);
        if was_healthy && !healthy {
            self.changed.notify_waiters();
        }
    }

    /// Whether `target` is a spare now: pacing is on, it is a follower that votes, did not
    /// serve clients lately, and at least as many healthy followers as a commit needs rank
    /// before it.
    pub(crate) fn is_spare(&self, target: &C::NodeId) -> bool {
        let now = C::now();
        let state = self.state();
        if state.batch.is_zero() || !state.uniform || !state.followers.contains(target) {
            return false;
        }
        let preferred = |id: &C::NodeId| state.preferred.get(id).is_some_and(|until| *until > now);
        if preferred(target) {
            return false;
        }
        let healthy = |id: &C::NodeId| state.targets.get(id).is_some_and(Target::healthy);
        let ahead = state.followers.iter().filter(|f| preferred(f) && healthy(f)).count()
            + state.followers.iter().take_while(|f| *f != target).filter(|f| !preferred(f) && healthy(f)).count();
        ahead >= state.needed
    }

    /// Notified whenever the set of spares may have shrunk. Enable a `notified()` future
    /// before checking [`is_spare`](Self::is_spare), so that no change is missed.
    pub(crate) fn notify(&self) -> &Notify {
        &self.changed
    }
}
