//! Checker 3: after the heal, every fire of every enabled item of a job with failover and
//! misfire on completes within a bound: a run of that fire or a later one (missed fires
//! collapse) ends, not cut short, by `fire + bound`.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use shardjob_core::JobConfig;

use super::Violation;
use crate::cluster::RunRecord;

/// One job as it stands at the end, for the check.
#[derive(Debug)]
pub struct JobAtEnd {
    /// The configuration in the registry at the end.
    pub config: JobConfig,
    /// How late a fire may complete.
    pub bound_ms: u64,
}

/// Checks fires in `[from, to]` (virtual ms); `origin` is the wall time at virtual 0.
pub fn check(
    runs: &[RunRecord],
    jobs: &BTreeMap<String, JobAtEnd>,
    origin: DateTime<Utc>,
    from: u64,
    to: u64,
) -> Vec<Violation> {
    let mut out = Vec::new();
    let origin_ms = origin.timestamp_millis();
    let by_item = super::runs_by_item(runs);
    for (name, job) in jobs {
        let c = &job.config;
        if !(c.failover && c.misfire && c.monitor_execution) {
            continue;
        }
        let Some(cron) = &c.cron else { continue };
        let Some(start) = DateTime::<Utc>::from_timestamp_millis(origin_ms + from as i64) else {
            continue;
        };
        let end_ms = origin_ms + to.saturating_sub(job.bound_ms) as i64;
        for fire in cron.fires_after(start, &c.time_zone).take(10_000) {
            let f = fire.timestamp_millis();
            if f > end_ms {
                break;
            }
            let deadline = (f - origin_ms) as u64 + job.bound_ms;
            for item in 0..c.sharding_total_count {
                let mine = by_item
                    .get(&(name.as_str(), item))
                    .map_or(&[][..], |v| &v[..]);
                let done = mine
                    .iter()
                    .any(|r| r.fire >= f && !r.cancelled && r.end.is_some_and(|e| e <= deadline));
                if !done {
                    out.push(Violation {
                        checker: "liveness",
                        time: deadline,
                        message: format!(
                            "{name}/{item}: fire {f} (at {} s) not completed by {} s",
                            (f - origin_ms) / 1000,
                            deadline / 1000
                        ),
                    });
                }
            }
        }
    }
    out
}

/// Misfire compensation: after the heal, for a job with misfire on, a fire that comes while an
/// item runs is run right after that run ends (missed fires collapse into one run of the
/// latest). `slack_ms` covers clock skew and round trips.
pub fn misfires(
    runs: &[RunRecord],
    jobs: &BTreeMap<String, JobAtEnd>,
    origin: DateTime<Utc>,
    from: u64,
    to: u64,
    slack_ms: u64,
) -> Vec<Violation> {
    let mut out = Vec::new();
    let origin_ms = origin.timestamp_millis();
    let by_item = super::runs_by_item(runs);
    for (name, job) in jobs {
        let c = &job.config;
        if !(c.misfire && c.monitor_execution) {
            continue;
        }
        let Some(cron) = &c.cron else { continue };
        for r in runs
            .iter()
            .filter(|r| r.job == *name && !r.cancelled && r.start >= from)
        {
            let Some(end) = r.end else { continue };
            if end + slack_ms >= to || r.item >= c.sharding_total_count {
                continue;
            }
            let Some(start) = DateTime::<Utc>::from_timestamp_millis(origin_ms + r.start as i64)
            else {
                continue;
            };
            // The latest fire clearly inside the run.
            let inside: Option<i64> = cron
                .fires_after(start, &c.time_zone)
                .map(|t| t.timestamp_millis())
                .take_while(|t| *t + slack_ms as i64 <= origin_ms + end as i64)
                .last();
            let Some(fire) = inside else { continue };
            let mine = by_item
                .get(&(name.as_str(), r.item))
                .map_or(&[][..], |v| &v[..]);
            let compensated = mine
                .iter()
                .any(|x| x.fire >= fire && x.start >= r.start && x.start <= end + slack_ms);
            if !compensated {
                out.push(Violation {
                    checker: "misfire",
                    time: end + slack_ms,
                    message: format!(
                        "{name}/{}: fire {fire} came while node {}'s run ({} to {end}) lasted, and no run of it followed within {slack_ms} ms",
                        r.item, r.node, r.start
                    ),
                });
            }
        }
    }
    out
}
