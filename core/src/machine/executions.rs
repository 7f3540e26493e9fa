//! Executions: adopted, started (at once or at their fire), released.

#[allow(clippy::wildcard_imports)]
use super::*;

impl Machine {
    /// Starts executions for running markers this session created but holds no execution
    /// for (their claim's reply was lost).
    pub(super) fn adopt(
        &mut self,
        name: &str,
        view: &JobView,
        me: &InstanceId,
        sid: crate::registry::SessionId,
    ) -> Option<Action> {
        let j = self.jobs.get(name)?;
        let mut groups: BTreeMap<RunKey, Vec<(ExecItem, Revision)>> = BTreeMap::new();
        let mut ops = vec![TxnOp::Check(Check::Session(sid))];
        ops.push(TxnOp::Check(Check::Exists(j.paths.instance(me))));
        // Within the transaction limit; the next evaluation adopts the rest.
        let limit = j.txn_limit(&self.opts).unwrap_or(usize::MAX);
        let mut taken = 0usize;
        for (item, v) in &view.items {
            if taken >= limit {
                break;
            }
            if let Some(id) = j.running.get(item) {
                // Planted bug: a run that ended here, its completion not recorded yet, counts
                // as one whose claim's reply was lost.
                let ended = self
                    .executions
                    .get(id)
                    .is_some_and(|e| e.finished && e.started);
                if !(planted!(self.opts, RerunFinished) && ended) {
                    continue;
                }
            }
            let Some(stat) = session_marker(v, me, sid) else {
                continue;
            };
            // Not while an operator has it disabled: it stays claimed, and starts once the
            // item is enabled again.
            if v.disabled && !planted!(self.opts, RunDisabledItems) {
                continue;
            }
            let Some((record, version)) = &v.record else {
                continue;
            };
            let Some(run) = &record.run else { continue };
            if run.instance != *me {
                continue;
            }
            // The `failover` node this claim created, to be removed with the run's end: a
            // failed-over run is recorded as a failover, or, for a manual trigger's run, as
            // a trigger still (see `claims`), so the node is recognised by its session too.
            // Left behind, a live session's node would keep the item from ever being failed
            // over again.
            let failover = match (run.kind, &v.failover) {
                (RunKind::Failover, Some(f)) => Some(f.version),
                (_, Some(f))
                    if f.ephemeral_owner == Some(sid)
                        && !planted!(self.opts, AdoptDropsTriggerFailover) =>
                {
                    Some(f.version)
                }
                _ => None,
            };
            // The cache may be behind: start only what the registry confirms is still ours.
            ops.push(TxnOp::Check(Check::Version(
                j.paths.item_running(*item),
                stat.version,
            )));
            ops.push(TxnOp::Check(Check::Value(
                j.paths.item_running(*item),
                me.as_str().into(),
            )));
            ops.push(TxnOp::Check(Check::Version(
                j.paths.item_execution(*item),
                *version,
            )));
            ops.push(TxnOp::Check(Check::Absent(j.paths.item_disabled(*item))));
            taken += 1;
            groups.entry((run.fire, run.kind)).or_default().push((
                ExecItem {
                    item: *item,
                    running_version: stat.version,
                    record_version: *version,
                    record: record.clone(),
                    failover,
                },
                stat.created,
            ));
        }
        if groups.is_empty() {
            return None;
        }
        Some(Action::Txn(
            Purpose::Adopt(groups.into_iter().collect()),
            ops,
        ))
    }

    /// Records an execution and marks its items running here. `finished` is for one that is
    /// not started at all (its end is recorded at once).
    pub(super) fn insert_execution(
        &mut self,
        name: &str,
        fire: i64,
        counts_as_fire: bool,
        items: Vec<ExecItem>,
        finished: bool,
    ) -> ExecutionId {
        self.next_execution += 1;
        let id = ExecutionId(self.next_execution);
        if let Some(j) = self.jobs.get_mut(name) {
            for it in &items {
                j.running.insert(it.item, id);
            }
        }
        let exec = Exec {
            job: name.to_owned(),
            epoch: self.epoch,
            fire,
            counts_as_fire,
            items,
            cancelled: finished,
            finished,
            completing: false,
            sending: 0,
            retry_at: None,
            backoff: 0,
            pending: None,
            started: false,
            enabled_at: None,
        };
        self.executions.insert(id, exec);
        id
    }

