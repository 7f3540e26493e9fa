//! Checker 6: an item an operator disabled starts no run once the change had a second to
//! reach the instances.

use super::Violation;
use crate::cluster::Cluster;

/// The runs that started on a disabled item.
pub fn check(c: &Cluster) -> Vec<Violation> {
    c.disabled_runs
        .iter()
        .filter_map(|i| c.runs.get(*i))
        .map(|r| Violation {
            subject: Default::default(),
            checker: "disabled",
            time: r.start,
            message: format!(
                "{}/{} ran ({}, fire {}) although an operator disabled it",
                r.job,
                r.item,
                r.runner(),
                r.fire
            ),
        })
        .collect()
}
