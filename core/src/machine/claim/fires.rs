//! Scheduled fires and misfires: which fire of an item this instance owns is due now.
//!
//! An item's record says the last fire it ran (`done`). The next fire after it is due when it
//! comes (claimed up to [`MachineOptions::claim_ahead`] before, started at the fire); when
//! several were missed, they collapse into one run of the latest. A fire that came while the
//! item ran here, or later than [`MachineOptions::misfire_tolerance`], is a misfire: it runs
//! right after as a MISFIRE run, or, with `misfire` off, is given up for the next fire. Fires
//! before the job's cluster last started (a registration into an empty `instances/`) were
//! missed while no instance was registered: only those within the job's catch-up bound are
//! due, as one MISFIRE run (see "Start-up after downtime" in the machine's documentation).

use std::sync::Arc;

use crate::config::JobConfig;
use crate::machine::job::{FireMemo, HeldFire};
use crate::machine::record::{ItemRecord, RunKind};

/// Most fires looked at when catching up missed fires of one item in one evaluation.
pub(crate) const MAX_CATCH_UP_STEPS: usize = 100_000;

/// What the planner reads of one item this instance owns (and neither runs nor sees running).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ItemFires<'a> {
    /// Its execution record, if it has one.
    pub(crate) record: Option<&'a ItemRecord>,
    /// Since when (epoch ms) this instance owns it, if it saw that; now otherwise.
    pub(crate) owned_since: Option<i64>,
    /// When its last run here was recorded as ended (epoch ms): fires up to then came while it
    /// ran.
    pub(crate) last_end: Option<i64>,
    /// When (epoch ms) a run of its ElasticJob owner was last seen to start: the fires up to
    /// then are done, and the next one too if it comes within [`JAVA_AHEAD_MS`] (a quarter of
    /// the cron's period at most): the ElasticJob instance's clock may be ahead of this one's.
    pub(crate) java_ran: Option<i64>,
    /// The fire its previous owner waited at behind ElasticJob's re-sharding flag, if the
    /// re-shard that ended the wait gave it to this instance ([`held_fire`]): due here, since
    /// nobody ran it (an owner blocked at a fire runs it under the new plan, ElasticJob's rule).
    pub(crate) held_fire: Option<i64>,
}

/// The rules a job's fires follow now.
#[derive(Debug, Clone)]
pub(crate) struct FireRules<'a> {
    /// The job's configuration (cron, time zone, `misfire`, `failover`).
    pub(crate) config: &'a Arc<JobConfig>,
    /// When the job's cluster last started (epoch ms), if it did.
    pub(crate) started: Option<i64>,
    /// How far before the start fires are still caught up (ms).
    pub(crate) catchup_ms: i64,
    /// How late a fire may start and still be on time when `misfire` is off (ms).
    pub(crate) tolerance_ms: i64,
    /// How long before its fire an item is claimed (ms).
    pub(crate) ahead_ms: i64,
    /// Planted bug: missed fires are dropped even with `misfire` on.
    pub(crate) drop_misfires: bool,
}

/// How far ahead of this instance's clock an ElasticJob instance may start a fire (ms), at
/// most: ElasticJob's own `maxTimeDiffSeconds` check, when on, allows a second. Bounded by a
/// quarter of the cron's period, or a run seen just after an every-second fire would count the
/// next fire as run too.
pub(crate) const JAVA_AHEAD_MS: i64 = 1_000;

/// The fires a run of ElasticJob seen starting at `seen` (epoch ms) covers: those up to the
/// returned instant. Its own fire is the latest at or before `seen`, or the next one when that
/// comes within what a clock ahead explains.
pub(crate) fn java_covered(config: &Arc<JobConfig>, seen: i64, memo: &mut FireMemo) -> i64 {
    let Some(next) = memo.next_after(config, seen) else {
        return seen;
    };
    let period = memo
        .next_after(config, next)
        .map_or(i64::MAX, |after| after.saturating_sub(next));
    if next.saturating_sub(seen) <= JAVA_AHEAD_MS.min(period / 4) {
        next
    } else {
        seen
    }
}

