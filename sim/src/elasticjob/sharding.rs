//! Sharding (`ShardingService`): the re-sharding flag the leader sets, the lazy sharding a
//! fire runs, and which items an instance owns.

use shardjob_core::registry::{Check, RegistryOp, RegistryReply, TxnOp};
use shardjob_core::{BuiltinStrategy, InstanceId, ShardingStrategy};

use super::jvm::Jvm;
use super::storage::path;
use super::view::{Snap, items_owned, read_instance};

/// `leader/sharding/necessary`.
pub(crate) const NECESSARY: &str = "leader/sharding/necessary";
/// `leader/sharding/processing`.
pub(crate) const PROCESSING: &str = "leader/sharding/processing";

/// Why an ElasticJob call threw instead of answering (the fire, or the listener, stops there).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Thrown(pub(crate) String);

/// The transaction of a sharding result (`getShardingResultTransactionOperations`): the root
/// checked, each item's owner created, the flags deleted.
pub(crate) fn sharding_ops(job: &str, owners: &[(u32, InstanceId)]) -> Option<Vec<TxnOp>> {
    let mut ops = vec![TxnOp::Check(Check::Exists(
        shardjob_core::registry::NodePath::root(),
    ))];
    for (item, owner) in owners {
        ops.push(TxnOp::create(
            path(job, &format!("sharding/{item}/instance"))?,
            owner.as_str().as_bytes().to_vec(),
        ));
    }
    ops.push(TxnOp::delete(path(job, NECESSARY)?));
    ops.push(TxnOp::delete(path(job, PROCESSING)?));
    Some(ops)
}

/// The owner of each item, from a strategy's assignment, by item.
pub(crate) fn owners_by_item(
    strategy: &dyn ShardingStrategy,
    candidates: &[InstanceId],
    job: &str,
    total: u32,
) -> Vec<(u32, InstanceId)> {
    let mut out: Vec<(u32, InstanceId)> = strategy
        .shard(candidates, job, total)
        .into_pairs()
        .into_iter()
        .flat_map(|(owner, items)| items.into_iter().map(move |i| (i, owner.clone())))
        .collect();
    out.sort_by_key(|(i, _)| *i);
    out
}

impl Jvm {
    /// `ShardingService.setReshardingFlag`: the leader (after `isLeaderUntilBlock`) creates
    /// `necessary`; anyone else does nothing.
    pub(crate) async fn set_resharding_flag(&self, job: &str) {
        if !self.is_leader_until_block(job).await {
            return;
        }
        if self.create_if_needed(job, NECESSARY).await.is_some() {
            self.note(format!("{job}: sets the re-sharding flag"));
        }
    }

    /// `InstanceService.getAvailableJobInstances`: the registered instances (in the
    /// registry's order) whose value reads and whose server is enabled.
    pub(crate) async fn available_instances(&self, job: &str) -> Result<Vec<InstanceId>, Thrown> {
        let snap = self.read_under(job, "instances").await;
        let ids: Vec<String> = snap
            .children("instances")
            .into_iter()
            .map(str::to_owned)
            .collect();
        let mut out = Vec::new();
        for id in ids {
            let Some(value) = self.cached(job, &format!("instances/{id}")).await else {
                continue;
            };
            let Some(instance) = read_instance(&value).map_err(Thrown)? else {
                continue;
            };
            if self.is_enable_server(job, &instance.server_ip).await {
                if let Ok(id) = InstanceId::new(instance.id) {
                    out.push(id);
                }
            }
        }
        Ok(out)
    }

