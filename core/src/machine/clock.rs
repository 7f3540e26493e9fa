//! The clock watch: a wall clock that steps against the monotonic one.

#[allow(clippy::wildcard_imports)]
use super::*;

/// What the machine knows of the wall clock against the monotonic one.
#[derive(Debug, Default)]
pub(crate) struct ClockWatch {
    /// The wall clock's lead on the monotonic one (ms) when it last stepped, or at the first
    /// input.
    pub(crate) offset: Option<i64>,
    /// The wall clock's offset at the last input, step or not (for [`Machine::late_wakes`]).
    pub(crate) last: Option<i64>,
    /// When the machine last compared the clocks (monotonic ms).
    pub(crate) seen: u64,
}

/// How far (ms) the wall clock may drift against the monotonic one before the machine treats
/// it as a step and works out every fire again. Wake times of fires are monotonic times taken
/// from the wall clock; after a step forward they would come late by the step.
pub(crate) const CLOCK_STEP_MS: i64 = 500;

/// A machine that hosts jobs wakes at least this often (ms), so that it notices a clock step
/// even when nothing else happens (a host suspended and resumed: the monotonic clock stood
/// still meanwhile, the wall clock did not).
pub(crate) const CLOCK_WATCH_MS: u64 = 10_000;

impl Machine {
    /// Handles an input other than a timeout with an eye on the wall clock: a step seen here
    /// is acted on as a timeout would, once the input is applied, by deciding on every job
    /// again (their wake times were taken from the old clock). Noticed only at the next
    /// timeout, a step back and forth between two timeouts would leave the wake times that
    /// decisions took meanwhile late by the step.
    pub(crate) fn noticing_clock<T>(&mut self, now: Now, input: impl FnOnce(&mut Self) -> T) -> T {
        let stepped = self.observe_clock(now);
        let out = input(self);
        if stepped {
            self.evaluate_all(now);
        }
        self.debug_check();
        out
    }

    /// Compares the wall clock with the monotonic one. When the wall clock has stepped (by
    /// more than [`CLOCK_STEP_MS`] since the last step), the runs claimed ahead are put at
    /// their fire by the new clock, and `true` says that every job must be evaluated again:
    /// their wake times were taken from the old one.
    pub(crate) fn observe_clock(&mut self, now: Now) -> bool {
        self.clock.seen = now.mono;
        let offset = wall_offset(now);
        self.clock.last = Some(offset);
        let Some(before) = self.clock.offset else {
            self.clock.offset = Some(offset);
            return false;
        };
        let by = offset.saturating_sub(before);
        if by.abs() <= CLOCK_STEP_MS || planted!(self.opts, IgnoreClockSteps) {
            return false;
        }
        self.clock.offset = Some(offset);
        for (_, id) in std::mem::take(&mut self.timers.starts) {
            // Entries of executions given back or gone are stale: dropped.
            if let Some(e) = self.executions.get(&id).filter(|e| e.is_ahead()) {
                self.timers.starts.insert((now.mono_at(e.fire), id));
            }
        }
        self.out
            .push_back(Command::Event(MachineEvent::ClockStepped { by_ms: by }));
        true
    }
}
