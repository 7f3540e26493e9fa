//! Watch events: applied to the jobs' caches, then the jobs they bear on decided on.

#[allow(clippy::wildcard_imports)]
use super::*;

/// A job changed by a batch of node events.
pub(crate) struct Touched {
    pub(crate) job: JobId,
    /// Changed by anything but the run markers and records of its items.
    pub(crate) others: bool,
    /// The items whose run marker or record changed.
    pub(crate) items: NotedItems,
}

/// A set of item numbers noted in a batch of events, without an allocation for items below
/// 64 (a batch is mostly one transaction's events: a few items of one job).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct NotedItems {
    /// Items 0-63, one bit each.
    low: u64,
    /// Items from 64 on, each once per run of events about it.
    high: Vec<u32>,
}

impl NotedItems {
    /// Notes item `i`.
    pub(crate) fn note(&mut self, i: u32) {
        if i < 64 {
            self.low |= 1 << i;
        } else if self.high.last() != Some(&i) {
            self.high.push(i);
        }
    }

    /// The items noted (those below 64 in order, each once).
    pub(crate) fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        let mut low = self.low;
        std::iter::from_fn(move || {
            (low != 0).then(|| {
                let i = low.trailing_zeros();
                low &= low - 1;
                i
            })
        })
        .chain(self.high.iter().copied())
    }
}

impl Machine {
    pub(crate) fn apply_registry_events(
        &mut self,
        events: impl IntoIterator<Item = RegistryEvent>,
        now: Now,
    ) {
        let mut touched: Vec<Touched> = Vec::new();
        for event in events {
            match event {
                RegistryEvent::Session(s) => {
                    self.evaluate_touched(std::mem::take(&mut touched), now);
                    self.handle_session(s, now);
                }
                RegistryEvent::Node(ev) => self.apply_node_event(ev, &mut touched, now),
            }
        }
        self.evaluate_touched(touched, now);
    }

    /// Evaluates the jobs a batch of node events changed, but not one whose only changes are
    /// other instances' run markers and records of items that bear on nothing this instance
    /// decides (see [`Machine::bears_on_me`]). With every instance watching every job, each
    /// run of an item is seen by all of them; only a few have anything to decide about it.
    pub(crate) fn evaluate_touched(&mut self, mut touched: Vec<Touched>, now: Now) {
        // In the order the jobs were added, as everywhere else.
        touched.sort_unstable_by_key(|t| t.job);
        for t in touched {
            if t.others || t.items.iter().any(|i| self.bears_on_me(t.job, i)) {
                self.evaluate(t.job, now);
                if planted!(self.opts, ForgetWakes) {
                    if let Some(j) = self.jobs.get_mut(&t.job) {
                        j.wake = None;
                    }
                    self.index_wake(t.job);
                }
            }
        }
    }

    /// Whether item `i` of job `name`, whose run marker or record changed, bears on what this
    /// instance decides. It does not when the job is active here and led by another instance,
    /// nothing of ours waits on the registry or on an orphan, and the item is neither ours
    /// (owned, run or recorded as run here) nor an orphan, nor, for the leader, beyond the count:
    /// a decision on it would be the one taken before, and the wake it set still stands.
    pub(crate) fn bears_on_me(&self, job: JobId, i: u32) -> bool {
        let Some(j) = self.jobs.get(&job) else {
            return false;
        };
        let me = &self.opts.instance_id;
        let view = j.cache.view();
        if j.phase != Phase::Active
            || j.leaving.is_some()
            || matches!(j.wait, Wait::Sync { revision, .. } if j.cache.seen.is_some_and(|s| s >= revision))
            || !j.orphan_seen.is_empty()
            || j.running.contains_key(&i)
            || self.shutdown.is_some()
            || !view.corrupt.is_empty()
            || view.leader.as_deref().is_none_or(|l| {
                l == me.as_str()
                    && j.leader.as_ref().and_then(|lead| lead.idle) != Some(j.cache.plan_version)
            })
        {
            return true;
        }
        // The leader clears a marker no session holds once its owner is gone.
        if view.persistent_running.contains(&i) && view.leader.as_deref() == Some(me.as_str()) {
            return true;
        }
        // The leader removes an item beyond the count once its run ends.
        let beyond = j
            .config
            .as_ref()
            .is_some_and(|c| i >= c.sharding_total_count);
        if beyond && view.leader.as_deref() == Some(me.as_str()) {
            return true;
        }
        let Some(v) = view.items.get(&i) else {
            return false;
        };
        let run = v.record.as_ref().and_then(|(r, _)| r.run.as_ref());
        v.owner.as_ref() == Some(me)
            || v.running
                .as_ref()
                .is_some_and(|(h, _)| h.trim() == me.as_str())
            || run.is_some_and(|r| r.instance == *me)
            || (run.is_some() && v.running.is_none() && v.failover.is_none())
    }

