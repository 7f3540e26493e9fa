//! The transaction limit: which of the due items one claim takes when they do not all fit.
//!
//! The items whose last finished fire is oldest go first, so that no item starves when the
//! parts of a fire take longer than its interval; a failover goes before an own item of the
//! same age. The rest stays due, and is claimed by the next decision once the watch shows
//! this claim.

use std::collections::BTreeSet;

/// A due item as the limit sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Due {
    /// Its last finished fire (epoch ms), if it has one: none goes first.
    pub(crate) done: Option<i64>,
    /// Whether it is this instance's own item (a failover is not).
    pub(crate) own: bool,
    /// The item.
    pub(crate) item: u32,
}

/// The items a claim of at most `limit` items takes from `due`: (own items, failovers).
pub(crate) fn within(limit: usize, mut due: Vec<Due>) -> (BTreeSet<u32>, BTreeSet<u32>) {
    due.sort_unstable();
    due.truncate(limit);
    let own = due.iter().filter(|d| d.own).map(|d| d.item).collect();
    let failover = due.iter().filter(|d| !d.own).map(|d| d.item).collect();
    (own, failover)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The oldest last fire first (an item that never ran before any), failover before own
    /// at the same age, then by item.
    #[test]
    fn oldest_first_failover_before_own() {
        let d = |done: Option<i64>, own: bool, item: u32| Due { done, own, item };
        let due = vec![
            d(Some(50), true, 0),
            d(Some(10), true, 1),
            d(None, true, 2),
            d(Some(10), false, 3),
            d(Some(90), false, 4),
        ];
        #[rustfmt::skip]
        let cases: [(usize, &[u32], &[u32]); 5] = [
            (1, &[2], &[]),
            (2, &[2], &[3]),
            (3, &[1, 2], &[3]),
            (4, &[0, 1, 2], &[3]),
            (9, &[0, 1, 2], &[3, 4]),
        ];
        for (limit, own, failover) in cases {
            let (o, f) = within(limit, due.clone());
            assert_eq!(o, own.iter().copied().collect(), "limit {limit}: own");
            assert_eq!(
                f,
                failover.iter().copied().collect(),
                "limit {limit}: failover"
            );
        }
    }
}
