use super::*;

use shardjob_core::registry::{ErrorClass, WatchEventKind as K};

fn p(s: &str) -> NodePath {
    NodePath::new(s).unwrap()
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

const T: Duration = Duration::from_secs(1);

fn store_with(n: usize) -> (Store, Vec<SessionId>) {
    let mut st = Store::new();
    let ids = (0..n)
        .map(|_| st.open_session(T, Duration::ZERO).id)
        .collect();
    (st, ids)
}

fn aborted(index: usize, cause: RegistryError) -> RegistryError {
    RegistryError::TxnAborted {
        index,
        cause: Box::new(cause),
    }
}

/// The node events of a batch as (kind, path) pairs; session events as ("S", debug text).
fn kinds(events: &[RegistryEvent]) -> Vec<(String, String)> {
    events
        .iter()
        .map(|e| match e {
            RegistryEvent::Node(w) => (format!("{:?}", w.kind), w.path.to_string()),
            RegistryEvent::Session(s) => ("S".to_owned(), format!("{s:?}")),
        })
        .collect()
}

fn pairs(items: &[(&str, &str)]) -> Vec<(String, String)> {
    items
        .iter()
        .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
        .collect()
}

#[test]
fn root_always_exists_and_cannot_be_created_or_deleted() {
    let (mut st, s) = store_with(1);
    let root = st.get(s[0], &NodePath::root(), ms(0)).unwrap().unwrap();
    assert_eq!(root.stat.version, Version(0));
    assert_eq!(root.stat.created, Revision(0));
    let err = st.create(
        s[0],
        &NodePath::root(),
        vec![],
        CreateMode::Persistent,
        ms(0),
    );
    assert_eq!(err, Err(RegistryError::NodeExists(NodePath::root())));
    let err = st.delete(s[0], &NodePath::root(), None, ms(0)).unwrap_err();
    assert_eq!(err.class(), ErrorClass::Fatal);
    // The root's data may be set, like ZooKeeper's.
    let stat = st
        .set(
            s[0],
            &NodePath::root(),
            b"x".to_vec(),
            Some(Version(0)),
            ms(0),
        )
        .unwrap();
    assert_eq!(stat.version, Version(1));
    assert_eq!(st.revision(), Revision(1));
}

#[test]
fn create_checks_parent_ephemeral_parent_and_existence() {
    let (mut st, s) = store_with(1);
    let s = s[0];
    assert_eq!(
        st.create(s, &p("/a/b"), vec![], CreateMode::Persistent, ms(0)),
        Err(RegistryError::NoNode(p("/a")))
    );
    let stat = st
        .create(s, &p("/a"), b"1".to_vec(), CreateMode::Persistent, ms(0))
        .unwrap();
    assert_eq!(
        stat,
        Stat {
            version: Version(0),
            created: Revision(1),
            modified: Revision(1),
            ephemeral_owner: None,
            mtime_ms: None,
        }
    );
    assert_eq!(
        st.create(s, &p("/a"), vec![], CreateMode::Persistent, ms(0)),
        Err(RegistryError::NodeExists(p("/a")))
    );
    let e = st
        .create(s, &p("/e"), vec![], CreateMode::Ephemeral, ms(0))
        .unwrap();
    assert_eq!(e.ephemeral_owner, Some(s));
    assert_eq!(
        st.create(s, &p("/e/x"), vec![], CreateMode::Persistent, ms(0)),
        Err(RegistryError::NoChildrenForEphemerals(p("/e")))
    );
    assert_eq!(
        st.revision(),
        Revision(2),
        "failed creates take no revision"
    );
}

#[test]
fn set_bumps_version_and_revision() {
    let (mut st, s) = store_with(1);
    let s = s[0];
    st.create(s, &p("/a"), b"0".to_vec(), CreateMode::Persistent, ms(0))
        .unwrap();
    st.create(s, &p("/b"), b"0".to_vec(), CreateMode::Persistent, ms(0))
        .unwrap();
    let s1 = st.set(s, &p("/a"), b"1".to_vec(), None, ms(0)).unwrap();
    let s2 = st
        .set(s, &p("/a"), b"2".to_vec(), Some(Version(1)), ms(0))
        .unwrap();
    assert_eq!((s1.version, s2.version), (Version(1), Version(2)));
    assert_eq!(
        (s1.created, s1.modified, s2.modified),
        (Revision(1), Revision(3), Revision(4))
    );
    assert_eq!(
        st.set(s, &p("/a"), b"3".to_vec(), Some(Version(1)), ms(0)),
        Err(RegistryError::BadVersion {
            path: p("/a"),
            expected: Version(1)
        })
    );
    assert_eq!(
        st.set(s, &p("/zz"), vec![], None, ms(0)),
        Err(RegistryError::NoNode(p("/zz")))
    );
    let a = st.get(s, &p("/a"), ms(0)).unwrap().unwrap();
    assert_eq!((a.data, a.stat), (b"2".to_vec(), s2));
    // Versions are per node: /b is untouched.
    assert_eq!(st.node(&p("/b")).unwrap().stat.version, Version(0));
}

#[test]
fn delete_checks_existence_version_and_children() {
    let (mut st, s) = store_with(1);
    let s = s[0];
    st.create(s, &p("/a"), vec![], CreateMode::Persistent, ms(0))
        .unwrap();
    st.create(s, &p("/a/b"), vec![], CreateMode::Persistent, ms(0))
        .unwrap();
    assert_eq!(
        st.delete(s, &p("/x"), None, ms(0)),
        Err(RegistryError::NoNode(p("/x")))
    );
    assert_eq!(
        st.delete(s, &p("/a"), Some(Version(7)), ms(0)),
        Err(RegistryError::BadVersion {
            path: p("/a"),
            expected: Version(7)
        })
    );
    assert_eq!(
        st.delete(s, &p("/a"), None, ms(0)),
        Err(RegistryError::NotEmpty(p("/a")))
    );
    st.delete(s, &p("/a/b"), Some(Version(0)), ms(0)).unwrap();
    st.delete(s, &p("/a"), None, ms(0)).unwrap();
    assert_eq!(st.get(s, &p("/a"), ms(0)), Ok(None));
    // Created again, the node gets a higher revision.
    let again = st
        .create(s, &p("/a"), vec![], CreateMode::Persistent, ms(0))
        .unwrap();
    assert_eq!(again.created, Revision(5));
}

#[test]
fn children_are_sorted_by_bytes() {
    let (mut st, s) = store_with(1);
    let s = s[0];
    for name in ["b", "a-x", "B", "a", "10", "9"] {
        st.create(
            s,
            &p("/").join(name).unwrap(),
            vec![],
            CreateMode::Persistent,
            ms(0),
        )
        .unwrap();
    }
    for path in ["/a/z", "/a/z/deep", "/a-x/k", "/a/y"] {
        st.create(s, &p(path), vec![], CreateMode::Persistent, ms(0))
            .unwrap();
    }
    assert_eq!(
        st.children(s, &NodePath::root(), ms(0)).unwrap(),
        ["10", "9", "B", "a", "a-x", "b"]
    );
    assert_eq!(st.children(s, &p("/a"), ms(0)).unwrap(), ["y", "z"]);
    assert_eq!(st.children(s, &p("/a/z/deep"), ms(0)).unwrap(), [""; 0]);
    assert_eq!(
        st.children(s, &p("/nope"), ms(0)),
        Err(RegistryError::NoNode(p("/nope")))
    );
    let tree: Vec<String> = st
        .get_tree(s, &p("/"), ms(0))
        .unwrap()
        .iter()
        .map(|n| n.path.to_string())
        .collect();
    assert_eq!(
        tree,
        [
            "/",
            "/10",
            "/9",
            "/B",
            "/a",
            "/a/y",
            "/a/z",
            "/a/z/deep",
            "/a-x",
            "/a-x/k",
            "/b"
        ]
    );
    st.check_invariants().unwrap();
    assert!(st.get_tree(s, &p("/nope"), ms(0)).unwrap().is_empty());
}

#[test]
fn transaction_is_all_or_nothing() {
    let (mut st, s) = store_with(1);
    let s = s[0];
    let w = st.watch(s, &NodePath::root(), ms(0)).unwrap();
    st.create(s, &p("/x"), b"x".to_vec(), CreateMode::Persistent, ms(0))
        .unwrap();
    st.take_events(w, ms(0));
    let before = st.dump();
    let rev = st.revision();
    let ops = vec![
        TxnOp::create(p("/a"), "a"),
        TxnOp::create(p("/a/b"), "b"),
        TxnOp::set(p("/x"), "changed"),
        TxnOp::delete(p("/x")),
        TxnOp::Check(Check::Exists(p("/missing"))),
    ];
    assert_eq!(
        st.transact(s, ops, ms(0)),
        Err(aborted(4, RegistryError::NoNode(p("/missing"))))
    );
    assert_eq!(st.dump(), before);
    assert_eq!(st.revision(), rev);
    assert!(st.take_events(w, ms(0)).is_empty());
    // An ephemeral created and then aborted leaves nothing behind with the session either.
    let ops = vec![
        TxnOp::create_ephemeral(p("/e"), ""),
        TxnOp::Check(Check::Absent(p("/x"))),
    ];
    assert_eq!(
        st.transact(s, ops, ms(0)),
        Err(aborted(1, RegistryError::NodeExists(p("/x"))))
    );
    assert!(st.session(s).unwrap().ephemerals.is_empty());
    st.check_invariants().unwrap();
}

#[test]
fn transaction_sees_its_own_earlier_operations() {
    let (mut st, s) = store_with(1);
    let s = s[0];
    let w = st.watch(s, &NodePath::root(), ms(0)).unwrap();
    let ops = vec![
        TxnOp::create(p("/a"), "a"),
        TxnOp::create(p("/a/b"), "b"),
        TxnOp::Check(Check::Version(p("/a/b"), Version(0))),
        TxnOp::Set {
            path: p("/a/b"),
            data: b"b2".to_vec(),
            expected: Some(Version(0)),
        },
        TxnOp::Check(Check::Value(p("/a/b"), b"b2".to_vec())),
        TxnOp::create(p("/t"), ""),
        TxnOp::delete(p("/t")),
        TxnOp::Check(Check::Absent(p("/t"))),
    ];
    let results = st.transact(s, ops, ms(0)).unwrap();
    assert_eq!(results.len(), 8);
    // One revision for the whole transaction.
    assert_eq!(st.revision(), Revision(1));
    let b = st.node(&p("/a/b")).unwrap();
    assert_eq!(
        (b.data.as_slice(), b.stat.version, b.stat.modified),
        (&b"b2"[..], Version(1), Revision(1))
    );
    assert_eq!(results[3], TxnOpResult::Set(b.stat));
    assert_eq!(
        kinds(&st.take_events(w, ms(0))),
        pairs(&[
            ("Created", "/a"),
            ("Created", "/a/b"),
            ("Changed", "/a/b"),
            ("Created", "/t"),
            ("Deleted", "/t")
        ])
    );
    // A transaction of checks only, or an empty one, takes no revision.
    let ok = st
        .transact(s, vec![TxnOp::Check(Check::Exists(p("/a")))], ms(0))
        .unwrap();
    assert_eq!(ok, [TxnOpResult::Checked]);
    assert_eq!(st.transact(s, vec![], ms(0)), Ok(vec![]));
    assert_eq!(st.revision(), Revision(1));
    // A later op fails on what an earlier op did.
    let ops = vec![
        TxnOp::delete(p("/a/b")),
        TxnOp::Check(Check::Exists(p("/a/b"))),
    ];
    assert_eq!(
        st.transact(s, ops, ms(0)),
        Err(aborted(1, RegistryError::NoNode(p("/a/b"))))
    );
}

#[test]
fn every_check_fails_with_its_own_error() {
    let (mut st, s) = store_with(2);
    st.create(s[0], &p("/a"), b"v".to_vec(), CreateMode::Persistent, ms(0))
        .unwrap();
    let cases = [
        (Check::Exists(p("/no")), RegistryError::NoNode(p("/no"))),
        (Check::Absent(p("/a")), RegistryError::NodeExists(p("/a"))),
        (
            Check::Version(p("/a"), Version(3)),
            RegistryError::BadVersion {
                path: p("/a"),
                expected: Version(3),
            },
        ),
        (
            Check::Version(p("/no"), Version(0)),
            RegistryError::NoNode(p("/no")),
        ),
        (
            Check::Value(p("/a"), b"w".to_vec()),
            RegistryError::ValueMismatch(p("/a")),
        ),
        (
            Check::Value(p("/no"), vec![]),
            RegistryError::NoNode(p("/no")),
        ),
        (
            Check::Session(s[1]),
            RegistryError::SessionMismatch {
                expected: s[1],
                actual: Some(s[0]),
            },
        ),
    ];
    for (check, cause) in cases {
        let ops = vec![
            TxnOp::Check(Check::Exists(p("/a"))),
            TxnOp::Check(check.clone()),
        ];
        assert_eq!(
            st.transact(s[0], ops, ms(0)),
            Err(aborted(1, cause)),
            "{check:?}"
        );
    }
    let ok = [
        Check::Exists(p("/a")),
        Check::Absent(p("/no")),
        Check::Version(p("/a"), Version(0)),
        Check::Value(p("/a"), b"v".to_vec()),
        Check::Session(s[0]),
    ];
    let ops = ok.into_iter().map(TxnOp::Check).collect();
    assert_eq!(st.transact(s[0], ops, ms(0)).unwrap().len(), 5);
}

#[test]
fn requests_are_gated_by_session_state() {
    let (mut st, s) = store_with(4);
    let root = NodePath::root();
    st.expire_session(s[0], ms(0));
    st.close_session(s[1], ms(0)).unwrap();
    st.suspend(s[2], ms(0));
    st.kill(s[3], ms(0));
    assert_eq!(
        st.get(s[0], &root, ms(1)),
        Err(RegistryError::SessionExpired)
    );
    assert_eq!(st.get(s[1], &root, ms(1)), Err(RegistryError::Closed));
    assert_eq!(
        st.get(s[2], &root, ms(1)),
        Err(RegistryError::ConnectionLoss)
    );
    assert_eq!(
        st.get(s[3], &root, ms(1)),
        Err(RegistryError::ConnectionLoss)
    );
    assert_eq!(
        st.get(SessionId(99), &root, ms(1)),
        Err(RegistryError::SessionExpired)
    );
    let op = || vec![TxnOp::create(p("/x"), "")];
    assert_eq!(
        st.transact(s[0], op(), ms(1)),
        Err(RegistryError::SessionExpired)
    );
    assert_eq!(
        st.transact(s[2], op(), ms(1)),
        Err(RegistryError::ConnectionLoss)
    );
    assert_eq!(st.watch(s[1], &root, ms(1)), Err(RegistryError::Closed));
    assert_eq!(st.close_session(s[1], ms(1)), Err(RegistryError::Closed));
    // Once resumed within its timeout, the suspended session works again.
    assert!(st.resume(s[2], ms(999)));
    assert!(st.get(s[2], &root, ms(999)).is_ok());
}

#[test]
fn ephemerals_vanish_on_close_and_expiry() {
    let (mut st, s) = store_with(3);
    for (i, id) in s.iter().enumerate() {
        st.create(
            *id,
            &p(&format!("/e{i}")),
            vec![],
            CreateMode::Ephemeral,
            ms(0),
        )
        .unwrap();
    }
    st.create(s[0], &p("/keep"), vec![], CreateMode::Persistent, ms(0))
        .unwrap();
    let rev = st.revision();
    st.close_session(s[0], ms(1)).unwrap();
    assert_eq!(st.node(&p("/e0")), None);
    assert!(st.node(&p("/keep")).is_some(), "persistent nodes stay");
    assert!(st.revision() > rev);
    assert!(st.expire_session(s[1], ms(2)));
    assert!(
        !st.expire_session(s[1], ms(2)),
        "expiring twice does nothing"
    );
    assert_eq!(st.node(&p("/e1")), None);
    assert!(st.node(&p("/e2")).is_some());
    assert_eq!(st.session_ids(), [s[2]]);
    assert!(!st.is_alive(s[0]) && !st.is_alive(s[1]) && st.is_alive(s[2]));
    st.check_invariants().unwrap();
}

#[test]
fn killed_session_lingers_until_its_timeout() {
    let (mut st, s) = store_with(2);
    st.create(s[0], &p("/e"), vec![], CreateMode::Ephemeral, ms(0))
        .unwrap();
    st.advance_to(ms(100));
    assert!(st.kill(s[0], ms(100)));
    assert_eq!(st.next_deadline(), Some(ms(1100)));
    assert!(st.advance_to(ms(1099)).is_empty());
    assert!(
        st.node(&p("/e")).is_some(),
        "ephemeral stays while the session lingers"
    );
    assert!(st.is_alive(s[0]));
    assert_eq!(st.advance_to(ms(1100)), [s[0]]);
    assert_eq!(st.node(&p("/e")), None);
    assert_eq!(st.next_deadline(), None);
}

#[test]
fn suspension_within_the_timeout_keeps_the_session() {
    let (mut st, s) = store_with(1);
    st.create(s[0], &p("/e"), vec![], CreateMode::Ephemeral, ms(0))
        .unwrap();
    st.suspend(s[0], ms(0));
    assert!(!st.suspend(s[0], ms(0)), "already suspended");
    st.advance_to(ms(999));
    assert!(st.resume(s[0], ms(999)));
    assert!(st.node(&p("/e")).is_some());
    // Suspended again, and this time too long.
    st.suspend(s[0], ms(2000));
    assert_eq!(st.advance_to(ms(3000)), [s[0]]);
    assert_eq!(st.node(&p("/e")), None);
    assert_eq!(st.session(s[0]).unwrap().status, SessionStatus::Expired);
    // Still cut off: the client does not know yet.
    assert_eq!(
        st.get(s[0], &p("/"), ms(3000)),
        Err(RegistryError::ConnectionLoss)
    );
    st.resume(s[0], ms(3001));
    assert_eq!(
        st.get(s[0], &p("/"), ms(3001)),
        Err(RegistryError::SessionExpired)
    );
}

#[test]
fn expiries_are_processed_in_session_id_order() {
    let (mut st, s) = store_with(3);
    // Different suspension times, same deadline window: all due at once.
    st.suspend(s[2], ms(0));
    st.kill(s[0], ms(10));
    st.suspend(s[1], ms(5));
    assert_eq!(st.next_deadline(), Some(ms(1000)));
    assert_eq!(st.advance_to(ms(5000)), s);
    // Time never goes back.
    st.advance_to(ms(10));
    assert_eq!(st.now(), ms(5000));
}

#[test]
fn watch_sees_ordered_events_under_its_root_with_data_and_stat() {
    let (mut st, s) = store_with(2);
    st.create(s[0], &p("/job"), vec![], CreateMode::Persistent, ms(0))
        .unwrap();
    let w = st.watch(s[1], &p("/job"), ms(0)).unwrap();
    st.create(s[0], &p("/other"), vec![], CreateMode::Persistent, ms(0))
        .unwrap();
    st.create(s[0], &p("/jobx"), vec![], CreateMode::Persistent, ms(0))
        .unwrap();
    let c = st
        .create(
            s[0],
            &p("/job/a"),
            b"1".to_vec(),
            CreateMode::Ephemeral,
            ms(0),
        )
        .unwrap();
    let j = st
        .set(s[0], &p("/job"), b"cfg".to_vec(), None, ms(0))
        .unwrap();
    st.expire_session(s[0], ms(0));
    let events = st.take_events(w, ms(0));
    assert_eq!(
        events,
        [
            RegistryEvent::Node(WatchEvent {
                kind: K::Created,
                path: p("/job/a"),
                data: b"1".to_vec(),
                stat: Some(c),
                revision: Some(c.modified),
            }),
            RegistryEvent::Node(WatchEvent {
                kind: K::Changed,
                path: p("/job"),
                data: b"cfg".to_vec(),
                stat: Some(j),
                revision: Some(j.modified),
            }),
            RegistryEvent::Node(WatchEvent {
                kind: K::Deleted,
                path: p("/job/a"),
                data: vec![],
                stat: None,
                // The expiry's deletion is a write of its own, after the set.
                revision: Some(Revision(j.modified.0 + 1)),
            }),
        ]
    );
    assert!(st.take_events(w, ms(0)).is_empty());
}

#[test]
fn expired_session_watch_gets_expired_then_connected_after_reconnect() {
    let (mut st, s) = store_with(2);
    let w = st.watch(s[0], &NodePath::root(), ms(0)).unwrap();
    st.create(s[0], &p("/mine"), vec![], CreateMode::Ephemeral, ms(0))
        .unwrap();
    st.expire_session(s[0], ms(1));
    // Its own ephemeral's deletion is not delivered to the dead session, nor is what happens
    // before the client reconnects.
    st.create(s[1], &p("/gap"), vec![], CreateMode::Persistent, ms(1))
        .unwrap();
    assert_eq!(st.reconnect(s[1], ms(1)), None, "s1 is alive");
    let new = st.reconnect(s[0], ms(2)).unwrap();
    assert_eq!(st.reconnect(s[0], ms(2)), None, "only once");
    assert_eq!(new.timeout, T);
    st.create(s[1], &p("/after"), vec![], CreateMode::Persistent, ms(2))
        .unwrap();
    assert_eq!(
        kinds(&st.take_events(w, ms(2))),
        pairs(&[
            ("Created", "/mine"),
            ("S", &format!("{:?}", SessionEvent::Expired(s[0]))),
            ("S", &format!("{:?}", SessionEvent::Connected(new))),
            ("Created", "/after"),
        ])
    );
    assert_eq!(st.watch_session(w), Some(new.id));
    // The old session cannot pass a session check any more.
    let ops = vec![
        TxnOp::Check(Check::Session(s[0])),
        TxnOp::create_ephemeral(p("/x"), ""),
    ];
    assert_eq!(
        st.transact(new.id, ops, ms(3)),
        Err(aborted(
            0,
            RegistryError::SessionMismatch {
                expected: s[0],
                actual: Some(new.id)
            }
        ))
    );
    st.check_invariants().unwrap();
}

#[test]
fn suspended_watch_replays_parked_events_after_resume() {
    let (mut st, s) = store_with(2);
    let w = st.watch(s[0], &NodePath::root(), ms(0)).unwrap();
    st.create(s[1], &p("/before"), vec![], CreateMode::Persistent, ms(0))
        .unwrap();
    st.suspend(s[0], ms(10));
    st.create(s[1], &p("/during1"), vec![], CreateMode::Persistent, ms(20))
        .unwrap();
    st.set(s[1], &p("/during1"), b"x".to_vec(), None, ms(30))
        .unwrap();
    // The disconnection is noticed at once; what happens meanwhile is not delivered.
    assert_eq!(
        kinds(&st.take_events(w, ms(40))),
        pairs(&[
            ("Created", "/before"),
            ("S", &format!("{:?}", SessionEvent::Suspended(s[0])))
        ])
    );
    assert!(st.take_events(w, ms(50)).is_empty());
    st.resume(s[0], ms(60));
    st.delete(s[1], &p("/during1"), None, ms(70)).unwrap();
    assert_eq!(
        kinds(&st.take_events(w, ms(70))),
        pairs(&[
            ("S", &format!("{:?}", SessionEvent::Reconnected(s[0]))),
            ("Created", "/during1"),
            ("Changed", "/during1"),
            ("Deleted", "/during1"),
        ])
    );
}

#[test]
fn suspended_past_timeout_learns_expiry_on_resume() {
    let (mut st, s) = store_with(2);
    let w = st.watch(s[0], &NodePath::root(), ms(0)).unwrap();
    st.suspend(s[0], ms(0));
    st.create(s[1], &p("/during"), vec![], CreateMode::Persistent, ms(10))
        .unwrap();
    st.take_events(w, ms(10));
    st.advance_to(ms(1500));
    assert!(
        st.take_events(w, ms(1500)).is_empty(),
        "cut off: learns nothing yet"
    );
    assert!(st.resume(s[0], ms(2000)));
    assert_eq!(
        st.take_events(w, ms(2000)),
        [RegistryEvent::Session(SessionEvent::Expired(s[0]))]
    );
    assert!(st.reconnect(s[0], ms(2000)).is_some());
}

#[test]
fn held_and_delayed_watches_deliver_later_in_order() {
    let (mut st, s) = store_with(2);
    let held = st.watch(s[0], &NodePath::root(), ms(0)).unwrap();
    let delayed = st.watch(s[0], &NodePath::root(), ms(0)).unwrap();
    let slow = st.watch(s[0], &NodePath::root(), ms(0)).unwrap();
    assert!(st.hold_watch(held));
    assert!(st.delay_watch(delayed, ms(500)));
    assert!(st.set_watch_latency(slow, ms(100)));
    assert!(!st.hold_watch(WatchId(99)));
    for (i, t) in [0, 50, 300].into_iter().enumerate() {
        st.create(
            s[1],
            &p(&format!("/n{i}")),
            vec![],
            CreateMode::Persistent,
            ms(t),
        )
        .unwrap();
    }
    let all = pairs(&[("Created", "/n0"), ("Created", "/n1"), ("Created", "/n2")]);
    // Per-event latency: n0 at 100 ms, n1 at 150, n2 at 400.
    let mut slow_seen = Vec::new();
    for t in [300, 399, 400] {
        slow_seen.push((t, st.take_events(slow, ms(t)).len()));
    }
    assert_eq!(slow_seen, [(300, 2), (399, 0), (400, 1)]);
    assert!(st.take_events(delayed, ms(499)).is_empty());
    assert_eq!(st.next_deadline(), Some(ms(500)));
    assert_eq!(kinds(&st.take_events(delayed, ms(500))), all);
    assert!(st.take_events(held, ms(1000)).is_empty());
    assert_eq!(st.pending_events(held), 3);
    assert!(st.release_watch(held));
    assert_eq!(kinds(&st.take_events(held, ms(1000))), all);
}

#[test]
fn latency_never_reorders_events() {
    let (mut st, s) = store_with(2);
    let w = st.watch(s[0], &NodePath::root(), ms(0)).unwrap();
    st.set_watch_latency(w, ms(1000));
    st.create(s[1], &p("/first"), vec![], CreateMode::Persistent, ms(0))
        .unwrap();
    st.set_watch_latency(w, Duration::ZERO);
    st.create(s[1], &p("/second"), vec![], CreateMode::Persistent, ms(10))
        .unwrap();
    assert!(
        st.take_events(w, ms(10)).is_empty(),
        "the second may not overtake the first"
    );
    assert_eq!(
        kinds(&st.take_events(w, ms(1000))),
        pairs(&[("Created", "/first"), ("Created", "/second")])
    );
}

#[test]
fn close_ends_watches_after_a_closed_event() {
    let (mut st, s) = store_with(2);
    let w = st.watch(s[0], &NodePath::root(), ms(0)).unwrap();
    let other = st.watch(s[1], &NodePath::root(), ms(0)).unwrap();
    st.hold_watch(w);
    st.create(s[0], &p("/e"), vec![], CreateMode::Ephemeral, ms(0))
        .unwrap();
    st.close_session(s[0], ms(1)).unwrap();
    assert!(!st.watch_finished(w));
    // Closing lifts the hold so the stream can end.
    assert_eq!(
        kinds(&st.take_events(w, ms(1))),
        pairs(&[
            ("Created", "/e"),
            ("S", &format!("{:?}", SessionEvent::Closed))
        ])
    );
    assert!(st.watch_finished(w));
    assert_eq!(
        kinds(&st.take_events(other, ms(1))),
        pairs(&[("Created", "/e"), ("Deleted", "/e")])
    );
    st.unwatch(w);
    st.check_invariants().unwrap();
}

#[test]
fn close_while_suspended_lingers_until_timeout() {
    let (mut st, s) = store_with(1);
    let w = st.watch(s[0], &NodePath::root(), ms(0)).unwrap();
    st.create(s[0], &p("/e"), vec![], CreateMode::Ephemeral, ms(0))
        .unwrap();
    st.suspend(s[0], ms(100));
    st.close_session(s[0], ms(200)).unwrap();
    assert!(
        st.node(&p("/e")).is_some(),
        "the close never reached the store"
    );
    assert_eq!(
        st.take_events(w, ms(200)).last(),
        Some(&RegistryEvent::Session(SessionEvent::Closed))
    );
    assert!(st.watch_finished(w));
    st.advance_to(ms(1100));
    assert_eq!(st.node(&p("/e")), None);
}

#[test]
fn killed_client_watches_end_at_once() {
    let (mut st, s) = store_with(2);
    let w = st.watch(s[0], &NodePath::root(), ms(0)).unwrap();
    st.create(s[1], &p("/x"), vec![], CreateMode::Persistent, ms(0))
        .unwrap();
    assert!(st.kill(s[0], ms(0)));
    assert!(!st.kill(s[0], ms(0)));
    assert!(st.watch_finished(w));
    assert!(st.take_events(w, ms(0)).is_empty());
    assert_eq!(st.close_session(s[0], ms(0)), Err(RegistryError::Closed));
    st.advance_to(ms(1000));
    assert_eq!(
        st.reconnect(s[0], ms(1000)),
        None,
        "a crashed client does not come back"
    );
}

#[test]
fn same_calls_give_same_results() {
    fn run() -> (Vec<Node>, Vec<RegistryEvent>, Vec<SessionId>) {
        let (mut st, s) = store_with(3);
        let w = st.watch(s[2], &NodePath::root(), ms(0)).unwrap();
        for (i, id) in s.iter().enumerate() {
            let _ = st.create(
                *id,
                &p("/leader"),
                vec![i as u8],
                CreateMode::Ephemeral,
                ms(1),
            );
            let _ = st.create(
                *id,
                &p(&format!("/i{i}")),
                vec![],
                CreateMode::Ephemeral,
                ms(2),
            );
        }
        st.kill(s[0], ms(3));
        st.suspend(s[1], ms(4));
        let expired = st.advance_to(ms(5000));
        (st.dump(), st.take_events(w, ms(5000)), expired)
    }
    assert_eq!(run(), run());
}

/// A claim of `n` items as the machine writes it: the etcd backend needs 6n+1 compares.
fn claim_ops(session: SessionId, n: u32) -> Vec<TxnOp> {
    let mut ops = vec![TxnOp::Check(Check::Session(session))];
    for i in 0..n {
        let item = format!("/job/sharding/{i}");
        ops.push(TxnOp::Check(Check::Value(
            p(&format!("{item}/instance")),
            b"me".to_vec(),
        )));
        ops.push(TxnOp::Check(Check::Absent(p(&format!("{item}/disabled")))));
        ops.push(TxnOp::create_ephemeral(p(&format!("{item}/running")), "me"));
        ops.push(TxnOp::Set {
            path: p(&format!("{item}/execution")),
            data: Vec::new(),
            expected: Some(Version(1)),
        });
    }
    ops
}

#[test]
fn txn_cost_counts_like_the_etcd_backend() {
    assert_eq!(txn_cost(&claim_ops(SessionId(1), 1)), (7, 2));
    assert_eq!(txn_cost(&claim_ops(SessionId(1), 21)), (127, 42));
    // Parents created in the transaction are not checked again; a parent is checked once.
    let ops = vec![
        TxnOp::create(p("/a"), ""),
        TxnOp::create(p("/a/b"), ""),
        TxnOp::create(p("/a/c"), ""),
        TxnOp::create(p("/x/y"), ""),
        TxnOp::create(p("/x/z"), ""),
    ];
    assert_eq!(txn_cost(&ops), (5 + 2, 5));
}

#[test]
fn a_transaction_over_the_limit_is_refused_whole() {
    let (mut st, ids) = store_with(1);
    st.set_max_txn_ops(Some(3));
    let ops = vec![
        TxnOp::create(p("/a"), ""),
        TxnOp::create(p("/b"), ""),
        TxnOp::create(p("/c"), ""),
        TxnOp::create(p("/d"), ""),
    ];
    let err = st.transact(ids[0], ops.clone(), ms(1)).unwrap_err();
    assert!(matches!(err, RegistryError::TooLarge(_)), "{err}");
    assert_eq!(err.class(), ErrorClass::Fatal);
    assert!(st.node(&p("/a")).is_none());
    st.transact(ids[0], ops[..3].to_vec(), ms(2)).unwrap();
    st.set_max_txn_ops(None);
    st.transact(ids[0], ops[3..].to_vec(), ms(3)).unwrap();
    assert!(st.node(&p("/d")).is_some());
}

#[test]
fn contains_tells_whether_a_node_exists() {
    let (mut st, s) = store_with(1);
    st.create(s[0], &p("/a"), b"v".to_vec(), CreateMode::Persistent, ms(0))
        .unwrap();
    assert!(st.contains("/"));
    assert!(st.contains("/a"));
    assert!(!st.contains("/b"));
    assert!(!st.contains("/a/"));
    assert!(!st.contains("a"));
}

/// A tree read tells the store's revision; a session's end tells the revision of the write
/// that deleted its ephemeral nodes, the one its watchers' deletion events carry.
#[test]
fn tree_reads_and_session_ends_tell_their_revisions() {
    let (mut st, s) = store_with(2);
    st.create(s[0], &p("/job"), vec![], CreateMode::Persistent, ms(0))
        .unwrap();
    let eph = st
        .create(s[1], &p("/job/i"), vec![], CreateMode::Ephemeral, ms(0))
        .unwrap();
    let tree = st.read_tree(s[0], &p("/job"), ms(0)).unwrap();
    assert_eq!(tree.revision, Some(eph.modified));
    assert_eq!(tree.nodes, st.get_tree(s[0], &p("/job"), ms(0)).unwrap());
    let w = st.watch(s[0], &p("/job"), ms(0)).unwrap();
    assert_eq!(st.session(s[1]).and_then(|v| v.ended_at), None);
    st.expire_session(s[1], ms(0));
    let ended = st.session(s[1]).and_then(|v| v.ended_at);
    assert_eq!(ended, Some(Revision(eph.modified.0 + 1)));
    assert_eq!(ended, Some(st.revision()));
    let events = st.take_events(w, ms(0));
    assert!(
        matches!(&events[..], [RegistryEvent::Node(e)] if e.revision == ended && e.path == p("/job/i")),
        "{events:?}"
    );
    let later = st.read_tree(s[0], &p("/job"), ms(0)).unwrap();
    assert_eq!(later.revision, ended);
    assert_eq!(later.nodes.len(), 1);
}
