//! No machine wakes far more often than it has reason to: a driver calls
//! [`Machine::handle_timeout`] whenever [`Machine::poll_timeout`] says, so a timer that keeps
//! coming back a millisecond later (a rolling sweep that never ends, say) makes a thousand
//! wakes a second of an idle process. The decisions stay right, so no other checker sees it,
//! and the cluster's check of a timer that stays due does not either (the timer is never due
//! before it is asked for).
//!
//! The cluster counts, per node, the timeouts within the last simulated second that came with
//! no other input between them (no watch event, reply, run's end or operator command), and
//! notes a node whose count passes [`QUIET_WAKES_PER_S`]. What a machine does on its own in a
//! second is bounded by its design:
//!
//! - the safety sweep starts once a second and goes on in chunks of 64 jobs a millisecond
//!   apart: `ceil(ceil(jobs / 10) / 64)` wakes, one for up to 640 jobs, and one more a
//!   millisecond later when a timeout handed out starts first;
//! - runs claimed ahead start at their fire, 32 per timeout, the rest a millisecond later:
//!   `ceil(runs due / 32)` wakes per instant of fires;
//! - the clock watch wakes every 10 s;
//! - each job wakes for its own decisions (a claim ahead, a debounce, a takeover delay, a
//!   leave's grace, a retry): most end in a request, whose reply is an input.
//!
//! The worlds host at most 20 jobs per node, so a legitimate second stays far below the limit
//! of 100 (the most seen over CI's 2,000 seeds and 300 seeds of 5 instances and 10 jobs is
//! printed by the binary as `quiet_wakes_per_s_peak`), while a timer that comes back every
//! millisecond makes a thousand.
//!
//! [`Machine::handle_timeout`]: shardjob_core::machine::Machine::handle_timeout
//! [`Machine::poll_timeout`]: shardjob_core::machine::Machine::poll_timeout

use super::Violation;
use crate::cluster::{Cluster, QUIET_WAKES_PER_S};

/// The nodes that woke too often with nothing new to act on, each once.
pub fn check(c: &Cluster) -> Vec<Violation> {
    c.wake_storms
        .iter()
        .map(|(time, n, count)| {
            let id = c
                .nodes
                .get(*n)
                .map_or_else(String::new, |node| node.id.to_string());
            Violation {
                subject: Default::default(),
                checker: "wake-rate",
                time: *time,
                message: format!(
                    "node {n} ({id}): {count} timeouts within a simulated second with no other \
                     input between them (at most {QUIET_WAKES_PER_S} expected)"
                ),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::check;
    use crate::cluster::Cluster;

    #[test]
    fn each_node_found_waking_too_often_is_reported() {
        let mut c = Cluster::new();
        c.wake_storms.push((4_000, 1, 101));
        let found = check(&c);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].checker, "wake-rate");
        assert_eq!(found[0].time, 4_000);
        assert_eq!(
            found[0].message,
            "node 1 (): 101 timeouts within a simulated second with no other input between \
             them (at most 100 expected)"
        );
    }
}
