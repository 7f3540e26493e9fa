//! The owner check of a claim: how a claim proves, in the registry, that this instance still
//! owns an item (`sharding/{item}/instance`) at the moment it commits.
//!
//! Checking the owner's value costs ZooKeeper a read before every claim (its transactions
//! compare data versions only: the backend reads the node to check the value, see
//! `shardjob-backend-zk`, "Checks"). A check of the data version the view shows costs
//! nothing, and is as strong wherever a version names one value only:
//!
//! - shardjob's re-shards move an item with a `set` of the node, which raises its version;
//!   they delete and re-create it only when they remove an item and grow it again, and every
//!   re-shard that removes items writes the `sharding` node. So a claim that also checks the
//!   `sharding` node's version (the *epoch*, once per transaction) knows that the item's
//!   node is the one its view shows, and its version then names one value.
//! - ElasticJob's re-shards delete every `instance` node and create it again: a node
//!   ElasticJob wrote is always at version 0, and a version 0 names nothing. Such a node
//!   (and one whose version the view does not know) is checked by value, and the claim
//!   *seals* it: it writes the same owner over version 0, so that the node is at version 1
//!   from then on, a version ElasticJob never leaves a node at, and the next claims check
//!   the version. (A node shardjob creates for a new item is at version 0 too, and is sealed
//!   by its first claim.)

use crate::registry::{Check, NodePath, Stat, TxnOp, Version};

/// How a claim checks that it still owns an item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OwnerCheck {
    /// The node is at the version the view shows (with the epoch checked too).
    Version(Version),
    /// The node holds this instance's id; with `seal`, the claim writes it again over
    /// version 0.
    Value {
        /// The node is at version 0: write the same owner over it.
        seal: bool,
    },
}

/// The owner check of an item whose `instance` node the view shows with `stat`, in a job
/// whose `sharding` node the view shows at `epoch` (see the module docs). `zero_by_value` is
/// a planted bug's switch (`owner-check-by-version-zero` makes it false: a node at version 0
/// is checked by its version, and never sealed).
pub(crate) fn owner_check(
    stat: Option<&Stat>,
    epoch: Option<Version>,
    zero_by_value: bool,
) -> OwnerCheck {
    match (stat.map(|s| s.version), epoch) {
        (Some(v), Some(_)) if v.0 >= 1 || (v.0 == 0 && !zero_by_value) => OwnerCheck::Version(v),
        (Some(Version(0)), _) => OwnerCheck::Value { seal: true },
        _ => OwnerCheck::Value { seal: false },
    }
}

impl OwnerCheck {
    /// Whether the check relies on the epoch (a claim with one such check checks it).
    pub(crate) fn needs_epoch(self) -> bool {
        matches!(self, OwnerCheck::Version(_))
    }

    /// The check's operations on the item's `instance` node at `path`, for owner `me`.
    pub(crate) fn ops(self, path: NodePath, me: &str, ops: &mut Vec<TxnOp>) {
        match self {
            OwnerCheck::Version(v) => ops.push(TxnOp::Check(Check::Version(path, v))),
            OwnerCheck::Value { seal } => {
                ops.push(TxnOp::Check(Check::Value(path.clone(), me.into())));
                if seal {
                    ops.push(TxnOp::Set {
                        path,
                        data: me.into(),
                        expected: Some(Version(0)),
                    });
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::test_support::stat;

    /// A version of 1 and more is checked as such when the epoch is known; a version 0 (what
    /// ElasticJob always leaves) by value and sealed; without the epoch, or the node's
    /// version, by value.
    #[test]
    fn the_owner_is_checked_by_version_only_where_a_version_names_one_value() {
        let (one, five, zero, unknown) = (stat(1), stat(5), stat(0), stat(-1));
        let e = Some(Version(2));
        #[rustfmt::skip]
        let cases: [(Option<&Stat>, Option<Version>, OwnerCheck); 8] = [
            (Some(&one), e, OwnerCheck::Version(Version(1))),
            (Some(&five), e, OwnerCheck::Version(Version(5))),
            (Some(&zero), e, OwnerCheck::Value { seal: true }),
            (Some(&zero), None, OwnerCheck::Value { seal: true }),
            (Some(&five), None, OwnerCheck::Value { seal: false }),
            (Some(&unknown), e, OwnerCheck::Value { seal: false }),
            (None, e, OwnerCheck::Value { seal: false }),
            (None, None, OwnerCheck::Value { seal: false }),
        ];
        for (stat, epoch, want) in cases {
            assert_eq!(owner_check(stat, epoch, true), want, "{stat:?} {epoch:?}");
        }
        // The planted bug checks a version 0 as it checks any other.
        assert_eq!(
            owner_check(Some(&zero), e, false),
            OwnerCheck::Version(Version(0))
        );
    }

    /// A seal writes the owner again over version 0, after the value check.
    #[test]
    fn a_seal_writes_the_same_owner_over_version_zero() {
        let path = NodePath::new("/j/sharding/0/instance").unwrap();
        let mut ops = Vec::new();
        OwnerCheck::Value { seal: true }.ops(path.clone(), "me", &mut ops);
        assert_eq!(
            ops,
            vec![
                TxnOp::Check(Check::Value(path.clone(), b"me".to_vec())),
                TxnOp::Set {
                    path: path.clone(),
                    data: b"me".to_vec(),
                    expected: Some(Version(0)),
                },
            ]
        );
        let mut ops = Vec::new();
        OwnerCheck::Version(Version(4)).ops(path.clone(), "me", &mut ops);
        assert_eq!(ops, vec![TxnOp::Check(Check::Version(path, Version(4)))]);
        assert!(OwnerCheck::Version(Version(4)).needs_epoch());
        assert!(!OwnerCheck::Value { seal: true }.needs_epoch());
    }
}
