//! A live copy of a namespace: every job's nodes, kept current by one recursive watch, from
//! which the statistics are worked out without a registry read.
//!
//! A console that shows many jobs to many viewers reads the registry once, at start-up (and
//! again after a session event, when events may have been missed), then only applies the
//! watch's events: a list of every job costs no request at all, where ElasticJob's console
//! reads every node of every job on each view (#2189, #2196).
//!
//! The copy is pure data; its owner does the IO:
//!
//! 1. start the watch of the namespace's root;
//! 2. [`NamespaceView::start_reload`], then read every job's tree
//!    ([`Registry::read_tree`](shardjob_core::registry::Registry::read_tree)) while handing
//!    the watch's events to [`NamespaceView::apply`] (they are kept aside meanwhile);
//! 3. [`NamespaceView::finish_reload`] with the trees: the events kept aside are applied on
//!    top, except those the snapshot already holds (by revision, where the backend tells it);
//! 4. from then on, [`NamespaceView::apply`] each event; after a session event that may have
//!    lost events (a new session, a reconnection, an expiry), go back to step 2.
//!
//! The reads ([`NamespaceView::jobs`], [`NamespaceView::status`], ...) give what
//! [`Ops`](crate::Ops)' reads of the same nodes give, by the same rules.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};
use serde::Serialize;
use shardjob_core::JobConfig;
use shardjob_core::registry::{Node, NodePath, Revision, Tree, WatchEvent, WatchEventKind};

use crate::stats::{self, JobBrief, JobStatus, ServerBrief};
use crate::tree::JobTree;

/// One job's copy: its nodes, and what is worked out of them, dropped at each change.
#[derive(Debug, Default)]
struct JobCopy {
    nodes: BTreeMap<NodePath, Node>,
    /// The nodes sorted by meaning, worked out on first use after a change.
    tree: Option<JobTree>,
    /// The job's line of the list (`None` inside: no `config` node), likewise.
    brief: Option<Option<JobBrief>>,
    /// The configuration as read (`None` inside: none, or it does not read), likewise.
    config: Option<Option<JobConfig>>,
}

impl JobCopy {
    fn from_nodes(nodes: Vec<Node>) -> JobCopy {
        JobCopy {
            nodes: nodes.into_iter().map(|n| (n.path.clone(), n)).collect(),
            tree: None,
            brief: None,
            config: None,
        }
    }

    fn changed(&mut self) {
        self.tree = None;
        self.brief = None;
        self.config = None;
    }

    fn config(&mut self, job: &str) -> Option<&JobConfig> {
        if self.config.is_none() {
            let config = self
                .tree(job)
                .config
                .as_ref()
                .and_then(|(yaml, _)| stats::read_config(yaml).ok());
            self.config = Some(config);
        }
        self.config.as_ref().and_then(Option::as_ref)
    }

    fn line(&mut self, job: &str, now: DateTime<Utc>) -> Option<JobLine> {
        let brief = self.brief(job)?;
        let next_fire_ms = self.config(job).and_then(|c| {
            c.cron
                .as_ref()
                .and_then(|cron| cron.next_after(now, &c.time_zone))
                .map(|t| t.timestamp_millis())
        });
        let tree = self.tree(job);
        let (last_done_ms, never_done) = stats::job_last_done(tree);
        let mut running = 0;
        let mut disabled_items = 0;
        for nodes in tree.items.values() {
            if nodes.running.is_some() {
                running += 1;
            }
            if nodes.disabled.is_some() {
                disabled_items += 1;
            }
        }
        Some(JobLine {
            brief,
            next_fire_ms,
            last_done_ms,
            never_done,
            running_items: running,
            disabled_items,
        })
    }

    fn tree(&mut self, job: &str) -> &JobTree {
        if self.tree.is_none() {
            let nodes: Vec<Node> = self.nodes.values().cloned().collect();
            self.tree = Some(JobTree::from_nodes(job, &nodes));
        }
        self.tree.get_or_insert_with(JobTree::default)
    }

    fn brief(&mut self, job: &str) -> Option<JobBrief> {
        if self.brief.is_none() {
            let brief = stats::brief(job, self.tree(job));
            self.brief = Some(brief);
        }
        self.brief.clone().flatten()
    }
}

