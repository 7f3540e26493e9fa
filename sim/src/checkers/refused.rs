//! What the registry or the machines refused that they must not: whatever the registry's
//! limit on the operations of a transaction, every transaction is split until it fits (a
//! refusal as too large is a `txn-limit` violation); a user's sharding strategy that breaks
//! its contract is reported once per job (`strategy`).

use std::collections::BTreeSet;

use shardjob_core::machine::MachineEvent;
use shardjob_core::registry::RegistryError;

use super::Violation;
use crate::cluster::Cluster;

/// Checks what every node reported.
pub fn check(c: &Cluster) -> Vec<Violation> {
    let mut violations = Vec::new();
    let mut refused = BTreeSet::new();
    for node in &c.nodes {
        for (time, e) in &node.events {
            let (checker, message) = match e {
                MachineEvent::RegistryFailed {
                    job,
                    purpose,
                    error,
                } if matches!(error.root_cause(), RegistryError::TooLarge(_)) => (
                    "txn-limit",
                    format!(
                        "{}: {purpose} of job {job:?} refused as too large: {error}",
                        node.id
                    ),
                ),
                MachineEvent::PlanRefused {
                    job,
                    strategy,
                    problem,
                } if refused.insert(job.clone()) => (
                    "strategy",
                    format!("{job}: the plan of strategy {strategy:?} was refused: {problem}"),
                ),
                _ => continue,
            };
            violations.push(Violation {
                subject: Default::default(),
                checker,
                time: *time,
                message,
            });
        }
    }
    violations
}
