//! Operating a shardjob (or ElasticJob 3.0.x) namespace: statistics, configuration and
//! operations over any [`Registry`] — the in-memory store, ZooKeeper or etcd.
//!
//! This is ElasticJob's lifecycle API (`JobStatisticsAPI`, `ServerStatisticsAPI`,
//! `ShardingStatisticsAPI`, `JobConfigurationAPI`, `JobOperateAPI`, `ShardingOperateAPI`), with
//! its exact status rules and the exact nodes and values its writes leave, so that ElasticJob's
//! console can operate a shardjob cluster and these calls can operate an ElasticJob namespace.
//! Where ElasticJob is weak it does better:
//!
//! - **Reads cost O(1) round trips per job.** Every job is read with one tree read
//!   ([`Registry::get_tree`]: one request on etcd, one batched multi-read per tree level on
//!   ZooKeeper), several jobs at a time; ElasticJob's console reads node by node (#2189).
//! - **Nothing is written on a bad request.** An unknown job, server or item, a name that
//!   cannot be a node, an item beyond `shardingTotalCount`, a configuration that does not
//!   validate (every problem named): an [`OpsError`] and no write.
//! - **Configuration updates are compare-and-set** on the `config` node's version: two
//!   operators never overwrite each other's change unseen.
//! - **What only shardjob knows** is shown beside ElasticJob's view: the leader, the last fire
//!   done per item, the run in progress with its fencing token, the next fire, a pending
//!   re-shard, triggers not yet taken.
//! - **Triggers may carry a parameter**, which shardjob instances run with (ElasticJob
//!   instances ignore it and run once, as with ElasticJob's own trigger).
//!
//! The crate reads no clock: [`Ops::status`] takes the `now` the next fire is counted from.
//! Errors keep "not found", "bad input", "conflict" and "registry unreachable" apart
//! ([`OpsError::kind`]), so a command-line tool can map them to exit statuses.
//!
//! # Example
//!
//! ```
//! use std::time::Duration;
//! use shardjob_backend_mem::MemServer;
//! use shardjob_ops::{ItemState, JobState, Ops, Scope};
//! use shardjob_core::{CronExpr, JobConfig};
//! use shardjob_core::registry::{CreateMode, NodePath, Registry};
//!
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let server = MemServer::default();
//! let registry = server.connect(Duration::from_secs(5));
//! // A job as a running instance registers it (normally the scheduler does this).
//! let config = JobConfig::new("settle", 2).with_cron(CronExpr::parse("0 0 * * * ?")?);
//! for (path, data, mode) in [
//!     ("/settle", "SIMPLE", CreateMode::Persistent),
//!     ("/settle/config", config.to_yaml().as_str(), CreateMode::Persistent),
//!     ("/settle/instances", "", CreateMode::Persistent),
//!     ("/settle/instances/10.0.0.1@-@7", "jobInstanceId: 10.0.0.1@-@7\nserverIp: 10.0.0.1\n", CreateMode::Ephemeral),
//!     ("/settle/servers", "", CreateMode::Persistent),
//!     ("/settle/servers/10.0.0.1", "ENABLED", CreateMode::Persistent),
//!     ("/settle/sharding", "", CreateMode::Persistent),
//!     ("/settle/sharding/0", "", CreateMode::Persistent),
//!     ("/settle/sharding/0/instance", "10.0.0.1@-@7", CreateMode::Persistent),
//!     ("/settle/sharding/1", "", CreateMode::Persistent),
//!     ("/settle/sharding/1/instance", "10.0.0.1@-@7", CreateMode::Persistent),
//! ] {
//!     registry.create(&NodePath::new(path)?, data.as_bytes().to_vec(), mode).await?;
//! }
//!
//! let ops = Ops::new(&registry);
//! let jobs = ops.jobs().await?;
//! assert_eq!((jobs[0].name.as_str(), jobs[0].status), ("settle", JobState::Ok));
//!
//! // Which instance runs item 1 of `settle`?
//! ops.disable_item("settle", 0).await?;
//! let status = ops.status("settle", chrono::Utc::now()).await?;
//! assert_eq!(status.items[1].instance.as_deref(), Some("10.0.0.1@-@7"));
//! assert_eq!(status.items[0].status, ItemState::Disabled);
//!
//! // Trigger every instance once, with a parameter; disable the job on one server.
//! ops.trigger("settle", Some("backfill")).await?;
//! ops.disable(&Scope::job_on_server("settle", "10.0.0.1")).await?;
//! assert_eq!(ops.jobs().await?[0].status, JobState::Disabled);
//!
//! // Unknown names are errors, and nothing is written.
//! assert!(ops.disable_item("settle", 2).await.is_err());
//! assert!(ops.status("nope", chrono::Utc::now()).await.is_err());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```
#![warn(missing_docs)]

