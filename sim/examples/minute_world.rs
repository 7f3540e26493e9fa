//! The standard world with crons from every minute to hourly instead of from every second:
//! what a simulated hour costs when the cron world is mostly idle time.
//!
//! `cargo run --release -p shardjob-sim --example minute_world -- [SEEDS]` (10 by default)
//! prints one summary line like the `shardjob-sim` binary's.

use std::process::ExitCode;
use std::time::Instant;

use shardjob_core::{CronExpr, JobConfig};
use shardjob_sim::world::{self, WorldConfig};

/// The same allocator as the `shardjob-sim` binary, so the figures compare.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const CRONS: [&str; 5] = [
    "0 * * * * ?",
    "0 0/2 * * * ?",
    "0 0/5 * * * ?",
    "0 0/15 * * * ?",
    "0 0 * * * ?",
];

fn main() -> ExitCode {
    let seeds: u64 = match std::env::args().nth(1).map(|a| a.parse()) {
        None => 10,
        Some(Ok(n)) => n,
        Some(Err(e)) => {
            eprintln!("SEEDS must be a number: {e}");
            return ExitCode::from(2);
        }
    };
    // 20 jobs, the crons in turn, 1–8 items.
    let mut jobs = Vec::new();
    for k in 0..20u32 {
        let mut job = JobConfig::new(format!("job{k}"), 1 + k % 8);
        job.cron = CronExpr::parse(CRONS[k as usize % CRONS.len()]).ok();
        job.failover = true;
        jobs.push(job);
    }
    let (mut sim_ms, mut runs, mut violations) = (0u64, 0usize, 0usize);
    let started = Instant::now();
    for seed in 0..seeds {
        let report = world::run(&WorldConfig {
            jobs: jobs.clone(),
            ..WorldConfig::standard(seed)
        });
        for v in &report.violations {
            eprintln!("seed {seed}: {v:?}");
        }
        sim_ms += report.sim_ms;
        runs += report.runs;
        violations += report.violations.len();
    }
    let wall = started.elapsed().as_secs_f64();
    println!(
        "seeds={seeds} violations={violations} item_runs={runs} sim_hours={:.2} wall_s={wall:.2} compression={:.0}x",
        sim_ms as f64 / 3_600_000.0,
        sim_ms as f64 / 1000.0 / wall.max(1e-9),
    );
    if violations == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
