//! A job shared with ElasticJob 3.0.x instances: what a shardjob instance does differently
//! while the job is **mixed** (an ElasticJob instance is registered, [`JobView::java`]), as
//! `docs/migration-design.md` 3.4 and 3.5 say. Pure decisions, with their tests beside them;
//! the claim planner (`claim/`), the completion, the leave and the leader's housekeeping ask
//! them.
//!
//! - **Run markers** ([`persistent_markers`]): ElasticJob's rule, persistent while `failover`
//!   (with `monitorExecution`) is on, so that ElasticJob's failover, which acts on the
//!   deletion of a dead instance's node and looks for the `running` nodes of its items, finds
//!   a dead shardjob instance's runs: an ephemeral marker is gone with the session by then.
//!   The fencing token is still the marker's creation revision. A persistent marker outlives
//!   the session that created it, so which session holds it is told by revisions
//!   ([`marker_session`]): a marker of this instance created after its instance node of this
//!   session is this session's (a claim checks that node exists); an older one was left by an
//!   earlier session, whose runs were cancelled before it expired (the lease's safety
//!   margin). Those this instance removes itself ([`markers_left`]), as ElasticJob does on
//!   `RECONNECTED`: at once when the job is not mixed (its orphaned run is then failed over as
//!   usual), after a session timeout when it is (ElasticJob's failover, which acts at the
//!   expiry, goes first). The leader's rule for markers no session holds (`leader/stale.rs`)
//!   leaves them alone: their owner's instance node is bound to a live session. While the job
//!   is mixed, the markers of a shardjob instance that is gone and whose runs ElasticJob did
//!   not fail over within a session timeout (every process of the job died at once, say) are
//!   removed the same way by the shardjob instances, split as orphans are: ElasticJob's leader
//!   would wait for them for ever before it re-shards, and a shardjob leader's rule for them
//!   does not run while ElasticJob leads.
//! - **Failover** ([`settle_orphans`]): none of shardjob's own while mixed: ElasticJob's
//!   failover claims a dead instance's items under its latch, which shardjob does not take.
//!   A recorded run whose marker is gone (an orphan) was failed over by ElasticJob, or will be
//!   (its queue), or was given up as ElasticJob gives up what it cannot fail over: its record
//!   is settled, the fire counted done, so that the item's owner goes on with the next fires,
//!   and no shardjob instance runs the fire again once the job is no longer mixed. The orphans
//!   are split among the shardjob instances as failover splits them ([`failover::share`]),
//!   the others' share taken after the takeover delay.
//! - **Items not claimed at a fire** ([`held_at_fire`]): besides disabled and running ones,
//!   an item with a `failover` node while mixed (ElasticJob fails it over); its fire stays
//!   owed and runs once the node is gone, late: as a misfire.
//! - **Misfire flags**: a claim of a fire deletes the item's `misfire` flag, which it covers
//!   (ElasticJob's misfire loop deletes its flags when its replay starts, too).
//! - **Server nodes** ([`may_delete_server`]): never deleted while mixed: an ElasticJob
//!   instance on that IP that reconnects and finds its server node gone registers itself
//!   `DISABLED` for good.

#[allow(clippy::wildcard_imports)]
use crate::machine::*;

use crate::machine::claim::failover;
use crate::machine::job_view::{ItemView, session_bound};
use crate::machine::leader::stale::{SeenMarker, stale_markers};

/// Whether the job is mixed: an ElasticJob instance is registered (bound to a session).
pub(crate) fn is_mixed(view: &JobView) -> bool {
    !view.java.is_empty()
}

/// Whether this instance's claims create their `running` markers persistent: while the job
/// is mixed and `failover` (with `monitorExecution`) is on, ElasticJob's own rule
/// (`ExecutionService.registerJobBegin`). Otherwise bound to the session.
pub(crate) fn persistent_markers(view: &JobView, config: &JobConfig) -> bool {
    is_mixed(view) && config.failover && config.monitor_execution
}

/// Which session of this instance holds an item's `running` marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MarkerSession {
    /// This session: bound to it, or persistent and created since this session's instance
    /// node (a claim checks the instance node exists).
    This,
    /// An earlier session: persistent, and created before this session's instance node.
    Earlier,
}

/// Whose the item's `running` marker is, if it holds this instance's id: `sid` is this
/// instance's session, `registered` the creation revision of its instance node in that
/// session, if the view shows it. A marker bound to another session, or persistent while the
/// registration is not known, is neither.
pub(crate) fn marker_session<'a>(
    v: &'a ItemView,
    me: &InstanceId,
    sid: crate::registry::SessionId,
    registered: Option<Revision>,
) -> Option<(MarkerSession, &'a crate::registry::Stat)> {
    let (holder, stat) = v.running.as_ref()?;
    if holder.trim() != me.as_str() {
        return None;
    }
    if stat.ephemeral_owner == Some(sid) {
        return Some((MarkerSession::This, stat));
    }
    if session_bound(stat) {
        return None;
    }
    let registered = registered?;
    let session = if stat.created > registered {
        MarkerSession::This
    } else {
        MarkerSession::Earlier
    };
    Some((session, stat))
}

