//! The operating commands of the `shardjob` command line, on the operation API
//! ([`shardjob_ops`]): `jobs`, `status`, `servers`, `trigger`, `disable`, `enable`,
//! `shutdown`, `remove`, `reshard`, `dump`, `config get` and `config set`.
//!
//! Every command connects to the registry given by `--registry URL` (or the
//! [`REGISTRY_ENV`] environment variable), within [`CONNECT_TIMEOUT`] (`dump --instance
//! HOST:PORT` to an instance's dump port instead); prints a table for people, or JSON with
//! `--json`; and ends with exit status 0 when done, 1 for bad input or something not found
//! (nothing written), 2 when the registry (or the instance) cannot be reached.

use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use clap::Subcommand;
use serde_json::json;
use shardjob_core::JobConfigError;
use shardjob_core::registry::Registry;
use shardjob_ops::{ConfigChange, ErrorKind, JobStatus, Ops, OpsError, Scope};

use crate::cli::CliError;
use shardjob::registry_url::{RegistryUrl, RegistryUrlError};

/// The environment variable that gives the registry URL when `--registry` is not given.
pub const REGISTRY_ENV: &str = "SHARDJOB_REGISTRY";

/// How long a command waits for the registry's connection before it says it is unreachable.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The session timeout the commands' short-lived client asks for.
const SESSION_TIMEOUT: Duration = Duration::from_secs(10);

/// Exit status when the registry cannot be reached.
const EXIT_UNREACHABLE: u8 = 2;

/// How long `dump --instance` waits for the instance's whole answer.
pub const DUMP_ANSWER_TIMEOUT: Duration = Duration::from_secs(30);

/// The largest answer `dump --instance` reads.
pub const MAX_DUMP_ANSWER: u64 = 64 << 20;

