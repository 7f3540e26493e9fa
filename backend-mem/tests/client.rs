//! The async client: the `Registry` contract, session renewal, hooks, several clients at once.

use std::sync::Arc;
use std::time::Duration;

use shardjob_backend_mem::{Link, MemClient, MemClock, MemServer};
use shardjob_core::registry::{
    Check, CreateMode, EventStream, NodePath, Registry, RegistryError, RegistryEvent, SessionEvent,
    SessionId, TxnOp, WatchEvent, WatchEventKind,
};

const TIMEOUT: Duration = Duration::from_secs(5);

fn p(s: &str) -> NodePath {
    NodePath::new(s).unwrap()
}

fn sid(c: &MemClient) -> SessionId {
    c.session().expect("a live session").id
}

/// How long a test waits for an event that must come, in real time: generous, so that a
/// loaded machine only makes a test slower.
const EVENT_WAIT: Duration = Duration::from_secs(10);

/// The next event, failing the test if none comes within [`EVENT_WAIT`] of real time.
async fn next(stream: &mut Box<dyn EventStream>) -> RegistryEvent {
    tokio::time::timeout(EVENT_WAIT, stream.next())
        .await
        .expect("an event within the wait")
        .expect("the stream has not ended")
}

/// Whether the stream stays silent for a little while.
async fn silent(stream: &mut Box<dyn EventStream>) -> bool {
    tokio::time::timeout(Duration::from_millis(30), stream.next())
        .await
        .is_err()
}

fn node(kind: WatchEventKind, event: &RegistryEvent) -> Option<&WatchEvent> {
    match event {
        RegistryEvent::Node(w) if w.kind == kind => Some(w),
        _ => None,
    }
}

fn session_event(event: &RegistryEvent) -> SessionEvent {
    match event {
        RegistryEvent::Session(s) => *s,
        other => panic!("expected a session event, got {other:?}"),
    }
}

#[tokio::test]
async fn registry_contract_basics() {
    let server = MemServer::manual();
    let c = server.connect(TIMEOUT);
    let stat = c
        .create(&p("/a"), b"1".to_vec(), CreateMode::Persistent)
        .await
        .unwrap();
    // The single-operation defaults report the operation's own error, not a TxnAborted.
    assert_eq!(
        c.create(&p("/a"), vec![], CreateMode::Persistent).await,
        Err(RegistryError::NodeExists(p("/a")))
    );
    assert_eq!(
        c.create(&p("/x/y"), vec![], CreateMode::Persistent).await,
        Err(RegistryError::NoNode(p("/x")))
    );
    let set = c
        .set(&p("/a"), b"2".to_vec(), Some(stat.version))
        .await
        .unwrap();
    assert_eq!(
        c.set(&p("/a"), b"3".to_vec(), Some(stat.version)).await,
        Err(RegistryError::BadVersion {
            path: p("/a"),
            expected: stat.version
        })
    );
    assert!(set.modified > stat.modified);
    c.ensure_path(&p("/a/b/c")).await.unwrap();
    c.ensure_path(&p("/a/b/c")).await.unwrap();
    assert_eq!(c.children(&p("/a")).await.unwrap(), ["b"]);
    let tree: Vec<_> = c
        .get_tree(&p("/a"))
        .await
        .unwrap()
        .into_iter()
        .map(|n| n.path)
        .collect();
    assert_eq!(tree, [p("/a"), p("/a/b"), p("/a/b/c")]);
    assert_eq!(
        c.delete(&p("/a"), None).await,
        Err(RegistryError::NotEmpty(p("/a")))
    );
    c.delete_tree(&p("/a")).await.unwrap();
    assert_eq!(c.get(&p("/a")).await, Ok(None));
    assert_eq!(server.dump().len(), 1, "only the root is left");
    let r = c
        .transact(vec![
            TxnOp::create(p("/t"), ""),
            TxnOp::Check(Check::Exists(p("/nope"))),
        ])
        .await;
    assert_eq!(
        r,
        Err(RegistryError::TxnAborted {
            index: 1,
            cause: Box::new(RegistryError::NoNode(p("/nope")))
        })
    );
}

