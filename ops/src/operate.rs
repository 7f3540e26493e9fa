//! Operations: trigger, disable/enable (job, server, item), shutdown, remove, re-shard — the
//! nodes and values ElasticJob 3.0.4's `JobOperateAPIImpl`, `ShardingOperateAPIImpl` and
//! `ShardingService.setReshardingFlag` write.

use serde::Serialize;
use shardjob_core::layout::JobPaths;
use shardjob_core::registry::{NodePath, Registry, RegistryError, TxnOp};

use crate::error::{OpsError, Result};
use crate::tree::JobTree;
use crate::{Ops, check_name, job_paths, stats};

/// What a server-level operation applies to (ElasticJob's `jobName` / `serverIp` pair, at
/// least one of them given).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Scope {
    /// Every server (or instance) of one job.
    Job(String),
    /// One server IP in every job that has it.
    Server(String),
    /// One server IP in one job.
    JobOnServer {
        /// The job.
        job: String,
        /// The server IP.
        ip: String,
    },
}

impl Scope {
    /// Every server of `job`.
    pub fn job(job: impl Into<String>) -> Scope {
        Scope::Job(job.into())
    }

    /// Server `ip` in every job.
    pub fn server(ip: impl Into<String>) -> Scope {
        Scope::Server(ip.into())
    }

    /// Server `ip` in `job`.
    pub fn job_on_server(job: impl Into<String>, ip: impl Into<String>) -> Scope {
        Scope::JobOnServer {
            job: job.into(),
            ip: ip.into(),
        }
    }

    /// The scope of optional `--job` / `--server` arguments; [`OpsError::EmptyScope`] if
    /// neither is given.
    pub fn from_parts(job: Option<&str>, ip: Option<&str>) -> Result<Scope> {
        match (job, ip) {
            (Some(job), Some(ip)) => Ok(Scope::job_on_server(job, ip)),
            (Some(job), None) => Ok(Scope::job(job)),
            (None, Some(ip)) => Ok(Scope::server(ip)),
            (None, None) => Err(OpsError::EmptyScope),
        }
    }

    fn check(&self) -> Result<()> {
        match self {
            Scope::Job(job) => check_name("job name", job),
            Scope::Server(ip) => check_name("server IP", ip),
            Scope::JobOnServer { job, ip } => {
                check_name("job name", job)?;
                check_name("server IP", ip)
            }
        }
    }
}

/// What [`Ops::shutdown`] and [`Ops::remove`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Shutdown {
    /// The instance nodes deleted: job and instance id.
    pub instances: Vec<(String, String)>,
    /// The server nodes deleted ([`Ops::remove`] only): job and IP.
    pub servers: Vec<(String, String)>,
}

/// The value of a disabled server node, and of an enabled one (`ServerStatus` names).
const DISABLED: &str = "DISABLED";
const ENABLED: &str = "ENABLED";

