//! ZooKeeper-specific behaviour against a real server: expiry hook, chroot, ACLs.

use std::time::{Duration, Instant};

use shardjob_backend_zk::{ZkConfig, ZkRegistry};
use shardjob_core::registry::{NodePath, Registry, RegistryEvent};
use shardjob_testkit::Cluster;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expire_hook_ends_the_session() {
    let zk = Cluster::zookeeper(1).unwrap();
    let config = ZkConfig::new(zk.connect_string())
        .namespace("hook")
        .session_timeout(Duration::from_secs(2));
    let c = ZkRegistry::connect(config).await.unwrap();
    let mut events = c.watch(&NodePath::root()).await.unwrap();
    for _ in 0..2 {
        let old = c.session().unwrap();
        let t = Instant::now();
        let r = c.expire_session().await;
        eprintln!("expire_session: {r:?} after {:?}", t.elapsed());
        r.unwrap();
        loop {
            let e = tokio::time::timeout(Duration::from_secs(10), events.next())
                .await
                .unwrap()
                .unwrap();
            eprintln!("{:?}: {e:?}", t.elapsed());
            if let RegistryEvent::Session(shardjob_core::registry::SessionEvent::Connected(info)) =
                e
            {
                assert_ne!(info.id, old.id);
                break;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_survives_server_restart() {
    let mut zk = Cluster::zookeeper(1).unwrap();
    let config = ZkConfig::new(zk.connect_string())
        .namespace("restart")
        .session_timeout(Duration::from_secs(6));
    let c = ZkRegistry::connect(config.clone()).await.unwrap();
    let w = ZkRegistry::connect(config).await.unwrap();
    let mut events = w.watch(&NodePath::root()).await.unwrap();
    tokio::task::block_in_place(|| {
        zk.kill(1).unwrap();
        std::thread::sleep(Duration::from_millis(300));
        zk.restart(1).unwrap();
    });
    let t = Instant::now();
    for i in 0..3 {
        let r = c
            .create(
                &NodePath::new(format!("/n{i}")).unwrap(),
                Vec::new(),
                shardjob_core::registry::CreateMode::Persistent,
            )
            .await;
        eprintln!("{:?} create {i}: {r:?}", t.elapsed());
    }
    let mut nodes = 0;
    while nodes < 3 {
        let e = tokio::time::timeout(Duration::from_secs(10), events.next())
            .await
            .unwrap()
            .unwrap();
        eprintln!("{:?}: {e:?}", t.elapsed());
        if matches!(e, RegistryEvent::Node(_)) {
            nodes += 1;
        }
    }
}
