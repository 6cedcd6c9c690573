//! Read-only queries. None changes the state or the revision; the node answers them from
//! its applied state (after a read-index round for linearizable reads).

use crate::claims::holder_info;
use crate::event::{Event, EventFilter};
use crate::ids::{Fence, LeaseId, Revision};
use crate::keyspace::KeyValue;
use crate::lease::{LeaseClockEntry, LeaseInfo};
use crate::machine::{StateMachine, slot};
use crate::outcome::{HolderInfo, LockState, Rejection, WaiterInfo};
use crate::resource::{Claimant, LockDelay, Policy, Resource, ResourceId, ResourceKind};
use serde::{Deserialize, Serialize};
use std::ops::Bound;

/// The answer to a fence check (Chubby's CheckSequencer).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FenceCheck {
    /// Whether the fence belongs to a current holder.
    pub current: bool,
    /// The highest current holder's fence, if any holder exists.
    pub fence: Option<Fence>,
}

/// One resource in a listing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockSummary {
    /// Which resource.
    pub resource: ResourceId,
    /// Current holders.
    pub holders: Vec<HolderInfo>,
    /// Waiters queued.
    pub queue_len: u64,
    /// Whether a lock-delay is pending.
    pub delayed: bool,
    /// A semaphore's limit.
    pub limit: Option<u32>,
}

/// A queued claim with a wait deadline, for a new leader to re-arm the timeout.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingWait {
    /// The resource.
    pub resource: ResourceId,
    /// The waiter's lease.
    pub lease: LeaseId,
    /// The waiter's owner.
    pub owner: String,
    /// Its enqueue revision.
    pub enqueued: Revision,
    /// The wait it asked for.
    pub wait_ms: u64,
}

/// Sizes for metrics, all O(1).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    /// The current revision.
    pub revision: Revision,
    /// Keys stored.
    pub keys: u64,
    /// Live leases.
    pub leases: u64,
    /// Locks, semaphores, elections with a holder, waiter or delay.
    pub locks: u64,
    /// Semaphores in use.
    pub semaphores: u64,
    /// Elections in use.
    pub elections: u64,
    /// Lock holds.
    pub lock_holders: u64,
    /// Semaphore holds.
    pub semaphore_holders: u64,
    /// Election leaders.
    pub election_leaders: u64,
    /// Queued claims, all kinds.
    pub waiters: u64,
    /// Pending lock-delays.
    pub lock_delays: u64,
    /// Events in the watch window.
    pub events: u64,
    /// The oldest revision a watch can start from.
    pub oldest_event_revision: Revision,
    /// Remembered idempotency outcomes.
    pub idempotency_entries: u64,
}

impl StateMachine {
    /// The current revision.
    pub fn revision(&self) -> Revision {
        self.revision
    }

    /// One key.
    pub fn get(&self, key: &str) -> Option<KeyValue> {
        self.keys.get(key).map(|r| r.to_key_value(key))
    }

    /// Up to `limit` keys under `prefix` in key order, and whether more remain.
    pub fn range(&self, prefix: &str, limit: usize) -> (Vec<KeyValue>, bool) {
        self.keys.range(prefix, limit, |_| true)
    }

    /// Up to `limit` keys under `prefix` that `visible` admits, and whether more such
    /// keys follow. The filter runs before anything is copied and before the limit, so a
    /// caller learns nothing of the keys it may not read (neither values nor `more`).
    pub fn range_visible(
        &self,
        prefix: &str,
        limit: usize,
        visible: impl Fn(&str) -> bool,
    ) -> (Vec<KeyValue>, bool) {
        self.keys.range(prefix, limit, visible)
    }

    /// A lock's, semaphore's or election's holders and queue in grant order.
    pub fn lock_state(&self, id: &ResourceId) -> Option<LockState> {
        let res = self.resources.get(id)?;
        Some(LockState {
            resource: id.clone(),
            holders: holders(&res),
            queue: res
                .queue()
                .iter()
                .map(|(enqueued, w)| WaiterInfo {
                    lease: w.claimant.lease,
                    owner: w.claimant.owner.clone(),
                    demand: w.demand,
                    enqueued: *enqueued,
                    wait_ms: w.wait_ms,
                })
                .collect(),
            limit: match res.policy {
                Policy::Semaphore { limit } => Some(limit),
                Policy::Lock | Policy::Election => None,
            },
            delay: res.delay(),
        })
    }

    /// Up to `limit` resources of `kind` whose names start with `prefix`, after `after`,
    /// among those `visible` admits. The filter runs before the limit, so a caller that
    /// may see only some names gets a full page of those and learns nothing of the others
    /// (not even how many there are).
    pub fn list_resources(
        &self,
        kind: ResourceKind,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
        visible: impl Fn(&str) -> bool,
    ) -> Vec<LockSummary> {
        let start = ResourceId {
            kind,
            name: after.unwrap_or(prefix).to_owned(),
        };
        let lower = match after {
            Some(_) => Bound::Excluded(start),
            None => Bound::Included(start),
        };
        self.resources
            .range_from(lower.as_ref())
            .take_while(|(id, _)| id.kind == kind && id.name.starts_with(prefix))
            .filter(|(id, _)| visible(&id.name))
            .take(limit)
            .map(|(id, res)| LockSummary {
                resource: id,
                holders: holders(&res),
                queue_len: res.queue().len() as u64,
                delayed: res.delay().is_some(),
                limit: match res.policy {
                    Policy::Semaphore { limit } => Some(limit),
                    Policy::Lock | Policy::Election => None,
                },
            })
            .collect()
    }

