//! The leader's duties: the sharding plan and the housekeeping of a job's nodes.

#[allow(clippy::wildcard_imports)]
use crate::machine::*;

pub(crate) mod housekeeping;
pub(crate) mod leftovers;
pub(crate) mod reshard;
pub(crate) mod stale;

/// What an instance keeps about a job while it leads it, and drops when it no longer does.
#[derive(Debug, Default)]
pub(crate) struct LeaderState {
    /// When the plan was first found to need a change (monotonic ms): the debounce, and the
    /// wait for running items to end, count from it.
    pub(crate) wanted: Option<Mono>,
    /// The cache's [`Cache::plan_version`] at which the plan was last found to need nothing:
    /// until the plan's inputs change, a re-shard is not worked out again.
    pub(crate) idle: Option<u64>,
    /// Items moved while running by the parts of a re-shard written so far.
    pub(crate) moved: Vec<u32>,
    /// Items written by the parts of a re-shard so far (its progress, reported every
    /// [`RESHARD_PROGRESS_STEP`] items).
    pub(crate) written: usize,
    /// The re-shard being written in parts, as worked out for its first part.
    pub(crate) plan: Option<Box<ReshardPlan>>,
    /// When the last housekeeping ended (monotonic ms).
    pub(crate) last_housekeeping: Option<Mono>,
    /// The items' `running` markers that no session holds, as first seen (see [`stale`]).
    pub(crate) stale_seen: BTreeMap<u32, stale::SeenMarker>,
    /// The instance nodes no session holds that were reported already.
    pub(crate) foreign_reported: BTreeSet<NodePath>,
    /// ElasticJob's left-overs in a job it no longer shares, and since when each was seen
    /// (see [`leftovers`]).
    pub(crate) leftovers_seen: BTreeMap<leftovers::LeftOver, Mono>,
}
