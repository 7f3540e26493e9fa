//! Reading jobs from YAML: a file of jobs, and one job's mapping key by key, every problem
//! reported with its key (ElasticJob's `JobConfigurationPOJO` keys, shardjob's own beside them).

#[allow(clippy::wildcard_imports)]
use super::*;

/// Reads a file of jobs: a YAML list of job mappings, or a single job mapping. Every problem of
/// every job is reported; two jobs with the same name are a problem.
pub fn parse_jobs_file(
    yaml: &str,
    strictness: Strictness,
    known: &KnownTypes,
) -> Result<Vec<JobConfig>, JobConfigError> {
    let value = parse_yaml(yaml)?;
    let entries: Vec<&Value> = match &value {
        Value::Sequence(jobs) => jobs.iter().collect(),
        Value::Mapping(_) => vec![&value],
        other => {
            return Err(JobConfigError::Yaml(format!(
                "expected a list of jobs or one job (a mapping), found {}",
                describe(other)
            )));
        }
    };
    if entries.is_empty() {
        return Err(JobConfigError::Yaml("the file lists no jobs".to_owned()));
    }
    let mut problems = Vec::new();
    let mut jobs = Vec::new();
    for (i, entry) in entries.iter().enumerate() {
        if let Some(job) = from_value(entry, strictness, known, Some(i + 1), &mut problems) {
            jobs.push(job);
        }
    }
    let mut seen = BTreeSet::new();
    for job in &jobs {
        if !seen.insert(job.job_name.as_str()) {
            problems.push(ConfigProblem {
                job: job.job_name.clone(),
                key: "jobName",
                problem: Problem::DuplicateJob,
            });
        }
    }
    if problems.is_empty() {
        Ok(jobs)
    } else {
        Err(JobConfigError::Invalid(problems))
    }
}

pub(super) fn parse_yaml(yaml: &str) -> Result<Value, JobConfigError> {
    let mut value: Value =
        serde_yaml_ng::from_str(yaml).map_err(|e| JobConfigError::Yaml(e.to_string()))?;
    value
        .apply_merge()
        .map_err(|e| JobConfigError::Yaml(e.to_string()))?;
    Ok(value)
}

/// The top-level keys of a job's configuration that ElasticJob 3.0.x writes, with both names
/// of the executor key (`jobExecutorServiceHandlerType` from 3.0.0-alpha to 3.0.4,
/// `jobExecutorThreadPoolSizeProviderType` in 3.0.5; see [`compat`]). Job files, the
/// operation API and the reader of the registry's copy all know a job's keys from this one
/// list.
pub const KEYS: &[&str] = &[
    "cron",
    "description",
    "disabled",
    "failover",
    "jobErrorHandlerType",
    "jobExecutorServiceHandlerType",
    "jobExecutorThreadPoolSizeProviderType",
    "jobExtraConfigurations",
    "jobListenerTypes",
    "jobName",
    "jobParameter",
    "jobShardingStrategyType",
    "label",
    "maxTimeDiffSeconds",
    "misfire",
    "monitorExecution",
    "overwrite",
    "props",
    "reconcileIntervalMinutes",
    "shardingItemParameters",
    "shardingTotalCount",
    "staticSharding",
    "timeZone",
];

