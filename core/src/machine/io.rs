//! What the machine and its driver exchange: the jobs it is given, the commands it asks the
//! driver to carry out, the executions it starts and how they end.

use chrono::{DateTime, Utc};

use crate::config::JobConfig;
use crate::registry::{RegistryOp, RequestId, Revision};

use super::MachineEvent;
use super::record::RunKind;

/// A job to host: its local configuration and its type as written in the job root node.
#[derive(Debug, Clone, PartialEq)]
pub struct JobSpec {
    /// The local configuration. The registry's copy wins unless it is missing or
    /// `overwrite` is set.
    pub config: JobConfig,
    /// The job type or class name stored in `/{job}` (ElasticJob refuses to start a job whose
    /// stored type differs; so does shardjob).
    pub job_type: String,
}

/// Identifies one execution the machine asked the driver to start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ExecutionId(pub u64);

/// One item of an execution.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ItemRun {
    /// The item.
    pub item: u32,
    /// Its `shardingItemParameters` entry, if any.
    pub parameter: Option<String>,
    /// The fencing token: the registry revision at which this run's `running` marker was
    /// created. It grows with every run of the item; downstream systems can refuse writes that
    /// carry a smaller token than one already seen.
    pub fencing_token: Revision,
}

/// Items to start: one job, one fire, one kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Execution {
    /// Its id, to report back with [`Machine::handle_execution_finished`](super::Machine).
    pub id: ExecutionId,
    /// The job.
    pub job_name: String,
    /// ElasticJob's task id: `{job}@-@{items}@-@READY@-@{instance id}`.
    pub task_id: String,
    /// `shardingTotalCount`.
    pub sharding_total_count: u32,
    /// `jobParameter`, or the trigger's parameter for a trigger that carried one.
    pub job_parameter: String,
    /// The scheduled fire time (the trigger time for a trigger).
    pub fire_time: DateTime<Utc>,
    /// Why it runs.
    pub kind: RunKind,
    /// The items, ascending.
    pub items: Vec<ItemRun>,
}

/// How one item's run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ItemOutcome {
    /// The job body returned success.
    Succeeded,
    /// The job body failed, with a message.
    Failed(String),
    /// The run was cancelled before it finished.
    Cancelled,
}

/// Why the machine asks for running items to be cancelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelReason {
    /// The session could not be confirmed within the safety margin: another instance may take
    /// the items over soon.
    SessionInDoubt,
    /// The session is gone; the items may already run elsewhere.
    SessionLost,
    /// A graceful shutdown's grace period ran out.
    Shutdown,
    /// The job was removed from this instance.
    JobRemoved,
    /// An operator shut the job down on this instance (deleted its instance node while its
    /// session lived): the items are handed over at once.
    OperatorShutdown,
}

/// What the machine asks the driver to do, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// Run a registry request and report its reply with the id.
    Registry {
        /// Identifies the reply.
        id: RequestId,
        /// The request.
        op: RegistryOp,
    },
    /// Start running items.
    Start(Execution),
    /// Start the run announced with [`Command::Prepare`] under this id, as announced (only
    /// with [`MachineOptions::prepare_ahead`](super::MachineOptions::prepare_ahead)).
    StartPrepared(ExecutionId),
    /// A run claimed ahead of its fire (only with [`MachineOptions::prepare_ahead`](super::MachineOptions::prepare_ahead)). The
    /// driver may set it up now (tasks, contexts) but must run nothing of it before
    /// [`Command::StartPrepared`] with its id; [`Command::Discard`] says it never will start.
    Prepare(Execution),
    /// A run announced with [`Command::Prepare`] will not start: drop what was set up for it.
    /// It is not to be reported finished.
    Discard(ExecutionId),
    /// Signal cancellation to a running execution; report it finished when it stops.
    Cancel {
        /// The execution.
        id: ExecutionId,
        /// Why.
        reason: CancelReason,
    },
    /// Close the registry session (the end of a graceful shutdown).
    CloseSession,
    /// Something worth logging or tracing.
    Event(MachineEvent),
}
