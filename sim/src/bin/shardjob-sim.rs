//! `shardjob-sim`: runs seeded worlds of real shardjob machines under faults and checks them.

/// Every registry event a world delivers allocates (its path, its data, the machine's cache
/// entry): mimalloc makes a seed about a fifth faster than the system allocator. A test binary
/// that runs many seeds can set it the same way.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::io::Write as _;
use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;
use shardjob_sim::world::{self, SeedReport, WorldConfig};

/// Prints a line on stdout (as `println!`, which panics when stdout is closed).
macro_rules! say {
    ($($arg:tt)*) => {
        emit(format_args!($($arg)*))
    };
}

/// Writes one line on stdout. A reader that went away (`shardjob-sim ... | head`) ends the
/// program quietly with status 0: nobody reads the rest; another write error ends it with
/// status 1 and says why.
fn emit(line: std::fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_fmt(line).and_then(|()| out.write_all(b"\n")) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("shardjob-sim: cannot write to stdout: {e}");
        std::process::exit(1);
    }
}

/// Runs seeded worlds of real shardjob machines under faults and checks the invariants.
#[derive(Debug, Parser)]
#[command(name = "shardjob-sim", version, about)]
struct Args {
    /// How many seeds to run.
    #[arg(long, default_value_t = 100)]
    seeds: u64,
    /// The first seed.
    #[arg(long, default_value_t = 0)]
    from: u64,
    /// Replay one seed, with its timeline.
    #[arg(long)]
    seed: Option<u64>,
    /// Instances at the start (0 only with --elasticjob: a world of ElasticJob instances).
    #[arg(long, default_value_t = 5)]
    instances: usize,
    /// Jobs per world.
    #[arg(long, default_value_t = 20)]
    jobs: usize,
    /// Simulated hours per seed.
    #[arg(long, default_value_t = 1.0)]
    hours: f64,
    /// Switch on one planted bug (needs the `plant` feature); stops at the first seed that
    /// catches it.
    #[arg(long)]
    plant: Option<String>,
    /// With --plant: a seed catches the planted bug only when this checker reports (by its
    /// name in the violations, e.g. `mixed-leader`); other violations are counted, not taken
    /// for the catch. For worlds that fail without the plant (ElasticJob's mixed worlds).
    #[arg(long, requires = "plant")]
    plant_checker: Option<String>,
    /// List the planted bugs compiled in, one per line.
    #[arg(long)]
    list_plants: bool,
    /// With --seed: print the whole timeline, not only the part before the first violation.
    #[arg(long)]
    full_log: bool,
    /// How many of a failing seed's violations to print (the first ones, in time order).
    #[arg(long, default_value_t = 10)]
    violations: usize,
    /// Most items of a job drawn by a seed.
    #[arg(long, default_value_t = 8)]
    max_items: u32,
    /// Never draw a registry limit on the operations of a transaction.
    #[arg(long)]
    no_txn_limits: bool,
    /// Run every Nth seed twice and compare the trace hashes (0: never).
    #[arg(long, default_value_t = 10)]
    determinism_every: u64,
    /// The instances' session timeout, ms (100 to 600000); drawn from 2 to 6 s by default
    /// (100 ms to 60 s in the seeds that draw that shape).
    #[arg(long)]
    session_timeout_ms: Option<u64>,
    /// Draw none of the richer shapes (operator edits inside runs, leaders' clocks, a job of
    /// many items, runs over many fires, short and long sessions): every seed's world as it
    /// was before them.
    #[arg(long)]
    no_shapes: bool,
    /// Add this many ElasticJob 3.0.4 instances to each world, hosting every job beside the
    /// shardjob instances (mixed worlds still fail, mostly on what ElasticJob itself gives up:
    /// `docs/migration-design.md` section 5).
    #[arg(long, default_value_t = 0)]
    elasticjob: usize,
    /// A rolling replacement in every seed: `j2s` replaces the ElasticJob instances one by one
    /// by shardjob ones (the migration; needs --elasticjob), `s2j` the shardjob instances by
    /// ElasticJob ones (a rollback); `none`: in no seed. By default half of the seeds of a
    /// world with both kinds draw one (a third of them `s2j`).
    #[arg(long, value_parser = ["j2s", "s2j", "none"])]
    rolling: Option<String>,
    /// Print every violation counted as ElasticJob's own (always with --seed), with the
    /// behaviour it stands for.
    #[arg(long)]
    show_elasticjob_own: bool,
    /// Print each seed's trace hash (`seed N trace 0x…`): two builds that behave alike print
    /// the same lines, so a change meant to keep behaviour is checked by a diff.
    #[arg(long)]
    hashes: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    if args.list_plants {
        for name in plant_names() {
            say!("{name}");
        }
        return ExitCode::SUCCESS;
    }
    let base = match config(&args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("shardjob-sim: {e}");
            return ExitCode::from(2);
        }
    };
    let (from, count) = match args.seed {
        Some(s) => (s, 1),
        None => (args.from, args.seeds),
    };
    let started = Instant::now();
    let mut violations = 0u64;
    let mut sim_ms = 0u64;
    let mut ran = 0u64;
    let mut caught = false;
    let (mut retries, mut ignored, mut fenced, mut runs) = (0, 0, 0, 0);
    let mut quiet_wakes = 0;
    // Violations by checker, and the seeds each failed.
    let mut by_checker: std::collections::BTreeMap<&'static str, (u64, u64)> = Default::default();
    // In worlds with ElasticJob instances: the failing violations by checker and by the kinds
    // of the two runs they name (`once J then S`), and ElasticJob's own by checker and
    // behaviour, with the seeds that had any.
    let mut by_kinds: std::collections::BTreeMap<String, (u64, u64)> = Default::default();
    let mut own: std::collections::BTreeMap<String, u64> = Default::default();
    let (mut own_total, mut own_seeds) = (0u64, 0u64);
    // Seeds that rolled one kind into the other: the failing violations from the moment the
    // last process of the old kind had gone (the tail), by checker and kinds of runs, and
    // ElasticJob's own there.
    let mut rolls = Rolls::default();
    for seed in from..from.saturating_add(count) {
        let mut cfg = base.clone();
        cfg.seed = seed;
        cfg.keep_log = args.seed.is_some();
        let report = world::run(&cfg);
        ran += 1;
        sim_ms += report.sim_ms;
        retries += report.retries;
        ignored += report.ignored_cancel;
        fenced += report.fenced_after_pause;
        runs += report.runs;
        quiet_wakes = quiet_wakes.max(report.quiet_wake_peak);
        if args.hashes {
            say!("seed {seed} trace {:#018x}", report.trace_hash);
        }
        if args.determinism_every > 0 && seed % args.determinism_every == 0 {
            let again = world::run(&cfg);
            if again.trace_hash != report.trace_hash {
                violations += 1;
                say!(
                    "seed {seed}: determinism: trace hash {:#x} then {:#x}",
                    report.trace_hash,
                    again.trace_hash
                );
            }
        }
        if args.seed.is_some() || args.show_elasticjob_own {
            for (v, b) in &report.elasticjob_own {
                say!(
                    "  elasticjob's own ({}) [{}] at {}: {}",
                    b.name(),
                    v.checker,
                    shardjob_sim::timeline::clock(v.time),
                    v.message
                );
            }
        }
        if !report.elasticjob_own.is_empty() {
            own_seeds += 1;
            own_total += report.elasticjob_own.len() as u64;
            for (v, b) in &report.elasticjob_own {
                *own.entry(format!("{} {}", v.checker, b.name()))
                    .or_default() += 1;
            }
        }
        rolls.add(&report);
        if args.elasticjob > 0 || report.roll.is_some() {
            let by_item = shardjob_sim::checkers::runs_by_item(&report.records);
            let mut seen = std::collections::BTreeSet::new();
            for v in &report.violations {
                let key = match shardjob_sim::checkers::attribution::kinds(v, &by_item) {
                    Some(k) => format!("{} {k}", v.checker),
                    None => v.checker.to_owned(),
                };
                let e = by_kinds.entry(key.clone()).or_default();
                e.0 += 1;
                if seen.insert(key) {
                    e.1 += 1;
                }
            }
        }
        if !report.violations.is_empty() {
            violations += report.violations.len() as u64;
            let mut seen = std::collections::BTreeSet::new();
            for v in &report.violations {
                let e = by_checker.entry(v.checker).or_default();
                e.0 += 1;
                if seen.insert(v.checker) {
                    e.1 += 1;
                }
            }
            let catches = report.violations.iter().any(|v| {
                args.plant_checker
                    .as_deref()
                    .is_none_or(|name| v.checker == name)
            });
            if args.plant.is_none() || catches {
                print_failure(&report, &args, &cfg);
            }
            if args.plant.is_some() && catches {
                caught = true;
                say!(
                    "plant {} caught at seed {seed} after {ran} seeds",
                    args.plant.as_deref().unwrap_or("")
                );
                break;
            }
        } else if args.seed.is_some() {
            for line in &report.log {
                say!("{line}");
            }
        }
    }
    let wall = started.elapsed().as_secs_f64();
    let hours = sim_ms as f64 / 3_600_000.0;
    let compression = if wall > 0.0 {
        sim_ms as f64 / 1000.0 / wall
    } else {
        0.0
    };
    say!(
        "seeds={ran} violations={violations} sim_hours={hours:.2} wall_s={wall:.2} compression={compression:.0}x"
    );
    // What a simulated hour costs depends mostly on how many item runs the seeds drew.
    say!(
        "(item_runs={runs} retries={retries} overlaps_of_jobs_ignoring_cancel={ignored} fenced_after_pause={fenced} quiet_wakes_per_s_peak={quiet_wakes})"
    );
    if !by_checker.is_empty() {
        let parts: Vec<String> = by_checker
            .iter()
            .map(|(k, (n, seeds))| format!("{k}={n} in {seeds} seeds"))
            .collect();
        say!("(violations by checker: {})", parts.join(", "));
    }
    if !by_kinds.is_empty() {
        let parts: Vec<String> = by_kinds
            .iter()
            .map(|(k, (n, seeds))| format!("{k}={n} in {seeds} seeds"))
            .collect();
        say!(
            "(failing by checker and kinds of runs: {})",
            parts.join(", ")
        );
    }
    if own_total > 0 {
        let parts: Vec<String> = own.iter().map(|(k, n)| format!("{k}={n}")).collect();
        say!(
            "(elasticjob's own, not failing: {own_total} in {own_seeds} seeds: {})",
            parts.join(", ")
        );
    }
    rolls.print();
    if args.plant.is_some() {
        return if caught {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        };
    }
    if violations > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// What the seeds that rolled one kind of instance into the other did, and what failed once the
