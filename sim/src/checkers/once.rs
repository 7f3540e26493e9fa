//! Checker 2: a (job, item, fire) is started at most once, judged only by what the executor
//! and the registry saw (never by what the machine reported):
//!
//! - no two starts of the same (job, item, fire) carry the same fencing token: a token stands
//!   for one claim, and a claim starts one run;
//! - a later start is a retry only if every earlier attempt really died: its process crashed
//!   under it, it was cancelled before its end, or the session it started in ended before the
//!   registry committed its end (another instance may then rightly run the fire again). A
//!   retry carries a larger token than every earlier attempt. Retries are counted.
//!
//! A run that ended by itself while its session lived, and whose end the registry then
//! committed or not, finished its fire: the same process, the same session, retrying the
//! completion, must not run it again.

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

/// Whether an attempt really died before it could finish its fire for the registry: its
/// process crashed, it was cancelled before its end, or its session ended before its end was
/// committed (or without it ever being).
pub fn died(a: &RunRecord) -> bool {
    let session_lost = a
        .session_end
        .is_some_and(|s| a.end_committed.is_none_or(|c| c > s));
    a.crashed || a.cancelled || session_lost
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
        for (k, &bi) in list.iter().enumerate().skip(1) {
            let b = &runs[bi];
            let earlier = || list[..k].iter().map(|&i| &runs[i]);
            let mut fail = |a: &RunRecord, why: String| {
                out.violations.push(Violation {
                    subject: super::Subject::runs(a, b),
                    checker: "once",
                    time: b.start,
                    message: format!("{job}/{item} fire {fire} started again: {why}"),
                });
            };
            if let Some(a) = earlier().find(|a| a.token == b.token) {
                fail(
                    a,
                    format!(
                        "{} {:?} at {} and {} {:?} at {}, both with token {}",
                        a.runner(),
                        a.kind,
                        a.start,
                        b.runner(),
                        b.kind,
                        b.start,
                        b.token
                    ),
                );
                continue;
            }
            if let Some(a) = earlier().find(|a| !died(a)) {
                fail(
                    a,
                    format!(
                        "{} {:?} at {} token {} ended at {:?} (end committed at {:?}, its session {}), not cut short; then {} {:?} at {} token {}",
                        a.runner(),
                        a.kind,
                        a.start,
                        a.token,
                        a.end,
                        a.end_committed,
                        a.session_end
                            .map_or_else(|| "lived on".to_owned(), |t| format!("ended at {t}")),
                        b.runner(),
                        b.kind,
                        b.start,
                        b.token
                    ),
                );
                continue;
            }
            if let Some(a) = earlier().find(|a| a.token >= b.token) {
                fail(
                    a,
                    format!(
                        "the retry ({} {:?} at {} token {}) does not carry a larger token than {}'s attempt at {} (token {})",
                        b.runner(),
                        b.kind,
                        b.start,
                        b.token,
                        a.runner(),
                        a.start,
                        a.token
                    ),
                );
                continue;
            }
            out.retries += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use shardjob_core::registry::SessionId;

    use super::check;
    use crate::checkers::test_run;
    use crate::cluster::RunRecord;

    fn run(node: usize, token: u64, start: u64) -> RunRecord {
        RunRecord {
            node,
            fire: 1_000,
            token,
            end_committed: None,
            session: Some(SessionId(node as u64 + 1)),
            ..test_run(start)
        }
    }

    #[test]
    fn a_finished_run_in_a_live_session_is_never_run_again() {
        // The same node, its session alive, its end not committed (a cut-off while it ended):
        // the machine's own word does not matter, the fire was run.
        let a = run(0, 5, 0);
        let found = check(&[a.clone(), run(0, 9, 500)]);
        assert_eq!(found.violations.len(), 1, "{found:?}");
        assert_eq!(found.retries, 0);
        // With the same token: reported as such.
        let found = check(&[a.clone(), run(0, 5, 500)]);
        assert_eq!(found.violations.len(), 1);
        assert!(found.violations[0].message.contains("both with token 5"));
    }

    #[test]
    fn a_retry_needs_a_dead_attempt_and_a_larger_token() {
        let mut crashed = run(0, 5, 0);
        crashed.crashed = true;
        crashed.cancelled = true;
        assert!(
            check(&[crashed.clone(), run(1, 9, 500)])
                .violations
                .is_empty()
        );
        assert_eq!(check(&[crashed.clone(), run(1, 9, 500)]).retries, 1);
        // Dead, but the retry's token is smaller, or the same.
        assert_eq!(
            check(&[crashed.clone(), run(1, 4, 500)]).violations.len(),
            1
        );
        assert_eq!(check(&[crashed, run(1, 5, 500)]).violations.len(), 1);
        // Its session ended before its end was committed: a retry.
        let mut lost = run(0, 5, 0);
        lost.session_end = Some(3_000);
        assert!(
            check(&[lost.clone(), run(1, 9, 4_000)])
                .violations
                .is_empty()
        );
        lost.end_committed = Some(3_500);
        assert!(
            check(&[lost.clone(), run(1, 9, 4_000)])
                .violations
                .is_empty()
        );
        // Its end committed while the session lived: the fire is done.
        lost.end_committed = Some(200);
        assert_eq!(check(&[lost, run(1, 9, 4_000)]).violations.len(), 1);
        // Cancelled before its end: a retry.
        let mut cut = run(0, 5, 0);
        cut.cancelled = true;
        cut.cancel_signal = Some(50);
        assert!(check(&[cut, run(1, 9, 500)]).violations.is_empty());
    }
}
