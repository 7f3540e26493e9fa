//! The job history settings of a Spring Boot job file.
//!
//! ElasticJob's keys: `elasticjob.tracing.type: RDB`, its database given by
//! `elasticjob.tracing.dataSource.url/username/password` or else by Spring's
//! `spring.datasource.url/username/password` (a JDBC URL of MySQL/MariaDB, PostgreSQL or
//! SQLite; others are refused by name), and `elasticjob.tracing.includeJobNames` /
//! `excludeJobNames` (one of the two). shardjob's own, at the top level:
//!
//! ```yaml
//! tracing:
//!   url: sqlite://history.db   # instead of elasticjob.tracing (never both)
//!   retention: 7d              # rows older than this are deleted, in batches
//!   queueBound: 100000         # events waiting for the database before the oldest go
//! ```

use std::collections::BTreeSet;
use std::time::Duration;

use serde_yaml_ng::{Mapping, Value};

use super::keys::relaxed;
use super::positions::Step;
use super::{Reader, join, text_of};

/// Where the history goes, as the file says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TracingSource {
    /// ElasticJob's JDBC data source.
    Jdbc {
        /// `url`.
        url: String,
        /// `username`.
        username: Option<String>,
        /// `password`.
        password: Option<String>,
    },
    /// shardjob's `tracing.url`.
    Url(String),
}

/// The job history settings of a file.
#[derive(Clone, PartialEq, Eq)]
pub struct FileTracing {
    /// The database.
    pub source: TracingSource,
    /// `tracing.retention`.
    pub retention: Option<Duration>,
    /// `tracing.queueBound`.
    pub queue_bound: Option<usize>,
    /// `includeJobNames`.
    pub include_jobs: BTreeSet<String>,
    /// `excludeJobNames`.
    pub exclude_jobs: BTreeSet<String>,
}

impl std::fmt::Debug for FileTracing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileTracing")
            .field("database", &self.describe())
            .field("retention", &self.retention)
            .field("queue_bound", &self.queue_bound)
            .field("include_jobs", &self.include_jobs)
            .field("exclude_jobs", &self.exclude_jobs)
            .finish()
    }
}

impl FileTracing {
    /// The database's URL, without its password.
    pub fn describe(&self) -> String {
        match &self.source {
            TracingSource::Jdbc { url, username, .. } => match username {
                Some(user) => format!("{url} (user {user})"),
                None => url.clone(),
            },
            TracingSource::Url(url) => redact(url),
        }
    }

    /// The database URL for the history writer.
    #[cfg(feature = "history")]
    pub fn database_url(&self) -> Result<shardjob::history::DatabaseUrl, String> {
        use shardjob::history::DatabaseUrl;
        match &self.source {
            TracingSource::Jdbc {
                url,
                username,
                password,
            } => DatabaseUrl::from_jdbc(url, username.as_deref(), password.as_deref()),
            TracingSource::Url(url) => DatabaseUrl::parse(url),
        }
        .map_err(|e| e.to_string())
    }

    /// The runtime's tracing configuration.
    #[cfg(feature = "history")]
    pub fn config(&self) -> Result<shardjob::history::TracingConfig, String> {
        let mut config = shardjob::history::TracingConfig::new(self.database_url()?);
        config.options.retention = self.retention;
        if let Some(bound) = self.queue_bound {
            config.options.queue_bound = bound;
        }
        config.jobs = shardjob::history::JobFilter {
            include: self.include_jobs.clone(),
            exclude: self.exclude_jobs.clone(),
        };
        Ok(config)
    }
}

#[cfg(feature = "history")]
fn redact(url: &str) -> String {
    shardjob_history::url::redact(url)
}

#[cfg(not(feature = "history"))]
fn redact(url: &str) -> String {
    match url.split_once('@') {
        Some((_, host)) => format!("…@{host}"),
        None => url.to_owned(),
    }
}

const ELASTICJOB_KEYS: &[&str] = &["type", "dataSource", "includeJobNames", "excludeJobNames"];
const DATA_SOURCE_KEYS: &[&str] = &["url", "username", "password"];
const OWN_KEYS: &[&str] = &["url", "retention", "queueBound"];

