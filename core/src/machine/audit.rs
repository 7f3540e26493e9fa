//! The audit of the machine's wake times, for the simulator and tests: the jobs whose wake
//! comes later than their own decision wants.

#[allow(clippy::wildcard_imports)]
use super::*;

/// A job whose wake comes later than its own decision wants (see [`Machine::late_wakes`]):
/// a bug of the machine's, which would run the job's items late, or never.
///
/// [`Machine::late_wakes`]: super::Machine::late_wakes
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LateWake {
    /// The job.
    pub job: String,
    /// The job's wake (monotonic ms), if any.
    pub wake: Option<Mono>,
    /// When its decision wants it evaluated (monotonic ms; now if it would claim at once).
    pub wanted: Mono,
}

/// Where a [`Machine::late_wakes`] audit left off, so that the next one can skip the jobs
/// that did not change since. Start with the default; keep one per machine.
///
/// [`Machine::late_wakes`]: super::Machine::late_wakes
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditMark {
    /// `Machine::changes` at the last audit.
    pub(crate) changes: u64,
    /// The wall clock's offset at the machine's last input before the last audit.
    pub(crate) clock: Option<i64>,
    /// Jobs the last audit passed over while something was under way for them.
    pub(super) recheck: std::collections::BTreeSet<super::job::JobId>,
}

