//! The state's invariants as code. `apply` runs them after every command in tests and debug
//! builds; `restore` runs them on every snapshot it accepts.

use crate::ids::Revision;
use crate::lease::ClaimRef;
use crate::machine::{StateMachine, Tallies, slot};
use crate::resource::{Claimant, Demand, Policy, Resource, ResourceId};
use std::collections::BTreeMap;

macro_rules! ensure {
    ($cond:expr, $($msg:tt)+) => {
        if !$cond {
            return Err(format!($($msg)+));
        }
    };
}

impl StateMachine {
    /// Panics with the first broken invariant. For tests and debug builds.
    pub fn check_invariants(&self) {
        if let Err(violation) = self.invariant_violations() {
            panic!(
                "state machine invariant broken at revision {}: {violation}",
                self.revision
            );
        }
    }

    /// The first broken invariant, if any. O(size of the state).
    pub fn invariant_violations(&self) -> Result<(), String> {
        self.check_keys()?;
        self.check_leases()?;
        self.check_resources()?;
        self.check_idempotency()?;
        self.check_usage()?;
        self.check_events()
    }

    /// Each principal's usage is what its leases and keys add up to.
    fn check_usage(&self) -> Result<(), String> {
        let mut usage: BTreeMap<String, crate::caller::Usage> = BTreeMap::new();
        for lease in self.leases.values() {
            if let Some(owner) = &lease.owner {
                usage.entry(owner.to_string()).or_default().leases += 1;
            }
        }
        for (key, r) in &self.keys.records {
            if let Some(owner) = &r.owner {
                let u = usage.entry(owner.clone()).or_default();
                u.keys += 1;
                u.key_bytes += crate::caller::key_bytes(key, &r.value);
            }
        }
        let principal =
            |lease: &crate::LeaseId| self.leases.get(lease).and_then(|l| l.owner.clone());
        for (_, res) in self.resources.iter() {
            let holders = res
                .holders
                .iter()
                .map(|(c, h)| (c, h.value.as_ref().map_or(0, |v| v.len())));
            let waiters = res
                .queue()
                .values()
                .map(|w| (&w.claimant, w.value.as_ref().map_or(0, String::len)));
            for (claimant, value_len) in holders.chain(waiters) {
                if let Some(owner) = principal(&claimant.lease) {
                    let u = usage.entry(owner.to_string()).or_default();
                    u.claims += 1;
                    u.claim_bytes += crate::caller::claim_bytes(&claimant.owner, value_len);
                }
            }
        }
        for lease in self.leases.values() {
            if let Some(owner) = &lease.owner {
                for key in lease.idempotency().values() {
                    let bytes = self.idempotency.get(key).map_or(0, |e| e.bytes);
                    usage.entry(owner.to_string()).or_default().outcome_bytes += bytes as u64;
                }
            }
        }
        usage.retain(|_, u| *u != crate::caller::Usage::default());
        ensure!(
            usage == self.usage,
            "usage {:?} is not what leases, keys, claims and outcomes add up to {usage:?}",
            self.usage
        );
        Ok(())
    }

    fn check_keys(&self) -> Result<(), String> {
        for (key, r) in &self.keys.records {
            ensure!(
                r.create_revision <= r.mod_revision && r.mod_revision <= self.revision,
                "key {key:?}: revisions {} {} beyond {}",
                r.create_revision,
                r.mod_revision,
                self.revision
            );
            ensure!(r.version >= 1, "key {key:?}: version 0");
            if let Some(l) = r.lease {
                let owned = self
                    .leases
                    .get(&l)
                    .is_some_and(|lease| lease.keys().contains(key));
                ensure!(
                    owned,
                    "key {key:?} bound to lease {l} which does not list it"
                );
            }
        }
        Ok(())
    }

    fn check_leases(&self) -> Result<(), String> {
        for (id, lease) in self.leases.iter() {
            ensure!(
                id.0 < self.next_lease_id,
                "lease {id} not below the counter"
            );
            ensure!(
                lease.granted <= self.revision,
                "lease {id} granted in the future"
            );
            ensure!(lease.ttl_ms() > 0, "lease {id} with ttl 0");
            ensure!(
                lease.extras_are_tidy(),
                "lease {id} keeps an empty extras box"
            );
            for key in lease.keys() {
                let bound = self.keys.get(key).is_some_and(|r| r.lease == Some(*id));
                ensure!(bound, "lease {id} lists key {key:?} not bound to it");
            }
            for claim in &lease.claims {
                let (resource, claimant) = (claim.resource(), Claimant::new(*id, claim.owner()));
                let present = self.resources.get(&resource).is_some_and(|r| {
                    r.holders.contains_key(&claimant) || r.queued().contains_key(&claimant)
                });
                ensure!(
                    present,
                    "lease {id} lists a claim on {resource:?} that is gone"
                );
            }
            for (seq, key) in lease.idempotency() {
                let owned = self
                    .idempotency
                    .get(key)
                    .is_some_and(|e| e.owner == Some(*id) && e.seq == *seq);
                ensure!(
                    owned,
                    "lease {id} lists idempotency key {key:?} it does not own"
                );
            }
        }
        Ok(())
    }

    fn check_resources(&self) -> Result<(), String> {
        let mut tallies = Tallies::default();
        for (id, res) in self.resources.iter() {
            self.check_resource(&id, &res)?;
            tallies.resources[slot(id.kind)] += 1;
            tallies.holders[slot(id.kind)] += res.holders.len() as u64;
            tallies.waiters[slot(id.kind)] += res.queue().len() as u64;
            ensure!(
                res.delay().is_some() == self.delayed.contains(&id),
                "{id:?}: delay index disagrees"
            );
        }
        ensure!(
            self.resources.is_compact(),
            "a lock that fits a compact slot is kept boxed"
        );
        ensure!(
            tallies == self.tallies,
            "tallies {:?} != {:?}",
            self.tallies,
            tallies
        );
        ensure!(
            self.delayed
                .iter()
                .all(|id| self.resources.contains_key(id)),
            "delay index names a missing resource"
        );
        Ok(())
    }

