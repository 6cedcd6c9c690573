//! Who waits for which queue entry: a held-open acquire registers its entry (resource and
//! enqueue revision) and is woken only when an event that ends that entry is applied (a
//! grant or a cancel naming it), instead of on every apply. The apply path looks each such
//! event up here; with no waiter registered that is one check of an empty map.

use baton_state_machine::{Event, EventKind, ResourceId, Revision};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::Notify;

/// A queue entry: the resource and the revision it was enqueued at.
type Entry = (ResourceId, Revision);

/// The registry, one per node.
#[derive(Default)]
pub(crate) struct ClaimWaits {
    waits: Mutex<HashMap<Entry, Slot>>,
}

/// The waiters of one entry (more than one when a retried request waits for it too).
struct Slot {
    notify: Arc<Notify>,
    waiters: usize,
}

impl ClaimWaits {
    fn lock(&self) -> MutexGuard<'_, HashMap<Entry, Slot>> {
        self.waits
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Registers a waiter for the entry enqueued at `enqueued` on `resource`.
    pub(crate) fn register(
        self: &Arc<Self>,
        resource: ResourceId,
        enqueued: Revision,
    ) -> ClaimWait {
        let entry = (resource, enqueued);
        let notify = {
            let mut waits = self.lock();
            let slot = waits.entry(entry.clone()).or_insert_with(|| Slot {
                notify: Arc::new(Notify::new()),
                waiters: 0,
            });
            slot.waiters += 1;
            Arc::clone(&slot.notify)
        };
        ClaimWait {
            registry: Arc::clone(self),
            entry,
            notify,
        }
    }

    /// Wakes the waiters of every entry that one of `events` grants or cancels.
    pub(crate) fn wake(&self, events: &[Event]) {
        let waits = self.lock();
        if waits.is_empty() {
            return;
        }
        for event in events {
            if let Some(entry) = ended_entry(&event.kind) {
                // The key is built (one short string cloned) only for grants of queued
                // entries and cancels, and only while someone waits.
                if let Some(slot) = waits.get(&entry) {
                    slot.notify.notify_waiters();
                }
            }
        }
    }

    /// Wakes every waiter (after the state was replaced by a snapshot): each looks again.
    pub(crate) fn wake_all(&self) {
        for slot in self.lock().values() {
            slot.notify.notify_waiters();
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().len()
    }
}

/// The entry an event ends for its waiter: a grant of a queued entry, or a cancel.
fn ended_entry(kind: &EventKind) -> Option<Entry> {
    match kind {
        EventKind::Granted {
            resource,
            enqueued: Some(at),
            ..
        }
        | EventKind::Cancelled {
            resource,
            enqueued: at,
            ..
        } => Some((resource.clone(), *at)),
        _ => None,
    }
}

/// One waiter's registration; dropping it unregisters.
pub struct ClaimWait {
    registry: Arc<ClaimWaits>,
    entry: Entry,
    notify: Arc<Notify>,
}

impl ClaimWait {
    /// Completes once an event ending the entry is applied after this future was enabled
    /// (`Notified::enable`) or first polled: enable it, then read the state, then await it.
    pub fn notified(&self) -> tokio::sync::futures::Notified<'_> {
        self.notify.notified()
    }
}

impl Drop for ClaimWait {
    fn drop(&mut self) {
        let mut waits = self.registry.lock();
        if let Some(slot) = waits.get_mut(&self.entry) {
            slot.waiters -= 1;
            if slot.waiters == 0 {
                waits.remove(&self.entry);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use baton_state_machine::{CancelReason, Demand, Fence, LeaseId};
    use std::pin::pin;
    use std::task::{Context, Poll, Waker};

    fn granted(resource: &ResourceId, enqueued: Option<u64>) -> Event {
        Event {
            revision: Revision(9),
            kind: EventKind::Granted {
                resource: resource.clone(),
                lease: LeaseId(1),
                owner: "a".into(),
                demand: Demand::Exclusive,
                fence: Fence(9),
                enqueued: enqueued.map(Revision),
            },
        }
    }

    fn ready(f: std::pin::Pin<&mut tokio::sync::futures::Notified<'_>>) -> bool {
        let mut cx = Context::from_waker(Waker::noop());
        f.poll(&mut cx) == Poll::Ready(())
    }

    #[test]
    fn only_the_entry_an_event_ends_is_woken() {
        let waits = Arc::new(ClaimWaits::default());
        let lock = ResourceId::lock("l");
        let mine = waits.register(lock.clone(), Revision(5));
        let other = waits.register(lock.clone(), Revision(6));
        let mut mine_n = pin!(mine.notified());
        let mut other_n = pin!(other.notified());
        mine_n.as_mut().enable();
        other_n.as_mut().enable();

        // An immediate grant (no queue entry) and a grant of another lock wake nobody.
        waits.wake(&[
            granted(&lock, None),
            granted(&ResourceId::lock("m"), Some(5)),
        ]);
        assert!(!ready(mine_n.as_mut()));
        assert!(!ready(other_n.as_mut()));

        waits.wake(&[granted(&lock, Some(5))]);
        assert!(ready(mine_n.as_mut()));
        assert!(!ready(other_n.as_mut()));

        let cancel = Event {
            revision: Revision(10),
            kind: EventKind::Cancelled {
                resource: lock.clone(),
                lease: LeaseId(2),
                owner: "b".into(),
                enqueued: Revision(6),
                reason: CancelReason::TimedOut,
            },
        };
        waits.wake(&[cancel]);
        assert!(ready(other_n.as_mut()));
    }

    #[test]
    fn an_entry_is_forgotten_when_its_last_waiter_goes() {
        let waits = Arc::new(ClaimWaits::default());
        let lock = ResourceId::lock("l");
        let first = waits.register(lock.clone(), Revision(5));
        let second = waits.register(lock.clone(), Revision(5));
        assert_eq!(waits.len(), 1);
        drop(first);
        assert_eq!(waits.len(), 1);
        {
            let mut n = pin!(second.notified());
            n.as_mut().enable();
            waits.wake_all();
            assert!(ready(n.as_mut()));
        }
        drop(second);
        assert_eq!(waits.len(), 0);
    }
}
