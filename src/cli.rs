//! The `shardjob` command line: preview commands for operators.
//!
//! - `shardjob plan` shows how a strategy assigns items to instances;
//! - `shardjob cron next` lists the next fire times of a Quartz expression in a time zone;
//! - `shardjob config check` validates a job YAML file and prints the effective configuration;
//! - `shardjob demo` runs three instances in this process over the in-memory registry and shows
//!   who runs which item, a crash with failover, and a graceful leave;
//! - `shardjob run <jobs.yaml>` runs config-only jobs (Script, HTTP) until SIGTERM or Ctrl-C, then
//!   leaves gracefully.
//!
//! Every command writes to the writer it is given and returns the process exit code, so tests
//! run the real code without a subprocess: 0 when all is well, 1 when the input has problems
//! (the problems are printed), 2 for usage errors (clap's code).

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use chrono::{DateTime, SecondsFormat, Utc};
use clap::{Parser, Subcommand, ValueEnum};

use shardjob_core::config::{self, KnownTypes, Strictness};
use shardjob_core::sharding::{BuiltinStrategy, ShardingStrategy, registry_order};
use shardjob_core::{CronExpr, InstanceId, JobTimeZone};

/// Distributed, sharded cron jobs: a demo, a runner for config-only jobs, preview and check
/// tools.
#[derive(Debug, Parser)]
#[command(name = "shardjob", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Show how a sharding strategy assigns a job's items to instances.
    Plan(PlanArgs),
    /// Quartz cron expressions.
    #[command(subcommand)]
    Cron(CronCommand),
    /// Job configurations: check a file; get or set a job's configuration in a registry.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Three instances in this process share a sharded job over the in-memory registry: see
    /// who runs which item, a crash and its failover, and a graceful leave.
    Demo(DemoArgs),
    /// Run the Script and HTTP jobs of a YAML file until SIGTERM or Ctrl-C, then leave
    /// gracefully.
    Run(RunArgs),
    /// Operating a cluster through its registry (`jobs`, `status`, `trigger`, ...).
    #[command(flatten)]
    Ops(crate::ops_cli::OpsCommand),
}

/// Arguments of `shardjob demo`.
#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// How long the demo runs, in seconds (at least 4).
    #[arg(long, default_value_t = 30)]
    pub seconds: u64,
}

/// Arguments of `shardjob run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The job file: a list of jobs in ElasticJob's keys, or the Spring Boot shape
    /// (`elasticjob.regCenter`, `elasticjob.jobs.<name>` with `elasticJobType`).
    pub file: PathBuf,
    /// The registry: mem:// (in this process only), zk://host:port,host:port/namespace or
    /// etcd://host:port,host:port/namespace, optionally with `?session_timeout_ms=N` (which
    /// wins over the file's `sessionTimeoutMilliseconds`). Overrides the file's
    /// `elasticjob.regCenter`.
    #[arg(long)]
    pub registry: Option<String>,
    /// This instance's id (default `{ip}@-@{pid}`).
    #[arg(long)]
    pub instance_id: Option<String>,
    /// Leave after this many seconds as if SIGTERM had come (for tests and trials).
    #[arg(long, hide = true)]
    pub exit_after: Option<u64>,
}

/// Arguments of `shardjob plan`.
#[derive(Debug, clap::Args)]
pub struct PlanArgs {
    /// The strategy: AVG_ALLOCATION, ODEVITY or ROUND_ROBIN.
    #[arg(long, default_value = "AVG_ALLOCATION")]
    pub strategy: String,
    /// The job's name (ODEVITY and ROUND_ROBIN depend on it).
    #[arg(long)]
    pub job_name: String,
    /// shardingTotalCount: the number of items.
    #[arg(long)]
    pub total: u32,
    /// The instance ids, comma-separated (`ip@-@pid` or any valid id).
    #[arg(long, value_delimiter = ',', required = true)]
    pub instances: Vec<String>,
    /// `registry` orders the instances as the registry lists them (what a real cluster does);
    /// `given` uses the order given.
    #[arg(long, value_enum, default_value_t = Order::Registry)]
    pub order: Order,
    /// Print one JSON object `{"<instance id>": [items...]}`.
    #[arg(long)]
    pub json: bool,
}

/// The order in which `plan` hands the instances to the strategy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Order {
    /// Reverse string order of the ids, as ElasticJob's registry lists them.
    Registry,
    /// The order given on the command line.
    Given,
}

