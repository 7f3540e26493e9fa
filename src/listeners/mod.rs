//! Job listeners: code that runs before and after each run of a job on an instance
//! (ElasticJob's `ElasticJobListener`), and once per fire across the whole cluster
//! ([`DistributeOnce`], ElasticJob's `AbstractDistributeOnceElasticJobListener`).
//!
//! # When listeners are called
//!
//! shardjob runs a job in *executions*: one execution is the items this instance runs for one
//! fire of one job, for one reason ([`RunKind`]: on time, as a misfire, as a failover, or on a
//! manual trigger); its items start together and its outcomes are reported together. A
//! listener is called around each execution, which is what ElasticJob's `execute()` is:
//!
//! 1. [`JobListener::before`] of every listener of the job, in ascending
//!    [`JobListener::order`] (equal orders in the order they were registered), with a
//!    [`ShardingContexts`] that names all items of the execution;
//! 2. the items run (each through the job's executor and error handler);
//! 3. [`JobListener::after`] of every listener, in the same order, with the same context and
//!    the outcome of every item ([`ItemOutcome`]: succeeded, failed, or cancelled; an item
//!    that never started is `Failed` or `Cancelled` with the reason).
//!
//! The items count as running until the last `after` returns: their `running` markers stay,
//! and a fire that comes meanwhile is a misfire for them. So a job's listener calls for one
//! item never overlap, and `after` is called exactly once for every `before` that was called
//! (also when the run was cancelled or its items were not started).
//!
//! One fire can make more than one execution on an instance: an item still busy with the
//! previous fire runs this fire as a misfire right after, in an execution of its own, and so
//! gets its own `before`/`after`. Unlike ElasticJob, an instance that has no item for a fire
//! calls no listener for it (ElasticJob calls them with an empty context).
//!
//! # Failures
//!
//! A listener that returns an error, panics, or (after the run is cancelled) ignores the
//! cancellation for the scheduler's cancel timeout, never stops the job, the other listeners
//! or other jobs. As in ElasticJob, the failure goes to the job's error handler
//! (`jobErrorHandlerType`): `LOG` (the default) logs it as an error and the run goes on;
//! `IGNORE` logs it at debug level and the run goes on; `THROW` logs it as an error and,
//! for a failing `before`, **the run's items are not started** and are reported failed
//! (ElasticJob's rethrow ends its `execute()` the same way); the `after` listeners are still
//! called. Every failure is also reported to subscribers as
//! [`RunEvent::ListenerFailed`](crate::runtime::RunEvent::ListenerFailed).
//!
//! A hook has no deadline of its own (a [`DistributeOnce`] has its round timeouts): one that
//! never returns holds its run, whose items stay running, until the run is cancelled (session
//! in doubt or lost, shutdown grace over, job removed). Then the run's `before` hooks and items
//! together have the scheduler's cancel timeout to end, and its `after` hooks together
//! another; a hook still going is dropped and reported as [`ListenerError::Stopped`].
//!
//! # Registering listeners
//!
//! Per job, in code with [`SchedulerBuilder::listener`](crate::runtime::SchedulerBuilder::listener);
//! or by name: [`SchedulerBuilder::listener_type`](crate::runtime::SchedulerBuilder::listener_type)
//! registers a factory under a name, and every job whose `jobListenerTypes` lists the name gets
//! a listener made by it. A name no factory is registered for is an error of
//! [`SchedulerBuilder::build`](crate::runtime::SchedulerBuilder::build) (and of
//! [`SchedulerHandle::add_job`](crate::runtime::SchedulerHandle::add_job)). Listeners are made
//! from the local configuration when the job is added; a later change of `jobListenerTypes`
//! in the registry does not change them.
//!
//! ```no_run
//! use std::collections::BTreeMap;
//! use std::sync::Arc;
//! use std::time::Duration;
//! use shardjob::core::JobConfig;
//! use shardjob::core::machine::ItemOutcome;
//! use shardjob::jobs::{JobError, ShardingContext, SimpleJob};
//! use shardjob::listeners::{
//!     DistributeOnce, DistributeOnceListener, JobListener, ListenerError, ShardingContexts,
//! };
//! use shardjob::runtime::Scheduler;
//!
//! struct Settle;
//!
//! #[async_trait::async_trait]
//! impl SimpleJob for Settle {
//!     async fn execute(&self, _ctx: &ShardingContext) -> Result<(), JobError> {
//!         Ok(())
//!     }
//! }
//!
//! /// Around every run of this instance.
//! struct Timing;
//!
//! #[async_trait::async_trait]
//! impl JobListener for Timing {
//!     async fn before(&self, ctx: &ShardingContexts) -> Result<(), ListenerError> {
//!         println!("{}: items {:?} start", ctx.job_name, ctx.items().collect::<Vec<_>>());
//!         Ok(())
//!     }
//!
//!     async fn after(
//!         &self,
//!         ctx: &ShardingContexts,
//!         outcomes: &BTreeMap<u32, ItemOutcome>,
//!     ) -> Result<(), ListenerError> {
//!         println!("{}: {outcomes:?}", ctx.job_name);
//!         Ok(())
//!     }
//! }
//!
//! /// Once per fire, whichever instance gets there last.
//! struct OpenAndCloseTheDay;
//!
//! #[async_trait::async_trait]
//! impl DistributeOnceListener for OpenAndCloseTheDay {
//!     async fn before_once(&self, _ctx: &ShardingContexts) -> Result<(), ListenerError> {
//!         println!("every item of the fire has started: open the day");
//!         Ok(())
//!     }
//!
//!     async fn after_once(
//!         &self,
//!         _ctx: &ShardingContexts,
//!         _outcomes: &BTreeMap<u32, ItemOutcome>,
//!     ) -> Result<(), ListenerError> {
//!         println!("every item of the fire has ended: close the day");
//!         Ok(())
//!     }
//! }
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let mut config = JobConfig::new("settle", 4);
//! config.job_listener_types = vec!["timing".into()];
//! let scheduler = Scheduler::builder()
//!     .registry(Arc::new(shardjob::mem::MemServer::default().connect_default()))
//!     .listener_type("timing", |_config: &JobConfig| Arc::new(Timing) as Arc<dyn JobListener>)
//!     .listener(
//!         "settle",
//!         DistributeOnce::new(OpenAndCloseTheDay, Duration::from_secs(10), Duration::from_secs(60)),
//!     )
//!     .job(config, Settle)
//!     .build()
//!     .await?;
//! # scheduler.shutdown().await?;
//! # Ok(()) }
//! ```

