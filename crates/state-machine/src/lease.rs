//! Leases: a TTL and everything the lease owns, so its end touches only that.

use crate::ids::{LeaseId, Revision};
use crate::resource::ResourceId;
use crate::small::SmallSet;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// A claim (hold or queue entry) a lease owns on a resource.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub(crate) struct ClaimRef {
    pub(crate) resource: ResourceId,
    pub(crate) owner: String,
}

/// A live lease.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Lease {
    pub(crate) ttl_ms: u64,
    pub(crate) granted: Revision,
    /// Remaining TTL at the last checkpoint the leader proposed; `None` means the full TTL.
    pub(crate) checkpoint_remaining_ms: Option<u64>,
    /// Ephemeral keys.
    pub(crate) keys: BTreeSet<String>,
    /// Holds and queue entries.
    pub(crate) claims: SmallSet<ClaimRef>,
    /// Idempotency outcomes this lease owns: sequence number → key.
    pub(crate) idempotency: BTreeMap<u64, String>,
    /// The principal that granted it (`None`: granted without authentication).
    pub(crate) owner: Option<String>,
}

impl Lease {
    pub(crate) fn new(ttl_ms: u64, granted: Revision, owner: Option<String>) -> Lease {
        Lease {
            ttl_ms,
            granted,
            checkpoint_remaining_ms: None,
            keys: BTreeSet::new(),
            claims: SmallSet::new(),
            idempotency: BTreeMap::new(),
            owner,
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
