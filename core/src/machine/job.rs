//! A hosted job's state on this instance.

#[allow(clippy::wildcard_imports)]
use super::*;

/// Where a hosted job is in its setup on this instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Its subtree is not loaded: the job waits for a session, for a backoff, or for the
    /// load in flight ([`Wait::Load`]).
    Waiting,
    /// Loaded; setup (configuration, skeleton, registration) not done.
    Loaded,
    /// Registered; runs.
    Active,
    /// Cannot run (type conflict, no usable configuration); waits for the registry to change.
    Blocked,
}

#[derive(Debug)]
pub(crate) struct Job {
    pub(crate) paths: JobPaths,
    /// The local configuration (see [`JobSpec::config`]); `config` shares it while the
    /// registry's copy says the same.
    pub(crate) local: Arc<JobConfig>,
    /// The job type (see [`JobSpec::job_type`]).
    pub(crate) job_type: String,
    pub(crate) config: Option<Arc<JobConfig>>,
    /// The cache's count of configuration changes when `config` was last read from it.
    pub(crate) config_seen: Option<u64>,
    /// The local configuration's YAML as this machine last wrote it, until the registry's
    /// copy is next read: the same text needs no parse (at start-up with thousands of jobs,
    /// parsing back what was just written was about a third of the work).
    pub(crate) written_config: Option<String>,
    pub(crate) phase: Phase,
    pub(crate) cache: Cache,
    pub(crate) buffer: Vec<crate::registry::WatchEvent>,
    /// What the job waits for before its next decision.
    pub(crate) wait: Wait,
    pub(crate) backoff: u32,
    /// A write of the job ended without a known outcome (a timeout, a lost connection) since
    /// its tree was last loaded: the registry may hold nodes of this session that the view
    /// does not show. A removed job reads its tree again before it leaves.
    pub(crate) unsure: bool,
    pub(crate) owned_since: BTreeMap<u32, i64>,
    pub(crate) running: BTreeMap<u32, ExecutionId>,
    /// Wall time (epoch ms) at which each item's last local run was recorded as finished:
    /// fires up to then came while it ran.
    pub(crate) last_end: BTreeMap<u32, i64>,
    pub(crate) triggers: VecDeque<String>,
    /// The trigger being claimed, when its items did not fit in one transaction.
    pub(crate) trigger_run: Option<TriggerRun>,
    /// What this instance keeps while it leads the job; `None` while it does not.
    pub(crate) leader: Option<Box<LeaderState>>,
    /// The most items per transaction learned from `TooLarge` refusals (see
    /// [`MachineOptions::max_txn_items`]).
    pub(crate) txn_items: Option<usize>,
    pub(crate) orphan_seen: BTreeMap<u32, Mono>,
    /// Since when an ElasticJob leader's plan has named owners that are gone with no
    /// re-sharding flag up, while this instance is the first shardjob candidate
    /// (`mixed::gone_owners`).
    pub(crate) gone_owners_since: Option<Mono>,
    /// When this instance first saw each item's `running` marker that no session holds (by
    /// the marker's creation revision, epoch ms), leader or not: a leader that takes over
    /// attributes such a marker's fire from the first sight, not from its own.
    pub(crate) markers_seen: BTreeMap<u32, (Revision, i64)>,
    /// Per item, when (wall time, epoch ms) a run of its ElasticJob owner was last seen to
    /// start: the arrival of a `running` marker holding that instance's id
    /// (`docs/migration-design.md` 3.6). The fires it covers are not run here again when the
    /// item comes to this instance (`claim::fires::plan_item`). Memory only, from the watch.
    pub(crate) java_ran: BTreeMap<u32, i64>,
    /// Per item, when (wall time, epoch ms) a run of any ElasticJob instance was last seen to
    /// start on it (`watch::note_java_touch`). Memory only, from the watch.
    pub(crate) java_touched: BTreeMap<u32, i64>,
    /// When a decision last saw the job mixed (an ElasticJob instance registered): the
    /// registry clock's rule for mixed jobs holds for [`MIXED_MEMORY_MS`] after, since an
    /// ElasticJob instance whose session is being renewed (its node gone for a moment, a
    /// registry restarted) still runs its fires by its own clock.
    pub(crate) java_seen: Option<Mono>,
    /// Since when a removal of another instance's marker left behind waits for a view
    /// confirmed after it (`mixed::mixed_duties`).
    pub(crate) fresh_wanted: Option<Mono>,
    /// While an ElasticJob leader's re-sharding flag holds this job's new runs (the fire
    /// gate): when this instance first saw it (wall time, epoch ms), and the job's item count
    /// then.
    pub(crate) java_gate: Option<(i64, u32)>,
    /// The fire the last such hold covered, for the items the re-shard that ended it gave to
    /// this instance (`claim::fires::held_fire`).
    pub(crate) held_fire: Option<HeldFire>,
    /// The persistent `running` markers of shardjob runs left behind (by an earlier session
    /// of this instance, or, while mixed, by a shardjob instance that is gone), as first
    /// seen: removed once ElasticJob's failover had its turn (`mixed::mixed_duties`).
    pub(crate) markers_left: BTreeMap<u32, crate::machine::leader::stale::SeenMarker>,
    /// When this instance first saw `leader/sharding/necessary` set (monotonic ms): new runs
    /// of the job are held from then until the flag clears, at most
    /// [`MachineOptions::reshard_wait`].
    pub(crate) necessary_seen: Option<Mono>,
    /// The current hold behind an ElasticJob leader's re-shard was reported as stalled
    /// ([`MachineEvent::ReshardStalled`]).
    pub(crate) stall_reported: bool,
    /// Leaving the job, and why.
    pub(crate) leaving: Option<Leaving>,
    /// The items owned here as last reported ([`MachineEvent::ItemsOwned`]).
    pub(crate) owned_reported: Option<Vec<u32>>,
    /// Whether a re-shard was pending as last reported ([`MachineEvent::ReshardingPending`]).
    pub(crate) necessary_reported: bool,
    /// The session that owned this instance's node when the registry last showed it (in a
    /// watch event or a tree read, whether the cache took it or not): a deletion of the node
    /// seen in that same session is an operator's shutdown or the session's end, told apart by
    /// a probe (see [`Job::node_gone`]).
    pub(crate) registered_in: Option<crate::registry::SessionId>,
    /// The node was seen deleted in [`Job::registered_in`]'s session when requests up to this
    /// number had been sent: a probe with a later number that succeeds proves the session
    /// outlived the deletion (an operator's shutdown).
    pub(crate) node_gone: Option<u64>,
    pub(crate) reported_corrupt: BTreeSet<String>,
    pub(crate) last_config_error: Option<String>,
    /// Why the last load of the subtree failed, until one succeeds.
    pub(crate) load_error: Option<String>,
    pub(crate) last_reload: Option<Mono>,
    pub(crate) wake: Option<Mono>,
    /// The `wake` entered in `Machine::wakes`.
    pub(crate) wake_indexed: Option<Mono>,
    /// Next fires already computed.
    pub(crate) fires: FireMemo,
    /// [`Machine::changes`] at the last change to the job's view or decision on it.
    pub(crate) changed: u64,
}

