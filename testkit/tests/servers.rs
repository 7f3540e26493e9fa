//! The test kit against the real binaries: start, kill, pause, restart, leader change.

use std::time::{Duration, Instant};

use shardjob_testkit::{Cluster, MemberState};

#[test]
fn zookeeper_single_kill_pause_restart() {
    let mut zk = Cluster::zookeeper(1).unwrap();
    assert!(zk.is_serving(1).unwrap());
    assert_eq!(zk.leader(), Some(1));
    assert!(
        zk.four_letter(1, "mntr")
            .unwrap()
            .contains("zk_server_state")
    );

    zk.pause(1).unwrap();
    assert_eq!(zk.state(1).unwrap(), MemberState::Paused);
    assert!(!zk.is_serving(1).unwrap());
    zk.resume(1).unwrap();
    zk.wait_ready(1, Duration::from_secs(10)).unwrap();

    let pid = zk.pid(1).unwrap().unwrap();
    zk.kill(1).unwrap();
    assert_eq!(zk.state(1).unwrap(), MemberState::Down);
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}/cmdline")).exists()
            || std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .map_or(true, |s| s.contains(") Z"))
    );
    assert!(!zk.is_serving(1).unwrap());
    let t = Instant::now();
    zk.restart(1).unwrap();
    eprintln!("zk restart to serving: {:?}", t.elapsed());
    assert!(zk.is_serving(1).unwrap());
}

#[test]
fn etcd_three_members_leader_failover() {
    let t = Instant::now();
    let mut etcd = Cluster::etcd(3).unwrap();
    eprintln!("etcd3 ready: {:?}", t.elapsed());
    assert_eq!(etcd.endpoints().len(), 3);
    let leader = etcd.leader().expect("a leader");
    etcd.kill(leader).unwrap();
    let t = Instant::now();
    let new_leader = loop {
        if let Some(l) = etcd.leader() {
            break l;
        }
        assert!(t.elapsed() < Duration::from_secs(30), "no new leader");
        std::thread::sleep(Duration::from_millis(50));
    };
    eprintln!("etcd3 new leader after {:?}", t.elapsed());
    assert_ne!(new_leader, leader);
    etcd.restart(leader).unwrap();
    assert!(etcd.is_serving(leader).unwrap());
}

#[test]
fn dropping_a_cluster_kills_its_servers() {
    let etcd = Cluster::etcd(1).unwrap();
    let pid = etcd.pid(1).unwrap().unwrap();
    let dir = etcd.dir().to_path_buf();
    drop(etcd);
    assert!(!dir.exists(), "{dir:?} is left behind");
    let gone = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map_or(true, |s| s.contains(") Z") || s.contains(") X"));
    assert!(gone, "etcd {pid} still runs");
}
