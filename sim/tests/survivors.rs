//! Scenarios the mutation sample of `core/src/machine` found untested: each drives real
//! machines over one in-memory store on virtual time (3 s session timeout, 1 ms registry
//! latency) through its machine's public API only, and names the mutant of
//! `docs/mutants-survivors.md` it kills (each verified to fail with its mutant applied).

use shardjob_core::config::MISFIRE_CATCHUP_PROP;
use shardjob_core::machine::MachineOptions;
use shardjob_core::machine::record::RunKind;
use shardjob_core::{CronExpr, JobConfig};
use shardjob_sim::cluster::Cluster;

const A: &str = "10.0.0.1@-@1";
const B: &str = "10.0.0.2@-@2";

fn job(name: &str, cron: &str, total: u32) -> JobConfig {
    let mut c = JobConfig::new(name, total);
    c.cron = Some(CronExpr::parse(cron).unwrap());
    c
}

/// Epoch ms of the fire at virtual `ms`.
fn fire_at(c: &Cluster, ms: u64) -> i64 {
    c.wall_origin.timestamp_millis() + ms as i64
}

/// The runs of `item` for the fire at virtual `ms`: (kind, start).
fn runs_of_fire(c: &Cluster, item: u32, ms: u64) -> Vec<(RunKind, u64)> {
    let fire = fire_at(c, ms);
    c.runs
        .iter()
        .filter(|r| r.item == item && r.fire == fire)
        .map(|r| (r.kind, r.start))
        .collect()
}

/// No. 13 (`claiming.rs`, the trigger's items kept only while `is_mine && !skip_disabled`):
/// a manual trigger written in parts (two items per transaction) leaves out an item an
/// operator disables before its part, and ends; the job's scheduled fires, which wait behind a
/// trigger under way, go on. Kept, the disabled item's part is refused by the registry (its
/// claim checks that the item is not disabled) again and again, the trigger never ends, and no
/// scheduled fire of the job runs here any more. (An item that moved away meanwhile, the
/// other half, is `machine.rs`'s `a_trigger_ended_by_a_move_leaves_the_scheduled_fires_running`.)
#[test]
fn a_trigger_leaves_out_an_item_disabled_before_its_part_and_the_fires_go_on() {
    let mut c = Cluster::new();
    let mut opts = MachineOptions::new(A.parse().unwrap());
    opts.max_txn_items = Some(2);
    c.options = Some(opts);
    c.add_node(A, &[job("tr", "* * * * * ?", 6)]).unwrap();
    c.run_until(3_300);
    // The trigger's first part (items 0 and 1) goes out at once; item 5 is disabled before
    // its part.
    c.trigger(0, "tr");
    c.operator_write("/tr/sharding/5/disabled", b"").unwrap();
    c.run_until(8_000);
    let mut triggered: Vec<u32> = c
        .runs
        .iter()
        .filter(|r| r.kind == RunKind::Trigger)
        .map(|r| r.item)
        .collect();
    triggered.sort_unstable();
    assert_eq!(triggered, [0, 1, 2, 3, 4], "{:#?}", c.runs);
    for fire in [5_000, 6_000, 7_000] {
        for item in 0..5 {
            assert_eq!(
                runs_of_fire(&c, item, fire),
                [(RunKind::Scheduled, fire)],
                "item {item}, fire {fire} ms"
            );
        }
    }
    assert!(c.runs.iter().all(|r| r.item != 5 || r.start < 3_300));
}

