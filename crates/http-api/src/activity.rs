//! What this node saw happen, and when: the console's clock and its hot-lock statistics.
//!
//! The replicated state has no clock (the state machine never reads one), so "held for
//! how long" cannot come from it. This node instead remembers when it applied each recent
//! revision (`RevisionClock`); a holder's fence and a waiter's enqueue revision are
//! revisions, so their ages follow. A revision older than the clock's memory (or applied
//! before this process started) is reported as "at least" the clock's span: a lower bound,
//! never a guess.
//!
//! From the same events it keeps per-resource samples over a recent window (`WINDOW`):
//! grants, how long each grant had waited, how long each hold lasted, timeouts and lease
//! expiries. Everything here is per node, in memory, bounded, and rebuilt from nothing on
//! restart. Owns: both tables. Fed by: the node's apply path (`Node::observe_applied`,
//! registered while `serve` runs), so no task wakes per entry for it.

use baton_raft_node::{AppliedBatch, ApplyObserver};
use baton_state_machine::{CancelReason, EventKind, ReleaseReason, ResourceKind};
use baton_wire::{Age, LockStats};
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Revisions whose apply time is remembered.
const CLOCK_REVISIONS_MAX: usize = 65_536;
/// The window the statistics cover.
pub(crate) const WINDOW: Duration = Duration::from_secs(60);
/// Resources with statistics at once; beyond it, new ones wait for a sweep.
const RESOURCES_MAX: usize = 10_000;
/// Samples kept per resource within the window.
const SAMPLES_MAX: usize = 4_096;
/// Samples kept over all resources (about 40 bytes each: 10 MiB). Past it, a resource's
/// new sample replaces its own oldest, and a resource with none yet gets none until the
/// window moves on.
const SAMPLES_TOTAL_MAX: usize = 262_144;
/// Applied batches kept aside while a reader holds the tables (the apply path never waits
/// for a reader); past it the oldest are dropped and the apply times forgotten.
const PENDING_MAX: usize = 4_096;
/// How often a full resource table is swept of idle entries.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// What happened to a resource, for its statistics.
#[derive(Clone, Copy)]
enum Sample {
    /// A grant; `waited_ms` if it came from the queue and the enqueue time is known.
    Grant { waited_ms: Option<u64> },
    /// A hold ended after `held_ms` (when its grant time is known).
    Hold { held_ms: Option<u64>, expired: bool },
    /// A queued acquire reached its deadline.
    Timeout,
}

#[derive(Default)]
struct ResourceSamples {
    samples: VecDeque<(Instant, Sample)>,
    last: Option<Instant>,
}

impl ResourceSamples {
    /// Adds a sample; `total` counts the samples of every resource. False if there was
    /// no room for it.
    fn push(&mut self, now: Instant, sample: Sample, total: &mut usize) -> bool {
        if self.samples.len() >= SAMPLES_MAX || *total >= SAMPLES_TOTAL_MAX {
            if self.samples.pop_front().is_none() {
                return false;
            }
            *total -= 1;
        }
        self.samples.push_back((now, sample));
        *total += 1;
        self.last = Some(now);
        true
    }

    fn prune(&mut self, now: Instant, total: &mut usize) {
        while let Some((at, _)) = self.samples.front() {
            if now.duration_since(*at) <= WINDOW {
                break;
            }
            self.samples.pop_front();
            *total -= 1;
        }
    }
}

#[derive(Default)]
struct Tables {
    /// `(revision, when this node applied it)`, oldest first.
    clock: VecDeque<(u64, Instant)>,
    /// When the clock began (this process's first applied event), for "at least" ages.
    started: Option<Instant>,
    resources: HashMap<(ResourceKind, String), ResourceSamples>,
    /// Samples over every resource.
    samples_total: usize,
    swept: Option<Instant>,
}

/// Batches the apply path recorded while a reader held the tables.
#[derive(Default)]
struct Pending {
    batches: VecDeque<(Instant, Vec<baton_state_machine::Event>)>,
    /// Some were dropped: the apply times are no longer complete.
    lost: bool,
}

/// The node's recent activity (see the module doc). Shared by the API's handlers.
///
/// The apply path never waits for a reader: it records into the tables only if it can
/// take them at once, else it leaves its batch in `pending` (a lock held only to push or
/// to take the whole queue), which whoever takes the tables next records first.
#[derive(Default)]
pub struct Activity {
    // Std mutexes: held for a table update or a read, never across an await.
    tables: Mutex<Tables>,
    pending: Mutex<Pending>,
    /// Set once something is pending, so that the apply path takes `pending`'s lock only
    /// then (it runs once per applied batch).
    any_pending: std::sync::atomic::AtomicBool,
}

