//! The public JSON shapes. Requests reject unknown fields; everything is converted by hand
//! to and from the state machine's types, which stay free to change.

use baton_state_machine::{
    Demand, HolderInfo, KeyValue, Leader, LockDelay, LockState, LockSummary, TxnResult, WaiterInfo,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

/// A lock mode.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ModeDto {
    /// One holder (the default).
    #[default]
    Exclusive,
    /// Many shared holders, no exclusive one.
    Shared,
}

/// `POST /v1/leases`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LeaseGrantRequest {
    /// Time to live without a keepalive, in milliseconds.
    pub ttl_ms: u64,
}

/// A granted lease.
#[derive(Debug, Serialize, ToSchema)]
pub struct LeaseResponse {
    /// Its id.
    pub lease_id: u64,
    /// Its TTL: it lives at least this long after the request was sent.
    pub ttl_ms: u64,
    /// The revision that granted it.
    pub revision: u64,
}

/// A keepalive's answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct KeepaliveResponse {
    /// The lease.
    pub lease_id: u64,
    /// The lease lives at least this long after the keepalive was sent.
    pub ttl_ms: u64,
}

/// A claim a lease owns.
#[derive(Debug, Serialize, ToSchema)]
pub struct ClaimDto {
    /// `lock`, `semaphore` or `election`.
    pub kind: String,
    /// Its name.
    pub name: String,
    /// The owner within the lease.
    pub owner: String,
}

/// `GET /v1/leases/{id}`.
#[derive(Debug, Serialize, ToSchema)]
pub struct LeaseInfoResponse {
    /// The lease.
    pub lease_id: u64,
    /// Its TTL.
    pub ttl_ms: u64,
    /// Remaining TTL on the leader's clock (null if the leader is not tracking it yet).
    pub remaining_ms: Option<u64>,
    /// The revision that granted it.
    pub granted_revision: u64,
    /// Ephemeral keys it owns.
    pub keys: Vec<String>,
    /// Holds and queue entries it owns.
    pub claims: Vec<ClaimDto>,
    /// The revision read.
    pub revision: u64,
}

/// One lease in a listing.
#[derive(Debug, Serialize, ToSchema)]
pub struct LeaseSummaryDto {
    /// The lease.
    pub lease_id: u64,
    /// Its TTL.
    pub ttl_ms: u64,
}

/// `GET /v1/leases`.
#[derive(Debug, Serialize, ToSchema)]
pub struct LeaseListResponse {
    /// Live leases in id order.
    pub leases: Vec<LeaseSummaryDto>,
    /// The revision read.
    pub revision: u64,
}

/// `DELETE /v1/leases/{id}`.
#[derive(Debug, Serialize, ToSchema)]
pub struct RevokeResponse {
    /// The lease.
    pub lease_id: u64,
    /// Ephemeral keys deleted.
    pub keys_deleted: u64,
    /// Holds released.
    pub holds_released: u64,
    /// Queue entries cancelled.
    pub waits_cancelled: u64,
    /// The revision of the revoke.
    pub revision: u64,
}

/// `POST /v1/locks/{name}/acquire`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AcquireRequest {
    /// The lease that owns the hold (required: no hidden default lease).
    pub lease_id: u64,
    /// Who holds it within the lease (default "").
    #[serde(default)]
    pub owner: String,
    /// Exclusive (default) or shared.
    #[serde(default)]
    pub mode: ModeDto,
    /// How long to wait in the queue; 0 (default) never queues.
    #[serde(default)]
    pub wait_ms: u64,
    /// After this holder's lease expires, keep the lock ungranted this long.
    #[serde(default)]
    pub lock_delay_ms: u64,
}

/// `POST /v1/locks/{name}/release` and `POST /v1/semaphores/{name}/release`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReleaseRequest {
    /// The holder's lease.
    pub lease_id: u64,
    /// The holder's owner (default "").
    #[serde(default)]
    pub owner: String,
    /// If given, only the grant with this fence is released.
    pub fence: Option<u64>,
}

/// `POST /v1/locks/{name}/check`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CheckRequest {
    /// The fence to check.
    pub fence: u64,
}

/// `POST /v1/semaphores/{name}/acquire`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SemaphoreAcquireRequest {
    /// The lease that owns the hold.
    pub lease_id: u64,
    /// Who holds it within the lease (default "").
    #[serde(default)]
    pub owner: String,
    /// The semaphore's limit; must match while it is in use.
    pub limit: u32,
    /// Permits to take (default 1).
    #[serde(default = "one")]
    pub permits: u32,
    /// How long to wait; 0 (default) never queues.
    #[serde(default)]
    pub wait_ms: u64,
}

