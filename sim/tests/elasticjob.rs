//! ElasticJob 3.0.4 instances in the simulator, alone on a job, held to what section 1 of
//! `docs/migration-design.md` says they do: they share a job's items by ElasticJob's average
//! allocation, a killed one's persistent `running` nodes make the other fail its items over, a
//! graceful stop hands the items over at the next fire, a fire during a long run runs after
//! the next run as a misfire, and a reconnection deletes the `running` nodes of runs that go
//! on.

use shardjob_core::layout::ItemLeaf;
use shardjob_core::machine::record::RunKind;
use shardjob_core::{CronExpr, JobConfig};
use shardjob_sim::checkers;
use shardjob_sim::cluster::{Cluster, ClusterError, RunRecord, wall_origin};
use shardjob_sim::elasticjob::JavaJob;

mod support;
use support::options;

const A: &str = "10.0.0.1@-@1";
const B: &str = "10.0.0.2@-@2";

/// A job firing every 5 s, with failover, misfire and execution monitoring on.
fn job(name: &str, items: u32) -> JavaJob {
    let mut c = JobConfig::new(name, items);
    c.cron = CronExpr::parse("0/5 * * * * ?").ok();
    c.failover = true;
    c.misfire = true;
    c.monitor_execution = true;
    JavaJob::script(c)
}

/// A cluster whose runs last `run_ms`, keeping its timeline.
fn cluster(run_ms: u64) -> Cluster {
    let mut c = Cluster::new();
    c.keep_log = true;
    c.duration = Box::new(move |_, _, _| run_ms);
    c
}

/// The fire `s` seconds after the world's start, epoch ms.
fn fire(s: i64) -> i64 {
    wall_origin().timestamp_millis() + s * 1_000
}

/// The runs of `job`'s item `item` for the fire at `s` seconds.
fn runs_of<'a>(c: &'a Cluster, job: &str, item: u32, s: i64) -> Vec<&'a RunRecord> {
    c.java_runs_of(job)
        .into_iter()
        .filter(|r| r.item == item && r.fire == fire(s))
        .collect()
}

fn timeline(c: &Cluster) -> String {
    c.log.join("\n")
}

/// The overlap and once checkers find nothing.
fn checkers_pass(c: &Cluster) {
    let overlaps = checkers::overlap::check(&c.runs, &Default::default());
    assert!(
        overlaps.violations.is_empty(),
        "{:#?}\n{}",
        overlaps.violations,
        timeline(c)
    );
    let once = checkers::once::check(&c.runs);
    assert!(
        once.violations.is_empty(),
        "{:#?}\n{}",
        once.violations,
        timeline(c)
    );
}

#[test]
fn two_instances_share_the_items_by_average_allocation_and_run_each_fire_once() {
    let mut c = cluster(1_500);
    let pay = job("pay", 4);
    c.add_elasticjob_node(A, std::slice::from_ref(&pay))
        .unwrap();
    c.add_elasticjob_node(B, std::slice::from_ref(&pay))
        .unwrap();
    c.run_until(22_000);
    // The leader shards at the first fire: the registry's order is reverse string order, so
    // 10.0.0.2 comes first and takes the first half.
    let owners = c.owners("pay");
    let expected: Vec<(u32, String)> =
        vec![(0, B.into()), (1, B.into()), (2, A.into()), (3, A.into())];
    assert_eq!(owners.into_iter().collect::<Vec<_>>(), expected);
    for s in [5, 10, 15, 20] {
        for item in 0..4 {
            let runs = runs_of(&c, "pay", item, s);
            assert_eq!(
                runs.len(),
                1,
                "pay/{item} fire +{s}s: {runs:?}\n{}",
                timeline(&c)
            );
            let owner = if item < 2 { 1 } else { 0 };
            assert_eq!(runs[0].node, owner, "pay/{item} ran on the wrong instance");
            assert_eq!(runs[0].kind, RunKind::Scheduled);
            assert!(runs[0].java);
        }
    }
    assert_eq!(c.java_runs_of("pay").len(), 16);
    // Every run's `running` node went with its completion.
    for item in 0..4 {
        assert_eq!(c.item_node("pay", item, ItemLeaf::Running), None);
    }
    checkers_pass(&c);
}

#[test]
fn a_killed_instance_leaves_persistent_running_nodes_and_the_other_fails_its_items_over() {
    let mut c = cluster(3_000);
    let pay = job("pay", 4);
    c.add_elasticjob_node(A, std::slice::from_ref(&pay))
        .unwrap();
    c.add_elasticjob_node(B, std::slice::from_ref(&pay))
        .unwrap();
    // A runs items 2 and 3 of the fire at +5 s until +8 s; killed at +6 s.
    c.run_until(6_000);
    c.crash_java(0);
    c.run_until(6_100);
    for item in [2, 3] {
        let (owner, ephemeral) = c
            .item_node("pay", item, ItemLeaf::Running)
            .unwrap_or_else(|| panic!("no running node of item {item}\n{}", timeline(&c)));
        assert_eq!(owner, A);
        assert!(!ephemeral, "failover on: the running node is persistent");
    }
    // A's session expires at +9 s (a 3 s timeout): B fails items 2 and 3 over, as runs of
    // the fire A was running.
    c.run_until(19_000);
    for item in [2, 3] {
        let runs = runs_of(&c, "pay", item, 5);
        assert_eq!(runs.len(), 2, "pay/{item}: {runs:?}\n{}", timeline(&c));
        assert!(runs[0].crashed && runs[0].node == 0);
        assert_eq!(runs[1].node, 1);
        assert_eq!(runs[1].kind, RunKind::Failover);
        assert!(
            runs[1].start >= 9_000,
            "failed over before A's session expired"
        );
        assert!(runs[1].token > runs[0].token);
        assert_eq!(c.item_node("pay", item, ItemLeaf::Running), None);
        assert_eq!(c.item_node("pay", item, ItemLeaf::Failover), None);
        assert_eq!(c.item_node("pay", item, ItemLeaf::Failovering), None);
    }
    // Nothing is left queued, and B leads.
    assert!(!c.exists("/pay/leader/failover/items/2"));
    assert!(!c.exists("/pay/leader/failover/items/3"));
    assert_eq!(c.read("/pay/leader/election/instance").as_deref(), Some(B));
    checkers_pass(&c);
}

#[test]
fn with_failover_off_a_killed_instance_s_run_is_not_failed_over() {
    let mut c = cluster(3_000);
    let mut pay = job("pay", 4);
    pay.config.failover = false;
    c.add_elasticjob_node(A, std::slice::from_ref(&pay))
        .unwrap();
    c.add_elasticjob_node(B, std::slice::from_ref(&pay))
        .unwrap();
    c.run_until(6_000);
    // Ephemeral running nodes: they go with A's session, nothing is failed over.
    let (_, ephemeral) = c
        .item_node("pay", 2, ItemLeaf::Running)
        .expect("a running node");
    assert!(ephemeral);
    c.crash_java(0);
    c.run_until(9_500);
    assert_eq!(c.item_node("pay", 2, ItemLeaf::Running), None);
    c.run_until(16_000);
    assert!(
        c.java_runs_of("pay")
            .iter()
            .all(|r| r.kind == RunKind::Scheduled),
        "{}",
        timeline(&c)
    );
    for item in [2, 3] {
        // The killed run of the fire at +5 s is never run again.
        let at_5 = runs_of(&c, "pay", item, 5);
        assert_eq!(at_5.len(), 1, "{}", timeline(&c));
        assert!(at_5[0].crashed);
        // A's session expired at +9 s: B re-shards at the fire at +10 s and runs them.
        let later = runs_of(&c, "pay", item, 10);
        assert_eq!(later.len(), 1, "{}", timeline(&c));
        assert_eq!(later[0].node, 1);
    }
    checkers_pass(&c);
}

#[test]
fn an_instance_killed_between_fires_loses_its_items_fires_until_its_session_expires() {
    let mut c = cluster(3_000);
    let pay = job("pay", 4);
    c.add_elasticjob_node(A, std::slice::from_ref(&pay))
        .unwrap();
    c.add_elasticjob_node(B, std::slice::from_ref(&pay))
        .unwrap();
    // A's run of the fire at +5 s ended at about +8 s; killed at +8.5 s, its session
    // expires at +11.5 s: nobody runs its items at +10 s (ElasticJob's loss), nothing
    // fails over (no running node), B runs them from +15 s.
    c.run_until(8_500);
    assert_eq!(c.item_node("pay", 2, ItemLeaf::Running), None);
    c.crash_java(0);
    c.run_until(19_000);
    for item in [2, 3] {
        assert!(runs_of(&c, "pay", item, 10).is_empty(), "{}", timeline(&c));
        let later = runs_of(&c, "pay", item, 15);
        assert_eq!(later.len(), 1, "{}", timeline(&c));
        assert_eq!(later[0].node, 1);
        assert_eq!(later[0].kind, RunKind::Scheduled);
    }
    checkers_pass(&c);
}

