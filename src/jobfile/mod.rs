//! Job files for `shardjob run`: config-only jobs (Script, HTTP) with no code.
//!
//! Two shapes are read:
//!
//! - shardjob's list of jobs in ElasticJob's keys (what `shardjob config check` reads); a
//!   job's type follows from its props: `script.command.line` makes a SCRIPT job, `http.uri`
//!   an HTTP job;
//! - the shape ElasticJob's Spring Boot starter reads, `elasticjob.regCenter` (`serverLists`,
//!   `namespace`, `sessionTimeoutMilliseconds`) and `elasticjob.jobs.<jobName>` with
//!   `elasticJobType: SCRIPT|HTTP` and the usual job keys.

use std::time::Duration;

use serde_yaml_ng::{Mapping, Value};
use shardjob_core::JobConfig;
use shardjob_core::config::{self, KnownTypes, Strictness};

use crate::jobs::PROP_COMMAND_LINE;

pub use crate::jobs::http::PROP_URI as PROP_HTTP_URI;

/// The kind of a config-only job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileJobKind {
    /// `SCRIPT`.
    Script,
    /// `HTTP`.
    Http,
}

/// A job file, read.
#[derive(Debug, Clone, PartialEq)]
pub struct JobFile {
    /// The jobs and their kinds.
    pub jobs: Vec<(JobConfig, FileJobKind)>,
    /// The registry the file names (`elasticjob.regCenter`), as a URL.
    pub registry: Option<String>,
    /// The session timeout the file asks for.
    pub session_timeout: Option<Duration>,
}

/// Reads a job file. `Err` holds one line per problem.
pub fn load(text: &str) -> Result<JobFile, Vec<String>> {
    let value: Value = serde_yaml_ng::from_str(text).map_err(|e| vec![format!("error: {e}")])?;
    match value.get("elasticjob") {
        Some(root) => load_spring(root),
        None => load_list(text),
    }
}

fn problems(e: config::JobConfigError) -> Vec<String> {
    match e {
        config::JobConfigError::Yaml(e) => vec![format!("error: {e}")],
        e => e.problems().iter().map(|p| format!("error: {p}")).collect(),
    }
}

fn load_list(text: &str) -> Result<JobFile, Vec<String>> {
    let configs = config::parse_jobs_file(text, Strictness::Strict, &KnownTypes::default())
        .map_err(problems)?;
    let mut jobs = Vec::new();
    let mut errors = Vec::new();
    for config in configs {
        let kind = if config.props.contains_key(PROP_COMMAND_LINE) {
            FileJobKind::Script
        } else if config.props.contains_key(PROP_HTTP_URI) {
            FileJobKind::Http
        } else {
            errors.push(format!(
                "error: job {:?}: cannot tell its type: give props {PROP_COMMAND_LINE} (a SCRIPT \
                 job) or {PROP_HTTP_URI} (an HTTP job)",
                config.job_name
            ));
            continue;
        };
        jobs.push((config, kind));
    }
    if errors.is_empty() {
        Ok(JobFile {
            jobs,
            registry: None,
            session_timeout: None,
        })
    } else {
        Err(errors)
    }
}

/// Keys of the Spring Boot job entries that are not job configuration.
const SPRING_ONLY: &[&str] = &["elasticJobType", "elasticJobClass", "jobBootstrapBeanName"];