/// The registry and output options every operating command takes.
#[derive(Debug, Clone, clap::Args)]
pub struct Target {
    /// The registry: zk://host:port[,host:port]/namespace or etcd://host:port[,host:port]/namespace.
    /// Default: the SHARDJOB_REGISTRY environment variable.
    #[arg(long, value_name = "URL")]
    pub registry: Option<String>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of the commands that name one job.
#[derive(Debug, Clone, clap::Args)]
pub struct JobArgs {
    /// The job's name.
    pub job: String,
    /// Registry and output.
    #[command(flatten)]
    pub target: Target,
}

/// Arguments of `shardjob trigger`.
#[derive(Debug, Clone, clap::Args)]
pub struct TriggerArgs {
    /// The job's name.
    pub job: String,
    /// The parameter the instances run this trigger with (shardjob instances; ElasticJob
    /// instances run once and ignore it).
    #[arg(long, value_name = "P")]
    pub param: Option<String>,
    /// Registry and output.
    #[command(flatten)]
    pub target: Target,
}

/// Arguments of `shardjob disable` and `shardjob enable`.
#[derive(Debug, Clone, clap::Args)]
pub struct SwitchArgs {
    /// The job's name.
    pub job: String,
    /// Only this server IP of the job (its `servers/{ip}` node).
    #[arg(long, value_name = "IP")]
    pub server: Option<String>,
    /// Only this item of the job (its `sharding/{item}/disabled` node).
    #[arg(long, value_name = "N", conflicts_with = "server")]
    pub item: Option<u32>,
    /// Registry and output.
    #[command(flatten)]
    pub target: Target,
}

/// Arguments of `shardjob shutdown` and `shardjob remove`.
#[derive(Debug, Clone, clap::Args)]
pub struct InstanceArgs {
    /// The job's name.
    pub job: String,
    /// Only the instances on this server IP.
    #[arg(long, value_name = "IP")]
    pub server: Option<String>,
    /// Registry and output.
    #[command(flatten)]
    pub target: Target,
}

/// Arguments of `shardjob config set`.
#[derive(Debug, Clone, clap::Args)]
pub struct ConfigSetArgs {
    /// The job's name.
    pub job: String,
    /// The new configuration: a YAML file of one job in ElasticJob's keys.
    pub file: PathBuf,
    /// Apply without asking (needed when stdin is not a terminal).
    #[arg(long)]
    pub yes: bool,
    /// Registry and output.
    #[command(flatten)]
    pub target: Target,
}

/// The top-level operating commands.
#[derive(Debug, Clone, Subcommand)]
pub enum OpsCommand {
    /// List the jobs of the registry's namespace: status, items, instances, cron.
    Jobs(ListArgs),
    /// One job: its items (owner, server, status, last fire done, run in progress), its
    /// instances, the leader, the next fire.
    Status(JobArgs),
    /// List the servers of the namespace: instances, jobs, disabled jobs.
    Servers(ListArgs),
    /// Run a job once now on every live instance, optionally with a parameter.
    Trigger(TriggerArgs),
    /// Disable a job (every server), a server of it (--server) or one item (--item).
    Disable(SwitchArgs),
    /// Enable a job (every server), a server of it (--server) or one item (--item).
    Enable(SwitchArgs),
    /// Shut down the job's instances (or those on --server): they stop running it until they
    /// restart.
    Shutdown(InstanceArgs),
    /// Shut down the job's instances (or those on --server) and delete their server nodes.
    Remove(InstanceArgs),
    /// Ask the job's leader to re-shard now.
    Reshard(JobArgs),
    /// Print the job's registry tree in ElasticJob's dump format (`path | value`, IPv4
    /// addresses masked); with --instance, as that instance's dump port serves it (with the
    /// instance's own copy of the nodes where it differs from the registry).
    Dump(DumpArgs),
}

/// Arguments of `shardjob dump`.
#[derive(Debug, Clone, clap::Args)]
pub struct DumpArgs {
    /// The job's name.
    pub job: String,
    /// Ask this instance's dump port (`elasticjob.dump.port` of `shardjob run`, or an
    /// ElasticJob instance's) instead of the registry: HOST:PORT.
    #[arg(long, value_name = "HOST:PORT", conflicts_with = "registry")]
    pub instance: Option<String>,
    /// Registry and output.
    #[command(flatten)]
    pub target: Target,
}

/// Arguments of the commands that list the whole namespace.
#[derive(Debug, Clone, clap::Args)]
pub struct ListArgs {
    /// Registry and output.
    #[command(flatten)]
    pub target: Target,
}

/// Any operating request: a top-level command, `config get` or `config set`.
#[derive(Debug, Clone)]
pub enum Request {
    /// A top-level operating command.
    Ops(OpsCommand),
    /// `shardjob config get JOB`.
    ConfigGet(JobArgs),
    /// `shardjob config set JOB FILE`.
    ConfigSet(ConfigSetArgs),
}

impl From<OpsCommand> for Request {
    fn from(c: OpsCommand) -> Self {
        Request::Ops(c)
    }
}

impl From<JobArgs> for Request {
    fn from(a: JobArgs) -> Self {
        Request::ConfigGet(a)
    }
}

impl From<ConfigSetArgs> for Request {
    fn from(a: ConfigSetArgs) -> Self {
        Request::ConfigSet(a)
    }
}

/// Where a command writes and reads.
pub struct Console<'a> {
    /// The result (table or JSON).
    pub out: &'a mut dyn Write,
    /// Problems, and the confirmation question.
    pub err: &'a mut dyn Write,
    /// The operator's answers, when stdin is a terminal; `None` otherwise (then `config set`
    /// needs `--yes`).
    pub input: Option<&'a mut dyn BufRead>,
}

/// Why a command did not finish: exit status 1 or 2, and what to print.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Failure {
    /// Bad input, something not found, a conflict: nothing (more) was written.
    Input(String),
    /// The registry could not be reached.
    Unreachable(String),
}

impl From<OpsError> for Failure {
    fn from(e: OpsError) -> Self {
        match e.kind() {
            ErrorKind::Unreachable => Failure::Unreachable(e.to_string()),
            _ => Failure::Input(e.to_string()),
        }
    }
}

/// The result of a command: `Err` for a failure to report, `Ok` when done.
type Done = Result<Result<(), Failure>, CliError>;

/// Runs an operating request, writing its result to `out`, problems to stderr and asking on
/// the terminal (if stdin is one). `now` is when the next fire of `status` is counted from.
pub fn run(
    request: impl Into<Request>,
    now: DateTime<Utc>,
    out: &mut dyn Write,
) -> Result<ExitCode, CliError> {
    let stdin = std::io::stdin();
    let terminal = stdin.is_terminal();
    let mut lock = stdin.lock();
    let mut stderr = std::io::stderr();
    let console = Console {
        out,
        err: &mut stderr,
        input: if terminal { Some(&mut lock) } else { None },
    };
    run_with(request.into(), now, console)
}

