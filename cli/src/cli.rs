//! The `shardjob` command line: preview commands for operators.
//!
//! - `shardjob plan` shows how a strategy assigns items to instances;
//! - `shardjob cron next` lists the next fire times of a Quartz expression in a time zone;
//! - `shardjob config check` validates a job YAML file and prints the effective configuration;
//! - `shardjob demo` runs three instances in this process over the in-memory registry and shows
//!   who runs which item, a crash with failover, and a graceful leave;
//! - `shardjob run <jobs.yaml>` runs config-only jobs (Script, HTTP) until SIGTERM or Ctrl-C, then
//!   leaves gracefully (recording the job history its file's tracing settings name);
//! - `shardjob history JOB` lists a job's item runs from the job history
//!   ([`crate::history_cli`]);
//! - `shardjob console` serves the web console ([`crate::console_cli`]).
//!
//! Every command writes to the writer it is given and returns the process exit code, so tests
//! run the real code without a subprocess: 0 when all is well, 1 when the input has problems
//! (the problems are printed) or something is not found, 2 when a registry (or an instance's
//! dump port) cannot be reached. The binary gives usage errors 1 as well ([`EXIT_STATUS`]).

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use chrono::{DateTime, SecondsFormat, Utc};
use clap::{Parser, Subcommand, ValueEnum};

use shardjob_core::config;
use shardjob_core::sharding::{BuiltinStrategy, ShardingStrategy, registry_order};
use shardjob_core::{CronExpr, InstanceId, JobTimeZone};

/// What `shardjob --help` says of the exit status.
pub const EXIT_STATUS: &str = "\
Exit status:
  0  done
  1  bad input (a usage error, a file or value that does not validate), something not
     found, or `run` or `demo` could not go on
  2  an operating command (jobs, status, trigger, ..., dump) cannot reach the registry,
     or `dump --instance` the instance";

/// Distributed, sharded cron jobs: a demo, a runner for config-only jobs, preview and check
/// tools.
#[derive(Debug, Parser)]
#[command(name = "shardjob", version, about, after_help = EXIT_STATUS)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
    /// How logs (on stderr) are written: `text` (coloured only on a terminal, and not when
    /// NO_COLOR is set) or `json` (one object per line, for log shippers). RUST_LOG sets
    /// the level (default `info`).
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

/// The format of the log lines on stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
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
    /// A job's item runs from the job history (`--failed`, `--since 1h`, `--json`).
    History(crate::history_cli::HistoryArgs),
    /// The web console: every job of every registry, live, with users and roles
    /// (`--add-user NAME --role admin|viewer` first).
    Console(crate::console_cli::ConsoleArgs),
    /// Operating a cluster through its registry (`jobs`, `status`, `trigger`, ...).
    #[command(flatten)]
    Ops(crate::ops_cli::OpsCommand),
}

/// Arguments of `shardjob demo`.
#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// How long the demo runs, in seconds (at least 10: time for a crash and its failover).
    #[arg(long, default_value_t = 30)]
    pub seconds: u64,
}

