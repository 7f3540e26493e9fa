//! Job configuration: every key of ElasticJob 3.0.x, one set of defaults, validation that names
//! the key and the problem, and the YAML of the registry's `config` node.
//!
//! # Defaults
//!
//! ElasticJob has three default sets (the Java builder's, the YAML POJO's and the Spring Boot
//! starter's) and a hand-written YAML without `monitorExecution` silently turns monitoring off.
//! shardjob has one set, the Java builder's, used whether a key is missing from YAML or not set
//! in code, and it writes every key (but one) so the registry copy is always explicit:
//!
//! | key | default |
//! |---|---|
//! | `monitorExecution` | `true` |
//! | `failover` | `false` |
//! | `misfire` | `true` |
//! | `maxTimeDiffSeconds` | `-1` (off) |
//! | `reconcileIntervalMinutes` | `10` |
//! | `jobShardingStrategyType` | `AVG_ALLOCATION` |
//! | executor type (`jobExecutorServiceHandlerType` / `jobExecutorThreadPoolSizeProviderType`) | `CPU` |
//! | `jobErrorHandlerType` | `LOG` |
//! | `timeZone` | `UTC` (ElasticJob: the JVM's zone, which differs between hosts) |
//! | everything else | empty / `false` |
//!
//! # Written so that ElasticJob reads it
//!
//! The `config` node stays readable by ElasticJob's `JobConfigurationPOJO`, whose reader
//! refuses unknown keys ([`compat`] has the versions' keys): the executor type, whose key
//! 3.0.5 renamed, is left out when it is the default (`CPU`, which every version assumes for
//! a missing key) and otherwise written under the key of the version named by the job's
//! [`COMPAT_PROP`] (3.0.4 by default); both keys are read. UTC is written `GMT`, the same zone
//! under the one name ElasticJob's scheduler accepts (it refuses any `timeZone` that does
//! not start with `GMT`); other IANA names are written as they are, and only shardjob can run
//! such a job ([`JobConfig::elasticjob_unrunnable`] lists what ElasticJob cannot run).
//!
//! # Reading
//!
//! [`JobConfig::from_yaml`] reads one job (ElasticJob's camelCase keys), [`parse_jobs_file`] a
//! file of several (a YAML list of jobs, or one job). Every problem is collected, not just the
//! first: each [`ConfigProblem`] names the job, the key and what is wrong. Unknown keys are
//! problems in [`Strictness::Strict`] mode (a typo in a file should not pass) and are ignored
//! in [`Strictness::Lenient`] mode (a `config` node written by a newer version).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;

use serde_yaml_ng::{Mapping, Value};

use crate::cron::CronExpr;
use crate::instance::DELIMITER;
use crate::sharding::BuiltinStrategy;
use crate::time_zone::JobTimeZone;

/// The largest `shardingTotalCount` accepted. Every item is a registry node; a job that needs
/// more items than this is better served by fewer, larger items.
pub const MAX_SHARDING_TOTAL_COUNT: u32 = 100_000;

/// The longest job name accepted, in bytes.
pub const MAX_JOB_NAME_LEN: usize = 255;

/// The prop that lets a job catch up, after downtime, the fires missed while no instance of
/// it was registered: fires at most this many seconds before the cluster's start run once,
/// collapsed into one run of the latest (a MISFIRE run). `0` or absent: none run, as in
/// ElasticJob, whose scheduler starts afresh from now.
pub const MISFIRE_CATCHUP_PROP: &str = "shardjob.misfire.catchup.seconds";

pub mod compat;
pub use compat::{COMPAT_PROP, ElasticJobCompat};

/// The largest [`MISFIRE_CATCHUP_PROP`]: a year.
pub const MAX_MISFIRE_CATCHUP_SECONDS: u64 = 366 * 24 * 3600;

/// The executor strategy: how many items of one job run at once in one instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ExecutorType {
    /// Twice the number of cores (ElasticJob's `CPU`, the default).
    #[default]
    Cpu,
    /// One item at a time (`SINGLE_THREAD`).
    SingleThread,
}

impl ExecutorType {
    /// Every executor type.
    pub const ALL: [ExecutorType; 2] = [ExecutorType::Cpu, ExecutorType::SingleThread];

    /// ElasticJob's name of the type.
    pub fn name(self) -> &'static str {
        match self {
            ExecutorType::Cpu => "CPU",
            ExecutorType::SingleThread => "SINGLE_THREAD",
        }
    }
}