impl Activity {
    /// The tables, with whatever the apply path left pending recorded first.
    fn tables(&self) -> std::sync::MutexGuard<'_, Tables> {
        let mut t = self.tables.lock().unwrap_or_else(|p| p.into_inner());
        self.catch_up(&mut t);
        t
    }

    fn catch_up(&self, t: &mut Tables) {
        if !self
            .any_pending
            .swap(false, std::sync::atomic::Ordering::AcqRel)
        {
            return;
        }
        let pending = std::mem::take(&mut *self.pending.lock().unwrap_or_else(|p| p.into_inner()));
        if pending.lost {
            t.clock.clear();
            t.started = Some(Instant::now());
        }
        for (at, events) in pending.batches {
            t.record(&events, at);
        }
    }

    /// Records one applied batch's events, seen at `now`, without waiting for a reader.
    pub(crate) fn record(&self, events: &[baton_state_machine::Event], now: Instant) {
        let mut t = match self.tables.try_lock() {
            Ok(t) => t,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => {
                let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
                if pending.batches.len() >= PENDING_MAX {
                    pending.batches.pop_front();
                    pending.lost = true;
                }
                pending.batches.push_back((now, events.to_vec()));
                self.any_pending
                    .store(true, std::sync::atomic::Ordering::Release);
                return;
            }
        };
        self.catch_up(&mut t);
        t.record(events, now);
    }

    /// Forgets every apply time (after missed events: ages would be wrong, not just old).
    pub(crate) fn forget_times(&self) {
        let mut t = self.tables();
        t.clock.clear();
        t.started = Some(Instant::now());
    }

    /// How long ago this node applied `revision`.
    pub fn age(&self, revision: u64) -> Option<Age> {
        self.tables().age(revision, Instant::now())
    }

    /// Statistics over the window of every resource of `kind` under `prefix` that
    /// `allowed` admits, most contended first (time spent waiting, then timeouts, then
    /// grants). The samples are copied under the lock and summarised after it.
    pub fn stats(
        &self,
        kind: Option<ResourceKind>,
        prefix: &str,
        allowed: impl Fn(ResourceKind, &str) -> bool,
    ) -> Vec<LockStats> {
        let now = Instant::now();
        let copied: Vec<(ResourceKind, String, Vec<Sample>)> = {
            let mut guard = self.tables();
            let t = &mut *guard;
            let total = &mut t.samples_total;
            t.resources
                .iter_mut()
                .filter(|((k, name), _)| {
                    kind.is_none_or(|want| *k == want)
                        && name.starts_with(prefix)
                        && allowed(*k, name)
                })
                .filter_map(|((k, name), r)| {
                    r.prune(now, total);
                    (!r.samples.is_empty()).then(|| {
                        (
                            *k,
                            name.clone(),
                            r.samples.iter().map(|(_, s)| *s).collect(),
                        )
                    })
                })
                .collect()
        };
        let mut out: Vec<LockStats> = copied
            .iter()
            .map(|(k, name, samples)| summarise(*k, name, samples))
            .collect();
        out.sort_by(|a, b| {
            b.wait_total_ms
                .cmp(&a.wait_total_ms)
                .then(b.timeouts.cmp(&a.timeouts))
                .then(b.grants.cmp(&a.grants))
                .then(a.name.cmp(&b.name))
        });
        out
    }
}

impl Tables {
    /// Records one applied batch's events, seen at `now`.
    fn record(&mut self, events: &[baton_state_machine::Event], now: Instant) {
        let t = self;
        t.started.get_or_insert(now);
        for event in events {
            let revision = event.revision.0;
            if t.clock.back().is_none_or(|(r, _)| *r < revision) {
                if t.clock.len() >= CLOCK_REVISIONS_MAX {
                    t.clock.pop_front();
                }
                t.clock.push_back((revision, now));
            }
            let (resource, sample) = match &event.kind {
                EventKind::Granted {
                    resource, enqueued, ..
                } => {
                    let waited_ms = enqueued.and_then(|e| t.age(e.0, now)).and_then(exact);
                    (resource, Sample::Grant { waited_ms })
                }
                EventKind::Released {
                    resource,
                    fence,
                    reason,
                    ..
                } => {
                    let held_ms = t.age(fence.0, now).and_then(exact);
                    let expired = *reason == ReleaseReason::LeaseExpired;
                    (resource, Sample::Hold { held_ms, expired })
                }
                EventKind::Cancelled {
                    resource,
                    reason: CancelReason::TimedOut,
                    ..
                } => (resource, Sample::Timeout),
                _ => continue,
            };
            let key = (resource.kind, resource.name.clone());
            if !t.resources.contains_key(&key) && t.resources.len() >= RESOURCES_MAX {
                t.sweep(now);
                if t.resources.len() >= RESOURCES_MAX {
                    continue;
                }
            }
            let total = &mut t.samples_total;
            let samples = t.resources.entry(key).or_default();
            if !samples.push(now, sample, total) && samples.samples.is_empty() {
                // No room for a new resource's first sample: leave no empty entry.
                t.resources.remove(&(resource.kind, resource.name.clone()));
            }
        }
    }
}

