//! Leases: a TTL and everything the lease owns, so its end touches only that.

use crate::ids::{LeaseId, Revision};
use crate::resource::{ResourceId, ResourceKind};
use crate::small::SmallSet;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// A claim (hold or queue entry) a lease owns on a resource, in 40 bytes: its strings as
/// boxed `str`s beside the kind, where a `ResourceId` and a `String` took 56 and a
/// `Lease` 112 (decision #116). Ordered, and encoded, as the pair it replaces.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(from = "ClaimRefWire")]
pub(crate) struct ClaimRef {
    kind: ResourceKind,
    name: Box<str>,
    owner: Box<str>,
}

impl ClaimRef {
    /// `owner`'s claim on `resource`.
    pub(crate) fn new(resource: &ResourceId, owner: &str) -> ClaimRef {
        ClaimRef {
            kind: resource.kind,
            name: resource.name.as_str().into(),
            owner: owner.into(),
        }
    }

    /// The resource claimed.
    pub(crate) fn resource(&self) -> ResourceId {
        ResourceId {
            kind: self.kind,
            name: self.name.to_string(),
        }
    }

    /// The owner within the lease.
    pub(crate) fn owner(&self) -> &str {
        &self.owner
    }

    /// The resource and the owner, taking the claim.
    pub(crate) fn into_parts(self) -> (ResourceId, String) {
        let resource = ResourceId {
            kind: self.kind,
            name: self.name.into_string(),
        };
        (resource, self.owner.into_string())
    }
}

/// A claim as snapshots encode it: a `ResourceId` and an owner.
#[derive(Deserialize)]
#[serde(rename = "ClaimRef")]
struct ClaimRefWire {
    resource: ResourceId,
    owner: String,
}

impl From<ClaimRefWire> for ClaimRef {
    fn from(w: ClaimRefWire) -> ClaimRef {
        ClaimRef {
            kind: w.resource.kind,
            name: w.resource.name.into_boxed_str(),
            owner: w.owner.into_boxed_str(),
        }
    }
}

/// A `ResourceId`, borrowed, for encoding a claim without a copy.
#[derive(Serialize)]
#[serde(rename = "ResourceId")]
struct ResourceIdRef<'a> {
    kind: ResourceKind,
    name: &'a str,
}

/// The same as [`ClaimRefWire`], borrowed.
#[derive(Serialize)]
#[serde(rename = "ClaimRef")]
struct ClaimRefWireRef<'a> {
    resource: ResourceIdRef<'a>,
    owner: &'a str,
}

impl Serialize for ClaimRef {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        ClaimRefWireRef {
            resource: ResourceIdRef {
                kind: self.kind,
                name: &self.name,
            },
            owner: &self.owner,
        }
        .serialize(serializer)
    }
}

/// A live lease.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(from = "LeaseWire")]
pub(crate) struct Lease {
    pub(crate) ttl_ms: u64,
    pub(crate) granted: Revision,
    /// Remaining TTL at the last checkpoint the leader proposed, or [`FULL_TTL`]: a
    /// recorded remaining time is always below the TTL, so the sentinel is never one, and
    /// 8 bytes instead of an `Option`'s 16 keep a `Lease` in 112 (decision #114).
    checkpoint_remaining_ms: u64,
    /// Holds and queue entries.
    pub(crate) claims: SmallSet<ClaimRef>,
    /// The principal that granted it (`None`: granted without authentication).
    pub(crate) owner: Option<String>,
    /// Ephemeral keys and idempotency outcomes; `None` while it owns neither (decision #97).
    extras: Option<Box<LeaseExtras>>,
}

/// What a lease that holds only locks does not have, behind one pointer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct LeaseExtras {
    /// Ephemeral keys.
    keys: BTreeSet<String>,
    /// Idempotency outcomes this lease owns: sequence number → key.
    idempotency: BTreeMap<u64, String>,
}

/// `checkpoint_remaining_ms` of a lease without a checkpoint since its last reset.
const FULL_TTL: u64 = u64::MAX;

/// The keys of a lease without any.
static NO_KEYS: BTreeSet<String> = BTreeSet::new();
/// The idempotency outcomes of a lease without any.
static NO_OUTCOMES: BTreeMap<u64, String> = BTreeMap::new();

/// A lease as snapshots encode it: the fields in the order of the declaration before the
/// extras were boxed, so snapshot format 2 is unchanged.
#[derive(Deserialize)]
#[serde(rename = "Lease")]
struct LeaseWire {
    ttl_ms: u64,
    granted: Revision,
    checkpoint_remaining_ms: Option<u64>,
    keys: BTreeSet<String>,
    claims: SmallSet<ClaimRef>,
    idempotency: BTreeMap<u64, String>,
    owner: Option<String>,
}