mod configure;
mod dump;
mod error;
mod operate;
mod stats;
mod tree;
mod view;

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use futures_util::stream::{self, StreamExt, TryStreamExt};
use shardjob_core::layout::JobPaths;
use shardjob_core::registry::{NodePath, Registry, RegistryError, Tree};

pub use configure::{ConfigChange, ConfigPlan, JobConfigRead, config_changes};
pub use dump::{format_dump, mask_ipv4};
pub use error::{ErrorKind, OpsError, Result};
pub use operate::{Scope, Shutdown};
pub use stats::{
    InstanceInfo, ItemInfo, ItemState, JobBrief, JobState, JobStatus, LastDone, RunInfo,
    ServerBrief, last_done,
};

pub use view::{JobLine, NamespaceView};

use tree::JobTree;

/// How many jobs' trees are read at once by the calls that read every job.
pub const DEFAULT_CONCURRENCY: usize = 32;

/// The operation API over one registry client (its namespace is the one operated).
///
/// Cheap to create: it holds a reference to the client. Every method is one or a few registry
/// requests; none keeps state between calls.
pub struct Ops<'r, R: Registry + ?Sized = dyn Registry> {
    registry: &'r R,
    concurrency: usize,
}

impl<'r, R: Registry + ?Sized> Ops<'r, R> {
    /// The API over `registry`.
    pub fn new(registry: &'r R) -> Self {
        Self {
            registry,
            concurrency: DEFAULT_CONCURRENCY,
        }
    }

    /// Sets how many jobs are read at once by [`Ops::jobs`], [`Ops::servers`] and the calls
    /// on every job of a server (at least 1; [`DEFAULT_CONCURRENCY`] by default).
    pub fn with_concurrency(mut self, jobs_at_once: usize) -> Self {
        self.concurrency = jobs_at_once.max(1);
        self
    }

