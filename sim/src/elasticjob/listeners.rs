//! The JVM's other threads: start-up (`JobScheduler`, `SetUpFacade.registerStartUpInfo`),
//! each job's listener thread (`ListenerNotifierManager`: one thread per job, the listeners of
//! each event in their registration order), the connection-state thread
//! (`RegistryCenterConnectionStateListener`), the reconcile thread (`ReconcileService`), and
//! the shutdowns (graceful: the Quartz shutdown hook; remote: the instance node deleted).

use super::election::LEADER;
use super::jvm::{ConnEvent, Jvm, Out};
use super::view::{CacheEvent, Change, instance_value, is_server_path, read_config};

impl Jvm {
    /// Starts every job, one after the other, as the application's main thread constructs
    /// its bootstraps and schedules them.
    pub(crate) async fn main(&self) {
        let jobs: Vec<String> = self.get(|s| s.jobs.keys().cloned().collect());
        for job in jobs {
            self.start_job(&job).await;
        }
        let me = self.clone();
        self.spawn(async move { me.connection_thread().await });
    }

    /// One job's start-up.
    async fn start_job(&self, job: &str) {
        let Some(spec) = self.job(job, |j| j.spec.clone()) else {
            return;
        };
        // `setUpJobConfiguration`: a root naming another job type refuses the job; the
        // registry's configuration wins unless there is none (or `overwrite`).
        let root = self.get_directly(job, "").await;
        if let Some(root) = root.as_deref().filter(|r| !r.trim().is_empty()) {
            if root != spec.type_name {
                self.note(format!(
                    "{job}: refuses to start: the job root holds {root:?}, not {:?} (job conflict)",
                    spec.type_name
                ));
                return;
            }
        }
        let stored = self.get_directly(job, "config").await;
        let yaml = match stored {
            Some(text) if !spec.config.overwrite => {
                if read_config(&text).is_none() {
                    self.note(format!(
                        "{job}: refuses to start: its configuration does not read as JobConfigurationPOJO"
                    ));
                    return;
                }
                text
            }
            _ => {
                let yaml = spec.config.to_yaml();
                self.persist(job, "", &spec.type_name).await;
                self.persist(job, "config", &yaml).await;
                yaml
            }
        };
        let total = read_config(&yaml).map_or(0, |c| c.sharding_total_count);
        // The cache starts (`registerRegistryCenter`), then the listeners, as ElasticJob
        // does: the cache's initial load reaches no listener.
        self.load_cache(job, false).await;
        let disabled = self
            .job(job, |j| j.cache.config().map(|c| c.disabled))
            .flatten()
            .unwrap_or(false);
        self.job_mut(job, |j| {
            j.total = total;
            j.shutdown = false;
            j.listening = true;
            j.reconciled_at = 0;
        });
        let (me, name) = (self.clone(), job.to_owned());
        self.spawn(async move { me.listener_thread(&name).await });
        // `registerStartUpInfo`.
        self.elect_leader(job).await;
        let id = self.id();
        let ip = id.server_ip().to_owned();
        let status = if disabled { "DISABLED" } else { "ENABLED" };
        self.persist(job, &format!("servers/{ip}"), status).await;
        self.persist_ephemeral(job, &format!("instances/{id}"), &instance_value(&id))
            .await;
        self.note(format!("{job}: registered ({status})"));
        let now = self.get(|s| s.now);
        self.job_mut(job, |j| j.reconciled_at = now);
        let (me, name) = (self.clone(), job.to_owned());
        self.spawn(async move { me.reconcile_thread(&name).await });
        self.remove_offline_servers(job).await;
        // `schedule()`.
        self.schedule(job);
    }

