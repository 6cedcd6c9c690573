//! Wire requests to state-machine commands. Handlers check names and authorization
//! first; these functions take the checked name (or id) and only map the fields.

use crate::error::{ApiError, ApiResult};
use baton_state_machine::{
    AcquireTimeout, Caller, Campaign, Cancel, Claimant, Command, Compare, CompareOp, CompareTarget,
    Delete, DeletePrefix, Fence, ForceRelease, LeaseGrant, LeaseId, LeaseRevoke, LockAcquire, Mode,
    Proclaim, Proposal, Put, PutSequential, Release, Resign, ResourceId, ResourceKind, Revision,
    SemaphoreAcquire, Txn, TxnOp,
};
use baton_wire::{
    self as wire, AcquireRequest, CampaignRequest, DeleteParams, LeaseGrantRequest,
    ProclaimRequest, PutRequest, ReleaseRequest, ResignRequest, SemaphoreAcquireRequest,
    SequentialRequest, TxnRequest,
};

/// Range limit of a txn read when none is given.
const RANGE_LIMIT_DEFAULT: usize = 100;

/// A command with the request's idempotency key and principal, ready to propose.
pub(crate) fn proposal(
    command: Command,
    idempotency_key: Option<String>,
    caller: Option<Caller>,
) -> Proposal {
    Proposal {
        idempotency_key,
        command,
        caller,
    }
}

/// Writes `key`; `prev_revision` makes it a compare-and-set.
pub(crate) fn put(key: String, request: PutRequest) -> Command {
    Command::Put(Put {
        key,
        value: request.value,
        lease: request.lease_id.map(LeaseId),
        prev_revision: request.prev_revision.map(Revision),
    })
}

/// Creates a sequential key under `prefix`.
pub(crate) fn put_sequential(prefix: String, request: SequentialRequest) -> Command {
    Command::PutSequential(PutSequential {
        prefix,
        value: request.value,
        lease: request.lease_id.map(LeaseId),
    })
}

/// Deletes `key`; `prev_revision` makes it a compare-and-set.
pub(crate) fn delete(key: String, params: DeleteParams) -> Command {
    Command::Delete(Delete {
        key,
        prev_revision: params.prev_revision.map(Revision),
    })
}

/// Deletes every key under `prefix`.
pub(crate) fn delete_prefix(prefix: String) -> Command {
    Command::DeletePrefix(DeletePrefix { prefix })
}

/// A transaction. Fails if a compare's value does not fit its target.
pub(crate) fn txn(request: TxnRequest) -> ApiResult<Command> {
    Ok(Command::Txn(Txn {
        compare: request
            .compare
            .into_iter()
            .map(compare)
            .collect::<ApiResult<_>>()?,
        success: request.success.into_iter().map(txn_op).collect(),
        failure: request.failure.into_iter().map(txn_op).collect(),
    }))
}

/// One txn compare.
fn compare(c: wire::Compare) -> ApiResult<Compare> {
    let op = match c.op {
        wire::CompareOp::Equal => CompareOp::Equal,
        wire::CompareOp::NotEqual => CompareOp::NotEqual,
        wire::CompareOp::Greater => CompareOp::Greater,
        wire::CompareOp::Less => CompareOp::Less,
    };
    let target = match (c.target, c.value) {
        (wire::CompareTarget::Value, wire::CompareValue::Text(v)) => CompareTarget::Value(v),
        (wire::CompareTarget::Value, wire::CompareValue::Number(_)) => {
            return Err(ApiError::bad_request(
                "compare.value must be a string for value",
            ));
        }
        (target, wire::CompareValue::Number(n)) => match target {
            wire::CompareTarget::Version => CompareTarget::Version(n),
            wire::CompareTarget::CreateRevision => CompareTarget::CreateRevision(Revision(n)),
            wire::CompareTarget::ModRevision => CompareTarget::ModRevision(Revision(n)),
            wire::CompareTarget::Lease => CompareTarget::Lease(LeaseId(n)),
            wire::CompareTarget::Value => CompareTarget::Value(n.to_string()),
        },
        (target, wire::CompareValue::Text(_)) => {
            return Err(ApiError::bad_request(format!(
                "compare.value must be a number for {target:?}"
            )));
        }
    };
    Ok(Compare {
        key: c.key,
        target,
        op,
    })
}

/// One txn operation; a range without a limit gets [`RANGE_LIMIT_DEFAULT`].
fn txn_op(op: wire::TxnOp) -> TxnOp {
    match op {
        wire::TxnOp::Put {
            key,
            value,
            lease_id,
        } => TxnOp::Put {
            key,
            value,
            lease: lease_id.map(LeaseId),
        },
        wire::TxnOp::Delete { key } => TxnOp::Delete { key },
        wire::TxnOp::DeletePrefix { prefix } => TxnOp::DeletePrefix { prefix },
        wire::TxnOp::Range { prefix, limit } => TxnOp::Range {
            prefix,
            limit: limit.unwrap_or(RANGE_LIMIT_DEFAULT),
        },
    }
}

