//! [`PackedMap`]: an ordered map that stays packed however its keys arrive. A Rust
//! `BTreeMap` splits a full leaf in the middle, so keys inserted in order (lease ids, and
//! lock names that count up) leave every leaf a little over half full: about twice the
//! memory of the entries themselves. This map keeps its entries in sorted runs of at most
//! [`PackedMap::RUN_MAX`], each a vector sized to its length, found through a B-tree keyed
//! by each run's first key: an entry costs its own bytes plus the allocator's rounding,
//! whatever the order of inserts (decision #115). Lookups are a B-tree search over the runs
//! and a binary search in one; an insert or removal moves at most one run's entries.
//! It encodes exactly as a `BTreeMap` does, so snapshots keep their format. Public so the
//! node's own per-lease tables (the lease clock, the lease records) can use it too.

use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde::ser::{Serialize, Serializer};
use std::borrow::Borrow;
use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;
use std::ops::Bound;

/// An ordered map of sorted runs; see the module documentation.
#[derive(Clone)]
pub struct PackedMap<K, V> {
    /// Runs in key order, each keyed by a key at or below its first entry's (so removing
    /// that entry needs no re-keying), every entry below the next run's key. Only the first
    /// and the last run may be empty.
    runs: BTreeMap<K, Vec<(K, V)>>,
    len: usize,
}

impl<K, V> Default for PackedMap<K, V> {
    fn default() -> Self {
        PackedMap {
            runs: BTreeMap::new(),
            len: 0,
        }
    }
}

impl<K: Ord + Clone, V> PackedMap<K, V> {
    /// Most entries in one run: about 2 KiB of them, between 8 and 128.
    pub const RUN_MAX: usize = {
        let size = std::mem::size_of::<(K, V)>();
        let n = match 2048usize.checked_div(size) {
            Some(n) => n,
            None => 128,
        };
        if n < 8 {
            8
        } else if n > 128 {
            128
        } else {
            n
        }
    };

    /// A run below this many entries is merged with a neighbour when they fit in one.
    const RUN_MIN: usize = Self::RUN_MAX / 4;

    /// The capacity kept for a run of `len` entries: as many as fit in the allocator's size
    /// class for `len` of them (at most a full run). Capacity then grows and shrinks a
    /// class at a time, so a map's runs come in a few block sizes, which the allocator
    /// reuses as runs grow, split and shrink, and no block has room the class rounding
    /// would waste (decision #120; quarters of a run of 48-byte entries, 528 bytes, took
    /// the 640-byte class).
    fn capacity_for(len: usize) -> usize {
        let size = std::mem::size_of::<(K, V)>();
        match size_class(len.saturating_mul(size)).checked_div(size) {
            Some(fit) => fit.min(Self::RUN_MAX).max(len),
            None => len,
        }
    }

    /// Makes room in `run` for one more entry, growing it by a class if it is full.
    fn room_for_one(run: &mut Vec<(K, V)>) {
        if run.len() == run.capacity() {
            let want = Self::capacity_for(run.len() + 1);
            run.reserve_exact(want - run.len());
        }
    }

    /// Gives back capacity `run` no longer needs once it is two classes or more above its
    /// length's: with one, an insert and a removal at a class's edge would grow and
    /// shrink it every time.
    fn trim(run: &mut Vec<(K, V)>) {
        let want = Self::capacity_for(run.len());
        if run.capacity() > Self::capacity_for(want + 1) {
            run.shrink_to(want);
        }
    }

    /// An empty map (allocates nothing).
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it has no entries.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The entry with the smallest key.
    pub fn first_key_value(&self) -> Option<(&K, &V)> {
        // Only the first run may be empty, so this looks at two runs at most.
        let (k, v) = self.runs.values().find_map(|run| run.first())?;
        Some((k, v))
    }

    /// Removes and returns the entry with the smallest key.
    pub fn pop_first(&mut self) -> Option<(K, V)> {
        let key = self.first_key_value()?.0.clone();
        let value = self.remove(&key)?;
        Some((key, value))
    }