/// The latest fire of a hold behind ElasticJob's re-sharding flag that began at `since` and
/// ended at `opened` (epoch ms): a fire every instance waited at. Not one that comes within
/// what a clock ahead explains after the hold began ([`JAVA_AHEAD_MS`], a quarter of the
/// period at most): an ElasticJob instance whose clock is ahead may have run it before the
/// flag.
pub(crate) fn held_fire(
    config: &Arc<JobConfig>,
    since: i64,
    opened: i64,
    memo: &mut FireMemo,
) -> Option<i64> {
    let first = memo.next_after(config, since)?;
    let period = memo
        .next_after(config, first)
        .map_or(i64::MAX, |after| after.saturating_sub(first));
    let from = since.saturating_add(JAVA_AHEAD_MS.min(period / 4));
    let mut fire = memo.next_after(config, from.saturating_sub(1))?;
    if fire > opened {
        return None;
    }
    for _ in 0..MAX_CATCH_UP_STEPS {
        match memo.next_after(config, fire) {
            Some(t) if t <= opened => fire = t,
            _ => break,
        }
    }
    Some(fire)
}

/// Follows the fire gate of a job led by ElasticJob, purely: `gate` is when the current hold
/// began and the job's item count then, `last` the fire the last hold covered, `held` whether
/// the flag holds the job's new runs now. Returns both as they are after this decision: a
/// hold that ends leaves the fire it covered ([`held_fire`]).
pub(crate) fn follow_gate(
    gate: Option<(i64, u32)>,
    last: Option<HeldFire>,
    held: bool,
    config: &Arc<JobConfig>,
    now_ms: i64,
    memo: &mut FireMemo,
) -> (Option<(i64, u32)>, Option<HeldFire>) {
    match (held, gate) {
        (true, Some(g)) => (Some(g), last),
        (true, None) => (Some((now_ms, config.sharding_total_count)), last),
        (false, Some((since, total))) => {
            let fire = held_fire(config, since, now_ms, memo).map(|fire| HeldFire {
                fire,
                since,
                total,
                opened: now_ms,
            });
            (None, fire)
        }
        (false, None) => (None, last),
    }
}

/// What an item's fires ask of this instance now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FireStep {
    /// Claim this fire (epoch ms) now, to run as `kind`.
    Claim {
        /// The fire.
        fire: i64,
        /// Why it runs.
        kind: RunKind,
    },
    /// Nothing is due yet: decide again at this wall time (epoch ms).
    WakeAt(i64),
    /// Nothing to claim: the item's run died and failover takes it, or no fire comes.
    Nothing,
}