fn load_spring(root: &Value) -> Result<JobFile, Vec<String>> {
    let mut errors = Vec::new();
    let text = |v: &Value| match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    };
    let mut registry = None;
    let mut session_timeout = None;
    if let Some(reg) = root.get("regCenter") {
        let servers = reg.get("serverLists").and_then(text);
        let namespace = reg.get("namespace").and_then(text);
        match (servers, namespace) {
            (Some(s), Some(n)) => registry = Some(format!("zk://{}/{n}", s.replace(' ', ""))),
            _ => errors
                .push("error: elasticjob.regCenter needs serverLists and namespace".to_owned()),
        }
        if let Some(ms) = reg
            .get("sessionTimeoutMilliseconds")
            .and_then(Value::as_u64)
        {
            if ms > 0 {
                session_timeout = Some(Duration::from_millis(ms));
            }
        }
    }
    let Some(Value::Mapping(entries)) = root.get("jobs") else {
        errors.push("error: elasticjob.jobs must map job names to jobs".to_owned());
        return Err(errors);
    };
    let mut list = Vec::new();
    let mut kinds = Vec::new();
    for (name, body) in entries {
        let Some(name) = text(name) else {
            errors.push(format!(
                "error: elasticjob.jobs: {name:?} is not a job name"
            ));
            continue;
        };
        let Value::Mapping(body) = body else {
            errors.push(format!(
                "error: job {name:?}: expected a mapping of job keys"
            ));
            continue;
        };
        if body.contains_key("elasticJobClass") {
            errors.push(format!(
                "error: job {name:?}: elasticJobClass jobs need code: embed the shardjob library; \
                 `shardjob run` runs SCRIPT and HTTP jobs"
            ));
            continue;
        }
        let kind = match body.get("elasticJobType").and_then(text).as_deref() {
            Some("SCRIPT") => FileJobKind::Script,
            Some("HTTP") => FileJobKind::Http,
            Some(other) => {
                errors.push(format!(
                    "error: job {name:?}: elasticJobType {other:?} is not SCRIPT or HTTP"
                ));
                continue;
            }
            None => {
                errors.push(format!(
                    "error: job {name:?}: elasticJobType (SCRIPT or HTTP) is required"
                ));
                continue;
            }
        };
        let mut job = Mapping::new();
        job.insert(Value::from("jobName"), Value::from(name.clone()));
        for (k, v) in body {
            if k.as_str().is_some_and(|k| SPRING_ONLY.contains(&k)) {
                continue;
            }
            job.insert(k.clone(), v.clone());
        }
        list.push(Value::Mapping(job));
        kinds.push(kind);
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    let yaml = serde_yaml_ng::to_string(&Value::Sequence(list))
        .map_err(|e| vec![format!("error: {e}")])?;
    let configs = config::parse_jobs_file(&yaml, Strictness::Strict, &KnownTypes::default())
        .map_err(problems)?;
    Ok(JobFile {
        jobs: configs.into_iter().zip(kinds).collect(),
        registry,
        session_timeout,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_shape_takes_the_type_from_props() {
        let file = load(
            "- jobName: s\n  shardingTotalCount: 2\n  props:\n    script.command.line: echo hi\n\
             - jobName: h\n  shardingTotalCount: 1\n  props:\n    http.uri: http://127.0.0.1:1/\n    http.method: GET\n",
        )
        .unwrap();
        let kinds: Vec<_> = file
            .jobs
            .iter()
            .map(|(c, k)| (c.job_name.as_str(), *k))
            .collect();
        assert_eq!(
            kinds,
            [("s", FileJobKind::Script), ("h", FileJobKind::Http)]
        );
        assert_eq!(file.registry, None);
        let err = load("- jobName: x\n  shardingTotalCount: 1\n").unwrap_err();
        assert!(err[0].contains("cannot tell its type"), "{err:?}");
    }

    #[test]
    fn spring_boot_shape() {
        let file = load(
            "elasticjob:\n  regCenter:\n    serverLists: zk1:2181, zk2:2181\n    namespace: demo\n    sessionTimeoutMilliseconds: 4000\n\
             \x20 jobs:\n    scriptJob:\n      elasticJobType: SCRIPT\n      cron: 0/5 * * * * ?\n      shardingTotalCount: 3\n\
             \x20     props:\n        script.command.line: echo SCRIPT Job\n",
        )
        .unwrap();
        assert_eq!(
            file.registry.as_deref(),
            Some("zk://zk1:2181,zk2:2181/demo")
        );
        assert_eq!(file.session_timeout, Some(Duration::from_secs(4)));
        assert_eq!(file.jobs.len(), 1);
        let (config, kind) = &file.jobs[0];
        assert_eq!(config.job_name, "scriptJob");
        assert_eq!(config.sharding_total_count, 3);
        assert_eq!(*kind, FileJobKind::Script);

        let err = load(
            "elasticjob:\n  jobs:\n    a:\n      elasticJobClass: org.Foo\n      shardingTotalCount: 1\n\
             \x20   b:\n      shardingTotalCount: 1\n",
        )
        .unwrap_err();
        assert_eq!(err.len(), 2, "{err:?}");
    }
}
