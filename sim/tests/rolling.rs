//! Rolling replacement of one kind of instance by the other (`docs/migration.md`, "Rolling";
//! `docs/migration-design.md` section 4): the migration replaces every ElasticJob instance by a
//! shardjob one, after which the job is run by shardjob alone; the rollback the other way; the
//! roll is drawn by some seeds of a world with both kinds and not by others, and a seed that
//! does not draw it keeps its world.

use std::collections::BTreeSet;

use shardjob_core::{CronExpr, JobConfig};
use shardjob_sim::checkers;
use shardjob_sim::cluster::RunRecord;
use shardjob_sim::network::Races;
use shardjob_sim::world::{self, Rolling, SeedReport, Shape, WorldConfig};

/// A job of 4 items firing every 2 s, with failover, misfire and execution monitoring on (the
/// migration guide asks for `monitorExecution`).
fn pay() -> JobConfig {
    let mut c = JobConfig::new("pay", 4);
    c.cron = CronExpr::parse("0/2 * * * * ?").ok();
    c.failover = true;
    c.misfire = true;
    c.monitor_execution = true;
    c
}

/// A world without faults and without races: `instances` shardjob and `elasticjob` ElasticJob
/// instances run `pay` (runs of 200 to 400 ms) for 150 s, rolling `rolling`.
fn quiet(seed: u64, instances: usize, elasticjob: usize, rolling: Option<Rolling>) -> WorldConfig {
    WorldConfig {
        instances,
        elasticjob,
        rolling,
        jobs: vec![pay()],
        duration_ms: 150_000,
        faults: BTreeSet::new(),
        shapes: BTreeSet::new(),
        races: Some(Races::NONE),
        run_ms: [("pay".to_owned(), (200, 400))].into(),
        ignore_cancel: Some(BTreeSet::new()),
        session_timeout: Some(std::time::Duration::from_secs(3)),
        keep_log: true,
        ..WorldConfig::standard(seed)
    }
}

/// The fires of `pay` (every 2 s) from virtual `from` to `to` ms, as epoch ms.
fn fires(report: &SeedReport, from: u64, to: u64) -> Vec<i64> {
    let origin = report.wall_origin.timestamp_millis();
    (from.div_ceil(2_000) * 2_000..to)
        .step_by(2_000)
        .map(|t| origin + t as i64)
        .collect()
}

/// The runs of `pay`'s item `item` for `fire`, triggers left out.
fn runs_of(report: &SeedReport, item: u32, fire: i64) -> Vec<&RunRecord> {
    report
        .records
        .iter()
        .filter(|r| r.item == item && r.fire == fire)
        .collect()
}

/// The failing violations about what happened from `from` on.
fn failing_from(report: &SeedReport, from: u64) -> Vec<&checkers::Violation> {
    let origin = report.wall_origin.timestamp_millis();
    report
        .violations
        .iter()
        .filter(|v| v.about_time(origin) >= from)
        .collect()
}

/// What a roll of `pay` did in the world `quiet(seed, ..)` makes, checked: every instance of
/// the old kind (2) was replaced by one of the new kind, none of the old kind ran anything
/// once the last one had gone, the new kind ran every run from then on, and from 5 s after
/// that every fire of every item ran exactly once. Returns the report and when the last of the
/// old kind had gone.
fn rolled(cfg: &WorldConfig, to_java: bool) -> (SeedReport, u64) {
    let report = world::run(cfg);
    let seed = cfg.seed;
    let log = report.log.join("\n");
    let roll = report.roll.clone().expect("the roll's report");
    assert!(report.shapes.contains(&roll.direction.shape()), "{log}");
    assert_eq!((roll.stopped, roll.started), (2, 2), "seed {seed}\n{log}");
    let left = roll.last_left.expect("the last of the old kind left");
    let old_before = report
        .records
        .iter()
        .filter(|r| r.java != to_java && r.start < left)
        .count();
    assert!(old_before > 0, "seed {seed}: no run of the old kind\n{log}");
    assert!(
        report
            .records
            .iter()
            .all(|r| r.java == to_java || r.start < left),
        "seed {seed}: a run of the old kind after the last of it left\n{log}"
    );
    let tail = fires(&report, left + 5_000, report.sim_ms - 2_000);
    assert!(
        tail.len() > 20,
        "seed {seed}: {} fires after the roll",
        tail.len()
    );
    for fire in &tail {
        for item in 0..4 {
            let runs = runs_of(&report, item, *fire);
            assert!(
                runs.len() == 1 && runs[0].java == to_java,
                "seed {seed}: pay/{item} fire {fire}: {runs:#?}\n{log}"
            );
        }
    }
    (report, left)
}

