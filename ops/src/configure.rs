//! Configuration: get, update (validated, compare-and-set on the `config` node's version) and
//! remove (ElasticJob's `JobConfigurationAPI`).

use std::collections::BTreeMap;

use serde::Serialize;
use serde_yaml_ng::{Mapping, Value};
use shardjob_core::JobConfig;
use shardjob_core::config::Strictness;
use shardjob_core::config::compat::{COMPAT_PROP, EXECUTOR_KEY_3_0_4, EXECUTOR_KEY_3_0_5};
use shardjob_core::registry::{Registry, RegistryError, Version};

use crate::error::{OpsError, Result};
use crate::{Ops, stats};

/// A job's configuration as the registry holds it.
#[derive(Debug, Clone, PartialEq)]
pub struct JobConfigRead {
    /// The configuration, read leniently (keys of newer versions are ignored).
    pub config: JobConfig,
    /// The `config` node's text as stored.
    pub yaml: String,
    /// The `config` node's version: pass it to [`Ops::update_config`] so the update applies
    /// only if nobody changed the node since.
    pub version: Version,
}

/// A configuration update worked out but not written: what `config set` shows before it asks.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigPlan {
    /// The configuration the registry holds now, with the version the update will require.
    pub current: JobConfigRead,
    /// The new configuration, read and validated.
    pub new: JobConfig,
    /// The keys that change.
    pub changes: Vec<ConfigChange>,
}

/// One key whose value differs between two configurations.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ConfigChange {
    /// The YAML key (ElasticJob's camelCase name).
    pub key: String,
    /// The value before, as YAML; `None` if the key was not written.
    pub old: Option<String>,
    /// The value after, as YAML; `None` if the key is not written.
    pub new: Option<String>,
}

/// The keys whose values differ between `old` and `new`, by key, as they would be written.
pub fn config_changes(old: &JobConfig, new: &JobConfig) -> Vec<ConfigChange> {
    let a = yaml_entries(&old.to_yaml());
    let b = yaml_entries(&new.to_yaml());
    let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .filter(|k| a.get(*k) != b.get(*k))
        .map(|k| ConfigChange {
            key: k.clone(),
            old: a.get(k).cloned(),
            new: b.get(k).cloned(),
        })
        .collect()
}

/// Top-level keys of a YAML mapping with their values rendered as YAML.
fn yaml_entries(yaml: &str) -> BTreeMap<String, String> {
    let Ok(Value::Mapping(m)) = serde_yaml_ng::from_str::<Value>(yaml) else {
        return BTreeMap::new();
    };
    m.into_iter()
        .filter_map(|(k, v)| {
            let k = k.as_str()?.to_owned();
            let v = serde_yaml_ng::to_string(&v).unwrap_or_default();
            Some((k, v.trim_end().to_owned()))
        })
        .collect()
}

/// Every top-level key ElasticJob 3.0.x writes (both names of the executor key).
const KNOWN_KEYS: &[&str] = shardjob_core::config::KEYS;

/// The YAML to store for `new` in place of `current`: shardjob's YAML, keeping top-level keys
/// of `current` that shardjob does not know (a newer version's), so an update loses nothing.
/// A set executor type is written under the key of the ElasticJob version the job is kept
/// readable by (`shardjob.elasticjob.compat`, see `shardjob_core::config::compat`); when the
/// job does not say, under the key `current` uses, so that a node a 3.0.5 instance wrote stays
/// readable by 3.0.5 (and one of 3.0.4 by 3.0.4).
pub(crate) fn yaml_for_update(new: &JobConfig, current: &str) -> String {
    let written = new.to_yaml();
    let Ok(Value::Mapping(current)) = serde_yaml_ng::from_str::<Value>(current) else {
        return written;
    };
    let Ok(Value::Mapping(fresh)) = serde_yaml_ng::from_str::<Value>(&written) else {
        return written;
    };
    let has = |k: &str| current.contains_key(k);
    let current_key = match (has(EXECUTOR_KEY_3_0_4), has(EXECUTOR_KEY_3_0_5)) {
        (true, false) => Some(EXECUTOR_KEY_3_0_4),
        (false, true) => Some(EXECUTOR_KEY_3_0_5),
        _ => None,
    };
    let rename = current_key.filter(|_| !new.props.contains_key(COMPAT_PROP));
    let mut reshaped = false;
    let mut out: BTreeMap<String, Value> = BTreeMap::new();
    for (k, v) in fresh {
        let Some(k) = k.as_str() else { continue };
        let k = match rename {
            Some(key) if k == EXECUTOR_KEY_3_0_4 || k == EXECUTOR_KEY_3_0_5 => {
                reshaped |= k != key;
                key
            }
            _ => k,
        };
        out.insert(k.to_owned(), v);
    }
    // ElasticJob reads a missing `timeZone` as the JVM's zone and accepts only `GMT…` ids:
    // a node without the key keeps going without it while the zone stays shardjob's default
    // (which a missing key means to shardjob too).
    if !current.contains_key("timeZone") && new.time_zone == shardjob_core::JobTimeZone::utc() {
        reshaped |= out.remove("timeZone").is_some();
    }
    for (k, v) in current {
        if let Some(k) = k.as_str()
            && !KNOWN_KEYS.contains(&k)
        {
            reshaped = true;
            out.insert(k.to_owned(), v);
        }
    }
    if !reshaped {
        return written;
    }
    // Alphabetical, as ElasticJob writes the node.
    let mapping: Mapping = out
        .into_iter()
        .map(|(k, v)| (Value::String(k), v))
        .collect();
    serde_yaml_ng::to_string(&Value::Mapping(mapping)).unwrap_or(written)
}

