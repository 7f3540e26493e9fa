//! A live run's `running` marker is its own: no shardjob instance deletes it while the run goes
//! on and its process's session lives. The marker is what keeps every other hand off the item
//! (ElasticJob's instances skip an item with a marker and its leader waits for it before it
//! re-shards; an instance that takes a run without a marker for an orphan fails it over), so a
//! marker gone under a live run is a duplicate or an overlap waiting for its chance. A run's
//! marker is known by its creation revision, the run's fencing token. Deletions by ElasticJob's
//! instances (their completion and failover delete markers by path) and by operators are not
//! shardjob's and are not held here.

use std::collections::BTreeMap;

use super::{Subject, Violation};
use crate::cluster::{Cluster, RunRecord};

/// Every deletion of a live run's marker by a shardjob instance.
pub fn check(c: &Cluster) -> Vec<Violation> {
    // The runs by fencing token, once: a world has as many deletions as runs.
    let mut by_token: BTreeMap<u64, Vec<&RunRecord>> = BTreeMap::new();
    for r in &c.runs {
        by_token.entry(r.token).or_default().push(r);
    }
    let mut out = Vec::new();
    for d in &c.marker_deletions {
        let runs: Vec<&RunRecord> = by_token
            .get(&d.created)
            .into_iter()
            .flatten()
            .copied()
            .filter(|r| r.job == d.job && r.item == d.item)
            .collect();
        // Its own run's marker (its end): an ElasticJob run that started without a marker of
        // its own on the item takes the registry's revision for its token, which may be this
        // marker's (ElasticJob starts beside a marker it does not look at: its own fault).
        if runs.iter().any(|r| !r.java && r.node == d.node) {
            continue;
        }
        let live = runs.into_iter().find(|r| {
            r.start <= d.at
                && r.end.is_none_or(|e| e > d.at)
                && !r.crashed
                && r.session_end.is_none_or(|e| e > d.at)
        });
        let Some(run) = live else { continue };
        out.push(Violation {
            checker: "marker",
            time: d.at,
            message: format!(
                "{}/{}: node {} deleted the running marker (token {}) of the run of fire {} by {} (from {}), which went on, its session alive",
                d.job,
                d.item,
                d.node,
                d.created,
                run.fire,
                run.runner(),
                run.start,
            ),
            // The deletion is shardjob's, whoever ran the run: never ElasticJob's own.
            subject: Subject::Other,
        });
    }
    out
}
