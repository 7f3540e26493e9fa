//! The operations a page's forms and the JSON API both ask for, on the operation API
//! ([`shardjob_ops`]); and the configuration form, read into a configuration with each
//! problem attached to its field.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_yaml_ng::{Mapping, Value};
use shardjob_core::JobConfig;
use shardjob_core::config::Strictness;
use shardjob_core::registry::Version;
use shardjob_ops::{ErrorKind, Ops, OpsError, Scope};

use crate::hub::{HubError, Live};

/// An operation, as a form or the API names it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(tag = "op", rename_all = "kebab-case")]
pub enum Action {
    /// Run the job once on every instance, with a parameter.
    Trigger {
        /// The job.
        job: String,
        /// The parameter (empty: none).
        #[serde(default)]
        parameter: Option<String>,
    },
    /// Disable a job (every server), a job on one server, or a server in every job.
    Disable {
        /// The job.
        #[serde(default)]
        job: Option<String>,
        /// The server IP.
        #[serde(default)]
        server: Option<String>,
    },
    /// Enable what [`Action::Disable`] disabled.
    Enable {
        /// The job.
        #[serde(default)]
        job: Option<String>,
        /// The server IP.
        #[serde(default)]
        server: Option<String>,
    },
    /// Shut instances down (of a job, on a server, or both).
    Shutdown {
        /// The job.
        #[serde(default)]
        job: Option<String>,
        /// The server IP.
        #[serde(default)]
        server: Option<String>,
    },
    /// Shut instances down and delete their server nodes.
    Remove {
        /// The job.
        #[serde(default)]
        job: Option<String>,
        /// The server IP.
        #[serde(default)]
        server: Option<String>,
    },
    /// Delete the job's whole subtree.
    RemoveJob {
        /// The job.
        job: String,
    },
    /// Ask the leader to re-shard now.
    Reshard {
        /// The job.
        job: String,
    },
    /// Disable one item.
    DisableItem {
        /// The job.
        job: String,
        /// The item.
        item: u32,
    },
    /// Enable one item.
    EnableItem {
        /// The job.
        job: String,
        /// The item.
        item: u32,
    },
}

