//! The session: its events, the lease that running items rely on, the probes that confirm it.

#[allow(clippy::wildcard_imports)]
use super::*;

impl Machine {
    pub(super) fn handle_session(&mut self, event: SessionEvent, now: Now) {
        match event {
            SessionEvent::Connected(info) => {
                self.epoch += 1;
                self.session = Session::Live(info);
                self.confirmed = Some(now.mono);
                self.in_doubt = false;
                self.last_probe = now.mono;
                let names: Vec<String> = self.jobs.keys().cloned().collect();
                for name in names {
                    self.start_load(&name, now);
                }
            }
            SessionEvent::Suspended(id) => {
                if let Session::Live(info) = self.session {
                    if info.id == id {
                        self.session = Session::Suspended(info);
                    }
                }
            }
            SessionEvent::Reconnected(id) => {
                if let Session::Suspended(info) | Session::Live(info) = self.session {
                    if info.id == id {
                        self.session = Session::Live(info);
                        // Replies of this session may have been lost; the epoch stays.
                        let names: Vec<String> = self.jobs.keys().cloned().collect();
                        for name in names {
                            self.start_load(&name, now);
                        }
                        self.probe_now(now);
                    }
                }
            }
            SessionEvent::Expired(id) => {
                let ours = match self.session {
                    Session::Live(info) | Session::Suspended(info) => info.id == id,
                    Session::None => false,
                };
                if ours {
                    self.session_lost(now);
                    if planted!(self.opts, ShutdownOnSessionLoss) {
                        self.jobs.clear();
                        self.wakes.clear();
                        self.stopped = true;
                    }
                }
            }
            SessionEvent::Closed => {
                self.session_lost(now);
                if self.shutdown.is_some() {
                    self.stopped = true;
                }
            }
        }
        self.evaluate_all(now);
    }

    pub(super) fn session_lost(&mut self, now: Now) {
        self.session = Session::None;
        self.epoch += 1;
        self.confirmed = None;
        self.in_doubt = false;
        self.probe = None;
        self.out
            .push_back(Command::Event(MachineEvent::SessionLost));
        self.cancel_all(CancelReason::SessionLost, now);
        let finished: Vec<ExecutionId> = self
            .executions
            .iter()
            .filter(|(_, e)| e.finished)
            .map(|(id, _)| *id)
            .collect();
        for id in finished {
            self.complete_lost(id);
        }
        for job in self.jobs.values_mut() {
            job.phase = Phase::Waiting;
            job.busy = None;
            job.sync = None;
            job.buffer.clear();
            job.was_leader = false;
            job.reshard_wanted = None;
            job.reshard_moved.clear();
            job.reshard_written = 0;
            job.reshard_plan = None;
            // The nodes of the lost session are gone with it.
            job.unsure = false;
        }
        self.pending
            .retain(|_, p| matches!(p.purpose, Purpose::Complete(_)));
        if self.shutdown.is_some() {
            // Nothing left to leave: the session took the instance nodes with it.
            let idle: Vec<String> = self
                .jobs
                .iter()
                .filter(|(_, j)| j.running.is_empty())
                .map(|(name, _)| name.clone())
                .collect();
            for name in idle {
                self.forget_job(&name);
            }
            self.finish_shutdown_if_done();
        }
    }

    pub(super) fn lease_deadline(&self) -> Option<u64> {
        let (Session::Live(info) | Session::Suspended(info)) = self.session else {
            return None;
        };
        let confirmed = self.confirmed?;
        let share = if planted!(self.opts, LeaseBeyondTimeout) {
            1.5
        } else {
            1.0 - self.opts.safety_margin
        };
        let window = (ms(info.timeout) as f64 * share).max(0.0) as u64;
        Some(confirmed.saturating_add(window))
    }

    pub(super) fn lease_valid(&self, now: Now) -> bool {
        self.lease_deadline().is_some_and(|d| now.mono < d)
    }

    /// Whether a run is still going that the lease must stop if it runs out: one neither
    /// cancelled nor finished. Only then is the lease's deadline a timer (a run that ended and
    /// waits for its completion to be recorded has nothing left to stop).
    pub(super) fn lease_guards_runs(&self) -> bool {
        self.executions
            .values()
            .any(|e| !e.cancelled && !e.finished)
    }

    pub(super) fn check_lease(&mut self, now: Now) {
        if planted!(self.opts, NoSelfFencing) {
            return;
        }
        if self.lease_guards_runs() && !self.lease_valid(now) {
            if !self.in_doubt {
                self.in_doubt = true;
                self.out
                    .push_back(Command::Event(MachineEvent::SessionInDoubt));
            }
            self.cancel_all(CancelReason::SessionInDoubt, now);
        }
    }