    /// Keeps only the entries for which `keep` is true; rebuilds the runs, O(n).
    pub fn retain(&mut self, mut keep: impl FnMut(&K, &mut V) -> bool) {
        let runs = std::mem::take(&mut self.runs);
        let kept = runs
            .into_values()
            .flatten()
            .filter_map(|(k, mut v)| keep(&k, &mut v).then_some((k, v)));
        *self = Self::from_sorted(kept);
    }

    /// The run that holds `key` if anything does: the last run whose first key is not above it.
    fn run<Q: Ord + ?Sized>(&self, key: &Q) -> Option<&Vec<(K, V)>>
    where
        K: Borrow<Q>,
    {
        self.runs
            .range::<Q, _>((Bound::Unbounded, Bound::Included(key)))
            .next_back()
            .map(|(_, run)| run)
    }

    /// The value at `key` (or at a key that borrows as it).
    pub fn get<Q: Ord + ?Sized>(&self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
    {
        let run = self.run(key)?;
        let i = run.binary_search_by(|(k, _)| k.borrow().cmp(key)).ok()?;
        Some(&run[i].1)
    }

    /// The value at `key`, mutably.
    pub fn get_mut<Q: Ord + ?Sized>(&mut self, key: &Q) -> Option<&mut V>
    where
        K: Borrow<Q>,
    {
        let (_, run) = self
            .runs
            .range_mut::<Q, _>((Bound::Unbounded, Bound::Included(key)))
            .next_back()?;
        let i = run.binary_search_by(|(k, _)| k.borrow().cmp(key)).ok()?;
        Some(&mut run[i].1)
    }

    /// Whether `key` is present.
    pub fn contains_key<Q: Ord + ?Sized>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
    {
        self.get(key).is_some()
    }

    /// Applies `update` to the value at `key` (or at a key that borrows as it), made with
    /// `make()` and inserted first if there is none; returns what `update` returns.
    /// `owned` makes the key to insert, only when one is inserted. One search when the key
    /// is there or its run has room; a new value is updated before it goes in.
    pub fn update_or_insert_by<Q: Ord + ?Sized, R>(
        &mut self,
        key: &Q,
        owned: impl FnOnce(&Q) -> K,
        make: impl FnOnce() -> V,
        update: impl FnOnce(&mut V) -> R,
    ) -> R
    where
        K: Borrow<Q>,
    {
        if let Some((_, run)) = self
            .runs
            .range_mut::<Q, _>((Bound::Unbounded, Bound::Included(key)))
            .next_back()
        {
            match run.binary_search_by(|(k, _)| k.borrow().cmp(key)) {
                Ok(i) => return update(&mut run[i].1),
                Err(i) if run.len() < Self::RUN_MAX => {
                    let mut value = make();
                    let answer = update(&mut value);
                    Self::room_for_one(run);
                    run.insert(i, (owned(key), value));
                    self.len += 1;
                    return answer;
                }
                Err(_) => {}
            }
        }
        // Below every key, or its run is full: the general insert.
        let mut value = make();
        let answer = update(&mut value);
        self.insert(owned(key), value);
        answer
    }

    /// Inserts, returning the value `key` had.
    pub fn insert(&mut self, key: K, value: V) -> Option<V> {
        let beyond_last = self.runs.last_key_value().is_none_or(|(k, _)| *k <= key);
        let Some((_, run)) = self
            .runs
            .range_mut((Bound::Unbounded, Bound::Included(&key)))
            .next_back()
        else {
            // Below every key, or the map is empty.
            self.insert_first(key, value);
            return None;
        };
        let i = match run.binary_search_by(|(k, _)| k.cmp(&key)) {
            Ok(i) => return Some(std::mem::replace(&mut run[i].1, value)),
            Err(i) => i,
        };
        self.len += 1;
        if run.len() < Self::RUN_MAX {
            Self::room_for_one(run);
            run.insert(i, (key, value));
            return None;
        }
        if beyond_last && i == run.len() {
            // Appending to the whole map: a new run, so in-order inserts fill every run.
            self.runs.insert(key.clone(), vec![(key, value)]);
            return None;
        }
        // A full run: split it in two, insert on the side the key belongs to.
        let mid = run.len() / 2;
        let mut right = run.split_off(mid);
        run.shrink_to(Self::capacity_for(run.len()));
        if i <= mid {
            Self::room_for_one(run);
            run.insert(i, (key, value));
        } else {
            Self::room_for_one(&mut right);
            right.insert(i - mid, (key, value));
        }
        self.runs.insert(right[0].0.clone(), right);
        None
    }

    /// Inserts `key` below every key (or into an empty map).
    fn insert_first(&mut self, key: K, value: V) {
        self.len += 1;
        match self.runs.pop_first() {
            Some((first, run)) if run.len() >= Self::RUN_MAX => {
                self.runs.insert(first, run);
                self.runs.insert(key.clone(), vec![(key, value)]);
            }
            Some((_, mut run)) => {
                Self::room_for_one(&mut run);
                run.insert(0, (key.clone(), value));
                self.runs.insert(key, run);
            }
            None => {
                self.runs.insert(key.clone(), vec![(key, value)]);
            }
        }
    }

    /// Removes `key`, returning its value.
    pub fn remove<Q: Ord + ?Sized>(&mut self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
    {
        // Whether the key's run is the first or the last: one of those that empties keeps
        // its block, so a lock that comes and goes below or above every other costs no
        // allocation (one block of at most `RUN_MAX` entries at each end).
        let at_end = self
            .runs
            .keys()
            .nth(1)
            .is_none_or(|second| key < second.borrow())
            || self
                .runs
                .last_key_value()
                .is_some_and(|(last, _)| last.borrow() <= key);
        let (outer, run) = self
            .runs
            .range_mut::<Q, _>((Bound::Unbounded, Bound::Included(key)))
            .next_back()?;
        let i = run.binary_search_by(|(k, _)| k.borrow().cmp(key)).ok()?;
        let (_, value) = run.remove(i);
        self.len -= 1;
        // Looked at only when the run empties or just became small, so a run that stays
        // small (its neighbours full) costs nothing more per removal.
        if run.is_empty() && at_end {
            return Some(value);
        }
        if run.is_empty() || run.len() + 1 == Self::RUN_MIN {
            let outer = outer.clone();
            self.rebalance(&outer);
        } else {
            Self::trim(run);
        }
        Some(value)
    }

    /// Tidies the run keyed `outer` after it emptied or became small: an empty run is
    /// dropped unless it is the first or the last (a lock that comes and goes below or
    /// above every other then reuses it); a small one is merged with a neighbour it fits with.
    fn rebalance(&mut self, outer: &K) {
        let at_end = self.runs.first_key_value().is_some_and(|(k, _)| k == outer)
            || self.runs.last_key_value().is_some_and(|(k, _)| k == outer);
        let Some(len) = self.runs.get(outer).map(Vec::len) else {
            return;
        };
        if len == 0 {
            if !at_end {
                self.runs.remove(outer);
            }
            return;
        }
        let fits = |run: &Vec<(K, V)>| run.len() + len <= Self::RUN_MAX;
        let into_previous = self
            .runs
            .range((Bound::Unbounded, Bound::Excluded(outer)))
            .next_back()
            .is_some_and(|(_, previous)| fits(previous));
        let next = self
            .runs
            .range((Bound::Excluded(outer), Bound::Unbounded))
            .next()
            .filter(|(_, next)| fits(next))
            .map(|(k, _)| k.clone());
        if into_previous {
            let Some(run) = self.runs.remove(outer) else {
                return;
            };
            if let Some((_, previous)) = self
                .runs
                .range_mut((Bound::Unbounded, Bound::Excluded(outer)))
                .next_back()
            {
                previous.reserve_exact(run.len());
                previous.extend(run);
            }
        } else if let Some(next) = next.and_then(|k| self.runs.remove(&k)) {
            if let Some(run) = self.runs.get_mut(outer) {
                run.reserve_exact(next.len());
                run.extend(next);
            }
        } else if let Some(run) = self.runs.get_mut(outer) {
            Self::trim(run);
        }
    }

    /// Entries in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.runs
            .values()
            .flat_map(|run| run.iter().map(|(k, v)| (k, v)))
    }

    /// Keys in order.
    pub fn keys(&self) -> impl Iterator<Item = &K> {
        self.iter().map(|(k, _)| k)
    }

    /// Values in key order.
    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.iter().map(|(_, v)| v)
    }

