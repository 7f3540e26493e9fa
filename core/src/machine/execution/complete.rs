//! The end of an execution, recorded in one transaction (or in parts under a transaction limit).

#[allow(clippy::wildcard_imports)]
use crate::machine::*;

impl Machine {
    pub(crate) fn send_completion(&mut self, id: ExecutionId, now: Now) {
        let Some(sid) = self.session_id() else {
            // Suspended: retry when reconnected (or lose it on expiry).
            if let Some(e) = self.executions.get_mut(&id) {
                let t = now.mono.after(ms(self.opts.retry_backoff));
                e.set_recording(Recording::Retry { at: t });
                self.timers.retries.insert((t, id));
            }
            return;
        };
        let Some(exec) = self.executions.get_mut(&id) else {
            return;
        };
        if exec.sending().is_some() {
            return;
        }
        let Some(j) = self.jobs.get(&exec.job) else {
            self.executions.remove(&id);
            return;
        };
        // With a transaction limit the end is recorded in parts, the first items first: each
        // part removes only its own items' markers and records only their fire.
        let take = j
            .txn_limit(&self.opts)
            .map_or(exec.items.len(), |k| k.min(exec.items.len()));
        let take = if exec.one_by_one { take.min(1) } else { take };
        exec.set_recording(Recording::Sending { items: take });
        let part = &exec.items[..take];
        let mut ops = vec![TxnOp::Check(Check::Session(sid))];
        // A part of one item whose marker is gone: the record alone (see `lose_part`).
        let marker_gone = take == 1 && exec.marker_gone == part.first().map(|it| it.item);
        // While the job is shared with ElasticJob, a marker is also checked by its value: an
        // ElasticJob instance deletes markers by path (its completion, its failover listener)
        // and creates its own at version 0 again, which a check by version alone takes for
        // this run's (seeds 36, 81 and 154 of the mixed world: the end of a shardjob run
        // deleted the marker of an ElasticJob run that went on).
        //
        // And an end sent again after a reply that never came (the earlier attempt may have
        // applied), or by the record alone: versions repeat once an item is removed and
        // created again, so both the marker and the record are checked by value then. Seed
        // 53,814 of CI's world: a deaf instance's end applied unheard; the item was removed by
        // a shrink and grown back, and its new owner's claim left its marker and its record at
        // the versions the first run's had had; the end, sent again, deleted the new owner's
        // marker under its run and wrote over its record.
        let resent = (exec.resent || marker_gone) && !planted!(self.opts, ResendByVersion);
        let by_value = resent
            || (mixed::is_mixed(j.cache.view()) && !planted!(self.opts, EndByMarkerVersionOnly));
        for it in part {
            if !marker_gone {
                if by_value {
                    ops.push(TxnOp::Check(Check::Value(
                        j.paths.item_running(it.item),
                        self.me.as_str().into(),
                    )));
                }
                ops.push(TxnOp::Delete {
                    path: j.paths.item_running(it.item),
                    expected: Some(it.running_version),
                });
            }
            if let Some(v) = it.failover {
                ops.push(TxnOp::Delete {
                    path: j.paths.item_failover(it.item),
                    expected: Some(v),
                });
            }
        }
        for it in part {
            let done = if exec.counts_as_fire && !planted!(self.opts, ForgetCompletion) {
                Some(it.record.done.map_or(exec.fire, |d| d.max(exec.fire)))
            } else {
                it.record.done
            };
            let record = ItemRecord { done, run: None };
            if resent {
                ops.push(TxnOp::Check(Check::Value(
                    j.paths.item_execution(it.item),
                    it.record.to_bytes(),
                )));
            }
            ops.push(TxnOp::Set {
                path: j.paths.item_execution(it.item),
                data: record.to_bytes(),
                expected: Some(it.record_version),
            });
        }
        let job = exec.job;
        self.request(
            Some(job),
            Purpose::Complete(id),
            RegistryOp::Transact(ops),
            now,
        );
    }

    pub(crate) fn on_complete(&mut self, id: ExecutionId, reply: RegistryReply, now: Now) {
        match reply {
            RegistryReply::Transacted(results) => {
                let Some(exec) = self.executions.get_mut(&id) else {
                    return;
                };
                let take = exec.sending().unwrap_or(0).min(exec.items.len());
                let recorded: Vec<ExecItem> = exec.items.drain(..take).collect();
                let (job, started) = (exec.job, exec.was_started());
                if planted!(self.opts, SplitCompletionDropsParts) {
                    exec.items.clear();
                }
                let rest = !exec.items.is_empty();
                if rest {
                    exec.set_recording(Recording::Unsent);
                    exec.backoff = 0;
                } else {
                    self.executions.remove(&id);
                }
                if let (true, Some(j)) = (started, self.jobs.get(&job)) {
                    self.out
                        .push_back(Command::Event(MachineEvent::RunRecorded {
                            job: j.name().to_owned(),
                            items: recorded.iter().map(|i| i.item).collect(),
                        }));
                }
                if let Some(j) = self.jobs.get_mut(&job) {
                    for it in &recorded {
                        if j.running.get(&it.item) == Some(&id) {
                            j.running.remove(&it.item);
                        }
                        j.last_end.insert(it.item, now.wall_ms());
                    }
                    j.await_own_writes(&results, now, ms(self.opts.sync_timeout));
                }
                if rest {
                    // The next part at once.
                    self.send_completion(id, now);
                }
            }
            RegistryReply::Failed(error) => {
                let class = error.class();
                let sent = self
                    .executions
                    .get(&id)
                    .map(|e| (e.job, e.sending().unwrap_or(0)));
                if let Some((job, units)) = sent {
                    if self.split_on_too_large(job, &error, units) {
                        if let Some(e) = self.executions.get_mut(&id) {
                            e.set_recording(Recording::Unsent);
                        }
                        self.send_completion(id, now);
                        return;
                    }
                }
                match class {
                    ErrorClass::Transient => {
                        if let Some(e) = self.executions.get_mut(&id) {
                            let delay = ms(self.opts.retry_backoff) << e.backoff.min(4);
                            e.backoff += 1;
                            e.resent = true;
                            let t = now.mono.after(delay);
                            e.set_recording(Recording::Retry { at: t });
                            self.timers.retries.insert((t, id));
                        }
                    }
                    class
                    @ (ErrorClass::LostSession | ErrorClass::Conflict | ErrorClass::Fatal) => {
                        let job = self.executions.get(&id).map(|e| e.job);
                        if class == ErrorClass::LostSession {
                            self.failed(job, "completion", error);
                            self.complete_lost(id);
                        } else if self.marker_gone_under_run(id, &error) {
                            // Recorded again, by the record alone.
                            self.send_completion(id, now);
                        } else {
                            self.failed(job, "completion", error);
                            self.lose_part(id, now);
                        }
                    }
                }
            }
            _ => {}
        }
    }