mod once;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use shardjob_core::JobConfig;
use shardjob_core::machine::record::RunKind;
use shardjob_core::machine::{ExecutionId, ItemOutcome};
use shardjob_core::registry::RegistryError;

use crate::jobs::CancelSignal;

pub use once::{DistributeOnce, DistributeOnceListener};
pub(crate) use once::{Guarantee, GuaranteeShared};

/// Which hook of a listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ListenerHook {
    /// [`JobListener::before`] (for [`DistributeOnce`]: the `guarantee/started` round).
    Before,
    /// [`JobListener::after`] (for [`DistributeOnce`]: the `guarantee/completed` round).
    After,
}

impl fmt::Display for ListenerHook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ListenerHook::Before => "before",
            ListenerHook::After => "after",
        })
    }
}

/// Why a listener hook failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ListenerError {
    /// The listener reported a failure.
    #[error("{0}")]
    Failed(String),
    /// A [`DistributeOnce`] round did not complete within its timeout on this instance: not
    /// every item of the fire arrived (an instance is slow, blocked or dead, or an item has
    /// no live owner). This instance ended the round; the once-hook did not run.
    #[error(
        "distribute-once {hook} round of fire {round} timed out after {} ms: not every item arrived",
        .after.as_millis()
    )]
    Timeout {
        /// Which round.
        hook: ListenerHook,
        /// The round's key (the fire time in epoch milliseconds, or `trigger`).
        round: String,
        /// The timeout.
        after: Duration,
    },
    /// Another instance's wait for a [`DistributeOnce`] round ran out first and it ended the
    /// round: the once-hook did not run (or its end was not recorded in time).
    #[error("distribute-once {hook} round of fire {round} was ended by {by}, whose wait timed out")]
    RoundAbandoned {
        /// Which round.
        hook: ListenerHook,
        /// The round's key.
        round: String,
        /// The instance that ended it.
        by: String,
    },
    /// The registry failed while a [`DistributeOnce`] round was being recorded.
    #[error("registry: {0}")]
    Registry(#[from] RegistryError),
    /// The run was cancelled while the listener waited.
    #[error("cancelled")]
    Cancelled,
    /// The listener panicked.
    #[error("panicked: {0}")]
    Panicked(String),
    /// The run was cancelled and the listener ignored it for the cancel timeout: it was
    /// dropped.
    #[error("ignored the run's cancellation for {} ms and was stopped", .0.as_millis())]
    Stopped(Duration),
}