fn one() -> u32 {
    1
}

/// `POST /v1/elections/{name}/campaign`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CampaignRequest {
    /// The candidate's lease.
    pub lease_id: u64,
    /// The value to proclaim on winning.
    pub value: String,
    /// How long to wait; 0 (default) never queues.
    #[serde(default)]
    pub wait_ms: u64,
}

/// `POST /v1/elections/{name}/proclaim`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ProclaimRequest {
    /// The leader's lease.
    pub lease_id: u64,
    /// If given, must be the leader's fence.
    pub fence: Option<u64>,
    /// The new value.
    pub value: String,
}

/// `POST /v1/elections/{name}/resign`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResignRequest {
    /// The leader's or candidate's lease.
    pub lease_id: u64,
    /// If given, must be the leader's fence.
    pub fence: Option<u64>,
}

/// A grant: of a lock, semaphore permits or an election.
#[derive(Debug, Serialize, ToSchema)]
pub struct GrantResponse {
    /// The resource's name.
    pub name: String,
    /// The holder: lease, owner, mode, permits, fence (the revision of the grant), count,
    /// election value.
    #[serde(flatten)]
    pub holder: HolderDto,
    /// The 1-based queue position the request had when it joined, if it waited.
    pub queued_position: Option<u64>,
    /// The revision at which the answer was made.
    pub revision: u64,
}

/// A release (or the cancel of a queue entry).
#[derive(Debug, Serialize, ToSchema)]
pub struct ReleaseResponse {
    /// Whether the hold is gone.
    pub released: bool,
    /// The re-entrant count left.
    pub count: u32,
    /// True when the request cancelled a queue entry instead of releasing a hold.
    pub cancelled: bool,
    /// The revision of the release.
    pub revision: u64,
}

/// A fence check.
#[derive(Debug, Serialize, ToSchema)]
pub struct CheckResponse {
    /// Whether the fence is a current grant.
    pub current: bool,
    /// The current holder's fence, or null.
    pub fence: Option<u64>,
    /// The revision read.
    pub revision: u64,
}

/// A holder.
#[derive(Debug, Serialize, ToSchema)]
pub struct HolderDto {
    /// Its lease.
    pub lease_id: u64,
    /// Its owner.
    pub owner: String,
    /// `exclusive`, `shared` or `permits`.
    pub mode: String,
    /// Permits held (semaphores).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub permits: Option<u32>,
    /// Its fence.
    pub fence: u64,
    /// Its re-entrant count.
    pub count: u32,
    /// The revision it was granted at (equal to the fence).
    pub since_revision: u64,
    /// Its election value (elections).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
}

/// A waiter.
#[derive(Debug, Serialize, ToSchema)]
pub struct WaiterDto {
    /// Its lease.
    pub lease_id: u64,
    /// Its owner.
    pub owner: String,
    /// `exclusive`, `shared` or `permits`.
    pub mode: String,
    /// Permits asked (semaphores).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub permits: Option<u32>,
    /// The revision it joined the queue at.
    pub enqueued_revision: u64,
    /// Its 1-based position now.
    pub position: u64,
    /// The wait it asked for.
    pub wait_ms: u64,
}

/// A pending lock-delay.
#[derive(Debug, Serialize, ToSchema)]
pub struct LockDelayDto {
    /// The revision the delay started at.
    pub since_revision: u64,
    /// Its length on the leader's clock.
    pub delay_ms: u64,
}

/// `GET /v1/locks/{name}` (also semaphores).
#[derive(Debug, Serialize, ToSchema)]
pub struct LockStateResponse {
    /// The name.
    pub name: String,
    /// Holders.
    pub holders: Vec<HolderDto>,
    /// Waiters in grant order.
    pub queue: Vec<WaiterDto>,
    /// The limit (semaphores in use).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
    /// A pending lock-delay.
    pub lock_delay: Option<LockDelayDto>,
    /// The revision read.
    pub revision: u64,
}

/// One lock in a listing.
#[derive(Debug, Serialize, ToSchema)]
pub struct LockSummaryDto {
    /// The name.
    pub name: String,
    /// Holders.
    pub holders: Vec<HolderDto>,
    /// Waiters queued.
    pub queue_len: u64,
    /// Whether a lock-delay is pending.
    pub lock_delay: bool,
}

