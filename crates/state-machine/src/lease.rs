//! Leases: a TTL and everything the lease owns, so its end touches only that.

use crate::ids::{LeaseId, Revision};
use crate::resource::{ResourceId, ResourceIdRef, ResourceKind};
use crate::small::SmallSet;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// A claim (hold or queue entry) a lease owns on a resource, in one 16-byte pointer to one
/// heap block: the kind's byte, the name's length, the name and the owner. The length is
/// one byte for a name under 255 bytes, else [`LONG_NAME`] and four bytes little-endian:
/// a short name and owner then fit a smaller allocation (`held-123456` with a one-byte
/// owner takes 14 bytes, jemalloc's 16-byte class, where a four-byte length made it 17,
/// the 32-byte class: decision #121). A `ResourceId` and a `String` took 56 bytes, two
/// boxed `str`s beside the kind 40 (decisions #116, #119). Ordered, and encoded, as the
/// pair it replaces: by kind, then name, then owner, and UTF-8's byte order is its
/// code-point order.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(from = "ClaimRefWire")]
pub(crate) struct ClaimRef(Box<[u8]>);

/// The length byte of a name of 255 bytes or more: four bytes of length follow it.
const LONG_NAME: u8 = u8::MAX;

impl ClaimRef {
    /// `owner`'s claim on `resource`.
    pub(crate) fn new(resource: &ResourceId, owner: &str) -> ClaimRef {
        let name = &resource.name;
        let short = u8::try_from(name.len())
            .ok()
            .filter(|len| *len != LONG_NAME);
        let header = if short.is_some() { 2 } else { 6 };
        // Exactly its length: `into_boxed_slice` would copy into a smaller block otherwise.
        let mut block = Vec::with_capacity(header + name.len() + owner.len());
        block.push(resource.kind.byte());
        match short {
            Some(len) => block.push(len),
            None => {
                block.push(LONG_NAME);
                // Names are bounded far below 4 GiB by the limits; saturate rather than wrap.
                let len = u32::try_from(name.len()).unwrap_or(u32::MAX);
                block.extend_from_slice(&len.to_le_bytes());
            }
        }
        block.extend_from_slice(name.as_bytes());
        block.extend_from_slice(owner.as_bytes());
        ClaimRef(block.into_boxed_slice())
    }

    /// The resource's kind.
    fn kind(&self) -> ResourceKind {
        ResourceKind::from_byte(self.0.first().copied().unwrap_or_default())
    }

    /// The name's bytes and the owner's.
    fn parts(&self) -> (&[u8], &[u8]) {
        let (len, body) = match self.0.get(1).copied() {
            Some(LONG_NAME) => {
                let mut len = [0u8; 4];
                if let Some(bytes) = self.0.get(2..6) {
                    len.copy_from_slice(bytes);
                }
                (u32::from_le_bytes(len) as usize, self.0.get(6..))
            }
            Some(len) => (usize::from(len), self.0.get(2..)),
            None => (0, None),
        };
        let body = body.unwrap_or_default();
        body.split_at(len.min(body.len()))
    }

    /// The resource's name.
    fn name(&self) -> Cow<'_, str> {
        String::from_utf8_lossy(self.parts().0)
    }

    /// The resource claimed.
    pub(crate) fn resource(&self) -> ResourceId {
        ResourceId {
            kind: self.kind(),
            name: self.name().into_owned(),
        }
    }

    /// The owner within the lease.
    pub(crate) fn owner(&self) -> Cow<'_, str> {
        String::from_utf8_lossy(self.parts().1)
    }

    /// The resource and the owner, taking the claim.
    pub(crate) fn into_parts(self) -> (ResourceId, String) {
        (self.resource(), self.owner().into_owned())
    }
}

impl Ord for ClaimRef {
    fn cmp(&self, other: &ClaimRef) -> Ordering {
        let (name, owner) = self.parts();
        let (other_name, other_owner) = other.parts();
        self.0
            .first()
            .cmp(&other.0.first())
            .then_with(|| name.cmp(other_name))
            .then_with(|| owner.cmp(other_owner))
    }
}