/// The same, borrowed, for encoding without a copy.
#[derive(Serialize)]
#[serde(rename = "Lease")]
struct LeaseWireRef<'a> {
    ttl_ms: u64,
    granted: Revision,
    checkpoint_remaining_ms: Option<u64>,
    keys: &'a BTreeSet<String>,
    claims: &'a SmallSet<ClaimRef>,
    idempotency: &'a BTreeMap<u64, String>,
    owner: &'a Option<String>,
}

impl From<LeaseWire> for Lease {
    fn from(w: LeaseWire) -> Lease {
        let mut lease = Lease {
            ttl_ms: w.ttl_ms,
            granted: w.granted,
            checkpoint_remaining_ms: FULL_TTL,
            claims: w.claims,
            owner: w.owner,
            extras: Some(Box::new(LeaseExtras {
                keys: w.keys,
                idempotency: w.idempotency,
            })),
        };
        lease.set_checkpoint_remaining_ms(w.checkpoint_remaining_ms);
        lease.tidy();
        lease
    }
}

impl Serialize for Lease {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        LeaseWireRef {
            ttl_ms: self.ttl_ms,
            granted: self.granted,
            checkpoint_remaining_ms: self.checkpoint_remaining_ms(),
            keys: self.keys(),
            claims: &self.claims,
            idempotency: self.idempotency(),
            owner: &self.owner,
        }
        .serialize(serializer)
    }
}

impl Lease {
    pub(crate) fn new(ttl_ms: u64, granted: Revision, owner: Option<String>) -> Lease {
        Lease {
            ttl_ms,
            granted,
            checkpoint_remaining_ms: FULL_TTL,
            claims: SmallSet::new(),
            owner,
            extras: None,
        }
    }

    /// Remaining TTL at the last checkpoint; `None` means the full TTL.
    pub(crate) fn checkpoint_remaining_ms(&self) -> Option<u64> {
        (self.checkpoint_remaining_ms != FULL_TTL).then_some(self.checkpoint_remaining_ms)
    }

    /// Records a checkpoint's remaining TTL: below the TTL, or `None` for the full TTL (a
    /// reset), as the checkpoint command decides.
    pub(crate) fn set_checkpoint_remaining_ms(&mut self, remaining_ms: Option<u64>) {
        self.checkpoint_remaining_ms = remaining_ms
            .filter(|r| *r < self.ttl_ms)
            .unwrap_or(FULL_TTL);
    }

    /// Its ephemeral keys.
    pub(crate) fn keys(&self) -> &BTreeSet<String> {
        self.extras.as_ref().map_or(&NO_KEYS, |e| &e.keys)
    }

    /// The idempotency outcomes it owns: sequence number → key.
    pub(crate) fn idempotency(&self) -> &BTreeMap<u64, String> {
        self.extras
            .as_ref()
            .map_or(&NO_OUTCOMES, |e| &e.idempotency)
    }

    /// Binds an ephemeral key to it.
    pub(crate) fn insert_key(&mut self, key: String) {
        self.extras
            .get_or_insert_with(Box::default)
            .keys
            .insert(key);
    }

    /// Unbinds an ephemeral key.
    pub(crate) fn remove_key(&mut self, key: &str) {
        if let Some(e) = self.extras.as_mut() {
            e.keys.remove(key);
            self.tidy();
        }
    }

    /// Owns an idempotency outcome; beyond `max` the oldest is shed and returned.
    pub(crate) fn own_outcome(&mut self, seq: u64, key: String, max: usize) -> Option<String> {
        let outcomes = &mut self.extras.get_or_insert_with(Box::default).idempotency;
        outcomes.insert(seq, key);
        let shed = if outcomes.len() > max {
            outcomes.pop_first().map(|(_, key)| key)
        } else {
            None
        };
        self.tidy();
        shed
    }

    /// Whether the extras box is there exactly when it holds something.
    pub(crate) fn extras_are_tidy(&self) -> bool {
        self.extras
            .as_ref()
            .is_none_or(|e| !e.keys.is_empty() || !e.idempotency.is_empty())
    }

    /// Drops the extras box once it holds nothing.
    fn tidy(&mut self) {
        if !self.extras_are_tidy() {
            self.extras = None;
        }
    }
}

/// A lease as queries show it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseInfo {
    /// Its id.
    pub lease: LeaseId,
    /// Its TTL.
    pub ttl_ms: u64,
    /// The revision that granted it.
    pub granted: Revision,
    /// Remaining TTL at the last checkpoint, if one was recorded since the last reset.
    pub checkpoint_remaining_ms: Option<u64>,
    /// Ephemeral keys it owns.
    pub keys: Vec<String>,
    /// Holds and queue entries it owns: resource and owner.
    pub claims: Vec<(ResourceId, String)>,
    /// The principal that granted it, if the API authenticates.
    pub principal: Option<String>,
}

