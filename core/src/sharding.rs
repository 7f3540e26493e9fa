//! Sharding: ElasticJob's three built-in strategies, bit-exact, and the trait for custom ones.
//!
//! When a job must be re-sharded, the leader takes the live instances whose server is enabled,
//! puts them in [`registry_order`] (the order ElasticJob's ZooKeeper provider lists
//! `instances/*` in), and hands them to the job's strategy together with the job name and
//! `shardingTotalCount`. The [`Assignment`] that comes back says which instance owns which item;
//! it is what gets written to `sharding/{item}/instance`.
//!
//! The built-in strategies ([`BuiltinStrategy`]) reproduce ElasticJob's `AVG_ALLOCATION`,
//! `ODEVITY` and `ROUND_ROBIN` exactly, including Java's `String.hashCode` ([`java_string_hash`]),
//! `Math.abs` and `%`, so that a shardjob cluster and an ElasticJob cluster given the same
//! instances assign the same items to the same instances. Everything here is a pure function.
//!
//! ```
//! use shardjob_core::InstanceId;
//! use shardjob_core::sharding::{BuiltinStrategy, ShardingStrategy, registry_order};
//!
//! let live = ["192.168.1.10@-@150", "192.168.1.9@-@100", "192.168.1.10@-@200"]
//!     .map(|id| InstanceId::new(id).unwrap());
//! let candidates = registry_order(live);
//! assert_eq!(candidates[0].as_str(), "192.168.1.9@-@100");
//! let assignment = BuiltinStrategy::AverageAllocation.shard(&candidates, "my_job", 4);
//! assert_eq!(assignment.items_of(&candidates[0]), &[0, 3]);
//! assert_eq!(assignment.owner_of(2), Some(&candidates[2]));
//! ```

use std::cmp::Ordering;
use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

use serde::ser::SerializeMap;
use serde::{Deserialize, Serialize, Serializer};

use crate::instance::InstanceId;

/// Java's `String.hashCode()`: `h = 31 * h + unit` over the string's UTF-16 code units, with
/// wrapping `i32` arithmetic, starting from 0.
///
/// A character outside the Basic Multilingual Plane counts as its two surrogate units, as in
/// Java. `java_string_hash("1") == 49`, `java_string_hash("polygenelubricants") == i32::MIN`.
pub fn java_string_hash(s: &str) -> i32 {
    s.encode_utf16().fold(0i32, |h, unit| {
        h.wrapping_mul(31).wrapping_add(i32::from(unit))
    })
}

/// Java's `String.compareTo`: lexicographic order of UTF-16 code units (a prefix sorts first).
///
/// This differs from Rust's `str` order (bytes, equivalently code points) only when one string
/// has a character above U+FFFF where the other has one in U+E000..=U+FFFF at the same place:
/// Java puts the supplementary character first (its high surrogate U+D800..=U+DBFF is smaller),
/// Rust puts it last.
pub fn java_string_cmp(a: &str, b: &str) -> Ordering {
    a.encode_utf16().cmp(b.encode_utf16())
}

/// Puts instances in the candidate order ElasticJob's ZooKeeper provider produces: the children
/// of `instances/` sorted in **reverse** Java string order ([`java_string_cmp`]) of the whole id,
/// duplicates removed.
///
/// This is string order, not numeric IP order: `192.168.1.9@-@100` comes before
/// `192.168.1.10@-@200`, which comes before `192.168.1.10@-@150`. Strategies receive their
/// candidates in this order.
pub fn registry_order(instances: impl IntoIterator<Item = InstanceId>) -> Vec<InstanceId> {
    let mut ids: Vec<InstanceId> = instances.into_iter().collect();
    ids.sort_by(|a, b| java_string_cmp(b.as_str(), a.as_str()));
    // UTF-16 encoding is injective, so equal ids are adjacent after the sort.
    ids.dedup();
    ids
}

/// The result of a sharding strategy: for each candidate instance, in the order the strategy
/// produced them, the items it owns, in the order the strategy produced them.
///
/// Every candidate of a built-in strategy is present, also when it gets no item. The order is
/// kept (ElasticJob returns a `LinkedHashMap`) and shows in [`Assignment::iter`] and in the
/// serialized form, a map `{"instance id": [items]}`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Assignment {
    entries: Vec<(InstanceId, Vec<u32>)>,
}