    /// Loads (or reloads) the job's cache with one tree read; the events that came meanwhile
    /// are kept. A reload hands the listeners the differences (`report`).
    pub(crate) async fn load_cache(&self, job: &str, report: bool) {
        self.job_mut(job, |j| j.cache.start_loading());
        let Some(root) = super::storage::path(job, "") else {
            return;
        };
        let reply = self
            .call(shardjob_core::registry::RegistryOp::GetTree(root))
            .await;
        let tree = match reply {
            shardjob_core::registry::RegistryReply::Tree(tree) => tree,
            _ => shardjob_core::registry::Tree {
                nodes: Vec::new(),
                revision: None,
            },
        };
        self.job_mut(job, |j| {
            let diff = j.cache.loaded(job, &tree, report);
            if j.listening {
                j.events.extend(diff);
            }
        });
    }

    /// `ServerService.removeOfflineServers`: servers whose IP has no instance and whose
    /// value is blank are deleted.
    async fn remove_offline_servers(&self, job: &str) {
        let snap = self.read(job).await;
        let ips: Vec<&str> = snap
            .children("instances")
            .into_iter()
            .filter_map(|i| i.split("@-@").next())
            .collect();
        if ips.is_empty() {
            return;
        }
        let gone: Vec<String> = snap
            .children("servers")
            .into_iter()
            .filter(|ip| !ips.contains(ip))
            .filter(|ip| {
                snap.data(&format!("servers/{ip}"))
                    .is_none_or(|v| v.trim().is_empty())
            })
            .map(str::to_owned)
            .collect();
        for ip in gone {
            self.remove_if_exists(job, &format!("servers/{ip}")).await;
        }
    }

    /// The job's listener thread: each event, each listener in turn.
    async fn listener_thread(&self, job: &str) {
        loop {
            let event = self
                .until(|s| match s.jobs.get(job) {
                    None => Some(None),
                    Some(j) if !j.events.is_empty() => Some(Some(())),
                    Some(_) => None,
                })
                .await;
            if event.is_none() {
                return;
            }
            let Some(event) = self.job_mut(job, |j| j.events.pop_front()).flatten() else {
                continue;
            };
            self.dispatch(job, &event).await;
        }
    }

