//! Locks, semaphores and elections are one thing: a [`Resource`] with holders and a FIFO
//! queue. This file is the queue and holder bookkeeping they share; the rules of who may
//! be granted live in [`Resource::admits`], and the orchestration with leases and events in
//! `claims.rs`.

use crate::ids::{Fence, LeaseId, Revision};
use crate::small::SmallMap;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::num::NonZeroU64;

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

    /// Its byte in the compact encodings of ids and claims (and its index in per-kind
    /// tallies): in the kinds' order, so bytes sort as kinds do.
    pub(crate) fn byte(self) -> u8 {
        match self {
            ResourceKind::Lock => 0,
            ResourceKind::Semaphore => 1,
            ResourceKind::Election => 2,
        }
    }

    /// The kind [`ResourceKind::byte`] gave `byte` (only that writes one).
    pub(crate) fn from_byte(byte: u8) -> ResourceKind {
        match byte {
            0 => ResourceKind::Lock,
            1 => ResourceKind::Semaphore,
            _ => ResourceKind::Election,
        }
    }
}

/// A `ResourceId`, borrowed, for encoding one kept in another form without a copy.
#[derive(Serialize)]
#[serde(rename = "ResourceId")]
pub(crate) struct ResourceIdRef<'a> {
    pub(crate) kind: ResourceKind,
    pub(crate) name: &'a str,
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
    /// The enqueue revision if the grant came from the queue, in 8 bytes: revisions start
    /// at 1, and an `Option<Revision>` of 16 would push a `Resource` past 128 bytes
    /// (decision #114). Encoded as an `Option<Revision>` is.
    pub enqueued: Option<NonZeroU64>,
    /// Lock-delay to apply if this holder is lost through lease expiry, in 4 bytes, so
    /// that a `Resource` fits 112 (decision #116): at most about 49 days, a longer one is
    /// capped there ([`Holder::delay_ms`]). Encoded as the `u64` it was (bincode's varint
    /// writes both alike), and read back from any `u64`.
    #[serde(deserialize_with = "saturating_u32")]
    pub lock_delay_ms: u32,
    /// The election value (elections only), boxed: 16 bytes where a `String` takes 24.
    pub value: Option<Box<str>>,
}

/// Reads a `u64`, capped at `u32::MAX`.
fn saturating_u32<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    Ok(Holder::delay_ms(u64::deserialize(d)?))
}

impl Holder {
    /// A lock-delay as a holder keeps it: capped at `u32::MAX` ms (about 49 days).
    pub(crate) fn delay_ms(lock_delay_ms: u64) -> u32 {
        u32::try_from(lock_delay_ms).unwrap_or(u32::MAX)
    }

    /// The enqueue revision if the grant came from the queue.
    pub fn enqueued(&self) -> Option<Revision> {
        self.enqueued.map(|r| Revision(r.get()))
    }

    /// The compact form of a grant's enqueue revision.
    pub(crate) fn from_queue(enqueued: Revision) -> Option<NonZeroU64> {
        NonZeroU64::new(enqueued.0)
    }
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
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(from = "ResourceWire")]
pub struct Resource {
    pub(crate) policy: Policy,
    pub(crate) holders: SmallMap<Claimant, Holder>,
    pub(crate) permits_held: u64,
    /// The highest fence ever granted here, to assert fences never go back.
    pub(crate) last_fence: Fence,
    /// The queue and the lock-delay; `None` whenever both are empty (decision #96).
    contention: Option<Box<Contention>>,
}

/// What only a contended or delayed resource has, behind one pointer: most held locks
/// have neither, and the three fields took 72 of a `Resource`'s 128 bytes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Contention {
    /// Waiters keyed by enqueue revision: FIFO order is key order.
    queue: BTreeMap<Revision, Waiter>,
    /// Index from claimant to its enqueue revision, for O(log n) cancel.
    queued: BTreeMap<Claimant, Revision>,
    delay: Option<LockDelay>,
}

