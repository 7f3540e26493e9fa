//! Checker 3: after the heal, every fire of every enabled item of a job with failover and
//! misfire on completes within a bound: a run of that fire or a later one (missed fires
//! collapse) ends, not cut short, by `fire + bound`.
//!
//! Start-up after downtime ([`downtime`], [`catch_ups`]): a fire from before a start of the
//! job's cluster (a registration the store showed into an empty `instances/`) runs only if it
//! is within the job's catch-up bound (`shardjob.misfire.catchup.seconds`, 0 by default)
//! before the start; and within the bound, it does run.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use shardjob_core::JobConfig;

use shardjob_core::machine::record::RunKind;

use super::Violation;
use crate::cluster::{ClusterStart, RunRecord};

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
        // By item: the completed runs by fire, with the earliest end of a run of that fire or
        // a later one, so that each fire is one search.
        let ends: Vec<(Vec<i64>, Vec<u64>)> = (0..c.sharding_total_count)
            .map(|item| {
                let mut done: Vec<(i64, u64)> = by_item
                    .get(&(name.as_str(), item))
                    .map_or(&[][..], |v| &v[..])
                    .iter()
                    .filter(|r| !r.cancelled)
                    .filter_map(|r| r.end.map(|e| (r.fire, e)))
                    .collect();
                done.sort_unstable();
                let fires = done.iter().map(|(f, _)| *f).collect();
                let mut earliest: Vec<u64> = done.iter().map(|(_, e)| *e).collect();
                for k in (0..earliest.len().saturating_sub(1)).rev() {
                    earliest[k] = earliest[k].min(earliest[k + 1]);
                }
                (fires, earliest)
            })
            .collect();
        for fire in cron.fires_after(start, &c.time_zone).take(10_000) {
            let f = fire.timestamp_millis();
            if f > end_ms {
                break;
            }
            let deadline = (f - origin_ms) as u64 + job.bound_ms;
            for item in 0..c.sharding_total_count {
                let done = ends.get(item as usize).is_some_and(|(fires, earliest)| {
                    let k = fires.partition_point(|x| *x < f);
                    earliest.get(k).is_some_and(|e| *e <= deadline)
                });
                if !done {
                    out.push(Violation {
                        subject: super::Subject::fire(name, item, f),
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
                    subject: super::Subject::run(r),
                    checker: "misfire",
                    time: end + slack_ms,
                    message: format!(
                        "{name}/{}: fire {fire} came while {}'s run ({} to {end}) lasted, and no run of it followed within {slack_ms} ms",
                        r.item, r.runner(), r.start
                    ),
                });
            }
        }
    }
    out
}

/// No run of a fire that was missed while the job had no registered instance: for every start
/// of the job's cluster, a fire more than the job's catch-up bound (`catchup_ms`, by job)
/// before the start (by the clock of the instance that started it) is never started after
/// it, unless it is a failover of a run that had started before (a run cut short by the
/// downtime), or a run on time by its own node's clock: a catch-up runs a fire late, and an
/// instance that runs its fire on time only looks late beside a start stamped by a clock
/// ahead of its own (seed 7546: an operator's shutdown of the job's last registered instance,
/// whose clock lagged another's by 100 ms, raced the other's registration as a new start).
/// `slack_ms` covers rounding.
pub fn downtime(
    runs: &[RunRecord],
    starts: &[ClusterStart],
    catchup_ms: &BTreeMap<String, i64>,
    slack_ms: i64,
) -> Vec<Violation> {
    let mut out = Vec::new();
    let mut by_job: BTreeMap<&str, Vec<&ClusterStart>> = BTreeMap::new();
    for s in starts {
        by_job.entry(s.job.as_str()).or_default().push(s);
    }
    for r in runs {
        if matches!(r.kind, RunKind::Failover | RunKind::Trigger) {
            continue;
        }
        let Some(list) = by_job.get(r.job.as_str()) else {
            continue;
        };
        let bound = catchup_ms.get(&r.job).copied().unwrap_or(0);
        // The latest start before the run (its time is what the registry holds then).
        let Some(s) = list.iter().take_while(|s| s.at <= r.start).last() else {
            continue;
        };
        let allowed = bound.saturating_add(slack_ms);
        if r.late_by_own_clock() > allowed && r.fire.saturating_add(allowed) < s.wall {
            out.push(Violation {
                subject: super::Subject::run(r),
                checker: "downtime",
                time: r.start,
                message: format!(
                    "{}/{}: fire {} ran ({:?} on {} at {}) although the job's cluster started after it, at {} by {} (at {} ms), and its catch-up bound is {} ms",
                    r.job, r.item, r.fire, r.kind, r.runner(), r.start, s.wall, s.starter(), s.at, bound
                ),
            });
        }
    }
    out
}

