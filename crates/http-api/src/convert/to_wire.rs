//! The state machine's types to the wire's: answers, errors and watch events.

use baton_state_machine::{
    CancelReason, Demand, Event, EventKind, HolderInfo, KeyValue, Leader, LockDelay, LockState,
    LockSummary, ReleaseReason, ResourceId, ResourceKind, TxnResult, WaiterInfo,
};
use baton_wire as wire;

/// The mode and permits of a demand.
fn hold_mode(demand: Demand) -> (wire::HoldMode, Option<u32>) {
    match demand {
        Demand::Exclusive => (wire::HoldMode::Exclusive, None),
        Demand::Shared => (wire::HoldMode::Shared, None),
        Demand::Permits(n) => (wire::HoldMode::Permits, Some(n)),
    }
}

/// A resource kind.
pub fn kind(kind: ResourceKind) -> wire::ResourceKind {
    match kind {
        ResourceKind::Lock => wire::ResourceKind::Lock,
        ResourceKind::Semaphore => wire::ResourceKind::Semaphore,
        ResourceKind::Election => wire::ResourceKind::Election,
    }
}

/// A resource kind from the wire.
pub fn kind_from_wire(kind: wire::ResourceKind) -> ResourceKind {
    match kind {
        wire::ResourceKind::Lock => ResourceKind::Lock,
        wire::ResourceKind::Semaphore => ResourceKind::Semaphore,
        wire::ResourceKind::Election => ResourceKind::Election,
    }
}

/// A holder.
pub fn holder(h: &HolderInfo) -> wire::Holder {
    let (mode, permits) = hold_mode(h.demand);
    wire::Holder {
        lease_id: h.lease.0,
        owner: h.owner.clone(),
        mode,
        permits,
        fence: h.fence.0,
        count: h.count,
        since_revision: h.fence.0,
        value: h.value.clone(),
        held_for: None,
    }
}

/// A key.
pub fn key_value(kv: &KeyValue) -> wire::KeyValue {
    wire::KeyValue {
        key: kv.key.clone(),
        value: kv.value.clone(),
        create_revision: kv.create_revision.0,
        mod_revision: kv.mod_revision.0,
        version: kv.version,
        lease_id: kv.lease.map(|l| l.0),
    }
}

fn waiter(position: usize, w: &WaiterInfo) -> wire::Waiter {
    let (mode, permits) = hold_mode(w.demand);
    wire::Waiter {
        lease_id: w.lease.0,
        owner: w.owner.clone(),
        mode,
        permits,
        enqueued_revision: w.enqueued.0,
        position: position as u64 + 1,
        wait_ms: w.wait_ms,
        waiting_for: None,
    }
}

fn delay(d: &LockDelay) -> wire::LockDelay {
    wire::LockDelay {
        since_revision: d.since.0,
        delay_ms: d.delay_ms,
    }
}

/// A lock's state, or an empty one if it has no holder, waiter or delay.
pub fn lock_state(name: &str, state: Option<LockState>, revision: u64) -> wire::LockStateResponse {
    let Some(state) = state else {
        return wire::LockStateResponse {
            name: name.into(),
            holders: Vec::new(),
            queue: Vec::new(),
            limit: None,
            lock_delay: None,
            revision,
        };
    };
    wire::LockStateResponse {
        name: name.into(),
        holders: state.holders.iter().map(holder).collect(),
        queue: state
            .queue
            .iter()
            .enumerate()
            .map(|(i, w)| waiter(i, w))
            .collect(),
        limit: state.limit,
        lock_delay: state.delay.as_ref().map(delay),
        revision,
    }
}

/// One lock in a listing.
pub fn lock_summary(s: &LockSummary) -> wire::LockSummary {
    wire::LockSummary {
        name: s.resource.name.clone(),
        holders: s.holders.iter().map(holder).collect(),
        queue_len: s.queue_len,
        lock_delay: s.delayed,
    }
}

/// An election's leader.
pub fn leader(l: &Leader) -> wire::Leader {
    wire::Leader {
        lease_id: l.lease.0,
        value: l.value.clone(),
        fence: l.fence.0,
    }
}

/// A txn operation's result.
pub fn txn_result(r: &TxnResult) -> wire::TxnResult {
    match r {
        TxnResult::Put { key, version } => wire::TxnResult::Put {
            key: key.clone(),
            version: *version,
        },
        TxnResult::Deleted { deleted } => wire::TxnResult::Delete { deleted: *deleted },
        TxnResult::Range { kvs, more } => wire::TxnResult::Range {
            kvs: kvs.iter().map(key_value).collect(),
            more: *more,
        },
    }
}