/// Why an operation was not done.
#[derive(Debug, thiserror::Error)]
pub enum ActionError {
    /// The registry is not there.
    #[error(transparent)]
    Hub(#[from] HubError),
    /// The operation API refused or failed.
    #[error(transparent)]
    Ops(#[from] OpsError),
    /// The request itself is wrong.
    #[error("{0}")]
    Bad(String),
}

impl ActionError {
    /// The HTTP status this error answers with.
    pub fn status(&self) -> u16 {
        match self {
            ActionError::Hub(HubError::Unknown(_)) => 404,
            ActionError::Hub(HubError::Unreachable { .. }) => 503,
            ActionError::Bad(_) => 400,
            ActionError::Ops(e) => match e.kind() {
                ErrorKind::NotFound => 404,
                ErrorKind::BadInput => 400,
                ErrorKind::Conflict => 409,
                ErrorKind::Unreachable => 503,
                ErrorKind::BadData => 500,
                ErrorKind::Refused => 502,
            },
        }
    }
}

fn scope(job: &Option<String>, server: &Option<String>) -> Result<Scope, ActionError> {
    let job = job.as_deref().filter(|s| !s.is_empty());
    let server = server.as_deref().filter(|s| !s.is_empty());
    match (job, server) {
        (Some(j), Some(s)) => Ok(Scope::job_on_server(j, s)),
        (Some(j), None) => Ok(Scope::Job(j.to_owned())),
        (None, Some(s)) => Ok(Scope::Server(s.to_owned())),
        (None, None) => Err(ActionError::Bad("name a job, a server, or both".to_owned())),
    }
}

fn what(job: &Option<String>, server: &Option<String>) -> String {
    match (
        job.as_deref().filter(|s| !s.is_empty()),
        server.as_deref().filter(|s| !s.is_empty()),
    ) {
        (Some(j), Some(s)) => format!("job {j} on server {s}"),
        (Some(j), None) => format!("job {j}"),
        (None, Some(s)) => format!("server {s}"),
        (None, None) => "nothing".to_owned(),
    }
}

impl Action {
    /// A line for the audit log and the page's message.
    pub fn describe(&self) -> String {
        match self {
            Action::Trigger { job, parameter } => match parameter.as_deref() {
                Some(p) if !p.is_empty() => format!("trigger job {job} with parameter {p:?}"),
                _ => format!("trigger job {job}"),
            },
            Action::Disable { job, server } => format!("disable {}", what(job, server)),
            Action::Enable { job, server } => format!("enable {}", what(job, server)),
            Action::Shutdown { job, server } => format!("shut down {}", what(job, server)),
            Action::Remove { job, server } => format!("remove {}", what(job, server)),
            Action::RemoveJob { job } => format!("remove job {job} (its whole subtree)"),
            Action::Reshard { job } => format!("re-shard job {job}"),
            Action::DisableItem { job, item } => format!("disable item {item} of job {job}"),
            Action::EnableItem { job, item } => format!("enable item {item} of job {job}"),
        }
    }

    /// Does it; returns what was done, in words.
    pub async fn run(&self, live: &Live) -> Result<String, ActionError> {
        let client = live.client()?;
        let ops = Ops::new(&*client);
        let done = match self {
            Action::Trigger { job, parameter } => {
                let p = parameter.as_deref().filter(|p| !p.is_empty());
                let ids = ops.trigger(job, p).await?;
                format!(
                    "Triggered job {job} on {} instance(s){}",
                    ids.len(),
                    p.map(|p| format!(" with parameter {p:?}"))
                        .unwrap_or_default()
                )
            }
            Action::Disable { job, server } => {
                let done = ops.disable(&scope(job, server)?).await?;
                format!(
                    "Disabled {} ({} server node(s))",
                    what(job, server),
                    done.len()
                )
            }
            Action::Enable { job, server } => {
                let done = ops.enable(&scope(job, server)?).await?;
                format!(
                    "Enabled {} ({} server node(s))",
                    what(job, server),
                    done.len()
                )
            }
            Action::Shutdown { job, server } => {
                let done = ops.shutdown(&scope(job, server)?).await?;
                format!(
                    "Shut down {} instance(s) of {}",
                    done.instances.len(),
                    what(job, server)
                )
            }
            Action::Remove { job, server } => {
                let done = ops.remove(&scope(job, server)?).await?;
                format!(
                    "Removed {}: {} instance(s) shut down, {} server node(s) deleted",
                    what(job, server),
                    done.instances.len(),
                    done.servers.len()
                )
            }
            Action::RemoveJob { job } => {
                ops.remove_job(job).await?;
                format!("Removed job {job}")
            }
            Action::Reshard { job } => {
                ops.reshard(job).await?;
                format!("Job {job} will be re-sharded by its leader before its next fire")
            }
            Action::DisableItem { job, item } => {
                ops.disable_item(job, *item).await?;
                format!("Disabled item {item} of job {job}")
            }
            Action::EnableItem { job, item } => {
                ops.enable_item(job, *item).await?;
                format!("Enabled item {item} of job {job}")
            }
        };
        Ok(done)
    }

    /// Reads an action from a form's fields (`op`, `job`, `server`, `item`, `parameter`).
    pub fn from_form(fields: &BTreeMap<String, String>) -> Result<Action, ActionError> {
        let get = |k: &str| {
            fields
                .get(k)
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
        };
        let job = || get("job").ok_or_else(|| ActionError::Bad("no job named".to_owned()));
        let item = || -> Result<u32, ActionError> {
            get("item")
                .and_then(|i| i.parse().ok())
                .ok_or_else(|| ActionError::Bad("no item number given".to_owned()))
        };
        let op = get("op").unwrap_or_default();
        Ok(match op.as_str() {
            "trigger" => Action::Trigger {
                job: job()?,
                parameter: fields.get("parameter").cloned().filter(|p| !p.is_empty()),
            },
            "disable" => Action::Disable {
                job: get("job"),
                server: get("server"),
            },
            "enable" => Action::Enable {
                job: get("job"),
                server: get("server"),
            },
            "shutdown" => Action::Shutdown {
                job: get("job"),
                server: get("server"),
            },
            "remove" => Action::Remove {
                job: get("job"),
                server: get("server"),
            },
            "remove-job" => Action::RemoveJob { job: job()? },
            "reshard" => Action::Reshard { job: job()? },
            "disable-item" => Action::DisableItem {
                job: job()?,
                item: item()?,
            },
            "enable-item" => Action::EnableItem {
                job: job()?,
                item: item()?,
            },
            other => return Err(ActionError::Bad(format!("unknown operation {other:?}"))),
        })
    }
}

/// The fields of the configuration form, with their YAML keys, kinds and labels.
pub const FORM_FIELDS: &[(&str, FieldKind, &str)] = &[
    (
        "cron",
        FieldKind::Text,
        "Cron (Quartz; empty: runs only when triggered)",
    ),
    (
        "timeZone",
        FieldKind::Text,
        "Time zone (IANA, or GMT+08:00)",
    ),
    (
        "shardingTotalCount",
        FieldKind::Int,
        "Items (shardingTotalCount)",
    ),
    (
        "shardingItemParameters",
        FieldKind::Text,
        "Item parameters (0=a,1=b)",
    ),
    ("jobParameter", FieldKind::Text, "Job parameter"),
    ("description", FieldKind::Text, "Description"),
    (
        "jobShardingStrategyType",
        FieldKind::Text,
        "Sharding strategy",
    ),
    ("jobErrorHandlerType", FieldKind::Text, "Error handler"),
    (
        "maxTimeDiffSeconds",
        FieldKind::Int,
        "Max clock difference (s, -1: no check)",
    ),
    (
        "reconcileIntervalMinutes",
        FieldKind::Int,
        "Reconcile interval (min, 0: never)",
    ),
    ("monitorExecution", FieldKind::Bool, "Monitor execution"),
    ("failover", FieldKind::Bool, "Failover"),
    ("misfire", FieldKind::Bool, "Misfire"),
    ("staticSharding", FieldKind::Bool, "Static sharding"),
    ("disabled", FieldKind::Bool, "Start disabled"),
    ("overwrite", FieldKind::Bool, "Overwrite"),
    ("props", FieldKind::Props, "Props (one key=value per line)"),
];

/// What a form field holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldKind {
    /// Free text.
    Text,
    /// A whole number.
    Int,
    /// A checkbox.
    Bool,
    /// `key=value` lines.
    Props,
}

/// The configuration form, filled in: the values as typed, and the problems by field.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConfigForm {
    /// The values by YAML key, as the form shows them.
    pub values: BTreeMap<String, String>,
    /// The `config` node's version the form was read at.
    pub version: i64,
    /// Problems by YAML key (`""`: not of one field).
    pub errors: BTreeMap<String, Vec<String>>,
}