/// Catch-up after downtime: for each start of a job's cluster at or after `from` (when no
/// fault happens any more) of a job with a catch-up bound, failover and misfire on, the
/// latest fire within the bound before the start (by the clock of the instance that started
/// it, `slack_ms` inside either end) completes on every item that ran an earlier fire, within
/// the job's bound: a run of it or of a later fire ends, not cut short, or its end is
/// committed in the registry. A failover of a fire later than the start by the starter's
/// clock (a run cut short by the downtime, its fire stamped by a clock ahead: seed 40585,
/// 26 s ahead) starts only when its fire comes by its runner's clock: it is judged within the
/// bound from then, however long after the start that is. A run cut short (cancelled while its
/// session was in doubt) whose completion the registry committed, even one whose reply was
/// lost, finished its fire:
/// the machine records the end of a cancelled run like any other, and a fire recorded as
/// finished is never due again, so there is nothing left to catch up. Jobs whose item count
/// may have changed (an operator's) are not passed in: a new item does not run fires from
/// before its creation.
pub fn catch_ups(
    runs: &[RunRecord],
    starts: &[ClusterStart],
    jobs: &BTreeMap<String, JobAtEnd>,
    from: u64,
    to: u64,
    slack_ms: i64,
) -> Vec<Violation> {
    let mut out = Vec::new();
    let by_item = super::runs_by_item(runs);
    for s in starts.iter().filter(|s| s.at >= from) {
        let Some(job) = jobs.get(&s.job) else {
            continue;
        };
        let c = &job.config;
        let bound = c.misfire_catchup_ms();
        if bound == 0 || !(c.failover && c.misfire && c.monitor_execution) {
            continue;
        }
        let Some(cron) = &c.cron else { continue };
        let deadline = s.at + job.bound_ms;
        if deadline > to {
            continue;
        }
        let lo = s.wall - bound + slack_ms;
        let hi = s.wall - slack_ms;
        let Some(first) = DateTime::<Utc>::from_timestamp_millis(lo - 1) else {
            continue;
        };
        let Some(fire) = cron
            .fires_after(first, &c.time_zone)
            .map(|t| t.timestamp_millis())
            .take_while(|t| *t <= hi)
            .take(1_000_000)
            .last()
        else {
            continue;
        };
        for item in 0..c.sharding_total_count {
            let mine = by_item
                .get(&(s.job.as_str(), item))
                .map_or(&[][..], |v| &v[..]);
            // Only an item known to exist before the fire (it ran an earlier one) owes it: an
            // item runs no fire from before its creation.
            if !mine
                .iter()
                .any(|r| r.fire < fire && r.kind != RunKind::Trigger)
            {
                continue;
            }
            let done = mine.iter().any(|r| {
                // A failover of a fire after the start (by the starter's clock) re-runs a run
                // cut short by the downtime whose fire a clock ahead stamped: it waits for
                // that fire by its runner's clock, and is judged from then.
                let by = if r.kind == RunKind::Failover && r.fire > s.wall {
                    let came = r
                        .start
                        .saturating_sub(u64::try_from(r.late_by_own_clock()).unwrap_or(0));
                    deadline.max(came.saturating_add(job.bound_ms))
                } else {
                    deadline
                };
                r.fire >= fire
                    && (by > to
                        || (!r.cancelled && r.end.is_some_and(|e| e <= by))
                        || r.end_committed.is_some_and(|e| e <= by))
            });
            if !done {
                out.push(Violation {
                    subject: super::Subject::fire(&s.job, item, fire),
                    checker: "catch-up",
                    time: deadline,
                    message: format!(
                        "{}/{item}: fire {fire}, {} ms before the cluster's start at {} ms ({}), within its catch-up bound of {bound} ms, not completed by {} s",
                        s.job,
                        s.wall - fire,
                        s.at,
                        s.starter(),
                        deadline / 1000
                    ),
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use shardjob_core::machine::record::RunKind;
    use shardjob_core::{CronExpr, JobConfig};

    use super::{JobAtEnd, catch_ups, downtime};
    use crate::checkers::test_run;
    use crate::cluster::{ClusterStart, RunRecord, wall_origin};

    fn run(fire: i64, kind: RunKind, start: u64) -> RunRecord {
        RunRecord {
            fire,
            kind,
            ..test_run(start)
        }
    }

    fn start(at: u64) -> ClusterStart {
        ClusterStart {
            at,
            job: "j".into(),
            node: 1,
            java: false,
            wall: wall_origin().timestamp_millis() + at as i64,
        }
    }

    #[test]
    fn a_fire_from_before_a_start_beyond_the_bound_must_not_run() {
        let o = wall_origin().timestamp_millis();
        let starts = [start(60_000)];
        let no_bound = BTreeMap::from([("j".to_owned(), 0)]);
        let bound = BTreeMap::from([("j".to_owned(), 30_000)]);
        // Fire at 20 s, run after the start at 60 s.
        let late = [run(o + 20_000, RunKind::Misfire, 60_010)];
        assert_eq!(downtime(&late, &starts, &no_bound, 50).len(), 1);
        assert_eq!(downtime(&late, &starts, &bound, 50).len(), 1);
        // Within a 30 s bound: fine.
        let within = [run(o + 40_000, RunKind::Misfire, 60_010)];
        assert_eq!(downtime(&within, &starts, &no_bound, 50).len(), 1);
        assert!(downtime(&within, &starts, &bound, 50).is_empty());
        // Run before the start, a failover of a run cut short, a fire after the start: fine.
        let fine = [
            run(o + 20_000, RunKind::Scheduled, 20_000),
            run(o + 20_000, RunKind::Failover, 60_010),
            run(o + 61_000, RunKind::Scheduled, 61_000),
        ];
        assert!(downtime(&fine, &starts, &no_bound, 50).is_empty());
        // A run on time by its own clock, which lags the starter's (seed 7546): it started
        // after the start in true time, of a fire before it by the starter's clock, but it
        // was no catch-up. The same run late by its own clock is one.
        let mut on_time = run(o + 59_900, RunKind::Scheduled, 60_010);
        on_time.wall_start = o + 59_905;
        assert!(downtime(&[on_time.clone()], &starts, &no_bound, 50).is_empty());
        on_time.wall_start = o + 60_010;
        assert_eq!(downtime(&[on_time], &starts, &no_bound, 50).len(), 1);
    }

    #[test]
    fn within_the_bound_the_missed_fire_must_run_after_a_start() {
        let o = wall_origin().timestamp_millis();
        let mut config = JobConfig::new("j", 1);
        config.cron = CronExpr::parse("0/10 * * * * ?").ok();
        config.failover = true;
        config.props.insert(
            shardjob_core::config::MISFIRE_CATCHUP_PROP.to_owned(),
            "30".to_owned(),
        );
        let jobs = BTreeMap::from([(
            "j".to_owned(),
            JobAtEnd {
                config,
                bound_ms: 10_000,
            },
        )]);
        // The start at 65 s: the fire at 60 s is within 30 s before it.
        let starts = [start(65_000)];
        let violations = |runs: &[RunRecord]| catch_ups(runs, &starts, &jobs, 0, 120_000, 50);
        let earlier = run(o + 50_000, RunKind::Scheduled, 50_000);
        let none = [earlier.clone()];
        let found = violations(&none);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].checker, "catch-up");
        let caught_up = [earlier.clone(), run(o + 60_000, RunKind::Misfire, 65_100)];
        assert!(violations(&caught_up).is_empty());
        // Run before the downtime: also fine.
        let before = [earlier.clone(), run(o + 60_000, RunKind::Scheduled, 60_000)];
        assert!(violations(&before).is_empty());
        // Cancelled before the downtime (its session in doubt): owed, unless the registry
        // committed its end (a deaf instance's completion applies and its reply is lost),
        // which finished the fire for every instance.
        let mut cut = run(o + 60_000, RunKind::Scheduled, 60_000);
        cut.cancelled = true;
        cut.end_committed = None;
        let found = violations(&[earlier.clone(), cut.clone()]);
        assert_eq!(found.len(), 1, "{found:?}");
        cut.end_committed = Some(60_200);
        assert!(violations(&[earlier.clone(), cut]).is_empty());
        // An item that never ran an earlier fire, a start before `from`, or a deadline
        // beyond the end: not checked.
        assert!(violations(&[]).is_empty());
        assert!(catch_ups(&none, &starts, &jobs, 70_000, 120_000, 50).is_empty());
        assert!(catch_ups(&none, &starts, &jobs, 0, 70_000, 50).is_empty());
        // Seed 40585: a run cut short by the downtime, of a fire at 80 s stamped by a clock
        // 20 s ahead, is failed over at the start and waits for its fire by its runner's
        // clock: it ends past the start's bound (75 s) but within the bound from its fire.
        let mut ahead = run(o + 80_000, RunKind::Failover, 80_010);
        ahead.wall_start = o + 80_010;
        ahead.end = Some(82_000);
        ahead.end_committed = Some(82_001);
        assert!(violations(&[earlier.clone(), ahead.clone()]).is_empty());
        // Beyond the bound from its fire: owed still.
        ahead.end = Some(90_500);
        ahead.end_committed = Some(90_501);
        let found = violations(&[earlier.clone(), ahead.clone()]);
        assert_eq!(found.len(), 1, "{found:?}");
        // Started late by its own clock: judged from when its fire came by that clock.
        ahead.start = 89_000;
        ahead.wall_start = o + 89_000;
        ahead.end = Some(90_500);
        ahead.end_committed = Some(90_501);
        let found = violations(&[earlier.clone(), ahead.clone()]);
        assert_eq!(found.len(), 1, "{found:?}");
        // Only a failover: a scheduled run of a later fire is no catch-up of the missed one.
        let mut later = run(o + 80_000, RunKind::Scheduled, 80_000);
        later.end = Some(82_000);
        let found = violations(&[earlier.clone(), later]);
        assert_eq!(found.len(), 1, "{found:?}");
    }
}
