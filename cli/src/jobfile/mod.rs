//! Job files for `shardjob run` and `shardjob config check`: config-only jobs (SCRIPT, HTTP)
//! with no code. Both commands read a file through [`load`], so a file that passes its check
//! is a file `run` accepts, and the check says what `run` will do.
//!
//! Two shapes are read:
//!
//! - a list of jobs in ElasticJob's keys (or one job); a job's type follows from its props:
//!   `script.command.line` makes a SCRIPT job, `http.uri` an HTTP job;
//! - the `application.yml` of ElasticJob's Spring Boot starter: `elasticjob.regCenter`
//!   (every key of ElasticJob's ZooKeeper configuration) and `elasticjob.jobs.<jobName>` with
//!   `elasticJobType: SCRIPT|HTTP` and the usual job keys. Every `elasticjob.*` key may be
//!   written camelCase, kebab-case or snake_case, as Spring's relaxed binding allows
//!   (`regCenter`, `reg-center`, `reg_center`); other top-level keys belong to other Spring
//!   components and are listed as not read.
//!
//! A Spring file may also name the job history's database: ElasticJob's `elasticjob.tracing`
//! with Spring's `spring.datasource`, or shardjob's top-level `tracing` ([`tracing`]).
//!
//! Strict everywhere: an unknown key is an error with its line and column and the nearest known
//! name; props are checked against the job's type ([`props`]); names against both registries'
//! rules. `elasticjob.dump.port` (with `enabled`, as ElasticJob's starter reads them, and
//! shardjob's `address`, `127.0.0.1` by default) opens the instance's dump port
//! ([`shardjob::runtime::dump`]); shardjob's `elasticjob.metrics.port` (same keys) opens the
//! Prometheus metrics endpoint ([`shardjob::metrics`]); `elasticjob.tracing` with
//! `spring.datasource` (or `tracing.url`) records the job history. The `EMAIL`, `WECHAT` and
//! `DINGTALK` error handlers' props are checked with the handler ([`shardjob::notify`]). What
//! cannot be honoured is refused by name (the `WEBHOOK` error handler, listeners that are not
//! built in), except a job given as a Java class (`elasticJobClass`), which is skipped with a
//! warning so the jobs beside it can run (`shardjob run --strict` refuses the file instead).

pub mod keys;
pub mod positions;
pub mod props;
pub mod tracing;

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use serde_yaml_ng::{Mapping, Value};
use shardjob_core::JobConfig;
use shardjob_core::config::{self, ErrorHandlerType, KnownTypes, Strictness};

use keys::{did_you_mean, relaxed};
use positions::{Location, Step, locate};
use shardjob::jobs::PROP_COMMAND_LINE;
use shardjob::registry_url::{Credentials, RegistryUrl};

pub use shardjob::jobs::http::PROP_URI as PROP_HTTP_URI;

/// The kind of a config-only job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileJobKind {
    /// `SCRIPT`.
    Script,
    /// `HTTP`.
    Http,
}

impl FileJobKind {
    /// ElasticJob's name of the type.
    pub fn name(self) -> &'static str {
        match self {
            FileJobKind::Script => "SCRIPT",
            FileJobKind::Http => "HTTP",
        }
    }

    /// The cargo feature that builds the kind in (of this crate and of the library).
    pub fn feature(self) -> &'static str {
        match self {
            FileJobKind::Script => "script",
            FileJobKind::Http => "http",
        }
    }

    /// Whether this build runs jobs of the kind.
    pub fn built_in(self) -> bool {
        match self {
            FileJobKind::Script => cfg!(feature = "script"),
            FileJobKind::Http => cfg!(feature = "http"),
        }
    }
}

/// Which shape the file has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// A list of jobs (or one job) in ElasticJob's keys.
    List,
    /// ElasticJob's Spring Boot `elasticjob:` shape.
    Spring,
}

/// A job `run` will run.
#[derive(Debug, Clone, PartialEq)]
pub struct FileJob {
    /// Its configuration.
    pub config: JobConfig,
    /// Its kind.
    pub kind: FileJobKind,
}

