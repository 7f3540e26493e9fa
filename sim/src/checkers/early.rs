//! Checker: a shardjob instance does not run a fire of a job shared with ElasticJob early by
//! its own clock. A run of a fire (scheduled, misfired or failed over) that starts more than
//! [`EARLY_BESIDE_JAVA_MS`](crate::cluster::EARLY_BESIDE_JAVA_MS) before its fire in true
//! time, while an ElasticJob instance has been registered in the job for two seconds, is a
//! fire that ElasticJob instance may run again at its time: it records nothing of its own
//! runs that shardjob could see by then. The machine measures its clock against the
//! registry's and holds its claims while the clock is off (`docs/migration-design.md` 5,
//! question 2); judged by the world's facts, never by the machine's events: the run's fire,
//! its start in true time, and the ElasticJob instance nodes in the store.

use super::Violation;
use crate::cluster::Cluster;

/// The runs that started early beside ElasticJob.
pub fn check(c: &Cluster) -> Vec<Violation> {
    let origin = c.wall_origin.timestamp_millis();
    c.early_runs
        .iter()
        .filter_map(|i| c.runs.get(*i))
        .map(|r| Violation {
            subject: super::Subject::run(r),
            checker: "early",
            time: r.start,
            message: format!(
                "{}/{}: {} started fire {} {} ms before it in true time (its clock {:+} ms off), \
                 beside an ElasticJob instance",
                r.job,
                r.item,
                r.runner(),
                r.fire,
                r.fire - (origin + r.start as i64),
                r.wall_start - (origin + r.start as i64),
            ),
        })
        .collect()
}