impl ListenerError {
    /// A failure with the message of any error or text.
    pub fn failed(error: impl fmt::Display) -> Self {
        ListenerError::Failed(error.to_string())
    }
}

/// What a listener knows of one run: ElasticJob's `ShardingContexts` (the job, the task id,
/// the total count, the job parameter, and every item of the run with its parameter), plus
/// shardjob's additions.
#[derive(Clone)]
pub struct ShardingContexts {
    /// `jobName`.
    pub job_name: String,
    /// `taskId`: `{job}@-@{items}@-@READY@-@{instance id}`, one per execution.
    pub task_id: String,
    /// `shardingTotalCount`.
    pub sharding_total_count: u32,
    /// `jobParameter` (or a manual trigger's parameter).
    pub job_parameter: String,
    /// `shardingItemParameters`: the items of this run, each with its parameter if it has
    /// one.
    pub sharding_item_parameters: BTreeMap<u32, Option<String>>,
    /// The fencing token of each item of the run.
    pub fencing_tokens: BTreeMap<u32, u64>,
    /// The instance that runs them.
    pub instance_id: String,
    /// The execution (the runtime's id of this run on this instance).
    pub execution: ExecutionId,
    /// The scheduled fire time (the trigger time for a manual trigger).
    pub fire_time: DateTime<Utc>,
    /// Why the items run.
    pub kind: RunKind,
    /// The job's `props` from its effective configuration.
    pub props: Arc<BTreeMap<String, String>>,
    /// The run's cancellation signal (the session is in doubt or lost, the instance shuts
    /// down, the job is removed). Long listeners should stop when it fires.
    pub cancel: CancelSignal,
    /// The runtime's access to the registry, for [`DistributeOnce`]; `None` for a context
    /// made by hand.
    pub(crate) guarantee: Option<Arc<Guarantee>>,
}

impl fmt::Debug for ShardingContexts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ShardingContexts")
            .field("job_name", &self.job_name)
            .field("task_id", &self.task_id)
            .field("sharding_total_count", &self.sharding_total_count)
            .field("job_parameter", &self.job_parameter)
            .field("sharding_item_parameters", &self.sharding_item_parameters)
            .field("instance_id", &self.instance_id)
            .field("execution", &self.execution)
            .field("fire_time", &self.fire_time)
            .field("kind", &self.kind)
            .finish_non_exhaustive()
    }
}

impl ShardingContexts {
    /// A context for `items` of `total` with everything else empty: a starting point for
    /// testing a listener by hand. (A [`DistributeOnce`] given such a context has no
    /// registry: it calls its once-hooks directly, as if this were the only instance.)
    pub fn new(
        job_name: impl Into<String>,
        sharding_total_count: u32,
        items: impl IntoIterator<Item = u32>,
    ) -> Self {
        let sharding_item_parameters: BTreeMap<u32, Option<String>> =
            items.into_iter().map(|i| (i, None)).collect();
        let fencing_tokens = sharding_item_parameters.keys().map(|&i| (i, 0)).collect();
        Self {
            job_name: job_name.into(),
            task_id: String::new(),
            sharding_total_count,
            job_parameter: String::new(),
            sharding_item_parameters,
            fencing_tokens,
            instance_id: String::new(),
            execution: ExecutionId(0),
            fire_time: DateTime::<Utc>::default(),
            kind: RunKind::Scheduled,
            props: Arc::default(),
            cancel: CancelSignal::never(),
            guarantee: None,
        }
    }

    /// The items of the run, ascending.
    pub fn items(&self) -> impl Iterator<Item = u32> + '_ {
        self.sharding_item_parameters.keys().copied()
    }
}