/// A note about the file: where, and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    /// Where in the file, when known.
    pub at: Option<Location>,
    /// What.
    pub message: String,
}

impl fmt::Display for Note {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.at {
            Some(at) => write!(f, "{at}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

/// A job of the file that `run` will not run, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkippedJob {
    /// The job's name.
    pub name: String,
    /// Why, and where.
    pub why: Note,
}

/// The registry a Spring file names (`elasticjob.regCenter`), with its connection settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileRegistry {
    /// The ZooKeeper URL (with the `digest` credentials).
    pub url: RegistryUrl,
    /// `sessionTimeoutMilliseconds` (0 or absent: the default).
    pub session_timeout: Option<Duration>,
    /// `connectionTimeoutMilliseconds` (0 or absent: the default).
    pub connection_timeout: Option<Duration>,
    /// `baseSleepTimeMilliseconds`: the first pause between connection attempts.
    pub base_sleep: Option<Duration>,
    /// `maxSleepTimeMilliseconds`: the longest pause between connection attempts.
    pub max_sleep: Option<Duration>,
    /// `maxRetries`: the most connection retries at start-up.
    pub max_retries: Option<u32>,
}

/// A job file, read.
#[derive(Debug, Clone, PartialEq)]
pub struct JobFile {
    /// The file's shape.
    pub shape: Shape,
    /// The jobs `run` runs.
    pub jobs: Vec<FileJob>,
    /// The jobs `run` skips (Java-class jobs), with why.
    pub skipped: Vec<SkippedJob>,
    /// The registry the file names.
    pub registry: Option<FileRegistry>,
    /// Where the dump port listens (`elasticjob.dump`), if the file turns it on.
    pub dump: Option<SocketAddr>,
    /// Where the Prometheus metrics endpoint listens (`elasticjob.metrics`, shardjob's:
    /// `port`, `enabled`, `address` as for the dump port), if the file turns it on.
    pub metrics: Option<SocketAddr>,
    /// Settings read but not acted on, and the like.
    pub warnings: Vec<Note>,
    /// The job history settings (`elasticjob.tracing` with `spring.datasource`, or
    /// `tracing.url`; see [`tracing`]).
    pub tracing: Option<tracing::FileTracing>,
}

/// Reads a job file. `Err` holds every problem, each with its place when known.
pub fn load(text: &str) -> Result<JobFile, Vec<Note>> {
    let mut value: Value = serde_yaml_ng::from_str(text).map_err(|e| {
        vec![Note {
            at: e.location().map(|l| Location {
                line: l.line(),
                column: l.column(),
            }),
            message: format!("not valid YAML: {e}"),
        }]
    })?;
    value.apply_merge().map_err(|e| {
        vec![Note {
            at: None,
            message: format!("bad YAML merge (<<): {e}"),
        }]
    })?;
    let mut r = Reader {
        text,
        problems: Vec::new(),
        warnings: Vec::new(),
        skipped: Vec::new(),
        jobs: Vec::new(),
        dump: None,
        metrics: None,
        elasticjob_tracing: None,
    };
    let mut file_tracing = None;
    let spring = value.as_mapping().and_then(|m| m.get("elasticjob"));
    let (shape, registry) = match (spring, &value) {
        (Some(root), Value::Mapping(top)) => {
            for key in top.keys() {
                // `spring` and `tracing` are read for the job history.
                if !matches!(key.as_str(), Some("elasticjob" | "spring" | "tracing")) {
                    let k = text_of(key);
                    r.warn(
                        &[Step::Key(k.clone())],
                        format!(
                            "top-level key `{k}` is not read by shardjob (only `elasticjob` is)"
                        ),
                    );
                }
            }
            let registry = r.spring(root);
            let elasticjob_tracing = r.elasticjob_tracing.take();
            file_tracing = r.tracing(
                top,
                elasticjob_tracing
                    .as_ref()
                    .map(|(path, value)| (path.clone(), value)),
            );
            (Shape::Spring, registry)
        }
        _ => {
            r.list(&value);
            (Shape::List, None)
        }
    };
    let mut seen = BTreeMap::new();
    for job in &r.jobs {
        *seen.entry(job.config.job_name.clone()).or_insert(0) += 1;
    }
    for (name, n) in seen {
        if n > 1 {
            r.problems.push(Note {
                at: None,
                message: format!("job {name:?}: {n} jobs in this file have this name"),
            });
        }
    }
    if r.problems.is_empty() && r.jobs.is_empty() && r.skipped.is_empty() {
        r.problems.push(Note {
            at: None,
            message: "the file lists no jobs".to_owned(),
        });
    }
    if r.problems.is_empty() {
        Ok(JobFile {
            shape,
            jobs: r.jobs,
            skipped: r.skipped,
            registry,
            dump: r.dump,
            metrics: r.metrics,
            warnings: r.warnings,
            tracing: file_tracing,
        })
    } else {
        Err(r.problems)
    }
}

/// The keys of `elasticjob`.
const ROOT_KEYS: &[&str] = &["regCenter", "jobs", "tracing", "dump", "metrics"];

/// The keys of `elasticjob.regCenter` (ElasticJob's `ZookeeperConfiguration`).
const REG_CENTER_KEYS: &[&str] = &[
    "serverLists",
    "namespace",
    "baseSleepTimeMilliseconds",
    "maxSleepTimeMilliseconds",
    "maxRetries",
    "sessionTimeoutMilliseconds",
    "connectionTimeoutMilliseconds",
    "digest",
];

/// The keys of a job, as ElasticJob 3.0.x writes them.
const JOB_KEYS: &[&str] = shardjob_core::config::KEYS;

/// The keys of `elasticjob.dump`: ElasticJob's starter's `port` and `enabled`, and shardjob's
/// `address` (where to bind; ElasticJob binds every interface). `elasticjob.metrics`
/// (shardjob's) has the same keys.
const DUMP_KEYS: &[&str] = &["port", "enabled", "address"];

/// The keys of a Spring Boot job entry that are not job configuration.
const SPRING_JOB_KEYS: &[&str] = &["elasticJobType", "elasticJobClass", "jobBootstrapBeanName"];

/// The error handlers the runtime builds in.
const BUILT_IN_HANDLERS: &[ErrorHandlerType] = &[
    ErrorHandlerType::Log,
    ErrorHandlerType::Throw,
    ErrorHandlerType::Ignore,
    ErrorHandlerType::Email,
    ErrorHandlerType::Wechat,
    ErrorHandlerType::Dingtalk,
];

struct Reader<'t> {
    text: &'t str,
    problems: Vec<Note>,
    warnings: Vec<Note>,
    skipped: Vec<SkippedJob>,
    jobs: Vec<FileJob>,
    dump: Option<SocketAddr>,
    metrics: Option<SocketAddr>,
    /// `elasticjob.tracing`, read after the rest ([`tracing`]).
    elasticjob_tracing: Option<(Vec<Step>, Value)>,
}

