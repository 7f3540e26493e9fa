//! Transactions as ZooKeeper multis (see the crate documentation, "Checks"), and tree reads.

use std::collections::{HashMap, HashSet};

use shardjob_core::registry::{
    Check, CreateMode, Node, NodePath, RegistryError, Revision, Stat, TxnOp, TxnOpResult, Version,
};
use zookeeper_client as zk;

use crate::journal::{After, Sending, Written};
use crate::{Inner, Session, map_error, map_stat};

/// How often a transaction is planned again when a check raced with another write.
const MAX_ATTEMPTS: usize = 5;

/// Fails early with [`RegistryError::TooLarge`] when the request would exceed the server's
/// packet limit (the server would drop the connection instead of answering).
pub(crate) fn check_size(ops: &[TxnOp], inner: &Inner) -> Result<(), RegistryError> {
    let limit = inner.config.max_request_bytes;
    let root = inner.chroot.as_ref().map_or(0, |r| r.as_str().len());
    let mut total = 64usize;
    for op in ops {
        let (path, data) = match op {
            TxnOp::Check(c) => (c.path().map_or(1, |p| p.as_str().len()), 0),
            TxnOp::Create { path, data, .. } | TxnOp::Set { path, data, .. } => {
                (path.as_str().len(), data.len())
            }
            TxnOp::Delete { path, .. } => (path.as_str().len(), 0),
        };
        // An Absent check becomes a create and a delete.
        total = total
            .saturating_add(2 * (root + path + 64))
            .saturating_add(data);
    }
    if total > limit {
        return Err(RegistryError::TooLarge(format!(
            "a transaction of about {total} bytes exceeds the ZooKeeper request limit of {limit} \
             bytes (the server's jute.maxbuffer)"
        )));
    }
    Ok(())
}

/// What earlier operations of the transaction did to a path.
#[derive(Clone, Copy)]
enum Effect<'a> {
    Exists {
        data: Option<&'a [u8]>,
        ephemeral: bool,
    },
    Gone,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum AbsentPlan {
    /// create + delete of the node itself.
    Direct,
    /// create + delete of this ancestor's child on the way (the parent of the node is missing).
    Ancestor(NodePath),
    /// The nearest existing ancestor is ephemeral: check that it is unchanged.
    Ephemeral(NodePath, i32),
}

enum ZkOp<'a> {
    Check(&'a str, i32),
    Create(&'a NodePath, &'a [u8], bool),
    Set(&'a NodePath, &'a [u8], Option<i32>),
    Delete(&'a NodePath, Option<i32>),
}

impl ZkOp<'_> {
    /// The node a write changes (a check's path is not a [`NodePath`]: it changes nothing).
    fn path(&self) -> NodePath {
        match self {
            ZkOp::Create(p, ..) | ZkOp::Set(p, ..) | ZkOp::Delete(p, _) => (*p).clone(),
            ZkOp::Check(..) => NodePath::root(),
        }
    }
}

/// The multi's time (its leader's clock, the `mtime` of every node it wrote), if an answer
/// tells it: a node it created has none in ZooKeeper 3.8's answer (ZOOKEEPER-4026), one it
/// set has.
fn multi_mtime(results: &[zk::MultiWriteResult]) -> Option<i64> {
    results
        .iter()
        .find_map(|r| match r {
            zk::MultiWriteResult::SetData { stat } => Some(stat.mtime),
            zk::MultiWriteResult::Create { stat, .. } if !stat.is_invalid() => Some(stat.mtime),
            _ => None,
        })
        .filter(|t| *t > 0)
}

