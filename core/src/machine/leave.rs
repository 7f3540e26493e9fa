//! Leaving a job (removed, shut down by an operator, or the instance's graceful shutdown).

#[allow(clippy::wildcard_imports)]
use super::*;

pub(crate) fn leave_ops(
    j: &Job,
    view: &JobView,
    me: &InstanceId,
    sid: crate::registry::SessionId,
    limit: Option<usize>,
) -> Vec<TxnOp> {
    let p = &j.paths;
    let mut ops = vec![TxnOp::Check(Check::Session(sid))];
    let registered = mixed::registration(j, sid);
    // Run markers and failover nodes of this session: by now no local run holds any, so they
    // are claims whose reply was lost. Left, they would keep their items "running", or their
    // failover taken, for the session's life; deleted, the fire is one whose attempt died.
    // Within the transaction limit (in items); the next round deletes the rest.
    let orphans = view
        .items
        .iter()
        .filter(|(item, _)| !j.running.contains_key(item))
        .filter_map(|(item, v)| {
            let marker = session_marker(v, me, sid, registered);
            let failover = v.failover.filter(|stat| stat.ephemeral_owner == Some(sid));
            let deletes: Vec<TxnOp> = marker
                .map(|stat| (p.item_running(*item), stat.version))
                .into_iter()
                .chain(failover.map(|stat| (p.item_failover(*item), stat.version)))
                .map(|(path, version)| TxnOp::Delete {
                    path,
                    expected: Some(version),
                })
                .collect();
            (!deletes.is_empty()).then_some(deletes)
        });
    ops.extend(orphans.take(limit.unwrap_or(usize::MAX)).flatten());
    if view.instances.contains(me) {
        ops.push(TxnOp::delete(p.instance(me)));
    }
    if view.leader.as_deref() == Some(me.as_str()) {
        ops.push(TxnOp::Check(Check::Value(
            p.leader_instance(),
            me.as_str().into(),
        )));
        ops.push(TxnOp::delete(p.leader_instance()));
    }
    if view.triggers.contains_key(me) {
        ops.push(TxnOp::delete(p.trigger(me)));
    }
    // The server node goes with its last instance, unless an operator disabled it, or the job
    // is shared with ElasticJob (an ElasticJob instance on this IP that reconnects and finds
    // it gone registers itself DISABLED).
    if !mixed::may_delete_server(view) {
        return ops;
    }
    let ip = me.server_ip();
    let others_on_ip = view
        .instances
        .iter()
        .any(|i| i != me && i.server_ip() == ip);
    if let Some(value) = view.servers.get(ip).filter(|v| v.trim() == "ENABLED") {
        if !others_on_ip {
            // The value as read (blanks around `ENABLED` included): the check is exact.
            ops.push(TxnOp::Check(Check::Value(
                p.server_of(me),
                value.as_bytes().to_vec(),
            )));
            ops.push(TxnOp::delete(p.server_of(me)));
        }
    }
    ops
}

