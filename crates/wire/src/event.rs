//! Watch events: the `data` of each Server-Sent Event of `GET /v1/watch`, a JSON object
//! with the event's `revision`, its `type` (also the SSE event name) and the fields of that
//! type. Resource events are named `<kind>_<change>`: `lock_granted`,
//! `semaphore_queued`, `election_released`, …

use crate::{ErrorBody, HoldMode, Leader, ResourceKind};
use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

/// A key was written.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyPut {
    /// The key.
    pub key: String,
    /// Its new value.
    pub value: String,
    /// The revision that created it.
    pub create_revision: u64,
    /// This revision.
    pub mod_revision: u64,
    /// Puts since creation.
    pub version: u64,
    /// Its lease, if ephemeral.
    pub lease_id: Option<u64>,
}

/// A key was deleted.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyDeleted {
    /// The key.
    pub key: String,
    /// The lease it had, if any.
    pub lease_id: Option<u64>,
}

/// A request joined a queue.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Queued {
    /// The resource.
    pub name: String,
    /// The waiter's lease.
    pub lease_id: u64,
    /// The waiter's owner.
    pub owner: String,
    /// What it asked for.
    pub mode: HoldMode,
    /// Its 1-based place in the queue.
    pub position: u64,
    /// The wait it asked for.
    pub wait_ms: u64,
}

/// A grant.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Granted {
    /// The resource.
    pub name: String,
    /// The holder's lease.
    pub lease_id: u64,
    /// The holder's owner.
    pub owner: String,
    /// How it holds.
    pub mode: HoldMode,
    /// Its fence.
    pub fence: u64,
    /// The revision it had queued at, if it waited.
    pub enqueued_revision: Option<u64>,
}

/// A re-entrant count went up or down without freeing the hold.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CountChanged {
    /// The resource.
    pub name: String,
    /// The holder's lease.
    pub lease_id: u64,
    /// The holder's owner.
    pub owner: String,
    /// Its fence.
    pub fence: u64,
    /// The count now.
    pub count: u32,
}

/// Why a hold ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReleaseReason {
    /// Its holder released it (`<kind>_released`).
    Released,
    /// An admin force-released it (`<kind>_force_released`).
    Forced,
    /// Its lease was revoked (`<kind>_released`).
    LeaseRevoked,
    /// Its lease expired (`<kind>_expired`).
    LeaseExpired,
}

/// A hold ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Released {
    /// The resource.
    pub name: String,
    /// The holder's lease.
    pub lease_id: u64,
    /// The holder's owner.
    pub owner: String,
    /// Its fence.
    pub fence: u64,
    /// Why.
    pub reason: ReleaseReason,
}

/// Why a queue entry ended without a grant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CancelReason {
    /// Cancelled by its owner or a disconnect (`<kind>_cancelled`).
    Cancelled,
    /// Its wait ran out (`<kind>_timed_out`).
    TimedOut,
    /// Its lease was revoked (`<kind>_cancelled`).
    LeaseRevoked,
    /// Its lease expired (`<kind>_cancelled`).
    LeaseExpired,
}

/// A queue entry ended without a grant.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cancelled {
    /// The resource.
    pub name: String,
    /// The waiter's lease.
    pub lease_id: u64,
    /// The waiter's owner.
    pub owner: String,
    /// The revision it had queued at.
    pub enqueued_revision: u64,
    /// Why.
    pub reason: CancelReason,
}

/// A lock-delay began.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DelayStarted {
    /// The lock.
    pub name: String,
    /// Its length on the leader's clock.
    pub delay_ms: u64,
}

/// A lock-delay ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DelayEnded {
    /// The lock.
    pub name: String,
}

/// An election's leader or value changed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaderChanged {
    /// The election.
    pub name: String,
    /// The leader now, or null.
    pub leader: Option<Leader>,
}

/// A lease was granted.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseGranted {
    /// The lease.
    pub lease_id: u64,
    /// Its TTL.
    pub ttl_ms: u64,
}

/// A lease ended (revoked or expired).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseEnded {
    /// The lease.
    pub lease_id: u64,
}