    /// Whether a waiting acquire of `id` by `lease` and `owner` (as
    /// [`Command::waiting_claim`] names it), applied now, would only join a queue that
    /// already has waiters: the claimant neither holds nor waits already, and others wait
    /// ahead of it, so it cannot be granted before some other command (a release, an
    /// expiry, a timeout) changes the resource.
    pub fn joins_queue(&self, id: &ResourceId, lease: LeaseId, owner: &str) -> bool {
        let Some(res) = self.resources.get(id) else {
            return false;
        };
        if res.queue().is_empty() {
            return false;
        }
        let claimant = Claimant::new(lease, owner);
        !res.holders.contains_key(&claimant) && !res.queued().contains_key(&claimant)
    }

    /// Whether `fence` is a current grant of the resource.
    pub fn check_fence(&self, id: &ResourceId, fence: Fence) -> FenceCheck {
        let Some(res) = self.resources.get(id) else {
            return FenceCheck {
                current: false,
                fence: None,
            };
        };
        FenceCheck {
            current: res.holders.values().any(|h| h.fence == fence),
            fence: res.holders.values().map(|h| h.fence).max(),
        }
    }

    /// A lease and what it owns.
    pub fn lease(&self, id: LeaseId) -> Option<LeaseInfo> {
        let lease = self.leases.get(&id)?;
        Some(LeaseInfo {
            lease: id,
            ttl_ms: lease.ttl_ms(),
            granted: lease.granted,
            checkpoint_remaining_ms: lease.checkpoint_remaining_ms(),
            keys: lease.keys().iter().cloned().collect(),
            claims: lease
                .claims
                .iter()
                .map(|c| (c.resource(), c.owner().into_owned()))
                .collect(),
            principal: lease.owner.as_deref().map(str::to_owned),
        })
    }

    /// Every live lease with what the leader's lease clock needs, in id order.
    pub fn lease_clock(&self) -> Vec<LeaseClockEntry> {
        self.leases
            .iter()
            .map(|(id, l)| LeaseClockEntry {
                lease: *id,
                ttl_ms: l.ttl_ms(),
                checkpoint_remaining_ms: l.checkpoint_remaining_ms(),
            })
            .collect()
    }

    /// What the lease clock needs of one lease, without listing what it owns.
    pub fn lease_clock_entry(&self, id: LeaseId) -> Option<LeaseClockEntry> {
        self.leases.get(&id).map(|l| LeaseClockEntry {
            lease: id,
            ttl_ms: l.ttl_ms(),
            checkpoint_remaining_ms: l.checkpoint_remaining_ms(),
        })
    }

    /// Whether a lease is live.
    pub fn has_lease(&self, id: LeaseId) -> bool {
        self.leases.contains_key(&id)
    }

    /// Resources under a lock-delay, with what the leader needs to time its end.
    pub fn pending_lock_delays(&self) -> Vec<(ResourceId, LockDelay)> {
        self.delayed
            .iter()
            .filter_map(|id| Some((id.clone(), self.resources.get(id)?.delay()?)))
            .collect()
    }

    /// Every queued claim with its wait, for a new leader to re-arm the deadlines. O(waiters).
    pub fn pending_waits(&self) -> Vec<PendingWait> {
        // A compact lock has no queue: only the boxed resources are walked.
        self.resources
            .boxed()
            .flat_map(|(id, res)| {
                res.queue().iter().map(move |(enqueued, w)| PendingWait {
                    resource: id.clone(),
                    lease: w.claimant.lease,
                    owner: w.claimant.owner.clone(),
                    enqueued: *enqueued,
                    wait_ms: w.wait_ms,
                })
            })
            .collect()
    }

    /// Events at or after `from` passing `filter`, cut between revisions once `limit` is
    /// reached; `Compacted` with the oldest revision held if `from` is older.
    pub fn events_since(
        &self,
        from: Revision,
        filter: &EventFilter,
        limit: usize,
    ) -> Result<Vec<Event>, Rejection> {
        self.events.since(from, filter, limit)
    }