/// A fire every instance of a job led by ElasticJob waited at behind the re-sharding flag
/// (`docs/migration-design.md` 3.6, rule (e)): ElasticJob's instances blocked at it run it
/// under the new plan once the flag goes, and so does this instance for the items that plan
/// gives it, which nobody ran at that fire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HeldFire {
    /// The fire (epoch ms).
    pub(crate) fire: i64,
    /// When the hold began, as this instance saw it (wall, epoch ms).
    pub(crate) since: i64,
    /// The job's item count when the hold began: an item added since was not there at the
    /// fire.
    pub(crate) total: u32,
    /// When it ended (wall, epoch ms).
    pub(crate) opened: i64,
}

impl HeldFire {
    /// How long after the hold's end an item may come to this instance and still count as
    /// given by the re-shard that ended it (ms): the re-shard deletes the flag and writes the
    /// owners in one transaction, whose events the watch delivers together.
    pub(crate) const GIVEN_WITHIN_MS: i64 = 1_000;

    /// The held fire, for item `item` this instance owns since `owned_since` (epoch ms; it
    /// comes now if this instance does not own it yet), on which an ElasticJob run was last
    /// seen to start at `java_touched`: only if the item was there when the hold began, came
    /// to this instance with the re-shard that ended it, and no ElasticJob run started on it
    /// since the hold began (one may have run the fire: it is given up, ElasticJob's way).
    pub(crate) fn for_item(
        self,
        item: u32,
        owned_since: i64,
        java_touched: Option<i64>,
    ) -> Option<i64> {
        (item < self.total
            && owned_since >= self.since
            && owned_since <= self.opened.saturating_add(Self::GIVEN_WITHIN_MS)
            && java_touched.is_none_or(|t| t < self.since))
        .then_some(self.fire)
    }
}