/// What happened, typed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// `key_put`.
    KeyPut(KeyPut),
    /// `key_deleted`.
    KeyDeleted(KeyDeleted),
    /// `<kind>_queued`.
    Queued(ResourceKind, Queued),
    /// `<kind>_granted`.
    Granted(ResourceKind, Granted),
    /// `<kind>_count_changed`.
    CountChanged(ResourceKind, CountChanged),
    /// `<kind>_released`, `<kind>_expired` or `<kind>_force_released` (by `reason`).
    Released(ResourceKind, Released),
    /// `<kind>_cancelled` or `<kind>_timed_out` (by `reason`).
    Cancelled(ResourceKind, Cancelled),
    /// `<kind>_delay_started`.
    DelayStarted(ResourceKind, DelayStarted),
    /// `<kind>_delay_ended`.
    DelayEnded(ResourceKind, DelayEnded),
    /// `election_leader`.
    LeaderChanged(LeaderChanged),
    /// `lease_granted`.
    LeaseGranted(LeaseGranted),
    /// `lease_revoked`.
    LeaseRevoked(LeaseEnded),
    /// `lease_expired`.
    LeaseExpired(LeaseEnded),
}

impl Event {
    /// Its type: the SSE event name and the `type` field.
    pub fn type_name(&self) -> String {
        let resource = |kind: &ResourceKind, change: &str| format!("{}_{change}", kind.as_str());
        match self {
            Event::KeyPut(_) => "key_put".into(),
            Event::KeyDeleted(_) => "key_deleted".into(),
            Event::Queued(k, _) => resource(k, "queued"),
            Event::Granted(k, _) => resource(k, "granted"),
            Event::CountChanged(k, _) => resource(k, "count_changed"),
            Event::Released(k, r) => resource(
                k,
                match r.reason {
                    ReleaseReason::LeaseExpired => "expired",
                    ReleaseReason::Forced => "force_released",
                    ReleaseReason::Released | ReleaseReason::LeaseRevoked => "released",
                },
            ),
            Event::Cancelled(k, c) => resource(
                k,
                match c.reason {
                    CancelReason::TimedOut => "timed_out",
                    _ => "cancelled",
                },
            ),
            Event::DelayStarted(k, _) => resource(k, "delay_started"),
            Event::DelayEnded(k, _) => resource(k, "delay_ended"),
            Event::LeaderChanged(_) => "election_leader".into(),
            Event::LeaseGranted(_) => "lease_granted".into(),
            Event::LeaseRevoked(_) => "lease_revoked".into(),
            Event::LeaseExpired(_) => "lease_expired".into(),
        }
    }

    fn fields(&self) -> Result<Value, serde_json::Error> {
        match self {
            Event::KeyPut(e) => serde_json::to_value(e),
            Event::KeyDeleted(e) => serde_json::to_value(e),
            Event::Queued(_, e) => serde_json::to_value(e),
            Event::Granted(_, e) => serde_json::to_value(e),
            Event::CountChanged(_, e) => serde_json::to_value(e),
            Event::Released(_, e) => serde_json::to_value(e),
            Event::Cancelled(_, e) => serde_json::to_value(e),
            Event::DelayStarted(_, e) => serde_json::to_value(e),
            Event::DelayEnded(_, e) => serde_json::to_value(e),
            Event::LeaderChanged(e) => serde_json::to_value(e),
            Event::LeaseGranted(e) => serde_json::to_value(e),
            Event::LeaseRevoked(e) | Event::LeaseExpired(e) => serde_json::to_value(e),
        }
    }

