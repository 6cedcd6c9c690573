//! The key-value space: keys with create/mod revision, version and an optional lease.

use crate::ids::{LeaseId, Revision};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::ops::Bound;

/// A stored key as clients see it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyValue {
    /// The key.
    pub key: String,
    /// Its value.
    pub value: String,
    /// The revision that created it (since its last deletion).
    pub create_revision: Revision,
    /// The revision of its last change.
    pub mod_revision: Revision,
    /// Puts since creation, starting at 1.
    pub version: u64,
    /// The lease it is bound to (an ephemeral key), if any.
    pub lease: Option<LeaseId>,
}

/// A key's record without its name (the map key holds the name).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Record {
    pub(crate) value: String,
    pub(crate) create_revision: Revision,
    pub(crate) mod_revision: Revision,
    pub(crate) version: u64,
    pub(crate) lease: Option<LeaseId>,
    /// The principal that wrote it last (`None` without authentication).
    pub(crate) owner: Option<String>,
}

impl Record {
    pub(crate) fn to_key_value(&self, key: &str) -> KeyValue {
        KeyValue {
            key: key.to_owned(),
            value: self.value.clone(),
            create_revision: self.create_revision,
            mod_revision: self.mod_revision,
            version: self.version,
            lease: self.lease,
        }
    }
}

/// All keys, ordered by name so prefix ranges are O(log n + k).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Keyspace {
    pub(crate) records: BTreeMap<String, Record>,
}

impl Keyspace {
    pub(crate) fn get(&self, key: &str) -> Option<&Record> {
        self.records.get(key)
    }

    /// Keys starting with `prefix`, in order, from `start_after` (exclusive) if given.
    pub(crate) fn prefix_iter<'a>(
        &'a self,
        prefix: &'a str,
    ) -> impl Iterator<Item = (&'a String, &'a Record)> + 'a {
        self.records
            .range::<str, _>((Bound::Included(prefix), Bound::Unbounded))
            .take_while(move |(k, _)| k.starts_with(prefix))
    }

    /// Up to `limit` keys under `prefix`, and whether more remain.
    pub(crate) fn range(
        &self,
        prefix: &str,
        limit: usize,
        visible: impl Fn(&str) -> bool,
    ) -> (Vec<KeyValue>, bool) {
        let mut iter = self.prefix_iter(prefix).filter(|(k, _)| visible(k));
        let kvs: Vec<KeyValue> = iter
            .by_ref()
            .take(limit)
            .map(|(k, r)| r.to_key_value(k))
            .collect();
        let more = iter.next().is_some();
        (kvs, more)
    }

    /// Names of keys under `prefix` (for delete by prefix).
    pub(crate) fn names_under(&self, prefix: &str) -> Vec<String> {
        self.prefix_iter(prefix).map(|(k, _)| k.clone()).collect()
    }
}