/// Acquires lock `name`.
pub(crate) fn lock_acquire(name: String, request: AcquireRequest) -> Command {
    Command::LockAcquire(LockAcquire {
        name,
        lease: LeaseId(request.lease_id),
        owner: request.owner,
        mode: match request.mode {
            wire::Mode::Exclusive => Mode::Exclusive,
            wire::Mode::Shared => Mode::Shared,
        },
        wait_ms: request.wait_ms,
        lock_delay_ms: request.lock_delay_ms,
    })
}

/// Acquires permits of semaphore `name`.
pub(crate) fn semaphore_acquire(name: String, request: SemaphoreAcquireRequest) -> Command {
    Command::SemaphoreAcquire(SemaphoreAcquire {
        name,
        lease: LeaseId(request.lease_id),
        owner: request.owner,
        limit: request.limit,
        permits: request.permits,
        wait_ms: request.wait_ms,
    })
}

/// Campaigns in election `name`.
pub(crate) fn campaign(name: String, request: CampaignRequest) -> Command {
    Command::Campaign(Campaign {
        name,
        lease: LeaseId(request.lease_id),
        value: request.value,
        wait_ms: request.wait_ms,
    })
}

/// The leader of election `name` sets a new value.
pub(crate) fn proclaim(name: String, request: ProclaimRequest) -> Command {
    Command::Proclaim(Proclaim {
        name,
        lease: LeaseId(request.lease_id),
        fence: request.fence.map(Fence),
        value: request.value,
    })
}

/// Resigns from election `name`, or withdraws a candidacy.
pub(crate) fn resign(name: String, request: ResignRequest) -> Command {
    Command::Resign(Resign {
        name,
        lease: LeaseId(request.lease_id),
        fence: request.fence.map(Fence),
    })
}

/// Releases lock `name`, or cancels a queued acquire.
pub(crate) fn lock_release(name: String, request: ReleaseRequest) -> Command {
    Command::LockRelease(release(name, request))
}

/// Releases a hold of semaphore `name`, or cancels a queued acquire.
pub(crate) fn semaphore_release(name: String, request: ReleaseRequest) -> Command {
    Command::SemaphoreRelease(release(name, request))
}

/// The release payload of a lock or semaphore release request.
fn release(name: String, request: ReleaseRequest) -> Release {
    Release {
        name,
        lease: LeaseId(request.lease_id),
        owner: request.owner,
        fence: request.fence.map(Fence),
    }
}

/// Releases every holder of lock `name` (admin).
pub(crate) fn force_release(name: String) -> Command {
    Command::ForceRelease(ForceRelease {
        resource: ResourceId::lock(name),
    })
}

/// Grants a lease.
pub(crate) fn lease_grant(request: LeaseGrantRequest) -> Command {
    Command::LeaseGrant(LeaseGrant {
        ttl_ms: request.ttl_ms,
    })
}

/// Revokes lease `id`.
pub(crate) fn lease_revoke(id: u64) -> Command {
    Command::LeaseRevoke(LeaseRevoke { lease: LeaseId(id) })
}

/// Cancels the claimant's queue entry enqueued at `enqueued`.
pub(crate) fn cancel_wait(
    resource: &ResourceId,
    claimant: &Claimant,
    enqueued: Revision,
) -> Command {
    Command::Cancel(Cancel {
        resource: resource.clone(),
        lease: claimant.lease,
        owner: claimant.owner.clone(),
        enqueued: Some(enqueued),
    })
}

/// Releases the claimant's grant with `fence` (an election resigns; the owner is not sent).
pub(crate) fn release_grant(resource: &ResourceId, claimant: &Claimant, fence: Fence) -> Command {
    let release = || Release {
        name: resource.name.clone(),
        lease: claimant.lease,
        owner: claimant.owner.clone(),
        fence: Some(fence),
    };
    match resource.kind {
        ResourceKind::Lock => Command::LockRelease(release()),
        ResourceKind::Semaphore => Command::SemaphoreRelease(release()),
        ResourceKind::Election => Command::Resign(Resign {
            name: resource.name.clone(),
            lease: claimant.lease,
            fence: Some(fence),
        }),
    }
}

/// The deadline of the claimant's queue entry enqueued at `enqueued`.
pub(crate) fn acquire_timeout(
    resource: &ResourceId,
    claimant: &Claimant,
    enqueued: Revision,
) -> Command {
    Command::AcquireTimeout(AcquireTimeout {
        resource: resource.clone(),
        lease: claimant.lease,
        owner: claimant.owner.clone(),
        enqueued,
    })
}