    /// Sizes for metrics.
    pub fn counts(&self) -> Counts {
        let t = &self.tallies;
        Counts {
            revision: self.revision,
            keys: self.keys.records.len() as u64,
            leases: self.leases.len() as u64,
            locks: t.resources[slot(ResourceKind::Lock)],
            semaphores: t.resources[slot(ResourceKind::Semaphore)],
            elections: t.resources[slot(ResourceKind::Election)],
            lock_holders: t.holders[slot(ResourceKind::Lock)],
            semaphore_holders: t.holders[slot(ResourceKind::Semaphore)],
            election_leaders: t.holders[slot(ResourceKind::Election)],
            waiters: t.waiters.iter().sum(),
            lock_delays: self.delayed.len() as u64,
            events: self.events.events.len() as u64,
            oldest_event_revision: self.events.oldest(),
            idempotency_entries: self.idempotency.entries.len() as u64,
        }
    }
}

fn holders(res: &Resource) -> Vec<HolderInfo> {
    res.holders.iter().map(|(c, h)| holder_info(c, h)).collect()
}

#[cfg(test)]
mod tests {
    use crate::testing::*;
    use crate::*;

    #[test]
    fn joins_queue_only_for_an_acquire_behind_waiters_that_neither_holds_nor_waits() {
        let mut sm = StateMachine::default();
        let [a, b, c] = [0; 3].map(|_| grant(&mut sm, 10_000));
        let joins_queue = |sm: &StateMachine, command: &Command| {
            command
                .waiting_claim()
                .is_some_and(|(id, lease, owner)| sm.joins_queue(&id, lease, owner))
        };
        let joins = |sm: &StateMachine, lease, wait_ms| {
            joins_queue(sm, &lock_cmd("L", lease, "w", Mode::Exclusive, wait_ms))
        };
        assert!(!joins(&sm, a, 5_000), "no such lock yet");
        acquire(&mut sm, "L", a, "w", 0);
        assert!(!joins(&sm, b, 5_000), "held, but nobody waits");
        acquire(&mut sm, "L", b, "w", 5_000);
        assert!(joins(&sm, c, 5_000), "behind b");
        assert!(!joins(&sm, c, 0), "a try never queues");
        assert!(!joins(&sm, a, 5_000), "the holder re-enters");
        assert!(!joins(&sm, b, 5_000), "b already waits");
        let semaphore = Command::SemaphoreAcquire(SemaphoreAcquire {
            name: "L".into(),
            lease: c,
            owner: "w".into(),
            limit: 1,
            permits: 1,
            wait_ms: 5_000,
        });
        assert!(
            !joins_queue(&sm, &semaphore),
            "a semaphore of that name has no queue"
        );
        assert!(!joins_queue(&sm, &release_cmd("L", a, "w", None)));
        release(&mut sm, "L", a, "w", None);
        assert!(!joins(&sm, c, 5_000), "b holds now and nobody waits");
    }

    #[test]
    fn counts_track_keys_leases_holders_waiters_without_scanning() {
        let mut sm = StateMachine::default();
        let [a, b] = [0; 2].map(|_| grant(&mut sm, 10_000));
        put(&mut sm, "k", "v", Some(a));
        acquire(&mut sm, "L1", a, "w", 0);
        acquire(&mut sm, "L1", b, "w", 5_000);
        acquire(&mut sm, "L2", b, "w", 0);
        let counts = sm.counts();
        assert_eq!(
            (
                counts.keys,
                counts.leases,
                counts.locks,
                counts.lock_holders,
                counts.waiters
            ),
            (1, 2, 2, 2, 1)
        );
        revoke(&mut sm, a);
        let counts = sm.counts();
        assert_eq!(
            (
                counts.keys,
                counts.leases,
                counts.locks,
                counts.lock_holders,
                counts.waiters
            ),
            (0, 1, 2, 2, 0)
        );
    }

    #[test]
    fn lock_listing_is_by_kind_and_prefix_and_pages_after_a_name() {
        let mut sm = StateMachine::default();
        let a = grant(&mut sm, 10_000);
        for name in ["app/a", "app/b", "app/c", "other"] {
            acquire(&mut sm, name, a, "w", 0);
        }
        let names = |list: Vec<LockSummary>| -> Vec<String> {
            list.into_iter().map(|s| s.resource.name).collect()
        };
        let all = |_: &str| true;
        let first = sm.list_resources(ResourceKind::Lock, "app/", None, 2, all);
        assert_eq!(names(first), ["app/a", "app/b"]);
        let next = sm.list_resources(ResourceKind::Lock, "app/", Some("app/b"), 2, all);
        assert_eq!(names(next), ["app/c"]);
        assert!(
            sm.list_resources(ResourceKind::Semaphore, "", None, 10, all)
                .is_empty()
        );
        // The filter runs before the limit: a page holds only visible names, and as many
        // of them as the limit allows, whatever sorts before them.
        let not_b = |name: &str| name != "app/b";
        let first = sm.list_resources(ResourceKind::Lock, "app/", None, 2, not_b);
        assert_eq!(names(first), ["app/a", "app/c"]);
        let only_c = |name: &str| name == "app/c";
        let first = sm.list_resources(ResourceKind::Lock, "", None, 1, only_c);
        assert_eq!(names(first), ["app/c"]);
        let (kvs, more) = sm.range_visible("", 1, |_| false);
        assert!(kvs.is_empty() && !more);
    }
}