#[test]
fn a_graceful_stop_finishes_its_run_and_hands_the_items_over_at_the_next_fire() {
    let mut c = cluster(3_000);
    let pay = job("pay", 4);
    c.add_elasticjob_node(A, std::slice::from_ref(&pay))
        .unwrap();
    c.add_elasticjob_node(B, std::slice::from_ref(&pay))
        .unwrap();
    // A leads and runs items 2 and 3 of the fire at +5 s until +8 s; stopped at +6 s.
    c.run_until(6_000);
    assert_eq!(c.leader_of_java("pay"), Some(0));
    c.stop_java(0);
    c.run_until(7_900);
    // Still there: the shutdown hook waits for the fire in progress.
    assert!(c.exists(&format!("/pay/instances/{A}")), "{}", timeline(&c));
    c.run_until(9_000);
    assert!(
        !c.exists(&format!("/pay/instances/{A}")),
        "{}",
        timeline(&c)
    );
    assert!(!c.java[0].up(), "A's process has not ended");
    c.run_until(16_000);
    for item in [2, 3] {
        let at_5 = runs_of(&c, "pay", item, 5);
        assert_eq!(at_5.len(), 1, "{}", timeline(&c));
        assert!(!at_5[0].cancelled && at_5[0].end == Some(at_5[0].start + 3_000));
        // B took the items over for the next fire: nothing failed over, nothing ran twice.
        let at_10 = runs_of(&c, "pay", item, 10);
        assert_eq!(at_10.len(), 1, "{}", timeline(&c));
        assert_eq!(at_10[0].node, 1);
        assert_eq!(at_10[0].kind, RunKind::Scheduled);
    }
    assert!(
        c.java_runs_of("pay")
            .iter()
            .all(|r| r.kind == RunKind::Scheduled)
    );
    assert_eq!(c.owners("pay").values().filter(|o| *o == B).count(), 4);
    assert_eq!(c.read("/pay/leader/election/instance").as_deref(), Some(B));
    checkers_pass(&c);
}

#[test]
fn a_fire_during_a_long_run_runs_after_the_next_run_as_a_misfire() {
    // The run of the fire at +5 s lasts 7 s: the fire at +10 s comes while the worker is
    // busy. Later runs last 1 s.
    let mut c = Cluster::new();
    c.keep_log = true;
    c.duration = Box::new(|_, _, now| if now < 6_000 { 7_000 } else { 1_000 });
    let pay = job("pay", 2);
    c.add_elasticjob_node(A, std::slice::from_ref(&pay))
        .unwrap();
    c.run_until(12_500);
    // The worker is free at +12 s: the fire at +10 s is a misfire, its items flagged.
    for item in [0, 1] {
        assert!(
            c.item_node("pay", item, ItemLeaf::Misfire).is_some(),
            "item {item} not flagged\n{}",
            timeline(&c)
        );
        assert!(runs_of(&c, "pay", item, 10).is_empty());
    }
    c.run_until(19_000);
    for item in [0, 1] {
        // The fire at +15 s runs first, then the misfire loop runs the fire at +10 s.
        let at_15 = runs_of(&c, "pay", item, 15);
        assert_eq!(at_15.len(), 1, "{}", timeline(&c));
        assert_eq!(at_15[0].kind, RunKind::Scheduled);
        let at_10 = runs_of(&c, "pay", item, 10);
        assert_eq!(at_10.len(), 1, "{}", timeline(&c));
        assert_eq!(at_10[0].kind, RunKind::Misfire);
        assert!(at_10[0].start >= at_15[0].end.expect("ended"));
        assert!(at_10[0].start < 17_000, "the misfire run came late");
        assert_eq!(c.item_node("pay", item, ItemLeaf::Misfire), None);
    }
    checkers_pass(&c);
}

#[test]
fn a_reconnection_deletes_the_running_nodes_of_runs_that_go_on() {
    // One instance; its run of the fire at +5 s lasts 4 s. Cut off at +6 s for 1 s, within
    // its 3 s session: on RECONNECTED it deletes its items' running nodes, runs or not.
    let mut c = cluster(4_000);
    let pay = job("pay", 2);
    c.add_elasticjob_node(A, std::slice::from_ref(&pay))
        .unwrap();
    c.run_until(6_000);
    assert!(c.item_node("pay", 0, ItemLeaf::Running).is_some());
    c.partition_java(0);
    c.run_until(7_000);
    c.heal_java(0);
    c.run_until(7_500);
    for item in [0, 1] {
        let runs = runs_of(&c, "pay", item, 5);
        assert_eq!(runs.len(), 1);
        assert_eq!(runs[0].end, None, "the run goes on");
        assert_eq!(
            c.item_node("pay", item, ItemLeaf::Running),
            None,
            "item {item}'s running node survived the reconnection\n{}",
            timeline(&c)
        );
    }
    // The same session: its instance node is still its own, the job goes on.
    assert!(c.exists(&format!("/pay/instances/{A}")));
    c.run_until(16_000);
    assert_eq!(runs_of(&c, "pay", 0, 15).len(), 1, "{}", timeline(&c));
    checkers_pass(&c);
}

#[test]
fn after_a_session_expiry_the_instance_registers_again_and_deletes_its_running_nodes() {
    // Cut off at +6 s for 4 s, past its 3 s session: a new session, the instance node
    // created again, the running nodes of the run still going deleted, and the fire at
    // +10 s, missed while the scheduler was paused, flagged.
    let mut c = cluster(6_000);
    let pay = job("pay", 2);
    c.add_elasticjob_node(A, std::slice::from_ref(&pay))
        .unwrap();
    c.run_until(6_000);
    let before = c.java[0].session;
    c.partition_java(0);
    c.run_until(10_000);
    assert!(!c.exists(&format!("/pay/instances/{A}")));
    c.heal_java(0);
    c.run_until(10_800);
    assert_ne!(c.java[0].session, before);
    assert!(c.exists(&format!("/pay/instances/{A}")), "{}", timeline(&c));
    for item in [0, 1] {
        assert_eq!(runs_of(&c, "pay", item, 5)[0].end, None, "the run goes on");
        assert_eq!(
            c.item_node("pay", item, ItemLeaf::Running),
            None,
            "{}",
            timeline(&c)
        );
    }
    assert!(!c.java[0].job_shut_down("pay"), "the job shut itself down");
    c.run_until(11_500);
    for item in [0, 1] {
        assert!(
            c.item_node("pay", item, ItemLeaf::Misfire).is_some(),
            "{}",
            timeline(&c)
        );
    }
}

#[test]
fn an_instance_refuses_a_job_whose_root_names_another_type_and_bad_input_is_refused() {
    let mut c = cluster(1_000);
    let pay = job("pay", 2);
    c.add_elasticjob_node(A, std::slice::from_ref(&pay))
        .unwrap();
    c.run_until(1_000);
    // Another instance of a Java class job under the same name: refused at its start.
    let mut other = pay.clone();
    other.type_name = "com.example.PayJob".into();
    let b = c.add_elasticjob_node(B, &[other]).unwrap();
    c.run_until(12_000);
    assert!(c.java[b].job_shut_down("pay"));
    assert!(!c.exists(&format!("/pay/instances/{B}")));
    assert!(c.java_runs_of("pay").iter().all(|r| r.node == 0));
    // What the cluster cannot run is refused, and nothing is added.
    let before = c.java.len();
    let mut no_cron = job("nocron", 1);
    no_cron.config.cron = None;
    let err = c
        .add_elasticjob_node("10.0.0.3@-@3", &[no_cron])
        .unwrap_err();
    assert!(matches!(err, ClusterError::ElasticJob { .. }), "{err}");
    let err = c
        .add_elasticjob_node("10.0.0.3@-@3", &[job("x", 1), job("x", 1)])
        .unwrap_err();
    assert!(err.to_string().contains("named twice"), "{err}");
    assert!(c.add_elasticjob_node("", &[job("y", 1)]).is_err());
    assert_eq!(c.java.len(), before);
}

#[test]
fn the_same_world_gives_the_same_trace() {
    let world = || {
        let mut c = cluster(3_000);
        let pay = job("pay", 4);
        c.add_elasticjob_node(A, std::slice::from_ref(&pay))
            .unwrap();
        c.add_elasticjob_node(B, std::slice::from_ref(&pay))
            .unwrap();
        c.run_until(6_000);
        c.crash_java(0);
        c.run_until(20_000);
        (c.trace_hash(), c.runs.len())
    };
    assert_eq!(world(), world());
}