impl Assignment {
    /// Builds an assignment from `(instance, items)` pairs, keeping their order.
    ///
    /// If an instance appears more than once, it keeps its first position and the items of its
    /// later entries are appended to its list, so that no item is lost and every instance appears
    /// once.
    pub fn from_pairs(pairs: Vec<(InstanceId, Vec<u32>)>) -> Self {
        let mut entries: Vec<(InstanceId, Vec<u32>)> = Vec::with_capacity(pairs.len());
        let mut seen: BTreeSet<InstanceId> = BTreeSet::new();
        for (id, items) in pairs {
            if seen.contains(&id) {
                if let Some((_, existing)) = entries.iter_mut().find(|(known, _)| *known == id) {
                    existing.extend(items);
                }
            } else {
                seen.insert(id.clone());
                entries.push((id, items));
            }
        }
        Self { entries }
    }

    /// The `(instance, items)` pairs, in order.
    pub fn into_pairs(self) -> Vec<(InstanceId, Vec<u32>)> {
        self.entries
    }

    /// The instances and their items, in the order the strategy produced them.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&InstanceId, &[u32])> + '_ {
        self.entries
            .iter()
            .map(|(id, items)| (id, items.as_slice()))
    }

    /// The items of `instance`; empty if it has none or is not in the assignment.
    pub fn items_of(&self, instance: &InstanceId) -> &[u32] {
        self.entries
            .iter()
            .find(|(id, _)| id == instance)
            .map_or(&[], |(_, items)| items.as_slice())
    }

    /// The instance that owns `item`, if any. If a (custom) strategy gave an item to several
    /// instances, this is the first of them.
    pub fn owner_of(&self, item: u32) -> Option<&InstanceId> {
        self.entries
            .iter()
            .find(|(_, items)| items.contains(&item))
            .map(|(id, _)| id)
    }

    /// The owner of every item `0..total`, by item: [`Assignment::owner_of`] of each, in one
    /// pass over the assignment (`owner_of` searches the lists, which costs the whole
    /// assignment per item). Items beyond `total` are left out.
    pub fn owners(&self, total: u32) -> Vec<Option<&InstanceId>> {
        let mut owners: Vec<Option<&InstanceId>> = vec![None; total as usize];
        for (id, items) in &self.entries {
            for &item in items {
                // The first instance to list an item owns it, as in `owner_of`.
                if let Some(slot @ None) = owners.get_mut(item as usize) {
                    *slot = Some(id);
                }
            }
        }
        owners
    }

    /// The number of instances (including those without items).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there is no instance at all (the strategy had no candidate).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The number of items over all instances.
    pub fn total_items(&self) -> usize {
        self.entries.iter().map(|(_, items)| items.len()).sum()
    }

    /// Whether every item `0..total` is assigned exactly once and no other item is assigned:
    /// the contract of [`ShardingStrategy::shard`] for a non-empty candidate list. Use it to check
    /// the result of a custom strategy before writing it.
    pub fn covers_exactly(&self, total: u32) -> bool {
        // Checking the count first bounds the allocation below by the items actually present.
        if u64::try_from(self.total_items()).ok() != Some(u64::from(total)) {
            return false;
        }
        let mut seen = vec![false; self.total_items()];
        for (_, items) in &self.entries {
            for &item in items {
                let Some(slot) = usize::try_from(item).ok().and_then(|i| seen.get_mut(i)) else {
                    return false;
                };
                if *slot {
                    return false;
                }
                *slot = true;
            }
        }
        true
    }
}

impl Serialize for Assignment {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.entries.len()))?;
        for (id, items) in &self.entries {
            map.serialize_entry(id, items)?;
        }
        map.end()
    }
}

/// A sharding strategy: decides which instance runs which item of a job.
///
/// Implement it for a custom strategy. The contract, which the built-in strategies keep:
///
/// - `candidates` are the live instances whose server is enabled, in [`registry_order`]
///   (reverse Java string order of the id), without duplicates.
/// - If `candidates` is empty, the result is empty.
/// - Otherwise every item `0..total` is assigned to exactly one candidate and no other item is
///   assigned ([`Assignment::covers_exactly`]); every instance in the result is a candidate.
///   Built-in strategies also list every candidate, with an empty list if it gets nothing.
/// - The result depends only on the arguments: same input, same output, on every instance and
///   every run. No clock, no randomness, no IO.
pub trait ShardingStrategy: Send + Sync + fmt::Debug {
    /// The strategy's type name, as written in the job configuration (`jobShardingStrategyType`).
    fn name(&self) -> &str;

    /// Assigns the items `0..total` of the job `job_name` to `candidates` (see the trait's
    /// contract).
    fn shard(&self, candidates: &[InstanceId], job_name: &str, total: u32) -> Assignment;
}

