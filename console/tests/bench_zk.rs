//! Benchmark: the console over a ZooKeeper namespace of 1,000 jobs of 10 items each, two
//! instances (goals of issue #26: the job list in ≤ 1 s, a job's page in ≤ 200 ms). It measures
//! and prints medians; it asserts only what the pages hold, never a time. Ignored by default:
//!
//! ```text
//! cargo test -p shardjob-console --features zk --test bench_zk -- --ignored --nocapture
//! ```
//!
//! (add `--release` for the figures of an optimised build).

use std::time::{Duration, Instant};

use shardjob_console::{App, ConsoleConfig, RegistryEntry, Role};
use shardjob_core::layout::JobPaths;
use shardjob_core::machine::record::ItemRecord;
use shardjob_core::registry::{Registry, TxnOp};
use shardjob_core::{CronExpr, InstanceId, JobConfig};
use shardjob_testkit::Cluster;

const JOBS: usize = 1_000;
const ITEMS: u32 = 10;
const ROUNDS: usize = 11;

fn median(mut d: Vec<Duration>) -> Duration {
    d.sort();
    d[d.len() / 2]
}

fn instance_value(id: &InstanceId) -> String {
    format!("jobInstanceId: {id}\nserverIp: {}\n", id.server_ip())
}

/// Writes `n` jobs as a running cluster of two instances leaves them: configuration, servers,
/// sharding with an execution record per item (persistent nodes in `reg`), the instances and
/// the leader (ephemeral nodes of `session`).
async fn build(reg: &dyn Registry, session: &dyn Registry, n: usize, items: u32) {
    let a = InstanceId::new("10.1.0.1@-@1").expect("an instance id");
    let b = InstanceId::new("10.1.0.2@-@2").expect("an instance id");
    let cron = CronExpr::parse("0 * * * * ?").expect("a cron");
    for j in 0..n {
        let name = format!("job-{j:05}");
        let job = JobPaths::new(&name).expect("a job name");
        let config = JobConfig::new(name.as_str(), items).with_cron(cron.clone());
        let mut ops = vec![
            TxnOp::create(job.root().clone(), "SIMPLE"),
            TxnOp::create(job.config(), config.to_yaml()),
            TxnOp::create(job.instances(), ""),
            TxnOp::create(job.servers(), ""),
            TxnOp::create(job.server_of(&a), "ENABLED"),
            TxnOp::create(job.server_of(&b), "ENABLED"),
            TxnOp::create(job.sharding(), ""),
            TxnOp::create(job.leader(), ""),
            TxnOp::create(job.leader_election(), ""),
            TxnOp::create(job.leader_sharding(), ""),
        ];
        for item in 0..items {
            let owner = if item % 2 == 0 { &a } else { &b };
            let record = ItemRecord {
                done: Some(1_764_050_400_000),
                run: None,
            };
            ops.push(TxnOp::create(job.item(item), ""));
            ops.push(TxnOp::create(job.item_instance(item), owner.as_str()));
            ops.push(TxnOp::create(job.item_execution(item), record.to_bytes()));
        }
        reg.transact(ops).await.expect("a job written");
        session
            .transact(vec![
                TxnOp::create_ephemeral(job.instance(&a), instance_value(&a)),
                TxnOp::create_ephemeral(job.instance(&b), instance_value(&b)),
                TxnOp::create_ephemeral(job.leader_instance(), a.as_str()),
            ])
            .await
            .expect("its instances written");
    }
}

