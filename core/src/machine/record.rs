//! The per-item execution record, `sharding/{item}/execution`: shardjob's addition to the
//! ElasticJob layout.
//!
//! ElasticJob keeps no durable trace of which fire an item last ran, so a restart either re-runs
//! finished work (#522, #2161) or forgets running work (#2429). shardjob writes one small JSON
//! node per item, in the same transactions that create and remove the `running` marker:
//!
//! ```json
//! {"done":1764050400000,"run":{"fire":1764050460000,"kind":"SCHEDULED","instance":"10.0.0.1@-@42"}}
//! ```
//!
//! `done` is the last scheduled fire (epoch milliseconds, UTC) whose run was recorded as
//! finished; `run` is the run in progress, if any. A `run` whose `running` marker is gone died
//! with its instance's session: failover runs it again, or, with failover off, the fire is
//! given up.

use serde::{Deserialize, Serialize};

use crate::instance::InstanceId;

/// Why an item runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum RunKind {
    /// A cron fire, on time.
    Scheduled,
    /// A cron fire run late, after the item's previous run ended or ownership moved
    /// (ElasticJob's `MISFIRE` source). Several missed fires collapse into one such run.
    Misfire,
    /// A fire whose run died with its instance, run again elsewhere.
    Failover,
    /// A manual trigger; does not count as a fire.
    Trigger,
}

impl RunKind {
    /// The kind's name as stored in execution records (its serde name: `SCHEDULED`,
    /// `MISFIRE`, `FAILOVER`, `TRIGGER`).
    pub fn as_str(self) -> &'static str {
        match self {
            RunKind::Scheduled => "SCHEDULED",
            RunKind::Misfire => "MISFIRE",
            RunKind::Failover => "FAILOVER",
            RunKind::Trigger => "TRIGGER",
        }
    }

    /// ElasticJob's `ExecutionSource` name for this kind (`NORMAL_TRIGGER`, `MISFIRE`,
    /// `FAILOVER`); triggers are `NORMAL_TRIGGER` as in ElasticJob.
    pub fn execution_source(self) -> &'static str {
        match self {
            RunKind::Scheduled | RunKind::Trigger => "NORMAL_TRIGGER",
            RunKind::Misfire => "MISFIRE",
            RunKind::Failover => "FAILOVER",
        }
    }
}

/// A run in progress, as recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunRecord {
    /// The scheduled fire time (epoch ms, UTC), or the trigger time for a trigger.
    pub fire: i64,
    /// Why it runs.
    pub kind: RunKind,
    /// The instance running it.
    pub instance: InstanceId,
}

/// The content of `sharding/{item}/execution`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ItemRecord {
    /// The last scheduled fire whose run finished and was recorded (epoch ms, UTC).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub done: Option<i64>,
    /// The run in progress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<RunRecord>,
}

impl ItemRecord {
    /// Reads a record; `Err` with a message for anything that is not one.
    pub fn parse(data: &[u8]) -> Result<Self, String> {
        serde_json::from_slice(data).map_err(|e| format!("not an execution record: {e}"))
    }

    /// The record as stored.
    pub fn to_bytes(&self) -> Vec<u8> {
        // A struct of integers, an enum and a checked string always serializes.
        serde_json::to_vec(self).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_rejects_garbage() {
        let r = ItemRecord {
            done: Some(5),
            run: Some(RunRecord {
                fire: 7,
                kind: RunKind::Failover,
                instance: InstanceId::new("h@-@1").unwrap(),
            }),
        };
        let bytes = r.to_bytes();
        assert_eq!(
            std::str::from_utf8(&bytes).unwrap(),
            r#"{"done":5,"run":{"fire":7,"kind":"FAILOVER","instance":"h@-@1"}}"#
        );
        assert_eq!(ItemRecord::parse(&bytes).unwrap(), r);
        assert_eq!(ItemRecord::parse(b"{}").unwrap(), ItemRecord::default());
        assert!(ItemRecord::parse(b"garbage").is_err());
        for kind in [
            RunKind::Scheduled,
            RunKind::Misfire,
            RunKind::Failover,
            RunKind::Trigger,
        ] {
            let json = serde_json::to_string(&kind).unwrap();
            assert_eq!(json, format!("\"{}\"", kind.as_str()));
        }
        assert!(ItemRecord::parse(br#"{"run":{"fire":1,"kind":"X","instance":"a"}}"#).is_err());
        assert!(
            ItemRecord::parse(br#"{"run":{"fire":1,"kind":"TRIGGER","instance":"a/b"}}"#).is_err()
        );
    }
}