/// The state each write of a committed multi left its node in (see `journal`): the state
/// after the whole multi, as a multi is applied at one zxid. `writes` are the node-changing
/// ZooKeeper operations with their positions in the multi, `results` the multi's answers.
fn after_states(
    s: &Session,
    writes: &[(usize, &ZkOp<'_>)],
    results: &[zk::MultiWriteResult],
) -> Vec<Option<After>> {
    // The multi's zxid, if an answer tells it.
    let zxid = results.iter().find_map(|r| match r {
        zk::MultiWriteResult::SetData { stat } => Some(stat.mzxid),
        zk::MultiWriteResult::Create { stat, .. } if !stat.is_invalid() => Some(stat.czxid),
        _ => None,
    });
    let mtime = multi_mtime(results);
    let mut last: HashMap<NodePath, Option<After>> = HashMap::new();
    for (k, zop) in writes {
        let after = match (zop, results.get(*k)) {
            (ZkOp::Create(_, data, ephemeral), Some(zk::MultiWriteResult::Create { stat, .. })) => {
                if !stat.is_invalid() {
                    Some(After::Exists(data.to_vec(), map_stat(stat)))
                } else {
                    // ZOOKEEPER-4026: a new node, data version 0, made at the multi's zxid.
                    zxid.filter(|z| *z > 0).map(|z| {
                        let z = Revision(z as u64);
                        After::Exists(
                            data.to_vec(),
                            Stat {
                                version: Version(0),
                                created: z,
                                modified: z,
                                ephemeral_owner: ephemeral.then_some(s.info.id),
                                mtime_ms: mtime,
                            },
                        )
                    })
                }
            }
            (ZkOp::Set(_, data, _), Some(zk::MultiWriteResult::SetData { stat })) => {
                Some(After::Exists(data.to_vec(), map_stat(stat)))
            }
            (ZkOp::Delete(..), Some(zk::MultiWriteResult::Delete)) => Some(After::Gone),
            _ => None,
        };
        last.insert(zop.path(), after);
    }
    writes
        .iter()
        .map(|(_, zop)| last.get(&zop.path()).cloned().flatten())
        .collect()
}

enum Step<'a> {
    /// Settled without the server.
    Local(TxnOpResult),
    /// Fails the transaction at this operation.
    Fail(RegistryError),
    /// These ZooKeeper operations stand for the operation.
    Zk(Vec<ZkOp<'a>>),
}

/// What to do after the multi failed at one of an operation's ZooKeeper operations.
enum Failure {
    Final(RegistryError),
    Retry,
}

fn version32(v: Version) -> Option<i32> {
    i32::try_from(v.0).ok().filter(|v| *v >= 0)
}

pub(crate) async fn transact(
    inner: &Inner,
    s: &Session,
    ops: Vec<TxnOp>,
) -> Result<Vec<TxnOpResult>, RegistryError> {
    if ops.is_empty() {
        return Ok(Vec::new());
    }
    if ops.len() == 1 && !matches!(ops[0], TxnOp::Check(_)) {
        return single(inner, s, &ops[0]).await;
    }
    let mut plans: HashMap<usize, AbsentPlan> = HashMap::new();
    let mut last_race = None;
    for _ in 0..MAX_ATTEMPTS {
        // Values as of now, for the Value checks on paths the transaction does not touch first.
        let values = read_values(s, &ops).await?;
        let steps = plan(s, &ops, &plans, &values)?;
        if let Some((index, cause)) = steps.iter().enumerate().find_map(|(i, st)| match st {
            Step::Fail(e) => Some((i, e.clone())),
            _ => None,
        }) {
            return Err(RegistryError::TxnAborted {
                index,
                cause: Box::new(cause),
            });
        }
        let mut writer = s.client.new_multi_writer();
        let acls = inner.acls();
        let persistent = zk::CreateMode::Persistent.with_acls(acls);
        let ephemeral = zk::CreateMode::Ephemeral.with_acls(acls);
        // owner[k] = (operation index, position within its step) of ZooKeeper operation k.
        let mut owner = Vec::new();
        // The node-changing ZooKeeper operations, with their positions, for the journals.
        let mut writes: Vec<(usize, &ZkOp<'_>)> = Vec::new();
        for (i, step) in steps.iter().enumerate() {
            let Step::Zk(zops) = step else { continue };
            for (k, zop) in zops.iter().enumerate() {
                if !matches!(zop, ZkOp::Check(..)) {
                    writes.push((owner.len(), zop));
                }
                let added = match zop {
                    ZkOp::Check(p, v) => writer.add_check_version(p, *v),
                    ZkOp::Create(p, d, eph) => writer.add_create(
                        p.as_str(),
                        d,
                        if *eph { &ephemeral } else { &persistent },
                    ),
                    ZkOp::Set(p, d, v) => writer.add_set_data(p.as_str(), d, *v),
                    ZkOp::Delete(p, v) => writer.add_delete(p.as_str(), *v),
                };
                added.map_err(|e| RegistryError::TxnAborted {
                    index: i,
                    cause: Box::new(map_error(
                        e,
                        ops[i].path().unwrap_or(&NodePath::root()),
                        None,
                    )),
                })?;
                owner.push((i, k));
            }
        }
        let results = if owner.is_empty() {
            Vec::new()
        } else {
            let (written, commit) = {
                // Entered in the journals and queued under one lock: see `journal`.
                let sending = inner.journals.sending();
                let written =
                    sending.enter(s.info.id, writes.iter().map(|(_, w)| w.path()).collect());
                (written, writer.commit())
            };
            match commit.await {
                Ok(r) => {
                    written.applied(&after_states(s, &writes, &r));
                    r
                }
                Err(zk::MultiWriteError::RequestFailed { source }) => {
                    written.unknown();
                    return Err(map_error(source, &NodePath::root(), None));
                }
                Err(zk::MultiWriteError::OperationFailed { index, source }) => {
                    // A multi is applied whole or not at all.
                    written.refused();
                    let Some(&(i, k)) = owner.get(index) else {
                        return Err(RegistryError::Backend(format!(
                            "ZooKeeper multi failed at unknown operation {index}: {source}"
                        )));
                    };
                    match failure(&ops[i], plans.get(&i), k, source) {
                        Failure::Final(cause) => {
                            return Err(RegistryError::TxnAborted {
                                index: i,
                                cause: Box::new(cause),
                            });
                        }
                        Failure::Retry => {
                            if let TxnOp::Check(Check::Absent(p)) = &ops[i] {
                                let plan = replan_absent(s, &ops, i, p).await?;
                                plans.insert(i, plan);
                            }
                            last_race = Some(i);
                            continue;
                        }
                    }
                }
            }
        };
        return collect(s, &ops, steps, results).await;
    }
    Err(RegistryError::TxnAborted {
        index: last_race.unwrap_or(0),
        cause: Box::new(RegistryError::Backend(format!(
            "a check kept racing with concurrent writes ({MAX_ATTEMPTS} attempts)"
        ))),
    })
}

/// A transaction of one write, as the plain request (whose answer carries the stat).
async fn single(inner: &Inner, s: &Session, op: &TxnOp) -> Result<Vec<TxnOpResult>, RegistryError> {
    let aborted = |e: RegistryError| match e {
        RegistryError::NoNode(_)
        | RegistryError::NodeExists(_)
        | RegistryError::BadVersion { .. }
        | RegistryError::NotEmpty(_)
        | RegistryError::NoChildrenForEphemerals(_)
        | RegistryError::NotAuthorized(_) => RegistryError::TxnAborted {
            index: 0,
            cause: Box::new(e),
        },
        other => other,
    };
    // Entered in the journals and queued under one lock (see `journal`); the request is
    // queued when its future is made.
    let enter = |path: &NodePath| -> (Written, Sending<'_>) {
        let sending = inner.journals.sending();
        (sending.enter(s.info.id, vec![path.clone()]), sending)
    };
    let result = match op {
        TxnOp::Create { path, .. } if path.is_root() => {
            Err(RegistryError::NodeExists(path.clone()))
        }
        TxnOp::Create { path, data, mode } => {
            let zk_mode = match mode {
                CreateMode::Persistent => zk::CreateMode::Persistent,
                CreateMode::Ephemeral => zk::CreateMode::Ephemeral,
            };
            let opts = zk_mode.with_acls(inner.acls());
            let (written, request) = {
                let (written, _sending) = enter(path);
                (written, s.client.create(path.as_str(), data, &opts))
            };
            let result = request.await;
            settle(written, &result, |(stat, _)| {
                After::Exists(data.clone(), map_stat(stat))
            });
            match result {
                Ok((stat, _)) => Ok(TxnOpResult::Created(map_stat(&stat))),
                Err(zk::Error::NoNode) => Err(RegistryError::NoNode(
                    path.parent().unwrap_or_else(NodePath::root),
                )),
                Err(e) => Err(map_error(e, path, None)),
            }
        }
        TxnOp::Set {
            path,
            data,
            expected,
        } => match expected.map(|v| (v, version32(v))) {
            Some((v, None)) => Err(RegistryError::BadVersion {
                path: path.clone(),
                expected: v,
            }),
            v => {
                let (written, request) = {
                    let (written, _sending) = enter(path);
                    let request = s
                        .client
                        .set_data(path.as_str(), data, v.and_then(|(_, v)| v));
                    (written, request)
                };
                let result = request.await;
                settle(written, &result, |stat| {
                    After::Exists(data.clone(), map_stat(stat))
                });
                result
                    .map(|stat| TxnOpResult::Set(map_stat(&stat)))
                    .map_err(|e| map_error(e, path, *expected))
            }
        },
        TxnOp::Delete { path, .. } if path.is_root() => Err(RegistryError::NotAuthorized(
            "the root node cannot be deleted".to_owned(),
        )),
        TxnOp::Delete { path, expected } => match expected.map(|v| (v, version32(v))) {
            Some((v, None)) => Err(RegistryError::BadVersion {
                path: path.clone(),
                expected: v,
            }),
            v => {
                let (written, request) = {
                    let (written, _sending) = enter(path);
                    (
                        written,
                        s.client.delete(path.as_str(), v.and_then(|(_, v)| v)),
                    )
                };
                let result = request.await;
                settle(written, &result, |()| After::Gone);
                result
                    .map(|()| TxnOpResult::Deleted)
                    .map_err(|e| map_error(e, path, *expected))
            }
        },
        TxnOp::Check(_) => Err(RegistryError::Backend("not a write".to_owned())),
    };
    result.map(|r| vec![r]).map_err(aborted)
}

/// Settles the journal entry of a single write by its answer: applied with the state
/// `after` tells, refused by the server (nothing changed), or of unknown outcome.
fn settle<T>(written: Written, result: &Result<T, zk::Error>, after: impl FnOnce(&T) -> After) {
    match result {
        Ok(answer) => written.applied(&[Some(after(answer))]),
        Err(e) if refused(e) => written.refused(),
        Err(_) => written.unknown(),
    }
}

/// Whether a request failed with `e` was refused by the server, so that it changed nothing
/// (rather than lost, timed out or cut off, when it may have been applied).
fn refused(e: &zk::Error) -> bool {
    matches!(
        e,
        zk::Error::NoNode
            | zk::Error::NodeExists
            | zk::Error::BadVersion
            | zk::Error::NotEmpty
            | zk::Error::NoChildrenForEphemerals
            | zk::Error::NoAuth
            | zk::Error::InvalidAcl
            | zk::Error::BadArguments(_)
    )
}

/// Reads the nodes of the Value checks on paths no earlier operation touches: one multi-read.
async fn read_values(
    s: &Session,
    ops: &[TxnOp],
) -> Result<HashMap<usize, Option<(Vec<u8>, i32)>>, RegistryError> {
    let mut wanted = Vec::new();
    // The paths the operations so far write (a search of them per check would cost n²).
    let mut written: HashSet<&NodePath> = HashSet::new();
    for (i, op) in ops.iter().enumerate() {
        if let TxnOp::Check(Check::Value(p, _)) = op
            && !written.contains(p)
        {
            wanted.push((i, p));
        }
        if let Some(p) = written_path(op) {
            written.insert(p);
        }
    }
    let mut out = HashMap::new();
    if wanted.is_empty() {
        return Ok(out);
    }
    let mut reader = s.client.new_multi_reader();
    for (_, p) in &wanted {
        reader
            .add_get_data(p.as_str())
            .map_err(|e| map_error(e, p, None))?;
    }
    let results = reader
        .commit()
        .await
        .map_err(|e| map_error(e, &NodePath::root(), None))?;
    for ((i, p), r) in wanted.into_iter().zip(results) {
        let value = match r {
            zk::MultiReadResult::Data { data, stat } => Some((data, stat.version)),
            zk::MultiReadResult::Error {
                err: zk::Error::NoNode,
            } => None,
            zk::MultiReadResult::Error { err } => return Err(map_error(err, p, None)),
            other => {
                return Err(RegistryError::Backend(format!(
                    "unexpected multi-read result {other:?}"
                )));
            }
        };
        out.insert(i, value);
    }
    Ok(out)
}

/// The path `op` writes, if it writes one.
fn written_path(op: &TxnOp) -> Option<&NodePath> {
    match op {
        TxnOp::Create { path, .. } | TxnOp::Set { path, .. } | TxnOp::Delete { path, .. } => {
            Some(path)
        }
        TxnOp::Check(_) => None,
    }
}

/// The effects of `ops` on the paths they write, in order.
fn effects(ops: &[TxnOp]) -> HashMap<&NodePath, Effect<'_>> {
    let mut map = HashMap::new();
    for op in ops {
        note_effect(&mut map, op);
    }
    map
}

/// Adds the effect of `op`, which comes after those in `map`, to them.
fn note_effect<'a>(map: &mut HashMap<&'a NodePath, Effect<'a>>, op: &'a TxnOp) {
    match op {
        TxnOp::Create { path, data, mode } => {
            map.insert(
                path,
                Effect::Exists {
                    data: Some(data.as_slice()),
                    ephemeral: *mode == CreateMode::Ephemeral,
                },
            );
        }
        TxnOp::Set { path, data, .. } => {
            let ephemeral = matches!(
                map.get(path),
                Some(Effect::Exists {
                    ephemeral: true,
                    ..
                })
            );
            map.insert(
                path,
                Effect::Exists {
                    data: Some(data.as_slice()),
                    ephemeral,
                },
            );
        }
        TxnOp::Delete { path, .. } => {
            map.insert(path, Effect::Gone);
        }
        TxnOp::Check(_) => {}
    }
}

fn plan<'a>(
    s: &Session,
    ops: &'a [TxnOp],
    plans: &'a HashMap<usize, AbsentPlan>,
    values: &HashMap<usize, Option<(Vec<u8>, i32)>>,
) -> Result<Vec<Step<'a>>, RegistryError> {
    let mut steps = Vec::with_capacity(ops.len());
    // The effects of the operations before the current one, kept as the loop goes (worked
    // out again for each operation, they cost a transaction of n operations n²).
    let mut earlier: HashMap<&NodePath, Effect<'a>> = HashMap::new();
    for (i, op) in ops.iter().enumerate() {
        let step = match op {
            TxnOp::Check(Check::Session(id)) => {
                if *id == s.info.id {
                    // Makes the request reach the server, which validates the session.
                    Step::Zk(vec![ZkOp::Check("/", -1)])
                } else {
                    Step::Fail(RegistryError::SessionMismatch {
                        expected: *id,
                        actual: Some(s.info.id),
                    })
                }
            }
            TxnOp::Check(Check::Exists(p)) => Step::Zk(vec![ZkOp::Check(p.as_str(), -1)]),
            TxnOp::Check(Check::Version(p, v)) => match version32(*v) {
                Some(v) => Step::Zk(vec![ZkOp::Check(p.as_str(), v)]),
                None => Step::Fail(RegistryError::BadVersion {
                    path: p.clone(),
                    expected: *v,
                }),
            },
            TxnOp::Check(Check::Value(p, want)) => match earlier.get(p) {
                Some(Effect::Exists { data, .. }) => {
                    if *data == Some(want.as_slice()) {
                        Step::Zk(vec![ZkOp::Check(p.as_str(), -1)])
                    } else {
                        Step::Fail(RegistryError::ValueMismatch(p.clone()))
                    }
                }
                Some(Effect::Gone) => Step::Fail(RegistryError::NoNode(p.clone())),
                None => match values.get(&i) {
                    Some(Some((data, version))) if data == want => {
                        Step::Zk(vec![ZkOp::Check(p.as_str(), *version)])
                    }
                    Some(Some(_)) => Step::Fail(RegistryError::ValueMismatch(p.clone())),
                    Some(None) => Step::Fail(RegistryError::NoNode(p.clone())),
                    None => {
                        return Err(RegistryError::Backend(format!("value of {p} was not read")));
                    }
                },
            },
            TxnOp::Check(Check::Absent(p)) => match earlier.get(p) {
                Some(Effect::Exists { .. }) => Step::Fail(RegistryError::NodeExists(p.clone())),
                Some(Effect::Gone) => Step::Local(TxnOpResult::Checked),
                None if p.is_root() => Step::Fail(RegistryError::NodeExists(p.clone())),
                None => match plans.get(&i).unwrap_or(&AbsentPlan::Direct) {
                    AbsentPlan::Direct => {
                        Step::Zk(vec![ZkOp::Create(p, &[], false), ZkOp::Delete(p, None)])
                    }
                    AbsentPlan::Ancestor(c) => {
                        Step::Zk(vec![ZkOp::Create(c, &[], false), ZkOp::Delete(c, None)])
                    }
                    AbsentPlan::Ephemeral(a, v) => Step::Zk(vec![ZkOp::Check(a.as_str(), *v)]),
                },
            },
            TxnOp::Create { path, data, mode } => {
                if path.is_root() {
                    Step::Fail(RegistryError::NodeExists(path.clone()))
                } else {
                    Step::Zk(vec![ZkOp::Create(
                        path,
                        data,
                        *mode == CreateMode::Ephemeral,
                    )])
                }
            }
            TxnOp::Set {
                path,
                data,
                expected,
            } => match expected.map(|v| (v, version32(v))) {
                Some((v, None)) => Step::Fail(RegistryError::BadVersion {
                    path: path.clone(),
                    expected: v,
                }),
                Some((_, v)) => Step::Zk(vec![ZkOp::Set(path, data, v)]),
                None => Step::Zk(vec![ZkOp::Set(path, data, None)]),
            },
            TxnOp::Delete { path, expected } => {
                if path.is_root() {
                    Step::Fail(RegistryError::NotAuthorized(
                        "the root node cannot be deleted".to_owned(),
                    ))
                } else {
                    match expected.map(|v| (v, version32(v))) {
                        Some((v, None)) => Step::Fail(RegistryError::BadVersion {
                            path: path.clone(),
                            expected: v,
                        }),
                        Some((_, v)) => Step::Zk(vec![ZkOp::Delete(path, v)]),
                        None => Step::Zk(vec![ZkOp::Delete(path, None)]),
                    }
                }
            }
        };
        steps.push(step);
        note_effect(&mut earlier, op);
    }
    Ok(steps)
}

