//! The machine's tunables.

use std::time::Duration;

use crate::config::KnownTypes;
use crate::instance::InstanceId;

/// Tunables of a [`Machine`](super::Machine). The defaults suit production.
#[derive(Debug, Clone)]
pub struct MachineOptions {
    /// This instance's id (`ip@-@pid` by default).
    pub instance_id: InstanceId,
    /// Share of the session timeout kept as a safety margin: the instance stops starting items
    /// and cancels running ones once `timeout × (1 − margin)` has passed since the last request
    /// that proved its session alive. Default 1/3.
    pub safety_margin: f64,
    /// How long the leader waits after a membership change before re-sharding, so that a burst
    /// of joins is one re-shard. Default 200 ms.
    pub reshard_debounce: Duration,
    /// How long the leader waits for running items that must move before it re-shards
    /// anyway (their running markers keep the new owner from starting them before the old run
    /// ends). No instance starts a new run of the job while the leader waits, so the wait
    /// normally ends with the longest run in progress. Default 30 s.
    pub reshard_wait: Duration,
    /// How long an instance leaves a dead instance's orphaned items to the instance whose
    /// share they are before claiming them itself. Default 2 s.
    pub failover_takeover_delay: Duration,
    /// How late a fire may start and still count as on time when `misfire` is off. Default 1 s.
    pub misfire_tolerance: Duration,
    /// First retry delay after a transient registry error (doubles up to 16×). Default 250 ms.
    pub retry_backoff: Duration,
    /// How long a graceful shutdown waits for running items before cancelling them. Default
    /// 30 s.
    pub shutdown_grace: Duration,
    /// How long the machine waits for the watch to show its own committed writes before it
    /// reloads the tree. Default 10 s.
    pub sync_timeout: Duration,
    /// How long before a scheduled fire its items are claimed. The claim (one registry round
    /// trip, more when many jobs fire at the same instant) is then done when the fire comes, and
    /// the job body starts on time; an item claimed ahead shows as running meanwhile, and a claim
    /// that cannot start (session in doubt, shutdown) is released without counting as a run.
    /// Zero claims at the fire. Default 250 ms. A job shared with ElasticJob instances is
    /// always claimed at the fire, whatever this says: an ElasticJob instance reads its
    /// leader's re-sharding flag at the fire, and a claim made ahead would miss a flag set in
    /// between (`docs/migration-design.md` 3.4, point 3).
    pub claim_ahead: Duration,
    /// The most items one transaction of the machine may touch (claims, adoptions,
    /// completions, re-sharding, housekeeping), for registries that limit the size of a
    /// transaction (etcd's `--max-txn-ops`). Larger work is split into several transactions,
    /// each safe on its own; the level-triggered decisions take the rest after the watch shows
    /// the previous one. `None` (the default): no limit, one transaction per decision.
    ///
    /// Whatever this says, a transaction the registry refuses as
    /// [`RegistryError::TooLarge`](crate::registry::RegistryError::TooLarge) halves the job's limit (down to one item) and is tried
    /// again at once, so a limit is found without configuration; see
    /// [`MachineOptions::fit_txn_ops`] to derive this one from a registry's operation limit.
    pub max_txn_items: Option<usize>,
    /// A re-shard written in parts reports its progress
    /// ([`MachineEvent::ReshardProgress`](super::MachineEvent::ReshardProgress)) each time
    /// this many more of its items are written. Default [`RESHARD_PROGRESS_STEP`](super::RESHARD_PROGRESS_STEP).
    pub reshard_progress_step: usize,
    /// Announce runs claimed ahead with [`Command::Prepare`](super::Command::Prepare) as soon as the claim succeeds,
    /// so that the driver can set them up before the fire and the start itself costs little
    /// when many jobs fire at the same instant. Off (the default): a run claimed ahead shows
    /// only at its start.
    pub prepare_ahead: bool,
    /// Evaluate every job now and then (a tenth of them each second the machine is awake),
    /// whether or not it is due: a net under the machine's own wake times. On (the default)
    /// in production. The simulator turns it off in some seeds, because the net also hides a
    /// wake that is missing from the liveness checker.
    pub safety_sweep: bool,
    /// The registry stamps the nodes it writes with its own wall-clock time
    /// ([`Stat::mtime_ms`](crate::registry::Stat::mtime_ms): ZooKeeper and the in-memory
    /// registry do, etcd does not). With it the machine measures how far its clock is off the
    /// registry's and holds the runs of a job shared with ElasticJob, or of one that sets
    /// `maxTimeDiffSeconds`, while it is off by more than they allow. Without it (the
    /// default) a job given with `maxTimeDiffSeconds` set is refused, and a registry's
    /// configuration that sets it runs with a warning.
    pub registry_clock: bool,
    /// Extra names accepted in job configurations (custom strategies).
    pub known_types: KnownTypes,
    /// Planted bugs switched on (simulator self-test only).
    #[cfg(feature = "plant-bugs")]
    pub plants: std::collections::BTreeSet<super::plant::Plant>,
}