impl Machine {
    /// The decision on a job this instance leaves: claims ahead are given back, runs wait for
    /// (or are cancelled at) the grace's end, then the instance's nodes go in one transaction
    /// (or more, under a transaction limit), after which the job is forgotten.
    pub(crate) fn decide_leave(
        &mut self,
        job: JobId,
        leaving: Leaving,
        view: &JobView,
        now: Now,
    ) -> Action {
        let me = Arc::clone(&self.me);
        let session = self.session_id();
        let Some(j) = self.jobs.get_mut(&job) else {
            return Action::Nothing;
        };
        let deadline = leaving.deadline.or(self.shutdown);
        let grace_over = deadline.is_some_and(|d| now.mono >= d);
        let local: Vec<ExecutionId> = j.running.values().copied().collect();
        // Claimed ahead and not started: given back at once, nothing to wait for.
        let unstarted: Vec<ExecutionId> = local
            .iter()
            .copied()
            .filter(|id| self.executions.get(id).is_some_and(Exec::is_ahead))
            .collect();
        if !unstarted.is_empty() {
            for id in unstarted {
                self.release(id, now);
            }
            return Action::Nothing;
        }
        let Some(j) = self.jobs.get_mut(&job) else {
            return Action::Nothing;
        };
        if !local.is_empty() && !planted!(self.opts, LeaveWhileRunning) {
            if !grace_over {
                j.wake = deadline;
            } else {
                for id in local {
                    if let Some(e) = self.executions.get_mut(&id) {
                        if matches!(e.life, Life::Running) {
                            e.life = Life::Cancelling;
                            let reason = match leaving.cause {
                                _ if self.shutdown.is_some() => CancelReason::Shutdown,
                                LeaveCause::Operator => CancelReason::OperatorShutdown,
                                LeaveCause::Removed | LeaveCause::Shutdown => {
                                    CancelReason::JobRemoved
                                }
                            };
                            self.out.push_back(Command::Cancel { id, reason });
                        }
                    }
                }
            }
            return Action::Nothing;
        }
        // A removed job waits for a suspended session: it comes back (and the job's nodes
        // are deleted) or is found expired (and they are gone with it). Left now, they
        // would stay as long as the session, holding the job's items. A shutdown does not
        // wait: it ends the session.
        if matches!(self.sess.state, Session::Suspended(_)) && self.shutdown.is_none() {
            return Action::Nothing;
        }
        // The view may miss nodes a write of unknown outcome created (a registration whose
        // reply was lost, say): read the tree again first, or they would outlive the leave.
        if j.unsure && session.is_some() && self.shutdown.is_none() {
            self.start_load(job, now);
            return Action::Nothing;
        }
        let limit = j.txn_limit(&self.opts);
        let ops = session
            .map(|sid| leave_ops(j, view, &me, sid, limit))
            .unwrap_or_default();
        if ops.len() <= 1 {
            let name = j.name().to_owned();
            self.forget_job(job);
            self.out
                .push_back(Command::Event(MachineEvent::JobLeft { job: name }));
            return Action::Nothing;
        }
        Action::Txn(Purpose::Leave, ops)
    }

    /// An operator shut the job down here (see [`MachineEvent::OperatorShutdown`]): leave it
    /// at once, cancelling its running items so that they move without waiting for a grace.
    pub(crate) fn operator_shutdown(&mut self, job: JobId, now: Now) -> Action {
        let Some(j) = self.jobs.get_mut(&job) else {
            return Action::Nothing;
        };
        j.leaving = Some(Leaving {
            cause: LeaveCause::Operator,
            deadline: Some(now.mono),
        });
        j.triggers.clear();
        j.trigger_run = None;
        self.out
            .push_back(Command::Event(MachineEvent::OperatorShutdown {
                job: j.name().to_owned(),
            }));
        self.decide(job, now)
    }

    /// Leaves a job whose subtree is not loaded, without a transaction: once its local runs
    /// have ended (a shutdown cancels them at its grace deadline), it is dropped, and
    /// [`MachineEvent::LeftUnloaded`] says why before [`MachineEvent::JobLeft`].
    pub(crate) fn leave_unloaded(&mut self, job: JobId, now: Now) {
        let Some(j) = self.jobs.get_mut(&job) else {
            return;
        };
        if !j.running.is_empty() {
            j.wake = j
                .leaving
                .and_then(|l| l.deadline)
                .or(self.shutdown)
                .filter(|d| *d > now.mono);
            return;
        }
        let reason = match (&j.load_error, j.last_reload) {
            (Some(e), None) => format!("its registry subtree could never be loaded: {e}"),
            (None, None) => "its registry subtree was not loaded yet".to_owned(),
            (Some(e), Some(_)) => format!(
                "its registry subtree could not be loaded again before the shutdown's grace ended: {e}"
            ),
            (None, Some(_)) => {
                "its registry subtree was not loaded again before the shutdown's grace ended"
                    .to_owned()
            }
        };
        let name = j.name().to_owned();
        self.forget_job(job);
        self.out
            .push_back(Command::Event(MachineEvent::LeftUnloaded {
                job: name.clone(),
                reason,
            }));
        self.out
            .push_back(Command::Event(MachineEvent::JobLeft { job: name }));
    }

