//! Registry requests per instance per fire, counted by the servers themselves (a benchmark,
//! `#[ignore]`d; it takes about three minutes):
//!
//! ```sh
//! cargo test --release --features zk,etcd --test requests_per_fire -- --ignored --nocapture
//! SHARDJOB_RPF_ONLY=zk cargo test ...   # the ZooKeeper cases only (or =etcd)
//! ```
//!
//! One instance (the real driver, in this process) hosts one job that fires every second,
//! whose items take 20 ms, with 1 item and with 50 items; a window of [`WINDOW`] fires is measured in steady state,
//! from half a second after a fire to half a second after the last fire of the window. The
//! same instance with a job that never fires in the window gives the idle background
//! (session pings, lease keep-alives), measured over the same length of time.
//!
//! - **ZooKeeper**: `zk_packets_received` of `mntr` (every request packet the server reads,
//!   session pings included; the two `mntr` reads of a window are not client packets, and are
//!   the same in every window anyway).
//! - **etcd**: `grpc_server_handled_total` of `/metrics`, summed over the unary methods
//!   (`Range`, `Txn`, `Put`, `DeleteRange`, `LeaseGrant`...: each is one client request);
//!   stream messages (`LeaseKeepAlive` pings, `Watch` create/cancel/progress requests) come
//!   from `grpc_server_msg_received_total` and are reported apart.
//!
//! The instance's registry client is wrapped in a counter of the calls the runtime makes
//! through the `Registry` trait (transactions, reads), so the report tells the core's
//! requests from what a backend adds on its own (ZooKeeper: the read before a transaction
//! with value checks, and one multi-read per burst of nodes created or changed by other
//! clients that a watch reports, because ZooKeeper's notifications carry no data; the
//! client's own writes it takes from its journal).
//!
//! etcd refuses a transaction with more than `--max-txn-ops` (default 128) compares or
//! writes. A claim of `n` items needs `6n + 1` compares and re-sharding a job of `n` items
//! `4n + 4` compares and `3n` writes, so on a default etcd the machine splits the claims,
//! completions and re-shards of the 50-item job into parts of at most 15 items (the limit
//! the etcd client reports through `Registry::max_txn_ops`; with `SHARDJOB_RPF_NO_HINT` set
//! it is learned from the refusals instead). The 50-item case also runs on an etcd started
//! with `--max-txn-ops 1024` (and the client told so), in one claim and one completion.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use shardjob::core::registry::{
    EventStream, Node, NodePath, Registry, RegistryError, SessionInfo, TxnOp, TxnOpResult,
};
use shardjob::core::{CronExpr, InstanceId, JobConfig};
use shardjob::jobs::{JobError, ShardingContext, SimpleJob};
use shardjob::runtime::Scheduler;
use shardjob_backend_etcd::{EtcdConfig, EtcdRegistry};
use shardjob_backend_zk::{ZkConfig, ZkRegistry};
use shardjob_testkit::Cluster;

/// How long an item's body takes.
const BODY: Duration = Duration::from_millis(20);
/// Fires per measured window.
const WINDOW: u32 = 15;
/// The instance's session timeout / lease TTL (the backends' default).
const SESSION: Duration = Duration::from_secs(10);

type Fires = Arc<Mutex<BTreeMap<DateTime<Utc>, BTreeSet<u32>>>>;

struct Count(Fires);

#[async_trait]
impl SimpleJob for Count {
    async fn execute(&self, ctx: &ShardingContext) -> Result<(), JobError> {
        self.0
            .lock()
            .unwrap()
            .entry(ctx.fire_time)
            .or_default()
            .insert(ctx.sharding_item);
        // A body that takes a moment, like a real one, but short enough that 50 items (4 at a
        // time: the CPU executor on 2 cores) end well within the second between fires. (With
        // an empty body and many items, ZooKeeper's watch, which reads the changed nodes after
        // their notifications arrive (one multi-read per burst), can still show the `running`
        // markers of a run that has already ended; the instance then tries to adopt them and
        // the registry refuses: one more, failed, transaction per fire.)
        tokio::time::sleep(BODY).await;
        Ok(())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Zk,
    Etcd,
}

/// The calls the runtime makes through the `Registry` trait.
#[derive(Default)]
struct Calls {
    transactions: AtomicU64,
    /// Transactions that failed (a check did not hold, or the registry refused them).
    failed: AtomicU64,
    reads: AtomicU64,
}

/// A registry client that counts the calls made to it.
struct Counted {
    inner: Arc<dyn Registry>,
    calls: Arc<Calls>,
}

#[async_trait]
impl Registry for Counted {
    fn session(&self) -> Option<SessionInfo> {
        self.inner.session()
    }

