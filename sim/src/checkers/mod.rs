//! Invariant checkers, one per module. Each reads what the world recorded (runs, the store,
//! the nodes) and returns the violations it finds, with the virtual time of the first event
//! that shows each one.

pub mod convergence;
pub mod disabled;
pub mod fresh;
pub mod invariant;
pub mod liveness;
pub mod lost;
pub mod once;
pub mod overlap;
pub mod prepare;
pub mod readable;
pub mod refused;
pub mod shutdown;
pub mod wake;

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