impl<R: Registry + ?Sized> Ops<'_, R> {
    /// Runs the job once on every live instance, now or as soon as its items are not running:
    /// deletes `trigger` and creates `trigger/{id}` for every instance, as ElasticJob's
    /// `triggerAllInstances` does. The node's value is `parameter` (shardjob instances run with
    /// it as the job parameter; ElasticJob instances ignore it); empty without one, as
    /// ElasticJob writes it. Returns the instances triggered; [`OpsError::NoInstance`] (and no
    /// write) if the job has none.
    pub async fn trigger(&self, job: &str, parameter: Option<&str>) -> Result<Vec<String>> {
        let (paths, tree) = self.existing_job(job).await?;
        if tree.instances.is_empty() {
            return Err(OpsError::NoInstance {
                job: Some(job.to_owned()),
                ip: None,
            });
        }
        let doing = format!("triggering job {job:?}");
        if tree.trigger_dir {
            let mut ops: Vec<TxnOp> = Vec::new();
            for id in tree.triggers.keys() {
                ops.push(TxnOp::delete(child(&paths.triggers(), id)?));
            }
            ops.push(TxnOp::delete(paths.triggers()));
            if self.registry.transact(ops).await.is_err() {
                // Changed meanwhile, or holding something unexpected: delete it node by node.
                self.registry
                    .delete_tree(&paths.triggers())
                    .await
                    .map_err(|e| OpsError::registry(doing.clone(), e))?;
            }
        }
        let value = parameter.unwrap_or_default().as_bytes().to_vec();
        let mut ops = vec![TxnOp::create(paths.triggers(), Vec::<u8>::new())];
        for id in tree.instances.keys() {
            ops.push(TxnOp::create(child(&paths.triggers(), id)?, value.clone()));
        }
        self.registry
            .transact(ops)
            .await
            .map_err(|e| OpsError::registry(doing, e))?;
        Ok(tree.instances.keys().cloned().collect())
    }

    /// Disables the scope's servers: `servers/{ip}` ← `DISABLED` (ElasticJob's
    /// `JobOperateAPI.disable`). Their instances give up their items at the next re-shard.
    /// Returns the (job, ip) pairs written.
    ///
    /// Where ElasticJob would create a server node that does not exist (a job and an IP
    /// given), this refuses with [`OpsError::ServerNotFound`]: a misspelt IP must not leave a
    /// node behind. A job without any server node is [`OpsError::NoServers`].
    pub async fn disable(&self, scope: &Scope) -> Result<Vec<(String, String)>> {
        self.set_servers(scope, DISABLED).await
    }

    /// Enables the scope's servers: `servers/{ip}` ← `ENABLED` (ElasticJob's
    /// `JobOperateAPI.enable`). Returns the (job, ip) pairs written.
    pub async fn enable(&self, scope: &Scope) -> Result<Vec<(String, String)>> {
        self.set_servers(scope, ENABLED).await
    }

    async fn set_servers(&self, scope: &Scope, value: &str) -> Result<Vec<(String, String)>> {
        scope.check()?;
        let targets: Vec<(String, JobPaths, JobTree, Vec<String>)> = match scope {
            Scope::JobOnServer { job, ip } => {
                let (paths, tree) = self.existing_job(job).await?;
                if !tree.servers.contains_key(ip) {
                    return Err(OpsError::ServerNotFound {
                        job: Some(job.clone()),
                        ip: ip.clone(),
                    });
                }
                vec![(job.clone(), paths, tree, vec![ip.clone()])]
            }
            Scope::Job(job) => {
                let (paths, tree) = self.existing_job(job).await?;
                if tree.servers.is_empty() {
                    return Err(OpsError::NoServers { job: job.clone() });
                }
                let ips = tree.servers.keys().cloned().collect();
                vec![(job.clone(), paths, tree, ips)]
            }
            Scope::Server(ip) => {
                let found = self.jobs_with_server(ip).await?;
                found
                    .into_iter()
                    .map(|(job, paths, tree)| (job, paths, tree, vec![ip.clone()]))
                    .collect()
            }
        };
        let mut written = Vec::new();
        for (job, paths, tree, ips) in targets {
            let mut ops = Vec::new();
            for ip in &ips {
                let Some((current, version)) = tree.servers.get(ip) else {
                    continue;
                };
                if current != value {
                    ops.push(TxnOp::Set {
                        path: server_path(&paths, ip)?,
                        data: value.as_bytes().to_vec(),
                        expected: Some(*version),
                    });
                }
                written.push((job.clone(), ip.clone()));
            }
            if !ops.is_empty() {
                self.registry.transact(ops).await.map_err(|e| {
                    OpsError::registry(format!("the server nodes of job {job:?}"), e)
                })?;
            }
        }
        Ok(written)
    }

    /// Disables one item: creates `sharding/{item}/disabled` (empty), as ElasticJob's
    /// `ShardingOperateAPI.disable` does. The owner skips it from its next fire; it does not
    /// move. [`OpsError::ItemOutOfRange`] beyond `shardingTotalCount`.
    pub async fn disable_item(&self, job: &str, item: u32) -> Result<()> {
        let (paths, tree) = self.existing_job(job).await?;
        check_item(job, &paths, &tree, item)?;
        let Some(nodes) = tree.items.get(&item) else {
            // Not sharded yet: create the parents as ElasticJob's `persist` does.
            let mut ops = Vec::new();
            if !tree.sharding_dir {
                ops.push(TxnOp::create(paths.sharding(), Vec::<u8>::new()));
            }
            ops.push(TxnOp::create(paths.item(item), Vec::<u8>::new()));
            ops.push(TxnOp::create(paths.item_disabled(item), Vec::<u8>::new()));
            return self
                .apply(ops, format!("disabling item {item} of job {job:?}"))
                .await;
        };
        let ops = match &nodes.disabled {
            None => vec![TxnOp::create(paths.item_disabled(item), Vec::<u8>::new())],
            Some((v, _)) if v.is_empty() => return Ok(()),
            Some((_, version)) => vec![TxnOp::Set {
                path: paths.item_disabled(item),
                data: Vec::new(),
                expected: Some(*version),
            }],
        };
        self.apply(ops, format!("disabling item {item} of job {job:?}"))
            .await
    }

    /// Enables one item: deletes `sharding/{item}/disabled` (ElasticJob's
    /// `ShardingOperateAPI.enable`). Fine if it is not disabled.
    pub async fn enable_item(&self, job: &str, item: u32) -> Result<()> {
        let (paths, tree) = self.existing_job(job).await?;
        let disabled = tree.items.get(&item).and_then(|i| i.disabled.as_ref());
        let Some((_, version)) = disabled else {
            return check_item(job, &paths, &tree, item);
        };
        let op = TxnOp::Delete {
            path: paths.item_disabled(item),
            expected: Some(*version),
        };
        self.apply(vec![op], format!("enabling item {item} of job {job:?}"))
            .await
    }

    /// Shuts instances down: deletes their `instances/{id}` nodes (ElasticJob's
    /// `JobOperateAPI.shutdown`): every instance of the job, those whose `serverIp` is the IP
    /// in every job, or both. [`OpsError::NoInstance`] (nothing written) if none matches.
    pub async fn shutdown(&self, scope: &Scope) -> Result<Shutdown> {
        let out = self.shutdown_or_remove(scope, false).await?;
        if out.instances.is_empty() {
            let (job, ip) = match scope {
                Scope::Job(job) => (Some(job.clone()), None),
                Scope::Server(ip) => (None, Some(ip.clone())),
                Scope::JobOnServer { job, ip } => (Some(job.clone()), Some(ip.clone())),
            };
            return Err(OpsError::NoInstance { job, ip });
        }
        Ok(out)
    }

    /// Shuts the scope's instances down and deletes its server nodes (ElasticJob's
    /// `JobOperateAPI.remove`): `servers/{ip}` of the job, every server of the job, or
    /// `servers/{ip}` in every job.
    pub async fn remove(&self, scope: &Scope) -> Result<Shutdown> {
        self.shutdown_or_remove(scope, true).await
    }

    async fn shutdown_or_remove(&self, scope: &Scope, remove: bool) -> Result<Shutdown> {
        scope.check()?;
        let targets: Vec<(String, JobPaths, JobTree, Option<String>)> = match scope {
            Scope::JobOnServer { job, ip } => {
                let (paths, tree) = self.existing_job(job).await?;
                let on_ip = tree
                    .instances
                    .keys()
                    .any(|id| tree.server_ip_of(id).as_deref() == Some(ip.as_str()));
                if !on_ip && !tree.servers.contains_key(ip) {
                    return Err(OpsError::ServerNotFound {
                        job: Some(job.clone()),
                        ip: ip.clone(),
                    });
                }
                vec![(job.clone(), paths, tree, Some(ip.clone()))]
            }
            Scope::Job(job) => {
                let (paths, tree) = self.existing_job(job).await?;
                vec![(job.clone(), paths, tree, None)]
            }
            Scope::Server(ip) => {
                let trees = self.all_trees().await?;
                let mut found = Vec::new();
                for (job, tree) in trees {
                    let on_ip = tree
                        .instances
                        .keys()
                        .any(|id| tree.server_ip_of(id).as_deref() == Some(ip.as_str()));
                    if on_ip || tree.servers.contains_key(ip) {
                        found.push((job.clone(), job_paths(&job)?, tree, Some(ip.clone())));
                    }
                }
                if found.is_empty() {
                    return Err(OpsError::ServerNotFound {
                        job: None,
                        ip: ip.clone(),
                    });
                }
                found
            }
        };
        let mut out = Shutdown::default();
        for (job, paths, tree, ip) in targets {
            for id in tree.instances.keys() {
                if ip.is_some() && tree.server_ip_of(id) != ip {
                    continue;
                }
                let path = child(&paths.instances(), id)?;
                self.delete_if_there(&path, &format!("shutting down {id} of job {job:?}"))
                    .await?;
                out.instances.push((job.clone(), id.clone()));
            }
            if !remove {
                continue;
            }
            let ips: Vec<&String> = match &ip {
                Some(ip) => tree.servers.keys().filter(|s| *s == ip).collect(),
                None => tree.servers.keys().collect(),
            };
            for ip in ips {
                let path = server_path(&paths, ip)?;
                self.delete_if_there(&path, &format!("removing server {ip} of job {job:?}"))
                    .await?;
                out.servers.push((job.clone(), ip.clone()));
            }
        }
        Ok(out)
    }

    /// Asks the job's leader to re-shard now: creates `leader/sharding/necessary` (empty), as
    /// ElasticJob's `setReshardingFlag` does. Fine if one is already pending.
    pub async fn reshard(&self, job: &str) -> Result<()> {
        let (paths, tree) = self.existing_job(job).await?;
        if tree.necessary {
            return Ok(());
        }
        let mut ops = Vec::new();
        if !tree.leader_dirs.0 {
            ops.push(TxnOp::create(paths.leader(), Vec::<u8>::new()));
        }
        if !tree.leader_dirs.1 {
            ops.push(TxnOp::create(paths.leader_sharding(), Vec::<u8>::new()));
        }
        ops.push(TxnOp::create(paths.sharding_necessary(), Vec::<u8>::new()));
        self.apply(ops, format!("flagging job {job:?} for re-sharding"))
            .await
    }

    /// The jobs with a `servers/{ip}` node; [`OpsError::ServerNotFound`] if none.
    async fn jobs_with_server(&self, ip: &str) -> Result<Vec<(String, JobPaths, JobTree)>> {
        let mut found = Vec::new();
        for (job, tree) in self.all_trees().await? {
            if tree.servers.contains_key(ip) {
                found.push((job.clone(), job_paths(&job)?, tree));
            }
        }
        if found.is_empty() {
            return Err(OpsError::ServerNotFound {
                job: None,
                ip: ip.to_owned(),
            });
        }
        Ok(found)
    }

    async fn apply(&self, ops: Vec<TxnOp>, doing: String) -> Result<()> {
        self.registry
            .transact(ops)
            .await
            .map(|_| ())
            .map_err(|e| OpsError::registry(doing, e))
    }

    async fn delete_if_there(&self, path: &NodePath, doing: &str) -> Result<()> {
        match self.registry.delete(path, None).await {
            Ok(()) | Err(RegistryError::NoNode(_)) => Ok(()),
            Err(e) => Err(OpsError::registry(doing, e)),
        }
    }
}

fn child(parent: &NodePath, name: &str) -> Result<NodePath> {
    parent.join(name).map_err(|source| OpsError::BadName {
        what: "node name",
        value: name.to_owned(),
        source,
    })
}

fn server_path(paths: &JobPaths, ip: &str) -> Result<NodePath> {
    paths.server(ip).map_err(|source| OpsError::BadName {
        what: "server IP",
        value: ip.to_owned(),
        source,
    })
}

/// [`OpsError::ItemOutOfRange`] unless `item` < the job's `shardingTotalCount`.
fn check_item(job: &str, paths: &JobPaths, tree: &JobTree, item: u32) -> Result<()> {
    let (yaml, _) = tree.config.as_ref().ok_or_else(|| OpsError::JobNotFound {
        job: job.to_owned(),
    })?;
    let config = stats::read_config(yaml).map_err(|reason| OpsError::BadConfigNode {
        path: paths.config(),
        reason,
    })?;
    if item >= config.sharding_total_count {
        return Err(OpsError::ItemOutOfRange {
            job: job.to_owned(),
            item,
            total: config.sharding_total_count,
        });
    }
    Ok(())
}