    /// `ShardingService.shardingIfNecessary`, on the fire's thread.
    pub(crate) async fn sharding_if_necessary(&self, job: &str) -> Result<(), Thrown> {
        let available = self.available_instances(job).await?;
        if !self.exists(job, NECESSARY).await || available.is_empty() {
            return Ok(());
        }
        if !self.is_leader_until_block(job).await {
            // `blockUntilShardingCompleted`: no time limit.
            while !self.is_leader_until_block(job).await {
                let snap = self.read_under(job, "leader/sharding").await;
                if !snap.exists(NECESSARY) && !snap.exists(PROCESSING) {
                    break;
                }
                self.sleep(100).await;
            }
            return Ok(());
        }
        // `waitingOtherShardingItemCompleted`: no time limit.
        loop {
            let monitor = self
                .job(job, |j| j.cache.config().map(|c| c.monitor_execution))
                .flatten()
                .unwrap_or(false);
            let total = self.cached_total(job);
            let snap = self.read_under(job, "sharding").await;
            if !monitor || !(0..total).any(|i| snap.exists(&format!("sharding/{i}/running"))) {
                break;
            }
            self.sleep(100).await;
        }
        let snap = self.read(job).await;
        let Some(config) = snap.config() else {
            return Err(Thrown("the configuration does not read".into()));
        };
        let total = config.sharding_total_count;
        self.persist_ephemeral(job, PROCESSING, "").await;
        // `resetShardingInfo`.
        for i in 0..total {
            self.remove_if_exists(job, &format!("sharding/{i}/instance"))
                .await;
            self.create_if_needed(job, &format!("sharding/{i}")).await;
        }
        let count = self
            .read_under(job, "sharding")
            .await
            .children("sharding")
            .len() as u32;
        for i in total..count {
            self.remove_if_exists(job, &format!("sharding/{i}")).await;
        }
        // An unknown strategy throws here, after `processing` was created: every instance
        // then waits for ever (as ElasticJob does).
        let name = config.job_sharding_strategy_type.as_str();
        let strategy: BuiltinStrategy = if name.is_empty() {
            BuiltinStrategy::AverageAllocation
        } else {
            name.parse()
                .map_err(|_| Thrown(format!("unknown sharding strategy {name:?}")))?
        };
        let owners = owners_by_item(&strategy, &available, job, total);
        let Some(ops) = sharding_ops(job, &owners) else {
            return Err(Thrown("a path the registry cannot hold".into()));
        };
        let reply = self.call(RegistryOp::Transact(ops)).await;
        let what = match reply {
            RegistryReply::Transacted(_) => "done",
            _ => "refused (swallowed)",
        };
        let plan: Vec<String> = owners
            .iter()
            .map(|(i, o)| format!("{i}→{}", o.as_str()))
            .collect();
        self.note(format!("{job}: shards {}: {what}", plan.join(" ")));
        Ok(())
    }

    /// The item count as the cache's configuration says (0 if it does not read).
    pub(crate) fn cached_total(&self, job: &str) -> u32 {
        self.job(job, |j| j.cache.config().map(|c| c.sharding_total_count))
            .flatten()
            .unwrap_or(0)
    }

    /// `ShardingService.getLocalShardingItems`: this instance's items, from the cache (an
    /// unavailable server has none). `Err`: this instance's own node does not read (ElasticJob
    /// throws).
    pub(crate) async fn local_items(&self, job: &str) -> Result<Vec<u32>, Thrown> {
        if self.job(job, |j| j.shutdown).unwrap_or(true) {
            return Ok(Vec::new());
        }
        let me = self.id();
        if !self.is_available_server(job, me.server_ip()).await {
            return Ok(Vec::new());
        }
        let value = self
            .cached(job, &format!("instances/{me}"))
            .await
            .unwrap_or_default();
        let Some(instance) = read_instance(&value).map_err(Thrown)? else {
            return Err(Thrown(format!("no instance node for {me}")));
        };
        if !self.is_available_server(job, &instance.server_ip).await {
            return Ok(Vec::new());
        }
        let total = self.cached_total(job);
        let mut owners = Vec::with_capacity(total as usize);
        for i in 0..total {
            owners.push(self.cached(job, &format!("sharding/{i}/instance")).await);
        }
        Ok(items_owned(total, &instance.id, |i| {
            owners.get(i as usize).cloned().flatten()
        }))
    }

    /// `ShardingService.hasShardingInfoInOfflineServers`: some item's owner is not a
    /// registered instance.
    pub(crate) async fn sharding_in_offline_servers(&self, job: &str) -> bool {
        let snap: Snap = self.read(job).await;
        let online = snap.children("instances");
        let total = self.cached_total(job);
        for i in 0..total {
            let owner = self.cached(job, &format!("sharding/{i}/instance")).await;
            if !owner.is_some_and(|o| online.contains(&o.as_str())) {
                return true;
            }
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(s: &str) -> InstanceId {
        InstanceId::new(s).expect("a valid id")
    }

    #[test]
    fn two_instances_share_four_items_as_elasticjob_does() {
        // Candidates in the registry's order (reverse string order): 10.0.0.2 first.
        let candidates =
            shardjob_core::sharding::registry_order([id("10.0.0.1@-@1"), id("10.0.0.2@-@2")]);
        let owners = owners_by_item(&BuiltinStrategy::AverageAllocation, &candidates, "j", 5);
        let by: Vec<(u32, &str)> = owners.iter().map(|(i, o)| (*i, o.as_str())).collect();
        assert_eq!(
            by,
            vec![
                (0, "10.0.0.2@-@2"),
                (1, "10.0.0.2@-@2"),
                (2, "10.0.0.1@-@1"),
                (3, "10.0.0.1@-@1"),
                (4, "10.0.0.2@-@2"),
            ]
        );
        let ops = sharding_ops("j", &owners).expect("valid paths");
        assert_eq!(ops.len(), 1 + 5 + 2);
        assert!(matches!(ops[0], TxnOp::Check(Check::Exists(_))));
        assert!(
            matches!(&ops[7], TxnOp::Delete { path, .. } if path.as_str() == "/j/leader/sharding/processing")
        );
    }
}
