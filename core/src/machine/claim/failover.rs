//! Failover: recorded runs whose `running` marker vanished died with their session.
//!
//! With `failover` (and `monitorExecution`) on, every live instance works out the same split
//! of such orphans (ElasticJob's average allocation over the eligible instances, in registry
//! order) and claims its share at once, all of it in one transaction; an orphan that is not
//! its share is taken by anyone after [`MachineOptions::failover_takeover_delay`], so a share
//! whose instance is gone too is not lost. A disabled item is not failed over; its orphaned
//! fire runs once it is enabled again.

use std::collections::{BTreeMap, BTreeSet};

use crate::instance::InstanceId;
use crate::machine::job_view::JobView;
use crate::machine::time::Mono;
use crate::sharding::{BuiltinStrategy, ShardingStrategy};

/// Which runs of an orphan another live instance names: see [`orphans`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LiveRunner {
    /// Not an orphan: a record whose run names another live instance is that instance's to
    /// end or to fail over. Its marker can go under a run that goes on (ElasticJob's
    /// failover listener or its reconnection, an operator), and failing that run over would
    /// run the fire beside it.
    Skip,
    /// An orphan like any other (the settling of a mixed job, which runs nothing).
    Count,
}

/// The orphans of the job's first `n`, as this instance (`me`) sees them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Orphans {
    /// The orphans every instance works out alike, ascending: split among the candidates.
    pub(crate) shared: Vec<u32>,
    /// The orphans whose run names this instance (a run of an earlier session, or one whose
    /// marker another hand deleted), ascending: this instance's own, taken at once. With
    /// [`LiveRunner::Count`] they are in `shared` instead.
    pub(crate) own: Vec<u32>,
}

impl Orphans {
    /// Every orphan, ascending.
    pub(crate) fn all(&self) -> Vec<u32> {
        let mut all: Vec<u32> = self.shared.iter().chain(&self.own).copied().collect();
        all.sort_unstable();
        all
    }
}

/// The items of the job's first `n` whose recorded run is an orphan: its marker is gone and no
/// failover node claims it. `here` says an item runs in an execution of this instance;
/// `live` says what a run another live instance names is (see [`LiveRunner`]);
/// `failover_finished` is a planted bug (a finished item of a dead owner counts too).
pub(crate) fn orphans(
    view: &JobView,
    n: u32,
    here: impl Fn(u32) -> bool,
    me: &InstanceId,
    live: LiveRunner,
    run_disabled: bool,
    failover_finished: bool,
) -> Orphans {
    let mut out = Orphans::default();
    for (i, v) in &view.items {
        if *i >= n || v.running.is_some() || here(*i) {
            continue;
        }
        if v.disabled && !run_disabled {
            continue;
        }
        let Some((r, _)) = &v.record else { continue };
        let finished_of_dead = failover_finished
            && r.done.is_some()
            && v.owner
                .as_ref()
                .is_some_and(|o| !view.instances.contains(o));
        match &r.run {
            Some(run) if v.failover.is_none() => {
                let runner = &run.instance;
                if live == LiveRunner::Count {
                    out.shared.push(*i);
                } else if runner == me {
                    out.own.push(*i);
                } else if !view.is_live_id(runner) {
                    out.shared.push(*i);
                }
            }
            _ if finished_of_dead => out.shared.push(*i),
            _ => {}
        }
    }
    out
}

/// This instance's share of `orphans` (ascending): the split every instance works out alike
/// from the same candidates (the eligible instances, in registry order).
pub(crate) fn share(
    orphans: &[u32],
    candidates: &[InstanceId],
    job: &str,
    me: &InstanceId,
) -> BTreeSet<u32> {
    if candidates.is_empty() {
        return BTreeSet::new();
    }
    let split = BuiltinStrategy::AverageAllocation.shard(
        candidates,
        job,
        u32::try_from(orphans.len()).unwrap_or(u32::MAX),
    );
    split
        .items_of(me)
        .iter()
        .filter_map(|k| orphans.get(*k as usize).copied())
        .collect()
}

