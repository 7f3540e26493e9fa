//! The decision on one job: what its view asks of this instance now.

#[allow(clippy::wildcard_imports)]
use super::*;

impl Machine {
    pub(crate) fn decide(&mut self, job: JobId, now: Now) -> Action {
        let Some(j) = self.jobs.get_mut(&job) else {
            return Action::Nothing;
        };
        // The view is kept in step with the cache; it is lent to the decision.
        let view = Arc::clone(j.cache.view());
        self.decide_with(job, &view, now)
    }

    pub(crate) fn decide_with(&mut self, job: JobId, view: &JobView, now: Now) -> Action {
        let me = Arc::clone(&self.me);
        let session = self.session_id();
        let Some(j) = self.jobs.get_mut(&job) else {
            return Action::Nothing;
        };
        for (path, error) in &view.corrupt {
            // Reported on every evaluation would flood; report once per distinct problem.
            let msg = format!("{path}: {error}");
            if j.reported_corrupt.insert(msg) {
                self.out
                    .push_back(Command::Event(MachineEvent::CorruptNode {
                        path: path.to_string(),
                        error: error.clone(),
                    }));
            }
        }
        let Some(j) = self.jobs.get_mut(&job) else {
            return Action::Nothing;
        };

        // Leaving: wait for local runs (the grace deadline cancels them), then leave.
        if let Some(leaving) = j.leaving {
            return self.decide_leave(job, leaving, view, now);
        }

        let Some(sid) = session else {
            return Action::Nothing;
        };

        if view.instances.contains(&me) {
            j.node_gone = None;
        } else if j.registered_in == Some(sid) && !planted!(self.opts, IgnoreOperatorShutdown) {
            // Our node, seen in this very session, is gone: an operator deleted it (a remote
            // shutdown), or the session ended and took it. A probe sent after the deletion was
            // seen tells them apart: if it succeeds, the session outlived the deletion. If the
            // session ended, its expiry comes instead and the instance registers again in the
            // next session. Nothing is decided meanwhile (no registration, no claim).
            let marker = *j.node_gone.get_or_insert(self.requests.next);
            if self.sess.probe_ok > marker || planted!(self.opts, ShutdownWithoutProbe) {
                return self.operator_shutdown(job, now);
            }
            self.sess.waiters.insert(job);
            self.probe_now(now);
            return Action::Nothing;
        }

        if j.phase == Phase::Loaded || j.phase == Phase::Blocked {
            return match setup_ops(j, view, &me, sid, now.wall_ms()) {
                Ok(ops) if ops.len() <= 1 => {
                    j.phase = Phase::Active;
                    let name = j.name().to_owned();
                    self.out
                        .push_back(Command::Event(MachineEvent::JobActive { job: name }));
                    self.decide_with(job, view, now)
                }
                Ok(ops) => Action::Txn(Purpose::Setup, ops),
                Err(event) => {
                    if j.phase != Phase::Blocked {
                        j.phase = Phase::Blocked;
                        self.out.push_back(Command::Event(event));
                    }
                    Action::Nothing
                }
            };
        }

        // Active.
        let Some(config) = j.config.clone() else {
            return Action::Nothing;
        };
        let standing = Standing::of(j, view, &me, sid);
        let gate = standing.gate(view, &me, &self.opts);
        if let Gate::Register = gate {
            // Our instance node is not there yet (a registration not visible yet, a new
            // session): register.
            j.phase = Phase::Loaded;
            return match setup_ops(j, view, &me, sid, now.wall_ms()) {
                Ok(ops) => Action::Txn(Purpose::Setup, ops),
                Err(_) => Action::Nothing,
            };
        }
        let Standing {
            enabled, i_lead, ..
        } = standing;
        if i_lead && j.leader.is_none() {
            j.leader = Some(Box::default());
            self.out
                .push_back(Command::Event(MachineEvent::BecameLeader {
                    job: j.name().to_owned(),
                }));
        } else if !i_lead {
            j.leader = None;
        }

        match gate {
            Gate::Register | Gate::Items => {}
            Gate::Elect => {
                let ops = vec![
                    TxnOp::Check(Check::Session(sid)),
                    TxnOp::create_ephemeral(j.paths.leader_instance(), me.as_str()),
                ];
                return Action::Txn(Purpose::Elect, ops);
            }
            Gate::Abdicate => {
                let ops = vec![
                    TxnOp::Check(Check::Session(sid)),
                    TxnOp::Check(Check::Value(j.paths.leader_instance(), me.as_str().into())),
                    TxnOp::delete(j.paths.leader_instance()),
                ];
                return Action::Txn(Purpose::Abdicate, ops);
            }
            Gate::Trigger(param) => {
                let ops = vec![
                    TxnOp::Check(Check::Session(sid)),
                    TxnOp::delete(j.paths.trigger(&me)),
                ];
                return Action::Txn(
                    Purpose::ConsumeTrigger {
                        parameter: param.to_owned(),
                    },
                    ops,
                );
            }
        }

        let mut wake: Vec<Mono> = Vec::new();

        // Reconcile: reload the subtree every interval, so a change whose event was lost
        // cannot leave this instance acting on a stale view for long.
        let interval = u64::from(config.reconcile_interval_minutes).saturating_mul(60_000);
        if interval > 0 {
            if let Some(last) = j.last_reload {
                let due = last.after(interval);
                if now.mono >= due {
                    self.start_load(job, now);
                    return Action::Nothing;
                }
                wake.push(due);
            }
        }

        // Leader duties.
        if i_lead {
            let strategy = self
                .strategies
                .get(&config.job_sharding_strategy_type)
                .cloned();
            let Some(j) = self.jobs.get_mut(&job) else {
                return Action::Nothing;
            };
            let mut lead = j.leader.take().unwrap_or_default();
            let decided = reshard(
                &mut lead, j, view, &config, strategy, &me, sid, &self.opts, now, &mut wake,
            );
            let grace = match &self.sess.state {
                Session::Live(info) => ms(info.timeout),
                _ => 0,
            };
            let mut events = Vec::new();
            let housekept = match decided {
                Ok(Some(_)) => None,
                _ => {
                    let cx = Ctx {
                        me: &me,
                        sid,
                        opts: &self.opts,
                        now,
                    };
                    let foreign = foreign_nodes(
                        &mut lead,
                        j,
                        view,
                        &config,
                        &cx,
                        grace,
                        &mut events,
                        &mut wake,
                    );
                    foreign.or_else(|| {
                        let limit = j.txn_limit(&self.opts);
                        housekeeping(&mut lead, j, view, &config, &me, sid, limit, now, &mut wake)
                    })
                }
            };
            self.out.extend(events.into_iter().map(Command::Event));
            j.leader = Some(lead);
            match decided {
                Ok(Some(action)) => return action,
                Ok(None) => {}
                Err(problem) => self
                    .out
                    .push_back(Command::Event(MachineEvent::PlanRefused {
                        job: j.name().to_owned(),
                        strategy: config.job_sharding_strategy_type.clone(),
                        problem,
                    })),
            }
            if let Some(action) = housekept {
                return action;
            }
        }

        // Markers of this session that no local execution holds: a claim whose reply was lost
        // (a timeout with unknown outcome) did apply. Adopt them: start what was claimed.
        if self.lease_valid(now) {
            if let Some(action) = self.adopt(job, view, &me, sid) {
                return action;
            }
        } else if self
            .jobs
            .get(&job)
            .is_some_and(|j| adoptable(view, &me, sid, mixed::registration(j, sid), &j.running))
        {
            // Confirm the session first; the probe's reply evaluates the job again.
            self.sess.waiters.insert(job);
            self.probe_now(now);
        }

        // Claims: own due items, triggers, failover.
        let can_claim = matches!(self.sess.state, Session::Live(_)) && self.shutdown.is_none();
        // The registry's clock (`clock`): while the job is shared with ElasticJob, or when
        // it sets `maxTimeDiffSeconds`, no claim while this clock is off or not measured.
        let measure_before = self.clock.measure_sent;
        let limit = self.jobs.get_mut(&job).and_then(|j| {
            if mixed::is_mixed(view) {
                j.java_seen = Some(now.mono);
            }
            // The rule's memory ends: decide again then.
            if let Some(end) = j.java_seen.map(|t| t.after(MIXED_MEMORY_MS)) {
                if end > now.mono {
                    wake.push(end);
                }
            }
            job_clock_limit(j, view, &self.opts, now.mono)
        });
        let (verdict, measure) = if can_claim && enabled {
            self.registry_clock_hold(job, limit, now, &mut wake)
        } else {
            (ClockVerdict::Fine, false)
        };
        let Some(j) = self.jobs.get_mut(&job) else {
            return Action::Nothing;
        };
        let necessary = view.necessary.is_some();
        let wait = ms(self.opts.reshard_wait);
        let gate = view.led_by_java() && !planted!(self.opts, GateOpenBesideJava);
        let held = hold_for_reshard(&mut j.necessary_seen, necessary, gate, wait, now, &mut wake);
        (j.java_gate, j.held_fire) = j.gate_after(gate && necessary, &config, now.wall_ms());
        let hold = Hold {
            held,
            fire: j.held_fire,
            clock: verdict != ClockVerdict::Fine,
        };
        if !necessary {
            j.stall_reported = false;
        } else if let (true, false, Some(since)) = (gate, j.stall_reported, j.necessary_seen) {
            let waited_ms = now.mono.0.saturating_sub(since.0);
            if waited_ms >= wait {
                j.stall_reported = true;
                self.out
                    .push_back(Command::Event(MachineEvent::ReshardStalled {
                        job: j.name().to_owned(),
                        leader: view.leader.clone().unwrap_or_default(),
                        waited_ms,
                    }));
            }
        }
        if can_claim {
            // A job shared with ElasticJob (or that was): the markers an earlier session left,
            // the orphans ElasticJob's failover has.
            let cx = Ctx {
                me: &me,
                sid,
                opts: &self.opts,
                now,
            };
            let grace = match &self.sess.state {
                Session::Live(info) => ms(info.timeout),
                _ => 0,
            };
            // Fresh: the session confirmed just now, or by a reply to a request sent since the
            // job first wanted it (a slow registry's round trip may exceed the first).
            let fresh = self.sess.confirmed.is_some_and(|c| {
                now.mono.since(c) <= crate::machine::execution::start::FRESH_VIEW_MS
                    || j.fresh_wanted.is_some_and(|w| c >= w)
            });
            let mut wants_fresh = false;
            let duty = mixed::mixed_duties(
                j,
                view,
                &config,
                &cx,
                grace,
                fresh,
                &mut wants_fresh,
                &mut wake,
            );
            if wants_fresh {
                // The probe's reply decides on the job again.
                j.fresh_wanted.get_or_insert(now.mono);
                self.sess.waiters.insert(job);
            } else {
                j.fresh_wanted = None;
            }
            if let Some(action) = duty {
                // The measurement waits for the next decision.
                self.clock.measure_sent = measure_before;
                return action;
            }
        }
        if measure {
            let ops = vec![
                TxnOp::Check(Check::Session(sid)),
                TxnOp::Set {
                    path: j.paths.instance(&me),
                    data: setup::instance_value(&me).into_bytes(),
                    expected: None,
                },
            ];
            return Action::Txn(Purpose::Measure, ops);
        }
        if can_claim && enabled {
            let cx = Ctx {
                me: &me,
                sid,
                opts: &self.opts,
                now,
            };
            let mut memo = std::mem::take(&mut j.fires);
            let decided = claims(j, view, &config, &cx, hold, &mut memo, &mut wake);
            j.fires = memo;
            j.apply_claims(&decided, now.wall_ms());
            if let Some(action) = decided.action {
                return action;
            }
        }
        j.wake = wake.into_iter().min();
        Action::Nothing
    }
}