/// [`run`] with its output, problems and answers where the caller says.
pub fn run_with(
    request: Request,
    now: DateTime<Utc>,
    console: Console<'_>,
) -> Result<ExitCode, CliError> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| CliError::Runtime(e.to_string()))?;
    let err = &mut *console.err;
    let out = &mut *console.out;
    let input = console.input;
    let target = match &request {
        Request::Ops(c) => c.target(),
        Request::ConfigGet(a) => &a.target,
        Request::ConfigSet(a) => &a.target,
    }
    .clone();
    let result = rt.block_on(async {
        if let Request::Ops(OpsCommand::Dump(DumpArgs {
            job,
            instance: Some(instance),
            ..
        })) = &request
        {
            return dump_instance(instance, job, target.json, out).await;
        }
        let registry = match connect(target.registry.as_deref()).await {
            Ok(r) => r,
            Err(f) => return Ok(Err(f)),
        };
        let ops = Ops::new(&*registry);
        let done = execute(&request, &ops, target.json, now, out, err, input).await;
        // The session ends now rather than at its timeout; a failure to say goodbye changes
        // nothing the command did.
        let _ = registry.close().await;
        done
    });
    // The client's background tasks are not waited for.
    rt.shutdown_timeout(Duration::from_millis(100));
    match result? {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(Failure::Input(msg)) => {
            writeln!(err, "error: {msg}")?;
            Ok(ExitCode::from(1))
        }
        Err(Failure::Unreachable(msg)) => {
            writeln!(err, "error: {msg}")?;
            Ok(ExitCode::from(EXIT_UNREACHABLE))
        }
    }
}

impl OpsCommand {
    fn target(&self) -> &Target {
        match self {
            OpsCommand::Jobs(a) | OpsCommand::Servers(a) => &a.target,
            OpsCommand::Status(a) | OpsCommand::Reshard(a) => &a.target,
            OpsCommand::Dump(a) => &a.target,
            OpsCommand::Trigger(a) => &a.target,
            OpsCommand::Disable(a) | OpsCommand::Enable(a) => &a.target,
            OpsCommand::Shutdown(a) | OpsCommand::Remove(a) => &a.target,
        }
    }
}

/// The registry URL to use: `--registry`, else [`REGISTRY_ENV`].
fn registry_url(given: Option<&str>) -> Result<String, Failure> {
    given
        .map(str::to_owned)
        .or_else(|| std::env::var(REGISTRY_ENV).ok())
        .filter(|u| !u.trim().is_empty())
        .ok_or_else(|| {
            Failure::Input(format!(
                "no registry: pass --registry zk://host:port/namespace (or etcd://host:port/namespace), or set {REGISTRY_ENV}"
            ))
        })
}

/// Connects within [`CONNECT_TIMEOUT`].
async fn connect(given: Option<&str>) -> Result<Arc<dyn Registry>, Failure> {
    let url = registry_url(given)?;
    let parsed =
        RegistryUrl::parse(&url).map_err(|e| Failure::Input(format!("--registry: {e}")))?;
    if parsed == RegistryUrl::Mem {
        return Err(Failure::Input(
            "--registry mem://: the in-memory registry lives inside one process, so there is nothing here to operate; give the zk:// or etcd:// URL of the cluster".to_owned(),
        ));
    }
    match tokio::time::timeout(CONNECT_TIMEOUT, parsed.connect(SESSION_TIMEOUT)).await {
        Err(_) => Err(Failure::Unreachable(format!(
            "registry {url} unreachable: no connection within {}s (is it running, and is the address right?)",
            CONNECT_TIMEOUT.as_secs()
        ))),
        Ok(Err(RegistryUrlError::Connect(e))) => Err(Failure::Unreachable(format!(
            "registry {url} unreachable: {e}"
        ))),
        Ok(Err(e)) => Err(Failure::Input(format!("--registry: {e}"))),
        Ok(Ok(registry)) => Ok(registry),
    }
}