    /// The registry client.
    pub fn registry(&self) -> &'r R {
        self.registry
    }

    /// The names of the namespace's top-level nodes (the jobs, and anything else kept at the
    /// top), in Java's string order as ElasticJob lists them.
    pub async fn job_names(&self) -> Result<Vec<String>> {
        let mut names = match self.registry.children(&NodePath::root()).await {
            Ok(names) => names,
            Err(RegistryError::NoNode(_)) => Vec::new(),
            Err(e) => return Err(OpsError::registry("listing the jobs", e)),
        };
        names.sort_by(|a, b| stats::java_cmp(a, b));
        Ok(names)
    }

    /// Every job with a `config` node, sorted by name (ElasticJob's `getAllJobsBriefInfo`).
    pub async fn jobs(&self) -> Result<Vec<JobBrief>> {
        let trees = self.all_trees().await?;
        Ok(trees
            .iter()
            .filter_map(|(name, tree)| stats::brief(name, tree))
            .collect())
    }

    /// One job: ElasticJob's brief and sharding views, and shardjob's own state; the next fire
    /// is the first after `now`. One tree read.
    pub async fn status(&self, job: &str, now: DateTime<Utc>) -> Result<JobStatus> {
        let (_, tree) = self.existing_job(job).await?;
        stats::status(job, &tree, now).ok_or_else(|| OpsError::JobNotFound {
            job: job.to_owned(),
        })
    }

    /// Every server IP with a `servers/{ip}` node in some job, sorted by IP
    /// (ElasticJob's `getAllServersBriefInfo`).
    pub async fn servers(&self) -> Result<Vec<ServerBrief>> {
        let trees = self.all_trees().await?;
        let mut servers = BTreeMap::new();
        for (name, tree) in &trees {
            stats::add_servers(name, tree, &mut servers);
        }
        let mut list: Vec<ServerBrief> = servers.into_values().collect();
        list.sort_by(|a, b| stats::java_cmp(&a.ip, &b.ip));
        Ok(list)
    }

    /// The jobs a server has a `servers/{ip}` node in, each with the server's own state
    /// (`DISABLED` or `OK`) and its number of live instances of the job on that server
    /// (ElasticJob's `getJobsBriefInfo(ip)`). [`OpsError::ServerNotFound`] if none.
    pub async fn server_jobs(&self, ip: &str) -> Result<Vec<JobBrief>> {
        check_name("server IP", ip)?;
        let trees = self.all_trees().await?;
        let out: Vec<JobBrief> = trees
            .iter()
            .filter_map(|(name, tree)| stats::server_job(name, tree, ip))
            .collect();
        if out.is_empty() {
            return Err(OpsError::ServerNotFound {
                job: None,
                ip: ip.to_owned(),
            });
        }
        Ok(out)
    }

    /// Every top-level node's tree as read ([`Registry::read_tree`]: with the revision it
    /// reflects where the backend tells it), by name, `concurrency` at a time: the snapshot
    /// a [`NamespaceView`] reload takes.
    pub async fn snapshot(&self) -> Result<Vec<(String, Tree)>> {
        let names = self.job_names().await?;
        stream::iter(names)
            .map(|name| async move {
                let Ok(path) = NodePath::root().join(&name) else {
                    return Ok((
                        name,
                        Tree {
                            nodes: Vec::new(),
                            revision: None,
                        },
                    ));
                };
                let tree = self
                    .registry
                    .read_tree(&path)
                    .await
                    .map_err(|e| OpsError::registry(format!("reading job {name:?}"), e))?;
                Ok((name, tree))
            })
            .buffered(self.concurrency)
            .try_collect()
            .await
    }

    /// Reads one job's tree; [`OpsError::JobNotFound`] without a `config` node.
    pub(crate) async fn existing_job(&self, job: &str) -> Result<(JobPaths, JobTree)> {
        let paths = job_paths(job)?;
        let tree = self.read_tree(&paths).await?;
        if tree.config.is_none() {
            return Err(OpsError::JobNotFound {
                job: job.to_owned(),
            });
        }
        Ok((paths, tree))
    }

    async fn read_tree(&self, paths: &JobPaths) -> Result<JobTree> {
        let nodes =
            self.registry.get_tree(paths.root()).await.map_err(|e| {
                OpsError::registry(format!("reading job {:?}", paths.job_name()), e)
            })?;
        Ok(JobTree::from_nodes(paths.job_name(), &nodes))
    }

    /// Every top-level node's tree, by name in Java's order, `concurrency` at a time.
    pub(crate) async fn all_trees(&self) -> Result<Vec<(String, JobTree)>> {
        let names = self.job_names().await?;
        stream::iter(names)
            .map(|name| async move {
                // A top-level node whose name is not a single segment cannot exist; skip it.
                let Ok(paths) = JobPaths::new(&name) else {
                    return Ok((name, JobTree::default()));
                };
                let tree = self.read_tree(&paths).await?;
                Ok((name, tree))
            })
            .buffered(self.concurrency)
            .try_collect()
            .await
    }
}

/// The paths of a job named by the caller.
pub(crate) fn job_paths(job: &str) -> Result<JobPaths> {
    JobPaths::new(job).map_err(|source| OpsError::BadName {
        what: "job name",
        value: job.to_owned(),
        source,
    })
}

/// Checks that a name given by the caller is one registry node name.
pub(crate) fn check_name(what: &'static str, value: &str) -> Result<()> {
    NodePath::root()
        .join(value)
        .map(|_| ())
        .map_err(|source| OpsError::BadName {
            what,
            value: value.to_owned(),
            source,
        })
}