/// The error of operation `op` whose `k`-th ZooKeeper operation failed with `e`.
fn failure(op: &TxnOp, plan: Option<&AbsentPlan>, k: usize, e: zk::Error) -> Failure {
    let parent = |p: &NodePath| p.parent().unwrap_or_else(NodePath::root);
    match op {
        TxnOp::Check(Check::Session(_)) => match e {
            zk::Error::NoNode => Failure::Final(RegistryError::Backend(
                "the namespace node is missing (deleted behind the client's back)".to_owned(),
            )),
            e => Failure::Final(map_error(e, &NodePath::root(), None)),
        },
        TxnOp::Check(Check::Exists(p)) => Failure::Final(map_error(e, p, None)),
        TxnOp::Check(Check::Version(p, v)) => Failure::Final(map_error(e, p, Some(*v))),
        TxnOp::Check(Check::Value(p, _)) => match e {
            // Changed or deleted since it was read: read again.
            zk::Error::BadVersion | zk::Error::NoNode => Failure::Retry,
            e => Failure::Final(map_error(e, p, None)),
        },
        TxnOp::Check(Check::Absent(p)) => match (plan.unwrap_or(&AbsentPlan::Direct), k, e) {
            (AbsentPlan::Direct, 0, zk::Error::NodeExists) => {
                Failure::Final(RegistryError::NodeExists(p.clone()))
            }
            (
                AbsentPlan::Direct | AbsentPlan::Ancestor(_),
                0,
                zk::Error::NoNode | zk::Error::NoChildrenForEphemerals,
            )
            | (AbsentPlan::Ancestor(_), 0, zk::Error::NodeExists)
            | (AbsentPlan::Ephemeral(..), _, zk::Error::NoNode | zk::Error::BadVersion) => {
                Failure::Retry
            }
            (_, _, e) => Failure::Final(map_error(e, p, None)),
        },
        TxnOp::Create { path, .. } => Failure::Final(match e {
            zk::Error::NoNode => RegistryError::NoNode(parent(path)),
            e => map_error(e, path, None),
        }),
        TxnOp::Set { path, expected, .. } | TxnOp::Delete { path, expected } => {
            Failure::Final(map_error(e, path, *expected))
        }
    }
}

