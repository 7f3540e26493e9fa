//! Misfires: Quartz's (one worker thread, `misfireThreshold` 1 ms, `DO_NOTHING`: fires that
//! passed while the worker was busy or the scheduler paused collapse, and the trigger
//! listener flags the instance's items) and ElasticJob's (`sharding/{i}/misfire` flags, the
//! misfire loop after a run).

use chrono::DateTime;
use shardjob_core::{CronExpr, JobTimeZone};

use super::jvm::{Jvm, Out};
use super::sharding::NECESSARY;

/// Quartz's `misfireThreshold` in ElasticJob's schedulers, ms.
pub(crate) const MISFIRE_THRESHOLD_MS: i64 = 1;

/// What Quartz does with the cron trigger whose next fire is `next` when it looks at it at
/// `now` (its worker free, the scheduler running), both epoch ms by the instance's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Acquire {
    /// Not missed: fire at that time (now or later).
    FireAt(i64),
    /// Missed (by more than the threshold): `DO_NOTHING` skips every fire up to now, the
    /// latest of which is `latest`; the trigger's next fire is `next` (none if the cron has
    /// no more).
    Missed { latest: i64, next: Option<i64> },
}

/// The first fire of `cron` after `after` (epoch ms), if any.
pub(crate) fn fire_after(cron: &CronExpr, tz: &JobTimeZone, after: i64) -> Option<i64> {
    let from = DateTime::from_timestamp_millis(after)?;
    cron.next_after(from, tz).map(|t| t.timestamp_millis())
}

/// Quartz's acquisition of the cron trigger (see [`Acquire`]).
pub(crate) fn acquire(cron: &CronExpr, tz: &JobTimeZone, next: i64, now: i64) -> Acquire {
    if next >= now - MISFIRE_THRESHOLD_MS {
        return Acquire::FireAt(next);
    }
    let mut latest = next;
    // The missed fires collapse into one; bounded, as a fire every second for a day is.
    for _ in 0..100_000 {
        match fire_after(cron, tz, latest) {
            Some(f) if f <= now => latest = f,
            _ => break,
        }
    }
    Acquire::Missed {
        latest,
        next: fire_after(cron, tz, now),
    }
}

impl Jvm {
    /// `JobTriggerListener.triggerMisfired`: if the cron trigger has fired before, flags the
    /// instance's current items `misfire` (whatever the job's `misfire` setting).
    pub(crate) async fn trigger_misfired(&self, job: &str, latest: i64) {
        if !self.job(job, |j| j.quartz.fired).unwrap_or(false) {
            return;
        }
        let items = self.local_items(job).await.unwrap_or_default();
        self.note(format!(
            "{job}: Quartz misfire (fires up to {} missed), flags items [{}]",
            self.fire_words(latest),
            crate::timeline::items(&items)
        ));
        self.set_misfire(job, &items, latest).await;
    }

    /// `ExecutionService.setMisfire`: creates `misfire` for each item; `fire` is the fire
    /// they stand for (the world's record, for the runs that replay it).
    pub(crate) async fn set_misfire(&self, job: &str, items: &[u32], fire: i64) {
        if items.is_empty() {
            return;
        }
        self.with(|s| {
            s.out.push(Out::Missed {
                job: job.to_owned(),
                items: items.to_vec(),
                fire,
            })
        });
        for i in items {
            self.create_if_needed(job, &format!("sharding/{i}/misfire"))
                .await;
        }
    }

    /// `LiteJobFacade.isExecuteMisfired`: `misfire` on (cached), no re-sharding pending, and
    /// one of the items flagged.
    pub(crate) async fn is_execute_misfired(&self, job: &str, items: &[u32]) -> bool {
        let misfire = self
            .job(job, |j| j.cache.config().map(|c| c.misfire))
            .flatten()
            .unwrap_or(false);
        if !misfire || items.is_empty() || self.exists(job, NECESSARY).await {
            return false;
        }
        let snap = self.read_under(job, "sharding").await;
        items
            .iter()
            .any(|i| snap.exists(&format!("sharding/{i}/misfire")))
    }

    /// `ExecutionService.clearMisfire`.
    pub(crate) async fn clear_misfire(&self, job: &str, items: &[u32]) {
        for i in items {
            self.remove_if_exists(job, &format!("sharding/{i}/misfire"))
                .await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn every_5s() -> CronExpr {
        CronExpr::parse("0/5 * * * * ?").expect("a valid cron")
    }

    #[test]
    fn a_fire_looked_at_in_time_fires_and_a_missed_one_collapses() {
        let tz = JobTimeZone::default();
        let cron = every_5s();
        // Looked at before it, or within the threshold: fire it.
        assert_eq!(acquire(&cron, &tz, 10_000, 9_000), Acquire::FireAt(10_000));
        assert_eq!(acquire(&cron, &tz, 10_000, 10_001), Acquire::FireAt(10_000));
        // 2 ms late (the worker was busy): missed, and so are the fires up to now.
        assert_eq!(
            acquire(&cron, &tz, 10_000, 10_002),
            Acquire::Missed {
                latest: 10_000,
                next: Some(15_000)
            }
        );
        assert_eq!(
            acquire(&cron, &tz, 10_000, 27_000),
            Acquire::Missed {
                latest: 25_000,
                next: Some(30_000)
            }
        );
        assert_eq!(fire_after(&cron, &tz, 25_000), Some(30_000));
    }
}
