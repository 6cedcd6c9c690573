//! Locks, semaphores and elections: acquire (held open while queued), release, fence check,
//! state, listing, force-release; campaign, proclaim, resign, leader.

use serde::{Deserialize, Serialize};

/// The mode a lock is asked in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum Mode {
    /// One holder (the default).
    #[default]
    Exclusive,
    /// Many shared holders, no exclusive one.
    Shared,
}

/// How a holder or waiter holds: a lock mode, or semaphore permits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum HoldMode {
    /// An exclusive lock (or an election's leadership).
    Exclusive,
    /// A shared lock.
    Shared,
    /// Semaphore permits (the count is in `permits`).
    Permits,
}

/// `POST /v1/locks/{name}/acquire`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AcquireRequest {
    /// The lease that owns the hold (required: no hidden default lease).
    pub lease_id: u64,
    /// Who holds it within the lease (default "").
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(pattern = "{text}"))]
    pub owner: String,
    /// Exclusive (default) or shared.
    #[serde(default)]
    pub mode: Mode,
    /// How long to wait in the queue; 0 (default) never queues.
    #[serde(default)]
    pub wait_ms: u64,
    /// After this holder's lease expires, keep the lock ungranted this long.
    #[serde(default)]
    pub lock_delay_ms: u64,
    /// Take up the queue place made at this revision (the `enqueued` of a `202` answer)
    /// instead of queueing again: the place keeps its deadline and its position.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enqueued: Option<u64>,
}

/// `POST /v1/locks/{name}/release` and `POST /v1/semaphores/{name}/release`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ReleaseRequest {
    /// The holder's lease.
    pub lease_id: u64,
    /// The holder's owner (default "").
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(pattern = "{text}"))]
    pub owner: String,
    /// If given, only the grant with this fence is released.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fence: Option<u64>,
}

/// `POST /v1/locks/{name}/check`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CheckRequest {
    /// The fence to check.
    pub fence: u64,
}

fn one() -> u32 {
    1
}

/// `POST /v1/semaphores/{name}/acquire`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SemaphoreAcquireRequest {
    /// The lease that owns the hold.
    pub lease_id: u64,
    /// Who holds it within the lease (default "").
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(pattern = "{text}"))]
    pub owner: String,
    /// The semaphore's limit; must match while it is in use.
    #[cfg_attr(feature = "openapi", schema(minimum = 1))]
    pub limit: u32,
    /// Permits to take (default 1).
    #[serde(default = "one")]
    #[cfg_attr(feature = "openapi", schema(minimum = 1))]
    pub permits: u32,
    /// How long to wait; 0 (default) never queues.
    #[serde(default)]
    pub wait_ms: u64,
    /// Take up the queue place made at this revision (the `enqueued` of a `202` answer)
    /// instead of queueing again: the place keeps its deadline and its position.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enqueued: Option<u64>,
}

/// `POST /v1/elections/{name}/campaign`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CampaignRequest {
    /// The candidate's lease.
    pub lease_id: u64,
    /// The value to proclaim on winning.
    pub value: String,
    /// How long to wait; 0 (default) never queues.
    #[serde(default)]
    pub wait_ms: u64,
    /// Take up the queue place made at this revision (the `enqueued` of a `202` answer)
    /// instead of queueing again: the place keeps its deadline and its position.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enqueued: Option<u64>,
}

/// `POST /v1/elections/{name}/proclaim`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ProclaimRequest {
    /// The leader's lease.
    pub lease_id: u64,
    /// If given, must be the leader's fence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fence: Option<u64>,
    /// The new value.
    pub value: String,
}

/// `POST /v1/elections/{name}/resign`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ResignRequest {
    /// The leader's or candidate's lease.
    pub lease_id: u64,
    /// If given, must be the leader's fence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fence: Option<u64>,
}

/// A holder of a lock, semaphore permits or an election.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Holder {
    /// Its lease.
    pub lease_id: u64,
    /// Its owner.
    pub owner: String,
    /// Exclusive, shared or permits.
    pub mode: HoldMode,
    /// Permits held (semaphores).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permits: Option<u32>,
    /// Its fence: the revision of the grant.
    pub fence: u64,
    /// Its re-entrant count.
    pub count: u32,
    /// The revision it was granted at (equal to the fence).
    pub since_revision: u64,
    /// Its election value (elections).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// In state reads and listings: how long it has been held, by the answering node's
    /// clock (absent in grants, and when that node cannot tell).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_for: Option<crate::Age>,
}

/// A grant: of a lock, semaphore permits or an election.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GrantResponse {
    /// The resource's name.
    pub name: String,
    /// The holder this request became.
    #[serde(flatten)]
    pub holder: Holder,
    /// The 1-based queue position the request had when it joined, if it waited.
    pub queued_position: Option<u64>,
    /// The revision at which the answer was made.
    pub revision: u64,
}