/// `GET /v1/locks`.
#[derive(Debug, Serialize, ToSchema)]
pub struct LockListResponse {
    /// Locks with a holder, waiter or lock-delay, in name order.
    pub locks: Vec<LockSummaryDto>,
    /// The revision read.
    pub revision: u64,
}

/// `DELETE /v1/locks/{name}`.
#[derive(Debug, Serialize, ToSchema)]
pub struct ForceReleaseResponse {
    /// Holders removed.
    pub holders_released: u64,
    /// The revision of the release.
    pub revision: u64,
}

/// An election's leader.
#[derive(Debug, Serialize, ToSchema)]
pub struct LeaderDto {
    /// The leader's lease.
    pub lease_id: u64,
    /// Its value.
    pub value: String,
    /// Its fence.
    pub fence: u64,
}

/// `GET /v1/elections/{name}`.
#[derive(Debug, Serialize, ToSchema)]
pub struct ElectionResponse {
    /// The election.
    pub name: String,
    /// The leader, or null.
    pub leader: Option<LeaderDto>,
    /// The revision read.
    pub revision: u64,
}

/// `PUT /v1/kv/{key}`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PutRequest {
    /// The value.
    pub value: String,
    /// Bind the key to this lease (an ephemeral key).
    pub lease_id: Option<u64>,
    /// Compare-and-set on `mod_revision`; 0 means the key must not exist.
    pub prev_revision: Option<u64>,
}

/// `POST /v1/kv/{prefix}`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SequentialRequest {
    /// The value.
    pub value: String,
    /// Bind the key to this lease.
    pub lease_id: Option<u64>,
}

/// A stored key.
#[derive(Debug, Serialize, ToSchema)]
pub struct KeyDto {
    /// The key.
    pub key: String,
    /// Its value.
    pub value: String,
    /// The revision that created it.
    pub create_revision: u64,
    /// The revision of its last change.
    pub mod_revision: u64,
    /// Puts since creation.
    pub version: u64,
    /// Its lease, if ephemeral.
    pub lease_id: Option<u64>,
}

/// `GET /v1/kv/{key}`.
#[derive(Debug, Serialize, ToSchema)]
pub struct KeyResponse {
    /// The key.
    #[serde(flatten)]
    pub kv: KeyDto,
    /// The revision read.
    pub revision: u64,
}

/// A write's answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct PutResponse {
    /// The key written (generated for a sequential key).
    pub key: String,
    /// The revision of the write.
    pub revision: u64,
    /// The revision that created the key.
    pub create_revision: u64,
    /// Its version after the write.
    pub version: u64,
}

/// `GET /v1/kv?prefix=`.
#[derive(Debug, Serialize, ToSchema)]
pub struct RangeResponse {
    /// Keys in order.
    pub kvs: Vec<KeyDto>,
    /// Whether the limit cut the list short.
    pub more: bool,
    /// The revision read.
    pub revision: u64,
}

/// A delete's answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct DeleteResponse {
    /// Keys deleted.
    pub deleted: u64,
    /// The revision of the delete (unchanged if nothing was deleted).
    pub revision: u64,
}

/// One compare of a txn: `{"key", "target", "op", "value"}`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CompareDto {
    /// The key.
    pub key: String,
    /// `value`, `version`, `create_revision`, `mod_revision` or `lease`.
    pub target: String,
    /// `equal`, `not_equal`, `greater` or `less` (also `=`, `!=`, `>`, `<`).
    pub op: String,
    /// A string for `value`, a number otherwise (`lease`: 0 for none).
    #[schema(value_type = Object)]
    pub value: Value,
}

/// One operation of a txn branch.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum TxnOpDto {
    /// Put a key.
    Put {
        /// The key.
        key: String,
        /// The value.
        value: String,
        /// Its lease.
        lease_id: Option<u64>,
    },
    /// Delete a key.
    Delete {
        /// The key.
        key: String,
    },
    /// Delete keys under a prefix.
    DeletePrefix {
        /// The prefix.
        prefix: String,
    },
    /// Read keys under a prefix (sees earlier operations of the txn).
    Range {
        /// The prefix.
        prefix: String,
        /// At most this many (default 100).
        limit: Option<usize>,
    },
}

/// `POST /v1/txn`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TxnRequest {
    /// All must hold for `success` to run.
    #[serde(default)]
    pub compare: Vec<CompareDto>,
    /// Operations if every compare holds.
    #[serde(default)]
    pub success: Vec<TxnOpDto>,
    /// Operations otherwise.
    #[serde(default)]
    pub failure: Vec<TxnOpDto>,
}