/// What a job waits for before its next decision: decisions are made one at a time, each on
/// a view that shows the job's own earlier writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wait {
    /// Nothing: the job is decided on when its wake comes or its view changes.
    Idle,
    /// The read of its subtree (in [`Phase::Waiting`]); watch events are buffered meanwhile.
    Load(RequestId),
    /// Its transaction in flight.
    Txn(RequestId),
    /// The watch to show its own last write, at this revision, up to a deadline (monotonic
    /// ms), after which the subtree is read again.
    Sync {
        /// The revision of the write.
        revision: Revision,
        /// When to stop waiting and read the subtree again.
        deadline: Mono,
    },
    /// A backoff after a failure, until then (monotonic ms).
    Backoff {
        /// Its end.
        until: Mono,
    },
}

/// A job this instance leaves: its runs finish (or are cancelled at the grace's end), are
/// recorded, and its nodes are deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Leaving {
    /// Why.
    pub(crate) cause: LeaveCause,
    /// When its grace ends (monotonic ms); `None`: at the instance's shutdown's.
    pub(crate) deadline: Option<Mono>,
}

/// Why an instance leaves a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LeaveCause {
    /// The job was removed from this instance.
    Removed,
    /// An operator shut the job down here ([`MachineEvent::OperatorShutdown`]).
    Operator,
    /// The instance shuts down.
    Shutdown,
}

/// A trigger whose items are claimed in several transactions: the same fire and parameter for
/// all of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TriggerRun {
    pub(crate) parameter: String,
    pub(crate) fire: i64,
    /// Items not claimed yet.
    pub(crate) items: BTreeSet<u32>,
}

/// Remembers a few `next fire after t` answers of one configuration: the items of a job
/// mostly share their last fire, and croner's search is the costly part of a decision.
#[derive(Debug, Default, Clone)]
pub(crate) struct FireMemo {
    pub(crate) config: Option<Arc<JobConfig>>,
    pub(crate) answers: Vec<(i64, Option<i64>)>,
}

impl FireMemo {
    pub(crate) const SIZE: usize = 8;

    /// The first fire strictly after `after_ms` (epoch ms) under `config`'s cron and zone.
    pub(crate) fn next_after(&mut self, config: &Arc<JobConfig>, after_ms: i64) -> Option<i64> {
        if !self.config.as_ref().is_some_and(|c| Arc::ptr_eq(c, config)) {
            self.config = Some(Arc::clone(config));
            self.answers.clear();
        }
        if let Some((_, answer)) = self.answers.iter().find(|(a, _)| *a == after_ms) {
            return *answer;
        }
        let answer = config.cron.as_ref().and_then(|cron| {
            let after = DateTime::<Utc>::from_timestamp_millis(after_ms)?;
            cron.next_after(after, &config.time_zone)
                .map(|t| t.timestamp_millis())
        });
        if self.answers.len() == Self::SIZE {
            self.answers.remove(0);
        }
        self.answers.push((after_ms, answer));
        answer
    }
}