/// What [`Machine::evaluate`] decided for a job.
pub(crate) enum Action {
    Txn(Purpose, Vec<TxnOp>),
    Nothing,
}

/// An active job's instance as its view shows it: registered, on an enabled server, leading.
pub(crate) struct Standing {
    pub(crate) registered: bool,
    pub(crate) enabled: bool,
    pub(crate) i_lead: bool,
}

/// What a decision on an active job does before it looks at the job's items; each comes
/// before the next. Shared by the decision and its audit ([`Machine::late_wakes`]), so the
/// audit asks for claims exactly where the decision would make them.
pub(crate) enum Gate<'v> {
    /// This instance's node is gone: register again.
    Register,
    /// No leader, this server is enabled, and no ElasticJob instance can lead: stand for
    /// election.
    Elect,
    /// Leading from a disabled server, or while an ElasticJob instance can lead: step down.
    Abdicate,
    /// A trigger addressed to this instance, with its parameter: consume it.
    Trigger(&'v str),
    /// On to the items (the leader's duties, adoption, claims).
    Items,
}

impl Standing {
    pub(crate) fn of(
        j: &Job,
        view: &JobView,
        me: &InstanceId,
        sid: crate::registry::SessionId,
    ) -> Self {
        let i_lead = view.leader.as_deref() == Some(me.as_str())
            && j.cache
                .leader()
                .is_some_and(|s| s.ephemeral_owner.is_none_or(|o| o == sid));
        Self {
            registered: view.instances.contains(me),
            enabled: view.server_enabled(me.server_ip()),
            i_lead,
        }
    }

