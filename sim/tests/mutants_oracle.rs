//! The simulator as the oracle of mutation testing (`scripts/mutants`): with
//! `SHARDJOB_MUTANTS_SEEDS=N` set, runs seeds `0..N` of CI's world (3 instances, 4 jobs,
//! 0.03 simulated hours) and fails on the first violation. Without it, it does nothing: a plain
//! `cargo test` runs the simulator's own seed tests instead.

use shardjob_sim::world::{self, WorldConfig};

#[test]
fn ci_world_seeds_hold() {
    let Ok(seeds) = std::env::var("SHARDJOB_MUTANTS_SEEDS") else {
        return;
    };
    let seeds: u64 = match seeds.parse() {
        Ok(n) => n,
        Err(e) => panic!("SHARDJOB_MUTANTS_SEEDS={seeds:?} is not a number of seeds: {e}"),
    };
    for seed in 0..seeds {
        let mut cfg = WorldConfig::standard(seed);
        cfg.instances = 3;
        cfg.job_count = 4;
        cfg.duration_ms = 108_000;
        let report = world::run(&cfg);
        assert!(
            report.violations.is_empty(),
            "seed {seed}: {:?}",
            report.violations.first()
        );
    }
}
