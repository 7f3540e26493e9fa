//! Checker 8: an instance an operator shut down (its instance node deleted while its session
//! lived, as ElasticJob's `shutdown` operation does) starts no item of that job again in that
//! session, once the deletion had a second to reach it. Its items run elsewhere: that part is
//! held by [`super::liveness`] and [`super::convergence`] after the heal, which takes the job
//! back on the instance as an operator restarting the process would.

use super::Violation;
use crate::cluster::Cluster;

/// The runs that started on an instance after an operator shut their job down on it.
pub fn check(c: &Cluster) -> Vec<Violation> {
    c.shutdown_runs
        .iter()
        .filter_map(|i| c.runs.get(*i))
        .map(|r| Violation {
            subject: Default::default(),
            checker: "shutdown",
            time: r.start,
            message: format!(
                "{}/{} ran on {} (fire {}) after an operator shut {} down there",
                r.job,
                r.item,
                r.runner(),
                r.fire,
                r.job
            ),
        })
        .collect()
}
