//! Statistics: ElasticJob's rules (`JobStatisticsAPI`, `ServerStatisticsAPI`,
//! `ShardingStatisticsAPI` of 3.0.4), applied to trees read in one request per job, plus what
//! only shardjob knows. Pure functions over [`JobTree`]s.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};
use serde::Serialize;
use shardjob_core::machine::record::{ItemRecord, RunKind};
use shardjob_core::{JobConfig, config::Strictness};

use crate::tree::{ItemNodes, JobTree};

/// A job's health, by ElasticJob's rules, checked in this order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum JobState {
    /// None of the rules below applies.
    Ok,
    /// The job has no live instance (`instances` has no child).
    Crashed,
    /// Every `servers/*` node holds exactly `DISABLED` (a job without server nodes counts too).
    Disabled,
    /// An item's owner is not a live instance, or no item has an owner: the job waits for
    /// (re-)sharding.
    ShardingFlag,
}

impl JobState {
    /// ElasticJob's name of the state.
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Ok => "OK",
            JobState::Crashed => "CRASHED",
            JobState::Disabled => "DISABLED",
            JobState::ShardingFlag => "SHARDING_FLAG",
        }
    }
}

/// One item's state, by ElasticJob's precedence `DISABLED > RUNNING > SHARDING_FLAG > PENDING`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ItemState {
    /// `sharding/{item}/disabled` exists.
    Disabled,
    /// `sharding/{item}/running` exists.
    Running,
    /// The owner in `sharding/{item}/instance` is not a live instance (or there is none).
    ShardingFlag,
    /// Assigned to a live instance, waiting for its next fire.
    Pending,
}

impl ItemState {
    /// ElasticJob's name of the state.
    pub fn as_str(self) -> &'static str {
        match self {
            ItemState::Disabled => "DISABLED",
            ItemState::Running => "RUNNING",
            ItemState::ShardingFlag => "SHARDING_FLAG",
            ItemState::Pending => "PENDING",
        }
    }
}

/// One line of the job list (ElasticJob's `JobBriefInfo`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct JobBrief {
    /// The job's name.
    pub name: String,
    /// `description` of its configuration.
    pub description: String,
    /// `cron`, if it has one.
    pub cron: Option<String>,
    /// The number of live instances (`instances` children).
    pub instance_count: usize,
    /// `shardingTotalCount`.
    pub sharding_total_count: u32,
    /// The job's health.
    pub status: JobState,
    /// Why the `config` node could not be read as a configuration, if it could not; the fields
    /// above are then what could be read of it.
    pub config_problem: Option<String>,
}

/// A run in progress, from shardjob's execution record and `running` marker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RunInfo {
    /// Since when: the run's scheduled fire, or the trigger's time (epoch ms, UTC).
    pub since_ms: i64,
    /// Why it runs.
    pub kind: RunKind,
    /// The instance running it.
    pub instance: String,
    /// The fencing token the run received: the creation revision of its `running` marker.
    /// `None` when the marker is gone (the run died with its instance's session).
    pub fencing_token: Option<u64>,
}

/// One item of a job (ElasticJob's `ShardingInfo`, plus shardjob's execution record).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ItemInfo {
    /// The item number.
    pub item: u32,
    /// The owner (`sharding/{item}/instance`), if any.
    pub instance: Option<String>,
    /// The owner's server IP, from its live `instances/{id}` node; `None` if the owner is not
    /// live (ElasticJob 3.0.4 fails there, #2060).
    pub server_ip: Option<String>,
    /// The item's state.
    pub status: ItemState,
    /// `sharding/{item}/failover` exists: the item runs in place of a dead owner.
    pub failover: bool,
    /// `sharding/{item}/misfire` exists: a fire waits for the run in progress to end.
    pub misfire: bool,
    /// The last scheduled fire whose run finished (epoch ms, UTC), from the execution record;
    /// `None` if the item never did one ([`ItemInfo::never_done`]) or has no record that reads.
    pub last_done_ms: Option<i64>,
    /// The item is proven never to have done a fire since it was created ([`last_done`]).
    pub never_done: bool,
    /// The run in progress, from the execution record.
    pub run: Option<RunInfo>,
    /// Why the execution record could not be read, if it could not.
    pub record_problem: Option<String>,
}