    /// Applies a node event to its job's cache and notes the job in `touched` if it should be
    /// evaluated.
    pub(crate) fn apply_node_event(
        &mut self,
        ev: crate::registry::WatchEvent,
        touched: &mut Vec<Touched>,
        now: Now,
    ) {
        let Some((name, node)) = JobNode::parse(&ev.path) else {
            return;
        };
        let Some((job, j)) = self.jobs.named_mut(name) else {
            return;
        };
        if let (JobNode::Instance(id), Some(stat)) = (&node, &ev.stat) {
            if *id == self.opts.instance_id {
                j.note_own_node(stat);
            }
        }
        if j.phase == Phase::Waiting {
            // Buffered while the subtree is read; without a load, the next one reads it all.
            if j.loading() {
                j.buffer.push(ev);
            }
            return;
        }
        // Older than the snapshot the cache was loaded from: nothing changes.
        if j.cache.is_stale(&ev) {
            return;
        }
        if planted!(self.opts, StaleCache)
            && ev.kind == crate::registry::WatchEventKind::Deleted
            && matches!(node, JobNode::ItemState(_, ItemLeaf::Disabled))
        {
            return;
        }
        if cache::bears_on_disabled(&node) {
            self.disables += 1;
        }
        let config = matches!(node, JobNode::Config | JobNode::Root);
        let run_item = match node {
            JobNode::ItemState(i, ItemLeaf::Running | ItemLeaf::Execution) => Some(i),
            _ => None,
        };
        let k = match touched.iter().position(|t| t.job == job) {
            Some(k) => k,
            None => {
                touched.push(Touched {
                    job,
                    others: false,
                    items: NotedItems::default(),
                });
                touched.len() - 1
            }
        };
        let t = &mut touched[k];
        // An item may be noted more than once (a search of the list per event would cost a
        // batch of k events k²); only whether any of them bears on this instance is asked.
        match run_item {
            Some(i) => t.items.note(i),
            None => t.others = true,
        }
        if let JobNode::ItemState(i, ItemLeaf::Running) = node {
            note_marker(&mut j.markers_seen, i, ev.stat.as_ref(), now.wall_ms());
            if ev.stat.is_some() && !planted!(self.opts, RerunJavaFires) {
                // When the J wrote its marker, by the registry's stamp where it keeps one
                // (ZooKeeper's `mtime`): the J started the run at its fire by its own clock,
                // which the registry's stands for better than this instance's, skewed or
                // behind a slow watch.
                let mut written = ev.stat.as_ref().and_then(|s| s.mtime_ms);
                if planted!(self.opts, ObserveJavaByOwnClock) {
                    written = None;
                }
                let at = written.unwrap_or_else(|| now.wall_ms());
                note_java_run(&mut j.java_ran, j.cache.view(), i, &ev.data, at);
                note_java_touch(
                    &mut j.java_touched,
                    j.cache.view(),
                    i,
                    &ev.data,
                    now.wall_ms(),
                );
            }
        }
        j.cache.apply_parsed(ev, Some(node), &self.opts.instance_id);
        self.changes += 1;
        j.changed = self.changes;
        if config {
            self.refresh_config(job);
        }
    }
}