    fn check_resource(&self, id: &ResourceId, res: &Resource) -> Result<(), String> {
        ensure!(!res.is_idle(), "{id:?} is idle but kept");
        ensure!(
            res.contention_is_tidy(),
            "{id:?}: an empty contention box is kept"
        );
        ensure!(
            res.last_fence.0 <= self.revision.0,
            "{id:?}: fence beyond revision"
        );
        let exclusive = res
            .holders
            .values()
            .filter(|h| h.demand == Demand::Exclusive)
            .count();
        ensure!(
            exclusive == 0 || res.holders.len() == 1,
            "{id:?}: an exclusive holder is not alone"
        );
        let mut permits = 0u64;
        for (c, h) in &res.holders {
            ensure!(
                h.fence <= res.last_fence,
                "{id:?}: holder fence above the last fence"
            );
            ensure!(h.count >= 1, "{id:?}: holder with count 0");
            ensure!(
                self.owns(c, id),
                "{id:?}: holder {c:?} without a live lease claim"
            );
            ensure!(
                fits(res.policy, h.demand),
                "{id:?}: holder demand {:?}",
                h.demand
            );
            ensure!(
                !res.queued().contains_key(c),
                "{id:?}: {c:?} both holds and waits"
            );
            if let Demand::Permits(n) = h.demand {
                permits += u64::from(n);
            }
        }
        ensure!(permits == res.permits_held, "{id:?}: permits held disagree");
        if let Policy::Semaphore { limit } = res.policy {
            ensure!(
                permits <= u64::from(limit),
                "{id:?}: {permits} permits over {limit}"
            );
        }
        ensure!(
            res.queue().len() == res.queued().len(),
            "{id:?}: queue index size"
        );
        let mut last = Revision(0);
        for (enqueued, w) in res.queue() {
            ensure!(*enqueued > last, "{id:?}: queue not ordered");
            last = *enqueued;
            ensure!(*enqueued <= self.revision, "{id:?}: enqueued in the future");
            ensure!(
                res.queued().get(&w.claimant) == Some(enqueued),
                "{id:?}: queue index disagrees for {:?}",
                w.claimant
            );
            ensure!(
                self.owns(&w.claimant, id),
                "{id:?}: waiter without a live lease claim"
            );
            ensure!(
                fits(res.policy, w.demand),
                "{id:?}: waiter demand {:?}",
                w.demand
            );
        }
        if let Some((_, head)) = res.queue().first_key_value() {
            ensure!(
                !res.admits(head.demand),
                "{id:?}: head of queue could be granted"
            );
        }
        if let Some(delay) = res.delay() {
            ensure!(
                delay.since <= self.revision,
                "{id:?}: delay from the future"
            );
        }
        if let Policy::Election = res.policy {
            ensure!(res.holders.len() <= 1, "{id:?}: two election leaders");
        }
        Ok(())
    }

    fn owns(&self, claimant: &Claimant, id: &ResourceId) -> bool {
        self.leases
            .get(&claimant.lease)
            .is_some_and(|l| l.claims.contains(&ClaimRef::new(id, &claimant.owner)))
    }

    fn check_idempotency(&self) -> Result<(), String> {
        let table = &self.idempotency;
        let mut window_bytes = 0;
        for (seq, key) in &table.window {
            let entry = table.get(key);
            ensure!(
                entry.is_some_and(|e| e.owner.is_none() && e.seq == *seq),
                "idempotency window names {key:?} wrongly"
            );
            window_bytes += entry.map_or(0, |e| e.bytes);
        }
        ensure!(
            window_bytes == table.window_bytes,
            "idempotency window bytes disagree"
        );
        for (key, e) in &table.entries {
            ensure!(
                e.seq < table.next_seq,
                "idempotency {key:?}: seq beyond the counter"
            );
            ensure!(
                e.revision <= self.revision,
                "idempotency {key:?} from the future"
            );
            match e.owner {
                Some(l) => ensure!(
                    self.leases
                        .get(&l)
                        .is_some_and(|lease| lease.idempotency().contains_key(&e.seq)),
                    "idempotency {key:?} owned by lease {l} which does not list it"
                ),
                None => ensure!(
                    table.window.contains_key(&e.seq),
                    "idempotency {key:?} neither owned nor in the window"
                ),
            }
        }
        ensure!(
            table.window.len() <= self.bounds.idempotency_entries_max,
            "idempotency window over its bound"
        );
        Ok(())
    }

    fn check_events(&self) -> Result<(), String> {
        let window = &self.events;
        let mut last = window.compacted;
        let mut bytes = 0;
        for e in &window.events {
            ensure!(
                e.revision >= last && e.revision > window.compacted,
                "events out of order"
            );
            ensure!(e.revision <= self.revision, "event from the future");
            last = e.revision;
            bytes += e.kind.approx_bytes();
        }
        ensure!(bytes == window.bytes, "event window bytes disagree");
        ensure!(
            window.compacted <= self.revision,
            "compacted beyond the revision"
        );
        Ok(())
    }
}

fn fits(policy: Policy, demand: Demand) -> bool {
    matches!(
        (policy, demand),
        (Policy::Lock, Demand::Exclusive | Demand::Shared)
            | (Policy::Semaphore { .. }, Demand::Permits(_))
            | (Policy::Election, Demand::Exclusive)
    )
}