    /// Entries in key order from `lower` on.
    pub fn range_from(&self, lower: Bound<K>) -> impl Iterator<Item = (&K, &V)> {
        let start = match &lower {
            Bound::Included(k) | Bound::Excluded(k) => self
                .runs
                .range((Bound::Unbounded, Bound::Included(k)))
                .next_back()
                .map(|(first, _)| first),
            Bound::Unbounded => None,
        };
        let runs = match start {
            Some(first) => self.runs.range((Bound::Included(first), Bound::Unbounded)),
            None => self.runs.range::<K, _>(..),
        };
        runs.flat_map(|(_, run)| run.iter().map(|(k, v)| (k, v)))
            .skip_while(move |(k, _)| match &lower {
                Bound::Included(l) => *k < l,
                Bound::Excluded(l) => *k <= l,
                Bound::Unbounded => false,
            })
    }

    /// Builds a map from entries in strictly increasing key order, every run full.
    fn from_sorted(entries: impl IntoIterator<Item = (K, V)>) -> Self {
        let mut map = Self::new();
        let mut run: Vec<(K, V)> = Vec::new();
        for entry in entries {
            if run.len() == Self::RUN_MAX {
                let full = std::mem::take(&mut run);
                map.runs.insert(full[0].0.clone(), full);
            }
            if run.is_empty() {
                run.reserve_exact(Self::RUN_MAX);
            }
            run.push(entry);
            map.len += 1;
        }
        if !run.is_empty() {
            Self::trim(&mut run);
            map.runs.insert(run[0].0.clone(), run);
        }
        map
    }
}

