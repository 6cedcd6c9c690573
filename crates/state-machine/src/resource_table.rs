//! The table of locks, semaphores and elections. Most held locks are a lock with one
//! exclusive holder and nobody waiting; the table keeps such a lock in a 32-byte
//! [`Slot::Held`] beside its name, where a boxed [`Resource`] took 112 bytes of heap and a
//! pointer (decision #118). Every other resource stays a boxed `Resource`.
//!
//! Code that changes a resource gets a `&mut Resource` ([`ResourceTable::get_mut`]): a
//! compact slot is expanded first, and [`ResourceTable::compact`], which the state
//! machine calls after every command, folds the resources changed since back where they
//! fit. Readers get a [`Cow`]: borrowed for a boxed resource, built for a compact one.
//! Snapshots encode every slot as the `Resource` it stands for, so their format is that of
//! a map of boxed resources.

use crate::ids::{Fence, LeaseId};
use crate::packed::PackedMap;
use crate::resource::{
    Claimant, Demand, Holder, Policy, Resource, ResourceId, ResourceIdRef, ResourceKind,
};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::borrow::{Borrow, Cow};
use std::fmt;
use std::num::NonZeroU64;
use std::ops::Bound;

/// Resources by id; see the module documentation.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub(crate) struct ResourceTable {
    slots: PackedMap<Key, Slot>,
    /// Locks handed out for change since the last [`ResourceTable::compact`]: each may fit
    /// a compact slot again.
    #[serde(skip)]
    touched: Vec<Key>,
}

/// A resource's id as the table keys it: one boxed block of the kind's byte and the name,
/// 16 bytes beside its slot where a `ResourceId` took 32 (decision #119). Its bytes sort
/// as ids do (by kind, then name: UTF-8's byte order is its code-point order); it encodes
/// as a `ResourceId`.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Key(Box<[u8]>);

/// Names up to this many bytes are looked up without an allocation.
const KEY_ON_STACK: usize = 127;

impl Key {
    fn of(id: &ResourceId) -> Key {
        with_key_bytes(id, |bytes| Key(bytes.into()))
    }

    fn kind(&self) -> ResourceKind {
        ResourceKind::from_byte(self.0.first().copied().unwrap_or_default())
    }

    fn name(&self) -> Cow<'_, str> {
        String::from_utf8_lossy(self.0.get(1..).unwrap_or_default())
    }

    fn id(&self) -> ResourceId {
        ResourceId {
            kind: self.kind(),
            name: self.name().into_owned(),
        }
    }
}

impl Borrow<[u8]> for Key {
    fn borrow(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.id().fmt(f)
    }
}

/// Calls `f` with `id`'s key bytes, built on the stack when the name is short.
fn with_key_bytes<R>(id: &ResourceId, f: impl FnOnce(&[u8]) -> R) -> R {
    let kind = id.kind.byte();
    let name = id.name.as_bytes();
    if let Some(buf) = name.len().checked_add(1).filter(|n| *n <= KEY_ON_STACK + 1) {
        let mut stack = [0u8; KEY_ON_STACK + 1];
        stack[0] = kind;
        stack[1..buf].copy_from_slice(name);
        f(&stack[..buf])
    } else {
        let mut heap = Vec::with_capacity(name.len() + 1);
        heap.push(kind);
        heap.extend_from_slice(name);
        f(&heap)
    }
}

impl Serialize for Key {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let name = self.name();
        ResourceIdRef {
            kind: self.kind(),
            name: &name,
        }
        .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Key, D::Error> {
        ResourceId::deserialize(deserializer).map(|id| Key::of(&id))
    }
}

/// One resource as the table keeps it.
#[derive(Clone, Debug)]
enum Slot {
    /// A lock held by one exclusive holder, once, without a lock-delay to leave behind,
    /// with nobody queued and no delay in force.
    Held(Held),
    /// Anything else.
    Full(Box<Resource>),
}

