//! The leader's re-shard: the plan, written whole or in parts.

#[allow(clippy::wildcard_imports)]
use crate::machine::*;

/// The leader's re-sharding decision: the transaction to send, if any, or what is wrong with
/// the assignment the strategy gave (the plan then stays as it is).
#[allow(clippy::too_many_arguments)]
pub(crate) fn reshard(
    lead: &mut LeaderState,
    j: &Job,
    view: &JobView,
    config: &JobConfig,
    custom: Option<Arc<dyn ShardingStrategy>>,
    me: &InstanceId,
    sid: crate::registry::SessionId,
    opts: &MachineOptions,
    now: Now,
    wake: &mut Vec<Mono>,
) -> Result<Option<Action>, String> {
    let n = config.sharding_total_count;
    // Fires change only the items' run markers and records: the plan needs nothing then, and
    // working out the target assignment again would cost every evaluation of the leader. The
    // one exception: an item beyond the count whose run has ended can now be removed.
    let removable = view
        .items
        .range(n..)
        .any(|(_, v)| v.exists && v.running.is_none());
    if lead.idle == Some(j.cache.plan_version) && !removable {
        return Ok(None);
    }
    let candidates = registry_order(view.eligible(planted!(opts, UnboundCandidates)));
    if candidates.is_empty() {
        return Ok(None);
    }
    let key = PlanKey {
        candidates,
        total: n,
        strategy: config.job_sharding_strategy_type.clone(),
        static_sharding: config.static_sharding,
    };
    if let Some(action) = next_part(lead, j, view, &key, me, sid, opts, now) {
        return Ok(Some(action));
    }
    let candidates = key.candidates.clone();
    let live: BTreeSet<&InstanceId> = candidates.iter().collect();
    let target: Assignment = match custom {
        Some(s) => s.shard(&candidates, j.name(), n),
        None => config
            .job_sharding_strategy_type
            .parse::<BuiltinStrategy>()
            .unwrap_or_default()
            .shard(&candidates, j.name(), n),
    };
    if let Some(problem) = assignment_problem(&target, &live, n) {
        // A custom strategy broke its contract. Keep the plan; work the assignment out again
        // only when what it depends on changes.
        lead.idle = Some(j.cache.plan_version);
        return Err(problem);
    }
    // Each item's target owner, in one pass (a search per item would cost the whole
    // assignment per item: n² for a job of n items).
    let target_owners = target.owners(n);
    let mut owners: BTreeMap<u32, InstanceId> = BTreeMap::new();
    let mut moving: Vec<u32> = Vec::new();
    for item in 0..n {
        let current = view.items.get(&item).and_then(|v| v.owner.clone());
        let valid = current.as_ref().is_some_and(|c| live.contains(c));
        let want = if config.static_sharding && valid {
            current.clone()
        } else {
            target_owners.get(item as usize).copied().flatten().cloned()
        };
        let Some(want) = want else { continue };
        if current.as_ref() != Some(&want) {
            moving.push(item);
        }
        owners.insert(item, want);
    }
    let is_running = |i: &u32| view.items.get(i).is_some_and(|v| v.running.is_some());
    // Items beyond the count are removed, but not while they still run: their `running` marker
    // is what keeps a later run of the same number (the count grown back meanwhile) from
    // overlapping the old one. Nothing else waits for them, as no one claims an item beyond
    // the count; they are removed once their run ends, which the leader watches for (see
    // [`Machine::bears_on_me`]).
    let removed: Vec<u32> = view
        .items
        .range(n..)
        .filter(|(i, v)| v.exists && (!is_running(i) || planted!(opts, RemoveWhileRunning)))
        .map(|(i, _)| *i)
        .collect();
    if moving.is_empty() && removed.is_empty() && view.necessary.is_none() {
        lead.wanted = None;
        lead.moved.clear();
        lead.written = 0;
        lead.plan = None;
        lead.idle = Some(j.cache.plan_version);
        return Ok(None);
    }
    if waiting(&mut lead.wanted, ms(opts.reshard_debounce), now, wake) {
        return Ok(None);
    }
    // Items that run under a live owner wait for their run to end, up to a deadline. The
    // `running` marker keeps the new owner from starting them while the old run lasts, so
    // after the deadline they move anyway: waiting longer could starve a job whose runs
    // overlap forever. Items of owners that are gone, or that run a failover, move at once.
    let owner_live = |i: &u32| {
        view.items
            .get(i)
            .and_then(|v| v.owner.as_ref())
            .is_some_and(|o| live.contains(o))
    };
    let blocked: Vec<u32> = moving
        .iter()
        .copied()
        .filter(|i| is_running(i) && owner_live(i))
        .collect();
    // The debounce above started `reshard_wanted`: the wait for running items counts from it.
    let wanted = lead.wanted.unwrap_or(now.mono);
    let wait_end = wanted.after(ms(opts.reshard_wait));
    let p = &j.paths;
    let mut ops = vec![
        TxnOp::Check(Check::Session(sid)),
        TxnOp::Check(Check::Value(p.leader_instance(), me.as_str().into())),
    ];
    if !blocked.is_empty() && now.mono < wait_end {
        wake.push(wait_end);
        if view.necessary.is_none() {
            ops.push(TxnOp::create(p.sharding_necessary(), Vec::<u8>::new()));
            return Ok(Some(Action::Txn(Purpose::Flag, ops)));
        }
        return Ok(None);
    }
    ops.extend(config_check(j, opts));
    // The checks alone: nothing to write if no more follows.
    let checks = ops.len();
    // Within the transaction limit: moves and new items first (one unit each), then removals
    // (two units: an item and its state). Each item's change stands on its own: an item whose
    // owner is written can no longer be claimed by the old owner (claims check the owner in
    // the registry), one not written yet stays with its old owner until the next part. The
    // flag goes with the last part, so a leader that dies meanwhile leaves it for the next.
    let limit = j.txn_limit(opts).unwrap_or(usize::MAX);
    let mut units = 0usize;
    let mut last = true;
    let mut part_moving: Vec<u32> = Vec::new();
    for item in &moving {
        if units >= limit {
            last = false;
            break;
        }
        units += 1;
        part_moving.push(*item);
    }
    let mut part_removed: Vec<u32> = Vec::new();
    for item in &removed {
        if units > 0 && units.saturating_add(2) > limit {
            last = false;
            break;
        }
        units += 2;
        part_removed.push(*item);
    }
    let remaining =
        (moving.len() + removed.len()).saturating_sub(part_moving.len() + part_removed.len());
    // A re-shard of more parts to come, with nothing that holds it (runs, items to remove, the
    // flag): the parts after this one are taken from the plan as worked out now (see
    // [`next_part`]), not by working the whole plan out again for each.
    lead.plan = (!last && removed.is_empty() && view.running == 0 && view.necessary.is_none())
        .then(|| {
            Box::new(ReshardPlan {
                key,
                owners: owners.clone(),
                todo: moving.clone(),
                // This part writes the first items of `moving`.
                cursor: part_moving.len(),
            })
        });
    let (moving, removed) = (part_moving, part_removed);
    let moved_running: Vec<u32> = moving.iter().copied().filter(is_running).collect();
    if let (Some(v), true) = (view.necessary, last) {
        ops.push(TxnOp::Delete {
            path: p.sharding_necessary(),
            expected: Some(v),
        });
    }
    for item in &removed {
        for path in j.cache.item_descendants_deepest_first(p, view, *item) {
            ops.push(TxnOp::delete(path));
        }
        ops.push(TxnOp::delete(p.item(*item)));
    }
    // The latest fire done by any item, those removed now included, is kept in the `sharding`
    // node's data (ElasticJob leaves it empty), so that it outlives the items. A part that
    // removes items writes it even when it stays the same: a transaction of deletes alone
    // brings back no revision to wait for the watch to show (see `Job::await_own_writes`), so
    // the next part would be worked out on a view that still shows the removed items, remove
    // them again and fail, and each removal would cost a failure and a retry's backoff.
    let latest_done = latest_done(view);
    let removed_done = removed
        .iter()
        .filter_map(|i| view.items.get(i))
        .filter_map(|v| v.record.as_ref().and_then(|(r, _)| r.done))
        .max();
    if !removed.is_empty() {
        let mark = ItemRecord {
            done: removed_done.max(view.sharding_done),
            run: None,
        };
        ops.push(TxnOp::set(p.sharding(), mark.to_bytes()));
    }
    // A new item starts with a record: fires before its creation are not due, whoever owns it
    // and whatever that owner remembers from an earlier item of that number. Its start is the
    // later of this clock and the latest fire the job has done, so a leader whose clock is
    // behind does not make a new item run a fire the job already ran.
    let start = latest_done.map_or(now.wall_ms(), |d| d.max(now.wall_ms()));
    for item in &moving {
        let Some(owner) = owners.get(item) else {
            continue;
        };
        // `moved_running` is ascending, as `moving` is.
        let running = moved_running.binary_search(item).is_ok();
        move_ops(p, view, *item, owner, start, running, &mut ops);
        // Planted bug: a regrown item takes over the job's latest done fire as a run in
        // progress (as if the removed item's record were carried over): it is failed over.
        if planted!(opts, RegrowRerunsDone) && !view.items.get(item).is_some_and(|v| v.exists) {
            if let Some(fire) = latest_done {
                let path = p.item_execution(*item);
                let carried = ItemRecord {
                    done: Some(start),
                    run: Some(RunRecord {
                        fire,
                        kind: RunKind::Scheduled,
                        instance: owner.clone(),
                    }),
                };
                for op in &mut ops {
                    if let TxnOp::Create { path: at, data, .. } = op {
                        if *at == path {
                            *data = carried.to_bytes();
                        }
                    }
                }
            }
        }
    }
    if ops.len() == checks {
        return Ok(None);
    }
    Ok(Some(Action::Txn(
        Purpose::Reshard {
            items: moving.len() + removed.len(),
            remaining,
            owners,
            moved_running,
            last,
            units,
        },
        ops,
    )))
}

