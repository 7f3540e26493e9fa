//! Checker: no fire is lost, during the chaos too. For a job with failover, misfire and
//! execution monitoring on, every fire of every item that existed before it is started by a
//! run of that fire, or by a misfire or failover run of that fire or a later one (missed
//! fires collapse into one run of the latest, which names them all); a *scheduled* run of a
//! later fire does not cover it (that fire was lost: counted as done without running). Fires
//! near the end are left to the timed check after the heal ([`super::liveness`]).
//!
//! A fire is excused only by facts the world recorded, never by the machine's events:
//! - an operator's edit of the job's `config` after the fire (less `slack_ms`): the
//!   configuration at the end, by which fires are listed, may not be the one of the fire;
//! - an operator's write or deletion of the item's `disabled` node or under the job's
//!   `servers/` between the fire and the start of the item's next run (a disabled item or
//!   server: fires may rightly be skipped);
//! - a start of the job's cluster ([`ClusterStart`]) in that span, when the fire is more than
//!   the job's catch-up bound before it by the starter's clock (within 50 ms of rounding):
//!   fires missed while no instance was registered are given up;
//! - no run of the item of an earlier fire since the job's last configuration edit before
//!   the fire: the item may not have existed then (an item runs no fire from before its
//!   creation);
//! - no run of the item of a later fire at all, and a run of an earlier fire, or a manual
//!   trigger's run, still going at the end (its end never recorded, or within `slack_ms` of
//!   the end): a fire that comes while a run holds its item is a misfire, run right after
//!   that run ends and its completion is seen (a later fire's misfire run then collapses
//!   it), and a trigger waiting when a fire was owed goes first (the fire's misfire run
//!   follows the trigger's), so it is not owed yet (the timed misfire check of
//!   [`super::liveness`] leaves out such runs alike). It is still lost if even a run at the
//!   end would come later than the job's calm bound (see [`late`]) after the fire and the
//!   nemesis's last act.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use shardjob_core::machine::record::RunKind;

use super::Violation;
use super::liveness::JobAtEnd;
use crate::cluster::{ClusterStart, RunRecord};

/// What the world saw besides the runs.
#[derive(Debug)]
pub struct Facts<'a> {
    /// Every start of a job's cluster.
    pub starts: &'a [ClusterStart],
    /// Every operator's write or deletion: (virtual ms, path).
    pub operator: &'a [(u64, String)],
    /// Wall time at virtual 0.
    pub origin: DateTime<Utc>,
    /// Covers clock skews (the largest any node had) and round trips, ms.
    pub slack_ms: u64,
    /// Virtual ms of the end of the world.
    pub end: u64,
    /// When the nemesis acted (virtual ms, ascending or not).
    pub disruptions: &'a [u64],
    /// By job: how long after its fire, or after the nemesis's last act before its run, a
    /// fire may start at the latest. A job left out is held to no time.
    pub calm_ms: &'a BTreeMap<String, u64>,
}

impl Facts<'_> {
    /// When the world calmed down for a fire at virtual `at` by virtual `t`: the later of
    /// the fire and the nemesis's last act at or before `t`.
    fn calmed(&self, at: u64, t: u64) -> u64 {
        self.disruptions
            .iter()
            .copied()
            .filter(|d| *d <= t)
            .max()
            .unwrap_or(0)
            .max(at)
    }
}

/// The facts a check asks once per fire, sorted once: the nemesis's acts, and by job the
/// operator's edits under it.
struct Sorted {
    /// When the nemesis acted, ascending.
    disruptions: Vec<u64>,
}

impl Sorted {
    fn new(facts: &Facts) -> Self {
        let mut disruptions = facts.disruptions.to_vec();
        disruptions.sort_unstable();
        Self { disruptions }
    }

    /// [`Facts::calmed`], by a search.
    fn calmed(&self, at: u64, t: u64) -> u64 {
        let k = self.disruptions.partition_point(|d| *d <= t);
        k.checked_sub(1)
            .and_then(|k| self.disruptions.get(k))
            .copied()
            .unwrap_or(0)
            .max(at)
    }
}

/// One item's runs (triggers left out), ready for the question [`late`] asks of every fire:
/// which run first covers it.
struct Covers<'r> {
    /// The runs by fire, then start.
    by_fire: Vec<&'r RunRecord>,
    /// For each index of `by_fire`, the earliest start of a misfire or failover run at that
    /// index or after.
    collapsing_from: Vec<Option<u64>>,
}