/// `dump JOB --instance HOST:PORT`: ElasticJob's snapshot protocol, as a client. The
/// connection within [`CONNECT_TIMEOUT`] (else exit 2), the whole answer within
/// [`DUMP_ANSWER_TIMEOUT`] and [`MAX_DUMP_ANSWER`] bytes; an `error: …` answer is a failure
/// (exit 2 when it is the instance's registry that did not answer, else 1).
async fn dump_instance(instance: &str, job: &str, json: bool, out: &mut dyn Write) -> Done {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    if let Err(e) = shardjob_core::layout::JobPaths::new(job) {
        return Ok(Err(Failure::Input(format!("bad job name {job:?}: {e}"))));
    }
    let port_ok = instance
        .rsplit_once(':')
        .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
    if !port_ok {
        return Ok(Err(Failure::Input(format!(
            "--instance {instance:?}: expected HOST:PORT (the instance's dump port, say 127.0.0.1:9888)"
        ))));
    }
    let mut stream = match tokio::time::timeout(
        CONNECT_TIMEOUT,
        tokio::net::TcpStream::connect(instance),
    )
    .await
    {
        Err(_) => {
            return Ok(Err(Failure::Unreachable(format!(
                "instance {instance} unreachable: no connection within {}s",
                CONNECT_TIMEOUT.as_secs()
            ))));
        }
        Ok(Err(e)) => {
            return Ok(Err(Failure::Unreachable(format!(
                "instance {instance} unreachable: {e} (is its dump port on: elasticjob.dump.port?)"
            ))));
        }
        Ok(Ok(s)) => s,
    };
    let mut answer = Vec::new();
    let exchange = async {
        stream.write_all(format!("dump@{job}\n").as_bytes()).await?;
        (&mut stream)
            .take(MAX_DUMP_ANSWER + 1)
            .read_to_end(&mut answer)
            .await
    };
    match tokio::time::timeout(DUMP_ANSWER_TIMEOUT, exchange).await {
        Err(_) => {
            return Ok(Err(Failure::Unreachable(format!(
                "instance {instance}: no complete answer within {}s",
                DUMP_ANSWER_TIMEOUT.as_secs()
            ))));
        }
        Ok(Err(e)) => {
            return Ok(Err(Failure::Unreachable(format!(
                "instance {instance}: the answer broke off: {e}"
            ))));
        }
        Ok(Ok(_)) => {}
    }
    if answer.len() as u64 > MAX_DUMP_ANSWER {
        return Ok(Err(Failure::Input(format!(
            "instance {instance}: the answer is larger than {} MiB: not read",
            MAX_DUMP_ANSWER >> 20
        ))));
    }
    let text = String::from_utf8_lossy(&answer);
    if let Some(why) = text.strip_prefix("error: ") {
        let why = format!("instance {instance}: {}", why.trim_end());
        return Ok(Err(if why.contains(": registry: ") {
            Failure::Unreachable(why)
        } else {
            Failure::Input(why)
        }));
    }
    if text.trim().is_empty() {
        return Ok(Err(Failure::Input(format!(
            "instance {instance} answered nothing for job {job:?} (an ElasticJob instance answers nothing for a job it does not know)"
        ))));
    }
    if json {
        let lines: Vec<&str> = text.lines().collect();
        writeln!(
            out,
            "{}",
            json!({"job": job, "instance": instance, "lines": lines})
        )?;
    } else {
        write!(out, "{text}")?;
    }
    Ok(Ok(()))
}

