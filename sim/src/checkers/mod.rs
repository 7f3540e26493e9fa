//! Invariant checkers, one per module. Each reads what the world recorded (runs, the store,
//! the nodes) and returns the violations it finds, with the virtual time of the first event
//! that shows each one.

pub mod attribution;
pub mod convergence;
pub mod disabled;
pub mod early;
pub mod fresh;
pub mod invariant;
pub mod leftover;
pub mod liveness;
pub mod lost;
pub mod markers;
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
    /// What it is about, in terms [`attribution`] judges it by (whether it is ElasticJob's
    /// own). [`Subject::Other`] for a checker that names nothing of the kind: never ElasticJob's.
    pub subject: Subject,
}

impl Violation {
    /// When what the violation is about happened, virtual ms: the fire's time (true time) for
    /// a fire, the later run's start for two runs, the run's start for one, else the time
    /// the violation was found. (A fire found lost is reported once a later run shows it,
    /// which may be long after the fire.) `origin_ms`: the wall time at virtual 0, epoch ms.
    pub fn about_time(&self, origin_ms: i64) -> u64 {
        match &self.subject {
            Subject::Fire { fire, .. } => {
                u64::try_from(fire.saturating_sub(origin_ms)).unwrap_or(0)
            }
            Subject::Runs { later, .. } => later.start,
            Subject::Run { run, .. } => run.start,
            Subject::Other | Subject::Plan { .. } | Subject::JavaShutDown { .. } => self.time,
        }
    }
}

/// What a violation is about: the runs, the fire or the part of the plan it names, for
/// [`attribution`] to tell a violation of ElasticJob's own guarantees from one of shardjob's.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Subject {
    /// Nothing the attribution knows: always a failure.
    #[default]
    Other,
    /// Two runs of one item: the earlier and the later (overlap, once).
    Runs {
        /// The job.
        job: String,
        /// The item.
        item: u32,
        /// The run that started first.
        earlier: RunRef,
        /// The run that started after it.
        later: RunRef,
    },
    /// One run that should not have run as it did (downtime, fresh, misfire).
    Run {
        /// The job.
        job: String,
        /// The item.
        item: u32,
        /// The run.
        run: RunRef,
    },
    /// A fire of an item that did not run, or not in time (lost, late, liveness, catch-up).
    Fire {
        /// The job.
        job: String,
        /// The item.
        item: u32,
        /// The fire, epoch ms.
        fire: i64,
    },
    /// The plan of a job at the end (convergence): an item's owner, or the job's leader.
    Plan {
        /// The job.
        job: String,
    },
    /// An ElasticJob process that shut one of its jobs down by itself, or is not registered
    /// in it (convergence).
    JavaShutDown {
        /// The job.
        job: String,
    },
}

/// A run as a violation names it (see [`crate::cluster::RunRecord`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunRef {
    /// Whether an ElasticJob node ran it.
    pub java: bool,
    /// Its node.
    pub node: usize,
    /// Why it ran.
    pub kind: shardjob_core::machine::record::RunKind,
    /// Its fire, epoch ms.
    pub fire: i64,
    /// When it started, virtual ms.
    pub start: u64,
}

impl RunRef {
    /// The run's reference.
    pub fn of(r: &crate::cluster::RunRecord) -> Self {
        Self {
            java: r.java,
            node: r.node,
            kind: r.kind,
            fire: r.fire,
            start: r.start,
        }
    }
}

impl Subject {
    /// Two runs of one item.
    pub fn runs(a: &crate::cluster::RunRecord, b: &crate::cluster::RunRecord) -> Self {
        Self::Runs {
            job: b.job.clone(),
            item: b.item,
            earlier: RunRef::of(a),
            later: RunRef::of(b),
        }
    }

    /// One run.
    pub fn run(r: &crate::cluster::RunRecord) -> Self {
        Self::Run {
            job: r.job.clone(),
            item: r.item,
            run: RunRef::of(r),
        }
    }

    /// A fire of an item.
    pub fn fire(job: &str, item: u32, fire: i64) -> Self {
        Self::Fire {
            job: job.to_owned(),
            item,
            fire,
        }
    }
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
pub fn runs_by_item(
    runs: &[crate::cluster::RunRecord],
) -> std::collections::BTreeMap<(&str, u32), Vec<&crate::cluster::RunRecord>> {
    let mut by_item: std::collections::BTreeMap<(&str, u32), Vec<_>> = Default::default();
    for r in runs {
        by_item.entry((r.job.as_str(), r.item)).or_default().push(r);
    }
    by_item
}