#[test]
fn a_world_with_elasticjob_instances_runs_them_beside_shardjob_and_replays_the_same() {
    use shardjob_sim::world::{self, WorldConfig};
    let cfg = WorldConfig {
        instances: 3,
        job_count: 4,
        duration_ms: 108_000,
        elasticjob: 2,
        ..WorldConfig::standard(11)
    };
    let a = world::run(&cfg);
    let b = world::run(&cfg);
    assert_eq!(a.trace_hash, b.trace_hash, "the same seed, another trace");
    assert!(a.java_instances.len() >= 2);
    let java = a.records.iter().filter(|r| r.java).count();
    let shard = a.records.iter().filter(|r| !r.java).count();
    assert!(
        java > 0 && shard > 0,
        "{java} ElasticJob runs, {shard} shardjob runs"
    );
    // Without them, the seed's world is the one it always was: no ElasticJob node.
    let alone = world::run(&WorldConfig {
        elasticjob: 0,
        ..cfg
    });
    assert!(alone.java_instances.is_empty());
    assert!(alone.records.iter().all(|r| !r.java));
}

/// A mixed job is led by ElasticJob (`docs/migration-design.md` 3.3): after the heal, no
/// shardjob instance leads a job in which an ElasticJob instance can lead; with the planted
/// bug that lets shardjob elect beside ElasticJob, the checker of that rule reports.
#[test]
fn mixed_jobs_are_led_by_elasticjob() {
    use shardjob_sim::world::{self, WorldConfig};
    let cfg = |seed| WorldConfig {
        instances: 3,
        job_count: 4,
        duration_ms: 108_000,
        elasticjob: 2,
        shapes: no_rolls(),
        ..WorldConfig::standard(seed)
    };
    let leader_violations = |report: &world::SeedReport| {
        report
            .violations
            .iter()
            .filter(|v| v.checker == "mixed-leader")
            .count()
    };
    for seed in 0..8 {
        let report = world::run(&cfg(seed));
        assert_eq!(leader_violations(&report), 0, "seed {seed}");
    }
    #[cfg(feature = "plant")]
    {
        let mut opts = shardjob_core::machine::MachineOptions::new("0.0.0.0@-@0".parse().unwrap());
        opts.plants
            .insert(shardjob_core::machine::plant::Plant::ElectBesideJava);
        let report = world::run(&WorldConfig {
            options: Some(opts),
            ..cfg(0)
        });
        assert!(leader_violations(&report) > 0, "the plant is not caught");
    }
}

/// The fire gate (`docs/migration-design.md` 3.4): while an ElasticJob leader waits to
/// re-shard (its own long run holds it), the ElasticJob instances wait at their fire for the
/// new plan, and so does shardjob, without its own bound. A shardjob instance that ran the
/// fire under the old plan once its re-shard wait ran out (the planted bug) would run it on an
/// item whose new owner then runs the same fire.
fn gate_world(planted: bool) -> Cluster {
    const S: &str = "10.0.0.2@-@2";
    const B3: &str = "10.0.0.3@-@3";
    let mut c = cluster(200);
    c.job_type = "SCRIPT".to_owned();
    // ElasticJob's run of item 1 at the fire of +10 s lasts 20 s; every other run 200 ms.
    c.duration = Box::new(|_, item, now| {
        if item == 1 && (10_000..12_000).contains(&now) {
            20_000
        } else {
            200
        }
    });
    let pay = job("pay", 2);
    c.add_elasticjob_node(A, std::slice::from_ref(&pay))
        .unwrap();
    c.run_until(1_000);
    let mut opts = options(S, planted.then_some("gate-open-beside-java"));
    opts.reshard_wait = std::time::Duration::from_secs(5);
    c.options = Some(opts);
    c.add_node(S, std::slice::from_ref(&pay.config)).unwrap();
    c.run_until(12_000);
    c.add_elasticjob_node(B3, std::slice::from_ref(&pay))
        .unwrap();
    c.run_until(45_000);
    c
}

#[test]
fn shardjob_waits_at_the_gate_while_elasticjob_re_shards() {
    let c = gate_world(false);
    let log = timeline(&c);
    // The new instance joined before the fire of +15 s; the leader re-shards after its long
    // run, and the fire of +15 s runs once per item, under the new plan.
    for item in 0..2 {
        let runs: Vec<&RunRecord> = c
            .runs
            .iter()
            .filter(|r| r.job == "pay" && r.item == item && r.fire == fire(15))
            .collect();
        assert!(
            runs.len() <= 1,
            "pay/{item} fire +15 s ran twice: {runs:#?}\n{log}"
        );
        // Item 0 moved to the new ElasticJob instance, which ran the fire it waited at.
        if item == 0 {
            assert!(
                runs.iter().all(|r| r.java) && runs.len() == 1,
                "pay/0 fire +15 s: {runs:#?}\n{log}"
            );
        }
    }
    let once = checkers::once::check(&c.runs);
    assert!(once.violations.is_empty(), "{:#?}\n{log}", once.violations);
    // The hold past the re-shard wait (5 s here) is reported once, naming the leader.
    let stalls: Vec<u64> = c.nodes[0]
        .events
        .iter()
        .filter_map(|(_, e)| match e {
            shardjob_core::machine::MachineEvent::ReshardStalled {
                leader, waited_ms, ..
            } if leader.trim() == A => Some(*waited_ms),
            _ => None,
        })
        .collect();
    assert!(
        stalls.len() == 1 && stalls[0] >= 5_000,
        "stall reports {stalls:?}\n{log}"
    );
}

#[cfg(feature = "plant")]
#[test]
fn shardjob_past_the_gate_runs_a_fire_its_new_owner_runs_again() {
    let c = gate_world(true);
    let once = checkers::once::check(&c.runs);
    assert!(
        !once.violations.is_empty(),
        "the planted bug is not caught\n{}",
        timeline(&c)
    );
}

/// The world `shardjob-sim --seed SEED --instances S --jobs 4 --hours 0.03 --elasticjob J
/// --rolling none` runs (the seeds below were found before the rolling replacements; a seed
/// that draws none keeps its world).
fn cli_world(seed: u64, instances: usize, elasticjob: usize) -> shardjob_sim::world::WorldConfig {
    shardjob_sim::world::WorldConfig {
        instances,
        job_count: 4,
        duration_ms: 108_000,
        elasticjob,
        shapes: no_rolls(),
        ..shardjob_sim::world::WorldConfig::standard(seed)
    }
}

/// Every shape but the rolling replacements (`sim/tests/rolling.rs`).
fn no_rolls() -> std::collections::BTreeSet<shardjob_sim::world::Shape> {
    shardjob_sim::world::Shape::ALL
        .into_iter()
        .filter(|s| s.rolling().is_none())
        .collect()
}

#[test]
fn a_world_of_elasticjob_instances_only_counts_their_duplicates_as_their_own() {
    use checkers::attribution::Behaviour;
    use shardjob_sim::world;
    // Seed 2 of `--instances 0 --elasticjob 3`: elasticjob 0 runs job0/2's fire at +7 s, then
    // elasticjob 1, whose cache still gave it the item, starts the same fire at +10.25 s (J
    // claims nothing, 5 question 1).
    let report = world::run(&cli_world(2, 0, 3));
    assert!(
        report.instances.is_empty(),
        "no shardjob process: {:?}",
        report.instances
    );
    assert!(report.records.iter().all(|r| r.java));
    assert!(
        report.violations.is_empty(),
        "a world of ElasticJob instances fails only by ElasticJob's own: {:#?}",
        report.violations
    );
    let twice = report.elasticjob_own.iter().find(|(v, _)| {
        v.checker == "once" && v.message.starts_with("job0/2 fire ") && v.time == 10_250
    });
    let Some((v, b)) = twice else {
        panic!(
            "the known duplicate of job0/2 is not counted as ElasticJob's own: {:#?}",
            report.elasticjob_own
        );
    };
    assert_eq!(*b, Behaviour::StartWithoutClaim, "{v:?}");
    assert_eq!(
        checkers::attribution::kinds(v, &checkers::runs_by_item(&report.records)).as_deref(),
        Some("J then J")
    );
}