async fn execute(
    request: &Request,
    ops: &Ops<'_>,
    json: bool,
    now: DateTime<Utc>,
    out: &mut dyn Write,
    err: &mut dyn Write,
    input: Option<&mut dyn BufRead>,
) -> Done {
    let c = match request {
        Request::Ops(c) => c,
        Request::ConfigGet(a) => return config_get(ops, &a.job, json, out).await,
        Request::ConfigSet(a) => return config_set(ops, a, out, err, input).await,
    };
    match c {
        OpsCommand::Jobs(_) => jobs(ops, json, out).await,
        OpsCommand::Status(a) => status(ops, &a.job, json, now, out).await,
        OpsCommand::Servers(_) => servers(ops, json, out).await,
        OpsCommand::Trigger(a) => {
            let instances = match ops.trigger(&a.job, a.param.as_deref()).await {
                Ok(i) => i,
                Err(e) => return Ok(Err(e.into())),
            };
            if json {
                let v = json!({"job": a.job, "parameter": a.param, "instances": instances});
                writeln!(out, "{v}")?;
            } else {
                let with = a
                    .param
                    .as_deref()
                    .map_or(String::new(), |p| format!(" with parameter {p:?}"));
                writeln!(
                    out,
                    "triggered job {}{with} on {} instance(s): {}",
                    a.job,
                    instances.len(),
                    instances.join(", ")
                )?;
            }
            Ok(Ok(()))
        }
        OpsCommand::Disable(a) => switch(ops, a, true, json, out).await,
        OpsCommand::Enable(a) => switch(ops, a, false, json, out).await,
        OpsCommand::Shutdown(a) | OpsCommand::Remove(a) => {
            let remove = matches!(c, OpsCommand::Remove(_));
            let scope = Scope::from_parts(Some(&a.job), a.server.as_deref());
            let done = match scope {
                Ok(s) if remove => ops.remove(&s).await,
                Ok(s) => ops.shutdown(&s).await,
                Err(e) => Err(e),
            };
            let done = match done {
                Ok(d) => d,
                Err(e) => return Ok(Err(e.into())),
            };
            if json {
                writeln!(out, "{}", json_text(&done)?)?;
            } else {
                for (job, id) in &done.instances {
                    writeln!(out, "shut down instance {id} of job {job}")?;
                }
                for (job, ip) in &done.servers {
                    writeln!(out, "removed server {ip} of job {job}")?;
                }
                if done.instances.is_empty() && done.servers.is_empty() {
                    writeln!(
                        out,
                        "nothing to remove: job {} has no instance or server node left",
                        a.job
                    )?;
                }
            }
            Ok(Ok(()))
        }
        OpsCommand::Reshard(a) => {
            if let Err(e) = ops.reshard(&a.job).await {
                return Ok(Err(e.into()));
            }
            if json {
                writeln!(out, "{}", json!({"job": a.job, "reshard_pending": true}))?;
            } else {
                writeln!(
                    out,
                    "job {} flagged for re-sharding: its leader re-shards before the next fire",
                    a.job
                )?;
            }
            Ok(Ok(()))
        }
        OpsCommand::Dump(a) => {
            let text = match ops.dump(&a.job).await {
                Ok(t) => t,
                Err(e) => return Ok(Err(e.into())),
            };
            if json {
                let lines: Vec<&str> = text.lines().collect();
                writeln!(out, "{}", json!({"job": a.job, "lines": lines}))?;
            } else {
                write!(out, "{text}")?;
            }
            Ok(Ok(()))
        }
    }
}

fn json_text(v: &impl serde::Serialize) -> Result<String, CliError> {
    Ok(serde_json::to_string(v).map_err(std::io::Error::other)?)
}

/// An instant as RFC 3339 UTC, or `-`.
fn time(ms: Option<i64>) -> String {
    ms.and_then(DateTime::from_timestamp_millis)
        .map_or("-".to_owned(), |t| {
            t.to_rfc3339_opts(SecondsFormat::Millis, true)
        })
}

/// Writes rows under a header, columns padded to their widest cell.
fn table(out: &mut dyn Write, header: &[&str], rows: &[Vec<String>]) -> std::io::Result<()> {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        padded.join("  ").trim_end().to_owned()
    };
    writeln!(out, "{}", line(header.to_vec()))?;
    for row in rows {
        writeln!(out, "{}", line(row.iter().map(String::as_str).collect()))?;
    }
    Ok(())
}

async fn jobs(ops: &Ops<'_>, json: bool, out: &mut dyn Write) -> Done {
    let jobs = match ops.jobs().await {
        Ok(j) => j,
        Err(e) => return Ok(Err(e.into())),
    };
    if json {
        writeln!(out, "{}", json_text(&jobs)?)?;
        return Ok(Ok(()));
    }
    if jobs.is_empty() {
        writeln!(out, "no jobs in this namespace")?;
        return Ok(Ok(()));
    }
    let rows: Vec<Vec<String>> = jobs
        .iter()
        .map(|j| {
            vec![
                j.name.clone(),
                j.status.as_str().to_owned(),
                j.sharding_total_count.to_string(),
                j.instance_count.to_string(),
                j.cron.clone().unwrap_or_else(|| "-".to_owned()),
                match &j.config_problem {
                    Some(p) => format!("(config unreadable: {p})"),
                    None => j.description.clone(),
                },
            ]
        })
        .collect();
    table(
        out,
        &["JOB", "STATUS", "ITEMS", "INSTANCES", "CRON", "DESCRIPTION"],
        &rows,
    )?;
    Ok(Ok(()))
}

