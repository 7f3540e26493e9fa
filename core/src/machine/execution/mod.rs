//! Executions: the runs this instance was handed, from their claim to the record of their end.

#[allow(clippy::wildcard_imports)]
use crate::machine::*;

pub(crate) mod adopt;
pub(crate) mod complete;
pub(crate) mod start;

/// One execution: items of one job claimed for one fire, from the claim to the record of
/// their end.
#[derive(Debug)]
pub(crate) struct Exec {
    pub(crate) job: JobId,
    /// The session epoch it was claimed in: its markers are that session's.
    pub(crate) epoch: u64,
    /// The fire it runs (epoch ms).
    pub(crate) fire: i64,
    /// Whether its end counts the fire as done (not for a trigger, nor for a claim given back).
    pub(crate) counts_as_fire: bool,
    /// The items whose end is not recorded yet, ascending.
    pub(crate) items: Vec<ExecItem>,
    /// Where it is in its life.
    pub(crate) life: Life,
    /// Transient failures of its completion in a row (the retry's backoff).
    pub(crate) backoff: u32,
    /// Its end is recorded one item per transaction: a part of several items was refused by a
    /// conflict, so each item's end is recorded, or given up, on its own.
    pub(crate) one_by_one: bool,
    /// A part of its end was sent and no reply came (a transient failure): that part, or a
    /// part of it sent again, may have applied unheard, so every later attempt checks markers
    /// and records by value (see `send_completion`). Never cleared.
    pub(crate) resent: bool,
    /// The item whose `running` marker was found gone while the session lives (another hand
    /// deleted it under the run: ElasticJob's failover listener or its reconnection, an
    /// operator): its end is recorded by the record alone, checked by its version (see
    /// [`Machine::marker_gone_under_run`]).
    pub(crate) marker_gone: Option<u32>,
    /// [`Machine::disables`] when the claim ahead was recorded with none of its items, nor
    /// this server, disabled; `None` if some were, or nothing is claimed ahead.
    pub(crate) enabled_at: Option<u64>,
}

/// An execution's life: claimed (ahead, or at its fire), running, ended, its end recorded.
#[derive(Debug)]
pub(crate) enum Life {
    /// Claimed ahead of its fire; nothing of it runs yet.
    Ahead(Ahead),
    /// Handed to the driver to run.
    Running,
    /// Cancellation was signalled; the driver has not reported the end yet.
    Cancelling,
    /// Ended (reported by the driver, or never started: a claim given back or claimed too
    /// late); its end is being recorded.
    Ended {
        /// Whether the driver was told to start it (a claim given back never was).
        started: bool,
        /// Where the record of its end is.
        recording: Recording,
    },
}

/// Where the record of an ended execution's end is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Recording {
    /// Not sent yet.
    Unsent,
    /// The completion of the first `items` items is in flight.
    Sending {
        /// How many of the execution's items (the first ones) it records.
        items: usize,
    },
    /// To be sent again at this time (monotonic ms): a transient failure, or no session.
    Retry {
        /// When.
        at: Mono,
    },
}

impl Life {
    /// An execution that never starts: only its claim's markers are to be removed.
    pub(crate) const NEVER_STARTED: Life = Life::Ended {
        started: false,
        recording: Recording::Unsent,
    };
}

impl Exec {
    /// Whether it is claimed ahead and not started.
    pub(crate) fn is_ahead(&self) -> bool {
        matches!(self.life, Life::Ahead(_))
    }

    /// Whether it ended (or never started) and only its record is left.
    pub(crate) fn has_ended(&self) -> bool {
        matches!(self.life, Life::Ended { .. })
    }

    /// Whether the driver was told to start it.
    pub(crate) fn was_started(&self) -> bool {
        match self.life {
            Life::Ahead(_) => false,
            Life::Running | Life::Cancelling => true,
            Life::Ended { started, .. } => started,
        }
    }

    /// Whether something of it may still run or start: the lease must cover it.
    pub(crate) fn may_run(&self) -> bool {
        matches!(self.life, Life::Ahead(_) | Life::Running)
    }

    /// The completion in flight, if any: how many items it records.
    pub(crate) fn sending(&self) -> Option<usize> {
        match self.life {
            Life::Ended {
                recording: Recording::Sending { items },
                ..
            } => Some(items),
            _ => None,
        }
    }

    /// Sets where the record of its end is (an execution that ended only).
    pub(crate) fn set_recording(&mut self, to: Recording) {
        if let Life::Ended { recording, .. } = &mut self.life {
            *recording = to;
        }
    }

    /// Ends it (the driver reported its end, or it never starts): its end is to be recorded.
    /// An execution that ended already is left as it is.
    pub(crate) fn end(&mut self) {
        if !self.has_ended() {
            self.life = Life::Ended {
                started: self.was_started(),
                recording: Recording::Unsent,
            };
        }
    }
}

/// A run claimed ahead of its fire, until the fire comes.
#[derive(Debug)]
pub(crate) enum Ahead {
    /// Kept here, to hand to the driver with [`Command::Start`].
    Held(Execution),
    /// Announced to the driver with [`Command::Prepare`] ([`MachineOptions::prepare_ahead`]);
    /// started with [`Command::StartPrepared`], or dropped with [`Command::Discard`].
    Prepared,
}

#[derive(Debug, Clone)]
pub(crate) struct ExecItem {
    pub(crate) item: u32,
    pub(crate) running_version: Version,
    pub(crate) record_version: Version,
    pub(crate) record: ItemRecord,
    pub(crate) failover: Option<Version>,
}

impl Machine {
    /// Records an execution and marks its items running here, in `life`: [`Life::Running`] for
    /// one about to be handed to the driver, [`Life::Ended`] for one that is not started at
    /// all (its end is recorded at once).
    pub(crate) fn insert_execution(
        &mut self,
        job: JobId,
        fire: i64,
        counts_as_fire: bool,
        items: Vec<ExecItem>,
        life: Life,
    ) -> ExecutionId {
        self.next_execution += 1;
        let id = ExecutionId(self.next_execution);
        if let Some(j) = self.jobs.get_mut(&job) {
            for it in &items {
                j.running.insert(it.item, id);
            }
        }
        let exec = Exec {
            job,
            epoch: self.sess.epoch,
            fire,
            counts_as_fire,
            items,
            life,
            backoff: 0,
            one_by_one: false,
            resent: false,
            marker_gone: None,
            enabled_at: None,
        };
        self.executions.insert(id, exec);
        id
    }

    pub(crate) fn cancel_all(&mut self, reason: CancelReason, now: Now) {
        let mut unstarted = Vec::new();
        for (id, exec) in self.executions.iter_mut() {
            match exec.life {
                Life::Ahead(_) => unstarted.push(*id),
                Life::Running => {
                    exec.life = Life::Cancelling;
                    self.out.push_back(Command::Cancel { id: *id, reason });
                }
                Life::Cancelling | Life::Ended { .. } => {}
            }
        }
        for id in unstarted {
            self.release(id, now);
        }
    }

    pub(crate) fn execution_finished(&mut self, id: ExecutionId, now: Now) {
        let Some(exec) = self.executions.get_mut(&id) else {
            return;
        };
        exec.end();
        let job = exec.job;
        if exec.epoch != self.sess.epoch || self.sess.state == Session::None {
            self.complete_lost(id);
        } else {
            self.send_completion(id, now);
        }
        self.evaluate(job, now);
        self.maybe_probe(now);
        self.finish_shutdown_if_done();
    }
}