impl ConfigForm {
    /// The form of a configuration as stored.
    pub fn from_config(yaml: &str, version: Version) -> ConfigForm {
        let map: Mapping = serde_yaml_ng::from_str(yaml).unwrap_or_default();
        let mut values = BTreeMap::new();
        for (key, kind, _) in FORM_FIELDS {
            let v = map.get(*key);
            let text = match (kind, v) {
                (_, None | Some(Value::Null)) => String::new(),
                (FieldKind::Props, Some(Value::Mapping(m))) => m
                    .iter()
                    .map(|(k, v)| format!("{}={}", scalar(k), scalar(v)))
                    .collect::<Vec<_>>()
                    .join("\n"),
                (_, Some(v)) => scalar(v),
            };
            values.insert((*key).to_owned(), text);
        }
        ConfigForm {
            values,
            version: version.0,
            errors: BTreeMap::new(),
        }
    }

    /// The form from the posted fields (checkboxes absent are off).
    pub fn from_fields(fields: &BTreeMap<String, String>) -> ConfigForm {
        let mut values = BTreeMap::new();
        for (key, kind, _) in FORM_FIELDS {
            let v = fields.get(*key).cloned().unwrap_or_default();
            let v = match kind {
                FieldKind::Bool => if v.is_empty() { "false" } else { "true" }.to_owned(),
                _ => v,
            };
            values.insert((*key).to_owned(), v);
        }
        ConfigForm {
            values,
            version: fields
                .get("version")
                .and_then(|v| v.parse().ok())
                .unwrap_or(-1),
            errors: BTreeMap::new(),
        }
    }

