//! Checker 1: no two instances run the same (job, item) at overlapping times.
//!
//! Two exceptions are counted apart instead of failing: a job that ignores cancellation (its
//! runs may overlap, but then the later run must carry a larger fencing token), and a process
//! frozen by a pause while another instance took the item over (it is told to stop the moment
//! it wakes; the overlap lasts until it does, and the tokens must grow too).

use std::collections::BTreeSet;

use super::Violation;
use crate::cluster::RunRecord;

/// What the checker found.
#[derive(Debug, Default)]
pub struct Overlaps {
    /// Overlaps that break the invariant.
    pub violations: Vec<Violation>,
    /// Overlaps of jobs that ignore cancellation.
    pub ignored_cancel: usize,
    /// Overlaps of a paused process's run after it woke, before it stopped.
    pub fenced_after_pause: usize,
}

/// Checks every pair of runs of the same (job, item).
pub fn check(runs: &[RunRecord], ignore_cancel: &BTreeSet<String>) -> Overlaps {
    let mut out = Overlaps::default();
    for ((job, item), mut list) in super::runs_by_item(runs) {
        list.sort_by_key(|r| (r.start, r.token));
        // The earlier runs that may still overlap a later one, in list order. Starts do not
        // decrease along the list, so a run that ended by one start has ended by every later
        // one and leaves for good: the pairs seen, and their order, are those of comparing
        // every pair.
        let mut open: Vec<&RunRecord> = Vec::new();
        for b in list.iter().copied() {
            open.retain(|a| a.end.unwrap_or(u64::MAX) > b.start);
            for a in open.iter().copied() {
                if a.node == b.node && a.java == b.java && a.start == b.start {
                    continue;
                }
                let tokens_grow = b.token > a.token;
                if ignore_cancel.contains(job) {
                    out.ignored_cancel += 1;
                    if !tokens_grow {
                        out.violations.push(violation(
                            b.start,
                            job,
                            item,
                            a,
                            b,
                            "tokens do not grow",
                        ));
                    }
                    continue;
                }
                // The earlier run's process was frozen while its session expired; it was told
                // to stop the moment it woke.
                let frozen = a.resumed.is_some_and(|r| {
                    b.start < r || a.cancel_signal.is_some_and(|c| c <= r.saturating_add(1))
                });
                if frozen && tokens_grow {
                    out.fenced_after_pause += 1;
                    continue;
                }
                out.violations
                    .push(violation(b.start, job, item, a, b, "runs overlap"));
            }
            open.push(b);
        }
    }
    out
}

fn violation(
    time: u64,
    job: &str,
    item: u32,
    a: &RunRecord,
    b: &RunRecord,
    what: &str,
) -> Violation {
    Violation {
        subject: super::Subject::runs(a, b),
        checker: "overlap",
        time,
        message: format!(
            "{job}/{item}: {what}: {} ran fire {} {:?} token {} from {} to {:?}, {} started fire {} {:?} token {} at {}",
            a.runner(),
            a.fire,
            a.kind,
            a.token,
            a.start,
            a.end,
            b.runner(),
            b.fire,
            b.kind,
            b.token,
            b.start
        ),
    }
}