/// What a [`Slot::Held`] lock keeps: its holder's lease and fence, and in one boxed block
/// (`tail`) a flag byte, the enqueue revision if the grant came from the queue (8 bytes,
/// little-endian, after a flag of 1), and the owner. Its last fence is the holder's. 32
/// bytes: the flag rides in the owner's block, which the allocator's rounding usually
/// leaves room for, where an `Option<NonZeroU64>` beside it took 8 (decision #120).
#[derive(Clone, Debug)]
struct Held {
    lease: LeaseId,
    fence: Fence,
    tail: Box<[u8]>,
}

/// The flag byte of a [`Held`] tail whose grant came from the queue.
const FROM_QUEUE: u8 = 1;

impl Held {
    /// The holder of `res`, if `res` fits a compact slot.
    fn fitting(res: &Resource) -> Option<(&Claimant, &Holder)> {
        if res.policy != Policy::Lock
            || res.has_contention()
            || res.permits_held != 0
            || res.holders.len() != 1
        {
            return None;
        }
        let (claimant, h) = res.holders.iter().next()?;
        let plain = h.demand == Demand::Exclusive
            && h.count == 1
            && h.lock_delay_ms == 0
            && h.value.is_none()
            && h.fence == res.last_fence;
        plain.then_some((claimant, h))
    }

    /// The compact form of `res`; `Err(res)` if it does not fit.
    fn take(res: Resource) -> Result<Held, Resource> {
        let Some((claimant, h)) = Held::fitting(&res) else {
            return Err(res);
        };
        let owner = claimant.owner.as_bytes();
        let mut tail = Vec::with_capacity(1 + 8 + owner.len());
        match h.enqueued {
            Some(enqueued) => {
                tail.push(FROM_QUEUE);
                tail.extend_from_slice(&enqueued.get().to_le_bytes());
            }
            None => tail.push(0),
        }
        tail.extend_from_slice(owner);
        Ok(Held {
            lease: claimant.lease,
            fence: h.fence,
            tail: tail.into_boxed_slice(),
        })
    }

    /// The enqueue revision, if the grant came from the queue, and the owner's bytes.
    fn parts(&self) -> (Option<NonZeroU64>, &[u8]) {
        match self.tail.split_first() {
            Some((&FROM_QUEUE, rest)) if rest.len() >= 8 => {
                let (revision, owner) = rest.split_at(8);
                let mut bytes = [0u8; 8];
                bytes.copy_from_slice(revision);
                (NonZeroU64::new(u64::from_le_bytes(bytes)), owner)
            }
            Some((_, owner)) => (None, owner),
            None => (None, &[]),
        }
    }

    /// The resource this stands for.
    fn to_resource(&self) -> Resource {
        let (enqueued, owner) = self.parts();
        let mut res = Resource::new(Policy::Lock);
        res.insert_holder(
            Claimant::new(self.lease, String::from_utf8_lossy(owner).into_owned()),
            Holder {
                demand: Demand::Exclusive,
                fence: self.fence,
                count: 1,
                enqueued,
                lock_delay_ms: 0,
                value: None,
            },
        );
        res
    }
}

impl Slot {
    fn of(res: Resource) -> Slot {
        match Held::take(res) {
            Ok(held) => Slot::Held(held),
            Err(res) => Slot::Full(Box::new(res)),
        }
    }