/// Notes a run of ElasticJob seen starting on item `i` at `now_wall` (epoch ms: the registry's
/// stamp of the marker's write where it keeps one, this instance's clock otherwise): a `running`
/// marker created or written (`data`: its value) holding the id of an ElasticJob instance of
/// `view` that owns the item: the item's fires up to then count as run (and the next one, if it
/// is due within what a clock ahead explains: see `claim::fires::plan_item`). Not a failover's
/// run (the item has a `failover` node): it replays the fire of a dead run, not the latest
/// (`docs/migration-design.md` 3.6).
pub(crate) fn note_java_run(
    java_ran: &mut BTreeMap<u32, i64>,
    view: &JobView,
    i: u32,
    data: &[u8],
    now_wall: i64,
) {
    if java_marker(view, i, data) == Some(true) {
        bump(java_ran, i, now_wall);
    }
}

/// Notes any run of ElasticJob seen starting on item `i` at `now_wall` (epoch ms), its owner's
/// or not, but a failover's: a `running` marker created or written holding the id of an
/// ElasticJob instance of `view`. An ElasticJob instance that starts a fire from a cache
/// behind the plan runs items it no longer owns; a fire held behind the re-sharding flag is
/// not run here on an item such a run touched since the hold began (`claim::fires`).
pub(crate) fn note_java_touch(
    touched: &mut BTreeMap<u32, i64>,
    view: &JobView,
    i: u32,
    data: &[u8],
    now_wall: i64,
) {
    if java_marker(view, i, data).is_some() {
        bump(touched, i, now_wall);
    }
}

/// What item `i`'s `running` marker holding `data` says of ElasticJob: `None` unless it holds
/// the id of an ElasticJob instance of `view` and the item has no `failover` node (a
/// failover's run replays the fire of a dead run, not the latest); `Some(owner)`: whether that
/// instance owns the item (an ElasticJob instance also replays fires of items it no longer
/// owns, its misfire loop over a stale context, which says nothing of the item's fires).
fn java_marker(view: &JobView, i: u32, data: &[u8]) -> Option<bool> {
    // On every run marker's event: nothing to parse unless the job is mixed.
    if view.java.is_empty() {
        return None;
    }
    let item = view.items.get(&i);
    if item.is_some_and(|v| v.failover.is_some()) {
        return None;
    }
    let id = std::str::from_utf8(data)
        .ok()
        .and_then(|v| InstanceId::new(v.trim()).ok())
        .filter(|id| view.java.contains(id))?;
    Some(item.and_then(|v| v.owner.as_ref()) == Some(&id))
}

/// Keeps the latest of `now_wall` and what `seen` holds for item `i`.
fn bump(seen: &mut BTreeMap<u32, i64>, i: u32, now_wall: i64) {
    let at = seen.entry(i).or_insert(now_wall);
    *at = (*at).max(now_wall);
}