/// What happens when an item fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ErrorHandlerType {
    /// Log the error (the default).
    #[default]
    Log,
    /// Fail the run.
    Throw,
    /// Do nothing.
    Ignore,
    /// Send an e-mail (settings in `props`).
    Email,
    /// Post to a WeChat Work webhook (settings in `props`).
    Wechat,
    /// Post to a DingTalk webhook (settings in `props`).
    Dingtalk,
    /// Post JSON to any webhook (settings in `props`); shardjob's addition.
    Webhook,
}

impl ErrorHandlerType {
    /// Every error handler type.
    pub const ALL: [ErrorHandlerType; 7] = [
        ErrorHandlerType::Log,
        ErrorHandlerType::Throw,
        ErrorHandlerType::Ignore,
        ErrorHandlerType::Email,
        ErrorHandlerType::Wechat,
        ErrorHandlerType::Dingtalk,
        ErrorHandlerType::Webhook,
    ];

    /// ElasticJob's name of the type.
    pub fn name(self) -> &'static str {
        match self {
            ErrorHandlerType::Log => "LOG",
            ErrorHandlerType::Throw => "THROW",
            ErrorHandlerType::Ignore => "IGNORE",
            ErrorHandlerType::Email => "EMAIL",
            ErrorHandlerType::Wechat => "WECHAT",
            ErrorHandlerType::Dingtalk => "DINGTALK",
            ErrorHandlerType::Webhook => "WEBHOOK",
        }
    }
}

macro_rules! named_enum {
    ($t:ty) => {
        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.name())
            }
        }

        impl FromStr for $t {
            type Err = String;
            /// Parses ElasticJob's name of the type (exact, case-sensitive); the error lists the
            /// valid names.
            fn from_str(s: &str) -> Result<Self, String> {
                <$t>::ALL
                    .into_iter()
                    .find(|t| t.name() == s)
                    .ok_or_else(|| {
                        let names: Vec<&str> = <$t>::ALL.iter().map(|t| t.name()).collect();
                        format!("unknown type {s:?}; expected one of {}", names.join(", "))
                    })
            }
        }
    };
}
named_enum!(ExecutorType);
named_enum!(ErrorHandlerType);

/// The configuration of one job: every key ElasticJob 3.0.x stores in the `config` node.
///
/// Fields are public plain data; [`JobConfig::validate`] checks a value built in code, and
/// [`JobConfig::from_yaml`] returns only valid ones.
#[derive(Debug, Clone, PartialEq)]
pub struct JobConfig {
    /// `jobName`: the job's id and registry node name.
    pub job_name: String,
    /// `cron`: the Quartz schedule; `None` for a job that only runs when triggered.
    pub cron: Option<CronExpr>,
    /// `timeZone`: the zone the cron expression is read in.
    pub time_zone: JobTimeZone,
    /// `shardingTotalCount`: the job is cut into items `0..n-1`.
    pub sharding_total_count: u32,
    /// `shardingItemParameters`: a parameter per item (`0=a,1=b`); items without one get none.
    pub sharding_item_parameters: BTreeMap<u32, String>,
    /// `jobParameter`: a free string passed to every item.
    pub job_parameter: String,
    /// `monitorExecution`: keep `running` markers, so fires that overlap a run and items of a
    /// crashed instance are detected. Required by failover and misfire.
    pub monitor_execution: bool,
    /// `failover`: items running on an instance that dies are run at once by another.
    pub failover: bool,
    /// `misfire`: a fire that comes while the item still runs is run right after.
    pub misfire: bool,
    /// `maxTimeDiffSeconds`: largest tolerated difference between the instance's clock and the
    /// registry's, or `-1` for no check.
    pub max_time_diff_seconds: i32,
    /// `reconcileIntervalMinutes`: how often to repair the sharding state, or `0` for never.
    pub reconcile_interval_minutes: u32,
    /// `jobShardingStrategyType`: a builtin strategy name or a custom one registered with the
    /// runtime.
    pub job_sharding_strategy_type: String,
    /// The executor type: `jobExecutorServiceHandlerType` up to ElasticJob 3.0.4,
    /// `jobExecutorThreadPoolSizeProviderType` in 3.0.5 (see [`compat`]).
    pub job_executor_thread_pool_size_provider_type: ExecutorType,
    /// `jobErrorHandlerType`.
    pub job_error_handler_type: ErrorHandlerType,
    /// `jobListenerTypes`: listeners by registered name.
    pub job_listener_types: Vec<String>,
    /// `jobExtraConfigurations`: tagged YAML objects (ElasticJob keeps tracing settings here),
    /// kept as they are.
    pub job_extra_configurations: Vec<Value>,
    /// `description`.
    pub description: String,
    /// `props`: job-type and error-handler settings (`script.command.line`, `http.uri`, ...).
    pub props: BTreeMap<String, String>,
    /// `disabled`: the instance's server starts DISABLED.
    pub disabled: bool,
    /// `overwrite`: the local configuration replaces the registry's at start-up.
    pub overwrite: bool,
    /// `label`: stored, no behaviour.
    pub label: Option<String>,
    /// `staticSharding`: once assigned, items do not move when instances come and go.
    pub static_sharding: bool,
}