/// old kind had gone.
#[derive(Default)]
struct Rolls {
    /// Seeds that rolled, by direction (`j2s`, `s2j`): (seeds, seeds whose old kind had gone
    /// before the heal, seeds with a failing violation in the tail).
    seeds: std::collections::BTreeMap<&'static str, (u64, u64, u64)>,
    /// Failing violations in the tails (about a fire or a run from the moment the old kind
    /// had gone on: [`shardjob_sim::checkers::Violation::about_time`]), by direction, checker
    /// and kinds of runs: (violations, seeds).
    tail: std::collections::BTreeMap<String, (u64, u64)>,
    /// ElasticJob's own in the tails, by direction and checker.
    tail_own: std::collections::BTreeMap<String, u64>,
    /// Seeds whose old kind was still there at the heal.
    unfinished: Vec<u64>,
}

impl Rolls {
    fn add(&mut self, report: &SeedReport) {
        let Some(roll) = &report.roll else {
            return;
        };
        let way = roll.direction.name();
        let e = self.seeds.entry(way).or_default();
        e.0 += 1;
        let Some(left) = roll.last_left else {
            self.unfinished.push(report.seed);
            return;
        };
        e.1 += 1;
        let by_item = shardjob_sim::checkers::runs_by_item(&report.records);
        let mut seen = std::collections::BTreeSet::new();
        let origin = report.wall_origin.timestamp_millis();
        for v in report
            .violations
            .iter()
            .filter(|v| v.about_time(origin) >= left)
        {
            let key = match shardjob_sim::checkers::attribution::kinds(v, &by_item) {
                Some(k) => format!("{way} {} {k}", v.checker),
                None => format!("{way} {}", v.checker),
            };
            let t = self.tail.entry(key.clone()).or_default();
            t.0 += 1;
            if seen.insert(key) {
                t.1 += 1;
            }
        }
        if !seen.is_empty() {
            e.2 += 1;
        }
        for (v, b) in report
            .elasticjob_own
            .iter()
            .filter(|(v, _)| v.about_time(origin) >= left)
        {
            *self
                .tail_own
                .entry(format!("{way} {} {}", v.checker, b.name()))
                .or_default() += 1;
        }
    }

