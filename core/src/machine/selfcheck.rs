//! The machine's invariants. Debug builds assert them after every input (a bug panics where it
//! happens, as a drift of the cache does); the simulator's release builds turn on the
//! `self-check` feature, ask after every input and report what they find as violations, so
//! that a seed shows the first broken invariant with its timeline.

#[allow(clippy::wildcard_imports)]
use super::*;

/// A machine of more jobs and executions than this is checked whole only every so many inputs
/// in debug builds, so that the check costs about as much per input as for this many.
#[cfg(debug_assertions)]
const CHECKED_PER_INPUT: usize = 1_000;

impl Machine {
    /// What is wrong with the machine's state now (empty when all holds):
    /// - each job's wake is the one in the wake index, and the index holds nothing else;
    /// - every item a job runs has the execution it names, of that job and with that item, and
    ///   every item of an execution whose job is hosted is held by it;
    /// - an execution claimed ahead has its start in the timer table, one whose completion
    ///   waits for a retry has its retry there;
    /// - a job waiting for a load or a transaction has that request in flight (of this
    ///   session's epoch), and a job being loaded is not set up.
    #[cfg(any(debug_assertions, feature = "audit"))]
    pub(crate) fn invariants(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (job, j) in self.jobs.iter() {
            let name = j.name();
            if j.wake != j.wake_indexed {
                out.push(format!(
                    "{name}: wake {:?} is not the one indexed ({:?})",
                    j.wake, j.wake_indexed
                ));
            }
            if let Some(t) = j.wake_indexed {
                if !self.timers.wakes.contains(&(t, job)) {
                    out.push(format!("{name}: wake {t} is missing from the index"));
                }
            }
            for (item, id) in &j.running {
                let held = self
                    .executions
                    .get(id)
                    .is_some_and(|e| e.job == job && e.items.iter().any(|it| it.item == *item));
                if !held {
                    out.push(format!(
                        "{name}/{item}: running as {id:?}, which is no execution of it"
                    ));
                }
            }
            if let Wait::Load(id) | Wait::Txn(id) = j.wait {
                let flying = self
                    .requests
                    .pending
                    .get(&id)
                    .is_some_and(|p| p.epoch == self.sess.epoch);
                if !flying {
                    out.push(format!(
                        "{name}: waits for {:?}, which is not in flight",
                        j.wait
                    ));
                }
            }
            if j.loading() && j.phase != Phase::Waiting {
                out.push(format!("{name}: loads its subtree in phase {:?}", j.phase));
            }
        }
        for (t, id) in &self.timers.wakes {
            if self.jobs.get(id).is_none_or(|j| j.wake_indexed != Some(*t)) {
                out.push(format!("{id:?}: a stale wake {t} in the index"));
            }
        }
        for (id, e) in &self.executions {
            if let Some(j) = self.jobs.get(&e.job) {
                for it in &e.items {
                    if j.running.get(&it.item) != Some(id) {
                        out.push(format!(
                            "{}/{}: an item of {id:?} that the job does not hold",
                            j.name(),
                            it.item
                        ));
                    }
                }
            }
            match e.life {
                Life::Ahead(_) if !self.timers.starts.iter().any(|(_, s)| s == id) => {
                    out.push(format!("{id:?}: claimed ahead without a start"));
                }
                Life::Ended {
                    recording: Recording::Retry { at },
                    ..
                } if !self.timers.retries.contains(&(at, *id)) => {
                    out.push(format!("{id:?}: a retry at {at} missing from the table"));
                }
                _ => {}
            }
        }
        out
    }

    /// What is wrong with the machine's state now: its [invariants](Machine::invariants),
    /// and, with the `self-check` feature, the first drift of each job's cached view from a
    /// fresh load since the last call. Empty when all holds.
    #[cfg(feature = "audit")]
    pub fn self_check(&mut self) -> Vec<String> {
        let mut out = Vec::new();
        #[cfg(feature = "self-check")]
        for (_, j) in self.jobs.iter_mut() {
            if let Some(d) = j.cache.take_drift() {
                out.push(format!("{}: {d}", j.name()));
            }
        }
        out.extend(self.invariants());
        out
    }

    /// Debug builds: asserts the invariants after an input (the whole machine every input, or
    /// every few inputs in a machine of thousands of jobs).
    pub(crate) fn debug_check(&mut self) {
        #[cfg(debug_assertions)]
        {
            self.inputs = self.inputs.wrapping_add(1);
            let size = self.jobs.len() + self.executions.len();
            let every = (size / CHECKED_PER_INPUT).max(1) as u64;
            if self.inputs % every == 0 {
                let broken = self.invariants();
                debug_assert!(broken.is_empty(), "machine invariants broken: {broken:?}");
            }
        }
    }
}