/// The queue of a resource without one.
static NO_QUEUE: BTreeMap<Revision, Waiter> = BTreeMap::new();
/// The queue index of a resource without a queue.
static NO_QUEUED: BTreeMap<Claimant, Revision> = BTreeMap::new();

/// A resource as snapshots encode it: the fields in the order of the format before the
/// contention was boxed, so snapshot format 2 is unchanged.
#[derive(Deserialize)]
#[serde(rename = "Resource")]
struct ResourceWire {
    policy: Policy,
    holders: SmallMap<Claimant, Holder>,
    queue: BTreeMap<Revision, Waiter>,
    queued: BTreeMap<Claimant, Revision>,
    permits_held: u64,
    last_fence: Fence,
    delay: Option<LockDelay>,
}

/// The same, borrowed, for encoding without a copy.
#[derive(Serialize)]
#[serde(rename = "Resource")]
struct ResourceWireRef<'a> {
    policy: &'a Policy,
    holders: &'a SmallMap<Claimant, Holder>,
    queue: &'a BTreeMap<Revision, Waiter>,
    queued: &'a BTreeMap<Claimant, Revision>,
    permits_held: u64,
    last_fence: Fence,
    delay: Option<LockDelay>,
}

impl From<ResourceWire> for Resource {
    fn from(w: ResourceWire) -> Resource {
        let mut r = Resource {
            policy: w.policy,
            holders: w.holders,
            permits_held: w.permits_held,
            last_fence: w.last_fence,
            contention: Some(Box::new(Contention {
                queue: w.queue,
                queued: w.queued,
                delay: w.delay,
            })),
        };
        r.tidy();
        r
    }
}

impl Serialize for Resource {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        ResourceWireRef {
            policy: &self.policy,
            holders: &self.holders,
            queue: self.queue(),
            queued: self.queued(),
            permits_held: self.permits_held,
            last_fence: self.last_fence,
            delay: self.delay(),
        }
        .serialize(serializer)
    }
}

impl Resource {
    pub(crate) fn new(policy: Policy) -> Resource {
        Resource {
            policy,
            holders: SmallMap::new(),
            permits_held: 0,
            last_fence: Fence(0),
            contention: None,
        }
    }

    /// Waiters keyed by enqueue revision: FIFO order is key order.
    pub(crate) fn queue(&self) -> &BTreeMap<Revision, Waiter> {
        self.contention.as_ref().map_or(&NO_QUEUE, |c| &c.queue)
    }

    /// Index from claimant to its enqueue revision.
    pub(crate) fn queued(&self) -> &BTreeMap<Claimant, Revision> {
        self.contention.as_ref().map_or(&NO_QUEUED, |c| &c.queued)
    }

    /// The lock-delay in force, if any.
    pub(crate) fn delay(&self) -> Option<LockDelay> {
        self.contention.as_ref().and_then(|c| c.delay)
    }

    /// Starts, extends or (with `None`) ends the lock-delay.
    pub(crate) fn set_delay(&mut self, delay: Option<LockDelay>) {
        self.contention_mut().delay = delay;
        self.tidy();
    }

    /// Whether the contention box is there exactly when it holds something.
    pub(crate) fn contention_is_tidy(&self) -> bool {
        self.contention
            .as_ref()
            .is_none_or(|c| !c.queue.is_empty() || c.delay.is_some())
    }

    fn contention_mut(&mut self) -> &mut Contention {
        self.contention.get_or_insert_with(Box::default)
    }

    /// Drops the contention box once its queue is empty and no delay is in force.
    fn tidy(&mut self) {
        if !self.contention_is_tidy() {
            self.contention = None;
        }
    }

    /// Whether it has a queue or a delay in force.
    pub(crate) fn has_contention(&self) -> bool {
        self.contention.is_some()
    }

    /// No holder, no waiter, no delay: the resource can be forgotten.
    pub(crate) fn is_idle(&self) -> bool {
        self.holders.is_empty() && !self.has_contention()
    }

