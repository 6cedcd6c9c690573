//! [`StateMachine`]: the whole replicated state and its one entry point, [`StateMachine::apply`].

use crate::caller::{Usage, key_bytes};
use crate::command::{Command, Proposal};
use crate::event::{Event, EventKind, EventWindow};
use crate::idempotency::IdempotencyTable;
use crate::ids::{Fence, LeaseId, Revision};
use crate::keyspace::{Keyspace, Record};
use crate::lease::Lease;
use crate::limits::Bounds;
use crate::outcome::{Applied, Rejection, Response};
use crate::packed::PackedMap;
use crate::resource::{ResourceId, ResourceKind};
use crate::resource_table::ResourceTable;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// The replicated state: revisions, leases, keys, locks, semaphores, elections, the
/// idempotency table and the event window. Pure: no I/O, no clock, no randomness.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateMachine {
    pub(crate) bounds: Bounds,
    pub(crate) revision: Revision,
    pub(crate) next_lease_id: u64,
    /// In a packed map, as `resources`: sequential ids left a B-tree's leaves about half
    /// full (decision #115). In place: a 64-byte lease beside its id, where a box took a
    /// pointer more and the allocator's rounding (decision #119).
    pub(crate) leases: PackedMap<LeaseId, Lease>,
    pub(crate) keys: Keyspace,
    /// Most held locks in 32 bytes, the rest boxed (decisions #118, #120).
    pub(crate) resources: ResourceTable,
    /// Resources with a pending lock-delay, so the leader finds them without a scan.
    pub(crate) delayed: BTreeSet<ResourceId>,
    pub(crate) idempotency: IdempotencyTable,
    pub(crate) events: EventWindow,
    pub(crate) tallies: Tallies,
    /// What each principal owns (leases, keys, bytes), for quotas.
    pub(crate) usage: BTreeMap<String, Usage>,
}

/// Running counts per resource kind, kept so metrics never scan.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Tallies {
    pub(crate) resources: [u64; 3],
    pub(crate) holders: [u64; 3],
    pub(crate) waiters: [u64; 3],
}

pub(crate) fn slot(kind: ResourceKind) -> usize {
    usize::from(kind.byte())
}

/// The revision a command is building and the events it has emitted so far. The
/// revision is committed only if at least one event was emitted: a command that changes
/// nothing leaves the revision where it was.
pub(crate) struct Ctx {
    pub(crate) revision: Revision,
    pub(crate) events: Vec<Event>,
    /// The principal the command runs for: it owns the leases granted and keys written.
    pub(crate) owner: Option<String>,
}

impl Ctx {
    pub(crate) fn emit(&mut self, kind: EventKind) {
        self.events.push(Event {
            revision: self.revision,
            kind,
        });
    }

    /// The fence of a grant made by this command.
    pub(crate) fn fence(&self) -> Fence {
        self.revision.fence()
    }
}

impl Default for StateMachine {
    fn default() -> StateMachine {
        StateMachine::new(Bounds::default())
    }
}

impl StateMachine {
    /// An empty state with the given table bounds (every node of a cluster must use the same).
    pub fn new(bounds: Bounds) -> StateMachine {
        StateMachine {
            bounds,
            revision: Revision(0),
            next_lease_id: 1,
            leases: PackedMap::new(),
            keys: Keyspace::default(),
            resources: ResourceTable::default(),
            delayed: BTreeSet::new(),
            idempotency: IdempotencyTable::default(),
            events: EventWindow::default(),
            tallies: Tallies::default(),
            usage: BTreeMap::new(),
        }
    }

    /// Applies one proposal. Deterministic: the same proposals in the same order give the
    /// same responses, events and state on every node.
    pub fn apply(&mut self, proposal: Proposal) -> Applied {
        let Proposal {
            idempotency_key,
            command,
            caller,
        } = proposal;
        // Ownership and quotas first: another principal's lease gives nothing, not even
        // the outcomes remembered under it.
        if let Some(caller) = &caller
            && let Err(rejection) = self.authorize(caller, &command)
        {
            return Applied {
                revision: self.revision,
                response: Response::Rejected(rejection),
                events: Vec::new(),
                replayed: false,
            };
        }
        let state_bytes_max = caller.as_ref().and_then(|c| c.quota.state_bytes);
        let mut fingerprint = None;
        // A key is scoped to the lease the command acts for: two clients can never see
        // each other's outcomes, whatever keys they pick (spec §2).
        let idempotency_key =
            idempotency_key.map(|key| command.scoped_idempotency_key(&key, caller.as_ref()));
        if let Some(key) = &idempotency_key {
            let print = command.fingerprint();
            if let Some(entry) = self.idempotency.get(key) {
                return self.replay(entry.fingerprint == print, key);
            }
            fingerprint = Some(print);
        }
        let named_lease = command.lease();
        let mut ctx = Ctx {
            revision: self.revision.next(),
            events: Vec::new(),
            owner: caller.map(|c| c.principal),
        };
        let response = command.apply(self, &mut ctx);
        self.resources.compact();
        if !ctx.events.is_empty() {
            self.revision = ctx.revision;
            self.events.append(&ctx.events, self.revision, &self.bounds);
            self.idempotency.prune(self.revision, &self.bounds);
        }
        // A failed compare-and-set changed nothing and carries the key's current value (up
        // to 1 MiB): it is not remembered, so retries cannot pile up copies. A retry is
        // evaluated anew, as if only it had been sent.
        let remembered = !matches!(response, Response::Rejected(Rejection::CasFailed { .. }));
        if let (Some(key), Some(fingerprint), true) = (idempotency_key, fingerprint, remembered) {
            let owner = match &response {
                Response::LeaseGranted { lease, .. } => Some(*lease),
                _ => named_lease.filter(|l| self.leases.contains_key(l)),
            };
            self.remember(key, fingerprint, response.clone(), owner, state_bytes_max);
        }
        if cfg!(debug_assertions) {
            self.check_invariants();
        }
        Applied {
            revision: self.revision,
            response,
            events: ctx.events,
            replayed: false,
        }
    }