/// Reads one job mapping; pushes problems; returns the config when it could be built (it may
/// still have problems, which `check` found).
pub(super) fn from_value(
    value: &Value,
    strictness: Strictness,
    known: &KnownTypes,
    position: Option<usize>,
    problems: &mut Vec<ConfigProblem>,
) -> Option<JobConfig> {
    let Some(map) = value.as_mapping() else {
        problems.push(ConfigProblem {
            job: position.map(|p| format!("#{p}")).unwrap_or_default(),
            key: "jobName",
            problem: Problem::WrongType {
                expected: "a mapping of job keys",
                found: describe(value),
            },
        });
        return None;
    };
    let name_value = map.get("jobName");
    let job = match name_value.and_then(Value::as_str) {
        Some(name) => name.to_owned(),
        None => position.map(|p| format!("#{p}")).unwrap_or_default(),
    };
    let start = problems.len();
    let mut r = Reader {
        map,
        job: &job,
        problems,
    };

    if strictness == Strictness::Strict {
        for key in map.keys() {
            match key.as_str() {
                Some(k) if KEYS.contains(&k) => {}
                _ => {
                    let k = key.as_str().map_or_else(|| describe(key), str::to_owned);
                    let suggestion = nearest_name(&k, KEYS);
                    r.problem("", Problem::UnknownKey { key: k, suggestion });
                }
            }
        }
    }

    let mut c = JobConfig::new(String::new(), 0);
    match name_value {
        None | Some(Value::Null) => r.problem("jobName", Problem::Missing),
        Some(_) => {
            if let Some(name) = r.string("jobName") {
                c.job_name = name;
            }
        }
    }
    match map.get("shardingTotalCount") {
        None | Some(Value::Null) => r.problem("shardingTotalCount", Problem::Missing),
        Some(_) => {
            if let Some(n) = r.int("shardingTotalCount") {
                if n <= 0 {
                    r.problem("shardingTotalCount", Problem::NotPositive(n));
                } else if n > i64::from(MAX_SHARDING_TOTAL_COUNT) {
                    r.problem(
                        "shardingTotalCount",
                        Problem::TooLarge(n, MAX_SHARDING_TOTAL_COUNT.into()),
                    );
                } else {
                    c.sharding_total_count = n as u32;
                }
            }
        }
    }
    if let Some(text) = r.opt_string("cron").filter(|t| !t.trim().is_empty()) {
        match CronExpr::parse(&text) {
            Ok(cron) => c.cron = Some(cron),
            Err(e) => r.problem("cron", Problem::BadCron(e.to_string())),
        }
    }
    if let Some(text) = r.opt_string("timeZone").filter(|t| !t.trim().is_empty()) {
        // `GMT` is UTC: read it as the default zone, so that the default round-trips.
        let parsed = if text.trim() == UTC_AS_GMT {
            Ok(JobTimeZone::utc())
        } else {
            JobTimeZone::parse(&text)
        };
        match parsed {
            Ok(tz) => c.time_zone = tz,
            Err(e) => r.problem("timeZone", Problem::BadTimeZone(e.to_string())),
        }
    }
    if let Some(text) = r.opt_string("shardingItemParameters") {
        match parse_item_parameters(&text) {
            Ok(params) => c.sharding_item_parameters = params,
            Err(problem) => r.problem("shardingItemParameters", problem),
        }
    }
    if let Some(v) = r.opt_string("jobParameter") {
        c.job_parameter = v;
    }
    if let Some(v) = r.opt_string("description") {
        c.description = v;
    }
    if let Some(v) = r.opt_string("label") {
        c.label = Some(v);
    }
    for (key, slot) in [
        ("monitorExecution", &mut c.monitor_execution),
        ("failover", &mut c.failover),
        ("misfire", &mut c.misfire),
        ("disabled", &mut c.disabled),
        ("overwrite", &mut c.overwrite),
        ("staticSharding", &mut c.static_sharding),
    ] {
        if let Some(b) = r.opt_bool(key) {
            *slot = b;
        }
    }
    if let Some(n) = r.opt_int("maxTimeDiffSeconds") {
        match i32::try_from(n) {
            Ok(n) => c.max_time_diff_seconds = n,
            Err(_) => r.problem("maxTimeDiffSeconds", Problem::TooLarge(n, i32::MAX.into())),
        }
    }
    if let Some(n) = r.opt_int("reconcileIntervalMinutes") {
        match u32::try_from(n) {
            Ok(n) => c.reconcile_interval_minutes = n,
            Err(_) if n < 0 => r.problem("reconcileIntervalMinutes", Problem::Negative(n)),
            Err(_) => r.problem(
                "reconcileIntervalMinutes",
                Problem::TooLarge(n, u32::MAX.into()),
            ),
        }
    }
    if let Some(name) = r
        .opt_string("jobShardingStrategyType")
        .filter(|t| !t.is_empty())
    {
        c.job_sharding_strategy_type = name;
    }
    // The executor type is under 3.0.4's key (3.0.0-alpha to 3.0.4) or 3.0.5's: both are
    // read. Both present with different types is a problem (no ElasticJob reads such a node).
    let mut executors: Vec<(&'static str, ExecutorType)> = Vec::new();
    for key in [compat::EXECUTOR_KEY_3_0_4, compat::EXECUTOR_KEY_3_0_5] {
        if let Some(name) = r.opt_string(key).filter(|t| !t.is_empty()) {
            match name.parse() {
                Ok(t) => executors.push((key, t)),
                Err(reason) => r.problem(
                    key,
                    Problem::UnknownType {
                        value: name,
                        reason,
                    },
                ),
            }
        }
    }
    match executors.as_slice() {
        [] => {}
        [(_, t)] => c.job_executor_thread_pool_size_provider_type = *t,
        [(_, a), (other, b), ..] => {
            if a == b {
                c.job_executor_thread_pool_size_provider_type = *a;
            } else {
                r.problem(
                    other,
                    Problem::ConflictingKey {
                        other: compat::EXECUTOR_KEY_3_0_4,
                        this: b.name(),
                        that: a.name(),
                    },
                );
            }
        }
    }
    if let Some(name) = r
        .opt_string("jobErrorHandlerType")
        .filter(|t| !t.is_empty())
    {
        match name.parse() {
            Ok(t) => c.job_error_handler_type = t,
            Err(reason) => r.problem(
                "jobErrorHandlerType",
                Problem::UnknownType {
                    value: name,
                    reason,
                },
            ),
        }
    }
    if let Some(list) = r.opt_list("jobListenerTypes") {
        for item in list {
            match scalar_text(item) {
                Some(name) => c.job_listener_types.push(name),
                None => r.problem(
                    "jobListenerTypes",
                    Problem::WrongType {
                        expected: "a list of names",
                        found: describe(item),
                    },
                ),
            }
        }
    }
    if let Some(list) = r.opt_list("jobExtraConfigurations") {
        c.job_extra_configurations = list.to_vec();
    }
    match map.get("props") {
        None | Some(Value::Null) => {}
        Some(Value::Mapping(props)) => {
            for (k, v) in props {
                match (scalar_text(k), scalar_text(v)) {
                    (Some(k), Some(v)) => {
                        c.props.insert(k, v);
                    }
                    _ => r.problem(
                        "props",
                        Problem::WrongType {
                            expected: "a mapping of text keys to text values",
                            found: format!("{}: {}", describe(k), describe(v)),
                        },
                    ),
                }
            }
        }
        Some(other) => {
            let found = describe(other);
            r.problem(
                "props",
                Problem::WrongType {
                    expected: "a mapping",
                    found,
                },
            )
        }
    }

    // Validation of the assembled value (names, ranges, cross-key rules). Keys that could not
    // be read were already reported, and hold defaults now: checking them again would repeat
    // or invent a problem.
    let unreadable: BTreeSet<&'static str> = problems[start..].iter().map(|p| p.key).collect();
    let mut checked = Vec::new();
    c.check(known, &mut checked);
    problems.extend(checked.into_iter().filter(|p| !unreadable.contains(p.key)));
    Some(c)
}

struct Reader<'a> {
    map: &'a Mapping,
    job: &'a str,
    problems: &'a mut Vec<ConfigProblem>,
}

