//! etcd-specific behaviour against real servers: leader loss in a 3-member cluster, a watch
//! resumed past a compaction, user authentication, lease expiry timing.

use std::time::{Duration, Instant};

use etcd_client as etcd;
use shardjob_backend_etcd::{EtcdConfig, EtcdError, EtcdRegistry};
use shardjob_core::registry::{
    CreateMode, EventStream, NodePath, Registry, RegistryError, RegistryEvent, SessionEvent,
};
use shardjob_testkit::Cluster;

fn p(s: &str) -> NodePath {
    NodePath::new(s).unwrap()
}

async fn next(events: &mut Box<dyn EventStream>) -> RegistryEvent {
    tokio::time::timeout(Duration::from_secs(30), events.next())
        .await
        .expect("an event in time")
        .expect("the stream goes on")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_loss_and_compaction() {
    let mut etcd = tokio::task::block_in_place(|| Cluster::etcd(3).unwrap());
    let endpoints = etcd.endpoints();
    let config = |eps: Vec<String>| {
        EtcdConfig::new(eps)
            .namespace("ha")
            .lease_ttl(Duration::from_secs(4))
            .request_timeout(Duration::from_secs(8))
    };
    let c = EtcdRegistry::connect(config(endpoints.clone()))
        .await
        .unwrap();
    let sid = c.session().unwrap().id;
    c.create(&p("/eph"), b"x".to_vec(), CreateMode::Ephemeral)
        .await
        .unwrap();

    // The leader dies: writes work again after the election, the lease survives.
    let leader = etcd.leader().expect("a leader");
    let t = Instant::now();
    tokio::task::block_in_place(|| etcd.kill(leader).unwrap());
    let mut attempts = 0;
    loop {
        attempts += 1;
        match c.set(&p("/eph"), b"y".to_vec(), None).await {
            Ok(_) => break,
            Err(e) => {
                assert!(t.elapsed() < Duration::from_secs(60), "{e:?}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    eprintln!(
        "etcd3: first write after the leader's SIGKILL after {:?} ({attempts} attempts)",
        t.elapsed()
    );
    assert_eq!(c.session().unwrap().id, sid);
    assert!(c.get(&p("/eph")).await.unwrap().is_some());
    tokio::task::block_in_place(|| etcd.restart(leader).unwrap());

    // A watcher that talks to one member only; that member goes down while the others write
    // and compact the history: the watch cannot resume and says so.
    let lonely = endpoints[0].clone();
    let member = 1;
    let w = EtcdRegistry::connect(config(vec![lonely])).await.unwrap();
    let mut events = w.watch(&NodePath::root()).await.unwrap();
    tokio::task::block_in_place(|| {
        etcd.kill(member).unwrap();
        while etcd.leader().is_none() {
            std::thread::sleep(Duration::from_millis(50));
        }
    });
    let others: Vec<String> = endpoints[1..].to_vec();
    let writer = EtcdRegistry::connect(config(others.clone())).await.unwrap();
    for i in 0..3 {
        writer
            .create(&p(&format!("/lost{i}")), Vec::new(), CreateMode::Persistent)
            .await
            .unwrap();
    }
    let mut raw = etcd::Client::connect(others, None).await.unwrap();
    let rev = raw
        .get("x", None)
        .await
        .unwrap()
        .header()
        .unwrap()
        .revision();
    raw.compact(rev, Some(etcd::CompactionOptions::new().with_physical()))
        .await
        .unwrap();
    tokio::task::block_in_place(|| etcd.restart(member).unwrap());
    let t = Instant::now();
    let mut resyncs = 0;
    loop {
        let event = next(&mut events).await;
        eprintln!("{:?}: {event:?}", t.elapsed());
        match event {
            // The compaction's resynchronisation, the keep-alive's reconnection, or (if the
            // lease ran out while the watcher's only member was down) a new session: each
            // says "reload", and changes after it are delivered.
            RegistryEvent::Session(SessionEvent::Reconnected(_) | SessionEvent::Connected(_)) => {
                resyncs += 1;
                writer
                    .create(
                        &p(&format!("/after{resyncs}")),
                        Vec::new(),
                        CreateMode::Persistent,
                    )
                    .await
                    .unwrap();
            }
            RegistryEvent::Node(e) if e.path.as_str().starts_with("/after") => break,
            RegistryEvent::Node(e) => {
                assert!(
                    !e.path.as_str().starts_with("/lost"),
                    "compacted events cannot come: {e:?}"
                );
            }
            RegistryEvent::Session(_) => {}
        }
    }
    assert!(resyncs > 0);
    eprintln!("etcd3: watch resynchronised after {:?}", t.elapsed());
    c.close().await.unwrap();
    w.close().await.unwrap();
    writer.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn users_and_lease_expiry() {
    let etcd = tokio::task::block_in_place(|| Cluster::etcd(1).unwrap());
    let endpoints = etcd.endpoints();

    // A lease that is not kept alive expires about one TTL later; a watcher sees its keys go.
    let watcher = EtcdRegistry::connect(EtcdConfig::new(endpoints.clone()).namespace("ttl"))
        .await
        .unwrap();
    let mut events = watcher.watch(&NodePath::root()).await.unwrap();
    let mut raw = etcd::Client::connect(endpoints.clone(), None)
        .await
        .unwrap();
    let lease = raw.lease_grant(2, None).await.unwrap().id();
    raw.put(
        "/ttl/held",
        "v",
        Some(etcd::PutOptions::new().with_lease(lease)),
    )
    .await
    .unwrap();
    let t = Instant::now();
    loop {
        if let RegistryEvent::Node(e) = next(&mut events).await
            && e.path == p("/held")
            && e.stat.is_none()
        {
            break;
        }
    }
    eprintln!(
        "etcd: a 2 s lease without keep-alive ended after {:?}",
        t.elapsed()
    );
    assert!(t.elapsed() >= Duration::from_millis(1500));
    watcher.close().await.unwrap();

    // Authentication.
    raw.user_add("root", "rootpw", None).await.unwrap();
    raw.user_grant_role("root", "root").await.unwrap();
    raw.auth_enable().await.unwrap();
    let authed = EtcdRegistry::connect(
        EtcdConfig::new(endpoints.clone())
            .namespace("auth")
            .user("root", "rootpw"),
    )
    .await
    .unwrap();
    authed
        .create(&p("/x"), b"1".to_vec(), CreateMode::Ephemeral)
        .await
        .unwrap();
    assert_eq!(authed.get(&p("/x")).await.unwrap().unwrap().data, b"1");
    let e = EtcdRegistry::connect(
        EtcdConfig::new(endpoints.clone())
            .namespace("auth")
            .user("root", "wrong"),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(e, EtcdError::Registry(RegistryError::NotAuthorized(_))),
        "{e:?}"
    );
    let e = EtcdRegistry::connect(EtcdConfig::new(endpoints).namespace("auth"))
        .await
        .unwrap_err();
    assert!(
        matches!(e, EtcdError::Registry(RegistryError::NotAuthorized(_))),
        "{e:?}"
    );
    authed.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_checks_and_the_bare_key_space() {
    use shardjob_core::registry::{Check, ErrorClass, TxnOp};
    let etcd = tokio::task::block_in_place(|| Cluster::etcd(1).unwrap());
    let endpoints = etcd.endpoints();

    // The lease ends behind the client's back (before its keep-alive notices): a transaction
    // guarded by the session does not commit.
    let c = EtcdRegistry::connect(EtcdConfig::new(endpoints.clone()).namespace("guard"))
        .await
        .unwrap();
    let sid = c.session().unwrap().id;
    let mut raw = etcd::Client::connect(endpoints.clone(), None)
        .await
        .unwrap();
    raw.lease_revoke(sid.0 as i64).await.unwrap();
    let e = c
        .transact(vec![
            TxnOp::Check(Check::Session(sid)),
            TxnOp::create(p("/guarded"), "x"),
        ])
        .await
        .unwrap_err();
    assert_eq!(e.class(), ErrorClass::LostSession, "{e:?}");
    assert_eq!(c.get(&p("/guarded")).await.unwrap(), None);
    c.close().await.unwrap();

    // Without a namespace the tree is the whole key space; session markers are not nodes.
    let bare = EtcdRegistry::connect(EtcdConfig::new(endpoints))
        .await
        .unwrap();
    bare.create(&p("/top"), b"t".to_vec(), CreateMode::Persistent)
        .await
        .unwrap();
    bare.create(&p("/top/e"), Vec::new(), CreateMode::Ephemeral)
        .await
        .unwrap();
    let names = bare.children(&NodePath::root()).await.unwrap();
    assert!(names.contains(&"top".to_owned()), "{names:?}");
    assert!(names.contains(&"guard".to_owned()), "{names:?}");
    assert!(names.iter().all(|n| !n.contains('\0')), "{names:?}");
    assert_eq!(bare.children(&p("/top")).await.unwrap(), ["e"]);
    let tree = bare.get_tree(&p("/top")).await.unwrap();
    assert_eq!(tree.len(), 2);
    bare.close().await.unwrap();
}
