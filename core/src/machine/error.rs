//! Errors of the operator commands.

/// Errors of the operator commands.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MachineError {
    /// No such job on this instance.
    #[error("job {0:?} is not hosted by this instance")]
    UnknownJob(String),
    /// A job of that name is already hosted.
    #[error("job {0:?} is already hosted by this instance")]
    DuplicateJob(String),
    /// A job of that name is being removed from this instance: it can be added again once it
    /// has left ([`MachineEvent::JobLeft`](super::MachineEvent::JobLeft)).
    #[error("job {0:?} is still leaving this instance; add it again once it has left")]
    JobLeaving(String),
    /// The job's local configuration is invalid.
    #[error("job {job:?} has an invalid configuration: {error}")]
    InvalidConfig {
        /// The job.
        job: String,
        /// What is wrong.
        error: String,
    },
    /// The instance is shutting down.
    #[error("the instance is shutting down")]
    ShuttingDown,
    /// A custom sharding strategy cannot be registered under its name.
    #[error("sharding strategy {name:?} cannot be registered: {why}")]
    StrategyName {
        /// The strategy's name.
        name: String,
        /// Why not.
        why: &'static str,
    },
}