/// `POST /v1/txn`'s answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct TxnResponse {
    /// Whether every compare held.
    pub succeeded: bool,
    /// One result per operation of the branch that ran.
    #[schema(value_type = Vec<Object>)]
    pub results: Vec<Value>,
    /// The revision of the txn (unchanged if it wrote nothing).
    pub revision: u64,
}

/// `POST /v1/cluster/members`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AddMemberRequest {
    /// The new member's id.
    pub id: u64,
    /// Its peer address (`host:port`).
    pub peer: String,
    /// Its client API address (`host:port`).
    pub api: String,
}

/// The mode name and permits of a demand.
pub fn demand_parts(demand: Demand) -> (&'static str, Option<u32>) {
    match demand {
        Demand::Exclusive => ("exclusive", None),
        Demand::Shared => ("shared", None),
        Demand::Permits(n) => ("permits", Some(n)),
    }
}

/// A holder as JSON parts.
pub fn holder_dto(h: &HolderInfo) -> HolderDto {
    let (mode, permits) = demand_parts(h.demand);
    HolderDto {
        lease_id: h.lease.0,
        owner: h.owner.clone(),
        mode: mode.into(),
        permits,
        fence: h.fence.0,
        count: h.count,
        since_revision: h.fence.0,
        value: h.value.clone(),
    }
}

/// A holder as a JSON value, for error details.
pub fn holder_json(h: &HolderInfo) -> Value {
    serde_json::to_value(holder_dto(h)).unwrap_or(Value::Null)
}

/// A key as its DTO.
pub fn key_dto(kv: &KeyValue) -> KeyDto {
    KeyDto {
        key: kv.key.clone(),
        value: kv.value.clone(),
        create_revision: kv.create_revision.0,
        mod_revision: kv.mod_revision.0,
        version: kv.version,
        lease_id: kv.lease.map(|l| l.0),
    }
}

/// A key as a JSON value, for error details.
pub fn key_json(kv: &KeyValue) -> Value {
    serde_json::to_value(key_dto(kv)).unwrap_or(Value::Null)
}

fn waiter_dto(position: usize, w: &WaiterInfo) -> WaiterDto {
    let (mode, permits) = demand_parts(w.demand);
    WaiterDto {
        lease_id: w.lease.0,
        owner: w.owner.clone(),
        mode: mode.into(),
        permits,
        enqueued_revision: w.enqueued.0,
        position: position as u64 + 1,
        wait_ms: w.wait_ms,
    }
}

fn delay_dto(d: &LockDelay) -> LockDelayDto {
    LockDelayDto {
        since_revision: d.since.0,
        delay_ms: d.delay_ms,
    }
}

/// A lock's state, or an empty one if it has no holder, waiter or delay.
pub fn lock_state_response(
    name: &str,
    state: Option<LockState>,
    revision: u64,
) -> LockStateResponse {
    let Some(state) = state else {
        return LockStateResponse {
            name: name.into(),
            holders: Vec::new(),
            queue: Vec::new(),
            limit: None,
            lock_delay: None,
            revision,
        };
    };
    LockStateResponse {
        name: name.into(),
        holders: state.holders.iter().map(holder_dto).collect(),
        queue: state
            .queue
            .iter()
            .enumerate()
            .map(|(i, w)| waiter_dto(i, w))
            .collect(),
        limit: state.limit,
        lock_delay: state.delay.as_ref().map(delay_dto),
        revision,
    }
}

/// One lock in a listing.
pub fn lock_summary_dto(s: &LockSummary) -> LockSummaryDto {
    LockSummaryDto {
        name: s.resource.name.clone(),
        holders: s.holders.iter().map(holder_dto).collect(),
        queue_len: s.queue_len,
        lock_delay: s.delayed,
    }
}

/// An election leader.
pub fn leader_dto(l: &Leader) -> LeaderDto {
    LeaderDto {
        lease_id: l.lease.0,
        value: l.value.clone(),
        fence: l.fence.0,
    }
}

/// A txn result as JSON.
pub fn txn_result_json(r: &TxnResult) -> Value {
    match r {
        TxnResult::Put { key, version } => {
            serde_json::json!({"op": "put", "key": key, "version": version})
        }
        TxnResult::Deleted { deleted } => serde_json::json!({"op": "delete", "deleted": deleted}),
        TxnResult::Range { kvs, more } => {
            let kvs: Vec<KeyDto> = kvs.iter().map(key_dto).collect();
            serde_json::json!({"op": "range", "kvs": kvs, "more": more})
        }
    }
}
