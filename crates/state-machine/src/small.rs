//! Ordered maps and sets that stay small when they are small. Most locks have one holder
//! and most leases one claim, and a `BTreeMap` allocates a whole node (room for eleven
//! entries) for its first one: about 1 KiB per held lock. These keep a single entry in
//! place, without an allocation of its own, up to [`INLINE_MAX`] entries in a sorted `Vec`
//! sized to fit, and move to a B-tree beyond that, so a semaphore with thousands of
//! holders stays O(log n) per change. They encode exactly as
//! `BTreeMap` and `BTreeSet` do (a serde map or sequence in key order), so snapshots keep
//! their format.

use serde::de::{Deserialize, Deserializer};
use serde::ser::{Serialize, Serializer};
use std::collections::{BTreeMap, BTreeSet, btree_map};
use std::fmt;

/// Most entries kept in the sorted vector before it becomes a B-tree.
pub(crate) const INLINE_MAX: usize = 8;

/// An ordered map: a sorted vector up to [`INLINE_MAX`] entries, a B-tree beyond.
#[derive(Clone)]
pub(crate) enum SmallMap<K, V> {
    /// Exactly one entry, in place: the usual case, and a heap block less than a vector
    /// of one (decision #112).
    One((K, V)),
    /// None, or two up to `INLINE_MAX`: sorted by key, no duplicate keys, capacity equal
    /// to length.
    Inline(Vec<(K, V)>),
    /// More than `INLINE_MAX / 2` entries once grown past `INLINE_MAX`. Boxed, so the
    /// other two forms fit beside the vector's spare bits: a map of one 16-byte key is
    /// 24 bytes, where an unboxed tree made it 32 (decision #119). The extra block is
    /// paid only by the rare map of more than `INLINE_MAX` entries.
    #[allow(clippy::box_collection)]
    Tree(Box<BTreeMap<K, V>>),
}

impl<K: Ord, V> Default for SmallMap<K, V> {
    fn default() -> Self {
        SmallMap::Inline(Vec::new())
    }
}

impl<K: Ord, V> SmallMap<K, V> {
    /// An empty map (allocates nothing).
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// The value at `key`.
    pub(crate) fn get(&self, key: &K) -> Option<&V> {
        match self {
            SmallMap::One((k, v)) => (k == key).then_some(v),
            SmallMap::Inline(v) => v
                .binary_search_by(|(k, _)| k.cmp(key))
                .ok()
                .map(|i| &v[i].1),
            SmallMap::Tree(t) => t.get(key),
        }
    }

    /// The value at `key`, mutably.
    pub(crate) fn get_mut(&mut self, key: &K) -> Option<&mut V> {
        match self {
            SmallMap::One((k, v)) => (k == key).then_some(v),
            SmallMap::Inline(v) => match v.binary_search_by(|(k, _)| k.cmp(key)) {
                Ok(i) => Some(&mut v[i].1),
                Err(_) => None,
            },
            SmallMap::Tree(t) => t.get_mut(key),
        }
    }

    /// Whether `key` is present.
    pub(crate) fn contains_key(&self, key: &K) -> bool {
        self.get(key).is_some()
    }

    /// Inserts, returning the value `key` had.
    pub(crate) fn insert(&mut self, key: K, value: V) -> Option<V> {
        match self {
            SmallMap::One((k, v)) if *k == key => Some(std::mem::replace(v, value)),
            SmallMap::One(_) => {
                if let SmallMap::One(first) = std::mem::take(self) {
                    *self = SmallMap::Inline(if first.0 < key {
                        vec![first, (key, value)]
                    } else {
                        vec![(key, value), first]
                    });
                }
                None
            }
            SmallMap::Inline(v) if v.is_empty() => {
                *self = SmallMap::One((key, value));
                None
            }
            SmallMap::Inline(v) => match v.binary_search_by(|(k, _)| k.cmp(&key)) {
                Ok(i) => Some(std::mem::replace(&mut v[i].1, value)),
                Err(i) if v.len() < INLINE_MAX => {
                    v.reserve_exact(1);
                    v.insert(i, (key, value));
                    None
                }
                Err(_) => {
                    let mut tree: BTreeMap<K, V> = std::mem::take(v).into_iter().collect();
                    tree.insert(key, value);
                    *self = SmallMap::Tree(Box::new(tree));
                    None
                }
            },
            SmallMap::Tree(t) => t.insert(key, value),
        }
    }

