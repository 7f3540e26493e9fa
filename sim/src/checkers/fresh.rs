//! Checker: an item runs no fire from before its creation. The registry's history gives when
//! each item's `execution` record was created ([`Cluster::item_creations`]); a run of the
//! item that starts after its latest creation, of a fire more than `slack_ms` (clock skews
//! and rounding) before that creation, ran a fire the item never owed: a regrown item that
//! runs again a fire its number ran before the shrink, or a new item that runs the job's past.
//! Triggers carry their own time and are left out.
//!
//! [`Cluster::item_creations`]: crate::cluster::Cluster::item_creations

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use shardjob_core::machine::record::RunKind;

use super::Violation;
use crate::cluster::RunRecord;

/// Checks every run against the creations of its item.
pub fn check(
    runs: &[RunRecord],
    creations: &[(u64, String, u32)],
    origin: DateTime<Utc>,
    slack_ms: u64,
) -> Vec<Violation> {
    let mut by_item: BTreeMap<(&str, u32), Vec<u64>> = BTreeMap::new();
    for (at, job, item) in creations {
        by_item.entry((job.as_str(), *item)).or_default().push(*at);
    }
    let origin_ms = origin.timestamp_millis();
    let mut out = Vec::new();
    for r in runs.iter().filter(|r| r.kind != RunKind::Trigger) {
        let Some(list) = by_item.get(&(r.job.as_str(), r.item)) else {
            continue;
        };
        let Some(created) = list.iter().copied().filter(|t| *t <= r.start).max() else {
            continue;
        };
        let before = origin_ms + created as i64 - slack_ms as i64;
        if r.fire < before {
            out.push(Violation {
                subject: super::Subject::run(r),
                checker: "fresh",
                time: r.start,
                message: format!(
                    "{}/{}: {} ran fire {} ({:?}, at {} ms) at {} ms, although the item was created at {} ms",
                    r.job,
                    r.item,
                    r.runner(),
                    r.fire,
                    r.kind,
                    r.fire - origin_ms,
                    r.start,
                    created
                ),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use shardjob_core::machine::record::RunKind;

    use super::check;
    use crate::checkers::test_run;
    use crate::cluster::{RunRecord, wall_origin};

    #[test]
    fn an_item_runs_no_fire_from_before_its_creation() {
        let o = wall_origin().timestamp_millis();
        let run = |fire: i64, start: u64| RunRecord {
            item: 3,
            fire: o + fire,
            kind: RunKind::Failover,
            token: 7,
            end: None,
            end_committed: None,
            session: None,
            ..test_run(start)
        };
        let created = [(50_000, "j".to_owned(), 3)];
        // A fire long before the creation, run after it: reported.
        assert_eq!(
            check(&[run(10_000, 50_100)], &created, wall_origin(), 2_000).len(),
            1
        );
        // Within the slack, or run before the (re)creation: fine.
        assert!(check(&[run(49_000, 50_100)], &created, wall_origin(), 2_000).is_empty());
        assert!(check(&[run(10_000, 10_100)], &created, wall_origin(), 2_000).is_empty());
    }
}