    /// Handles an input other than a timeout with an eye on the wall clock: a step seen here
    /// is acted on as a timeout would, once the input is applied, by deciding on every job
    /// again (their wake times were taken from the old clock). Noticed only at the next
    /// timeout, a step back and forth between two timeouts would leave the wake times that
    /// decisions took meanwhile late by the step.
    pub(super) fn noticing_clock<T>(&mut self, now: Now, input: impl FnOnce(&mut Self) -> T) -> T {
        let stepped = self.observe_clock(now);
        let out = input(self);
        if stepped {
            self.evaluate_all(now);
        }
        out
    }

    /// Compares the wall clock with the monotonic one. When the wall clock has stepped (by
    /// more than [`CLOCK_STEP_MS`] since the last step), the runs claimed ahead are put at
    /// their fire by the new clock, and `true` says that every job must be evaluated again:
    /// their wake times were taken from the old one.
    pub(super) fn observe_clock(&mut self, now: Now) -> bool {
        self.clock_seen = now.mono;
        let offset = wall_offset(now);
        self.clock_last = Some(offset);
        let Some(before) = self.clock_offset else {
            self.clock_offset = Some(offset);
            return false;
        };
        let by = offset.saturating_sub(before);
        if by.abs() <= CLOCK_STEP_MS || planted!(self.opts, IgnoreClockSteps) {
            return false;
        }
        self.clock_offset = Some(offset);
        for (_, id) in std::mem::take(&mut self.starts) {
            // Entries of executions given back or gone are stale: dropped.
            if let Some(e) = self.executions.get(&id).filter(|e| e.pending.is_some()) {
                self.starts.insert((now.mono_at(e.fire), id));
            }
        }
        self.out
            .push_back(Command::Event(MachineEvent::ClockStepped { by_ms: by }));
        true
    }

    pub(super) fn maybe_probe(&mut self, now: Now) {
        let Session::Live(info) = self.session else {
            return;
        };
        if self.probe.is_some() || !self.needs_probing() {
            return;
        }
        if now.mono >= self.probe_due(info) {
            self.probe_now(now);
        }
    }

    /// Whether the session must be confirmed now and then: while executions run (their lease),
    /// while it is in doubt, and while jobs wait for a confirmation to act (adoption of markers
    /// whose claim's reply was lost). A waiting job has no wake of its own: if a probe's reply
    /// is lost too, the next probe is what brings it back.
    pub(super) fn needs_probing(&self) -> bool {
        !self.executions.is_empty() || self.in_doubt || !self.probe_waiters.is_empty()
    }

    /// When the session should be confirmed again: a quarter timeout after the last
    /// confirmation (claims and completions confirm it too) or the last probe.
    pub(super) fn probe_due(&self, info: SessionInfo) -> u64 {
        let last = self.confirmed.unwrap_or(0).max(self.last_probe);
        last.saturating_add(ms(info.timeout) / 4)
    }

    pub(super) fn probe_now(&mut self, now: Now) {
        let Session::Live(info) = self.session else {
            return;
        };
        if self.probe.is_some() {
            return;
        }
        self.last_probe = now.mono;
        let op = RegistryOp::Transact(vec![TxnOp::Check(Check::Session(info.id))]);
        let id = self.request(None, Purpose::Probe, op, now);
        self.probe = Some(id);
    }

    pub(super) fn cancel_all(&mut self, reason: CancelReason, now: Now) {
        let mut unstarted = Vec::new();
        for (id, exec) in self.executions.iter_mut() {
            if exec.pending.is_some() {
                unstarted.push(*id);
            } else if !exec.cancelled && !exec.finished {
                exec.cancelled = true;
                self.out.push_back(Command::Cancel { id: *id, reason });
            }
        }
        for id in unstarted {
            self.release(id, now);
        }
    }

    // ----- requests -----

    pub(super) fn request(
        &mut self,
        job: Option<&str>,
        purpose: Purpose,
        op: RegistryOp,
        now: Now,
    ) -> RequestId {
        self.next_request += 1;
        let id = RequestId(self.next_request);
        self.pending.insert(
            id,
            Pending {
                epoch: self.epoch,
                sent: now.mono,
                job: job.map(str::to_owned),
                purpose,
            },
        );
        self.out.push_back(Command::Registry { id, op });
        id
    }

    pub(super) fn session_id(&self) -> Option<crate::registry::SessionId> {
        match self.session {
            Session::Live(info) => Some(info.id),
            _ => None,
        }
    }
}