    /// Whether `demand` is compatible with the current holders, ignoring the queue.
    pub(crate) fn admits(&self, demand: Demand) -> bool {
        if self.delay().is_some() {
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
        self.queue().is_empty() && self.admits(demand)
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
            self.queue()
                .last_key_value()
                .is_none_or(|(r, _)| *r < enqueued),
            "queue out of order"
        );
        let c = self.contention_mut();
        c.queued.insert(waiter.claimant.clone(), enqueued);
        c.queue.insert(enqueued, waiter);
        c.queue.len() as u64
    }

    /// Removes a claimant's queue entry, if it has one.
    pub(crate) fn dequeue(&mut self, claimant: &Claimant) -> Option<(Revision, Waiter)> {
        let c = self.contention.as_mut()?;
        let enqueued = c.queued.remove(claimant)?;
        let waiter = c.queue.remove(&enqueued);
        self.tidy();
        Some((enqueued, waiter?))
    }

    /// Removes and returns the head of the queue if it can be granted now.
    pub(crate) fn pop_admissible(&mut self) -> Option<(Revision, Waiter)> {
        let (_, head) = self.queue().first_key_value()?;
        if !self.admits(head.demand) {
            return None;
        }
        let c = self.contention.as_mut()?;
        let (enqueued, waiter) = c.queue.pop_first()?;
        c.queued.remove(&waiter.claimant);
        self.tidy();
        Some((enqueued, waiter))
    }

    /// 1-based position of a queued claimant. O(position): used only on the rare path of a
    /// repeated acquire by a claimant that already waits.
    pub(crate) fn position(&self, enqueued: Revision) -> u64 {
        self.queue().range(..=enqueued).count() as u64
    }