/// Plans an Absent check whose parent is missing or ephemeral: finds the nearest existing
/// ancestor (as the transaction's earlier operations leave it).
async fn replan_absent(
    s: &Session,
    ops: &[TxnOp],
    i: usize,
    p: &NodePath,
) -> Result<AbsentPlan, RegistryError> {
    let earlier = effects(&ops[..i]);
    let mut child = p.clone();
    loop {
        let Some(parent) = child.parent() else {
            return Ok(AbsentPlan::Direct);
        };
        let (exists, ephemeral) = if parent.is_root() {
            (Some(-1), false)
        } else {
            match earlier.get(&parent) {
                Some(Effect::Exists { ephemeral, .. }) => (Some(-1), *ephemeral),
                Some(Effect::Gone) => (None, false),
                None => match s.client.check_stat(parent.as_str()).await {
                    Ok(Some(stat)) => (Some(stat.version), stat.ephemeral_owner != 0),
                    Ok(None) => (None, false),
                    Err(e) => return Err(map_error(e, &parent, None)),
                },
            }
        };
        match exists {
            Some(version) if ephemeral => return Ok(AbsentPlan::Ephemeral(parent, version)),
            Some(_) if &child == p => return Ok(AbsentPlan::Direct),
            Some(_) => return Ok(AbsentPlan::Ancestor(child)),
            None => child = parent,
        }
    }
}

