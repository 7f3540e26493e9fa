//! Property tests for the sharding strategies and the registry order.

use std::cmp::Ordering;
use std::collections::BTreeSet;

use proptest::prelude::*;
use shardjob_core::InstanceId;
use shardjob_core::sharding::{
    Assignment, BuiltinStrategy, ShardingStrategy, java_string_cmp, java_string_hash,
    registry_order,
};

/// Instance ids: mostly `ip@-@pid`, some arbitrary unicode (including characters above U+FFFF
/// and in U+E000..=U+FFFF, where Java's and Rust's string orders differ).
fn instance_id() -> impl Strategy<Value = InstanceId> {
    prop_oneof![
        "[0-9]{1,3}\\.[0-9]{1,3}\\.[0-9]{1,3}\\.[0-9]{1,3}@-@[0-9]{1,6}",
        "[a\u{E000}\u{FFFD}\u{10000}\u{1F600}]{1,4}",
        "\\PC{1,10}",
    ]
    .prop_filter_map("not a valid instance id", |s| InstanceId::new(s).ok())
}

/// 1..50 distinct candidates, in arbitrary order.
fn candidates() -> impl Strategy<Value = Vec<InstanceId>> {
    proptest::collection::btree_set(instance_id(), 1..50)
        .prop_map(|set| set.into_iter().collect::<Vec<_>>())
        .prop_shuffle()
}

fn strategy() -> impl Strategy<Value = BuiltinStrategy> {
    prop::sample::select(BuiltinStrategy::ALL.to_vec())
}

/// Job names: arbitrary unicode, plus the names with known hashes.
fn job_name() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        prop::sample::select(vec![
            "0",
            "1",
            "2",
            "3",
            "test_job",
            "polygenelubricants",
            "😀"
        ])
        .prop_map(str::to_owned),
    ]
}

/// `String.hashCode` as Java's documentation defines it: `s[0]*31^(n-1) + ... + s[n-1]`.
fn hash_by_definition(s: &str) -> i32 {
    let units: Vec<u16> = s.encode_utf16().collect();
    let mut sum = 0i32;
    for (i, &unit) in units.iter().enumerate() {
        let exponent = u32::try_from(units.len() - 1 - i).unwrap();
        sum = sum.wrapping_add(i32::from(unit).wrapping_mul(31i32.wrapping_pow(exponent)));
    }
    sum
}

fn instances_of(assignment: &Assignment) -> Vec<InstanceId> {
    assignment.iter().map(|(id, _)| id.clone()).collect()
}