/// The creation revision of this instance's node of the job, if the view shows it bound to
/// the session `sid`.
pub(crate) fn registration(j: &Job, sid: crate::registry::SessionId) -> Option<Revision> {
    j.cache
        .own_instance()
        .filter(|s| s.ephemeral_owner == Some(sid))
        .map(|s| s.created)
}

/// Whether an item is left alone at a fire: disabled (unless `run_disabled`, a planted bug),
/// running (a marker of anyone's), or, while the job is mixed, failed over by ElasticJob (a
/// `failover` node). Its fire stays owed.
pub(crate) fn held_at_fire(v: &ItemView, mixed: bool, run_disabled: bool) -> bool {
    (v.disabled && !run_disabled) || v.running.is_some() || (mixed && v.failover.is_some())
}

/// Whether this instance may delete a server node (its own when it leaves, or the leader's
/// housekeeping of those left behind): never while the job is mixed (`docs/migration-design.md`
/// 3.4, point 8).
pub(crate) fn may_delete_server(view: &JobView) -> bool {
    !is_mixed(view)
}

/// The record of an orphaned run, settled: its fire counts as done (a trigger's time is no
/// fire), and no run is in progress.
pub(crate) fn settled(record: &ItemRecord) -> ItemRecord {
    let done = match &record.run {
        Some(run) if run.kind != RunKind::Trigger => {
            Some(record.done.map_or(run.fire, |d| d.max(run.fire)))
        }
        _ => record.done,
    };
    ItemRecord { done, run: None }
}

/// A persistent `running` marker of a shardjob run that its session left behind: of this
/// instance's earlier session (`mine`), or, while the job is mixed, of a shardjob instance
/// that is gone (the marker holds the instance the item's record names as running it: only a
/// shardjob claim writes both).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LeftMarker<'a> {
    /// The item.
    pub(crate) item: u32,
    /// The marker's value: the instance that claimed the item.
    pub(crate) owner: &'a str,
    /// Its creation revision.
    pub(crate) created: Revision,
    /// Whether it is this instance's own.
    pub(crate) mine: bool,
}

/// What this instance does about the markers left behind.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct LeftMarkers {
    /// What it remembers of each after this decision (when it first saw it, since when its
    /// owner is gone).
    pub(crate) seen: BTreeMap<u32, SeenMarker>,
    /// The items whose marker it removes now, ascending.
    pub(crate) clear: Vec<u32>,
    /// When the next one's wait ends, if one waits.
    pub(crate) wake: Option<Mono>,
}