/// No. 17 (`claiming.rs`, a claim's record counts its prior run's fire as done only if that
/// run was no trigger, with failover off): a trigger that runs over an item whose record
/// still holds a dead trigger's run must not count that run's time as a fire done. Here the
/// fire at 20 s waits (misfire) behind a run of the fire at 10 s; a trigger queued meanwhile
/// goes first when that run ends (22 s); the instance is then cut off, its trigger run
/// cancelled and its session lost, the record left holding the trigger's run. Healed (a new
/// session, the cluster started again with a catch-up bound of a minute), the instance runs
/// a trigger queued meanwhile, then the missed fire at 20 s as a misfire. Counted as done, the
/// dead trigger's 22 s would hide the fire at 20 s for good: the next fire due would be 30 s.
#[test]
fn a_trigger_over_a_dead_triggers_record_leaves_the_fire_missed_before_it_due() {
    let mut c = Cluster::new();
    c.duration = Box::new(|_, _, start| match start {
        10_000..11_000 => 12_000,
        21_000..24_000 => 60_000,
        _ => 100,
    });
    let mut j = job("slow", "0/10 * * * * ?", 1);
    j.props
        .insert(MISFIRE_CATCHUP_PROP.to_owned(), "60".to_owned());
    c.add_node(A, &[j]).unwrap();
    c.run_until(21_000);
    assert_eq!(runs_of_fire(&c, 0, 10_000), [(RunKind::Scheduled, 10_000)]);
    c.trigger(0, "slow");
    c.run_until(22_500);
    let dead = c.runs.last().cloned().unwrap();
    assert_eq!(dead.kind, RunKind::Trigger, "{dead:?}");
    assert!((22_000..22_100).contains(&dead.start), "{dead:?}");
    c.partition(0);
    c.run_until(23_000);
    c.trigger(0, "slow");
    c.run_until(26_000);
    c.heal(0);
    c.run_until(29_000);
    let after: Vec<(RunKind, i64)> = c
        .runs
        .iter()
        .filter(|r| r.start >= 26_000)
        .map(|r| (r.kind, r.fire - fire_at(&c, 0)))
        .collect();
    assert_eq!(after.len(), 2, "{:#?}", c.runs);
    assert_eq!(after[0].0, RunKind::Trigger, "{after:?}");
    assert_eq!(after[1], (RunKind::Misfire, 20_000), "{after:?}");
}

/// No. 29 (`executions.rs`, a trigger's parameter passed only when not empty): a manual
/// trigger's parameter replaces the job's `jobParameter` for its runs; an empty one, or none,
/// leaves the job's; scheduled runs have the job's.
#[test]
fn a_trigger_runs_with_its_own_parameter_and_an_empty_one_leaves_the_jobs() {
    let mut c = Cluster::new();
    let mut j = job("param", "0/5 * * * * ?", 2);
    j.job_parameter = "nightly".to_owned();
    c.add_node(A, &[j]).unwrap();
    c.run_until(1_500);
    c.trigger_with(0, "param", Some("replay 2026-11-21"));
    c.run_until(2_500);
    c.trigger_with(0, "param", Some(""));
    c.run_until(3_500);
    c.trigger(0, "param");
    c.run_until(6_000);
    let given: Vec<(RunKind, u32, &str)> = c
        .runs
        .iter()
        .map(|r| (r.kind, r.item, r.job_parameter.as_str()))
        .collect();
    assert_eq!(
        given,
        [
            (RunKind::Trigger, 0, "replay 2026-11-21"),
            (RunKind::Trigger, 1, "replay 2026-11-21"),
            (RunKind::Trigger, 0, "nightly"),
            (RunKind::Trigger, 1, "nightly"),
            (RunKind::Trigger, 0, "nightly"),
            (RunKind::Trigger, 1, "nightly"),
            (RunKind::Scheduled, 0, "nightly"),
            (RunKind::Scheduled, 1, "nightly"),
        ]
    );
}