/// A listener of a job's runs on this instance (ElasticJob's `ElasticJobListener`): see the
/// [module documentation](self) for when it is called and what a failure does.
///
/// Both hooks do nothing by default; implement the ones you need.
#[async_trait]
pub trait JobListener: Send + Sync + 'static {
    /// Called before the items of a run start.
    async fn before(&self, ctx: &ShardingContexts) -> Result<(), ListenerError> {
        let _ = ctx;
        Ok(())
    }

    /// Called after every item of the run has ended, with each item's outcome.
    async fn after(
        &self,
        ctx: &ShardingContexts,
        outcomes: &BTreeMap<u32, ItemOutcome>,
    ) -> Result<(), ListenerError> {
        let _ = (ctx, outcomes);
        Ok(())
    }

    /// Listeners of a job are called in ascending order (ElasticJob's `order()`; the default
    /// is `i32::MAX`, as ElasticJob's `Integer.MAX_VALUE`).
    fn order(&self) -> i32 {
        i32::MAX
    }

    /// The listener's name in logs and events; the Rust type name by default.
    fn name(&self) -> String {
        std::any::type_name::<Self>().to_owned()
    }
}

/// Makes the listener for a job that names it in `jobListenerTypes`: registered by name with
/// [`SchedulerBuilder::listener_type`](crate::runtime::SchedulerBuilder::listener_type), called
/// once per job with the job's local configuration.
pub type ListenerFactory = Arc<dyn Fn(&JobConfig) -> Arc<dyn JobListener> + Send + Sync>;

/// Why a job's listeners cannot be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ListenerSetupError {
    /// The job's `jobListenerTypes` names a listener type no factory is registered for.
    #[error(
        "job {job}: jobListenerTypes names {name:?}, but no listener type of that name is registered (SchedulerBuilder::listener_type)"
    )]
    UnknownType {
        /// The job.
        job: String,
        /// The unknown name.
        name: String,
    },
    /// A listener was registered for a job the builder does not have.
    #[error("a listener was registered for job {0:?}, which was not added to the scheduler")]
    UnknownJob(String),
}

/// The listeners of one job: made from `jobListenerTypes` and the ones given in code, in
/// calling order.
pub(crate) fn resolve(
    config: &JobConfig,
    given: Vec<Arc<dyn JobListener>>,
    factories: &BTreeMap<String, ListenerFactory>,
) -> Result<Vec<Arc<dyn JobListener>>, ListenerSetupError> {
    let mut listeners = Vec::new();
    for name in &config.job_listener_types {
        let factory =
            factories
                .get(name.trim())
                .ok_or_else(|| ListenerSetupError::UnknownType {
                    job: config.job_name.clone(),
                    name: name.clone(),
                })?;
        listeners.push(factory(config));
    }
    listeners.extend(given);
    // Stable: equal orders keep their registration order.
    listeners.sort_by_key(|l| l.order());
    Ok(listeners)
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Named(i32, &'static str);

    #[async_trait]
    impl JobListener for Named {
        fn order(&self) -> i32 {
            self.0
        }
        fn name(&self) -> String {
            self.1.to_owned()
        }
    }

    #[test]
    fn resolves_types_then_sorts_stably_by_order() {
        let mut config = JobConfig::new("j", 2);
        config.job_listener_types = vec!["b".into(), "a".into()];
        let mut factories: BTreeMap<String, ListenerFactory> = BTreeMap::new();
        factories.insert(
            "a".into(),
            Arc::new(|_: &JobConfig| Arc::new(Named(5, "a")) as Arc<dyn JobListener>),
        );
        factories.insert(
            "b".into(),
            Arc::new(|_: &JobConfig| Arc::new(Named(i32::MAX, "b")) as Arc<dyn JobListener>),
        );
        let given: Vec<Arc<dyn JobListener>> = vec![
            Arc::new(Named(i32::MAX, "code")),
            Arc::new(Named(1, "first")),
        ];
        let names: Vec<String> = resolve(&config, given, &factories)
            .unwrap()
            .iter()
            .map(|l| l.name())
            .collect();
        assert_eq!(names, ["first", "a", "b", "code"]);

        config.job_listener_types.push("nope".into());
        let err = resolve(&config, Vec::new(), &factories).err().unwrap();
        assert!(err.to_string().contains("\"nope\""), "{err}");
    }

    #[test]
    fn default_name_is_the_type_name() {
        struct Plain;
        impl JobListener for Plain {}
        assert!(Plain.name().ends_with("Plain"));
    }
}