proptest! {
    #[test]
    fn every_item_is_assigned_exactly_once(
        strategy in strategy(),
        candidates in candidates(),
        name in job_name(),
        total in 1u32..500,
    ) {
        let assignment = strategy.shard(&candidates, &name, total);
        prop_assert!(assignment.covers_exactly(total));
        prop_assert_eq!(assignment.total_items(), usize::try_from(total).unwrap());
        let mut seen = BTreeSet::new();
        for (_, items) in assignment.iter() {
            for &item in items {
                prop_assert!(item < total);
                prop_assert!(seen.insert(item), "item {} assigned twice", item);
            }
        }
        let owners = assignment.owners(total);
        for item in 0..total {
            let owner = assignment.owner_of(item).unwrap();
            prop_assert!(assignment.items_of(owner).contains(&item));
            prop_assert_eq!(owners[item as usize], Some(owner));
        }
    }

    #[test]
    fn every_candidate_is_present_once(
        strategy in strategy(),
        candidates in candidates(),
        name in job_name(),
        total in 1u32..500,
    ) {
        let assignment = strategy.shard(&candidates, &name, total);
        prop_assert_eq!(assignment.len(), candidates.len());
        let listed: BTreeSet<InstanceId> = instances_of(&assignment).into_iter().collect();
        let given: BTreeSet<InstanceId> = candidates.iter().cloned().collect();
        prop_assert_eq!(listed, given);
    }

    #[test]
    fn loads_differ_by_at_most_one(
        strategy in strategy(),
        candidates in candidates(),
        name in job_name(),
        total in 1u32..500,
    ) {
        let assignment = strategy.shard(&candidates, &name, total);
        let loads: Vec<usize> = assignment.iter().map(|(_, items)| items.len()).collect();
        let max = loads.iter().copied().max().unwrap();
        let min = loads.iter().copied().min().unwrap();
        prop_assert!(max - min <= 1, "loads {:?}", loads);
    }

    #[test]
    fn every_strategy_is_avg_allocation_on_a_permutation(
        strategy in strategy(),
        candidates in candidates(),
        name in job_name(),
        total in 1u32..500,
    ) {
        let assignment = strategy.shard(&candidates, &name, total);
        let permuted = instances_of(&assignment);
        let avg = BuiltinStrategy::AverageAllocation.shard(&permuted, &name, total);
        prop_assert_eq!(&avg, &assignment);
        // And the permutation is the documented one.
        let hash = java_string_hash(&name);
        let mut expected = candidates.clone();
        match strategy {
            BuiltinStrategy::AverageAllocation => {}
            BuiltinStrategy::Odevity => if hash % 2 == 0 { expected.reverse() },
            BuiltinStrategy::RoundRobin => {
                let m = u32::try_from(candidates.len()).unwrap();
                let offset = usize::try_from(hash.unsigned_abs() % m).unwrap();
                expected = (0..candidates.len())
                    .map(|i| candidates[(i + offset) % candidates.len()].clone())
                    .collect();
            }
        }
        prop_assert_eq!(permuted, expected);
    }

    #[test]
    fn sharding_is_deterministic(
        strategy in strategy(),
        candidates in candidates(),
        name in job_name(),
        total in 1u32..500,
    ) {
        let first = strategy.shard(&candidates, &name, total);
        let again = strategy.shard(&candidates.clone(), &name.clone(), total);
        prop_assert_eq!(first, again);
    }

    #[test]
    fn no_candidate_means_an_empty_assignment(
        strategy in strategy(),
        name in job_name(),
        total in 0u32..500,
    ) {
        let assignment = strategy.shard(&[], &name, total);
        prop_assert!(assignment.is_empty());
        prop_assert_eq!(assignment.total_items(), 0);
    }

    #[test]
    fn registry_order_is_a_sorted_idempotent_permutation(
        ids in proptest::collection::vec(instance_id(), 0..60),
    ) {
        let order = registry_order(ids.clone());
        // A permutation of the distinct inputs.
        let given: BTreeSet<InstanceId> = ids.iter().cloned().collect();
        let listed: BTreeSet<InstanceId> = order.iter().cloned().collect();
        prop_assert_eq!(order.len(), given.len());
        prop_assert_eq!(listed, given);
        // Strictly descending by UTF-16 code units.
        for pair in order.windows(2) {
            prop_assert_eq!(
                java_string_cmp(pair[0].as_str(), pair[1].as_str()),
                Ordering::Greater,
                "{:?} before {:?}", pair[0], pair[1]
            );
        }
        // Idempotent, and independent of the input order.
        prop_assert_eq!(registry_order(order.clone()), order.clone());
        let mut reversed = ids;
        reversed.reverse();
        prop_assert_eq!(registry_order(reversed), order);
    }

    #[test]
    fn java_cmp_is_code_point_order_except_across_the_surrogate_range(a in "\\PC{0,6}", b in "\\PC{0,6}") {
        // With no character at or above U+E000, UTF-16 and code-point orders agree.
        if a.chars().chain(b.chars()).all(|c| c < '\u{E000}') {
            prop_assert_eq!(java_string_cmp(&a, &b), a.cmp(&b));
        }
        prop_assert_eq!(java_string_cmp(&a, &b), java_string_cmp(&b, &a).reverse());
    }

    #[test]
    fn java_hash_matches_its_definition(s in any::<String>()) {
        prop_assert_eq!(java_string_hash(&s), hash_by_definition(&s));
    }
}
