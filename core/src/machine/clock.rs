//! The clock watch: a wall clock that steps against the monotonic one, and how far it is off
//! the registry's.
//!
//! The registry's clock is read as ElasticJob reads it for `maxTimeDiffSeconds`
//! (`ZookeeperRegistryCenter.getRegistryCenterTime`): the modification time the registry
//! stamps on a node it writes ([`Stat::mtime_ms`]). The stamp falls between the sending of the
//! write and its answer, so every answer that carries one bounds this clock's lead on the
//! registry's ([`RegistryOffset`]). The claims and completions the machine writes anyway
//! give such answers; when none is known (at the start, after the wall clock stepped) and a
//! job needs one, the machine writes its own instance node's data again to measure
//! ([`Purpose::Measure`]), a write ElasticJob's listeners ignore (they act on an instance
//! node's creation and deletion only).
//!
//! A job needs it ([`clock_limit`]) while it is shared with ElasticJob instances (a fire this
//! instance runs early or late by its clock may be the fire an ElasticJob instance runs at
//! its time: `docs/migration-design.md` 5, question 2) and when its configuration sets
//! `maxTimeDiffSeconds`. Past the limit, or while unknown, its claims are held
//! ([`judge`]); the fires it misses meanwhile are owed as misfires.

#[allow(clippy::wildcard_imports)]
use super::*;
use crate::machine::claim::fires::JAVA_AHEAD_MS;

/// What the machine knows of the wall clock against the monotonic one.
#[derive(Debug, Default)]
pub(crate) struct ClockWatch {
    /// The wall clock's lead on the monotonic one (ms) when it last stepped, or at the first
    /// input.
    pub(crate) offset: Option<i64>,
    /// The wall clock's offset at the last input, step or not (for [`Machine::late_wakes`]).
    pub(crate) last: Option<i64>,
    /// When the machine last compared the clocks (monotonic ms).
    pub(crate) seen: Mono,
    /// How far the wall clock is off the registry's, since it last stepped.
    pub(crate) registry: Option<RegistryOffset>,
    /// When a measurement of the registry's clock was last sent ([`Purpose::Measure`]).
    pub(crate) measure_sent: Option<Mono>,
    /// The jobs whose last decision the registry's clock held, each with whether the hold
    /// was reported ([`MachineEvent::RegistryClockOff`]: only a clock off is, not one not
    /// measured yet).
    pub(crate) held: BTreeMap<JobId, bool>,
}

/// How far this instance's wall clock is ahead of the registry's (ms; negative: behind), as
/// one answer bounds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RegistryOffset {
    /// The least lead: the clock at the sending less the registry's stamp.
    pub(crate) least: i64,
    /// The most lead: the clock at the answer less the stamp.
    pub(crate) most: i64,
}

impl RegistryOffset {
    /// The bounds one write gives: sent at local wall time `sent_ms`, answered at `answered_ms`,
    /// stamped `stamp_ms` by the registry in between. The lead is the local clock less the
    /// registry's at one instant: at least `sent_ms - stamp_ms` (the stamp came after the
    /// sending), at most `answered_ms - stamp_ms`.
    pub(crate) fn from_write(sent_ms: i64, answered_ms: i64, stamp_ms: i64) -> Self {
        let least = sent_ms.saturating_sub(stamp_ms);
        let most = answered_ms.saturating_sub(stamp_ms).max(least);
        Self { least, most }
    }

    /// The smallest lead the bounds allow, with its sign: 0 if they allow none.
    pub(crate) fn off_by(self) -> i64 {
        if self.least > 0 {
            self.least
        } else if self.most < 0 {
            self.most
        } else {
            0
        }
    }
}

/// How long (ms) the registry clock's rule for a mixed job holds after the job was last seen
/// mixed ([`Job::java_seen`]).
pub(crate) const MIXED_MEMORY_MS: u64 = 60_000;

/// Whether the registry clock's rule for mixed jobs applies to `j` now: mixed, or seen mixed
/// within [`MIXED_MEMORY_MS`].
pub(crate) fn mixed_for_clock(j: &Job, view: &JobView, now: Mono) -> bool {
    mixed::is_mixed(view) || j.java_seen.is_some_and(|t| now.since(t) < MIXED_MEMORY_MS)
}