#[tokio::test]
async fn watch_starts_with_the_first_change_not_a_connected_event() {
    let server = MemServer::manual();
    let a = server.connect(TIMEOUT);
    let mut events = a.watch(&p("/")).await.unwrap();
    assert!(silent(&mut events).await);
    a.create(&p("/x"), vec![], CreateMode::Persistent)
        .await
        .unwrap();
    assert!(node(WatchEventKind::Created, &next(&mut events).await).is_some());
}

#[tokio::test]
async fn a_waiting_stream_wakes_when_another_task_writes() {
    let server = MemServer::default();
    let a = Arc::new(server.connect(TIMEOUT));
    let b = server.connect(TIMEOUT);
    let mut events = b.watch(&p("/")).await.unwrap();
    let waiter = tokio::spawn(async move { events.next().await });
    tokio::task::yield_now().await;
    let writer = Arc::clone(&a);
    tokio::spawn(async move {
        writer
            .create(&p("/w"), vec![], CreateMode::Persistent)
            .await
    })
    .await
    .unwrap()
    .unwrap();
    let got = tokio::time::timeout(EVENT_WAIT, waiter)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        node(WatchEventKind::Created, &got.unwrap()).unwrap().path,
        p("/w")
    );
}

#[tokio::test]
async fn expiry_renews_the_session_and_fences_the_old_one() {
    let server = MemServer::manual();
    let a = server.connect(TIMEOUT);
    let b = server.connect(TIMEOUT);
    let mut a_events = a.watch(&p("/")).await.unwrap();
    let mut b_events = b.watch(&p("/")).await.unwrap();
    let old = sid(&a);
    a.create(&p("/e"), vec![], CreateMode::Ephemeral)
        .await
        .unwrap();
    assert!(server.expire_session(old));
    let new = a.session().unwrap();
    assert_ne!(new.id, old);
    assert_eq!(new.timeout, TIMEOUT);
    assert!(!server.is_alive(old) && server.is_alive(new.id));
    assert_eq!(b.get(&p("/e")).await, Ok(None));
    // A sees its create, then the expiry and the new session; not the deletion.
    assert!(node(WatchEventKind::Created, &next(&mut a_events).await).is_some());
    assert_eq!(
        session_event(&next(&mut a_events).await),
        SessionEvent::Expired(old)
    );
    assert_eq!(
        session_event(&next(&mut a_events).await),
        SessionEvent::Connected(new)
    );
    assert!(silent(&mut a_events).await);
    // B sees the ephemeral come and go.
    assert!(node(WatchEventKind::Created, &next(&mut b_events).await).is_some());
    assert_eq!(
        node(WatchEventKind::Deleted, &next(&mut b_events).await)
            .unwrap()
            .path,
        p("/e")
    );
    // A write guarded by the old session fails; by the new one it works.
    let guarded = |s| {
        vec![
            TxnOp::Check(Check::Session(s)),
            TxnOp::create_ephemeral(p("/e"), ""),
        ]
    };
    assert_eq!(
        a.transact(guarded(old)).await,
        Err(RegistryError::TxnAborted {
            index: 0,
            cause: Box::new(RegistryError::SessionMismatch {
                expected: old,
                actual: Some(new.id)
            }),
        })
    );
    a.transact(guarded(new.id)).await.unwrap();
    assert_eq!(
        b.get(&p("/e")).await.unwrap().unwrap().stat.ephemeral_owner,
        Some(new.id)
    );
}

#[tokio::test]
async fn suspended_client_replays_events_on_resume() {
    let server = MemServer::manual();
    let a = server.connect(TIMEOUT);
    let b = server.connect(TIMEOUT);
    let mut events = a.watch(&p("/")).await.unwrap();
    let id = sid(&a);
    a.create(&p("/e"), vec![], CreateMode::Ephemeral)
        .await
        .unwrap();
    assert!(server.suspend(id));
    assert_eq!(a.get(&p("/e")).await, Err(RegistryError::ConnectionLoss));
    assert_eq!(
        a.watch(&p("/")).await.err(),
        Some(RegistryError::ConnectionLoss)
    );
    assert_eq!(
        a.session().map(|s| s.id),
        Some(id),
        "the session still exists"
    );
    b.create(&p("/during"), vec![], CreateMode::Persistent)
        .await
        .unwrap();
    server.advance(TIMEOUT - Duration::from_millis(1));
    assert!(
        b.get(&p("/e")).await.unwrap().is_some(),
        "ephemeral kept within the timeout"
    );
    assert!(node(WatchEventKind::Created, &next(&mut events).await).is_some());
    assert_eq!(
        session_event(&next(&mut events).await),
        SessionEvent::Suspended(id)
    );
    assert!(silent(&mut events).await, "nothing while cut off");
    assert!(server.resume(id));
    assert_eq!(
        session_event(&next(&mut events).await),
        SessionEvent::Reconnected(id)
    );
    let during = next(&mut events).await;
    assert_eq!(
        node(WatchEventKind::Created, &during).unwrap().path,
        p("/during")
    );
    assert_eq!(sid(&a), id);
    assert!(a.get(&p("/e")).await.unwrap().is_some());
}