/// What failover asks of this instance now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FailoverPlan {
    /// The orphans to claim now, ascending.
    pub(crate) take: Vec<u32>,
    /// When each orphan was first seen (monotonic ms): the takeover delay counts from it.
    pub(crate) seen: BTreeMap<u32, Mono>,
    /// The earliest takeover of an orphan that is not this instance's share, if any waits.
    pub(crate) wake: Option<Mono>,
}

/// Which orphans this instance claims at `now` (monotonic ms): its share at once, the others
/// once `delay` ms have passed since they were first seen (`seen`, from earlier decisions).
pub(crate) fn plan(
    orphans: &[u32],
    mine: &BTreeSet<u32>,
    seen: &BTreeMap<u32, Mono>,
    delay: u64,
    now: Mono,
) -> FailoverPlan {
    let mut plan = FailoverPlan {
        take: Vec::new(),
        seen: BTreeMap::new(),
        wake: None,
    };
    for &i in orphans {
        let first = seen.get(&i).copied().unwrap_or(now);
        plan.seen.insert(i, first);
        let takeover = first.after(delay);
        if !mine.contains(&i) && now < takeover {
            plan.wake = Some(plan.wake.map_or(takeover, |w| w.min(takeover)));
            continue;
        }
        plan.take.push(i);
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(s: &str) -> InstanceId {
        InstanceId::new(s).unwrap()
    }

    /// The instances split the orphans alike; each takes its share at once and the rest after
    /// the takeover delay, counted from when it first saw each.
    #[test]
    fn shares_and_the_takeover_delay() {
        let (a, b) = (id("10.0.0.1@-@1"), id("10.0.0.2@-@2"));
        let candidates = [a.clone(), b.clone()];
        let orphans = [3, 5, 8];
        let mine_a = share(&orphans, &candidates, "j", &a);
        let mine_b = share(&orphans, &candidates, "j", &b);
        assert!(mine_a.is_disjoint(&mine_b));
        let all: BTreeSet<u32> = mine_a.union(&mine_b).copied().collect();
        assert_eq!(
            all,
            orphans.into_iter().collect(),
            "every orphan is someone's share"
        );
        assert!(
            share(&orphans, &[], "j", &a).is_empty(),
            "no candidate, no share"
        );

        let seen = BTreeMap::from([(3, Mono(1_000))]);
        #[rustfmt::skip]
        #[allow(clippy::type_complexity)]
        let cases: Vec<(&str, BTreeSet<u32>, u64, Vec<u32>, Option<u64>)> = vec![
            ("my share at once; the others wait", BTreeSet::from([5]), 1_500, vec![5], Some(3_000)),
            ("past the delay of the one seen first", BTreeSet::from([5]), 3_000, vec![3, 5], Some(5_000)),
            ("past every delay", BTreeSet::new(), 5_000, vec![3, 5, 8], None),
            ("all mine", BTreeSet::from([3, 5, 8]), 1_500, vec![3, 5, 8], None),
        ];
        for (what, mine, now, take, wake) in cases {
            // Orphans not seen before are first seen now.
            let mut seen = seen.clone();
            if now >= 3_000 {
                seen.entry(5).or_insert(Mono(3_000));
                seen.entry(8).or_insert(Mono(3_000));
            }
            let got = plan(&orphans, &mine, &seen, 2_000, Mono(now));
            assert_eq!(got.take, take, "{what}: taken");
            assert_eq!(got.wake, wake.map(Mono), "{what}: wake");
            assert_eq!(got.seen.len(), 3, "{what}: every orphan is remembered");
            assert_eq!(
                got.seen.get(&3),
                Some(&Mono(1_000)),
                "{what}: the first sight stays"
            );
        }
    }

    /// An orphan is an item of the job's first `n` with a recorded run, no `running` marker
    /// and no failover node, not running here, and enabled (or disabled items run, a planted
    /// bug). A finished item of an instance that is gone is no orphan, but for the planted bug
    /// `failover_finished`, which takes any item with a fire done whose owner is gone (the
    /// failed-over item 2 too).
    #[test]
    fn which_items_are_orphans() {
        use crate::machine::job_view::{ItemView, Unbound};
        use crate::machine::record::{ItemRecord, RunKind, RunRecord};
        use crate::registry::{Revision, Stat, Version};

        let (live, dead) = (id("10.0.0.1@-@1"), id("10.0.0.2@-@2"));
        let stat = Stat {
            version: Version(0),
            created: Revision(1),
            modified: Revision(1),
            ephemeral_owner: None,
            mtime_ms: None,
        };
        let ran = ItemRecord {
            done: Some(5),
            run: Some(RunRecord {
                fire: 10,
                kind: RunKind::Scheduled,
                instance: dead.clone(),
            }),
        };
        let finished = ItemRecord {
            done: Some(10),
            run: None,
        };
        let item = |record: &ItemRecord, owner: &InstanceId| ItemView {
            exists: true,
            owner: Some(owner.clone()),
            record: Some((record.clone(), Version(1))),
            ..ItemView::default()
        };
        let mut view = JobView::default();
        view.instances.insert(live.clone());
        // 0: its run died; 1: its run goes on; 2: failed over already; 3: disabled;
        // 4: finished, its owner gone; 5: finished, its owner live; 6: no record;
        // 7: its run died, running here; 8: its run died, beyond the count.
        let items = [
            item(&ran, &dead),
            ItemView {
                running: Some((dead.as_str().to_owned(), stat)),
                ..item(&ran, &dead)
            },
            ItemView {
                failover: Some(stat),
                ..item(&ran, &dead)
            },
            ItemView {
                disabled: true,
                ..item(&ran, &dead)
            },
            item(&finished, &dead),
            item(&finished, &live),
            ItemView {
                record: None,
                ..item(&ran, &dead)
            },
            item(&ran, &live),
            item(&ran, &dead),
        ];
        for (i, v) in (0..).zip(items) {
            view.items.insert(i, Box::new(v));
        }
        let here = |i: u32| i == 7;
        #[rustfmt::skip]
        let cases: [(&str, bool, bool, Vec<u32>); 4] = [
            ("as designed", false, false, vec![0]),
            ("disabled items run (planted)", true, false, vec![0, 3]),
            ("finished items of the dead (planted)", false, true, vec![0, 2, 4]),
            ("both planted", true, true, vec![0, 2, 3, 4]),
        ];
        let me = id("10.0.0.3@-@3");
        for (what, run_disabled, failover_finished, want) in cases {
            let got = orphans(
                &view,
                8,
                here,
                &me,
                LiveRunner::Skip,
                run_disabled,
                failover_finished,
            );
            assert_eq!(got.shared, want, "{what}");
            assert!(got.own.is_empty(), "{what}: none of mine");
        }

        // A run the record names a live instance for, its marker gone: that instance's
        // (its run may go on), an orphan of its own for it, an orphan like any other when
        // live runners count; a runner whose node no session holds is not live.
        let of = |runner: &InstanceId| ItemRecord {
            run: Some(RunRecord {
                instance: runner.clone(),
                ..ran.run.clone().unwrap_or_else(|| unreachable!())
            }),
            ..ran.clone()
        };
        let unbound = id("10.0.0.4@-@4");
        view.instances.insert(unbound.clone());
        view.unbound.insert(
            unbound.clone(),
            Unbound {
                version: Version(0),
                value: String::new(),
            },
        );
        view.items.insert(0, Box::new(item(&of(&live), &live)));
        view.items.insert(1, Box::new(item(&of(&me), &me)));
        view.items
            .insert(2, Box::new(item(&of(&unbound), &unbound)));
        for i in 3..9 {
            view.items.remove(&i);
        }
        view.instances.insert(me.clone());
        #[rustfmt::skip]
        let cases = [
            ("another live instance's run is not an orphan; mine is my own", &me, LiveRunner::Skip, vec![2], vec![1]),
            ("seen by the other runner", &live, LiveRunner::Skip, vec![2], vec![0]),
            ("every run counts (settling, or the plant)", &me, LiveRunner::Count, vec![0, 1, 2], vec![]),
        ];
        for (what, who, lr, shared, own) in cases {
            let got = orphans(&view, 8, |_| false, who, lr, false, false);
            assert_eq!((got.shared, got.own), (shared, own), "{what}");
        }
        let mine = orphans(&view, 8, |_| false, &me, LiveRunner::Skip, false, false);
        assert_eq!(mine.all(), vec![1, 2], "all of them, ascending");
    }
}
