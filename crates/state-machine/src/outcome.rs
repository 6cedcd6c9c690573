//! What `apply` returns: a [`Response`] that is either an outcome or a deterministic
//! [`Rejection`]. Refusals are replicated results, not errors.

use crate::event::Event;
use crate::ids::{Fence, LeaseId, Revision};
use crate::keyspace::KeyValue;
use crate::resource::{Demand, LockDelay, ResourceId};
use serde::{Deserialize, Serialize};

/// The result of applying one command.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Applied {
    /// The revision the command made, or the one it saw if it changed nothing.
    pub revision: Revision,
    /// Its outcome.
    pub response: Response,
    /// The events it produced, all at `revision` (empty if it changed nothing).
    pub events: Vec<Event>,
    /// True when an idempotency key matched and the first outcome was returned.
    pub replayed: bool,
}

/// A grant as returned by acquire, campaign and a timeout that lost the race to a grant.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grant {
    /// The resource granted.
    pub resource: ResourceId,
    /// The holder: lease, owner, mode, fence (the revision of the grant), count, value.
    pub holder: HolderInfo,
}

/// A holder as shown by lock state and refusals.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HolderInfo {
    /// The holder's lease.
    pub lease: LeaseId,
    /// The holder's owner string.
    pub owner: String,
    /// What it holds.
    pub demand: Demand,
    /// Its fence, which is also the revision it was granted at.
    pub fence: Fence,
    /// Its re-entrant count.
    pub count: u32,
    /// The election value, for elections.
    pub value: Option<String>,
    /// The enqueue revision if the grant came from the queue.
    pub enqueued: Option<Revision>,
}

/// A queued claim as shown by lock state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaiterInfo {
    /// The waiter's lease.
    pub lease: LeaseId,
    /// The waiter's owner string.
    pub owner: String,
    /// What it waits for.
    pub demand: Demand,
    /// The revision it joined the queue at.
    pub enqueued: Revision,
    /// How long it asked to wait.
    pub wait_ms: u64,
}

/// The state of one lock, semaphore or election.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockState {
    /// Which resource.
    pub resource: ResourceId,
    /// Current holders.
    pub holders: Vec<HolderInfo>,
    /// Waiters in grant order.
    pub queue: Vec<WaiterInfo>,
    /// The semaphore limit, for semaphores.
    pub limit: Option<u32>,
    /// A pending lock-delay, if any.
    pub delay: Option<LockDelay>,
}

/// The result of one txn operation, in order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum TxnResult {
    /// A put: the key's new metadata.
    Put {
        /// The key written.
        key: String,
        /// Its version after the put.
        version: u64,
    },
    /// A delete: how many keys went.
    Deleted {
        /// Keys deleted.
        deleted: u64,
    },
    /// A range: the keys read (as of before any later operation of the txn).
    Range {
        /// Keys found.
        kvs: Vec<KeyValue>,
        /// Whether the limit cut the result short.
        more: bool,
    },
}