    /// Removes `key`, returning its value.
    pub(crate) fn remove(&mut self, key: &K) -> Option<V> {
        match self {
            SmallMap::One((k, _)) if k == key => match std::mem::take(self) {
                SmallMap::One((_, value)) => Some(value),
                _ => None,
            },
            SmallMap::One(_) => None,
            SmallMap::Inline(v) => {
                let i = v.binary_search_by(|(k, _)| k.cmp(key)).ok()?;
                let (_, value) = v.remove(i);
                if v.len() == 1 {
                    if let Some(last) = v.pop() {
                        *self = SmallMap::One(last);
                    }
                } else {
                    v.shrink_to_fit();
                }
                Some(value)
            }
            SmallMap::Tree(t) => {
                let value = t.remove(key)?;
                if t.len() <= INLINE_MAX / 2 {
                    let entries: Vec<(K, V)> = std::mem::take(&mut **t).into_iter().collect();
                    *self = SmallMap::Inline(entries);
                }
                Some(value)
            }
        }
    }

    /// Number of entries.
    pub(crate) fn len(&self) -> usize {
        match self {
            SmallMap::One(_) => 1,
            SmallMap::Inline(v) => v.len(),
            SmallMap::Tree(t) => t.len(),
        }
    }

    /// Whether there are none.
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Entries in key order.
    pub(crate) fn iter(&self) -> Iter<'_, K, V> {
        match self {
            SmallMap::One(pair) => Iter::Inline(std::slice::from_ref(pair).iter()),
            SmallMap::Inline(v) => Iter::Inline(v.iter()),
            SmallMap::Tree(t) => Iter::Tree(t.iter()),
        }
    }

    /// Keys in order.
    pub(crate) fn keys(&self) -> impl Iterator<Item = &K> {
        self.iter().map(|(k, _)| k)
    }

    /// Values in key order.
    pub(crate) fn values(&self) -> impl Iterator<Item = &V> {
        self.iter().map(|(_, v)| v)
    }
}

/// Borrowing iterator of a [`SmallMap`], in key order.
pub(crate) enum Iter<'a, K, V> {
    /// Over the one entry or the sorted vector.
    Inline(std::slice::Iter<'a, (K, V)>),
    /// Over the B-tree.
    Tree(btree_map::Iter<'a, K, V>),
}

impl<'a, K, V> Iterator for Iter<'a, K, V> {
    type Item = (&'a K, &'a V);

    fn next(&mut self) -> Option<Self::Item> {
        match self {
            Iter::Inline(i) => i.next().map(|(k, v)| (k, v)),
            Iter::Tree(i) => i.next(),
        }
    }

    // Exact: serde's `collect_map` and `collect_seq` need the length up front (bincode).
    fn size_hint(&self) -> (usize, Option<usize>) {
        match self {
            Iter::Inline(i) => i.size_hint(),
            Iter::Tree(i) => i.size_hint(),
        }
    }
}

impl<K, V> ExactSizeIterator for Iter<'_, K, V> {}

impl<'a, K: Ord, V> IntoIterator for &'a SmallMap<K, V> {
    type Item = (&'a K, &'a V);
    type IntoIter = Iter<'a, K, V>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl<K: Ord, V> From<BTreeMap<K, V>> for SmallMap<K, V> {
    fn from(tree: BTreeMap<K, V>) -> Self {
        if tree.len() == 1 {
            let mut entries = tree.into_iter();
            match entries.next() {
                Some(pair) => SmallMap::One(pair),
                None => SmallMap::new(),
            }
        } else if tree.len() <= INLINE_MAX {
            SmallMap::Inline(tree.into_iter().collect())
        } else {
            SmallMap::Tree(Box::new(tree))
        }
    }
}

impl<K: Ord, V: PartialEq> PartialEq for SmallMap<K, V> {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl<K: Ord, V: Eq> Eq for SmallMap<K, V> {}

impl<K: Ord + fmt::Debug, V: fmt::Debug> fmt::Debug for SmallMap<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl<K: Ord + Serialize, V: Serialize> Serialize for SmallMap<K, V> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.iter())
    }
}

impl<'de, K: Ord + Deserialize<'de>, V: Deserialize<'de>> Deserialize<'de> for SmallMap<K, V> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        BTreeMap::deserialize(deserializer).map(SmallMap::from)
    }
}

/// An ordered set on a [`SmallMap`].
#[derive(Clone)]
pub(crate) struct SmallSet<K>(SmallMap<K, ()>);