impl Machine {
    /// A self-check of the machine's wake times, for the simulator and for tests: the jobs that
    /// would claim an item now, or want waking for one, earlier than their wake comes, while
    /// nothing else under way evaluates them again (a request, a load, a clock step not yet
    /// noticed). Such a job runs its items late, or never, unless the safety sweep or a change
    /// in the registry comes by. Empty unless the machine has a bug.
    ///
    /// It takes the claim decision of each job whose wake is not within a second, without
    /// acting on it, but only of the jobs whose view changed or that were decided on since
    /// the audit that left `mark`, or that it passed over while something was under way for
    /// them (all of them when the wall clock moved meanwhile): a decision on a job that did
    /// not change would be the one taken before. Call it now and then with the same mark, not
    /// on every event.
    pub fn late_wakes(&mut self, now: Now, mark: &mut AuditMark) -> Vec<LateWake> {
        let mut late = Vec::new();
        // A step since the last input is for the machine to notice at its next one.
        let stepped = self
            .clock
            .last
            .is_none_or(|before| wall_offset(now).saturating_sub(before).abs() > CLOCK_STEP_MS);
        let Some(sid) = self.session_id() else {
            return late;
        };
        if stepped || self.shutdown.is_some() || !matches!(self.sess.state, Session::Live(_)) {
            return late;
        }
        let since = if mark.clock == self.clock.last {
            mark.changes
        } else {
            0
        };
        let recheck = std::mem::take(&mut mark.recheck);
        mark.changes = self.changes;
        mark.clock = self.clock.last;
        // A wake may come up to this much after the decision's time, as the wall clock drifts
        // (under a step) against the monotonic one between the decision and this check.
        let slack = CLOCK_STEP_MS.unsigned_abs() + 500;
        let me = Arc::clone(&self.me);
        for (id, j) in self.jobs.iter_mut() {
            if j.changed <= since && !recheck.contains(&id) {
                continue;
            }
            // Something under way decides on the job again soon: looked at again next time,
            // in case it does not.
            if j.wake.is_some_and(|w| w <= now.mono.after(slack))
                || j.wait != Wait::Idle
                || self.sess.waiters.contains(&id)
            {
                mark.recheck.insert(id);
                continue;
            }
            if j.phase != Phase::Active || j.leaving.is_some() {
                continue;
            }
            let Some(config) = j.config.clone() else {
                continue;
            };
            let view = Arc::clone(j.cache.view());
            // Only where the decision would come to the items, and claim from this server.
            let standing = Standing::of(j, &view, &me, sid);
            if !standing.enabled || !matches!(standing.gate(&view, &me, &self.opts), Gate::Items) {
                continue;
            }
            // The decision, without acting on it: the planners are pure, and what they would
            // change in the job's bookkeeping is dropped.
            let mut wake = Vec::new();
            let mut seen = j.necessary_seen;
            let necessary = view.necessary.is_some();
            let wait = ms(self.opts.reshard_wait);
            let gate = view.led_by_java() && !planted!(self.opts, GateOpenBesideJava);
            let held = hold_for_reshard(&mut seen, necessary, gate, wait, now, &mut wake);
            // The fire gate as the decision would leave it.
            let (_, fire) = j.gate_after(gate && necessary, &config, now.wall_ms());
            let limit = job_clock_limit(j, &view, &self.opts, now.mono);
            let clock = judge(self.clock.registry, limit) != ClockVerdict::Fine;
            let hold = Hold { held, fire, clock };
            let cx = Ctx {
                me: &me,
                sid,
                opts: &self.opts,
                now,
            };
            let mut memo = std::mem::take(&mut j.fires);
            let decided = claims(j, &view, &config, &cx, hold, &mut memo, &mut wake);
            j.fires = memo;
            let wanted = if decided.action.is_some() {
                Some(now.mono)
            } else {
                wake.into_iter().min()
            };
            if let Some(wanted) = wanted {
                if j.wake.is_none_or(|w| w > wanted.max(now.mono).after(slack)) {
                    late.push(LateWake {
                        job: j.name().to_owned(),
                        wake: j.wake,
                        wanted,
                    });
                }
            }
        }
        late
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::CronExpr;
    use crate::machine::test_support::{WALL, node, now};
    use crate::registry::SessionId;

    const SID: SessionId = SessionId(7);
    const ME: &str = "10.0.0.1@-@1";

    /// A machine of `ME` on a live session, hosting job `j` (two items firing every five
    /// seconds, both its own, last done at +50 s, led by another instance), active at `at`
    /// with this `wake`, changed since any audit.
    fn hosting(at: Now, wake: Option<Mono>) -> Machine {
        let me = InstanceId::new(ME).unwrap();
        let config = JobConfig::new("j", 2).with_cron(CronExpr::parse("0/5 * * * * ?").unwrap());
        let mut m = Machine::new(MachineOptions::new(me.clone()));
        let spec = JobSpec {
            config: config.clone(),
            job_type: "SCRIPT".to_owned(),
        };
        m.add_job(spec, at).unwrap();
        let info = SessionInfo {
            id: SID,
            timeout: std::time::Duration::from_secs(10),
        };
        m.handle_registry_event(RegistryEvent::Session(SessionEvent::Connected(info)), at);
        let done = ItemRecord {
            done: Some(WALL + 50_000),
            run: None,
        };
        let mut nodes = vec![
            node("/j", Vec::new(), None),
            node(&format!("/j/instances/{ME}"), Vec::new(), Some(SID)),
            node(
                "/j/leader/election/instance",
                b"10.0.0.2@-@2".to_vec(),
                None,
            ),
        ];
        for i in 0..2 {
            nodes.push(node(&format!("/j/sharding/{i}/instance"), ME.into(), None));
            nodes.push(node(
                &format!("/j/sharding/{i}/execution"),
                done.to_bytes(),
                None,
            ));
        }
        m.sess.waiters.clear();
        if let Some((_, j)) = m.jobs.named_mut("j") {
            j.cache.load(nodes, Some(Revision(1)), &me);
            j.phase = Phase::Active;
            j.config = Some(Arc::new(config));
            j.wait = Wait::Idle;
            j.wake = wake;
            j.changed = 1;
        }
        m
    }

    /// The audit reports a job due to claim whose wake comes later than a second after the
    /// claim (or never), and passes over one woken within that slack.
    #[test]
    fn a_due_claim_without_a_wake_in_time_is_late() {
        // The fire at +55 s is due at +55.1 s.
        let at = now(55_100);
        let late = |wake: Option<Mono>| {
            vec![LateWake {
                job: "j".to_owned(),
                wake,
                wanted: at.mono,
            }]
        };
        #[rustfmt::skip]
        let cases: [(&str, Option<Mono>, Vec<LateWake>); 5] = [
            ("no wake", None, late(None)),
            ("a wake ten seconds late", Some(at.mono.after(10_000)), late(Some(at.mono.after(10_000)))),
            ("a wake two seconds late", Some(at.mono.after(2_000)), late(Some(at.mono.after(2_000)))),
            ("a wake within the slack", Some(at.mono.after(900)), vec![]),
            ("a wake now", Some(at.mono), vec![]),
        ];
        for (what, wake, want) in cases {
            let mut m = hosting(at, wake);
            let mut mark = AuditMark::default();
            assert_eq!(m.late_wakes(at, &mut mark), want, "{what}");
        }
        // Nothing is due before +54.75 s (the claim ahead): a wake then is in time.
        let early = now(52_000);
        let mut m = hosting(early, Some(Mono(54_750)));
        assert_eq!(m.late_wakes(early, &mut AuditMark::default()), []);
    }
}