/// The limit of a job's claims by the registry's clock (see [`clock_limit`]), now.
pub(crate) fn job_clock_limit(
    j: &Job,
    view: &JobView,
    opts: &MachineOptions,
    now: Mono,
) -> Option<i64> {
    let config = j.config.as_ref()?;
    clock_limit(
        mixed_for_clock(j, view, now),
        config.max_time_diff_seconds,
        opts.registry_clock,
    )
    .filter(|_| !planted!(opts, IgnoreRegistryClock))
}

/// What the registry's clock says of a job's claims ([`judge`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ClockVerdict {
    /// The job needs no check, or the clock is within its limit.
    Fine,
    /// The job needs a check and no measurement is known: held until one is.
    Unknown,
    /// Off by at least `off_ms` (negative: behind), past `limit_ms`: held.
    Off {
        /// The smallest lead the last measurement allows.
        off_ms: i64,
        /// The job's limit.
        limit_ms: i64,
    },
}

/// The most (ms) a job's claims allow this clock to be off the registry's, if it needs a
/// check: the least of [`JAVA_AHEAD_MS`] while it is `mixed` and of `maxTimeDiffSeconds`
/// when set (`max_time_diff_seconds` ≥ 1). `None` without a registry clock
/// (`registry_clock`: the backend stamps no times; a job that sets `maxTimeDiffSeconds` is
/// refused there, a registry's configuration that sets it is warned about).
pub(crate) fn clock_limit(
    mixed: bool,
    max_time_diff_seconds: i32,
    registry_clock: bool,
) -> Option<i64> {
    if !registry_clock {
        return None;
    }
    let own = (max_time_diff_seconds > 0).then(|| i64::from(max_time_diff_seconds) * 1_000);
    let mixed = mixed.then_some(JAVA_AHEAD_MS);
    match (own, mixed) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Whether a job with `limit` may claim, by the last measurement `offset`.
pub(crate) fn judge(offset: Option<RegistryOffset>, limit: Option<i64>) -> ClockVerdict {
    let Some(limit_ms) = limit else {
        return ClockVerdict::Fine;
    };
    let Some(offset) = offset else {
        return ClockVerdict::Unknown;
    };
    let off_ms = offset.off_by();
    if off_ms.abs() > limit_ms {
        ClockVerdict::Off { off_ms, limit_ms }
    } else {
        ClockVerdict::Fine
    }
}

/// How often (ms) the machine measures the registry's clock while a job is held by it: at
/// once while unknown (again after this long if the answer is lost), and this often while
/// off (a clock set right by a step is measured at once: the step forgets the measurement).
pub(crate) const MEASURE_RETRY_MS: u64 = 1_000;

/// See [`MEASURE_RETRY_MS`]: while the clock is off.
pub(crate) const MEASURE_OFF_MS: u64 = 5_000;

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
        // The registry's clock is measured again against the new one.
        self.clock.registry = None;
        self.clock.measure_sent = None;
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

impl Machine {
    /// Takes the bounds of the clock's lead on the registry's from the answer to a write sent
    /// at `sent` (monotonic), if it carries the registry's stamp: the first result that does
    /// (a transaction's writes share one stamp). A measurement that may release a hold (the
    /// first, or one closer to the registry's clock) decides again on the jobs held.
    pub(crate) fn measure_registry_clock(&mut self, results: &[TxnOpResult], sent: Mono, now: Now) {
        let stamp = results.iter().find_map(|r| match r {
            TxnOpResult::Created(stat) | TxnOpResult::Set(stat) => stat.mtime_ms,
            _ => None,
        });
        let Some(stamp) = stamp else {
            return;
        };
        let answered = now.wall_ms();
        let flight = i64::try_from(now.mono.since(sent)).unwrap_or(i64::MAX);
        let offset = RegistryOffset::from_write(answered.saturating_sub(flight), answered, stamp);
        let better = self
            .clock
            .registry
            .is_none_or(|old| offset.off_by().abs() < old.off_by().abs());
        self.clock.registry = Some(offset);
        if better && !self.clock.held.is_empty() {
            let held: Vec<JobId> = self.clock.held.keys().copied().collect();
            for job in held {
                self.evaluate(job, now);
            }
        }
    }

    /// The registry clock's say on a job's claims (see the module documentation): the
    /// verdict, and the measurement to send if one is due (`wake` gets the time of the next).
    pub(crate) fn registry_clock_hold(
        &mut self,
        job: JobId,
        limit: Option<i64>,
        now: Now,
        wake: &mut Vec<Mono>,
    ) -> (ClockVerdict, bool) {
        let verdict = judge(self.clock.registry, limit);
        let every = match verdict {
            ClockVerdict::Fine => {
                if self.clock.held.remove(&job) == Some(true) {
                    if let Some(j) = self.jobs.get(&job) {
                        let name = j.name().to_owned();
                        self.out
                            .push_back(Command::Event(MachineEvent::RegistryClockBack {
                                job: name,
                            }));
                    }
                }
                return (verdict, false);
            }
            ClockVerdict::Unknown => {
                self.clock.held.entry(job).or_insert(false);
                MEASURE_RETRY_MS
            }
            ClockVerdict::Off { off_ms, limit_ms } => {
                let reported = self.clock.held.entry(job).or_insert(false);
                if !std::mem::replace(reported, true) {
                    if let Some(j) = self.jobs.get(&job) {
                        let name = j.name().to_owned();
                        self.out
                            .push_back(Command::Event(MachineEvent::RegistryClockOff {
                                job: name,
                                off_ms,
                                limit_ms,
                            }));
                    }
                }
                MEASURE_OFF_MS
            }
        };
        let due = self.clock.measure_sent.map_or(now.mono, |s| s.after(every));
        if due <= now.mono {
            self.clock.measure_sent = Some(now.mono);
            wake.push(now.mono.after(every));
            (verdict, true)
        } else {
            wake.push(due);
            (verdict, false)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_bounds_the_lead_on_the_registry() {
        // (sent, answered, stamp) → (least, most, off_by)
        let cases = [
            ("in step", (1_000, 1_010, 1_004), (-4, 6, 0)),
            ("ahead", (16_000, 16_010, 1_004), (14_996, 15_006, 14_996)),
            ("behind", (1_000, 1_010, 3_000), (-2_000, -1_990, -1_990)),
            (
                "a slow answer allows more",
                (1_000, 9_000, 5_000),
                (-4_000, 4_000, 0),
            ),
            (
                "an answer before its sending",
                (1_010, 1_000, 1_000),
                (10, 10, 10),
            ),
        ];
        for (what, (sent, answered, stamp), (least, most, off)) in cases {
            let o = RegistryOffset::from_write(sent, answered, stamp);
            assert_eq!((o.least, o.most, o.off_by()), (least, most, off), "{what}");
        }
    }

    #[test]
    fn a_job_needs_the_registry_clock_while_mixed_or_when_it_sets_a_limit() {
        // (mixed, maxTimeDiffSeconds, registry clock) → limit
        let cases = [
            (false, -1, true, None),
            (true, -1, true, Some(JAVA_AHEAD_MS)),
            (false, 5, true, Some(5_000)),
            (true, 5, true, Some(JAVA_AHEAD_MS)),
            (true, 5, false, None),
            (false, 5, false, None),
        ];
        for (mixed, secs, clock, want) in cases {
            assert_eq!(
                clock_limit(mixed, secs, clock),
                want,
                "{mixed} {secs} {clock}"
            );
        }
    }

    #[test]
    fn claims_are_held_while_the_clock_is_unknown_or_off() {
        let at = |least, most| Some(RegistryOffset { least, most });
        let cases = [
            ("no check", None, at(5_000, 6_000), ClockVerdict::Fine),
            ("no check, unknown", None, None, ClockVerdict::Fine),
            ("unknown", Some(1_000), None, ClockVerdict::Unknown),
            ("within", Some(1_000), at(900, 1_000), ClockVerdict::Fine),
            (
                "bounds that may be within",
                Some(1_000),
                at(-3_000, 2_000),
                ClockVerdict::Fine,
            ),
            (
                "ahead",
                Some(1_000),
                at(1_001, 1_020),
                ClockVerdict::Off {
                    off_ms: 1_001,
                    limit_ms: 1_000,
                },
            ),
            (
                "behind",
                Some(5_000),
                at(-6_000, -5_500),
                ClockVerdict::Off {
                    off_ms: -5_500,
                    limit_ms: 5_000,
                },
            ),
        ];
        for (what, limit, offset, want) in cases {
            assert_eq!(judge(offset, limit), want, "{what}");
        }
    }
}