/// What the leader's lease clock needs of one lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseClockEntry {
    /// Its id.
    pub lease: LeaseId,
    /// Its TTL.
    pub ttl_ms: u64,
    /// Remaining TTL at the last checkpoint; a new leader starts the deadline at
    /// `min(ttl, remaining + election timeout)`.
    pub checkpoint_remaining_ms: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use bincode::Options;

    /// `Lease` as it was declared before decision #97, encoded by serde's derive.
    #[derive(Serialize)]
    struct Before {
        ttl_ms: u64,
        granted: Revision,
        checkpoint_remaining_ms: Option<u64>,
        keys: BTreeSet<String>,
        claims: SmallSet<ClaimRef>,
        idempotency: BTreeMap<u64, String>,
        owner: Option<String>,
    }

    fn before(l: &Lease) -> Before {
        Before {
            ttl_ms: l.ttl_ms,
            granted: l.granted,
            checkpoint_remaining_ms: l.checkpoint_remaining_ms(),
            keys: l.keys().clone(),
            claims: l.claims.clone(),
            idempotency: l.idempotency().clone(),
            owner: l.owner.clone(),
        }
    }

    fn encode<T: Serialize>(value: &T) -> Vec<u8> {
        bincode::DefaultOptions::new().serialize(value).unwrap()
    }

    /// `ClaimRef` as it was declared before decision #116.
    #[derive(Serialize, PartialEq, Eq, PartialOrd, Ord)]
    struct ClaimBefore {
        resource: ResourceId,
        owner: String,
    }

    #[test]
    fn a_claim_encodes_and_sorts_as_the_pair_it_replaced() {
        let claims = [
            (ResourceId::lock("a"), "w"),
            (ResourceId::lock("a"), "w2"),
            (ResourceId::lock("ab"), ""),
            (ResourceId::semaphore("a"), "w"),
            (ResourceId::election("z"), ""),
        ];
        for (resource, owner) in &claims {
            let claim = ClaimRef::new(resource, owner);
            let before = ClaimBefore {
                resource: resource.clone(),
                owner: owner.to_string(),
            };
            let bytes = encode(&claim);
            assert_eq!(bytes, encode(&before));
            let back: ClaimRef = bincode::DefaultOptions::new().deserialize(&bytes).unwrap();
            assert_eq!(back, claim);
            assert_eq!(claim.into_parts(), (resource.clone(), owner.to_string()));
            for (r2, o2) in &claims {
                let other = ClaimBefore {
                    resource: r2.clone(),
                    owner: o2.to_string(),
                };
                assert_eq!(
                    ClaimRef::new(resource, owner).cmp(&ClaimRef::new(r2, o2)),
                    before.cmp(&other)
                );
            }
        }
    }

    #[test]
    fn snapshots_encode_a_lease_as_before_the_extras_were_boxed() {
        let mut lease = Lease::new(10_000, Revision(3), Some("alice".into()));
        lease
            .claims
            .insert(ClaimRef::new(&ResourceId::lock("L"), "w"));
        let plain = lease.clone();
        lease.insert_key("k".into());
        let keyed = lease.clone();
        assert_eq!(lease.own_outcome(7, "req-1".into(), 8), None);
        lease.set_checkpoint_remaining_ms(Some(4_000));
        for lease in [plain, keyed, lease] {
            let bytes = encode(&lease);
            assert_eq!(bytes, encode(&before(&lease)));
            let back: Lease = bincode::DefaultOptions::new().deserialize(&bytes).unwrap();
            assert_eq!(back, lease);
            assert!(back.extras_are_tidy());
        }
    }

    #[test]
    fn the_extras_box_goes_when_the_last_key_and_outcome_go() {
        let mut lease = Lease::new(10_000, Revision(3), None);
        lease.remove_key("absent");
        assert!(lease.extras.is_none());
        lease.insert_key("k".into());
        assert_eq!(lease.own_outcome(1, "a".into(), 1), None);
        assert_eq!(lease.own_outcome(2, "b".into(), 1), Some("a".into()));
        lease.remove_key("k");
        assert!(lease.extras.is_some(), "an outcome is still owned");
        assert_eq!(lease.idempotency().values().collect::<Vec<_>>(), ["b"]);
        // A bound of zero sheds what it was given: nothing is left to keep.
        let mut bare = Lease::new(10_000, Revision(3), None);
        assert_eq!(bare.own_outcome(1, "a".into(), 0), Some("a".into()));
        assert!(bare.extras.is_none());
    }
}