fn text_of(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        other => format!("{other:?}"),
    }
}

fn join(path: &[Step], key: &str) -> Vec<Step> {
    let mut p = path.to_vec();
    p.push(Step::Key(key.to_owned()));
    p
}

impl Reader<'_> {
    fn note(&self, path: &[Step], message: String) -> Note {
        Note {
            at: locate(self.text, path),
            message,
        }
    }

    fn problem(&mut self, path: &[Step], message: String) {
        let n = self.note(path, message);
        self.problems.push(n);
    }

    fn warn(&mut self, path: &[Step], message: String) {
        let n = self.note(path, message);
        self.warnings.push(n);
    }

    /// The keys of a mapping bound to their canonical names (relaxed or exact); unknown and
    /// doubled keys are reported. Returns (canonical, written, value).
    fn bind<'v>(
        &mut self,
        map: &'v Mapping,
        path: &[Step],
        known: &[&'static str],
        relax: bool,
        what: &str,
    ) -> Vec<(&'static str, String, &'v Value)> {
        let mut out: Vec<(&'static str, String, &'v Value)> = Vec::new();
        for (k, v) in map {
            let written = text_of(k);
            let canonical = if relax {
                relaxed(&written, known)
            } else {
                known.iter().copied().find(|n| *n == written)
            };
            match canonical {
                None if known.contains(&"elasticJobType")
                    && relaxed(&written, &["jobName"]).is_some() =>
                {
                    self.problem(
                        &join(path, &written),
                        format!(
                            "{what}: `{written}` is not read here: a job's name is its key under \
                         elasticjob.jobs"
                        ),
                    )
                }
                None => self.problem(
                    &join(path, &written),
                    format!(
                        "{what}: unknown key `{written}`{}",
                        did_you_mean(&written, known)
                    ),
                ),
                Some(c) => {
                    if let Some((_, first, _)) = out.iter().find(|(o, _, _)| *o == c) {
                        let first = first.clone();
                        self.problem(
                            &join(path, &written),
                            format!("{what}: `{written}` and `{first}` are the same key ({c})"),
                        );
                    } else {
                        out.push((c, written, v));
                    }
                }
            }
        }
        out
    }

    fn spring(&mut self, root: &Value) -> Option<FileRegistry> {
        let base = [Step::Key("elasticjob".to_owned())];
        let Value::Mapping(root) = root else {
            self.problem(
                &base,
                "elasticjob: expected a mapping (regCenter, jobs)".to_owned(),
            );
            return None;
        };
        let mut registry = None;
        let mut jobs_seen = false;
        for (key, written, value) in self.bind(root, &base, ROOT_KEYS, true, "elasticjob") {
            let path = join(&base, &written);
            match key {
                "regCenter" => registry = self.reg_center(value, &path),
                "jobs" => {
                    jobs_seen = true;
                    match value {
                        Value::Mapping(jobs) => {
                            for (name, body) in jobs {
                                let name = text_of(name);
                                self.job(body, join(&path, &name), Some(name), true);
                            }
                        }
                        Value::Null => {}
                        _ => self.problem(
                            &path,
                            format!(
                                "elasticjob.{written}: expected a mapping of job names to jobs"
                            ),
                        ),
                    }
                }
                "dump" => self.dump = self.dump_port(value, &path),
                "metrics" => self.metrics = self.metrics_port(value, &path),
                "tracing" => self.elasticjob_tracing = Some((path, value.clone())),
                _ => {}
            }
        }
        if !jobs_seen {
            self.problem(
                &base,
                "elasticjob.jobs is required (the jobs to run)".to_owned(),
            );
        }
        registry
    }

    /// `elasticjob.dump`: the dump port's address, if it is on. As ElasticJob's starter: on
    /// when `port` is given, unless `enabled` is false.
    fn dump_port(&mut self, value: &Value, path: &[Step]) -> Option<SocketAddr> {
        self.listen_port(value, path, "dump", 9888)
    }

    /// `elasticjob.metrics` (shardjob's): the metrics endpoint's address, if it is on; read
    /// as `elasticjob.dump` is.
    fn metrics_port(&mut self, value: &Value, path: &[Step]) -> Option<SocketAddr> {
        self.listen_port(value, path, "metrics", shardjob::metrics::DEFAULT_PORT)
    }

    /// A port setting, `elasticjob.{section}`: `port`, `enabled` and `address` (127.0.0.1
    /// by default); on when `port` is given, unless `enabled` is false.
    fn listen_port(
        &mut self,
        value: &Value,
        path: &[Step],
        section: &str,
        example: u16,
    ) -> Option<SocketAddr> {
        let Value::Mapping(map) = value else {
            self.problem(
                path,
                format!(
                    "elasticjob.{section}: expected a mapping (port, and optionally enabled, address)"
                ),
            );
            return None;
        };
        let mut port = None;
        let mut enabled = true;
        let mut address = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let start = self.problems.len();
        for (key, written, v) in
            self.bind(map, path, DUMP_KEYS, true, &format!("elasticjob.{section}"))
        {
            let at = join(path, &written);
            let text = match v {
                Value::String(s) => s.trim().to_owned(),
                Value::Number(n) => n.to_string(),
                Value::Bool(b) => b.to_string(),
                _ => String::new(),
            };
            match key {
                "port" => match text.parse::<u16>() {
                    Ok(p) => port = Some(p),
                    Err(_) => self.problem(
                        &at,
                        format!(
                            "elasticjob.{section}.{written}: {} is not a TCP port: give a whole number \
                             from 0 to 65535 (0 takes any free port)",
                            if text.is_empty() {
                                format!("{v:?}")
                            } else {
                                format!("{text:?}")
                            }
                        ),
                    ),
                },
                "enabled" => match text.to_ascii_lowercase().as_str() {
                    "true" => enabled = true,
                    "false" => enabled = false,
                    _ => self.problem(
                        &at,
                        format!("elasticjob.{section}.{written}: expected true or false"),
                    ),
                },
                "address" => match text.parse::<IpAddr>() {
                    Ok(a) => address = a,
                    Err(_) => self.problem(
                        &at,
                        format!(
                            "elasticjob.{section}.{written}: {text:?} is not an IP address of this \
                             host to listen on (127.0.0.1 by default; 0.0.0.0 for every \
                             interface)"
                        ),
                    ),
                },
                _ => {}
            }
        }
        if self.problems.len() > start || !enabled {
            return None;
        }
        let Some(port) = port else {
            self.problem(
                path,
                format!(
                    "elasticjob.{section}: no port: add elasticjob.{section}.port (say \
                     {example}), or remove the key"
                ),
            );
            return None;
        };
        Some(SocketAddr::new(address, port))
    }

    fn reg_center(&mut self, value: &Value, path: &[Step]) -> Option<FileRegistry> {
        let Value::Mapping(map) = value else {
            self.problem(path, "elasticjob.regCenter: expected a mapping".to_owned());
            return None;
        };
        let mut servers = None;
        let mut namespace = None;
        let mut digest = None;
        let mut file = FileRegistry {
            url: RegistryUrl::Mem,
            session_timeout: None,
            connection_timeout: None,
            base_sleep: None,
            max_sleep: None,
            max_retries: None,
        };
        let start = self.problems.len();
        for (key, written, v) in self.bind(map, path, REG_CENTER_KEYS, true, "elasticjob.regCenter")
        {
            let at = join(path, &written);
            let text = match v {
                Value::String(s) => Some(s.clone()),
                Value::Number(n) => Some(n.to_string()),
                _ => None,
            };
            let Some(text) = text else {
                self.problem(
                    &at,
                    format!("regCenter.{written}: expected text or a number"),
                );
                continue;
            };
            let millis = |this: &mut Self| -> Option<Duration> {
                match text.trim().parse::<u64>() {
                    Ok(0) => None,
                    Ok(ms) => Some(Duration::from_millis(ms)),
                    Err(_) => {
                        this.problem(
                            &at,
                            format!(
                                "regCenter.{written}: {text:?} is not a number of milliseconds"
                            ),
                        );
                        None
                    }
                }
            };
            match key {
                "serverLists" => servers = Some(text.replace(' ', "")),
                "namespace" => namespace = Some(text),
                "digest" => match text.split_once(':') {
                    Some((user, password)) if !user.is_empty() => {
                        digest = Some(Credentials::new(user, password));
                    }
                    _ => self.problem(&at, format!("regCenter.{written}: expected user:password")),
                },
                "sessionTimeoutMilliseconds" => file.session_timeout = millis(self),
                "connectionTimeoutMilliseconds" => file.connection_timeout = millis(self),
                "baseSleepTimeMilliseconds" => file.base_sleep = millis(self),
                "maxSleepTimeMilliseconds" => file.max_sleep = millis(self),
                "maxRetries" => match text.trim().parse::<u32>() {
                    Ok(n) => file.max_retries = Some(n),
                    Err(_) => self.problem(
                        &at,
                        format!("regCenter.{written}: {text:?} is not a count (0 or more)"),
                    ),
                },
                _ => {}
            }
        }
        let (Some(servers), Some(namespace)) = (servers, namespace) else {
            self.problem(
                path,
                "elasticjob.regCenter needs serverLists and namespace".to_owned(),
            );
            return None;
        };
        let url = match RegistryUrl::parse(&format!("zk://{servers}/{namespace}")) {
            Ok(url) => url,
            Err(e) => {
                self.problem(path, format!("elasticjob.regCenter: {e}"));
                return None;
            }
        };
        let url = match digest {
            None => url,
            Some(c) => match url
                .with_credentials_from(Some(c.user.clone()), Some(c.password().to_owned()))
            {
                Ok(url) => url,
                Err(e) => {
                    self.problem(path, format!("elasticjob.regCenter: {e}"));
                    return None;
                }
            },
        };
        if self.problems.len() > start {
            return None;
        }
        file.url = url;
        Some(file)
    }

    fn list(&mut self, value: &Value) {
        match value {
            Value::Sequence(items) => {
                for (i, item) in items.iter().enumerate() {
                    let name = item.get("jobName").map(text_of);
                    self.job(item, vec![Step::Index(i)], name, false);
                }
            }
            Value::Mapping(map) => {
                if let Some(k) = map.keys().map(text_of).find(|k| {
                    k.eq_ignore_ascii_case("elasticjob")
                        || keys::suggest(k, &["elasticjob"]).is_some()
                }) {
                    self.problem(
                        &[Step::Key(k.clone())],
                        format!("unknown top-level key `{k}` (did you mean `elasticjob`?)"),
                    );
                    return;
                }
                let name = map.get("jobName").map(text_of);
                self.job(value, Vec::new(), name, false);
            }
            Value::Null => {}
            _ => self.problem(
                &[],
                "expected a list of jobs, one job, or ElasticJob's Spring Boot `elasticjob:` \
                 shape"
                    .to_owned(),
            ),
        }
    }

    /// Reads one job at `path`; `name` is the Spring map key (or the list's `jobName`).
    fn job(&mut self, body: &Value, path: Vec<Step>, name: Option<String>, spring: bool) {
        let label = name.clone().unwrap_or_else(|| match path.last() {
            Some(Step::Index(i)) => format!("#{}", i + 1),
            _ => String::new(),
        });
        let what = format!("job {label:?}");
        let Value::Mapping(map) = body else {
            self.problem(&path, format!("{what}: expected a mapping of job keys"));
            return;
        };
        let known: Vec<&'static str> = if spring {
            JOB_KEYS
                .iter()
                .chain(SPRING_JOB_KEYS)
                .copied()
                .filter(|k| *k != "jobName")
                .collect()
        } else {
            JOB_KEYS.to_vec()
        };
        let start = self.problems.len();
        let bound = self.bind(map, &path, &known, spring, &what);
        let written: BTreeMap<&'static str, String> =
            bound.iter().map(|(c, w, _)| (*c, w.clone())).collect();
        let at = |key: &str| -> Vec<Step> {
            match written.get(key) {
                Some(w) => join(&path, w),
                None => path.clone(),
            }
        };
        // The job's type.
        let mut kind = None;
        let mut class = None;
        let mut canonical = Mapping::new();
        if spring {
            canonical.insert(Value::from("jobName"), Value::from(label.clone()));
        }
        for (key, _, value) in &bound {
            match *key {
                "elasticJobClass" => class = Some(text_of(value)),
                "elasticJobType" => match value.as_str() {
                    Some("SCRIPT") => kind = Some(FileJobKind::Script),
                    Some("HTTP") => kind = Some(FileJobKind::Http),
                    _ => self.problem(
                        &at(key),
                        format!(
                            "{what}: elasticJobType {} is not a type `shardjob run` runs \
                             (SCRIPT or HTTP)",
                            text_of(value)
                        ),
                    ),
                },
                "jobBootstrapBeanName" => self.warn(
                    &at(key),
                    format!(
                        "{what}: jobBootstrapBeanName names a Spring bean; shardjob has none and \
                         schedules the job by its cron"
                    ),
                ),
                _ => {
                    canonical.insert(Value::from(*key), (*value).clone());
                }
            }
        }
        if let Some(class) = class {
            self.problems.truncate(start);
            self.skipped.push(SkippedJob {
                name: label.clone(),
                why: self.note(
                    &at("elasticJobClass"),
                    format!(
                        "job {label:?} is a Java class ({class}): skipped, `shardjob run` runs \
                         SCRIPT and HTTP jobs (embed the shardjob library for jobs in code)"
                    ),
                ),
            });
            return;
        }
        let config = match JobConfig::from_yaml_value(
            &Value::Mapping(canonical),
            Strictness::Strict,
            &KnownTypes::default(),
        ) {
            Ok(c) => Some(c),
            Err(config::JobConfigError::Invalid(problems)) => {
                for p in problems {
                    let key = if p.key.is_empty() { "" } else { p.key };
                    let path = if key.is_empty() {
                        path.clone()
                    } else {
                        at(key)
                    };
                    self.problem(&path, p.to_string());
                }
                None
            }
            Err(e) => {
                self.problem(&path, format!("{what}: {e}"));
                None
            }
        };
        let Some(config) = config else { return };
        if !spring {
            kind = if config.props.contains_key(PROP_COMMAND_LINE) {
                Some(FileJobKind::Script)
            } else if config.props.contains_key(PROP_HTTP_URI) {
                Some(FileJobKind::Http)
            } else {
                self.problem(
                    &path,
                    format!(
                        "{what}: cannot tell its type: give props {PROP_COMMAND_LINE} (a SCRIPT \
                         job) or {PROP_HTTP_URI} (an HTTP job)"
                    ),
                );
                return;
            };
        }
        let Some(kind) = kind else {
            if self.problems.len() == start {
                self.problem(
                    &path,
                    format!(
                        "{what}: elasticJobType (SCRIPT or HTTP) or elasticJobClass is required"
                    ),
                );
            }
            return;
        };
        if !kind.built_in() {
            // Refused, never skipped: `run` would otherwise start without the job.
            self.problem(
                &path,
                format!(
                    "{what}: a {} job, and this shardjob was built without its `{}` feature \
                     (build it with `--features {}`)",
                    kind.name(),
                    kind.feature(),
                    kind.feature()
                ),
            );
            return;
        }
        let props_path = at("props");
        for p in props::check(kind, &config.props) {
            let path = match &p.key {
                Some(k) => join(&props_path, k),
                None => props_path.clone(),
            };
            self.problem(
                &path,
                format!(
                    "{what}: {}{}",
                    p.key.map(|k| format!("props {k}: ")).unwrap_or_default(),
                    p.message
                ),
            );
        }
        let handler = config.job_error_handler_type;
        if !BUILT_IN_HANDLERS.contains(&handler) {
            self.problem(
                &at("jobErrorHandlerType"),
                format!(
                    "{what}: jobErrorHandlerType {handler} is not built in yet (built in: LOG, \
                     THROW, IGNORE, EMAIL, WECHAT, DINGTALK)"
                ),
            );
        } else if let Err(problems) = shardjob::notify::Settings::from_props(handler, &config.props)
        {
            for p in problems {
                let path = if config.props.contains_key(&p.key) {
                    join(&props_path, &p.key)
                } else {
                    props_path.clone()
                };
                self.problem(&path, format!("{what}: jobErrorHandlerType {handler}: {p}"));
            }
        }
        // What `run` refuses on etcd (`Machine::add_job`), with the same words: the file does
        // not say which registry it runs on.
        if let Some(why) = config.unhonoured_time_diff() {
            self.warn(
                &at("maxTimeDiffSeconds"),
                format!("{what}: honoured on ZooKeeper and the in-memory registry; on etcd, {why}"),
            );
        }
        if !config.job_listener_types.is_empty() {
            self.problem(
                &at("jobListenerTypes"),
                format!(
                    "{what}: jobListenerTypes {}: `shardjob run` provides no listener types \
                     (register them in code, with the shardjob library)",
                    config.job_listener_types.join(", ")
                ),
            );
        }
        if !config.job_extra_configurations.is_empty() {
            self.warn(
                &at("jobExtraConfigurations"),
                format!(
                    "{what}: jobExtraConfigurations are stored in the registry as they are; \
                     shardjob does not act on them"
                ),
            );
        }
        if self.problems.len() == start {
            self.jobs.push(FileJob { config, kind });
        }
    }
}

#[cfg(test)]
mod tests;