impl JobConfig {
    /// A configuration with the given name and item count and every other key at its default.
    pub fn new(job_name: impl Into<String>, sharding_total_count: u32) -> Self {
        Self {
            job_name: job_name.into(),
            cron: None,
            time_zone: JobTimeZone::utc(),
            sharding_total_count,
            sharding_item_parameters: BTreeMap::new(),
            job_parameter: String::new(),
            monitor_execution: true,
            failover: false,
            misfire: true,
            max_time_diff_seconds: -1,
            reconcile_interval_minutes: 10,
            job_sharding_strategy_type: BuiltinStrategy::default().to_string(),
            job_executor_thread_pool_size_provider_type: ExecutorType::default(),
            job_error_handler_type: ErrorHandlerType::default(),
            job_listener_types: Vec::new(),
            job_extra_configurations: Vec::new(),
            description: String::new(),
            props: BTreeMap::new(),
            disabled: false,
            overwrite: false,
            label: None,
            static_sharding: false,
        }
    }

    /// Sets the cron expression (builder style).
    pub fn with_cron(mut self, cron: CronExpr) -> Self {
        self.cron = Some(cron);
        self
    }

    /// The catch-up bound after downtime, [`MISFIRE_CATCHUP_PROP`], in ms: `0` (the default)
    /// runs no fire missed while no instance of the job was registered. A value that is not a
    /// whole number of seconds within `0..=`[`MAX_MISFIRE_CATCHUP_SECONDS`] counts as `0`;
    /// [`JobConfig::validate`] reports it.
    pub fn misfire_catchup_ms(&self) -> i64 {
        self.misfire_catchup().ok().map_or(0, |s| s as i64 * 1000)
    }

    /// [`MISFIRE_CATCHUP_PROP`] read and checked, in seconds.
    fn misfire_catchup(&self) -> Result<u64, Problem> {
        let Some(raw) = self.props.get(MISFIRE_CATCHUP_PROP) else {
            return Ok(0);
        };
        let seconds: u64 = raw.trim().parse().map_err(|_| Problem::WrongType {
            expected: "a whole number of seconds (0 for no catch-up after downtime)",
            found: format!("{raw:?}"),
        })?;
        if seconds > MAX_MISFIRE_CATCHUP_SECONDS {
            return Err(Problem::TooLarge(
                seconds.try_into().unwrap_or(i64::MAX),
                MAX_MISFIRE_CATCHUP_SECONDS as i64,
            ));
        }
        Ok(seconds)
    }

    /// The ElasticJob version whose key names the `config` node is written with: the job's
    /// [`COMPAT_PROP`], or 3.0.4 when it is absent. A value that is not a version counts as
    /// the default; [`JobConfig::validate`] reports it.
    pub fn elasticjob_compat(&self) -> ElasticJobCompat {
        self.props
            .get(COMPAT_PROP)
            .and_then(|v| v.parse().ok())
            .unwrap_or_default()
    }

    /// Sets [`COMPAT_PROP`] (builder style).
    pub fn with_elasticjob_compat(mut self, compat: ElasticJobCompat) -> Self {
        self.props
            .insert(COMPAT_PROP.to_owned(), compat.name().to_owned());
        self
    }