    fn error(&mut self, key: &str, text: String) {
        self.errors.entry(key.to_owned()).or_default().push(text);
    }

    /// The new configuration: the stored YAML (keys the form does not show are kept) with the
    /// form's values; each problem attached to its field. `None` if there are problems.
    pub fn build(&mut self, job: &str, current_yaml: &str) -> Option<JobConfig> {
        let mut map: Mapping = serde_yaml_ng::from_str(current_yaml).unwrap_or_default();
        for (key, kind, _) in FORM_FIELDS {
            let text = self.values.get(*key).cloned().unwrap_or_default();
            let k = Value::String((*key).to_owned());
            let value = match kind {
                FieldKind::Text => {
                    if text.trim().is_empty()
                        && matches!(
                            *key,
                            "cron" | "timeZone" | "jobShardingStrategyType" | "jobErrorHandlerType"
                        )
                    {
                        map.remove(&k);
                        continue;
                    }
                    Value::String(text.trim().to_owned())
                }
                FieldKind::Int if text.trim().is_empty() => {
                    // Not given: the default (or "is required", for the item count).
                    map.remove(&k);
                    continue;
                }
                FieldKind::Int => match text.trim().parse::<i64>() {
                    Ok(n) => Value::Number(n.into()),
                    Err(_) => {
                        self.error(key, format!("{:?} is not a whole number", text.trim()));
                        continue;
                    }
                },
                FieldKind::Bool => Value::Bool(text == "true"),
                FieldKind::Props => {
                    let mut props = Mapping::new();
                    for (n, line) in text.lines().enumerate() {
                        let line = line.trim();
                        if line.is_empty() {
                            continue;
                        }
                        match line.split_once('=') {
                            Some((k, v)) if !k.trim().is_empty() => {
                                props.insert(
                                    Value::String(k.trim().to_owned()),
                                    Value::String(v.trim().to_owned()),
                                );
                            }
                            _ => self
                                .error(key, format!("line {}: {line:?} is not key=value", n + 1)),
                        }
                    }
                    Value::Mapping(props)
                }
            };
            map.insert(k, value);
        }
        map.insert(
            Value::String("jobName".to_owned()),
            Value::String(job.to_owned()),
        );
        if !self.errors.is_empty() {
            return None;
        }
        let yaml = match serde_yaml_ng::to_string(&Value::Mapping(map)) {
            Ok(y) => y,
            Err(e) => {
                self.error("", e.to_string());
                return None;
            }
        };
        match JobConfig::from_yaml(&yaml, Strictness::Lenient) {
            Ok(config) => Some(config),
            Err(e) => {
                let problems = e.problems();
                if problems.is_empty() {
                    self.error("", e.to_string());
                }
                for p in problems {
                    let key = if FORM_FIELDS.iter().any(|(k, _, _)| *k == p.key) {
                        p.key
                    } else {
                        ""
                    };
                    let text = if key.is_empty() {
                        p.to_string()
                    } else {
                        p.problem.to_string()
                    };
                    self.error(key, text);
                }
                None
            }
        }
    }