    /// Every listener of the job, in ElasticJob's order, on one event.
    async fn dispatch(&self, job: &str, e: &CacheEvent) {
        let me = self.id();
        let shutdown = || self.job(job, |j| j.shutdown).unwrap_or(true);
        let own_instance = format!("instances/{me}");
        let own_server = format!("servers/{}", me.server_ip());
        // Election: `LeaderElectionJobListener` (active: no leader, this instance's server
        // written not DISABLED; passive: the leader node deleted and this server
        // available), then `LeaderAbdicationJobListener`.
        if !shutdown() {
            let active =
                !self.exists(job, LEADER).await && e.rel == own_server && e.value != "DISABLED";
            let passive = !active
                && e.rel == LEADER
                && e.kind == Change::Deleted
                && self.is_available_server(job, me.server_ip()).await;
            if active || passive {
                self.elect_leader(job).await;
            }
        }
        if self.is_leader(job).await && e.rel == own_server && e.value == "DISABLED" {
            self.remove_leader(job).await;
        }
        // Sharding: `ShardingTotalCountChangedJobListener`, `ListenServersChangedJobListener`.
        if e.rel == "config" {
            let current = self.job(job, |j| j.total).unwrap_or(0);
            if current != 0 {
                if let Some(new) = read_config(&e.value).map(|c| c.sharding_total_count) {
                    if new != current {
                        self.set_resharding_flag(job).await;
                        self.job_mut(job, |j| j.total = new);
                    }
                }
            }
        }
        let instance_change = e.rel.starts_with("instances/")
            && e.rel.matches('/').count() == 1
            && e.kind != Change::Updated;
        if !shutdown() && (instance_change || is_server_path(&e.rel)) {
            let static_sharding = self
                .job(job, |j| j.cache.config().map(|c| c.static_sharding))
                .flatten()
                .unwrap_or(false);
            if !(static_sharding && self.has_sharding_info(job).await) {
                self.set_resharding_flag(job).await;
            }
        }
        // Failover: `JobCrashedJobListener`, `FailoverSettingsChangedJobListener`,
        // `LegacyCrashedRunningItemListener`.
        let failover = || {
            self.job(job, |j| j.cache.config().map(|c| c.failover))
                .flatten()
                .unwrap_or(false)
        };
        if !shutdown() && failover() && e.kind == Change::Deleted {
            if let Some(dead) = e.rel.strip_prefix("instances/") {
                if !dead.contains('/') {
                    self.on_instance_deleted(job, dead).await;
                }
            }
        }
        let updated_config = (e.rel == "config" && e.kind == Change::Updated)
            .then(|| read_config(&e.value))
            .flatten();
        if updated_config.as_ref().is_some_and(|c| !c.failover) {
            self.remove_failover_info(job).await;
        }
        if e.rel == own_instance && e.kind == Change::Added && !shutdown() && failover() {
            self.on_own_instance_added(job).await;
        }
        // `MonitorExecutionSettingsChangedJobListener`.
        if updated_config
            .as_ref()
            .is_some_and(|c| !c.monitor_execution)
        {
            let total = self.cached_total(job);
            for i in 0..total {
                self.remove_if_exists(job, &format!("sharding/{i}/running"))
                    .await;
            }
        }
        // `InstanceShutdownStatusJobListener`: this instance's node deleted while the job
        // runs and is not paused, and it is not back: the job shuts down for good.
        let paused = self.job(job, |j| j.quartz.paused).unwrap_or(false);
        if !shutdown()
            && !paused
            && e.rel == own_instance
            && e.kind == Change::Deleted
            && !self.exists(job, &own_instance).await
        {
            self.shutdown_instance(job).await;
        }
        // `JobTriggerStatusJobListener`.
        if e.rel == format!("trigger/{me}") && e.kind == Change::Added {
            self.remove_if_exists(job, &e.rel).await;
            if !shutdown() && !self.job(job, |j| j.running).unwrap_or(true) {
                self.note(format!("{job}: triggered by its trigger node"));
                self.trigger_job(job);
            }
        }
        // `CronSettingAndJobEventChangedJobListener`.
        if let Some(config) = updated_config.filter(|_| !shutdown()) {
            if let Some(cron) = config.cron {
                let text = cron.to_string();
                let wall = self.get(|s| s.wall);
                let next = super::misfire::fire_after(&cron, &config.time_zone, wall);
                self.job_mut(job, |j| {
                    if !j.quartz.down && j.quartz.cron.as_deref() != Some(text.as_str()) {
                        j.quartz.cron = Some(text);
                        j.quartz.next = next;
                        j.quartz.fired = false;
                        j.quartz.version += 1;
                    }
                });
            }
        }
    }

    /// `SchedulerFacade.shutdownInstance`: the job stops here for good (the run in progress
    /// ends as it would).
    async fn shutdown_instance(&self, job: &str) {
        self.note(format!(
            "{job}: its instance node was deleted: shuts the job down for good"
        ));
        if self.is_leader(job).await {
            self.remove_leader(job).await;
        }
        self.job_mut(job, |j| {
            j.shutdown = true;
            j.quartz.down = true;
            j.quartz.version += 1;
        });
    }

    /// Whether `sharding` has children (a static sharding keeps them).
    async fn has_sharding_info(&self, job: &str) -> bool {
        !self
            .read_under(job, "sharding")
            .await
            .children("sharding")
            .is_empty()
    }

    /// The connection-state thread: each change, each job's listener in turn.
    async fn connection_thread(&self) {
        loop {
            self.until(|s| (!s.conn_events.is_empty()).then_some(()))
                .await;
            let Some(event) = self.with(|s| s.conn_events.pop_front()) else {
                continue;
            };
            let jobs: Vec<String> = self.get(|s| s.jobs.keys().cloned().collect());
            for job in jobs {
                if self.job(&job, |j| j.shutdown).unwrap_or(true) {
                    continue;
                }
                match event {
                    ConnEvent::Unavailable => {
                        self.job_mut(&job, |j| {
                            if !j.quartz.down {
                                j.quartz.paused = true;
                                j.quartz.version += 1;
                            }
                        });
                    }
                    ConnEvent::Reconnected => self.reconnected(&job).await,
                }
            }
        }
    }

