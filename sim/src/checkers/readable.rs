//! After the heal, every job's configuration is readable in the registry (a `convergence`
//! violation otherwise): the other checkers judge the jobs against it.

use shardjob_core::JobConfig;

use super::Violation;
use crate::cluster::Cluster;

/// The configuration of each of `jobs` (by name) as the registry holds it at `end`, and a violation for
/// each job that has none readable (left out of the configurations).
pub fn check(
    c: &Cluster,
    jobs: &[JobConfig],
    end: u64,
) -> (Vec<Violation>, Vec<(String, JobConfig)>) {
    let mut violations = Vec::new();
    let mut configs = Vec::new();
    for j in jobs {
        match c.config_of(&j.job_name) {
            Some(config) => configs.push((j.job_name.clone(), config)),
            None => violations.push(Violation {
                subject: Default::default(),
                checker: "convergence",
                time: end,
                message: format!("{} has no readable configuration", j.job_name),
            }),
        }
    }
    (violations, configs)
}