impl MachineOptions {
    /// Options with every default for the given instance.
    pub fn new(instance_id: InstanceId) -> Self {
        Self {
            instance_id,
            safety_margin: 1.0 / 3.0,
            reshard_debounce: Duration::from_millis(200),
            reshard_wait: Duration::from_secs(30),
            failover_takeover_delay: Duration::from_secs(2),
            misfire_tolerance: Duration::from_secs(1),
            retry_backoff: Duration::from_millis(250),
            shutdown_grace: Duration::from_secs(30),
            sync_timeout: Duration::from_secs(10),
            claim_ahead: Duration::from_millis(250),
            max_txn_items: None,
            reshard_progress_step: super::RESHARD_PROGRESS_STEP,
            prepare_ahead: false,
            safety_sweep: true,
            registry_clock: false,
            known_types: KnownTypes::default(),
            #[cfg(feature = "plant-bugs")]
            plants: std::collections::BTreeSet::new(),
        }
    }
}

impl MachineOptions {
    /// The most registry operations one item of a machine transaction costs, counted as etcd
    /// counts them (compares and writes separately, with the tree emulation's extra compares):
    /// a claim costs 6 compares and 2 writes per item (7 and 3 when it seals the owner node,
    /// which etcd's versions never need; 8 and 3 beside ElasticJob), a failover claim 6 and 3, a
    /// completion 5 and 3, a new item 4 and 3; a removed item counts as two items.
    pub const OPS_PER_ITEM: usize = 8;

    /// The operations of a transaction that do not depend on its items (session, leader and
    /// flag checks), with a margin.
    pub const OPS_PER_TXN: usize = 8;

    /// Sets [`MachineOptions::max_txn_items`] for a registry that allows at most `max_ops`
    /// operations (or compares) per transaction, such as
    /// [`Registry::max_txn_ops`](crate::registry::Registry::max_txn_ops): at least one item.
    pub fn fit_txn_ops(&mut self, max_ops: usize) {
        let items = max_ops.saturating_sub(Self::OPS_PER_TXN) / Self::OPS_PER_ITEM;
        self.max_txn_items = Some(items.max(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A registry's operation limit leaves, after a transaction's own operations, room for
    /// whole items only; a limit too small for one still allows one.
    #[test]
    fn fit_txn_ops_counts_the_items_a_limit_has_room_for() {
        let me = crate::InstanceId::new("10.0.0.1@-@1").unwrap();
        let mut opts = MachineOptions::new(me);
        opts.fit_txn_ops(64);
        assert_eq!(opts.max_txn_items, Some(7));
        opts.fit_txn_ops(MachineOptions::OPS_PER_TXN + 2 * MachineOptions::OPS_PER_ITEM - 1);
        assert_eq!(opts.max_txn_items, Some(1));
        opts.fit_txn_ops(0);
        assert_eq!(opts.max_txn_items, Some(1));
    }
}
