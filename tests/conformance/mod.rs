//! The registry conformance suite: the same checks against every backend.
//!
//! A backend harness ([`Backend`]) gives fresh clients with their own sessions in a namespace
//! of their own (so tests can share one server), a way to make a client's session expire on the
//! server, and a way to cut a client off and let it reconnect. `conformance_tests!` turns every
//! check into a `#[tokio::test]` of the including test file.

#![allow(dead_code)]

use std::time::Duration;

use async_trait::async_trait;
use shardjob::core::registry::{
    Check, CreateMode, ErrorClass, EventStream, NodePath, PathError, Registry, RegistryError,
    RegistryEvent, Revision, SessionEvent, TxnOp, TxnOpResult, Version, WatchEvent, WatchEventKind,
};

/// How long a test waits for an event that must come: generous, so that a loaded machine
/// (a slow server, a starved client) does not fail a test that would pass given time.
pub const EVENT_WAIT: Duration = Duration::from_secs(30);

/// A backend under test.
#[async_trait]
pub trait Backend: Send + Sync {
    /// A new client (its own session) in namespace `ns`; clients of one namespace see each
    /// other's nodes.
    async fn client(&self, ns: &str) -> Box<dyn Registry>;
    /// Makes the registry end `client`'s current session as if it had timed out.
    async fn expire(&self, client: &dyn Registry);
    /// Cuts every client off from the registry for a moment shorter than the session timeout
    /// (a server restart, or a suspension of the client), and returns once they can reach it
    /// again. `client` is the one whose stream the test watches.
    async fn interrupt(&self, client: &dyn Registry);
    /// The session timeout of the clients.
    fn session_timeout(&self) -> Duration;
    /// Whether the registry limits the size of requests (the in-memory one does not).
    fn limits_sizes(&self) -> bool {
        true
    }
}

pub fn p(s: &str) -> NodePath {
    NodePath::new(s).unwrap()
}

/// The next event within [`EVENT_WAIT`].
pub async fn next(stream: &mut Box<dyn EventStream>) -> RegistryEvent {
    tokio::time::timeout(EVENT_WAIT, stream.next())
        .await
        .expect("no event within the wait")
        .expect("the stream ended")
}

/// The next node event, skipping session events.
pub async fn next_node(stream: &mut Box<dyn EventStream>) -> WatchEvent {
    loop {
        if let RegistryEvent::Node(e) = next(stream).await {
            return e;
        }
    }
}

/// Whether nothing arrives within `d`.
pub async fn quiet(stream: &mut Box<dyn EventStream>, d: Duration) -> Option<RegistryEvent> {
    tokio::time::timeout(d, stream.next()).await.ok().flatten()
}

fn cause(e: &RegistryError) -> &RegistryError {
    e.root_cause()
}

fn aborted_at(e: &RegistryError) -> usize {
    match e {
        RegistryError::TxnAborted { index, .. } => *index,
        other => panic!("expected TxnAborted, got {other:?}"),
    }
}