/// Turns the multi's results into the operations' results.
async fn collect(
    s: &Session,
    ops: &[TxnOp],
    steps: Vec<Step<'_>>,
    results: Vec<zk::MultiWriteResult>,
) -> Result<Vec<TxnOpResult>, RegistryError> {
    // Every write of a multi carries the multi's zxid.
    let set_zxids: Vec<i64> = results
        .iter()
        .filter_map(|r| match r {
            zk::MultiWriteResult::SetData { stat } => Some(stat.mzxid),
            zk::MultiWriteResult::Create { stat, .. } if !stat.is_invalid() => Some(stat.czxid),
            _ => None,
        })
        .collect();
    let multi_mtime = multi_mtime(&results);
    let mut zxid: Option<u64> = None;
    let mut results = results.into_iter();
    let mut out = Vec::with_capacity(steps.len());
    for (i, step) in steps.into_iter().enumerate() {
        let n = match step {
            Step::Local(r) => {
                out.push(r);
                continue;
            }
            Step::Fail(e) => return Err(e),
            Step::Zk(zops) => zops.len(),
        };
        let mine: Vec<zk::MultiWriteResult> = results.by_ref().take(n).collect();
        if mine.len() != n {
            return Err(RegistryError::Backend(
                "ZooKeeper multi returned fewer results than operations".to_owned(),
            ));
        }
        let result = match (&ops[i], mine.into_iter().next()) {
            (TxnOp::Check(_), _) => TxnOpResult::Checked,
            (TxnOp::Create { path, mode, .. }, Some(zk::MultiWriteResult::Create { stat, .. })) => {
                if stat.is_invalid() {
                    // ZooKeeper 3.8 leaves created nodes' stats out of a multi's answer
                    // (ZOOKEEPER-4026): a new node has data version 0 and was created by the
                    // multi's single zxid.
                    let zxid = match zxid {
                        Some(z) => z,
                        None => {
                            let z = multi_zxid(s, path, &set_zxids).await;
                            zxid = Some(z);
                            z
                        }
                    };
                    TxnOpResult::Created(shardjob_core::registry::Stat {
                        version: Version(0),
                        created: shardjob_core::registry::Revision(zxid),
                        modified: shardjob_core::registry::Revision(zxid),
                        ephemeral_owner: (*mode == CreateMode::Ephemeral).then_some(s.info.id),
                        mtime_ms: multi_mtime,
                    })
                } else {
                    TxnOpResult::Created(map_stat(&stat))
                }
            }
            (TxnOp::Set { .. }, Some(zk::MultiWriteResult::SetData { stat })) => {
                TxnOpResult::Set(map_stat(&stat))
            }
            (TxnOp::Delete { .. }, Some(zk::MultiWriteResult::Delete)) => TxnOpResult::Deleted,
            (op, r) => {
                return Err(RegistryError::Backend(format!(
                    "ZooKeeper multi answered {r:?} to {op:?}"
                )));
            }
        };
        out.push(result);
    }
    Ok(out)
}

