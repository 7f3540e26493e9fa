//! A small randomized soak of the core machine: crashes, joins, partitions, expiries and
//! operator actions from a seed, then a heal phase in which every fire must run exactly once.
//! (The full simulator with its nemesis and checkers is `shardjob-sim`; this keeps the core
//! honest in `cargo test`.)

use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::{RngCore, SeedableRng};
use shardjob_core::{CronExpr, JobConfig};
use shardjob_sim::cluster::Cluster;

fn job(name: &str, cron: &str, total: u32, failover: bool) -> JobConfig {
    let mut c = JobConfig::new(name, total);
    c.cron = Some(CronExpr::parse(cron).unwrap());
    c.failover = failover;
    c
}

fn soak(seed: u64) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let jobs = [
        job("fast", "* * * * * ?", 5, true),
        job("slow", "0/3 * * * * ?", 3, false),
    ];
    let mut c = Cluster::new();
    c.duration = Box::new(|job, item, _| {
        if job == "fast" {
            300 + 50 * u64::from(item)
        } else {
            2_500
        }
    });
    let mut next_id = 1;
    for _ in 0..3 {
        c.add_node(&format!("10.0.0.{next_id}@-@{next_id}"), &jobs)
            .unwrap();
        next_id += 1;
    }
    // Chaos for 40 s.
    let mut t = 1_000;
    while t < 40_000 {
        c.run_until(t);
        let up: Vec<usize> = (0..c.nodes.len()).filter(|n| c.nodes[*n].up()).collect();
        match rng.next_u32() % 8 {
            0 if up.len() > 1 => c.crash(up[rng.next_u32() as usize % up.len()]),
            1 if up.len() < 5 => {
                c.add_node(&format!("10.0.0.{next_id}@-@{next_id}"), &jobs)
                    .unwrap();
                next_id += 1;
            }
            2 => {
                let n = up[rng.next_u32() as usize % up.len()];
                c.partition(n);
            }
            3 => {
                for n in up {
                    if c.nodes[n].partitioned() {
                        c.heal(n);
                    }
                }
            }
            4 => {
                // A registry that ends a session never does so while the client is in
                // contact: expiry comes from a cut longer than the session timeout.
                let n = up[rng.next_u32() as usize % up.len()];
                c.partition(n);
                c.run_for(3_500);
                c.heal(n);
            }
            5 => {
                let n = up[rng.next_u32() as usize % up.len()];
                c.trigger(n, "fast");
            }
            _ => {}
        }
        t += 500 + u64::from(rng.next_u32() % 3_000);
    }
    // Heal: everyone reconnects; then everything must converge and run every fire once.
    for n in 0..c.nodes.len() {
        if c.nodes[n].partitioned() {
            c.heal(n);
        }
    }
    c.run_until(60_000);
    c.assert_no_overlap();
    let origin = c.wall_origin.timestamp_millis();
    for k in 50..=59 {
        let fire = origin + k * 1_000;
        for item in 0..5 {
            let n = c
                .runs
                .iter()
                .filter(|r| r.job == "fast" && r.item == item && r.fire == fire)
                .count();
            assert_eq!(
                n, 1,
                "seed {seed}: fast item {item} fire {k}s ran {n} times"
            );
        }
    }
    for k in [51, 54, 57] {
        let fire = origin + k * 1_000;
        for item in 0..3 {
            let n = c
                .runs
                .iter()
                .filter(|r| r.job == "slow" && r.item == item && r.fire == fire)
                .count();
            assert_eq!(
                n, 1,
                "seed {seed}: slow item {item} fire {k}s ran {n} times"
            );
        }
    }
}

#[test]
fn soak_seeds() {
    for seed in 0..12 {
        soak(seed);
    }
}
