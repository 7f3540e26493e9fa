//! Manual triggers: a queued trigger runs all of this instance's enabled items once, when none
//! of them runs.
//!
//! Before the job's plan gives every item an owner the trigger waits for it, rather than running
//! nothing, or a part of the items only. A
//! trigger whose items take several transactions (a transaction limit) is remembered as a
//! [`TriggerRun`] until all of them are claimed, with one fire time; scheduled fires wait for
//! it meanwhile. Items of the trigger being run that moved away or were disabled meanwhile are
//! left out; a trigger left with nothing to run is over. While the leader holds new runs for a
//! re-shard, a trigger waits.

use std::collections::BTreeSet;

use crate::machine::job::TriggerRun;

/// What the trigger planner reads of an item of the job.
pub(crate) trait TriggerItems {
    /// Whether this instance owns the item.
    fn mine(&self, item: u32) -> bool;
    /// Whether it is disabled.
    fn disabled(&self, item: u32) -> bool;
    /// Whether it runs, here (an execution holds it) or anywhere (its `running` marker).
    fn running(&self, item: u32) -> bool;
}

/// What the job's triggers ask of this instance now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TriggerPlan {
    /// The trigger run after this decision: the one under way (narrowed to the items still
    /// this instance's and enabled), a new one, or none.
    pub(crate) run: Option<TriggerRun>,
    /// What it takes off the queue of triggers.
    pub(crate) dequeue: Dequeue,
    /// The trigger run's items to claim now (ascending).
    pub(crate) due: Vec<u32>,
}

/// What a decision takes off the queue of triggers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dequeue {
    /// Nothing.
    Nothing,
    /// The first one: it starts a run.
    First,
    /// All of them: there is nothing to run here, and each would find the same nothing.
    All,
}

/// The trigger decision. `mine` are the items this instance owns (ascending), `queued` the
/// parameter of the first trigger queued, if any, `run` the trigger run under way; `planned` says the job has a plan,
/// `held` that new runs wait for a re-shard; `now_ms` is a new run's fire time.
// A pure decision takes each of its inputs by name, as its table-driven tests give them.
#[allow(clippy::too_many_arguments)]
pub(crate) fn plan(
    mine: &[u32],
    queued: Option<&str>,
    run: Option<&TriggerRun>,
    items: &impl TriggerItems,
    planned: bool,
    held: bool,
    now_ms: i64,
    run_disabled: bool,
) -> TriggerPlan {
    let skip = |i: u32| items.disabled(i) && !run_disabled;
    // The run under way keeps the items still this instance's and enabled; left with none, it
    // is over (so that it neither blocks the next trigger nor the scheduled fires).
    let mut run = run.cloned();
    if let Some(r) = &mut run {
        r.items.retain(|i| items.mine(*i) && !skip(*i));
        if r.items.is_empty() {
            run = None;
        }
    }
    let mut dequeue = Dequeue::Nothing;
    if let (Some(parameter), true, None, false) = (queued, planned, &run, held) {
        let busy = mine.iter().any(|i| items.running(*i));
        if !busy {
            let enabled: BTreeSet<u32> = mine.iter().copied().filter(|i| !skip(*i)).collect();
            if enabled.is_empty() {
                dequeue = Dequeue::All;
            } else {
                dequeue = Dequeue::First;
                run = Some(TriggerRun {
                    parameter: parameter.to_owned(),
                    fire: now_ms,
                    items: enabled,
                });
            }
        }
    }
    // Held, or running (another kind of run, or one not recorded yet): waits.
    let due = match &run {
        Some(r) if !held => r
            .items
            .iter()
            .copied()
            .filter(|i| !items.running(*i))
            .collect(),
        _ => Vec::new(),
    };
    TriggerPlan { run, dequeue, due }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Items 0..6: this instance owns `mine`, some are disabled, some run.
    struct Items {
        mine: Vec<u32>,
        disabled: Vec<u32>,
        running: Vec<u32>,
    }

    impl TriggerItems for Items {
        fn mine(&self, item: u32) -> bool {
            self.mine.contains(&item)
        }
        fn disabled(&self, item: u32) -> bool {
            self.disabled.contains(&item)
        }
        fn running(&self, item: u32) -> bool {
            self.running.contains(&item)
        }
    }

    fn run(items: &[u32]) -> TriggerRun {
        TriggerRun {
            parameter: String::new(),
            fire: 7,
            items: items.iter().copied().collect(),
        }
    }

    /// (items, queued, the run under way, planned, held) → the run after, what leaves the
    /// queue, the items to claim now.
    #[test]
    fn the_trigger_decision() {
        let items = |mine: &[u32], disabled: &[u32], running: &[u32]| Items {
            mine: mine.to_vec(),
            disabled: disabled.to_vec(),
            running: running.to_vec(),
        };
        let started = |it: &[u32]| TriggerRun {
            parameter: "p".to_owned(),
            fire: 100,
            items: it.iter().copied().collect(),
        };
        #[rustfmt::skip]
        #[allow(clippy::type_complexity)]
        let cases: Vec<(&str, Items, Option<&str>, Option<TriggerRun>, bool, bool, Option<TriggerRun>, Dequeue, Vec<u32>)> = vec![
            ("a queued trigger runs every enabled item of mine", items(&[0, 2, 4], &[2], &[]), Some("p"), None, true, false, Some(started(&[0, 4])), Dequeue::First, vec![0, 4]),
            ("it waits while one of my items runs", items(&[0, 2], &[], &[2]), Some("p"), None, true, false, None, Dequeue::Nothing, vec![]),
            ("it waits for a plan", items(&[], &[], &[]), Some("p"), None, false, false, None, Dequeue::Nothing, vec![]),
            ("it waits while the leader holds runs", items(&[0], &[], &[]), Some("p"), None, true, true, None, Dequeue::Nothing, vec![]),
            ("nothing enabled here: every queued trigger goes", items(&[1], &[1], &[]), Some("p"), None, true, false, None, Dequeue::All, vec![]),
            ("nothing queued, nothing under way", items(&[0], &[], &[]), None, None, true, false, None, Dequeue::Nothing, vec![]),
            ("a run under way claims what does not run", items(&[0, 1, 2], &[], &[1]), None, Some(run(&[0, 1, 2])), true, false, Some(run(&[0, 1, 2])), Dequeue::Nothing, vec![0, 2]),
            ("items moved away or disabled leave the run", items(&[0, 1], &[1], &[]), Some("p"), Some(run(&[0, 1, 2])), true, false, Some(run(&[0])), Dequeue::Nothing, vec![0]),
            ("a run left with nothing is over, and the next starts", items(&[3], &[], &[]), Some("p"), Some(run(&[1])), true, false, Some(started(&[3])), Dequeue::First, vec![3]),
            ("a run under way waits while held", items(&[0], &[], &[]), None, Some(run(&[0])), true, true, Some(run(&[0])), Dequeue::Nothing, vec![]),
        ];
        for (what, items, queued, under_way, planned, held, want_run, want_dequeue, want_due) in
            cases
        {
            let mine: Vec<u32> = (0..6).filter(|i| items.mine(*i)).collect();
            let got = plan(
                &mine,
                queued,
                under_way.as_ref(),
                &items,
                planned,
                held,
                100,
                false,
            );
            assert_eq!(got.run, want_run, "{what}: the run");
            assert_eq!(got.dequeue, want_dequeue, "{what}: the queue");
            assert_eq!(got.due, want_due, "{what}: the items due");
        }
    }
}
