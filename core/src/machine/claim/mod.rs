//! Claims: which of an instance's items are due, and the transaction that claims them.

#[allow(clippy::wildcard_imports)]
use crate::machine::*;

pub(crate) mod failover;
pub(crate) mod fires;
pub(crate) mod limit;
pub(crate) mod owner;
pub(crate) mod triggers;

use fires::{FireRules, FireStep, ItemFires};
use triggers::{Dequeue, TriggerItems};

/// A fire and why it runs: what groups items into one execution.
pub(crate) type RunKey = (i64, RunKind);

/// One group of a claim: the items that will start as one execution.
#[derive(Debug)]
pub(crate) struct Claim {
    pub(crate) fire: i64,
    pub(crate) kind: RunKind,
    pub(crate) counts_as_fire: bool,
    pub(crate) parameter: Option<String>,
    pub(crate) items: Vec<ClaimedItem>,
}

#[derive(Debug, Clone)]
pub(crate) struct ClaimedItem {
    pub(crate) item: u32,
    pub(crate) running_op: usize,
    pub(crate) record_op: usize,
    pub(crate) failover_op: Option<usize>,
    /// The record as it will be after the claim.
    pub(crate) record: ItemRecord,
}

/// What a decision on a job reads besides the job and its view: who this instance is, its
/// session, its options and the time.
pub(crate) struct Ctx<'a> {
    /// This instance.
    pub(crate) me: &'a InstanceId,
    /// Its live session.
    pub(crate) sid: crate::registry::SessionId,
    /// Its options.
    pub(crate) opts: &'a MachineOptions,
    /// Now.
    pub(crate) now: Now,
}

/// The claim decision on a job: the transaction to send, if any, and what the decision
/// changes in the job's own bookkeeping (applied by [`Job::apply_claims`] when the machine
/// acts on it; an audit that only looks drops it).
pub(crate) struct ClaimDecision {
    /// The claim to send.
    pub(crate) action: Option<Action>,
    /// The items this instance owns now, ascending.
    pub(crate) mine: Vec<u32>,
    /// The trigger run after this decision, and what it takes off the queue.
    pub(crate) trigger: (Option<TriggerRun>, Dequeue),
    /// When each failover orphan was first seen (`None`: failover is off, nothing changes).
    pub(crate) orphans_seen: Option<BTreeMap<u32, Mono>>,
}

impl Job {
    /// Applies what a claim decision changes in the job's bookkeeping (see [`ClaimDecision`]).
    pub(crate) fn apply_claims(&mut self, d: &ClaimDecision, now_ms: i64) {
        let is_mine = |i: &u32| d.mine.binary_search(i).is_ok();
        self.owned_since.retain(|i, _| is_mine(i));
        for &i in &d.mine {
            self.owned_since.entry(i).or_insert(now_ms);
        }
        let (run, dequeue) = &d.trigger;
        match dequeue {
            Dequeue::Nothing => {}
            Dequeue::First => {
                self.triggers.pop_front();
            }
            Dequeue::All => self.triggers.clear(),
        }
        self.trigger_run.clone_from(run);
        if let Some(seen) = &d.orphans_seen {
            self.orphan_seen.clone_from(seen);
        }
    }
}

/// The items of a job as the trigger planner reads them.
struct Items<'a> {
    view: &'a JobView,
    running: &'a BTreeMap<u32, ExecutionId>,
    me: &'a InstanceId,
    skip_owner_check: bool,
    /// Whether a run another live instance's record names, its marker gone, counts as
    /// running (failover on: that instance ends it or fails it over at once, see
    /// [`failover::orphans`]).
    live_runs: bool,
}

impl TriggerItems for Items<'_> {
    fn mine(&self, item: u32) -> bool {
        self.skip_owner_check
            || self.view.items.get(&item).and_then(|v| v.owner.as_ref()) == Some(self.me)
    }
    fn disabled(&self, item: u32) -> bool {
        self.view.items.get(&item).is_some_and(|v| v.disabled)
    }
    fn running(&self, item: u32) -> bool {
        self.running.contains_key(&item)
            || self
                .view
                .items
                .get(&item)
                .is_some_and(|v| v.running.is_some())
            || (self.live_runs && self.view.run_of_another_live(item, self.me))
    }
}

