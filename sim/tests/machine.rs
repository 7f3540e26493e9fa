//! Behaviour of the core state machine, driven by hand: several real machines over one
//! in-memory store on virtual time (3 s session timeout, 1 ms registry latency).

use std::collections::{BTreeMap, BTreeSet};

use shardjob_core::machine::MachineEvent;
use shardjob_core::machine::record::RunKind;
use shardjob_core::{CronExpr, JobConfig};
use shardjob_sim::cluster::Cluster;

mod support;
use support::options;

fn job(name: &str, cron: &str, total: u32) -> JobConfig {
    let mut c = JobConfig::new(name, total);
    c.cron = Some(CronExpr::parse(cron).unwrap());
    c
}

const A: &str = "10.0.0.1@-@1";
const B: &str = "10.0.0.2@-@2";
const C: &str = "10.0.0.3@-@3";
const D: &str = "10.0.0.4@-@4";

/// Epoch ms of the fire at virtual `ms`.
fn fire_at(c: &Cluster, ms: u64) -> i64 {
    c.wall_origin.timestamp_millis() + ms as i64
}

fn loads(owners: &BTreeMap<u32, String>) -> BTreeMap<String, usize> {
    let mut load = BTreeMap::new();
    for o in owners.values() {
        *load.entry(o.clone()).or_default() += 1;
    }
    load
}

fn leader(c: &Cluster, job: &str) -> Option<String> {
    c.read(&format!("/{job}/leader/election/instance"))
}