/// Why a sharding strategy name cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShardingError {
    /// The name is not one of the built-in strategy types (names are case-sensitive, as in
    /// ElasticJob).
    #[error("unknown sharding strategy type {name:?}; valid types are {}", valid.join(", "))]
    UnknownStrategy {
        /// The name that was given.
        name: String,
        /// The valid names.
        valid: &'static [&'static str],
    },
    /// The name is an ElasticJob strategy that shardjob deliberately does not implement.
    #[error("sharding strategy type {name:?} is not supported: {reason}")]
    Unsupported {
        /// The name that was given.
        name: String,
        /// Why it is not supported and what to use instead.
        reason: &'static str,
    },
}

/// ElasticJob's built-in sharding strategies, bit-exact.
///
/// All three are `AVG_ALLOCATION` applied to a permutation of the candidates, so the loads of
/// any two instances differ by at most one item. With `L` the candidates (size `m`), `n` the
/// total and `h` = [`java_string_hash`] of the job name:
///
/// - [`AverageAllocation`](Self::AverageAllocation) (`AVG_ALLOCATION`, the default): `q = n / m`;
///   position `c` gets `[c*q, (c+1)*q)`, and the first `n % m` positions get one more item each,
///   `q*m + c`. Example, `n = 8, m = 3`: `[0,1,6] [2,3,7] [4,5]`.
/// - [`Odevity`](Self::Odevity) (`ODEVITY`): if `h % 2 == 0` (Java remainder: negative even
///   hashes too) `L` is reversed, otherwise kept; then `AVG_ALLOCATION`.
/// - [`RoundRobin`](Self::RoundRobin) (`ROUND_ROBIN`): `offset = |h| % m`; `L` is rotated left
///   by `offset` (position `i` takes `L[(i + offset) % m]`); then `AVG_ALLOCATION`.
///
/// Deviations from ElasticJob, all where ElasticJob would fail or lose items:
///
/// - `ROUND_ROBIN` takes `|h|` as `h.unsigned_abs()`. Java's `Math.abs(Integer.MIN_VALUE)` stays
///   negative, so for a job name hashing to `i32::MIN` (e.g. `"polygenelubricants"`) Java's
///   offset is negative and it throws `IndexOutOfBoundsException` unless `m` is a power of two,
///   where both give 0. Whenever Java does not throw, the results are identical.
/// - With no candidate, `ROUND_ROBIN` returns an empty assignment (Java divides by zero).
/// - A candidate listed twice counts once, at its first position (Java's map would silently drop
///   items). [`registry_order`] never yields duplicates.
///
/// `SINGLE_SHARDING_BALANCE` (ElasticJob 3.0.5+) is not offered: it rotates by the current time,
/// so it is not deterministic; parsing its name gives [`ShardingError::Unsupported`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(try_from = "String", into = "&'static str")]
pub enum BuiltinStrategy {
    /// `AVG_ALLOCATION`: contiguous blocks, the remainder to the first instances.
    #[default]
    AverageAllocation,
    /// `ODEVITY`: candidates reversed when the job name's hash is even, then `AVG_ALLOCATION`.
    Odevity,
    /// `ROUND_ROBIN`: candidates rotated by the job name's hash, then `AVG_ALLOCATION`.
    RoundRobin,
}

impl BuiltinStrategy {
    /// All built-in strategies, in the order of [`BuiltinStrategy::NAMES`].
    pub const ALL: [BuiltinStrategy; 3] =
        [Self::AverageAllocation, Self::Odevity, Self::RoundRobin];

    /// The type names of the built-in strategies, as ElasticJob spells them.
    pub const NAMES: [&'static str; 3] = ["AVG_ALLOCATION", "ODEVITY", "ROUND_ROBIN"];

    /// ElasticJob's name of `SINGLE_SHARDING_BALANCE`, which shardjob does not support.
    const SINGLE_SHARDING_BALANCE: &'static str = "SINGLE_SHARDING_BALANCE";

    /// The type name, as ElasticJob spells it (`AVG_ALLOCATION`, `ODEVITY`, `ROUND_ROBIN`).
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::AverageAllocation => Self::NAMES[0],
            Self::Odevity => Self::NAMES[1],
            Self::RoundRobin => Self::NAMES[2],
        }
    }
}

impl ShardingStrategy for BuiltinStrategy {
    fn name(&self) -> &str {
        self.as_str()
    }