/// A job's line of a list that shows more than ElasticJob's brief: the next fire, the last
/// fire done, the items running now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct JobLine {
    /// ElasticJob's brief: name, status, cron, total, instances.
    #[serde(flatten)]
    pub brief: JobBrief,
    /// The schedule's next fire after the `now` given (epoch ms, UTC).
    pub next_fire_ms: Option<i64>,
    /// The latest scheduled fire whose run finished, over the items (epoch ms, UTC; shardjob's
    /// execution records only; an item's record as created names no fire: see
    /// [`crate::last_done`]).
    pub last_done_ms: Option<i64>,
    /// The job is proven never to have done a fire (every item's record is as created, and no
    /// item was removed): see [`crate::last_done`].
    pub never_done: bool,
    /// Items running now (`running` markers).
    pub running_items: usize,
    /// Items disabled (`sharding/{item}/disabled`).
    pub disabled_items: usize,
}

/// Where a reload stands.
#[derive(Debug, Default)]
enum Loading {
    /// No reload under way: events apply at once.
    #[default]
    Idle,
    /// A reload is under way: events wait for its snapshot.
    Under(Vec<WatchEvent>),
}

/// A live copy of a namespace's jobs (see the module's documentation for how it is fed).
#[derive(Debug, Default)]
pub struct NamespaceView {
    jobs: BTreeMap<String, JobCopy>,
    loading: Loading,
    /// Whether a snapshot has been taken at least once.
    loaded: bool,
}

/// The top-level name of a path (`/job/…` → `job`), `None` for the root.
fn job_of(path: &NodePath) -> Option<&str> {
    path.segments().next()
}

impl NamespaceView {
    /// An empty copy, not loaded yet.
    pub fn new() -> NamespaceView {
        NamespaceView::default()
    }

    /// Whether a snapshot has been applied ([`NamespaceView::finish_reload`]) at least once.
    pub fn is_loaded(&self) -> bool {
        self.loaded
    }

    /// Whether a reload is under way (events are kept aside).
    pub fn is_reloading(&self) -> bool {
        matches!(self.loading, Loading::Under(_))
    }

    /// A reload begins: events given to [`NamespaceView::apply`] from now on are kept until
    /// [`NamespaceView::finish_reload`]. Events kept for an earlier reload that did not finish
    /// are dropped (the new snapshot will hold what they said).
    pub fn start_reload(&mut self) {
        self.loading = Loading::Under(Vec::new());
    }

    /// The reload's snapshot: every top-level node's tree, by name. It replaces the whole copy;
    /// the events kept since [`NamespaceView::start_reload`] are applied on top (those a
    /// tree's revision shows it holds are skipped). Returns the names of the jobs whose nodes
    /// differ from before (added, removed or changed).
    pub fn finish_reload(&mut self, trees: Vec<(String, Tree)>) -> BTreeSet<String> {
        let kept = match std::mem::take(&mut self.loading) {
            Loading::Under(events) => events,
            Loading::Idle => Vec::new(),
        };
        let mut floors: BTreeMap<String, Option<Revision>> = BTreeMap::new();
        let mut fresh: BTreeMap<String, JobCopy> = BTreeMap::new();
        for (name, tree) in trees {
            floors.insert(name.clone(), tree.revision);
            if !tree.nodes.is_empty() {
                fresh.insert(name, JobCopy::from_nodes(tree.nodes));
            }
        }
        let old = std::mem::replace(&mut self.jobs, fresh);
        self.loaded = true;
        for event in &kept {
            let floor = job_of(&event.path).and_then(|j| floors.get(j).copied().flatten());
            if !event.is_in(floor) {
                self.apply_now(event);
            }
        }
        let mut changed = BTreeSet::new();
        for (name, copy) in &old {
            match self.jobs.get(name) {
                Some(now) if now.nodes == copy.nodes => {}
                _ => {
                    changed.insert(name.clone());
                }
            }
        }
        for name in self.jobs.keys() {
            if !old.contains_key(name) {
                changed.insert(name.clone());
            }
        }
        changed
    }

    /// Applies one event of the watch; returns the job it touched, if it touches one (while a
    /// reload is under way the event is kept and `None` returned: the reload reports it).
    pub fn apply(&mut self, event: &WatchEvent) -> Option<String> {
        if let Loading::Under(kept) = &mut self.loading {
            kept.push(event.clone());
            return None;
        }
        self.apply_now(event)
    }

