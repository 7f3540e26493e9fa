//! The registry requests in flight, what each is for, and what their results say.

#[allow(clippy::wildcard_imports)]
use super::*;

/// The registry requests in flight.
#[derive(Debug, Default)]
pub(crate) struct Requests {
    /// What each request in flight is for.
    pub(crate) pending: BTreeMap<RequestId, Pending>,
    /// The number of the latest request sent.
    pub(crate) next: u64,
}

#[derive(Debug)]
pub(crate) struct Pending {
    pub(crate) epoch: u64,
    pub(crate) sent: Mono,
    pub(crate) job: Option<JobId>,
    pub(crate) purpose: Purpose,
}

#[derive(Debug)]
pub(crate) enum Purpose {
    Load,
    Setup,
    Elect,
    Abdicate,
    Reshard {
        owners: BTreeMap<u32, InstanceId>,
        moved_running: Vec<u32>,
        /// Whether this transaction completes the plan (a plan too large for one transaction
        /// is written in parts; only the last one clears `leader/sharding/necessary`).
        last: bool,
        /// Items it touches (a removed item counts twice), for halving on `TooLarge`.
        units: usize,
        /// Items it moves, creates or removes.
        items: usize,
        /// Items the re-shard still has to write after it.
        remaining: usize,
    },
    Housekeeping {
        /// Whether this transaction removes every stale server node (else another follows).
        last: bool,
        /// Server nodes it removes.
        units: usize,
    },
    /// Stale `running` markers and garbage instance nodes removed by the leader.
    Foreign {
        cleared: Vec<crate::machine::leader::stale::Cleared>,
        /// ElasticJob's left-overs removed (path, value).
        leftovers: Vec<(NodePath, String)>,
        /// Nodes it touches, for halving on `TooLarge`.
        units: usize,
    },
    Flag,
    /// A measurement of the registry's clock: this instance's node of the job written again
    /// with the same data (`clock`).
    Measure,
    /// Orphaned runs of a mixed job settled: ElasticJob's failover has them
    /// (`docs/migration-design.md` 3.5).
    Settle {
        /// The items it settles, ascending (their number halves on `TooLarge`).
        items: Vec<u32>,
    },
    /// Persistent markers of shardjob runs left behind by their sessions, removed
    /// (`mixed::mixed_duties`).
    LeftMarkers {
        /// Each marker's item and value, for the event.
        cleared: Vec<(u32, String)>,
    },
    /// Garbage instance nodes no session holds, deleted while an ElasticJob instance leads
    /// (`mixed::java_garbage`).
    Garbage {
        /// Each node's path and value, for the event.
        nodes: Vec<(String, String)>,
    },
    /// The re-sharding flag set for an ElasticJob leader whose plan names owners that are
    /// gone (`mixed::gone_owners`).
    Nudge {
        /// The items the plan gives to no live instance, ascending, with the owner each names
        /// (empty: none), for the event.
        items: Vec<(u32, String)>,
    },
    Claim(Vec<Claim>),
    /// Markers of this session found without an execution, confirmed by the transaction.
    Adopt(Vec<(RunKey, Vec<(ExecItem, Revision)>)>),
    ConsumeTrigger {
        parameter: String,
    },
    Complete(ExecutionId),
    Leave,
    Probe,
}

pub(crate) fn created_stat(results: &[TxnOpResult], index: usize) -> Option<crate::registry::Stat> {
    match results.get(index) {
        Some(TxnOpResult::Created(stat)) => Some(*stat),
        _ => None,
    }
}

pub(crate) fn written_version(results: &[TxnOpResult], index: usize) -> Option<Version> {
    match results.get(index) {
        Some(TxnOpResult::Created(stat) | TxnOpResult::Set(stat)) => Some(stat.version),
        _ => None,
    }
}

pub(crate) fn last_revision(results: &[TxnOpResult]) -> Option<Revision> {
    results
        .iter()
        .filter_map(|r| match r {
            TxnOpResult::Created(s) | TxnOpResult::Set(s) => Some(s.modified),
            _ => None,
        })
        .max()
}

impl Machine {
    pub(crate) fn request(
        &mut self,
        job: Option<JobId>,
        purpose: Purpose,
        op: RegistryOp,
        now: Now,
    ) -> RequestId {
        self.requests.next += 1;
        let id = RequestId(self.requests.next);
        self.requests.pending.insert(
            id,
            Pending {
                epoch: self.sess.epoch,
                sent: now.mono,
                job,
                purpose,
            },
        );
        self.out.push_back(Command::Registry { id, op });
        id
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::Stat;

    /// A claim's run record counts as written, at its new version, whether the claim created
    /// it or replaced it; a check, a deletion or a missing result is no write.
    #[test]
    fn written_version_reads_creates_and_sets_only() {
        let stat = |v: i64| Stat {
            version: Version(v),
            created: Revision(1),
            modified: Revision(v as u64),
            ephemeral_owner: None,
            mtime_ms: None,
        };
        let results = [
            TxnOpResult::Checked,
            TxnOpResult::Created(stat(0)),
            TxnOpResult::Set(stat(4)),
            TxnOpResult::Deleted,
        ];
        assert_eq!(written_version(&results, 0), None);
        assert_eq!(written_version(&results, 1), Some(Version(0)));
        assert_eq!(written_version(&results, 2), Some(Version(4)));
        assert_eq!(written_version(&results, 3), None);
        assert_eq!(written_version(&results, 4), None);
        assert_eq!(last_revision(&results), Some(Revision(4)));
    }
}
