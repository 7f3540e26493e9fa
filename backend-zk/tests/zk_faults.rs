//! ZooKeeper-specific behaviour against a real server: expiry hook, chroot, ACLs.

use std::time::{Duration, Instant};

use shardjob_backend_zk::{ZkConfig, ZkRegistry};
use shardjob_core::registry::{NodePath, Registry, RegistryEvent, SessionEvent};
use shardjob_testkit::{Cluster, Proxy};

/// A session the server expires (its client cut off from it by a proxy until the server no
/// longer lists it: no race with the client's reconnection, however loaded the machine) is
/// reported as expired when the client gets through again, and replaced by a new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_the_server_expires_is_reported_and_replaced() {
    const WAIT: Duration = Duration::from_secs(120);
    let zk = Cluster::zookeeper(1).unwrap();
    let server: std::net::SocketAddr = zk.connect_string().parse().unwrap();
    let proxy = Proxy::start(server).unwrap();
    let config = ZkConfig::new(proxy.addr().to_string())
        .namespace("hook")
        .session_timeout(Duration::from_secs(2));
    let c = ZkRegistry::connect(config).await.unwrap();
    let mut events = c.watch(&NodePath::root()).await.unwrap();
    for _ in 0..2 {
        let old = c.session().unwrap();
        let t = Instant::now();
        tokio::task::block_in_place(|| {
            proxy.cut();
            // `dump` may fail on a starved server: ask again until the deadline.
            while zk.zk_session_alive(1, old.id.0).unwrap_or(true) {
                assert!(
                    t.elapsed() < WAIT,
                    "session {:?} not expired in {WAIT:?}",
                    old.id
                );
                std::thread::sleep(Duration::from_millis(100));
            }
            proxy.restore();
        });
        let mut expired = false;
        loop {
            let e = tokio::time::timeout(WAIT, events.next())
                .await
                .expect("an event within the deadline")
                .expect("the watch goes on");
            eprintln!("{:?}: {e:?}", t.elapsed());
            match e {
                RegistryEvent::Session(SessionEvent::Expired(id)) => {
                    assert_eq!(id, old.id);
                    expired = true;
                }
                RegistryEvent::Session(SessionEvent::Connected(info)) => {
                    assert_ne!(info.id, old.id);
                    break;
                }
                _ => {}
            }
        }
        assert!(expired, "the expiry was reported before the new session");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ensemble_survives_the_loss_of_its_leader() {
    use shardjob_core::registry::CreateMode;
    let mut zk = tokio::task::block_in_place(|| Cluster::zookeeper(3).unwrap());
    let config = ZkConfig::new(zk.connect_string())
        .namespace("/ensemble/ns")
        .session_timeout(Duration::from_secs(4))
        .request_timeout(Duration::from_secs(8));
    let c = ZkRegistry::connect(config.clone()).await.unwrap();
    let w = ZkRegistry::connect(config).await.unwrap();
    let sid = c.session().unwrap().id;
    let eph = NodePath::new("/eph").unwrap();
    c.create(&eph, b"x".to_vec(), CreateMode::Ephemeral)
        .await
        .unwrap();
    let mut events = w.watch(&NodePath::root()).await.unwrap();
    let leader = zk.leader().expect("a leader");
    let t = Instant::now();
    tokio::task::block_in_place(|| zk.kill(leader).unwrap());
    // Writes work again once a new leader is elected.
    let mut attempts = 0;
    loop {
        attempts += 1;
        match c.set(&eph, b"y".to_vec(), None).await {
            Ok(_) => break,
            Err(e) => {
                assert!(t.elapsed() < Duration::from_secs(60), "{e:?}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    eprintln!(
        "zk3: first write after the leader's SIGKILL after {:?} ({attempts} attempts)",
        t.elapsed()
    );
    assert_eq!(c.session().unwrap().id, sid, "the session survived");
    assert!(w.get(&eph).await.unwrap().is_some());
    // The watcher carries on (after its own reconnection if it was on the dead member).
    let mut changed = false;
    while !changed {
        let e = tokio::time::timeout(Duration::from_secs(30), events.next())
            .await
            .unwrap()
            .unwrap();
        if let RegistryEvent::Session(shardjob_core::registry::SessionEvent::Reconnected(_)) = e {
            // Changes during the gap may be missed: make one more.
            c.set(&eph, b"z".to_vec(), None).await.unwrap();
        }
        changed = matches!(e, RegistryEvent::Node(ref n) if n.path == eph);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn digest_acls_keep_other_clients_out() {
    use shardjob_backend_zk::ZkAcl;
    use shardjob_core::registry::{CreateMode, RegistryError};
    let zk = tokio::task::block_in_place(|| Cluster::zookeeper(1).unwrap());
    let owner = ZkRegistry::connect(
        ZkConfig::new(zk.connect_string())
            .namespace("secured")
            .digest("alice", "secret")
            .acl(ZkAcl::CreatorAll),
    )
    .await
    .unwrap();
    let node = NodePath::new("/private").unwrap();
    owner
        .create(&node, b"s".to_vec(), CreateMode::Persistent)
        .await
        .unwrap();
    assert_eq!(owner.get(&node).await.unwrap().unwrap().data, b"s");
    // The same identity in another session may; anybody else may not.
    let same = ZkRegistry::connect(
        ZkConfig::new(zk.connect_string())
            .namespace("secured")
            .digest("alice", "secret"),
    )
    .await
    .unwrap();
    assert!(same.get(&node).await.unwrap().is_some());
    let other = ZkRegistry::connect(
        ZkConfig::new(zk.connect_string())
            .namespace("secured")
            .digest("mallory", "guess"),
    )
    .await
    .unwrap();
    let e = other.get(&node).await.unwrap_err();
    assert!(matches!(e, RegistryError::NotAuthorized(_)), "{e:?}");
    let e = other.set(&node, b"x".to_vec(), None).await.unwrap_err();
    assert!(
        matches!(e.root_cause(), RegistryError::NotAuthorized(_)),
        "{e:?}"
    );
    // The namespace node was created with the owner's ACL too.
    let e = other
        .create(
            &NodePath::new("/x").unwrap(),
            Vec::new(),
            CreateMode::Persistent,
        )
        .await
        .unwrap_err();
    assert!(
        matches!(e.root_cause(), RegistryError::NotAuthorized(_)),
        "{e:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_servers_and_bad_configs_fail_clearly() {
    use shardjob_backend_zk::{ZkConfigError, ZkError};
    // A port nobody listens on (bound, then released).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let t = Instant::now();
    let e = ZkRegistry::connect(
        ZkConfig::new(format!("127.0.0.1:{port}"))
            .session_timeout(Duration::from_secs(1))
            .connection_timeout(Duration::from_millis(200)),
    )
    .await
    .unwrap_err();
    assert!(matches!(e, ZkError::Registry(_)), "{e:?}");
    assert!(t.elapsed() < Duration::from_secs(10));
    let e = ZkRegistry::connect(ZkConfig::new("nohost"))
        .await
        .unwrap_err();
    assert!(
        matches!(e, ZkError::Config(ZkConfigError::BadHost(_))),
        "{e:?}"
    );
}