    pub(crate) fn finish_shutdown_if_done(&mut self) {
        if self.shutdown.is_none() || self.stopped {
            return;
        }
        if !self.jobs.is_empty() {
            return;
        }
        let busy = self
            .requests
            .pending
            .values()
            .any(|p| matches!(p.purpose, Purpose::Complete(_) | Purpose::Leave));
        if !busy {
            self.out.push_back(Command::CloseSession);
            self.stopped = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::job_view::ItemView;
    use crate::registry::{SessionId, Stat};

    const SID: SessionId = SessionId(7);

    fn id(s: &str) -> InstanceId {
        InstanceId::new(s).unwrap()
    }

    fn stat(version: i64, owner: Option<SessionId>) -> Stat {
        Stat {
            version: Version(version),
            created: Revision(1),
            modified: Revision(1),
            ephemeral_owner: owner,
            mtime_ms: None,
        }
    }

    /// A machine of instance `me` hosting job `j`, with a run going here of item 3.
    fn hosting(me: &InstanceId) -> Machine {
        let mut m = Machine::new(MachineOptions::new(me.clone()));
        let spec = JobSpec {
            config: JobConfig::new("j", 4),
            job_type: "SCRIPT".to_owned(),
        };
        let now = Now {
            mono: Mono(0),
            wall: DateTime::<Utc>::from_timestamp_millis(1_800_000_000_000).unwrap_or_default(),
        };
        m.add_job(spec, now).unwrap();
        if let Some((_, j)) = m.jobs.named_mut("j") {
            j.running.insert(3, ExecutionId(1));
        }
        m
    }

    /// What a leaving instance deletes, by what the registry shows: its claims whose reply
    /// was lost (run markers and failover nodes of its session no run here holds, within the
    /// limit), its instance node, its leadership, its trigger, and its server node when no
    /// other instance is on the server and no operator disabled it.
    #[test]
    fn what_a_leaving_instance_deletes() {
        let me = id("10.0.0.1@-@1");
        let m = hosting(&me);
        let j = m.jobs.named("j").unwrap();
        let p = &j.paths;
        let mut base = JobView::default();
        base.instances.insert(me.clone());
        base.servers
            .insert("10.0.0.1".to_owned(), "ENABLED".to_owned());
        let mine = |v: i64| Some((me.as_str().to_owned(), stat(v, Some(SID))));
        // Item 0: a marker of this session; 1: this session's failover node; 2: a marker of
        // an earlier session; 3: this session's marker, of the run going here.
        for (item, running, failover) in [
            (0, mine(4), None),
            (1, None, Some(stat(5, Some(SID)))),
            (
                2,
                Some((me.as_str().to_owned(), stat(6, Some(SessionId(3))))),
                None,
            ),
            (3, mine(8), None),
        ] {
            let v = ItemView {
                exists: true,
                running,
                failover,
                ..ItemView::default()
            };
            base.items.insert(item, Box::new(v));
        }
        let session = TxnOp::Check(Check::Session(SID));
        let claims = vec![
            TxnOp::Delete {
                path: p.item_running(0),
                expected: Some(Version(4)),
            },
            TxnOp::Delete {
                path: p.item_failover(1),
                expected: Some(Version(5)),
            },
        ];
        let instance = [TxnOp::delete(p.instance(&me))];
        let lead = [
            TxnOp::Check(Check::Value(p.leader_instance(), me.as_str().into())),
            TxnOp::delete(p.leader_instance()),
        ];
        let server = [
            TxnOp::Check(Check::Value(p.server_of(&me), b"ENABLED".to_vec())),
            TxnOp::delete(p.server_of(&me)),
        ];
        let ops = |parts: &[&[TxnOp]]| -> Vec<TxnOp> {
            std::iter::once(session.clone())
                .chain(parts.iter().flat_map(|p| p.iter().cloned()))
                .collect()
        };

        let mut leader = base.clone();
        leader.leader = Some(me.as_str().to_owned());
        leader.triggers.insert(me.clone(), String::new());
        let mut neighbour = base.clone();
        neighbour.instances.insert(id("10.0.0.1@-@2"));
        let mut elsewhere = base.clone();
        elsewhere.instances.insert(id("10.0.0.2@-@2"));
        elsewhere.leader = Some("10.0.0.2@-@2".to_owned());
        let mut disabled = base.clone();
        disabled
            .servers
            .insert("10.0.0.1".to_owned(), " DISABLED".to_owned());
        let mut gone = base.clone();
        gone.instances.remove(&me);
        let mut no_server = base.clone();
        no_server.servers.remove("10.0.0.1");
        let mut blanks = base.clone();
        blanks
            .servers
            .insert("10.0.0.1".to_owned(), "ENABLED\n".to_owned());
        let blank_server = [
            TxnOp::Check(Check::Value(p.server_of(&me), b"ENABLED\n".to_vec())),
            TxnOp::delete(p.server_of(&me)),
        ];
        #[rustfmt::skip]
        let cases: Vec<(&str, &JobView, Option<usize>, Vec<TxnOp>)> = vec![
            ("alone on the server", &base, None, ops(&[&claims, &instance, &server])),
            ("the leader, with a trigger", &leader, None, ops(&[&claims, &instance, &lead, &[TxnOp::delete(p.trigger(&me))], &server])),
            ("another instance on the server keeps it", &neighbour, None, ops(&[&claims, &instance])),
            ("another server's instance does not", &elsewhere, None, ops(&[&claims, &instance, &server])),
            ("a server an operator disabled stays", &disabled, None, ops(&[&claims, &instance])),
            ("the instance node gone already", &gone, None, ops(&[&claims, &server])),
            ("no server node", &no_server, None, ops(&[&claims, &instance])),
            ("ENABLED with blanks, checked as read", &blanks, None, ops(&[&claims, &instance, &blank_server])),
            ("the claims within the limit", &base, Some(1), ops(&[&claims[..1], &instance, &server])),
        ];
        for (what, view, limit, want) in cases {
            assert_eq!(leave_ops(j, view, &me, SID, limit), want, "{what}");
        }
    }

    /// In a job shared with ElasticJob (`docs/migration-design.md` 3.4): the server node stays
    /// (an ElasticJob instance on the IP that reconnects would register itself DISABLED), and a
    /// persistent marker created since this session's instance node is this session's, a
    /// claim whose reply was lost, deleted as one bound to it would be; one older, an earlier
    /// session's, is not this session's to delete.
    #[test]
    fn a_leaving_instance_in_a_mixed_job_keeps_the_server_node() {
        let me = id("10.0.0.1@-@1");
        let mut m = hosting(&me);
        let node = |path: &str, data: &str, created: u64, owner: Option<SessionId>| {
            crate::registry::Node {
                path: NodePath::new(path).unwrap(),
                data: data.as_bytes().to_vec(),
                stat: Stat {
                    version: Version(0),
                    created: Revision(created),
                    modified: Revision(created),
                    ephemeral_owner: owner,
                    mtime_ms: None,
                },
            }
        };
        let nodes = vec![
            node("/j", "SCRIPT", 1, None),
            node("/j/servers/10.0.0.1", "ENABLED", 2, None),
            node(
                "/j/instances/10.0.0.2@-@2",
                "jobInstanceId: 10.0.0.2@-@2\nserverIp: 10.0.0.2\n",
                3,
                Some(SessionId(9)),
            ),
            node("/j/sharding/1/running", me.as_str(), 4, None),
            node(
                "/j/instances/10.0.0.1@-@1",
                "jobInstanceId: 10.0.0.1@-@1\nlabels: shardjob\nserverIp: 10.0.0.1\n",
                5,
                Some(SID),
            ),
            node("/j/sharding/0/running", me.as_str(), 6, None),
        ];
        let Some((_, j)) = m.jobs.named_mut("j") else {
            panic!("no job");
        };
        j.cache.load(nodes, Some(Revision(6)), &me);
        let view = Arc::clone(j.cache.view());
        assert!(mixed::is_mixed(&view), "10.0.0.2@-@2 is ElasticJob's");
        let p = &j.paths;
        let want = vec![
            TxnOp::Check(Check::Session(SID)),
            TxnOp::Delete {
                path: p.item_running(0),
                expected: Some(Version(0)),
            },
            TxnOp::delete(p.instance(&me)),
        ];
        assert_eq!(leave_ops(j, &view, &me, SID, None), want);
    }
}
