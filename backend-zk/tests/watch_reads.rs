//! What a watch reads back, counted by a real server (`mntr`'s `zk_packets_received`): the
//! client's own writes come from its journal, other clients' writes are read.

use std::time::Duration;

use shardjob_backend_zk::{ZkConfig, ZkRegistry};
use shardjob_core::registry::{
    CreateMode, EventStream, NodePath, Registry, RegistryEvent, TxnOp, Version, WatchEvent,
    WatchEventKind,
};
use shardjob_testkit::Cluster;

/// Writes per phase.
const N: u64 = 20;

fn p(s: &str) -> NodePath {
    NodePath::new(s).unwrap()
}

/// Request packets the server has received so far (session pings included).
fn packets(zk: &Cluster) -> u64 {
    let mntr = zk.four_letter(1, "mntr").unwrap();
    mntr.lines()
        .find_map(|l| {
            let (k, v) = l.split_once('\t')?;
            (k.trim() == "zk_packets_received").then(|| v.trim().parse().ok())?
        })
        .unwrap_or_else(|| panic!("no zk_packets_received in mntr:\n{mntr}"))
}

async fn next_node(events: &mut Box<dyn EventStream>) -> WatchEvent {
    loop {
        match tokio::time::timeout(Duration::from_secs(30), events.next()).await {
            Ok(Some(RegistryEvent::Node(e))) => return e,
            Ok(Some(RegistryEvent::Session(_))) => {}
            other => panic!("no node event: {other:?}"),
        }
    }
}

async fn client(zk: &Cluster) -> ZkRegistry {
    // A long session: no pings while the test runs.
    let config = ZkConfig::new(zk.connect_string())
        .namespace("reads")
        .session_timeout(Duration::from_secs(30));
    ZkRegistry::connect(config).await.unwrap()
}

/// Each write is awaited with its event before the next, so every notification comes alone:
/// before the journal, each of the watching client's own writes cost a read as well. The
/// server counts one request per own write (a little slack for anything else, such as a
/// ping), and still one read per write of another client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn own_writes_are_not_read_back_others_are() {
    let zk = Cluster::zookeeper(1).unwrap();
    let w = client(&zk).await;
    let other = client(&zk).await;
    w.create(&p("/t"), Vec::new(), CreateMode::Persistent)
        .await
        .unwrap();
    let mut events = w.watch(&p("/t")).await.unwrap();

    let before = packets(&zk);
    for i in 0..N {
        let path = p(&format!("/t/n{i}"));
        let created = w
            .create(&path, b"c".to_vec(), CreateMode::Persistent)
            .await
            .unwrap();
        let e = next_node(&mut events).await;
        assert_eq!(
            (e.kind, e.path, e.data, e.stat),
            (
                WatchEventKind::Created,
                path.clone(),
                b"c".to_vec(),
                Some(created)
            )
        );
        // A transaction of two writes: its results carry the stats.
        w.transact(vec![
            TxnOp::set(path.clone(), "s"),
            TxnOp::create(path.join("child").unwrap(), "k"),
        ])
        .await
        .unwrap();
        let changed = next_node(&mut events).await;
        let child = next_node(&mut events).await;
        assert_eq!(
            (changed.kind, changed.data.as_slice()),
            (WatchEventKind::Changed, &b"s"[..])
        );
        assert_eq!(
            (child.kind, child.data.as_slice()),
            (WatchEventKind::Created, &b"k"[..])
        );
        assert_eq!(
            w.get(&child.path).await.unwrap().map(|n| n.stat),
            child.stat,
            "the journal's stat of a node created in a multi is the node's"
        );
    }
    // 2 writes and 1 read (the check of the child's stat) per round.
    let own = packets(&zk) - before;
    assert!(
        own <= 3 * N + 3,
        "{own} requests for {N} rounds of 2 own writes and 1 read: the watch read some back"
    );

    let before = packets(&zk);
    for i in 0..N {
        let path = p(&format!("/t/n{i}"));
        other.set(&path, b"o".to_vec(), None).await.unwrap();
        let e = next_node(&mut events).await;
        assert_eq!(
            (e.kind, e.path, e.data.as_slice()),
            (WatchEventKind::Changed, path, &b"o"[..])
        );
    }
    let others = packets(&zk) - before;
    assert!(
        others >= 2 * N,
        "{others} requests for {N} writes of another client, each read by the watch"
    );
    w.close().await.unwrap();
    other.close().await.unwrap();
}

/// The client's own writes and another client's, to one node, sent together and racing: the
/// events show the node's versions in order (never an older one after a newer one, as an own
/// write's state taken after a read of a later change would), each with the data that
/// version had, and the last event shows the last version.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn own_and_others_writes_racing_keep_the_node_moving_forward() {
    let zk = Cluster::zookeeper(1).unwrap();
    let w = client(&zk).await;
    let other = client(&zk).await;
    let path = p("/race");
    w.create(&path, b"0".to_vec(), CreateMode::Persistent)
        .await
        .unwrap();
    let mut events = w.watch(&path).await.unwrap();
    let rounds = 200;
    let per_round = 10;
    let mut data_of = std::collections::HashMap::new();
    for round in 0..rounds {
        let writes = (0..2 * per_round).map(|i| {
            let (client, who) = if i % 2 == 0 { (&w, "w") } else { (&other, "o") };
            let path = &path;
            async move {
                let data = format!("{who}{round}-{i}").into_bytes();
                let stat = client.set(path, data.clone(), None).await.unwrap();
                (stat.version, data)
            }
        });
        for (version, data) in futures_join_all(writes).await {
            data_of.insert(version, data);
        }
    }
    let last = w.get(&path).await.unwrap().unwrap().stat.version;
    let mut at = Version(0);
    while at != last {
        let e = next_node(&mut events).await;
        let stat = e.stat.expect("a change has a stat");
        assert!(
            stat.version.0 >= at.0,
            "version {:?} after {at:?}: the node went back in time",
            stat.version
        );
        assert_eq!(Some(&e.data), data_of.get(&stat.version), "{e:?}");
        at = stat.version;
    }
    w.close().await.unwrap();
    other.close().await.unwrap();
}

/// The futures' outputs, in order, once all are done (polled together).
async fn futures_join_all<F: std::future::Future>(
    futures: impl Iterator<Item = F>,
) -> Vec<F::Output> {
    let mut handles: Vec<std::pin::Pin<Box<F>>> = futures.map(Box::pin).collect();
    let mut out: Vec<Option<F::Output>> = handles.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (h, o) in handles.iter_mut().zip(out.iter_mut()) {
            if o.is_none() {
                match h.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => *o = Some(v),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    out.into_iter().map(|o| o.expect("done")).collect()
}