#[tokio::test]
async fn suspended_past_the_timeout_expires_and_learns_it_on_resume() {
    let server = MemServer::manual();
    let a = server.connect(TIMEOUT);
    let b = server.connect(TIMEOUT);
    let mut events = a.watch(&p("/")).await.unwrap();
    let old = sid(&a);
    a.create(&p("/e"), vec![], CreateMode::Ephemeral)
        .await
        .unwrap();
    server.suspend(old);
    server.advance(TIMEOUT);
    assert_eq!(b.get(&p("/e")).await, Ok(None));
    assert!(!server.is_alive(old));
    // Still cut off, the client cannot know.
    assert_eq!(a.session().map(|s| s.id), Some(old));
    assert_eq!(a.get(&p("/")).await, Err(RegistryError::ConnectionLoss));
    server.resume(old);
    let new = a.session().unwrap();
    assert_ne!(new.id, old);
    let seen: Vec<_> = [
        next(&mut events).await,
        next(&mut events).await,
        next(&mut events).await,
    ]
    .into_iter()
    .skip(1)
    .map(|e| session_event(&e))
    .collect();
    // (Suspended was the second; the first was the create.)
    assert_eq!(
        seen,
        [SessionEvent::Suspended(old), SessionEvent::Expired(old)]
    );
    assert_eq!(
        session_event(&next(&mut events).await),
        SessionEvent::Connected(new)
    );
    assert!(a.get(&p("/")).await.is_ok());
}

#[tokio::test]
async fn killed_client_lingers_then_its_ephemerals_vanish() {
    let server = MemServer::manual();
    let a = server.connect(TIMEOUT);
    let b = server.connect(TIMEOUT);
    let mut a_events = a.watch(&p("/")).await.unwrap();
    let mut b_events = b.watch(&p("/")).await.unwrap();
    let id = sid(&a);
    a.create(&p("/e"), vec![], CreateMode::Ephemeral)
        .await
        .unwrap();
    assert!(server.kill(id));
    assert_eq!(a.get(&p("/")).await, Err(RegistryError::Closed));
    assert_eq!(a.session(), None);
    assert_eq!(
        tokio::time::timeout(EVENT_WAIT, a_events.next()).await,
        Ok(None)
    );
    assert!(matches!(
        server.session(id).unwrap().link,
        Link::Killed { .. }
    ));
    server.advance(TIMEOUT - Duration::from_millis(1));
    assert!(b.get(&p("/e")).await.unwrap().is_some());
    assert!(node(WatchEventKind::Created, &next(&mut b_events).await).is_some());
    assert!(silent(&mut b_events).await);
    server.advance(Duration::from_millis(1));
    assert_eq!(
        node(WatchEventKind::Deleted, &next(&mut b_events).await)
            .unwrap()
            .path,
        p("/e")
    );
    assert!(!server.is_alive(id));
    assert_eq!(
        server.session_ids(),
        [sid(&b)],
        "a killed client gets no new session"
    );
}

