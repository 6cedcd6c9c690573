//! Locks, semaphores and elections are one thing: a [`Resource`] with holders and a FIFO
//! queue. This file is the queue and holder bookkeeping they share; the rules of who may
//! be granted live in [`Resource::admits`], and the orchestration with leases and events in
//! `claims.rs`.

use crate::ids::{Fence, LeaseId, Revision};
use crate::small::SmallMap;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The three kinds of queued resource. Each kind has its own namespace of names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum ResourceKind {
    /// A lock: exclusive or shared (read-write).
    Lock,
    /// A counting semaphore with a limit of permits.
    Semaphore,
    /// An election: an exclusive lock whose holder is the leader and carries a value.
    Election,
}

impl ResourceKind {
    /// The lower-case name used in event names (`lock`, `semaphore`, `election`).
    pub fn as_str(self) -> &'static str {
        match self {
            ResourceKind::Lock => "lock",
            ResourceKind::Semaphore => "semaphore",
            ResourceKind::Election => "election",
        }
    }
}

/// A resource's identity: its kind and name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ResourceId {
    /// Which namespace.
    pub kind: ResourceKind,
    /// The name within it.
    pub name: String,
}

impl ResourceId {
    /// A lock's id.
    pub fn lock(name: impl Into<String>) -> ResourceId {
        ResourceId {
            kind: ResourceKind::Lock,
            name: name.into(),
        }
    }

    /// A semaphore's id.
    pub fn semaphore(name: impl Into<String>) -> ResourceId {
        ResourceId {
            kind: ResourceKind::Semaphore,
            name: name.into(),
        }
    }

    /// An election's id.
    pub fn election(name: impl Into<String>) -> ResourceId {
        ResourceId {
            kind: ResourceKind::Election,
            name: name.into(),
        }
    }
}

/// Who holds or waits: a lease and an owner string. Elections use the empty owner.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Claimant {
    /// The lease the claim belongs to; it ends with the lease.
    pub lease: LeaseId,
    /// The owner within that lease (a worker, a thread).
    pub owner: String,
}

impl Claimant {
    /// A lease's owner.
    pub fn new(lease: LeaseId, owner: impl Into<String>) -> Claimant {
        Claimant {
            lease,
            owner: owner.into(),
        }
    }
}

/// What a claim asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Demand {
    /// Sole holder of a lock or election.
    Exclusive,
    /// One of many shared holders of a lock.
    Shared,
    /// Some permits of a semaphore.
    Permits(u32),
}

impl Demand {
    fn permits(self) -> u64 {
        match self {
            Demand::Permits(n) => u64::from(n),
            Demand::Exclusive | Demand::Shared => 0,
        }
    }
}

/// The rule set of a resource, fixed while it exists.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Policy {
    /// Exclusive or shared holders.
    Lock,
    /// Holders whose permits sum to at most `limit`.
    Semaphore {
        /// Permits available in all.
        limit: u32,
    },
    /// One holder, the leader.
    Election,
}

/// A granted claim.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    /// What was granted.
    pub demand: Demand,
    /// The revision of the grant; kept by re-entrant acquires.
    pub fence: Fence,
    /// Re-entrant count: acquires minus releases.
    pub count: u32,
    /// The enqueue revision if the grant came from the queue.
    pub enqueued: Option<Revision>,
    /// Lock-delay to apply if this holder is lost through lease expiry.
    pub lock_delay_ms: u64,
    /// The election value (elections only).
    pub value: Option<String>,
}

/// A queued claim.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Waiter {
    /// Who waits.
    pub claimant: Claimant,
    /// What it waits for.
    pub demand: Demand,
    /// How long it asked to wait; the leader turns it into a timeout command.
    pub wait_ms: u64,
    /// Lock-delay to record on its holder once granted.
    pub lock_delay_ms: u64,
    /// The election value (elections only).
    pub value: Option<String>,
}

/// A lock that stays ungranted after a holder's lease expired, until the leader proposes
/// the end of the delay.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockDelay {
    /// The revision at which the delay started (or was last extended).
    pub since: Revision,
    /// How long after `since` (on the leader's clock) the delay ends.
    pub delay_ms: u64,
}