    fn view(&self) -> Cow<'_, Resource> {
        match self {
            Slot::Held(held) => Cow::Owned(held.to_resource()),
            Slot::Full(res) => Cow::Borrowed(res),
        }
    }

    /// The resource, expanded in place first if it was compact.
    fn expanded(&mut self) -> &mut Resource {
        if let Slot::Held(held) = self {
            *self = Slot::Full(Box::new(held.to_resource()));
        }
        match self {
            Slot::Full(res) => res,
            Slot::Held(_) => unreachable!("expanded just above"),
        }
    }

    /// Folds a boxed resource that fits into a compact slot.
    fn compact(&mut self) {
        if let Slot::Full(res) = self
            && Held::fitting(res).is_some()
        {
            // `Resource::new` allocates nothing; the box goes with the old slot.
            let taken = std::mem::replace(&mut **res, Resource::new(Policy::Lock));
            *self = Slot::of(taken);
        }
    }

    fn is_compact_if_it_fits(&self) -> bool {
        match self {
            Slot::Held(_) => true,
            Slot::Full(res) => Held::fitting(res).is_none(),
        }
    }
}

impl PartialEq for Slot {
    fn eq(&self, other: &Slot) -> bool {
        self.view() == other.view()
    }
}

impl Eq for Slot {}

impl Serialize for Slot {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.view().serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Slot {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Slot, D::Error> {
        Resource::deserialize(deserializer).map(Slot::of)
    }
}

impl PartialEq for ResourceTable {
    fn eq(&self, other: &ResourceTable) -> bool {
        self.slots == other.slots
    }
}

impl Eq for ResourceTable {}

impl ResourceTable {
    /// How many resources exist.
    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether `id` exists.
    pub(crate) fn contains_key(&self, id: &ResourceId) -> bool {
        with_key_bytes(id, |key| self.slots.contains_key(key))
    }

    /// The resource `id`, to read.
    pub(crate) fn get(&self, id: &ResourceId) -> Option<Cow<'_, Resource>> {
        with_key_bytes(id, |key| self.slots.get(key)).map(Slot::view)
    }

    /// The resource `id`, to change; compacted again by the next [`Self::compact`].
    pub(crate) fn get_mut(&mut self, id: &ResourceId) -> Option<&mut Resource> {
        with_key_bytes(id, |key| {
            let slot = self.slots.get_mut(key)?;
            let res = slot.expanded();
            if res.policy == Policy::Lock && self.touched.last().is_none_or(|t| *t.0 != *key) {
                self.touched.push(Key(key.into()));
            }
            Some(res)
        })
    }

    /// Applies `update` to the resource `id`, made with `make()` first if there is none,
    /// and compacts it at once (one search of the table, where a later `compact` would
    /// take another).
    pub(crate) fn update_or_insert_with<R>(
        &mut self,
        id: &ResourceId,
        make: impl FnOnce() -> Resource,
        update: impl FnOnce(&mut Resource) -> R,
    ) -> R {
        with_key_bytes(id, |key| {
            self.slots.update_or_insert_by(
                key,
                |key| Key(key.into()),
                || Slot::Full(Box::new(make())),
                |slot| {
                    let answer = update(slot.expanded());
                    slot.compact();
                    answer
                },
            )
        })
    }

    /// Forgets the resource `id`.
    pub(crate) fn remove(&mut self, id: &ResourceId) {
        with_key_bytes(id, |key| {
            self.slots.remove(key);
            // Nothing left to compact: spare `compact` the search (a release's usual end).
            if self.touched.last().is_some_and(|t| *t.0 == *key) {
                self.touched.pop();
            }
        });
    }

    /// Folds every lock changed since the last call that fits into a compact slot.
    pub(crate) fn compact(&mut self) {
        for key in self.touched.drain(..) {
            if let Some(slot) = self.slots.get_mut::<[u8]>(&key.0) {
                slot.compact();
            }
        }
    }

    /// Whether every resource that fits a compact slot is in one (an invariant between
    /// commands).
    pub(crate) fn is_compact(&self) -> bool {
        self.slots.values().all(Slot::is_compact_if_it_fits)
    }