/// Which markers left behind this instance removes now. Its own are removed once first seen
/// `grace_ms` ago; another instance's once its owner has been seen gone (not `live`) that
/// long: at once if the item is in this instance's `share`, after `delay` ms more if not
/// (the instance whose share it is may be gone too). `seen` is what earlier decisions
/// remembered. The grace lets ElasticJob's failover, which acts as soon as the session's
/// instance node goes, take them first.
pub(crate) fn markers_left(
    markers: &[LeftMarker<'_>],
    live: impl Fn(&str) -> bool,
    share: &BTreeSet<u32>,
    seen: &BTreeMap<u32, SeenMarker>,
    grace_ms: u64,
    delay_ms: u64,
    now: Now,
) -> LeftMarkers {
    let mine: BTreeSet<u32> = markers.iter().filter(|m| m.mine).map(|m| m.item).collect();
    let plan = stale_markers(
        markers.iter().map(|m| (m.item, m.owner, m.created)),
        live,
        |_, _| None,
        seen,
        grace_ms,
        now.mono,
        now.wall_ms(),
    );
    let mut left = LeftMarkers {
        seen: plan.seen,
        clear: Vec::new(),
        wake: plan.wake,
    };
    for item in plan.clear {
        let takeover = left
            .seen
            .get(&item)
            .and_then(|m| m.stale_since)
            .map_or(now.mono, |since| {
                since.after(grace_ms.saturating_add(delay_ms))
            });
        if mine.contains(&item) || share.contains(&item) || now.mono >= takeover {
            left.clear.push(item);
        } else {
            left.wake = Some(left.wake.map_or(takeover, |w| w.min(takeover)));
        }
    }
    left
}

/// The shardjob instances among the eligible ones, in registry order: those that split the
/// orphans and the markers left behind of a mixed job.
pub(crate) fn shardjob_candidates(view: &JobView) -> Vec<InstanceId> {
    let candidates: Vec<InstanceId> = view
        .eligible(false)
        .into_iter()
        .filter(|i| !view.java.contains(i))
        .collect();
    registry_order(candidates)
}

/// The instance nodes no session holds that are plainly garbage (an id not of the form
/// `{ip}@-@{pid}`, or a value that is not the id's instance YAML), with their versions, while
/// an ElasticJob instance leads: ElasticJob reads every instance node as a `JobInstance`, so
/// every sharding and failover of its leader throws while one is there, and it never deletes
/// one; a shardjob leader would (`leader::stale`). Empty while shardjob leads, or no one.
pub(crate) fn garbage_beside_java(view: &JobView) -> Vec<(InstanceId, Version)> {
    if !view.led_by_java() {
        return Vec::new();
    }
    view.unbound
        .iter()
        .filter(|(id, u)| {
            !crate::machine::leader::stale::well_formed_id(id.as_str())
                || !crate::machine::leader::stale::instance_yaml(id.as_str(), &u.value)
        })
        .map(|(id, u)| (id.clone(), u.version))
        .collect()
}

/// The deletion of [`garbage_beside_java`], by the first shardjob candidate only (one
/// writer), each node checked by its version, at most the transaction limit at once.
fn java_garbage(j: &Job, view: &JobView, cx: &Ctx<'_>) -> Option<Action> {
    let mut garbage = garbage_beside_java(view);
    if planted!(cx.opts, KeepGarbageBesideJava) {
        garbage.clear();
    }
    if garbage.is_empty() || shardjob_candidates(view).first() != Some(cx.me) {
        return None;
    }
    let limit = j.txn_limit(cx.opts).unwrap_or(usize::MAX).max(1);
    let mut ops = vec![TxnOp::Check(Check::Session(cx.sid))];
    let mut nodes = Vec::new();
    for (id, version) in garbage.into_iter().take(limit) {
        let path = j.paths.instance(&id);
        let value = view
            .unbound
            .get(&id)
            .map(|u| u.value.clone())
            .unwrap_or_default();
        nodes.push((path.to_string(), value));
        ops.push(TxnOp::Delete {
            path,
            expected: Some(version),
        });
    }
    Some(Action::Txn(Purpose::Garbage { nodes }, ops))
}

/// The items of a job an ElasticJob instance leads whose plan names an owner with no
/// instance node (an instance that is gone), or none, while no re-sharding flag is up, with
/// the owner each names (empty: none), ascending. Empty while shardjob leads (its leader
/// re-shards by itself), while no one leads, while the flag is up (the leader re-shards at
/// its fire), and while an instance node no session holds is there: ElasticJob takes a
/// well-formed one for a live instance and gives it items again at every re-shard, and one
/// it cannot read makes its every sharding throw (a flag set then would hold every fire of
/// the job, shardjob's too, for as long as the node stays).
pub(crate) fn gone_owners(view: &JobView) -> Vec<(u32, String)> {
    if !view.led_by_java() || view.necessary.is_some() || !view.unbound.is_empty() {
        return Vec::new();
    }
    view.items
        .iter()
        .filter(|(_, v)| v.exists)
        .filter(|(_, v)| v.owner.as_ref().is_none_or(|o| !view.instances.contains(o)))
        .map(|(i, v)| {
            (
                *i,
                v.owner.as_ref().map_or_else(String::new, |o| o.to_string()),
            )
        })
        .collect()
}

/// The flag for an ElasticJob leader whose plan has named owners that are gone for
/// `grace_ms` (a session timeout) with no flag up ([`gone_owners`]): ElasticJob re-shards
/// only when an instance comes or goes and at a leader's fire, and its sharding reads the
/// instances before it waits for running items, so a plan it wrote from an instance list
/// that changed meanwhile keeps items on a dead owner until the next change. Set by the
/// first shardjob candidate only (one writer, no race of creates).
fn nudge(
    j: &mut Job,
    view: &JobView,
    cx: &Ctx<'_>,
    grace_ms: u64,
    wake: &mut Vec<Mono>,
) -> Option<Action> {
    let (me, now) = (cx.me, cx.now);
    let mut gone = gone_owners(view);
    if planted!(cx.opts, NoNudgeBesideJava) {
        gone.clear();
    }
    // The candidates only when there is something to do: this runs at every decision.
    if gone.is_empty() || shardjob_candidates(view).first() != Some(me) {
        j.gone_owners_since = None;
        return None;
    }
    let since = *j.gone_owners_since.get_or_insert(now.mono);
    let due = since.after(grace_ms);
    if now.mono < due {
        wake.push(due);
        return None;
    }
    j.gone_owners_since = None;
    let ops = vec![
        TxnOp::Check(Check::Session(cx.sid)),
        TxnOp::create(j.paths.sharding_necessary(), Vec::<u8>::new()),
    ];
    Some(Action::Txn(Purpose::Nudge { items: gone }, ops))
}

/// What settling orphans asks of this instance now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SettlePlan {
    /// The orphans it settles now, ascending.
    pub(crate) take: Vec<u32>,
    /// When each orphan was first seen (the takeover delay counts from it).
    pub(crate) seen: BTreeMap<u32, Mono>,
    /// The earliest takeover of an orphan that is not this instance's share, if any waits.
    pub(crate) wake: Option<Mono>,
}