/// Arguments of `shardjob run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The job file: a list of jobs in ElasticJob's keys, or the Spring Boot shape
    /// (`elasticjob.regCenter`, `elasticjob.jobs.<name>` with `elasticJobType`).
    pub file: PathBuf,
    /// The registry: zk://host:port,host:port/namespace,
    /// etcd://host:port,host:port/namespace (either with user:pass@ before the hosts for
    /// credentials), or mem:// (this process only: other
    /// processes do not share it), optionally with `?session_timeout_ms=N` (which wins over
    /// the file's `sessionTimeoutMilliseconds`). Overrides the file's `elasticjob.regCenter`
    /// servers, namespace and digest. Default: $SHARDJOB_REGISTRY, else the file's
    /// regCenter; with neither, `run` refuses to start. Credentials may come from
    /// $SHARDJOB_REGISTRY_USER and $SHARDJOB_REGISTRY_PASSWORD (kept out of process lists).
    #[arg(long)]
    pub registry: Option<String>,
    /// How long to keep trying to reach the registry at start-up (`30s`, `500ms`, `2m`; `0`
    /// tries once). Each failed attempt is logged with the address and the cause.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub wait_for_registry: std::time::Duration,
    /// Refuse the file if it has a job `run` would skip (a Java-class job).
    #[arg(long)]
    pub strict: bool,
    /// This instance's id (default `{ip}@-@{pid}`).
    #[arg(long)]
    pub instance_id: Option<String>,
    /// Serve Prometheus metrics on GET /metrics at HOST:PORT (say 127.0.0.1:9464; a port
    /// alone binds 127.0.0.1; port 0 takes any free port, printed at start). Wins over the
    /// file's `elasticjob.metrics`.
    #[arg(long, value_name = "HOST:PORT")]
    pub metrics: Option<shardjob::metrics::MetricsAddr>,
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
    /// Validate a job file as `shardjob run` reads it (a list of jobs, one job, or the Spring
    /// Boot `elasticjob:` shape); print every problem with its line and column, or what `run`
    /// would do (registry, jobs and kinds, skipped jobs, warnings) and the effective
    /// configuration with defaults filled in.
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

/// Parses a duration: a whole number with `ms`, `s`, `m` or `h`, or `0`.
pub fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    let text = text.trim();
    if text == "0" {
        return Ok(std::time::Duration::ZERO);
    }
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| format!("{text:?} has no unit: write e.g. 30s, 500ms, 2m"))?;
    let (number, unit) = text.split_at(split);
    let n: u64 = number
        .parse()
        .map_err(|_| format!("{text:?} does not start with a whole number"))?;
    let ms = match unit {
        "ms" => Some(n),
        "s" => n.checked_mul(1000),
        "m" => n.checked_mul(60_000),
        "h" => n.checked_mul(3_600_000),
        _ => return Err(format!("{text:?}: unknown unit {unit:?} (ms, s, m or h)")),
    };
    ms.map(std::time::Duration::from_millis)
        .ok_or_else(|| format!("{text:?} is too long"))
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
        Command::History(args) => crate::history_cli::run(&args, now, out)?,
        Command::Console(args) => crate::console_cli::run(&args, out)?,
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