    /// The single holder of an election (its leader), if any.
    pub(crate) fn leader(&self) -> Option<(&Claimant, &Holder)> {
        match self.policy {
            Policy::Election => self.holders.iter().next(),
            Policy::Lock | Policy::Semaphore { .. } => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bincode::Options;

    /// `Resource` as it was declared before decision #96, encoded by serde's derive.
    #[derive(Serialize)]
    struct Before {
        policy: Policy,
        holders: SmallMap<Claimant, Holder>,
        queue: BTreeMap<Revision, Waiter>,
        queued: BTreeMap<Claimant, Revision>,
        permits_held: u64,
        last_fence: Fence,
        delay: Option<LockDelay>,
    }

    fn encode<T: Serialize>(value: &T) -> Vec<u8> {
        bincode::DefaultOptions::new().serialize(value).unwrap()
    }

    fn holder() -> Holder {
        Holder {
            demand: Demand::Exclusive,
            fence: Fence(3),
            count: 1,
            enqueued: None,
            lock_delay_ms: 0,
            value: None,
        }
    }

    fn waiter(lease: u64) -> Waiter {
        Waiter {
            claimant: Claimant::new(LeaseId(lease), "w"),
            demand: Demand::Exclusive,
            wait_ms: 5_000,
            lock_delay_ms: 0,
            value: None,
        }
    }

    fn before(r: &Resource) -> Before {
        Before {
            policy: r.policy,
            holders: r.holders.clone(),
            queue: r.queue().clone(),
            queued: r.queued().clone(),
            permits_held: r.permits_held,
            last_fence: r.last_fence,
            delay: r.delay(),
        }
    }

    #[test]
    fn snapshots_encode_a_resource_as_before_the_contention_was_boxed() {
        let mut r = Resource::new(Policy::Lock);
        r.insert_holder(Claimant::new(LeaseId(1), "h"), holder());
        let uncontended = r.clone();
        r.enqueue(Revision(4), waiter(2));
        r.enqueue(Revision(5), waiter(3));
        let queued = r.clone();
        r.set_delay(Some(LockDelay {
            since: Revision(6),
            delay_ms: 1_000,
        }));
        for r in [uncontended, queued, r] {
            let bytes = encode(&r);
            assert_eq!(bytes, encode(&before(&r)));
            let back: Resource = bincode::DefaultOptions::new().deserialize(&bytes).unwrap();
            assert_eq!(back, r);
            assert!(back.contention_is_tidy());
        }
    }

    /// `Holder` as it was declared before decisions #114 and #116.
    #[derive(Serialize)]
    struct HolderBefore {
        demand: Demand,
        fence: Fence,
        count: u32,
        enqueued: Option<Revision>,
        lock_delay_ms: u64,
        value: Option<String>,
    }

    #[test]
    fn a_holder_encodes_its_enqueue_revision_as_an_option_of_a_revision() {
        for enqueued in [None, Some(Revision(1)), Some(Revision(u64::MAX))] {
            for lock_delay_ms in [0, 250, 60_000, u32::MAX] {
                let h = Holder {
                    enqueued: enqueued.and_then(Holder::from_queue),
                    lock_delay_ms,
                    value: Some("v".into()),
                    ..holder()
                };
                assert_eq!(h.enqueued(), enqueued);
                let bytes = encode(&h);
                let old = HolderBefore {
                    demand: h.demand,
                    fence: h.fence,
                    count: h.count,
                    enqueued,
                    lock_delay_ms: u64::from(h.lock_delay_ms),
                    value: h.value.as_deref().map(str::to_owned),
                };
                assert_eq!(bytes, encode(&old));
                let back: Holder = bincode::DefaultOptions::new().deserialize(&bytes).unwrap();
                assert_eq!(back, h);
            }
        }
    }

    #[test]
    fn a_lock_delay_beyond_49_days_is_read_back_capped() {
        let old = HolderBefore {
            demand: Demand::Exclusive,
            fence: Fence(1),
            count: 1,
            enqueued: None,
            lock_delay_ms: u64::MAX,
            value: None,
        };
        let back: Holder = bincode::DefaultOptions::new()
            .deserialize(&encode(&old))
            .unwrap();
        assert_eq!(back.lock_delay_ms, u32::MAX);
        assert_eq!(Holder::delay_ms(u64::from(u32::MAX) + 1), u32::MAX);
    }

    #[test]
    fn a_resource_fits_the_allocators_112_byte_class_and_a_lease_72_bytes() {
        // A boxed resource takes one of jemalloc's classes (96, 112, 128, 160 bytes;
        // decisions #114, #116); a lease lives in place in its table (decision #119).
        assert!(std::mem::size_of::<Resource>() <= 112);
        assert!(std::mem::size_of::<crate::lease::Lease>() <= 72);
    }

    #[test]
    fn the_contention_box_goes_when_the_queue_empties_and_the_delay_ends() {
        let mut r = Resource::new(Policy::Lock);
        r.insert_holder(Claimant::new(LeaseId(1), "h"), holder());
        assert!(r.contention.is_none());
        r.enqueue(Revision(4), waiter(2));
        r.enqueue(Revision(5), waiter(3));
        assert!(r.dequeue(&Claimant::new(LeaseId(2), "w")).is_some());
        assert!(r.contention.is_some(), "one waiter left");
        assert!(r.dequeue(&Claimant::new(LeaseId(3), "w")).is_some());
        assert!(r.contention.is_none());
        let delay = LockDelay {
            since: Revision(6),
            delay_ms: 1_000,
        };
        r.set_delay(Some(delay));
        r.enqueue(Revision(7), waiter(4));
        assert_eq!(r.delay(), Some(delay));
        r.set_delay(None);
        assert!(r.contention.is_some(), "the waiter is still queued");
        r.remove_holder(&Claimant::new(LeaseId(1), "h"));
        assert!(r.pop_admissible().is_some());
        assert!(r.contention.is_none());
        assert!(r.dequeue(&Claimant::new(LeaseId(9), "w")).is_none());
        assert!(r.contention.is_none(), "a miss does not create the box");
    }
}