/// A live instance of a job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InstanceInfo {
    /// The instance id.
    pub id: String,
    /// Its server IP.
    pub server_ip: String,
    /// Whether it is the job's leader.
    pub leader: bool,
    /// Whether its server is disabled for the job (`servers/{ip}` is `DISABLED`).
    pub server_disabled: bool,
    /// Its items, by `sharding/*/instance`.
    pub items: Vec<u32>,
}

/// Everything about one job: ElasticJob's brief and sharding views plus shardjob's own state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct JobStatus {
    /// The job's line of the list.
    pub brief: JobBrief,
    /// The leader (`leader/election/instance`), if one is elected.
    pub leader: Option<String>,
    /// A re-shard is pending (`leader/sharding/necessary`).
    pub reshard_pending: bool,
    /// The leader is re-sharding right now (`leader/sharding/processing`).
    pub resharding: bool,
    /// The next fire of the schedule after the `now` given (epoch ms, UTC); `None` without a
    /// schedule.
    pub next_fire_ms: Option<i64>,
    /// The live instances, by id.
    pub instances: Vec<InstanceInfo>,
    /// `servers/{ip}` nodes: ip and whether it is `DISABLED`.
    pub servers: Vec<(String, bool)>,
    /// Every item under `sharding`, by number.
    pub items: Vec<ItemInfo>,
    /// Items waiting to be failed over (`leader/failover/items`).
    pub failover_queue: Vec<u32>,
    /// Triggers not yet taken by their instance: instance id and parameter.
    pub pending_triggers: Vec<(String, String)>,
}

/// One server of the namespace (ElasticJob's `ServerBriefInfo`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ServerBrief {
    /// The server IP (`servers/{ip}` in one job or more).
    pub ip: String,
    /// The live instances on it, across jobs, whose job has its server node.
    pub instances: BTreeSet<String>,
    /// The jobs with a `servers/{ip}` node.
    pub jobs: BTreeSet<String>,
    /// How many of those hold `DISABLED` (any case).
    pub disabled_jobs: usize,
}

/// What an item's execution record proves about the last fire the item did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LastDone {
    /// None since the item was created: proven by the record (see [`last_done`]).
    Never,
    /// The record's `done` (epoch ms, UTC).
    At(i64),
    /// Not known: no record, one that does not read, or one without `done` (created by a
    /// claim, for an item that existed before its record, as ElasticJob's items do).
    Unknown,
}

impl LastDone {
    /// The fire's time, if one is known.
    pub fn at(self) -> Option<i64> {
        match self {
            LastDone::At(ms) => Some(ms),
            LastDone::Never | LastDone::Unknown => None,
        }
    }
}

/// The last fire an item did, from its execution record and whether that record was ever
/// written since its creation (`as_created`: the node's last change is its creation).
///
/// A re-shard creates an item together with its record `{"done":S}`, where `S` is no fire but
/// where the item's schedule starts (the leader's clock, or the latest fire the job had done):
/// shown as a fire done, it would read as a run that never happened (a job fired once a year
/// or only triggered would show its set-up time). Every run writes the record when it is
/// claimed (a `run`), and again when its end is recorded; nothing else writes it. So a record
/// still as created and holding exactly such a start (`done`, no `run`) proves that no run of
/// the item was ever claimed, let alone ended: [`LastDone::Never`]. This is exact: it needs no
/// guess about what `S` looks like, only the registry's revisions.
///
/// Once written again the record's `done` is shown as it is ([`LastDone::At`]), even though it
/// may still be `S` (a trigger's run or a run in progress does not change it): the registry
/// keeps no earlier value to compare with, so "never" is not claimed without proof. A record
/// without `done` was created by a claim, for an item that existed before its record (as
/// ElasticJob's do): what ran there before is not known ([`LastDone::Unknown`]).
///
/// Fires run by ElasticJob instances write no record: the rule speaks for shardjob's runs.
pub fn last_done(record: &ItemRecord, as_created: bool) -> LastDone {
    match (record.done, &record.run) {
        (Some(_), None) if as_created => LastDone::Never,
        (Some(done), _) => LastDone::At(done),
        (None, _) => LastDone::Unknown,
    }
}