/// An applied event as a watch event.
pub fn event(e: &Event) -> wire::WatchEvent {
    use wire::Event as W;
    let k = |r: &ResourceId| kind(r.kind);
    let event = match &e.kind {
        EventKind::KeyPut {
            key,
            value,
            create_revision,
            version,
            lease,
        } => W::KeyPut(wire::KeyPut {
            key: key.clone(),
            value: value.clone(),
            create_revision: create_revision.0,
            mod_revision: e.revision.0,
            version: *version,
            lease_id: lease.map(|l| l.0),
        }),
        EventKind::KeyDeleted { key, lease } => W::KeyDeleted(wire::KeyDeleted {
            key: key.clone(),
            lease_id: lease.map(|l| l.0),
        }),
        EventKind::Queued {
            resource,
            lease,
            owner,
            demand,
            position,
            wait_ms,
        } => W::Queued(
            k(resource),
            wire::Queued {
                name: resource.name.clone(),
                lease_id: lease.0,
                owner: owner.clone(),
                mode: hold_mode(*demand).0,
                position: *position,
                wait_ms: *wait_ms,
            },
        ),
        EventKind::Granted {
            resource,
            lease,
            owner,
            demand,
            fence,
            enqueued,
        } => W::Granted(
            k(resource),
            wire::Granted {
                name: resource.name.clone(),
                lease_id: lease.0,
                owner: owner.clone(),
                mode: hold_mode(*demand).0,
                fence: fence.0,
                // TEST ONLY: the `barging` canary hides where a grant came from.
                enqueued_revision: enqueued
                    .filter(|_| {
                        baton_raft_node::hooks::canary()
                            != Some(baton_raft_node::hooks::Canary::Barging)
                    })
                    .map(|r| r.0),
            },
        ),
        EventKind::CountChanged {
            resource,
            lease,
            owner,
            fence,
            count,
        } => W::CountChanged(
            k(resource),
            wire::CountChanged {
                name: resource.name.clone(),
                lease_id: lease.0,
                owner: owner.clone(),
                fence: fence.0,
                count: *count,
            },
        ),
        EventKind::Released {
            resource,
            lease,
            owner,
            fence,
            reason,
        } => W::Released(
            k(resource),
            wire::Released {
                name: resource.name.clone(),
                lease_id: lease.0,
                owner: owner.clone(),
                fence: fence.0,
                reason: match reason {
                    ReleaseReason::Released => wire::ReleaseReason::Released,
                    ReleaseReason::Forced => wire::ReleaseReason::Forced,
                    ReleaseReason::LeaseRevoked => wire::ReleaseReason::LeaseRevoked,
                    ReleaseReason::LeaseExpired => wire::ReleaseReason::LeaseExpired,
                },
            },
        ),
        EventKind::Cancelled {
            resource,
            lease,
            owner,
            enqueued,
            reason,
        } => W::Cancelled(
            k(resource),
            wire::Cancelled {
                name: resource.name.clone(),
                lease_id: lease.0,
                owner: owner.clone(),
                enqueued_revision: enqueued.0,
                reason: match reason {
                    CancelReason::Cancelled => wire::CancelReason::Cancelled,
                    CancelReason::TimedOut => wire::CancelReason::TimedOut,
                    CancelReason::LeaseRevoked => wire::CancelReason::LeaseRevoked,
                    CancelReason::LeaseExpired => wire::CancelReason::LeaseExpired,
                },
            },
        ),
        EventKind::DelayStarted { resource, delay_ms } => W::DelayStarted(
            k(resource),
            wire::DelayStarted {
                name: resource.name.clone(),
                delay_ms: *delay_ms,
            },
        ),
        EventKind::DelayEnded { resource } => W::DelayEnded(
            k(resource),
            wire::DelayEnded {
                name: resource.name.clone(),
            },
        ),
        EventKind::LeaderChanged {
            election,
            leader: l,
        } => W::LeaderChanged(wire::LeaderChanged {
            name: election.clone(),
            leader: l.as_ref().map(leader),
        }),
        EventKind::LeaseGranted { lease, ttl_ms } => W::LeaseGranted(wire::LeaseGranted {
            lease_id: lease.0,
            ttl_ms: *ttl_ms,
        }),
        EventKind::LeaseRevoked { lease } => {
            W::LeaseRevoked(wire::LeaseEnded { lease_id: lease.0 })
        }
        EventKind::LeaseExpired { lease } => {
            W::LeaseExpired(wire::LeaseEnded { lease_id: lease.0 })
        }
    };
    wire::WatchEvent {
        revision: e.revision.0,
        event,
    }
}

/// The limits this deployment enforces, as reported in `/v1/cluster`.
pub fn limits(l: &baton_state_machine::Limits, body_bytes_max: usize) -> wire::Limits {
    wire::Limits {
        name_bytes_max: l.name_bytes_max as u64,
        owner_bytes_max: l.owner_bytes_max as u64,
        value_bytes_max: l.value_bytes_max as u64,
        ttl_ms_min: l.ttl_ms_min,
        ttl_ms_max: l.ttl_ms_max,
        wait_ms_max: l.wait_ms_max,
        hold_ms_max: l.hold_ms_max,
        lock_delay_ms_max: l.lock_delay_ms_max,
        semaphore_limit_max: l.semaphore_limit_max,
        txn_ops_max: l.txn_ops_max as u64,
        range_limit_max: l.range_limit_max as u64,
        idempotency_key_bytes_max: l.idempotency_key_bytes_max as u64,
        body_bytes_max: body_bytes_max as u64,
    }
}