#[tokio::test]
async fn system_clock_expiry_wakes_waiting_streams_by_itself() {
    let server = MemServer::new(MemClock::system());
    let short = Duration::from_millis(150);
    let a = server.connect(short);
    let b = server.connect(short);
    a.create(&p("/e"), vec![], CreateMode::Ephemeral)
        .await
        .unwrap();
    let mut events = b.watch(&p("/")).await.unwrap();
    server.kill(sid(&a));
    // Nobody calls the server: the timer thread must process the expiry.
    let got = tokio::time::timeout(EVENT_WAIT, events.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(node(WatchEventKind::Deleted, &got).unwrap().path, p("/e"));
    assert!(server.now() >= short);
    // A live, connected client's session never expires by itself.
    assert!(b.session().is_some());
}

#[tokio::test]
async fn close_ends_streams_after_a_closed_event() {
    let server = MemServer::manual();
    let a = server.connect(TIMEOUT);
    let b = server.connect(TIMEOUT);
    let mut events = a.watch(&p("/")).await.unwrap();
    let mut b_events = b.watch(&p("/")).await.unwrap();
    a.create(&p("/e"), vec![], CreateMode::Ephemeral)
        .await
        .unwrap();
    a.close().await.unwrap();
    a.close().await.unwrap();
    assert_eq!(a.session(), None);
    assert_eq!(a.get(&p("/")).await, Err(RegistryError::Closed));
    assert!(node(WatchEventKind::Created, &next(&mut events).await).is_some());
    assert_eq!(
        session_event(&next(&mut events).await),
        SessionEvent::Closed
    );
    assert_eq!(events.next().await, None);
    assert_eq!(events.next().await, None);
    assert!(node(WatchEventKind::Created, &next(&mut b_events).await).is_some());
    assert!(node(WatchEventKind::Deleted, &next(&mut b_events).await).is_some());
}

#[tokio::test]
async fn dropping_a_client_closes_its_session() {
    let server = MemServer::manual();
    let a = server.connect(TIMEOUT);
    let b = server.connect(TIMEOUT);
    a.create(&p("/e"), vec![], CreateMode::Ephemeral)
        .await
        .unwrap();
    let id = sid(&a);
    drop(a);
    assert!(!server.is_alive(id));
    assert_eq!(b.get(&p("/e")).await, Ok(None));
}

#[tokio::test]
async fn held_and_delayed_watches_deliver_later_in_order() {
    let server = MemServer::manual();
    let a = server.connect(TIMEOUT);
    let b = server.connect(TIMEOUT);
    let mut events = b.watch(&p("/")).await.unwrap();
    assert_eq!(server.hold_watches(sid(&b)), 1);
    a.create(&p("/1"), vec![], CreateMode::Persistent)
        .await
        .unwrap();
    a.create(&p("/2"), vec![], CreateMode::Persistent)
        .await
        .unwrap();
    assert!(silent(&mut events).await);
    server.release_watches(sid(&b));
    assert_eq!(
        node(WatchEventKind::Created, &next(&mut events).await)
            .unwrap()
            .path,
        p("/1")
    );
    assert_eq!(
        node(WatchEventKind::Created, &next(&mut events).await)
            .unwrap()
            .path,
        p("/2")
    );

    server.delay_watches(sid(&b), Duration::from_secs(3));
    a.create(&p("/3"), vec![], CreateMode::Persistent)
        .await
        .unwrap();
    a.set(&p("/3"), b"x".to_vec(), None).await.unwrap();
    server.advance(Duration::from_secs(2));
    assert!(silent(&mut events).await);
    // The stream wakes when time reaches the end of the delay.
    let waiter = tokio::spawn(async move {
        let first = events.next().await;
        let second = events.next().await;
        (first, second)
    });
    tokio::task::yield_now().await;
    server.advance(Duration::from_secs(1));
    let (first, second) = tokio::time::timeout(EVENT_WAIT, waiter)
        .await
        .unwrap()
        .unwrap();
    assert!(node(WatchEventKind::Created, &first.unwrap()).is_some());
    assert!(node(WatchEventKind::Changed, &second.unwrap()).is_some());
}

#[tokio::test]
async fn system_clock_delay_is_delivered_by_the_timer() {
    let server = MemServer::default();
    let a = server.connect(TIMEOUT);
    let b = server.connect(TIMEOUT);
    let mut events = b.watch(&p("/")).await.unwrap();
    server.set_watch_latency(sid(&b), Duration::from_millis(100));
    let start = std::time::Instant::now();
    a.create(&p("/slow"), vec![], CreateMode::Persistent)
        .await
        .unwrap();
    let got = tokio::time::timeout(EVENT_WAIT, events.next())
        .await
        .unwrap()
        .unwrap();
    assert!(node(WatchEventKind::Created, &got).is_some());
    assert!(start.elapsed() >= Duration::from_millis(100));
}

/// Five clients race for an ephemeral `/leader`; exactly one wins. When the winner's session
/// expires, the others see the deletion and exactly one of them wins the next round.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_clients_elect_one_leader_and_re_elect_after_expiry() {
    let server = MemServer::manual();
    let clients: Vec<Arc<MemClient>> = (0..5).map(|_| Arc::new(server.connect(TIMEOUT))).collect();
    let leader = p("/leader");
    let mut streams = Vec::new();
    for c in &clients {
        streams.push(c.watch(&p("/")).await.unwrap());
    }

    async fn race(clients: &[Arc<MemClient>], leader: &NodePath) -> Vec<usize> {
        let mut tasks = Vec::new();
        for (i, c) in clients.iter().enumerate() {
            let c = Arc::clone(c);
            let leader = leader.clone();
            tasks.push(tokio::spawn(async move {
                let r = c
                    .create(&leader, i.to_string().into_bytes(), CreateMode::Ephemeral)
                    .await;
                (i, r)
            }));
        }
        let mut winners = Vec::new();
        for t in tasks {
            match t.await.unwrap() {
                (i, Ok(_)) => winners.push(i),
                (_, Err(RegistryError::NodeExists(_))) => {}
                (_, Err(e)) => panic!("unexpected {e}"),
            }
        }
        winners
    }

    let first = race(&clients, &leader).await;
    assert_eq!(first.len(), 1, "exactly one leader: {first:?}");
    let winner = first[0];
    let data = clients[0].get(&leader).await.unwrap().unwrap();
    assert_eq!(data.text(), Some(winner.to_string().as_str()));
    let old = sid(&clients[winner]);
    assert_eq!(data.stat.ephemeral_owner, Some(old));

    server.expire_session(old);
    // Every other client sees the leader created and then deleted.
    for (i, s) in streams.iter_mut().enumerate().filter(|(i, _)| *i != winner) {
        assert!(
            node(WatchEventKind::Created, &next(s).await).is_some(),
            "client {i}"
        );
        assert_eq!(
            node(WatchEventKind::Deleted, &next(s).await).unwrap().path,
            leader
        );
    }
    let others: Vec<Arc<MemClient>> = clients
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != winner)
        .map(|(_, c)| Arc::clone(c))
        .collect();
    let second = race(&others, &leader).await;
    assert_eq!(second.len(), 1, "exactly one new leader: {second:?}");
    let owner = clients[0]
        .get(&leader)
        .await
        .unwrap()
        .unwrap()
        .stat
        .ephemeral_owner;
    assert_eq!(owner, Some(sid(&others[second[0]])));
    // The old winner carries on with a new session and can compete again.
    assert_ne!(sid(&clients[winner]), old);
    assert_eq!(
        clients[winner]
            .create(&leader, vec![], CreateMode::Ephemeral)
            .await,
        Err(RegistryError::NodeExists(leader.clone()))
    );
    server.with_store(|s, _| s.check_invariants()).unwrap();
}

/// Waiting streams and the timer thread must not wake each other in a loop while a deadline is
/// pending (system clock): measured as this process's CPU time.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_for_a_deadline_does_not_spin() {
    fn cpu_ticks() -> u64 {
        let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
        let fields: Vec<&str> = stat
            .rsplit(')')
            .next()
            .unwrap()
            .split_whitespace()
            .collect();
        fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
    }
    let server = MemServer::default();
    let a = server.connect(Duration::from_millis(1500));
    let b = server.connect(TIMEOUT);
    let mut first = b.watch(&p("/")).await.unwrap();
    let mut second = b.watch(&p("/")).await.unwrap();
    server.kill(sid(&a));
    let before = cpu_ticks();
    let waiters = [
        tokio::spawn(async move { first.next().await }),
        tokio::spawn(async move { second.next().await }),
    ];
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let used = cpu_ticks() - before;
    assert!(used < 30, "{used} ticks of CPU in 1 s of waiting");
    for w in waiters {
        w.abort();
    }
}
