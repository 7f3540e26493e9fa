//! The machine's invariants, checked on demand (feature `self-check`, which the simulator
//! turns on in every build): the simulator asks after every input and reports what it finds
//! as violations rather than panicking, so that a seed shows the first broken invariant with
//! its timeline.

#[allow(clippy::wildcard_imports)]
use super::*;

impl Machine {
    /// What is wrong with the machine's state now: each job's wake is the one in the wake
    /// index and the index holds nothing else; every item a job runs has the execution it
    /// names, of that job and with that item; and the first drift of each job's cached view
    /// from a fresh load since the last call. Empty when all holds.
    pub fn self_check(&mut self) -> Vec<String> {
        let mut out = Vec::new();
        for (name, j) in &mut self.jobs {
            if let Some(d) = j.cache.take_drift() {
                out.push(format!("{name}: {d}"));
            }
            if j.wake != j.wake_indexed {
                out.push(format!(
                    "{name}: wake {:?} is not the one indexed ({:?})",
                    j.wake, j.wake_indexed
                ));
            }
            if let Some(t) = j.wake_indexed {
                if !self.timers.wakes.contains(&(t, name.clone())) {
                    out.push(format!("{name}: wake {t} is missing from the index"));
                }
            }
            for (item, id) in &j.running {
                let held = self
                    .executions
                    .get(id)
                    .is_some_and(|e| e.job == *name && e.items.iter().any(|it| it.item == *item));
                if !held {
                    out.push(format!(
                        "{name}/{item}: running as {id:?}, which is no execution of it"
                    ));
                }
            }
        }
        for (t, name) in &self.timers.wakes {
            if self
                .jobs
                .get(name)
                .is_none_or(|j| j.wake_indexed != Some(*t))
            {
                out.push(format!("{name}: a stale wake {t} in the index"));
            }
        }
        out
    }
}