/// No. 30 (`executions.rs`, a claim ahead starts at its fire only with a valid lease *and* a
/// view fresher than the claim's lead): the instance pauses (a long garbage collection) right
/// after claiming the fire at 10 s ahead, and an operator disables the item meanwhile. The
/// watch is slow, so when the instance resumes at 10.9 s its view does not show the disable
/// yet; its lease (2 s from the claim at 9.75 s) is still valid, but its view is older than
/// the claim's lead and 500 ms. The claim is given back, not run, and the registry's own
/// check refuses it when claimed again.
#[test]
fn a_claim_ahead_after_a_pause_longer_than_its_lead_is_given_back_not_run() {
    let mut c = Cluster::new();
    c.watch_delay = 1_500;
    c.add_node(A, &[job("tick", "0/10 * * * * ?", 1)]).unwrap();
    c.run_until(9_800);
    assert!(c.exists("/tick/sharding/0/running"), "claimed ahead");
    c.pause(0);
    c.run_until(9_850);
    c.operator_write("/tick/sharding/0/disabled", b"").unwrap();
    c.run_until(10_900);
    c.unpause(0);
    c.run_until(15_000);
    assert!(c.runs.is_empty(), "{:#?}", c.runs);
    assert!(
        !c.exists("/tick/sharding/0/running"),
        "the claim is given back"
    );
}

/// No. 38 (`replies.rs`, a claim's runs start only if the lease is still valid when its
/// reply comes): a claim whose reply is later than the lease (the registry slow for that one
/// request: 2.5 s, against a lease of 2 s) does not start its runs; its markers go at once
/// and the fire, not counted as run, runs right after as a misfire of a fresh claim.
#[test]
fn a_claim_answered_after_the_lease_ran_out_starts_nothing() {
    let mut c = Cluster::new();
    c.add_node(A, &[job("tick", "0/10 * * * * ?", 1)]).unwrap();
    c.run_until(9_700);
    // The claim ahead of the fire at 10 s goes out at 9.75 s and is answered at 12.25 s.
    c.latency = 2_500;
    c.run_until(9_800);
    assert!(c.exists("/tick/sharding/0/running"), "claimed ahead");
    c.latency = 1;
    c.run_until(15_000);
    let runs = runs_of_fire(&c, 0, 10_000);
    assert_eq!(runs.len(), 1, "{runs:?}");
    let (kind, start) = runs[0];
    assert_eq!(kind, RunKind::Misfire, "{runs:?}");
    assert!(start > 12_250, "{runs:?}");
}

/// No. 44 (`resharding.rs`, the leader's housekeeping takes at most a transaction's worth of
/// server nodes): a crashed instance's `servers/{ip}` node stays `ENABLED` (only a graceful
/// leave deletes it); the leader deletes it, and another left by a server long gone, at its
/// next housekeeping (every `reconcileIntervalMinutes`), and keeps a `DISABLED` one, which
/// is an operator's.
#[test]
fn the_leaders_housekeeping_deletes_the_server_nodes_of_instances_gone() {
    let mut c = Cluster::new();
    let mut j = job("hk", "0/5 * * * * ?", 2);
    j.reconcile_interval_minutes = 1;
    c.add_node(A, std::slice::from_ref(&j)).unwrap();
    c.add_node(B, std::slice::from_ref(&j)).unwrap();
    c.run_until(5_000);
    assert_eq!(c.leader_of("hk"), Some(0));
    c.operator_write("/hk/servers/10.0.0.9", b"ENABLED")
        .unwrap();
    c.operator_write("/hk/servers/10.0.0.8", b"DISABLED")
        .unwrap();
    c.crash(1);
    c.run_until(30_000);
    assert!(!c.exists(&format!("/hk/instances/{B}")));
    assert_eq!(c.read("/hk/servers/10.0.0.2").as_deref(), Some("ENABLED"));
    c.run_until(61_000);
    assert!(!c.exists("/hk/servers/10.0.0.2"));
    assert!(!c.exists("/hk/servers/10.0.0.9"));
    assert_eq!(c.read("/hk/servers/10.0.0.8").as_deref(), Some("DISABLED"));
    assert_eq!(c.read("/hk/servers/10.0.0.1").as_deref(), Some("ENABLED"));
}