/// The check that the configuration a re-shard was worked out from is still the job's: a
/// leader whose view lags behind the registry must not remove (or create) items by an item
/// count an operator has changed again since (found by the simulator: a shrink and a growth
/// back 1.5 s later, the leader's watch 3.6 s behind; it removed the items after the growth,
/// and they missed two fires until the next re-shard created them again). Costs ZooKeeper
/// nothing more: the leader's check is read in the same request. `None` without a `config`
/// node, or with the planted bug `reshard-on-stale-config`.
fn config_check(j: &Job, opts: &MachineOptions) -> Option<TxnOp> {
    let _ = opts;
    if planted!(opts, ReshardOnStaleConfig) {
        return None;
    }
    let config = j.cache.facts.config.as_deref()?;
    Some(TxnOp::Check(Check::Value(
        j.paths.config(),
        config.to_vec(),
    )))
}

/// The latest fire done by any item, those removed included (the `sharding` node's record).
pub(crate) fn latest_done(view: &JobView) -> Option<i64> {
    view.dones
        .max()
        .copied()
        .into_iter()
        .chain(view.sharding_done)
        .max()
}

/// The operations that give `item` to `owner`: creating it first (with a record whose last
/// fire done is `start`) if it does not exist, and checking that it does not run unless it
/// moves `running`.
pub(crate) fn move_ops(
    p: &JobPaths,
    view: &JobView,
    item: u32,
    owner: &InstanceId,
    start: i64,
    running: bool,
    ops: &mut Vec<TxnOp>,
) {
    let v = view.items.get(&item);
    if !v.is_some_and(|v| v.exists) {
        ops.push(TxnOp::create(p.item(item), Vec::<u8>::new()));
        let baseline = ItemRecord {
            done: Some(start),
            run: None,
        };
        ops.push(TxnOp::create(p.item_execution(item), baseline.to_bytes()));
    }
    if !running {
        ops.push(TxnOp::Check(Check::Absent(p.item_running(item))));
    }
    if v.is_some_and(|v| v.owner_stat.is_some()) {
        ops.push(TxnOp::set(p.item_instance(item), owner.as_str()));
    } else {
        ops.push(TxnOp::create(p.item_instance(item), owner.as_str()));
    }
}

