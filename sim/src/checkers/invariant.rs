//! The machines' own invariants and their caches' self-check, asked after every input
//! ([`Machine::self_check`], on in every build of the simulator through the core's
//! `self-check` feature): each finding is reported once per node, at its first time.
//!
//! [`Machine::self_check`]: shardjob_core::machine::Machine::self_check

use std::collections::BTreeSet;

use super::Violation;
use crate::cluster::Cluster;

/// The findings, each once per node.
pub fn check(c: &Cluster) -> Vec<Violation> {
    let mut seen = BTreeSet::new();
    c.invariant_violations
        .iter()
        .filter(|(_, n, what)| seen.insert((*n, what.as_str())))
        .map(|(time, n, what)| Violation {
            subject: Default::default(),
            checker: "invariant",
            time: *time,
            // An ElasticJob node's finding names it ([`crate::elasticjob`]).
            message: if what.starts_with("elasticjob ") {
                what.clone()
            } else {
                format!("node {n}: {what}")
            },
        })
        .collect()
}
