//! The leader's periodic clean-up of server nodes left behind.

#[allow(clippy::wildcard_imports)]
use crate::machine::*;

/// The leader's periodic clean-up: server nodes left ENABLED by instances that are gone, at
/// most `limit` of them per transaction.
#[allow(clippy::too_many_arguments)]
pub(crate) fn housekeeping(
    lead: &mut LeaderState,
    j: &Job,
    view: &JobView,
    config: &JobConfig,
    me: &InstanceId,
    sid: crate::registry::SessionId,
    limit: Option<usize>,
    now: Now,
    wake: &mut Vec<Mono>,
) -> Option<Action> {
    let interval = u64::from(config.reconcile_interval_minutes).saturating_mul(60_000);
    // Never while the job is shared with ElasticJob (`mixed::may_delete_server`).
    if interval == 0 || !mixed::may_delete_server(view) {
        return None;
    }
    let last = *lead.last_housekeeping.get_or_insert(now.mono);
    if now.mono < last.after(interval) {
        wake.push(last.after(interval));
        return None;
    }
    let live_ips: BTreeSet<&str> = view.instances.iter().map(InstanceId::server_ip).collect();
    let p = &j.paths;
    let mut ops = vec![
        TxnOp::Check(Check::Session(sid)),
        TxnOp::Check(Check::Value(p.leader_instance(), me.as_str().into())),
    ];
    let limit = limit.unwrap_or(usize::MAX);
    let mut units = 0usize;
    let mut last = true;
    for (ip, value) in &view.servers {
        if value.trim() == "ENABLED" && !live_ips.contains(ip.as_str()) {
            if units >= limit {
                last = false;
                break;
            }
            if let Ok(path) = p.server(ip) {
                units += 1;
                // The value as read (blanks around `ENABLED` included): the check is exact.
                ops.push(TxnOp::Check(Check::Value(
                    path.clone(),
                    value.as_bytes().to_vec(),
                )));
                ops.push(TxnOp::delete(path));
            }
        }
    }
    if ops.len() == 2 {
        lead.last_housekeeping = Some(now.mono);
        return None;
    }
    Some(Action::Txn(Purpose::Housekeeping { last, units }, ops))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::test_support::now;
    use crate::registry::SessionId;

    const SID: SessionId = SessionId(7);

    /// The leader's housekeeping comes every `reconcileIntervalMinutes` (counted from the
    /// last one's end; never when 0) and deletes the ENABLED server nodes no live instance is
    /// on, at most `limit` per transaction; an operator's DISABLED stays.
    #[test]
    fn the_housekeeping_deletes_enabled_servers_left_behind_on_time() {
        let me = InstanceId::new("10.0.0.1@-@1").unwrap();
        let mut m = Machine::new(MachineOptions::new(me.clone()));
        let spec = JobSpec {
            config: JobConfig::new("j", 1),
            job_type: "SCRIPT".to_owned(),
        };
        m.add_job(spec, now(0)).unwrap();
        let j = m.jobs.named("j").unwrap();
        let p = &j.paths;
        let mut view = JobView::default();
        view.instances.insert(me.clone());
        view.instances
            .insert(InstanceId::new("10.0.0.2@-@2").unwrap());
        for (ip, value) in [
            ("10.0.0.1", "ENABLED"),
            ("10.0.0.2", "ENABLED"),
            ("10.0.0.5", "ENABLED"),
            ("10.0.0.6", "DISABLED"),
            // Written by another tool, blanks around it: still ENABLED, checked as read.
            ("10.0.0.7", " ENABLED\n"),
        ] {
            view.servers.insert(ip.to_owned(), value.to_owned());
        }
        let gone = |ip: &str| {
            let path = p.server(ip).unwrap();
            let value = if ip == "10.0.0.7" {
                &b" ENABLED\n"[..]
            } else {
                b"ENABLED"
            };
            [
                TxnOp::Check(Check::Value(path.clone(), value.to_vec())),
                TxnOp::delete(path),
            ]
        };
        let head = [
            TxnOp::Check(Check::Session(SID)),
            TxnOp::Check(Check::Value(p.leader_instance(), me.as_str().into())),
        ];
        let txn = |servers: &[&str]| -> Vec<TxnOp> {
            head.iter()
                .cloned()
                .chain(servers.iter().flat_map(|ip| gone(ip)))
                .collect()
        };
        let minute = 60_000;
        #[rustfmt::skip]
        #[allow(clippy::type_complexity)]
        let cases: [(&str, u32, Option<usize>, u64, Option<(bool, usize, Vec<TxnOp>)>, Vec<Mono>); 5] = [
            ("before the interval", 1, None, minute - 1, None, vec![Mono(minute)]),
            ("at the interval", 1, None, minute, Some((true, 2, txn(&["10.0.0.5", "10.0.0.7"]))), vec![]),
            ("later", 1, None, 2 * minute, Some((true, 2, txn(&["10.0.0.5", "10.0.0.7"]))), vec![]),
            ("within the limit", 1, Some(1), minute, Some((false, 1, txn(&["10.0.0.5"]))), vec![]),
            ("an interval of 0: never", 0, None, 10 * minute, None, vec![]),
        ];
        for (what, minutes, limit, at, want, want_wake) in cases {
            let mut config = JobConfig::new("j", 1);
            config.reconcile_interval_minutes = minutes;
            let mut lead = LeaderState {
                last_housekeeping: Some(Mono(0)),
                ..LeaderState::default()
            };
            let mut wake = Vec::new();
            let got = housekeeping(
                &mut lead,
                j,
                &view,
                &config,
                &me,
                SID,
                limit,
                now(at),
                &mut wake,
            );
            let got = got.map(|action| match action {
                Action::Txn(Purpose::Housekeeping { last, units }, ops) => (last, units, ops),
                _ => panic!("{what}: not a housekeeping"),
            });
            assert_eq!(got, want, "{what}");
            assert_eq!(wake, want_wake, "{what}: wake");
        }
        // Never while the job is shared with ElasticJob (`docs/migration-design.md` 3.4).
        let mut mixed = view.clone();
        mixed.java.insert(InstanceId::new("10.0.0.2@-@2").unwrap());
        let mut config = JobConfig::new("j", 1);
        config.reconcile_interval_minutes = 1;
        let mut lead = LeaderState {
            last_housekeeping: Some(Mono(0)),
            ..LeaderState::default()
        };
        let mut wake = Vec::new();
        let got = housekeeping(
            &mut lead,
            j,
            &mixed,
            &config,
            &me,
            SID,
            None,
            now(10 * minute),
            &mut wake,
        );
        assert!(got.is_none() && wake.is_empty(), "mixed: no housekeeping");
    }
}
