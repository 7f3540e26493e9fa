//! The dump port as the command line reads it: `shardjob dump JOB --instance HOST:PORT` gives
//! what a raw TCP client gets, over the in-memory registry and a real ZooKeeper; and the job
//! file's `elasticjob.dump` keys, as `shardjob run` and `config check` read them. (The dump
//! port's own bounds: the root crate's `tests/runtime_dump.rs`.)

use std::io::{BufRead, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, ExitCode, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use chrono::Utc;
use clap::Parser;
use shardjob::core::registry::{CreateMode, NodePath, Registry};
use shardjob::core::{CronExpr, InstanceId, JobConfig};
use shardjob::jobs::{JobError, ShardingContext, SimpleJob};
use shardjob::mem::MemServer;
use shardjob::runtime::{DumpLimits, Scheduler, SchedulerHandle};
use shardjob_cli::cli::{Cli, run};

const JOB: &str = "dumpJob";
/// Every wait for an effect; generous, for a loaded machine.
const WAIT: Duration = Duration::from_secs(40);
/// The instance's id: its IP must not show in a dump.
const ID: &str = "10.20.30.40@-@7";

struct Idle;

#[async_trait]
impl SimpleJob for Idle {
    async fn execute(&self, _: &ShardingContext) -> Result<(), JobError> {
        Ok(())
    }
}

/// A job that fires once a year: its tree stays still once its plan is written.
fn config() -> JobConfig {
    let mut config = JobConfig::new(JOB, 2).with_cron(CronExpr::parse("0 0 0 1 1 ?").unwrap());
    config.job_parameter = "from 192.168.7.9".to_owned();
    config
}

/// Starts an instance of [`JOB`] with its dump port on a free loopback port, and waits until
/// it owns every item.
async fn instance(registry: Arc<dyn Registry>) -> SchedulerHandle {
    instance_with(registry, DumpLimits::default()).await
}

/// [`instance`] with other bounds on the dump port's clients.
async fn instance_with(registry: Arc<dyn Registry>, limits: DumpLimits) -> SchedulerHandle {
    let handle = Scheduler::builder()
        .registry(registry)
        .instance_id(InstanceId::new(ID).unwrap())
        .dump_with(0, limits)
        .job(config(), Idle)
        .build()
        .await
        .unwrap();
    let deadline = Instant::now() + WAIT;
    while handle.owned_items(JOB).await.unwrap_or_default() != [0, 1] {
        assert!(Instant::now() < deadline, "no plan within {WAIT:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    handle
}

/// Sends `request` (as is), ends the input, and reads the answer to the end.
fn ask(addr: SocketAddr, request: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(WAIT)).unwrap();
    s.write_all(request).unwrap();
    s.shutdown(std::net::Shutdown::Write).unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    answer
}

/// Asks in a blocking thread (the tests' runtime keeps serving the instance meanwhile).
async fn ask_async(addr: SocketAddr, request: &'static [u8]) -> String {
    tokio::task::spawn_blocking(move || ask(addr, request))
        .await
        .unwrap()
}

fn cli_args(args: &[&str]) -> Cli {
    Cli::try_parse_from(std::iter::once("shardjob").chain(args.iter().copied()))
        .unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

/// Runs the CLI in a blocking thread (it has a runtime of its own).
async fn cli(args: Vec<String>) -> (ExitCode, String) {
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut out = Vec::new();
        let code = run(cli_args(&args), Utc::now(), &mut out).unwrap();
        (code, String::from_utf8(out).unwrap())
    })
    .await
    .unwrap()
}

/// Asks until the dump shows no node whose cached copy differs (the instance's watch has
/// caught up), and returns it.
async fn settled_dump(addr: SocketAddr) -> String {
    let deadline = Instant::now() + WAIT;
    loop {
        let text = ask_async(addr, b"dump@dumpJob\n").await;
        // A node whose copy differs has four columns (values may run over several lines).
        if text.lines().all(|l| l.matches(" | ").count() < 3) {
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "the cache never caught up:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_serves_its_jobs_tree_masked_to_raw_clients_and_the_cli() {
    let server = MemServer::default();
    let handle = instance(Arc::new(server.connect_default())).await;
    let addr = handle.dump_addr().unwrap();
    assert!(addr.ip().is_loopback(), "{addr}");
    assert_ne!(addr.port(), 0);

    let text = settled_dump(addr).await;
    assert!(text.ends_with('\n'), "{text:?}");
    for line in [
        "/dumpJob/servers/ip1 | ENABLED",
        "/dumpJob/sharding/0/instance | ip1@-@7",
        "/dumpJob/sharding/1/instance | ip1@-@7",
        "/dumpJob/instances/ip1@-@7 | ",
    ] {
        assert!(
            text.lines().any(|l| l.starts_with(line)),
            "no {line:?} in:\n{text}"
        );
    }
    // Every IPv4 address is masked, the job parameter's too.
    assert!(!text.contains("10.20.30.40"), "{text}");
    assert!(!text.contains("192.168.7.9"), "{text}");
    assert!(text.contains("from ip2"), "{text}");
    // Reverse order of names, as ElasticJob walks: sharding before servers before instances.
    let at = |p: &str| text.find(&format!("{p} | ")).unwrap();
    assert!(at("/dumpJob/sharding") < at("/dumpJob/servers"), "{text}");
    assert!(at("/dumpJob/servers") < at("/dumpJob/instances"), "{text}");

    // A node written behind the instance's back shows once the registry has it.
    let tool = server.connect_default();
    tool.create(
        &NodePath::new("/dumpJob/sharding/1/disabled").unwrap(),
        Vec::new(),
        CreateMode::Persistent,
    )
    .await
    .unwrap();
    let text = settled_dump(addr).await;
    assert!(text.contains("/dumpJob/sharding/1/disabled | \n"), "{text}");

    // The CLI speaks the protocol: the same text (the tree is still), and JSON lines.
    let instance = addr.to_string();
    let (code, out) = cli(vec![
        "dump".into(),
        JOB.into(),
        "--instance".into(),
        instance.clone(),
    ])
    .await;
    assert_eq!(code, ExitCode::SUCCESS, "{out}");
    assert_eq!(out, text);
    let (code, out) = cli(vec![
        "dump".into(),
        JOB.into(),
        "--instance".into(),
        instance.clone(),
        "--json".into(),
    ])
    .await;
    assert_eq!(code, ExitCode::SUCCESS, "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["lines"].as_array().unwrap().len(), text.lines().count());

    // Unknown job: a clear line from the server, exit 1 from the CLI.
    let answer = ask_async(addr, b"dump@nope\n").await;
    assert_eq!(answer, "error: no job \"nope\" in this namespace\n");
    let (code, _) = cli(vec![
        "dump".into(),
        "nope".into(),
        "--instance".into(),
        instance,
    ])
    .await;
    assert_eq!(code, ExitCode::from(1));

    // The port closes with the scheduler.
    handle.shutdown().await.unwrap();
    let deadline = Instant::now() + WAIT;
    while TcpStream::connect(addr).is_ok() {
        assert!(Instant::now() < deadline, "the dump port stayed open");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Then the CLI says the instance is unreachable: exit 2, within its connect timeout.
    let started = Instant::now();
    let (code, _) = cli(vec![
        "dump".into(),
        JOB.into(),
        "--instance".into(),
        addr.to_string(),
    ])
    .await;
    assert_eq!(code, ExitCode::from(2));
    assert!(started.elapsed() < WAIT, "{:?}", started.elapsed());
}

/// While the instance's watch is held back, nodes changed in the registry show both values:
/// the registry's, and the instance's copy (empty columns where it lacks the node); once the

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_instance_address_is_bad_input() {
    let (code, _) = cli(vec![
        "dump".into(),
        JOB.into(),
        "--instance".into(),
        "nowhere".into(),
    ])
    .await;
    assert_eq!(code, ExitCode::from(1));
}

fn job_file(dump: &str) -> tempfile::NamedTempFile {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    write!(
        file,
        "elasticjob:\n  dump:\n{dump}  jobs:\n    {JOB}:\n      elasticJobType: SCRIPT\n      \
         cron: 0 0 0 1 1 ?\n      shardingTotalCount: 2\n      props:\n        \
         script.command.line: 'true'\n"
    )
    .unwrap();
    file
}

/// `shardjob run` opens the dump port its file names; `config check` says where.
#[test]
fn the_job_files_dump_port_is_served_by_shardjob_run() {
    let file = job_file("    port: 0\n");
    let path = file.path().to_str().unwrap();
    let check = Command::new(env!("CARGO_BIN_EXE_shardjob"))
        .args(["config", "check", path])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&check.stdout);
    assert_eq!(check.status.code(), Some(0), "{out}");
    assert!(out.contains("# dump port: 127.0.0.1:0"), "{out}");

    let mut child = Command::new(env!("CARGO_BIN_EXE_shardjob"))
        .args(["run", path, "--registry", "mem://", "--exit-after", "120"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if let Some(rest) = line.split("dump port on ").nth(1) {
                let addr = rest.split_whitespace().next().unwrap_or_default();
                let _ = tx.send(addr.to_owned());
            }
        }
    });
    let Ok(addr) = rx.recv_timeout(WAIT) else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("shardjob run named no dump port within {WAIT:?}");
    };
    let addr: SocketAddr = addr.parse().unwrap_or_else(|e| panic!("{addr}: {e}"));
    assert!(addr.ip().is_loopback(), "{addr}");
    // The job's tree, once it has been registered.
    let deadline = Instant::now() + WAIT;
    let text = loop {
        let text = ask(addr, b"dump@dumpJob\n");
        if text.contains("/dumpJob/sharding/1/instance | ") {
            break text;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("no plan in the dump within {WAIT:?}:\n{text}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(text.contains("script.command.line: 'true'"), "{text}");
    // This test's own child, by its handle.
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn a_bad_dump_port_in_the_job_file_is_refused_clearly() {
    for (dump, at, said) in [
        (
            "    port: 70000\n",
            ":3:5: error: elasticjob.dump.port: ",
            "\"70000\" is not a TCP port: give a whole number from 0 to 65535",
        ),
        ("    port: nine\n", ":3:5: ", "\"nine\" is not a TCP port"),
        ("    enabled: true\n", ":2:3: ", "elasticjob.dump: no port"),
        (
            "    port: 9888\n    address: somewhere\n",
            ":4:5: ",
            "\"somewhere\" is not an IP address",
        ),
    ] {
        let file = job_file(dump);
        let path = file.path().to_str().unwrap();
        for args in [
            vec!["config", "check", path],
            vec!["run", path, "--registry", "mem://", "--exit-after", "1"],
        ] {
            let out = Command::new(env!("CARGO_BIN_EXE_shardjob"))
                .args(&args)
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
            assert!(err.contains(said) && err.contains(at), "{args:?}: {err}");
        }
    }
}

/// Against a real ZooKeeper: the instance's answer equals the registry's tree as `shardjob
/// dump` reads it (once the instance's copy has caught up, it adds no cache column).
#[test]
fn over_zookeeper_the_instance_serves_what_the_registry_holds() {
    use shardjob_backend_zk::{ZkConfig, ZkRegistry};
    let zk = shardjob_testkit::Cluster::zookeeper(1).unwrap_or_else(|e| panic!("{e}"));
    let connect = zk.connect_string();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let registry = ZkRegistry::connect(
            ZkConfig::new(connect.clone())
                .namespace("/dumpns")
                .session_timeout(Duration::from_secs(10))
                .request_timeout(Duration::from_secs(10)),
        )
        .await
        .unwrap();
        let handle = instance(Arc::new(registry)).await;
        let addr = handle.dump_addr().unwrap();
        let url = format!("zk://{connect}/dumpns");
        let deadline = Instant::now() + WAIT;
        loop {
            let served = settled_dump(addr).await;
            let (code, read) = cli(vec![
                "dump".into(),
                JOB.into(),
                "--registry".into(),
                url.clone(),
            ])
            .await;
            assert_eq!(code, ExitCode::SUCCESS, "{read}");
            if served == read {
                assert!(
                    served.contains("/dumpJob/servers/ip1 | ENABLED"),
                    "{served}"
                );
                break;
            }
            assert!(
                Instant::now() < deadline,
                "served:\n{served}\nread:\n{read}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        handle.shutdown().await.unwrap();
    });
}