    fn shard(&self, candidates: &[InstanceId], job_name: &str, total: u32) -> Assignment {
        let mut order = first_occurrences(candidates);
        if order.is_empty() {
            return Assignment::default();
        }
        match self {
            Self::AverageAllocation => {}
            Self::Odevity => {
                if java_string_hash(job_name) % 2 == 0 {
                    order.reverse();
                }
            }
            Self::RoundRobin => {
                let offset = round_robin_offset(java_string_hash(job_name), order.len());
                order.rotate_left(offset);
            }
        }
        let assignment = average_allocation(&order, total);
        debug_assert!(assignment.covers_exactly(total));
        debug_assert_eq!(assignment.len(), order.len());
        assignment
    }
}

impl fmt::Display for BuiltinStrategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for BuiltinStrategy {
    type Err = ShardingError;

    /// Parses an ElasticJob type name, exactly (case-sensitive, no trimming).
    fn from_str(name: &str) -> Result<Self, Self::Err> {
        if let Some(strategy) = Self::ALL.into_iter().find(|s| s.as_str() == name) {
            return Ok(strategy);
        }
        if name == Self::SINGLE_SHARDING_BALANCE {
            return Err(ShardingError::Unsupported {
                name: name.to_owned(),
                reason: "it rotates the instances by the current time, so its result is not \
                         deterministic and instances cannot agree on it; use ROUND_ROBIN, which \
                         rotates them by the job name's hash",
            });
        }
        Err(ShardingError::UnknownStrategy {
            name: name.to_owned(),
            valid: &Self::NAMES,
        })
    }
}

impl TryFrom<String> for BuiltinStrategy {
    type Error = ShardingError;

    fn try_from(name: String) -> Result<Self, Self::Error> {
        name.parse()
    }
}

impl From<BuiltinStrategy> for &'static str {
    fn from(strategy: BuiltinStrategy) -> &'static str {
        strategy.as_str()
    }
}

/// The candidates with later repetitions of an id dropped, in order.
fn first_occurrences(candidates: &[InstanceId]) -> Vec<&InstanceId> {
    let mut seen = BTreeSet::new();
    candidates.iter().filter(|id| seen.insert(*id)).collect()
}

/// `|hash| % m` for `ROUND_ROBIN`, with `|i32::MIN| = 2^31` (see [`BuiltinStrategy`]). `m > 0`.
fn round_robin_offset(hash: i32, m: usize) -> usize {
    let Ok(m) = u64::try_from(m) else {
        return 0;
    };
    if m == 0 {
        return 0;
    }
    // The remainder is below `m`, which came from a `usize`.
    usize::try_from(u64::from(hash.unsigned_abs()) % m).unwrap_or(0)
}

/// ElasticJob's `AverageAllocationJobShardingStrategy` over `order`, which is non-empty.
fn average_allocation(order: &[&InstanceId], total: u32) -> Assignment {
    let (per_instance, remainder) = match u32::try_from(order.len()) {
        Ok(0) => return Assignment::default(),
        Ok(m) => (total / m, total % m),
        // More instances than any `u32` total: nobody gets a whole block.
        Err(_) => (0, total),
    };
    // `per_instance * m`: where the remainder items start.
    let remainder_base = total - remainder;
    let mut next = 0u32;
    let entries = order
        .iter()
        .enumerate()
        .map(|(position, &id)| {
            // `(position + 1) * per_instance <= m * per_instance <= total`: no overflow.
            let mut items: Vec<u32> = (next..next + per_instance).collect();
            next += per_instance;
            if let Some(position) = u32::try_from(position).ok().filter(|&p| p < remainder) {
                items.push(remainder_base + position);
            }
            (id.clone(), items)
        })
        .collect();
    Assignment { entries }
}

#[cfg(test)]
mod tests {
    use super::*;
    use BuiltinStrategy::{AverageAllocation as Avg, Odevity, RoundRobin};

    fn id(s: &str) -> InstanceId {
        InstanceId::new(s).unwrap()
    }

    fn ids(names: &[&str]) -> Vec<InstanceId> {
        names.iter().map(|s| id(s)).collect()
    }

    /// The expected assignment, in order.
    fn expect(pairs: &[(&str, &[u32])]) -> Assignment {
        Assignment::from_pairs(
            pairs
                .iter()
                .map(|(s, items)| (id(s), items.to_vec()))
                .collect(),
        )
    }

    /// The three hosts of ElasticJob's strategy tests.
    fn hosts() -> Vec<InstanceId> {
        ids(&["host0@-@0", "host1@-@0", "host2@-@0"])
    }

    // --- java_string_hash / java_string_cmp ---------------------------------------------------