    fn apply_now(&mut self, event: &WatchEvent) -> Option<String> {
        let job = job_of(&event.path)?.to_owned();
        match event.kind {
            WatchEventKind::Deleted => {
                let copy = self.jobs.get_mut(&job)?;
                copy.nodes.remove(&event.path);
                copy.changed();
                if copy.nodes.is_empty() {
                    self.jobs.remove(&job);
                }
            }
            WatchEventKind::Created | WatchEventKind::Changed => {
                let Some(stat) = event.stat else {
                    // A backend that cannot tell the node's metadata: keep the data.
                    let copy = self.jobs.entry(job.clone()).or_default();
                    if let Some(node) = copy.nodes.get_mut(&event.path) {
                        node.data = event.data.clone();
                        // Whatever else it says, the node's stat is no longer its creation's: a
                        // record must not read as never written since ([`crate::last_done`]).
                        if event.kind == WatchEventKind::Changed {
                            let after_creation = Revision(node.stat.created.0.saturating_add(1));
                            node.stat.modified =
                                event.revision.unwrap_or(after_creation).max(after_creation);
                        }
                    }
                    copy.changed();
                    return Some(job);
                };
                let copy = self.jobs.entry(job.clone()).or_default();
                copy.nodes.insert(
                    event.path.clone(),
                    Node {
                        path: event.path.clone(),
                        data: event.data.clone(),
                        stat,
                    },
                );
                copy.changed();
            }
        }
        Some(job)
    }