/// A lock, semaphore or election: holders and a FIFO queue by enqueue revision.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resource {
    pub(crate) policy: Policy,
    pub(crate) holders: SmallMap<Claimant, Holder>,
    /// Waiters keyed by enqueue revision: FIFO order is key order.
    pub(crate) queue: BTreeMap<Revision, Waiter>,
    /// Index from claimant to its enqueue revision, for O(log n) cancel.
    pub(crate) queued: BTreeMap<Claimant, Revision>,
    pub(crate) permits_held: u64,
    /// The highest fence ever granted here, to assert fences never go back.
    pub(crate) last_fence: Fence,
    pub(crate) delay: Option<LockDelay>,
}

impl Resource {
    pub(crate) fn new(policy: Policy) -> Resource {
        Resource {
            policy,
            holders: SmallMap::new(),
            queue: BTreeMap::new(),
            queued: BTreeMap::new(),
            permits_held: 0,
            last_fence: Fence(0),
            delay: None,
        }
    }

    /// No holder, no waiter, no delay: the resource can be forgotten.
    pub(crate) fn is_idle(&self) -> bool {
        self.holders.is_empty() && self.queue.is_empty() && self.delay.is_none()
    }

    /// Whether `demand` is compatible with the current holders, ignoring the queue.
    pub(crate) fn admits(&self, demand: Demand) -> bool {
        if self.delay.is_some() {
            return false;
        }
        match (self.policy, demand) {
            (Policy::Semaphore { limit }, Demand::Permits(n)) => {
                self.permits_held + u64::from(n) <= u64::from(limit)
            }
            (Policy::Lock, Demand::Shared) => self
                .holders
                .values()
                .next()
                .is_none_or(|h| h.demand == Demand::Shared),
            (_, Demand::Exclusive) => self.holders.is_empty(),
            // A demand that does not fit the policy is refused before it gets here.
            _ => false,
        }
    }

    /// Whether a new claim could be granted at once: compatible, and nobody queued ahead.
    pub(crate) fn grantable_now(&self, demand: Demand) -> bool {
        self.queue.is_empty() && self.admits(demand)
    }

    pub(crate) fn insert_holder(&mut self, claimant: Claimant, holder: Holder) {
        debug_assert!(holder.fence >= self.last_fence, "fence went back");
        self.last_fence = holder.fence;
        self.permits_held += holder.demand.permits();
        let previous = self.holders.insert(claimant, holder);
        debug_assert!(previous.is_none(), "claimant already held");
    }

    pub(crate) fn remove_holder(&mut self, claimant: &Claimant) -> Option<Holder> {
        let holder = self.holders.remove(claimant)?;
        self.permits_held -= holder.demand.permits();
        Some(holder)
    }

    /// Appends a waiter; returns its 1-based position in the queue.
    pub(crate) fn enqueue(&mut self, enqueued: Revision, waiter: Waiter) -> u64 {
        debug_assert!(
            self.queue
                .last_key_value()
                .is_none_or(|(r, _)| *r < enqueued),
            "queue out of order"
        );
        self.queued.insert(waiter.claimant.clone(), enqueued);
        self.queue.insert(enqueued, waiter);
        self.queue.len() as u64
    }

    /// Removes a claimant's queue entry, if it has one.
    pub(crate) fn dequeue(&mut self, claimant: &Claimant) -> Option<(Revision, Waiter)> {
        let enqueued = self.queued.remove(claimant)?;
        let waiter = self.queue.remove(&enqueued)?;
        Some((enqueued, waiter))
    }

    /// Removes and returns the head of the queue if it can be granted now.
    pub(crate) fn pop_admissible(&mut self) -> Option<(Revision, Waiter)> {
        let (_, head) = self.queue.first_key_value()?;
        if !self.admits(head.demand) {
            return None;
        }
        let (enqueued, waiter) = self.queue.pop_first()?;
        self.queued.remove(&waiter.claimant);
        Some((enqueued, waiter))
    }

    /// 1-based position of a queued claimant. O(position): used only on the rare path of a
    /// repeated acquire by a claimant that already waits.
    pub(crate) fn position(&self, enqueued: Revision) -> u64 {
        self.queue.range(..=enqueued).count() as u64
    }

    /// The single holder of an election (its leader), if any.
    pub(crate) fn leader(&self) -> Option<(&Claimant, &Holder)> {
        match self.policy {
            Policy::Election => self.holders.iter().next(),
            Policy::Lock | Policy::Semaphore { .. } => None,
        }
    }
}
