//! No job waits longer than its own decision wants: the cluster audits every running node's
//! wake times about once a simulated second ([`Machine::late_wakes`]), and each job found late
//! is reported once per node. A wake the machine forgot would otherwise show only as a fire
//! that never completes, and only in worlds without the safety sweep, which hides it.
//!
//! [`Machine::late_wakes`]: shardjob_core::machine::Machine::late_wakes

use std::collections::BTreeSet;

use super::Violation;
use crate::cluster::Cluster;

/// The late wakes the cluster's audit found.
pub fn check(c: &Cluster) -> Vec<Violation> {
    let mut seen = BTreeSet::new();
    let mut found = Vec::new();
    for (time, n, w) in &c.late_wakes {
        if !seen.insert((*n, w.job.as_str())) {
            continue;
        }
        let wake = w
            .wake
            .map_or_else(|| "never".to_owned(), |t| format!("at {}", secs(t.ms())));
        let id = c
            .nodes
            .get(*n)
            .map_or_else(String::new, |node| node.id.to_string());
        found.push(Violation {
            subject: Default::default(),
            checker: "wake",
            time: *time,
            message: format!(
                "node {n} ({id}): {} wakes {wake}, but its decision wants it at {}",
                w.job,
                secs(w.wanted.ms())
            ),
        });
    }
    found
}

fn secs(ms: u64) -> String {
    format!("{:.3}s", ms as f64 / 1e3)
}

#[cfg(test)]
mod tests {
    use shardjob_core::machine::{LateWake, Mono};

    use super::check;
    use crate::cluster::Cluster;

    #[test]
    fn each_late_job_is_reported_once_per_node() {
        let mut c = Cluster::new();
        let late = |job: &str, wake| LateWake {
            job: job.to_owned(),
            wake,
            wanted: Mono(5_202),
        };
        c.late_wakes.push((5_000, 0, late("pay", None)));
        c.late_wakes
            .push((6_000, 0, late("pay", Some(Mono(9_000)))));
        c.late_wakes
            .push((6_000, 1, late("pay", Some(Mono(9_000)))));
        let found = check(&c);
        let messages: Vec<(u64, &str)> =
            found.iter().map(|v| (v.time, v.message.as_str())).collect();
        assert_eq!(
            messages,
            [
                (
                    5_000,
                    "node 0 (): pay wakes never, but its decision wants it at 5.202s"
                ),
                (
                    6_000,
                    "node 1 (): pay wakes at 9.000s, but its decision wants it at 5.202s"
                ),
            ]
        );
        assert!(found.iter().all(|v| v.checker == "wake"));
    }
}