impl Tables {
    fn age(&self, revision: u64, now: Instant) -> Option<Age> {
        let started = self.started?;
        // The latest remembered revision at or before `revision` was applied no later.
        let i = self.clock.partition_point(|(r, _)| *r <= revision);
        match i.checked_sub(1).map(|i| self.clock[i]) {
            Some((r, at)) if r == revision => Some(Age {
                ms: millis(now.duration_since(at)),
                at_least: false,
            }),
            // Older than what is remembered: at least as old as the oldest remembered.
            _ if i == 0 => {
                let oldest = self.clock.front().map_or(started, |(_, at)| *at);
                Some(Age {
                    ms: millis(now.duration_since(oldest.min(started))),
                    at_least: true,
                })
            }
            // A revision this node never saw an event of: no claim about it.
            _ => None,
        }
    }

    fn sweep(&mut self, now: Instant) {
        if self
            .swept
            .is_some_and(|at| now.duration_since(at) < SWEEP_EVERY)
        {
            return;
        }
        self.swept = Some(now);
        let total = &mut self.samples_total;
        self.resources.retain(|_, r| {
            let keep = r.last.is_some_and(|at| now.duration_since(at) <= WINDOW);
            if !keep {
                *total -= r.samples.len();
            }
            keep
        });
    }
}