/// Notes the first sight (epoch ms `now_wall`) of item `i`'s `running` marker if no session
/// holds it (`stat`: its metadata; `None` for a deletion, which forgets it).
pub(crate) fn note_marker(
    seen: &mut BTreeMap<u32, (Revision, i64)>,
    i: u32,
    stat: Option<&crate::registry::Stat>,
    now_wall: i64,
) {
    match stat {
        Some(s) if !job_view::session_bound(s) => {
            if seen
                .get(&i)
                .is_none_or(|(created, _)| *created != s.created)
            {
                seen.insert(i, (s.created, now_wall));
            }
        }
        _ => {
            seen.remove(&i);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn noted_items_are_each_told_once_low_and_high() {
        let mut items = NotedItems::default();
        for i in [5, 0, 5, 63, 64, 64, 200, 64] {
            items.note(i);
        }
        // The low ones in order, once; the high ones once per run of the same item.
        assert_eq!(
            items.iter().collect::<Vec<_>>(),
            vec![0, 5, 63, 64, 200, 64]
        );
        assert_eq!(NotedItems::default().iter().count(), 0);
    }
    use crate::registry::{Node, Stat};

    /// A node as the registry shows it: run markers held by a live session, the rest
    /// persistent.
    fn node(path: &str, data: Vec<u8>) -> Node {
        let held = path.ends_with("/running");
        crate::machine::test_support::node(
            path,
            data,
            held.then_some(crate::registry::SessionId(8)),
        )
    }

    fn record(instance: &str) -> Vec<u8> {
        ItemRecord {
            done: Some(5),
            run: Some(RunRecord {
                fire: 10,
                kind: RunKind::Scheduled,
                instance: InstanceId::new(instance).unwrap(),
            }),
        }
        .to_bytes()
    }

    /// Whether a change to an item's run marker or record bears on this instance's decisions,
    /// on an active job of four items, with the registry holding `leader` (if any) and these
    /// items (owner, `running` holder, recorded run's instance, failover node); `idle` says this
    /// instance leads and found the plan to need nothing since it last changed.
    #[test]
    fn which_run_changes_bear_on_this_instance() {
        const ME: &str = "10.0.0.1@-@1";
        const OTHER: &str = "10.0.0.2@-@2";
        type Item = (
            u32,
            &'static str,
            Option<&'static str>,
            Option<&'static str>,
            bool,
        );
        let items: [Item; 7] = [
            (0, ME, None, None, false),
            (1, OTHER, None, None, false),
            (2, OTHER, Some(OTHER), Some(OTHER), false),
            (3, OTHER, Some(ME), None, false),
            (4, OTHER, None, Some(ME), false),
            (5, OTHER, None, Some(OTHER), false),
            (6, OTHER, None, Some(OTHER), true),
        ];
        let me = InstanceId::new(ME).unwrap();
        let mut m = Machine::new(MachineOptions::new(me.clone()));
        let spec = JobSpec {
            config: JobConfig::new("j", 7),
            job_type: "SCRIPT".to_owned(),
        };
        let now = Now {
            mono: Mono(0),
            wall: DateTime::<Utc>::from_timestamp_millis(1_800_000_000_000).unwrap_or_default(),
        };
        m.add_job(spec, now).unwrap();
        let id = m.jobs.id("j").unwrap();
        let load = |m: &mut Machine, leader: Option<&str>, idle: bool, total: u32| {
            let mut nodes = vec![node("/j", Vec::new())];
            if let Some(l) = leader {
                nodes.push(node("/j/leader/election/instance", l.into()));
            }
            for (i, owner, running, run, failover) in items {
                let item = format!("/j/sharding/{i}");
                nodes.push(node(&format!("{item}/instance"), owner.into()));
                if let Some(h) = running {
                    nodes.push(node(&format!("{item}/running"), h.into()));
                }
                if let Some(r) = run {
                    nodes.push(node(&format!("{item}/execution"), record(r)));
                }
                if failover {
                    nodes.push(node(&format!("{item}/failover"), OTHER.into()));
                }
            }
            let Some(j) = m.jobs.get_mut(&id) else {
                return;
            };
            j.cache.load(nodes, Some(Revision(1)), &me);
            j.phase = Phase::Active;
            j.config = Some(Arc::new(JobConfig::new("j", total)));
            j.leader = (leader == Some(ME)).then(|| {
                Box::new(LeaderState {
                    idle: idle.then_some(j.cache.plan_version),
                    ..LeaderState::default()
                })
            });
        };
        let bearing =
            |m: &Machine| -> Vec<u32> { (0..7).filter(|i| m.bears_on_me(id, *i)).collect() };
        #[rustfmt::skip]
        #[allow(clippy::type_complexity)]
        let cases: [(&str, Option<&str>, bool, u32, Vec<u32>); 5] = [
            ("led by another: mine, run or recorded by me, and the orphan", Some(OTHER), false, 7, vec![0, 3, 4, 5]),
            ("no leader: an election is due", None, false, 7, (0..7).collect()),
            ("led here, the plan to work out", Some(ME), false, 7, (0..7).collect()),
            ("led here, the plan needing nothing", Some(ME), true, 7, vec![0, 3, 4, 5]),
            ("led here, items beyond the count to remove", Some(ME), true, 5, vec![0, 3, 4, 5, 6]),
        ];
        for (what, leader, idle, total, want) in cases {
            load(&mut m, leader, idle, total);
            assert_eq!(bearing(&m), want, "{what}");
        }

        // Every event applied counts as a change of its job, whether it is decided on or not
        // (the wake audit looks again only at the jobs that changed).
        load(&mut m, Some(OTHER), false, 7);
        m.changes = 5;
        for (k, rev) in [(6, 2), (7, 3)] {
            let ev = crate::registry::WatchEvent {
                kind: crate::registry::WatchEventKind::Changed,
                path: NodePath::new("/j/sharding/2/execution").unwrap(),
                data: record(OTHER),
                stat: Some(Stat {
                    version: Version(rev),
                    created: Revision(1),
                    modified: Revision(rev as u64),
                    ephemeral_owner: None,
                    mtime_ms: None,
                }),
                revision: Some(Revision(rev as u64)),
            };
            let mut touched = Vec::new();
            m.apply_node_event(ev, &mut touched, now);
            assert_eq!(m.changes, k);
            assert_eq!(m.jobs.get(&id).unwrap().changed, k);
            assert!(touched.iter().all(|t| !t.others && t.items.iter().eq([2])));
        }
    }

    /// A `running` marker holding the id of the ElasticJob instance that owns the item is a
    /// run of ElasticJob: the item's fires up to its arrival (and the tolerance) count as run;
    /// a shardjob instance's, an unknown id's, another instance's (item 4 is not its), one on
    /// an item without owner (5), or a failover's replay (3 has a `failover` node) do not, and
    /// a later sighting never moves the mark back.
    #[test]
    fn runs_of_elasticjob_are_noted_from_their_markers() {
        let java = InstanceId::new("10.0.0.2@-@2").unwrap();
        let mut view = JobView::default();
        view.java.insert(java.clone());
        view.instances.insert(java);
        view.instances
            .insert(InstanceId::new("10.0.0.1@-@1").unwrap());
        let failing_over = crate::machine::job_view::ItemView {
            failover: Some(Stat {
                version: Version(0),
                created: Revision(1),
                modified: Revision(1),
                ephemeral_owner: None,
                mtime_ms: None,
            }),
            ..Default::default()
        };
        view.items.insert(3, Box::new(failing_over));
        for i in 0..=3 {
            view.items.entry(i).or_default().owner = InstanceId::new("10.0.0.2@-@2").ok();
        }
        view.items.entry(4).or_default().owner = InstanceId::new("10.0.0.1@-@1").ok();
        let mut ran = BTreeMap::new();
        note_java_run(&mut ran, &view, 0, b"10.0.0.2@-@2", 10_000);
        note_java_run(&mut ran, &view, 1, b"10.0.0.1@-@1", 10_000);
        note_java_run(&mut ran, &view, 2, b"garbage", 10_000);
        note_java_run(&mut ran, &view, 3, b"10.0.0.2@-@2", 10_000);
        note_java_run(&mut ran, &view, 4, b"10.0.0.2@-@2", 10_000);
        note_java_run(&mut ran, &view, 5, b"10.0.0.2@-@2", 10_000);
        assert_eq!(
            ran,
            BTreeMap::from([(0, 10_000)]),
            "only the owner's own run"
        );
        note_java_run(&mut ran, &view, 0, b" 10.0.0.2@-@2\n", 20_000);
        assert_eq!(ran.get(&0), Some(&20_000), "a later run");
        note_java_run(&mut ran, &view, 0, b"10.0.0.2@-@2", 15_000);
        assert_eq!(ran.get(&0), Some(&20_000), "never back");
    }

    /// A marker no session holds is noted at its first sight, kept through changes of its
    /// data, renewed with a new creation, and forgotten when deleted or bound to a session.
    #[test]
    fn markers_are_noted_at_first_sight() {
        let stat = |created: u64, owner: Option<u64>| Stat {
            version: Version(0),
            created: Revision(created),
            modified: Revision(created),
            ephemeral_owner: owner.map(crate::registry::SessionId),
            mtime_ms: None,
        };
        let mut seen = BTreeMap::new();
        note_marker(&mut seen, 2, Some(&stat(5, None)), 1_000);
        note_marker(&mut seen, 2, Some(&stat(5, None)), 2_000);
        assert_eq!(seen.get(&2), Some(&(Revision(5), 1_000)), "kept");
        note_marker(&mut seen, 2, Some(&stat(9, None)), 3_000);
        assert_eq!(seen.get(&2), Some(&(Revision(9), 3_000)), "a new marker");
        note_marker(&mut seen, 2, Some(&stat(10, Some(7))), 4_000);
        assert!(seen.is_empty(), "a session's marker is not noted");
        note_marker(&mut seen, 3, Some(&stat(11, None)), 5_000);
        note_marker(&mut seen, 3, None, 6_000);
        assert!(seen.is_empty(), "deleted");
    }
}