    /// What in this configuration ElasticJob instances (any 3.0.x) cannot run, each with the
    /// key and why; empty when a Java instance sharing the job can schedule it. The `config`
    /// node stays readable by ElasticJob's lifecycle API and console either way: these are
    /// values its scheduler or executor refuses, or features only shardjob has.
    pub fn elasticjob_unrunnable(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        if !time_zone_text(&self.time_zone).starts_with(UTC_AS_GMT) {
            out.push((
                "timeZone",
                format!(
                    "ElasticJob's scheduler accepts only GMT offsets (GMT, GMT+08:00), not \
                     {}; its instances fail to schedule the job",
                    self.time_zone
                ),
            ));
        }
        if self.job_error_handler_type == ErrorHandlerType::Webhook {
            out.push((
                "jobErrorHandlerType",
                "WEBHOOK is shardjob's; ElasticJob instances fail to start the job".to_owned(),
            ));
        }
        if self
            .job_sharding_strategy_type
            .parse::<BuiltinStrategy>()
            .is_err()
        {
            out.push((
                "jobShardingStrategyType",
                format!(
                    "{:?} is not one of ElasticJob's strategies; its instances fail when they \
                     shard",
                    self.job_sharding_strategy_type
                ),
            ));
        }
        out
    }

    /// The parameter of an item, if it has one.
    pub fn item_parameter(&self, item: u32) -> Option<&str> {
        self.sharding_item_parameters.get(&item).map(String::as_str)
    }

    /// Why this configuration cannot run on a registry that keeps no clock (etcd), if it sets
    /// `maxTimeDiffSeconds` (ElasticJob's check of the instance's clock against the
    /// registry's before each run): a job given with the check is refused there rather than
    /// run without it. ZooKeeper and the in-memory registry honour it
    /// ([`MachineOptions::registry_clock`](crate::machine::MachineOptions::registry_clock)).
    /// `None` when the key is -1 (ElasticJob's default, no check).
    pub fn unhonoured_time_diff(&self) -> Option<String> {
        (self.max_time_diff_seconds != -1).then(|| {
            format!(
                "maxTimeDiffSeconds {}: this registry keeps no clock (etcd stamps no times on \
                 its keys), so shardjob cannot compare the instance's clock with it before a \
                 run; use ZooKeeper, or leave the key out or set it to -1 (ElasticJob's \
                 default, no check), and keep the hosts' clocks in step (NTP)",
                self.max_time_diff_seconds
            )
        })
    }

    /// Checks a configuration built in code against the builtin strategy names.
    pub fn validate(&self) -> Result<(), JobConfigError> {
        self.validate_with(&KnownTypes::default())
    }

    /// Checks a configuration, accepting the extra strategy names in `known`.
    pub fn validate_with(&self, known: &KnownTypes) -> Result<(), JobConfigError> {
        let mut problems = Vec::new();
        self.check(known, &mut problems);
        if problems.is_empty() {
            Ok(())
        } else {
            Err(JobConfigError::Invalid(problems))
        }
    }

