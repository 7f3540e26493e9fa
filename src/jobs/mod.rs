//! Job kinds and what a job sees of a run: the [`ShardingContext`] of one item, the
//! [`Job`] trait the runtime calls, and the builtin kinds.
//!
//! | kind | how to use it | type stored in the registry |
//! |---|---|---|
//! | Simple | implement [`SimpleJob`] and pass the value to the builder | the Rust type name |
//! | Dataflow | implement [`DataflowJob`] and pass [`Dataflow`]`(value)` | the Rust type name |
//! | Script | `ScriptJob` (`script` feature): `script.command.line` in `props` (see [`script`]) | `SCRIPT` |
//! | HTTP | `HttpJob` (`http` feature): `http.uri`, `http.method`, ... in `props` (see [`http`]) | `HTTP` |
//!
//! The config-only kinds, Script and HTTP, are behind the library's `script` and `http`
//! features (off by default; the `shardjob` binary has both): an application that writes its
//! jobs in Rust pulls neither a process runner nor an HTTP client. Their prop keys are always
//! here.
//!
//! Every kind runs per item: an execution of `n` items calls the job `n` times, each with the
//! item's own context, at most as many at once as the job's executor strategy allows.

mod dataflow;
pub mod http;
pub mod script;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use shardjob_core::machine::CancelReason;
use shardjob_core::machine::record::RunKind;
use tokio::sync::watch;

pub use dataflow::{Dataflow, DataflowJob, PROP_STREAMING};
#[cfg(feature = "http")]
pub use http::HttpJob;
#[cfg(feature = "script")]
pub use script::ScriptJob;
pub use script::{
    DEFAULT_OUTPUT_LIMIT, DEFAULT_SCRIPT_TIMEOUT, ENV_FENCING_TOKEN, ENV_FIRE_TIME, ENV_RUN_KIND,
    PROP_COMMAND_LINE, PROP_OUTPUT_LIMIT, PROP_TIMEOUT,
};
#[cfg(feature = "script")]
pub use script::{SplitError, split_command_line};

/// What one item of a run knows: ElasticJob's `ShardingContext` fields, serialized with exactly
/// ElasticJob's names and order (`jobName`, `taskId`, `shardingTotalCount`, `jobParameter`,
/// `shardingItem`, `shardingParameter`; the last is left out when the item has none, as Gson
/// does), plus shardjob's additions, which are not serialized: the fire time, why the item
/// runs, its fencing token, the job's `props`, and the cancellation and re-sharding signals.
///
/// ```
/// # use shardjob::jobs::ShardingContext;
/// let ctx = ShardingContext::new("settle", 3, 1).with_sharding_parameter("south");
/// assert_eq!(
///     serde_json::to_string(&ctx).unwrap(),
///     r#"{"jobName":"settle","taskId":"","shardingTotalCount":3,"jobParameter":"","shardingItem":1,"shardingParameter":"south"}"#
/// );
/// ```
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ShardingContext {
    /// `jobName`.
    pub job_name: String,
    /// `taskId`: `{job}@-@{items}@-@READY@-@{instance id}`, one per execution.
    pub task_id: String,
    /// `shardingTotalCount`.
    pub sharding_total_count: u32,
    /// `jobParameter` (or a manual trigger's parameter).
    pub job_parameter: String,
    /// `shardingItem`: this item.
    pub sharding_item: u32,
    /// `shardingParameter`: the item's `shardingItemParameters` entry, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sharding_parameter: Option<String>,
    /// The scheduled fire time (the trigger time for a manual trigger). Not serialized.
    #[serde(skip)]
    pub fire_time: DateTime<Utc>,
    /// Why the item runs. Not serialized.
    #[serde(skip, default = "scheduled")]
    pub kind: RunKind,
    /// The fencing token: a registry revision that grows with every run of the item. Pass it
    /// with downstream writes so that a store can refuse writes of an older run. Not
    /// serialized.
    #[serde(skip)]
    pub fencing_token: u64,
    /// The job's `props` from its effective configuration (the registry's copy). Not
    /// serialized.
    #[serde(skip)]
    pub props: Arc<BTreeMap<String, String>>,
    /// Set when the run must stop: the session is in doubt or lost, the instance shuts down,
    /// the job is removed. Not serialized.
    #[serde(skip)]
    pub cancel: CancelSignal,
    /// Whether the job's leader has a re-sharding pending (streaming Dataflow jobs stop then).
    /// Not serialized.
    #[serde(skip)]
    pub resharding: ReshardingFlag,
}

fn scheduled() -> RunKind {
    RunKind::Scheduled
}