fn exact(age: Age) -> Option<u64> {
    (!age.at_least).then_some(age.ms)
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The `q` quantile (0..=1) of sorted values, nearest rank.
fn quantile(sorted: &[u64], q: f64) -> Option<u64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

fn summarise(kind: ResourceKind, name: &str, samples: &[Sample]) -> LockStats {
    let (mut grants, mut timeouts, mut expiries) = (0, 0, 0);
    let (mut waits, mut holds) = (Vec::new(), Vec::new());
    for sample in samples {
        match *sample {
            Sample::Grant { waited_ms } => {
                grants += 1;
                waits.extend(waited_ms);
            }
            Sample::Hold { held_ms, expired } => {
                holds.extend(held_ms);
                expiries += u64::from(expired);
            }
            Sample::Timeout => timeouts += 1,
        }
    }
    waits.sort_unstable();
    holds.sort_unstable();
    LockStats {
        kind: crate::convert::kind(kind),
        name: name.to_owned(),
        grants,
        grants_per_second: grants as f64 / WINDOW.as_secs_f64(),
        waited: waits.len() as u64,
        wait_total_ms: waits.iter().sum(),
        wait_p50_ms: quantile(&waits, 0.5),
        wait_p99_ms: quantile(&waits, 0.99),
        hold_p50_ms: quantile(&holds, 0.5),
        hold_p99_ms: quantile(&holds, 0.99),
        timeouts,
        expiries,
    }
}

/// The activity tables are fed on the apply path (registered by `serve` for its run).
impl ApplyObserver for Activity {
    fn applied(&self, batch: &AppliedBatch) {
        self.record(&batch.events, Instant::now());
    }

    fn replaced(&self) {
        // The skipped entries' events were never seen: ages would be wrong, not just old.
        self.forget_times();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use baton_state_machine::{Demand, Event, Fence, LeaseId, ResourceId, Revision};

    fn granted(revision: u64, enqueued: Option<u64>) -> Event {
        Event {
            revision: Revision(revision),
            kind: EventKind::Granted {
                resource: ResourceId::lock("l"),
                lease: LeaseId(1),
                owner: "o".into(),
                demand: Demand::Exclusive,
                fence: Fence(revision),
                enqueued: enqueued.map(Revision),
            },
        }
    }

    fn released(revision: u64, fence: u64, reason: ReleaseReason) -> Event {
        Event {
            revision: Revision(revision),
            kind: EventKind::Released {
                resource: ResourceId::lock("l"),
                lease: LeaseId(1),
                owner: "o".into(),
                fence: Fence(fence),
                reason,
            },
        }
    }

    #[test]
    fn ages_are_exact_for_remembered_revisions_and_lower_bounds_before_them() {
        let a = Activity::default();
        let t0 = Instant::now();
        a.record(&[granted(10, None)], t0);
        a.record(&[granted(12, None)], t0 + Duration::from_millis(50));
        let t = a.tables();
        let now = t0 + Duration::from_millis(200);
        assert_eq!(
            t.age(10, now),
            Some(Age {
                ms: 200,
                at_least: false
            })
        );
        assert_eq!(
            t.age(12, now),
            Some(Age {
                ms: 150,
                at_least: false
            })
        );
        // Before the first remembered revision: at least the clock's span.
        assert_eq!(
            t.age(3, now),
            Some(Age {
                ms: 200,
                at_least: true
            })
        );
        // Between two remembered revisions but not itself seen: nothing claimed.
        assert_eq!(t.age(11, now), None);
    }

    #[test]
    fn statistics_count_grants_waits_holds_timeouts_and_expiries_in_the_window() {
        let a = Activity::default();
        let t0 = Instant::now();
        a.record(&[granted(1, None)], t0);
        // Queued at 2, granted at 3 after 30 ms, when 1 is released after 30 ms.
        a.record(
            &[Event {
                revision: Revision(2),
                kind: EventKind::Queued {
                    resource: ResourceId::lock("l"),
                    lease: LeaseId(2),
                    owner: "p".into(),
                    demand: Demand::Exclusive,
                    position: 1,
                    wait_ms: 1_000,
                },
            }],
            t0,
        );
        let t1 = t0 + Duration::from_millis(30);
        a.record(
            &[released(3, 1, ReleaseReason::Released), granted(3, Some(2))],
            t1,
        );
        a.record(
            &[released(4, 3, ReleaseReason::LeaseExpired)],
            t1 + Duration::from_millis(10),
        );
        let stats = a.stats(None, "", |_, _| true);
        assert_eq!(stats.len(), 1);
        let s = &stats[0];
        assert_eq!((s.grants, s.waited, s.expiries, s.timeouts), (2, 1, 1, 0));
        assert_eq!(s.wait_p50_ms, Some(30));
        assert_eq!(s.wait_total_ms, 30);
        assert_eq!(s.hold_p99_ms, Some(30));
        assert_eq!(s.hold_p50_ms, Some(10));
        assert!(
            a.stats(Some(ResourceKind::Semaphore), "", |_, _| true)
                .is_empty()
        );
        assert!(a.stats(None, "other", |_, _| true).is_empty());
    }

    #[test]
    fn quantiles_use_the_nearest_rank() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(quantile(&v, 0.5), Some(50));
        assert_eq!(quantile(&v, 0.99), Some(99));
        assert_eq!(quantile(&[7], 0.99), Some(7));
        assert_eq!(quantile(&[], 0.5), None);
    }

    #[test]
    fn the_clock_and_the_tables_stay_within_their_bounds() {
        let a = Activity::default();
        let t0 = Instant::now();
        let events: Vec<Event> = (1..=(CLOCK_REVISIONS_MAX as u64 + 10))
            .map(|r| granted(r, None))
            .collect();
        a.record(&events, t0);
        let t = a.tables();
        assert_eq!(t.clock.len(), CLOCK_REVISIONS_MAX);
        assert!(t.resources.values().all(|r| r.samples.len() <= SAMPLES_MAX));
    }

    #[test]
    fn the_apply_path_never_waits_for_a_reader_and_the_reader_sees_what_it_missed() {
        let a = std::sync::Arc::new(Activity::default());
        let t0 = Instant::now();
        let reader = a.tables.lock().unwrap();
        // A reader holds the tables (a scrape): the apply path records without waiting.
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let writer = {
            let a = a.clone();
            std::thread::spawn(move || {
                a.record(&[granted(1, None)], t0);
                a.record(&[granted(2, None)], t0);
                done_tx.send(()).unwrap();
            })
        };
        done_rx
            .recv_timeout(Duration::from_secs(5))
            .expect("the apply path waited for the reader");
        drop(reader);
        writer.join().unwrap();
        let stats = a.stats(None, "", |_, _| true);
        assert_eq!(
            stats[0].grants, 2,
            "the batches set aside are recorded first"
        );
    }

    #[test]
    fn samples_are_bounded_over_all_resources() {
        let a = Activity::default();
        let t0 = Instant::now();
        let mut events = Vec::new();
        for r in 0..(SAMPLES_TOTAL_MAX as u64 / 1_000 + 50) {
            for i in 0..1_000 {
                let mut e = granted(r * 1_000 + i + 1, None);
                if let EventKind::Granted { resource, .. } = &mut e.kind {
                    *resource = ResourceId::lock(format!("l{r}"));
                }
                events.push(e);
            }
        }
        a.record(&events, t0);
        let t = a.tables();
        let total: usize = t.resources.values().map(|r| r.samples.len()).sum();
        assert_eq!(total, t.samples_total);
        assert!(total <= SAMPLES_TOTAL_MAX, "{total}");
    }
}