    #[cfg_attr(not(feature = "plant-bugs"), allow(unused_variables))]
    pub(crate) fn gate<'v>(
        &self,
        view: &'v JobView,
        me: &InstanceId,
        opts: &MachineOptions,
    ) -> Gate<'v> {
        // A mixed job is led by ElasticJob whenever one of its instances can lead.
        let java_leads = view.java_can_lead() && !planted!(opts, ElectBesideJava);
        if !self.registered {
            Gate::Register
        } else if view.leader.is_none() && self.enabled && !java_leads {
            Gate::Elect
        } else if self.i_lead && (!self.enabled || java_leads) {
            Gate::Abdicate
        } else if let Some(param) = view.triggers.get(me) {
            Gate::Trigger(param)
        } else {
            Gate::Items
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What an active instance does first, by its standing and the job's view: register,
    /// elect, step down, consume a trigger, or go on to the items. While an ElasticJob
    /// instance can lead, a shardjob instance neither elects nor keeps the lead.
    #[test]
    fn the_gate_before_the_items() {
        let me = InstanceId::new("10.0.0.1@-@1").unwrap();
        let java = InstanceId::new("10.0.0.2@-@2").unwrap();
        let opts = MachineOptions::new(me.clone());
        let standing = |registered, enabled, i_lead| Standing {
            registered,
            enabled,
            i_lead,
        };
        let view = |leader: Option<&str>, with_java: bool, java_disabled: bool| {
            let mut v = JobView {
                leader: leader.map(str::to_owned),
                ..JobView::default()
            };
            if with_java {
                v.java.insert(java.clone());
            }
            if java_disabled {
                v.servers
                    .insert("10.0.0.2".to_owned(), "DISABLED".to_owned());
            }
            v
        };
        let name = |g: Gate<'_>| match g {
            Gate::Register => "register",
            Gate::Elect => "elect",
            Gate::Abdicate => "abdicate",
            Gate::Trigger(_) => "trigger",
            Gate::Items => "items",
        };
        let mine = Some("10.0.0.1@-@1");
        #[rustfmt::skip]
        let cases = [
            ("not registered", standing(false, true, false), view(None, false, false), "register"),
            ("no leader", standing(true, true, false), view(None, false, false), "elect"),
            ("no leader, disabled here", standing(true, false, false), view(None, false, false), "items"),
            ("no leader, ElasticJob can lead", standing(true, true, false), view(None, true, false), "items"),
            ("no leader, ElasticJob disabled", standing(true, true, false), view(None, true, true), "elect"),
            ("leading", standing(true, true, true), view(mine, false, false), "items"),
            ("leading, disabled here", standing(true, false, true), view(mine, false, false), "abdicate"),
            ("leading, ElasticJob can lead", standing(true, true, true), view(mine, true, false), "abdicate"),
            ("leading, ElasticJob disabled", standing(true, true, true), view(mine, true, true), "items"),
        ];
        for (what, s, v, want) in cases {
            assert_eq!(name(s.gate(&v, &me, &opts)), want, "{what}");
        }
        let mut v = view(Some("10.0.0.3@-@3"), false, false);
        v.triggers.insert(me.clone(), "p".to_owned());
        assert_eq!(
            name(standing(true, true, false).gate(&v, &me, &opts)),
            "trigger"
        );
    }
}