    /// Gives up the part of an execution's end that the registry refused while the session
    /// lives (a conflict: the part's markers or records are not as the run left them, most
    /// often because an earlier attempt whose reply was lost did apply, or because a marker
    /// was removed under the run), and goes on with the later parts. Those were never sent:
    /// their `running` markers are still this session's and, once out of `running`, would look
    /// like a claim whose reply was lost; adopted, the fire would start again under the same
    /// fencing token. See [`Machine::adopt`].
    ///
    /// A refused part of several items is not given up whole: one item's conflict refuses the
    /// others with it, and their markers would stay behind, adopted. The end is sent again one
    /// item per transaction, so only the items that conflict are given up.
    pub(crate) fn lose_part(&mut self, id: ExecutionId, now: Now) {
        let Some(exec) = self.executions.get_mut(&id) else {
            return;
        };
        let take = exec.sending().unwrap_or(0).min(exec.items.len());
        if take > 1 && !planted!(self.opts, ConflictDropsRest) {
            exec.one_by_one = true;
            exec.set_recording(Recording::Unsent);
            self.send_completion(id, now);
            return;
        }
        if take == 0 || take == exec.items.len() || planted!(self.opts, ConflictDropsRest) {
            self.complete_lost(id);
            return;
        }
        let lost: Vec<ExecItem> = exec.items.drain(..take).collect();
        exec.set_recording(Recording::Unsent);
        exec.backoff = 0;
        let (job, started) = (exec.job, exec.was_started());
        self.give_up_items(job, id, &lost, started);
        self.send_completion(id, now);
    }

    /// Whether the end of one item was refused only because its `running` marker is gone
    /// while the session lives (the marker's delete, operation 1 after the session check,
    /// found no node): someone deleted it under the run (ElasticJob's failover listener
    /// queueing the item, or its reconnection deleting the markers of the items it thinks it
    /// owns; an operator). The run did end here, so its end is sent again without the marker,
    /// the record checked by the version this run's claim left it at: if anyone claimed the
    /// item since (a failover), that write fails too and the part is given up as before. Left
    /// as it was, the record would keep a run in progress whose runner is live, and this
    /// instance's own failover would run the finished fire again. Marks the execution for the
    /// retry; once per item (the marker-less end refused too is given up, as before).
    pub(crate) fn marker_gone_under_run(&mut self, id: ExecutionId, error: &RegistryError) -> bool {
        if planted!(self.opts, KeepRecordWhenMarkerGone) {
            return false;
        }
        let Some(exec) = self.executions.get_mut(&id) else {
            return false;
        };
        // Operation 1 is the marker's value check or its delete: gone, or another's since.
        let gone = matches!(
            error,
            RegistryError::TxnAborted { index: 1, cause }
                if matches!(**cause, RegistryError::NoNode(_) | RegistryError::ValueMismatch(_))
        );
        let first = exec.items.first().map(|it| it.item);
        if !gone || exec.sending() != Some(1) || first.is_none() || exec.marker_gone == first {
            return false;
        }
        exec.marker_gone = first;
        exec.set_recording(Recording::Unsent);
        true
    }

    /// Takes `items` of execution `id` out of the job's `running`, and, if the run started,
    /// says their end was not recorded ([`MachineEvent::CompletionLost`]).
    pub(crate) fn give_up_items(
        &mut self,
        job: JobId,
        id: ExecutionId,
        items: &[ExecItem],
        started: bool,
    ) {
        let Some(j) = self.jobs.get_mut(&job) else {
            return;
        };
        for it in items {
            if j.running.get(&it.item) == Some(&id) {
                j.running.remove(&it.item);
            }
        }
        let job = j.name().to_owned();
        if started {
            self.out
                .push_back(Command::Event(MachineEvent::CompletionLost {
                    job,
                    items: items.iter().map(|i| i.item).collect(),
                }));
        }
    }

    /// Forgets an execution whose end cannot be recorded.
    pub(crate) fn complete_lost(&mut self, id: ExecutionId) {
        let Some(exec) = self.executions.remove(&id) else {
            return;
        };
        if matches!(exec.life, Life::Ahead(Ahead::Prepared)) {
            self.out.push_back(Command::Discard(id));
        }
        let started = exec.was_started();
        self.give_up_items(exec.job, id, &exec.items, started);
    }
}
