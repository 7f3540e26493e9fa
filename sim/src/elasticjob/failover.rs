//! Failover (`FailoverListenerManager`, `FailoverService`): an instance's DELETED event makes
//! every other instance flag the items the dead one was running (found by their `running`
//! node, so only a persistent one survives to be found) into `leader/failover/items`; an idle
//! instance claims one under the failover latch, writes `failover` and `failovering`, and
//! triggers its job, whose next run takes only its failover items.

use std::collections::BTreeMap;

use super::jvm::Jvm;

/// `leader/failover/latch`.
pub(crate) const FAILOVER_LATCH: &str = "leader/failover/latch";
/// `leader/failover/items`.
pub(crate) const FAILOVER_ITEMS: &str = "leader/failover/items";

impl Jvm {
    /// `FailoverService.failoverIfNecessary`: if items wait in the queue and the job is not
    /// running here, under the failover latch: claims the first, and triggers the job.
    pub(crate) async fn failover_if_necessary(&self, job: &str) {
        if !self.need_failover(job).await {
            return;
        }
        let held = self.acquire(job, FAILOVER_LATCH).await;
        // `FailoverLeaderExecutionCallback`.
        if !self.job(job, |j| j.shutdown).unwrap_or(true) && self.need_failover(job).await {
            let snap = self.read_under(job, FAILOVER_ITEMS).await;
            if let Some(item) = super::view::first_failover_item(&snap.children(FAILOVER_ITEMS)) {
                let me = self.id();
                self.persist_ephemeral(job, &format!("sharding/{item}/failover"), me.as_str())
                    .await;
                self.persist(job, &format!("sharding/{item}/failovering"), me.as_str())
                    .await;
                self.remove_if_exists(job, &format!("{FAILOVER_ITEMS}/{item}"))
                    .await;
                self.note(format!("{job}: claims the failover of item {item}"));
                self.trigger_job(job);
            }
        }
        self.release(job, held).await;
    }

    /// `needFailover`: items wait in `leader/failover/items`, and the job does not run here.
    async fn need_failover(&self, job: &str) -> bool {
        let snap = self.read_under(job, FAILOVER_ITEMS).await;
        !snap.children(FAILOVER_ITEMS).is_empty() && !self.job(job, |j| j.running).unwrap_or(true)
    }

    /// The items (`0..total`) whose `leaf` node (`failovering`, `running`) holds `owner`.
    async fn items_held_by(&self, job: &str, leaf: &str, owner: &str) -> Vec<u32> {
        let snap = self.read_under(job, "sharding").await;
        let mut out: Vec<u32> = snap
            .children("sharding")
            .into_iter()
            .filter_map(shardjob_core::layout::parse_item)
            .filter(|i| snap.data(&format!("sharding/{i}/{leaf}")) == Some(owner))
            .collect();
        out.sort_unstable();
        out
    }

    /// `JobCrashedJobListener`: instance `dead` was deleted.
    pub(crate) async fn on_instance_deleted(&self, job: &str, dead: &str) {
        if self.id().as_str() == dead {
            return;
        }
        let failovering = self.items_held_by(job, "failovering", dead).await;
        if !failovering.is_empty() {
            for item in failovering {
                self.note(format!(
                    "{job}: {dead} died failing item {item} over: queues it again"
                ));
                self.create_if_needed(job, &format!("{FAILOVER_ITEMS}/{item}"))
                    .await;
                self.failover_if_necessary(job).await;
            }
            return;
        }
        for item in self.crashed_items(job, dead).await {
            self.set_crashed_failover_flag(job, item, dead).await;
            self.failover_if_necessary(job).await;
        }
    }

    /// `ShardingService.getCrashedShardingItems`: if the dead instance's server is enabled,
    /// the items it owned (cached owner) that have a `running` node (direct).
    async fn crashed_items(&self, job: &str, dead: &str) -> Vec<u32> {
        let Some((ip, _)) = dead.split_once("@-@") else {
            return Vec::new();
        };
        if !self.is_enable_server(job, ip).await {
            return Vec::new();
        }
        let total = self.cached_total(job);
        let mut out = Vec::new();
        for i in 0..total {
            if self.exists(job, &format!("sharding/{i}/running")).await
                && self
                    .cached(job, &format!("sharding/{i}/instance"))
                    .await
                    .as_deref()
                    == Some(dead)
            {
                out.push(i);
            }
        }
        out
    }

    /// `FailoverService.setCrashedFailoverFlag`: unless the item is being failed over, queue
    /// it and delete its `running` node.
    async fn set_crashed_failover_flag(&self, job: &str, item: u32, dead: &str) {
        if self.exists(job, &format!("sharding/{item}/failover")).await {
            return;
        }
        self.note(format!(
            "{job}: item {item} of {dead} was running: queues it for failover"
        ));
        self.create_if_needed(job, &format!("{FAILOVER_ITEMS}/{item}"))
            .await;
        self.remove_if_exists(job, &format!("sharding/{item}/running"))
            .await;
    }

    /// `LegacyCrashedRunningItemListener`: this instance's own node was added and it is the
    /// only available instance: items running or failing over under an owner that is not
    /// available are queued for failover.
    pub(crate) async fn on_own_instance_added(&self, job: &str) {
        let me = self.id();
        let Ok(available) = self.available_instances(job).await else {
            return;
        };
        if available.len() != 1 || available[0] != me {
            return;
        }
        let total = self.cached_total(job);
        let mut running: BTreeMap<u32, String> = BTreeMap::new();
        let mut failovering: BTreeMap<u32, String> = BTreeMap::new();
        for i in 0..total {
            if let Some(v) = self
                .cached(job, &format!("sharding/{i}/running"))
                .await
                .filter(|v| !v.is_empty())
            {
                running.insert(i, v);
            }
            if let Some(v) = self
                .cached(job, &format!("sharding/{i}/failovering"))
                .await
                .filter(|v| !v.is_empty())
            {
                failovering.insert(i, v);
            }
        }
        if running.is_empty() && failovering.is_empty() {
            return;
        }
        let alive = |owner: &str| available.iter().any(|a| a.as_str() == owner);
        for (item, owner) in &failovering {
            if !alive(owner) {
                self.note(format!(
                    "{job}: alone, finds item {item} failing over under {owner}: queues it"
                ));
                self.create_if_needed(job, &format!("{FAILOVER_ITEMS}/{item}"))
                    .await;
                self.remove_if_exists(job, &format!("sharding/{item}/failovering"))
                    .await;
                self.remove_if_exists(job, &format!("sharding/{item}/running"))
                    .await;
                running.remove(item);
            }
        }
        for (item, owner) in &running {
            if !alive(owner) {
                self.set_crashed_failover_flag(job, *item, owner).await;
                self.remove_if_exists(job, &format!("sharding/{item}/running"))
                    .await;
            }
        }
        self.failover_if_necessary(job).await;
    }

    /// `FailoverService.removeFailoverInfo`: `failover` switched off: every `failover` node
    /// goes.
    pub(crate) async fn remove_failover_info(&self, job: &str) {
        let snap = self.read_under(job, "sharding").await;
        let items: Vec<String> = snap
            .children("sharding")
            .into_iter()
            .map(str::to_owned)
            .collect();
        for i in items {
            self.remove_if_exists(job, &format!("sharding/{i}/failover"))
                .await;
        }
    }
}