/// The claim decision: own due items (cron, misfire, triggers) and failover orphans, within
/// the transaction limit, as one transaction. While `hold.held` (see [`hold_for_reshard`]) only
/// failover is claimed: an orphan's owner is gone, so its item never blocks a move; missed
/// fires run after the move as misfires. Pure but for `memo`, a cache of the cron's answers;
/// wake times go to `wake`.
pub(crate) fn claims(
    j: &Job,
    view: &JobView,
    config: &Arc<JobConfig>,
    cx: &Ctx<'_>,
    hold: Hold,
    memo: &mut FireMemo,
    wake: &mut Vec<Mono>,
) -> ClaimDecision {
    let held = hold.held || hold.clock;
    let (me, opts, now) = (cx.me, cx.opts, cx.now);
    let n = config.sharding_total_count;
    let now_ms = now.wall_ms();
    let items = Items {
        view,
        running: &j.running,
        me,
        skip_owner_check: planted!(opts, SkipOwnerCheck),
        live_runs: config.failover
            && config.monitor_execution
            && !planted!(opts, FailoverLiveRunner),
    };
    let mine: Vec<u32> = (0..n).filter(|i| items.mine(*i)).collect();
    let run_disabled = planted!(opts, RunDisabledItems);
    // Shared with ElasticJob instances (`docs/migration-design.md` 3.4, 3.5): see `mixed`.
    let mixed = mixed::is_mixed(view);

    // (fire, kind) → items with their current record.
    let mut groups: ClaimGroups = BTreeMap::new();

    // Manual triggers.
    // A trigger waits for a complete plan: before the first one is written this instance owns
    // nothing, and a plan with items not written yet would leave them out of the run.
    let planned = (0..n).all(|i| view.items.get(&i).is_some_and(|v| v.owner.is_some()));
    let trigger = triggers::plan(
        &mine,
        j.triggers.front().map(String::as_str),
        j.trigger_run.as_ref(),
        &items,
        planned,
        held,
        now_ms,
        run_disabled,
    );
    if let Some(run) = &trigger.run {
        for &i in &trigger.due {
            let rec = view.items.get(&i).and_then(|v| v.record.clone());
            groups
                .entry((run.fire, RunKind::Trigger))
                .or_default()
                .push((i, rec));
        }
    }
    let trigger_param = trigger.run.as_ref().map(|r| r.parameter.clone());

    // Scheduled fires and misfires of my items; a trigger under way comes first. While the job
    // is shared with ElasticJob they are claimed at the fire, not ahead: a J reads the
    // re-sharding flag at the fire (`docs/migration-design.md` 3.4 point 3).
    let mut claim_ahead = !mixed || planted!(opts, ClaimAheadBesideJava);
    claim_ahead |= planted!(opts, StartAheadPastTheGate);
    if trigger.run.is_none() && !held {
        let rules = FireRules {
            config,
            started: view
                .started
                .filter(|_| !planted!(opts, CatchUpAfterDowntime)),
            catchup_ms: if planted!(opts, IgnoreCatchUpBound) {
                0
            } else {
                config.misfire_catchup_ms()
            },
            tolerance_ms: i64::try_from(opts.misfire_tolerance.as_millis()).unwrap_or(i64::MAX),
            ahead_ms: if claim_ahead {
                i64::try_from(opts.claim_ahead.as_millis()).unwrap_or(0)
            } else {
                0
            },
            drop_misfires: planted!(opts, DropMisfires),
        };
        for &i in &mine {
            if j.running.contains_key(&i) {
                continue;
            }
            let Some(v) = view.items.get(&i) else {
                continue;
            };
            if mixed::held_at_fire(v, mixed, run_disabled) {
                continue;
            }
            let item = ItemFires {
                record: v.record.as_ref().map(|(r, _)| r),
                owned_since: j.owned_since.get(&i).copied(),
                last_end: j.last_end.get(&i).copied(),
                java_ran: j.java_ran.get(&i).copied(),
                held_fire: hold
                    .fire
                    .and_then(|h| {
                        let since = j.owned_since.get(&i).copied().unwrap_or(now_ms);
                        h.for_item(i, since, j.java_touched.get(&i).copied())
                    })
                    .filter(|_| !planted!(opts, SkipHeldFire)),
            };
            match fires::plan_item(item, &rules, now_ms, memo) {
                FireStep::Claim { fire, kind } => {
                    groups
                        .entry((fire, kind))
                        .or_default()
                        .push((i, v.record.clone()));
                }
                FireStep::WakeAt(at) => wake.push(now.mono_at(at)),
                FireStep::Nothing => {}
            }
        }
    }

    // Failover: recorded runs whose marker vanished with their session. Not while the job is
    // mixed: ElasticJob's failover is the only one then (`mixed::mixed_duties`).
    let mut failover_items: Vec<(u32, RunRecord, CurrentRecord)> = Vec::new();
    let mut orphans_seen = None;
    let own_failover = !mixed || planted!(opts, FailoverBesideJava);
    if config.failover && config.monitor_execution && own_failover && !hold.clock {
        let live = if planted!(opts, FailoverLiveRunner) {
            failover::LiveRunner::Count
        } else {
            failover::LiveRunner::Skip
        };
        let orphans = failover::orphans(
            view,
            n,
            |i| j.running.contains_key(&i),
            me,
            live,
            run_disabled,
            planted!(opts, FailoverFinished),
        );
        let mut share = if orphans.shared.is_empty() {
            BTreeSet::new()
        } else {
            let candidates = registry_order(view.eligible(planted!(opts, UnboundCandidates)));
            failover::share(&orphans.shared, &candidates, j.paths.job_name(), me)
        };
        share.extend(orphans.own.iter().copied());
        let plan = failover::plan(
            &orphans.all(),
            &share,
            &j.orphan_seen,
            ms(opts.failover_takeover_delay),
            now.mono,
        );
        wake.extend(plan.wake);
        for i in plan.take {
            let Some(v) = view.items.get(&i) else {
                continue;
            };
            let Some((r, ver)) = v.record.clone() else {
                continue;
            };
            let run = match (r.run.clone(), r.done, v.owner.clone()) {
                (Some(run), _, _) => run,
                (None, Some(done), Some(owner)) if planted!(opts, FailoverFinished) => RunRecord {
                    fire: done,
                    kind: RunKind::Scheduled,
                    instance: owner,
                },
                _ => continue,
            };
            // Our own items of this job may also be due; they are claimed separately.
            groups.retain(|_, items| {
                items.retain(|(it, _)| *it != i);
                !items.is_empty()
            });
            failover_items.push((i, run, Some((r, ver))));
        }
        orphans_seen = Some(plan.seen);
    }

    // Within the transaction limit.
    if let Some(limit) = j.txn_limit(opts) {
        let total = groups.values().map(Vec::len).sum::<usize>() + failover_items.len();
        if total > limit {
            let done = |rec: &CurrentRecord| rec.as_ref().and_then(|(r, _)| r.done);
            let due = failover_items
                .iter()
                .map(|(item, _, rec)| limit::Due {
                    done: done(rec),
                    own: false,
                    item: *item,
                })
                .chain(groups.values().flatten().map(|(item, rec)| limit::Due {
                    done: done(rec),
                    own: true,
                    item: *item,
                }))
                .collect();
            let (own, failover) = limit::within(limit, due);
            groups.retain(|_, items| {
                items.retain(|(i, _)| own.contains(i));
                !items.is_empty()
            });
            failover_items.retain(|(i, _, _)| failover.contains(i));
        }
    }

    let action = (!groups.is_empty() || !failover_items.is_empty())
        .then(|| claim_txn(j, view, config, cx, groups, trigger_param, failover_items));
    ClaimDecision {
        action,
        mine,
        trigger: (trigger.run, trigger.dequeue),
        orphans_seen,
    }
}

