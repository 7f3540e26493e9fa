//! Invariant checkers, one per module. Each reads what the world recorded (runs, the store,
//! the nodes) and returns the violations it finds, with the virtual time of the first event
//! that shows each one.

pub mod convergence;
pub mod disabled;
pub mod fresh;
pub mod invariant;
pub mod liveness;
pub mod lost;
pub mod mixed;
pub mod once;
pub mod overlap;
pub mod prepare;
pub mod readable;
pub mod refused;
pub mod shutdown;
pub mod wake;
pub mod wake_rate;

/// One broken invariant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The checker that found it.
    pub checker: &'static str,
    /// Virtual ms of the event that shows it.
    pub time: u64,
    /// What is wrong.
    pub message: String,
}

/// A run for the checkers' tests, which change what they need: node 0 runs item 0 of job `j`
/// (a scheduled fire at virtual 0, token 1) from `start` for 100 ms, its end committed 1 ms
/// later, in session 1, which never ends.
#[cfg(test)]
pub(crate) fn test_run(start: u64) -> crate::cluster::RunRecord {
    crate::cluster::RunRecord {
        node: 0,
        java: false,
        job: "j".into(),
        item: 0,
        fire: crate::cluster::wall_origin().timestamp_millis(),
        kind: shardjob_core::machine::record::RunKind::Scheduled,
        job_parameter: String::new(),
        token: 1,
        start,
        wall_start: crate::cluster::wall_origin().timestamp_millis() + start as i64,
        end: Some(start + 100),
        cancel_signal: None,
        cancelled: false,
        crashed: false,
        resumed: None,
        end_committed: Some(start + 101),
        session: Some(shardjob_core::registry::SessionId(1)),
        session_end: None,
    }
}

/// The runs of each (job, item), in the order they started.
fn runs_by_item(
    runs: &[crate::cluster::RunRecord],
) -> std::collections::BTreeMap<(&str, u32), Vec<&crate::cluster::RunRecord>> {
    let mut by_item: std::collections::BTreeMap<(&str, u32), Vec<_>> = Default::default();
    for r in runs {
        by_item.entry((r.job.as_str(), r.item)).or_default().push(r);
    }
    by_item
}