    fn stamps_time(&self) -> bool {
        self.inner.stamps_time()
    }

    fn max_txn_ops(&self) -> Option<usize> {
        // SHARDJOB_RPF_NO_HINT: the machine learns the limit from the registry's refusals.
        if std::env::var_os("SHARDJOB_RPF_NO_HINT").is_some() {
            None
        } else {
            self.inner.max_txn_ops()
        }
    }

    async fn get(&self, path: &NodePath) -> Result<Option<Node>, RegistryError> {
        self.calls.reads.fetch_add(1, Ordering::Relaxed);
        self.inner.get(path).await
    }

    async fn children(&self, path: &NodePath) -> Result<Vec<String>, RegistryError> {
        self.calls.reads.fetch_add(1, Ordering::Relaxed);
        self.inner.children(path).await
    }

    async fn transact(&self, ops: Vec<TxnOp>) -> Result<Vec<TxnOpResult>, RegistryError> {
        self.calls.transactions.fetch_add(1, Ordering::Relaxed);
        let shown = format!("{ops:?}");
        let result = self.inner.transact(ops).await;
        if let Err(e) = &result {
            self.calls.failed.fetch_add(1, Ordering::Relaxed);
            if std::env::var_os("SHARDJOB_RPF_SHOW").is_some() {
                eprintln!("a transaction failed: {e}: {shown}");
            }
        }
        result
    }

    async fn watch(&self, root: &NodePath) -> Result<Box<dyn EventStream>, RegistryError> {
        self.inner.watch(root).await
    }

    async fn close(&self) -> Result<(), RegistryError> {
        self.inner.close().await
    }

    async fn get_tree(&self, root: &NodePath) -> Result<Vec<Node>, RegistryError> {
        self.calls.reads.fetch_add(1, Ordering::Relaxed);
        self.inner.get_tree(root).await
    }
}

/// Server-side counters at one moment.
#[derive(Debug, Clone, Default)]
struct Counters {
    /// Client requests (ZK: packets received; etcd: unary RPCs handled), by method for etcd.
    requests: BTreeMap<String, u64>,
    /// etcd stream messages received, by method.
    stream: BTreeMap<String, u64>,
}

impl Counters {
    fn minus(&self, before: &Counters) -> Counters {
        let diff = |a: &BTreeMap<String, u64>, b: &BTreeMap<String, u64>| {
            a.iter()
                .map(|(k, v)| (k.clone(), v.saturating_sub(*b.get(k).unwrap_or(&0))))
                .filter(|(_, v)| *v > 0)
                .collect()
        };
        Counters {
            requests: diff(&self.requests, &before.requests),
            stream: diff(&self.stream, &before.stream),
        }
    }

    fn total(&self) -> u64 {
        self.requests.values().sum()
    }