/// The claim's transaction: its session, this instance's registration, and for each item its
/// ownership (own items) and that it is not disabled, its `running` marker (bound to the
/// session, or persistent in a job shared with ElasticJob with failover on) and its record of
/// the run. In a job shared with ElasticJob an own item's claim also checks that ElasticJob
/// is not failing it over (no `failover` node); the claim of a fire deletes the item's
/// `misfire` flag, which the run covers (`mixed`).
fn claim_txn(
    j: &Job,
    view: &JobView,
    config: &JobConfig,
    cx: &Ctx<'_>,
    groups: ClaimGroups,
    trigger_param: Option<String>,
    failover_items: Vec<(u32, RunRecord, CurrentRecord)>,
) -> Action {
    let (me, opts) = (cx.me, cx.opts);
    let p = &j.paths;
    let mixed = mixed::is_mixed(view);
    let persistent =
        mixed::persistent_markers(view, config) && !planted!(opts, EphemeralMarkersBesideJava);
    let mut ops = vec![TxnOp::Check(Check::Session(cx.sid))];
    // Still registered: an operator's shutdown (the instance node deleted) stops new
    // claims at once, before this instance has seen it.
    ops.push(TxnOp::Check(Check::Exists(j.paths.instance(me))));
    // The fire gate (`docs/migration-design.md` 3.4, point 2) in the registry too: while an
    // ElasticJob instance leads, no claim commits while its re-sharding flag is set, which a
    // view behind the registry may not show yet (the claim fails, the job is read again, and
    // the gate holds).
    let mut gate_open = planted!(opts, GateOpenBesideJava);
    gate_open |= planted!(opts, GateByViewOnly);
    if view.led_by_java() && !gate_open {
        ops.push(TxnOp::Check(Check::Absent(p.sharding_necessary())));
    }
    // The owner checks (`owner`): by the version the view shows where a version names one
    // value, with the epoch checked once for them all.
    let owner_check = |i: u32| {
        owner::owner_check(
            view.items.get(&i).and_then(|v| v.owner_stat.as_ref()),
            view.sharding_version,
            !planted!(opts, OwnerCheckByVersionZero),
        )
    };
    if let Some(epoch) = view.sharding_version {
        let by_version = groups
            .values()
            .flatten()
            .any(|(i, _)| owner_check(*i).needs_epoch());
        if by_version && !planted!(opts, SkipOwnerCheck) {
            ops.push(TxnOp::Check(Check::Version(p.sharding(), epoch)));
        }
    }
    let mut claims_out: Vec<Claim> = Vec::new();
    for ((fire, kind), items) in groups {
        let mut claimed = Vec::new();
        for (i, rec) in items {
            if !planted!(opts, SkipOwnerCheck) {
                owner_check(i).ops(p.item_instance(i), me.as_str(), &mut ops);
            }
            if !planted!(opts, RunDisabledItems) {
                // The cache may not show an operator's disable yet: the registry checks it.
                ops.push(TxnOp::Check(Check::Absent(p.item_disabled(i))));
            }
            if mixed {
                // Not while ElasticJob fails it over (its claim may not be in the cache yet).
                ops.push(TxnOp::Check(Check::Absent(p.item_failover(i))));
            }
            if kind != RunKind::Trigger
                && view
                    .items
                    .get(&i)
                    .is_some_and(|v| v.has(crate::layout::ItemLeaf::Misfire))
            {
                // ElasticJob's flag of a fire missed: this run, of the latest fire, covers it.
                ops.push(TxnOp::delete(p.item_misfire(i)));
            }
            let running_op = ops.len();
            ops.push(running_marker(p.item_running(i), me, opts, persistent));
            let prior = rec.as_ref().map(|(r, _)| r.clone()).unwrap_or_default();
            let done = match &prior.run {
                Some(run) if run.kind != RunKind::Trigger && !config.failover => {
                    Some(prior.done.map_or(run.fire, |d| d.max(run.fire)))
                }
                _ => prior.done,
            };
            let record = ItemRecord {
                done,
                run: Some(RunRecord {
                    fire,
                    kind,
                    instance: me.clone(),
                }),
            };
            let record_op = ops.len();
            let version = rec.as_ref().map(|(_, v)| *v);
            if planted!(opts, SkipOwnerCheck) && version.is_some() {
                ops.push(TxnOp::set(p.item_execution(i), record.to_bytes()));
            } else {
                ops.push(record_write(p.item_execution(i), &record, version));
            }
            claimed.push(ClaimedItem {
                item: i,
                running_op,
                record_op,
                failover_op: None,
                record,
            });
        }
        let counts_as_fire = kind != RunKind::Trigger;
        claims_out.push(Claim {
            fire,
            kind,
            counts_as_fire,
            parameter: if kind == RunKind::Trigger {
                trigger_param.clone()
            } else {
                None
            },
            items: claimed,
        });
    }
    // Failover items, grouped by the fire they re-run.
    let mut by_fire: BTreeMap<(i64, bool), Vec<ClaimedItem>> = BTreeMap::new();
    for (i, run, rec) in failover_items {
        if !planted!(opts, RunDisabledItems) {
            // The cache may not show an operator's disable yet: the registry checks it.
            ops.push(TxnOp::Check(Check::Absent(p.item_disabled(i))));
        }
        let running_op = ops.len();
        ops.push(running_marker(p.item_running(i), me, opts, persistent));
        let failover_op = ops.len();
        ops.push(TxnOp::create_ephemeral(p.item_failover(i), me.as_str()));
        let prior = rec.as_ref().map(|(r, _)| r.clone()).unwrap_or_default();
        // A manual trigger's run stays one when it moves: its time is not a scheduled fire,
        // and must never count as one, even if this run dies too and moves again.
        let kind = if run.kind == RunKind::Trigger {
            RunKind::Trigger
        } else {
            RunKind::Failover
        };
        let record = ItemRecord {
            done: prior.done,
            run: Some(RunRecord {
                fire: run.fire,
                kind,
                instance: me.clone(),
            }),
        };
        let record_op = ops.len();
        ops.push(record_write(
            p.item_execution(i),
            &record,
            rec.as_ref().map(|(_, v)| *v),
        ));
        let counts = run.kind != RunKind::Trigger;
        by_fire
            .entry((run.fire, counts))
            .or_default()
            .push(ClaimedItem {
                item: i,
                running_op,
                record_op,
                failover_op: Some(failover_op),
                record,
            });
    }
    for ((fire, counts_as_fire), items) in by_fire {
        claims_out.push(Claim {
            fire,
            kind: if counts_as_fire {
                RunKind::Failover
            } else {
                RunKind::Trigger
            },
            counts_as_fire,
            parameter: None,
            items,
        });
    }
    Action::Txn(Purpose::Claim(claims_out), ops)
}