impl<'a> Reader<'a> {
    fn problem(&mut self, key: &'static str, problem: Problem) {
        self.problems.push(ConfigProblem {
            job: self.job.to_owned(),
            key,
            problem,
        });
    }

    fn present(&self, key: &str) -> Option<&Value> {
        self.map.get(key).filter(|v| !v.is_null())
    }

    fn string(&mut self, key: &'static str) -> Option<String> {
        self.opt_string(key)
    }

    fn opt_string(&mut self, key: &'static str) -> Option<String> {
        let v = self.present(key)?;
        match scalar_text(v) {
            Some(s) => Some(s),
            None => {
                let found = describe(v);
                self.problem(
                    key,
                    Problem::WrongType {
                        expected: "text",
                        found,
                    },
                );
                None
            }
        }
    }

    fn opt_bool(&mut self, key: &'static str) -> Option<bool> {
        let v = self.present(key)?;
        match v {
            Value::Bool(b) => Some(*b),
            Value::String(s) if s.eq_ignore_ascii_case("true") => Some(true),
            Value::String(s) if s.eq_ignore_ascii_case("false") => Some(false),
            other => {
                let found = describe(other);
                self.problem(
                    key,
                    Problem::WrongType {
                        expected: "true or false",
                        found,
                    },
                );
                None
            }
        }
    }

    fn int(&mut self, key: &'static str) -> Option<i64> {
        self.opt_int(key)
    }

    fn opt_int(&mut self, key: &'static str) -> Option<i64> {
        let v = self.present(key)?;
        let n = match v {
            Value::Number(n) => n.as_i64(),
            Value::String(s) => s.trim().parse::<i64>().ok(),
            _ => None,
        };
        if n.is_none() {
            let found = describe(v);
            self.problem(
                key,
                Problem::WrongType {
                    expected: "a whole number",
                    found,
                },
            );
        }
        n
    }

    fn opt_list(&mut self, key: &'static str) -> Option<&'a [Value]> {
        let map = self.map;
        match map.get(key) {
            None | Some(Value::Null) => None,
            Some(Value::Sequence(items)) => Some(items.as_slice()),
            Some(other) => {
                let found = describe(other);
                self.problem(
                    key,
                    Problem::WrongType {
                        expected: "a list",
                        found,
                    },
                );
                None
            }
        }
    }
}

fn scalar_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

fn describe(v: &Value) -> String {
    match v {
        Value::Null => "nothing (null)".to_owned(),
        Value::Bool(b) => format!("the boolean {b}"),
        Value::Number(n) => format!("the number {n}"),
        Value::String(s) if s.chars().count() > 40 => {
            format!("the text {:?}…", s.chars().take(40).collect::<String>())
        }
        Value::String(s) => format!("the text {s:?}"),
        Value::Sequence(_) => "a list".to_owned(),
        Value::Mapping(_) => "a mapping".to_owned(),
        Value::Tagged(t) => format!("a value tagged {}", t.tag),
    }
}