/// The zxid of a committed multi that created `created`: from its other answers, else the
/// node's `czxid` (read now), else its parent's `pzxid` (exact unless changed since).
async fn multi_zxid(s: &Session, created: &NodePath, known: &[i64]) -> u64 {
    if let Some(z) = known.first() {
        return (*z).max(0) as u64;
    }
    if let Ok(Some(stat)) = s.client.check_stat(created.as_str()).await
        && stat.version == 0
    {
        return stat.czxid.max(0) as u64;
    }
    let parent = created.parent().unwrap_or_else(NodePath::root);
    match s.client.check_stat(parent.as_str()).await {
        Ok(Some(stat)) => stat.pzxid.max(0) as u64,
        _ => 0,
    }
}

/// `root` and everything below it, parents before children, siblings by name; one multi-read
/// per batch of nodes of a level.
pub(crate) async fn get_tree(
    _inner: &Inner,
    s: &Session,
    root: &NodePath,
) -> Result<Vec<Node>, RegistryError> {
    const BATCH: usize = 64;
    // Nodes with their children, keyed by path; assembled in order at the end.
    let mut found: HashMap<NodePath, (Vec<u8>, zk::Stat, Vec<String>)> = HashMap::new();
    let mut level = vec![root.clone()];
    while !level.is_empty() {
        let mut next = Vec::new();
        for chunk in level.chunks(BATCH) {
            let mut reader = s.client.new_multi_reader();
            for p in chunk {
                reader
                    .add_get_data(p.as_str())
                    .map_err(|e| map_error(e, p, None))?;
                reader
                    .add_get_children(p.as_str())
                    .map_err(|e| map_error(e, p, None))?;
            }
            let results = reader
                .commit()
                .await
                .map_err(|e| map_error(e, root, None))?;
            let mut results = results.into_iter();
            for p in chunk {
                let (data, children) = (results.next(), results.next());
                let (data, stat) = match data {
                    Some(zk::MultiReadResult::Data { data, stat }) => (data, stat),
                    Some(zk::MultiReadResult::Error {
                        err: zk::Error::NoNode,
                    }) => continue,
                    Some(zk::MultiReadResult::Error { err }) => {
                        return Err(map_error(err, p, None));
                    }
                    other => {
                        return Err(RegistryError::Backend(format!(
                            "unexpected multi-read result {other:?}"
                        )));
                    }
                };
                let mut names = match children {
                    Some(zk::MultiReadResult::Children { children }) => children,
                    // Deleted between the two reads of the batch: skip it.
                    _ => continue,
                };
                names.sort_unstable_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
                for name in &names {
                    if let Ok(c) = p.join(name) {
                        next.push(c);
                    }
                }
                found.insert(p.clone(), (data, stat, names));
            }
        }
        level = next;
    }
    let mut out = Vec::with_capacity(found.len());
    let mut stack = vec![root.clone()];
    while let Some(p) = stack.pop() {
        let Some((data, stat, names)) = found.remove(&p) else {
            continue;
        };
        for name in names.iter().rev() {
            if let Ok(c) = p.join(name) {
                stack.push(c);
            }
        }
        out.push(Node {
            path: p,
            data,
            stat: map_stat(&stat),
        });
    }
    Ok(out)
}