impl<R: Registry + ?Sized> Ops<'_, R> {
    /// The job's configuration and the `config` node's version.
    pub async fn config(&self, job: &str) -> Result<JobConfigRead> {
        let paths = crate::job_paths(job)?;
        let node = self
            .registry
            .get(&paths.config())
            .await
            .map_err(|e| OpsError::registry(format!("reading the configuration of {job:?}"), e))?
            .ok_or_else(|| OpsError::JobNotFound {
                job: job.to_owned(),
            })?;
        let yaml = String::from_utf8(node.data).map_err(|_| OpsError::BadConfigNode {
            path: paths.config(),
            reason: "it is not UTF-8 text".to_owned(),
        })?;
        let config = stats::read_config(&yaml).map_err(|reason| OpsError::BadConfigNode {
            path: paths.config(),
            reason,
        })?;
        Ok(JobConfigRead {
            config,
            yaml,
            version: node.stat.version,
        })
    }

    /// Replaces the job's configuration with `new`, if the `config` node still has version
    /// `expected` (from [`Ops::config`]); returns the new version.
    ///
    /// `new` must name the same job and pass validation (every problem is named in
    /// [`OpsError::InvalidConfig`]); a node changed meanwhile is [`OpsError::Conflict`]. In
    /// every error case nothing is written. Live instances pick the change up from the watch:
    /// a new schedule, a re-shard for a new item count.
    pub async fn update_config(
        &self,
        job: &str,
        new: &JobConfig,
        expected: Version,
    ) -> Result<Version> {
        let paths = crate::job_paths(job)?;
        if new.job_name != job {
            return Err(OpsError::JobNameMismatch {
                job: job.to_owned(),
                found: new.job_name.clone(),
            });
        }
        new.validate().map_err(|source| OpsError::InvalidConfig {
            job: job.to_owned(),
            source,
        })?;
        let current = self
            .registry
            .get(&paths.config())
            .await
            .map_err(|e| OpsError::registry(format!("reading the configuration of {job:?}"), e))?
            .ok_or_else(|| OpsError::JobNotFound {
                job: job.to_owned(),
            })?;
        if current.stat.version != expected {
            return Err(OpsError::Conflict {
                what: format!("the configuration of job {job:?}"),
                source: RegistryError::BadVersion {
                    path: paths.config(),
                    expected,
                },
            });
        }
        let yaml = yaml_for_update(new, &String::from_utf8_lossy(&current.data));
        match self
            .registry
            .set(&paths.config(), yaml.into_bytes(), Some(expected))
            .await
        {
            Ok(stat) => Ok(stat.version),
            Err(RegistryError::NoNode(_)) => Err(OpsError::JobNotFound {
                job: job.to_owned(),
            }),
            Err(e) => Err(OpsError::registry(
                format!("the configuration of job {job:?}"),
                e,
            )),
        }
    }

    /// [`Ops::update_config`] from YAML text (a file an operator wrote): read strictly, so a
    /// misspelt key is a problem too, and validated; every problem is named.
    pub async fn update_config_yaml(
        &self,
        job: &str,
        yaml: &str,
        expected: Version,
    ) -> Result<Version> {
        let new = JobConfig::from_yaml(yaml, Strictness::Strict).map_err(|source| {
            OpsError::InvalidConfig {
                job: job.to_owned(),
                source,
            }
        })?;
        self.update_config(job, &new, expected).await
    }

    /// Reads `yaml` (strictly: a misspelt key is a problem) as the job's new configuration,
    /// validates it (every problem named) and compares it with the registry's, writing nothing.
    /// Apply it with [`Ops::update_config`]`(job, &plan.new, plan.current.version)`, which fails
    /// if the configuration changed meanwhile.
    pub async fn plan_config(&self, job: &str, yaml: &str) -> Result<ConfigPlan> {
        let current = self.config(job).await?;
        let new = JobConfig::from_yaml(yaml, Strictness::Strict).map_err(|source| {
            OpsError::InvalidConfig {
                job: job.to_owned(),
                source,
            }
        })?;
        if new.job_name != job {
            return Err(OpsError::JobNameMismatch {
                job: job.to_owned(),
                found: new.job_name,
            });
        }
        new.validate().map_err(|source| OpsError::InvalidConfig {
            job: job.to_owned(),
            source,
        })?;
        let changes = config_changes(&current.config, &new);
        Ok(ConfigPlan {
            current,
            new,
            changes,
        })
    }

    /// Removes the job: its whole subtree (ElasticJob's `removeJobConfiguration`). Live
    /// instances see their nodes go and leave the job. [`OpsError::JobNotFound`] if the
    /// namespace has no such job.
    pub async fn remove_job(&self, job: &str) -> Result<()> {
        let (paths, _) = self.existing_job(job).await?;
        self.registry
            .delete_tree(paths.root())
            .await
            .map_err(|e| OpsError::registry(format!("removing job {job:?}"), e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_elasticjob_304_node_keeps_its_executor_key_and_unknown_keys() {
        let current = "cron: 0/5 * * * * ?\njobExecutorServiceHandlerType: SINGLE_THREAD\n\
                       jobName: j\nshardingTotalCount: 3\nfutureKey: 7\n";
        let read = JobConfig::from_yaml(current, Strictness::Lenient).unwrap();
        let mut new = read.clone();
        new.sharding_total_count = 4;
        let yaml = yaml_for_update(&new, current);
        assert!(
            yaml.contains("jobExecutorServiceHandlerType: SINGLE_THREAD"),
            "{yaml}"
        );
        assert!(!yaml.contains(EXECUTOR_KEY_3_0_5), "{yaml}");
        assert!(yaml.contains("futureKey: 7"), "{yaml}");
        assert!(!yaml.contains("timeZone"), "{yaml}");
        let keys: Vec<String> = yaml_entries(&yaml).into_keys().collect();
        let mut sorted = keys.clone();
        sorted.sort();
        assert_eq!(keys, sorted);
        // shardjob reads it back to the same configuration.
        let back = JobConfig::from_yaml(&yaml, Strictness::Lenient).unwrap();
        assert_eq!(back, new);
        // The default executor type is left out, whichever key the node had.
        let yaml = yaml_for_update(&JobConfig::new("j", 4), current);
        assert!(!yaml.contains("jobExecutor"), "{yaml}");
        // A node in shardjob's own form is written as shardjob writes it.
        let new = JobConfig::new("j", 4);
        assert_eq!(
            yaml_for_update(&new, &JobConfig::new("j", 3).to_yaml()),
            new.to_yaml()
        );
    }

    #[test]
    fn an_elasticjob_305_node_keeps_its_executor_key_unless_the_job_says() {
        let current = "jobExecutorThreadPoolSizeProviderType: SINGLE_THREAD\njobName: j\n\
                       shardingTotalCount: 3\n";
        let mut new = JobConfig::from_yaml(current, Strictness::Lenient).unwrap();
        new.description = "d".into();
        let yaml = yaml_for_update(&new, current);
        assert!(
            yaml.contains("jobExecutorThreadPoolSizeProviderType: SINGLE_THREAD"),
            "{yaml}"
        );
        assert!(!yaml.contains(EXECUTOR_KEY_3_0_4), "{yaml}");
        assert_eq!(
            JobConfig::from_yaml(&yaml, Strictness::Lenient).unwrap(),
            new
        );
        // The job's own setting wins over the node's key.
        let new = new.with_elasticjob_compat(shardjob_core::config::ElasticJobCompat::V3_0_4);
        let yaml = yaml_for_update(&new, current);
        assert!(
            yaml.contains("jobExecutorServiceHandlerType: SINGLE_THREAD"),
            "{yaml}"
        );
        assert!(!yaml.contains(EXECUTOR_KEY_3_0_5), "{yaml}");
    }

    #[test]
    fn changes_name_the_keys() {
        let old = JobConfig::new("j", 3);
        let mut new = old.clone();
        new.sharding_total_count = 5;
        new.description = "d".into();
        let changes = config_changes(&old, &new);
        let keys: Vec<&str> = changes.iter().map(|c| c.key.as_str()).collect();
        assert_eq!(keys, ["description", "shardingTotalCount"]);
        assert_eq!(changes[1].old.as_deref(), Some("3"));
        assert_eq!(changes[1].new.as_deref(), Some("5"));
        assert!(config_changes(&old, &old).is_empty());
    }
}
