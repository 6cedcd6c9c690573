//! Events: what each revision changed, kept in a bounded window for watches.

use crate::ids::{Fence, LeaseId, Revision};
use crate::limits::Bounds;
use crate::outcome::Rejection;
use crate::resource::{Demand, ResourceId, ResourceKind};
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

/// One change, at one revision.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// The revision that made it.
    pub revision: Revision,
    /// What happened.
    pub kind: EventKind,
}

/// Why a hold ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ReleaseReason {
    /// The holder released it (or resigned, for elections).
    Released,
    /// An admin force-released it.
    Forced,
    /// The holder's lease was revoked.
    LeaseRevoked,
    /// The holder's lease expired.
    LeaseExpired,
}

/// Why a queue entry left the queue without a grant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CancelReason {
    /// The waiter cancelled (released while queued, or disconnected).
    Cancelled,
    /// Its wait deadline passed.
    TimedOut,
    /// The waiter's lease was revoked.
    LeaseRevoked,
    /// The waiter's lease expired.
    LeaseExpired,
}

/// An election's leader as events and queries show it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Leader {
    /// The leader's lease.
    pub lease: LeaseId,
    /// Its proclaimed value.
    pub value: String,
    /// Its fence (the revision it became leader).
    pub fence: Fence,
}

/// What happened.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum EventKind {
    /// A key was created or changed.
    KeyPut {
        /// The key.
        key: String,
        /// Its new value.
        value: String,
        /// The revision that created it.
        create_revision: Revision,
        /// Its version after the put.
        version: u64,
        /// Its lease, if ephemeral.
        lease: Option<LeaseId>,
    },
    /// A key was deleted.
    KeyDeleted {
        /// The key.
        key: String,
        /// The lease it was bound to, if any.
        lease: Option<LeaseId>,
    },
    /// A claim joined a queue.
    Queued {
        /// The resource.
        resource: ResourceId,
        /// The waiter's lease.
        lease: LeaseId,
        /// The waiter's owner.
        owner: String,
        /// What it waits for.
        demand: Demand,
        /// Its 1-based position.
        position: u64,
        /// The wait it asked for: the leader arms its timeout from this event.
        wait_ms: u64,
    },
    /// A claim was granted (at once or from the queue).
    Granted {
        /// The resource.
        resource: ResourceId,
        /// The holder's lease.
        lease: LeaseId,
        /// The holder's owner.
        owner: String,
        /// What was granted.
        demand: Demand,
        /// The fence: this event's revision.
        fence: Fence,
        /// The enqueue revision if it waited.
        enqueued: Option<Revision>,
    },
    /// A holder's re-entrant count changed without releasing the hold.
    CountChanged {
        /// The resource.
        resource: ResourceId,
        /// The holder's lease.
        lease: LeaseId,
        /// The holder's owner.
        owner: String,
        /// The hold's fence.
        fence: Fence,
        /// The new count.
        count: u32,
    },
    /// A hold ended.
    Released {
        /// The resource.
        resource: ResourceId,
        /// The holder's lease.
        lease: LeaseId,
        /// The holder's owner.
        owner: String,
        /// The hold's fence.
        fence: Fence,
        /// Why.
        reason: ReleaseReason,
    },
    /// A queue entry left without a grant.
    Cancelled {
        /// The resource.
        resource: ResourceId,
        /// The waiter's lease.
        lease: LeaseId,
        /// The waiter's owner.
        owner: String,
        /// Its enqueue revision.
        enqueued: Revision,
        /// Why.
        reason: CancelReason,
    },
    /// A lock-delay started: no grant until the leader ends it.
    DelayStarted {
        /// The resource.
        resource: ResourceId,
        /// How long, on the leader's clock.
        delay_ms: u64,
    },
    /// A lock-delay ended.
    DelayEnded {
        /// The resource.
        resource: ResourceId,
    },
    /// An election's leader changed, or proclaimed a new value.
    LeaderChanged {
        /// The election's name.
        election: String,
        /// The new leader, or none.
        leader: Option<Leader>,
    },
    /// A lease was granted.
    LeaseGranted {
        /// Its id.
        lease: LeaseId,
        /// Its TTL.
        ttl_ms: u64,
    },
    /// A lease was revoked.
    LeaseRevoked {
        /// Its id.
        lease: LeaseId,
    },
    /// A lease expired on the leader's clock.
    LeaseExpired {
        /// Its id.
        lease: LeaseId,
    },
}