impl PartialOrd for ClaimRef {
    fn partial_cmp(&self, other: &ClaimRef) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Debug for ClaimRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClaimRef")
            .field("kind", &self.kind())
            .field("name", &self.name())
            .field("owner", &self.owner())
            .finish()
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
        ClaimRef::new(&w.resource, &w.owner)
    }
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
        let (name, owner) = (self.name(), self.owner());
        ClaimRefWireRef {
            resource: ResourceIdRef {
                kind: self.kind(),
                name: &name,
            },
            owner: &owner,
        }
        .serialize(serializer)
    }
}

/// A live lease.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(try_from = "LeaseWire")]
pub(crate) struct Lease {
    /// Its TTL: at most [`TTL_MS_MAX`], so four bytes (decision #121).
    ttl_ms: u32,
    /// Remaining TTL at the last checkpoint the leader proposed, or [`FULL_TTL`]: a
    /// recorded remaining time is always below the TTL, so the sentinel is never one, and
    /// 4 bytes instead of an `Option<u64>`'s 16 keep a `Lease` in 64 (decisions #114, #121).
    checkpoint_remaining_ms: u32,
    pub(crate) granted: Revision,
    /// Holds and queue entries.
    pub(crate) claims: SmallSet<ClaimRef>,
    /// The principal that granted it (`None`: granted without authentication).
    pub(crate) owner: Option<Box<str>>,
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
const FULL_TTL: u32 = u32::MAX;

/// The longest TTL a lease can have, about 49.7 days: the state machine refuses a grant
/// above it and a node's configuration cannot allow one.
pub const TTL_MS_MAX: u64 = u32::MAX as u64;

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
    owner: Option<&'a str>,
}

impl TryFrom<LeaseWire> for Lease {
    type Error = String;

    /// Refuses a TTL above [`TTL_MS_MAX`], which no grant can have made.
    fn try_from(w: LeaseWire) -> Result<Lease, String> {
        let ttl_ms = u32::try_from(w.ttl_ms)
            .map_err(|_| format!("a lease TTL of {} ms is above {TTL_MS_MAX}", w.ttl_ms))?;
        let mut lease = Lease {
            ttl_ms,
            checkpoint_remaining_ms: FULL_TTL,
            granted: w.granted,
            claims: w.claims,
            owner: w.owner.map(String::into_boxed_str),
            extras: Some(Box::new(LeaseExtras {
                keys: w.keys,
                idempotency: w.idempotency,
            })),
        };
        lease.set_checkpoint_remaining_ms(w.checkpoint_remaining_ms);
        lease.tidy();
        Ok(lease)
    }
}

impl Serialize for Lease {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        LeaseWireRef {
            ttl_ms: self.ttl_ms(),
            granted: self.granted,
            checkpoint_remaining_ms: self.checkpoint_remaining_ms(),
            keys: self.keys(),
            claims: &self.claims,
            idempotency: self.idempotency(),
            owner: self.owner.as_deref(),
        }
        .serialize(serializer)
    }
}

impl Lease {
    /// A lease of `ttl_ms` (which [`LeaseGrant`](crate::LeaseGrant) has checked against
    /// [`TTL_MS_MAX`]) granted at `granted`.
    pub(crate) fn new(ttl_ms: u32, granted: Revision, owner: Option<String>) -> Lease {
        Lease {
            ttl_ms,
            checkpoint_remaining_ms: FULL_TTL,
            granted,
            claims: SmallSet::new(),
            owner: owner.map(String::into_boxed_str),
            extras: None,
        }
    }

    /// Its TTL.
    pub(crate) fn ttl_ms(&self) -> u64 {
        u64::from(self.ttl_ms)
    }