    /// Applies the form to the job: validated, compare-and-set on the version the form was
    /// read at. On a problem the form carries it (by field) and nothing is written.
    pub async fn apply(&mut self, live: &Live, job: &str) -> Result<String, ActionError> {
        let client = live.client()?;
        let ops = Ops::new(&*client);
        let current = ops.config(job).await?;
        let Some(new) = self.build(job, &current.yaml) else {
            return Err(ActionError::Bad(
                "the configuration has problems: nothing was written".to_owned(),
            ));
        };
        if current.version.0 != self.version {
            self.error(
                "",
                "the configuration was changed by someone else since this form was read: \
                 nothing was written; reload the page to see the change"
                    .to_owned(),
            );
            return Err(ActionError::Bad("conflict".to_owned()));
        }
        let changes = shardjob_ops::config_changes(&current.config, &new);
        match ops.update_config(job, &new, current.version).await {
            Ok(_) => Ok(if changes.is_empty() {
                format!("Job {job}: nothing changed")
            } else {
                let keys: Vec<&str> = changes.iter().map(|c| c.key.as_str()).collect();
                format!("Job {job}: configuration saved ({})", keys.join(", "))
            }),
            Err(OpsError::InvalidConfig { source, .. }) => {
                for p in source.problems() {
                    self.error(p.key, p.problem.to_string());
                }
                Err(ActionError::Bad(
                    "the configuration has problems".to_owned(),
                ))
            }
            Err(e) => {
                self.error("", e.to_string());
                Err(e.into())
            }
        }
    }
}

fn scalar(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::Null => String::new(),
        other => serde_yaml_ng::to_string(other)
            .unwrap_or_default()
            .trim_end()
            .to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const YAML: &str = "cron: 0/5 * * * * ?\njobName: j\nshardingTotalCount: 3\nfailover: true\n\
                        monitorExecution: true\nprops:\n  script.command.line: echo hi\n\
                        jobExecutorServiceHandlerType: CPU\n";

    #[test]
    fn a_form_round_trips_and_keeps_other_keys() {
        let mut form = ConfigForm::from_config(YAML, Version(4));
        assert_eq!(form.values["cron"], "0/5 * * * * ?");
        assert_eq!(form.values["props"], "script.command.line=echo hi");
        assert_eq!(form.values["failover"], "true");
        assert_eq!(form.version, 4);
        form.values.insert("shardingTotalCount".into(), "5".into());
        let config = form.build("j", YAML).expect("valid");
        assert_eq!(config.sharding_total_count, 5);
        assert!(config.failover);
        assert_eq!(config.props["script.command.line"], "echo hi");
    }

    #[test]
    fn problems_land_on_their_fields() {
        let mut fields: BTreeMap<String, String> = ConfigForm::from_config(YAML, Version(1))
            .values
            .into_iter()
            .collect();
        fields.insert("cron".into(), "0/5 * * * *".into());
        fields.insert("shardingTotalCount".into(), "three".into());
        fields.insert("failover".into(), "on".into());
        fields.insert("monitorExecution".into(), String::new());
        let mut form = ConfigForm::from_fields(&fields);
        assert!(form.build("j", YAML).is_none());
        assert!(form.errors["shardingTotalCount"][0].contains("not a whole number"));
        fields.insert("shardingTotalCount".into(), "3".into());
        let mut form = ConfigForm::from_fields(&fields);
        assert!(form.build("j", YAML).is_none());
        assert!(form.errors.contains_key("cron"), "{:?}", form.errors);
        assert!(form.errors.contains_key("failover"), "{:?}", form.errors);
        assert!(!form.errors.contains_key(""), "{:?}", form.errors);
    }

    #[test]
    fn forms_name_their_actions() {
        let f = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| ((*k).into(), (*v).into()))
                .collect()
        };
        assert_eq!(
            Action::from_form(&f(&[("op", "disable-item"), ("job", "j"), ("item", "2")])).unwrap(),
            Action::DisableItem {
                job: "j".into(),
                item: 2
            }
        );
        assert_eq!(
            Action::from_form(&f(&[("op", "disable"), ("server", "10.0.0.1")])).unwrap(),
            Action::Disable {
                job: None,
                server: Some("10.0.0.1".into())
            }
        );
        assert!(Action::from_form(&f(&[("op", "explode")])).is_err());
        assert!(Action::from_form(&f(&[("op", "trigger")])).is_err());
        assert!(scope(&None, &None).is_err());
        assert_eq!(
            Action::Trigger {
                job: "j".into(),
                parameter: Some("p".into())
            }
            .describe(),
            "trigger job j with parameter \"p\""
        );
    }
}