#[test]
fn a_duplicate_that_involves_a_shardjob_run_still_fails_a_mixed_world() {
    use checkers::attribution::Behaviour;
    use shardjob_sim::world;
    let failing_once = |report: &world::SeedReport| -> Vec<(String, String)> {
        let by_item = checkers::runs_by_item(&report.records);
        report
            .violations
            .iter()
            .filter(|v| v.checker == "once")
            .filter_map(|v| {
                let item = v.message.split(' ').next()?.to_owned();
                Some((item, checkers::attribution::kinds(v, &by_item)?))
            })
            .collect()
    };
    // Seed 87 of `--instances 3 --elasticjob 2`: elasticjob 0 runs job3/3's fire of +10 s at
    // +11.8 s, then node 3 again as a misfire at +27 s: S's duplicate, failing. (Seed 41's,
    // used here before, is gone since S attributes J's runs by the registry's clock.)
    let report = world::run(&cli_world(87, 3, 2));
    let once = failing_once(&report);
    assert!(
        once.iter().any(|(i, k)| i == "job3/3" && k == "J then S"),
        "no failing J then S duplicate of job3/3: {once:?}\n{:#?}",
        report.violations
    );
    // Seed 23: elasticjob 1 runs job0/3's fire of +25 s at +21.6 s, its clock 3.4 s ahead,
    // then node 0 at its time: ElasticJob's clock, which only logs a clock past
    // `maxTimeDiffSeconds` (`clock-ahead`), not failing.
    let report = world::run(&cli_world(23, 3, 2));
    let by_item = checkers::runs_by_item(&report.records);
    let fire_25 = fire(25).to_string();
    let is_it = |v: &checkers::Violation| {
        v.checker == "once" && v.message.starts_with(&format!("job0/3 fire {fire_25} "))
    };
    assert!(
        !report.violations.iter().any(is_it),
        "{:#?}",
        report.violations
    );
    assert!(
        report
            .elasticjob_own
            .iter()
            .any(|(v, b)| is_it(v) && *b == Behaviour::ClockAhead),
        "{:#?}",
        report.elasticjob_own
    );
    // Only these rules ever count a violation that names a shardjob run as ElasticJob's own:
    // a J run under a new plan, from a stale cache, early by its clock, or as the failover of
    // an owner registered when J queued it (a duplicate, or an overlap); a fire lost on an
    // item J's re-shard moved at it, or behind a flag J never consumed.
    assert!(
        report.elasticjob_own.iter().all(|(v, b)| {
            checkers::attribution::kinds(v, &by_item).is_none_or(|k| !k.contains('S'))
                || matches!(
                    b,
                    Behaviour::RunsUnderNewPlan
                        | Behaviour::StartWithoutClaim
                        | Behaviour::FailoverReplay
                        | Behaviour::NoFencing
                        | Behaviour::ClockAhead
                        | Behaviour::MovedAtTheGate
                        | Behaviour::UnboundedWait
                )
        }),
        "{:#?}",
        report.elasticjob_own
    );
}

/// The world `cli_world(39, 3, 2)`: node 1 removes job0 at +28.5 s and adds it back
/// under the same id; an ElasticJob instance later fails node 1's run of the fire of +30 s on
/// item 3 over, on a DELETED it queued while the id was registered (ElasticJob knows an
/// instance by its id only: it does the same to one of its own kind that re-registers). The
/// duplicate is ElasticJob's failover replay, not a failing one.
#[test]
fn elasticjob_s_failover_of_an_owner_registered_again_is_its_own_replay() {
    use checkers::attribution::Behaviour;
    use shardjob_sim::world;
    let report = world::run(&cli_world(39, 3, 2));
    let fire_30 = fire(30).to_string();
    let is_it = |v: &checkers::Violation| {
        v.checker == "once" && v.message.starts_with(&format!("job0/3 fire {fire_30} "))
    };
    assert!(
        !report.violations.iter().any(is_it),
        "{:#?}",
        report.violations
    );
    assert!(
        report
            .elasticjob_own
            .iter()
            .any(|(v, b)| is_it(v) && *b == Behaviour::FailoverReplay),
        "{:#?}",
        report.elasticjob_own
    );
}

/// The world `cli_world(6, 3, 2)`: node 0 dies running job0/4's fire of +21 s;
/// elasticjob 1 queues and claims the item's failover at +32.8 s and dies before running it,
/// and elasticjob 0 queues it again from the `failovering` node at +39.4 s. The failover
/// elasticjob 0 runs stands for the fire the first claim was for (+21 s), not for one node 0
/// ran before (+18 s): no fire runs twice.
#[test]
fn a_failover_queued_again_replays_the_fire_it_was_first_queued_for() {
    use shardjob_sim::world;
    let report = world::run(&cli_world(6, 3, 2));
    let fire_18 = fire(18).to_string();
    let twice: Vec<_> = report
        .violations
        .iter()
        .chain(report.elasticjob_own.iter().map(|(v, _)| v))
        .filter(|v| {
            v.checker == "once" && v.message.starts_with(&format!("job0/4 fire {fire_18} "))
        })
        .collect();
    assert!(twice.is_empty(), "{twice:#?}");
    let replays: Vec<_> = report
        .records
        .iter()
        .filter(|r| r.java && r.kind == RunKind::Failover && r.job == "job0" && r.item == 4)
        .map(|r| r.fire)
        .collect();
    assert_eq!(replays, [fire(21)], "{:#?}", report.records);
}

/// A job shardjob ran alone, then shared with an ElasticJob instance that leaves gracefully
/// right after a run: shardjob takes its items back, with records of fires it ran before the
/// ElasticJob instance took them. With `planted`, shardjob ignores the ElasticJob runs it saw.
fn taken_back_world(planted: bool) -> Cluster {
    take_back(job("pay", 4), 0, planted.then_some("rerun-java-fires"))
}

/// The take-back of [`taken_back_world`] for `pay`, the shardjob instance's clock `skew` ms
/// off true time, `plant` switched on in it.
fn take_back(pay: JavaJob, skew: i64, plant: Option<&str>) -> Cluster {
    let mut c = cluster(200);
    c.job_type = "SCRIPT".to_owned();
    c.options = Some(options(B, plant));
    let n = c.add_node(B, std::slice::from_ref(&pay.config)).unwrap();
    c.set_skew(n, skew);
    c.run_until(11_000);
    c.add_elasticjob_node(A, std::slice::from_ref(&pay))
        .unwrap();
    c.run_until(21_500);
    c.stop_java(0);
    c.run_until(40_000);
    c
}

/// 3.6 of `docs/migration-design.md`: fires an ElasticJob instance was seen running are not
/// run again by shardjob when the items come back to it (the duplicate found against
/// ElasticJob 3.0.4 by hand: a Java instance that leaves 1.5 s after its run).
#[test]
fn fires_elasticjob_ran_are_not_run_again_when_its_items_come_back() {
    // Every item runs the fires after the leave.
    assert_taken_back_once(&taken_back_world(false), 20, [25, 30, 35].into_iter());
}

/// 3.6's observation by the registry's clock: the same take-back, every second, with the
/// shardjob instance's clock 600 ms behind (within the clock hold's limit). The ElasticJob
/// instance runs the fire of +21 s at its time and leaves; the shardjob instance hears the
/// run at +20.4 s by its own clock, which no tolerance of an every-second job attributes to
/// +21 s: only the registry's stamp of the marker's write does.
fn behind_world(planted: bool) -> Cluster {
    let mut pay = job("pay", 4);
    pay.config.cron = CronExpr::parse("* * * * * ?").ok();
    take_back(pay, -600, planted.then_some("observe-java-by-own-clock"))
}

/// Asserts that the ElasticJob instance of a take-back ran the fire at `ran` seconds, that
/// no fire ran twice, and that every item ran each fire of `after` once.
fn assert_taken_back_once(c: &Cluster, ran: i64, after: impl Iterator<Item = i64> + Clone) {
    let log = timeline(c);
    let java: Vec<&RunRecord> = c.runs.iter().filter(|r| r.java).collect();
    assert!(
        java.iter().any(|r| r.fire == fire(ran)),
        "the ElasticJob instance ran the fire of +{ran} s: {java:#?}\n{log}"
    );
    let once = checkers::once::check(&c.runs);
    assert!(once.violations.is_empty(), "{:#?}\n{log}", once.violations);
    for item in 0..4 {
        for s in after.clone() {
            let runs = c
                .runs
                .iter()
                .filter(|r| r.item == item && r.fire == fire(s))
                .count();
            assert_eq!(runs, 1, "pay/{item} fire +{s}s\n{log}");
        }
    }
}

#[test]
fn a_fire_elasticjob_ran_is_not_run_again_by_a_shardjob_instance_whose_clock_is_behind() {
    assert_taken_back_once(&behind_world(false), 21, 25..35);
}

#[cfg(feature = "plant")]
#[test]
fn elasticjob_runs_observed_by_a_clock_behind_run_their_fires_again() {
    let c = behind_world(true);
    let once = checkers::once::check(&c.runs);
    assert!(
        !once.violations.is_empty(),
        "the planted bug is not caught\n{}",
        timeline(&c)
    );
}

#[cfg(feature = "plant")]
#[test]
fn ignoring_elasticjob_runs_runs_their_fires_again() {
    let c = taken_back_world(true);
    let once = checkers::once::check(&c.runs);
    assert!(
        !once.violations.is_empty(),
        "the planted bug is not caught\n{}",
        timeline(&c)
    );
}

/// Shardjob's runs in a job shared with ElasticJob (`docs/migration-design.md` 3.4, point 5,
/// and 3.5): one ElasticJob instance (A) and two shardjob instances (B, C) share a job of
/// three items, firing every 5 s, runs of 3 s. ElasticJob leads and shards at its first fire:
/// C (10.0.0.3) item 0, B item 1, A item 2 (the shardjob instances run from the fire of +10 s
/// on: the items came after the fire of +5 s). B is in its run of the fire of +10 s at
/// +11.5 s. `plant` names a planted bug to switch on in both
/// shardjob instances.
fn killed_runner_world(failover: bool, plant: Option<&str>) -> Cluster {
    const C: &str = "10.0.0.3@-@3";
    let mut c = cluster(3_000);
    c.job_type = "SCRIPT".to_owned();
    let mut pay = job("pay", 3);
    pay.config.failover = failover;
    c.add_elasticjob_node(A, std::slice::from_ref(&pay))
        .unwrap();
    c.run_until(1_000);
    c.options = Some(options(B, plant));
    c.add_node(B, std::slice::from_ref(&pay.config)).unwrap();
    c.options = Some(options(C, plant));
    c.add_node(C, std::slice::from_ref(&pay.config)).unwrap();
    c.run_until(11_500);
    c
}

