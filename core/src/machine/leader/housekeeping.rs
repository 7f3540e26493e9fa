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
    wake: &mut Vec<u64>,
) -> Option<Action> {
    let interval = u64::from(config.reconcile_interval_minutes).saturating_mul(60_000);
    if interval == 0 {
        return None;
    }
    let last = *lead.last_housekeeping.get_or_insert(now.mono);
    if now.mono < last.saturating_add(interval) {
        wake.push(last.saturating_add(interval));
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
                ops.push(TxnOp::Check(Check::Value(
                    path.clone(),
                    b"ENABLED".to_vec(),
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
