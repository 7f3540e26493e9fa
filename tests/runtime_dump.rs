//! The dump port (ElasticJob's snapshot protocol) served by an instance, read by a raw TCP
//! client over the in-memory registry; its bounds (a silent client, too many clients, a bad
//! request). (`shardjob dump JOB --instance HOST:PORT`, a real ZooKeeper, and the job file's
//! `elasticjob.dump` keys: the cli crate's `tests/dump.rs`.)

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use shardjob::core::registry::{CreateMode, NodePath, Registry};
use shardjob::core::{CronExpr, InstanceId, JobConfig};
use shardjob::jobs::{JobError, ShardingContext, SimpleJob};
use shardjob::mem::MemServer;
use shardjob::runtime::dump::{MAX_CLIENTS, MAX_REQUEST_LINE};
use shardjob::runtime::{DumpLimits, Scheduler, SchedulerHandle};

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
async fn an_instance_serves_its_jobs_tree_masked() {
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

    // Unknown job: a clear line from the server, exit 1 from the CLI.
    let answer = ask_async(addr, b"dump@nope\n").await;
    assert_eq!(answer, "error: no job \"nope\" in this namespace\n");
    // The port closes with the scheduler.
    handle.shutdown().await.unwrap();
    let deadline = Instant::now() + WAIT;
    while TcpStream::connect(addr).is_ok() {
        assert!(Instant::now() < deadline, "the dump port stayed open");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// While the instance's watch is held back, nodes changed in the registry show both values:
/// the registry's, and the instance's copy (empty columns where it lacks the node); once the
/// events are delivered, the lines are single again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cache_column_shows_what_the_instances_watch_has_not_delivered() {
    let server = MemServer::default();
    let client = server.connect_default();
    let session = client.session_id().unwrap();
    let tool = server.connect_default();
    // A node of no meaning to the scheduler, to change under it.
    let extra = NodePath::new("/dumpJob/extra").unwrap();
    let disabled = NodePath::new("/dumpJob/sharding/0/disabled").unwrap();
    let handle = instance(Arc::new(client)).await;
    tool.create(&extra, b"a".to_vec(), CreateMode::Persistent)
        .await
        .unwrap();
    let addr = handle.dump_addr().unwrap();
    let text = settled_dump(addr).await;
    assert!(text.contains("/dumpJob/extra | a\n"), "{text}");

    assert!(server.hold_watches(session) > 0);
    tool.set(&extra, b"b".to_vec(), None).await.unwrap();
    tool.create(&disabled, Vec::new(), CreateMode::Persistent)
        .await
        .unwrap();
    let text = ask_async(addr, b"dump@dumpJob\n").await;
    assert!(
        text.contains("/dumpJob/extra | b | /dumpJob/extra | a\n"),
        "{text}"
    );
    assert!(
        text.contains("/dumpJob/sharding/0/disabled |  |  | \n"),
        "{text}"
    );

    server.release_watches(session);
    let text = settled_dump(addr).await;
    assert!(text.contains("/dumpJob/extra | b\n"), "{text}");
    assert!(text.contains("/dumpJob/sharding/0/disabled | \n"), "{text}");
    handle.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_one_clear_line() {
    let server = MemServer::default();
    let handle = instance(Arc::new(server.connect_default())).await;
    let addr = handle.dump_addr().unwrap();
    let answer = ask_async(addr, b"stat\n").await;
    assert_eq!(
        answer,
        "error: unknown request \"stat\": send one line dump@JOB_NAME\n"
    );
    let answer = ask_async(addr, b"dump@a/b\n").await;
    assert!(
        answer.starts_with("error: bad job name \"a/b\""),
        "{answer}"
    );
    // A request line without its end is read to the end of input.
    let answer = ask_async(addr, b"dump@nope").await;
    assert_eq!(answer, "error: no job \"nope\" in this namespace\n");
    // A line too long is cut off: the server does not read on. (Not much longer, so that
    // the server has read it all when it answers: unread bytes would reset the connection.)
    let long = vec![b'x'; MAX_REQUEST_LINE + 100];
    let answer = tokio::task::spawn_blocking(move || ask(addr, &long))
        .await
        .unwrap();
    assert!(
        answer.starts_with("error: request longer than 1024 bytes"),
        "{answer}"
    );
    handle.shutdown().await.unwrap();
}

/// Silent clients hold their slots (for as long as the request timeout, here far longer than
/// the test) without holding up the others; once every slot is taken the next client is told
/// so at once; slots come back when clients go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_clients_do_not_block_others_and_the_rest_are_told_busy() {
    let server = MemServer::default();
    let limits = DumpLimits {
        request_timeout: Duration::from_secs(600),
        ..DumpLimits::default()
    };
    assert_eq!(limits.max_clients, MAX_CLIENTS);
    let handle = instance_with(Arc::new(server.connect_default()), limits).await;
    let addr = handle.dump_addr().unwrap();
    // Clients that connect and say nothing, every slot but one.
    let silent: Vec<TcpStream> = (1..MAX_CLIENTS)
        .map(|_| TcpStream::connect(addr).unwrap())
        .collect();
    // The last slot serves a dump while they wait.
    let text = ask_async(addr, b"dump@dumpJob\n").await;
    assert!(text.contains("/dumpJob/config | "), "{text}");
    for s in &silent {
        s.set_nonblocking(true).unwrap();
        let mut buf = [0u8; 1];
        let read = (&*s).read(&mut buf);
        assert!(
            matches!(&read, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
            "a silent client was answered: {read:?}"
        );
    }
    // That client's slot was given back before its answer ended: one more silent client
    // takes it, and the next one is told at once that every slot is taken.
    let last = TcpStream::connect(addr).unwrap();
    let answer = tokio::task::spawn_blocking(move || {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(WAIT)).unwrap();
        let mut answer = String::new();
        s.read_to_string(&mut answer).unwrap();
        answer
    })
    .await
    .unwrap();
    assert_eq!(
        answer,
        format!("error: busy: {MAX_CLIENTS} dumps are being served; try again\n")
    );
    // When the silent clients go, their slots come back.
    drop(silent);
    drop(last);
    let deadline = Instant::now() + WAIT;
    loop {
        let text = ask_async(addr, b"dump@dumpJob\n").await;
        if text.contains("/dumpJob/config | ") {
            break;
        }
        assert!(text.starts_with("error: busy"), "{text}");
        assert!(Instant::now() < deadline, "the slots never came back");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    handle.shutdown().await.unwrap();
}

/// A client that sends nothing is cut off at the request timeout (5 s by default) with a line
/// that says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_client_is_cut_off_with_a_reason() {
    let server = MemServer::default();
    let handle = instance(Arc::new(server.connect_default())).await;
    let addr = handle.dump_addr().unwrap();
    let answer = tokio::task::spawn_blocking(move || {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(WAIT)).unwrap();
        let mut answer = String::new();
        s.read_to_string(&mut answer).unwrap();
        answer
    })
    .await
    .unwrap();
    assert_eq!(
        answer,
        "error: no request within 5s: send one line dump@JOB_NAME\n"
    );
    handle.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_port_taken_fails_the_build() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let server = MemServer::default();
    let err = Scheduler::builder()
        .registry(Arc::new(server.connect_default()))
        .instance_id(InstanceId::new(ID).unwrap())
        .dump(port)
        .job(config(), Idle)
        .build()
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.starts_with(&format!("cannot open the dump port on 127.0.0.1:{port}: ")),
        "{text}"
    );
}