    /// The event of this type with these fields.
    fn from_fields(type_name: &str, fields: Value) -> Result<Event, serde_json::Error> {
        use serde_json::from_value as from;
        let event = match type_name {
            "key_put" => Event::KeyPut(from(fields)?),
            "key_deleted" => Event::KeyDeleted(from(fields)?),
            "election_leader" => Event::LeaderChanged(from(fields)?),
            "lease_granted" => Event::LeaseGranted(from(fields)?),
            "lease_revoked" => Event::LeaseRevoked(from(fields)?),
            "lease_expired" => Event::LeaseExpired(from(fields)?),
            other => {
                let (kind, change) = [
                    ResourceKind::Lock,
                    ResourceKind::Semaphore,
                    ResourceKind::Election,
                ]
                .into_iter()
                .find_map(|k| {
                    let change = other.strip_prefix(k.as_str())?.strip_prefix('_')?;
                    Some((k, change))
                })
                .ok_or_else(|| serde_json::Error::custom(format!("unknown event {other:?}")))?;
                match change {
                    "queued" => Event::Queued(kind, from(fields)?),
                    "granted" => Event::Granted(kind, from(fields)?),
                    "count_changed" => Event::CountChanged(kind, from(fields)?),
                    "released" | "expired" | "force_released" => {
                        Event::Released(kind, from(fields)?)
                    }
                    "cancelled" | "timed_out" => Event::Cancelled(kind, from(fields)?),
                    "delay_started" => Event::DelayStarted(kind, from(fields)?),
                    "delay_ended" => Event::DelayEnded(kind, from(fields)?),
                    _ => {
                        return Err(serde_json::Error::custom(format!(
                            "unknown event {other:?}"
                        )));
                    }
                }
            }
        };
        Ok(event)
    }
}

/// One event of a watch stream, as its SSE `data`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchEvent {
    /// The revision that made it (also the SSE `id`).
    pub revision: u64,
    /// What happened.
    pub event: Event,
}

impl Serialize for WatchEvent {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut fields = match self.event.fields() {
            Ok(Value::Object(map)) => map,
            Ok(_) => Map::new(),
            Err(e) => return Err(serde::ser::Error::custom(e)),
        };
        fields.insert("revision".into(), Value::from(self.revision));
        fields.insert("type".into(), Value::from(self.event.type_name()));
        fields.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for WatchEvent {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<WatchEvent, D::Error> {
        let mut fields = Map::<String, Value>::deserialize(deserializer)?;
        let revision = fields
            .remove("revision")
            .and_then(|v| v.as_u64())
            .ok_or_else(|| D::Error::missing_field("revision"))?;
        let type_name = match fields.remove("type") {
            Some(Value::String(s)) => s,
            _ => return Err(D::Error::missing_field("type")),
        };
        let event =
            Event::from_fields(&type_name, Value::Object(fields)).map_err(D::Error::custom)?;
        Ok(WatchEvent { revision, event })
    }
}

/// The `data` of a `progress` event: everything up to `revision` has been delivered.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Progress {
    /// The revision delivered up to.
    pub revision: u64,
}

/// The `data` of an `error` event that ends a stream (e.g. a watcher fell behind the
/// window: `compacted`).
pub type StreamError = ErrorBody;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn resource_events_round_trip_with_their_type_names() {
        let e = WatchEvent {
            revision: 12,
            event: Event::Released(
                ResourceKind::Semaphore,
                Released {
                    name: "s".into(),
                    lease_id: 3,
                    owner: "o".into(),
                    fence: 9,
                    reason: ReleaseReason::LeaseExpired,
                },
            ),
        };
        let v = serde_json::to_value(&e).unwrap();
        assert_eq!(v["type"], "semaphore_expired");
        assert_eq!(v["revision"], 12);
        assert_eq!(v["reason"], "lease_expired");
        assert_eq!(serde_json::from_value::<WatchEvent>(v).unwrap(), e);
    }

    #[test]
    fn election_leader_is_not_a_resource_change() {
        let v = json!({"revision": 5, "type": "election_leader", "name": "e",
            "leader": {"lease_id": 1, "value": "a", "fence": 4}});
        let e: WatchEvent = serde_json::from_value(v).unwrap();
        assert!(matches!(
            e.event,
            Event::LeaderChanged(LeaderChanged {
                leader: Some(_),
                ..
            })
        ));
        assert!(
            serde_json::from_value::<WatchEvent>(
                json!({"revision": 1, "type": "lock_nope", "name": "x"})
            )
            .is_err()
        );
    }
}
