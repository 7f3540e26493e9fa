//! Adoption: running markers of this session that no execution holds (a claim whose reply was
//! lost did apply) are started after all.

#[allow(clippy::wildcard_imports)]
use crate::machine::*;

/// Whether the view shows `running` markers of this session that no local execution holds
/// (`registered`: see [`session_marker`]).
pub(crate) fn adoptable(
    view: &JobView,
    me: &InstanceId,
    sid: crate::registry::SessionId,
    registered: Option<Revision>,
    running: &BTreeMap<u32, ExecutionId>,
) -> bool {
    view.items.iter().any(|(item, v)| {
        !running.contains_key(item) && session_marker(v, me, sid, registered).is_some()
    })
}

/// The item's `running` marker, if this instance holds it under this session: bound to the
/// session, or persistent (a job shared with ElasticJob) and created since this session's
/// instance node, whose creation revision is `registered` (see
/// [`mixed::marker_session`]).
pub(crate) fn session_marker<'a>(
    v: &'a crate::machine::job_view::ItemView,
    me: &InstanceId,
    sid: crate::registry::SessionId,
    registered: Option<Revision>,
) -> Option<&'a crate::registry::Stat> {
    match mixed::marker_session(v, me, sid, registered) {
        Some((mixed::MarkerSession::This, stat)) => Some(stat),
        _ => None,
    }
}

impl Machine {
    /// Starts executions for running markers this session created but holds no execution
    /// for (their claim's reply was lost).
    pub(crate) fn adopt(
        &mut self,
        job: JobId,
        view: &JobView,
        me: &InstanceId,
        sid: crate::registry::SessionId,
    ) -> Option<Action> {
        let j = self.jobs.get(&job)?;
        // Asked on every decision, and nearly always empty: the transaction's own checks are
        // made only once there is something to adopt.
        let mut groups: BTreeMap<RunKey, Vec<(ExecItem, Revision)>> = BTreeMap::new();
        let mut ops = Vec::new();
        // Within the transaction limit; the next evaluation adopts the rest.
        let limit = j.txn_limit(&self.opts).unwrap_or(usize::MAX);
        let mut taken = 0usize;
        let registered = mixed::registration(j, sid);
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
                    .is_some_and(|e| e.has_ended() && e.was_started());
                if !(planted!(self.opts, RerunFinished) && ended) {
                    continue;
                }
            }
            let Some(stat) = session_marker(v, me, sid, registered) else {
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
        ops.splice(
            0..0,
            [
                TxnOp::Check(Check::Session(sid)),
                TxnOp::Check(Check::Exists(j.paths.instance(me))),
            ],
        );
        Some(Action::Txn(
            Purpose::Adopt(groups.into_iter().collect()),
            ops,
        ))
    }

    /// The reply to an adoption: the markers the registry confirmed are this session's start
    /// as executions (those of items beyond a count that shrank meanwhile are only recorded as
    /// ended).
    pub(crate) fn on_adopt(
        &mut self,
        job: Option<JobId>,
        groups: Vec<(RunKey, Vec<(ExecItem, Revision)>)>,
        reply: RegistryReply,
        now: Now,
    ) {
        let Some(job) = job else { return };
        match reply {
            RegistryReply::Transacted(_) if self.lease_valid(now) => {
                let Some(j) = self.jobs.get(&job) else { return };
                let total = j.config.as_ref().map(|c| c.sharding_total_count);
                let registered = self
                    .session_id()
                    .and_then(|sid| mixed::registration(j, sid));
                for ((fire, kind), items) in groups {
                    // Claimed before the count shrank under it: not started now (the
                    // item's work belongs to others by the new count), but recorded
                    // as ended, so that its marker goes and the item can be removed.
                    // The same for a fire claimed before this instance's node of the job
                    // was created (every claim checks that node): a claim of an earlier
                    // hosting of the job in this session, the job removed and added back
                    // meanwhile (seed 28,206 of CI's world). Its fire is given back to the
                    // planner, which runs it only if it is still due (the cluster may have
                    // started again since, and the item may be another's). A failover or a
                    // trigger is run: it was owed whatever the cluster's start.
                    let earlier = |created: Revision| {
                        matches!(kind, RunKind::Scheduled | RunKind::Misfire)
                            && registered.is_some_and(|r| created < r)
                            && !planted!(self.opts, AdoptEarlierHosting)
                    };
                    let (gone, items): (Vec<_>, Vec<_>) =
                        items.into_iter().partition(|(it, created)| {
                            total.is_some_and(|n| it.item >= n) || earlier(*created)
                        });
                    if !gone.is_empty() {
                        let gone = gone.into_iter().map(|(it, _)| it).collect();
                        let id = self.insert_execution(job, fire, false, gone, Life::NEVER_STARTED);
                        self.send_completion(id, now);
                    }
                    if !items.is_empty() {
                        let counts = kind != RunKind::Trigger;
                        self.start_execution(job, fire, kind, counts, None, items, now);
                    }
                }
            }
            RegistryReply::Failed(error) => {
                let units = groups.iter().map(|(_, items)| items.len()).sum();
                if !self.split_on_too_large(job, &error, units) {
                    self.after_failure(job, error.class(), now);
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::test_support::now;

    /// An adoption of items `0..n`, all of one fire.
    fn adoption(n: u32) -> Vec<(RunKey, Vec<(ExecItem, Revision)>)> {
        let items = (0..n)
            .map(|item| {
                let it = ExecItem {
                    item,
                    running_version: Version(0),
                    record_version: Version(1),
                    record: ItemRecord::default(),
                    failover: None,
                };
                (it, Revision(3))
            })
            .collect();
        vec![((10, RunKind::Scheduled), items)]
    }

    /// An adoption the registry refused: as too large, the job's transactions are halved
    /// (unless it is of one item, which fails as any other refusal); otherwise the job backs
    /// off before it decides again.
    #[test]
    fn a_refused_adoption_splits_or_backs_off() {
        let me = InstanceId::new("10.0.0.1@-@1").unwrap();
        let too_large = || RegistryError::TooLarge("too many operations".to_owned());
        let conflict = || RegistryError::NodeExists(NodePath::new("/j/x").unwrap());
        #[rustfmt::skip]
        let cases: [(&str, u32, RegistryError, Option<usize>, bool); 4] = [
            ("too large", 5, too_large(), Some(2), false),
            ("too large, of one item", 1, too_large(), None, true),
            ("a conflict", 5, conflict(), None, true),
            ("a timeout", 5, RegistryError::Timeout, None, true),
        ];
        for (what, n, error, split, backs_off) in cases {
            let mut m = Machine::new(MachineOptions::new(me.clone()));
            let spec = JobSpec {
                config: JobConfig::new("j", 8),
                job_type: "SCRIPT".to_owned(),
            };
            m.add_job(spec, now(0)).unwrap();
            let id = m.jobs.id("j").unwrap();
            m.on_adopt(
                Some(id),
                adoption(n),
                RegistryReply::Failed(error),
                now(100),
            );
            let j = m.jobs.get(&id).unwrap();
            assert_eq!(j.txn_items, split, "{what}: the job's limit");
            assert_eq!(
                matches!(j.wait, Wait::Backoff { .. }),
                backs_off,
                "{what}: backs off"
            );
            let events: Vec<Command> = std::iter::from_fn(|| m.poll_command()).collect();
            let want = split.map(|items| {
                Command::Event(MachineEvent::TxnSplit {
                    job: "j".to_owned(),
                    items,
                })
            });
            assert_eq!(events, Vec::from_iter(want), "{what}: events");
        }
    }
}