/// What a re-shard is worked out from: the same inputs give the same plan.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct PlanKey {
    /// The candidates, in registry order.
    pub(crate) candidates: Vec<InstanceId>,
    /// The item count.
    pub(crate) total: u32,
    /// The sharding strategy's type.
    pub(crate) strategy: String,
    /// Whether items keep a live owner.
    pub(crate) static_sharding: bool,
}

/// A re-shard too large for one transaction, as worked out for its first part: the parts
/// after it are taken from it, so that each costs the items it writes rather than the whole
/// job (a job of n items written k items at a time would cost n²/k).
#[derive(Debug)]
pub(crate) struct ReshardPlan {
    pub(crate) key: PlanKey,
    /// Each item's owner in the plan.
    pub(crate) owners: BTreeMap<u32, InstanceId>,
    /// The items whose owner the plan changes, ascending.
    pub(crate) todo: Vec<u32>,
    /// The items of `todo` before this one are written.
    pub(crate) cursor: usize,
}

/// The next part of the re-shard in progress, taken from its plan, if there is one for `key`
/// and the part is one the whole plan worked out again would make too: past the debounce,
/// with no item running, no item beyond the count, the flag not set, and more than one
/// part's worth of items left (the last part is worked out in full, which also finds what
/// changed meanwhile behind the plan's back).
// A pure decision takes each of its inputs by name.
#[allow(clippy::too_many_arguments)]
pub(crate) fn next_part(
    lead: &mut LeaderState,
    j: &Job,
    view: &JobView,
    key: &PlanKey,
    me: &InstanceId,
    sid: crate::registry::SessionId,
    opts: &MachineOptions,
    now: Now,
) -> Option<Action> {
    let debounced = lead
        .wanted
        .is_some_and(|w| now.mono >= w.after(ms(opts.reshard_debounce)));
    let plain = debounced
        && view.running == 0
        && view.necessary.is_none()
        && view.items.range(key.total..).next().is_none();
    if !plain || lead.plan.as_ref().is_none_or(|plan| plan.key != *key) {
        lead.plan = None;
        return None;
    }
    let limit = j.txn_limit(opts).unwrap_or(usize::MAX);
    let plan = lead.plan.as_mut()?;
    // The first `limit` items the plan still changes; one more shows there is another part.
    // Those before the cursor are written (the parts that wrote them succeeded), even if the
    // view does not show it yet: ZooKeeper's watch can report the nodes of one transaction in
    // several bursts, and a part checked against such a view would write them again.
    let mut part: Vec<u32> = Vec::new();
    let mut k = plan.cursor;
    let mut end = k;
    while k < plan.todo.len() && part.len() <= limit {
        let item = plan.todo[k];
        let current = view.items.get(&item).and_then(|v| v.owner.as_ref());
        if current != plan.owners.get(&item) {
            if part.len() < limit {
                end = k + 1;
            }
            part.push(item);
        }
        k += 1;
    }
    if part.len() <= limit {
        lead.plan = None;
        return None;
    }
    part.truncate(limit);
    plan.cursor = end;
    // `k` is one past the item that showed another part: the items after the part.
    let remaining = plan.todo.len() - (k - 1);
    let new_items = part
        .iter()
        .any(|i| !view.items.get(i).is_some_and(|v| v.exists));
    let latest = if new_items { latest_done(view) } else { None };
    let start = latest.map_or(now.wall_ms(), |d| d.max(now.wall_ms()));
    let p = &j.paths;
    let mut ops = vec![
        TxnOp::Check(Check::Session(sid)),
        TxnOp::Check(Check::Value(p.leader_instance(), me.as_str().into())),
    ];
    ops.extend(config_check(j, opts));
    for item in &part {
        let owner = plan.owners.get(item)?;
        move_ops(p, view, *item, owner, start, false, &mut ops);
    }
    Some(Action::Txn(
        Purpose::Reshard {
            owners: BTreeMap::new(),
            moved_running: Vec::new(),
            last: false,
            units: part.len(),
            items: part.len(),
            remaining,
        },
        ops,
    ))
}