    /// Records a new execution and asks the driver to start it.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn start_execution(
        &mut self,
        name: &str,
        fire: i64,
        kind: RunKind,
        counts_as_fire: bool,
        parameter: Option<String>,
        items: Vec<(ExecItem, Revision)>,
        now: Now,
    ) -> Option<ExecutionId> {
        let config = self.jobs.get(name)?.config.clone()?;
        let runs: Vec<ItemRun> = items
            .iter()
            .map(|(it, token)| ItemRun {
                item: it.item,
                parameter: config.item_parameter(it.item).map(str::to_owned),
                fencing_token: *token,
            })
            .collect();
        let item_list: Vec<String> = runs.iter().map(|r| r.item.to_string()).collect();
        let exec_items = items.into_iter().map(|(it, _)| it).collect();
        let id = self.insert_execution(name, fire, counts_as_fire, exec_items, false);
        let job_parameter = match (&kind, &parameter) {
            (RunKind::Trigger, Some(p)) if !p.is_empty() => p.clone(),
            _ => config.job_parameter.clone(),
        };
        let task_id = format!(
            "{name}{DELIMITER}{}{DELIMITER}READY{DELIMITER}{}",
            item_list.join(","),
            self.opts.instance_id
        );
        let execution = Execution {
            id,
            job_name: name.to_owned(),
            task_id,
            sharding_total_count: config.sharding_total_count,
            job_parameter,
            fire_time: DateTime::<Utc>::from_timestamp_millis(fire).unwrap_or_default(),
            kind,
            items: runs,
        };
        if fire > now.wall_ms() && kind != RunKind::Trigger {
            // Claimed ahead: started when the fire comes.
            let at = now.mono_at(fire);
            if let Some(e) = self.executions.get_mut(&id) {
                e.pending = Some(if self.opts.prepare_ahead {
                    self.out.push_back(Command::Prepare(execution));
                    Ahead::Prepared
                } else {
                    Ahead::Held(execution)
                });
                self.starts.insert((at, id));
            }
            let enabled = !self.disabled_since_claim(id);
            let disables = self.disables;
            if let Some(e) = self.executions.get_mut(&id) {
                e.enabled_at = enabled.then_some(disables);
            }
        } else {
            if let Some(e) = self.executions.get_mut(&id) {
                e.started = true;
            }
            self.out.push_back(Command::Start(execution));
        }
        Some(id)
    }

    /// Hands the driver the executions claimed ahead whose fire has come, if the session is
    /// sure; releases them otherwise.
    pub(super) fn start_due(&mut self, now: Now) {
        let mut handled = 0;
        // The view must be recent too: after a pause or a cut longer than the claim's lead,
        // an operator's disable may not have reached it. Then the claim is given back, and
        // claimed again with the registry's own checks.
        let fresh = matches!(self.session, Session::Live(_))
            && self.confirmed.is_some_and(|c| {
                now.mono.saturating_sub(c)
                    <= ms(self.opts.claim_ahead).saturating_add(FRESH_VIEW_MS)
            });
        let lease_ok = self.lease_valid(now) && fresh;
        while let Some(&(t, id)) = self.starts.first() {
            if t > now.mono || handled == START_CHUNK {
                break;
            }
            handled += 1;
            self.starts.remove(&(t, id));
            // Entries of executions given back or gone meanwhile are stale.
            let Some(e) = self.executions.get(&id) else {
                continue;
            };
            if e.pending.is_none() {
                continue;
            }
            // Nothing disabled at the claim, and no disable seen since: no need to look.
            let go = lease_ok
                && e.epoch == self.epoch
                && !e.cancelled
                && (e.enabled_at == Some(self.disables) || !self.disabled_since_claim(id));
            let Some(e) = self.executions.get_mut(&id) else {
                continue;
            };
            if go {
                match e.pending.take() {
                    Some(Ahead::Held(execution)) => self.out.push_back(Command::Start(execution)),
                    Some(Ahead::Prepared) => self.out.push_back(Command::StartPrepared(id)),
                    None => continue,
                }
                e.started = true;
            } else {
                self.release(id, now);
            }
        }
    }

    /// Whether an operator disabled one of the execution's items, or this server, after the
    /// claim: a run claimed ahead then does not start.
    pub(super) fn disabled_since_claim(&self, id: ExecutionId) -> bool {
        let Some(e) = self.executions.get(&id) else {
            return false;
        };
        let Some(j) = self.jobs.get(&e.job) else {
            return false;
        };
        let view = j.cache.view();
        !view.server_enabled(self.opts.instance_id.server_ip())
            || e.items
                .iter()
                .any(|it| view.items.get(&it.item).is_some_and(|v| v.disabled))
    }

    /// Gives up an execution claimed ahead that never started: its markers go and its records
    /// return to what they were, so the fire is run later (here or elsewhere), not lost.
    pub(super) fn release(&mut self, id: ExecutionId, now: Now) {
        let Some(e) = self.executions.get_mut(&id) else {
            return;
        };
        if matches!(e.pending.take(), Some(Ahead::Prepared)) {
            self.out.push_back(Command::Discard(id));
        }
        if !planted!(self.opts, GiveBackAsDone) {
            e.counts_as_fire = false;
        }
        e.cancelled = true;
        e.finished = true;
        if e.epoch == self.epoch && self.session != Session::None {
            self.send_completion(id, now);
        } else {
            self.complete_lost(id);
        }
    }

    // ----- replies -----
}