    #[test]
    fn java_hash_matches_known_values() {
        assert_eq!(java_string_hash(""), 0);
        assert_eq!(java_string_hash("0"), 48);
        assert_eq!(java_string_hash("1"), 49);
        assert_eq!(java_string_hash("2"), 50);
        assert_eq!(java_string_hash("3"), 51);
        assert_eq!(java_string_hash("test_job"), -1_146_456_432);
        assert_eq!(java_string_hash("polygenelubricants"), i32::MIN);
        // "😀" is U+1F600, the surrogate pair D83D DE00 in UTF-16.
        assert_eq!(java_string_hash("😀"), 0xD83D * 31 + 0xDE00);
        assert_eq!(java_string_hash("😀"), 1_772_899);
        // A BMP character outside ASCII is one unit.
        assert_eq!(java_string_hash("é"), 0xE9);
    }

    #[test]
    fn java_cmp_orders_by_utf16_units_not_bytes() {
        let supplementary = "a\u{10000}";
        let private_use = "a\u{E000}";
        // Rust's order (bytes / code points) puts U+10000 after U+E000 ...
        assert!(supplementary > private_use);
        // ... Java's puts it first: its high surrogate 0xD800 < 0xE000.
        assert_eq!(java_string_cmp(supplementary, private_use), Ordering::Less);
        assert_eq!(java_string_cmp("a", "ab"), Ordering::Less);
        assert_eq!(java_string_cmp("b", "ab"), Ordering::Greater);
        assert_eq!(java_string_cmp("x", "x"), Ordering::Equal);
    }

    // --- registry_order ----------------------------------------------------------------------

    #[test]
    fn registry_order_is_reverse_string_order_of_the_whole_id() {
        let order = registry_order(ids(&[
            "192.168.1.10@-@150",
            "192.168.1.9@-@100",
            "192.168.1.10@-@200",
            "192.168.1.9@-@100",
        ]));
        assert_eq!(
            order,
            ids(&[
                "192.168.1.9@-@100",
                "192.168.1.10@-@200",
                "192.168.1.10@-@150"
            ])
        );
    }

    #[test]
    fn registry_order_uses_utf16_order_for_supplementary_characters() {
        let order = registry_order(ids(&["a\u{10000}", "a\u{FFFD}", "a\u{E000}"]));
        // Descending UTF-16: FFFD > E000 > D800 (the high surrogate of U+10000).
        assert_eq!(order, ids(&["a\u{FFFD}", "a\u{E000}", "a\u{10000}"]));
        // Rust's descending order would have put U+10000 first.
        let mut rust_order = ids(&["a\u{10000}", "a\u{FFFD}", "a\u{E000}"]);
        rust_order.sort_by(|a, b| b.cmp(a));
        assert_ne!(order, rust_order);
    }

    #[test]
    fn reference_registry_order_example_with_avg_allocation() {
        // elasticjob-semantics.md §3.3.
        let order = registry_order(ids(&[
            "192.168.1.9@-@100",
            "192.168.1.10@-@200",
            "192.168.1.10@-@150",
        ]));
        assert_eq!(
            Avg.shard(&order, "any_job", 4),
            expect(&[
                ("192.168.1.9@-@100", &[0, 3]),
                ("192.168.1.10@-@200", &[1]),
                ("192.168.1.10@-@150", &[2]),
            ])
        );
    }

    // --- AverageAllocationJobShardingStrategyTest ---------------------------------------------

    #[test]
    fn avg_sharding_for_zero_server() {
        assert_eq!(Avg.shard(&[], "test_job", 3), Assignment::default());
        assert!(Avg.shard(&[], "test_job", 3).is_empty());
    }

    #[test]
    fn avg_sharding_for_one_server() {
        assert_eq!(
            Avg.shard(&ids(&["host0@-@0"]), "test_job", 3),
            expect(&[("host0@-@0", &[0, 1, 2])])
        );
    }

    #[test]
    fn avg_sharding_for_servers_more_than_sharding_count() {
        assert_eq!(
            Avg.shard(&hosts(), "test_job", 2),
            expect(&[("host0@-@0", &[0]), ("host1@-@0", &[1]), ("host2@-@0", &[])])
        );
    }

    #[test]
    fn avg_sharding_for_servers_less_than_sharding_count_aliquot() {
        assert_eq!(
            Avg.shard(&hosts(), "test_job", 9),
            expect(&[
                ("host0@-@0", &[0, 1, 2]),
                ("host1@-@0", &[3, 4, 5]),
                ("host2@-@0", &[6, 7, 8]),
            ])
        );
    }

    #[test]
    fn avg_sharding_aliquant_8_items_3_servers() {
        assert_eq!(
            Avg.shard(&hosts(), "test_job", 8),
            expect(&[
                ("host0@-@0", &[0, 1, 6]),
                ("host1@-@0", &[2, 3, 7]),
                ("host2@-@0", &[4, 5]),
            ])
        );
    }