/// The runs of `job`'s item for the fire at `s` seconds, by any kind of instance.
fn all_runs_of<'a>(c: &'a Cluster, job: &str, item: u32, s: i64) -> Vec<&'a RunRecord> {
    c.runs
        .iter()
        .filter(|r| r.job == job && r.item == item && r.fire == fire(s))
        .collect()
}

/// Whether a run of the fire at `s` seconds of `job`'s item ran to its end.
fn ran_to_the_end(c: &Cluster, job: &str, item: u32, s: i64) -> bool {
    all_runs_of(c, job, item, s)
        .iter()
        .any(|r| r.end.is_some() && !r.crashed && !r.cancelled)
}

#[test]
fn elasticjob_fails_a_killed_shardjob_instance_s_run_over_once() {
    let mut c = killed_runner_world(true, None);
    let log = timeline(&c);
    assert_eq!(
        c.owners("pay").get(&1).map(String::as_str),
        Some(B),
        "{log}"
    );
    // Failover on in a mixed job: shardjob's marker is persistent, as ElasticJob's are.
    let (holder, ephemeral) = c
        .item_node("pay", 1, ItemLeaf::Running)
        .unwrap_or_else(|| panic!("B runs item 1\n{log}"));
    assert_eq!(holder, B);
    assert!(!ephemeral, "the marker is bound to B's session\n{log}");
    c.crash(0);
    c.run_until(36_000);
    let log = timeline(&c);
    // ElasticJob's failover found the marker at B's session's end (3 s after the kill) and
    // ran the fire once.
    let at_10 = all_runs_of(&c, "pay", 1, 10);
    assert_eq!(at_10.len(), 2, "pay/1 fire +10 s: {at_10:#?}\n{log}");
    assert!(at_10[0].crashed && !at_10[0].java);
    assert!(
        at_10[1].java && at_10[1].kind == RunKind::Failover,
        "{at_10:#?}"
    );
    assert!(
        at_10[1].start >= 14_500,
        "failed over before B's session expired"
    );
    assert!(ran_to_the_end(&c, "pay", 1, 10));
    // C settled the orphaned run (its fire is done) and failed nothing over itself.
    let settled = c.nodes[1].events.iter().any(|(_, e)| {
        matches!(e, shardjob_core::machine::MachineEvent::OrphansSettled { items, .. } if items == &[1])
    });
    assert!(settled, "C did not settle item 1's orphaned run\n{log}");
    assert!(
        c.runs.iter().all(|r| r.java || r.kind != RunKind::Failover),
        "a shardjob instance failed a run over\n{log}"
    );
    // Every fire from the re-shard at +20 s on runs once, to its end (item 2 came to C
    // after the fire of +20 s, which its ElasticJob owner missed: `docs/migration-design.md`
    // 3.6, the skip on a move).
    for item in 0..3 {
        for s in [20, 25, 30] {
            if (item, s) == (2, 20) {
                continue;
            }
            assert_eq!(
                all_runs_of(&c, "pay", item, s).len(),
                1,
                "pay/{item} +{s}s\n{log}"
            );
            assert!(
                ran_to_the_end(&c, "pay", item, s),
                "pay/{item} +{s}s\n{log}"
            );
        }
    }
    // ElasticJob flagged item 2's fire of +15 s, missed while it failed item 1 over; C's run
    // of the item deleted the flag (`docs/migration-design.md` 3.4, point 6).
    assert_eq!(c.item_node("pay", 2, ItemLeaf::Misfire), None, "{log}");
    checkers_pass(&c);
}

#[test]
fn with_failover_off_shardjob_s_markers_stay_bound_to_its_session() {
    let mut c = killed_runner_world(false, None);
    let log = timeline(&c);
    let (_, ephemeral) = c
        .item_node("pay", 1, ItemLeaf::Running)
        .unwrap_or_else(|| panic!("B runs item 1\n{log}"));
    assert!(
        ephemeral,
        "failover off: the marker is bound to B's session\n{log}"
    );
    c.crash(0);
    c.run_until(36_000);
    let log = timeline(&c);
    // Nobody runs the fire of +10 s again (failover is off), the later ones run once.
    let at_10 = all_runs_of(&c, "pay", 1, 10);
    assert!(at_10.len() == 1 && at_10[0].crashed, "{at_10:#?}\n{log}");
    for item in 0..3 {
        for s in [20, 25, 30] {
            assert_eq!(
                all_runs_of(&c, "pay", item, s).len(),
                1,
                "pay/{item} +{s}s\n{log}"
            );
        }
    }
    checkers_pass(&c);
}

/// The planted bug `ephemeral-markers-beside-java`: the killed instance's marker goes with
/// its session before ElasticJob's failover looks for it, and the fire it was running is
/// never run to its end.
#[cfg(feature = "plant")]
#[test]
fn ephemeral_markers_beside_elasticjob_lose_a_killed_run() {
    let mut c = killed_runner_world(true, Some("ephemeral-markers-beside-java"));
    c.crash(0);
    c.run_until(36_000);
    assert!(
        !ran_to_the_end(&c, "pay", 1, 10),
        "the planted bug is not caught\n{}",
        timeline(&c)
    );
}

/// B killed as above; C hears nothing from +13.5 s to +19 s, while ElasticJob fails B's run
/// over (from B's session's end at +14.5 s to +17.5 s): C sees the orphaned record only
/// afterwards.
fn deaf_settler_world(plant: Option<&str>) -> Cluster {
    let mut c = killed_runner_world(true, plant);
    c.crash(0);
    c.run_until(13_500);
    c.deafen(1);
    c.run_until(19_000);
    c.heal(1);
    c.run_until(36_000);
    c
}

/// A shardjob instance that sees an orphaned run after ElasticJob failed it over settles it:
/// the fire ran once.
#[test]
fn an_orphan_elasticjob_failed_over_is_settled_not_run_again() {
    let c = deaf_settler_world(None);
    let log = timeline(&c);
    let at_10 = all_runs_of(&c, "pay", 1, 10);
    assert_eq!(at_10.len(), 2, "pay/1 fire +10 s: {at_10:#?}\n{log}");
    assert!(
        at_10[1].java && at_10[1].end.is_some_and(|e| e < 19_000),
        "{log}"
    );
    let settled_late = c.nodes[1].events.iter().any(|(at, e)| {
        *at >= 19_000
            && matches!(e, shardjob_core::machine::MachineEvent::OrphansSettled { items, .. } if items == &[1])
    });
    assert!(
        settled_late,
        "C did not settle the orphan once it heard again\n{log}"
    );
    checkers_pass(&c);
}

/// The planted bug `failover-beside-java`: shardjob fails the orphaned run over itself while
/// ElasticJob did too, and the fire runs twice.
#[cfg(feature = "plant")]
#[test]
fn shardjob_s_own_failover_beside_elasticjob_runs_a_fire_twice() {
    let c = deaf_settler_world(Some("failover-beside-java"));
    let once = checkers::once::check(&c.runs);
    assert!(
        !once.violations.is_empty(),
        "the planted bug is not caught\n{}",
        timeline(&c)
    );
}

/// A shardjob instance back from an expired session, in a job that stopped being mixed while
/// it was away, with the persistent marker of its run cut short (`docs/migration-design.md`
/// 3.4, point 5): B runs item 1 of the fire of +10 s and is cut off at +11.5 s; ElasticJob's
/// instance leaves gracefully (after its own run, at +13 s), so nobody fails B's run over when
/// B's session expires at +14.5 s; B is back at +15.5 s, before the shardjob leader's grace
/// for markers no session holds ends, and its marker's owner is live again.
fn back_from_expiry_world(plant: Option<&str>) -> Cluster {
    let mut c = killed_runner_world(true, plant);
    c.partition(0);
    c.stop_java(0);
    c.run_until(15_500);
    c.heal(0);
    c.run_until(40_000);
    c
}