async fn servers(ops: &Ops<'_>, json: bool, out: &mut dyn Write) -> Done {
    let servers = match ops.servers().await {
        Ok(s) => s,
        Err(e) => return Ok(Err(e.into())),
    };
    if json {
        writeln!(out, "{}", json_text(&servers)?)?;
        return Ok(Ok(()));
    }
    if servers.is_empty() {
        writeln!(out, "no servers in this namespace")?;
        return Ok(Ok(()));
    }
    let rows: Vec<Vec<String>> = servers
        .iter()
        .map(|s| {
            vec![
                s.ip.clone(),
                s.instances.len().to_string(),
                s.jobs.len().to_string(),
                s.disabled_jobs.to_string(),
            ]
        })
        .collect();
    table(
        out,
        &["SERVER", "INSTANCES", "JOBS", "DISABLED JOBS"],
        &rows,
    )?;
    Ok(Ok(()))
}

async fn status(
    ops: &Ops<'_>,
    job: &str,
    json: bool,
    now: DateTime<Utc>,
    out: &mut dyn Write,
) -> Done {
    let status = match ops.status(job, now).await {
        Ok(s) => s,
        Err(e) => return Ok(Err(e.into())),
    };
    if json {
        writeln!(out, "{}", json_text(&status)?)?;
    } else {
        write_status(&status, out)?;
    }
    Ok(Ok(()))
}

