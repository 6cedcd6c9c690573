//! Code told of applied progress on the apply path itself, instead of a task woken for
//! every entry:
//! - [`ApplyObserver`]s registered by the layers above (the console's activity tables)
//!   receive each applied batch synchronously, after the state's lock is released;
//! - a [`ProgressAlarm`] wakes one task only once applied progress reaches the marks it
//!   set (the snapshot pacer), so that task sleeps through the entries in between.
//!
//! Both cost the apply path one uncontended mutex per applied batch.

use super::sm_store::{AppliedBatch, AppliedProgress};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use tokio::sync::Notify;

/// Told of every batch this node applies, synchronously on the apply path: the commit's
/// reply waits for it, so it must be short and must not block.
pub trait ApplyObserver: Send + Sync {
    /// One applied batch (only batches with events are passed).
    fn applied(&self, batch: &AppliedBatch);
    /// A snapshot replaced the state: the events of the entries it covers were never
    /// applied here.
    fn replaced(&self);
}

/// The registered observers, one set per node.
#[derive(Default)]
pub(crate) struct Observers {
    inner: Mutex<Registered>,
}

#[derive(Default)]
struct Registered {
    next: u64,
    observers: BTreeMap<u64, Arc<dyn ApplyObserver>>,
}

impl Observers {
    fn lock(&self) -> MutexGuard<'_, Registered> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers `observer` until the returned handle is dropped.
    pub(crate) fn register(self: &Arc<Self>, observer: Arc<dyn ApplyObserver>) -> Observing {
        let mut r = self.lock();
        let id = r.next;
        r.next += 1;
        r.observers.insert(id, observer);
        Observing {
            registry: Arc::clone(self),
            id,
        }
    }

    /// Passes `batch` to every observer.
    pub(crate) fn applied(&self, batch: &AppliedBatch) {
        for observer in self.lock().observers.values() {
            observer.applied(batch);
        }
    }

    /// Tells every observer that a snapshot replaced the state.
    pub(crate) fn replaced(&self) {
        for observer in self.lock().observers.values() {
            observer.replaced();
        }
    }
}

/// An observer's registration; dropping it unregisters the observer.
pub struct Observing {
    registry: Arc<Observers>,
    id: u64,
}

impl Drop for Observing {
    fn drop(&mut self) {
        self.registry.lock().observers.remove(&self.id);
    }
}

/// Wakes one waiting task once applied progress reaches both a log index and a command
/// count. Disarmed (marks at `u64::MAX`) until the task sets its marks.
pub(crate) struct ProgressAlarm {
    state: Mutex<AlarmState>,
    notify: Notify,
}

struct AlarmState {
    /// The last progress the apply path reported.
    progress: AppliedProgress,
    index: u64,
    commands: u64,
}

impl AlarmState {
    /// Whether progress reached the marks; if so, disarms them (one ring per setting).
    fn take_ring(&mut self) -> bool {
        let reached =
            self.progress.log_index >= self.index && self.progress.commands >= self.commands;
        if reached {
            self.index = u64::MAX;
            self.commands = u64::MAX;
        }
        reached
    }
}

impl ProgressAlarm {
    /// A disarmed alarm that starts at `progress`.
    pub(crate) fn new(progress: AppliedProgress) -> ProgressAlarm {
        ProgressAlarm {
            state: Mutex::new(AlarmState {
                progress,
                index: u64::MAX,
                commands: u64::MAX,
            }),
            notify: Notify::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, AlarmState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The apply path's report: rings (once) if the marks are reached.
    pub(crate) fn progress(&self, progress: AppliedProgress) {
        let mut s = self.lock();
        s.progress = progress;
        if s.take_ring() {
            // A permit is kept if the task is not waiting yet: the ring is never lost.
            self.notify.notify_one();
        }
    }

    /// Sets the marks; rings at once if progress already reached them.
    pub(crate) fn set(&self, index: u64, commands: u64) {
        let mut s = self.lock();
        s.index = index;
        s.commands = commands;
        if s.take_ring() {
            self.notify.notify_one();
        }
    }

    /// Waits for the next ring.
    pub(crate) async fn rung(&self) {
        self.notify.notified().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use baton_state_machine::Revision;
    use std::future::Future;
    use std::pin::pin;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::{Context, Waker};

    fn progress(log_index: u64, commands: u64) -> AppliedProgress {
        AppliedProgress {
            log_index,
            revision: Revision(log_index),
            commands,
        }
    }

    /// Whether the alarm has rung (a permit is waiting), without blocking.
    fn has_rung(alarm: &ProgressAlarm) -> bool {
        let mut rung = pin!(alarm.rung());
        rung.as_mut()
            .poll(&mut Context::from_waker(Waker::noop()))
            .is_ready()
    }

    #[test]
    fn an_alarm_rings_once_when_both_marks_are_reached() {
        let alarm = ProgressAlarm::new(progress(5, 0));
        alarm.progress(progress(100, 100));
        assert!(!has_rung(&alarm), "disarmed until marks are set");
        alarm.set(200, 150);
        alarm.progress(progress(250, 120));
        assert!(!has_rung(&alarm), "the command mark is not reached");
        alarm.progress(progress(260, 150));
        assert!(has_rung(&alarm));
        alarm.progress(progress(270, 160));
        assert!(!has_rung(&alarm), "one ring per setting of the marks");
    }

    #[test]
    fn marks_already_reached_ring_at_once() {
        let alarm = ProgressAlarm::new(progress(50, 10));
        alarm.set(40, 10);
        assert!(has_rung(&alarm));
    }

    struct Count(AtomicUsize, AtomicUsize);

    impl ApplyObserver for Count {
        fn applied(&self, _: &AppliedBatch) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
        fn replaced(&self) {
            self.1.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn observers_see_batches_until_their_handle_is_dropped() {
        let observers = Arc::new(Observers::default());
        let count = Arc::new(Count(AtomicUsize::new(0), AtomicUsize::new(0)));
        let batch = AppliedBatch {
            revision: Revision(1),
            events: Vec::new(),
        };
        let handle = observers.register(count.clone());
        observers.applied(&batch);
        observers.replaced();
        drop(handle);
        observers.applied(&batch);
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
        assert_eq!(count.1.load(Ordering::SeqCst), 1);
    }
}