#[test]
fn a_shardjob_instance_back_from_an_expired_session_removes_the_markers_it_left() {
    let c = back_from_expiry_world(None);
    let log = timeline(&c);
    let removed = c.nodes[0].events.iter().any(|(_, e)| {
        matches!(e, shardjob_core::machine::MachineEvent::LeftMarkerRemoved { item: 1, value, .. } if value.trim() == B)
    });
    assert!(removed, "B did not remove the marker it left\n{log}");
    // The job is not mixed any more: the run cut short is failed over once, by shardjob.
    let at_10 = all_runs_of(&c, "pay", 1, 10);
    assert_eq!(at_10.len(), 2, "pay/1 fire +10 s: {at_10:#?}\n{log}");
    assert!(
        !at_10[1].java && at_10[1].kind == RunKind::Failover,
        "{at_10:#?}"
    );
    assert!(ran_to_the_end(&c, "pay", 1, 10), "{log}");
    for s in [25, 30, 35] {
        assert!(ran_to_the_end(&c, "pay", 1, s), "pay/1 +{s}s\n{log}");
    }
    checkers_pass(&c);
}

/// The planted bug `keep-own-markers-left`: the marker stays, its owner live, and the item
/// never runs again.
#[cfg(feature = "plant")]
#[test]
fn markers_left_in_place_block_their_item_for_good() {
    let c = back_from_expiry_world(Some("keep-own-markers-left"));
    assert!(
        [25, 30, 35]
            .iter()
            .all(|s| !ran_to_the_end(&c, "pay", 1, *s)),
        "the planted bug is not caught\n{}",
        timeline(&c)
    );
}

/// The same in a job that stays mixed: B's server is disabled by an operator at +11 s, in B's
/// run, so ElasticJob's failover passes B's run by when B's session expires (it fails over
/// the runs of enabled servers only) and its leader waits for B's marker before it re-shards.
/// B, back at +15.5 s, waits a session timeout for ElasticJob's failover, then removes its
/// marker; the run's fire is given up (as ElasticJob gives it up), and ElasticJob re-shards.
#[test]
fn in_a_mixed_job_a_marker_left_waits_for_elasticjob_s_failover_then_goes() {
    let mut c = killed_runner_world(true, None);
    c.run_until(11_000);
    c.operator_write(&format!("/pay/servers/{}", "10.0.0.2"), b"DISABLED")
        .unwrap();
    c.run_until(11_500);
    c.partition(0);
    c.run_until(15_500);
    c.heal(0);
    c.run_until(40_000);
    let log = timeline(&c);
    let removed: Vec<u64> = c.nodes[0]
        .events
        .iter()
        .filter_map(|(at, e)| match e {
            shardjob_core::machine::MachineEvent::LeftMarkerRemoved { item: 1, .. } => Some(*at),
            _ => None,
        })
        .collect();
    assert!(
        removed.len() == 1 && removed[0] >= 18_500,
        "B's marker left removed at {removed:?}, before a session timeout after its return\n{log}"
    );
    // Nobody ran the fire of +10 s again; the item runs again once ElasticJob re-shards
    // (on ElasticJob's instance, which replays the fires its busy worker missed late).
    assert_eq!(all_runs_of(&c, "pay", 1, 10).len(), 1, "{log}");
    assert!(
        [25, 35].iter().all(|s| ran_to_the_end(&c, "pay", 1, *s)),
        "{log}"
    );
    checkers_pass(&c);
}

/// An ElasticJob instance (A) leading `pay`, runs of 200 ms, and a shardjob instance (B, with
/// the planted bug `plant`) from +1 s, run until `until`: the cluster and B's item.
fn java_led_pair(pay: &JavaJob, plant: Option<&str>, until: u64) -> (Cluster, u32) {
    let mut c = cluster(200);
    c.job_type = "SCRIPT".to_owned();
    c.add_elasticjob_node(A, std::slice::from_ref(pay)).unwrap();
    c.run_until(1_000);
    c.options = Some(options(B, plant));
    c.add_node(B, std::slice::from_ref(&pay.config)).unwrap();
    c.run_until(until);
    let item = c
        .owners(&pay.config.job_name)
        .into_iter()
        .find_map(|(i, o)| (o.trim() == B).then_some(i))
        .unwrap_or_else(|| panic!("B owns no item by +{until} ms\n{}", timeline(&c)));
    (c, item)
}

/// The owner check by version (`core/src/machine/claim/owner.rs`): an ElasticJob instance (A)
/// and a shardjob instance (B) share a job of two items; ElasticJob leads. From +15.3 s, after
/// B's run of the fire of +15 s, B's watch lags 10 s behind the registry; an operator
/// disables B's server at +16 s (ElasticJob's leader sets the re-sharding flag) and triggers
/// A's job at +17 s: A re-shards before its run, deleting every `instance` node and creating
/// it again (at version 0), both items now A's. B claims the fire of +20 s on a view from
/// before all that, which still shows B as its item's owner, at the version it saw. The job
/// does not monitor its runs (nor fail them over): ElasticJob runs its items without looking
/// for `running` nodes.
/// `plant` names a planted bug to switch on in B.
fn resharded_behind_world(plant: Option<&str>) -> (Cluster, u32) {
    let mut pay = job("pay", 2);
    pay.config.monitor_execution = false;
    pay.config.failover = false;
    let (mut c, item) = java_led_pair(&pay, plant, 15_300);
    c.slow_watch(0, 10_000);
    c.run_until(16_000);
    c.operator_write("/pay/servers/10.0.0.2", b"DISABLED")
        .unwrap();
    c.run_until(17_000);
    c.operator_write(&format!("/pay/trigger/{A}"), b"").unwrap();
    c.run_until(40_000);
    (c, item)
}

/// The duplicates of a world: (item, fire in seconds after the start) of each fire the once
/// checker finds run twice, and the overlaps.
fn duplicates(c: &Cluster) -> (Vec<(u32, i64)>, usize) {
    let once = checkers::once::check(&c.runs);
    let fires = once
        .violations
        .iter()
        .filter_map(|v| match &v.subject {
            checkers::Subject::Runs { item, later, .. } => {
                Some((*item, (later.fire - fire(0)) / 1_000))
            }
            _ => None,
        })
        .collect();
    let overlaps = checkers::overlap::check(&c.runs, &Default::default());
    (fires, overlaps.violations.len())
}

/// Each of the fires at `seconds` of `pay`'s item `item` runs once, by ElasticJob, and the
/// world has no duplicate and no overlap.
fn run_once_by_elasticjob(c: &Cluster, item: u32, seconds: &[i64]) {
    let log = timeline(c);
    for &s in seconds {
        let runs = all_runs_of(c, "pay", item, s);
        assert!(
            runs.len() == 1 && runs[0].java,
            "pay/{item} fire +{s} s: {runs:#?}\n{log}"
        );
    }
    assert_eq!(duplicates(c), (vec![], 0), "{log}");
}

/// B's claim after ElasticJob's re-shard fails on the owner's version (B sealed the node at
/// its first claim: version 1, which ElasticJob never leaves a node at), B reloads, and runs
/// none of the fires ElasticJob's instance runs from then on: every fire runs once.
#[test]
fn a_claim_on_a_view_from_before_elasticjob_s_re_shard_fails_on_the_owner_s_version() {
    let (c, item) = resharded_behind_world(None);
    run_once_by_elasticjob(&c, item, &[20, 25, 30, 35]);
}

/// The planted bug `owner-check-by-version-zero`: B's node stays at version 0, ElasticJob's
/// new node is at version 0 too, and B's claims pass on an item ElasticJob gave to A: fires
/// after the re-shard run twice.
#[cfg(feature = "plant")]
#[test]
fn an_owner_checked_by_version_zero_runs_a_fire_elasticjob_runs_too() {
    let (c, item) = resharded_behind_world(Some("owner-check-by-version-zero"));
    let (fires, overlaps) = duplicates(&c);
    assert!(
        overlaps > 0 || fires.iter().any(|&(i, s)| i == item && s >= 20),
        "the planted bug is not caught: {fires:?}\n{}",
        timeline(&c)
    );
}

/// The fire gate kept in the registry too (`docs/migration-design.md` 3.4, point 2): as in
/// [`resharded_behind_world`], but B's watch lags from +12 s, when the operator disables B's
/// server, so B does not see ElasticJob's re-sharding flag before the fire of +15 s.
/// `plant` names a planted bug to switch on in B.
fn gate_behind_world(plant: Option<&str>) -> (Cluster, u32) {
    let (mut c, item) = java_led_pair(&job("pay", 2), plant, 12_000);
    c.slow_watch(0, 10_000);
    c.operator_write("/pay/servers/10.0.0.2", b"DISABLED")
        .unwrap();
    c.run_until(40_000);
    (c, item)
}

/// B's claim of the fire of +15 s fails on the flag its view does not show yet; B reads the
/// job again and waits at the gate; ElasticJob's leader re-shards at its fire, and its
/// instance runs the fire of +15 s on B's old item, once.
#[test]
fn a_claim_behind_elasticjob_s_re_sharding_flag_fails_on_the_flag() {
    let (c, item) = gate_behind_world(None);
    run_once_by_elasticjob(&c, item, &[15, 20, 25]);
}

