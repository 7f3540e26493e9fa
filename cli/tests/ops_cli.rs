//! The operating commands (`shardjob jobs`, `status`, `trigger`, `disable`, `config set`, ...)
//! against a real ZooKeeper (started by the test kit, shared by the tests of this file; each
//! test has a namespace of its own) on which a scheduler runs a job in this process. The
//! commands run through `shardjob_cli::cli::run` (their exit status) or `ops_cli::run_with` (when
//! a test reads what they print on stderr), as the binary would run them.

use std::net::TcpListener;
use std::process::ExitCode;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use chrono::Utc;
use clap::Parser;
use shardjob::core::machine::record::RunKind;
use shardjob::core::registry::{NodePath, Registry};
use shardjob::core::{CronExpr, JobConfig};
use shardjob::jobs::{JobError, ShardingContext, SimpleJob};
use shardjob::runtime::{Scheduler, SchedulerHandle};
use shardjob_backend_zk::{ZkConfig, ZkRegistry};
use shardjob_cli::cli::{Cli, Command, ConfigCommand, run};
use shardjob_cli::ops_cli::{Console, Request, run_with};
use shardjob_ops::{ItemState, Ops};
use shardjob_testkit::Cluster;

const JOB: &str = "cliJob";
/// Every wait for an effect; generous, for a loaded machine.
const WAIT: Duration = Duration::from_secs(40);

static SHARED: OnceLock<Cluster> = OnceLock::new();

fn zk() -> &'static Cluster {
    SHARED.get_or_init(|| Cluster::zookeeper(1).unwrap_or_else(|e| panic!("{e}")))
}

/// The parameters of the runs the job saw: (item, kind, parameter).
type Seen = Arc<Mutex<Vec<(u32, RunKind, String)>>>;

#[derive(Clone)]
struct Recorder(Seen);

#[async_trait]
impl SimpleJob for Recorder {
    async fn execute(&self, ctx: &ShardingContext) -> Result<(), JobError> {
        self.0
            .lock()
            .unwrap()
            .push((ctx.sharding_item, ctx.kind, ctx.job_parameter.clone()));
        Ok(())
    }
}

/// A scheduler running [`JOB`] (3 items, every second) in namespace `ns` of the shared
/// ZooKeeper, on a runtime of its own; and a client of the namespace to check nodes with.
struct Cluster1 {
    rt: tokio::runtime::Runtime,
    handle: Option<SchedulerHandle>,
    tool: ZkRegistry,
    url: String,
    seen: Seen,
}

impl Cluster1 {
    fn start(ns: &str) -> Self {
        let connect = zk().connect_string();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let seen: Seen = Arc::default();
        let client = |ns: &str| {
            ZkConfig::new(connect.clone())
                .namespace(format!("/{ns}"))
                .session_timeout(Duration::from_secs(10))
                .request_timeout(Duration::from_secs(10))
        };
        let (handle, tool) = rt.block_on(async {
            let registry = ZkRegistry::connect(client(ns)).await.unwrap();
            let tool = ZkRegistry::connect(client(ns)).await.unwrap();
            let config = JobConfig::new(JOB, 3).with_cron(CronExpr::parse("* * * * * ?").unwrap());
            let handle = Scheduler::builder()
                .registry(Arc::new(registry))
                .options(|o| o.reshard_debounce = Duration::from_millis(50))
                .job(config, Recorder(Arc::clone(&seen)))
                .build()
                .await
                .unwrap();
            (handle, tool)
        });
        let cluster = Cluster1 {
            rt,
            handle: Some(handle),
            tool,
            url: format!("zk://{connect}/{ns}"),
            seen,
        };
        cluster.wait("every item owned", |s| {
            s.items.len() == 3 && s.items.iter().all(|i| i.instance.is_some())
        });
        cluster
    }

