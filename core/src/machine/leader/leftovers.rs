//! What ElasticJob leaves in a job once its last instance is gone (`docs/migration-design.md`
//! 3.8): the `sharding/{item}/failovering` node of a failover its runner never finished (an
//! ElasticJob instance killed while it ran an item failed over to it), and the entries of
//! `leader/failover/items/` that no ElasticJob instance claimed before the last one left.
//!
//! While the job is shared with ElasticJob these are ElasticJob's to handle, and shardjob
//! leaves them alone. Once no ElasticJob instance is registered, nobody would ever take them
//! up, and an ElasticJob instance that joins later would: it would claim a queued failover of
//! a fire long past and run it again, and an item with a `failovering` node is counted as
//! failing over by ElasticJob's console. So the leader removes them, each once it has seen it
//! stale for a session timeout (the grace an ElasticJob instance whose session was lost has
//! to come back and finish), with a version check, and says so (a WARN, and
//! [`MachineEvent::JavaLeftOverCleared`]).
//!
//! The fire such a node stood for is not run again by this: nothing the registry holds tells
//! which fire it was. Where the dead run was shardjob's, the item's execution record names it
//! and shardjob's own failover runs it; otherwise it is given up, as ElasticJob itself gives
//! up the fires of an instance that dies with nobody left to fail it over.

use std::collections::BTreeMap;

#[allow(clippy::wildcard_imports)]
use crate::machine::*;

/// A node ElasticJob left, by kind and item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum LeftOver {
    /// `sharding/{item}/failovering`: a failover claimed and never finished.
    Failovering(u32),
    /// `leader/failover/items/{item}`: a failover queued and never claimed.
    Queued(u32),
}

/// A left-over as the view shows it: its node's value and version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Found {
    pub(crate) what: LeftOver,
    pub(crate) value: String,
    pub(crate) version: Version,
}

/// What the leader does about the left-overs now.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct LeftOverPlan {
    /// Since when (monotonic ms) each left-over has been seen stale, after this decision.
    pub(crate) seen: BTreeMap<LeftOver, Mono>,
    /// The left-overs to remove now, in order.
    pub(crate) clear: Vec<LeftOver>,
    /// When the next one's grace runs out, if one waits.
    pub(crate) wake: Option<Mono>,
}

/// The left-overs of ElasticJob in `view` that nobody will take up: none while an ElasticJob
/// instance is registered (`mixed`); a `failovering` node whose runner (its value) is no live
/// instance and whose item has no `failover` node (a failover under way); every queued entry.
pub(crate) fn found(view: &JobView, mixed: bool) -> Vec<Found> {
    if mixed {
        return Vec::new();
    }
    let claimed = view.items.iter().filter_map(|(i, v)| {
        let (value, stat) = v.failovering.as_ref()?;
        (v.failover.is_none() && !view.is_live(value)).then(|| Found {
            what: LeftOver::Failovering(*i),
            value: value.clone(),
            version: stat.version,
        })
    });
    let queued = view.failover_queue.iter().map(|(i, version)| Found {
        what: LeftOver::Queued(*i),
        value: String::new(),
        version: *version,
    });
    claimed.chain(queued).collect()
}

/// Which of the left-overs `found` are removed now: those seen stale for `grace_ms` (`seen`:
/// since when each was, from the leader's earlier decisions; one no longer found is
/// forgotten).
pub(crate) fn plan(
    found: &[Found],
    seen: &BTreeMap<LeftOver, Mono>,
    grace_ms: u64,
    now: Mono,
) -> LeftOverPlan {
    let mut plan = LeftOverPlan::default();
    for f in found {
        let since = seen.get(&f.what).copied().unwrap_or(now);
        plan.seen.insert(f.what, since);
        let due = since.after(grace_ms);
        if now >= due {
            plan.clear.push(f.what);
        } else {
            plan.wake = Some(plan.wake.map_or(due, |w| w.min(due)));
        }
    }
    plan
}

/// The path of a left-over.
pub(crate) fn path(paths: &JobPaths, what: LeftOver) -> NodePath {
    match what {
        LeftOver::Failovering(i) => paths.item_failovering(i),
        LeftOver::Queued(i) => paths.failover_item(i),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::job_view::ItemView;
    use crate::machine::test_support::stat;

    fn view() -> JobView {
        let mut v = JobView::default();
        let live = InstanceId::new("10.0.0.1@-@1").unwrap();
        v.instances.insert(live);
        // Item 0: a failover of a dead ElasticJob instance; item 1: of a live instance; item
        // 2: a dead one's, with a failover under way (the `failover` node); item 3 queued.
        for (i, runner, failover) in [
            (0, "10.0.2.2@-@104", false),
            (1, "10.0.0.1@-@1", false),
            (2, "10.0.2.2@-@104", true),
        ] {
            v.items.insert(
                i,
                Box::new(ItemView {
                    failovering: Some((runner.to_owned(), stat(i64::from(i)))),
                    failover: failover.then(|| stat(0)),
                    ..ItemView::default()
                }),
            );
        }
        v.failover_queue.insert(3, Version(0));
        v
    }

    #[test]
    fn only_what_nobody_takes_up_and_only_once_the_job_is_not_shared() {
        let v = view();
        assert!(
            found(&v, true).is_empty(),
            "ElasticJob's own while it is here"
        );
        let f = found(&v, false);
        let what: Vec<LeftOver> = f.iter().map(|f| f.what).collect();
        assert_eq!(what, vec![LeftOver::Failovering(0), LeftOver::Queued(3)]);
        assert_eq!(f[0].value, "10.0.2.2@-@104");
        assert_eq!(f[0].version, Version(0));
    }

    #[test]
    fn each_is_removed_after_a_grace_from_its_first_sight() {
        let v = view();
        let f = found(&v, false);
        let first = plan(&f, &BTreeMap::new(), 3_000, Mono(10_000));
        assert!(first.clear.is_empty());
        assert_eq!(first.wake, Some(Mono(13_000)));
        let early = plan(&f, &first.seen, 3_000, Mono(12_999));
        assert!(early.clear.is_empty());
        let due = plan(&f, &first.seen, 3_000, Mono(13_000));
        assert_eq!(
            due.clear,
            vec![LeftOver::Failovering(0), LeftOver::Queued(3)]
        );
        assert_eq!(due.wake, None);
        // One gone meanwhile is forgotten; a new one waits its own grace.
        let later = plan(&f[1..], &first.seen, 3_000, Mono(20_000));
        assert_eq!(later.seen.len(), 1);
        assert_eq!(later.clear, vec![LeftOver::Queued(3)]);
    }
}
