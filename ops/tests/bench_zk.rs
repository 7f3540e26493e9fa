//! Benchmark: the job list and one job's status over a ZooKeeper namespace of 1,000 jobs of 10
//! items each (goals: ≤ 1 s for the list, ≤ 100 ms for one status). Ignored by default:
//!
//! ```text
//! cargo test --release -p shardjob-ops --test bench_zk -- --ignored --nocapture
//! ```

mod suite;

use std::time::{Duration, Instant};

use chrono::Utc;
use shardjob_backend_zk::{ZkConfig, ZkRegistry};
use shardjob_ops::Ops;
use shardjob_testkit::Cluster;

const JOBS: usize = 1_000;
const ITEMS: u32 = 10;
const ROUNDS: usize = 7;

fn median(mut d: Vec<Duration>) -> Duration {
    d.sort();
    d[d.len() / 2]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark: builds 1,000 jobs in a ZooKeeper of its own"]
async fn list_and_status_of_1000_jobs() {
    let cluster =
        tokio::task::block_in_place(|| Cluster::zookeeper(1).unwrap_or_else(|e| panic!("{e}")));
    let connect = |ns: &str| {
        ZkConfig::new(cluster.connect_string())
            .namespace(ns.to_owned())
            .session_timeout(Duration::from_secs(30))
            .request_timeout(Duration::from_secs(30))
    };
    let writer = ZkRegistry::connect(connect("/bench")).await.unwrap();
    let session = ZkRegistry::connect(connect("/bench")).await.unwrap();
    let built = Instant::now();
    suite::build_large_namespace(&writer, &session, JOBS, ITEMS).await;
    println!("built {JOBS} jobs x {ITEMS} items in {:?}", built.elapsed());

    // The operator's tool: a client of its own.
    let reg = ZkRegistry::connect(connect("/bench")).await.unwrap();
    let ops = Ops::new(&reg);
    let mut list = Vec::new();
    for _ in 0..ROUNDS {
        let t = Instant::now();
        let jobs = ops.jobs().await.unwrap();
        list.push(t.elapsed());
        assert_eq!(jobs.len(), JOBS);
    }
    for c in [8, 32, 128] {
        let ops = Ops::new(&reg).with_concurrency(c);
        let mut d = Vec::new();
        for _ in 0..3 {
            let t = Instant::now();
            assert_eq!(ops.jobs().await.unwrap().len(), JOBS);
            d.push(t.elapsed());
        }
        println!("jobs at concurrency {c}: median {:?} of 3", median(d));
    }
    let mut status = Vec::new();
    for round in 0..ROUNDS * 3 {
        let name = format!("job-{:05}", round * 37 % JOBS);
        let t = Instant::now();
        let s = ops.status(&name, Utc::now()).await.unwrap();
        status.push(t.elapsed());
        assert_eq!(s.items.len(), ITEMS as usize);
    }
    let mut servers = Vec::new();
    for _ in 0..3 {
        let t = Instant::now();
        assert_eq!(ops.servers().await.unwrap().len(), 2);
        servers.push(t.elapsed());
    }
    println!(
        "jobs (list of {JOBS}): median {:?} of {ROUNDS} (min {:?}, max {:?})",
        median(list.clone()),
        list.iter().min().unwrap(),
        list.iter().max().unwrap()
    );
    println!(
        "status (one job of {ITEMS} items): median {:?} of {} (max {:?})",
        median(status.clone()),
        status.len(),
        status.iter().max().unwrap()
    );
    println!("servers: median {:?} of 3", median(servers));
}