/// What the fire gate says of a job's new runs at a decision: whether they are held
/// ([`hold_for_reshard`]), and the fire the last hold behind an ElasticJob leader's flag
/// covered ([`fires::follow_gate`]).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Hold {
    /// New runs are held.
    pub(crate) held: bool,
    /// The fire the last ElasticJob hold covered, for the items its re-shard gave.
    pub(crate) fire: Option<crate::machine::job::HeldFire>,
    /// The registry's clock holds every new run, failover's too (`clock`): this instance's
    /// clock is off the registry's by more than the job allows, or not measured yet.
    pub(crate) clock: bool,
}

/// Whether new runs of the job are held because its leader waits to move items
/// (`necessary`: the `leader/sharding/necessary` flag is set), and since when this instance
/// saw the flag (`seen`, updated). While the leader waits for runs to end, no new run starts
/// here, as in ElasticJob: the runs drain and the items move within one run's length, instead
/// of the wait running out while the owners keep starting fires. The hold ends `wait` ms after
/// this instance first saw the flag, even if it stays, so a leader that cannot finish the
/// re-shard never stops the job. Looked at on every decision, whether or not the instance may
/// claim, so that a flag seen again starts a new hold.
///
/// While an ElasticJob instance leads the job (`led_by_java`), the hold has no end but the
/// flag's deletion (`docs/migration-design.md` 3.4, the fire gate): ElasticJob's leader shards
/// at a fire and its other instances run that fire under the new plan once the flag is gone,
/// so a run started here under the old plan would be that fire's second run on its item.
/// ElasticJob's own instances wait the same way, without a bound.
pub(crate) fn hold_for_reshard(
    seen: &mut Option<Mono>,
    necessary: bool,
    led_by_java: bool,
    wait: u64,
    now: Now,
    wake: &mut Vec<Mono>,
) -> bool {
    if !necessary {
        *seen = None;
        return false;
    }
    if led_by_java {
        // No end; a wake at the wait's end only to report the stall.
        let end = seen.get_or_insert(now.mono).after(wait);
        if now.mono < end {
            wake.push(end);
        }
        return true;
    }
    waiting(seen, wait, now, wake)
}

