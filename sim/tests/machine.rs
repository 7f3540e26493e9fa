//! Behaviour of the core state machine, driven by hand: several real machines over one
//! in-memory store on virtual time.

use std::collections::BTreeMap;

use shardjob_core::machine::MachineEvent;
use shardjob_core::machine::record::RunKind;
use shardjob_core::{CronExpr, JobConfig};
use shardjob_sim::cluster::Cluster;

fn job(name: &str, cron: &str, total: u32) -> JobConfig {
    let mut c = JobConfig::new(name, total);
    c.cron = Some(CronExpr::parse(cron).unwrap());
    c
}

/// Fires of the 5-second job between two virtual times (ms), as epoch ms.
fn fires(c: &Cluster, from: u64, to: u64, every_ms: u64) -> Vec<i64> {
    let origin = c.wall_origin.timestamp_millis();
    (from / every_ms + 1..=to / every_ms)
        .map(|k| origin + (k * every_ms) as i64)
        .collect()
}

#[test]
fn three_instances_share_items_and_each_fire_runs_once() {
    let mut c = Cluster::new();
    let j = job("pay", "0/5 * * * * ?", 6);
    for id in ["10.0.0.1@-@1", "10.0.0.2@-@2", "10.0.0.3@-@3"] {
        c.add_node(id, &[j.clone()]);
    }
    c.run_until(31_000);
    let owners = c.owners("pay");
    assert_eq!(owners.len(), 6, "{owners:?}");
    let mut load: BTreeMap<&str, usize> = BTreeMap::new();
    for o in owners.values() {
        *load.entry(o.as_str()).or_default() += 1;
    }
    assert_eq!(
        load.values().copied().collect::<Vec<_>>(),
        [2, 2, 2],
        "{owners:?}"
    );
    c.assert_no_overlap();
    // Every fire after the plan settled ran each item exactly once.
    for fire in fires(&c, 1_000, 30_000, 5_000) {
        for item in 0..6 {
            let n = c
                .runs
                .iter()
                .filter(|r| r.item == item && r.fire == fire)
                .count();
            assert_eq!(n, 1, "item {item} fire {fire}: {:#?}", c.runs);
        }
    }
    assert!(c.runs.iter().all(|r| r.kind == RunKind::Scheduled));
}
