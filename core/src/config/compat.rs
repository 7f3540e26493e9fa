//! Which ElasticJob version a job's `config` node is kept readable by.
//!
//! ElasticJob reads the `config` node into its `JobConfigurationPOJO` with SnakeYAML, which
//! refuses a key the POJO has no property for: the whole node is then unreadable (its
//! lifecycle API and console fail on the job, and an instance started with `overwrite: false`
//! dies). The POJOs of the 3.0.x releases differ in one key only, the executor type:
//!
//! | releases | executor key |
//! |---|---|
//! | 3.0.0-alpha to 3.0.4 | `jobExecutorServiceHandlerType` |
//! | 3.0.5 | `jobExecutorThreadPoolSizeProviderType` |
//!
//! Each release refuses the other's key. shardjob reads both, leaves the key out when the type
//! is the default (`CPU`, which every release assumes for a missing key), and otherwise writes
//! the key of the version the job is kept compatible with: [`ElasticJobCompat`], set by the
//! job's prop [`COMPAT_PROP`]. The setting is a prop of the job so that it lives in the
//! registry with the job (every shardjob instance and the operation API write the same key,
//! whichever of them writes), and ElasticJob instances, which keep any prop, carry it along.
//!
//! 3.0.0 (GA and earlier) does not know `timeZone` either, which shardjob always writes:
//! namespaces shared with 3.0.0 instances are not supported; 3.0.1 to 3.0.4 read what
//! [`ElasticJobCompat::V3_0_4`] writes.

use std::fmt;
use std::str::FromStr;

/// The prop naming the ElasticJob version a job's `config` node is kept readable by: `3.0.4`
/// (the default) or `3.0.5`.
pub const COMPAT_PROP: &str = "shardjob.elasticjob.compat";

/// The executor key of ElasticJob 3.0.0-alpha to 3.0.4.
pub const EXECUTOR_KEY_3_0_4: &str = "jobExecutorServiceHandlerType";

/// The executor key of ElasticJob 3.0.5.
pub const EXECUTOR_KEY_3_0_5: &str = "jobExecutorThreadPoolSizeProviderType";

/// The properties of ElasticJob 3.0.4's `JobConfigurationPOJO`
/// (`org.apache.shardingsphere.elasticjob.infra.pojo`), in its order: the only top-level keys
/// its `config` reader accepts.
pub const POJO_KEYS_3_0_4: &[&str] = &[
    "jobName",
    "cron",
    "timeZone",
    "shardingTotalCount",
    "shardingItemParameters",
    "jobParameter",
    "monitorExecution",
    "failover",
    "misfire",
    "maxTimeDiffSeconds",
    "reconcileIntervalMinutes",
    "jobShardingStrategyType",
    EXECUTOR_KEY_3_0_4,
    "jobErrorHandlerType",
    "jobListenerTypes",
    "jobExtraConfigurations",
    "description",
    "props",
    "disabled",
    "overwrite",
    "label",
    "staticSharding",
];

/// The properties of ElasticJob 3.0.5's `JobConfigurationPOJO`
/// (`org.apache.shardingsphere.elasticjob.kernel.internal.config`), in its order: 3.0.4's with
/// the executor key renamed.
pub const POJO_KEYS_3_0_5: &[&str] = &[
    "jobName",
    "cron",
    "timeZone",
    "shardingTotalCount",
    "shardingItemParameters",
    "jobParameter",
    "monitorExecution",
    "failover",
    "misfire",
    "maxTimeDiffSeconds",
    "reconcileIntervalMinutes",
    "jobShardingStrategyType",
    EXECUTOR_KEY_3_0_5,
    "jobErrorHandlerType",
    "jobListenerTypes",
    "jobExtraConfigurations",
    "description",
    "props",
    "disabled",
    "overwrite",
    "label",
    "staticSharding",
];

/// The ElasticJob version whose key names a job's `config` node is written with.
///
/// The default is 3.0.4: every release from 3.0.0-alpha (2020) to 3.0.4 uses its executor
/// key, so do ElasticJob's console (the `shardingsphere-elasticjob-ui` project, unchanged
/// since 2022) and the Spring Boot starters of those releases; 3.0.5 (2026) is the only
/// release with the other key. A team whose Java instances are 3.0.5 and that sets a
/// non-default executor type says so with [`COMPAT_PROP`]. The key a YAML text happens to use
/// does not decide it: shardjob's own documentation spells the executor key the 3.0.5 way,
/// and a job file written that way must not make the registry unreadable to 3.0.4.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ElasticJobCompat {
    /// ElasticJob 3.0.1 to 3.0.4 (`jobExecutorServiceHandlerType`).
    #[default]
    V3_0_4,
    /// ElasticJob 3.0.5 (`jobExecutorThreadPoolSizeProviderType`).
    V3_0_5,
}

impl ElasticJobCompat {
    /// Every version.
    pub const ALL: [ElasticJobCompat; 2] = [ElasticJobCompat::V3_0_4, ElasticJobCompat::V3_0_5];

    /// The version as the prop spells it.
    pub fn name(self) -> &'static str {
        match self {
            ElasticJobCompat::V3_0_4 => "3.0.4",
            ElasticJobCompat::V3_0_5 => "3.0.5",
        }
    }

    /// The key this version stores the executor type under.
    pub fn executor_key(self) -> &'static str {
        match self {
            ElasticJobCompat::V3_0_4 => EXECUTOR_KEY_3_0_4,
            ElasticJobCompat::V3_0_5 => EXECUTOR_KEY_3_0_5,
        }
    }

    /// The top-level keys this version's `config` reader accepts.
    pub fn pojo_keys(self) -> &'static [&'static str] {
        match self {
            ElasticJobCompat::V3_0_4 => POJO_KEYS_3_0_4,
            ElasticJobCompat::V3_0_5 => POJO_KEYS_3_0_5,
        }
    }
}

impl fmt::Display for ElasticJobCompat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for ElasticJobCompat {
    type Err = String;

    /// Parses `3.0.4` or `3.0.5` (surrounding spaces ignored); the error lists both.
    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        ElasticJobCompat::ALL
            .into_iter()
            .find(|v| v.name() == s)
            .ok_or_else(|| {
                format!(
                    "unknown ElasticJob version {s:?}; expected 3.0.4 (for 3.0.1 to 3.0.4, the \
                     default) or 3.0.5"
                )
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_versions_differ_in_the_executor_key_only() {
        let a: Vec<&str> = POJO_KEYS_3_0_4.to_vec();
        let b: Vec<&str> = POJO_KEYS_3_0_5.to_vec();
        assert_eq!(a.len(), b.len());
        let differing: Vec<(&str, &str)> = a
            .iter()
            .zip(&b)
            .filter(|(x, y)| x != y)
            .map(|(x, y)| (*x, *y))
            .collect();
        assert_eq!(differing, [(EXECUTOR_KEY_3_0_4, EXECUTOR_KEY_3_0_5)]);
    }

    #[test]
    fn versions_parse_and_print() {
        for v in ElasticJobCompat::ALL {
            assert_eq!(v.name().parse::<ElasticJobCompat>(), Ok(v));
            assert!(v.pojo_keys().contains(&v.executor_key()));
        }
        assert_eq!(" 3.0.5 ".parse(), Ok(ElasticJobCompat::V3_0_5));
        assert_eq!(ElasticJobCompat::default(), ElasticJobCompat::V3_0_4);
        let err = "3.0.6".parse::<ElasticJobCompat>().unwrap_err();
        assert!(err.contains("3.0.4") && err.contains("3.0.5"), "{err}");
    }
}