/// An item's [`last_done`]; [`LastDone::Unknown`] without a record that reads.
pub(crate) fn item_last_done(nodes: &ItemNodes) -> LastDone {
    nodes
        .execution
        .as_deref()
        .and_then(|d| ItemRecord::parse(d).ok())
        .map_or(LastDone::Unknown, |r| {
            last_done(&r, nodes.execution_as_created)
        })
}

/// A job's last fire done: the latest over its items, and whether the job is proven never to
/// have done one (it has items, each proven [`LastDone::Never`], and no re-shard removed
/// items, which may have done fires: the `sharding` node holds no mark).
pub(crate) fn job_last_done(tree: &JobTree) -> (Option<i64>, bool) {
    let mut latest = None;
    let mut never = !tree.items.is_empty() && !tree.sharding_mark;
    for nodes in tree.items.values() {
        let done = item_last_done(nodes);
        never &= done == LastDone::Never;
        latest = latest.max(done.at());
    }
    (latest, never)
}

/// The configuration as far as it can be read: leniently (a newer version's keys are fine);
/// if that fails, the few fields the list shows, read one by one.
pub(crate) fn read_config(yaml: &str) -> Result<JobConfig, String> {
    JobConfig::from_yaml(yaml, Strictness::Lenient).map_err(|e| e.to_string())
}

fn raw_fields(yaml: &str) -> (String, Option<String>, u32) {
    let value: serde_yaml_ng::Value = serde_yaml_ng::from_str(yaml).unwrap_or_default();
    let text = |key: &str| value.get(key).and_then(|v| v.as_str()).map(str::to_owned);
    let total = value
        .get("shardingTotalCount")
        .and_then(|v| v.as_u64())
        .and_then(|n| u32::try_from(n).ok())
        .unwrap_or(0);
    (text("description").unwrap_or_default(), text("cron"), total)
}

/// ElasticJob's job status rules (`JobStatisticsAPIImpl.getJobStatus`).
pub(crate) fn job_state(tree: &JobTree) -> JobState {
    if tree.instances.is_empty() {
        return JobState::Crashed;
    }
    // Exactly `DISABLED`, case-sensitive, as ElasticJob compares here; no servers counts.
    if tree.servers.values().all(|(v, _)| v == "DISABLED") {
        return JobState::Disabled;
    }
    let owners: BTreeSet<&str> = tree
        .items
        .values()
        .filter_map(|i| i.owner.as_deref())
        .collect();
    if owners.is_empty() || owners.iter().any(|o| !tree.instances.contains_key(*o)) {
        return JobState::ShardingFlag;
    }
    JobState::Ok
}

/// ElasticJob's item precedence (`ShardingInfo.ShardingStatus.getShardingStatus`).
pub(crate) fn item_state(disabled: bool, running: bool, owner_live: bool) -> ItemState {
    if disabled {
        ItemState::Disabled
    } else if running {
        ItemState::Running
    } else if !owner_live {
        ItemState::ShardingFlag
    } else {
        ItemState::Pending
    }
}

/// The job's line of the list; `None` without a `config` node (ElasticJob leaves such a job
/// out).
pub(crate) fn brief(name: &str, tree: &JobTree) -> Option<JobBrief> {
    let (yaml, _) = tree.config.as_ref()?;
    let (description, cron, total, problem) = match read_config(yaml) {
        Ok(c) => (
            c.description,
            c.cron.map(|c| c.as_str().to_owned()),
            c.sharding_total_count,
            None,
        ),
        Err(e) => {
            let (d, c, t) = raw_fields(yaml);
            (d, c, t, Some(e))
        }
    };
    Some(JobBrief {
        name: name.to_owned(),
        description,
        cron,
        instance_count: tree.instances.len(),
        sharding_total_count: total,
        status: job_state(tree),
        config_problem: problem,
    })
}

