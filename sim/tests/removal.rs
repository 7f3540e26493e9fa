//! Items removed in parts (a job's total shrunk under a registry limit on the operations of a
//! transaction): each part waits for the watch to show its own deletions before the next.
//! Found by the worlds of many items (`Shape::LargeJob`): seed 564 of the CI world
//! (`shardjob-sim --seed 564 --instances 3 --jobs 4 --hours 0.03`) shrank a job of some 200
//! items to 4 with one removal per transaction; each part was worked out on a view that still
//! showed the item the previous part had removed, removed it again and failed, so every item
//! cost a failure and a retry's backoff, and items were still left beyond the total at the
//! checks.

use shardjob_core::machine::{MachineEvent, MachineOptions};
use shardjob_core::{CronExpr, InstanceId, JobConfig};
use shardjob_sim::cluster::Cluster;

#[test]
fn items_removed_in_parts_are_removed_once_each_without_a_failure() {
    let mut c = Cluster::new();
    // Watch events come later than replies, as in any registry under load.
    c.latency = 10;
    c.watch_delay = 80;
    // One removed item per transaction (a removal counts as two items).
    c.set_max_txn_ops(Some(26));
    let mut opts = MachineOptions::new(InstanceId::new("0.0.0.0@-@0").unwrap());
    opts.fit_txn_ops(26);
    c.options = Some(opts);
    let mut j = JobConfig::new("big", 40);
    j.cron = Some(CronExpr::parse("0/5 * * * * ?").unwrap());
    for id in ["10.0.0.1@-@1", "10.0.0.2@-@2"] {
        c.add_node(id, std::slice::from_ref(&j)).unwrap();
    }
    c.run_until(30_000);
    assert_eq!(c.owners("big").len(), 40);
    c.operator_edit_config("big", |j| j.sharding_total_count = 2)
        .unwrap();
    c.run_until(60_000);
    let owners = c.owners("big");
    assert_eq!(
        owners.keys().copied().collect::<Vec<_>>(),
        [0, 1],
        "{owners:?}"
    );
    let failed: Vec<String> = c
        .nodes
        .iter()
        .flat_map(|n| &n.events)
        .filter_map(|(t, e)| match e {
            MachineEvent::RegistryFailed { purpose, error, .. } if *purpose == "re-sharding" => {
                Some(format!("+{t} ms: {purpose}: {error}"))
            }
            _ => None,
        })
        .collect();
    assert!(failed.is_empty(), "{failed:#?}");
    c.assert_no_overlap();
}