    fn check(&self, known: &KnownTypes, problems: &mut Vec<ConfigProblem>) {
        let mut report = |key: &'static str, problem: Problem| {
            problems.push(ConfigProblem {
                job: self.job_name.clone(),
                key,
                problem,
            })
        };
        if let Err(p) = check_job_name(&self.job_name) {
            report("jobName", p);
        }
        let total = self.sharding_total_count;
        if total == 0 {
            report("shardingTotalCount", Problem::NotPositive(0));
        } else if total > MAX_SHARDING_TOTAL_COUNT {
            report(
                "shardingTotalCount",
                Problem::TooLarge(total.into(), MAX_SHARDING_TOTAL_COUNT.into()),
            );
        }
        if total > 0 {
            for &item in self.sharding_item_parameters.keys() {
                if item >= total {
                    report(
                        "shardingItemParameters",
                        Problem::ItemOutOfRange { item, total },
                    );
                }
            }
        }
        if self.max_time_diff_seconds < -1 || self.max_time_diff_seconds == 0 {
            report(
                "maxTimeDiffSeconds",
                Problem::BadTimeDiff(self.max_time_diff_seconds.into()),
            );
        }
        if !known.has_strategy(&self.job_sharding_strategy_type) {
            let reason = match self.job_sharding_strategy_type.parse::<BuiltinStrategy>() {
                Err(e) => e.to_string(),
                Ok(_) => String::new(),
            };
            report(
                "jobShardingStrategyType",
                Problem::UnknownType {
                    value: self.job_sharding_strategy_type.clone(),
                    reason,
                },
            );
        }
        if self.failover && !self.monitor_execution {
            // Accepted by ElasticJob, where failover then silently never happens: without
            // running markers nobody can tell which items a dead instance was running.
            report("failover", Problem::NeedsMonitorExecution);
        }
        for name in &self.job_listener_types {
            if name.trim().is_empty() {
                report("jobListenerTypes", Problem::Empty);
            }
        }
        for key in self.props.keys() {
            if key.trim().is_empty() {
                report("props", Problem::Empty);
            }
        }
        if let Err(p) = self.misfire_catchup() {
            report(MISFIRE_CATCHUP_PROP, p);
        }
        if let Some(v) = self.props.get(COMPAT_PROP) {
            if v.parse::<ElasticJobCompat>().is_err() {
                report(
                    COMPAT_PROP,
                    Problem::WrongType {
                        expected: "an ElasticJob version: 3.0.4 (the default, for 3.0.1 to \
                                   3.0.4) or 3.0.5",
                        found: format!("{v:?}"),
                    },
                );
            }
        }
    }

    /// Reads one job from ElasticJob's YAML (camelCase keys; missing keys take the defaults).
    pub fn from_yaml(yaml: &str, strictness: Strictness) -> Result<JobConfig, JobConfigError> {
        Self::from_yaml_with(yaml, strictness, &KnownTypes::default())
    }

    /// [`JobConfig::from_yaml`], accepting the extra strategy names in `known`.
    pub fn from_yaml_with(
        yaml: &str,
        strictness: Strictness,
        known: &KnownTypes,
    ) -> Result<JobConfig, JobConfigError> {
        let value = parse_yaml(yaml)?;
        if value.is_null() {
            return Err(JobConfigError::Empty);
        }
        Self::from_yaml_value(&value, strictness, known)
    }

    /// Reads one job from a YAML value already parsed (ElasticJob's camelCase keys).
    pub fn from_yaml_value(
        value: &Value,
        strictness: Strictness,
        known: &KnownTypes,
    ) -> Result<JobConfig, JobConfigError> {
        let mut problems = Vec::new();
        let config = from_value(value, strictness, known, None, &mut problems);
        match config {
            Some(config) if problems.is_empty() => Ok(config),
            _ => Err(JobConfigError::Invalid(problems)),
        }
    }

    /// Writes every key as ElasticJob's YAML, keys in alphabetical order as ElasticJob writes
    /// them. Left out: `cron` for a job without a schedule, `label` when unset, and the
    /// executor type when it is the default `CPU`; a set executor type is written under the
    /// key of [`JobConfig::elasticjob_compat`]'s version. UTC is written `GMT`. So every key
    /// written is one ElasticJob's `JobConfigurationPOJO` of that version reads (see
    /// [`compat`]).
    pub fn to_yaml(&self) -> String {
        let mut m = BTreeMap::<&str, Value>::new();
        let s = |v: &str| Value::String(v.to_owned());
        if let Some(cron) = &self.cron {
            m.insert("cron", s(cron.as_str()));
        }
        m.insert("description", s(&self.description));
        m.insert("disabled", Value::Bool(self.disabled));
        m.insert("failover", Value::Bool(self.failover));
        m.insert("jobErrorHandlerType", s(self.job_error_handler_type.name()));
        let executor = self.job_executor_thread_pool_size_provider_type;
        if executor != ExecutorType::default() {
            m.insert(self.elasticjob_compat().executor_key(), s(executor.name()));
        }
        m.insert(
            "jobExtraConfigurations",
            Value::Sequence(self.job_extra_configurations.clone()),
        );
        m.insert(
            "jobListenerTypes",
            Value::Sequence(self.job_listener_types.iter().map(|t| s(t)).collect()),
        );
        m.insert("jobName", s(&self.job_name));
        m.insert("jobParameter", s(&self.job_parameter));
        m.insert(
            "jobShardingStrategyType",
            s(&self.job_sharding_strategy_type),
        );
        if let Some(label) = &self.label {
            m.insert("label", s(label));
        }
        m.insert(
            "maxTimeDiffSeconds",
            Value::Number(self.max_time_diff_seconds.into()),
        );
        m.insert("misfire", Value::Bool(self.misfire));
        m.insert("monitorExecution", Value::Bool(self.monitor_execution));
        m.insert("overwrite", Value::Bool(self.overwrite));
        let mut props = Mapping::new();
        for (k, v) in &self.props {
            props.insert(s(k), s(v));
        }
        m.insert("props", Value::Mapping(props));
        m.insert(
            "reconcileIntervalMinutes",
            Value::Number(self.reconcile_interval_minutes.into()),
        );
        m.insert(
            "shardingItemParameters",
            s(&format_item_parameters(&self.sharding_item_parameters)),
        );
        m.insert(
            "shardingTotalCount",
            Value::Number(self.sharding_total_count.into()),
        );
        m.insert("staticSharding", Value::Bool(self.static_sharding));
        m.insert("timeZone", s(&time_zone_text(&self.time_zone)));
        let mapping: Mapping = m.into_iter().map(|(k, v)| (s(k), v)).collect();
        // Serializing a mapping of strings, numbers, booleans and values read from YAML
        // cannot fail; should the library ever disagree, fall back to an empty document
        // rather than panic.
        serde_yaml_ng::to_string(&Value::Mapping(mapping)).unwrap_or_default()
    }
}