    fn replay(&self, same_command: bool, key: &str) -> Applied {
        let (revision, response, replayed) = match self.idempotency.get(key) {
            Some(entry) if same_command => (entry.revision, entry.response.clone(), true),
            _ => (
                self.revision,
                Response::Rejected(Rejection::IdempotencyKeyReused),
                false,
            ),
        };
        Applied {
            revision,
            response,
            events: Vec::new(),
            replayed,
        }
    }

    /// Remembers a first outcome: under its lease (kept while the lease lives, up to
    /// `idempotency_per_lease_max` of them, each at most `OWNED_OUTCOME_BYTES_MAX` and all
    /// of them charged to the lease's principal within its `state_bytes` quota), else in
    /// the shared window (bounded in entries, bytes and revisions).
    fn remember(
        &mut self,
        key: String,
        fingerprint: String,
        response: Response,
        owner: Option<LeaseId>,
        state_bytes_max: Option<u64>,
    ) {
        let bytes = crate::idempotency::approx_bytes(&key, &fingerprint, &response);
        let principal = owner.and_then(|l| self.lease_principal(l));
        let affordable = bytes <= crate::caller::OWNED_OUTCOME_BYTES_MAX
            && principal.as_deref().is_none_or(|p| {
                state_bytes_max.is_none_or(|max| {
                    self.usage(p).state_bytes().saturating_add(bytes as u64) <= max
                })
            });
        let owner = owner.filter(|_| affordable);
        let seq = self
            .idempotency
            .insert(key.clone(), self.revision, fingerprint, response, owner);
        if let Some(lease) = owner.and_then(|l| self.leases.get_mut(&l)) {
            let max = self.bounds.idempotency_per_lease_max;
            let shed = lease.own_outcome(seq, key, max);
            if let Some(p) = &principal {
                self.charge_outcome(p, bytes as u64, true);
            }
            if let Some(shed) = shed {
                let shed_bytes = self.idempotency.get(&shed).map_or(0, |e| e.bytes);
                self.idempotency.disown(&shed);
                if let Some(p) = &principal {
                    self.charge_outcome(p, shed_bytes as u64, false);
                }
            }
        }
        self.idempotency.prune(self.revision, &self.bounds);
    }

    /// Writes a key at the command's revision. The caller has checked that `lease`, if
    /// any, exists.
    pub(crate) fn put_key(
        &mut self,
        ctx: &mut Ctx,
        key: String,
        value: String,
        lease: Option<LeaseId>,
    ) -> (Revision, u64) {
        let revision = ctx.revision;
        // One lookup for both the lease and the owner the key had.
        let (previous_lease, previous_owner) = match self.keys.get(&key) {
            Some(r) => (
                r.lease,
                r.owner
                    .as_ref()
                    .map(|o| (o.clone(), key_bytes(&key, &r.value))),
            ),
            None => (None, None),
        };
        if previous_lease != lease {
            if let Some(old) = previous_lease.and_then(|l| self.leases.get_mut(&l)) {
                old.remove_key(&key);
            }
            if let Some(new) = lease.and_then(|l| self.leases.get_mut(&l)) {
                new.insert_key(key.clone());
            }
        }
        if let Some((owner, bytes)) = previous_owner {
            self.charge_key(&owner, bytes, false);
        }
        if let Some(owner) = &ctx.owner {
            self.charge_key(owner, key_bytes(&key, &value), true);
        }
        let record = self
            .keys
            .records
            .entry(key.clone())
            .and_modify(|r| {
                r.mod_revision = revision;
                r.version = r.version.saturating_add(1);
                r.lease = lease;
            })
            .or_insert_with(|| Record {
                value: String::new(),
                create_revision: revision,
                mod_revision: revision,
                version: 1,
                lease,
                owner: None,
            });
        record.value.clone_from(&value);
        record.owner.clone_from(&ctx.owner);
        let (create_revision, version) = (record.create_revision, record.version);
        ctx.emit(EventKind::KeyPut {
            key,
            value,
            create_revision,
            version,
            lease,
        });
        (create_revision, version)
    }

    /// Deletes a key at the command's revision; false if it did not exist.
    pub(crate) fn delete_key(&mut self, ctx: &mut Ctx, key: &str) -> bool {
        let Some(record) = self.keys.records.remove(key) else {
            return false;
        };
        if let Some(lease) = record.lease.and_then(|l| self.leases.get_mut(&l)) {
            lease.remove_key(key);
        }
        if let Some(owner) = &record.owner {
            self.charge_key(owner, key_bytes(key, &record.value), false);
        }
        ctx.emit(EventKind::KeyDeleted {
            key: key.to_owned(),
            lease: record.lease,
        });
        true
    }

    /// The bounds this machine was built with.
    pub fn bounds(&self) -> &Bounds {
        &self.bounds
    }

    /// Applies a bare command with no idempotency key.
    pub fn apply_command(&mut self, command: Command) -> Applied {
        self.apply(Proposal::from(command))
    }
}
