//! The timer table: every reason the machine wants to be woken, and what a timeout does.
//!
//! A timeout handles, in this order: the clock watch (a step re-plans every job), the lease
//! (runs it no longer covers are cancelled), the runs claimed ahead whose fire came, the
//! probe, the completions due for a retry, the shutdown's grace, and then the jobs: all of
//! them while shutting down or after a clock step, else those whose wake came and a slice of
//! the rolling safety sweep.

#[allow(clippy::wildcard_imports)]
use super::*;

/// How often every job is evaluated on a timeout, whether due or not (ms).
pub(crate) const SWEEP_MS: u64 = 10_000;
/// The most jobs the rolling sweep evaluates in one timeout; the rest of its slice follows
/// a millisecond later, so that ten thousand jobs never hold the machine for long.
pub(crate) const SWEEP_CHUNK: usize = 64;

/// What the machine can be woken for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Timer {
    /// A job's own wake: a fire to claim, a wait or a backoff that ends.
    Wake,
    /// A completion to send again.
    Retry,
    /// A run claimed ahead whose fire comes.
    Start,
    /// The rest of the safety sweep's slice.
    Sweep,
    /// The clock watch: a machine that hosts jobs looks at the clocks at least this often.
    Clock,
    /// A probe of the session is due.
    Probe,
    /// The lease on the session runs out while runs rely on it.
    Lease,
    /// A graceful shutdown's grace ends.
    Shutdown,
}

/// The timers kept in tables: jobs' wakes, completion retries, starts claimed ahead and the
/// sweep. (The clock watch, the probe, the lease and the shutdown are worked out from the
/// state they watch.)
#[derive(Debug, Default)]
pub(crate) struct Timers {
    /// Every job's `wake`, ordered, so the next timeout is found without visiting each job.
    pub(crate) wakes: BTreeSet<(Mono, JobId)>,
    /// Executions whose completion is retried at a time (entries may be stale: checked).
    pub(crate) retries: BTreeSet<(Mono, ExecutionId)>,
    /// Executions claimed ahead, by the monotonic time of their fire (entries may be stale).
    pub(crate) starts: BTreeSet<(Mono, ExecutionId)>,
    /// The rolling safety sweep.
    pub(crate) sweep: Sweep,
}

/// The rolling safety sweep: every job evaluated now and then, a tenth of them at a time.
#[derive(Debug, Default)]
pub(crate) struct Sweep {
    /// When the last slice began (monotonic ms).
    pub(crate) last: Mono,
    /// The last job the sweep evaluated.
    pub(crate) cursor: Option<JobId>,
    /// Jobs of the current slice not evaluated yet.
    pub(crate) left: usize,
    /// When the rest of the slice is evaluated (set while `left > 0`).
    pub(crate) at: Option<Mono>,
}

impl Machine {
    /// Every timer armed now, with when it is due.
    pub(crate) fn armed(&self) -> [Option<(Mono, Timer)>; 8] {
        let probe = match self.sess.state {
            Session::Live(info) if self.needs_probing() && self.sess.probe.is_none() => {
                Some(self.probe_due(info))
            }
            _ => None,
        };
        let guards = if planted!(self.opts, LeaseTimerAfterEnd) {
            !self.executions.is_empty()
        } else {
            self.lease_guards_runs()
        };
        let lease = (!self.sess.in_doubt && guards)
            .then(|| self.lease_deadline())
            .flatten();
        let clock = (!self.jobs.is_empty()).then(|| self.clock.seen.after(CLOCK_WATCH_MS));
        let at = |t: Option<Mono>, timer: Timer| t.map(|t| (t, timer));
        [
            at(self.timers.wakes.first().map(|(t, _)| *t), Timer::Wake),
            at(self.timers.retries.first().map(|(t, _)| *t), Timer::Retry),
            at(self.timers.starts.first().map(|(t, _)| *t), Timer::Start),
            at(self.timers.sweep.at, Timer::Sweep),
            at(clock, Timer::Clock),
            at(probe, Timer::Probe),
            at(lease, Timer::Lease),
            at(self.shutdown.filter(|_| !self.grace_ended), Timer::Shutdown),
        ]
    }