/// Polls `f` until it is true or `d` passes.
pub async fn eventually<F, Fut>(d: Duration, mut f: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + d;
    loop {
        if f().await {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

// ---------------------------------------------------------------------------------------------

pub async fn crud_with_versions(b: &dyn Backend) {
    let c = b.client("crud").await;
    let a = p("/a");
    assert_eq!(c.get(&a).await.unwrap(), None);
    let s0 = c
        .create(&a, b"one".to_vec(), CreateMode::Persistent)
        .await
        .unwrap();
    assert_eq!(s0.created, s0.modified);
    assert_eq!(s0.ephemeral_owner, None);
    let n = c.get(&a).await.unwrap().unwrap();
    assert_eq!(
        (n.path.clone(), n.data.clone(), n.stat),
        (a.clone(), b"one".to_vec(), s0)
    );
    assert_eq!(n.text(), Some("one"));

    let e = c
        .create(&a, Vec::new(), CreateMode::Persistent)
        .await
        .unwrap_err();
    assert_eq!(e, RegistryError::NodeExists(a.clone()));
    assert_eq!(e.class(), ErrorClass::Conflict);

    let s1 = c.set(&a, b"two".to_vec(), Some(s0.version)).await.unwrap();
    assert_ne!(s1.version, s0.version);
    assert_eq!(s1.created, s0.created);
    assert!(s1.modified > s0.modified);
    let e = c
        .set(&a, b"three".to_vec(), Some(s0.version))
        .await
        .unwrap_err();
    assert!(
        matches!(e, RegistryError::BadVersion { ref path, expected } if *path == a && expected == s0.version),
        "{e:?}"
    );
    let s2 = c.set(&a, b"three".to_vec(), None).await.unwrap();
    assert_eq!(c.get(&a).await.unwrap().unwrap().data, b"three");
    assert_eq!(c.get(&a).await.unwrap().unwrap().stat, s2);

    // Hierarchy: a create needs its parent, a delete needs no children.
    let e = c
        .create(&p("/missing/child"), Vec::new(), CreateMode::Persistent)
        .await
        .unwrap_err();
    assert_eq!(e, RegistryError::NoNode(p("/missing")));
    c.create(&p("/a/b"), b"x".to_vec(), CreateMode::Persistent)
        .await
        .unwrap();
    assert_eq!(
        c.delete(&a, None).await.unwrap_err(),
        RegistryError::NotEmpty(a.clone())
    );
    let eph = c
        .create(&p("/a/e"), Vec::new(), CreateMode::Ephemeral)
        .await
        .unwrap();
    assert_eq!(eph.ephemeral_owner, Some(c.session().unwrap().id));
    let e = c
        .create(&p("/a/e/x"), Vec::new(), CreateMode::Persistent)
        .await
        .unwrap_err();
    assert_eq!(e, RegistryError::NoChildrenForEphemerals(p("/a/e")));
    assert_eq!(e.class(), ErrorClass::Fatal);

    // Deletes, conditional and not.
    let e = c
        .delete(&p("/a/b"), Some(Version(12345)))
        .await
        .unwrap_err();
    assert!(matches!(e, RegistryError::BadVersion { .. }), "{e:?}");
    let b_stat = c.get(&p("/a/b")).await.unwrap().unwrap().stat;
    c.delete(&p("/a/b"), Some(b_stat.version)).await.unwrap();
    c.delete(&p("/a/e"), None).await.unwrap();
    assert_eq!(
        c.delete(&p("/a/b"), None).await.unwrap_err(),
        RegistryError::NoNode(p("/a/b"))
    );
    assert_eq!(
        c.set(&p("/a/b"), Vec::new(), None).await.unwrap_err(),
        RegistryError::NoNode(p("/a/b"))
    );
    c.delete(&a, None).await.unwrap();
    assert_eq!(c.get(&a).await.unwrap(), None);

    // A node created again gets a higher revision.
    let again = c
        .create(&a, Vec::new(), CreateMode::Persistent)
        .await
        .unwrap();
    assert!(again.created > s2.modified);

    // The root exists and stays.
    assert!(c.get(&NodePath::root()).await.unwrap().is_some());
    assert_eq!(
        c.create(&NodePath::root(), Vec::new(), CreateMode::Persistent)
            .await
            .unwrap_err(),
        RegistryError::NodeExists(NodePath::root())
    );
    assert!(c.delete(&NodePath::root(), None).await.is_err());

    // The default helpers.
    c.ensure_path(&p("/deep/er/path")).await.unwrap();
    c.ensure_path(&p("/deep/er/path")).await.unwrap();
    let tree = c.get_tree(&p("/deep")).await.unwrap();
    let paths: Vec<&str> = tree.iter().map(|n| n.path.as_str()).collect();
    assert_eq!(paths, ["/deep", "/deep/er", "/deep/er/path"]);
    c.delete_tree(&p("/deep")).await.unwrap();
    assert_eq!(c.get(&p("/deep")).await.unwrap(), None);
    assert_eq!(c.get_tree(&p("/deep")).await.unwrap(), Vec::new());
    c.close().await.unwrap();
}

pub async fn children_listing(b: &dyn Backend) {
    let c = b.client("children").await;
    c.create(&p("/dir"), Vec::new(), CreateMode::Persistent)
        .await
        .unwrap();
    assert_eq!(c.children(&p("/dir")).await.unwrap(), Vec::<String>::new());
    for name in ["b", "a", "B", "a-b", "a.b", "zz", "ä"] {
        c.create(
            &p(&format!("/dir/{name}")),
            Vec::new(),
            CreateMode::Persistent,
        )
        .await
        .unwrap();
    }
    // Grandchildren and look-alike siblings are not children.
    c.create(&p("/dir/a/deep"), Vec::new(), CreateMode::Persistent)
        .await
        .unwrap();
    c.create(&p("/dir2"), Vec::new(), CreateMode::Persistent)
        .await
        .unwrap();
    c.create(&p("/dir2/x"), Vec::new(), CreateMode::Persistent)
        .await
        .unwrap();
    c.create(&p("/dir/e"), Vec::new(), CreateMode::Ephemeral)
        .await
        .unwrap();
    assert_eq!(
        c.children(&p("/dir")).await.unwrap(),
        ["B", "a", "a-b", "a.b", "b", "e", "zz", "ä"]
    );
    assert_eq!(c.children(&p("/dir/a")).await.unwrap(), ["deep"]);
    assert_eq!(
        c.children(&p("/nope")).await.unwrap_err(),
        RegistryError::NoNode(p("/nope"))
    );
    let top = c.children(&NodePath::root()).await.unwrap();
    assert!(
        top.contains(&"dir".to_owned()) && top.contains(&"dir2".to_owned()),
        "{top:?}"
    );
    c.close().await.unwrap();
}

pub async fn ephemeral_nodes_vanish_on_close(b: &dyn Backend) {
    let a = b.client("eph-close").await;
    let watcher = b.client("eph-close").await;
    let mut events = watcher.watch(&NodePath::root()).await.unwrap();
    a.create(&p("/owner"), Vec::new(), CreateMode::Persistent)
        .await
        .unwrap();
    let stat = a
        .create(&p("/owner/x"), b"a".to_vec(), CreateMode::Ephemeral)
        .await
        .unwrap();
    assert_eq!(stat.ephemeral_owner, Some(a.session().unwrap().id));
    // A persistent node's event and reads say no session holds it; an ephemeral node's, which
    // one (shardjob tells a node written by hand from an instance's by this alone).
    let persistent = next_node(&mut events).await;
    assert_eq!(persistent.path, p("/owner"));
    assert_eq!(persistent.stat.unwrap().ephemeral_owner, None);
    let created = next_node(&mut events).await;
    assert_eq!(
        (created.kind, created.path.clone()),
        (WatchEventKind::Created, p("/owner/x"))
    );
    assert_eq!(created.stat.unwrap().ephemeral_owner, stat.ephemeral_owner);
    let tree = a.get_tree(&p("/owner")).await.unwrap();
    let owners: Vec<_> = tree
        .iter()
        .map(|n| (n.path.to_string(), n.stat.ephemeral_owner))
        .collect();
    assert_eq!(
        owners,
        [
            ("/owner".to_owned(), None),
            ("/owner/x".to_owned(), stat.ephemeral_owner)
        ]
    );

    a.close().await.unwrap();
    let deleted = next_node(&mut events).await;
    assert_eq!(
        (deleted.kind, deleted.path),
        (WatchEventKind::Deleted, p("/owner/x"))
    );
    assert_eq!(watcher.get(&p("/owner/x")).await.unwrap(), None);
    assert!(
        watcher.get(&p("/owner")).await.unwrap().is_some(),
        "persistent nodes stay"
    );
    assert_eq!(a.session(), None);
    let e = a.get(&p("/owner")).await.unwrap_err();
    assert_eq!(e, RegistryError::Closed);
    a.close().await.unwrap();
    watcher.close().await.unwrap();
}

pub async fn ephemeral_nodes_vanish_on_expiry(b: &dyn Backend) {
    let a = b.client("eph-expiry").await;
    let watcher = b.client("eph-expiry").await;
    let mut theirs = watcher.watch(&NodePath::root()).await.unwrap();
    let mut mine = a.watch(&NodePath::root()).await.unwrap();
    let old = a.session().unwrap();
    a.create(&p("/leader"), b"a".to_vec(), CreateMode::Ephemeral)
        .await
        .unwrap();
    assert_eq!(next_node(&mut theirs).await.kind, WatchEventKind::Created);
    assert_eq!(next_node(&mut mine).await.kind, WatchEventKind::Created);

    let t = std::time::Instant::now();
    b.expire(a.as_ref()).await;
    let deleted = next_node(&mut theirs).await;
    assert_eq!(
        (deleted.kind, deleted.path),
        (WatchEventKind::Deleted, p("/leader"))
    );
    eprintln!(
        "ephemeral node gone {:?} after the expiry was forced",
        t.elapsed()
    );

    // The owner learns of the expiry and gets a new session.
    let mut saw_expired = false;
    let new = loop {
        match next(&mut mine).await {
            RegistryEvent::Session(SessionEvent::Expired(id)) => {
                assert_eq!(id, old.id);
                saw_expired = true;
            }
            RegistryEvent::Session(SessionEvent::Connected(info)) => {
                assert!(saw_expired, "Connected before Expired");
                break info;
            }
            // Suspended/Reconnected may come first; the deletion of the own node may come.
            RegistryEvent::Session(_) | RegistryEvent::Node(_) => {}
        }
    };
    eprintln!("new session {:?} after {:?}", new.id, t.elapsed());
    assert_ne!(new.id, old.id);
    assert!(
        eventually(EVENT_WAIT, || async {
            a.session().map(|s| s.id) == Some(new.id)
        })
        .await
    );
    // The client carries on in the new session, and its stream follows the new session.
    let stat = a
        .create(&p("/leader"), b"a2".to_vec(), CreateMode::Ephemeral)
        .await
        .unwrap();
    assert_eq!(stat.ephemeral_owner, Some(new.id));
    let e = a
        .transact(vec![
            TxnOp::Check(Check::Session(old.id)),
            TxnOp::set(p("/leader"), "x"),
        ])
        .await
        .unwrap_err();
    assert_eq!(aborted_at(&e), 0);
    assert!(
        matches!(cause(&e), RegistryError::SessionMismatch { expected, .. } if *expected == old.id),
        "{e:?}"
    );
    assert_eq!(e.class(), ErrorClass::LostSession);
    let created = next_node(&mut mine).await;
    assert_eq!(
        (created.kind, created.path),
        (WatchEventKind::Created, p("/leader"))
    );
    a.close().await.unwrap();
    watcher.close().await.unwrap();
}

pub async fn transactions_are_all_or_nothing(b: &dyn Backend) {
    let c = b.client("txn").await;
    let results = c
        .transact(vec![
            TxnOp::create(p("/t"), "t"),
            TxnOp::create(p("/t/a"), "a"),
            TxnOp::set(p("/t/a"), "a2"),
            TxnOp::create_ephemeral(p("/t/e"), "e"),
        ])
        .await
        .unwrap();
    assert_eq!(results.len(), 4);
    let (
        TxnOpResult::Created(t),
        TxnOpResult::Created(a0),
        TxnOpResult::Set(a1),
        TxnOpResult::Created(e),
    ) = (&results[0], &results[1], &results[2], &results[3])
    else {
        panic!("{results:?}");
    };
    // One transaction, one revision (ZooKeeper: zxids of one multi are consecutive at least).
    assert!(t.created <= a0.created && a0.created <= a1.modified);
    assert_eq!(a1.created, a0.created);
    // No check that the set gave a new version: on etcd all writes of a transaction share its
    // revision, which is the version.
    assert_eq!(e.ephemeral_owner, Some(c.session().unwrap().id));
    assert_eq!(c.get(&p("/t/a")).await.unwrap().unwrap().data, b"a2");

    // A failure in the middle leaves nothing behind.
    let e = c
        .transact(vec![
            TxnOp::create(p("/t/b"), "b"),
            TxnOp::set(p("/t/a"), "changed"),
            TxnOp::delete(p("/t/missing")),
            TxnOp::create(p("/t/c"), "c"),
        ])
        .await
        .unwrap_err();
    assert_eq!(aborted_at(&e), 2);
    assert_eq!(cause(&e), &RegistryError::NoNode(p("/t/missing")));
    assert_eq!(e.class(), ErrorClass::Conflict);
    assert_eq!(c.get(&p("/t/b")).await.unwrap(), None);
    assert_eq!(c.get(&p("/t/a")).await.unwrap().unwrap().data, b"a2");
    assert_eq!(c.get(&p("/t/c")).await.unwrap(), None);

    // Each operation's own failure, at its index.
    let stale = c.get(&p("/t/a")).await.unwrap().unwrap().stat.version;
    c.set(&p("/t/a"), b"a2".to_vec(), None).await.unwrap();
    let cases: Vec<(Vec<TxnOp>, usize, RegistryError)> = vec![
        (
            vec![TxnOp::create(p("/t/x"), ""), TxnOp::create(p("/t/a"), "")],
            1,
            RegistryError::NodeExists(p("/t/a")),
        ),
        (
            vec![TxnOp::create(p("/t/no/x"), "")],
            0,
            RegistryError::NoNode(p("/t/no")),
        ),
        (
            vec![TxnOp::create(p("/t/x"), ""), TxnOp::delete(p("/t"))],
            1,
            RegistryError::NotEmpty(p("/t")),
        ),
        (
            vec![TxnOp::Set {
                path: p("/t/a"),
                data: Vec::new(),
                expected: Some(stale),
            }],
            0,
            RegistryError::BadVersion {
                path: p("/t/a"),
                expected: stale,
            },
        ),
        (
            vec![TxnOp::create(p("/t/e/x"), "")],
            0,
            RegistryError::NoChildrenForEphemerals(p("/t/e")),
        ),
    ];
    for (ops, index, want) in cases {
        let e = c.transact(ops.clone()).await.unwrap_err();
        assert_eq!((aborted_at(&e), cause(&e)), (index, &want), "{ops:?}");
    }
    assert_eq!(c.children(&p("/t")).await.unwrap(), ["a", "e"]);

    // Operations see the effects of earlier ones.
    c.transact(vec![
        TxnOp::create(p("/t/n"), "1"),
        TxnOp::Check(Check::Value(p("/t/n"), b"1".to_vec())),
        TxnOp::set(p("/t/n"), "2"),
        TxnOp::Check(Check::Value(p("/t/n"), b"2".to_vec())),
        TxnOp::create(p("/t/n/m"), ""),
        TxnOp::delete(p("/t/n/m")),
        TxnOp::Check(Check::Absent(p("/t/n/m"))),
    ])
    .await
    .unwrap();
    assert_eq!(c.get(&p("/t/n")).await.unwrap().unwrap().data, b"2");
    assert_eq!(c.transact(Vec::new()).await.unwrap(), Vec::new());
    c.close().await.unwrap();
}

pub async fn transaction_checks(b: &dyn Backend) {
    let c = b.client("checks").await;
    let other = b.client("checks").await;
    c.create(&p("/k"), b"v".to_vec(), CreateMode::Persistent)
        .await
        .unwrap();
    let k = c.get(&p("/k")).await.unwrap().unwrap().stat;
    let sid = c.session().unwrap().id;
    let ok = |check: Check| {
        vec![
            TxnOp::Check(check),
            TxnOp::create(p("/k/made"), ""),
            TxnOp::delete(p("/k/made")),
        ]
    };

    // Every kind, holding.
    for check in [
        Check::Exists(p("/k")),
        Check::Exists(NodePath::root()),
        Check::Absent(p("/k/none")),
        Check::Absent(p("/none/deeper/still")),
        Check::Version(p("/k"), k.version),
        Check::Value(p("/k"), b"v".to_vec()),
        Check::Session(sid),
    ] {
        let r = c
            .transact(ok(check.clone()))
            .await
            .unwrap_or_else(|e| panic!("{check:?}: {e:?}"));
        assert_eq!(r[0], TxnOpResult::Checked, "{check:?}");
    }
    // A transaction of checks only.
    let r = c
        .transact(vec![
            TxnOp::Check(Check::Session(sid)),
            TxnOp::Check(Check::Absent(p("/k/x"))),
        ])
        .await
        .unwrap();
    assert_eq!(r, [TxnOpResult::Checked, TxnOpResult::Checked]);
    // A check that holds leaves no trace (no node, no event, no version change).
    assert_eq!(c.children(&p("/k")).await.unwrap(), Vec::<String>::new());
    assert_eq!(c.get(&p("/k")).await.unwrap().unwrap().stat, k);
    assert_eq!(c.get(&p("/none")).await.unwrap(), None);

    // Every kind, failing, and nothing applied.
    let failing: Vec<(Check, RegistryError)> = vec![
        (
            Check::Exists(p("/k/none")),
            RegistryError::NoNode(p("/k/none")),
        ),
        (Check::Absent(p("/k")), RegistryError::NodeExists(p("/k"))),
        (
            Check::Version(p("/k"), Version(k.version.0 + 7)),
            RegistryError::BadVersion {
                path: p("/k"),
                expected: Version(k.version.0 + 7),
            },
        ),
        (
            Check::Version(p("/k/none"), k.version),
            RegistryError::NoNode(p("/k/none")),
        ),
        (
            Check::Value(p("/k"), b"w".to_vec()),
            RegistryError::ValueMismatch(p("/k")),
        ),
        (
            Check::Value(p("/k/none"), b"v".to_vec()),
            RegistryError::NoNode(p("/k/none")),
        ),
    ];
    for (check, want) in failing {
        let ops = vec![TxnOp::create(p("/k/side"), ""), TxnOp::Check(check.clone())];
        let e = c.transact(ops).await.unwrap_err();
        assert_eq!((aborted_at(&e), cause(&e)), (1, &want), "{check:?}");
        assert_eq!(
            c.get(&p("/k/side")).await.unwrap(),
            None,
            "{check:?} applied a write"
        );
    }
    let other_sid = other.session().unwrap().id;
    let e = c
        .transact(vec![
            TxnOp::Check(Check::Session(other_sid)),
            TxnOp::create_ephemeral(p("/k/eph"), ""),
        ])
        .await
        .unwrap_err();
    assert_eq!(aborted_at(&e), 0);
    assert!(
        matches!(cause(&e), RegistryError::SessionMismatch { expected, actual } if *expected == other_sid && *actual == Some(sid)),
        "{e:?}"
    );
    assert_eq!(c.get(&p("/k/eph")).await.unwrap(), None);

    // A Value check sees a change made by another client.
    other.set(&p("/k"), b"w".to_vec(), None).await.unwrap();
    let e = c
        .transact(vec![TxnOp::Check(Check::Value(p("/k"), b"v".to_vec()))])
        .await
        .unwrap_err();
    assert_eq!(cause(&e), &RegistryError::ValueMismatch(p("/k")));
    c.transact(vec![TxnOp::Check(Check::Value(p("/k"), b"w".to_vec()))])
        .await
        .unwrap();
    // An Absent check sees a node created by another client, also under a new parent.
    other.ensure_path(&p("/none/deeper/still")).await.unwrap();
    let e = c
        .transact(vec![TxnOp::Check(Check::Absent(p("/none/deeper/still")))])
        .await
        .unwrap_err();
    assert_eq!(
        cause(&e),
        &RegistryError::NodeExists(p("/none/deeper/still"))
    );
    c.transact(vec![TxnOp::Check(Check::Absent(p("/none/deeper/still/x")))])
        .await
        .unwrap();
    // Absent under an ephemeral parent holds.
    other
        .create(&p("/k/eph"), Vec::new(), CreateMode::Ephemeral)
        .await
        .unwrap();
    c.transact(vec![TxnOp::Check(Check::Absent(p("/k/eph/child")))])
        .await
        .unwrap();
    c.close().await.unwrap();
    other.close().await.unwrap();
}

pub async fn watches_deliver_changes_in_order(b: &dyn Backend) {
    let c = b.client("watch").await;
    let w = b.client("watch").await;
    c.create(&p("/jobs"), Vec::new(), CreateMode::Persistent)
        .await
        .unwrap();
    c.create(&p("/other"), Vec::new(), CreateMode::Persistent)
        .await
        .unwrap();
    let mut all = w.watch(&NodePath::root()).await.unwrap();
    let mut jobs = w.watch(&p("/jobs")).await.unwrap();

    // One change at a time: kind, path, data and stat are exact.
    let created = c
        .create(&p("/jobs/j"), b"1".to_vec(), CreateMode::Persistent)
        .await
        .unwrap();
    let set = c.set(&p("/jobs/j"), b"2".to_vec(), None).await.unwrap();
    for stream in [&mut all, &mut jobs] {
        let e = next_node(stream).await;
        assert_eq!(
            (e.kind, e.path.clone()),
            (WatchEventKind::Created, p("/jobs/j"))
        );
        assert!(e.stat.is_some_and(|s| s.created == created.created));
        let e = next_node(stream).await;
        assert_eq!(
            (e.kind, e.path.clone(), e.data.clone(), e.stat),
            (
                WatchEventKind::Changed,
                p("/jobs/j"),
                b"2".to_vec(),
                Some(set)
            )
        );
    }
    c.delete(&p("/jobs/j"), None).await.unwrap();
    for stream in [&mut all, &mut jobs] {
        let e = next_node(stream).await;
        assert_eq!(
            (e.kind, e.path.clone(), e.data.clone(), e.stat),
            (WatchEventKind::Deleted, p("/jobs/j"), Vec::new(), None)
        );
    }

    // A burst per kind of change (ZooKeeper notifications carry no data: a change whose node
    // is deleted before the stream reads it shows only as the deletion, so the phases do not
    // overlap): every change arrives, in order; a watch sees only its subtree.
    c.create(&p("/other/x"), Vec::new(), CreateMode::Persistent)
        .await
        .unwrap();
    let e = next_node(&mut all).await;
    assert_eq!((e.kind, e.path), (WatchEventKind::Created, p("/other/x")));
    let n = 100;
    let name = |i: usize| format!("/jobs/n{i:03}");
    for kind in [
        WatchEventKind::Created,
        WatchEventKind::Changed,
        WatchEventKind::Deleted,
    ] {
        match kind {
            WatchEventKind::Created => {
                for i in 0..n {
                    c.create(
                        &p(&name(i)),
                        format!("{i}").into_bytes(),
                        CreateMode::Persistent,
                    )
                    .await
                    .unwrap();
                }
            }
            WatchEventKind::Changed => {
                for i in 0..n {
                    c.set(&p(&name(i)), b"changed".to_vec(), None)
                        .await
                        .unwrap();
                }
            }
            WatchEventKind::Deleted => {
                for chunk in (0..n).collect::<Vec<_>>().chunks(20) {
                    c.transact(chunk.iter().map(|i| TxnOp::delete(p(&name(*i)))).collect())
                        .await
                        .unwrap();
                }
            }
        }
        for stream in [&mut all, &mut jobs] {
            for i in 0..n {
                let e = next_node(stream).await;
                assert_eq!((e.kind, e.path.as_str()), (kind, name(i).as_str()));
                if kind == WatchEventKind::Changed {
                    assert_eq!(e.data, b"changed");
                }
            }
        }
    }
    assert_eq!(quiet(&mut jobs, Duration::from_millis(300)).await, None);

    // A watch of a node that does not exist yet sees its creation.
    let mut later = w.watch(&p("/later")).await.unwrap();
    c.create(&p("/later"), b"l".to_vec(), CreateMode::Persistent)
        .await
        .unwrap();
    let e = next_node(&mut later).await;
    assert_eq!(
        (e.kind, e.path, e.data),
        (WatchEventKind::Created, p("/later"), b"l".to_vec())
    );
    drop(later);
    c.close().await.unwrap();
    w.close().await.unwrap();
}

/// The events of a client's own writes carry the data and stat each write left, even when
/// more writes to the node follow at once (a ZooKeeper stream takes them from the write's
/// answer instead of reading the node back, which could show a later write); a refused write
/// of the client gives no event and does not stand in for another client's change; an event
/// of another client's change between two of the client's own carries a state at or after
/// that change, never an older one; a transaction's checks give no event.
pub async fn own_writes_events_carry_their_data_and_version(b: &dyn Backend) {
    let w = b.client("own").await;
    let c = b.client("own").await;
    w.create(&p("/j"), Vec::new(), CreateMode::Persistent)
        .await
        .unwrap();
    let mut events = w.watch(&p("/j")).await.unwrap();

    // The client's own writes, one right after the other, no event awaited in between.
    let a1 = w
        .create(&p("/j/a"), b"1".to_vec(), CreateMode::Persistent)
        .await
        .unwrap();
    let a2 = w
        .set(&p("/j/a"), b"2".to_vec(), Some(a1.version))
        .await
        .unwrap();
    let multi = w
        .transact(vec![
            TxnOp::Check(Check::Session(w.session().unwrap().id)),
            TxnOp::Check(Check::Absent(p("/j/absent"))),
            TxnOp::Check(Check::Value(p("/j/a"), b"2".to_vec())),
            TxnOp::set(p("/j/a"), "3"),
            TxnOp::create_ephemeral(p("/j/b"), "b"),
            TxnOp::create(p("/j/c"), "c"),
        ])
        .await
        .unwrap();
    let (TxnOpResult::Set(a3), TxnOpResult::Created(b0), TxnOpResult::Created(c0)) =
        (&multi[3], &multi[4], &multi[5])
    else {
        panic!("{multi:?}");
    };
    let b_deleted = w.delete(&p("/j/b"), Some(b0.version)).await;
    assert_eq!(b_deleted, Ok(()));
    let expected = [
        (WatchEventKind::Created, "/j/a", b"1".to_vec(), Some(a1)),
        (WatchEventKind::Changed, "/j/a", b"2".to_vec(), Some(a2)),
        (WatchEventKind::Changed, "/j/a", b"3".to_vec(), Some(*a3)),
        (WatchEventKind::Created, "/j/b", b"b".to_vec(), Some(*b0)),
        (WatchEventKind::Created, "/j/c", b"c".to_vec(), Some(*c0)),
        (WatchEventKind::Deleted, "/j/b", Vec::new(), None),
    ];
    for (i, want) in expected.into_iter().enumerate() {
        let e = next_node(&mut events).await;
        assert_eq!((e.kind, e.path.as_str(), e.data, e.stat), want, "event {i}");
    }
    // The node an Absent check named (ZooKeeper: created and deleted by the transaction),
    // created by another client: its event shows it.
    let absent = c
        .create(&p("/j/absent"), b"x".to_vec(), CreateMode::Persistent)
        .await
        .unwrap();
    let e = next_node(&mut events).await;
    assert_eq!(
        (e.kind, e.path.as_str(), e.data, e.stat),
        (
            WatchEventKind::Created,
            "/j/absent",
            b"x".to_vec(),
            Some(absent)
        )
    );

    // Refused writes of the client, then another client's change, then the client's own.
    let refused = w
        .set(&p("/j/a"), b"refused".to_vec(), Some(a1.version))
        .await
        .unwrap_err();
    assert!(
        matches!(cause(&refused), RegistryError::BadVersion { .. }),
        "{refused:?}"
    );
    let refused = w
        .transact(vec![
            TxnOp::set(p("/j/a"), "refused"),
            TxnOp::Check(Check::Version(p("/j/a"), a1.version)),
        ])
        .await
        .unwrap_err();
    assert_eq!(aborted_at(&refused), 1);
    let a4 = c.set(&p("/j/a"), b"4".to_vec(), None).await.unwrap();
    let a5 = w
        .set(&p("/j/a"), b"5".to_vec(), Some(a4.version))
        .await
        .unwrap();
    let a6 = c.set(&p("/j/a"), b"6".to_vec(), None).await.unwrap();
    // Each event shows a state at or after its change, and none older than the one before.
    let states = [
        (b"4".to_vec(), a4),
        (b"5".to_vec(), a5),
        (b"6".to_vec(), a6),
    ];
    let mut at = 0;
    for i in 0..3 {
        let e = next_node(&mut events).await;
        assert_eq!((e.kind, e.path.as_str()), (WatchEventKind::Changed, "/j/a"));
        let Some(k) = states
            .iter()
            .position(|(data, stat)| e.data == *data && e.stat == Some(*stat))
        else {
            panic!("event {i} of /j/a shows no state of the node: {e:?}");
        };
        assert!(k >= i && k >= at, "event {i} shows state {k}, after {at}");
        at = k;
    }
    assert_eq!(at, 2, "the last event shows the last change");
    assert_eq!(quiet(&mut events, Duration::from_millis(300)).await, None);

    // Writes sent together, each before the one before is answered: every event still shows
    // its own write's data and stat (a read after the first notification would show a later
    // one).
    let n = 20;
    let writes = (0..n).map(|i| {
        let w = &w;
        async move {
            let data = format!("p{i}").into_bytes();
            let stat = w.set(&p("/j/a"), data.clone(), None).await.unwrap();
            (data, stat)
        }
    });
    let mut applied = futures_util::future::join_all(writes).await;
    applied.sort_by_key(|(_, stat)| stat.modified);
    for (i, (data, stat)) in applied.into_iter().enumerate() {
        let e = next_node(&mut events).await;
        assert_eq!(
            (e.kind, e.path.as_str(), e.data, e.stat),
            (WatchEventKind::Changed, "/j/a", data, Some(stat)),
            "pipelined write {i}"
        );
    }
    w.close().await.unwrap();
    c.close().await.unwrap();
}

/// A tree read and the watch events agree on revisions, as the machine's cache needs to tell an
/// event already in a snapshot from a later one: a backend tells the revision of both or of
/// neither (ZooKeeper: neither); when it does, a change the read shows has an event at or below
/// the read's revision (whichever of the two arrives first), a change after the read has one
/// above it, a deletion's included, and the events' revisions grow.
pub async fn tree_reads_and_events_share_revisions(b: &dyn Backend) {
    let c = b.client("revisions").await;
    let w = b.client("revisions").await;
    for path in ["/t", "/t/gone"] {
        c.create(&p(path), Vec::new(), CreateMode::Persistent)
            .await
            .unwrap();
    }
    let mut events = w.watch(&p("/t")).await.unwrap();
    let a = c
        .create(&p("/t/a"), b"1".to_vec(), CreateMode::Persistent)
        .await
        .unwrap();
    c.delete(&p("/t/gone"), None).await.unwrap();
    // The read reflects both changes, whose events may not have arrived yet.
    let tree = w.read_tree(&p("/t")).await.unwrap();
    let paths: Vec<&str> = tree.nodes.iter().map(|n| n.path.as_str()).collect();
    assert_eq!(paths, ["/t", "/t/a"]);
    let before: Vec<WatchEvent> =
        [next_node(&mut events).await, next_node(&mut events).await].into();
    let kinds: Vec<(WatchEventKind, &str)> =
        before.iter().map(|e| (e.kind, e.path.as_str())).collect();
    assert_eq!(
        kinds,
        [
            (WatchEventKind::Created, "/t/a"),
            (WatchEventKind::Deleted, "/t/gone"),
        ]
    );
    // Changes after the read. The deletion waits for the change's event: on ZooKeeper a
    // change whose node is deleted before the stream reads it shows only as the deletion.
    let set = c.set(&p("/t/a"), b"2".to_vec(), None).await.unwrap();
    let changed = next_node(&mut events).await;
    c.delete(&p("/t/a"), None).await.unwrap();
    let after = [changed, next_node(&mut events).await];
    assert_eq!(
        (after[0].kind, after[1].kind),
        (WatchEventKind::Changed, WatchEventKind::Deleted)
    );
    let all: Vec<&WatchEvent> = before.iter().chain(after.iter()).collect();
    let Some(read_at) = tree.revision else {
        for e in &all {
            assert_eq!(
                e.revision, None,
                "an event with a revision, a read without: {e:?}"
            );
        }
        c.close().await.unwrap();
        w.close().await.unwrap();
        return;
    };
    let revisions: Vec<Revision> = all
        .iter()
        .map(|e| {
            e.revision
                .unwrap_or_else(|| panic!("a read with a revision, an event without: {e:?}"))
        })
        .collect();
    assert!(
        revisions.windows(2).all(|r| r[0] < r[1]),
        "the events' revisions grow: {revisions:?}"
    );
    assert_eq!(
        revisions[0], a.modified,
        "a creation's event has its node's revision"
    );
    assert_eq!(
        revisions[2], set.modified,
        "a change's event has its node's revision"
    );
    for (e, r) in before.iter().zip(&revisions) {
        assert!(*r <= read_at, "{e:?} is in the read at {read_at:?}");
    }
    for (e, r) in after.iter().zip(&revisions[2..]) {
        assert!(*r > read_at, "{e:?} came after the read at {read_at:?}");
    }
    for node in &tree.nodes {
        assert!(
            node.stat.modified <= read_at,
            "{node:?} read at {read_at:?}"
        );
    }
    // A later read is at the deletion's revision or above.
    let again = w.read_tree(&p("/t")).await.unwrap();
    assert!(again.revision.is_some_and(|r| r >= revisions[3]));
    assert_eq!(again.nodes.len(), 1);
    c.close().await.unwrap();
    w.close().await.unwrap();
}

pub async fn watches_resume_after_reconnect(b: &dyn Backend) {
    let c = b.client("reconnect").await;
    let w = b.client("reconnect").await;
    let mut events = w.watch(&NodePath::root()).await.unwrap();
    c.create(&p("/before"), Vec::new(), CreateMode::Persistent)
        .await
        .unwrap();
    let eph = w
        .create(&p("/mine"), Vec::new(), CreateMode::Ephemeral)
        .await
        .unwrap();
    assert_eq!(next_node(&mut events).await.path, p("/before"));
    assert_eq!(next_node(&mut events).await.path, p("/mine"));
    let sid = w.session().unwrap().id;

    let t = std::time::Instant::now();
    b.interrupt(w.as_ref()).await;
    eprintln!("interruption over after {:?}", t.elapsed());
    // The stream reports the cut and the reconnection; the session survives.
    let mut suspended = false;
    let mut reconnected = false;
    while !reconnected {
        let event = next(&mut events).await;
        eprintln!("{:?}: {event:?}", t.elapsed());
        match event {
            RegistryEvent::Session(SessionEvent::Suspended(id)) => {
                assert_eq!(id, sid);
                suspended = true;
            }
            RegistryEvent::Session(SessionEvent::Reconnected(id)) => {
                assert_eq!(id, sid);
                assert!(suspended, "Reconnected without Suspended");
                reconnected = true;
            }
            RegistryEvent::Session(other) => panic!("unexpected {other:?}"),
            RegistryEvent::Node(_) => {}
        }
    }
    // Every change after the reconnection arrives, in order.
    for i in 0..5 {
        loop {
            match c
                .create(
                    &p(&format!("/after{i}")),
                    Vec::new(),
                    CreateMode::Persistent,
                )
                .await
            {
                Ok(_) | Err(RegistryError::NodeExists(_)) => break,
                Err(e) if e.class() == ErrorClass::Transient => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => panic!("{e:?}"),
            }
        }
    }
    let mut seen = Vec::new();
    while seen.len() < 5 {
        match next(&mut events).await {
            RegistryEvent::Node(e) if e.path.as_str().starts_with("/after") => {
                assert_eq!(e.kind, WatchEventKind::Created);
                seen.push(e.path.as_str().to_owned());
            }
            RegistryEvent::Node(_) => {}
            RegistryEvent::Session(other) => panic!("unexpected {other:?}"),
        }
    }
    assert!(
        suspended && reconnected,
        "suspended {suspended}, reconnected {reconnected}"
    );
    assert_eq!(
        seen,
        ["/after0", "/after1", "/after2", "/after3", "/after4"]
    );
    assert_eq!(w.session().unwrap().id, sid);
    let node = w
        .get(&p("/mine"))
        .await
        .unwrap()
        .expect("the ephemeral node survived");
    assert_eq!(node.stat.ephemeral_owner, eph.ephemeral_owner);
    c.close().await.unwrap();
    w.close().await.unwrap();
}

pub async fn session_events(b: &dyn Backend) {
    let c = b.client("session").await;
    let info = c.session().expect("a session once connected");
    assert!(info.timeout > Duration::ZERO);
    assert!(
        info.timeout <= b.session_timeout() + Duration::from_secs(1),
        "{info:?}"
    );
    let mut events = c.watch(&NodePath::root()).await.unwrap();
    // Nothing happens on a quiet, healthy session.
    assert_eq!(quiet(&mut events, Duration::from_millis(200)).await, None);
    b.expire(c.as_ref()).await;
    let mut kinds = Vec::new();
    loop {
        match next(&mut events).await {
            RegistryEvent::Session(SessionEvent::Expired(id)) => {
                assert_eq!(id, info.id);
                kinds.push("expired");
            }
            RegistryEvent::Session(SessionEvent::Connected(new)) => {
                assert_ne!(new.id, info.id);
                kinds.push("connected");
                break;
            }
            RegistryEvent::Session(SessionEvent::Suspended(_)) => kinds.push("suspended"),
            RegistryEvent::Session(SessionEvent::Reconnected(_)) => kinds.push("reconnected"),
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(
        kinds.iter().filter(|k| **k == "expired").count(),
        1,
        "{kinds:?}"
    );
    assert_eq!(kinds.last(), Some(&"connected"));
    c.close().await.unwrap();
    let mut rest = Vec::new();
    while let Some(e) = tokio::time::timeout(EVENT_WAIT, events.next())
        .await
        .expect("the stream did not end")
    {
        rest.push(e);
    }
    assert_eq!(rest, [RegistryEvent::Session(SessionEvent::Closed)]);
    assert_eq!(c.session(), None);
}

pub async fn large_values_and_many_children(b: &dyn Backend) {
    let c = b.client("large").await;
    let w = b.client("large").await;
    let mut events = w.watch(&p("/big")).await.unwrap();
    let value: Vec<u8> = (0..500 * 1024).map(|i| (i % 251) as u8).collect();
    c.create(&p("/big"), value.clone(), CreateMode::Persistent)
        .await
        .unwrap();
    assert_eq!(c.get(&p("/big")).await.unwrap().unwrap().data, value);
    let e = next_node(&mut events).await;
    assert_eq!(e.data.len(), value.len());
    assert_eq!(e.data, value);
    let mut reversed = value.clone();
    reversed.reverse();
    c.set(&p("/big"), reversed.clone(), None).await.unwrap();
    assert_eq!(w.get(&p("/big")).await.unwrap().unwrap().data, reversed);

    c.create(&p("/many"), Vec::new(), CreateMode::Persistent)
        .await
        .unwrap();
    let n = 1000;
    for chunk in (0..n).collect::<Vec<_>>().chunks(50) {
        c.transact(
            chunk
                .iter()
                .map(|i| TxnOp::create(p(&format!("/many/c{i:04}")), format!("{i}")))
                .collect(),
        )
        .await
        .unwrap();
    }
    let names = w.children(&p("/many")).await.unwrap();
    assert_eq!(names.len(), n);
    assert!(names.windows(2).all(|w| w[0] < w[1]));
    assert_eq!(names[0], "c0000");
    let tree = w.get_tree(&p("/many")).await.unwrap();
    assert_eq!(tree.len(), n + 1);
    assert_eq!(tree[1].path, p("/many/c0000"));
    assert_eq!(tree[n].data, format!("{}", n - 1).into_bytes());
    c.delete_tree(&p("/many")).await.unwrap();
    assert_eq!(c.get(&p("/many")).await.unwrap(), None);
    c.close().await.unwrap();
    w.close().await.unwrap();
}

pub async fn invalid_paths_and_oversized_values(b: &dyn Backend) {
    for bad in [
        "", "a", "/a/", "/a//b", "/a/./b", "/a/../b", "/a\u{0}b", "/a\u{7}",
    ] {
        assert!(NodePath::new(bad).is_err(), "{bad:?}");
        let e = RegistryError::from(NodePath::new(bad).unwrap_err());
        assert_eq!(e.class(), ErrorClass::Fatal);
        assert!(!e.to_string().is_empty());
    }
    assert!(matches!(p("/a").join("b/c"), Err(PathError::BadName(_))));
    let c = b.client("oversized").await;
    if !b.limits_sizes() {
        c.close().await.unwrap();
        return;
    }
    let huge = vec![b'x'; 3 * 1024 * 1024];
    let e = c
        .create(&p("/huge"), huge.clone(), CreateMode::Persistent)
        .await
        .unwrap_err();
    assert!(matches!(e, RegistryError::TooLarge(_)), "{e:?}");
    assert_eq!(e.class(), ErrorClass::Fatal);
    assert!(e.to_string().contains("too large"), "{e}");
    let e = c
        .transact(
            (0..4)
                .map(|i| TxnOp::create(p(&format!("/h{i}")), vec![b'y'; 700 * 1024]))
                .collect(),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(e.root_cause(), RegistryError::TooLarge(_)),
        "{e:?}"
    );
    let e = c
        .transact(
            (0..1000)
                .map(|i| TxnOp::create(p(&format!("/m{i}")), Vec::new()))
                .collect(),
        )
        .await;
    if let Err(e) = e {
        // etcd refuses transactions of more than --max-txn-ops operations.
        assert!(
            matches!(e.root_cause(), RegistryError::TooLarge(_)),
            "{e:?}"
        );
    }
    // The client is still usable.
    c.create(&p("/fine"), b"ok".to_vec(), CreateMode::Persistent)
        .await
        .unwrap();
    assert_eq!(c.get(&p("/huge")).await.unwrap(), None);
    assert_eq!(c.get(&p("/h0")).await.unwrap(), None);
    c.close().await.unwrap();
}

/// A registry that says it stamps its writes with its clock ([`Registry::stamps_time`]) does:
/// the answer to a write, and a read of the node after, carry a modification time that is the
/// server's clock (the tests' servers run on this host: within a few seconds of its clock).
/// One that says it does not carries none, and the machine refuses `maxTimeDiffSeconds` on it.
pub async fn writes_carry_the_registry_s_time(b: &dyn Backend) {
    let c = b.client("mtime").await;
    let wall = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap()
    };
    let a = p("/t");
    c.create(&a, b"1".to_vec(), CreateMode::Persistent)
        .await
        .unwrap();
    let before = wall();
    let set = c
        .transact(vec![TxnOp::Set {
            path: a.clone(),
            data: b"2".to_vec(),
            expected: None,
        }])
        .await
        .unwrap();
    let after = wall();
    let Some(TxnOpResult::Set(stat)) = set.first() else {
        panic!("a set answered {set:?}");
    };
    let read = c.get(&a).await.unwrap().unwrap().stat;
    if c.stamps_time() {
        let t = stat
            .mtime_ms
            .expect("a set's answer carries the registry's time");
        assert!(
            (before - 5_000..=after + 5_000).contains(&t),
            "mtime {t} against this host's clock {before}..{after}"
        );
        assert_eq!(read.mtime_ms, Some(t), "a read shows the set's time");
    } else {
        assert_eq!((stat.mtime_ms, read.mtime_ms), (None, None));
    }
    c.close().await.unwrap();
}

/// One `#[tokio::test]` per conformance check, each with a harness from `$make` (an async
/// expression giving an `impl Backend`).
#[macro_export]
macro_rules! conformance_tests {
    ($make:expr) => {
        $crate::conformance_tests!(@each $make;
            crud_with_versions, children_listing, ephemeral_nodes_vanish_on_close,
            ephemeral_nodes_vanish_on_expiry, transactions_are_all_or_nothing,
            transaction_checks, watches_deliver_changes_in_order, watches_resume_after_reconnect,
            session_events, large_values_and_many_children, invalid_paths_and_oversized_values,
            tree_reads_and_events_share_revisions, own_writes_events_carry_their_data_and_version,
            writes_carry_the_registry_s_time);
    };
    (@each $make:expr; $($name:ident),*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                let backend = $make(stringify!($name)).await;
                conformance::$name(&backend).await;
            }
        )*
    };
}