    /// Remaining TTL at the last checkpoint; `None` means the full TTL.
    pub(crate) fn checkpoint_remaining_ms(&self) -> Option<u64> {
        (self.checkpoint_remaining_ms != FULL_TTL)
            .then_some(u64::from(self.checkpoint_remaining_ms))
    }

    /// Records a checkpoint's remaining TTL: below the TTL, or `None` for the full TTL (a
    /// reset), as the checkpoint command decides.
    pub(crate) fn set_checkpoint_remaining_ms(&mut self, remaining_ms: Option<u64>) {
        // Below the TTL, so below `FULL_TTL` too.
        self.checkpoint_remaining_ms = remaining_ms
            .and_then(|r| u32::try_from(r).ok())
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
            ttl_ms: l.ttl_ms(),
            granted: l.granted,
            checkpoint_remaining_ms: l.checkpoint_remaining_ms(),
            keys: l.keys().clone(),
            claims: l.claims.clone(),
            idempotency: l.idempotency().clone(),
            owner: l.owner.as_deref().map(str::to_owned),
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
        // Names on both sides of the one-byte length, and owners that sort against them.
        let claims = [
            (ResourceId::lock("a"), "w"),
            (ResourceId::lock("a"), "w2"),
            (ResourceId::lock("ab"), ""),
            (ResourceId::lock("a".repeat(254)), "w"),
            (ResourceId::lock("a".repeat(255)), ""),
            (ResourceId::lock("a".repeat(255)), "w"),
            (ResourceId::lock("a".repeat(256)), ""),
            (ResourceId::lock("b".repeat(300)), "a"),
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
    fn a_claim_is_one_pointer_and_a_lease_with_one_claim_keeps_it_in_place() {
        assert_eq!(std::mem::size_of::<ClaimRef>(), 16);
        assert_eq!(std::mem::size_of::<SmallSet<ClaimRef>>(), 24);
        // Kind, one length byte, 11 bytes of name, one of owner: jemalloc's 16-byte class.
        assert_eq!(
            ClaimRef::new(&ResourceId::lock("held-123456"), "o").0.len(),
            14
        );
        // Names and owners with any UTF-8, empty ones, and a name that looks like a
        // header come back as they went in.
        let long = "n".repeat(254);
        let longer = "n".repeat(255);
        let longest = "\u{ff}".repeat(300);
        for (name, owner) in [
            ("", ""),
            ("é", "ü"),
            ("\u{0}\u{5}", "x"),
            ("a", ""),
            ("\u{ff}", "\u{ff}"),
            (long.as_str(), "o"),
            (longer.as_str(), "o"),
            (longest.as_str(), ""),
        ] {
            let resource = ResourceId::semaphore(name);
            let claim = ClaimRef::new(&resource, owner);
            assert_eq!(claim.resource(), resource);
            assert_eq!(claim.owner(), owner);
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
    fn a_lease_is_64_bytes_and_a_snapshot_with_a_ttl_it_cannot_hold_is_refused() {
        assert_eq!(std::mem::size_of::<Lease>(), 64);
        let mut lease = Lease::new(u32::MAX, Revision(3), None);
        lease.set_checkpoint_remaining_ms(Some(u64::from(u32::MAX) - 1));
        assert_eq!(
            lease.checkpoint_remaining_ms(),
            Some(u64::from(u32::MAX) - 1)
        );
        let back: Lease = bincode::DefaultOptions::new()
            .deserialize(&encode(&lease))
            .unwrap();
        assert_eq!(back, lease);
        let mut too_long = before(&lease);
        too_long.ttl_ms = TTL_MS_MAX + 1;
        let refused = bincode::DefaultOptions::new().deserialize::<Lease>(&encode(&too_long));
        assert!(refused.is_err());
        // A checkpoint at or beyond the TTL is a reset.
        let mut lease = Lease::new(10_000, Revision(3), None);
        for remaining in [10_000, u64::from(u32::MAX), u64::MAX] {
            lease.set_checkpoint_remaining_ms(Some(remaining));
            assert_eq!(lease.checkpoint_remaining_ms(), None);
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