impl ShardingContext {
    /// A context for `item` of `total` with everything else empty: what the runtime builds,
    /// and a starting point for testing a job by hand.
    pub fn new(job_name: impl Into<String>, sharding_total_count: u32, item: u32) -> Self {
        Self {
            job_name: job_name.into(),
            task_id: String::new(),
            sharding_total_count,
            job_parameter: String::new(),
            sharding_item: item,
            sharding_parameter: None,
            fire_time: DateTime::<Utc>::default(),
            kind: RunKind::Scheduled,
            fencing_token: 0,
            props: Arc::default(),
            cancel: CancelSignal::never(),
            resharding: ReshardingFlag::default(),
        }
    }

    /// Sets the item's parameter (builder style).
    pub fn with_sharding_parameter(mut self, parameter: impl Into<String>) -> Self {
        self.sharding_parameter = Some(parameter.into());
        self
    }

    /// Sets the job parameter (builder style).
    pub fn with_job_parameter(mut self, parameter: impl Into<String>) -> Self {
        self.job_parameter = parameter.into();
        self
    }

    /// Sets the props (builder style).
    pub fn with_props(mut self, props: BTreeMap<String, String>) -> Self {
        self.props = Arc::new(props);
        self
    }

    /// Sets the cancellation signal (builder style).
    pub fn with_cancel(mut self, cancel: CancelSignal) -> Self {
        self.cancel = cancel;
        self
    }

    /// A prop of the job, if set.
    pub fn prop(&self, key: &str) -> Option<&str> {
        self.props.get(key).map(String::as_str)
    }

    /// The context as ElasticJob's JSON (what a script gets as its last argument).
    pub fn to_json(&self) -> String {
        // Plain strings and integers: serialization cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// The cancellation signal of one execution, shared by its items.
///
/// Jobs that run long should look at it: poll [`CancelSignal::is_cancelled`] between steps or
/// `select!` on [`CancelSignal::cancelled`]. A job that ignores it is stopped by the runtime
/// (its future is dropped) after the scheduler's cancel timeout.
#[derive(Debug, Clone)]
pub struct CancelSignal {
    rx: watch::Receiver<Option<CancelReason>>,
}

impl Default for CancelSignal {
    fn default() -> Self {
        Self::never()
    }
}

impl CancelSignal {
    /// A signal and the sender that fires it.
    pub fn new() -> (CancelSender, CancelSignal) {
        let (tx, rx) = watch::channel(None);
        (CancelSender { tx }, CancelSignal { rx })
    }

    /// A signal that never fires.
    pub fn never() -> Self {
        let (_, rx) = watch::channel(None);
        CancelSignal { rx }
    }

    /// Whether the run has been cancelled.
    pub fn is_cancelled(&self) -> bool {
        self.rx.borrow().is_some()
    }

    /// Why the run was cancelled, if it was.
    pub fn reason(&self) -> Option<CancelReason> {
        *self.rx.borrow()
    }

    /// Waits until the run is cancelled and returns why. Never returns for a signal that
    /// cannot fire any more.
    pub async fn cancelled(&self) -> CancelReason {
        let mut rx = self.rx.clone();
        loop {
            if let Some(reason) = *rx.borrow_and_update() {
                return reason;
            }
            if rx.changed().await.is_err() {
                // The sender is gone without firing: this run is never cancelled.
                std::future::pending::<()>().await;
            }
        }
    }
}

/// Fires a [`CancelSignal`].
#[derive(Debug)]
pub struct CancelSender {
    tx: watch::Sender<Option<CancelReason>>,
}

impl CancelSender {
    /// Cancels the run (the first reason stays).
    pub fn cancel(&self, reason: CancelReason) {
        self.tx.send_if_modified(|r| {
            if r.is_none() {
                *r = Some(reason);
                true
            } else {
                false
            }
        });
    }

    /// Whether the run has been cancelled.
    pub fn is_cancelled(&self) -> bool {
        self.tx.borrow().is_some()
    }
}

/// Whether a job's re-sharding is pending (`leader/sharding/necessary` exists), as this
/// instance's registry watch last showed it.
#[derive(Debug, Clone, Default)]
pub struct ReshardingFlag(Arc<AtomicBool>);

impl ReshardingFlag {
    /// Whether a re-sharding is pending.
    pub fn is_pending(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    pub(crate) fn set(&self, pending: bool) {
        self.0.store(pending, Ordering::Relaxed);
    }
}

/// Output a job captured for one item (a script's stdout and stderr), each bounded.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CapturedOutput {
    /// The end of standard output (lossy UTF-8).
    pub stdout: String,
    /// The end of standard error (lossy UTF-8).
    pub stderr: String,
    /// Bytes of standard output dropped from the front to stay within the limit.
    pub stdout_truncated: u64,
    /// Bytes of standard error dropped from the front to stay within the limit.
    pub stderr_truncated: u64,
}

/// Why an item failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JobError {
    /// The job body reported a failure.
    #[error("{0}")]
    Failed(String),
    /// The job stopped because its run was cancelled.
    #[error("cancelled")]
    Cancelled,
    /// The job's configuration cannot be used (a missing or malformed prop): fatal, every run
    /// fails the same way until the configuration is fixed.
    #[error("bad job configuration: {0}")]
    Config(String),
    /// The job could not be started or talked to (spawning a script, a network error):
    /// may succeed next time.
    #[error("{0}")]
    Io(String),
    /// A script ended with a non-zero status or by a signal.
    #[error("script exited with {status}{}", stderr_tail(.output))]
    ScriptFailed {
        /// `exit status 3`, `signal 9`, ...
        status: String,
        /// What it printed.
        output: CapturedOutput,
    },
    /// An HTTP job's response had a status at or above its failure threshold.
    #[error("HTTP status {status}")]
    HttpStatus {
        /// The status.
        status: u16,
        /// The start of the response body.
        output: CapturedOutput,
    },
    /// The item ran longer than its timeout and was stopped.
    #[error("timed out after {} ms{}", .after.as_millis(), stderr_tail(.output))]
    TimedOut {
        /// The timeout.
        after: Duration,
        /// What it printed until then.
        output: CapturedOutput,
    },
    /// The job body panicked.
    #[error("panicked: {0}")]
    Panicked(String),
}

fn stderr_tail(output: &CapturedOutput) -> String {
    const SHOWN: usize = 200;
    let text = output.stderr.trim();
    if text.is_empty() {
        return String::new();
    }
    let start = text
        .char_indices()
        .rev()
        .nth(SHOWN.saturating_sub(1))
        .map_or(0, |(i, _)| i);
    format!(": {}", &text[start..])
}

impl JobError {
    /// A failure with the message of any error or text.
    pub fn failed(error: impl std::fmt::Display) -> Self {
        JobError::Failed(error.to_string())
    }