    fn print(&self) {
        if self.seeds.is_empty() {
            return;
        }
        let parts: Vec<String> = self
            .seeds
            .iter()
            .map(|(way, (n, gone, failing))| {
                format!(
                    "{way} in {n} seeds, the old kind gone before the heal in {gone}, a failing violation after that in {failing}"
                )
            })
            .collect();
        say!("(rolling: {})", parts.join("; "));
        if !self.unfinished.is_empty() {
            let list: Vec<String> = self.unfinished.iter().map(u64::to_string).collect();
            say!(
                "(rolling: the old kind still there at the heal in seeds {})",
                list.join(", ")
            );
        }
        if !self.tail.is_empty() {
            let parts: Vec<String> = self
                .tail
                .iter()
                .map(|(k, (n, seeds))| format!("{k}={n} in {seeds} seeds"))
                .collect();
            say!(
                "(failing after the last of the old kind had gone, by checker and kinds of runs: {})",
                parts.join(", ")
            );
        }
        if !self.tail_own.is_empty() {
            let parts: Vec<String> = self
                .tail_own
                .iter()
                .map(|(k, n)| format!("{k}={n}"))
                .collect();
            say!(
                "(elasticjob's own after the last of the old kind had gone: {})",
                parts.join(", ")
            );
        }
    }
}