/// The block an allocation of `bytes` takes in jemalloc, the `baton` binary's allocator:
/// 16-byte steps up to 128 bytes, then four classes per doubling (160, 192, 224, 256,
/// 320, …). With another allocator it only decides how much spare room a run keeps.
fn size_class(bytes: usize) -> usize {
    if bytes <= 128 {
        return bytes.div_ceil(16).max(1) * 16;
    }
    // `bytes` is in (2^(lg-1), 2^lg]; the classes there are 2^(lg-3) apart.
    let lg = usize::BITS - (bytes - 1).leading_zeros();
    let step = 1usize << (lg - 3);
    bytes.div_ceil(step).saturating_mul(step)
}

impl<K: Ord + Clone, V> FromIterator<(K, V)> for PackedMap<K, V> {
    /// Like a `BTreeMap`: entries in any order, the last of equal keys wins.
    fn from_iter<I: IntoIterator<Item = (K, V)>>(entries: I) -> Self {
        let mut entries: Vec<(K, V)> = entries.into_iter().collect();
        let sorted = entries.windows(2).all(|w| w[0].0 < w[1].0);
        if !sorted {
            let tree: BTreeMap<K, V> = entries.into_iter().collect();
            entries = tree.into_iter().collect();
        }
        Self::from_sorted(entries)
    }
}

impl<K: Ord + Clone, V: PartialEq> PartialEq for PackedMap<K, V> {
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len && self.iter().eq(other.iter())
    }
}

impl<K: Ord + Clone, V: Eq> Eq for PackedMap<K, V> {}