/// The outcome of a command.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Response {
    /// A lease was granted.
    LeaseGranted {
        /// Its id.
        lease: LeaseId,
        /// Its TTL.
        ttl_ms: u64,
    },
    /// A lease was revoked or expired, with everything it owned.
    LeaseEnded {
        /// Its id.
        lease: LeaseId,
        /// Ephemeral keys deleted.
        keys_deleted: u64,
        /// Holds released.
        holds_released: u64,
        /// Queue entries cancelled.
        waits_cancelled: u64,
    },
    /// Remaining TTLs were recorded for this many live leases.
    LeasesCheckpointed {
        /// Leases updated.
        leases: u64,
    },
    /// A key was written.
    Put {
        /// The key written (the generated name for a sequential key).
        key: String,
        /// The revision that created it.
        create_revision: Revision,
        /// Its version after the put.
        version: u64,
    },
    /// Keys were deleted.
    Deleted {
        /// How many.
        deleted: u64,
    },
    /// A txn ran.
    Txn {
        /// Whether every compare held (the success branch ran).
        succeeded: bool,
        /// One result per operation of the branch that ran.
        results: Vec<TxnResult>,
    },
    /// An acquire or campaign was granted (also re-entrantly), or a timeout or cancel
    /// found the claim already granted.
    Granted(Grant),
    /// The claim joined the queue (or already waited there).
    Queued {
        /// The revision it joined at: its place in FIFO order and its handle for timeout
        /// and cancel.
        enqueued: Revision,
        /// Its 1-based position when it joined.
        position: u64,
    },
    /// A release: the count dropped, and the hold went if it reached zero.
    Released {
        /// Whether the hold is gone.
        released: bool,
        /// The re-entrant count left.
        count: u32,
        /// The fence of the hold.
        fence: Fence,
    },
    /// A queue entry was withdrawn by its owner (cancel or release while queued).
    Cancelled {
        /// Its enqueue revision.
        enqueued: Revision,
    },
    /// A wait deadline removed the queue entry before any grant.
    TimedOut {
        /// Its enqueue revision.
        enqueued: Revision,
    },
    /// An admin force-release freed every holder.
    ForceReleased {
        /// Holders removed.
        holders: u64,
    },
    /// A lock-delay ended and waiters may have been granted.
    DelayEnded {
        /// Grants made.
        granted: u64,
    },
    /// An election leader changed its value.
    Proclaimed {
        /// The leader's fence.
        fence: Fence,
    },
    /// A deterministic refusal; nothing changed.
    Rejected(Rejection),
}

/// A deterministic refusal. Nothing changes and the revision stays.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Rejection {
    /// The command is malformed in a way `apply` itself guards against.
    InvalidArgument {
        /// Why.
        reason: String,
    },
    /// The lease does not exist (never did, or ended).
    LeaseNotFound {
        /// The lease named.
        lease: LeaseId,
    },
    /// The key does not exist.
    KeyNotFound {
        /// The key named.
        key: String,
    },
    /// The lock, semaphore or election has no holder, waiter or delay.
    LockNotFound {
        /// The resource named.
        resource: ResourceId,
    },
    /// A try-acquire found the resource busy.
    LockHeld {
        /// Up to [`LOCK_HELD_HOLDERS_MAX`] current holders.
        holders: Vec<HolderInfo>,
        /// Waiters in the queue.
        queue_len: u64,
        /// Whether a lock-delay keeps it ungranted.
        delayed: bool,
    },
    /// The caller does not hold (or no longer holds) the claim it named.
    NotHolder {
        /// The current holder's fence, for a resource with one exclusive holder.
        current_fence: Option<Fence>,
    },
    /// A timeout or cancel named a queue entry that is gone and was not granted.
    NotWaiting,
    /// A compare-and-set's expectation did not hold.
    CasFailed {
        /// The key as it is now, if it exists.
        current: Option<KeyValue>,
    },
    /// A semaphore acquire named a different limit than the semaphore has.
    LimitMismatch {
        /// The semaphore's limit.
        limit: u32,
    },
    /// The queue is at its bound.
    QueueFull {
        /// The bound.
        queue_len_max: u64,
    },
    /// An idempotency key was reused for a different command.
    IdempotencyKeyReused,
    /// The caller may not do this (another principal's lease, an admin-only command).
    PermissionDenied {
        /// Why.
        reason: String,
    },
    /// The caller's quota on `resource` would be passed.
    QuotaExceeded {
        /// `leases`, `keys` or `key_bytes`.
        resource: String,
        /// The caller's limit.
        limit: u64,
    },
    /// A leader-proposed command no longer matches the state (e.g. a lock-delay already
    /// ended).
    Stale,
    /// Events before this revision are no longer held.
    Compacted {
        /// The oldest revision still held.
        oldest: Revision,
    },
}

/// How many holders a `LockHeld` refusal lists.
pub const LOCK_HELD_HOLDERS_MAX: usize = 32;

impl Response {
    /// The refusal, if this is one.
    pub fn rejection(&self) -> Option<&Rejection> {
        match self {
            Response::Rejected(r) => Some(r),
            _ => None,
        }
    }
}

impl From<Rejection> for Response {
    fn from(r: Rejection) -> Response {
        Response::Rejected(r)
    }
}