fn print_failure(report: &SeedReport, args: &Args, cfg: &WorldConfig) {
    let faults: Vec<String> = report.faults.iter().map(|f| f.words()).collect();
    let shapes: Vec<&str> = report.shapes.iter().map(|s| s.words()).collect();
    say!(
        "seed {} FAILED ({} violations; faults: {}; shapes: {}; registry txn limit {})",
        report.seed,
        report.violations.len(),
        faults.join(", "),
        if shapes.is_empty() {
            "none".to_owned()
        } else {
            shapes.join(", ")
        },
        report
            .txn_limit
            .map_or_else(|| "none".to_owned(), |l| format!("{l} operations"))
    );
    for (job, some) in &report.hosts {
        let list: Vec<String> = some.iter().map(|k| k.to_string()).collect();
        say!(
            "  job {job} is hosted by instances {} only",
            list.join(", ")
        );
    }
    if let Some(roll) = &report.roll {
        let gone = roll.last_left.map_or_else(
            || "still there at the heal".to_owned(),
            |t| format!("all gone at {}", shardjob_sim::timeline::clock(t)),
        );
        let origin = report.wall_origin.timestamp_millis();
        let tail = roll.last_left.map_or(0, |t| {
            report
                .violations
                .iter()
                .filter(|v| v.about_time(origin) >= t)
                .count()
        });
        say!(
            "  rolling {}: {} of the old kind stopped, {} of the new kind started, {gone}; {tail} violations from then on",
            roll.direction.name(),
            roll.stopped,
            roll.started
        );
    }
    for v in report.violations.iter().take(args.violations) {
        say!(
            "  [{}] at {}: {}",
            v.checker,
            shardjob_sim::timeline::clock(v.time),
            v.message
        );
    }
    // The timeline of the events that led there.
    let first = report.violations.first().map_or(0, |v| v.time);
    let mut replay = cfg.clone();
    replay.keep_log = true;
    let log = if report.log.is_empty() {
        world::run(&replay).log
    } else {
        report.log.clone()
    };
    let from = if args.full_log {
        0.0
    } else {
        first.saturating_sub(15_000) as f64 / 1000.0
    };
    let to = if args.full_log {
        f64::MAX
    } else {
        first as f64 / 1000.0 + 0.5
    };
    if args.full_log {
        say!("  timeline, whole:");
    } else {
        say!("  timeline +{from:.1}s..+{to:.1}s:");
    }
    // The world's header (lines without a time) always; events within the window.
    for line in log.iter().filter(|l| {
        let t: Option<f64> = l
            .split_whitespace()
            .next()
            .and_then(|s| s.strip_prefix('+'))
            .and_then(|s| s.trim_end_matches('s').parse().ok());
        t.is_none_or(|t| t >= from && t <= to)
    }) {
        say!("    {line}");
    }
    let mut replay_cmd = format!(
        "  replay: shardjob-sim --seed {} --instances {} --jobs {} --hours {} --max-items {}",
        report.seed, args.instances, args.jobs, args.hours, args.max_items
    );
    if args.no_txn_limits {
        replay_cmd.push_str(" --no-txn-limits");
    }
    if args.no_shapes {
        replay_cmd.push_str(" --no-shapes");
    }
    if args.elasticjob > 0 {
        replay_cmd.push_str(&format!(" --elasticjob {}", args.elasticjob));
    }
    if let Some(r) = &args.rolling {
        replay_cmd.push_str(&format!(" --rolling {r}"));
    }
    if let Some(ms) = args.session_timeout_ms {
        replay_cmd.push_str(&format!(" --session-timeout-ms {ms}"));
    }
    if let Some(p) = &args.plant {
        replay_cmd.push_str(&format!(" --plant {p}"));
    }
    say!("{replay_cmd}");
}