impl<K: Ord + Clone + fmt::Debug, V: fmt::Debug> fmt::Debug for PackedMap<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl<K: Ord + Clone + Serialize, V: Serialize> Serialize for PackedMap<K, V> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        // The length first, as bincode needs: the runs' iterator does not know it.
        let mut map = serializer.serialize_map(Some(self.len))?;
        for (k, v) in self.iter() {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

impl<'de, K, V> Deserialize<'de> for PackedMap<K, V>
where
    K: Ord + Clone + Deserialize<'de>,
    V: Deserialize<'de>,
{
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(PackedVisitor(PhantomData))
    }
}

/// Reads a serde map straight into full runs.
struct PackedVisitor<K, V>(PhantomData<(K, V)>);

impl<'de, K, V> Visitor<'de> for PackedVisitor<K, V>
where
    K: Ord + Clone + Deserialize<'de>,
    V: Deserialize<'de>,
{
    type Value = PackedMap<K, V>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a map")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Self::Value, A::Error> {
        // Snapshots list entries in key order; anything else is sorted as a B-tree would.
        let mut entries = Vec::with_capacity(access.size_hint().unwrap_or(0).min(1 << 16));
        while let Some(entry) = access.next_entry()? {
            entries.push(entry);
        }
        Ok(entries.into_iter().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_keeps_what_its_allocator_class_holds() {
        // jemalloc's classes around a run's sizes.
        for (bytes, class) in [(1, 16), (100, 112), (129, 160), (528, 640), (1_008, 1_024)] {
            assert_eq!(size_class(bytes), class, "{bytes}");
        }
        assert_eq!(size_class(1_056), 1_280);
        assert_eq!(size_class(2_016), 2_048);
        // 48-byte entries: 11 of them fill 528 bytes of a 640-byte block, so 13 are kept.
        type Map = PackedMap<[u64; 3], [u64; 3]>;
        assert_eq!(Map::capacity_for(11), 13);
        assert_eq!(Map::capacity_for(Map::RUN_MAX), Map::RUN_MAX);
        assert!((1..=Map::RUN_MAX).all(|n| Map::capacity_for(n) >= n));
    }
    use proptest::prelude::*;

    /// Every structural promise: entries sorted within and across runs, each run keyed at
    /// or below its first entry and its entries below the next run's key, none beyond the
    /// maximum, only the first and last empty, the length right.
    fn check<K: Ord + Clone + fmt::Debug, V>(map: &PackedMap<K, V>) {
        let mut previous: Option<&K> = None;
        let mut len = 0;
        let runs: Vec<_> = map.runs.iter().collect();
        for (n, (outer, run)) in runs.iter().enumerate() {
            let at_end = n == 0 || n + 1 == runs.len();
            assert!(at_end || !run.is_empty(), "empty run inside");
            assert!(run.len() <= PackedMap::<K, V>::RUN_MAX, "run too long");
            if let Some((next, _)) = runs.get(n + 1) {
                assert!(
                    run.iter().all(|(k, _)| k < *next),
                    "entry beyond the next run"
                );
            }
            for (k, _) in run.iter() {
                assert!(*outer <= k, "run keyed above its entry {k:?}");
                assert!(previous.is_none_or(|p| p < k), "out of order at {k:?}");
                previous = Some(k);
            }
            len += run.len();
        }
        assert_eq!(len, map.len());
    }

    #[derive(Clone, Debug)]
    enum Op {
        Insert(u16, u32),
        Remove(u16),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0u16..600, any::<u32>()).prop_map(|(k, v)| Op::Insert(k, v)),
            (0u16..600).prop_map(Op::Remove),
        ]
    }

    /// Applies `ops` to a packed map and a B-tree with values `wide(v)`, and compares
    /// everything: results, lookups, ranges, encoding and decoding.
    fn exercise<V>(ops: Vec<Op>, wide: fn(u32) -> V) -> Result<(), TestCaseError>
    where
        V: Clone + PartialEq + fmt::Debug + Serialize + serde::de::DeserializeOwned,
    {
        let mut packed: PackedMap<u16, V> = PackedMap::new();
        let mut model: BTreeMap<u16, V> = BTreeMap::new();
        for op in ops {
            match op {
                Op::Insert(k, v) => {
                    prop_assert_eq!(packed.insert(k, wide(v)), model.insert(k, wide(v)))
                }
                Op::Remove(k) => prop_assert_eq!(packed.remove(&k), model.remove(&k)),
            }
            prop_assert_eq!(packed.len(), model.len());
        }
        check(&packed);
        prop_assert!(packed.iter().eq(model.iter()));
        for k in 0..600u16 {
            prop_assert_eq!(packed.get(&k), model.get(&k));
            let from: Vec<_> = packed.range_from(Bound::Included(k)).collect();
            let want: Vec<_> = model.range(k..).collect();
            prop_assert_eq!(from, want);
            let after: Vec<_> = packed.range_from(Bound::Excluded(k)).collect();
            let want: Vec<_> = model
                .range((Bound::Excluded(k), Bound::Unbounded))
                .collect();
            prop_assert_eq!(after, want);
        }
        let bytes = bincode::serialize(&packed).expect("encode");
        prop_assert_eq!(&bytes, &bincode::serialize(&model).expect("encode"));
        let back: PackedMap<u16, V> = bincode::deserialize(&bytes).expect("decode");
        check(&back);
        prop_assert!(back == packed);
        Ok(())
    }

    proptest! {
        #[test]
        fn behaves_like_a_btree_map(ops in proptest::collection::vec(op(), 0..2000)) {
            // Runs of 128 entries.
            exercise(ops, |v| v)?;
        }

        #[test]
        fn behaves_like_a_btree_map_with_short_runs(ops in proptest::collection::vec(op(), 0..2000)) {
            // 200-byte values: runs of 9, so splits and merges happen all the time.
            prop_assert_eq!(PackedMap::<u16, [u64; 25]>::RUN_MAX, 9);
            exercise(ops, |v| [u64::from(v); 25])?;
        }
    }

    #[test]
    fn in_order_inserts_fill_every_run_but_the_last() {
        let mut map: PackedMap<u64, u64> = PackedMap::new();
        let n = PackedMap::<u64, u64>::RUN_MAX * 10 + 3;
        for k in 0..n as u64 {
            map.insert(k, k);
        }
        check(&map);
        assert_eq!(map.runs.len(), 11);
        let full = map
            .runs
            .values()
            .filter(|r| r.len() == PackedMap::<u64, u64>::RUN_MAX);
        assert_eq!(full.count(), 10);
    }

    #[test]
    fn removing_most_entries_merges_small_runs() {
        let mut map: PackedMap<u64, u64> = (0..10_000u64).map(|k| (k, k)).collect();
        for k in 0..10_000u64 {
            if k % 10 != 0 {
                map.remove(&k);
            }
        }
        check(&map);
        assert_eq!(map.len(), 1_000);
        // 1 000 entries in runs of at most RUN_MAX, none below RUN_MIN next to one it
        // would fit with: far fewer runs than the 79 the full map had.
        let runs = map.runs.len();
        assert!(
            runs * PackedMap::<u64, u64>::RUN_MIN <= 2 * map.len(),
            "{runs} runs"
        );
    }

    #[test]
    fn a_shared_bound_starts_inside_a_run() {
        let map: PackedMap<u64, u64> = (0..1_000u64).map(|k| (k * 2, k)).collect();
        let first = map.range_from(Bound::Included(501)).next();
        assert_eq!(first, Some((&502, &251)));
        let first = map.range_from(Bound::Excluded(502)).next();
        assert_eq!(first, Some((&504, &252)));
        assert_eq!(map.range_from(Bound::Excluded(1_998)).next(), None);
    }
}
