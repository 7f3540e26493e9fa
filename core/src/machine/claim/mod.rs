//! Claims: which of an instance's items are due, and the transaction that claims them.

#[allow(clippy::wildcard_imports)]
use crate::machine::*;

/// Most fires looked at when catching up missed fires of one item in one evaluation.
pub(crate) const MAX_CATCH_UP_STEPS: usize = 100_000;

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

/// The claim decision: own due items (cron, misfire, triggers) and failover orphans. While
/// `held` (see [`Job::held_for_reshard`]) only failover is claimed: an orphan's owner is gone,
/// so its item never blocks a move; missed fires run after the move as misfires.
#[allow(clippy::too_many_arguments)]
pub(crate) fn claims(
    j: &mut Job,
    view: &JobView,
    config: &Arc<JobConfig>,
    me: &InstanceId,
    sid: crate::registry::SessionId,
    held: bool,
    opts: &MachineOptions,
    now: Now,
    wake: &mut Vec<u64>,
) -> Option<Action> {
    let n = config.sharding_total_count;
    let now_ms = now.wall_ms();
    let tolerance = i64::try_from(opts.misfire_tolerance.as_millis()).unwrap_or(i64::MAX);
    let ahead = i64::try_from(opts.claim_ahead.as_millis()).unwrap_or(0);
    // (fire, kind, counts_as_fire, parameter) → items with their current record.
    let mut groups: ClaimGroups = BTreeMap::new();
    let mut trigger_param: Option<String> = None;

    let mine: Vec<u32> = (0..n)
        .filter(|i| {
            planted!(opts, SkipOwnerCheck)
                || view.items.get(i).and_then(|v| v.owner.as_ref()) == Some(me)
        })
        .collect();
    // `mine` is ascending: membership by binary search (jobs can have many items).
    let is_mine = |i: &u32| mine.binary_search(i).is_ok();
    j.owned_since.retain(|i, _| is_mine(i));
    for &i in &mine {
        j.owned_since.entry(i).or_insert(now_ms);
    }

    // Manual triggers: all my enabled items, once none of them runs. Before the job has a
    // plan at all the trigger waits for one, rather than running nothing. A trigger whose
    // items take several transactions (a transaction limit) is remembered until all of them
    // are claimed, with one fire time; scheduled fires wait for it meanwhile.
    let planned = (0..n).any(|i| view.items.get(&i).is_some_and(|v| v.owner.is_some()));
    let skip_disabled = |i: &u32| {
        view.items.get(i).is_some_and(|v| v.disabled) && !planted!(opts, RunDisabledItems)
    };
    // Items of the trigger being run that moved away or were disabled meanwhile are left out;
    // a trigger left with nothing to run is over. Done first, so that a trigger ended here
    // neither blocks the next one nor the scheduled fires below (which set the wake).
    if let Some(run) = &mut j.trigger_run {
        run.items.retain(|i| is_mine(i) && !skip_disabled(i));
        if run.items.is_empty() {
            j.trigger_run = None;
        }
    }
    if !j.triggers.is_empty() && planned && j.trigger_run.is_none() && !held {
        let busy = mine.iter().any(|i| {
            j.running.contains_key(i) || view.items.get(i).is_some_and(|v| v.running.is_some())
        });
        if !busy {
            let items: BTreeSet<u32> = mine.iter().copied().filter(|i| !skip_disabled(i)).collect();
            if items.is_empty() {
                // Nothing to run here: every trigger queued is consumed all the same (they
                // would each find the same nothing).
                j.triggers.clear();
            } else if let Some(parameter) = j.triggers.pop_front() {
                j.trigger_run = Some(TriggerRun {
                    parameter,
                    fire: now_ms,
                    items,
                });
            }
        }
    }
    if let Some(run) = &mut j.trigger_run {
        trigger_param = Some(run.parameter.clone());
        for &i in &run.items {
            if held
                || j.running.contains_key(&i)
                || view.items.get(&i).is_some_and(|v| v.running.is_some())
            {
                continue; // held, or running (another kind of run, or not recorded yet): waits
            }
            let rec = view.items.get(&i).and_then(|v| v.record.clone());
            groups
                .entry((run.fire, RunKind::Trigger))
                .or_default()
                .push((i, rec));
        }
    }

    // Scheduled fires and misfires of my items. Fires before the cluster's last start (a
    // registration into an empty `instances/`) were missed while no instance was registered:
    // only those within the catch-up bound are due (see "Start-up after downtime").
    let catchup_ms = if planted!(opts, IgnoreCatchUpBound) {
        0
    } else {
        config.misfire_catchup_ms()
    };
    let started = view
        .started
        .filter(|_| !planted!(opts, CatchUpAfterDowntime));
    if trigger_param.is_none() && !held {
        if let Some(cron) = &config.cron {
            for &i in &mine {
                if j.running.contains_key(&i) {
                    continue;
                }
                let Some(v) = view.items.get(&i) else {
                    continue;
                };
                if (v.disabled && !planted!(opts, RunDisabledItems)) || v.running.is_some() {
                    continue;
                }
                let rec = v.record.clone();
                let mut done = rec.as_ref().and_then(|(r, _)| r.done);
                if let Some((r, _)) = &rec {
                    if let Some(run) = &r.run {
                        if config.failover {
                            continue; // an orphan: failover below
                        }
                        if run.kind != RunKind::Trigger {
                            done = Some(done.map_or(run.fire, |d| d.max(run.fire)));
                        }
                    }
                }
                let mut baseline =
                    done.unwrap_or_else(|| j.owned_since.get(&i).copied().unwrap_or(now_ms));
                if let Some(s) = started {
                    // Fires earlier than `s - catchup_ms` are given up.
                    baseline = baseline.max(s.saturating_sub(catchup_ms).saturating_sub(1));
                }
                let Some(first_ms) = j.fires.next_after(config, baseline) else {
                    continue;
                };
                // Claimed up to `claim_ahead` before the fire, started at the fire.
                if first_ms > now_ms.saturating_add(ahead) {
                    wake.push(now.mono_at(first_ms.saturating_sub(ahead)));
                    continue;
                }
                // Latest fire at or before now: several missed fires collapse into one.
                // Through the memo: the items of a job mostly share their last fire.
                let mut last = first_ms;
                for _ in 0..MAX_CATCH_UP_STEPS {
                    match j.fires.next_after(config, last) {
                        Some(t) if t <= now_ms => last = t,
                        _ => break,
                    }
                }
                let late = now_ms - last;
                // A fire that came while the item ran here is a misfire, however recent.
                let overlapped = j.last_end.get(&i).is_some_and(|end| last <= *end);
                let on_time = late <= tolerance && !overlapped;
                // A fire from before the cluster's start, within the catch-up bound: it runs
                // once, as a misfire, whatever `misfire` says (catching up is its own opt-in).
                let caught_up = started.is_some_and(|s| last <= s);
                let kind = if caught_up {
                    RunKind::Misfire
                } else if last == first_ms && on_time {
                    RunKind::Scheduled
                } else if config.misfire && !planted!(opts, DropMisfires) {
                    RunKind::Misfire
                } else if on_time {
                    RunKind::Scheduled
                } else {
                    // Missed with misfire off: wait for the next fire.
                    if let Some(next) = cron.next_after(now.wall, &config.time_zone) {
                        wake.push(now.mono_at(next.timestamp_millis()));
                    }
                    continue;
                };
                groups.entry((last, kind)).or_default().push((i, rec));
            }
        }
    }

    // Failover: recorded runs whose marker vanished with their session.
    let mut failover_items: Vec<(u32, RunRecord, CurrentRecord)> = Vec::new();
    if config.failover && config.monitor_execution {
        let mut orphans: Vec<u32> = Vec::new();
        for (i, v) in &view.items {
            if *i >= n || v.running.is_some() || j.running.contains_key(i) {
                continue;
            }
            // A disabled item is not failed over either; its orphaned fire runs once it is
            // enabled again.
            if v.disabled && !planted!(opts, RunDisabledItems) {
                continue;
            }
            if let Some((r, _)) = &v.record {
                let orphan = r.run.is_some() && v.failover.is_none();
                // Planted bug: a finished item of a dead owner counts as an orphan too.
                let finished_of_dead = planted!(opts, FailoverFinished)
                    && r.done.is_some()
                    && v.owner
                        .as_ref()
                        .is_some_and(|o| !view.instances.contains(o));
                if orphan || finished_of_dead {
                    orphans.push(*i);
                }
            }
        }
        j.orphan_seen.retain(|i, _| orphans.contains(i));
        if !orphans.is_empty() {
            let candidates = registry_order(view.eligible());
            let share: BTreeSet<u32> = if candidates.is_empty() {
                BTreeSet::new()
            } else {
                let split = BuiltinStrategy::AverageAllocation.shard(
                    &candidates,
                    j.paths.job_name(),
                    u32::try_from(orphans.len()).unwrap_or(u32::MAX),
                );
                split
                    .items_of(me)
                    .iter()
                    .filter_map(|k| orphans.get(*k as usize).copied())
                    .collect()
            };
            for i in orphans {
                let seen = *j.orphan_seen.entry(i).or_insert(now.mono);
                let takeover = seen.saturating_add(ms(opts.failover_takeover_delay));
                if !share.contains(&i) && now.mono < takeover {
                    wake.push(takeover);
                    continue;
                }
                let Some(v) = view.items.get(&i) else {
                    continue;
                };
                let Some((r, ver)) = v.record.clone() else {
                    continue;
                };
                let run = match (r.run.clone(), r.done, v.owner.clone()) {
                    (Some(run), _, _) => run,
                    (None, Some(done), Some(owner)) if planted!(opts, FailoverFinished) => {
                        RunRecord {
                            fire: done,
                            kind: RunKind::Scheduled,
                            instance: owner,
                        }
                    }
                    _ => continue,
                };
                // Our own items of this job may also be due; they are claimed separately.
                groups.retain(|_, items| {
                    items.retain(|(it, _)| *it != i);
                    !items.is_empty()
                });
                failover_items.push((i, run, Some((r, ver))));
            }
        }
    }

    // Within the transaction limit: the items whose last finished fire is oldest first (so
    // that no item starves when the parts of a fire take longer than its interval), failover
    // before own items of the same age. The rest stays due and is claimed by the next
    // evaluation, once the watch shows this claim.
    if let Some(limit) = j.txn_limit(opts) {
        let total = groups.values().map(Vec::len).sum::<usize>() + failover_items.len();
        if total > limit {
            let age = |rec: &CurrentRecord| rec.as_ref().and_then(|(r, _)| r.done);
            let mut order: Vec<(Option<i64>, bool, u32)> = failover_items
                .iter()
                .map(|(i, _, rec)| (age(rec), false, *i))
                .chain(
                    groups
                        .values()
                        .flatten()
                        .map(|(i, rec)| (age(rec), true, *i)),
                )
                .collect();
            order.sort_unstable();
            order.truncate(limit);
            let own: BTreeSet<u32> = order.iter().filter(|o| o.1).map(|o| o.2).collect();
            let failover: BTreeSet<u32> = order.iter().filter(|o| !o.1).map(|o| o.2).collect();
            groups.retain(|_, items| {
                items.retain(|(i, _)| own.contains(i));
                !items.is_empty()
            });
            failover_items.retain(|(i, _, _)| failover.contains(i));
        }
    }

    if groups.is_empty() && failover_items.is_empty() {
        return None;
    }

    let p = &j.paths;
    let mut ops = vec![TxnOp::Check(Check::Session(sid))];
    // Still registered: an operator's shutdown (the instance node deleted) stops new
    // claims at once, before this instance has seen it.
    ops.push(TxnOp::Check(Check::Exists(j.paths.instance(me))));
    let mut claims_out: Vec<Claim> = Vec::new();
    for ((fire, kind), items) in groups {
        let mut claimed = Vec::new();
        for (i, rec) in items {
            if !planted!(opts, SkipOwnerCheck) {
                ops.push(TxnOp::Check(Check::Value(
                    p.item_instance(i),
                    me.as_str().into(),
                )));
            }
            if !planted!(opts, RunDisabledItems) {
                // The cache may not show an operator's disable yet: the registry checks it.
                ops.push(TxnOp::Check(Check::Absent(p.item_disabled(i))));
            }
            let running_op = ops.len();
            ops.push(running_marker(p.item_running(i), me, opts));
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
        ops.push(running_marker(p.item_running(i), me, opts));
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
    Some(Action::Txn(Purpose::Claim(claims_out), ops))
}

/// An item's execution record as cached, with its version, if it has one.
pub(crate) type CurrentRecord = Option<(ItemRecord, Version)>;

/// Due items by (fire, kind), each with its current record.
pub(crate) type ClaimGroups = BTreeMap<(i64, RunKind), Vec<(u32, CurrentRecord)>>;

/// The creation of an item's `running` marker, bound to the session.
pub(crate) fn running_marker(path: NodePath, me: &InstanceId, opts: &MachineOptions) -> TxnOp {
    let _ = opts;
    if planted!(opts, PersistentRunningMarkers) {
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