    /// `RECONNECTED`: the server and instance nodes written again, the `running` nodes of
    /// this instance's items deleted (runs in progress or not), the scheduler resumed.
    async fn reconnected(&self, job: &str) {
        let id = self.id();
        let ip = id.server_ip().to_owned();
        let enabled = self.is_enable_server(job, &ip).await;
        let status = if enabled { "ENABLED" } else { "DISABLED" };
        self.persist(job, &format!("servers/{ip}"), status).await;
        self.persist_ephemeral(job, &format!("instances/{id}"), &instance_value(&id))
            .await;
        let items = self.local_items(job).await.unwrap_or_default();
        let mut cleared = Vec::new();
        for i in items {
            if self
                .remove_if_exists(job, &format!("sharding/{i}/running"))
                .await
            {
                cleared.push(i);
            }
        }
        self.note(format!(
            "{job}: reconnected: registered again ({status}), running nodes of [{}] deleted, resumes",
            crate::timeline::items(&cleared)
        ));
        self.job_mut(job, |j| {
            j.quartz.paused = false;
            j.quartz.version += 1;
        });
    }

    /// The reconcile thread: every minute, acting every `reconcileIntervalMinutes`.
    async fn reconcile_thread(&self, job: &str) {
        loop {
            if self.job(job, |j| j.shutdown).unwrap_or(true) {
                return;
            }
            let interval = self
                .job(job, |j| {
                    j.cache.config().map(|c| c.reconcile_interval_minutes)
                })
                .flatten()
                .unwrap_or(0);
            let now = self.get(|s| s.now);
            let last = self.job(job, |j| j.reconciled_at).unwrap_or(0);
            if interval > 0 && now.saturating_sub(last) >= u64::from(interval) * 60_000 {
                self.job_mut(job, |j| j.reconciled_at = now);
                let static_sharding = self
                    .job(job, |j| j.cache.config().map(|c| c.static_sharding))
                    .flatten()
                    .unwrap_or(false);
                if !self.exists(job, super::sharding::NECESSARY).await
                    && self.sharding_in_offline_servers(job).await
                    && !(static_sharding && self.has_sharding_info(job).await)
                {
                    self.note(format!("{job}: reconcile finds items of offline instances"));
                    self.set_resharding_flag(job).await;
                }
            }
            self.sleep(60_000).await;
        }
    }

    /// A graceful stop (SIGTERM): each job's shutdown hook stops its scheduler, waits for
    /// the fire in progress, then removes the leader node (if this instance leads) and the
    /// instance node; once every job has, the session is closed.
    pub(crate) async fn graceful_stop(&self) {
        let jobs: Vec<String> = self.get(|s| s.jobs.keys().cloned().collect());
        for job in &jobs {
            let (me, name) = (self.clone(), job.clone());
            self.spawn(async move { me.leave(&name).await });
        }
        self.until(|s| s.jobs.values().all(|j| j.left).then_some(()))
            .await;
        self.with(|s| s.out.push(Out::Close));
    }

    /// One job's shutdown hook.
    async fn leave(&self, job: &str) {
        self.job_mut(job, |j| {
            j.quartz.down = true;
            j.quartz.version += 1;
        });
        self.until(|s| s.jobs.get(job).is_none_or(|j| !j.quartz.busy).then_some(()))
            .await;
        if self.job(job, |j| j.listening).unwrap_or(false) {
            if self.is_leader(job).await {
                self.remove_leader(job).await;
            }
            let me = self.id();
            self.remove_if_exists(job, &format!("instances/{me}")).await;
        }
        self.job_mut(job, |j| j.left = true);
    }
}