#[test]
fn three_instances_share_items_and_each_fire_runs_once() {
    let mut c = Cluster::new();
    let j = job("pay", "0/5 * * * * ?", 6);
    for id in [A, B, C] {
        c.add_node(id, std::slice::from_ref(&j)).unwrap();
    }
    c.run_until(31_000);
    let owners = c.owners("pay");
    assert_eq!(owners.len(), 6, "{owners:?}");
    assert_eq!(
        loads(&owners).into_values().collect::<Vec<_>>(),
        [2, 2, 2],
        "{owners:?}"
    );
    // ElasticJob's order: the registry lists ids in reverse, so C gets items 0 and 1.
    assert_eq!(owners[&0], C);
    assert_eq!(owners[&5], A);
    c.assert_no_overlap();
    for k in 1..=6 {
        let fire = fire_at(&c, k * 5_000);
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
    // Started within a round trip of the fire time.
    assert!(
        c.runs.iter().all(|r| fire_at(&c, r.start) - r.fire <= 2),
        "{:#?}",
        c.runs
    );
}

#[test]
fn registry_traffic_is_two_transactions_per_fire_whatever_the_item_count() {
    for items in [1, 50] {
        let mut c = Cluster::new();
        c.add_node(A, &[job("bulk", "* * * * * ?", items)]).unwrap();
        c.run_until(2_500);
        let before = (c.requests[0], c.transactions[0]);
        c.run_until(12_500);
        let fires = 10;
        assert_eq!(c.transactions[0] - before.1, 2 * fires, "{items} items");
        assert_eq!(
            c.requests[0] - before.0,
            2 * fires,
            "{items} items: no reads per fire"
        );
        assert_eq!(c.runs.iter().filter(|r| r.item == 0).count() as u64, 12);
    }
}

#[test]
fn leader_dies_during_resharding_and_the_next_leader_finishes_it() {
    let mut c = Cluster::new();
    let j = job("pay", "0/5 * * * * ?", 8);
    for id in [A, B, C] {
        c.add_node(id, std::slice::from_ref(&j)).unwrap();
    }
    c.run_until(2_000);
    let old_leader = leader(&c, "pay").unwrap();
    let leader_node = [A, B, C].iter().position(|id| *id == old_leader).unwrap();
    // A fourth instance joins; the leader dies inside the debounce, before it re-shards.
    c.add_node(D, std::slice::from_ref(&j)).unwrap();
    c.run_for(100);
    c.crash(leader_node);
    // Its session expires after 3 s; a new leader is elected at once and re-shards over the
    // three live instances.
    c.run_until(9_000);
    let new_leader = leader(&c, "pay").unwrap();
    assert_ne!(new_leader, old_leader);
    let owners = c.owners("pay");
    assert!(owners.values().all(|o| *o != old_leader), "{owners:?}");
    let mut l: Vec<usize> = loads(&owners).into_values().collect();
    l.sort();
    assert_eq!(l, [2, 3, 3], "{owners:?}");
    c.run_until(21_000);
    c.assert_no_overlap();
    for k in 2..=4 {
        let fire = fire_at(&c, k * 5_000);
        for item in 0..8 {
            let n = c
                .runs
                .iter()
                .filter(|r| r.item == item && r.fire == fire)
                .count();
            assert_eq!(n, 1, "item {item} fire {k}");
        }
    }
}

#[test]
fn partitioned_instance_stops_before_anyone_else_starts_its_items() {
    let mut c = Cluster::new();
    c.duration = Box::new(|_, _, _| 20_000);
    let mut j = job("long", "0 * * * * ?", 4);
    j.failover = true;
    c.add_node(A, std::slice::from_ref(&j)).unwrap();
    c.add_node(B, std::slice::from_ref(&j)).unwrap();
    c.run_until(61_000); // fire at 60 s; runs last 20 s
    let a_items: BTreeSet<u32> = c
        .runs
        .iter()
        .filter(|r| r.node == 0 && r.end.is_none())
        .map(|r| r.item)
        .collect();
    assert_eq!(a_items.len(), 2);
    c.partition(0);
    c.run_until(75_000);
    // A cancelled its runs before its session could expire (3 s after its last contact) ...
    for r in c.runs.iter().filter(|r| r.node == 0) {
        assert!(r.cancelled, "{r:?}");
        assert!(r.end.unwrap() < 61_000 + 3_000, "{r:?}");
    }
    assert!(
        c.nodes[0]
            .events
            .iter()
            .any(|(_, e)| *e == MachineEvent::SessionInDoubt)
    );
    // ... and B took them over only after the expiry, as a failover of the same fire.
    for item in &a_items {
        let taken: Vec<_> = c
            .runs
            .iter()
            .filter(|r| r.node == 1 && r.item == *item)
            .collect();
        assert_eq!(taken.len(), 1, "{item}: {taken:?}");
        assert_eq!(taken[0].kind, RunKind::Failover);
        assert_eq!(taken[0].fire, fire_at(&c, 60_000));
        assert!(taken[0].start >= 61_000 + 3_000, "{:?}", taken[0]);
    }
    c.assert_no_overlap();
    // A heals: it re-registers with a new session and gets items again.
    c.heal(0);
    c.run_until(100_000);
    let owners = c.owners("long");
    assert_eq!(loads(&owners).len(), 2, "{owners:?}");
}

#[test]
fn failover_of_five_running_items_to_two_survivors_at_once() {
    let mut c = Cluster::new();
    c.duration = Box::new(|_, _, _| 10_000);
    let mut j = job("batch", "0/30 * * * * ?", 15);
    j.failover = true;
    for id in [A, B, C] {
        c.add_node(id, std::slice::from_ref(&j)).unwrap();
    }
    c.run_until(31_000);
    let victim_items: BTreeSet<u32> = c
        .runs
        .iter()
        .filter(|r| r.node == 2 && r.end.is_none())
        .map(|r| r.item)
        .collect();
    assert_eq!(victim_items.len(), 5);
    c.crash(2);
    c.run_until(40_000);
    let taken: Vec<_> = c
        .runs
        .iter()
        .filter(|r| r.kind == RunKind::Failover)
        .collect();
    assert_eq!(taken.len(), 5, "{taken:#?}");
    assert_eq!(
        taken.iter().map(|r| r.item).collect::<BTreeSet<_>>(),
        victim_items
    );
    let by_node: BTreeSet<usize> = taken.iter().map(|r| r.node).collect();
    assert_eq!(by_node.len(), 2, "both survivors take a share");
    let first = taken.iter().map(|r| r.start).min().unwrap();
    let last = taken.iter().map(|r| r.start).max().unwrap();
    assert!(
        first >= 33_000 && last - first <= 5,
        "all at once after expiry: {taken:#?}"
    );
    assert!(taken.iter().all(|r| r.fire == fire_at(&c, 30_000)));
    // Finished items of the dead instance are not run again: only the 5 running ones.
    c.run_until(59_000);
    assert_eq!(
        c.runs
            .iter()
            .filter(|r| r.fire == fire_at(&c, 30_000))
            .count(),
        15 + 5
    );
    c.assert_no_overlap();
}

#[test]
fn misfires_collapse_into_one_run_right_after() {
    let mut c = Cluster::new();
    c.duration = Box::new(|_, _, _| 3_500);
    c.add_node(A, &[job("slow", "* * * * * ?", 1)]).unwrap();
    c.run_until(9_000);
    let runs: Vec<(i64, RunKind, u64)> = c
        .runs
        .iter()
        .map(|r| (r.fire - fire_at(&c, 0), r.kind, r.start))
        .collect();
    // Fire 1 runs until 4.5 s; fires 2, 3, 4 come meanwhile and collapse into fire 4, which
    // runs at once; then fires 5..8 collapse into 8.
    // Claimed ahead, the first run starts at its fire to the millisecond.
    assert_eq!(runs[0], (1_000, RunKind::Scheduled, 1_000));
    assert_eq!(runs[1].0, 4_000);
    assert_eq!(runs[1].1, RunKind::Misfire);
    assert!(runs[1].2 <= 4_501 + 2, "{runs:?}");
    assert_eq!(runs[2].0, 8_000);
    assert_eq!(runs.len(), 3, "{runs:?}");

    // With misfire off, missed fires are dropped: the next run is the next fire on time.
    let mut c = Cluster::new();
    c.duration = Box::new(|_, _, _| 3_500);
    let mut j = job("slow", "* * * * * ?", 1);
    j.misfire = false;
    c.add_node(A, &[j]).unwrap();
    c.run_until(9_000);
    let runs: Vec<(i64, RunKind)> = c
        .runs
        .iter()
        .map(|r| (r.fire - fire_at(&c, 0), r.kind))
        .collect();
    assert_eq!(
        runs,
        [(1_000, RunKind::Scheduled), (5_000, RunKind::Scheduled)]
    );
}

#[test]
fn trigger_while_running_is_queued() {
    let mut c = Cluster::new();
    c.duration = Box::new(|_, _, _| 2_000);
    c.add_node(A, &[job("report", "0 0 * * * ?", 2)]).unwrap();
    c.run_until(500);
    c.trigger(0, "report");
    c.run_until(1_000);
    assert_eq!(c.runs.len(), 2);
    assert!(
        c.runs
            .iter()
            .all(|r| r.kind == RunKind::Trigger && r.end.is_none())
    );
    // Triggered again while running: the second run waits for the first.
    c.trigger(0, "report");
    c.run_until(5_000);
    assert_eq!(c.runs.len(), 4, "{:#?}", c.runs);
    assert!(c.runs[2].start >= c.runs[0].end.unwrap());
    // A trigger node written by an operator (ElasticJob's trigger API) works too, and is
    // consumed.
    c.operator_write(&format!("/report/trigger/{A}"), b"")
        .unwrap();
    c.run_until(8_000);
    assert_eq!(c.runs.len(), 6);
    assert!(!c.exists(&format!("/report/trigger/{A}")));
    c.assert_no_overlap();
}

#[test]
fn session_expiry_is_not_shutdown() {
    let mut c = Cluster::new();
    c.add_node(A, &[job("tick", "* * * * * ?", 2)]).unwrap();
    c.run_until(2_500);
    let old = c.nodes[0].session.unwrap();
    let now = std::time::Duration::from_millis(c.now);
    assert!(c.store.expire_session(old, now));
    c.run_until(6_500);
    let new = c.nodes[0].session.unwrap();
    assert_ne!(old, new);
    assert!(
        c.nodes[0]
            .events
            .iter()
            .any(|(_, e)| *e == MachineEvent::SessionLost)
    );
    assert!(
        c.exists(&format!("/tick/instances/{A}")),
        "registered again"
    );
    // Fires keep running after the expiry.
    assert!(c.runs.iter().any(|r| r.start > 4_000));
    assert!(!c.nodes[0].machine.is_stopped());
    c.assert_no_overlap();
}

#[test]
fn an_operator_shutdown_stops_the_job_here_and_its_items_move_at_once() {
    let mut c = Cluster::new();
    c.duration = Box::new(|job, _, _| if job == "pay" { 5_000 } else { 100 });
    let j = job("pay", "* * * * * ?", 4);
    let other = job("other", "* * * * * ?", 1);
    c.add_node(A, &[j.clone(), other.clone()]).unwrap();
    c.add_node(B, std::slice::from_ref(&j)).unwrap();
    c.run_until(3_300);
    let session = c.nodes[0].session;
    let a_items: Vec<u32> = c
        .owners("pay")
        .into_iter()
        .filter(|(_, o)| o == A)
        .map(|(i, _)| i)
        .collect();
    assert!(!a_items.is_empty());
    assert!(!c.nodes[0].machine.running_items("pay").is_empty());
    // ElasticJob's `shutdown` operation: the instance node deleted, the session alive.
    c.operator_shutdown(0, "pay").unwrap();
    let at = c.now;
    c.run_until(at + 300);
    let events: Vec<&MachineEvent> = c.nodes[0]
        .events
        .iter()
        .filter(|(t, _)| *t >= at)
        .map(|(_, e)| e)
        .collect();
    assert!(
        events.contains(&&MachineEvent::OperatorShutdown { job: "pay".into() }),
        "{events:?}"
    );
    assert!(events.contains(&&MachineEvent::JobLeft { job: "pay".into() }));
    // Not a session loss: the session lives on, and the other job with it.
    assert_eq!(c.nodes[0].session, session);
    assert!(!events.contains(&&MachineEvent::SessionLost));
    assert!(c.nodes[0].machine.job_names().eq(["other"]));
    // Its running items were cancelled at once (not after the 5 s run), and moved.
    assert!(
        c.runs
            .iter()
            .filter(|r| r.node == 0 && r.job == "pay" && r.start < at)
            .all(|r| r.end.is_some_and(|e| e < at + 300))
    );
    c.run_until(at + 1_500);
    let owners = c.owners("pay");
    assert!(owners.values().all(|o| o == B), "{owners:?}");
    assert!(
        !c.exists(&format!("/pay/instances/{A}")),
        "not registered again"
    );
    // Within a second B runs what A had (a failover of the cancelled runs, or the next fire).
    for item in &a_items {
        assert!(
            c.runs
                .iter()
                .any(|r| r.node == 1 && r.item == *item && r.start > at && r.start < at + 1_500),
            "item {item} did not run on B within 1.5 s"
        );
    }
    c.run_until(at + 6_000);
    assert!(
        !c.runs
            .iter()
            .any(|r| r.node == 0 && r.job == "pay" && r.start > at),
        "A started pay again"
    );
    assert!(
        c.runs
            .iter()
            .any(|r| r.node == 0 && r.job == "other" && r.start > at + 5_000)
    );
    assert!(c.shutdown_runs.is_empty());
    // Taken back (as a restarted process would): it registers and runs again.
    c.add_job(0, &j).unwrap();
    c.run_until(at + 20_000);
    assert!(c.exists(&format!("/pay/instances/{A}")));
    assert!(
        c.runs
            .iter()
            .any(|r| r.node == 0 && r.job == "pay" && r.start > at + 6_000)
    );
    c.assert_no_overlap();
}

#[test]
fn a_deletion_of_the_instance_node_by_the_session_s_end_is_not_a_shutdown() {
    // The session expires while the instance is cut off: the registry deletes its node, and
    // the instance registers again in a new session, whatever order it learns the two in.
    let mut c = Cluster::new();
    c.add_node(A, &[job("tick", "* * * * * ?", 2)]).unwrap();
    c.run_until(2_500);
    let old = c.nodes[0].session.unwrap();
    c.partition(0);
    c.run_until(7_000);
    c.heal(0);
    c.run_until(12_000);
    assert_ne!(c.nodes[0].session, Some(old));
    assert!(
        c.exists(&format!("/tick/instances/{A}")),
        "registered again"
    );
    assert!(
        !c.nodes[0]
            .events
            .iter()
            .any(|(_, e)| matches!(e, MachineEvent::OperatorShutdown { .. }))
    );
    assert!(c.runs.iter().any(|r| r.start > 10_000));
}

#[test]
fn graceful_leave_hands_over_without_waiting_for_a_timeout() {
    let mut c = Cluster::new();
    c.duration = Box::new(|_, _, _| 300);
    let j = job("pay", "* * * * * ?", 4);
    c.add_node(A, std::slice::from_ref(&j)).unwrap();
    c.add_node(B, std::slice::from_ref(&j)).unwrap();
    c.run_until(3_100);
    let leaver = [A, B]
        .iter()
        .position(|id| Some(id.to_string()) == leader(&c, "pay"))
        .unwrap();
    let stayer = 1 - leaver;
    c.shutdown(leaver);
    c.run_until(3_800);
    assert!(c.nodes[leaver].machine.is_stopped());
    // The running items finished (not cancelled), the leader node and the instance node went
    // at once, and the other instance owns everything well before a session timeout (3 s).
    assert!(c.runs.iter().all(|r| !r.cancelled));
    let ids = [A, B];
    assert_eq!(leader(&c, "pay").as_deref(), Some(ids[stayer]));
    let owners = c.owners("pay");
    assert!(owners.values().all(|o| o == ids[stayer]), "{owners:?}");
    assert!(!c.exists(&format!("/pay/instances/{}", ids[leaver])));
    // Its ENABLED server node is gone with it: nothing piles up.
    assert!(!c.exists("/pay/servers/10.0.0.1") || leaver == 1);
    c.run_until(6_000);
    for k in 4..=5 {
        let n = c
            .runs
            .iter()
            .filter(|r| r.fire == fire_at(&c, k * 1_000))
            .count();
        assert_eq!(n, 4, "fire {k}");
    }
}

#[test]
fn bad_configuration_written_into_the_registry_stops_nothing() {
    let mut c = Cluster::new();
    c.add_node(
        A,
        &[
            job("good", "* * * * * ?", 1),
            job("other", "* * * * * ?", 1),
        ],
    )
    .unwrap();
    c.run_until(2_500);
    let mut yaml = c.read("/good/config").unwrap();
    yaml = yaml
        .replace("cron: '* * * * * ?'", "cron: 0 0 12 * * *")
        .replace("cron: '*", "cron: 0 0 12 * * *");
    assert!(yaml.contains("0 0 12 * * *"), "{yaml}");
    c.operator_write("/good/config", yaml.as_bytes()).unwrap();
    // A corrupt execution record of the other job is reported and overwritten, not fatal.
    c.operator_write("/other/sharding/0/execution", b"{not json")
        .unwrap();
    c.run_until(5_500);
    let events: Vec<&MachineEvent> = c.nodes[0].events.iter().map(|(_, e)| e).collect();
    assert!(
        events
            .iter()
            .any(|e| matches!(e, MachineEvent::ConfigInvalid { job, .. } if job == "good")),
        "{events:#?}"
    );
    assert!(
        events
            .iter()
            .any(|e| matches!(e, MachineEvent::CorruptNode { .. }))
    );
    // Both jobs keep firing: "good" on its last good configuration.
    for name in ["good", "other"] {
        assert!(c.runs_of(name).iter().any(|r| r.start > 4_000), "{name}");
    }
    // Fixing the node is picked up without a restart.
    c.operator_write(
        "/good/config",
        c.read("/good/config")
            .unwrap()
            .replace("0 0 12 * * *", "0/2 * * * * ?")
            .as_bytes(),
    )
    .unwrap();
    c.run_until(12_500);
    let late: Vec<i64> = c
        .runs_of("good")
        .iter()
        .filter(|r| r.start > 6_000)
        .map(|r| (r.fire - fire_at(&c, 0)) / 1000)
        .collect();
    assert!(late.iter().all(|s| s % 2 == 0), "{late:?}");
}

#[test]
fn disabling_a_server_moves_its_items_and_survives_its_restart() {
    let mut c = Cluster::new();
    let j = job("pay", "* * * * * ?", 4);
    c.add_node(A, std::slice::from_ref(&j)).unwrap();
    c.add_node(B, std::slice::from_ref(&j)).unwrap();
    c.run_until(2_500);
    assert_eq!(loads(&c.owners("pay")).len(), 2);
    c.operator_write("/pay/servers/10.0.0.1", b"DISABLED")
        .unwrap();
    c.run_until(4_500);
    let owners = c.owners("pay");
    assert!(owners.values().all(|o| o == B), "{owners:?}");
    assert!(
        c.runs
            .iter()
            .filter(|r| r.start > 3_500)
            .all(|r| r.node == 1)
    );
    // The operator's DISABLED is not overwritten when the instance restarts.
    c.shutdown(0);
    c.run_until(5_000);
    c.add_node("10.0.0.1@-@9", std::slice::from_ref(&j))
        .unwrap();
    c.run_until(7_000);
    assert_eq!(c.read("/pay/servers/10.0.0.1").as_deref(), Some("DISABLED"));
    assert!(c.owners("pay").values().all(|o| o == B));
    // Enabling it gives it items again.
    c.operator_write("/pay/servers/10.0.0.1", b"ENABLED")
        .unwrap();
    c.run_until(9_000);
    assert_eq!(loads(&c.owners("pay")).len(), 2, "{:?}", c.owners("pay"));
    c.assert_no_overlap();
}

#[test]
fn shrinking_the_total_count_cleans_the_items_that_are_gone() {
    let mut c = Cluster::new();
    c.add_node(A, &[job("pay", "* * * * * ?", 6)]).unwrap();
    c.add_node(B, &[job("pay", "* * * * * ?", 6)]).unwrap();
    c.run_until(2_500);
    assert!(c.exists("/pay/sharding/5/execution"));
    c.operator_edit_config("pay", |j| j.sharding_total_count = 3)
        .unwrap();
    c.run_until(5_500);
    assert_eq!(
        c.owners("pay").keys().copied().collect::<Vec<_>>(),
        [0, 1, 2]
    );
    for item in 3..6 {
        assert!(
            !c.exists(&format!("/pay/sharding/{item}")),
            "item {item} left behind"
        );
    }
    assert!(
        c.runs
            .iter()
            .filter(|r| r.start > 4_000)
            .all(|r| r.item < 3)
    );
    // Growing it again adds items.
    c.operator_edit_config("pay", |j| j.sharding_total_count = 5)
        .unwrap();
    c.run_until(8_500);
    assert_eq!(c.owners("pay").len(), 5);
    assert_eq!(
        c.runs
            .iter()
            .filter(|r| r.fire == fire_at(&c, 8_000))
            .count(),
        5
    );
}

#[test]
fn an_item_removed_while_it_runs_keeps_its_marker_until_the_run_ends() {
    // Items 3..5 run for a minute; the total shrinks to 3 under them, then grows back to 6.
    // Before, the leader removed the running items after its re-shard wait, markers and all,
    // and the grown-back items started again while the old runs went on (found by the
    // simulator at seed 9063755).
    let mut c = Cluster::new();
    c.duration = Box::new(|_, item, _| if item >= 3 { 60_000 } else { 100 });
    let j = job("pay", "0/5 * * * * ?", 6);
    c.add_node(A, std::slice::from_ref(&j)).unwrap();
    c.add_node(B, std::slice::from_ref(&j)).unwrap();
    c.run_until(6_000);
    let total = |c: &mut Cluster, to: u32| {
        c.operator_edit_config("pay", |j| j.sharding_total_count = to)
            .unwrap();
    };
    total(&mut c, 3);
    c.run_until(45_000);
    // The removed items still run: their nodes stay, markers and all.
    for item in 3..6 {
        assert!(
            c.exists(&format!("/pay/sharding/{item}/running")),
            "item {item} lost its marker"
        );
    }
    // The items that remain were not held meanwhile.
    for item in 0..3 {
        let fires = c
            .runs
            .iter()
            .filter(|r| r.item == item && r.fire > fire_at(&c, 6_000))
            .count();
        assert!(fires >= 7, "item {item} ran {fires} fires after the shrink");
    }
    total(&mut c, 6);
    c.run_until(80_000);
    c.assert_no_overlap();
    // The grown-back items wait for the old runs (until 65 s), then run again.
    for item in 3..6 {
        let starts: Vec<u64> = c
            .runs
            .iter()
            .filter(|r| r.item == item && r.start > 6_000)
            .map(|r| r.start)
            .collect();
        assert!(
            starts.iter().all(|s| *s >= 65_000),
            "item {item}: {starts:?}"
        );
        assert!(!starts.is_empty(), "item {item} never ran again");
    }
    // Shrunk again once the runs are short: removed at once.
    c.duration = Box::new(|_, _, _| 100);
    c.run_until(130_000);
    total(&mut c, 3);
    c.run_until(140_000);
    for item in 3..6 {
        assert!(
            !c.exists(&format!("/pay/sharding/{item}")),
            "item {item} left behind"
        );
    }
}

#[test]
fn items_are_claimed_ahead_and_start_at_the_fire() {
    let mut c = Cluster::new();
    c.duration = Box::new(|_, _, _| 300);
    c.add_node(A, &[job("tick", "0/5 * * * * ?", 2)]).unwrap();
    // 250 ms before the fire (the default `claim_ahead`) the items are claimed: their
    // running markers exist, nothing runs yet.
    c.run_until(4_900);
    assert!(c.exists("/tick/sharding/0/running"));
    assert!(c.exists("/tick/sharding/1/running"));
    assert!(c.runs.is_empty());
    c.run_until(5_100);
    let starts: Vec<(u32, u64, RunKind)> =
        c.runs.iter().map(|r| (r.item, r.start, r.kind)).collect();
    assert_eq!(
        starts,
        [
            (0, 5_000, RunKind::Scheduled),
            (1, 5_000, RunKind::Scheduled)
        ]
    );
}

#[test]
fn a_claim_ahead_disabled_before_its_fire_is_given_back_not_run() {
    let mut c = Cluster::new();
    c.duration = Box::new(|_, _, _| 300);
    c.add_node(A, &[job("tick", "0/5 * * * * ?", 1)]).unwrap();
    c.run_until(4_900);
    assert!(c.exists("/tick/sharding/0/running"));
    c.operator_write("/tick/sharding/0/disabled", b"").unwrap();
    c.run_until(6_000);
    assert!(c.runs.is_empty(), "{:?}", c.runs);
    assert!(
        !c.exists("/tick/sharding/0/running"),
        "the claim is given back"
    );
    // The record is as before the claim: the fire at 5 s was not run, and counts as not done.
    let record = c.read("/tick/sharding/0/execution").unwrap_or_default();
    assert!(
        !record.contains(&fire_at(&c, 5_000).to_string()),
        "{record}"
    );
    assert!(!record.contains("\"run\""), "{record}");
    // Enabled again: the missed fire runs at once (misfire), then the schedule goes on.
    c.operator_delete("/tick/sharding/0/disabled").unwrap();
    c.run_until(10_500);
    let runs: Vec<(i64, RunKind)> = c
        .runs
        .iter()
        .map(|r| (r.fire - fire_at(&c, 0), r.kind))
        .collect();
    assert_eq!(
        runs,
        [(5_000, RunKind::Misfire), (10_000, RunKind::Scheduled)]
    );
}

#[test]
fn a_graceful_leave_gives_back_claims_ahead_at_once() {
    let mut c = Cluster::new();
    c.duration = Box::new(|_, _, _| 300);
    let j = job("tick", "0/5 * * * * ?", 2);
    c.add_node(A, std::slice::from_ref(&j)).unwrap();
    c.add_node(B, std::slice::from_ref(&j)).unwrap();
    c.run_until(4_850);
    assert!(c.exists("/tick/sharding/0/running") && c.exists("/tick/sharding/1/running"));
    c.shutdown(0);
    // B takes A's item and runs the 5 s fire of both items, once each.
    c.run_until(6_000);
    let mut fires: Vec<(u32, i64, String)> = c
        .runs
        .iter()
        .map(|r| {
            (
                r.item,
                r.fire - fire_at(&c, 0),
                c.nodes[r.node].id.to_string(),
            )
        })
        .collect();
    fires.sort();
    assert_eq!(
        fires,
        [(0, 5_000, B.to_owned()), (1, 5_000, B.to_owned())],
        "{fires:?}"
    );
    c.assert_no_overlap();
}

/// A cluster whose nodes announce their claims ahead, as the runtime's do.
fn preparing() -> Cluster {
    let mut c = Cluster::new();
    let Ok(id) = shardjob_core::InstanceId::new(A) else {
        panic!("bad instance id");
    };
    let mut opts = shardjob_core::machine::MachineOptions::new(id);
    opts.prepare_ahead = true;
    c.options = Some(opts);
    c.duration = Box::new(|_, _, _| 300);
    c
}

#[test]
fn a_claim_ahead_is_prepared_then_started_by_its_id() {
    let mut c = preparing();
    c.add_node(A, &[job("tick", "0/5 * * * * ?", 2)]).unwrap();
    c.run_until(4_900);
    // One execution of both items, announced at the claim; nothing runs yet.
    assert_eq!(c.prepared, (1, 0));
    assert!(c.runs.is_empty());
    c.run_until(5_100);
    let starts: Vec<(u32, u64)> = c.runs.iter().map(|r| (r.item, r.start)).collect();
    assert_eq!(starts, [(0, 5_000), (1, 5_000)]);
    c.run_until(20_100);
    // Every fire prepared once, then started by its id, none discarded.
    assert_eq!(c.prepared, (4, 0));
    assert!(c.protocol_errors.is_empty(), "{:?}", c.protocol_errors);
}

/// A claim prepared ahead, then an operator's write of `path` before the fire: the run is
/// discarded, and never runs.
fn assert_discarded_after(path: &str, data: &[u8]) {
    let mut c = preparing();
    c.add_node(A, &[job("tick", "0/5 * * * * ?", 1)]).unwrap();
    c.run_until(4_900);
    assert_eq!(c.prepared, (1, 0));
    c.operator_write(path, data).unwrap();
    c.run_until(6_000);
    assert!(c.runs.is_empty(), "{:?}", c.runs);
    assert_eq!(c.prepared, (1, 1));
    assert!(c.protocol_errors.is_empty(), "{:?}", c.protocol_errors);
}

#[test]
fn a_prepared_claim_disabled_before_its_fire_is_discarded_not_run() {
    assert_discarded_after("/tick/sharding/0/disabled", b"");
}

#[test]
fn a_prepared_claim_whose_server_is_disabled_before_its_fire_is_discarded_not_run() {
    assert_discarded_after("/tick/servers/10.0.0.1", b"DISABLED");
}

#[test]
fn a_graceful_leave_discards_its_prepared_claims() {
    let mut c = preparing();
    let j = job("tick", "0/5 * * * * ?", 2);
    c.add_node(A, std::slice::from_ref(&j)).unwrap();
    c.add_node(B, std::slice::from_ref(&j)).unwrap();
    c.run_until(4_850);
    assert_eq!(c.prepared, (2, 0));
    c.shutdown(0);
    c.run_until(6_000);
    // A discards its claim; B prepares A's item too and runs both at the fire.
    assert_eq!(c.prepared.1, 1);
    let mut fires: Vec<(u32, String)> = c
        .runs
        .iter()
        .map(|r| (r.item, c.nodes[r.node].id.to_string()))
        .collect();
    fires.sort();
    assert_eq!(fires, [(0, B.to_owned()), (1, B.to_owned())]);
    assert!(c.protocol_errors.is_empty(), "{:?}", c.protocol_errors);
    c.assert_no_overlap();
}

// ----- registries that limit the operations of a transaction (etcd's --max-txn-ops) -----

/// etcd-like compares per transaction allowed in these tests: about 5 claimed items.
const SMALL_LIMIT: usize = 40;

fn splits(c: &Cluster) -> usize {
    c.nodes
        .iter()
        .flat_map(|n| n.events.iter())
        .filter(|(_, e)| matches!(e, MachineEvent::TxnSplit { .. }))
        .count()
}

fn assert_each_item_once(c: &Cluster, job: &str, items: u32, fire: i64) {
    for item in 0..items {
        let n = c
            .runs
            .iter()
            .filter(|r| r.job == job && r.item == item && r.fire == fire)
            .count();
        assert_eq!(n, 1, "item {item} of fire {fire} ran {n} times");
    }
}

#[test]
fn a_hundred_items_run_under_a_registry_limit_split_on_the_fly() {
    let mut c = Cluster::new();
    c.set_max_txn_ops(Some(SMALL_LIMIT));
    let j = job("big", "0/5 * * * * ?", 100);
    for id in [A, B, C] {
        c.add_node(id, std::slice::from_ref(&j)).unwrap();
    }
    c.run_until(31_000);
    let owners = c.owners("big");
    assert_eq!(owners.len(), 100, "{owners:?}");
    let mut l: Vec<usize> = loads(&owners).into_values().collect();
    l.sort();
    assert_eq!(l, [33, 33, 34]);
    assert!(!c.exists("/big/leader/sharding/necessary"));
    // The machines learned the limit from the registry's refusals.
    assert!(splits(&c) > 0);
    for k in 1..=6 {
        assert_each_item_once(&c, "big", 100, fire_at(&c, k * 5_000));
    }
    assert!(c.runs.iter().all(|r| r.kind == RunKind::Scheduled));
    assert!(
        c.runs
            .iter()
            .all(|r| r.end.is_none() || r.end_committed.is_some())
    );
    // Claimed ahead in parts, all started at the fire.
    assert!(
        c.runs.iter().all(|r| fire_at(&c, r.start) - r.fire <= 2),
        "{:#?}",
        c.runs
            .iter()
            .filter(|r| fire_at(&c, r.start) - r.fire > 2)
            .collect::<Vec<_>>()
    );
    c.assert_no_overlap();
}

#[test]
fn a_limit_given_in_the_options_is_never_exceeded() {
    let mut c = Cluster::new();
    c.set_max_txn_ops(Some(SMALL_LIMIT));
    let mut opts = shardjob_core::machine::MachineOptions::new(A.parse().unwrap());
    opts.fit_txn_ops(SMALL_LIMIT);
    c.options = Some(opts);
    let j = job("big", "0/5 * * * * ?", 100);
    for id in [A, B] {
        c.add_node(id, std::slice::from_ref(&j)).unwrap();
    }
    c.run_until(21_000);
    assert_eq!(c.owners("big").len(), 100);
    assert_eq!(splits(&c), 0, "no transaction was refused");
    let refused = c
        .nodes
        .iter()
        .flat_map(|n| n.events.iter())
        .filter(|(_, e)| matches!(e, MachineEvent::RegistryFailed { .. }))
        .count();
    assert_eq!(refused, 0);
    for k in 1..=4 {
        assert_each_item_once(&c, "big", 100, fire_at(&c, k * 5_000));
    }
    c.assert_no_overlap();
}

#[test]
fn without_a_limit_a_large_fire_stays_two_transactions() {
    // The hint of a registry with no limit changes nothing (see also
    // registry_traffic_is_two_transactions_per_fire_whatever_the_item_count).
    let mut c = Cluster::new();
    c.set_max_txn_ops(None);
    c.add_node(A, &[job("bulk", "* * * * * ?", 200)]).unwrap();
    c.run_until(2_500);
    let before = c.transactions[0];
    c.run_until(12_500);
    assert_eq!(c.transactions[0] - before, 20);
}

#[test]
fn failover_of_fifty_running_items_under_a_registry_limit() {
    let mut c = Cluster::new();
    c.set_max_txn_ops(Some(SMALL_LIMIT));
    c.duration = Box::new(|_, _, _| 10_000);
    let mut j = job("batch", "0/30 * * * * ?", 100);
    j.failover = true;
    for id in [A, B] {
        c.add_node(id, std::slice::from_ref(&j)).unwrap();
    }
    c.run_until(31_000);
    let victim_items: BTreeSet<u32> = c
        .runs
        .iter()
        .filter(|r| r.node == 1 && r.end.is_none())
        .map(|r| r.item)
        .collect();
    assert_eq!(victim_items.len(), 50);
    c.crash(1);
    c.run_until(45_000);
    let taken: Vec<_> = c
        .runs
        .iter()
        .filter(|r| r.kind == RunKind::Failover)
        .collect();
    assert_eq!(
        taken.iter().map(|r| r.item).collect::<BTreeSet<_>>(),
        victim_items
    );
    assert_eq!(taken.len(), 50, "each once");
    assert!(taken.iter().all(|r| r.node == 0));
    assert!(taken.iter().all(|r| r.fire == fire_at(&c, 30_000)));
    c.run_until(59_000);
    assert_eq!(
        c.runs
            .iter()
            .filter(|r| r.fire == fire_at(&c, 30_000))
            .count(),
        100 + 50
    );
    // The survivor owns everything after the re-shard, and runs the next fire fully.
    assert_eq!(c.owners("batch").values().filter(|o| *o == A).count(), 100);
    c.run_until(71_000);
    assert_each_item_once(&c, "batch", 100, fire_at(&c, 60_000));
    c.assert_no_overlap();
}

#[test]
fn shrinking_and_growing_a_large_job_under_a_registry_limit() {
    let mut c = Cluster::new();
    c.set_max_txn_ops(Some(SMALL_LIMIT));
    let j = job("pay", "* * * * * ?", 60);
    c.add_node(A, std::slice::from_ref(&j)).unwrap();
    c.add_node(B, std::slice::from_ref(&j)).unwrap();
    c.run_until(2_500);
    assert_eq!(c.owners("pay").len(), 60);
    c.operator_edit_config("pay", |j| j.sharding_total_count = 10)
        .unwrap();
    c.run_until(6_500);
    assert_eq!(
        c.owners("pay").keys().copied().collect::<Vec<_>>(),
        (0..10).collect::<Vec<_>>()
    );
    for item in 10..60 {
        assert!(
            !c.exists(&format!("/pay/sharding/{item}")),
            "item {item} left behind"
        );
    }
    assert!(!c.exists("/pay/leader/sharding/necessary"));
    assert_each_item_once(&c, "pay", 10, fire_at(&c, 6_000));
    c.operator_edit_config("pay", |j| j.sharding_total_count = 80)
        .unwrap();
    c.run_until(10_500);
    let owners = c.owners("pay");
    assert_eq!(owners.len(), 80);
    assert_eq!(loads(&owners).into_values().collect::<Vec<_>>(), [40, 40]);
    assert_each_item_once(&c, "pay", 80, fire_at(&c, 10_000));
    c.assert_no_overlap();
}

#[test]
fn a_trigger_of_many_items_under_a_registry_limit_runs_each_once() {
    let mut c = Cluster::new();
    c.set_max_txn_ops(Some(SMALL_LIMIT));
    c.add_node(A, &[job("ops", "0 0 0 1 1 ? 2099", 30)])
        .unwrap();
    c.run_until(2_000);
    c.trigger(0, "ops");
    c.run_until(4_000);
    let runs: Vec<_> = c.runs.iter().filter(|r| r.job == "ops").collect();
    assert_eq!(runs.len(), 30, "{runs:#?}");
    assert!(runs.iter().all(|r| r.kind == RunKind::Trigger));
    assert_eq!(
        runs.iter().map(|r| r.item).collect::<BTreeSet<_>>().len(),
        30
    );
    assert_eq!(
        runs.iter().map(|r| r.fire).collect::<BTreeSet<_>>().len(),
        1
    );
    // A second trigger after the first one ran runs everything again, once.
    c.trigger(0, "ops");
    c.run_until(6_000);
    assert_eq!(c.runs.iter().filter(|r| r.job == "ops").count(), 60);
}

#[test]
fn a_trigger_run_that_dies_moves_as_a_trigger_and_never_counts_as_a_fire() {
    let mut c = Cluster::new();
    c.duration = Box::new(|_, _, _| 5_000);
    let mut j = job("report", "0 0 0 1 1 ? 2099", 2);
    j.failover = true;
    c.add_node(A, std::slice::from_ref(&j)).unwrap();
    c.add_node(B, std::slice::from_ref(&j)).unwrap();
    c.run_until(1_000);
    let a_item = c
        .owners("report")
        .into_iter()
        .find(|(_, o)| o == A)
        .map(|(i, _)| i)
        .expect("A owns an item");
    let path = format!("/report/sharding/{a_item}/execution");
    let before = c.read(&path).unwrap_or_default();
    c.trigger(0, "report");
    c.run_until(1_500);
    c.crash(0);
    c.run_until(12_000);
    let moved: Vec<(String, u32, RunKind)> = c
        .runs
        .iter()
        .filter(|r| r.item == a_item)
        .map(|r| (c.nodes[r.node].id.to_string(), r.item, r.kind))
        .collect();
    assert_eq!(
        moved,
        [
            (A.to_owned(), a_item, RunKind::Trigger),
            (B.to_owned(), a_item, RunKind::Trigger)
        ]
    );
    // The trigger's time was not recorded as a done fire: the record is as before.
    assert_eq!(c.read(&path).unwrap_or_default(), before);
}

#[test]
fn items_of_a_busy_owner_move_within_a_run_not_after_the_whole_reshard_wait() {
    // Runs longer than the interval, each item out of step with the others: the owner always
    // has some item running. It stops starting fires while the leader waits to move items,
    // so the runs drain and the newcomer gets its share within about one run.
    let mut c = Cluster::new();
    // One item per transaction: each item is its own run, so the runs fall out of step.
    let mut opts = shardjob_core::machine::MachineOptions::new(A.parse().unwrap());
    opts.max_txn_items = Some(1);
    c.options = Some(opts);
    c.duration = Box::new(|_, item, _| 1_300 + 170 * u64::from(item));
    let j = job("pay", "* * * * * ?", 6);
    c.add_node(A, std::slice::from_ref(&j)).unwrap();
    c.run_until(5_000);
    assert_eq!(loads(&c.owners("pay")).len(), 1);
    c.add_node(B, std::slice::from_ref(&j)).unwrap();
    // Debounce, then the longest run (2.15 s) drains, then the move.
    c.run_until(9_000);
    let owners = c.owners("pay");
    assert_eq!(
        loads(&owners).into_values().collect::<Vec<_>>(),
        [3, 3],
        "{owners:?}"
    );
    assert!(!c.exists("/pay/leader/sharding/necessary"));
    c.run_until(14_000);
    c.assert_no_overlap();
    let b_runs = c.runs.iter().filter(|r| r.node == 1).count();
    assert!(b_runs >= 3, "the newcomer ran {b_runs} runs");
    // The fires held during the wait were not lost: each item ran a fire within the last
    // three seconds (misfires run right after the move).
    for item in 0..6 {
        let latest = c
            .runs
            .iter()
            .filter(|r| r.item == item)
            .map(|r| r.fire)
            .max()
            .unwrap();
        assert!(
            latest >= fire_at(&c, 11_000),
            "item {item}: last fire {latest}"
        );
    }
    // The flag written by someone else (ElasticJob's console asks for a re-shard this way)
    // holds new runs only until the leader has looked at the plan and cleared it.
    c.operator_write("/pay/leader/sharding/necessary", b"")
        .unwrap();
    c.run_until(14_500);
    assert!(!c.exists("/pay/leader/sharding/necessary"));
    c.run_until(20_000);
    for item in 0..6 {
        assert!(
            c.runs
                .iter()
                .any(|r| r.item == item && r.fire >= fire_at(&c, 17_000)),
            "item {item} stopped running"
        );
    }
    c.assert_no_overlap();
}

/// One instance, without its safety sweep, hosting `job`.
fn alone_without_sweep(job: JobConfig) -> Cluster {
    let mut c = Cluster::new();
    let id = shardjob_core::InstanceId::new(A).unwrap();
    c.options = Some(shardjob_core::machine::MachineOptions {
        safety_sweep: false,
        ..shardjob_core::machine::MachineOptions::new(id)
    });
    c.add_node(A, &[job]).unwrap();
    c
}

/// One instance, without its safety sweep, hosting a job that fires every minute.
fn minutely_without_sweep() -> Cluster {
    alone_without_sweep(job("minutely", "0 * * * * ?", 1))
}

/// The wall-clock steps the first node noticed.
fn clock_steps(c: &Cluster) -> Vec<i64> {
    c.nodes[0]
        .events
        .iter()
        .filter_map(|(_, e)| match e {
            MachineEvent::ClockStepped { by_ms } => Some(*by_ms),
            _ => None,
        })
        .collect()
}

#[test]
fn a_clock_step_back_and_forth_between_timeouts_does_not_make_a_fire_late() {
    // The wall clock steps back 30 s and returns before the instance's next timeout, while a
    // change in the registry has it decide on the job in between. Steps were noticed only at
    // timeouts, by which time the clock was back: the wake that decision took by the stepped
    // clock stood, and the next fire came 30 s late (found by the simulator's wake audit at
    // seed 146). Every input notices a step now.
    let mut c = minutely_without_sweep();
    c.run_until(62_000);
    assert_eq!(c.runs_of("minutely").len(), 1, "{:#?}", c.runs);
    c.nodes[0].skew = -30_000;
    // Any change in the job's tree has the instance decide on the job again.
    c.operator_write("/minutely/servers/10.0.0.9", b"ENABLED")
        .unwrap();
    c.run_until(62_050);
    c.nodes[0].skew = 0;
    c.run_until(125_000);
    let next = c
        .runs
        .iter()
        .find(|r| r.fire == fire_at(&c, 120_000))
        .unwrap_or_else(|| panic!("the fire at 120 s never ran: {:#?}", c.runs));
    assert!(next.start <= 120_010, "started at {} ms", next.start);
    let stepped = clock_steps(&c);
    assert_eq!(stepped, [-30_000, 30_000]);
    c.assert_no_late_wakes();
}

#[test]
fn a_wall_clock_step_forward_moves_the_next_fire_with_it() {
    // Wake times are monotonic times worked out from the wall clock. A step forward (an NTP
    // correction, a host resumed from suspend) must move the next fire with it, even on a
    // quiet instance and without the safety sweep; before, the fire came late by the step.
    let mut c = minutely_without_sweep();
    c.run_until(61_000);
    assert_eq!(c.runs_of("minutely").len(), 1, "{:#?}", c.runs);
    // The wall clock jumps 40 s ahead: its next minute comes at virtual 80 s, not 120 s.
    c.nodes[0].skew = 40_000;
    c.run_until(125_000);
    let next = c
        .runs
        .iter()
        .find(|r| r.fire == fire_at(&c, 120_000))
        .unwrap_or_else(|| panic!("the fire after the step never ran: {:#?}", c.runs));
    assert_eq!(next.kind, RunKind::Scheduled, "{next:#?}");
    assert!(next.start <= 80_010, "started at {} ms", next.start);
    let stepped = clock_steps(&c);
    assert_eq!(stepped, [40_000]);
    // Back again: the fire after it is at virtual 140 s by the restored clock, and the one
    // claimed ahead by the old clock (if any) does not start early.
    c.nodes[0].skew = 0;
    c.run_until(200_000);
    let after: Vec<_> = c
        .runs
        .iter()
        .filter(|r| r.start > 125_000)
        .map(|r| (r.fire - fire_at(&c, 0), r.start))
        .collect();
    assert!(
        after.iter().all(|(fire, start)| *start as i64 >= *fire),
        "a run started before its fire by the wall clock: {after:?}"
    );
    c.assert_no_overlap();
}

#[test]
fn a_trigger_ended_by_a_move_leaves_the_scheduled_fires_running() {
    // A trigger split over several transactions (one item each) is under way when a second
    // instance joins and the leader moves the trigger's unclaimed items to it. The trigger is
    // then over here, and the evaluation that finds so must still schedule this instance's own
    // items: without the safety sweep nothing else would wake the job again. Watches are slow,
    // so each part waits for the last one to show; the join comes at every 5 ms of the
    // trigger's first second, so that some move meets a part still waiting.
    for offset in (0..1_000).step_by(5) {
        let mut c = Cluster::new();
        c.watch_delay = 200;
        let mut opts = shardjob_core::machine::MachineOptions::new(A.parse().unwrap());
        opts.max_txn_items = Some(1);
        opts.safety_sweep = false;
        c.options = Some(opts);
        c.duration = Box::new(|_, _, _| 400);
        let j = job("pay", "0/2 * * * * ?", 4);
        c.add_node(A, std::slice::from_ref(&j)).unwrap();
        c.run_until(3_000);
        c.trigger(0, "pay");
        c.run_until(3_000 + offset);
        // Listed after A, so the newcomer gets the last items, which the trigger claims last.
        c.add_node("10.0.0.0@-@9", std::slice::from_ref(&j))
            .unwrap();
        c.run_until(30_000);
        c.assert_no_overlap();
        c.assert_no_late_wakes();
        // Every item, wherever it went, ran a fire of the last ten seconds.
        for item in 0..4 {
            assert!(
                c.runs
                    .iter()
                    .any(|r| r.item == item && r.fire >= fire_at(&c, 20_000)),
                "join {offset} ms after the trigger: item {item} stopped running; owners {:?}",
                c.owners("pay")
            );
        }
    }
}

#[test]
fn an_adoption_waiting_on_a_lost_probe_probes_again() {
    // One instance, without its safety sweep, idle between fires, so its lease has lapsed when
    // it claims the next fire. The claim applies but its reply is lost; the instance sees its
    // own markers and, before it adopts them, must confirm its session. That probe's reply is
    // lost too. Nothing else is under way: no run, no doubt (nothing ran when the lease
    // lapsed), no failed request left to retry. The adoption still waits for a confirmation,
    // so the machine must probe again by itself; if it does not, the job stalls for good
    // (its later fires wait behind the markers too).
    let mut c = alone_without_sweep(job("pay", "0/10 * * * * ?", 2));
    c.run_until(15_000);
    let before = c.requests[0];
    // The claim of the fire at 20 s (sent at 19.75 s) and the probe after it.
    c.lose_replies(0, 2);
    c.run_until(35_000);
    assert_eq!(c.nodes[0].lose_replies(), 0);
    assert!(
        c.requests[0] - before > 2,
        "no request after the lost probe"
    );
    let fire = fire_at(&c, 20_000);
    let runs: Vec<_> = c.runs.iter().filter(|r| r.fire == fire).collect();
    assert_eq!(
        runs.iter().map(|r| r.item).collect::<BTreeSet<_>>(),
        BTreeSet::from([0, 1]),
        "{runs:#?}"
    );
    assert_eq!(runs.len(), 2, "{runs:#?}");
    // Two lost replies (2 s each) and a probe after a quarter session timeout: not the
    // reconcile interval's ten minutes.
    assert!(runs.iter().all(|r| r.start < 25_000), "{runs:#?}");
    // The next fire is on time again.
    let next = fire_at(&c, 30_000);
    assert_eq!(
        c.runs
            .iter()
            .filter(|r| r.fire == next && r.start == 30_000)
            .count(),
        2
    );
    c.assert_no_overlap();
}

// Start-up after downtime. The cluster starts at 06:00 UTC on day 0; a nightly job fires at
// 02:30 UTC, at virtual 20.5 h on day 1 and 44.5 h on day 2.
const HOUR: u64 = 3_600_000;
const NIGHT_1: u64 = 20 * HOUR + HOUR / 2;
const NIGHT_2: u64 = NIGHT_1 + 24 * HOUR;
const NIGHT_3: u64 = NIGHT_2 + 24 * HOUR;

fn nightly(catchup_seconds: Option<u64>) -> JobConfig {
    let mut j = job("nightly", "0 30 2 * * ?", 4);
    if let Some(s) = catchup_seconds {
        j.props.insert(
            shardjob_core::config::MISFIRE_CATCHUP_PROP.to_owned(),
            s.to_string(),
        );
    }
    j
}

/// The runs of a fire, per item.
fn runs_of_fire(c: &Cluster, fire: i64) -> BTreeMap<u32, Vec<RunKind>> {
    let mut out: BTreeMap<u32, Vec<RunKind>> = BTreeMap::new();
    for r in c.runs.iter().filter(|r| r.fire == fire) {
        out.entry(r.item).or_default().push(r.kind);
    }
    out
}

/// Runs the nightly job on one instance through night 1, stops it, and starts it again at
/// 15:00 on day 2 (night 2 was missed while no instance was alive).
fn nightly_down_through_night_2(catchup_seconds: Option<u64>) -> Cluster {
    let mut c = Cluster::new();
    let j = nightly(catchup_seconds);
    c.add_node(A, std::slice::from_ref(&j)).unwrap();
    c.run_until(NIGHT_1 + HOUR / 2);
    assert_eq!(
        runs_of_fire(&c, fire_at(&c, NIGHT_1)).len(),
        4,
        "night 1 ran"
    );
    c.shutdown(0);
    c.run_until(NIGHT_1 + HOUR);
    assert!(c.nodes[0].machine.is_stopped());
    // Deployed again at 15:00 on day 2.
    c.run_until(NIGHT_2 + 12 * HOUR + HOUR / 2);
    c.add_node("10.0.0.1@-@11", std::slice::from_ref(&j))
        .unwrap();
    c
}

#[test]
fn a_restart_after_downtime_does_not_run_the_missed_nightly_fire() {
    let mut c = nightly_down_through_night_2(None);
    let back = c.now;
    c.run_until(back + HOUR);
    assert!(
        runs_of_fire(&c, fire_at(&c, NIGHT_2)).is_empty(),
        "the fire missed during the downtime ran: {:#?}",
        c.runs
    );
    assert!(c.runs.iter().all(|r| r.start < back), "{:#?}", c.runs);
    // Another instance joins and then takes every item over before night 3: it sees only
    // night 1 done in the records and must give up night 2 all the same.
    c.add_node(B, std::slice::from_ref(&nightly(None))).unwrap();
    c.run_until(back + 2 * HOUR);
    assert!(
        c.owners("nightly").values().any(|o| o == B),
        "{:?}",
        c.owners("nightly")
    );
    c.shutdown(1);
    c.run_until(back + 3 * HOUR);
    assert!(c.owners("nightly").values().all(|o| o == B));
    assert!(runs_of_fire(&c, fire_at(&c, NIGHT_2)).is_empty());
    c.run_until(NIGHT_3 + HOUR / 2);
    assert!(runs_of_fire(&c, fire_at(&c, NIGHT_2)).is_empty());
    let night_3 = runs_of_fire(&c, fire_at(&c, NIGHT_3));
    assert_eq!(night_3.len(), 4, "{:#?}", c.runs);
    assert!(
        night_3.values().all(|k| *k == [RunKind::Scheduled]),
        "{night_3:?}"
    );
    c.assert_no_overlap();
}

#[test]
fn with_a_catch_up_bound_the_missed_fire_runs_once_if_within_it() {
    // 15:00 is 12.5 h after 02:30: a bound of 13 h catches it up, one of 12 h does not.
    let mut c = nightly_down_through_night_2(Some(13 * 3600));
    let back = c.now;
    c.run_until(back + HOUR);
    let night_2 = runs_of_fire(&c, fire_at(&c, NIGHT_2));
    assert_eq!(night_2.len(), 4, "{:#?}", c.runs);
    assert!(
        night_2.values().all(|k| *k == [RunKind::Misfire]),
        "{night_2:?}"
    );
    // Right after the start.
    assert!(
        c.runs
            .iter()
            .filter(|r| r.start >= back)
            .all(|r| r.start < back + 30_000),
        "{:#?}",
        c.runs
    );
    // Moving the items does not run it again.
    c.add_node(B, std::slice::from_ref(&nightly(Some(13 * 3600))))
        .unwrap();
    c.run_until(back + 2 * HOUR);
    c.shutdown(1);
    c.run_until(NIGHT_3 + HOUR / 2);
    assert_eq!(
        runs_of_fire(&c, fire_at(&c, NIGHT_2))
            .values()
            .map(Vec::len)
            .collect::<Vec<_>>(),
        [1, 1, 1, 1]
    );
    assert_eq!(runs_of_fire(&c, fire_at(&c, NIGHT_3)).len(), 4);

    let mut c = nightly_down_through_night_2(Some(12 * 3600));
    let back = c.now;
    c.run_until(back + HOUR);
    assert!(runs_of_fire(&c, fire_at(&c, NIGHT_2)).is_empty());
}

#[test]
fn an_owner_that_crashes_while_others_live_is_still_caught_up() {
    let mut c = Cluster::new();
    let j = nightly(None);
    for id in [A, B] {
        c.add_node(id, std::slice::from_ref(&j)).unwrap();
    }
    c.run_until(NIGHT_1 - 500);
    let a_items: Vec<u32> = c
        .owners("nightly")
        .into_iter()
        .filter(|(_, o)| o == A)
        .map(|(i, _)| i)
        .collect();
    assert!(!a_items.is_empty());
    // A dies half a second before the fire; its session outlives the fire.
    c.crash(0);
    c.run_until(NIGHT_1 + HOUR);
    let night_1 = runs_of_fire(&c, fire_at(&c, NIGHT_1));
    assert_eq!(night_1.len(), 4, "{:#?}", c.runs);
    for i in a_items {
        assert_eq!(night_1[&i], [RunKind::Misfire], "item {i}: {night_1:?}");
    }
    assert!(night_1.values().all(|k| k.len() == 1));
}

#[test]
fn a_quick_restart_before_the_old_session_expires_catches_up() {
    // The only instance crashes just before the fire and is back before the registry has
    // expired its session: the job never lost its last registered instance, so this is no
    // downtime, and the fire runs as a misfire.
    let mut c = Cluster::new();
    let j = nightly(None);
    c.add_node(A, std::slice::from_ref(&j)).unwrap();
    c.run_until(NIGHT_1 - 500);
    c.crash(0);
    c.run_until(NIGHT_1 + 1_000);
    c.add_node("10.0.0.1@-@11", std::slice::from_ref(&j))
        .unwrap();
    c.run_until(NIGHT_1 + HOUR);
    let night_1 = runs_of_fire(&c, fire_at(&c, NIGHT_1));
    assert_eq!(night_1.len(), 4, "{:#?}", c.runs);
    assert!(night_1.values().all(|k| *k == [RunKind::Misfire]));
}

#[test]
fn concurrent_starts_record_one_start_and_agree() {
    // Two instances come up at once after the downtime: one of them starts the cluster, the
    // other registers into a directory that is no longer empty; night 2 runs nowhere.
    let mut c = nightly_down_through_night_2(None);
    c.add_node(B, std::slice::from_ref(&nightly(None))).unwrap();
    let back = c.now;
    c.run_until(back + HOUR);
    assert!(runs_of_fire(&c, fire_at(&c, NIGHT_2)).is_empty());
    let started = c.read("/nightly/instances").unwrap_or_default();
    assert!(started.starts_with(r#"{"started":"#), "{started}");
    c.run_until(NIGHT_3 + HOUR / 2);
    assert_eq!(runs_of_fire(&c, fire_at(&c, NIGHT_3)).len(), 4);
    c.assert_no_overlap();
}

/// A plan too large for one transaction is written in parts, and its progress is reported
/// every `reshard_progress_step` items (never for the last part, which `Resharded` reports);
/// a later re-shard counts from zero again. A step of 100 items rather than the default
/// 10,000: a job of 25,000 items took two minutes of the simulator's time here.
#[test]
fn a_plan_written_in_parts_reports_its_progress() {
    const STEP: usize = 100;
    let total = 2 * STEP + STEP / 2;
    let mut c = Cluster::new();
    let mut opts = shardjob_core::machine::MachineOptions::new(A.parse().unwrap());
    opts.reshard_progress_step = STEP;
    opts.max_txn_items = Some(STEP / 4);
    c.options = Some(opts);
    // Never fires in the test.
    let j = job("big", "0 0 0 1 1 ? 2099", total as u32);
    c.add_node(A, std::slice::from_ref(&j)).unwrap();
    c.run_until(10_000);
    assert_eq!(c.owners("big").len(), total);
    let progress = |c: &Cluster| -> Vec<(usize, usize)> {
        c.nodes[0]
            .events
            .iter()
            .filter_map(|(_, e)| match e {
                MachineEvent::ReshardProgress {
                    job,
                    written,
                    total,
                } if job == "big" => Some((*written, *total)),
                _ => None,
            })
            .collect()
    };
    assert_eq!(progress(&c), [(STEP, total), (2 * STEP, total)]);
    let plans = |c: &Cluster| {
        c.nodes[0]
            .events
            .iter()
            .filter(|(_, e)| matches!(e, MachineEvent::Resharded { job, .. } if job == "big"))
            .count()
    };
    assert_eq!(plans(&c), 1);
    // A newcomer: half the items move, in parts again, counted from zero.
    c.add_node(B, std::slice::from_ref(&j)).unwrap();
    c.run_until(20_000);
    assert_eq!(loads(&c.owners("big")).len(), 2);
    assert_eq!(plans(&c), 2);
    let moved = total / 2;
    assert_eq!(progress(&c)[2..], [(STEP, moved)]);
}

/// One instance hosting a job of 8 items that fires every 10 s, with `opts`; its runs last
/// 1 s. The registry's limit is lowered while the fire at 10 s runs, so that run's end is
/// recorded in two parts of 4 items; the first part applies but its reply is lost.
fn an_end_in_parts_whose_first_reply_is_lost(
    opts: shardjob_core::machine::MachineOptions,
) -> Cluster {
    let mut c = Cluster::new();
    c.duration = Box::new(|_, _, _| 1_000);
    c.options = Some(opts);
    c.add_node(A, &[job("wide", "0/10 * * * * ?", 8)]).unwrap();
    c.run_until(10_500);
    // All 8 items were claimed in one transaction and run as one execution.
    let fire = fire_at(&c, 10_000);
    assert_eq!(c.runs.iter().filter(|r| r.fire == fire).count(), 8);
    // A completion of 8 items costs 25 compares; one of 4 costs 13.
    c.set_max_txn_ops(Some(16));
    // The run ends at 11 s: its end is refused as too large and sent again in halves; the
    // first half (the node's next request after the refused one) applies, unheard.
    c.run_until(11_000);
    c.lose_replies(0, 1);
    c.run_until(19_000);
    c
}

#[test]
fn an_end_in_parts_whose_first_part_applied_unheard_records_the_rest() {
    // The first part is sent again after its timeout and refused (its markers are gone: it
    // did apply). Only that part is given up; the second is still sent. Giving up the whole
    // end left the second part's markers to this live session with no execution holding
    // them: adopted as a claim whose reply was lost, items 4 to 7 started again with the
    // same fencing token (seed 12663 of the simulator, with 133 items and a deaf spell).
    let opts = shardjob_core::machine::MachineOptions::new(A.parse().unwrap());
    let mut c = an_end_in_parts_whose_first_reply_is_lost(opts);
    assert_eq!(c.nodes[0].lose_replies(), 0, "the reply was lost");
    let fire = fire_at(&c, 10_000);
    assert_each_item_once(&c, "wide", 8, fire);
    // The refused part is sent again item by item: each of its items is refused on its own.
    let lost: Vec<u32> = c.nodes[0]
        .events
        .iter()
        .filter_map(|(_, e)| match e {
            MachineEvent::CompletionLost { items, .. } => Some(items.clone()),
            _ => None,
        })
        .flatten()
        .collect();
    assert_eq!(lost, [0, 1, 2, 3], "only the refused part is given up");
    for item in 0..8 {
        assert!(
            !c.exists(&format!("/wide/sharding/{item}/running")),
            "{item}"
        );
    }
    // Every item's end is in its record: the next fire runs each item once, on time.
    let next = fire_at(&c, 20_000);
    c.run_until(20_500);
    assert_eq!(
        c.runs
            .iter()
            .filter(|r| r.fire == next && r.start == 20_000)
            .count(),
        8
    );
    c.assert_no_overlap();
}

#[test]
fn a_marker_removed_under_a_run_loses_no_end_and_no_fire_runs_again() {
    // Seed 7181 of CI's world with the stale-node clearing: a leader whose view was late
    // removed a live run's `running` marker of item 2 (created again since, at version 0).
    // The run's end, one transaction for items 0 to 3, was refused for that one marker and
    // given up whole; the markers of 0, 1 and 3 stayed this live session's with no execution
    // holding them, were adopted as claims whose reply was lost, and their fire ran again
    // under the same fencing token. The end is now sent again item by item, and item 2's, its
    // marker gone while the session lives, by its record alone: no end is lost.
    let mut c = Cluster::new();
    c.duration = Box::new(|_, _, _| 1_000);
    c.add_node(A, &[job("four", "0/10 * * * * ?", 4)]).unwrap();
    c.run_until(10_500);
    let fire = fire_at(&c, 10_000);
    assert_eq!(c.runs.iter().filter(|r| r.fire == fire).count(), 4);
    assert!(c.exists("/four/sharding/2/running"));
    c.operator_delete("/four/sharding/2/running").unwrap();
    c.run_until(19_000);
    assert_each_item_once(&c, "four", 4, fire);
    let lost: Vec<u32> = c.nodes[0]
        .events
        .iter()
        .filter_map(|(_, e)| match e {
            MachineEvent::CompletionLost { items, .. } => Some(items.clone()),
            _ => None,
        })
        .flatten()
        .collect();
    assert_eq!(lost, Vec::<u32>::new(), "no end is given up");
    for item in 0..4 {
        assert!(
            !c.exists(&format!("/four/sharding/{item}/running")),
            "{item}"
        );
    }
    let next = fire_at(&c, 20_000);
    c.run_until(20_500);
    assert_each_item_once(&c, "four", 4, next);
    c.assert_no_overlap();
}

/// Two instances share a job of two items, failover on, runs of 20 s. An operator deletes
/// A's `running` marker of its run of the fire at +30 s one second into it (ElasticJob's
/// completion of a run it ended late deletes markers by path the same way: seed 89 of the
/// migration world). `plant` names a planted bug to switch on in both. Returns the cluster
/// and A's item.
fn marker_gone_under_a_run(plant: Option<&str>) -> (Cluster, u32) {
    let mut c = Cluster::new();
    c.duration = Box::new(|_, _, _| 20_000);
    let mut config = job("long", "0/30 * * * * ?", 2);
    config.failover = true;
    for id in [A, B] {
        c.add_node_with(options(id, plant), std::slice::from_ref(&config))
            .unwrap();
    }
    c.run_until(31_000);
    let owners = c.owners("long");
    let item = owners
        .iter()
        .find(|(_, o)| o.as_str() == A)
        .map(|(i, _)| *i)
        .unwrap();
    let marker = format!("/long/sharding/{item}/running");
    assert!(c.exists(&marker));
    c.operator_delete(&marker).unwrap();
    c.run_until(75_000);
    (c, item)
}

/// A run whose marker went under it is its live instance's to end or fail over: the other
/// instance does not fail it over beside it, and A records its end by the record alone (see
/// `a_run_whose_marker_is_deleted_under_it_records_its_end_and_is_not_run_again`): the fire
/// runs once.
#[test]
fn a_marker_deleted_under_a_live_run_is_not_failed_over_beside_it() {
    let (c, item) = marker_gone_under_a_run(None);
    let fire = fire_at(&c, 30_000);
    let runs: Vec<_> = c
        .runs
        .iter()
        .filter(|r| r.item == item && r.fire == fire)
        .collect();
    assert_eq!(runs.len(), 1, "{runs:#?}");
    assert_eq!(runs[0].node, 0, "A runs the fire: {runs:#?}");
    assert_eq!(runs[0].end, Some(50_000));
    c.assert_no_overlap();
    let record = c
        .read(&format!("/long/sharding/{item}/execution"))
        .unwrap_or_default();
    assert!(
        record.contains(&format!("\"done\":{fire},")),
        "the end is recorded: {record}"
    );
    let next = fire_at(&c, 60_000);
    let on_time = |r: &&shardjob_sim::cluster::RunRecord| {
        r.item == item && r.fire == next && r.start == 60_000
    };
    assert_eq!(
        c.runs.iter().filter(on_time).count(),
        1,
        "the next fire runs on time"
    );
}

/// The planted bug `failover-live-runner`: B takes A's run for an orphan once the marker is
/// gone, and fails it over while it still runs.
#[cfg(feature = "plant")]
#[test]
fn failing_a_live_instance_s_run_over_overlaps_it() {
    let (c, _) = marker_gone_under_a_run(Some("failover-live-runner"));
    let overlaps = shardjob_sim::checkers::overlap::check(&c.runs, &Default::default());
    assert!(
        !overlaps.violations.is_empty(),
        "the planted bug is not caught"
    );
}

#[cfg(feature = "plant")]
#[test]
fn the_planted_conflict_drops_rest_starts_the_rest_again_with_the_same_token() {
    use shardjob_core::machine::plant::Plant;
    let mut opts = shardjob_core::machine::MachineOptions::new(A.parse().unwrap());
    opts.plants.insert(Plant::ConflictDropsRest);
    let c = an_end_in_parts_whose_first_reply_is_lost(opts);
    let fire = fire_at(&c, 10_000);
    let again: BTreeSet<u32> = c
        .runs
        .iter()
        .filter(|r| r.fire == fire)
        .filter(|r| {
            c.runs.iter().any(|e| {
                e.fire == fire && e.item == r.item && e.token == r.token && e.start < r.start
            })
        })
        .map(|r| r.item)
        .collect();
    assert_eq!(again, BTreeSet::from([4, 5, 6, 7]));
}

/// A graceful shutdown whose grace ends while a run ignores its cancellation: the machine
/// cancels once and then waits for the run's end, without waking again and again (its
/// shutdown timer stayed due, and every timeout cancelled anew: found by the simulator's
/// rolling replacement, seed 87 of the mixed world), and stops once the run has ended.
#[test]
fn a_shutdown_past_its_grace_waits_for_a_run_that_ignores_cancellation_without_spinning() {
    let mut c = Cluster::new();
    let mut opts =
        shardjob_core::machine::MachineOptions::new(shardjob_core::InstanceId::new(A).unwrap());
    opts.shutdown_grace = std::time::Duration::from_secs(5);
    c.options = Some(opts);
    c.duration = Box::new(|_, _, _| 40_000);
    c.ignore_cancel.insert("slow".to_owned());
    c.add_node(A, &[job("slow", "0/10 * * * * ?", 1)]).unwrap();
    c.run_until(15_000);
    assert_eq!(c.runs.len(), 1, "{:#?}", c.runs);
    assert!(c.runs[0].end.is_none());
    c.shutdown(0);
    c.run_until(30_000);
    assert!(!c.nodes[0].machine.is_stopped(), "the run still goes on");
    assert!(
        c.invariant_violations.is_empty(),
        "{:?}",
        c.invariant_violations
    );
    assert!(c.wake_storms.is_empty(), "{:?}", c.wake_storms);
    let after_grace = c.nodes[0].machine.poll_timeout().map(|t| t.ms());
    assert!(
        after_grace.is_none_or(|t| t > c.now),
        "a timer still due at {} after the grace: {after_grace:?}",
        c.now
    );
    c.run_until(60_000);
    assert!(c.runs[0].end.is_some());
    assert!(c.nodes[0].machine.is_stopped());
    assert!(
        c.invariant_violations.is_empty(),
        "{:?}",
        c.invariant_violations
    );
}

/// A run's `running` marker deleted under it by another hand while its session lives (as
/// ElasticJob's failover listener or its reconnection does in a shared job; here an operator),
/// in a job with failover on: `plant` names a planted bug to switch on.
fn marker_deleted_under_a_run(plant: Option<&str>) -> Cluster {
    let mut c = Cluster::new();
    c.keep_log = true;
    c.options = Some(options(A, plant));
    c.duration = Box::new(|_, _, _| 1_000);
    let mut tick = job("tick", "0/5 * * * * ?", 1);
    tick.failover = true;
    tick.monitor_execution = true;
    c.add_node(A, &[tick]).unwrap();
    c.run_until(5_500);
    assert!(c.exists("/tick/sharding/0/running"), "{}", c.log.join("\n"));
    c.operator_delete("/tick/sharding/0/running").unwrap();
    c.run_until(17_000);
    c
}

/// The run's end is recorded by its record alone (checked by its version): the fire of +5 s
/// runs once, and so do the next ones.
#[test]
fn a_run_whose_marker_is_deleted_under_it_records_its_end_and_is_not_run_again() {
    let c = marker_deleted_under_a_run(None);
    let log = c.log.join("\n");
    for s in [5_000, 10_000, 15_000] {
        let fire = fire_at(&c, s);
        let runs = c.runs.iter().filter(|r| r.fire == fire).count();
        assert_eq!(runs, 1, "fire +{s} ms\n{log}");
    }
    let record = c.read("/tick/sharding/0/execution").unwrap_or_default();
    assert!(!record.contains("\"run\""), "{record}\n{log}");
}

/// The planted bug `keep-record-when-marker-gone`: the end is given up, the record keeps a
/// run in progress, and the instance's own failover runs the finished fire again.
#[cfg(feature = "plant")]
#[test]
fn a_run_whose_end_is_given_up_with_its_marker_gone_is_run_again() {
    let c = marker_deleted_under_a_run(Some("keep-record-when-marker-gone"));
    let fire = fire_at(&c, 5_000);
    let runs = c.runs.iter().filter(|r| r.fire == fire).count();
    assert!(
        runs > 1,
        "the planted bug is not caught\n{}",
        c.log.join("\n")
    );
}
