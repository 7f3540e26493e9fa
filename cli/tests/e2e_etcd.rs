//! End-to-end over real etcd (servers started by the test kit): three `shardjob run`
//! processes share a sharded SCRIPT job; one is SIGKILLed, one leaves on SIGTERM, the
//! cluster's leader is killed. See `e2e/mod.rs` for what is checked. Needs the `etcd` feature
//! (`cargo test --features zk,etcd`).

mod e2e;

use std::time::Duration;

use shardjob_testkit::Cluster;

/// The instances' session lease TTL (a URL query parameter of `shardjob run --registry`;
/// etcd counts it in whole seconds).
const TTL: Duration = Duration::from_secs(3);

fn url(cluster: &Cluster, namespace: &str) -> String {
    // The test kit gives `http://127.0.0.1:port`; the URL takes `host:port`.
    let hosts: Vec<String> = cluster
        .endpoints()
        .iter()
        .map(|e| e.trim_start_matches("http://").to_owned())
        .collect();
    format!(
        "etcd://{}/{namespace}?session_timeout_ms={}",
        hosts.join(","),
        TTL.as_millis()
    )
}

fn start(members: usize) -> Cluster {
    Cluster::etcd(members).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn killed_instance_fails_over_within_the_lease_ttl() {
    let _serial = e2e::serial();
    let cluster = start(1);
    let mut fleet = e2e::Fleet::new("etcd-kill", url(&cluster, "e2e-kill"));
    e2e::kill_without_goodbye(&mut fleet, TTL);
}

#[test]
fn graceful_leave_is_taken_over_at_once() {
    let _serial = e2e::serial();
    let cluster = start(1);
    let mut fleet = e2e::Fleet::new("etcd-leave", url(&cluster, "e2e-leave"));
    e2e::graceful_leave(&mut fleet);
}

#[test]
fn jobs_go_on_when_the_cluster_leader_dies() {
    let _serial = e2e::serial();
    let mut cluster = start(3);
    let mut fleet = e2e::Fleet::new("etcd-leader", url(&cluster, "e2e-leader"));
    // No bound on getting back to complete fires: etcd-client keeps the dead member in its
    // balanced channel, so for a while a share of the requests cannot be sent ("tcp connect
    // error"). The backend sends those again (reads, and transactions that never left), but
    // the election and the requests that fail otherwise still make fires run late, several
    // collapsing into one misfire run (measured: about 7 s until five consecutive complete
    // fires, 12 to 23 s before transactions were sent again). Jobs must go on.
    e2e::registry_leader_loss(&mut fleet, None, || {
        let leader = cluster.leader().expect("a cluster leader");
        let at = e2e::now_ms();
        cluster.kill(leader).unwrap();
        eprintln!("e2e: killed etcd leader member {leader}");
        at
    });
}