/// The file's problems, one line each, prefixed with the file's name.
fn file_problems(file: &std::path::Path, problems: &[crate::jobfile::Note]) -> String {
    let file = file.display();
    problems
        .iter()
        .map(|p| match p.at {
            Some(at) => format!("{file}:{at}: error: {}", p.message),
            None => format!("{file}: error: {}", p.message),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The environment variable that is `run`'s default `--registry`.
pub const ENV_REGISTRY: &str = "SHARDJOB_REGISTRY";

/// Reads a job file as `run` reads it.
fn load_job_file(path: &std::path::Path) -> Result<crate::jobfile::JobFile, String> {
    let text = read_text(path)?;
    crate::jobfile::load(&text).map_err(|problems| file_problems(path, &problems))
}

fn config_check(args: &ConfigCheckArgs, out: &mut dyn Write) -> Result<Outcome, CliError> {
    use crate::jobfile::Shape;
    let file = match load_job_file(&args.file) {
        Ok(file) => file,
        Err(e) => return Ok(Err(e)),
    };
    // What `run` would do, as YAML comments, then the effective configuration of each job.
    let shape = match file.shape {
        Shape::List => "a list of jobs",
        Shape::Spring => "ElasticJob's Spring Boot shape (elasticjob:)",
    };
    writeln!(out, "# {}: {shape}", args.file.display())?;
    if let Some(url) = std::env::var(ENV_REGISTRY).ok().filter(|v| !v.is_empty()) {
        match shardjob::registry_url::RegistryUrl::parse(&url) {
            Ok(url) => writeln!(
                out,
                "# registry: {url} (from {ENV_REGISTRY}, which `run` uses unless --registry is \
                 given)"
            )?,
            Err(e) => return Ok(Err(format!("error: {ENV_REGISTRY}: {e}"))),
        }
    }
    match &file.registry {
        Some(reg) => {
            let mut settings = Vec::new();
            for (what, value) in [
                ("session timeout", reg.session_timeout),
                ("connection timeout", reg.connection_timeout),
                ("first retry pause", reg.base_sleep),
                ("longest retry pause", reg.max_sleep),
            ] {
                if let Some(v) = value {
                    settings.push(format!("{what} {v:?}"));
                }
            }
            if let Some(n) = reg.max_retries {
                settings.push(format!("at most {n} connection retries"));
            }
            if reg.url.credentials().is_some() {
                settings.push("digest auth, nodes created with CREATOR_ALL ACL".to_owned());
            }
            writeln!(
                out,
                "# registry: {} (elasticjob.regCenter{}{}); --registry or SHARDJOB_REGISTRY \
                 would override it",
                reg.url,
                if settings.is_empty() { "" } else { "; " },
                settings.join(", ")
            )?;
        }
        None => writeln!(
            out,
            "# registry: none in the file: `shardjob run` needs --registry (or \
             SHARDJOB_REGISTRY)"
        )?,
    }
    if let Some(addr) = file.dump {
        writeln!(
            out,
            "# dump port: {addr} (elasticjob.dump; read it with `shardjob dump JOB --instance \
             HOST:PORT`)"
        )?;
    }
    if let Some(addr) = file.metrics {
        writeln!(
            out,
            "# metrics: http://{addr}/metrics (elasticjob.metrics; `run --metrics` would \
             override it)"
        )?;
    }
    if let Some(t) = &file.tracing {
        writeln!(
            out,
            "# history: {}{}{}",
            t.describe(),
            t.retention
                .map(|r| format!(", rows kept {r:?}"))
                .unwrap_or_default(),
            t.queue_bound
                .map(|b| format!(", at most {b} events waiting"))
                .unwrap_or_default()
        )?;
    }
    for job in &file.jobs {
        writeln!(out, "# runs: {} ({})", job.config.job_name, job.kind.name())?;
    }
    for skipped in &file.skipped {
        writeln!(
            out,
            "# skips: {} (`run --strict` refuses the file)",
            skipped.why
        )?;
    }
    for warning in &file.warnings {
        writeln!(out, "# warning: {warning}")?;
    }
    // Jobs an ElasticJob instance sharing the namespace could not run (docs/migration.md):
    // said, not refused, since shardjob runs them.
    for job in &file.jobs {
        for (key, why) in job.config.elasticjob_unrunnable() {
            writeln!(
                out,
                "# not for ElasticJob: {}: {key}: {why}",
                job.config.job_name
            )?;
        }
    }
    for job in &file.jobs {
        writeln!(out, "---")?;
        write!(out, "{}", job.config.to_yaml())?;
    }
    Ok(Ok(()))
}

/// What `run` needs before it starts: the jobs, the registry and how to reach it.
struct RunPlan {
    jobs: Vec<crate::jobfile::FileJob>,
    /// Where the dump port listens, if the file turns it on.
    dump: Option<std::net::SocketAddr>,
    /// Where the metrics endpoint listens: `--metrics`, else the file's.
    metrics: Option<shardjob::metrics::MetricsAddr>,
    registry: shardjob::registry_url::RegistryUrl,
    connect: shardjob::registry_url::ConnectOptions,
    #[cfg_attr(not(feature = "history"), allow(dead_code))]
    tracing: Option<crate::jobfile::tracing::FileTracing>,
}

/// Reads the file and picks the registry as `run` does: `--registry`, else
/// `SHARDJOB_REGISTRY`, else the file's `regCenter`; none is an error. Credentials from the
/// environment fill a URL without them. Warnings go to the log and to `out`.
fn plan_run(args: &RunArgs, out: &mut dyn Write) -> Result<Result<RunPlan, String>, CliError> {
    use shardjob::registry_url::{ConnectOptions, ENV_PASSWORD, ENV_USER, RegistryUrl};
    let file = match load_job_file(&args.file) {
        Ok(file) => file,
        Err(e) => return Ok(Err(e)),
    };
    let name = args.file.display();
    if args.strict && !file.skipped.is_empty() {
        let lines: Vec<String> = file
            .skipped
            .iter()
            .map(|s| format!("{name}:{}", s.why).replace(": job", ": error: job"))
            .collect();
        return Ok(Err(format!(
            "{}\n{name}: error: --strict: the file has jobs `shardjob run` cannot run",
            lines.join("\n")
        )));
    }
    for skipped in &file.skipped {
        tracing::warn!("{name}:{}", skipped.why);
        writeln!(out, "shardjob: warning: {name}:{}", skipped.why)?;
    }
    for warning in &file.warnings {
        tracing::warn!("{name}:{warning}");
    }
    if file.jobs.is_empty() {
        return Ok(Err(format!("{name}: error: no job to run")));
    }
    let env = |key: &str| std::env::var(key).ok().filter(|v| !v.is_empty());
    let mut connect = ConnectOptions {
        session_timeout: RUN_SESSION_TIMEOUT,
        wait: args.wait_for_registry,
        ..ConnectOptions::default()
    };
    if let Some(reg) = &file.registry {
        connect.session_timeout = reg.session_timeout.unwrap_or(RUN_SESSION_TIMEOUT);
        connect.connection_timeout = reg.connection_timeout;
        connect.base_sleep = reg.base_sleep.unwrap_or(connect.base_sleep);
        connect.max_sleep = reg.max_sleep.unwrap_or(connect.max_sleep);
        connect.max_retries = reg.max_retries;
    }
    let given = args.registry.clone().or_else(|| env(ENV_REGISTRY));
    let registry = match (given, &file.registry) {
        (Some(url), from_file) => match RegistryUrl::parse(&url) {
            Ok(r) => {
                if let Some(reg) = from_file {
                    let note = format!(
                        "--registry (or SHARDJOB_REGISTRY) {r} replaces the file's \
                         elasticjob.regCenter {} (its servers, namespace and digest; its \
                         timeouts and retries still apply)",
                        reg.url
                    );
                    tracing::warn!("{note}");
                    writeln!(out, "shardjob: warning: {note}")?;
                }
                r
            }
            Err(e) => return Ok(Err(format!("error: --registry: {e}"))),
        },
        (None, Some(reg)) => reg.url.clone(),
        (None, None) => {
            return Ok(Err(format!(
                "error: no registry: {name} has no elasticjob.regCenter and neither --registry \
                 nor SHARDJOB_REGISTRY is given. Give zk://host:port/namespace or \
                 etcd://host:port/namespace; --registry mem:// runs over a registry of this \
                 process only"
            )));
        }
    };
    let registry = match registry.with_credentials_from(env(ENV_USER), env(ENV_PASSWORD)) {
        Ok(r) => r,
        Err(e) => return Ok(Err(format!("error: {e}"))),
    };
    if registry == RegistryUrl::Mem {
        let warning = "mem:// is a registry of this process only: instances in other processes \
                       do not share it, and each of them runs every item";
        tracing::warn!("{warning}");
        writeln!(out, "shardjob: WARNING: {warning}")?;
    }
    Ok(Ok(RunPlan {
        jobs: file.jobs,
        dump: file.dump,
        metrics: args.metrics.or(file.metrics.map(Into::into)),
        registry,
        connect,
        tracing: file.tracing,
    }))
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
    let plan = match plan_run(args, out)? {
        Ok(plan) => plan,
        Err(e) => return Ok(Err(e)),
    };
    let registry = &plan.registry;
    let instance_id = match &args.instance_id {
        Some(id) => match InstanceId::new(id.as_str()) {
            Ok(id) => Some(id),
            Err(e) => return Ok(Err(format!("error: --instance-id: {e}"))),
        },
        None => None,
    };
    let rt = runtime()?;
    let outcome = rt.block_on(async {
        // Caught from here on: a signal while the registry is awaited stops the start-up, and
        // one that comes while the jobs are set up is acted on as soon as they are.
        let mut signals = Signals::new();
        let client = tokio::select! {
            connected = registry.connect_with(&plan.connect) => match connected {
                Ok(c) => c,
                Err(e) => return Ok(Err(format!("error: {e}"))),
            },
            why = signals.next() => {
                return Ok(Err(format!("shardjob: {why} while connecting to the registry: stopped")));
            }
        };
        let mut builder = shardjob::runtime::Scheduler::builder()
            .registry(client)
            .registry_name(registry_name(registry));
        if let Some(id) = instance_id {
            builder = builder.instance_id(id);
        }
        if let Some(addr) = plan.dump {
            builder = builder.dump(addr);
        }
        if let Some(addr) = plan.metrics {
            builder = builder.metrics(addr);
        }
        // The file's job history (refused by the file's reader without the feature).
        #[cfg(feature = "history")]
        if let Some(tracing) = &plan.tracing {
            match tracing.config() {
                Ok(config) => builder = builder.tracing_config(config),
                Err(e) => return Ok(Err(format!("error: job history: {e}"))),
            }
        }
        let count = plan.jobs.len();
        for job in plan.jobs {
            builder = match add_job(builder, job) {
                Ok(builder) => builder,
                Err(e) => return Ok(Err(e)),
            };
        }
        let handle = match builder.build().await {
            Ok(h) => h,
            Err(e) => return Ok(Err(format!("error: {e}"))),
        };
        say(
            out,
            format_args!(
                "shardjob: running {count} job(s) as {} on {registry}; SIGTERM or Ctrl-C leaves gracefully",
                handle.instance_id()
            ),
        );
        if let Some(addr) = handle.dump_addr() {
            say(
                out,
                format_args!(
                    "shardjob: dump port on {addr} (read it with `shardjob dump JOB --instance {addr}`)"
                ),
            );
        }
        if let Some(addr) = handle.metrics_addr() {
            say(
                out,
                format_args!("shardjob: metrics on http://{addr}/metrics"),
            );
        }
        stop_and_leave(&handle, signals, args.exit_after, out).await
    });
    // A job body stuck in a blocking call must not hold the exit up.
    rt.shutdown_timeout(RUNTIME_SHUTDOWN_TIMEOUT);
    outcome
}

/// Adds a job of the file to the scheduler. A kind this build lacks never gets here (the
/// file's reader refuses it); should it, it is refused again, never skipped.
#[cfg_attr(
    not(all(feature = "script", feature = "http")),
    allow(unused_imports, unused_variables)
)]
fn add_job(
    builder: shardjob::runtime::SchedulerBuilder,
    job: crate::jobfile::FileJob,
) -> Result<shardjob::runtime::SchedulerBuilder, String> {
    use crate::jobfile::FileJobKind;
    let crate::jobfile::FileJob { config, kind } = job;
    match kind {
        #[cfg(feature = "script")]
        FileJobKind::Script => Ok(builder.job(config, shardjob::jobs::ScriptJob)),
        #[cfg(feature = "http")]
        FileJobKind::Http => Ok(builder.job(config, shardjob::jobs::HttpJob::new())),
        #[allow(unreachable_patterns)]
        other => Err(format!(
            "error: job {}: this shardjob was built without its `{}` feature",
            config.job_name,
            other.feature()
        )),
    }
}

/// The registry as the log names it: scheme, servers and namespace (never credentials).
fn registry_name(registry: &shardjob::registry_url::RegistryUrl) -> String {
    use shardjob::registry_url::RegistryUrl;
    match registry {
        RegistryUrl::Mem => "mem://".to_owned(),
        RegistryUrl::ZooKeeper {
            servers, namespace, ..
        } => format!("zk://{}/{namespace}", servers.join(",")),
        RegistryUrl::Etcd {
            endpoints,
            namespace,
            ..
        } => format!("etcd://{}/{namespace}", endpoints.join(",")),
    }
}

/// How long the async runtime's leftover tasks may hold the process's exit up.
const RUNTIME_SHUTDOWN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// How long a leave at once (after a second signal) may take before `shardjob run` exits
/// anyway: the cancelled items' wait (at most 5 s) and the session's close (at most 10 s).
pub const FORCED_LEAVE_BOUND: std::time::Duration = std::time::Duration::from_secs(20);

/// Waits for the first stop signal (or `--exit-after`), leaves gracefully, and on a second
/// SIGTERM or Ctrl-C meanwhile leaves at once (running items cancelled). The exit code: 0
/// after a graceful leave, 1 after a leave at once or a failure.
async fn stop_and_leave(
    handle: &shardjob::runtime::SchedulerHandle,
    mut signals: Signals,
    exit_after: Option<u64>,
    out: &mut dyn Write,
) -> Result<Outcome, CliError> {
    let why = tokio::select! {
        why = signals.next() => why,
        () = sleep_secs(exit_after) => "time is up",
    };
    say(
        out,
        format_args!(
            "shardjob: {why}: leaving gracefully (a second SIGTERM or Ctrl-C cancels running items and leaves at once)"
        ),
    );
    let graceful = handle.shutdown();
    tokio::pin!(graceful);
    let second = tokio::select! {
        result = &mut graceful => {
            return match result {
                Ok(()) => {
                    say(out, format_args!("shardjob: left"));
                    Ok(Ok(()))
                }
                Err(e) => Ok(Err(format!("error: {e}"))),
            };
        }
        second = signals.next() => second,
    };
    say(
        out,
        format_args!("shardjob: {second} again: cancelling running items and leaving at once"),
    );
    match tokio::time::timeout(FORCED_LEAVE_BOUND, handle.shutdown_now()).await {
        Ok(Ok(())) => Ok(Err(format!(
            "shardjob: left at once after a second {second}: running items were cancelled"
        ))),
        Ok(Err(e)) => Ok(Err(format!("error: {e}"))),
        Err(_) => Ok(Err(format!(
            "error: the leave at once did not end within {}s: exiting anyway (the registry ends the session at its timeout)",
            FORCED_LEAVE_BOUND.as_secs()
        ))),
    }
}

/// Writes a status line of `shardjob run`. A stdout that went away (`shardjob run | head -1`)
/// must not cut the leave short, so a failed write is only logged.
fn say(out: &mut dyn Write, line: std::fmt::Arguments<'_>) {
    if let Err(e) = writeln!(out, "{line}").and_then(|()| out.flush()) {
        tracing::debug!("status line not written ({e}): {line}");
    }
}

async fn sleep_secs(secs: Option<u64>) {
    match secs {
        Some(s) => tokio::time::sleep(std::time::Duration::from_secs(s)).await,
        None => std::future::pending().await,
    }
}

/// SIGTERM and Ctrl-C (SIGINT), caught from creation on: once caught, neither ends the
/// process by itself, so every one is seen (the second one included).
struct Signals {
    #[cfg(unix)]
    term: Option<tokio::signal::unix::Signal>,
    #[cfg(unix)]
    int: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    fn new() -> Self {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            Self {
                term: signal(SignalKind::terminate()).ok(),
                int: signal(SignalKind::interrupt()).ok(),
            }
        }
        #[cfg(not(unix))]
        Self {}
    }

    /// The next signal: `"SIGTERM"` or `"Ctrl-C"`. Never returns if none can be caught.
    async fn next(&mut self) -> &'static str {
        #[cfg(unix)]
        {
            async fn recv(s: &mut Option<tokio::signal::unix::Signal>) {
                let got = match s {
                    Some(s) => s.recv().await.is_some(),
                    None => false,
                };
                if !got {
                    // No handler, or its stream ended: wait for the other signal.
                    std::future::pending::<()>().await;
                }
            }
            tokio::select! {
                () = recv(&mut self.term) => "SIGTERM",
                () = recv(&mut self.int) => "Ctrl-C",
            }
        }
        #[cfg(not(unix))]
        match tokio::signal::ctrl_c().await {
            Ok(()) => "Ctrl-C",
            Err(_) => std::future::pending().await,
        }
    }
}