/// The fire of `item` due at `now_ms` (epoch ms), if any. `memo` remembers the cron's answers.
pub(crate) fn plan_item(
    item: ItemFires<'_>,
    rules: &FireRules<'_>,
    now_ms: i64,
    memo: &mut FireMemo,
) -> FireStep {
    let config = rules.config;
    if config.cron.is_none() {
        return FireStep::Nothing;
    }
    let mut done = item.record.and_then(|r| r.done);
    if let Some(run) = item.record.and_then(|r| r.run.as_ref()) {
        if config.failover {
            return FireStep::Nothing; // an orphan: failover takes it
        }
        // With failover off the dead run's fire is given up (a trigger is no fire).
        if run.kind != RunKind::Trigger {
            done = Some(done.map_or(run.fire, |d| d.max(run.fire)));
        }
    }
    let mut baseline = done.unwrap_or_else(|| {
        let since = item.owned_since.unwrap_or(now_ms);
        item.held_fire
            .map_or(since, |f| since.min(f.saturating_sub(1)))
    });
    if let Some(seen) = item.java_ran {
        // Fires an ElasticJob instance was seen running are not run here again.
        baseline = baseline.max(java_covered(config, seen, memo));
    }
    if let Some(s) = rules.started {
        // Fires earlier than `s - catchup_ms` are given up.
        baseline = baseline.max(s.saturating_sub(rules.catchup_ms).saturating_sub(1));
    }
    let Some(first) = memo.next_after(config, baseline) else {
        return FireStep::Nothing;
    };
    // Claimed up to `claim_ahead` before the fire, started at the fire.
    if first > now_ms.saturating_add(rules.ahead_ms) {
        return FireStep::WakeAt(first.saturating_sub(rules.ahead_ms));
    }
    // The latest fire at or before now: several missed fires collapse into one. Through the
    // memo: the items of a job mostly share their last fire.
    let mut last = first;
    for _ in 0..MAX_CATCH_UP_STEPS {
        match memo.next_after(config, last) {
            Some(t) if t <= now_ms => last = t,
            _ => break,
        }
    }
    let late = now_ms - last;
    // A fire that came while the item ran here is a misfire, however recent.
    let overlapped = item.last_end.is_some_and(|end| last <= end);
    let on_time = late <= rules.tolerance_ms && !overlapped;
    // A fire from before the cluster's start, within the catch-up bound: it runs once, as a
    // misfire, whatever `misfire` says (catching up is its own opt-in).
    let caught_up = rules.started.is_some_and(|s| last <= s);
    let kind = if caught_up {
        RunKind::Misfire
    } else if last == first && on_time {
        RunKind::Scheduled
    } else if config.misfire && !rules.drop_misfires {
        RunKind::Misfire
    } else if on_time {
        RunKind::Scheduled
    } else {
        // Missed with misfire off: wait for the next fire.
        return match memo.next_after(config, now_ms) {
            Some(next) => FireStep::WakeAt(next),
            None => FireStep::Nothing,
        };
    };
    FireStep::Claim { fire: last, kind }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::CronExpr;
    use crate::machine::record::RunRecord;

    /// 2026-01-01 00:00:00 UTC, a whole minute.
    const T0: i64 = 1_767_225_600_000;
    const S: i64 = 1_000;

    fn config(cron: &str, misfire: bool, failover: bool) -> Arc<JobConfig> {
        let mut c = JobConfig::new("j", 1).with_cron(CronExpr::parse(cron).unwrap());
        c.misfire = misfire;
        c.failover = failover;
        Arc::new(c)
    }

    fn rules(config: &Arc<JobConfig>) -> FireRules<'_> {
        FireRules {
            config,
            started: None,
            catchup_ms: 0,
            tolerance_ms: 1_000,
            ahead_ms: 250,
            drop_misfires: false,
        }
    }

    fn done(at: i64) -> ItemRecord {
        ItemRecord {
            done: Some(at),
            run: None,
        }
    }

    fn running(done_at: i64, fire: i64, kind: RunKind) -> ItemRecord {
        ItemRecord {
            done: Some(done_at),
            run: Some(RunRecord {
                fire,
                kind,
                instance: crate::InstanceId::new("10.0.0.9@-@9").unwrap(),
            }),
        }
    }

    /// Every-second and every-five-seconds jobs, item by item: (what the item's record and
    /// history say, now) → what is due.
    #[test]
    fn the_due_fire_of_an_item() {
        use FireStep::{Claim, Nothing, WakeAt};
        use RunKind::{Misfire, Scheduled};
        let every_second = config("* * * * * ?", true, true);
        let every_five = config("0/5 * * * * ?", true, true);
        let no_misfire = config("0/5 * * * * ?", false, true);
        let no_failover = config("0/5 * * * * ?", true, false);
        let rec_done_t0 = done(T0);
        let rec_done_t5 = done(T0 + 5 * S);
        let rec_dead_run = running(T0, T0 + 5 * S, Scheduled);
        let rec_dead_trigger = running(T0, T0 + 3 * S, RunKind::Trigger);
        let item = |record, owned_since, last_end| ItemFires {
            record,
            owned_since,
            last_end,
            java_ran: None,
            held_fire: None,
        };
        let held = |owned_since, fire| ItemFires {
            owned_since: Some(owned_since),
            held_fire: Some(fire),
            ..ItemFires::default()
        };
        let java = |record, java_ran| ItemFires {
            record,
            java_ran: Some(java_ran),
            ..ItemFires::default()
        };
        #[rustfmt::skip]
        let cases: Vec<(&str, &Arc<JobConfig>, ItemFires<'_>, i64, FireStep)> = vec![
            ("the next fire is far: wake ahead of it", &every_five, item(Some(&rec_done_t0), None, None), T0 + 2 * S, WakeAt(T0 + 5 * S - 250)),
            ("within the lead: claimed ahead", &every_five, item(Some(&rec_done_t0), None, None), T0 + 5 * S - 100, Claim { fire: T0 + 5 * S, kind: Scheduled }),
            ("at the fire", &every_five, item(Some(&rec_done_t0), None, None), T0 + 5 * S, Claim { fire: T0 + 5 * S, kind: Scheduled }),
            ("late within the tolerance", &every_five, item(Some(&rec_done_t0), None, None), T0 + 5 * S + 900, Claim { fire: T0 + 5 * S, kind: Scheduled }),
            ("late past the tolerance: a misfire", &every_five, item(Some(&rec_done_t0), None, None), T0 + 6 * S + 500, Claim { fire: T0 + 5 * S, kind: Misfire }),
            ("missed fires collapse into the latest", &every_second, item(Some(&rec_done_t0), None, None), T0 + 7 * S + 200, Claim { fire: T0 + 7 * S, kind: Misfire }),
            ("a fire that came while it ran here is a misfire", &every_five, item(Some(&rec_done_t0), None, Some(T0 + 5 * S + 10)), T0 + 5 * S + 20, Claim { fire: T0 + 5 * S, kind: Misfire }),
            ("misfire off: late is given up for the next fire", &no_misfire, item(Some(&rec_done_t0), None, None), T0 + 7 * S, WakeAt(T0 + 10 * S)),
            ("misfire off: on time still runs", &no_misfire, item(Some(&rec_done_t0), None, None), T0 + 5 * S + 300, Claim { fire: T0 + 5 * S, kind: Scheduled }),
            ("done up to the latest fire: wait", &every_five, item(Some(&rec_done_t5), None, None), T0 + 6 * S, WakeAt(T0 + 10 * S - 250)),
            ("no record: from when it was owned", &every_five, item(None, Some(T0 + 6 * S), None), T0 + 7 * S, WakeAt(T0 + 10 * S - 250)),
            ("no record, owned before a fire: that fire", &every_five, item(None, Some(T0 + 4 * S), None), T0 + 5 * S, Claim { fire: T0 + 5 * S, kind: Scheduled }),
            ("a dead run with failover on: failover's", &every_five, item(Some(&rec_dead_run), None, None), T0 + 9 * S, Nothing),
            ("a dead run with failover off: its fire is given up", &no_failover, item(Some(&rec_dead_run), None, None), T0 + 9 * S, WakeAt(T0 + 10 * S - 250)),
            ("a dead trigger with failover off is no fire", &no_failover, item(Some(&rec_dead_trigger), None, None), T0 + 5 * S, Claim { fire: T0 + 5 * S, kind: Scheduled }),
            ("ElasticJob seen running the fire: done", &every_five, java(Some(&rec_done_t0), T0 + 5 * S + 100), T0 + 6 * S + 500, WakeAt(T0 + 10 * S - 250)),
            ("ElasticJob seen running an earlier fire: the later one is due", &every_five, java(Some(&rec_done_t0), T0 + 100), T0 + 6 * S + 500, Claim { fire: T0 + 5 * S, kind: Misfire }),
            ("ElasticJob seen just before a fire (its clock ahead): that fire", &every_five, java(Some(&rec_done_t0), T0 + 5 * S - 400), T0 + 6 * S + 500, WakeAt(T0 + 10 * S - 250)),
            ("ElasticJob seen well before a fire: not that fire", &every_five, java(Some(&rec_done_t0), T0 + 5 * S - 1_100), T0 + 6 * S + 500, Claim { fire: T0 + 5 * S, kind: Misfire }),
            ("every second: seen after a fire, the next is due", &every_second, java(Some(&rec_done_t0), T0 + 7 * S + 12), T0 + 8 * S + 100, Claim { fire: T0 + 8 * S, kind: Scheduled }),
            ("every second: seen just before a fire, that fire", &every_second, java(Some(&rec_done_t0), T0 + 8 * S - 200), T0 + 8 * S + 100, WakeAt(T0 + 9 * S - 250)),
            ("the record later than ElasticJob's run: the record counts", &every_five, java(Some(&rec_done_t5), T0 + 100), T0 + 10 * S, Claim { fire: T0 + 10 * S, kind: Scheduled }),
            ("no record, owned before ElasticJob's run: after it", &every_five, ItemFires { owned_since: Some(T0 + 4 * S), ..java(None, T0 + 5 * S + 100) }, T0 + 10 * S, Claim { fire: T0 + 10 * S, kind: Scheduled }),
            ("given by the re-shard after a held fire: that fire, late", &every_five, held(T0 + 5 * S + 20, T0 + 5 * S), T0 + 5 * S + 30, Claim { fire: T0 + 5 * S, kind: Scheduled }),
            ("given long after a held fire: a misfire run of it", &every_five, held(T0 + 6 * S + 500, T0 + 5 * S), T0 + 6 * S + 600, Claim { fire: T0 + 5 * S, kind: Misfire }),
            ("a held fire with misfire off, past the tolerance: given up", &no_misfire, held(T0 + 6 * S + 500, T0 + 5 * S), T0 + 6 * S + 600, WakeAt(T0 + 10 * S)),
            ("a held fire and ElasticJob seen running it: done", &every_five, ItemFires { java_ran: Some(T0 + 5 * S + 10), ..held(T0 + 5 * S + 20, T0 + 5 * S) }, T0 + 5 * S + 30, WakeAt(T0 + 10 * S - 250)),
            ("a record later than the held fire counts", &every_five, ItemFires { record: Some(&rec_done_t5), ..held(T0 + 5 * S + 20, T0 + 5 * S) }, T0 + 5 * S + 30, WakeAt(T0 + 10 * S - 250)),
        ];
        for (what, config, item, now, want) in cases {
            let mut memo = FireMemo::default();
            assert_eq!(
                plan_item(item, &rules(config), now, &mut memo),
                want,
                "{what}"
            );
        }
    }

    /// The fire a hold behind ElasticJob's flag covered: the latest fire from a clock's
    /// tolerance after the hold began up to its end.
    #[test]
    fn the_fire_a_hold_covered() {
        let every_five = config("0/5 * * * * ?", true, true);
        let every_second = config("* * * * * ?", true, true);
        #[rustfmt::skip]
        let cases = [
            ("a hold across one fire", &every_five, T0 + 2 * S, T0 + 5 * S + 20, Some(T0 + 5 * S)),
            ("a hold across two: the latest", &every_five, T0 + 2 * S, T0 + 11 * S, Some(T0 + 10 * S)),
            ("a hold between fires: none", &every_five, T0 + S, T0 + 4 * S, None),
            ("begun within a second of the fire: a J ahead may have run it", &every_five, T0 + 5 * S - 900, T0 + 6 * S, None),
            ("begun over a second before: held", &every_five, T0 + 5 * S - 1_100, T0 + 6 * S, Some(T0 + 5 * S)),
            ("every second: a quarter of the period's tolerance", &every_second, T0 + 5 * S - 300, T0 + 5 * S + 100, Some(T0 + 5 * S)),
            ("every second: begun just before the fire", &every_second, T0 + 5 * S - 200, T0 + 5 * S + 100, None),
        ];
        for (what, config, since, opened, want) in cases {
            let mut memo = FireMemo::default();
            assert_eq!(held_fire(config, since, opened, &mut memo), want, "{what}");
        }
    }

    /// The gate's bookkeeping: a hold's start is kept while it lasts, and its fire when it
    /// ends; which items the fire is for.
    #[test]
    fn a_hold_s_fire_is_kept_when_it_ends_for_the_items_its_re_shard_gives() {
        let every_five = config("0/5 * * * * ?", true, true);
        let mut memo = FireMemo::default();
        let step = |gate, fire, held, now, memo: &mut FireMemo| {
            follow_gate(gate, fire, held, &every_five, now, memo)
        };
        let (gate, fire) = step(None, None, true, T0 + 2 * S, &mut memo);
        let (gate, fire) = step(gate, fire, true, T0 + 4 * S, &mut memo);
        assert_eq!(
            (gate, fire),
            (Some((T0 + 2 * S, 1)), None),
            "held since its start"
        );
        let (gate, fire) = step(gate, fire, false, T0 + 5 * S + 20, &mut memo);
        let kept = HeldFire {
            fire: T0 + 5 * S,
            since: T0 + 2 * S,
            total: 1,
            opened: T0 + 5 * S + 20,
        };
        assert_eq!((gate, fire), (None, Some(kept)));
        let (_, fire) = step(gate, fire, false, T0 + 6 * S, &mut memo);
        assert_eq!(fire, Some(kept), "kept until the next hold ends");
        #[rustfmt::skip]
        let cases = [
            ("given with the re-shard", 0, T0 + 5 * S + 20, None, Some(T0 + 5 * S)),
            ("owned from before the hold: its own record says", 0, T0 + S, None, None),
            ("given well after the hold's end: another re-shard's", 0, T0 + 7 * S, None, None),
            ("an item added since the hold began", 1, T0 + 5 * S + 20, None, None),
            ("an ElasticJob run seen on it since the hold began", 0, T0 + 5 * S + 20, Some(T0 + 5 * S + 5), None),
            ("an ElasticJob run seen on it before the hold", 0, T0 + 5 * S + 20, Some(T0 + S), Some(T0 + 5 * S)),
        ];
        for (what, item, owned_since, touched, want) in cases {
            assert_eq!(kept.for_item(item, owned_since, touched), want, "{what}");
        }
    }

    /// After downtime: fires before the cluster's start are given up, or caught up as one
    /// MISFIRE run within the catch-up bound, whatever `misfire` says.
    #[test]
    fn fires_before_the_start_are_given_up_or_caught_up() {
        let every_five = config("0/5 * * * * ?", false, true);
        let record = done(T0);
        let item = ItemFires {
            record: Some(&record),
            ..ItemFires::default()
        };
        let start = T0 + 62 * S;
        let mut r = rules(&every_five);
        r.started = Some(start);
        let mut memo = FireMemo::default();
        assert_eq!(
            plan_item(item, &r, start + 100, &mut memo),
            FireStep::WakeAt(T0 + 65 * S - 250),
            "no catch-up: the missed fires are given up"
        );
        r.catchup_ms = 10_000;
        assert_eq!(
            plan_item(item, &r, start + 100, &mut memo),
            FireStep::Claim {
                fire: T0 + 60 * S,
                kind: RunKind::Misfire
            },
            "within the bound: one MISFIRE run of the latest, with misfire off"
        );
    }

    /// A job without a cron has no fires; the planted bug drops misfires.
    #[test]
    fn no_cron_no_fire_and_the_dropped_misfire_plant() {
        let mut bare = JobConfig::new("j", 1);
        bare.cron = None;
        let bare = Arc::new(bare);
        let record = done(T0);
        let item = ItemFires {
            record: Some(&record),
            ..ItemFires::default()
        };
        let mut memo = FireMemo::default();
        assert_eq!(
            plan_item(item, &rules(&bare), T0 + 60 * S, &mut memo),
            FireStep::Nothing
        );
        let every_five = config("0/5 * * * * ?", true, true);
        let mut r = rules(&every_five);
        r.drop_misfires = true;
        assert_eq!(
            plan_item(item, &r, T0 + 7 * S, &mut memo),
            FireStep::WakeAt(T0 + 10 * S)
        );
    }
}