fn config(args: &Args) -> Result<WorldConfig, String> {
    let max_hours = world::MAX_DURATION_MS as f64 / 3_600_000.0;
    if !(args.hours * 3_600_000.0 >= 1.0 && args.hours <= max_hours) {
        return Err(format!(
            "--hours must be a millisecond to {max_hours} hours, not {}",
            args.hours
        ));
    }
    let in_range = |flag: &str, value: usize, max: usize| {
        if (1..=max).contains(&value) {
            Ok(value)
        } else {
            Err(format!("--{flag} must be 1 to {max}, not {value}"))
        }
    };
    let mut cfg = WorldConfig::standard(0);
    // A world of ElasticJob instances only (`--instances 0 --elasticjob N`): what ElasticJob
    // does alone, to validate what the checkers count as its own.
    cfg.instances = if args.instances == 0 && args.elasticjob > 0 {
        0
    } else {
        in_range("instances", args.instances, world::MAX_INSTANCES)?
    };
    cfg.job_count = in_range("jobs", args.jobs, world::MAX_DRAWN_JOBS)?;
    cfg.duration_ms = (args.hours * 3_600_000.0) as u64;
    cfg.max_items = in_range(
        "max-items",
        args.max_items as usize,
        world::MAX_ITEMS as usize,
    )? as u32;
    cfg.txn_limits = !args.no_txn_limits;
    if args.elasticjob > world::MAX_INSTANCES {
        return Err(format!(
            "--elasticjob must be 0 to {}, not {}",
            world::MAX_INSTANCES,
            args.elasticjob
        ));
    }
    cfg.elasticjob = args.elasticjob;
    if args.no_shapes {
        cfg.shapes.clear();
    }
    match args.rolling.as_deref() {
        None => {}
        Some("none") => cfg.shapes.retain(|s| s.rolling().is_none()),
        Some(name) => {
            let rolling: world::Rolling = name.parse()?;
            if rolling == world::Rolling::ToShardjob && args.elasticjob == 0 {
                return Err(
                    "--rolling j2s replaces ElasticJob instances: give --elasticjob N".to_owned(),
                );
            }
            if rolling == world::Rolling::ToElasticjob && cfg.instances == 0 {
                return Err(
                    "--rolling s2j replaces shardjob instances: --instances must be 1 or more"
                        .to_owned(),
                );
            }
            cfg.rolling = Some(rolling);
        }
    }
    if let Some(ms) = args.session_timeout_ms {
        let (lo, hi) = world::SESSION_TIMEOUTS;
        let timeout = std::time::Duration::from_millis(ms);
        if !(lo..=hi).contains(&timeout) {
            return Err(format!(
                "--session-timeout-ms must be {} to {}, not {ms}",
                lo.as_millis(),
                hi.as_millis()
            ));
        }
        cfg.session_timeout = Some(timeout);
    }
    if let Some(name) = &args.plant {
        cfg.options = Some(plant_options(name)?);
    }
    Ok(cfg)
}

#[cfg(feature = "plant")]
fn plant_names() -> Vec<&'static str> {
    shardjob_core::machine::plant::Plant::ALL
        .iter()
        .map(|p| p.name())
        .collect()
}

#[cfg(not(feature = "plant"))]
fn plant_names() -> Vec<&'static str> {
    Vec::new()
}

#[cfg(feature = "plant")]
fn plant_options(name: &str) -> Result<shardjob_core::machine::MachineOptions, String> {
    use shardjob_core::machine::{MachineOptions, plant::Plant};
    let plant: Plant = name.parse()?;
    let id = shardjob_core::InstanceId::new("0.0.0.0@-@0").map_err(|e| e.to_string())?;
    let mut opts = MachineOptions::new(id);
    // The safety sweep evaluates every job now and then, and so mends a wake left stale by a
    // clock step within its period: this bug shows only without it.
    if plant == Plant::IgnoreClockSteps {
        opts.safety_sweep = false;
    }
    opts.plants.insert(plant);
    Ok(opts)
}

#[cfg(not(feature = "plant"))]
fn plant_options(name: &str) -> Result<shardjob_core::machine::MachineOptions, String> {
    Err(format!(
        "--plant {name}: this build has no planted bugs; build with --features plant"
    ))
}