    /// The next timer due, and when.
    pub(crate) fn next_timer(&self) -> Option<(Mono, Timer)> {
        self.armed().into_iter().flatten().min()
    }

    /// When the driver should call [`Machine::handle_timeout`] next (monotonic ms).
    pub fn poll_timeout(&self) -> Option<Mono> {
        self.next_timer().map(|(t, _)| t)
    }

    /// The earliest time (monotonic ms) at which a run claimed ahead is due to start, if any.
    /// It is also among what [`Machine::poll_timeout`] returns; a driver that wants runs to
    /// start on the dot can wake a little before it and wait out the rest precisely, since
    /// general-purpose timers fire a millisecond or two late.
    ///
    /// One [`Machine::handle_timeout`] hands out a bounded number of starts: while this is
    /// still at or before the time just handled, carrying out the commands and calling
    /// `handle_timeout` again at once starts the rest sooner than waiting for the next tick.
    pub fn next_start(&self) -> Option<Mono> {
        self.timers.starts.first().map(|(t, _)| *t)
    }

    /// The monotonic clock reached [`Machine::poll_timeout`].
    pub fn handle_timeout(&mut self, now: Now) {
        let stepped = self.observe_clock(now);
        self.check_lease(now);
        let queued = self.out.len();
        self.start_due(now);
        // Runs that start now go out before anything else is worked on: the sweep waits a
        // millisecond, so the driver can hand the runs their start first.
        let started = self.out.len() > queued;
        self.maybe_probe(now);
        self.retry_due(now);
        if self.shutdown.is_some_and(|d| now.mono >= d) && !self.grace_ended {
            // Once: a run that ignores its cancellation is waited for (its end is an input of
            // its own), not cancelled again at every wake.
            self.grace_ended = true;
            self.cancel_all(CancelReason::Shutdown, now);
        }
        // Only the jobs whose time has come; every job now and then as a safety net (the
        // decisions are level-triggered, so an extra evaluation is harmless, only costly).
        if self.shutdown.is_some() {
            self.timers.sweep.at = None;
            self.timers.sweep.left = 0;
            self.evaluate_all(now);
        } else if stepped {
            self.evaluate_all(now);
        } else {
            self.evaluate_due(started, now);
        }
        self.debug_check();
    }

    /// The jobs whose wake came, and a slice of the safety sweep.
    fn evaluate_due(&mut self, started: bool, now: Now) {
        let due: Vec<JobId> = self
            .timers
            .wakes
            .iter()
            .take_while(|(t, _)| *t <= now.mono)
            .map(|(_, job)| *job)
            .collect();
        let mut swept = self.sweep_slice(started, now);
        // A job both due and swept is evaluated once.
        swept.retain(|n| !due.contains(n));
        for job in due {
            self.evaluate(job, now);
        }
        for job in swept {
            self.evaluate_swept(job, now);
        }
        self.maybe_probe(now);
        self.finish_shutdown_if_done();
    }

    /// Sends again the completions whose retry is due.
    fn retry_due(&mut self, now: Now) {
        while let Some(&(t, id)) = self.timers.retries.first() {
            if t > now.mono {
                break;
            }
            self.timers.retries.remove(&(t, id));
            // Entries of executions that are gone or were rescheduled are stale: skipped.
            match self.executions.get_mut(&id) {
                Some(e) if matches!(e.life, Life::Ended { recording: Recording::Retry { at }, .. } if at == t) =>
                {
                    e.set_recording(Recording::Unsent);
                }
                _ => continue,
            }
            self.send_completion(id, now);
        }
    }