/// The planted bug `gate-by-view-only`: B claims the fire of +15 s under the old plan, and
/// ElasticJob's instance runs it again after the re-shard.
#[cfg(feature = "plant")]
#[test]
fn a_gate_kept_by_the_view_only_runs_a_fire_twice_behind_a_lagging_watch() {
    let (c, item) = gate_behind_world(Some("gate-by-view-only"));
    let (fires, _) = duplicates(&c);
    assert!(
        fires.contains(&(item, 15)),
        "the planted bug is not caught: {fires:?}\n{}",
        timeline(&c)
    );
}

/// A claim made ahead of a fire, then ElasticJob's re-sharding flag before the fire
/// (`docs/migration-design.md` 3.4, point 3): A (ElasticJob, the leader) and B (shardjob)
/// share a job of two items; B claims its item for the fire of +15 s ahead of it, and a
/// second ElasticJob instance joins right after that claim, so A's leader sets the flag before
/// the fire. A's fire then waits for B's `running` marker and re-shards, and the item's owner
/// under the new plan runs the fire of +15 s. With `lagging`, B's watch lags 10 s from +14.8 s,
/// so B does not see the flag before the fire: while the job is shared with ElasticJob, B
/// claims at the fire, as a J reads the flag at the fire (3.4, point 3), and its claim's check
/// of the flag fails. `plant` names a planted bug to switch on in B.
fn flag_after_claim_world(plant: Option<&str>, lagging: bool) -> (Cluster, u32) {
    const C3: &str = "10.0.0.3@-@3";
    let pay = job("pay", 2);
    let (mut c, item) = java_led_pair(&pay, plant, 14_800);
    if lagging {
        c.slow_watch(0, 10_000);
    }
    c.add_elasticjob_node(C3, std::slice::from_ref(&pay))
        .unwrap();
    c.run_until(40_000);
    (c, item)
}

/// B sees the flag before the fire and gives its claim back instead of starting: the fire of
/// +15 s runs once on B's item, under the new plan.
#[test]
fn a_claim_made_ahead_is_given_back_when_elasticjob_s_flag_comes_before_the_fire() {
    let (c, item) = flag_after_claim_world(None, false);
    let log = timeline(&c);
    let runs = all_runs_of(&c, "pay", item, 15);
    assert!(runs.len() == 1, "pay/{item} fire +15 s: {runs:#?}\n{log}");
    assert_eq!(duplicates(&c), (vec![], 0), "{log}");
}

/// The planted bug `start-ahead-past-the-gate`: B starts the fire of +15 s past the flag, and
/// the item's owner under the new plan runs it again.
#[cfg(feature = "plant")]
#[test]
fn a_claim_made_ahead_started_past_elasticjob_s_flag_runs_a_fire_twice() {
    let (c, item) = flag_after_claim_world(Some("start-ahead-past-the-gate"), false);
    let (fires, _) = duplicates(&c);
    assert!(
        fires.contains(&(item, 15)),
        "the planted bug is not caught: {fires:?}\n{}",
        timeline(&c)
    );
}

/// B claims the fire of +15 s at the fire, after the flag: the claim fails on the flag, B
/// waits at the gate, and the fire runs once on B's item, under the new plan.
#[test]
fn a_fire_shared_with_elasticjob_is_claimed_at_the_fire_and_fails_on_a_flag_set_before_it() {
    let (c, item) = flag_after_claim_world(None, true);
    let log = timeline(&c);
    let runs = all_runs_of(&c, "pay", item, 15);
    assert!(runs.len() == 1, "pay/{item} fire +15 s: {runs:#?}\n{log}");
    assert_eq!(duplicates(&c), (vec![], 0), "{log}");
}

/// The planted bug `claim-ahead-beside-java`: B claims the fire of +15 s ahead, before the
/// flag, starts it at the fire on a view that does not show the flag, and the item's owner
/// under the new plan runs it again.
#[cfg(feature = "plant")]
#[test]
fn a_fire_shared_with_elasticjob_claimed_ahead_runs_twice_past_a_flag_set_before_it() {
    let (c, item) = flag_after_claim_world(Some("claim-ahead-beside-java"), true);
    let (fires, _) = duplicates(&c);
    assert!(
        fires.contains(&(item, 15)),
        "the planted bug is not caught: {fires:?}\n{}",
        timeline(&c)
    );
}

/// A fire held behind ElasticJob's re-sharding flag (`docs/migration-design.md` 3.6, rule
/// (e)): A (ElasticJob, the leader), B (shardjob) and C (ElasticJob) share a job of three
/// items; C stops gracefully at +12 s, A's leader sets the flag, and every instance waits at
/// the fire of +15 s for A's re-shard, which gives C's item to A or B. The new owner runs the
/// fire it waited at, as ElasticJob's instances blocked at a fire do.
/// `plant` names a planted bug to switch on in B.
fn held_fire_world(plant: Option<&str>) -> Cluster {
    const C3: &str = "10.0.0.3@-@3";
    let pay = job("pay", 3);
    let (mut c, _) = java_led_pair(&pay, plant, 5_500);
    c.add_elasticjob_node(C3, std::slice::from_ref(&pay))
        .unwrap();
    c.run_until(12_000);
    c.stop_java(1);
    c.run_until(40_000);
    c
}

/// Every item runs the fires of +10 s to +25 s once each, the held ones included: B runs the
/// fire of +10 s on the item C's join gave it, and that of +15 s on C's.
#[test]
fn a_fire_held_behind_elasticjob_s_flag_runs_once_on_the_item_it_gives_shardjob() {
    let c = held_fire_world(None);
    let log = timeline(&c);
    for item in 0..3 {
        for s in [10, 15, 20, 25] {
            let runs = all_runs_of(&c, "pay", item, s);
            assert!(runs.len() == 1, "pay/{item} fire +{s} s: {runs:#?}\n{log}");
        }
    }
    assert_eq!(duplicates(&c), (vec![], 0), "{log}");
}

/// The planted bug `skip-held-fire`: B gives the held fires up on the items it is given.
#[cfg(feature = "plant")]
#[test]
fn a_fire_held_behind_elasticjob_s_flag_is_lost_when_its_new_owner_skips_it() {
    let c = held_fire_world(Some("skip-held-fire"));
    let lost = (0..3).any(|item| all_runs_of(&c, "pay", item, 15).is_empty())
        || (0..3).any(|item| all_runs_of(&c, "pay", item, 10).is_empty());
    assert!(lost, "the planted bug is not caught\n{}", timeline(&c));
}

/// A job led by ElasticJob (A) and shared with a shardjob instance (B); at +10 s a foreign hand
/// writes a persistent `running` marker that no live instance holds on A's item, and at +11 s
/// a second shardjob instance (C) joins: A's leader sets the re-sharding flag and waits for
/// every `running` node to go before it shards, and every instance holds its fires at the gate
/// meanwhile (`docs/migration-design.md` 3.4 point 2). `plant` names a planted bug to switch on
/// in B and C.
fn foreign_marker_world(plant: Option<&str>) -> Cluster {
    const C: &str = "10.0.0.3@-@3";
    let pay = job("pay", 2);
    let (mut c, b_item) = java_led_pair(&pay, plant, 10_000);
    let a_item = 1 - b_item;
    assert!(
        c.foreign_create(&format!("/pay/sharding/{a_item}/running"), b"10.9.9.9@-@99")
            .unwrap()
    );
    c.run_until(11_000);
    c.options = Some(options(C, plant));
    c.add_node(C, std::slice::from_ref(&pay.config)).unwrap();
    c.run_until(40_000);
    c
}

/// While the job is shared with ElasticJob, the shardjob instances remove a persistent marker
/// whose owner is gone once they have seen it so for a session timeout, whoever wrote it:
/// ElasticJob's leader then shards, and the fires run again.
#[test]
fn a_foreign_marker_beside_elasticjob_is_removed_and_the_leader_shards() {
    let c = foreign_marker_world(None);
    let log = timeline(&c);
    // Timeline lines are stamped `+12.345s`.
    let after_c_joined = |line: &str| {
        line.split_whitespace()
            .next()
            .and_then(|t| t.strip_prefix('+')?.strip_suffix('s')?.parse::<f64>().ok())
            .is_some_and(|t| t >= 11.0)
    };
    assert!(
        log.lines()
            .any(|l| l.contains("sets the re-sharding flag") && after_c_joined(l)),
        "no re-shard after C joined\n{log}"
    );
    for item in [0, 1] {
        assert_ne!(
            c.read(&format!("/pay/sharding/{item}/running")).as_deref(),
            Some("10.9.9.9@-@99"),
            "the foreign marker stays\n{log}"
        );
    }
    assert!(
        !c.exists("/pay/leader/sharding/necessary"),
        "ElasticJob's leader still waits to shard\n{log}"
    );
    for item in [0, 1] {
        assert_eq!(
            all_runs_of(&c, "pay", item, 35).len(),
            1,
            "pay/{item} fire +35 s\n{log}"
        );
    }
    checkers_pass(&c);
}