/// `shardjob cron ...`.
#[derive(Debug, Subcommand)]
pub enum CronCommand {
    /// Print the next fire times of an expression.
    Next(CronNextArgs),
}

/// Arguments of `shardjob cron next`.
#[derive(Debug, clap::Args)]
pub struct CronNextArgs {
    /// The Quartz expression, e.g. '0 0/5 * * * ?'.
    pub expr: String,
    /// The time zone: an IANA name (Asia/Shanghai) or GMT+08:00.
    #[arg(long, default_value = "UTC")]
    pub tz: String,
    /// Start after this instant (RFC 3339, e.g. 2027-01-30T16:00:00Z); default now.
    #[arg(long)]
    pub after: Option<String>,
    /// How many fire times.
    #[arg(long, default_value_t = 5)]
    pub count: usize,
    /// Print a JSON array of RFC 3339 UTC timestamps.
    #[arg(long)]
    pub json: bool,
}

/// `shardjob config ...`.
#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Validate a job YAML file (one job or a list of jobs); print every problem, or the
    /// effective configuration with defaults filled in.
    Check(ConfigCheckArgs),
    /// Print a job's configuration as the registry holds it.
    Get(crate::ops_cli::JobArgs),
    /// Replace a job's configuration in the registry with a YAML file: validated, the changes
    /// shown, applied after a confirmation (or `--yes`).
    Set(crate::ops_cli::ConfigSetArgs),
}

/// Arguments of `shardjob config check`.
#[derive(Debug, clap::Args)]
pub struct ConfigCheckArgs {
    /// The YAML file.
    pub file: PathBuf,
}

/// A failure of the command line itself (not a problem found in the input).
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// Writing the output failed.
    #[error("cannot write output: {0}")]
    Output(#[from] std::io::Error),
    /// The async runtime could not be started.
    #[error("cannot start the async runtime: {0}")]
    Runtime(String),
}

/// The largest `--count` of `cron next`.
pub const MAX_CRON_COUNT: usize = 10_000;

/// Runs a parsed command line. `now` is the default start of `cron next`.
pub fn run(cli: Cli, now: DateTime<Utc>, out: &mut dyn Write) -> Result<ExitCode, CliError> {
    let result = match cli.command {
        Command::Plan(args) => plan(&args, out)?,
        Command::Cron(CronCommand::Next(args)) => cron_next(&args, now, out)?,
        Command::Config(ConfigCommand::Check(args)) => config_check(&args, out)?,
        Command::Demo(args) => demo(&args, out)?,
        Command::Run(args) => run_jobs(&args, out)?,
        Command::Ops(c) => return crate::ops_cli::run(c, now, out),
        Command::Config(ConfigCommand::Get(a)) => return crate::ops_cli::run(a, now, out),
        Command::Config(ConfigCommand::Set(a)) => return crate::ops_cli::run(a, now, out),
    };
    Ok(match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(problem) => {
            // One line per problem, on stderr, so stdout stays machine-readable.
            eprintln!("{problem}");
            ExitCode::from(1)
        }
    })
}

/// The outcome of a command: `Err` holds the problems to report (exit code 1).
type Outcome = Result<(), String>;

fn plan(args: &PlanArgs, out: &mut dyn Write) -> Result<Outcome, CliError> {
    let strategy: BuiltinStrategy = match args.strategy.parse() {
        Ok(s) => s,
        Err(e) => return Ok(Err(format!("error: --strategy: {e}"))),
    };
    if args.total == 0 {
        return Ok(Err("error: --total: must be greater than 0".to_owned()));
    }
    if args.total > config::MAX_SHARDING_TOTAL_COUNT {
        return Ok(Err(format!(
            "error: --total: {} is more than the maximum {}",
            args.total,
            config::MAX_SHARDING_TOTAL_COUNT
        )));
    }
    let mut ids = Vec::new();
    for raw in &args.instances {
        let id = match InstanceId::new(raw.trim()) {
            Ok(id) => id,
            Err(e) => return Ok(Err(format!("error: --instances: {e}"))),
        };
        if ids.contains(&id) {
            return Ok(Err(format!("error: --instances: {id} is given twice")));
        }
        ids.push(id);
    }
    let candidates = match args.order {
        Order::Registry => registry_order(ids),
        Order::Given => ids,
    };
    let assignment = strategy.shard(&candidates, &args.job_name, args.total);
    if args.json {
        let json = serde_json::to_string(&assignment).map_err(std::io::Error::other)?;
        writeln!(out, "{json}")?;
        return Ok(Ok(()));
    }
    let order = match args.order {
        Order::Registry => "registry order",
        Order::Given => "given order",
    };
    writeln!(
        out,
        "{strategy}: job {:?}, {} items over {} instances ({order})",
        args.job_name,
        args.total,
        candidates.len()
    )?;
    let width = candidates
        .iter()
        .map(|c| c.as_str().len())
        .max()
        .unwrap_or(0);
    for (id, items) in assignment.iter() {
        let list: Vec<String> = items.iter().map(u32::to_string).collect();
        let list = if list.is_empty() {
            "-".to_owned()
        } else {
            list.join(",")
        };
        writeln!(out, "  {:width$}  {list}", id.as_str())?;
    }
    Ok(Ok(()))
}