impl EventKind {
    /// The event's name as watches show it, e.g. `key_put`, `lock_granted`,
    /// `semaphore_expired`, `lease_revoked`.
    pub fn name(&self) -> String {
        let resource = |r: &ResourceId, verb: &str| format!("{}_{verb}", r.kind.as_str());
        match self {
            EventKind::KeyPut { .. } => "key_put".into(),
            EventKind::KeyDeleted { .. } => "key_deleted".into(),
            EventKind::Queued { resource: r, .. } => resource(r, "queued"),
            EventKind::Granted { resource: r, .. } => resource(r, "granted"),
            EventKind::CountChanged { resource: r, .. } => resource(r, "count_changed"),
            EventKind::Released {
                resource: r,
                reason,
                ..
            } => match reason {
                ReleaseReason::LeaseExpired => resource(r, "expired"),
                ReleaseReason::Forced => resource(r, "force_released"),
                ReleaseReason::Released | ReleaseReason::LeaseRevoked => resource(r, "released"),
            },
            EventKind::Cancelled {
                resource: r,
                reason,
                ..
            } => match reason {
                CancelReason::TimedOut => resource(r, "timed_out"),
                _ => resource(r, "cancelled"),
            },
            EventKind::DelayStarted { resource: r, .. } => resource(r, "delay_started"),
            EventKind::DelayEnded { resource: r } => resource(r, "delay_ended"),
            EventKind::LeaderChanged { .. } => "election_leader".into(),
            EventKind::LeaseGranted { .. } => "lease_granted".into(),
            EventKind::LeaseRevoked { .. } => "lease_revoked".into(),
            EventKind::LeaseExpired { .. } => "lease_expired".into(),
        }
    }

    /// The key the event is about, for key and prefix filters.
    pub fn key(&self) -> Option<&str> {
        match self {
            EventKind::KeyPut { key, .. } | EventKind::KeyDeleted { key, .. } => Some(key),
            _ => None,
        }
    }

    /// The resource the event is about, for lock, semaphore and election filters.
    pub fn resource(&self) -> Option<&ResourceId> {
        match self {
            EventKind::Queued { resource, .. }
            | EventKind::Granted { resource, .. }
            | EventKind::CountChanged { resource, .. }
            | EventKind::Released { resource, .. }
            | EventKind::Cancelled { resource, .. }
            | EventKind::DelayStarted { resource, .. }
            | EventKind::DelayEnded { resource } => Some(resource),
            _ => None,
        }
    }

    /// The lease the event concerns, for lease filters.
    pub fn lease(&self) -> Option<LeaseId> {
        match self {
            EventKind::KeyPut { lease, .. } | EventKind::KeyDeleted { lease, .. } => *lease,
            EventKind::Queued { lease, .. }
            | EventKind::Granted { lease, .. }
            | EventKind::CountChanged { lease, .. }
            | EventKind::Released { lease, .. }
            | EventKind::Cancelled { lease, .. }
            | EventKind::LeaseGranted { lease, .. }
            | EventKind::LeaseRevoked { lease }
            | EventKind::LeaseExpired { lease } => Some(*lease),
            EventKind::LeaderChanged { leader, .. } => leader.as_ref().map(|l| l.lease),
            EventKind::DelayStarted { .. } | EventKind::DelayEnded { .. } => None,
        }
    }

    /// Approximate bytes, for the window's byte bound (deterministic on every node).
    pub(crate) fn approx_bytes(&self) -> usize {
        let strings = match self {
            EventKind::KeyPut { key, value, .. } => key.len() + value.len(),
            EventKind::KeyDeleted { key, .. } => key.len(),
            EventKind::Queued {
                resource, owner, ..
            }
            | EventKind::Granted {
                resource, owner, ..
            }
            | EventKind::CountChanged {
                resource, owner, ..
            }
            | EventKind::Released {
                resource, owner, ..
            }
            | EventKind::Cancelled {
                resource, owner, ..
            } => resource.name.len() + owner.len(),
            EventKind::DelayStarted { resource, .. } | EventKind::DelayEnded { resource } => {
                resource.name.len()
            }
            EventKind::LeaderChanged { election, leader } => {
                election.len() + leader.as_ref().map_or(0, |l| l.value.len())
            }
            EventKind::LeaseGranted { .. }
            | EventKind::LeaseRevoked { .. }
            | EventKind::LeaseExpired { .. } => 0,
        };
        EVENT_OVERHEAD_BYTES + strings
    }
}