/// The planted bug `keep-foreign-markers-beside-java`: the marker stays, ElasticJob's leader
/// waits for it for ever, and no fire runs after the flag.
#[cfg(feature = "plant")]
#[test]
fn a_foreign_marker_kept_beside_elasticjob_holds_every_fire_at_the_gate() {
    let c = foreign_marker_world(Some("keep-foreign-markers-beside-java"));
    assert!(
        c.exists("/pay/leader/sharding/necessary"),
        "the planted bug is not caught\n{}",
        timeline(&c)
    );
    assert!(
        (0..2).all(|item| all_runs_of(&c, "pay", item, 35).is_empty()),
        "the planted bug is not caught\n{}",
        timeline(&c)
    );
}

/// The registry's clock (`docs/migration-design.md` 5, question 2): a shardjob instance whose
/// clock is 5 s ahead joins a job ElasticJob runs. It measures its clock against the
/// registry's, holds its runs and says so; once its clock is set right it runs its items again.
/// With the planted bug it claims by its own clock, and runs its fires 5 s early: the fires
/// the ElasticJob instance may run again at their time.
fn clock_world(planted: bool) -> (Cluster, usize) {
    const S: &str = "10.0.0.2@-@2";
    let mut c = cluster(200);
    c.job_type = "SCRIPT".to_owned();
    let pay = job("pay", 2);
    c.add_elasticjob_node(A, std::slice::from_ref(&pay))
        .unwrap();
    c.run_until(1_000);
    c.options = Some(options(S, planted.then_some("ignore-registry-clock")));
    let n = c.add_node(S, std::slice::from_ref(&pay.config)).unwrap();
    c.set_skew(n, 5_000);
    c.run_until(31_000);
    c.step_clock(n, -5_000);
    c.run_until(61_000);
    (c, n)
}

#[test]
fn a_clock_off_the_registry_s_holds_shardjob_s_runs_beside_elasticjob() {
    use shardjob_core::machine::MachineEvent;
    let (c, n) = clock_world(false);
    let log = timeline(&c);
    let early = checkers::early::check(&c);
    assert!(early.is_empty(), "{early:#?}\n{log}");
    let s_runs = |from: i64| {
        c.runs
            .iter()
            .filter(|r| !r.java && r.node == n && r.fire >= fire(from))
            .count()
    };
    // Held while 5 s ahead: no run started before the clock was set right (+31 s).
    let before = c
        .runs
        .iter()
        .filter(|r| !r.java && r.node == n && r.start < 31_000)
        .count();
    assert_eq!(before, 0, "{log}");
    // Then the fires its item missed meanwhile run as one misfire, and its fires of +35 s on.
    assert!(
        c.runs
            .iter()
            .any(|r| !r.java && r.node == n && r.kind == RunKind::Misfire && r.fire == fire(30)),
        "{log}"
    );
    assert!(s_runs(35) >= 3, "{log}");
    let events: Vec<&MachineEvent> = c.nodes[n].events.iter().map(|(_, e)| e).collect();
    let off: Vec<i64> = events
        .iter()
        .filter_map(|e| match e {
            MachineEvent::RegistryClockOff {
                off_ms, limit_ms, ..
            } if *limit_ms == 1_000 => Some(*off_ms),
            _ => None,
        })
        .collect();
    assert!(
        off.len() == 1 && (4_900..=5_000).contains(&off[0]),
        "clock reports {off:?}\n{log}"
    );
    assert!(
        events
            .iter()
            .any(|e| matches!(e, MachineEvent::RegistryClockBack { .. })),
        "{log}"
    );
    checkers_pass(&c);
}

#[cfg(feature = "plant")]
#[test]
fn a_claim_by_a_clock_off_the_registry_s_runs_fires_early_beside_elasticjob() {
    let (c, _) = clock_world(true);
    assert!(
        !checkers::early::check(&c).is_empty(),
        "the planted bug is not caught\n{}",
        timeline(&c)
    );
}

/// One ElasticJob instance (A, the leader) and two shardjob instances (B, C, `plant` switched
/// on in both) sharing a job of three items every 5 s, runs of 300 ms, to +12 s; C's index.
fn led_by_elasticjob(plant: Option<&str>) -> (Cluster, usize) {
    const C: &str = "10.0.0.3@-@3";
    let mut c = cluster(300);
    c.job_type = "SCRIPT".to_owned();
    let pay = job("pay", 3);
    c.add_elasticjob_node(A, std::slice::from_ref(&pay))
        .unwrap();
    c.run_until(1_000);
    c.options = Some(options(B, plant));
    c.add_node(B, std::slice::from_ref(&pay.config)).unwrap();
    c.options = Some(options(C, plant));
    let n = c.add_node(C, std::slice::from_ref(&pay.config)).unwrap();
    c.run_until(12_000);
    (c, n)
}

/// 3.7 of `docs/migration-design.md`: an ElasticJob leader's plan that names an owner with no
/// instance node, and no re-sharding flag. ElasticJob re-shards only when an instance comes or
/// goes and at a leader's fire while the flag is up, so such a plan stays (its sharding reads
/// the instances before it waits for running items: one that leaves meanwhile keeps its
/// items, seed 77 of the mixed world; here an operator's edit stands for it). One ElasticJob
/// instance (A, the leader) and two shardjob instances (B, C) share a job of three items every
/// 5 s; at +12 s item 1 is given to an instance that does not exist. With `planted`, the
/// shardjob instances leave the plan as it is.
fn gone_owner_world(planted: bool) -> Cluster {
    let (mut c, _) = led_by_elasticjob(planted.then_some("no-nudge-beside-java"));
    c.operator_write("/pay/sharding/1/instance", b"10.0.0.9@-@9")
        .unwrap();
    c.run_until(60_000);
    c
}

#[test]
fn a_plan_elasticjob_keeps_on_an_owner_gone_is_re_sharded_at_shardjob_s_flag() {
    let c = gone_owner_world(false);
    let log = timeline(&c);
    assert!(
        log.contains("names owners gone (1→10.0.0.9@-@9)"),
        "no flag for the owner gone\n{log}"
    );
    // Item 1 runs again within a session timeout and two fires of the edit, every fire
    // from then on.
    for s in (30..60).step_by(5) {
        assert_eq!(
            all_runs_of(&c, "pay", 1, s).len(),
            1,
            "pay/1 fire +{s}s\n{log}"
        );
    }
    assert_ne!(
        c.owners("pay").get(&1).map(String::as_str),
        Some("10.0.0.9@-@9"),
        "{log}"
    );
}

#[cfg(feature = "plant")]
#[test]
fn a_plan_elasticjob_keeps_on_an_owner_gone_loses_its_item_s_fires_for_good() {
    let c = gone_owner_world(true);
    let log = timeline(&c);
    let after: Vec<&RunRecord> = c
        .runs
        .iter()
        .filter(|r| r.item == 1 && r.fire > fire(15))
        .collect();
    assert!(
        after.is_empty(),
        "the planted bug is not caught: {after:#?}\n{log}"
    );
}

/// 3.7 of `docs/migration-design.md`: a garbage instance node (an id not `{ip}@-@{pid}`) in a
/// job ElasticJob leads. ElasticJob reads every instance node as a `JobInstance`, so its
/// leader's every sharding throws while the node is there, and it never deletes one. One
/// ElasticJob instance (A, the leader) and two shardjob instances (B, C) share a job of three
/// items every 5 s; at +12 s a foreign hand writes the node, at +13 s C crashes: its item is
/// re-sharded only once the node is gone. With `planted`, the shardjob instances leave it.
fn garbage_world(planted: bool) -> Cluster {
    let (mut c, n) = led_by_elasticjob(planted.then_some("keep-garbage-beside-java"));
    c.foreign_create("/pay/instances/10.9.9.9@-@junk", b"garbage")
        .unwrap();
    c.run_until(13_000);
    c.crash(n);
    c.run_until(60_000);
    c
}

#[test]
fn a_garbage_instance_node_beside_elasticjob_is_deleted_so_its_leader_shards_again() {
    let c = garbage_world(false);
    let log = timeline(&c);
    assert!(!c.exists("/pay/instances/10.9.9.9@-@junk"), "{log}");
    // Every item runs every fire from a session timeout and a fire after the crash on.
    for item in 0..3 {
        for s in (30..60).step_by(5) {
            assert_eq!(
                all_runs_of(&c, "pay", item, s).len(),
                1,
                "pay/{item} fire +{s}s\n{log}"
            );
        }
    }
}

#[cfg(feature = "plant")]
#[test]
fn a_garbage_instance_node_kept_beside_elasticjob_stops_its_job_for_good() {
    let c = garbage_world(true);
    let log = timeline(&c);
    let late: Vec<&RunRecord> = c.runs.iter().filter(|r| r.fire >= fire(30)).collect();
    let items: std::collections::BTreeSet<u32> = late.iter().map(|r| r.item).collect();
    assert!(
        items.len() < 3,
        "the planted bug is not caught: items {items:?} ran after +30 s\n{log}"
    );
}