/// The migration of a small job: both ElasticJob instances are replaced one by one by
/// shardjob instances (SIGTERM, or `kill -9`; on the same server or a new one); from 5 s after
/// the last one has gone, every fire of every item runs once, by shardjob. What fails from the
/// moment it has gone is at most a fire or two lost in those first seconds (the takeover of
/// the last ElasticJob instance's items without 3.6's rule, `docs/migration-design.md` 3.8
/// step 3: the item has no record of shardjob's, and its new owner's baseline is the moment it
/// got it); seed 3 loses none. Without the roll, ElasticJob goes on running the job.
#[test]
fn a_migration_replaces_every_elasticjob_instance_and_shardjob_runs_every_fire_after_it() {
    for seed in 0..8 {
        let (report, left) = rolled(&quiet(seed, 1, 2, Some(Rolling::ToShardjob)), false);
        let log = report.log.join("\n");
        assert_eq!(report.java_instances.len(), 2, "{log}");
        assert_eq!(report.instances.len(), 3, "seed {seed}\n{log}");
        let origin = report.wall_origin.timestamp_millis();
        for v in failing_from(&report, left) {
            assert!(
                v.checker == "lost" && v.about_time(origin) < left + 5_000,
                "seed {seed}: {v:#?}\n{log}"
            );
        }
        // The timeline says what the roll did.
        assert!(
            report
                .log
                .iter()
                .any(|l| l.starts_with("world: rolling: the 2 ElasticJob")),
            "{log}"
        );
        assert!(
            report
                .log
                .iter()
                .any(|l| l.contains("rolling: the last ElasticJob process has gone")),
            "{log}"
        );
        if seed == 3 {
            let tail = failing_from(&report, left);
            assert!(tail.is_empty(), "{tail:#?}\n{log}");
            // The same world without the roll: ElasticJob's instances run the job to the end.
            let still = world::run(&quiet(seed, 1, 2, None));
            assert!(still.roll.is_none() && !still.shapes.contains(&Shape::RollToShardjob));
            let java_after = still
                .records
                .iter()
                .filter(|r| r.java && r.start >= left)
                .count();
            assert!(
                java_after > 20,
                "{java_after} ElasticJob runs without the roll"
            );
        }
    }
}

/// The rollback: a job run by shardjob instances alone gets ElasticJob instances, one for each
/// shardjob instance stopped, until none of shardjob's is left; from then on ElasticJob runs
/// the job (and the heal starts no shardjob process), and nothing that fails is shardjob's.
#[test]
fn a_rollback_replaces_every_shardjob_instance_and_elasticjob_runs_every_fire_after_it() {
    for seed in 0..8 {
        let (report, left) = rolled(&quiet(seed, 2, 0, Some(Rolling::ToElasticjob)), true);
        let log = report.log.join("\n");
        assert_eq!(report.instances.len(), 2, "seed {seed}: {log}");
        assert_eq!(report.java_instances.len(), 2, "seed {seed}: {log}");
        let tail = failing_from(&report, left);
        assert!(tail.is_empty(), "seed {seed}: {tail:#?}\n{log}");
    }
}

/// The world `shardjob-sim --seed SEED --instances 3 --jobs 4 --hours 0.03 --elasticjob J`
/// runs.
fn cli_world(seed: u64, elasticjob: usize) -> WorldConfig {
    WorldConfig {
        instances: 3,
        job_count: 4,
        duration_ms: 108_000,
        elasticjob,
        ..WorldConfig::standard(seed)
    }
}

