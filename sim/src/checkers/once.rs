//! Checker 2: a (job, item, fire) is started at most once, unless the earlier attempt was cut
//! short (its process crashed, it was cancelled, or its end was never recorded in the registry
//! because the process or its session went first): such a second start is a retry, counted.

use std::collections::BTreeMap;

use shardjob_core::machine::record::RunKind;

use super::Violation;
use crate::cluster::RunRecord;

/// What the checker found.
#[derive(Debug, Default)]
pub struct Once {
    /// Fires started twice without the first attempt being cut short.
    pub violations: Vec<Violation>,
    /// Fires started again after a cut-short attempt.
    pub retries: usize,
}

/// Checks every fire.
pub fn check(runs: &[RunRecord]) -> Once {
    let mut out = Once::default();
    let mut by_fire: BTreeMap<(&str, u32, i64), Vec<usize>> = BTreeMap::new();
    for (i, r) in runs.iter().enumerate() {
        if r.kind != RunKind::Trigger {
            by_fire
                .entry((r.job.as_str(), r.item, r.fire))
                .or_default()
                .push(i);
        }
    }
    for ((job, item, fire), list) in by_fire {
        for w in list.windows(2) {
            let (a, b) = (&runs[w[0]], &runs[w[1]]);
            // The first attempt counts as done only once its end was recorded: a process that
            // crashed, was cut off or lost its session before that leaves the fire to be run
            // again (at least once), which is a retry.
            if a.cancelled || a.crashed || !a.recorded {
                out.retries += 1;
            } else {
                out.violations.push(Violation {
                    checker: "once",
                    time: b.start,
                    message: format!(
                        "{job}/{item} fire {fire} started twice: node {} {:?} at {} token {} (finished at {:?}, recorded), then node {} {:?} at {} token {}",
                        a.node, a.kind, a.start, a.token, a.end, b.node, b.kind, b.start, b.token
                    ),
                });
            }
        }
    }
    out
}