/// An item's execution record as cached, with its version, if it has one.
pub(crate) type CurrentRecord = Option<(ItemRecord, Version)>;

/// Due items by (fire, kind), each with its current record.
pub(crate) type ClaimGroups = BTreeMap<(i64, RunKind), Vec<(u32, CurrentRecord)>>;

/// The creation of an item's `running` marker: bound to the session, or `persistent` (a job
/// shared with ElasticJob, with failover on: see [`mixed::persistent_markers`]).
pub(crate) fn running_marker(
    path: NodePath,
    me: &InstanceId,
    opts: &MachineOptions,
    persistent: bool,
) -> TxnOp {
    let _ = opts;
    if persistent || planted!(opts, PersistentRunningMarkers) {
        return TxnOp::create(path, me.as_str());
    }
    TxnOp::create_ephemeral(path, me.as_str())
}

pub(crate) fn record_write(path: NodePath, record: &ItemRecord, version: Option<Version>) -> TxnOp {
    match version {
        Some(v) => TxnOp::Set {
            path,
            data: record.to_bytes(),
            expected: Some(v),
        },
        None => TxnOp::Create {
            path,
            data: record.to_bytes(),
            mode: CreateMode::Persistent,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::CronExpr;
    use crate::machine::job_view::ItemView;
    use crate::registry::SessionId;

    /// 2026-01-01 00:00:00 UTC, a whole minute.
    const T0: i64 = 1_767_225_600_000;
    const SID: SessionId = SessionId(7);

    fn id(s: &str) -> InstanceId {
        InstanceId::new(s).unwrap()
    }

    fn at(wall_ms: i64) -> Now {
        Now {
            mono: Mono(u64::try_from(wall_ms - T0).unwrap_or(0)),
            wall: DateTime::<Utc>::from_timestamp_millis(wall_ms).unwrap_or_default(),
        }
    }

    /// New runs are held while the flag is set: for the re-shard wait when shardjob leads,
    /// until the flag goes when ElasticJob leads; a flag gone ends the hold and forgets it.
    #[test]
    fn runs_are_held_for_a_reshard_as_long_as_its_leader_waits() {
        const WAIT: u64 = 10_000;
        // (what, necessary, led by ElasticJob, since, now, held, wake)
        #[rustfmt::skip]
        #[allow(clippy::type_complexity)]
        let cases: [(&str, bool, bool, Option<u64>, u64, bool, Option<u64>); 7] = [
            ("no flag", false, false, Some(5), 20_000, false, None),
            ("flag seen now", true, false, None, 1_000, true, Some(11_000)),
            ("flag within the wait", true, false, Some(1_000), 10_999, true, Some(11_000)),
            ("flag past the wait", true, false, Some(1_000), 11_000, false, None),
            ("ElasticJob leads, within the wait", true, true, Some(1_000), 5_000, true, Some(11_000)),
            ("ElasticJob leads, past the wait", true, true, Some(1_000), 60_000, true, None),
            ("ElasticJob leads, no flag", false, true, Some(1_000), 60_000, false, None),
        ];
        for (what, necessary, java, since, now, held, wake_at) in cases {
            let mut seen = since.map(Mono);
            let mut wake = Vec::new();
            let got = hold_for_reshard(
                &mut seen,
                necessary,
                java,
                WAIT,
                at(T0 + now as i64),
                &mut wake,
            );
            assert_eq!(got, held, "{what}");
            assert_eq!(wake.first().map(|m| m.0), wake_at, "{what}: wake");
            assert_eq!(seen.is_some(), necessary, "{what}: seen");
        }
    }

    /// Job `j` of two items firing every five seconds, hosted by a machine of `me`.
    fn hosting(me: &InstanceId, failover: bool) -> (Machine, Arc<JobConfig>) {
        let mut config =
            JobConfig::new("j", 2).with_cron(CronExpr::parse("0/5 * * * * ?").unwrap());
        config.failover = failover;
        let mut m = Machine::new(MachineOptions::new(me.clone()));
        let spec = JobSpec {
            config: config.clone(),
            job_type: "SCRIPT".to_owned(),
        };
        m.add_job(spec, at(T0)).unwrap();
        (m, Arc::new(config))
    }

    /// Items 0 and 1 of `owner`, with these records (at version 3), running nowhere.
    fn view(me: &InstanceId, owner: &InstanceId, records: [ItemRecord; 2]) -> JobView {
        let mut view = JobView::default();
        view.instances.insert(me.clone());
        for (item, record) in (0..).zip(records) {
            let v = ItemView {
                exists: true,
                owner: Some(owner.clone()),
                record: Some((record, Version(3))),
                ..ItemView::default()
            };
            view.items.insert(item, Box::new(v));
        }
        view
    }

    /// `me`'s two items, each with its last fire done at `T0` and no run.
    fn idle_view(me: &InstanceId) -> JobView {
        let done = ItemRecord {
            done: Some(T0),
            run: None,
        };
        view(me, me, [done.clone(), done])
    }

    fn run(fire: i64, kind: RunKind, instance: &InstanceId) -> Option<RunRecord> {
        Some(RunRecord {
            fire,
            kind,
            instance: instance.clone(),
        })
    }

    /// The claim decision's transaction and its groups: (fire, kind, counts as a fire, the
    /// items with the record each will have).
    #[allow(clippy::type_complexity)]
    fn decide(
        m: &Machine,
        view: &JobView,
        config: &Arc<JobConfig>,
        now: Now,
    ) -> (
        Vec<TxnOp>,
        Vec<(i64, RunKind, bool, Vec<(u32, ItemRecord)>)>,
    ) {
        let j = m.jobs.named("j").unwrap();
        let cx = Ctx {
            me: &m.me,
            sid: SID,
            opts: &m.opts,
            now,
        };
        let mut memo = FireMemo::default();
        let d = claims(
            j,
            view,
            config,
            &cx,
            Hold::default(),
            &mut memo,
            &mut Vec::new(),
        );
        let Some(Action::Txn(Purpose::Claim(groups), ops)) = d.action else {
            panic!("no claim");
        };
        let groups = groups
            .into_iter()
            .map(|c| {
                let items = c.items.into_iter().map(|i| (i.item, i.record)).collect();
                (c.fire, c.kind, c.counts_as_fire, items)
            })
            .collect();
        (ops, groups)
    }

    /// A claim of this instance's due items checks, in the registry, its session, that it is
    /// still registered, and for each item that it still owns it and that no operator disabled
    /// it (the cache may not show either yet); it creates the session's `running` markers and
    /// writes each record over the version it read.
    #[test]
    fn a_claim_checks_the_owner_and_the_disable_in_the_registry() {
        let me = id("10.0.0.1@-@1");
        let (m, config) = hosting(&me, false);
        let view = idle_view(&me);
        let fire = T0 + 5_000;
        let (ops, groups) = decide(&m, &view, &config, at(fire));
        let p = &m.jobs.named("j").unwrap().paths;
        let record = ItemRecord {
            done: Some(T0),
            run: run(fire, RunKind::Scheduled, &me),
        };
        let mut want = vec![
            TxnOp::Check(Check::Session(SID)),
            TxnOp::Check(Check::Exists(p.instance(&me))),
        ];
        for i in 0..2 {
            want.extend([
                TxnOp::Check(Check::Value(p.item_instance(i), me.as_str().into())),
                TxnOp::Check(Check::Absent(p.item_disabled(i))),
                TxnOp::create_ephemeral(p.item_running(i), me.as_str()),
                TxnOp::Set {
                    path: p.item_execution(i),
                    data: record.to_bytes(),
                    expected: Some(Version(3)),
                },
            ]);
        }
        assert_eq!(ops, want);
        assert_eq!(
            groups,
            [(
                fire,
                RunKind::Scheduled,
                true,
                vec![(0, record.clone()), (1, record)]
            )]
        );
    }

    /// The owner check by version (`owner`): an owner node at version 1 or more is checked by
    /// its version, with the `sharding` node's version (the epoch) checked once; one at
    /// version 0 by value, and sealed (written again over version 0).
    #[test]
    fn a_claim_checks_the_owner_by_version_where_it_names_one_value() {
        let me = id("10.0.0.1@-@1");
        let (m, config) = hosting(&me, false);
        let mut view = idle_view(&me);
        view.sharding_version = Some(Version(7));
        for (item, version) in [(0u32, 2i64), (1, 0)] {
            view.items.get_mut(&item).unwrap().owner_stat =
                Some(crate::machine::test_support::stat(version));
        }
        let (ops, _) = decide(&m, &view, &config, at(T0 + 5_000));
        let p = &m.jobs.named("j").unwrap().paths;
        assert_eq!(
            ops[2],
            TxnOp::Check(Check::Version(p.sharding(), Version(7)))
        );
        assert_eq!(
            ops[3],
            TxnOp::Check(Check::Version(p.item_instance(0), Version(2)))
        );
        let item1 = ops
            .iter()
            .position(|op| {
                *op == TxnOp::Check(Check::Value(p.item_instance(1), me.as_str().into()))
            })
            .expect("item 1's owner checked by value");
        assert_eq!(
            ops[item1 + 1],
            TxnOp::Set {
                path: p.item_instance(1),
                data: me.as_str().into(),
                expected: Some(Version(0)),
            }
        );
        // Without the epoch, every owner is checked by value.
        view.sharding_version = None;
        let (ops, _) = decide(&m, &view, &config, at(T0 + 5_000));
        assert!(
            !ops.iter()
                .any(|op| matches!(op, TxnOp::Check(Check::Version(..))))
        );
        assert!(ops.contains(&TxnOp::Check(Check::Value(
            p.item_instance(0),
            me.as_str().into()
        ))));
    }

    /// In a job shared with ElasticJob with failover on (`docs/migration-design.md` 3.4, 3.5):
    /// the claim of a fire creates a persistent marker, checks that ElasticJob is not failing
    /// the item over, and deletes the item's `misfire` flag; an item ElasticJob fails over is
    /// not claimed, and an orphaned run is not failed over here (ElasticJob's failover has it).
    #[test]
    fn a_claim_beside_elasticjob() {
        let (me, dead) = (id("10.0.0.1@-@1"), id("10.0.0.3@-@3"));
        let java = id("10.0.0.2@-@2");
        let (m, config) = hosting(&me, true);
        let mut view = idle_view(&me);
        view.instances.insert(java.clone());
        view.java.insert(java.clone());
        let flagged = view.items.get_mut(&0).unwrap();
        flagged.leaves |= crate::machine::cache::leaf_bit(crate::layout::ItemLeaf::Misfire);
        let failing_over = view.items.get_mut(&1).unwrap();
        failing_over.failover = Some(crate::registry::Stat {
            version: Version(0),
            created: crate::registry::Revision(2),
            modified: crate::registry::Revision(2),
            ephemeral_owner: Some(SessionId(9)),
            mtime_ms: None,
        });
        // Item 2: an orphaned run of a dead shardjob instance.
        let orphan = ItemView {
            exists: true,
            owner: Some(dead.clone()),
            record: Some((
                ItemRecord {
                    done: Some(T0),
                    run: run(T0, RunKind::Scheduled, &dead),
                },
                Version(3),
            )),
            ..ItemView::default()
        };
        view.items.insert(2, Box::new(orphan));
        let fire = T0 + 5_000;
        let (ops, groups) = decide(&m, &view, &config, at(fire));
        let p = &m.jobs.named("j").unwrap().paths;
        let record = ItemRecord {
            done: Some(T0),
            run: run(fire, RunKind::Scheduled, &me),
        };
        let want = vec![
            TxnOp::Check(Check::Session(SID)),
            TxnOp::Check(Check::Exists(p.instance(&me))),
            TxnOp::Check(Check::Value(p.item_instance(0), me.as_str().into())),
            TxnOp::Check(Check::Absent(p.item_disabled(0))),
            TxnOp::Check(Check::Absent(p.item_failover(0))),
            TxnOp::delete(p.item_misfire(0)),
            TxnOp::create(p.item_running(0), me.as_str()),
            TxnOp::Set {
                path: p.item_execution(0),
                data: record.to_bytes(),
                expected: Some(Version(3)),
            },
        ];
        assert_eq!(ops, want);
        assert_eq!(
            groups,
            [(fire, RunKind::Scheduled, true, vec![(0, record.clone())])]
        );
        // While ElasticJob leads, the claim checks the fire gate in the registry: no
        // re-sharding flag (the view may not show it yet).
        view.leader = Some(java.as_str().to_owned());
        let (ops, _) = decide(&m, &view, &config, at(fire));
        let mut gated = want.clone();
        gated.insert(2, TxnOp::Check(Check::Absent(p.sharding_necessary())));
        assert_eq!(ops, gated);
    }

    /// A failover claim re-runs the dead run's fire: a scheduled fire's run is recorded as a
    /// failover, a manual trigger's stays a trigger (its time is no fire, and must not count as
    /// one even if this run dies too); each checks the disable in the registry and creates
    /// the session's `running` marker and `failover` node.
    #[test]
    fn a_failover_claim_keeps_a_triggers_run_a_trigger() {
        let (me, dead) = (id("10.0.0.1@-@1"), id("10.0.0.2@-@2"));
        let (m, config) = hosting(&me, true);
        let (scheduled, triggered) = (T0 + 5_000, T0 + 3_000);
        let view = view(
            &me,
            &dead,
            [
                ItemRecord {
                    done: Some(T0),
                    run: run(scheduled, RunKind::Scheduled, &dead),
                },
                ItemRecord {
                    done: Some(T0),
                    run: run(triggered, RunKind::Trigger, &dead),
                },
            ],
        );
        let (ops, groups) = decide(&m, &view, &config, at(T0 + 6_000));
        let p = &m.jobs.named("j").unwrap().paths;
        let records = [
            ItemRecord {
                done: Some(T0),
                run: run(scheduled, RunKind::Failover, &me),
            },
            ItemRecord {
                done: Some(T0),
                run: run(triggered, RunKind::Trigger, &me),
            },
        ];
        let mut want = vec![
            TxnOp::Check(Check::Session(SID)),
            TxnOp::Check(Check::Exists(p.instance(&me))),
        ];
        for (i, record) in (0..).zip(&records) {
            want.extend([
                TxnOp::Check(Check::Absent(p.item_disabled(i))),
                TxnOp::create_ephemeral(p.item_running(i), me.as_str()),
                TxnOp::create_ephemeral(p.item_failover(i), me.as_str()),
                TxnOp::Set {
                    path: p.item_execution(i),
                    data: record.to_bytes(),
                    expected: Some(Version(3)),
                },
            ]);
        }
        assert_eq!(ops, want);
        let [scheduled_record, trigger_record] = records;
        assert_eq!(
            groups,
            [
                (
                    triggered,
                    RunKind::Trigger,
                    false,
                    vec![(1, trigger_record)]
                ),
                (
                    scheduled,
                    RunKind::Failover,
                    true,
                    vec![(0, scheduled_record)]
                ),
            ]
        );
    }

    /// A run whose record names another live instance, its marker gone (ElasticJob's
    /// completion or failover listener deletes markers by path, an operator may), is that
    /// instance's: not failed over, and a trigger waits for it; once the instance is gone it is
    /// an orphan like any other. With failover off the trigger does not wait (the record's run
    /// is given up by the next fire's claim).
    #[test]
    fn a_run_another_live_instance_records_is_not_failed_over_and_holds_a_trigger() {
        let (me, other) = (id("10.0.0.1@-@1"), id("10.0.0.2@-@2"));
        let fire = T0 + 5_000;
        let records = |runner: &InstanceId| {
            [
                ItemRecord {
                    done: Some(T0),
                    run: run(fire, RunKind::Scheduled, runner),
                },
                ItemRecord {
                    done: Some(T0),
                    run: None,
                },
            ]
        };
        type Groups = [(i64, RunKind, bool, Vec<(u32, ItemRecord)>)];
        let kinds = |groups: &Groups| {
            groups
                .iter()
                .map(|(_, kind, _, items)| (*kind, items.iter().map(|(i, _)| *i).collect()))
                .collect::<Vec<(RunKind, Vec<u32>)>>()
        };
        let now = at(T0 + 6_000);
        // (what, failover, the runner live, claimed)
        #[rustfmt::skip]
        let cases = [
            ("live runner: item 0 waits, and the trigger with it", true, true,
                vec![(RunKind::Scheduled, vec![1])]),
            ("runner gone: failed over, the trigger runs the other", true, false,
                vec![(RunKind::Failover, vec![0]), (RunKind::Trigger, vec![1])]),
            ("failover off: the trigger runs both", false, true,
                vec![(RunKind::Trigger, vec![0, 1])]),
        ];
        for (what, failover, live, want) in cases {
            let (mut m, config) = hosting(&me, failover);
            if let Some((_, j)) = m.jobs.named_mut("j") {
                j.triggers.push_back(String::new());
            }
            let mut view = view(&me, &me, records(&other));
            if live {
                view.instances.insert(other.clone());
            }
            let (_, groups) = decide(&m, &view, &config, now);
            let mut got = kinds(&groups);
            got.sort();
            assert_eq!(got, want, "{what}");
        }
    }
}