/// Fixed cost charged per event on top of its strings.
const EVENT_OVERHEAD_BYTES: usize = 64;

/// Which events a watch wants.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EventFilter {
    /// Every event.
    All,
    /// Events of one key.
    Key(String),
    /// Events of keys under a prefix.
    Prefix(String),
    /// Events of one resource (lock, semaphore or election by kind and name); for an
    /// election this includes its leader changes.
    Resource(ResourceId),
    /// Events of a lease and of everything it owns.
    Lease(LeaseId),
    /// Events that pass every one of these filters (a watch that names several).
    AllOf(Vec<EventFilter>),
}

impl EventFilter {
    /// Whether `event` passes the filter.
    pub fn matches(&self, event: &EventKind) -> bool {
        match self {
            EventFilter::All => true,
            EventFilter::Key(key) => event.key() == Some(key.as_str()),
            EventFilter::Prefix(prefix) => event.key().is_some_and(|k| k.starts_with(prefix)),
            EventFilter::Resource(id) => match event {
                EventKind::LeaderChanged { election, .. } => {
                    id.kind == ResourceKind::Election && *election == id.name
                }
                _ => event.resource() == Some(id),
            },
            EventFilter::Lease(lease) => event.lease() == Some(*lease),
            EventFilter::AllOf(filters) => filters.iter().all(|f| f.matches(event)),
        }
    }
}

/// The recent events, bounded in revisions and bytes, whole revisions at a time.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct EventWindow {
    pub(crate) events: VecDeque<Event>,
    /// The highest revision whose events were dropped (0: none).
    pub(crate) compacted: Revision,
    pub(crate) bytes: usize,
}

impl EventWindow {
    /// Appends the events of the newest revision and drops what the bounds exclude.
    pub(crate) fn append(&mut self, events: &[Event], current: Revision, bounds: &Bounds) {
        for event in events {
            debug_assert_eq!(event.revision, current);
            self.bytes += event.kind.approx_bytes();
            self.events.push_back(event.clone());
        }
        self.prune(current, bounds);
    }

    fn prune(&mut self, current: Revision, bounds: &Bounds) {
        let keep_after = current.0.saturating_sub(bounds.event_window_revisions);
        while let Some(front) = self.events.front() {
            let revision = front.revision;
            let too_old = revision.0 <= keep_after;
            let too_big = self.bytes > bounds.event_window_bytes_max && revision < current;
            if !too_old && !too_big {
                break;
            }
            // Drop the whole revision so a resume never sees half of one.
            while self.events.front().is_some_and(|e| e.revision == revision) {
                if let Some(e) = self.events.pop_front() {
                    self.bytes -= e.kind.approx_bytes();
                }
            }
            self.compacted = revision;
        }
    }

    /// The oldest revision a watch may start from.
    pub(crate) fn oldest(&self) -> Revision {
        self.compacted.next()
    }