    /// The names of the top-level nodes held, in Java's string order (as
    /// [`Ops::job_names`](crate::Ops::job_names)).
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.jobs.keys().cloned().collect();
        names.sort_by(|a, b| stats::java_cmp(a, b));
        names
    }

    /// Every job with a `config` node, sorted by name (as [`Ops::jobs`](crate::Ops::jobs)).
    pub fn jobs(&mut self) -> Vec<JobBrief> {
        let names = self.names();
        names
            .iter()
            .filter_map(|name| self.jobs.get_mut(name)?.brief(name))
            .collect()
    }

    /// Every job's line with the next fire counted from `now`, sorted by name.
    pub fn lines(&mut self, now: DateTime<Utc>) -> Vec<JobLine> {
        let names = self.names();
        names
            .iter()
            .filter_map(|name| self.jobs.get_mut(name)?.line(name, now))
            .collect()
    }

    /// One job's line with the next fire counted from `now`; `None` without a `config` node.
    pub fn line(&mut self, job: &str, now: DateTime<Utc>) -> Option<JobLine> {
        self.jobs.get_mut(job)?.line(job, now)
    }

    /// One job's line of the list; `None` without a `config` node.
    pub fn job(&mut self, job: &str) -> Option<JobBrief> {
        self.jobs.get_mut(job)?.brief(job)
    }

    /// One job in full, the next fire counted from `now` (as [`Ops::status`](crate::Ops::status));
    /// `None` without a `config` node.
    pub fn status(&mut self, job: &str, now: DateTime<Utc>) -> Option<JobStatus> {
        let copy = self.jobs.get_mut(job)?;
        stats::status(job, copy.tree(job), now)
    }

    /// The job's `config` node as held: its text and version.
    pub fn config_yaml(&self, job: &str) -> Option<(String, shardjob_core::registry::Version)> {
        let copy = self.jobs.get(job)?;
        let path = NodePath::root().join(job).ok()?.join("config").ok()?;
        let node = copy.nodes.get(&path)?;
        Some((
            String::from_utf8_lossy(&node.data).into_owned(),
            node.stat.version,
        ))
    }

    /// Every server IP of the namespace (as [`Ops::servers`](crate::Ops::servers)).
    pub fn servers(&mut self) -> Vec<ServerBrief> {
        let mut servers = BTreeMap::new();
        for (name, copy) in &mut self.jobs {
            stats::add_servers(name, copy.tree(name), &mut servers);
        }
        let mut list: Vec<ServerBrief> = servers.into_values().collect();
        list.sort_by(|a, b| stats::java_cmp(&a.ip, &b.ip));
        list
    }

    /// The jobs a server has a `servers/{ip}` node in, with the server's own state (as
    /// [`Ops::server_jobs`](crate::Ops::server_jobs)); empty if none.
    pub fn server_jobs(&mut self, ip: &str) -> Vec<JobBrief> {
        let names = self.names();
        let mut out = Vec::new();
        for name in &names {
            let Some(copy) = self.jobs.get_mut(name) else {
                continue;
            };
            if let Some(brief) = stats::server_job(name, copy.tree(name), ip) {
                out.push(brief);
            }
        }
        out
    }

    /// The job's nodes in ElasticJob's dump format (as [`Ops::dump`](crate::Ops::dump));
    /// `None` if the job is not held.
    pub fn dump(&self, job: &str) -> Option<String> {
        let copy = self.jobs.get(job)?;
        let nodes: Vec<Node> = copy.nodes.values().cloned().collect();
        Some(crate::dump::format_dump(job, &nodes, None))
    }

    /// How many nodes are held in all.
    pub fn node_count(&self) -> usize {
        self.jobs.values().map(|c| c.nodes.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shardjob_core::registry::{Stat, Version};

    fn stat(rev: u64) -> Stat {
        Stat {
            version: Version(0),
            created: Revision(rev),
            modified: Revision(rev),
            ephemeral_owner: None,
            mtime_ms: None,
        }
    }

    fn node(path: &str, data: &str, rev: u64) -> Node {
        Node {
            path: NodePath::new(path).unwrap(),
            data: data.as_bytes().to_vec(),
            stat: stat(rev),
        }
    }

    fn event(kind: WatchEventKind, path: &str, data: &str, rev: u64) -> WatchEvent {
        WatchEvent {
            kind,
            path: NodePath::new(path).unwrap(),
            data: data.as_bytes().to_vec(),
            stat: (kind != WatchEventKind::Deleted).then(|| stat(rev)),
            revision: Some(Revision(rev)),
        }
    }

    fn job_nodes(job: &str, rev: u64) -> Vec<Node> {
        vec![
            node(&format!("/{job}"), "", rev),
            node(
                &format!("/{job}/config"),
                &format!("jobName: {job}\nshardingTotalCount: 1\ncron: 0/5 * * * * ?\n"),
                rev,
            ),
            node(&format!("/{job}/instances"), "", rev),
            node(
                &format!("/{job}/instances/10.0.0.1@-@1"),
                "jobInstanceId: 10.0.0.1@-@1\nserverIp: 10.0.0.1\n",
                rev,
            ),
            node(&format!("/{job}/servers"), "", rev),
            node(&format!("/{job}/servers/10.0.0.1"), "ENABLED", rev),
            node(&format!("/{job}/sharding"), "", rev),
            node(&format!("/{job}/sharding/0"), "", rev),
            node(&format!("/{job}/sharding/0/instance"), "10.0.0.1@-@1", rev),
        ]
    }

    fn tree(nodes: Vec<Node>, rev: Option<u64>) -> Tree {
        Tree {
            nodes,
            revision: rev.map(Revision),
        }
    }

    #[test]
    fn events_apply_on_top_of_the_snapshot() {
        let mut view = NamespaceView::new();
        assert!(!view.is_loaded());
        view.start_reload();
        let changed = view.finish_reload(vec![("a".into(), tree(job_nodes("a", 5), Some(5)))]);
        assert_eq!(changed, BTreeSet::from(["a".to_owned()]));
        assert!(view.is_loaded());
        let jobs = view.jobs();
        assert_eq!(jobs.len(), 1);
        assert_eq!(jobs[0].status, crate::JobState::Ok);

        // Disabling the server: the job's state follows.
        let touched = view.apply(&event(
            WatchEventKind::Changed,
            "/a/servers/10.0.0.1",
            "DISABLED",
            6,
        ));
        assert_eq!(touched.as_deref(), Some("a"));
        assert_eq!(view.job("a").unwrap().status, crate::JobState::Disabled);
        assert_eq!(view.servers()[0].disabled_jobs, 1);
        assert_eq!(view.server_jobs("10.0.0.1").len(), 1);
        assert!(view.server_jobs("10.9.9.9").is_empty());

        // The instance goes: CRASHED; its item is now SHARDING_FLAG.
        view.apply(&event(
            WatchEventKind::Deleted,
            "/a/instances/10.0.0.1@-@1",
            "",
            7,
        ));
        assert_eq!(view.job("a").unwrap().status, crate::JobState::Crashed);
        let status = view.status("a", Utc::now()).unwrap();
        assert_eq!(status.items[0].status, crate::ItemState::ShardingFlag);
        assert!(status.next_fire_ms.is_some());
        let line = view.line("a", Utc::now()).unwrap();
        assert_eq!(line.next_fire_ms, status.next_fire_ms);
        assert_eq!((line.running_items, line.disabled_items), (0, 0));
        assert_eq!(view.lines(Utc::now()).len(), 1);

        // A whole job is removed node by node: it is gone.
        let mut paths: Vec<NodePath> = job_nodes("a", 0).into_iter().map(|n| n.path).collect();
        paths.reverse();
        for p in paths {
            view.apply(&WatchEvent {
                kind: WatchEventKind::Deleted,
                path: p,
                data: Vec::new(),
                stat: None,
                revision: Some(Revision(8)),
            });
        }
        assert!(view.jobs().is_empty());
        assert!(view.names().is_empty());
    }

    #[test]
    fn a_record_rewritten_since_its_creation_is_no_start() {
        let mut view = NamespaceView::new();
        view.start_reload();
        let mut nodes = job_nodes("a", 5);
        nodes.push(node("/a/sharding/0/execution", r#"{"done":1234}"#, 5));
        view.finish_reload(vec![("a".into(), tree(nodes, Some(5)))]);
        let line = view.line("a", Utc::now()).unwrap();
        assert_eq!((line.last_done_ms, line.never_done), (None, true));
        assert!(view.status("a", Utc::now()).unwrap().items[0].never_done);

        // A claim rewrites the record (created at 5, changed at 9): no longer proven.
        let mut claim = event(
            WatchEventKind::Changed,
            "/a/sharding/0/execution",
            r#"{"done":1234,"run":{"fire":2000,"kind":"TRIGGER","instance":"10.0.0.1@-@1"}}"#,
            9,
        );
        if let Some(stat) = &mut claim.stat {
            stat.created = Revision(5);
        }
        view.apply(&claim);
        let line = view.line("a", Utc::now()).unwrap();
        assert_eq!((line.last_done_ms, line.never_done), (Some(1234), false));

        // A backend that told no stat for a change: the record is no longer as created.
        let mut view = NamespaceView::new();
        view.start_reload();
        let mut nodes = job_nodes("a", 5);
        nodes.push(node("/a/sharding/0/execution", r#"{"done":1234}"#, 5));
        view.finish_reload(vec![("a".into(), tree(nodes, Some(5)))]);
        view.apply(&WatchEvent {
            kind: WatchEventKind::Changed,
            path: NodePath::new("/a/sharding/0/execution").unwrap(),
            data: br#"{"done":6000}"#.to_vec(),
            stat: None,
            revision: None,
        });
        let line = view.line("a", Utc::now()).unwrap();
        assert_eq!((line.last_done_ms, line.never_done), (Some(6000), false));
    }

    #[test]
    fn events_during_a_reload_wait_and_stale_ones_are_skipped() {
        let mut view = NamespaceView::new();
        view.start_reload();
        // Came while the trees were read: one the snapshot holds (rev 4 <= 5), one after it.
        assert_eq!(
            view.apply(&event(
                WatchEventKind::Deleted,
                "/a/servers/10.0.0.1",
                "",
                4
            )),
            None
        );
        assert!(view.is_reloading());
        view.apply(&event(
            WatchEventKind::Created,
            "/a/sharding/0/disabled",
            "",
            9,
        ));
        view.apply(&event(WatchEventKind::Created, "/b", "", 9));
        let changed = view.finish_reload(vec![("a".into(), tree(job_nodes("a", 5), Some(5)))]);
        assert_eq!(
            changed,
            BTreeSet::from(["a".to_owned(), "b".to_owned()]),
            "a new, b created during the load"
        );
        let status = view.status("a", Utc::now()).unwrap();
        // The stale deletion did not undo the snapshot's server node; the later item state did
        // apply.
        assert_eq!(status.servers.len(), 1);
        assert_eq!(status.items[0].status, crate::ItemState::Disabled);
        // `b` has no config: a name, not a job.
        assert_eq!(view.names(), ["a", "b"]);
        assert_eq!(view.jobs().len(), 1);

        // A second reload where nothing changed reports nothing; one where `b` is gone
        // reports `b`.
        view.start_reload();
        let mut a = job_nodes("a", 5);
        a.push(node("/a/sharding/0/disabled", "", 9));
        let changed = view.finish_reload(vec![
            ("a".into(), tree(a.clone(), Some(10))),
            ("b".into(), tree(vec![node("/b", "", 9)], Some(10))),
        ]);
        assert!(changed.is_empty(), "{changed:?}");
        view.start_reload();
        let changed = view.finish_reload(vec![("a".into(), tree(a, Some(11)))]);
        assert_eq!(changed, BTreeSet::from(["b".to_owned()]));
    }

    #[test]
    fn without_revisions_every_kept_event_applies_in_order() {
        // ZooKeeper: no revision in events or reads; events and replies come in order.
        let mut view = NamespaceView::new();
        view.start_reload();
        let mut e = event(
            WatchEventKind::Changed,
            "/a/servers/10.0.0.1",
            "DISABLED",
            0,
        );
        e.revision = None;
        view.apply(&e);
        view.finish_reload(vec![("a".into(), tree(job_nodes("a", 5), None))]);
        assert_eq!(view.job("a").unwrap().status, crate::JobState::Disabled);
        assert!(
            view.dump("a")
                .unwrap()
                .contains("/a/servers/ip1 | DISABLED\n")
        );
        assert_eq!(view.config_yaml("a").unwrap().1, Version(0));
        assert!(view.node_count() >= 9);
    }
}