    #[test]
    fn avg_sharding_aliquant_10_items_3_servers() {
        // The real code, not the seeds' illustration: the remainder goes to the first instance.
        assert_eq!(
            Avg.shard(&hosts(), "test_job", 10),
            expect(&[
                ("host0@-@0", &[0, 1, 2, 9]),
                ("host1@-@0", &[3, 4, 5]),
                ("host2@-@0", &[6, 7, 8]),
            ])
        );
    }

    #[test]
    fn avg_with_zero_items_lists_every_instance() {
        assert_eq!(
            Avg.shard(&hosts(), "test_job", 0),
            expect(&[("host0@-@0", &[]), ("host1@-@0", &[]), ("host2@-@0", &[])])
        );
    }

    // --- OdevitySortByNameJobShardingStrategyTest ---------------------------------------------

    #[test]
    fn odevity_sharding_by_asc_for_odd_hash() {
        // "1" hashes to 49: odd, the order is kept.
        assert_eq!(
            Odevity.shard(&hosts(), "1", 2),
            expect(&[("host0@-@0", &[0]), ("host1@-@0", &[1]), ("host2@-@0", &[])])
        );
    }

    #[test]
    fn odevity_sharding_by_desc_for_even_hash() {
        // "0" hashes to 48: even, the order is reversed.
        assert_eq!(
            Odevity.shard(&hosts(), "0", 2),
            expect(&[("host2@-@0", &[0]), ("host1@-@0", &[1]), ("host0@-@0", &[])])
        );
    }

    #[test]
    fn odevity_reverses_for_negative_even_hash() {
        // "test_job" hashes to -1146456432: Java's remainder is 0, so reversed.
        assert_eq!(
            Odevity.shard(&hosts(), "test_job", 2),
            expect(&[("host2@-@0", &[0]), ("host1@-@0", &[1]), ("host0@-@0", &[])])
        );
    }

    #[test]
    fn odevity_keeps_for_negative_odd_hash() {
        let name = (0..)
            .map(|i| format!("job{i}"))
            .find(|n| java_string_hash(n) < 0 && java_string_hash(n) % 2 != 0)
            .unwrap();
        assert_eq!(
            Odevity.shard(&hosts(), &name, 3),
            Avg.shard(&hosts(), &name, 3)
        );
    }

    // --- RotateServerByNameJobShardingStrategyTest --------------------------------------------

    #[test]
    fn round_robin_sharding_1() {
        // 49 % 3 = 1: rotate left by one.
        assert_eq!(
            RoundRobin.shard(&hosts(), "1", 2),
            expect(&[("host1@-@0", &[0]), ("host2@-@0", &[1]), ("host0@-@0", &[])])
        );
    }

    #[test]
    fn round_robin_sharding_2() {
        // 50 % 3 = 2: rotate left by two.
        assert_eq!(
            RoundRobin.shard(&hosts(), "2", 2),
            expect(&[("host2@-@0", &[0]), ("host0@-@0", &[1]), ("host1@-@0", &[])])
        );
    }

    #[test]
    fn round_robin_sharding_3() {
        // 51 % 3 = 0: unchanged.
        assert_eq!(
            RoundRobin.shard(&hosts(), "3", 2),
            expect(&[("host0@-@0", &[0]), ("host1@-@0", &[1]), ("host2@-@0", &[])])
        );
    }

    #[test]
    fn round_robin_with_negative_hash_uses_its_absolute_value() {
        // |-1146456432| % 3 = 0, % 4 = 0, % 5 = 2.
        assert_eq!(1_146_456_432 % 5, 2);
        let five = ids(&["h0", "h1", "h2", "h3", "h4"]);
        assert_eq!(
            RoundRobin.shard(&five, "test_job", 5),
            expect(&[
                ("h2", &[0]),
                ("h3", &[1]),
                ("h4", &[2]),
                ("h0", &[3]),
                ("h1", &[4])
            ])
        );
    }

    #[test]
    fn round_robin_for_i32_min_hash_rotates_where_java_would_throw() {
        // 2^31 % 3 = 2: Java's offset would be -2 and it would throw; shardjob rotates by 2.
        assert_eq!(
            RoundRobin.shard(&hosts(), "polygenelubricants", 3),
            expect(&[
                ("host2@-@0", &[0]),
                ("host0@-@0", &[1]),
                ("host1@-@0", &[2])
            ])
        );
        // m = 4, a power of two: Java gives offset 0 too.
        let four = ids(&["h0", "h1", "h2", "h3"]);
        assert_eq!(
            RoundRobin.shard(&four, "polygenelubricants", 4),
            Avg.shard(&four, "polygenelubricants", 4)
        );
    }