/// `202`: a held-open acquire still queued when the request reached the server's hold
/// limit (`hold_ms_max`). The place is kept (bounded by its `wait_ms` and its lease); send
/// the same request again with `enqueued` set to go on waiting in it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WaitingResponse {
    /// The resource's name.
    pub name: String,
    /// The revision the place was taken at: send it back as `enqueued`.
    pub enqueued: u64,
    /// The 1-based position in the queue now.
    pub position: u64,
    /// The revision at which the answer was made.
    pub revision: u64,
}

/// A release, a resign, or the cancel of a queue entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ReleaseResponse {
    /// Whether the hold is gone.
    pub released: bool,
    /// The re-entrant count left.
    pub count: u32,
    /// True when the request cancelled a queue entry instead of releasing a hold.
    #[serde(default)]
    pub cancelled: bool,
    /// The revision of the release.
    pub revision: u64,
}

/// `POST /v1/locks/{name}/check`'s answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CheckResponse {
    /// Whether the fence is a current grant.
    pub current: bool,
    /// The current holder's fence, or null.
    pub fence: Option<u64>,
    /// The revision read.
    pub revision: u64,
}

/// A waiter in a queue.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Waiter {
    /// Its lease.
    pub lease_id: u64,
    /// Its owner.
    pub owner: String,
    /// Exclusive, shared or permits.
    pub mode: HoldMode,
    /// Permits asked (semaphores).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permits: Option<u32>,
    /// The revision it joined the queue at.
    pub enqueued_revision: u64,
    /// Its 1-based position now.
    pub position: u64,
    /// The wait it asked for.
    pub wait_ms: u64,
    /// How long it has waited, by the answering node's clock (absent when that node cannot
    /// tell). Its deadline is `wait_ms` after it joined.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting_for: Option<crate::Age>,
}

/// A pending lock-delay.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LockDelay {
    /// The revision the delay started at.
    pub since_revision: u64,
    /// Its length on the leader's clock.
    pub delay_ms: u64,
}

/// `GET /v1/locks/{name}` and `GET /v1/semaphores/{name}` (empty lists when free).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LockStateResponse {
    /// The name.
    pub name: String,
    /// Holders.
    pub holders: Vec<Holder>,
    /// Waiters in grant order.
    pub queue: Vec<Waiter>,
    /// The limit (semaphores in use).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
    /// A pending lock-delay.
    pub lock_delay: Option<LockDelay>,
    /// The revision read.
    pub revision: u64,
}

/// One lock in a listing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LockSummary {
    /// The name.
    pub name: String,
    /// Holders.
    pub holders: Vec<Holder>,
    /// Waiters queued.
    pub queue_len: u64,
    /// Whether a lock-delay is pending.
    pub lock_delay: bool,
}

/// `GET /v1/locks`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LockListResponse {
    /// Locks with a holder, waiter or lock-delay, in name order.
    pub locks: Vec<LockSummary>,
    /// The revision read.
    pub revision: u64,
}

/// `DELETE /v1/locks/{name}` (admin force-release).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ForceReleaseResponse {
    /// Holders removed.
    pub holders_released: u64,
    /// The revision of the release.
    pub revision: u64,
}

/// An election's leader.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Leader {
    /// The leader's lease.
    pub lease_id: u64,
    /// Its proclaimed value.
    pub value: String,
    /// Its fence (the revision it became leader).
    pub fence: u64,
}

/// `GET /v1/semaphores`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SemaphoreListResponse {
    /// Semaphores with a holder or waiter, in name order.
    pub semaphores: Vec<SemaphoreSummary>,
    /// The revision read.
    pub revision: u64,
}

/// One semaphore in a listing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SemaphoreSummary {
    /// The name.
    pub name: String,
    /// Its limit (permits).
    pub limit: Option<u32>,
    /// Holders.
    pub holders: Vec<Holder>,
    /// Waiters queued.
    pub queue_len: u64,
}

/// One election in a listing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ElectionSummary {
    /// The election.
    pub name: String,
    /// The leader, or null.
    pub leader: Option<Leader>,
    /// How long the leader has led, by the answering node's clock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leading_for: Option<crate::Age>,
    /// Candidates queued behind the leader.
    pub candidates: u64,
}

/// `GET /v1/elections`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ElectionListResponse {
    /// Elections with a leader or candidate, in name order.
    pub elections: Vec<ElectionSummary>,
    /// The revision read.
    pub revision: u64,
}

/// `GET /v1/elections/{name}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ElectionResponse {
    /// The election.
    pub name: String,
    /// The leader, or null.
    pub leader: Option<Leader>,
    /// The revision read.
    pub revision: u64,
}

/// `POST /v1/elections/{name}/proclaim`'s answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ProclaimResponse {
    /// The leader's fence.
    pub fence: u64,
    /// The revision of the proclaim.
    pub revision: u64,
}