impl Reader<'_> {
    /// Reads the history settings of a Spring file: `elasticjob.tracing` (its value and path,
    /// if present), the top-level `spring` and `tracing`.
    pub(super) fn tracing(
        &mut self,
        top: &Mapping,
        elasticjob: Option<(Vec<Step>, &Value)>,
    ) -> Option<FileTracing> {
        let mut source = None;
        let mut include = BTreeSet::new();
        let mut exclude = BTreeSet::new();
        let spring_ds = top.get("spring").and_then(Value::as_mapping).and_then(|m| {
            m.iter()
                .find(|(k, _)| relaxed(&text_of(k), &["datasource"]).is_some())
        });
        // Other Spring settings belong to other components.
        match top.get("spring") {
            Some(Value::Mapping(spring)) => {
                for k in spring.keys() {
                    let k = text_of(k);
                    if relaxed(&k, &["datasource"]).is_none() || elasticjob.is_none() {
                        self.warn(
                            &[Step::Key("spring".into()), Step::Key(k.clone())],
                            format!(
                                "spring.{k} is not read by shardjob (only spring.datasource, for \
                                 elasticjob.tracing)"
                            ),
                        );
                    }
                }
            }
            Some(_) => self.warn(
                &[Step::Key("spring".into())],
                "top-level key `spring` is not read by shardjob".to_owned(),
            ),
            None => {}
        }
        let mut elasticjob_path = None;
        if let Some((path, value)) = elasticjob {
            elasticjob_path = Some(path.clone());
            let Value::Mapping(map) = value else {
                self.problem(
                    &path,
                    "elasticjob.tracing: expected a mapping (type: RDB)".into(),
                );
                return None;
            };
            let mut kind = None;
            for (key, written, v) in
                self.bind(map, &path, ELASTICJOB_KEYS, true, "elasticjob.tracing")
            {
                let at = join(&path, &written);
                match key {
                    "type" => kind = Some((text_of(v), at)),
                    "dataSource" => source = self.data_source(v, &at, "elasticjob.tracing"),
                    "includeJobNames" => include = self.names(v, &at),
                    "excludeJobNames" => exclude = self.names(v, &at),
                    _ => {}
                }
            }
            match kind {
                Some((t, _)) if t.eq_ignore_ascii_case("RDB") => {}
                Some((t, at)) => {
                    self.problem(
                        &at,
                        format!(
                            "elasticjob.tracing.type: {t:?} is not supported: shardjob records \
                             the history in a database (RDB)"
                        ),
                    );
                    return None;
                }
                None => {
                    self.problem(&path, "elasticjob.tracing: `type: RDB` is missing".into());
                    return None;
                }
            }
            if !include.is_empty() && !exclude.is_empty() {
                self.problem(
                    &path,
                    "elasticjob.tracing: includeJobNames and excludeJobNames are mutually \
                     exclusive (as in ElasticJob)"
                        .into(),
                );
            }
            if source.is_none() {
                if let Some((k, ds)) = spring_ds {
                    let at = vec![Step::Key("spring".into()), Step::Key(text_of(k))];
                    source = self.data_source(ds, &at, "spring.datasource");
                }
            }
            if source.is_none() {
                self.problem(
                    &path,
                    "elasticjob.tracing: type RDB needs a database: spring.datasource.url (a JDBC \
                     URL of MySQL, PostgreSQL or SQLite) with username and password, or \
                     elasticjob.tracing.dataSource"
                        .into(),
                );
                return None;
            }
        }
        let mut retention = None;
        let mut queue_bound = None;
        match top.get("tracing") {
            None => {}
            Some(Value::Mapping(own)) => {
                let base = vec![Step::Key("tracing".into())];
                for (key, written, v) in self.bind(own, &base, OWN_KEYS, true, "tracing") {
                    let at = join(&base, &written);
                    let text = text_of(v);
                    match key {
                        "url" => {
                            if elasticjob_path.is_some() {
                                self.problem(
                                    &at,
                                    "tracing.url and elasticjob.tracing both name a history \
                                     database: keep one"
                                        .into(),
                                );
                            } else {
                                source = Some(TracingSource::Url(text));
                            }
                        }
                        "retention" => match parse_period(&text) {
                            Ok(d) => retention = Some(d),
                            Err(e) => self.problem(&at, format!("tracing.{written}: {e}")),
                        },
                        "queueBound" => match text.parse::<usize>() {
                            Ok(n) if n > 0 => queue_bound = Some(n),
                            _ => self.problem(
                                &at,
                                format!("tracing.{written}: expected a number of events above 0"),
                            ),
                        },
                        _ => {}
                    }
                }
                if source.is_none() && (retention.is_some() || queue_bound.is_some()) {
                    self.problem(
                        &base,
                        "tracing: no history database: give tracing.url (sqlite://…, \
                         postgres://…, mysql://…) or elasticjob.tracing"
                            .into(),
                    );
                }
            }
            Some(_) => self.problem(
                &[Step::Key("tracing".into())],
                "tracing: expected a mapping (url, retention, queueBound)".into(),
            ),
        }
        let source = source?;
        let tracing = FileTracing {
            source,
            retention,
            queue_bound,
            include_jobs: include,
            exclude_jobs: exclude,
        };
        let at = elasticjob_path.unwrap_or_else(|| vec![Step::Key("tracing".into())]);
        #[cfg(feature = "history")]
        {
            if let Err(e) = tracing.database_url() {
                self.problem(&at, format!("job history: {e}"));
                return None;
            }
            Some(tracing)
        }
        #[cfg(not(feature = "history"))]
        {
            let _ = tracing;
            self.problem(
                &at,
                "job history: this shardjob was built without its `history` feature".into(),
            );
            None
        }
    }

    fn data_source(&mut self, v: &Value, at: &[Step], what: &str) -> Option<TracingSource> {
        let Value::Mapping(map) = v else {
            self.problem(
                at,
                format!("{what}: expected a mapping (url, username, password)"),
            );
            return None;
        };
        let mut url = None;
        let mut username = None;
        let mut password = None;
        for (k, v) in map {
            let written = text_of(k);
            match relaxed(&written, DATA_SOURCE_KEYS) {
                Some("url") => url = Some(text_of(v)),
                Some("username") => username = Some(text_of(v)),
                Some("password") => password = Some(text_of(v)),
                _ => self.warn(
                    &join(at, &written),
                    format!(
                        "{what}.{written} is not read by shardjob (url, username, password are)"
                    ),
                ),
            }
        }
        match url {
            Some(url) => Some(TracingSource::Jdbc {
                url,
                username,
                password,
            }),
            None => {
                self.problem(at, format!("{what}: `url` is missing"));
                None
            }
        }
    }

    fn names(&mut self, v: &Value, at: &[Step]) -> BTreeSet<String> {
        match v {
            Value::Sequence(items) => items.iter().map(text_of).collect(),
            Value::String(s) => s
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect(),
            Value::Null => BTreeSet::new(),
            _ => {
                self.problem(at, "expected a list of job names".into());
                BTreeSet::new()
            }
        }
    }
}

#[cfg(feature = "history")]
use shardjob_history::parse_period;

/// Without the history every tracing setting is refused anyway.
#[cfg(not(feature = "history"))]
fn parse_period(_: &str) -> Result<Duration, String> {
    Ok(Duration::ZERO)
}