    /// Every resource in id order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (ResourceId, Cow<'_, Resource>)> {
        self.slots.iter().map(|(key, slot)| (key.id(), slot.view()))
    }

    /// Resources in id order from `lower` on.
    pub(crate) fn range_from(
        &self,
        lower: Bound<&ResourceId>,
    ) -> impl Iterator<Item = (ResourceId, Cow<'_, Resource>)> {
        self.slots
            .range_from(lower.map(Key::of))
            .map(|(key, slot)| (key.id(), slot.view()))
    }

    /// The boxed resources in id order: every one that can have a queue or a delay (a
    /// compact lock has neither), without building the compact ones.
    pub(crate) fn boxed(&self) -> impl Iterator<Item = (ResourceId, &Resource)> {
        self.slots.iter().filter_map(|(key, slot)| match slot {
            Slot::Full(res) => Some((key.id(), &**res)),
            Slot::Held(_) => None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::Revision;
    use crate::resource::{LockDelay, Waiter};
    use bincode::Options;

    fn holder(fence: u64) -> Holder {
        Holder {
            demand: Demand::Exclusive,
            fence: Fence(fence),
            count: 1,
            enqueued: None,
            lock_delay_ms: 0,
            value: None,
        }
    }

    fn held_lock(lease: u64, fence: u64) -> Resource {
        let mut res = Resource::new(Policy::Lock);
        res.insert_holder(Claimant::new(LeaseId(lease), "o"), holder(fence));
        res
    }

    /// The fence a compact slot keeps, `None` if the slot is boxed.
    fn held_fence(table: &ResourceTable, id: &ResourceId) -> Option<Fence> {
        match with_key_bytes(id, |key| table.slots.get(key))? {
            Slot::Held(held) => Some(held.fence),
            Slot::Full(_) => None,
        }
    }

    /// The holder of a lock `held_lock` made.
    fn only_holder(res: &mut Resource, lease: u64) -> &mut Holder {
        res.holders
            .get_mut(&Claimant::new(LeaseId(lease), "o"))
            .unwrap()
    }

    fn encode<T: Serialize>(value: &T) -> Vec<u8> {
        bincode::DefaultOptions::new().serialize(value).unwrap()
    }

    #[test]
    fn a_key_sorts_and_encodes_as_the_id_it_stands_for() {
        let long = "n".repeat(KEY_ON_STACK + 5);
        let ids = [
            ResourceId::lock(""),
            ResourceId::lock("a"),
            ResourceId::lock("a\u{0}"),
            ResourceId::lock("ab"),
            ResourceId::lock("é"),
            ResourceId::lock(long.as_str()),
            ResourceId::semaphore("a"),
            ResourceId::election(""),
            ResourceId::election(long.as_str()),
        ];
        assert_eq!(std::mem::size_of::<Key>(), 16);
        for id in &ids {
            let key = Key::of(id);
            assert_eq!(&key.id(), id);
            assert_eq!(encode(&key), encode(id));
            let back: Key = bincode::DefaultOptions::new()
                .deserialize(&encode(id))
                .unwrap();
            assert!(back == key);
            for other in &ids {
                assert_eq!(
                    key.cmp(&Key::of(other)),
                    id.cmp(other),
                    "{id:?} vs {other:?}"
                );
            }
        }
        // Lookups by borrowed bytes, on the stack and on the heap, find what was put in.
        let mut table = ResourceTable::default();
        for id in &ids {
            table.update_or_insert_with(id, || held_lock(1, 2), |_| ());
        }
        for id in &ids {
            assert!(table.contains_key(id));
            assert_eq!(held_fence(&table, id), Some(Fence(2)));
        }
        let listed: Vec<ResourceId> = table.iter().map(|(id, _)| id).collect();
        let mut sorted = ids.to_vec();
        sorted.sort();
        assert_eq!(listed, sorted);
        table.remove(&ids[5]);
        assert!(!table.contains_key(&ids[5]) && table.len() == ids.len() - 1);
    }

    #[test]
    fn a_compact_slot_takes_32_bytes() {
        assert!(std::mem::size_of::<Slot>() <= 32);
    }

    #[test]
    fn only_a_plain_exclusive_hold_is_compact() {
        let plain = held_lock(1, 3);
        assert!(Held::fitting(&plain).is_some());
        let mut reentered = plain.clone();
        only_holder(&mut reentered, 1).count = 2;
        let mut delayed_on_loss = plain.clone();
        only_holder(&mut delayed_on_loss, 1).lock_delay_ms = 10;
        let mut queued = plain.clone();
        queued.enqueue(
            Revision(4),
            Waiter {
                claimant: Claimant::new(LeaseId(2), "w"),
                demand: Demand::Exclusive,
                wait_ms: 1_000,
                lock_delay_ms: 0,
                value: None,
            },
        );
        let mut in_delay = Resource::new(Policy::Lock);
        in_delay.set_delay(Some(LockDelay {
            since: Revision(5),
            delay_ms: 100,
        }));
        let mut shared = Resource::new(Policy::Lock);
        shared.insert_holder(
            Claimant::new(LeaseId(1), "o"),
            Holder {
                demand: Demand::Shared,
                ..holder(3)
            },
        );
        let mut behind_last_fence = held_lock(1, 3);
        behind_last_fence.last_fence = Fence(9);
        let mut election = Resource::new(Policy::Election);
        election.insert_holder(Claimant::new(LeaseId(1), ""), holder(3));
        for res in [
            reentered,
            delayed_on_loss,
            queued,
            in_delay,
            shared,
            behind_last_fence,
            election,
        ] {
            assert!(Held::fitting(&res).is_none(), "{res:?}");
        }
    }

    #[test]
    fn a_compact_slot_stands_for_the_same_resource_and_encodes_as_it() {
        let mut granted_from_queue = held_lock(7, 12);
        only_holder(&mut granted_from_queue, 7).enqueued = Holder::from_queue(Revision(10));
        // Owners whose first byte is the queue flag, empty ones, with and without a queue.
        let owned_by = |owner: &str, enqueued: Option<u64>| {
            let mut res = Resource::new(Policy::Lock);
            let h = Holder {
                enqueued: enqueued.and_then(|e| Holder::from_queue(Revision(e))),
                ..holder(20)
            };
            res.insert_holder(Claimant::new(LeaseId(2), owner), h);
            res
        };
        for res in [
            held_lock(1, 3),
            granted_from_queue,
            owned_by("", None),
            owned_by("", Some(19)),
            owned_by("\u{1}2345678é", None),
            owned_by("\u{1}", Some(u64::MAX)),
        ] {
            let slot = Slot::of(res.clone());
            assert!(matches!(slot, Slot::Held(_)));
            assert_eq!(*slot.view(), res);
            assert_eq!(encode(&slot), encode(&res));
            let back: Slot = bincode::DefaultOptions::new()
                .deserialize(&encode(&res))
                .unwrap();
            assert!(matches!(back, Slot::Held(_)));
            assert_eq!(back, slot);
        }
    }

    #[test]
    fn a_changed_lock_is_compacted_again_by_compact() {
        let id = ResourceId::lock("a");
        let mut table = ResourceTable::default();
        table.update_or_insert_with(&id, || Resource::new(Policy::Lock), |_| ());
        table.compact();
        assert!(table.is_compact());
        // Empty until a holder goes in: it stays boxed (the caller removes idle ones).
        table
            .get_mut(&id)
            .unwrap()
            .insert_holder(Claimant::new(LeaseId(1), "o"), holder(3));
        assert!(!table.is_compact(), "not compacted before compact()");
        table.compact();
        assert!(table.is_compact());
        assert_eq!(held_fence(&table, &id), Some(Fence(3)));
        // Re-entered: it no longer fits, and stays boxed.
        only_holder(table.get_mut(&id).unwrap(), 1).count = 2;
        table.compact();
        assert_eq!(held_fence(&table, &id), None);
        assert!(table.is_compact());
        assert_eq!(table.get(&id).unwrap().holders.len(), 1);
    }
}