/// What `timeZone` is written as: UTC as `GMT` (ElasticJob's scheduler refuses every zone not
/// written as a GMT offset), anything else by its name.
fn time_zone_text(zone: &JobTimeZone) -> String {
    if *zone == JobTimeZone::utc() {
        UTC_AS_GMT.to_owned()
    } else {
        zone.to_string()
    }
}

/// UTC as ElasticJob's scheduler accepts it.
const UTC_AS_GMT: &str = "GMT";

/// Names accepted for types that can be extended at run time.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KnownTypes {
    /// Custom sharding strategy names, besides the builtin ones.
    pub strategies: BTreeSet<String>,
}

impl KnownTypes {
    fn has_strategy(&self, name: &str) -> bool {
        name.parse::<BuiltinStrategy>().is_ok() || self.strategies.contains(name)
    }
}

/// How to treat keys that are not ElasticJob's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strictness {
    /// An unknown key is a problem (files written by people).
    Strict,
    /// Unknown keys are ignored (the registry copy, which a newer version may have written).
    Lenient,
}

/// A configuration problem: which job, which key, what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigProblem {
    /// The job's name as written (may be empty or itself the problem), or `#N` (its position
    /// in a file, from 1) when the name is missing.
    pub job: String,
    /// The YAML key at fault; empty for an unknown key (which [`Problem::UnknownKey`] names).
    pub key: &'static str,
    /// What is wrong.
    pub problem: Problem,
}

impl fmt::Display for ConfigProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.key.is_empty() {
            write!(f, "job {:?}: {}", self.job, self.problem)
        } else {
            write!(f, "job {:?}: {}: {}", self.job, self.key, self.problem)
        }
    }
}

/// What is wrong with one key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Problem {
    /// A required key is missing.
    #[error("is required")]
    Missing,
    /// The value is empty or blank where text is required.
    #[error("must not be empty")]
    Empty,
    /// The value has the wrong YAML type.
    #[error("expected {expected}, found {found}")]
    WrongType {
        /// What the key takes.
        expected: &'static str,
        /// A short rendering of what was found.
        found: String,
    },
    /// A job name that cannot be a registry node or would break task ids.
    #[error("{0}")]
    BadJobName(String),
    /// A count that must be positive.
    #[error("must be greater than 0, found {0}")]
    NotPositive(i64),
    /// A number that must not be negative.
    #[error("must not be negative, found {0} (use 0 to turn it off)")]
    Negative(i64),
    /// A number above the accepted maximum.
    #[error("{0} is more than the maximum {1}")]
    TooLarge(i64, i64),
    /// `maxTimeDiffSeconds` other than -1 or a positive number.
    #[error("must be -1 (no check) or a positive number of seconds, found {0}")]
    BadTimeDiff(i64),
    /// A malformed `shardingItemParameters` entry.
    #[error("entry {entry:?}: {reason}")]
    BadItemParameter {
        /// The entry as written.
        entry: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// Two parameters for one item.
    #[error("item {0} is given twice")]
    DuplicateItem(u32),
    /// A parameter for an item that does not exist.
    #[error("item {item} is out of range: items are 0..{total} (shardingTotalCount is {total})")]
    ItemOutOfRange {
        /// The item.
        item: u32,
        /// The item count.
        total: u32,
    },
    /// An invalid cron expression.
    #[error("{0}")]
    BadCron(String),
    /// An unknown time zone.
    #[error("{0}")]
    BadTimeZone(String),
    /// An unknown strategy, executor or error-handler type.
    #[error("unknown type {value:?}{}", if reason.is_empty() { String::new() } else { format!(": {reason}") })]
    UnknownType {
        /// The type name as written.
        value: String,
        /// Why it is not accepted, with the valid names.
        reason: String,
    },
    /// `failover` on while `monitorExecution` is off.
    #[error("needs monitorExecution: true (without running markers it cannot work)")]
    NeedsMonitorExecution,
    /// A key ElasticJob does not have (in strict mode). The problem's `key` is empty: the
    /// unknown key is named here.
    #[error("unknown key {key:?}{}", suggestion.map(|s| format!(" (did you mean `{s}`?)")).unwrap_or_default())]
    UnknownKey {
        /// The key as written.
        key: String,
        /// The known key nearest to it, when it looks like a typo of one.
        suggestion: Option<&'static str>,
    },
    /// Two keys that say the same thing say different things (the executor type under both
    /// ElasticJob versions' names).
    #[error("is {this}, but {other} is {that}: write one of the two keys")]
    ConflictingKey {
        /// The other key.
        other: &'static str,
        /// This key's value.
        this: &'static str,
        /// The other key's value.
        that: &'static str,
    },
    /// Two jobs in one file share a name.
    #[error("another job in this file has the same name")]
    DuplicateJob,
}