    /// The output the job captured before it failed, if any.
    pub fn output(&self) -> Option<&CapturedOutput> {
        match self {
            JobError::ScriptFailed { output, .. }
            | JobError::TimedOut { output, .. }
            | JobError::HttpStatus { output, .. } => Some(output),
            _ => None,
        }
    }
}

/// A job as the runtime drives it: one call per item.
///
/// Implement [`SimpleJob`] (every `SimpleJob` is a `Job`) or [`DataflowJob`] (wrapped in
/// [`Dataflow`]) rather than this trait; use `ScriptJob` for a command and `HttpJob` for a
/// request (the `script` and `http` features).
#[async_trait]
pub trait Job: Send + Sync + 'static {
    /// The type written to the job's root node. An instance refuses to run a job whose root
    /// node holds another type (as ElasticJob refuses another class).
    fn job_type(&self) -> String;

    /// Runs one item. Returns what the item printed, if the job captures output.
    async fn execute_item(&self, ctx: &ShardingContext)
    -> Result<Option<CapturedOutput>, JobError>;
}

/// A Simple job: one call per item (ElasticJob's `SimpleJob`).
///
/// ```
/// use shardjob::jobs::{JobError, ShardingContext, SimpleJob};
///
/// struct Settle;
///
/// #[async_trait::async_trait]
/// impl SimpleJob for Settle {
///     async fn execute(&self, ctx: &ShardingContext) -> Result<(), JobError> {
///         let region = ctx.sharding_parameter.as_deref().unwrap_or("all");
///         println!("settling {region} (item {}, token {})", ctx.sharding_item, ctx.fencing_token);
///         Ok(())
///     }
/// }
/// ```
#[async_trait]
pub trait SimpleJob: Send + Sync + 'static {
    /// Runs one item.
    async fn execute(&self, ctx: &ShardingContext) -> Result<(), JobError>;

    /// The type written to the job's root node; the Rust type name by default (ElasticJob
    /// writes the class name).
    fn job_type(&self) -> String {
        std::any::type_name::<Self>().to_owned()
    }
}

#[async_trait]
impl<T: SimpleJob> Job for T {
    fn job_type(&self) -> String {
        SimpleJob::job_type(self)
    }

    async fn execute_item(
        &self,
        ctx: &ShardingContext,
    ) -> Result<Option<CapturedOutput>, JobError> {
        self.execute(ctx).await.map(|()| None)
    }
}