    /// Events at or after `from` that pass `filter`: at least `limit` if there are that
    /// many, cut only between revisions so a caller can resume at the last revision + 1.
    pub(crate) fn since(
        &self,
        from: Revision,
        filter: &EventFilter,
        limit: usize,
    ) -> Result<Vec<Event>, Rejection> {
        let from = from.max(Revision(1));
        if from <= self.compacted {
            return Err(Rejection::Compacted {
                oldest: self.oldest(),
            });
        }
        let start = self.events.partition_point(|e| e.revision < from);
        let mut out: Vec<Event> = Vec::new();
        for event in self.events.range(start..) {
            // Stop only between revisions, so the caller can resume at last + 1.
            if out.len() >= limit && out.last().is_some_and(|l| l.revision != event.revision) {
                break;
            }
            if filter.matches(&event.kind) {
                out.push(event.clone());
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use crate::testing::*;
    use crate::*;

    #[test]
    fn revision_increments_once_per_changing_command_and_not_on_refusals() {
        let mut sm = StateMachine::default();
        let a = grant(&mut sm, 10_000);
        assert_eq!(sm.revision(), Revision(1));
        acquire(&mut sm, "L", a, "w", 0);
        assert_eq!(sm.revision(), Revision(2));
        let b = grant(&mut sm, 10_000);
        acquire(&mut sm, "L", b, "w", 0); // refused: lock_held
        assert_eq!(sm.revision(), Revision(3));
        let applied = sm.apply_command(Command::LeaseRevoke(LeaseRevoke { lease: a }));
        assert_eq!(applied.revision, Revision(4));
        assert!(applied.events.len() >= 2);
    }

    #[test]
    fn every_revision_has_events_and_queries_filter_them() {
        let mut sm = StateMachine::default();
        let a = grant(&mut sm, 10_000);
        put(&mut sm, "app/x", "1", None);
        put(&mut sm, "other", "2", Some(a));
        acquire(&mut sm, "L", a, "w", 0);
        let all = sm
            .events_since(Revision(1), &EventFilter::All, 100)
            .unwrap();
        let revisions: Vec<u64> = all.iter().map(|e| e.revision.0).collect();
        assert_eq!(revisions, [1, 2, 3, 4]);
        let names: Vec<String> = all.iter().map(|e| e.kind.name()).collect();
        assert_eq!(
            names,
            ["lease_granted", "key_put", "key_put", "lock_granted"]
        );
        let by_prefix = sm.events_since(Revision(1), &EventFilter::Prefix("app/".into()), 100);
        assert_eq!(by_prefix.unwrap().len(), 1);
        let by_key = sm.events_since(Revision(3), &EventFilter::Key("other".into()), 100);
        assert_eq!(by_key.unwrap().len(), 1);
        let by_lock = sm.events_since(
            Revision(1),
            &EventFilter::Resource(ResourceId::lock("L")),
            100,
        );
        assert_eq!(by_lock.unwrap().len(), 1);
        // The lease filter sees the lease and everything it owns.
        let by_lease = sm
            .events_since(Revision(1), &EventFilter::Lease(a), 100)
            .unwrap();
        assert_eq!(by_lease.len(), 3);
        revoke(&mut sm, a);
        let after = sm
            .events_since(Revision(5), &EventFilter::Lease(a), 100)
            .unwrap();
        let names: Vec<String> = after.iter().map(|e| e.kind.name()).collect();
        assert_eq!(names, ["lease_revoked", "key_deleted", "lock_released"]);
        // Several filters combine: the lease's events on lock L only.
        let both = EventFilter::AllOf(vec![
            EventFilter::Lease(a),
            EventFilter::Resource(ResourceId::lock("L")),
        ]);
        let names: Vec<String> = sm
            .events_since(Revision(1), &both, 100)
            .unwrap()
            .iter()
            .map(|e| e.kind.name())
            .collect();
        assert!(
            !names.is_empty() && names.iter().all(|n| n.starts_with("lock_")),
            "{names:?}"
        );
    }

    #[test]
    fn event_window_compacts_whole_revisions_and_reports_the_oldest() {
        let mut sm = StateMachine::new(Bounds {
            event_window_revisions: 3,
            ..Bounds::default()
        });
        for i in 0..6 {
            put(&mut sm, "k", &i.to_string(), None);
        }
        assert_eq!(
            sm.events_since(Revision(3), &EventFilter::All, 10),
            Err(Rejection::Compacted {
                oldest: Revision(4)
            })
        );
        let held = sm.events_since(Revision(4), &EventFilter::All, 10).unwrap();
        assert_eq!(held.len(), 3);
        assert_eq!(sm.counts().oldest_event_revision, Revision(4));
    }

    #[test]
    fn event_window_is_bounded_in_bytes() {
        let mut sm = StateMachine::new(Bounds {
            event_window_bytes_max: 4_096,
            ..Bounds::default()
        });
        for _ in 0..10 {
            put(&mut sm, "k", &"v".repeat(1_000), None);
        }
        let counts = sm.counts();
        assert!(counts.events <= 4, "held {} events", counts.events);
        assert!(counts.oldest_event_revision > Revision(1));
    }

    #[test]
    fn event_query_limit_cuts_only_between_revisions() {
        let mut sm = StateMachine::default();
        for k in ["a/1", "a/2", "a/3"] {
            put(&mut sm, k, "v", None);
        }
        sm.apply_command(Command::DeletePrefix(DeletePrefix {
            prefix: "a/".into(),
        }));
        let first = sm.events_since(Revision(1), &EventFilter::All, 4).unwrap();
        // Revision 4 holds three deletes: all of them come, never half.
        assert_eq!(first.len(), 6);
        assert!(first.iter().skip(3).all(|e| e.revision == Revision(4)));
    }
}
