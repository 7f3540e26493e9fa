//! The store against a tiny, obviously correct model: random operations from three sessions
//! over a small path alphabet must give the same results, the same state and, on a watch of
//! `/`, exactly the model's change log.

use std::collections::BTreeMap;
use std::time::Duration;

use proptest::prelude::*;
use shardjob_backend_mem::{Store, WatchId};
use shardjob_core::registry::{
    Check, CreateMode, NodePath, RegistryError, RegistryEvent, Revision, SessionId, Stat, TxnOp,
    TxnOpResult, Version, WatchEvent, WatchEventKind,
};

const PATHS: [&str; 6] = ["/", "/a", "/a/b", "/a/c", "/b", "/b/x"];
const SLOTS: usize = 3;
const NOW: Duration = Duration::ZERO;

// ------------------------------------------------------------------------------------------------
// Operations
// ------------------------------------------------------------------------------------------------

#[derive(Debug, Clone)]
enum MOp {
    Create {
        path: usize,
        ephemeral: bool,
        data: u8,
    },
    Set {
        path: usize,
        expected: Option<i64>,
        data: u8,
    },
    Delete {
        path: usize,
        expected: Option<i64>,
    },
    Exists(usize),
    Absent(usize),
    Version(usize, i64),
    Value(usize, u8),
    Session(usize),
}

#[derive(Debug, Clone)]
enum Step {
    /// A single write through `Store::create`/`set`/`delete` (or a lone check as a transaction).
    One(usize, MOp),
    Txn(usize, Vec<MOp>),
    Close(usize),
    Expire(usize),
    Reopen(usize),
}

fn data(d: u8) -> Vec<u8> {
    if d == 0 { Vec::new() } else { vec![b'a' + d] }
}

fn path(i: usize) -> NodePath {
    NodePath::new(PATHS[i]).unwrap()
}