impl Job {
    /// The fire gate's bookkeeping (`java_gate`, `held_fire`) as a decision now would leave
    /// it, `held_by_java` saying whether an ElasticJob leader's flag holds new runs now (see
    /// [`crate::machine::claim::fires::follow_gate`]); the caller keeps it or only looks.
    pub(crate) fn gate_after(
        &mut self,
        held_by_java: bool,
        config: &Arc<JobConfig>,
        now_ms: i64,
    ) -> (Option<(i64, u32)>, Option<HeldFire>) {
        crate::machine::claim::fires::follow_gate(
            self.java_gate,
            self.held_fire,
            held_by_java,
            config,
            now_ms,
            &mut self.fires,
        )
    }

    /// After a committed transaction of ours: hold decisions until the watch shows its last
    /// write (or reload after `timeout_ms`), so they are not made on a view without it.
    pub(crate) fn await_own_writes(&mut self, results: &[TxnOpResult], now: Now, timeout_ms: u64) {
        // A load or a transaction in flight, or a backoff, comes first: their own end decides
        // again (the conditional writes keep a decision on a view without these writes safe);
        // a job whose subtree is not loaded reads it all anyway.
        let waits = matches!(self.wait, Wait::Idle | Wait::Sync { .. });
        if let (Some(revision), true, true) =
            (last_revision(results), waits, self.phase != Phase::Waiting)
        {
            self.wait = Wait::Sync {
                revision,
                deadline: now.mono.after(timeout_ms),
            };
        }
    }

    /// Whether the read of its subtree is in flight.
    pub(crate) fn loading(&self) -> bool {
        matches!(self.wait, Wait::Load(_))
    }

    /// Backs off until `until` (monotonic ms), unless a load is in flight: its reply decides.
    pub(crate) fn back_off(&mut self, until: Mono) {
        if !self.loading() {
            self.wait = Wait::Backoff { until };
        }
    }

    pub(crate) fn name(&self) -> &str {
        self.paths.job_name()
    }

    /// The registry showed this instance's node of the job.
    pub(crate) fn note_own_node(&mut self, stat: &crate::registry::Stat) {
        if let Some(owner) = stat.ephemeral_owner {
            self.registered_in = Some(owner);
        }
    }

    /// The most items one transaction of this job may touch, if limited.
    pub(crate) fn txn_limit(&self, opts: &MachineOptions) -> Option<usize> {
        let limit = match (opts.max_txn_items, self.txn_items) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        limit.map(|k| k.max(1))
    }
}

/// A hosted job's id: given when the job is added, never given again, so a reply or a timer
/// of a job that left cannot reach one added later under the same name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct JobId(u32);

/// The hosted jobs, each by its id, and their ids by name. Jobs are visited in the order
/// they were added.
#[derive(Debug, Default)]
pub(crate) struct Jobs {
    /// Boxed: a map node holds room for eleven entries, and a `Job` is large.
    by_id: BTreeMap<JobId, Box<Job>>,
    ids: BTreeMap<String, JobId>,
    next: u32,
}

impl Jobs {
    /// The job of this id, if it is hosted.
    pub(crate) fn get(&self, id: &JobId) -> Option<&Job> {
        self.by_id.get(id).map(|j| &**j)
    }

    /// The job of this id, if it is hosted.
    pub(crate) fn get_mut(&mut self, id: &JobId) -> Option<&mut Job> {
        self.by_id.get_mut(id).map(|j| &mut **j)
    }