fn cron_next(
    args: &CronNextArgs,
    now: DateTime<Utc>,
    out: &mut dyn Write,
) -> Result<Outcome, CliError> {
    let expr = match CronExpr::parse(&args.expr) {
        Ok(e) => e,
        Err(e) => return Ok(Err(format!("error: {e}"))),
    };
    let tz = match JobTimeZone::parse(&args.tz) {
        Ok(tz) => tz,
        Err(e) => return Ok(Err(format!("error: --tz: {e}"))),
    };
    let after = match &args.after {
        None => now,
        Some(text) => match DateTime::parse_from_rfc3339(text) {
            Ok(t) => t.with_timezone(&Utc),
            Err(e) => {
                return Ok(Err(format!(
                    "error: --after {text:?} is not an RFC 3339 time (like 2027-01-30T16:00:00Z): {e}"
                )));
            }
        },
    };
    if args.count > MAX_CRON_COUNT {
        return Ok(Err(format!("error: --count: at most {MAX_CRON_COUNT}")));
    }
    let times: Vec<DateTime<Utc>> = expr.fires_after(after, &tz).take(args.count).collect();
    if args.json {
        let list: Vec<String> = times
            .iter()
            .map(|t| t.to_rfc3339_opts(SecondsFormat::Secs, true))
            .collect();
        let json = serde_json::to_string(&list).map_err(std::io::Error::other)?;
        writeln!(out, "{json}")?;
        return Ok(Ok(()));
    }
    if times.is_empty() {
        writeln!(
            out,
            "no fire time after {}",
            after.to_rfc3339_opts(SecondsFormat::Secs, true)
        )?;
    }
    for t in &times {
        let local = t
            .with_timezone(&tz.offset_at(*t))
            .to_rfc3339_opts(SecondsFormat::Secs, true);
        writeln!(
            out,
            "{}  ({local} {tz})",
            t.to_rfc3339_opts(SecondsFormat::Secs, true)
        )?;
    }
    Ok(Ok(()))
}

/// A UTF-8 file's text, or the one-line error to print.
fn read_text(path: &std::path::Path) -> Result<String, String> {
    let file = path.display();
    let bytes = std::fs::read(path).map_err(|e| format!("{file}: error: cannot read: {e}"))?;
    String::from_utf8(bytes).map_err(|_| format!("{file}: error: not UTF-8 text"))
}

fn config_check(args: &ConfigCheckArgs, out: &mut dyn Write) -> Result<Outcome, CliError> {
    let file = args.file.display();
    let text = match read_text(&args.file) {
        Ok(text) => text,
        Err(e) => return Ok(Err(e)),
    };
    match config::parse_jobs_file(&text, Strictness::Strict, &KnownTypes::default()) {
        Ok(jobs) => {
            for job in &jobs {
                writeln!(out, "---")?;
                write!(out, "{}", job.to_yaml())?;
            }
            Ok(Ok(()))
        }
        Err(config::JobConfigError::Yaml(e)) => Ok(Err(format!("{file}: error: {e}"))),
        Err(e) => {
            let lines: Vec<String> = e
                .problems()
                .iter()
                .map(|p| format!("{file}: error: {p}"))
                .collect();
            Ok(Err(lines.join("\n")))
        }
    }
}

fn runtime() -> Result<tokio::runtime::Runtime, CliError> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::Runtime(e.to_string()))
}