impl<'r> Covers<'r> {
    fn new(mine: &[&'r RunRecord]) -> Self {
        let mut by_fire = mine.to_vec();
        by_fire.sort_by_key(|r| (r.fire, r.start));
        let mut collapsing_from = vec![None; by_fire.len() + 1];
        for k in (0..by_fire.len()).rev() {
            let here = matches!(by_fire[k].kind, RunKind::Misfire | RunKind::Failover)
                .then_some(by_fire[k].start);
            collapsing_from[k] = match (here, collapsing_from[k + 1]) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
        Self {
            by_fire,
            collapsing_from,
        }
    }

    /// The start of the first run that covers fire `f`: a run of `f`, or a misfire or
    /// failover run of a later fire.
    fn start(&self, f: i64) -> Option<u64> {
        let at = self.by_fire.partition_point(|r| r.fire < f);
        let exact = self
            .by_fire
            .get(at)
            .filter(|r| r.fire == f)
            .map(|r| r.start);
        let after = self.by_fire.partition_point(|r| r.fire <= f);
        let later = self.collapsing_from.get(after).copied().flatten();
        match (exact, later) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// Checks every fire up to the end, less each job's bound.
pub fn check(
    runs: &[RunRecord],
    jobs: &BTreeMap<String, JobAtEnd>,
    facts: &Facts,
) -> Vec<Violation> {
    let mut out = Vec::new();
    let origin_ms = facts.origin.timestamp_millis();
    let by_item = super::runs_by_item(runs);
    let slack = facts.slack_ms;
    let sorted = Sorted::new(facts);
    for (name, job) in jobs {
        let c = &job.config;
        if !(c.failover && c.misfire && c.monitor_execution) {
            continue;
        }
        let Some(cron) = &c.cron else { continue };
        let config_path = format!("/{name}/config");
        let servers = format!("/{name}/servers/");
        let edits: Vec<u64> = facts
            .operator
            .iter()
            .filter(|(_, p)| *p == config_path)
            .map(|(t, _)| *t)
            .collect();
        let starts: Vec<&ClusterStart> = facts.starts.iter().filter(|s| s.job == *name).collect();
        // The operator's writes under the job, ascending.
        let under = format!("/{name}/");
        let mut touches: Vec<u64> = facts
            .operator
            .iter()
            .filter(|(_, p)| p.starts_with(&under))
            .map(|(t, _)| *t)
            .collect();
        touches.sort_unstable();
        let catchup = c.misfire_catchup_ms();
        let last_fire = origin_ms + facts.end.saturating_sub(job.bound_ms) as i64;
        // The job's fires, listed once for all its items.
        let mut fires: Option<Vec<i64>> = None;
        for item in 0..c.sharding_total_count {
            let mut mine: Vec<&RunRecord> = by_item
                .get(&(name.as_str(), item))
                .map_or_else(Vec::new, |v| v.clone());
            // Triggers too: only whether one holds the item at the end ([`waits`]).
            let with_triggers = mine.clone();
            mine.retain(|r| r.kind != RunKind::Trigger);
            if mine.is_empty() {
                continue;
            }
            mine.sort_by_key(|r| r.start);
            let disabled = format!("/{name}/sharding/{item}/disabled");
            let first = mine.iter().map(|r| r.fire).min().unwrap_or(i64::MAX);
            let fires = fires.get_or_insert_with(|| {
                DateTime::<Utc>::from_timestamp_millis(origin_ms - 1)
                    .map(|from| {
                        cron.fires_after(from, &c.time_zone)
                            .map(|t| t.timestamp_millis())
                            .take_while(|f| *f <= last_fire)
                            .take(100_000)
                            .collect()
                    })
                    .unwrap_or_default()
            });
            let covers = Covers::new(&mine);
            // Fires run, and the latest fire a misfire or failover run collapsed.
            let mut ran: Vec<i64> = mine.iter().map(|r| r.fire).collect();
            ran.sort_unstable();
            let collapsed = mine
                .iter()
                .filter(|r| matches!(r.kind, RunKind::Misfire | RunKind::Failover))
                .map(|r| r.fire)
                .max();
            for &f in fires.iter().filter(|f| **f >= first) {
                let at = u64::try_from(f - origin_ms).unwrap_or(0);
                let lo = at.saturating_sub(slack);
                let next = mine.iter().find(|r| r.fire > f);
                let hi = next.map_or(facts.end, |r| r.start).saturating_add(slack);
                // Given up at a start of the job's cluster before the item's next run.
                let given_up = starts
                    .iter()
                    .any(|s| (lo..=hi).contains(&s.at) && f < s.wall - catchup + 50);
                let covered = ran.binary_search(&f).is_ok() || collapsed.is_some_and(|m| m > f);
                if covered {
                    // A fire given up is owed no run: a misfire run of a later fire, however
                    // much later, is no late run of it (seed 7775 of the plant world: the
                    // fires missed in an outage, given up at the start after it, and the
                    // item's first misfire run 70 s later).
                    if given_up {
                        continue;
                    }
                    let cover = Cover {
                        start: covers.start(f),
                        touches: &touches,
                        sorted: &sorted,
                    };
                    if let Some(v) = late(&mine, name, item, f, origin_ms, facts, &cover) {
                        out.push(v);
                    }
                    continue;
                }
                // The configuration at the end (its cron, its total) held at the fire only
                // if no edit came after it.
                if edits.iter().any(|t| *t >= lo) {
                    continue;
                }
                // The item existed before the fire: it ran an earlier one since the job's
                // last edit before the fire.
                let edited = edits.iter().copied().filter(|t| *t < lo).max().unwrap_or(0);
                if !mine.iter().any(|r| r.fire < f && r.start >= edited) {
                    continue;
                }
                if next.is_none() && waits(&with_triggers, name, f, at, facts) {
                    continue;
                }
                let touched = facts.operator.iter().any(|(t, p)| {
                    (lo..=hi).contains(t)
                        && (*p == config_path || *p == disabled || p.starts_with(&servers))
                });
                if touched || given_up {
                    continue;
                }
                out.push(Violation {
                    subject: super::Subject::fire(name, item, f),
                    checker: "lost",
                    time: hi,
                    message: match next {
                        Some(r) => format!(
                            "{name}/{item}: fire {f} (at {at} ms) never ran; {} ran the later fire {} ({:?}) from {} ms",
                            r.runner(), r.fire, r.kind, r.start
                        ),
                        None => format!(
                            "{name}/{item}: fire {f} (at {at} ms) never ran, nor any later one (catch-up bound {catchup} ms; cluster starts at {:?})",
                            starts.iter().map(|s| (s.at, s.wall - origin_ms)).collect::<Vec<_>>()
                        ),
                    },
                });
            }
        }
    }
    out
}

/// Whether fire `f` (at `at` virtual ms) of an item, which no run of a later fire followed,
/// still waits behind a run of an earlier fire, or a manual trigger's run, that holds the
/// item at the end: that run started in time (within the job's calm bound of the fire and of
/// the nemesis's last act before it), and the fire's misfire run, which comes once it ends,
/// would be in time at the end too (a job held to no calm bound is in time whenever). `mine`:
/// the item's runs, triggers included. A trigger's run holds the item whatever its "fire"
/// (the trigger's own time, which may be after `f`): an owner runs a trigger it was handed
/// before the fires it owes, and their misfire run once the trigger's run ends (seed 29861:
/// a trigger queued during a re-shard started with items 0 and 3, owed the fires from +38 s,
/// at +93.4 s for 15 to 20 s, past the end at +108 s; their misfire run came at +113.3 s).
fn waits(mine: &[&RunRecord], name: &str, f: i64, at: u64, facts: &Facts) -> bool {
    let bound = facts.calm_ms.get(name).copied();
    let in_time = |t: u64| bound.is_none_or(|b| t <= facts.calmed(at, t).saturating_add(b));
    // The item's latest run must be the one that holds it: a run whose session ended holds
    // nothing in the registry (the item moves on, and a run of it elsewhere owes the fire),
    // nor does one that another run of the item followed. A run that ended within the slack
    // of the end still holds it for the fire's sake: its misfire run comes only once its
    // completion is recorded and seen by the item's owner (a write, a watch delivery, a
    // claim), and whether it came is the timed misfire check's (which leaves out such runs
    // too; seed 41702: a failover run of items 6 and 7 ended 145 ms before the end, their
    // owners' misfire runs were a watch delay of 271 ms away).
    let Some(last) = mine.iter().max_by_key(|r| r.start) else {
        return false;
    };
    (last.kind == RunKind::Trigger || last.fire < f)
        && last
            .end
            .is_none_or(|e| e.saturating_add(facts.slack_ms) >= facts.end)
        && last.session_end.is_none()
        && in_time(last.start)
        && in_time(facts.end)
}

/// What [`late`] asks of a fire, worked out once per item or job.
struct Cover<'a> {
    /// When the first run that covers the fire started ([`Covers::start`]).
    start: Option<u64>,
    /// The operator's writes under the job, ascending.
    touches: &'a [u64],
    /// The nemesis's acts, ascending.
    sorted: &'a Sorted,
}

/// Whether the run that covers fire `f` of an item started too late: later than the job's
/// calm bound after the fire and after the nemesis's last act before that start. Fires whose
/// configuration may have changed are left to the rest of the check.
fn late(
    mine: &[&RunRecord],
    name: &str,
    item: u32,
    f: i64,
    origin_ms: i64,
    facts: &Facts,
    cover: &Cover<'_>,
) -> Option<Violation> {
    let bound = *facts.calm_ms.get(name)?;
    let start = cover.start?;
    let at = u64::try_from(f - origin_ms).unwrap_or(0);
    let calmed = cover.sorted.calmed(at, start);
    // An operator's write under the job from `at - slack` to the start.
    let from = cover
        .touches
        .partition_point(|t| t.saturating_add(facts.slack_ms) < at);
    let edited = cover.touches.get(from).is_some_and(|t| *t <= start);
    if edited || start <= calmed + bound {
        return None;
    }
    // A violation: the covering run itself, for the message (the first of the earliest).
    let cover = mine
        .iter()
        .filter(|r| {
            r.fire == f || (r.fire > f && matches!(r.kind, RunKind::Misfire | RunKind::Failover))
        })
        .min_by_key(|r| r.start)?;
    Some(Violation {
        subject: super::Subject::fire(name, item, f),
        checker: "late",
        time: calmed + bound,
        message: format!(
            "{name}/{item}: fire {f} (at {at} ms) first ran at {} ms ({}, {:?} of fire {}), more than {bound} ms after the fire and the nemesis's last act before (at {calmed} ms)",
            cover.start,
            cover.runner(),
            cover.kind,
            cover.fire
        ),
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use shardjob_core::machine::record::RunKind;
    use shardjob_core::{CronExpr, JobConfig};

    use super::{Facts, check};
    use crate::checkers::liveness::JobAtEnd;
    use crate::checkers::test_run;
    use crate::cluster::{ClusterStart, RunRecord, wall_origin};

    fn run(fire_s: i64, kind: RunKind) -> RunRecord {
        let o = wall_origin().timestamp_millis();
        let start = (fire_s * 1_000) as u64;
        RunRecord {
            fire: o + fire_s * 1_000,
            kind,
            token: start,
            ..test_run(start)
        }
    }

    fn jobs() -> BTreeMap<String, JobAtEnd> {
        let mut config = JobConfig::new("j", 1);
        config.cron = CronExpr::parse("0/10 * * * * ?").ok();
        config.failover = true;
        BTreeMap::from([(
            "j".to_owned(),
            JobAtEnd {
                config,
                bound_ms: 5_000,
            },
        )])
    }

    fn found(runs: &[RunRecord], starts: &[ClusterStart], operator: &[(u64, String)]) -> usize {
        let calm = BTreeMap::new();
        let facts = Facts {
            starts,
            operator,
            origin: wall_origin(),
            slack_ms: 1_000,
            end: 45_000,
            disruptions: &[],
            calm_ms: &calm,
        };
        check(runs, &jobs(), &facts).len()
    }

    #[test]
    fn a_later_scheduled_run_does_not_cover_a_lost_fire() {
        use RunKind::{Misfire, Scheduled};
        let all = [
            run(10, Scheduled),
            run(20, Scheduled),
            run(30, Scheduled),
            run(40, Scheduled),
        ];
        assert_eq!(found(&all, &[], &[]), 0);
        // The fire at 20 s lost: the scheduled run at 30 s does not cover it.
        let lost = [run(10, Scheduled), run(30, Scheduled), run(40, Scheduled)];
        assert_eq!(found(&lost, &[], &[]), 1);
        // A misfire run of 30 s collapses it.
        let collapsed = [run(10, Scheduled), run(30, Misfire), run(40, Scheduled)];
        assert_eq!(found(&collapsed, &[], &[]), 0);
        // Excused by an operator's disable of the item before the next run.
        let disabled = [(21_000, "/j/sharding/0/disabled".to_owned())];
        assert_eq!(found(&lost, &[], &disabled), 0);
        // Or by a start of the job's cluster after it (no catch-up bound).
        let o = wall_origin().timestamp_millis();
        let start = ClusterStart {
            at: 25_000,
            job: "j".into(),
            node: 1,
            java: false,
            wall: o + 25_000,
        };
        assert_eq!(found(&lost, &[start], &[]), 0);
    }

    #[test]
    fn a_fire_behind_a_run_still_going_at_the_end_is_not_owed_yet() {
        use RunKind::{Failover, Scheduled};
        // The run of the fire at 10 s is cut short; its failover run starts again at 12 s
        // and still holds the item at the end (45 s): the fires at 20, 30 and 40 s are
        // misfires, run once it ends (seeds 9066 and 19700: a failover run restarted after
        // an outage, still going when the world ended).
        let mut held = run(10, Failover);
        held.start = 12_000;
        held.end = None;
        let runs = [run(10, Scheduled), held.clone()];
        let count = |runs: &[RunRecord], calm: &[(&str, u64)], disruptions: &[u64]| {
            let calm = calm.iter().map(|(j, b)| ((*j).to_owned(), *b)).collect();
            let facts = Facts {
                starts: &[],
                operator: &[],
                origin: wall_origin(),
                slack_ms: 1_000,
                end: 45_000,
                disruptions,
                calm_ms: &calm,
            };
            check(runs, &jobs(), &facts).len()
        };
        assert_eq!(count(&runs, &[], &[]), 0);
        // Once that run has ended, the fires are lost: no misfire run followed it.
        let mut ended = held.clone();
        ended.end = Some(30_000);
        assert_eq!(count(&[run(10, Scheduled), ended], &[], &[]), 3);
        // A scheduled run of a later fire means the earlier ones were passed over.
        let mut later = run(30, Scheduled);
        later.end = None;
        assert_eq!(
            count(&[run(10, Scheduled), held.clone(), later], &[], &[]),
            1
        );
        // Held to a calm bound of 10 s: a run at the end would be late for the fires at 20
        // and 30 s (lost), in time for the one at 40 s.
        assert_eq!(count(&runs, &[("j", 10_000)], &[]), 2);
        // Unless the nemesis acted lately (at 40 s): the world calmed down only then.
        assert_eq!(count(&runs, &[("j", 10_000)], &[40_000]), 0);
        // The run that holds the item must have started in time itself: started at 35 s,
        // more than 10 s after the fire at 20 s (and no disruption since), it came late for
        // that fire, which is lost; the fires at 30 and 40 s still wait for it.
        let mut slow = held.clone();
        slow.start = 35_000;
        assert_eq!(
            count(&[run(10, Scheduled), slow], &[("j", 10_000)], &[40_000]),
            1
        );
        // A run whose session ended holds nothing: the fires are owed elsewhere.
        let mut zombie = held.clone();
        zombie.session_end = Some(20_000);
        assert_eq!(count(&[run(10, Scheduled), zombie], &[], &[]), 3);
        // A run that ended within the slack (1 s) of the end still holds it: its misfire run
        // comes once its completion is seen (seed 41702: ended 145 ms before the end, the
        // misfire runs were a watch delay away). One that ended earlier does not.
        let mut just = held.clone();
        just.end = Some(44_200);
        assert_eq!(count(&[run(10, Scheduled), just.clone()], &[], &[]), 0);
        just.end = Some(43_900);
        assert_eq!(count(&[run(10, Scheduled), just], &[], &[]), 3);
        // Nor does one another run of the item followed (here a failover run that ended).
        let mut after = run(10, Failover);
        after.start = 25_000;
        after.end = Some(26_000);
        assert_eq!(count(&[run(10, Scheduled), held, after], &[], &[]), 3);
    }

    #[test]
    fn a_fire_behind_a_trigger_run_still_going_at_the_end_is_not_owed_yet() {
        use RunKind::{Scheduled, Trigger};
        // The fires at 20, 30 and 40 s were owed when a manual trigger, waiting, went first
        // (at 36 s): its run still holds the item at the end (45 s), and their misfire run
        // comes once it ends (seed 29861). A trigger's "fire" is its own time, after some of
        // the fires it holds up.
        let count = |runs: &[RunRecord], calm: &[(&str, u64)]| {
            let calm = calm.iter().map(|(j, b)| ((*j).to_owned(), *b)).collect();
            let facts = Facts {
                starts: &[],
                operator: &[],
                origin: wall_origin(),
                slack_ms: 1_000,
                end: 45_000,
                disruptions: &[],
                calm_ms: &calm,
            };
            check(runs, &jobs(), &facts).len()
        };
        let mut trigger = run(36, Trigger);
        trigger.end = None;
        assert_eq!(count(&[run(10, Scheduled)], &[]), 3);
        assert_eq!(count(&[run(10, Scheduled), trigger.clone()], &[]), 0);
        // Ended before the end (not within the slack): the fires are lost.
        let mut ended = trigger.clone();
        ended.end = Some(40_000);
        assert_eq!(count(&[run(10, Scheduled), ended], &[]), 3);
        // Its session ended: it holds nothing.
        let mut zombie = trigger.clone();
        zombie.session_end = Some(38_000);
        assert_eq!(count(&[run(10, Scheduled), zombie], &[]), 3);
        // Held to a calm bound of 10 s, a trigger's run that started at 36 s came too late
        // for the fire at 20 s (lost), and the misfire run at the end comes too late for the
        // one at 30 s; the fire at 40 s still waits.
        assert_eq!(count(&[run(10, Scheduled), trigger], &[("j", 10_000)]), 2);
    }

    #[test]
    fn a_fire_runs_within_the_calm_bound_of_the_fire_or_of_the_last_disruption() {
        use RunKind::{Misfire, Scheduled};
        let mut slow = run(50, Misfire);
        slow.start = 60_000;
        let runs = [run(10, Scheduled), slow];
        let calm = BTreeMap::from([("j".to_owned(), 20_000)]);
        let late = |disruptions: &[u64]| {
            let facts = Facts {
                starts: &[],
                operator: &[],
                origin: wall_origin(),
                slack_ms: 1_000,
                end: 62_000,
                disruptions,
                calm_ms: &calm,
            };
            check(&runs, &jobs(), &facts)
                .into_iter()
                .filter(|v| v.checker == "late")
                .count()
        };
        // The fires at 20 and 30 s, which the misfire run of 50 s collapses, first ran at
        // 60 s, more than 20 s of calm after them: late (the one at 40 s is just in time).
        assert_eq!(late(&[]), 2);
        assert_eq!(late(&[15_000]), 2);
        // The nemesis acted at 45 s: the world calmed down only then.
        assert_eq!(late(&[45_000]), 0);
    }

    #[test]
    fn a_fire_given_up_at_a_start_is_no_late_run_of_a_later_misfire() {
        use RunKind::{Misfire, Scheduled};
        // The fires at 20 and 30 s came while no instance was registered; the job's cluster
        // started at 35 s (no catch-up bound), which gives them up; the item ran the fire at
        // 40 s, and a misfire run of 50 s, at 60 s (seed 7775 of the plant world).
        let mut slow = run(50, Misfire);
        slow.start = 60_000;
        let runs = [run(10, Scheduled), run(40, Scheduled), slow];
        let calm = BTreeMap::from([("j".to_owned(), 20_000)]);
        let o = wall_origin().timestamp_millis();
        let start = ClusterStart {
            at: 35_000,
            job: "j".into(),
            node: 1,
            java: false,
            wall: o + 35_000,
        };
        let late = |starts: &[ClusterStart]| {
            let facts = Facts {
                starts,
                operator: &[],
                origin: wall_origin(),
                slack_ms: 1_000,
                end: 62_000,
                disruptions: &[],
                calm_ms: &calm,
            };
            check(&runs, &jobs(), &facts)
                .into_iter()
                .filter(|v| v.checker == "late")
                .count()
        };
        // Without the start, the misfire run is a late run of the fires at 20 and 30 s.
        assert_eq!(late(&[]), 2);
        assert_eq!(late(std::slice::from_ref(&start)), 0);
        // A start after the item's next run (of 40 s) gives nothing up before it.
        let after = ClusterStart {
            at: 45_000,
            wall: o + 45_000,
            ..start
        };
        assert_eq!(late(&[after]), 2);
    }
}