    /// The jobs the safety sweep evaluates now: a slice of a tenth of them every
    /// [`SWEEP_MS`]` / 10`, [`SWEEP_CHUNK`] at a time, from where the last one left off.
    /// When runs were just handed out (`started`), the slice waits a millisecond.
    fn sweep_slice(&mut self, started: bool, now: Now) -> Vec<JobId> {
        let sweep = &mut self.timers.sweep;
        if self.opts.safety_sweep && now.mono >= sweep.last.after(SWEEP_MS / 10) {
            sweep.last = now.mono;
            sweep.left = self.jobs.len().div_ceil(10).max(1);
            sweep.at = Some(now.mono);
        }
        if started && sweep.left > 0 {
            sweep.at = Some(now.mono.after(1));
            return Vec::new();
        }
        if sweep.at.is_none_or(|t| t > now.mono) {
            return Vec::new();
        }
        let chunk = sweep.left.min(SWEEP_CHUNK);
        if planted!(self.opts, EndlessSweep) {
            sweep.left /= chunk.max(1);
        } else {
            sweep.left -= chunk;
        }
        sweep.at = (sweep.left > 0).then(|| now.mono.after(1));
        let after = sweep.cursor.take();
        let next = self.jobs.after(after, chunk);
        self.timers.sweep.cursor = next.last().copied();
        next
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::test_support::now;

    /// A machine hosting `n` jobs.
    fn hosting(n: usize, safety_sweep: bool) -> Machine {
        let me = InstanceId::new("10.0.0.1@-@1").unwrap();
        let mut opts = MachineOptions::new(me);
        opts.safety_sweep = safety_sweep;
        let mut m = Machine::new(opts);
        for k in 0..n {
            let spec = JobSpec {
                config: JobConfig::new(format!("j{k}"), 1),
                job_type: "SCRIPT".to_owned(),
            };
            m.add_job(spec, now(0)).unwrap();
        }
        m
    }

    /// The safety sweep evaluates a tenth of the jobs (rounded up) every tenth of
    /// `SWEEP_MS`, each slice from where the last one left off, wrapping around; a slice that
    /// comes as runs are handed out waits a millisecond; without the sweep there is none.
    #[test]
    fn the_safety_sweep_takes_a_tenth_of_the_jobs_each_tenth_of_its_period() {
        let tenth = SWEEP_MS / 10;
        let mut m = hosting(25, true);
        let ids = m.jobs.ids();
        let at = |k: &[usize]| k.iter().map(|k| ids[*k]).collect::<Vec<_>>();
        #[rustfmt::skip]
        let cases: Vec<(u64, bool, Vec<JobId>)> = vec![
            (tenth - 1, false, vec![]),
            (tenth, false, at(&[0, 1, 2])),
            (tenth + tenth / 2, false, vec![]),
            (2 * tenth, false, at(&[3, 4, 5])),
            (3 * tenth, true, vec![]),
            (3 * tenth + 1, false, at(&[6, 7, 8])),
            (4 * tenth, false, at(&[9, 10, 11])),
            (5 * tenth, false, at(&[12, 13, 14])),
            (6 * tenth, false, at(&[15, 16, 17])),
            (7 * tenth, false, at(&[18, 19, 20])),
            (8 * tenth, false, at(&[21, 22, 23])),
            (9 * tenth, false, at(&[24, 0, 1])),
        ];
        for (t, started, want) in cases {
            assert_eq!(m.sweep_slice(started, now(t)), want, "at {t} ms");
        }

        let mut off = hosting(25, false);
        for t in [tenth, 2 * tenth, SWEEP_MS, 2 * SWEEP_MS] {
            assert_eq!(off.sweep_slice(false, now(t)), [], "no sweep, at {t} ms");
        }
    }

    /// The next start is the earliest of the runs claimed ahead; none without one.
    #[test]
    fn the_next_start_is_the_earliest_claimed_ahead() {
        let mut m = hosting(1, true);
        assert_eq!(m.next_start(), None);
        m.timers.starts.insert((Mono(7_000), ExecutionId(1)));
        m.timers.starts.insert((Mono(5_000), ExecutionId(9)));
        assert_eq!(m.next_start(), Some(Mono(5_000)));
    }
}