#[cfg(not(feature = "mem"))]
fn demo(_: &DemoArgs, _: &mut dyn Write) -> Result<Outcome, CliError> {
    Ok(Err(
        "error: the demo runs on the in-memory registry: build with the `mem` feature".to_owned(),
    ))
}

#[cfg(feature = "mem")]
fn demo(args: &DemoArgs, out: &mut dyn Write) -> Result<Outcome, CliError> {
    let rt = runtime()?;
    match rt.block_on(crate::demo::run(args.seconds, out)) {
        Ok(summary) if summary.duplicates == 0 => Ok(Ok(())),
        Ok(summary) => Ok(Err(format!(
            "error: {} (item, fire) pairs completed twice",
            summary.duplicates
        ))),
        Err(crate::demo::DemoError::Output(e)) => Err(CliError::Output(e)),
        Err(e) => Ok(Err(format!("error: {e}"))),
    }
}

/// The session timeout of `shardjob run` when neither the registry URL nor the file gives one.
pub const RUN_SESSION_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

fn run_jobs(args: &RunArgs, out: &mut dyn Write) -> Result<Outcome, CliError> {
    use crate::jobfile::{self, FileJobKind};
    use crate::registry_url::RegistryUrl;

    let file = args.file.display();
    let text = match read_text(&args.file) {
        Ok(text) => text,
        Err(e) => return Ok(Err(e)),
    };
    let jobs = match jobfile::load(&text) {
        Ok(jobs) => jobs,
        Err(problems) => {
            let lines: Vec<String> = problems.iter().map(|p| format!("{file}: {p}")).collect();
            return Ok(Err(lines.join("\n")));
        }
    };
    let url = args
        .registry
        .clone()
        .or_else(|| jobs.registry.clone())
        .unwrap_or_else(|| "mem://".to_owned());
    let registry = match RegistryUrl::parse(&url) {
        Ok(r) => r,
        Err(e) => return Ok(Err(format!("error: --registry: {e}"))),
    };
    let instance_id = match &args.instance_id {
        Some(id) => match InstanceId::new(id.as_str()) {
            Ok(id) => Some(id),
            Err(e) => return Ok(Err(format!("error: --instance-id: {e}"))),
        },
        None => None,
    };
    let session_timeout = jobs.session_timeout.unwrap_or(RUN_SESSION_TIMEOUT);
    let rt = runtime()?;
    rt.block_on(async {
        let client = match registry.connect(session_timeout).await {
            Ok(c) => c,
            Err(e) => return Ok(Err(format!("error: {e}"))),
        };
        let mut builder = crate::runtime::Scheduler::builder().registry(client);
        if let Some(id) = instance_id {
            builder = builder.instance_id(id);
        }
        let count = jobs.jobs.len();
        for (config, kind) in jobs.jobs {
            builder = match kind {
                FileJobKind::Script => builder.job(config, crate::jobs::ScriptJob),
                FileJobKind::Http => builder.job(config, crate::jobs::HttpJob::new()),
            };
        }
        let handle = match builder.build().await {
            Ok(h) => h,
            Err(e) => return Ok(Err(format!("error: {e}"))),
        };
        writeln!(
            out,
            "shardjob: running {count} job(s) as {} on {url}; SIGTERM or Ctrl-C leaves gracefully",
            handle.instance_id()
        )?;
        out.flush()?;
        let why = wait_for_stop(args.exit_after).await;
        writeln!(out, "shardjob: {why}: leaving gracefully")?;
        out.flush()?;
        match handle.shutdown().await {
            Ok(()) => {
                writeln!(out, "shardjob: left")?;
                Ok(Ok(()))
            }
            Err(e) => Ok(Err(format!("error: {e}"))),
        }
    })
}

/// Waits for SIGTERM, Ctrl-C (SIGINT) or the given number of seconds; says which came.
async fn wait_for_stop(exit_after: Option<u64>) -> &'static str {
    let timer = async {
        match exit_after {
            Some(s) => tokio::time::sleep(std::time::Duration::from_secs(s)).await,
            None => std::future::pending().await,
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = timer => "time is up",
        () = term => "SIGTERM",
        r = tokio::signal::ctrl_c() => match r {
            Ok(()) => "Ctrl-C",
            // No signal handling here: wait for the others.
            Err(_) => std::future::pending().await,
        },
    }
}
