//! End to end: a cluster of three `shardjob run` processes operated by the `shardjob` CLI, over
//! a real ZooKeeper and a real etcd (servers started by the test kit, one per test). The
//! scenarios (`scenario.rs`) are written once and run on both:
//!
//! - `operate`: bad input (unknown job, item out of range, a configuration that fails
//!   validation: exit 1, a clear message, nothing written), disable an item and enable it,
//!   disable a server and enable it, trigger with a parameter, `config set` a new sharding
//!   total;
//! - `operator_shutdown`: `shutdown --server IP` of one instance hands its items over at once
//!   and it runs nothing more of the job;
//! - `remove`: every instance leaves the job.
//!
//! Needs the `zk` and `etcd` features: `cargo test --features zk,etcd --test ops_e2e`.

mod fleet;
mod scenario;

use std::sync::Mutex;
use std::time::Duration;

use shardjob_testkit::Cluster;

/// The scenarios run one at a time: the machine is small and each waits on fire windows.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// The instances' session timeout (a URL query parameter; etcd counts it in whole seconds).
/// No step waits on it: long, so that a starved process on a loaded machine keeps its session.
const SESSION: Duration = Duration::from_secs(10);

fn zk_url(cluster: &Cluster, namespace: &str) -> String {
    format!(
        "zk://{}/{namespace}?session_timeout_ms={}",
        cluster.connect_string(),
        SESSION.as_millis()
    )
}

fn etcd_url(cluster: &Cluster, namespace: &str) -> String {
    // The test kit gives `http://127.0.0.1:port`; the URL takes `host:port`.
    let hosts: Vec<String> = cluster
        .endpoints()
        .iter()
        .map(|e| e.trim_start_matches("http://").to_owned())
        .collect();
    format!(
        "etcd://{}/{namespace}?session_timeout_ms={}",
        hosts.join(","),
        SESSION.as_millis()
    )
}

mod zk {
    use super::*;

    fn cluster() -> Cluster {
        Cluster::zookeeper(1).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn operate_a_running_cluster() {
        let _serial = serial();
        let cluster = cluster();
        let mut fleet = fleet::Fleet::new("zk-operate", zk_url(&cluster, "ops-operate"));
        scenario::operate(&mut fleet);
    }

    /// Needs the machine to tell an operator's shutdown from a session loss (issue 21, point 2).
    #[test]
    fn operator_shutdown_hands_the_items_over() {
        let _serial = serial();
        let cluster = cluster();
        let mut fleet = fleet::Fleet::new("zk-shutdown", zk_url(&cluster, "ops-shutdown"));
        scenario::operator_shutdown(&mut fleet);
    }

    /// Needs the machine to tell an operator's shutdown from a session loss (issue 21, point 2).
    #[test]
    fn remove_makes_every_instance_leave() {
        let _serial = serial();
        let cluster = cluster();
        let mut fleet = fleet::Fleet::new("zk-remove", zk_url(&cluster, "ops-remove"));
        scenario::remove(&mut fleet);
    }
}

mod etcd {
    use super::*;

    fn cluster() -> Cluster {
        Cluster::etcd(1).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn operate_a_running_cluster() {
        let _serial = serial();
        let cluster = cluster();
        let mut fleet = fleet::Fleet::new("etcd-operate", etcd_url(&cluster, "ops-operate"));
        scenario::operate(&mut fleet);
    }

    /// Needs the machine to tell an operator's shutdown from a session loss (issue 21, point 2).
    #[test]
    fn operator_shutdown_hands_the_items_over() {
        let _serial = serial();
        let cluster = cluster();
        let mut fleet = fleet::Fleet::new("etcd-shutdown", etcd_url(&cluster, "ops-shutdown"));
        scenario::operator_shutdown(&mut fleet);
    }

    /// Needs the machine to tell an operator's shutdown from a session loss (issue 21, point 2).
    #[test]
    fn remove_makes_every_instance_leave() {
        let _serial = serial();
        let cluster = cluster();
        let mut fleet = fleet::Fleet::new("etcd-remove", etcd_url(&cluster, "ops-remove"));
        scenario::remove(&mut fleet);
    }
}