/// Which orphans of a mixed job this instance settles now: the orphans failover would claim
/// (see [`failover::orphans`]), split among the eligible shardjob instances alike (ElasticJob's
/// instances settle nothing), this instance's share at once, the others after `delay` ms.
#[allow(clippy::too_many_arguments)]
pub(crate) fn settle_orphans(
    view: &JobView,
    n: u32,
    here: impl Fn(u32) -> bool,
    job: &str,
    me: &InstanceId,
    seen: &BTreeMap<u32, Mono>,
    delay: u64,
    now: Mono,
) -> SettlePlan {
    let orphans =
        failover::orphans(view, n, here, me, failover::LiveRunner::Count, false, false).shared;
    let share = if orphans.is_empty() {
        BTreeSet::new()
    } else {
        failover::share(&orphans, &shardjob_candidates(view), job, me)
    };
    let plan = failover::plan(&orphans, &share, seen, delay, now);
    SettlePlan {
        take: plan.take,
        seen: plan.seen,
        wake: plan.wake,
    }
}

/// The duties of a shardjob instance on a job that is mixed, or was (its persistent markers
/// outlive that), before its claims: the markers its earlier sessions left, then the orphans
/// of a mixed job with failover on. Updates the job's memory of both; wake times go to
/// `wake`. `grace_ms` is the session timeout. `fresh`: the session was confirmed just now, so
/// the view shows the registry as of a moment ago; without it another instance's marker is
/// not removed (a view behind the registry, a watch cut off, may not show that its owner came
/// back and created it again, at the same version and value), and `wants_fresh` is set: the
/// caller confirms the session and decides again.
#[allow(clippy::too_many_arguments)]
pub(crate) fn mixed_duties(
    j: &mut Job,
    view: &JobView,
    config: &JobConfig,
    cx: &Ctx<'_>,
    grace_ms: u64,
    fresh: bool,
    wants_fresh: &mut bool,
    wake: &mut Vec<Mono>,
) -> Option<Action> {
    let (me, sid, opts, now) = (cx.me, cx.sid, cx.opts, cx.now);
    let mixed = is_mixed(view);
    let limit = j.txn_limit(opts).unwrap_or(usize::MAX).max(1);

    // Markers left behind: of earlier sessions of this instance (that no run here holds),
    // and, while mixed, of shardjob instances that are gone (the leader's rule for markers no
    // session holds is for a shardjob leader; ElasticJob's leader waits for them for ever).
    let registered = registration(j, sid);
    let mut left: Vec<LeftMarker<'_>> = Vec::new();
    for i in &view.persistent_running {
        let Some(v) = view.items.get(i) else { continue };
        let Some((value, stat)) = &v.running else {
            continue;
        };
        let marker = |mine| LeftMarker {
            item: *i,
            owner: value.as_str(),
            created: stat.created,
            mine,
        };
        match marker_session(v, me, sid, registered) {
            Some((MarkerSession::Earlier, _)) if !j.running.contains_key(i) => {
                left.push(marker(true));
            }
            Some(_) => {}
            None if mixed => {
                // A shardjob run's marker (the record names its owner), and any other that
                // no live instance holds: an ElasticJob instance's left by its death (its
                // failover, which acts at the instance's deletion, has had the grace; a J
                // that died in a failover run leaves its marker for ever, ElasticJob's issue
                // 2429) or a foreign hand's. ElasticJob's leader waits for every one of them
                // before it re-shards, and while it waits every instance, shardjob's too,
                // holds its fires at the gate (3.4 point 2).
                let run = v.record.as_ref().and_then(|(r, _)| r.run.as_ref());
                let shardjob_run = run.is_some_and(|r| r.instance.as_str() == value.trim());
                if shardjob_run || !planted!(opts, KeepForeignMarkersBesideJava) {
                    left.push(marker(false));
                }
            }
            None => {}
        }
    }
    if !(left.is_empty() && j.markers_left.is_empty()) {
        let others: Vec<u32> = left.iter().filter(|m| !m.mine).map(|m| m.item).collect();
        let share = if others.is_empty() {
            BTreeSet::new()
        } else {
            failover::share(&others, &shardjob_candidates(view), j.paths.job_name(), me)
        };
        let grace = if mixed { grace_ms } else { 0 };
        let plan = markers_left(
            &left,
            |owner| owner.trim() != me.as_str() && view.is_live(owner),
            &share,
            &j.markers_left,
            grace,
            ms(opts.failover_takeover_delay),
            now,
        );
        j.markers_left = plan.seen;
        wake.extend(plan.wake);
        let mut keep = planted!(opts, KeepOwnMarkersLeft);
        keep |= planted!(opts, PersistentRunningMarkers);
        let mut clear = if keep { Vec::new() } else { plan.clear };
        if !fresh && !planted!(opts, ClearMarkersOnStaleView) {
            let before = clear.len();
            let mine: BTreeSet<u32> = left.iter().filter(|m| m.mine).map(|m| m.item).collect();
            clear.retain(|i| mine.contains(i));
            *wants_fresh |= clear.len() < before;
        }
        if !clear.is_empty() {
            let p = &j.paths;
            let mut ops = vec![TxnOp::Check(Check::Session(sid))];
            let mut cleared = Vec::new();
            for i in clear.into_iter().take(limit) {
                let Some((value, stat)) = view.items.get(&i).and_then(|v| v.running.as_ref())
                else {
                    continue;
                };
                let path = p.item_running(i);
                // Its value and version: a marker created since (at version 0 again) or
                // another instance's is not this one.
                ops.push(TxnOp::Check(Check::Value(
                    path.clone(),
                    value.as_bytes().to_vec(),
                )));
                ops.push(TxnOp::Delete {
                    path,
                    expected: Some(stat.version),
                });
                cleared.push((i, value.clone()));
            }
            return Some(Action::Txn(Purpose::LeftMarkers { cleared }, ops));
        }
    }

    // While ElasticJob leads: the garbage instance nodes that make its sharding throw, then
    // a plan that names owners gone (the flag, for its next fire).
    if let Some(action) = java_garbage(j, view, cx) {
        return Some(action);
    }
    if let Some(action) = nudge(j, view, cx, grace_ms, wake) {
        return Some(action);
    }

    // Orphans of a mixed job: ElasticJob's failover has them; their records are settled.
    let failover_on = config.failover && config.monitor_execution;
    if !(mixed && failover_on) || planted!(opts, FailoverBesideJava) {
        return None;
    }
    let plan = settle_orphans(
        view,
        config.sharding_total_count,
        |i| j.running.contains_key(&i),
        j.paths.job_name(),
        me,
        &j.orphan_seen,
        ms(opts.failover_takeover_delay),
        now.mono,
    );
    j.orphan_seen = plan.seen;
    wake.extend(plan.wake);
    if plan.take.is_empty() {
        return None;
    }
    let mut ops = vec![TxnOp::Check(Check::Session(sid))];
    let mut items = Vec::new();
    for i in plan.take.into_iter().take(limit) {
        let Some((record, version)) = view.items.get(&i).and_then(|v| v.record.as_ref()) else {
            continue;
        };
        // The record's version tells a claim made since (every claim rewrites it).
        ops.push(TxnOp::Set {
            path: j.paths.item_execution(i),
            data: settled(record).to_bytes(),
            expected: Some(*version),
        });
        items.push(i);
    }
    if items.is_empty() {
        return None;
    }
    Some(Action::Txn(Purpose::Settle { items }, ops))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::test_support::now;
    use crate::registry::{SessionId, Stat, Version};

    const SID: SessionId = SessionId(7);

    fn id(s: &str) -> InstanceId {
        InstanceId::new(s).unwrap()
    }

    fn stat(created: u64, owner: Option<SessionId>) -> Stat {
        Stat {
            version: Version(0),
            created: Revision(created),
            modified: Revision(created),
            ephemeral_owner: owner,
            mtime_ms: None,
        }
    }

    fn run(fire: i64, kind: RunKind, instance: &InstanceId) -> Option<RunRecord> {
        Some(RunRecord {
            fire,
            kind,
            instance: instance.clone(),
        })
    }

    /// The items an ElasticJob leader's plan leaves on owners gone: only while a J leads, no
    /// flag is up and no instance node no session holds is there.
    #[test]
    fn the_items_an_elasticjob_leader_leaves_on_owners_gone() {
        let (me, java, dead) = (id("10.0.0.1@-@1"), id("10.0.0.2@-@2"), id("10.0.0.3@-@3"));
        let owned = |o: Option<&InstanceId>| ItemView {
            exists: true,
            owner: o.cloned(),
            ..ItemView::default()
        };
        let mut view = JobView::default();
        view.instances.insert(me.clone());
        view.instances.insert(java.clone());
        view.java.insert(java.clone());
        view.leader = Some(java.to_string());
        view.items.insert(0, Box::new(owned(Some(&me))));
        view.items.insert(1, Box::new(owned(Some(&dead))));
        view.items.insert(2, Box::new(owned(None)));
        view.items.insert(3, Box::new(owned(Some(&java))));
        let gone = vec![(1, dead.to_string()), (2, String::new())];
        assert_eq!(gone_owners(&view), gone, "a J leads");
        type Edit<'a> = &'a dyn Fn(&mut JobView);
        let with = |f: Edit<'_>| {
            let mut v = view.clone();
            f(&mut v);
            gone_owners(&v)
        };
        #[rustfmt::skip]
        let cases: [(&str, Edit<'_>); 4] = [
            ("shardjob leads", &|v| v.leader = Some(me.to_string())),
            ("no one leads", &|v| v.leader = None),
            ("the flag is up", &|v| v.necessary = Some(Version(0))),
            ("an instance node no session holds", &|v| {
                v.unbound.insert(id("10.9.9.9@-@9"), crate::machine::job_view::Unbound { version: Version(0), value: String::new() });
            }),
        ];
        for (what, f) in cases {
            assert_eq!(with(f), vec![], "{what}");
        }
        // The dead owner registered again: only the item with none is left.
        assert_eq!(
            with(&|v| {
                v.instances.insert(dead.clone());
            }),
            vec![(2, String::new())]
        );
    }

    /// The garbage instance nodes deleted while ElasticJob leads: only the plainly garbage
    /// (an id not `{ip}@-@{pid}`, or a value not the id's instance YAML), only while a J leads.
    #[test]
    fn garbage_instance_nodes_beside_an_elasticjob_leader() {
        use crate::machine::job_view::Unbound;
        let (me, java) = (id("10.0.0.1@-@1"), id("10.0.0.2@-@2"));
        let mut view = JobView::default();
        view.instances.insert(me.clone());
        view.instances.insert(java.clone());
        view.java.insert(java.clone());
        view.leader = Some(java.to_string());
        let unbound = |value: &str| Unbound {
            version: Version(3),
            value: value.to_owned(),
        };
        let junk_id = id("10.9.9.9@-@junk");
        let junk_value = id("10.9.9.8@-@98");
        let well_formed = id("10.9.9.7@-@97");
        view.unbound.insert(junk_id.clone(), unbound("garbage"));
        view.unbound
            .insert(junk_value.clone(), unbound("not: yaml of it"));
        view.unbound.insert(
            well_formed.clone(),
            unbound("jobInstanceId: 10.9.9.7@-@97\nserverIp: 10.9.9.7"),
        );
        assert_eq!(
            garbage_beside_java(&view),
            vec![(junk_value, Version(3)), (junk_id, Version(3))],
            "the well-formed one stays (a warning only)"
        );
        view.leader = Some(me.to_string());
        assert_eq!(
            garbage_beside_java(&view),
            vec![],
            "shardjob leads: its leader's"
        );
        view.leader = None;
        assert_eq!(garbage_beside_java(&view), vec![], "no one leads");
    }

    /// Markers are persistent only while an ElasticJob instance is registered and failover
    /// (with execution monitoring) is on: ElasticJob's rule.
    #[test]
    fn markers_are_persistent_while_mixed_with_failover_on() {
        let mut view = JobView::default();
        let config = |failover: bool, monitor: bool| {
            let mut c = JobConfig::new("j", 2);
            c.failover = failover;
            c.monitor_execution = monitor;
            c
        };
        #[rustfmt::skip]
        let cases = [
            ("not mixed, failover on", false, true, true, false),
            ("mixed, failover on", true, true, true, true),
            ("mixed, failover off", true, false, true, false),
            ("mixed, failover on, no monitoring", true, true, false, false),
        ];
        for (what, mixed, failover, monitor, want) in cases {
            view.java = Default::default();
            if mixed {
                view.java.insert(id("10.0.0.2@-@2"));
            }
            assert_eq!(
                persistent_markers(&view, &config(failover, monitor)),
                want,
                "{what}"
            );
            assert_eq!(may_delete_server(&view), !mixed, "{what}: server nodes");
        }
    }

    /// Whose a marker of this instance's id is: bound to this session, or persistent and
    /// created after this session's instance node, it is this session's; persistent and
    /// older, an earlier session's; bound to another session, another instance's value, or
    /// persistent while the registration is unknown, none.
    #[test]
    fn which_session_a_marker_is_of() {
        let me = id("10.0.0.1@-@1");
        let marker = |holder: &str, stat: Stat| ItemView {
            running: Some((holder.to_owned(), stat)),
            ..ItemView::default()
        };
        use MarkerSession::{Earlier, This};
        #[rustfmt::skip]
        let cases = [
            ("bound to this session", marker(me.as_str(), stat(3, Some(SID))), Some(Revision(5)), Some(This)),
            ("bound to another session", marker(me.as_str(), stat(3, Some(SessionId(6)))), Some(Revision(5)), None),
            ("persistent, after the registration", marker(me.as_str(), stat(9, None)), Some(Revision(5)), Some(This)),
            ("persistent, before the registration", marker(me.as_str(), stat(4, None)), Some(Revision(5)), Some(Earlier)),
            ("persistent, blanks around the id", marker(" 10.0.0.1@-@1\n", stat(4, None)), Some(Revision(5)), Some(Earlier)),
            ("persistent, the registration unknown", marker(me.as_str(), stat(4, None)), None, None),
            ("another instance's", marker("10.0.0.2@-@2", stat(4, None)), Some(Revision(5)), None),
            ("no marker", ItemView::default(), Some(Revision(5)), None),
        ];
        for (what, v, registered, want) in cases {
            assert_eq!(
                marker_session(&v, &me, SID, registered).map(|(s, _)| s),
                want,
                "{what}"
            );
        }
    }

    /// At a fire, an item is left alone when disabled, running, or (only while mixed) failed
    /// over by ElasticJob.
    #[test]
    fn items_left_alone_at_a_fire() {
        let plain = ItemView::default();
        let disabled = ItemView {
            disabled: true,
            ..ItemView::default()
        };
        let running = ItemView {
            running: Some(("10.0.0.2@-@2".to_owned(), stat(3, None))),
            ..ItemView::default()
        };
        let failing_over = ItemView {
            failover: Some(stat(3, Some(SessionId(9)))),
            ..ItemView::default()
        };
        #[rustfmt::skip]
        let cases = [
            ("free", &plain, false, false, false),
            ("free, mixed", &plain, true, false, false),
            ("disabled", &disabled, false, false, true),
            ("disabled, run anyway (planted)", &disabled, false, true, false),
            ("running", &running, false, false, true),
            ("failed over, not mixed: shardjob's own failover node", &failing_over, false, false, false),
            ("failed over by ElasticJob, mixed", &failing_over, true, false, true),
        ];
        for (what, v, mixed, run_disabled, want) in cases {
            assert_eq!(held_at_fire(v, mixed, run_disabled), want, "{what}");
        }
    }

    /// A settled orphan's fire counts as done (never earlier than the last one), a trigger's
    /// time does not; nothing is left in progress.
    #[test]
    fn an_orphan_settles_as_done() {
        let dead = id("10.0.0.3@-@3");
        #[rustfmt::skip]
        let cases = [
            ("a scheduled fire", Some(5), run(10, RunKind::Scheduled, &dead), Some(10)),
            ("a misfire, no fire done before", None, run(10, RunKind::Misfire, &dead), Some(10)),
            ("a failover of an older fire", Some(20), run(10, RunKind::Failover, &dead), Some(20)),
            ("a trigger", Some(5), run(10, RunKind::Trigger, &dead), Some(5)),
            ("nothing in progress", Some(5), None, Some(5)),
        ];
        for (what, done, run, want) in cases {
            let got = settled(&ItemRecord { done, run });
            assert_eq!(
                got,
                ItemRecord {
                    done: want,
                    run: None
                },
                "{what}"
            );
        }
    }

    /// Markers left behind: this instance's own are removed once first seen `grace` ago (at
    /// once with no grace); another instance's once its owner has been gone that long, at
    /// once if it is this instance's share, after the takeover delay more if not, never while
    /// its owner lives. The first sight stays while the marker does; a new marker of the
    /// item is seen afresh.
    #[test]
    fn markers_left_behind_wait_for_the_grace() {
        const DEAD: &str = "10.0.0.3@-@3";
        const LIVE: &str = "10.0.0.4@-@4";
        let mine = |item, created| LeftMarker {
            item,
            owner: "10.0.0.1@-@1",
            created: Revision(created),
            mine: true,
        };
        let of = |owner, item, created| LeftMarker {
            item,
            owner,
            created: Revision(created),
            mine: false,
        };
        let seen = |created: u64, at: u64| SeenMarker {
            created: Revision(created),
            seen_wall: crate::machine::test_support::WALL + at as i64,
            stale_since: Some(Mono(at)),
        };
        let live = |owner: &str| owner == LIVE;
        let share = BTreeSet::from([5]);
        #[rustfmt::skip]
        #[allow(clippy::type_complexity)]
        let cases: Vec<(&str, Vec<LeftMarker<'_>>, BTreeMap<u32, SeenMarker>, u64, u64, Vec<u32>, Option<u64>)> = vec![
            ("mine, no grace: at once", vec![mine(1, 4)], BTreeMap::new(), 0, 1_000, vec![1], None),
            ("mine, first seen now: wait", vec![mine(1, 4)], BTreeMap::new(), 3_000, 1_000, vec![], Some(4_000)),
            ("mine, within the grace", vec![mine(1, 4)], BTreeMap::from([(1, seen(4, 1_000))]), 3_000, 3_999, vec![], Some(4_000)),
            ("mine, past the grace; another later", vec![mine(1, 4), mine(2, 6)], BTreeMap::from([(1, seen(4, 1_000)), (2, seen(6, 2_000))]), 3_000, 4_000, vec![1], Some(5_000)),
            ("mine, a new marker of the item", vec![mine(1, 8)], BTreeMap::from([(1, seen(4, 1_000))]), 3_000, 4_000, vec![], Some(7_000)),
            ("a dead owner's, my share, past the grace", vec![of(DEAD, 5, 4)], BTreeMap::from([(5, seen(4, 1_000))]), 3_000, 4_000, vec![5], None),
            ("a dead owner's, not my share: the takeover delay more", vec![of(DEAD, 6, 4)], BTreeMap::from([(6, seen(4, 1_000))]), 3_000, 4_000, vec![], Some(6_000)),
            ("a dead owner's, not my share, past the takeover", vec![of(DEAD, 6, 4)], BTreeMap::from([(6, seen(4, 1_000))]), 3_000, 6_000, vec![6], None),
            ("a live owner's: never", vec![of(LIVE, 5, 4)], BTreeMap::from([(5, seen(4, 1_000))]), 3_000, 60_000, vec![], None),
        ];
        for (what, markers, before, grace, at, clear, wake) in cases {
            let got = markers_left(&markers, live, &share, &before, grace, 2_000, now(at));
            assert_eq!(got.clear, clear, "{what}");
            assert_eq!(got.wake, wake.map(Mono), "{what}: wake");
            assert_eq!(
                got.seen.keys().copied().collect::<Vec<_>>(),
                markers.iter().map(|m| m.item).collect::<Vec<_>>(),
                "{what}: remembered"
            );
        }
    }

    /// The orphans of a mixed job are split among its shardjob instances only: with one
    /// shardjob instance and an ElasticJob one, the shardjob instance settles them all at
    /// once; an orphan failed over by ElasticJob (a `failover` node) or running is none.
    #[test]
    fn orphans_are_split_among_shardjob_instances() {
        let (me, java, dead) = (id("10.0.0.1@-@1"), id("10.0.0.2@-@2"), id("10.0.0.3@-@3"));
        let orphan = || ItemView {
            exists: true,
            owner: Some(dead.clone()),
            record: Some((
                ItemRecord {
                    done: Some(5),
                    run: run(10, RunKind::Scheduled, &dead),
                },
                Version(2),
            )),
            ..ItemView::default()
        };
        let mut view = JobView::default();
        view.instances.insert(me.clone());
        view.instances.insert(java.clone());
        view.java.insert(java.clone());
        for i in 0..4 {
            view.items.insert(i, Box::new(orphan()));
        }
        view.items.entry(2).or_default().failover = Some(stat(3, Some(SessionId(9))));
        view.items.entry(3).or_default().running = Some((java.to_string(), stat(4, None)));
        let plan = settle_orphans(
            &view,
            4,
            |_| false,
            "j",
            &me,
            &BTreeMap::new(),
            2_000,
            Mono(0),
        );
        assert_eq!(plan.take, [0, 1], "every orphan is this instance's share");
        assert_eq!(plan.wake, None);
        // Another shardjob instance: each settles its share at once, the other's later.
        let other = id("10.0.0.4@-@4");
        view.instances.insert(other.clone());
        let mine = settle_orphans(
            &view,
            4,
            |_| false,
            "j",
            &me,
            &BTreeMap::new(),
            2_000,
            Mono(0),
        );
        let theirs = settle_orphans(
            &view,
            4,
            |_| false,
            "j",
            &other,
            &BTreeMap::new(),
            2_000,
            Mono(0),
        );
        assert_eq!(
            mine.take.len() + theirs.take.len(),
            2,
            "{mine:?} {theirs:?}"
        );
        assert_eq!(mine.wake, Some(Mono(2_000)));
        let later = settle_orphans(
            &view,
            4,
            |_| false,
            "j",
            &me,
            &mine.seen,
            2_000,
            Mono(2_000),
        );
        assert_eq!(
            later.take,
            [0, 1],
            "the other's share after the takeover delay"
        );
        // A run of the item here is no orphan.
        let here = settle_orphans(&view, 4, |i| i == 0, "j", &me, &BTreeMap::new(), 0, Mono(0));
        assert_eq!(here.take, [1]);
    }
}
