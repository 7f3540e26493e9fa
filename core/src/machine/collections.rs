//! Small collections the view keeps: a multiset, and sorted-vector sets and maps (a job has a
//! few instances and servers, and a B-tree node holds room for eleven).

use std::collections::BTreeMap;

/// A multiset: each value with how many times it is held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Counted<T>(BTreeMap<T, usize>);

impl<T> Default for Counted<T> {
    fn default() -> Self {
        Self(BTreeMap::new())
    }
}

impl<T: Ord> Counted<T> {
    /// Holds `new` instead of `old` (either may be none).
    pub fn replace(&mut self, old: Option<T>, new: Option<T>) {
        if let Some(old) = old {
            if let Some(n) = self.0.get_mut(&old) {
                *n -= 1;
                if *n == 0 {
                    self.0.remove(&old);
                }
            }
        }
        if let Some(new) = new {
            *self.0.entry(new).or_insert(0) += 1;
        }
    }

    /// The largest value held.
    pub fn max(&self) -> Option<&T> {
        self.0.keys().next_back()
    }
}

/// A small ordered set kept as a sorted vector: a job has a few instances, and a B-tree node
/// holds room for eleven.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct VecSet<T>(Vec<T>);

impl<T> Default for VecSet<T> {
    fn default() -> Self {
        Self(Vec::new())
    }
}

impl<T: Ord> VecSet<T> {
    /// Whether `x` is in the set.
    pub fn contains(&self, x: &T) -> bool {
        self.0.binary_search(x).is_ok()
    }

    /// Adds `x`; whether it was not there.
    pub fn insert(&mut self, x: T) -> bool {
        match self.0.binary_search(&x) {
            Ok(_) => false,
            Err(at) => {
                self.0.insert(at, x);
                true
            }
        }
    }

    /// Removes `x`; whether it was there.
    pub fn remove(&mut self, x: &T) -> bool {
        match self.0.binary_search(x) {
            Ok(at) => {
                self.0.remove(at);
                true
            }
            Err(_) => false,
        }
    }

    /// The elements in ascending order.
    pub fn iter(&self) -> std::slice::Iter<'_, T> {
        self.0.iter()
    }

    /// Whether the set has no element.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// A small ordered map kept as a vector sorted by key: a job has a few servers, and a B-tree
/// node holds room for eleven entries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct VecMap<K, V>(Vec<(K, V)>);

impl<K, V> Default for VecMap<K, V> {
    fn default() -> Self {
        Self(Vec::new())
    }
}

impl<K: Ord, V> VecMap<K, V> {
    pub(crate) fn find<Q: Ord + ?Sized>(&self, key: &Q) -> Result<usize, usize>
    where
        K: std::borrow::Borrow<Q>,
    {
        self.0.binary_search_by(|(k, _)| k.borrow().cmp(key))
    }

    /// The value of `key`.
    pub fn get<Q: Ord + ?Sized>(&self, key: &Q) -> Option<&V>
    where
        K: std::borrow::Borrow<Q>,
    {
        self.find(key).ok().map(|at| &self.0[at].1)
    }

    /// Whether `key` has a value.
    pub fn contains_key<Q: Ord + ?Sized>(&self, key: &Q) -> bool
    where
        K: std::borrow::Borrow<Q>,
    {
        self.find(key).is_ok()
    }

    /// Sets `key`'s value; returns the old one.
    pub fn insert(&mut self, key: K, value: V) -> Option<V> {
        match self.find(&key) {
            Ok(at) => Some(std::mem::replace(&mut self.0[at].1, value)),
            Err(at) => {
                self.0.insert(at, (key, value));
                None
            }
        }
    }

    /// Removes `key`; returns its value.
    pub fn remove<Q: Ord + ?Sized>(&mut self, key: &Q) -> Option<V>
    where
        K: std::borrow::Borrow<Q>,
    {
        self.find(key).ok().map(|at| self.0.remove(at).1)
    }
}

/// The entries in ascending key order.
impl<'a, K: Ord, V> IntoIterator for &'a VecMap<K, V> {
    type Item = (&'a K, &'a V);
    type IntoIter = std::iter::Map<std::slice::Iter<'a, (K, V)>, fn(&'a (K, V)) -> (&'a K, &'a V)>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter().map(|(k, v)| (k, v))
    }
}