/// Writes `shardjob status JOB`'s table of `job`, read through `registry` (`shardjob demo`
/// ends with it). The inner `Err` says why the job could not be read.
pub async fn show_status(
    registry: &(dyn Registry + 'static),
    job: &str,
    now: DateTime<Utc>,
    out: &mut dyn Write,
) -> std::io::Result<Result<(), String>> {
    let ops = Ops::new(registry);
    match status(&ops, job, false, now, out).await {
        Ok(Ok(())) => Ok(Ok(())),
        Ok(Err(Failure::Input(why) | Failure::Unreachable(why))) => Ok(Err(why)),
        Err(CliError::Output(e)) => Err(e),
        Err(CliError::Runtime(why)) => Err(std::io::Error::other(why)),
    }
}

fn write_status(s: &JobStatus, out: &mut dyn Write) -> std::io::Result<()> {
    let b = &s.brief;
    writeln!(
        out,
        "job {}: {}, {} items, {} instance(s), cron {}, next fire {}",
        b.name,
        b.status.as_str(),
        b.sharding_total_count,
        b.instance_count,
        b.cron.as_deref().unwrap_or("-"),
        time(s.next_fire_ms)
    )?;
    if let Some(p) = &b.config_problem {
        writeln!(out, "config unreadable: {p}")?;
    }
    let reshard = match (s.resharding, s.reshard_pending) {
        (true, _) => "in progress",
        (false, true) => "pending",
        (false, false) => "none",
    };
    writeln!(
        out,
        "leader {}; re-shard {reshard}",
        s.leader.as_deref().unwrap_or("(none)")
    )?;
    writeln!(out)?;
    let rows: Vec<Vec<String>> = s
        .items
        .iter()
        .map(|i| {
            let run = match &i.run {
                Some(r) => format!(
                    "{:?} since {} on {} token {}",
                    r.kind,
                    time(Some(r.since_ms)),
                    r.instance,
                    r.fencing_token.map_or("-".to_owned(), |t| t.to_string())
                ),
                None => i
                    .record_problem
                    .as_ref()
                    .map_or("-".to_owned(), |p| format!("(record unreadable: {p})")),
            };
            let mut flags = Vec::new();
            if i.failover {
                flags.push("failover");
            }
            if i.misfire {
                flags.push("misfire");
            }
            vec![
                i.item.to_string(),
                i.status.as_str().to_owned(),
                i.instance.clone().unwrap_or_else(|| "-".to_owned()),
                i.server_ip.clone().unwrap_or_else(|| "-".to_owned()),
                if flags.is_empty() {
                    "-".to_owned()
                } else {
                    flags.join(",")
                },
                if i.never_done {
                    "never".to_owned()
                } else {
                    time(i.last_done_ms)
                },
                run,
            ]
        })
        .collect();
    table(
        out,
        &[
            "ITEM",
            "STATUS",
            "INSTANCE",
            "SERVER",
            "FLAGS",
            "LAST DONE",
            "RUN",
        ],
        &rows,
    )?;
    writeln!(out)?;
    let rows: Vec<Vec<String>> = s
        .instances
        .iter()
        .map(|i| {
            let items: Vec<String> = i.items.iter().map(u32::to_string).collect();
            vec![
                i.id.clone(),
                i.server_ip.clone(),
                if i.leader { "yes" } else { "-" }.to_owned(),
                if i.server_disabled {
                    "DISABLED"
                } else {
                    "ENABLED"
                }
                .to_owned(),
                if items.is_empty() {
                    "-".to_owned()
                } else {
                    items.join(",")
                },
            ]
        })
        .collect();
    table(
        out,
        &["INSTANCE", "SERVER", "LEADER", "SERVER STATE", "ITEMS"],
        &rows,
    )?;
    if !s.failover_queue.is_empty() {
        let q: Vec<String> = s.failover_queue.iter().map(u32::to_string).collect();
        writeln!(out, "items waiting for failover: {}", q.join(","))?;
    }
    for (id, param) in &s.pending_triggers {
        writeln!(out, "trigger not yet taken by {id} (parameter {param:?})")?;
    }
    Ok(())
}

async fn switch(
    ops: &Ops<'_>,
    a: &SwitchArgs,
    disable: bool,
    json: bool,
    out: &mut dyn Write,
) -> Done {
    let word = if disable { "disabled" } else { "enabled" };
    if let Some(item) = a.item {
        let done = if disable {
            ops.disable_item(&a.job, item).await
        } else {
            ops.enable_item(&a.job, item).await
        };
        if let Err(e) = done {
            return Ok(Err(e.into()));
        }
        if json {
            writeln!(out, "{}", json!({"job": a.job, "item": item, word: true}))?;
        } else {
            writeln!(out, "{word} item {item} of job {}", a.job)?;
        }
        return Ok(Ok(()));
    }
    let scope = match Scope::from_parts(Some(&a.job), a.server.as_deref()) {
        Ok(s) => s,
        Err(e) => return Ok(Err(e.into())),
    };
    let done = if disable {
        ops.disable(&scope).await
    } else {
        ops.enable(&scope).await
    };
    let servers = match done {
        Ok(s) => s,
        Err(e) => return Ok(Err(e.into())),
    };
    if json {
        let list: Vec<&str> = servers.iter().map(|(_, ip)| ip.as_str()).collect();
        writeln!(out, "{}", json!({"job": a.job, word: list}))?;
    } else {
        for (job, ip) in &servers {
            writeln!(out, "{word} job {job} on server {ip}")?;
        }
    }
    Ok(Ok(()))
}

async fn config_get(ops: &Ops<'_>, job: &str, json: bool, out: &mut dyn Write) -> Done {
    let read = match ops.config(job).await {
        Ok(r) => r,
        Err(e) => return Ok(Err(e.into())),
    };
    if json {
        let v = json!({"job": job, "version": read.version.0, "yaml": read.yaml});
        writeln!(out, "{v}")?;
    } else {
        write!(out, "{}", read.yaml)?;
        if !read.yaml.ends_with('\n') {
            writeln!(out)?;
        }
    }
    Ok(Ok(()))
}

/// One problem per line, each naming the file.
fn config_problems(file: &str, e: &JobConfigError) -> String {
    match e {
        JobConfigError::Yaml(_) => format!("{file}: {e}"),
        _ => e
            .problems()
            .iter()
            .map(|p| format!("{file}: {p}"))
            .collect::<Vec<_>>()
            .join("\nerror: "),
    }
}

fn write_changes(out: &mut dyn Write, changes: &[ConfigChange]) -> std::io::Result<()> {
    for c in changes {
        let old = c.old.as_deref().unwrap_or("(unset)");
        let new = c.new.as_deref().unwrap_or("(unset)");
        if old.contains('\n') || new.contains('\n') {
            writeln!(out, "  {}:", c.key)?;
            for l in old.lines() {
                writeln!(out, "    - {l}")?;
            }
            for l in new.lines() {
                writeln!(out, "    + {l}")?;
            }
        } else {
            writeln!(out, "  {}: {old} -> {new}", c.key)?;
        }
    }
    Ok(())
}

async fn config_set(
    ops: &Ops<'_>,
    a: &ConfigSetArgs,
    out: &mut dyn Write,
    err: &mut dyn Write,
    input: Option<&mut dyn BufRead>,
) -> Done {
    let file = a.file.display().to_string();
    let text = match std::fs::read(&a.file) {
        Ok(bytes) => match String::from_utf8(bytes) {
            Ok(t) => t,
            Err(_) => return Ok(Err(Failure::Input(format!("{file}: not UTF-8 text")))),
        },
        Err(e) => return Ok(Err(Failure::Input(format!("{file}: cannot read: {e}")))),
    };
    let plan = match ops.plan_config(&a.job, &text).await {
        Ok(p) => p,
        Err(OpsError::InvalidConfig { source, .. }) => {
            return Ok(Err(Failure::Input(format!(
                "{}\nerror: {file}: nothing was written",
                config_problems(&file, &source)
            ))));
        }
        Err(e) => return Ok(Err(e.into())),
    };
    let json = a.target.json;
    let report = |out: &mut dyn Write, applied: Option<i64>| -> Result<(), CliError> {
        if json {
            let v = json!({
                "job": a.job,
                "changes": plan.changes,
                "applied": applied.is_some(),
                "version": applied.unwrap_or(plan.current.version.0),
            });
            writeln!(out, "{v}")?;
        } else if let Some(v) = applied {
            writeln!(out, "applied: job {} has configuration version {v}", a.job)?;
        }
        Ok(())
    };
    if plan.changes.is_empty() {
        if !json {
            writeln!(
                out,
                "no change: the registry already holds this configuration of job {}",
                a.job
            )?;
        }
        report(out, None)?;
        return Ok(Ok(()));
    }
    if !json {
        writeln!(
            out,
            "job {}: {} change(s) to configuration version {}:",
            a.job,
            plan.changes.len(),
            plan.current.version.0
        )?;
        write_changes(out, &plan.changes)?;
    }
    if !a.yes {
        let Some(input) = input else {
            report(out, None)?;
            return Ok(Err(Failure::Input(
                "stdin is not a terminal, so there is no one to ask: nothing was written; pass --yes to apply".to_owned(),
            )));
        };
        if json {
            write_changes(err, &plan.changes)?;
        }
        write!(err, "apply to job {}? [y/N] ", a.job)?;
        err.flush()?;
        out.flush()?;
        let mut answer = String::new();
        input.read_line(&mut answer)?;
        if !matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes") {
            report(out, None)?;
            return Ok(Err(Failure::Input(
                "not confirmed: nothing was written".to_owned(),
            )));
        }
    }
    match ops
        .update_config(&a.job, &plan.new, plan.current.version)
        .await
    {
        Ok(v) => {
            report(out, Some(v.0))?;
            Ok(Ok(()))
        }
        Err(e) => Ok(Err(e.into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_pad_columns_to_the_widest_cell() {
        let mut out = Vec::new();
        let rows = vec![
            vec!["a".to_owned(), "long cell".to_owned()],
            vec!["bbbb".to_owned(), "x".to_owned()],
        ];
        table(&mut out, &["H1", "H2"], &rows).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "H1    H2\na     long cell\nbbbb  x\n"
        );
    }

    #[test]
    fn a_given_registry_wins_and_a_blank_one_is_refused() {
        assert_eq!(registry_url(Some("zk://a:1/n")).unwrap(), "zk://a:1/n");
        assert!(matches!(registry_url(Some(" ")), Err(Failure::Input(_))));
    }

    #[test]
    fn changes_show_both_values() {
        let mut out = Vec::new();
        let changes = [
            ConfigChange {
                key: "shardingTotalCount".into(),
                old: Some("4".into()),
                new: Some("6".into()),
            },
            ConfigChange {
                key: "description".into(),
                old: None,
                new: Some("d".into()),
            },
        ];
        write_changes(&mut out, &changes).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "  shardingTotalCount: 4 -> 6\n  description: (unset) -> d\n"
        );
    }

    #[test]
    fn times_are_rfc3339_utc() {
        assert_eq!(time(None), "-");
        assert_eq!(time(Some(0)), "1970-01-01T00:00:00.000Z");
    }
}