/// What is wrong with a strategy's assignment of the items `0..total` to the candidates
/// `live`, if anything: each item must go to exactly one of them.
pub(crate) fn assignment_problem(
    target: &Assignment,
    live: &BTreeSet<&InstanceId>,
    total: u32,
) -> Option<String> {
    if let Some((who, _)) = target
        .iter()
        .find(|(who, items)| !items.is_empty() && !live.contains(who))
    {
        return Some(format!("it gives items to {who}, which is not a candidate"));
    }
    if !target.covers_exactly(total) {
        let given = target.total_items();
        return Some(format!(
            "it does not give each item of 0..{total} to exactly one instance ({given} given)"
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::test_support::{self, WALL, now};
    use crate::registry::{Node, SessionId};

    const SID: SessionId = SessionId(7);
    const ME: &str = "10.0.0.1@-@1";
    const GONE: &str = "10.0.0.9@-@9";

    /// A node as the registry shows it: instance nodes and run markers held by a session (an
    /// instance's own or a live other's), the rest persistent.
    fn node(path: &str, data: Vec<u8>) -> Node {
        let held = path.contains("/instances/") || path.ends_with("/running");
        test_support::node(path, data, held.then_some(SessionId(8)))
    }

    /// Item `i` owned by `owner`, with a record.
    fn item(i: u32, owner: &str) -> Vec<Node> {
        let record = ItemRecord {
            done: Some(WALL),
            run: None,
        };
        vec![
            node(&format!("/j/sharding/{i}"), Vec::new()),
            node(&format!("/j/sharding/{i}/instance"), owner.into()),
            node(&format!("/j/sharding/{i}/execution"), record.to_bytes()),
        ]
    }

    /// A machine of `ME` hosting job `j`, at most `limit` items per transaction.
    fn hosting(limit: Option<usize>) -> Machine {
        let mut opts = MachineOptions::new(InstanceId::new(ME).unwrap());
        opts.max_txn_items = limit;
        let mut m = Machine::new(opts);
        let spec = JobSpec {
            config: JobConfig::new("j", 1),
            job_type: "SCRIPT".to_owned(),
        };
        m.add_job(spec, now(0)).unwrap();
        m
    }

    /// The job's cache holds `nodes`, `ME`'s instance node and its leadership.
    fn show(m: &mut Machine, nodes: Vec<Node>) {
        let me = InstanceId::new(ME).unwrap();
        let mut all = vec![
            node("/j", Vec::new()),
            node(&format!("/j/instances/{ME}"), Vec::new()),
            node("/j/leader/election/instance", ME.into()),
        ];
        all.extend(nodes);
        if let Some((_, j)) = m.jobs.named_mut("j") {
            j.cache.load(all, Some(Revision(1)), &me);
        }
    }

    /// One part of a re-shard: the items it gives an owner, those it removes, and what its
    /// purpose says (last, items, remaining, units).
    #[derive(Debug, PartialEq, Eq)]
    struct Part {
        written: Vec<u32>,
        removed: Vec<u32>,
        last: bool,
        items: usize,
        remaining: usize,
        units: usize,
    }

    fn part(written: &[u32], removed: &[u32], last: bool, remaining: usize, units: usize) -> Part {
        Part {
            written: written.to_vec(),
            removed: removed.to_vec(),
            last,
            items: written.len() + removed.len(),
            remaining,
            units,
        }
    }

    /// The leader's re-shard of job `j` of `total` items, past the debounce.
    fn decide(m: &Machine, lead: &mut LeaderState, total: u32) -> (Part, Vec<TxnOp>) {
        let j = m.jobs.named("j").unwrap();
        let view = Arc::clone(j.cache.view());
        let config = JobConfig::new("j", total);
        let me = InstanceId::new(ME).unwrap();
        let mut wake = Vec::new();
        let got = reshard(
            lead,
            j,
            &view,
            &config,
            None,
            &me,
            SID,
            &m.opts,
            now(1_000),
            &mut wake,
        );
        let (purpose, ops) = match got {
            Ok(Some(Action::Txn(purpose, ops))) => (purpose, ops),
            Ok(_) => panic!("no re-shard"),
            Err(problem) => panic!("no re-shard: {problem}"),
        };
        let Purpose::Reshard {
            last,
            items,
            remaining,
            units,
            ..
        } = purpose
        else {
            panic!("not a re-shard: {purpose:?}");
        };
        let p = &j.paths;
        let written = (0..16)
            .filter(|i| {
                ops.iter().any(|op| {
                    matches!(op, TxnOp::Create { path, .. } | TxnOp::Set { path, .. }
                        if *path == p.item_instance(*i))
                })
            })
            .collect();
        let removed = (0..16)
            .filter(|i| {
                ops.iter()
                    .any(|op| matches!(op, TxnOp::Delete { path, .. } if *path == p.item(*i)))
            })
            .collect();
        let part = Part {
            written,
            removed,
            last,
            items,
            remaining,
            units,
        };
        (part, ops)
    }

    fn debounced() -> LeaderState {
        LeaderState {
            wanted: Some(Mono(0)),
            ..LeaderState::default()
        }
    }

    /// Within the transaction limit, moves go first (a unit each), then removals of items
    /// beyond the count (two units each, but one alone always goes); the part that leaves
    /// nothing behind is the last, and each says how many items are still to write.
    #[test]
    fn a_reshard_part_takes_moves_then_removals_within_the_limit() {
        // Item 0 is mine, item 1 moves from an instance that is gone, item 2 is beyond a
        // count of 2.
        let moves = [item(0, ME), item(1, GONE), item(2, GONE)].concat();
        let removals_only = [item(0, ME), item(1, ME), item(2, GONE)].concat();
        #[rustfmt::skip]
        let cases: [(&str, &[Node], Option<usize>, Part); 5] = [
            ("no limit: one part", &moves, None, part(&[1], &[2], true, 0, 3)),
            ("room for both", &moves, Some(3), part(&[1], &[2], true, 0, 3)),
            ("no room for the removal", &moves, Some(2), part(&[1], &[], false, 1, 1)),
            ("a removal alone", &removals_only, Some(1), part(&[], &[2], true, 0, 2)),
            ("a removal alone, no limit", &removals_only, None, part(&[], &[2], true, 0, 2)),
        ];
        for (what, nodes, limit, want) in cases {
            let mut m = hosting(limit);
            show(&mut m, nodes.to_vec());
            let (got, ops) = decide(&m, &mut debounced(), 2);
            assert_eq!(got, want, "{what}");
            let p = &m.jobs.named("j").unwrap().paths;
            if want.removed.contains(&2) {
                // The removed item goes with its nodes, deepest first.
                let deletes: Vec<&TxnOp> = ops
                    .iter()
                    .filter(|op| matches!(op, TxnOp::Delete { .. }))
                    .collect();
                assert_eq!(
                    deletes,
                    [
                        &TxnOp::delete(p.item_execution(2)),
                        &TxnOp::delete(p.item_instance(2)),
                        &TxnOp::delete(p.item(2)),
                    ],
                    "{what}"
                );
            }
        }
    }

    /// A re-shard too large for one transaction takes its later parts from the plan worked
    /// out for the first, each part after the items the last one wrote, even while the view
    /// does not show those yet (a watch may report a transaction's nodes in several bursts);
    /// the last part is worked out in full.
    #[test]
    fn a_reshard_in_parts_goes_on_from_its_plan() {
        let mut m = hosting(Some(2));
        let gone: Vec<Node> = (0..7).flat_map(|i| item(i, GONE)).collect();
        show(&mut m, gone);
        let mut lead = debounced();
        #[rustfmt::skip]
        let parts = [
            part(&[0, 1], &[], false, 5, 2),
            part(&[2, 3], &[], false, 3, 2),
            part(&[4, 5], &[], false, 1, 2),
        ];
        for (k, want) in parts.into_iter().enumerate() {
            let (got, _) = decide(&m, &mut lead, 7);
            assert_eq!(got, want, "part {k}, on a view that shows none written");
        }
        // The watch shows them all: the last item is worked out in full.
        let shown: Vec<Node> = (0..7)
            .flat_map(|i| item(i, if i < 6 { ME } else { GONE }))
            .collect();
        show(&mut m, shown);
        let (got, _) = decide(&m, &mut lead, 7);
        assert_eq!(got, part(&[6], &[], true, 0, 1), "the last part");
        assert!(lead.plan.is_none(), "no plan kept after the last part");
    }

    /// A new item starts with a record of the later of the leader's clock and the latest fire
    /// the job has done (here one of items removed before, kept in the `sharding` node), in
    /// every part of the re-shard: a leader whose clock is behind does not make it run a fire
    /// the job ran already.
    #[test]
    fn new_items_start_after_the_latest_fire_done_in_every_part() {
        let latest = WALL + 60_000;
        let mut m = hosting(Some(2));
        let done = ItemRecord {
            done: Some(latest),
            run: None,
        };
        show(&mut m, vec![node("/j/sharding", done.to_bytes())]);
        let mut lead = debounced();
        for (k, items) in [[0, 1], [2, 3]].into_iter().enumerate() {
            let (got, ops) = decide(&m, &mut lead, 5);
            assert_eq!(got.written, items, "part {k}");
            let p = &m.jobs.named("j").unwrap().paths;
            for i in items {
                assert!(
                    ops.contains(&TxnOp::create(p.item_execution(i), done.to_bytes())),
                    "part {k}: item {i} starts after the latest fire done"
                );
            }
        }
    }

    /// A strategy that gives every item to the first candidate, and counts its calls.
    #[derive(Debug, Default)]
    struct Counting(std::sync::atomic::AtomicUsize);

    impl ShardingStrategy for Counting {
        fn name(&self) -> &str {
            "COUNTING"
        }
        fn shard(&self, candidates: &[InstanceId], job_name: &str, total: u32) -> Assignment {
            self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            BuiltinStrategy::AverageAllocation.shard(&candidates[..1], job_name, total)
        }
    }

    /// Once the plan needs nothing, the leader works it out again only when its inputs
    /// change, or to remove an item beyond the count whose run has ended; not while that run
    /// goes on (fires change only run markers and records).
    #[test]
    fn an_idle_plan_is_worked_out_again_only_when_there_is_something_to_do() {
        let me = InstanceId::new(ME).unwrap();
        let running = node("/j/sharding/2/running", GONE.into());
        #[rustfmt::skip]
        let cases: [(&str, bool, Vec<Node>, usize, bool); 5] = [
            ("idle", true, vec![], 0, false),
            ("idle, an item beyond the count runs", true, [item(2, GONE), vec![running.clone()]].concat(), 0, false),
            ("idle, an item beyond the count ended", true, item(2, GONE), 1, true),
            ("not idle", false, vec![], 1, false),
            ("not idle, an item beyond the count runs", false, [item(2, GONE), vec![running]].concat(), 1, false),
        ];
        for (what, idle, beyond, calls, removes) in cases {
            let mut m = hosting(None);
            show(&mut m, [item(0, ME), item(1, ME), beyond].concat());
            let j = m.jobs.named("j").unwrap();
            let view = Arc::clone(j.cache.view());
            let mut lead = debounced();
            lead.idle = idle.then_some(j.cache.plan_version);
            let strategy = Arc::new(Counting::default());
            let custom: Arc<dyn ShardingStrategy> = strategy.clone();
            let got = reshard(
                &mut lead,
                j,
                &view,
                &JobConfig::new("j", 2),
                Some(custom),
                &me,
                SID,
                &m.opts,
                now(1_000),
                &mut Vec::new(),
            );
            let calls_made = strategy.0.load(std::sync::atomic::Ordering::Relaxed);
            assert_eq!(calls_made, calls, "{what}: the plan worked out");
            assert_eq!(
                matches!(got, Ok(Some(Action::Txn(Purpose::Reshard { .. }, _)))),
                removes,
                "{what}: a re-shard"
            );
            assert!(lead.idle.is_some() || removes, "{what}: idle after");
        }
    }
}
