//! End-to-end over real ZooKeeper (servers started by the test kit): three `shardjob run`
//! processes share a sharded SCRIPT job; one is SIGKILLed, one leaves on SIGTERM, the
//! ensemble's leader is killed. See `e2e/mod.rs` for what is checked. Needs the `zk` feature
//! (`cargo test --features zk,etcd`).

mod e2e;

use std::time::Duration;

use shardjob_testkit::Cluster;

/// The instances' session timeout (a URL query parameter of `shardjob run --registry`).
const SESSION: Duration = Duration::from_secs(4);

fn url(cluster: &Cluster, namespace: &str) -> String {
    format!(
        "zk://{}/{namespace}?session_timeout_ms={}",
        cluster.connect_string(),
        SESSION.as_millis()
    )
}

fn start(members: usize) -> Cluster {
    Cluster::zookeeper(members).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn killed_instance_fails_over_within_the_session_timeout() {
    let _serial = e2e::serial();
    let cluster = start(1);
    let mut fleet = e2e::Fleet::new("zk-kill", url(&cluster, "e2e-kill"));
    e2e::kill_without_goodbye(&mut fleet, SESSION);
}

#[test]
fn graceful_leave_is_taken_over_at_once() {
    let _serial = e2e::serial();
    let cluster = start(1);
    let mut fleet = e2e::Fleet::new("zk-leave", url(&cluster, "e2e-leave"));
    e2e::graceful_leave(&mut fleet);
}

#[test]
fn jobs_go_on_when_the_ensemble_leader_dies() {
    let _serial = e2e::serial();
    let mut cluster = start(3);
    let mut fleet = e2e::Fleet::new("zk-leader", url(&cluster, "e2e-leader"));
    e2e::registry_leader_loss(&mut fleet, Some(Duration::from_secs(15)), || {
        let leader = cluster.leader().expect("an ensemble leader");
        let at = e2e::now_ms();
        cluster.kill(leader).unwrap();
        eprintln!("e2e: killed ZooKeeper leader member {leader}");
        at
    });
}