    /// Java's `Math.abs(h) % m`: `Math.abs(Integer.MIN_VALUE)` is `Integer.MIN_VALUE`, `%`
    /// truncates toward zero. `None` where Java would then index with a negative offset.
    fn java_round_robin_offset(hash: i32, m: i32) -> Option<usize> {
        usize::try_from(hash.wrapping_abs() % m).ok()
    }

    #[test]
    fn unsigned_abs_offset_equals_java_wherever_java_does_not_throw() {
        let hashes = [
            i32::MIN,
            i32::MIN + 1,
            -1_146_456_432,
            -2,
            -1,
            0,
            1,
            48,
            49,
            1_772_899,
            i32::MAX,
        ];
        for m in 1..=1100i32 {
            for hash in hashes {
                let ours = round_robin_offset(hash, usize::try_from(m).unwrap());
                match java_round_robin_offset(hash, m) {
                    Some(java) => assert_eq!(ours, java, "hash {hash}, m {m}"),
                    // Java throws only for i32::MIN with m not a power of two.
                    None => {
                        assert_eq!(hash, i32::MIN);
                        assert!(!m.unsigned_abs().is_power_of_two(), "m {m}");
                        assert!(ours < usize::try_from(m).unwrap());
                    }
                }
            }
        }
        // For every power of two m that fits Java's int, both give 0 for i32::MIN.
        for k in 0..31 {
            let m = 1i32 << k;
            assert_eq!(java_round_robin_offset(i32::MIN, m), Some(0));
            assert_eq!(round_robin_offset(i32::MIN, 1usize << k), 0);
        }
    }

    // --- edge cases ---------------------------------------------------------------------------

    #[test]
    fn every_strategy_returns_empty_for_no_candidate() {
        for strategy in BuiltinStrategy::ALL {
            for name in ["", "1", "0", "polygenelubricants"] {
                assert!(
                    strategy.shard(&[], name, 10).is_empty(),
                    "{strategy} {name:?}"
                );
            }
        }
    }

    #[test]
    fn duplicate_candidates_count_once_at_their_first_position() {
        let candidates = ids(&["a", "b", "a", "c"]);
        assert_eq!(
            Avg.shard(&candidates, "j", 4),
            expect(&[("a", &[0, 3]), ("b", &[1]), ("c", &[2])])
        );
    }

    // --- Assignment -----------------------------------------------------------------------------

    #[test]
    fn assignment_accessors() {
        let a = Avg.shard(&hosts(), "test_job", 8);
        assert_eq!(a.len(), 3);
        assert!(!a.is_empty());
        assert_eq!(a.total_items(), 8);
        assert_eq!(a.items_of(&id("host1@-@0")), &[2, 3, 7]);
        assert_eq!(a.items_of(&id("nobody")), &[] as &[u32]);
        assert_eq!(a.owner_of(7), Some(&id("host1@-@0")));
        assert_eq!(a.owner_of(6), Some(&id("host0@-@0")));
        assert_eq!(a.owner_of(8), None);
        let owners = a.owners(9);
        for item in 0..9 {
            assert_eq!(owners[item as usize], a.owner_of(item), "item {item}");
        }
        // An item listed twice (a custom strategy's mistake) and one beyond the total: the
        // first instance to list an item owns it, as for `owner_of`.
        let twice = Assignment::from_pairs(vec![(id("x"), vec![1, 5]), (id("y"), vec![0, 1])]);
        assert_eq!(twice.owners(3), [Some(&id("y")), Some(&id("x")), None]);
        assert_eq!(twice.owner_of(1), Some(&id("x")));
        let order: Vec<&str> = a.iter().map(|(id, _)| id.as_str()).collect();
        assert_eq!(order, ["host0@-@0", "host1@-@0", "host2@-@0"]);
        assert!(a.covers_exactly(8));
        assert!(!a.covers_exactly(7));
        assert!(!a.covers_exactly(9));
        assert_eq!(a.clone().into_pairs().len(), 3);
    }

    #[test]
    fn covers_exactly_rejects_duplicates_and_out_of_range_items() {
        assert!(!expect(&[("a", &[0, 0])]).covers_exactly(2));
        assert!(!expect(&[("a", &[0]), ("b", &[0])]).covers_exactly(2));
        assert!(!expect(&[("a", &[0, 2])]).covers_exactly(2));
        assert!(!expect(&[("a", &[0])]).covers_exactly(u32::MAX));
        assert!(expect(&[("a", &[1]), ("b", &[0])]).covers_exactly(2));
        assert!(Assignment::default().covers_exactly(0));
    }

