//! What the history records: an item's run starting and finishing (a `JOB_EXECUTION_LOG`
//! row, and shardjob's own row beside it) and an execution's status changes
//! (`JOB_STATUS_TRACE_LOG` rows), with ids that are the same every time the same event is
//! written, so that a batch written again after a reconnection adds nothing.

use std::hash::Hasher;

use chrono::{DateTime, Utc};
use serde::Serialize;

/// ElasticJob truncates failure causes and status messages to this many characters.
pub const MAX_MESSAGE_CHARS: usize = 4000;

/// ElasticJob's `ExecutionSource`: why an item ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ExecutionSource {
    /// A cron fire, or a manual trigger.
    NormalTrigger,
    /// A fire run late (ElasticJob's misfire).
    Misfire,
    /// A run taken over from an instance that died.
    Failover,
}

impl ExecutionSource {
    /// The name written in `execution_source`.
    pub fn as_str(self) -> &'static str {
        match self {
            ExecutionSource::NormalTrigger => "NORMAL_TRIGGER",
            ExecutionSource::Misfire => "MISFIRE",
            ExecutionSource::Failover => "FAILOVER",
        }
    }
}

/// ElasticJob's task states as a Lite executor writes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum TaskState {
    /// The execution begins (`Job '…' execute begin.`).
    Staging,
    /// Its items run.
    Running,
    /// Every item ended without an error.
    Finished,
    /// Some item failed (the message lists them).
    Error,
}

impl TaskState {
    /// The name written in `state`.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskState::Staging => "TASK_STAGING",
            TaskState::Running => "TASK_RUNNING",
            TaskState::Finished => "TASK_FINISHED",
            TaskState::Error => "TASK_ERROR",
        }
    }
}

/// One run of one item: the columns of its `JOB_EXECUTION_LOG` row and of shardjob's
/// `SHARDJOB_EXECUTION_LOG` row (same `id`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ItemRun {
    /// The row's id ([`trace_id`] of what makes the run unique).
    pub id: String,
    /// The job.
    pub job_name: String,
    /// ElasticJob's task id of the execution (`{job}@-@{items}@-@READY@-@{instance}`).
    pub task_id: String,
    /// The host's name.
    pub hostname: String,
    /// The instance's IP.
    pub ip: String,
    /// The item.
    pub sharding_item: u32,
    /// Why it ran.
    pub source: ExecutionSource,
    /// When its body started; `None` for an item whose run was cancelled before it started.
    pub start_time: Option<DateTime<Utc>>,
    /// shardjob: the instance that ran it.
    pub instance_id: String,
    /// shardjob: the scheduled fire time (the trigger time for a manual trigger).
    pub fire_time: DateTime<Utc>,
    /// shardjob: the run's kind (`SCHEDULED`, `MISFIRE`, `FAILOVER`, `TRIGGER`).
    pub run_kind: String,
    /// shardjob: the run's fencing token.
    pub fencing_token: u64,
}

/// A status row of an execution (one instance's items of one fire).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusTrace {
    /// The row's id ([`trace_id`] of the execution and the state).
    pub id: String,
    /// The job.
    pub job_name: String,
    /// ElasticJob's task id of the execution.
    pub task_id: String,
    /// The instance's IP (what ElasticJob reads from the task id as the slave id).
    pub slave_id: String,
    /// `READY`, or `FAILOVER` for a run taken over from a dead instance.
    pub execution_type: String,
    /// The items, as Java prints a list (`[0, 1, 2]`).
    pub sharding_item: String,
    /// The state.
    pub state: TaskState,
    /// The message (truncated on write to [`MAX_MESSAGE_CHARS`]).
    pub message: String,
    /// When.
    pub creation_time: DateTime<Utc>,
}

/// An event for the history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TraceEvent {
    /// An item's body started: the row is inserted (`is_success` false, no completion).
    ItemStarted(ItemRun),
    /// An item's run ended: the row gets its completion (inserted whole if the start was
    /// never written).
    ItemFinished {
        /// The run (with its start time, if it started).
        run: ItemRun,
        /// When it ended.
        complete_time: DateTime<Utc>,
        /// Whether the body succeeded.
        success: bool,
        /// Why it failed (truncated on write to [`MAX_MESSAGE_CHARS`]).
        failure_cause: Option<String>,
    },
    /// An execution's status changed.
    Status(StatusTrace),
}

/// A stable id of the shape of a UUID (`8-4-4-4-12` hex digits, 36 characters, fits
/// ElasticJob's 40-character `id` columns) made from the parts: the same parts give the same
/// id in every process, so an event written twice is recognised.
pub fn trace_id(parts: &[&str]) -> String {
    let mut hasher =
        siphasher::sip128::SipHasher13::new_with_keys(0x7368_6172_646a_6f62, 0x6869_7374);
    for part in parts {
        hasher.write(part.as_bytes());
        // A separator that cannot occur in the parts' text keeps ("ab", "c") and ("a", "bc")
        // apart.
        hasher.write_u8(0xff);
    }
    let h = siphasher::sip128::Hasher128::finish128(&hasher).as_u128();
    let hex = format!("{h:032x}");
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

/// `text` cut to its first [`MAX_MESSAGE_CHARS`] characters, as ElasticJob does.
pub fn truncate_message(text: &str) -> &str {
    match text.char_indices().nth(MAX_MESSAGE_CHARS) {
        Some((at, _)) => &text[..at],
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_stable_distinct_and_uuid_shaped() {
        let a = trace_id(&["10.0.0.1@-@42", "job", "3", "17"]);
        assert_eq!(a, trace_id(&["10.0.0.1@-@42", "job", "3", "17"]));
        assert_ne!(a, trace_id(&["10.0.0.1@-@42", "job", "31", "7"]));
        assert_eq!(a.len(), 36);
        let groups: Vec<usize> = a.split('-').map(str::len).collect();
        assert_eq!(groups, [8, 4, 4, 4, 12]);
        assert!(a.chars().all(|c| c == '-' || c.is_ascii_hexdigit()));
    }

    #[test]
    fn messages_are_cut_at_4000_characters_not_bytes() {
        let long = "é".repeat(5000);
        let cut = truncate_message(&long);
        assert_eq!(cut.chars().count(), MAX_MESSAGE_CHARS);
        assert_eq!(truncate_message("short"), "short");
        let exact = "x".repeat(MAX_MESSAGE_CHARS);
        assert_eq!(truncate_message(&exact).len(), MAX_MESSAGE_CHARS);
    }
}