fn mop() -> impl Strategy<Value = MOp> {
    let p = 0..PATHS.len();
    let v = prop::option::weighted(0.5, 0..3i64);
    prop_oneof![
        4 => (p.clone(), any::<bool>(), 0..3u8)
            .prop_map(|(path, ephemeral, data)| MOp::Create { path, ephemeral, data }),
        3 => (p.clone(), v.clone(), 0..3u8)
            .prop_map(|(path, expected, data)| MOp::Set { path, expected, data }),
        3 => (p.clone(), v).prop_map(|(path, expected)| MOp::Delete { path, expected }),
        1 => p.clone().prop_map(MOp::Exists),
        1 => p.clone().prop_map(MOp::Absent),
        1 => (p.clone(), 0..3i64).prop_map(|(p, v)| MOp::Version(p, v)),
        1 => (p, 0..3u8).prop_map(|(p, d)| MOp::Value(p, d)),
        1 => (0..SLOTS).prop_map(MOp::Session),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    let slot = 0..SLOTS;
    prop_oneof![
        10 => (slot.clone(), mop()).prop_map(|(s, op)| Step::One(s, op)),
        6 => (slot.clone(), prop::collection::vec(mop(), 1..=4)).prop_map(|(s, ops)| Step::Txn(s, ops)),
        1 => slot.clone().prop_map(Step::Close),
        1 => slot.clone().prop_map(Step::Expire),
        2 => slot.prop_map(Step::Reopen),
    ]
}

// ------------------------------------------------------------------------------------------------
// The model
// ------------------------------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq, Eq)]
struct MNode {
    data: Vec<u8>,
    version: i64,
    created: u64,
    modified: u64,
    owner: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MSession {
    Alive,
    Expired,
    Closed,
}

struct Model {
    nodes: BTreeMap<String, MNode>,
    rev: u64,
    sessions: BTreeMap<u64, MSession>,
    next_session: u64,
    log: Vec<WatchEvent>,
}

fn parent_of(p: &str) -> Option<String> {
    if p == "/" {
        return None;
    }
    let at = p.rfind('/').unwrap();
    Some(if at == 0 {
        "/".to_owned()
    } else {
        p[..at].to_owned()
    })
}

fn np(p: &str) -> NodePath {
    NodePath::new(p).unwrap()
}

fn stat_of(n: &MNode) -> Stat {
    Stat {
        version: Version(n.version),
        created: Revision(n.created),
        modified: Revision(n.modified),
        ephemeral_owner: n.owner.map(SessionId),
        mtime_ms: None,
    }
}

impl Model {
    fn new() -> Self {
        let root = MNode {
            data: vec![],
            version: 0,
            created: 0,
            modified: 0,
            owner: None,
        };
        Model {
            nodes: BTreeMap::from([("/".to_owned(), root)]),
            rev: 0,
            sessions: BTreeMap::new(),
            next_session: 1,
            log: Vec::new(),
        }
    }

    fn open(&mut self) -> u64 {
        let id = self.next_session;
        self.next_session += 1;
        self.sessions.insert(id, MSession::Alive);
        id
    }

    fn gate(&self, s: u64) -> Result<(), RegistryError> {
        match self.sessions.get(&s) {
            Some(MSession::Alive) => Ok(()),
            Some(MSession::Closed) => Err(RegistryError::Closed),
            _ => Err(RegistryError::SessionExpired),
        }
    }

    /// Applies one operation to a scratch copy of the nodes; returns its result and any event.
    fn apply(
        nodes: &mut BTreeMap<String, MNode>,
        caller: u64,
        slot_ids: &[u64],
        op: &MOp,
        rev: u64,
    ) -> Result<(TxnOpResult, Option<WatchEvent>), RegistryError> {
        let ev = |kind, p: &str, n: Option<&MNode>| WatchEvent {
            kind,
            path: np(p),
            data: n.map(|n| n.data.clone()).unwrap_or_default(),
            stat: n.map(stat_of),
            revision: Some(Revision(rev)),
        };
        match op {
            MOp::Create {
                path,
                ephemeral,
                data: d,
            } => {
                let p = PATHS[*path];
                let Some(parent) = parent_of(p) else {
                    return Err(RegistryError::NodeExists(np(p)));
                };
                let Some(pn) = nodes.get(&parent) else {
                    return Err(RegistryError::NoNode(np(&parent)));
                };
                if nodes.contains_key(p) {
                    return Err(RegistryError::NodeExists(np(p)));
                }
                if pn.owner.is_some() {
                    return Err(RegistryError::NoChildrenForEphemerals(np(&parent)));
                }
                let owner = ephemeral.then_some(caller);
                let n = MNode {
                    data: data(*d),
                    version: 0,
                    created: rev,
                    modified: rev,
                    owner,
                };
                let out = (
                    TxnOpResult::Created(stat_of(&n)),
                    Some(ev(WatchEventKind::Created, p, Some(&n))),
                );
                nodes.insert(p.to_owned(), n);
                Ok(out)
            }
            MOp::Set {
                path,
                expected,
                data: d,
            } => {
                let p = PATHS[*path];
                let Some(n) = nodes.get_mut(p) else {
                    return Err(RegistryError::NoNode(np(p)));
                };
                if let Some(e) = expected
                    && *e != n.version
                {
                    return Err(RegistryError::BadVersion {
                        path: np(p),
                        expected: Version(*e),
                    });
                }
                n.data = data(*d);
                n.version += 1;
                n.modified = rev;
                Ok((
                    TxnOpResult::Set(stat_of(n)),
                    Some(ev(WatchEventKind::Changed, p, Some(n))),
                ))
            }
            MOp::Delete { path, expected } => {
                let p = PATHS[*path];
                if p == "/" {
                    return Err(RegistryError::NotAuthorized(
                        "the root node cannot be deleted".to_owned(),
                    ));
                }
                let Some(n) = nodes.get(p) else {
                    return Err(RegistryError::NoNode(np(p)));
                };
                if let Some(e) = expected
                    && *e != n.version
                {
                    return Err(RegistryError::BadVersion {
                        path: np(p),
                        expected: Version(*e),
                    });
                }
                if nodes.keys().any(|k| parent_of(k).as_deref() == Some(p)) {
                    return Err(RegistryError::NotEmpty(np(p)));
                }
                nodes.remove(p);
                Ok((
                    TxnOpResult::Deleted,
                    Some(ev(WatchEventKind::Deleted, p, None)),
                ))
            }
            MOp::Exists(i) => match nodes.contains_key(PATHS[*i]) {
                true => Ok((TxnOpResult::Checked, None)),
                false => Err(RegistryError::NoNode(path(*i))),
            },
            MOp::Absent(i) => match nodes.contains_key(PATHS[*i]) {
                true => Err(RegistryError::NodeExists(path(*i))),
                false => Ok((TxnOpResult::Checked, None)),
            },
            MOp::Version(i, v) => match nodes.get(PATHS[*i]) {
                None => Err(RegistryError::NoNode(path(*i))),
                Some(n) if n.version == *v => Ok((TxnOpResult::Checked, None)),
                Some(_) => Err(RegistryError::BadVersion {
                    path: path(*i),
                    expected: Version(*v),
                }),
            },
            MOp::Value(i, d) => match nodes.get(PATHS[*i]) {
                None => Err(RegistryError::NoNode(path(*i))),
                Some(n) if n.data == data(*d) => Ok((TxnOpResult::Checked, None)),
                Some(_) => Err(RegistryError::ValueMismatch(path(*i))),
            },
            MOp::Session(slot) => match slot_ids[*slot] == caller {
                true => Ok((TxnOpResult::Checked, None)),
                false => Err(RegistryError::SessionMismatch {
                    expected: SessionId(slot_ids[*slot]),
                    actual: Some(SessionId(caller)),
                }),
            },
        }
    }

    fn transact(
        &mut self,
        caller: u64,
        slot_ids: &[u64],
        ops: &[MOp],
    ) -> Result<Vec<TxnOpResult>, RegistryError> {
        self.gate(caller)?;
        let mut scratch = self.nodes.clone();
        let rev = self.rev + 1;
        let mut results = Vec::new();
        let mut events = Vec::new();
        for (index, op) in ops.iter().enumerate() {
            match Self::apply(&mut scratch, caller, slot_ids, op, rev) {
                Ok((r, e)) => {
                    results.push(r);
                    events.extend(e);
                }
                Err(cause) => {
                    return Err(RegistryError::TxnAborted {
                        index,
                        cause: Box::new(cause),
                    });
                }
            }
        }
        if !events.is_empty() {
            self.rev = rev;
            self.nodes = scratch;
            self.log.extend(events);
        }
        Ok(results)
    }

    fn end(&mut self, s: u64, to: MSession) {
        self.sessions.insert(s, to);
        let owned: Vec<String> = self
            .nodes
            .iter()
            .filter(|(_, n)| n.owner == Some(s))
            .map(|(p, _)| p.clone())
            .collect();
        if owned.is_empty() {
            return;
        }
        self.rev += 1;
        for p in owned {
            self.nodes.remove(&p);
            self.log.push(WatchEvent {
                kind: WatchEventKind::Deleted,
                path: np(&p),
                data: vec![],
                stat: None,
                revision: Some(Revision(self.rev)),
            });
        }
    }
}

// ------------------------------------------------------------------------------------------------
// Running both
// ------------------------------------------------------------------------------------------------

fn to_txn_op(op: &MOp, slot_ids: &[u64]) -> TxnOp {
    match op {
        MOp::Create {
            path: p,
            ephemeral,
            data: d,
        } => TxnOp::Create {
            path: path(*p),
            data: data(*d),
            mode: if *ephemeral {
                CreateMode::Ephemeral
            } else {
                CreateMode::Persistent
            },
        },
        MOp::Set {
            path: p,
            expected,
            data: d,
        } => TxnOp::Set {
            path: path(*p),
            data: data(*d),
            expected: expected.map(Version),
        },
        MOp::Delete { path: p, expected } => TxnOp::Delete {
            path: path(*p),
            expected: expected.map(Version),
        },
        MOp::Exists(p) => TxnOp::Check(Check::Exists(path(*p))),
        MOp::Absent(p) => TxnOp::Check(Check::Absent(path(*p))),
        MOp::Version(p, v) => TxnOp::Check(Check::Version(path(*p), Version(*v))),
        MOp::Value(p, d) => TxnOp::Check(Check::Value(path(*p), data(*d))),
        MOp::Session(slot) => TxnOp::Check(Check::Session(SessionId(slot_ids[*slot]))),
    }
}

/// A step's outcome, the same type for store and model.
type Outcome = Result<Vec<TxnOpResult>, RegistryError>;

fn unwrap_single(r: Outcome) -> Outcome {
    match r {
        Err(RegistryError::TxnAborted { index: 0, cause }) => Err(*cause),
        other => other,
    }
}

fn run_store(st: &mut Store, slots: &mut [SessionId], step: &Step) -> Outcome {
    let ids: Vec<u64> = slots.iter().map(|s| s.0).collect();
    match step {
        Step::One(slot, op) => {
            let s = slots[*slot];
            let stat =
                |r: Result<Stat, RegistryError>, f: fn(Stat) -> TxnOpResult| r.map(|x| vec![f(x)]);
            match op {
                MOp::Create {
                    path: p,
                    ephemeral,
                    data: d,
                } => {
                    let mode = if *ephemeral {
                        CreateMode::Ephemeral
                    } else {
                        CreateMode::Persistent
                    };
                    stat(
                        st.create(s, &path(*p), data(*d), mode, NOW),
                        TxnOpResult::Created,
                    )
                }
                MOp::Set {
                    path: p,
                    expected,
                    data: d,
                } => stat(
                    st.set(s, &path(*p), data(*d), expected.map(Version), NOW),
                    TxnOpResult::Set,
                ),
                MOp::Delete { path: p, expected } => st
                    .delete(s, &path(*p), expected.map(Version), NOW)
                    .map(|()| vec![TxnOpResult::Deleted]),
                check => unwrap_single(st.transact(s, vec![to_txn_op(check, &ids)], NOW)),
            }
        }
        Step::Txn(slot, ops) => st.transact(
            slots[*slot],
            ops.iter().map(|o| to_txn_op(o, &ids)).collect(),
            NOW,
        ),
        Step::Close(slot) => st.close_session(slots[*slot], NOW).map(|()| vec![]),
        Step::Expire(slot) => match st.expire_session(slots[*slot], NOW) {
            true => Ok(vec![]),
            false => Err(RegistryError::SessionExpired),
        },
        Step::Reopen(slot) => {
            slots[*slot] = st.open_session(Duration::from_secs(1), NOW).id;
            Ok(vec![])
        }
    }
}

fn run_model(m: &mut Model, slots: &mut [u64], step: &Step) -> Outcome {
    match step {
        Step::One(slot, op) => {
            unwrap_single(m.transact(slots[*slot], slots, std::slice::from_ref(op)))
        }
        Step::Txn(slot, ops) => m.transact(slots[*slot], slots, ops),
        Step::Close(slot) => match m.sessions[&slots[*slot]] {
            MSession::Alive => {
                m.end(slots[*slot], MSession::Closed);
                Ok(vec![])
            }
            MSession::Expired => Ok(vec![]),
            MSession::Closed => Err(RegistryError::Closed),
        },
        Step::Expire(slot) => match m.sessions[&slots[*slot]] {
            MSession::Alive => {
                m.end(slots[*slot], MSession::Expired);
                Ok(vec![])
            }
            _ => Err(RegistryError::SessionExpired),
        },
        Step::Reopen(slot) => {
            slots[*slot] = m.open();
            Ok(vec![])
        }
    }
}

fn store_state(st: &Store) -> BTreeMap<String, MNode> {
    st.dump()
        .into_iter()
        .map(|n| {
            let node = MNode {
                data: n.data,
                version: n.stat.version.0,
                created: n.stat.created.0,
                modified: n.stat.modified.0,
                owner: n.stat.ephemeral_owner.map(|s| s.0),
            };
            (n.path.to_string(), node)
        })
        .collect()
}

fn node_events(events: Vec<RegistryEvent>) -> Vec<WatchEvent> {
    events
        .into_iter()
        .map(|e| match e {
            RegistryEvent::Node(w) => w,
            RegistryEvent::Session(s) => panic!("the observer's session never changes: {s:?}"),
        })
        .collect()
}

fn check_sequence(steps: &[Step]) -> Result<(), TestCaseError> {
    let mut st = Store::new();
    let mut m = Model::new();
    let observer = st.open_session(Duration::from_secs(1), NOW).id;
    prop_assert_eq!(observer.0, m.open());
    let watch: WatchId = st.watch(observer, &NodePath::root(), NOW).unwrap();
    let mut store_slots = Vec::new();
    let mut model_slots = Vec::new();
    for _ in 0..SLOTS {
        store_slots.push(st.open_session(Duration::from_secs(1), NOW).id);
        model_slots.push(m.open());
    }
    let mut seen = Vec::new();
    let mut revisions = vec![st.revision()];
    for (i, step) in steps.iter().enumerate() {
        let got = run_store(&mut st, &mut store_slots, step);
        let want = run_model(&mut m, &mut model_slots, step);
        prop_assert_eq!(&got, &want, "step {} {:?}", i, step);
        prop_assert_eq!(
            store_slots.iter().map(|s| s.0).collect::<Vec<_>>(),
            model_slots.clone()
        );
        prop_assert_eq!(
            store_state(&st),
            m.nodes.clone(),
            "state after step {} {:?}",
            i,
            step
        );
        prop_assert_eq!(st.revision(), Revision(m.rev));
        if let Err(e) = st.check_invariants() {
            return Err(TestCaseError::fail(format!(
                "invariant after step {i}: {e}"
            )));
        }
        for (id, s) in &m.sessions {
            prop_assert_eq!(st.is_alive(SessionId(*id)), *s == MSession::Alive);
        }
        seen.extend(node_events(st.take_events(watch, NOW)));
        prop_assert_eq!(&seen, &m.log, "change log after step {} {:?}", i, step);
        revisions.push(st.revision());
    }
    prop_assert!(
        revisions.windows(2).all(|w| w[0] <= w[1]),
        "revisions never go back"
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn store_matches_the_model(steps in prop::collection::vec(step(), 1..60)) {
        check_sequence(&steps)?;
    }
}

/// A fixed sequence through every kind of step, so a model bug cannot hide behind shrinking.
#[test]
fn model_smoke_sequence() {
    use MOp::*;
    let steps = vec![
        Step::One(
            0,
            Create {
                path: 1,
                ephemeral: false,
                data: 1,
            },
        ),
        Step::Txn(
            1,
            vec![
                Create {
                    path: 2,
                    ephemeral: true,
                    data: 2,
                },
                Exists(2),
                Session(1),
            ],
        ),
        Step::Txn(
            0,
            vec![
                Create {
                    path: 3,
                    ephemeral: false,
                    data: 0,
                },
                Session(1),
            ],
        ),
        Step::One(
            2,
            Delete {
                path: 1,
                expected: None,
            },
        ),
        Step::One(
            2,
            Set {
                path: 1,
                expected: Some(0),
                data: 2,
            },
        ),
        Step::One(
            2,
            Set {
                path: 1,
                expected: Some(0),
                data: 2,
            },
        ),
        Step::Expire(1),
        Step::One(1, Exists(0)),
        Step::Reopen(1),
        Step::Txn(
            1,
            vec![
                Delete {
                    path: 1,
                    expected: Some(1),
                },
                Absent(1),
            ],
        ),
        Step::Close(0),
        Step::Close(0),
        Step::One(
            0,
            Delete {
                path: 0,
                expected: None,
            },
        ),
        Step::One(
            2,
            Delete {
                path: 0,
                expected: None,
            },
        ),
        Step::One(
            2,
            Create {
                path: 0,
                ephemeral: false,
                data: 0,
            },
        ),
    ];
    check_sequence(&steps).unwrap();
}