impl<K: Ord> PartialEq for SmallSet<K> {
    fn eq(&self, other: &Self) -> bool {
        self.0 == other.0
    }
}

impl<K: Ord> Eq for SmallSet<K> {}

impl<K: Ord> Default for SmallSet<K> {
    fn default() -> Self {
        SmallSet(SmallMap::new())
    }
}

impl<K: Ord> SmallSet<K> {
    /// An empty set (allocates nothing).
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Whether `key` is in the set.
    pub(crate) fn contains(&self, key: &K) -> bool {
        self.0.contains_key(key)
    }

    /// Adds `key`; true if it was not there.
    pub(crate) fn insert(&mut self, key: K) -> bool {
        self.0.insert(key, ()).is_none()
    }

    /// Removes `key`; true if it was there.
    pub(crate) fn remove(&mut self, key: &K) -> bool {
        self.0.remove(key).is_some()
    }

    /// Elements in order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &K> {
        self.0.keys()
    }

    /// The elements in order, taking the set.
    pub(crate) fn into_sorted_vec(self) -> Vec<K> {
        match self.0 {
            SmallMap::One((k, ())) => vec![k],
            SmallMap::Inline(v) => v.into_iter().map(|(k, ())| k).collect(),
            SmallMap::Tree(t) => (*t).into_keys().collect(),
        }
    }
}

impl<'a, K: Ord> IntoIterator for &'a SmallSet<K> {
    type Item = &'a K;
    type IntoIter = std::iter::Map<Iter<'a, K, ()>, fn((&'a K, &'a ())) -> &'a K>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter().map(|(k, ())| k)
    }
}

impl<K: Ord + fmt::Debug> fmt::Debug for SmallSet<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

impl<K: Ord + Serialize> Serialize for SmallSet<K> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.iter())
    }
}

impl<'de, K: Ord + Deserialize<'de>> Deserialize<'de> for SmallSet<K> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let set = BTreeSet::deserialize(deserializer)?;
        let map: BTreeMap<K, ()> = set.into_iter().map(|k| (k, ())).collect();
        Ok(SmallSet(SmallMap::from(map)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Any sequence of inserts and removes leaves the same contents, order and encoding
        /// as a `BTreeMap` given the same sequence.
        #[test]
        fn behaves_and_encodes_like_a_btree_map(ops in prop::collection::vec((any::<bool>(), 0u8..40, any::<u16>()), 0..200)) {
            let mut small = SmallMap::new();
            let mut tree = BTreeMap::new();
            for (insert, key, value) in ops {
                if insert {
                    prop_assert_eq!(small.insert(key, value), tree.insert(key, value));
                } else {
                    prop_assert_eq!(small.remove(&key), tree.remove(&key));
                }
                prop_assert_eq!(small.len(), tree.len());
                prop_assert!(small.iter().eq(tree.iter()));
                prop_assert_eq!(small.get(&key), tree.get(&key));
            }
            let encoded = bincode::serialize(&small).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(&encoded, &bincode::serialize(&tree).map_err(|e| TestCaseError::fail(e.to_string()))?);
            let decoded: SmallMap<u8, u16> = bincode::deserialize(&encoded).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(decoded, small);
        }
    }

    #[test]
    fn a_set_encodes_like_a_btree_set_and_one_element_costs_one_slot() {
        let mut set = SmallSet::new();
        for k in [5u32, 1, 9, 1] {
            set.insert(k);
        }
        let tree: BTreeSet<u32> = [1, 5, 9].into();
        assert_eq!(
            bincode::serialize(&set).unwrap(),
            bincode::serialize(&tree).unwrap()
        );
        assert!(set.remove(&5) && !set.remove(&5));
        assert_eq!(set.into_sorted_vec(), vec![1, 9]);
        let mut map = SmallMap::new();
        map.insert(1u64, [0u8; 100]);
        assert!(
            matches!(map, SmallMap::One(_)),
            "one entry is kept in place"
        );
        map.insert(0, [1; 100]);
        match &map {
            SmallMap::Inline(v) => assert_eq!(v.capacity(), 2, "sized to fit"),
            _ => panic!("two entries are a vector"),
        }
        map.remove(&0);
        assert!(
            matches!(map, SmallMap::One(_)),
            "back to one entry in place"
        );
        map.remove(&1);
        assert!(map.is_empty());
    }
}