    #[test]
    fn from_pairs_merges_repeated_instances() {
        let a = Assignment::from_pairs(vec![
            (id("b"), vec![0]),
            (id("a"), vec![1]),
            (id("b"), vec![2]),
        ]);
        assert_eq!(a.len(), 2);
        assert_eq!(a.items_of(&id("b")), &[0, 2]);
        let order: Vec<&str> = a.iter().map(|(id, _)| id.as_str()).collect();
        assert_eq!(order, ["b", "a"]);
    }

    #[test]
    fn assignment_serializes_as_an_ordered_map() {
        let order = registry_order(ids(&[
            "192.168.1.9@-@100",
            "192.168.1.10@-@200",
            "192.168.1.10@-@150",
        ]));
        let yaml = serde_yaml_ng::to_string(&Avg.shard(&order, "j", 4)).unwrap();
        let value: serde_yaml_ng::Value = serde_yaml_ng::from_str(&yaml).unwrap();
        let map = value.as_mapping().unwrap();
        let keys: Vec<&str> = map.keys().map(|k| k.as_str().unwrap()).collect();
        assert_eq!(
            keys,
            [
                "192.168.1.9@-@100",
                "192.168.1.10@-@200",
                "192.168.1.10@-@150"
            ]
        );
        let first: Vec<u64> = map["192.168.1.9@-@100"]
            .as_sequence()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect();
        assert_eq!(first, [0, 3]);
        // Every instance appears, also without items.
        let empty = serde_yaml_ng::to_string(&Avg.shard(&ids(&["a", "b"]), "j", 1)).unwrap();
        assert_eq!(empty, "a:\n- 0\nb: []\n");
    }

    // --- BuiltinStrategy names ------------------------------------------------------------------

    #[test]
    fn names_round_trip() {
        for (strategy, name) in BuiltinStrategy::ALL.into_iter().zip(BuiltinStrategy::NAMES) {
            assert_eq!(strategy.as_str(), name);
            assert_eq!(ShardingStrategy::name(&strategy), name);
            assert_eq!(strategy.to_string(), name);
            assert_eq!(name.parse::<BuiltinStrategy>(), Ok(strategy));
        }
        assert_eq!(BuiltinStrategy::default(), Avg);
    }

    #[test]
    fn names_are_case_sensitive_and_unknown_names_list_the_valid_ones() {
        for bad in ["avg_allocation", "Odevity", " ROUND_ROBIN", "", "AVERAGE"] {
            let err = bad.parse::<BuiltinStrategy>().unwrap_err();
            assert_eq!(
                err,
                ShardingError::UnknownStrategy {
                    name: bad.to_owned(),
                    valid: &BuiltinStrategy::NAMES
                }
            );
            let message = err.to_string();
            for valid in BuiltinStrategy::NAMES {
                assert!(message.contains(valid), "{message}");
            }
        }
    }

    #[test]
    fn single_sharding_balance_is_rejected_with_a_reason() {
        let err = "SINGLE_SHARDING_BALANCE"
            .parse::<BuiltinStrategy>()
            .unwrap_err();
        assert!(
            matches!(err, ShardingError::Unsupported { ref name, .. } if name == "SINGLE_SHARDING_BALANCE")
        );
        let message = err.to_string();
        assert!(message.contains("not deterministic"), "{message}");
        assert!(message.contains("ROUND_ROBIN"), "{message}");
    }

    #[test]
    fn strategy_serde_uses_the_type_name() {
        assert_eq!(serde_yaml_ng::to_string(&Odevity).unwrap(), "ODEVITY\n");
        let parsed: BuiltinStrategy = serde_yaml_ng::from_str("ROUND_ROBIN").unwrap();
        assert_eq!(parsed, RoundRobin);
        let err = serde_yaml_ng::from_str::<BuiltinStrategy>("SINGLE_SHARDING_BALANCE")
            .unwrap_err()
            .to_string();
        assert!(err.contains("ROUND_ROBIN"), "{err}");
        assert!(serde_yaml_ng::from_str::<BuiltinStrategy>("odevity").is_err());
    }

    #[test]
    fn builtin_strategy_is_usable_as_a_trait_object() {
        let strategy: Box<dyn ShardingStrategy> = Box::new(RoundRobin);
        assert_eq!(strategy.name(), "ROUND_ROBIN");
        assert_eq!(
            strategy.shard(&hosts(), "1", 2).items_of(&id("host1@-@0")),
            &[0]
        );
    }
}