/// Everything about one job, `now` being the time the next fire is counted from.
pub(crate) fn status(name: &str, tree: &JobTree, now: DateTime<Utc>) -> Option<JobStatus> {
    let brief = brief(name, tree)?;
    let config = tree.config.as_ref().and_then(|(y, _)| read_config(y).ok());
    let next_fire_ms = config.as_ref().and_then(|c| {
        c.cron
            .as_ref()
            .and_then(|cron| cron.next_after(now, &c.time_zone))
            .map(|t| t.timestamp_millis())
    });
    let mut items = Vec::with_capacity(tree.items.len());
    let mut owned: BTreeMap<&str, Vec<u32>> = BTreeMap::new();
    for (&item, nodes) in &tree.items {
        let owner_live = nodes
            .owner
            .as_deref()
            .is_some_and(|o| tree.instances.contains_key(o));
        if let Some(o) = nodes.owner.as_deref() {
            owned.entry(o).or_default().push(item);
        }
        let (record, record_problem) = match nodes.execution.as_deref() {
            None => (None, None),
            Some(data) => match ItemRecord::parse(data) {
                Ok(r) => (Some(r), None),
                Err(e) => (None, Some(e)),
            },
        };
        let done = record.as_ref().map_or(LastDone::Unknown, |r| {
            last_done(r, nodes.execution_as_created)
        });
        let run = record
            .as_ref()
            .and_then(|r| r.run.as_ref())
            .map(|r| RunInfo {
                since_ms: r.fire,
                kind: r.kind,
                instance: r.instance.as_str().to_owned(),
                fencing_token: nodes.running.as_ref().map(|(_, rev)| rev.0),
            });
        items.push(ItemInfo {
            item,
            instance: nodes.owner.clone(),
            server_ip: nodes
                .owner
                .as_deref()
                .and_then(|o| owner_live.then(|| tree.server_ip_of(o)).flatten()),
            status: item_state(
                nodes.disabled.is_some(),
                nodes.running.is_some(),
                owner_live,
            ),
            failover: nodes.failover,
            misfire: nodes.misfire,
            last_done_ms: done.at(),
            never_done: done == LastDone::Never,
            run,
            record_problem,
        });
    }
    let disabled_ip = |ip: &str| tree.servers.get(ip).is_some_and(|(v, _)| v == "DISABLED");
    let instances = tree
        .instances
        .keys()
        .map(|id| {
            let server_ip = tree.server_ip_of(id).unwrap_or_default();
            InstanceInfo {
                id: id.clone(),
                leader: tree.leader.as_deref() == Some(id.as_str()),
                server_disabled: disabled_ip(&server_ip),
                server_ip,
                items: owned.get(id.as_str()).cloned().unwrap_or_default(),
            }
        })
        .collect();
    Some(JobStatus {
        brief,
        leader: tree.leader.clone(),
        reshard_pending: tree.necessary,
        resharding: tree.processing,
        next_fire_ms,
        instances,
        servers: tree
            .servers
            .iter()
            .map(|(ip, (v, _))| (ip.clone(), v == "DISABLED"))
            .collect(),
        items,
        failover_queue: tree.failover_queue.iter().copied().collect(),
        pending_triggers: tree
            .triggers
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
    })
}

/// The job's line as seen from one server (`JobStatisticsAPIImpl.getJobsBriefInfo(ip)`): the
/// server's own state (`DISABLED` or `OK`) and its live instances of the job; `None` if the
/// job has no `servers/{ip}` node or no `config` node.
pub(crate) fn server_job(name: &str, tree: &JobTree, ip: &str) -> Option<JobBrief> {
    let (value, _) = tree.servers.get(ip)?;
    let mut brief = brief(name, tree)?;
    brief.status = if value.eq_ignore_ascii_case("DISABLED") {
        JobState::Disabled
    } else {
        JobState::Ok
    };
    brief.instance_count = tree
        .instances
        .keys()
        .filter(|id| tree.server_ip_of(id).as_deref() == Some(ip))
        .count();
    Some(brief)
}

/// Adds one job to the server list (`ServerStatisticsAPIImpl.getAllServersBriefInfo`).
pub(crate) fn add_servers(name: &str, tree: &JobTree, servers: &mut BTreeMap<String, ServerBrief>) {
    for (ip, (value, _)) in &tree.servers {
        let s = servers.entry(ip.clone()).or_insert_with(|| ServerBrief {
            ip: ip.clone(),
            instances: BTreeSet::new(),
            jobs: BTreeSet::new(),
            disabled_jobs: 0,
        });
        if value.eq_ignore_ascii_case("DISABLED") {
            s.disabled_jobs += 1;
        }
        s.jobs.insert(name.to_owned());
    }
    for id in tree.instances.keys() {
        if let Some(ip) = tree.server_ip_of(id)
            && let Some(s) = servers.get_mut(&ip)
        {
            s.instances.insert(id.clone());
        }
    }
}