async fn timed_get(http: &reqwest::Client, url: &str) -> (Duration, String) {
    let t = Instant::now();
    let response = http.get(url).send().await.expect("an answer");
    let status = response.status();
    let body = response.text().await.expect("a body");
    let took = t.elapsed();
    assert!(status.is_success(), "GET {url}: {status}: {body}");
    (took, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark: builds 1,000 jobs in a ZooKeeper of its own"]
async fn console_over_1000_jobs() {
    use shardjob_backend_zk::{ZkConfig, ZkRegistry};

    let cluster =
        tokio::task::block_in_place(|| Cluster::zookeeper(1).unwrap_or_else(|e| panic!("{e}")));
    let connect = |ns: &str| {
        ZkConfig::new(cluster.connect_string())
            .namespace(ns.to_owned())
            .session_timeout(Duration::from_secs(30))
            .request_timeout(Duration::from_secs(30))
    };
    let writer = ZkRegistry::connect(connect("/bench"))
        .await
        .expect("ZooKeeper");
    let session = ZkRegistry::connect(connect("/bench"))
        .await
        .expect("ZooKeeper");
    let built = Instant::now();
    build(&writer, &session, JOBS, ITEMS).await;
    println!("built {JOBS} jobs x {ITEMS} items in {:?}", built.elapsed());

    // The console, in this process, with a user and the registry.
    let dir = tempfile::tempdir().expect("a directory");
    let path = dir.path().join("console.yaml");
    shardjob_console::add_user(&path, "bench", Role::Viewer, "a long bench password")
        .expect("a user");
    let mut config = ConsoleConfig::load(&path).expect("the file");
    config.registries.push(RegistryEntry {
        name: "bench".to_owned(),
        url: format!("zk://{}/bench", cluster.connect_string()),
        user: None,
        password: None,
        history: None,
    });
    config.save(&path).expect("the file");
    let started = Instant::now();
    let app = App::start(path).expect("the console starts");
    let (addr_tx, addr_rx) = tokio::sync::oneshot::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(shardjob_console::serve(
        app,
        "127.0.0.1:0".parse().expect("an address"),
        async move {
            let _ = stop_rx.await;
        },
        move |addr| {
            let _ = addr_tx.send(addr);
        },
    ));
    let base = format!("http://{}", addr_rx.await.expect("the console listens"));
    let http = reqwest::Client::builder()
        .cookie_store(true)
        .build()
        .expect("a client");
    let login = http
        .post(format!("{base}/api/login"))
        .json(&serde_json::json!({"user": "bench", "password": "a long bench password"}))
        .send()
        .await
        .expect("an answer");
    assert!(login.status().is_success(), "{login:?}");

    // The first read of the namespace (one snapshot, then the watch keeps it).
    let jobs_api = format!("{base}/api/r/bench/jobs");
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let response = http.get(&jobs_api).send().await.expect("an answer");
        if response.status().is_success() {
            let jobs: serde_json::Value = response.json().await.expect("JSON");
            if jobs.as_array().is_some_and(|a| a.len() == JOBS) {
                break;
            }
        }
        assert!(
            Instant::now() < deadline,
            "the console never read the namespace"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!(
        "console started and read the namespace in {:?}",
        started.elapsed()
    );

    let mut page = Vec::new();
    let mut api = Vec::new();
    for _ in 0..ROUNDS {
        let (d, body) = timed_get(&http, &format!("{base}/r/bench/jobs")).await;
        assert_eq!(body.matches("<tr id=\"job-").count(), JOBS);
        page.push(d);
        let (d, body) = timed_get(&http, &jobs_api).await;
        let jobs: serde_json::Value = serde_json::from_str(&body).expect("JSON");
        assert_eq!(jobs.as_array().map(Vec::len), Some(JOBS));
        api.push(d);
    }
    let mut job_page = Vec::new();
    let mut job_api = Vec::new();
    for round in 0..ROUNDS * 3 {
        let name = format!("job-{:05}", round * 37 % JOBS);
        let (d, body) = timed_get(&http, &format!("{base}/r/bench/jobs/{name}")).await;
        assert_eq!(body.matches("<tr id=\"item-").count(), ITEMS as usize);
        job_page.push(d);
        let (d, _) = timed_get(&http, &format!("{base}/api/r/bench/jobs/{name}")).await;
        job_api.push(d);
    }
    let mut servers = Vec::new();
    for _ in 0..ROUNDS {
        let (d, _) = timed_get(&http, &format!("{base}/r/bench/servers")).await;
        servers.push(d);
    }
    let mut overview = Vec::new();
    for _ in 0..ROUNDS {
        let (d, _) = timed_get(&http, &format!("{base}/r/bench/")).await;
        overview.push(d);
    }
    let show = |what: &str, d: &[Duration]| {
        println!(
            "{what}: median {:?} of {} (min {:?}, max {:?})",
            median(d.to_vec()),
            d.len(),
            d.iter().min().copied().unwrap_or_default(),
            d.iter().max().copied().unwrap_or_default()
        );
    };
    show("jobs page (HTML, 1,000 rows)", &page);
    show("GET /api/r/bench/jobs (JSON, 1,000 jobs)", &api);
    show("job page (HTML, 10 items)", &job_page);
    show("GET /api/r/bench/jobs/{job} (JSON)", &job_api);
    show("servers page", &servers);
    show("overview page", &overview);

    let _ = stop_tx.send(());
    let _ = server.await;
}
