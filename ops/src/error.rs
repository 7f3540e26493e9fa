//! The operation API's errors, and the classes a caller maps them to.

use shardjob_core::JobConfigError;
use shardjob_core::registry::{ErrorClass, NodePath, PathError, RegistryError};

/// What kind of failure an [`OpsError`] is: the CLI maps [`ErrorKind::Unreachable`] to exit
/// status 2 and every other kind to 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// The job, server, item or instance named does not exist. Nothing was written.
    NotFound,
    /// The request itself is wrong (a name that cannot be a node, an invalid configuration,
    /// an item out of range). Nothing was written.
    BadInput,
    /// Someone else changed what the request was based on (a configuration updated since it
    /// was read, a node created or deleted meanwhile). Nothing of the failed step was written:
    /// read again and decide again.
    Conflict,
    /// The registry could not be reached or did not answer in time; whether a write took
    /// effect is unknown.
    Unreachable,
    /// The registry holds something that cannot be read (a `config` node that is not a job
    /// configuration).
    BadData,
    /// The registry refused the request (permissions, size).
    Refused,
}

/// An error of the operation API. Every message says what is wrong and where.
#[derive(Debug, thiserror::Error)]
pub enum OpsError {
    /// No job of that name: no `config` node under `/{job}`.
    #[error(
        "job {job:?} not found: the namespace has no /{job}/config node (list the jobs with `shardjob jobs`)"
    )]
    JobNotFound {
        /// The job asked for.
        job: String,
    },
    /// The server IP has no `servers/{ip}` node in the job (or in any job, when `job` is
    /// `None`).
    #[error("server {ip:?} not found {}: no servers/{ip} node (list the servers with `shardjob servers`)", in_job(.job))]
    ServerNotFound {
        /// The job looked in, or `None` for every job.
        job: Option<String>,
        /// The server asked for.
        ip: String,
    },
    /// No live instance matches (the job has none, or none on that server).
    #[error("no live instance of {} {}: nothing to do", job.as_deref().map_or("any job".to_owned(), |j| format!("job {j:?}")), on_server(.ip))]
    NoInstance {
        /// The job, or `None` for every job.
        job: Option<String>,
        /// The server, if one was named.
        ip: Option<String>,
    },
    /// The job has no `servers/*` node at all, so there is no server to disable or enable.
    #[error(
        "job {job:?} has no server node: no instance has registered it yet (start an instance, or set `disabled: true` in its configuration)"
    )]
    NoServers {
        /// The job.
        job: String,
    },
    /// An item number at or beyond the job's `shardingTotalCount`.
    #[error(
        "item {item} of job {job:?} is out of range: items are 0..{total} (shardingTotalCount is {total})"
    )]
    ItemOutOfRange {
        /// The job.
        job: String,
        /// The item asked for.
        item: u32,
        /// The job's item count.
        total: u32,
    },
    /// A name given by the caller cannot be a registry node name.
    #[error("{what} {value:?} is not a valid registry node name: {source}")]
    BadName {
        /// What the name is (`job name`, `server IP`).
        what: &'static str,
        /// The name as given.
        value: String,
        /// Why it is not valid.
        source: PathError,
    },
    /// Neither a job nor a server was named, where at least one is needed.
    #[error("name a job, a server IP, or both")]
    EmptyScope,
    /// A new configuration names another job than the one it is meant for.
    #[error(
        "the configuration is for job {found:?}, not {job:?}: a job cannot be renamed (its name is its registry node); create the new job and remove the old one"
    )]
    JobNameMismatch {
        /// The job being updated.
        job: String,
        /// The `jobName` the configuration holds.
        found: String,
    },
    /// A new configuration does not pass validation; every problem is named.
    #[error("the new configuration of job {job:?} is not valid, nothing was written: {source}")]
    InvalidConfig {
        /// The job.
        job: String,
        /// The problems.
        source: JobConfigError,
    },
    /// The registry's `config` node cannot be read as a job configuration.
    #[error(
        "{path} cannot be read as a job configuration: {reason} (fix it with `shardjob config set`)"
    )]
    BadConfigNode {
        /// The node.
        path: NodePath,
        /// Why it cannot be read.
        reason: String,
    },
    /// A node changed between the read and the write: the write was not applied.
    #[error(
        "{what} was changed by someone else meanwhile, nothing was written: read it again and retry ({source})"
    )]
    Conflict {
        /// What the write was about.
        what: String,
        /// The registry's answer.
        source: RegistryError,
    },
    /// The registry could not be reached or answered too late.
    #[error(
        "registry unreachable while {doing}: {source} (whether the last write took effect is unknown)"
    )]
    Unreachable {
        /// What the call was doing.
        doing: String,
        /// The registry's error.
        source: RegistryError,
    },
    /// The registry refused a request for another reason.
    #[error("the registry refused the request while {doing}: {source}")]
    Registry {
        /// What the call was doing.
        doing: String,
        /// The registry's error.
        source: RegistryError,
    },
}

fn in_job(job: &Option<String>) -> String {
    match job {
        Some(j) => format!("in job {j:?}"),
        None => "in any job".to_owned(),
    }
}

fn on_server(ip: &Option<String>) -> String {
    match ip {
        Some(ip) => format!("on server {ip:?}"),
        None => String::new(),
    }
}

impl OpsError {
    /// The kind of failure, for callers that map errors to exit statuses or HTTP codes.
    pub fn kind(&self) -> ErrorKind {
        match self {
            OpsError::JobNotFound { .. }
            | OpsError::ServerNotFound { .. }
            | OpsError::NoInstance { .. }
            | OpsError::NoServers { .. } => ErrorKind::NotFound,
            OpsError::ItemOutOfRange { .. }
            | OpsError::BadName { .. }
            | OpsError::EmptyScope
            | OpsError::JobNameMismatch { .. }
            | OpsError::InvalidConfig { .. } => ErrorKind::BadInput,
            OpsError::BadConfigNode { .. } => ErrorKind::BadData,
            OpsError::Conflict { .. } => ErrorKind::Conflict,
            OpsError::Unreachable { .. } => ErrorKind::Unreachable,
            OpsError::Registry { .. } => ErrorKind::Refused,
        }
    }

    /// Classifies a registry error met while `doing` something.
    pub(crate) fn registry(doing: impl Into<String>, source: RegistryError) -> OpsError {
        let doing = doing.into();
        match source.class() {
            ErrorClass::Transient | ErrorClass::LostSession => {
                OpsError::Unreachable { doing, source }
            }
            ErrorClass::Conflict => OpsError::Conflict {
                what: doing,
                source,
            },
            ErrorClass::Fatal => match source.root_cause() {
                RegistryError::Closed => OpsError::Unreachable { doing, source },
                _ => OpsError::Registry { doing, source },
            },
        }
    }
}

/// A `Result` of the operation API.
pub type Result<T> = std::result::Result<T, OpsError>;