/// Java's `String.compareTo` (UTF-16 code units), the order ElasticJob sorts names in.
pub(crate) fn java_cmp(a: &str, b: &str) -> std::cmp::Ordering {
    a.encode_utf16().cmp(b.encode_utf16())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tree::InstanceValue;
    use shardjob_core::machine::record::RunRecord;
    use shardjob_core::registry::{Revision, Version};

    fn tree(instances: &[&str], servers: &[(&str, &str)], owners: &[Option<&str>]) -> JobTree {
        let mut t = JobTree {
            exists: true,
            config: Some(("jobName: j\nshardingTotalCount: 2\n".into(), Version(1))),
            ..JobTree::default()
        };
        for i in instances {
            t.instances.insert((*i).into(), InstanceValue::default());
        }
        for (ip, v) in servers {
            t.servers.insert((*ip).into(), ((*v).into(), Version(1)));
        }
        for (n, o) in owners.iter().enumerate() {
            t.items.insert(
                n as u32,
                ItemNodes {
                    owner: o.map(str::to_owned),
                    ..ItemNodes::default()
                },
            );
        }
        t
    }

    #[test]
    fn job_state_follows_elasticjob_order() {
        let a = "1.1.1.1@-@1";
        let b = "1.1.1.2@-@2";
        assert_eq!(
            job_state(&tree(&[], &[("1.1.1.1", "DISABLED")], &[Some(a)])),
            JobState::Crashed
        );
        // Every server DISABLED, and no servers at all, are DISABLED.
        assert_eq!(
            job_state(&tree(&[a], &[("1.1.1.1", "DISABLED")], &[Some(b)])),
            JobState::Disabled
        );
        assert_eq!(job_state(&tree(&[a], &[], &[Some(a)])), JobState::Disabled);
        // Case-sensitive here, as in JobStatisticsAPIImpl.isAllDisabled.
        assert_eq!(
            job_state(&tree(&[a], &[("1.1.1.1", "disabled")], &[Some(a)])),
            JobState::Ok
        );
        assert_eq!(
            job_state(&tree(&[a], &[("1.1.1.1", "ENABLED")], &[Some(b)])),
            JobState::ShardingFlag
        );
        assert_eq!(
            job_state(&tree(&[a], &[("1.1.1.1", "ENABLED")], &[None, None])),
            JobState::ShardingFlag
        );
        assert_eq!(
            job_state(&tree(&[a], &[("1.1.1.1", "")], &[Some(a), None])),
            JobState::Ok
        );
    }

    #[test]
    fn a_record_as_created_proves_no_fire_done() {
        let run = |kind| RunRecord {
            fire: 2000,
            kind,
            instance: "1.1.1.1@-@1".parse().unwrap(),
        };
        let record = |done, run| ItemRecord { done, run };
        // A re-shard's start, never written since: never, whatever the start looks like.
        for start in [1_764_050_400_000, 1_764_050_401_234] {
            assert_eq!(last_done(&record(Some(start), None), true), LastDone::Never);
            // Written since (a run claimed and ended): its done, as it is.
            assert_eq!(
                last_done(&record(Some(start), None), false),
                LastDone::At(start)
            );
        }
        // A run claimed (rewritten): the start still shows, "never" is not proven.
        assert_eq!(
            last_done(&record(Some(1000), Some(run(RunKind::Trigger))), false),
            LastDone::At(1000)
        );
        // Created by a claim (the item existed before its record): not known, never "never".
        assert_eq!(
            last_done(&record(None, Some(run(RunKind::Scheduled))), true),
            LastDone::Unknown
        );
        assert_eq!(last_done(&record(None, None), false), LastDone::Unknown);
        // No creation writes done and run together; such a record is not a start.
        assert_eq!(
            last_done(&record(Some(1000), Some(run(RunKind::Scheduled))), true),
            LastDone::At(1000)
        );
    }

    #[test]
    fn a_job_never_did_a_fire_only_if_every_item_proves_it() {
        let start = br#"{"done":1764050400123}"#;
        let mut t = tree(&[], &[], &[None, None]);
        for nodes in t.items.values_mut() {
            nodes.execution = Some(start.to_vec());
            nodes.execution_as_created = true;
        }
        assert_eq!(job_last_done(&t), (None, true));
        // Items were removed by a re-shard: they may have done fires.
        t.sharding_mark = true;
        assert_eq!(job_last_done(&t), (None, false));
        t.sharding_mark = false;
        // One item ran a fire: the job shows it.
        let one = t.items.get_mut(&1).unwrap();
        one.execution = Some(br#"{"done":1764050460000}"#.to_vec());
        one.execution_as_created = false;
        assert_eq!(job_last_done(&t), (Some(1_764_050_460_000), false));
        // One item has no record (or one that does not read): not proven.
        let one = t.items.get_mut(&1).unwrap();
        one.execution = None;
        assert_eq!(job_last_done(&t), (None, false));
        let one = t.items.get_mut(&1).unwrap();
        one.execution = Some(b"nonsense".to_vec());
        one.execution_as_created = true;
        assert_eq!(job_last_done(&t), (None, false));
        // No items: nothing proven.
        assert_eq!(job_last_done(&tree(&[], &[], &[])), (None, false));
    }

    #[test]
    fn item_state_precedence() {
        assert_eq!(item_state(true, true, false), ItemState::Disabled);
        assert_eq!(item_state(false, true, false), ItemState::Running);
        assert_eq!(item_state(false, false, false), ItemState::ShardingFlag);
        assert_eq!(item_state(false, false, true), ItemState::Pending);
    }

    #[test]
    fn status_reads_records_and_tokens() {
        let a = "1.1.1.1@-@1";
        let mut t = tree(
            &[a],
            &[("1.1.1.1", "ENABLED")],
            &[Some(a), Some("gone@-@9")],
        );
        t.leader = Some(a.into());
        let item = t.items.get_mut(&0).unwrap();
        item.running = Some((a.into(), Revision(77)));
        item.execution = Some(
            br#"{"done":1000,"run":{"fire":2000,"kind":"TRIGGER","instance":"1.1.1.1@-@1"}}"#
                .to_vec(),
        );
        t.items.get_mut(&1).unwrap().execution = Some(b"nonsense".to_vec());
        let s = status("j", &t, Utc::now()).unwrap();
        assert_eq!(s.items[0].status, ItemState::Running);
        assert_eq!(s.items[0].last_done_ms, Some(1000));
        assert!(!s.items[0].never_done);
        assert!(!s.items[1].never_done);
        let run = s.items[0].run.as_ref().unwrap();
        assert_eq!(
            (run.since_ms, run.kind, run.fencing_token),
            (2000, RunKind::Trigger, Some(77))
        );
        assert_eq!(s.items[1].status, ItemState::ShardingFlag);
        assert_eq!(s.items[1].server_ip, None);
        assert!(s.items[1].record_problem.is_some());
        assert_eq!(s.instances[0].items, vec![0]);
        assert!(s.instances[0].leader);
        assert_eq!(s.brief.status, JobState::ShardingFlag);
        assert_eq!(s.next_fire_ms, None);
    }

    #[test]
    fn a_config_that_does_not_read_still_lists() {
        let mut t = tree(&[], &[], &[]);
        t.config = Some((
            "jobName: j\ncron: nonsense\nshardingTotalCount: 4\ndescription: d\n".into(),
            Version(1),
        ));
        let b = brief("j", &t).unwrap();
        assert_eq!(b.cron.as_deref(), Some("nonsense"));
        assert_eq!((b.sharding_total_count, b.description.as_str()), (4, "d"));
        assert!(b.config_problem.is_some());
    }

    #[test]
    fn java_order_is_utf16() {
        // U+FF5E sorts before U+1F600 in UTF-8 bytes, after it in UTF-16.
        assert_eq!(
            java_cmp("\u{ff5e}", "\u{1f600}"),
            std::cmp::Ordering::Greater
        );
        assert_eq!(java_cmp("a", "b"), std::cmp::Ordering::Less);
    }
}