/// Why a configuration could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JobConfigError {
    /// The text is not YAML, or not of the expected shape.
    #[error("malformed YAML: {0}")]
    Yaml(String),
    /// The text holds no YAML node at all (for the registry's `config` node: the node is
    /// empty), so there is no job configuration to read.
    #[error("the config node is empty (it holds no job configuration)")]
    Empty,
    /// The YAML was read, and these keys are wrong. Never empty.
    #[error("{} problem(s): {}", .0.len(), join_problems(.0))]
    Invalid(Vec<ConfigProblem>),
}

impl JobConfigError {
    /// The individual problems (a YAML error has none).
    pub fn problems(&self) -> &[ConfigProblem] {
        match self {
            JobConfigError::Invalid(p) => p,
            JobConfigError::Yaml(_) | JobConfigError::Empty => &[],
        }
    }
}

fn join_problems(problems: &[ConfigProblem]) -> String {
    problems
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

mod read;
pub use read::{KEYS, parse_jobs_file};
use read::{from_value, parse_yaml};

/// Parses `shardingItemParameters` as ElasticJob does: entries separated by `,`, each
/// `item=parameter` with surrounding spaces trimmed; the parameter cannot contain `=` or `,`.
/// Trailing empty entries are ignored (Java's `split` drops them). Out-of-range items are
/// checked by validation, which knows the item count.
pub fn parse_item_parameters(text: &str) -> Result<BTreeMap<u32, String>, Problem> {
    let mut out = BTreeMap::new();
    if text.trim().is_empty() {
        return Ok(out);
    }
    let mut entries: Vec<&str> = text.split(',').collect();
    while entries.last().is_some_and(|e| e.is_empty()) {
        entries.pop();
    }
    for raw in entries {
        let entry = raw.trim();
        let bad = |reason| Problem::BadItemParameter {
            entry: raw.to_owned(),
            reason,
        };
        let mut parts = entry.split('=');
        let (Some(item), Some(param), None) = (parts.next(), parts.next(), parts.next()) else {
            return Err(bad("expected item=parameter, with exactly one '='"));
        };
        let item = item.trim();
        let param = param.trim();
        if param.is_empty() {
            return Err(bad("the parameter is empty"));
        }
        let item: u32 = match item.parse::<i64>() {
            Ok(n) if n < 0 => return Err(bad("the item number is negative")),
            Ok(n) => u32::try_from(n).map_err(|_| bad("the item number is too large"))?,
            Err(_) => return Err(bad("the item is not a whole number")),
        };
        if out.insert(item, param.to_owned()).is_some() {
            return Err(Problem::DuplicateItem(item));
        }
    }
    Ok(out)
}

/// Writes item parameters back as `0=a,1=b`.
pub fn format_item_parameters(params: &BTreeMap<u32, String>) -> String {
    params
        .iter()
        .map(|(i, p)| format!("{i}={p}"))
        .collect::<Vec<_>>()
        .join(",")
}

mod names;
pub use names::{
    NamespaceError, ZOOKEEPER_SYSTEM_NODE, check_job_name, check_namespace, nearest_name,
};

#[cfg(test)]
mod tests;