    fn stream_total(&self) -> u64 {
        self.stream.values().sum()
    }
}

fn read_counters(kind: Kind, cluster: &Cluster) -> Counters {
    match kind {
        Kind::Zk => {
            let mntr = cluster.four_letter(1, "mntr").unwrap();
            let value = |key: &str| -> u64 {
                mntr.lines()
                    .find_map(|l| {
                        let (k, v) = l.split_once('\t')?;
                        (k.trim() == key).then(|| v.trim().parse().ok())?
                    })
                    .unwrap_or_else(|| panic!("no {key} in mntr:\n{mntr}"))
            };
            let mut c = Counters::default();
            c.requests
                .insert("packets".into(), value("zk_packets_received"));
            c
        }
        Kind::Etcd => {
            let metrics = http_get(cluster, "/metrics");
            let mut c = Counters::default();
            for line in metrics.lines().filter(|l| !l.starts_with('#')) {
                let Some((name_labels, value)) = line.rsplit_once(' ') else {
                    continue;
                };
                let Ok(value) = value.parse::<f64>() else {
                    continue;
                };
                let label = |name: &str| -> Option<&str> {
                    let at = name_labels.find(&format!("{name}=\""))? + name.len() + 2;
                    let rest = &name_labels[at..];
                    Some(&rest[..rest.find('"')?])
                };
                let method = label("grpc_method").unwrap_or("?").to_owned();
                let typ = label("grpc_type").unwrap_or("?");
                if name_labels.starts_with("grpc_server_handled_total{") && typ == "unary" {
                    *c.requests.entry(method).or_default() += value as u64;
                } else if name_labels.starts_with("grpc_server_msg_received_total{")
                    && typ != "unary"
                {
                    *c.stream.entry(method).or_default() += value as u64;
                }
            }
            c
        }
    }
}

/// A plain HTTP/1.0 GET to member 1's client port; the body.
fn http_get(cluster: &Cluster, path: &str) -> String {
    let addr = cluster.client_addr(1).unwrap();
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let (head, body) = out.split_once("\r\n\r\n").expect("an HTTP answer");
    assert!(
        head.starts_with("HTTP/1.") && head.contains(" 200 "),
        "{head}"
    );
    body.to_owned()
}

/// etcd's `--max-txn-ops` for the many-item case.
const RAISED_TXN_OPS: usize = 1024;

async fn connect(
    kind: Kind,
    cluster: &Cluster,
    namespace: &str,
    max_txn_ops: usize,
) -> Arc<dyn Registry> {
    match kind {
        Kind::Zk => Arc::new(
            ZkRegistry::connect(
                ZkConfig::new(cluster.connect_string())
                    .namespace(namespace)
                    .session_timeout(SESSION),
            )
            .await
            .unwrap(),
        ),
        Kind::Etcd => {
            let mut config = EtcdConfig::new(cluster.endpoints())
                .namespace(namespace)
                .lease_ttl(SESSION);
            config.max_txn_ops = max_txn_ops;
            Arc::new(EtcdRegistry::connect(config).await.unwrap())
        }
    }
}

/// Sleeps until `offset_ms` past the next whole second.
async fn align(offset_ms: i64) {
    let now = Utc::now().timestamp_millis();
    let target = (now / 1000 + 1) * 1000 + offset_ms;
    tokio::time::sleep(Duration::from_millis((target - now) as u64)).await;
}

/// What one window measured.
struct Window {
    /// Server-side counter differences.
    server: Counters,
    /// Fires in the window that ran every item.
    whole: u32,
    /// Fires in the window that ran some items only.
    partial: u32,
    /// Transactions and reads the runtime asked for.
    transactions: u64,
    failed: u64,
    reads: u64,
}

/// One window of one instance hosting a job of `items` (none: a job that does not fire).
async fn measure(
    kind: Kind,
    cluster: &Cluster,
    items: Option<u32>,
    max_txn_ops: usize,
    tag: &str,
) -> Window {
    let namespace = match items {
        Some(n) => format!("rpf-{tag}-{n}"),
        None => format!("rpf-{tag}-idle"),
    };
    let calls = Arc::new(Calls::default());
    let registry: Arc<dyn Registry> = Arc::new(Counted {
        inner: connect(kind, cluster, &namespace, max_txn_ops).await,
        calls: Arc::clone(&calls),
    });
    let fires: Fires = Arc::default();
    let (cron, total) = match items {
        Some(n) => ("* * * * * ?", n),
        // Never in the window.
        None => ("0 0 0 1 1 ? 2099", 1),
    };
    let config = JobConfig::new("bench", total).with_cron(CronExpr::parse(cron).unwrap());
    let handle = Scheduler::builder()
        .registry(registry)
        .instance_id(InstanceId::new("127.0.0.1@-@1").unwrap())
        .job(config, Count(Arc::clone(&fires)))
        .build()
        .await
        .unwrap();
    // Warm up: the plan is made and fires run.
    tokio::time::sleep(Duration::from_secs(4)).await;
    align(500).await;
    let start = Utc::now();
    let before = read_counters(kind, cluster);
    let (t0, f0, r0) = (
        calls.transactions.load(Ordering::Relaxed),
        calls.failed.load(Ordering::Relaxed),
        calls.reads.load(Ordering::Relaxed),
    );
    tokio::time::sleep(Duration::from_secs(u64::from(WINDOW))).await;
    let after = read_counters(kind, cluster);
    let (t1, f1, r1) = (
        calls.transactions.load(Ordering::Relaxed),
        calls.failed.load(Ordering::Relaxed),
        calls.reads.load(Ordering::Relaxed),
    );
    let end = Utc::now();
    handle.shutdown().await.unwrap();
    let fires = fires.lock().unwrap();
    let in_window: Vec<&BTreeSet<u32>> = fires.range(start..end).map(|(_, items)| items).collect();
    let whole = in_window
        .iter()
        .filter(|s| Some(s.len() as u32) == items)
        .count() as u32;
    let partial = in_window.len() as u32 - whole;
    Window {
        server: after.minus(&before),
        whole,
        partial,
        transactions: t1 - t0,
        failed: f1 - f0,
        reads: r1 - r0,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark: cargo test --release --features zk,etcd --test requests_per_fire -- --ignored --nocapture"]
async fn requests_per_instance_per_fire() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new("warn"))
        .with_test_writer()
        .try_init();
    let start = |f: fn() -> Result<Cluster, shardjob_testkit::TestkitError>| async move {
        tokio::task::spawn_blocking(f)
            .await
            .unwrap()
            .unwrap_or_else(|e| panic!("{e}"))
    };
    let zk = start(|| Cluster::zookeeper(1)).await;
    let etcd = start(|| Cluster::etcd(1)).await;
    let etcd_raised =
        start(|| Cluster::etcd_with_args(1, &["--max-txn-ops", &RAISED_TXN_OPS.to_string()])).await;
    let default_ops = shardjob_backend_etcd::ETCD_MAX_TXN_OPS;
    let cases: [(Kind, &Cluster, &str, Option<u32>, usize); 7] = [
        (Kind::Zk, &zk, "zk", None, 0),
        (Kind::Zk, &zk, "zk", Some(1), 0),
        (Kind::Zk, &zk, "zk", Some(50), 0),
        (Kind::Etcd, &etcd, "etcd", None, default_ops),
        (Kind::Etcd, &etcd, "etcd", Some(1), default_ops),
        (Kind::Etcd, &etcd, "etcd", Some(50), default_ops),
        (
            Kind::Etcd,
            &etcd_raised,
            "etcd-1024",
            Some(50),
            RAISED_TXN_OPS,
        ),
    ];
    let mut report = Vec::new();
    let mut idle = BTreeMap::new();
    // SHARDJOB_RPF_ONLY=zk or =etcd runs the cases of one registry only.
    let only = std::env::var("SHARDJOB_RPF_ONLY").unwrap_or_default();
    for (kind, cluster, tag, items, ops) in cases {
        if !tag.starts_with(only.as_str()) {
            continue;
        }
        let w = measure(kind, cluster, items, ops, tag).await;
        let Some(n) = items else {
            report.push(format!(
                "{tag:>9} idle    : {} requests in {WINDOW} s ({:.2}/s) {:?}; stream messages {} ({:.2}/s) {:?}",
                w.server.total(),
                w.server.total() as f64 / f64::from(WINDOW),
                w.server.requests,
                w.server.stream_total(),
                w.server.stream_total() as f64 / f64::from(WINDOW),
                w.server.stream,
            ));
            idle.insert(kind as u8, w.server.total());
            continue;
        };
        let base = idle.get(&(kind as u8)).copied().unwrap_or(0) as f64;
        let fires = f64::from(w.whole.max(1));
        report.push(format!(
            "{tag:>9} {n:>2} items: {} whole fires ({} partial); server requests {} = {:.2}/fire, \
             {:.2}/fire net of idle {:?}; runtime calls {:.2} transactions ({} failed in all) + {:.2} reads per fire; \
             stream messages {} {:?}",
            w.whole,
            w.partial,
            w.server.total(),
            w.server.total() as f64 / fires,
            (w.server.total() as f64 - base) / fires,
            w.server.requests,
            w.transactions as f64 / fires,
            w.failed,
            w.reads as f64 / fires,
            w.server.stream_total(),
            w.server.stream,
        ));
    }
    for line in &report {
        println!("{line}");
    }
}

/// Items of the side-by-side job.
const PAIR_ITEMS: u32 = 10;

/// Item executions: fire and item.
type Executions = Arc<Mutex<Vec<(DateTime<Utc>, u32)>>>;

/// What one window of [`measure_pair`] measured.
struct PairWindow {
    /// Server-side counter differences.
    server: Counters,
    /// Item executions whose fire is in the window, both instances together.
    executions: u64,
    /// Transactions and reads the two runtimes asked for.
    transactions: u64,
    failed: u64,
    reads: u64,
}

/// One window of two instances (two clients, two sessions, in this process) sharing one job
/// of [`PAIR_ITEMS`] items that fires every second.
async fn measure_pair(kind: Kind, cluster: &Cluster, run: u32) -> PairWindow {
    let tag = match kind {
        Kind::Zk => "zk",
        Kind::Etcd => "etcd",
    };
    let namespace = format!("rpx-{tag}-{run}");
    let executions: Executions = Arc::default();
    let mut handles = Vec::new();
    let mut calls = Vec::new();
    for n in 1..=2 {
        let counted = Arc::new(Calls::default());
        let registry: Arc<dyn Registry> = Arc::new(Counted {
            inner: connect(
                kind,
                cluster,
                &namespace,
                shardjob_backend_etcd::ETCD_MAX_TXN_OPS,
            )
            .await,
            calls: Arc::clone(&counted),
        });
        calls.push(counted);
        let config =
            JobConfig::new("bench", PAIR_ITEMS).with_cron(CronExpr::parse("* * * * * ?").unwrap());
        let handle = Scheduler::builder()
            .registry(registry)
            .instance_id(InstanceId::new(format!("127.0.0.1@-@{n}")).unwrap())
            .job(config, Record(Arc::clone(&executions)))
            .build()
            .await
            .unwrap();
        handles.push(handle);
    }
    let sum = |calls: &[Arc<Calls>]| -> (u64, u64, u64) {
        calls.iter().fold((0, 0, 0), |(t, f, r), c| {
            (
                t + c.transactions.load(Ordering::Relaxed),
                f + c.failed.load(Ordering::Relaxed),
                r + c.reads.load(Ordering::Relaxed),
            )
        })
    };
    // Warm up: both instances join, the leader shards, fires run on both.
    tokio::time::sleep(Duration::from_secs(5)).await;
    align(500).await;
    let start = Utc::now();
    let before = read_counters(kind, cluster);
    let (t0, f0, r0) = sum(&calls);
    tokio::time::sleep(Duration::from_secs(u64::from(WINDOW))).await;
    let after = read_counters(kind, cluster);
    let (t1, f1, r1) = sum(&calls);
    let end = Utc::now();
    for handle in handles {
        handle.shutdown().await.unwrap();
    }
    let executions = executions
        .lock()
        .unwrap()
        .iter()
        .filter(|(fire, _)| *fire >= start && *fire < end)
        .count() as u64;
    PairWindow {
        server: after.minus(&before),
        executions,
        transactions: t1 - t0,
        failed: f1 - f0,
        reads: r1 - r0,
    }
}

/// A job that records each item execution (fire and item) and takes [`BODY`].
struct Record(Executions);

#[async_trait]
impl SimpleJob for Record {
    async fn execute(&self, ctx: &ShardingContext) -> Result<(), JobError> {
        self.0
            .lock()
            .unwrap()
            .push((ctx.fire_time, ctx.sharding_item));
        tokio::time::sleep(BODY).await;
        Ok(())
    }
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

/// Registry requests per item execution, counted by the server, with two instances side by
/// side sharing one job of 10 items that fires every second (a benchmark, `#[ignore]`d;
/// about 25 s per window):
///
/// ```sh
/// cargo test --release --features zk,etcd --test requests_per_fire \
///     requests_per_item_execution_side_by_side -- --ignored --nocapture
/// SHARDJOB_RPF_ONLY=zk SHARDJOB_RPF_RUNS=7 cargo test ...   # ZooKeeper only, 7 windows
/// ```
///
/// Each window starts two fresh instances (two clients, two sessions) in a namespace of its
/// own, warms up for 5 s, and counts the server's requests (as [`requests_per_instance_per_fire`]
/// does, session pings included) over [`WINDOW`] fires, divided by the item executions whose
/// fire is in the window. The median of the windows is reported.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark: cargo test --release --features zk,etcd --test requests_per_fire -- --ignored --nocapture"]
async fn requests_per_item_execution_side_by_side() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new("warn"))
        .with_test_writer()
        .try_init();
    let only = std::env::var("SHARDJOB_RPF_ONLY").unwrap_or_default();
    let runs: u32 = std::env::var("SHARDJOB_RPF_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let mut report = Vec::new();
    for (kind, tag) in [(Kind::Zk, "zk"), (Kind::Etcd, "etcd")] {
        if !tag.starts_with(only.as_str()) {
            continue;
        }
        let cluster = tokio::task::spawn_blocking(move || match kind {
            Kind::Zk => Cluster::zookeeper(1),
            Kind::Etcd => Cluster::etcd(1),
        })
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("{e}"));
        let mut per_execution = Vec::new();
        for run in 0..runs {
            let w = measure_pair(kind, &cluster, run).await;
            let executions = w.executions.max(1) as f64;
            let ratio = w.server.total() as f64 / executions;
            per_execution.push(ratio);
            report.push(format!(
                "{tag:>5} run {run}: {} item executions; server requests {} = {ratio:.3} per item \
                 execution {:?}; runtime calls {:.3} transactions ({} failed) + {:.3} reads per \
                 item execution; stream messages {} {:?}",
                w.executions,
                w.server.total(),
                w.server.requests,
                w.transactions as f64 / executions,
                w.failed,
                w.reads as f64 / executions,
                w.server.stream_total(),
                w.server.stream,
            ));
        }
        report.push(format!(
            "{tag:>5} median of {runs}: {:.3} server requests per item execution",
            median(&mut per_execution)
        ));
    }
    for line in &report {
        println!("{line}");
    }
}