/// In a world with both kinds, some seeds draw a roll (each way) and others none; one that
/// draws none keeps the world it has without the rolling shapes, and a world without
/// ElasticJob instances never draws one.
#[test]
fn a_roll_is_drawn_by_some_mixed_seeds_and_the_others_keep_their_world() {
    let (mut drawn, mut kept) = (BTreeSet::new(), 0);
    for seed in 0..16 {
        let report = world::run(&cli_world(seed, 2));
        let Some(roll) = &report.roll else {
            let without = world::run(&WorldConfig {
                shapes: Shape::ALL
                    .into_iter()
                    .filter(|s| s.rolling().is_none())
                    .collect(),
                ..cli_world(seed, 2)
            });
            assert_eq!(report.trace_hash, without.trace_hash, "seed {seed}");
            kept += 1;
            continue;
        };
        assert!(
            report.shapes.contains(&roll.direction.shape()),
            "seed {seed}"
        );
        // Every instance of the old kind was replaced before the heal.
        assert!(roll.last_left.is_some(), "seed {seed}: {roll:?}");
        assert!(roll.started > 0, "seed {seed}: {roll:?}");
        drawn.insert(roll.direction);
    }
    assert!(kept > 2, "{kept} seeds drew no roll");
    assert_eq!(
        drawn,
        [Rolling::ToShardjob, Rolling::ToElasticjob].into(),
        "the ways drawn"
    );
    for seed in 0..8 {
        let report = world::run(&cli_world(seed, 0));
        assert!(report.roll.is_none(), "seed {seed}");
        assert!(report.records.iter().all(|r| !r.java));
    }
}

/// A roll a world cannot make is refused as a `config` violation: nothing to replace.
#[test]
fn a_roll_without_instances_of_the_old_kind_is_refused() {
    let report = world::run(&WorldConfig {
        rolling: Some(Rolling::ToShardjob),
        ..cli_world(1, 0)
    });
    assert_eq!(report.violations.len(), 1, "{:#?}", report.violations);
    assert_eq!(report.violations[0].checker, "config");
    assert!(report.violations[0].message.contains("rolling j2s"));
    let report = world::run(&WorldConfig {
        rolling: Some(Rolling::ToElasticjob),
        instances: 0,
        ..cli_world(1, 2)
    });
    assert_eq!(report.violations.len(), 1, "{:#?}", report.violations);
    assert!(report.violations[0].message.contains("rolling s2j"));
    assert!(report.records.is_empty());
}

/// The left-over checker (run once a migration's last ElasticJob instance has left) names each
/// node of ElasticJob's still there: a queued failover, a `failovering` node, a `misfire` flag,
/// a `running` marker of an ElasticJob instance's; not a marker of anyone else's.
#[test]
fn the_left_over_checker_names_what_elasticjob_leaves_behind() {
    use shardjob_sim::cluster::Cluster;
    use shardjob_sim::elasticjob::JavaJob;
    const J: &str = "10.0.2.1@-@1";
    let mut c = Cluster::new();
    c.job_type = "SCRIPT".to_owned();
    c.add_elasticjob_node(J, &[JavaJob::script(pay())]).unwrap();
    c.add_node("10.0.0.1@-@2", &[pay()]).unwrap();
    c.run_until(5_000);
    c.crash_java(0);
    c.run_until(15_000);
    let jobs = [("pay".to_owned(), 4)];
    let found = checkers::leftover::check(&c, &jobs, c.now);
    assert!(found.is_empty(), "{found:#?}\n{}", c.log.join("\n"));
    // ElasticJob's latch and queue directories (a J creates them on its first failover).
    for dir in ["/pay/leader/failover", "/pay/leader/failover/items"] {
        if !c.exists(dir) {
            c.operator_write(dir, b"").unwrap();
        }
    }
    for (path, value) in [
        ("/pay/leader/failover/items/3", ""),
        ("/pay/sharding/2/failovering", J),
        ("/pay/sharding/1/misfire", ""),
        ("/pay/sharding/0/running", J),
        ("/pay/sharding/3/running", "10.9.9.8@-@7"),
    ] {
        c.operator_write(path, value.as_bytes()).unwrap();
        assert!(c.exists(path), "{path}");
    }
    let found = checkers::leftover::check(&c, &jobs, c.now);
    let paths: BTreeSet<&str> = found
        .iter()
        .filter_map(|v| v.message.split(' ').next())
        .collect();
    assert_eq!(
        paths,
        [
            "/pay/leader/failover/items/3",
            "/pay/sharding/0/running",
            "/pay/sharding/1/misfire",
            "/pay/sharding/2/failovering",
        ]
        .into(),
        "{found:#?}"
    );
    assert!(found.iter().all(|v| v.checker == "left-over"));
}