    /// The id of the job of this name, if it is hosted.
    pub(crate) fn id(&self, name: &str) -> Option<JobId> {
        self.ids.get(name).copied()
    }

    /// The job of this name, if it is hosted.
    pub(crate) fn named(&self, name: &str) -> Option<&Job> {
        self.id(name).and_then(|id| self.get(&id))
    }

    /// The job of this name, if it is hosted.
    pub(crate) fn named_mut(&mut self, name: &str) -> Option<(JobId, &mut Job)> {
        let id = self.id(name)?;
        self.get_mut(&id).map(|j| (id, j))
    }

    /// Hosts a job under a new id.
    pub(crate) fn insert(&mut self, job: Job) -> JobId {
        self.next += 1;
        let id = JobId(self.next);
        self.ids.insert(job.name().to_owned(), id);
        self.by_id.insert(id, Box::new(job));
        id
    }

    /// Stops hosting a job.
    pub(crate) fn remove(&mut self, id: &JobId) -> Option<Box<Job>> {
        let job = self.by_id.remove(id)?;
        self.ids.remove(job.name());
        Some(job)
    }

    /// Every hosted job's id, in the order they were added.
    pub(crate) fn ids(&self) -> Vec<JobId> {
        self.by_id.keys().copied().collect()
    }

    /// Every hosted job, in the order they were added.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (JobId, &Job)> {
        self.by_id.iter().map(|(id, j)| (*id, &**j))
    }

    /// Every hosted job, in the order they were added.
    #[cfg(feature = "audit")]
    pub(crate) fn iter_mut(&mut self) -> impl Iterator<Item = (JobId, &mut Job)> {
        self.by_id.iter_mut().map(|(id, j)| (*id, &mut **j))
    }

    /// Every hosted job, in the order they were added.
    pub(crate) fn values_mut(&mut self) -> impl Iterator<Item = &mut Job> {
        self.by_id.values_mut().map(|j| &mut **j)
    }

    /// The ids of up to `n` jobs after `after` (from the first when `None`), wrapping around.
    pub(crate) fn after(&self, after: Option<JobId>, n: usize) -> Vec<JobId> {
        let mut next: Vec<JobId> = match after {
            Some(c) => self
                .by_id
                .range((std::ops::Bound::Excluded(c), std::ops::Bound::Unbounded))
                .map(|(id, _)| *id)
                .take(n)
                .collect(),
            None => Vec::new(),
        };
        if next.len() < n {
            let more = n - next.len();
            next.extend(self.by_id.keys().take(more).copied());
        }
        next
    }

    /// Every hosted job's name, in name order.
    pub(crate) fn names(&self) -> impl Iterator<Item = &str> {
        self.ids.keys().map(String::as_str)
    }

    /// How many jobs are hosted.
    pub(crate) fn len(&self) -> usize {
        self.by_id.len()
    }

    /// Whether no job is hosted.
    pub(crate) fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }

    /// Drops every job.
    pub(crate) fn clear(&mut self) {
        self.by_id.clear();
        self.ids.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::CronExpr;

    /// 2026-01-01 00:00:00 UTC, a whole minute.
    const T0: i64 = 1_767_225_600_000;

    fn every(cron: &str) -> Arc<JobConfig> {
        Arc::new(JobConfig::new("j", 1).with_cron(CronExpr::parse(cron).unwrap()))
    }

    /// The memo answers for the configuration it is asked with: an answer remembered for one
    /// is never given for another, even for the same instant; the same configuration asked
    /// again is answered alike.
    #[test]
    fn the_fire_memo_answers_for_the_configuration_asked() {
        let every_five = every("0/5 * * * * ?");
        let every_ten = every("0/10 * * * * ?");
        let mut memo = FireMemo::default();
        #[rustfmt::skip]
        let cases: [(&Arc<JobConfig>, i64, i64); 6] = [
            (&every_five, T0, T0 + 5_000),
            (&every_ten, T0, T0 + 10_000),
            (&every_five, T0, T0 + 5_000),
            (&every_five, T0, T0 + 5_000),
            (&every_ten, T0 + 10_000, T0 + 20_000),
            (&every_ten, T0, T0 + 10_000),
        ];
        for (k, (config, after, want)) in cases.into_iter().enumerate() {
            assert_eq!(memo.next_after(config, after), Some(want), "question {k}");
        }
        // A configuration equal to one asked before, but another one (a reload): its own.
        let every_five_again = every("0/5 * * * * ?");
        assert_eq!(memo.next_after(&every_five_again, T0), Some(T0 + 5_000));
        assert!(
            memo.config
                .as_ref()
                .is_some_and(|c| Arc::ptr_eq(c, &every_five_again)),
            "the memo keeps the configuration it answers for"
        );
        assert_eq!(memo.answers, vec![(T0, Some(T0 + 5_000))]);
    }

    fn now() -> Now {
        Now {
            mono: Mono(0),
            wall: DateTime::<Utc>::from_timestamp_millis(T0).unwrap_or_default(),
        }
    }

    /// A machine hosting jobs `names`, added in that order.
    fn hosting(names: &[&str]) -> Machine {
        let me = InstanceId::new("10.0.0.1@-@1").unwrap();
        let mut m = Machine::new(MachineOptions::new(me));
        for name in names {
            let spec = JobSpec {
                config: JobConfig::new(*name, 1),
                job_type: "SCRIPT".to_owned(),
            };
            m.add_job(spec, now()).unwrap();
        }
        m
    }

    /// The jobs' table visits jobs in the order they were added and gives the sweep its
    /// chunks after the last one it did, wrapping around to the first.
    #[test]
    fn the_jobs_table_and_the_sweeps_chunks() {
        let empty = hosting(&[]);
        assert!(empty.jobs.is_empty());
        assert_eq!(empty.jobs.after(None, 3), []);

        let mut m = hosting(&["e", "a", "d", "b", "c"]);
        assert!(!m.jobs.is_empty());
        assert_eq!(m.jobs.len(), 5);
        let ids = m.jobs.ids();
        let names: Vec<&str> = ids
            .iter()
            .filter_map(|id| m.jobs.get(id))
            .map(Job::name)
            .collect();
        assert_eq!(names, ["e", "a", "d", "b", "c"], "in the order added");
        assert_eq!(
            m.jobs.names().collect::<Vec<_>>(),
            ["a", "b", "c", "d", "e"],
            "names in name order"
        );
        assert_eq!(m.jobs.id("d"), Some(ids[2]));
        assert_eq!(m.jobs.id("x"), None);
        let at = |k: &[usize]| k.iter().map(|k| ids[*k]).collect::<Vec<_>>();
        #[rustfmt::skip]
        let cases: [(Option<usize>, usize, Vec<JobId>); 7] = [
            (None, 2, at(&[0, 1])),
            (None, 5, at(&[0, 1, 2, 3, 4])),
            (Some(1), 2, at(&[2, 3])),
            (Some(2), 2, at(&[3, 4])),
            (Some(3), 3, at(&[4, 0, 1])),
            (Some(4), 2, at(&[0, 1])),
            (Some(2), 5, at(&[3, 4, 0, 1, 2])),
        ];
        for (after, n, want) in cases {
            assert_eq!(
                m.jobs.after(after.map(|k| ids[k]), n),
                want,
                "{n} after {after:?}"
            );
        }

        // A removed job's id is not given again; the table goes on without it.
        assert!(m.jobs.remove(&ids[2]).is_some());
        assert_eq!(m.jobs.id("d"), None);
        assert_eq!(m.jobs.after(Some(ids[1]), 2), at(&[3, 4]));
        m.jobs.clear();
        assert!(m.jobs.is_empty());
    }
}