    /// Waits until the job's status satisfies `done`.
    fn wait(&self, what: &str, done: impl Fn(&shardjob_ops::JobStatus) -> bool) {
        let deadline = Instant::now() + WAIT;
        self.rt.block_on(async {
            let ops = Ops::new(&self.tool as &dyn Registry);
            loop {
                if let Ok(s) = ops.status(JOB, Utc::now()).await
                    && done(&s)
                {
                    return;
                }
                assert!(Instant::now() < deadline, "{what}: not within {WAIT:?}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        });
    }

    fn node(&self, path: &str) -> Option<String> {
        self.rt.block_on(async {
            self.tool
                .get(&NodePath::new(path).unwrap())
                .await
                .unwrap()
                .map(|n| String::from_utf8(n.data).unwrap())
        })
    }

    /// Runs `shardjob ARGS --registry URL` through the library entry point.
    fn cli(&self, args: &[&str]) -> (ExitCode, String) {
        let mut all = args.to_vec();
        all.extend(["--registry", &self.url]);
        cli(&all)
    }
}

impl Drop for Cluster1 {
    fn drop(&mut self) {
        if let Some(handle) = self.handle.take() {
            let _ = self.rt.block_on(handle.shutdown());
        }
    }
}

fn parse(args: &[&str]) -> Cli {
    Cli::try_parse_from(std::iter::once("shardjob").chain(args.iter().copied()))
        .unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

fn cli(args: &[&str]) -> (ExitCode, String) {
    let mut out = Vec::new();
    let code = run(parse(args), Utc::now(), &mut out).unwrap();
    (code, String::from_utf8(out).unwrap())
}

/// Runs a `config` request with stdout and stderr captured, stdin not a terminal.
fn config_cli(args: &[&str]) -> (ExitCode, String, String) {
    config_cli_answering(args, None)
}

/// Runs a `config` request with stdout and stderr captured; `answer` is what the operator
/// types on the terminal, `None` for no terminal.
fn config_cli_answering(args: &[&str], answer: Option<&str>) -> (ExitCode, String, String) {
    let request = match parse(args).command {
        Command::Config(ConfigCommand::Set(a)) => Request::from(a),
        Command::Config(ConfigCommand::Get(a)) => Request::from(a),
        other => panic!("not a config request: {other:?}"),
    };
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let mut typed = answer.map(|a| std::io::Cursor::new(a.as_bytes().to_vec()));
    let console = Console {
        out: &mut out,
        err: &mut err,
        input: typed.as_mut().map(|t| t as &mut dyn std::io::BufRead),
    };
    let code = run_with(request, Utc::now(), console).unwrap();
    (
        code,
        String::from_utf8(out).unwrap(),
        String::from_utf8(err).unwrap(),
    )
}

#[test]
fn reads_list_the_job_and_its_items() {
    let c = Cluster1::start("reads");
    let (code, out) = c.cli(&["jobs"]);
    assert_eq!(code, ExitCode::SUCCESS, "{out}");
    let line = out.lines().find(|l| l.starts_with(JOB)).expect(&out);
    assert!(line.contains("OK") && line.contains("* * * * * ?"), "{out}");

    let (code, out) = c.cli(&["jobs", "--json"]);
    assert_eq!(code, ExitCode::SUCCESS);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v[0]["name"], JOB);
    assert_eq!(v[0]["sharding_total_count"], 3);
    assert_eq!(v[0]["instance_count"], 1);

    let (code, out) = c.cli(&["status", JOB]);
    assert_eq!(code, ExitCode::SUCCESS, "{out}");
    for item in 0..3 {
        assert!(
            out.lines().any(|l| l.starts_with(&format!("{item} "))),
            "item {item} missing: {out}"
        );
    }
    let (_, out) = c.cli(&["status", JOB, "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["items"].as_array().unwrap().len(), 3);
    assert!(v["items"][0]["instance"].is_string(), "{v}");

    let (code, out) = c.cli(&["servers"]);
    assert_eq!(code, ExitCode::SUCCESS);
    assert!(
        out.lines().nth(1).is_some_and(|l| l.contains(" 1")),
        "{out}"
    );

    let (code, out) = c.cli(&["dump", JOB]);
    assert_eq!(code, ExitCode::SUCCESS);
    assert!(out.contains(&format!("/{JOB}/config | ")), "{out}");

    let (code, out) = c.cli(&["config", "get", JOB]);
    assert_eq!(code, ExitCode::SUCCESS);
    assert!(out.contains("shardingTotalCount: 3"), "{out}");
}

#[test]
fn writes_disable_an_item_and_trigger_with_a_parameter() {
    let c = Cluster1::start("writes");
    let (code, out) = c.cli(&["disable", JOB, "--item", "1"]);
    assert_eq!(code, ExitCode::SUCCESS, "{out}");
    assert_eq!(
        c.node(&format!("/{JOB}/sharding/1/disabled")).as_deref(),
        Some("")
    );
    c.wait("item 1 disabled", |s| {
        s.items[1].status == ItemState::Disabled
    });
    // Out of range: bad input, nothing written.
    assert_eq!(c.cli(&["disable", JOB, "--item", "3"]).0, ExitCode::from(1));
    assert_eq!(c.node(&format!("/{JOB}/sharding/3")), None);

    let (code, out) = c.cli(&["trigger", JOB, "--param", "backfill"]);
    assert_eq!(code, ExitCode::SUCCESS, "{out}");
    assert!(out.contains("1 instance(s)"), "{out}");
    // The scheduler takes the trigger: its enabled items run once with the parameter.
    let deadline = Instant::now() + WAIT;
    loop {
        let ran: Vec<u32> = c
            .seen
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, kind, p)| *kind == RunKind::Trigger && p == "backfill")
            .map(|(item, ..)| *item)
            .collect();
        if ran.contains(&0) && ran.contains(&2) {
            assert!(!ran.contains(&1), "the disabled item ran: {ran:?}");
            break;
        }
        assert!(Instant::now() < deadline, "trigger not run: {ran:?}");
        std::thread::sleep(Duration::from_millis(50));
    }

    let (code, _) = c.cli(&["enable", JOB, "--item", "1"]);
    assert_eq!(code, ExitCode::SUCCESS);
    assert_eq!(c.node(&format!("/{JOB}/sharding/1/disabled")), None);
}

#[test]
fn config_set_validates_then_applies_with_yes() {
    let c = Cluster1::start("config");
    let dir = std::env::temp_dir().join(format!("shardjob-ops-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let before = c.node(&format!("/{JOB}/config")).unwrap();

    let bad = dir.join("bad.yaml");
    std::fs::write(
        &bad,
        format!(
            "jobName: {JOB}\nshardingTotalCount: 0\ncron: \"not a cron\"\ntimeZone: Mars/Base\n"
        ),
    )
    .unwrap();
    let bad = bad.to_str().unwrap();
    let (code, _, err) = config_cli(&["config", "set", JOB, bad, "--yes", "--registry", &c.url]);
    assert_eq!(code, ExitCode::from(1), "{err}");
    for key in ["shardingTotalCount", "cron", "timeZone"] {
        assert!(
            err.lines().any(|l| l.contains(key)),
            "{key} not named: {err}"
        );
    }
    assert!(err.contains("nothing was written"), "{err}");
    assert_eq!(c.node(&format!("/{JOB}/config")).unwrap(), before);

    let good = dir.join("good.yaml");
    std::fs::write(
        &good,
        format!("jobName: {JOB}\nshardingTotalCount: 5\ncron: \"* * * * * ?\"\n"),
    )
    .unwrap();
    let good = good.to_str().unwrap();
    // Without a terminal and without --yes: the changes are shown, nothing is written.
    let (code, out, err) = config_cli(&["config", "set", JOB, good, "--registry", &c.url]);
    assert_eq!(code, ExitCode::from(1), "{err}");
    assert!(out.contains("shardingTotalCount: 3 -> 5"), "{out}");
    assert!(err.contains("--yes"), "{err}");
    assert_eq!(c.node(&format!("/{JOB}/config")).unwrap(), before);

    // On a terminal, anything but "y" leaves it unwritten; the question is asked on stderr.
    let args = ["config", "set", JOB, good, "--registry", &c.url];
    let (code, _, err) = config_cli_answering(&args, Some("n\n"));
    assert_eq!(code, ExitCode::from(1), "{err}");
    assert!(
        err.contains("[y/N]") && err.contains("not confirmed"),
        "{err}"
    );
    assert_eq!(c.node(&format!("/{JOB}/config")).unwrap(), before);

    let (code, out) = c.cli(&["config", "set", JOB, good, "--yes"]);
    assert_eq!(code, ExitCode::SUCCESS, "{out}");
    assert!(out.contains("applied"), "{out}");
    let after = c.node(&format!("/{JOB}/config")).unwrap();
    assert!(after.contains("shardingTotalCount: 5"), "{after}");
    let (code, out, _) = config_cli_answering(&args, Some("y\n"));
    assert_eq!(code, ExitCode::SUCCESS);
    assert!(out.contains("no change"), "{out}");
    // The scheduler re-shards to the new count.
    c.wait("five items owned", |s| {
        s.items.len() == 5 && s.items.iter().all(|i| i.instance.is_some())
    });
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn unknown_jobs_are_bad_input() {
    let c = Cluster1::start("unknown");
    for args in [
        &["status", "nope"][..],
        &["trigger", "nope"],
        &["disable", "nope"],
        &["dump", "nope"],
        &["config", "get", "nope"],
    ] {
        let (code, out) = c.cli(args);
        assert_eq!(code, ExitCode::from(1), "{args:?}: {out}");
    }
    assert_eq!(c.node("/nope"), None);
}

#[test]
fn a_registry_that_refuses_is_unreachable_in_bounded_time() {
    let port = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let url = format!("zk://127.0.0.1:{port}/ns");
    let started = Instant::now();
    let (code, out) = cli(&["jobs", "--registry", &url]);
    let took = started.elapsed();
    assert_eq!(code, ExitCode::from(2), "{out}");
    assert!(took < Duration::from_secs(20), "took {took:?}");
    // A URL that cannot be one is bad input, not an unreachable registry.
    assert_eq!(
        cli(&["jobs", "--registry", "zk://nohost/ns"]).0,
        ExitCode::from(1)
    );
    assert_eq!(cli(&["jobs", "--registry", "mem://"]).0, ExitCode::from(1));
}

/// The exit status contract: 0 done, 1 bad input (usage errors included: clap's own 2 would
/// read as "registry unreachable"), 2 registry unreachable; `--help` and `--version` are 0.
#[test]
fn usage_errors_exit_1_and_help_exits_0() {
    let binary = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_shardjob"))
            .args(args)
            .env_remove("SHARDJOB_REGISTRY")
            .output()
            .unwrap()
    };
    for args in [
        &["status"][..],
        &["jobs", "--no-such-flag"],
        &["no-such-command"],
        &["disable", "j", "--item", "x"],
        &[
            "dump",
            "j",
            "--instance",
            "127.0.0.1:1",
            "--registry",
            "zk://127.0.0.1:1/ns",
        ],
    ] {
        let out = binary(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.starts_with("error: "), "{args:?}: {err}");
    }
    for args in [&["--help"][..], &["status", "--help"], &["--version"]] {
        let out = binary(args);
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        assert!(!out.stdout.is_empty(), "{args:?}");
    }
    let help = String::from_utf8(binary(&["--help"]).stdout).unwrap();
    assert!(
        help.contains("Exit status:") && help.contains("2  an operating command"),
        "{help}"
    );
}
