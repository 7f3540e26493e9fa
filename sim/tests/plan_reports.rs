//! What a machine reports of its plan ([`MachineEvent::ItemsOwned`],
//! [`MachineEvent::ReshardingPending`]) follows the registry, and is withdrawn when the job
//! stops being hosted: seed 63 of the CI world (`shardjob-sim --seed 63 --instances 3 --jobs 4
//! --hours 0.03`) re-added a job to an instance whose last report, made before the job left,
//! still said a re-shard was pending.

use shardjob_core::machine::MachineEvent;
use shardjob_core::{CronExpr, JobConfig};
use shardjob_sim::cluster::Cluster;

fn last_owned(c: &Cluster, n: usize, job: &str) -> Option<Vec<u32>> {
    c.nodes[n].events.iter().rev().find_map(|(_, e)| match e {
        MachineEvent::ItemsOwned { job: j, items } if j == job => Some(items.clone()),
        _ => None,
    })
}

fn last_pending(c: &Cluster, n: usize, job: &str) -> Option<bool> {
    c.nodes[n].events.iter().rev().find_map(|(_, e)| match e {
        MachineEvent::ReshardingPending { job: j, pending } if j == job => Some(*pending),
        _ => None,
    })
}

#[test]
fn plan_reports_follow_the_registry_and_are_withdrawn_with_the_job() {
    let mut c = Cluster::new();
    let mut j = JobConfig::new("j", 4);
    j.cron = Some(CronExpr::parse("0/5 * * * * ?").unwrap());
    let a = c
        .add_node("10.0.0.1@-@1", std::slice::from_ref(&j))
        .unwrap();
    c.run_until(10_000);
    assert_eq!(last_owned(&c, a, "j"), Some(vec![0, 1, 2, 3]));
    assert_ne!(last_pending(&c, a, "j"), Some(true));

    let b = c
        .add_node("10.0.0.2@-@2", std::slice::from_ref(&j))
        .unwrap();
    c.run_until(20_000);
    let (mut got_a, mut got_b) = (
        last_owned(&c, a, "j").unwrap_or_default(),
        last_owned(&c, b, "j").unwrap_or_default(),
    );
    assert_eq!(got_a.len(), 2, "{got_a:?} {got_b:?}");
    got_a.append(&mut got_b);
    got_a.sort_unstable();
    assert_eq!(got_a, [0, 1, 2, 3]);
    assert_ne!(last_pending(&c, a, "j"), Some(true));
    assert_ne!(last_pending(&c, b, "j"), Some(true));

    c.remove_job(b, "j").unwrap();
    c.run_until(30_000);
    assert_eq!(last_owned(&c, b, "j"), Some(vec![]));
    assert_ne!(last_pending(&c, b, "j"), Some(true));
    assert_eq!(last_owned(&c, a, "j"), Some(vec![0, 1, 2, 3]));
    c.assert_no_overlap();
}
