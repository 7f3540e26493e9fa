//! Transactions as etcd `Txn`s (see the crate documentation, "Transactions").

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use etcd_client as etcd;
use shardjob_core::backoff::Backoff;
use shardjob_core::registry::{
    Check, CreateMode, NodePath, RegistryError, Revision, SessionId, Stat, TxnOp, TxnOpResult,
    Version,
};

use crate::Inner;

const MAX_ATTEMPTS: usize = 5;

/// Fails early when the request exceeds the server's limits.
pub(crate) fn check_size(inner: &Inner, ops: &[TxnOp]) -> Result<(), RegistryError> {
    let limit = inner.config.max_request_bytes;
    let prefix = inner.prefix.len();
    let mut bytes = 64usize;
    for op in ops {
        let (path, data) = match op {
            TxnOp::Check(Check::Value(p, d)) => (p.as_str().len(), d.len()),
            TxnOp::Check(c) => (c.path().map_or(32, |p| p.as_str().len()), 0),
            TxnOp::Create { path, data, .. } | TxnOp::Set { path, data, .. } => {
                (path.as_str().len(), data.len())
            }
            TxnOp::Delete { path, .. } => (path.as_str().len(), 0),
        };
        bytes = bytes
            .saturating_add(3 * (prefix + path + 32))
            .saturating_add(data);
    }
    if bytes > limit {
        return Err(RegistryError::TooLarge(format!(
            "a transaction of about {bytes} bytes exceeds the etcd request limit of {limit} bytes \
             (the server's --max-request-bytes)"
        )));
    }
    Ok(())
}

/// A condition sent as a compare, with the operation it belongs to.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Cond {
    /// The key exists.
    Exists(String),
    /// The key does not exist.
    Absent(String),
    /// The key's mod_revision.
    ModRev(String, i64),
    /// The key's value.
    Value(String, Vec<u8>),
    /// The key (a parent) has no lease.
    NotEphemeral(String),
    /// No key under the prefix.
    NoChildren(String),
    /// No key under the prefix was written after this revision.
    Unchanged(String, i64),
    /// The session marker has this lease.
    Marker(String, i64),
}

impl Cond {
    fn compare(&self) -> etcd::Compare {
        use etcd::{Compare, CompareOp};
        match self {
            Cond::Exists(k) => Compare::create_revision(k.as_str(), CompareOp::Greater, 0),
            Cond::Absent(k) => Compare::create_revision(k.as_str(), CompareOp::Equal, 0),
            Cond::ModRev(k, v) => Compare::mod_revision(k.as_str(), CompareOp::Equal, *v),
            Cond::Value(k, d) => Compare::value(k.as_str(), CompareOp::Equal, d.clone()),
            Cond::NotEphemeral(k) => Compare::lease(k.as_str(), CompareOp::Equal, 0),
            Cond::NoChildren(p) => {
                Compare::create_revision(p.as_str(), CompareOp::Equal, 0).with_prefix()
            }
            Cond::Unchanged(p, rev) => {
                Compare::mod_revision(p.as_str(), CompareOp::Less, rev + 1).with_prefix()
            }
            Cond::Marker(k, lease) => Compare::lease(k.as_str(), CompareOp::Equal, *lease),
        }
    }
}

/// What earlier operations of the transaction did to a path.
#[derive(Clone, Debug)]
enum Effect {
    Exists {
        data: Vec<u8>,
        /// The lease of a node created here (0: persistent); `None`: the server's (set only).
        lease: Option<i64>,
        created_here: bool,
    },
    Gone {
        existed_before: bool,
    },
}

enum Step {
    Result(TxnOpResult),
    Fail(RegistryError),
}

struct Plan {
    /// (operation index, condition, the error if it does not hold).
    conds: Vec<(usize, Cond, RegistryError)>,
    /// Final writes, one per key, in first-touch order: (path, key, effect).
    writes: Vec<(NodePath, String, Effect)>,
    /// Per operation: what it gives on success (results of writes get the revision later).
    steps: Vec<Step>,
}

/// The child prefixes of nodes the transaction deletes after deleting some of their
/// descendants, each with the revision it was read at and the keys found under it then.
type Reads = HashMap<String, (i64, Vec<String>)>;

pub(crate) async fn transact(
    inner: &Inner,
    mut c: etcd::Client,
    ops: &[TxnOp],
) -> Result<Vec<TxnOpResult>, RegistryError> {
    if ops.is_empty() {
        return Ok(Vec::new());
    }
    let lease = inner
        .lease()
        .map(|s| s.id.0 as i64)
        .ok_or(RegistryError::SessionExpired)?;
    let mut race_at = 0;
    for _ in 0..MAX_ATTEMPTS {
        let reads = read_children(inner, &mut c, ops).await?;
        let plan = plan(inner, ops, lease, &reads)?;
        if let Some((index, e)) = plan.steps.iter().enumerate().find_map(|(i, s)| match s {
            Step::Fail(e) => Some((i, e.clone())),
            Step::Result(_) => None,
        }) {
            return Err(abort(index, e));
        }
        let max = inner.config.max_txn_ops;
        if plan.conds.len() > max || plan.writes.len() > max {
            return Err(RegistryError::TooLarge(format!(
                "the transaction needs {} compares and {} writes; etcd allows {max} of each \
                 (--max-txn-ops)",
                plan.conds.len(),
                plan.writes.len()
            )));
        }
        let compares: Vec<etcd::Compare> = plan.conds.iter().map(|(_, c, _)| c.compare()).collect();
        let puts: Vec<etcd::TxnOp> = plan
            .writes
            .iter()
            .map(|(_, key, effect)| match effect {
                Effect::Exists {
                    data,
                    lease,
                    created_here,
                } => {
                    let opts = if *created_here {
                        match lease {
                            Some(l) if *l != 0 => etcd::PutOptions::new().with_lease(*l),
                            _ => etcd::PutOptions::new(),
                        }
                    } else {
                        etcd::PutOptions::new().with_ignore_lease().with_prev_key()
                    };
                    etcd::TxnOp::put(key.as_str(), data.clone(), Some(opts))
                }
                Effect::Gone { .. } => etcd::TxnOp::delete(key.as_str(), None),
            })
            .collect();
        let txn = etcd::Txn::new().when(compares).and_then(puts);
        let resp = send(inner, &mut c, txn).await?;
        if resp.succeeded() {
            let revision = resp.header().map_or(0, |h| h.revision());
            return Ok(results(&plan, ops, resp, revision, lease));
        }
        // Which condition failed? Read the state again, in order.
        match diagnose(inner, &mut c, &plan).await? {
            Some((index, e)) => return Err(abort(index, e)),
            None => {
                race_at = plan.conds.first().map_or(0, |(i, _, _)| *i);
            }
        }
    }
    Err(abort(
        race_at,
        RegistryError::Backend(format!(
            "the transaction's compares kept racing with concurrent writes ({MAX_ATTEMPTS} attempts)"
        )),
    ))
}

/// Sends a transaction. While the channel cannot connect to the member it picked
/// (etcd-client keeps a dead member in rotation), the request never leaves, so the same `Txn`
/// is sent again after a short pause: this does not count as an attempt, and the request
/// deadline of [`Inner::run`] bounds it.
async fn send(
    inner: &Inner,
    c: &mut etcd::Client,
    txn: etcd::Txn,
) -> Result<etcd::TxnResponse, RegistryError> {
    let mut retries = Backoff::new(Duration::from_millis(20), Duration::from_millis(160)).retries();
    loop {
        match c.txn(txn.clone()).await {
            Ok(resp) => return Ok(resp),
            Err(e) if crate::never_sent(&e) && !inner.is_closed() => {
                tracing::debug!(error = %e, "etcd txn not sent (no connection); sending it again");
                inner.nudge.notify_one();
                tokio::time::sleep(retries.next_pause()).await;
            }
            Err(e) => return Err(inner.error(e)),
        }
    }
}

fn abort(index: usize, cause: RegistryError) -> RegistryError {
    match cause {
        // Not a decision on this operation.
        RegistryError::SessionExpired
        | RegistryError::ConnectionLoss
        | RegistryError::Timeout
        | RegistryError::Closed => cause,
        cause => RegistryError::TxnAborted {
            index,
            cause: Box::new(cause),
        },
    }
}

/// The keys of the paths below `p` that `ops` delete (callers pass the operations before
/// the delete of `p`).
fn deleted_under(inner: &Inner, ops: &[TxnOp], p: &NodePath) -> Vec<String> {
    ops.iter()
        .filter_map(|op| match op {
            TxnOp::Delete { path, .. } if path != p && p.contains(path) => Some(inner.key(path)),
            _ => None,
        })
        .collect()
}

/// Reads the keys under the nodes that the transaction deletes after deleting some of their
/// descendants.
async fn read_children(
    inner: &Inner,
    c: &mut etcd::Client,
    ops: &[TxnOp],
) -> Result<Reads, RegistryError> {
    let mut reads = Reads::new();
    for (i, op) in ops.iter().enumerate() {
        let TxnOp::Delete { path, .. } = op else {
            continue;
        };
        if path.is_root() || deleted_under(inner, &ops[..i], path).is_empty() {
            continue;
        }
        let prefix = inner.child_prefix(path);
        if reads.contains_key(&prefix) {
            continue;
        }
        let resp = c
            .get(
                prefix.as_str(),
                Some(etcd::GetOptions::new().with_prefix().with_keys_only()),
            )
            .await
            .map_err(|e| inner.error(e))?;
        let revision = resp.header().map_or(0, |h| h.revision());
        let keys = resp
            .kvs()
            .iter()
            .filter_map(|kv| std::str::from_utf8(kv.key()).ok().map(str::to_owned))
            .collect();
        reads.insert(prefix, (revision, keys));
    }
    Ok(reads)
}

fn plan(inner: &Inner, ops: &[TxnOp], lease: i64, reads: &Reads) -> Result<Plan, RegistryError> {
    let mut conds = Vec::new();
    let mut steps = Vec::with_capacity(ops.len());
    let mut effects: HashMap<NodePath, Effect> = HashMap::new();
    let mut order: Vec<NodePath> = Vec::new();
    let mut touch = |effects: &mut HashMap<NodePath, Effect>, p: &NodePath, e: Effect| {
        if !effects.contains_key(p) {
            order.push(p.clone());
        }
        effects.insert(p.clone(), e);
    };
    for (i, op) in ops.iter().enumerate() {
        let step = match op {
            TxnOp::Check(Check::Session(id)) => {
                if id.0 as i64 == lease {
                    conds.push((
                        i,
                        Cond::Marker(inner.marker_key(lease), lease),
                        RegistryError::SessionExpired,
                    ));
                    Step::Result(TxnOpResult::Checked)
                } else {
                    Step::Fail(RegistryError::SessionMismatch {
                        expected: *id,
                        actual: Some(SessionId(lease as u64)),
                    })
                }
            }
            TxnOp::Check(Check::Exists(p)) => match effects.get(p) {
                Some(Effect::Exists { .. }) => Step::Result(TxnOpResult::Checked),
                Some(Effect::Gone { .. }) => Step::Fail(RegistryError::NoNode(p.clone())),
                None => {
                    conds.push((
                        i,
                        Cond::Exists(inner.key(p)),
                        RegistryError::NoNode(p.clone()),
                    ));
                    Step::Result(TxnOpResult::Checked)
                }
            },
            TxnOp::Check(Check::Absent(p)) => match effects.get(p) {
                Some(Effect::Exists { .. }) => Step::Fail(RegistryError::NodeExists(p.clone())),
                Some(Effect::Gone { .. }) => Step::Result(TxnOpResult::Checked),
                None => {
                    conds.push((
                        i,
                        Cond::Absent(inner.key(p)),
                        RegistryError::NodeExists(p.clone()),
                    ));
                    Step::Result(TxnOpResult::Checked)
                }
            },
            TxnOp::Check(Check::Version(p, v)) => match effects.get(p) {
                // Its version is this transaction's revision, which nobody can know yet.
                Some(Effect::Exists { .. }) => Step::Fail(RegistryError::BadVersion {
                    path: p.clone(),
                    expected: *v,
                }),
                Some(Effect::Gone { .. }) => Step::Fail(RegistryError::NoNode(p.clone())),
                None => {
                    conds.push((
                        i,
                        Cond::ModRev(inner.key(p), v.0),
                        RegistryError::BadVersion {
                            path: p.clone(),
                            expected: *v,
                        },
                    ));
                    Step::Result(TxnOpResult::Checked)
                }
            },
            TxnOp::Check(Check::Value(p, want)) => match effects.get(p) {
                Some(Effect::Exists { data, .. }) if data == want => {
                    Step::Result(TxnOpResult::Checked)
                }
                Some(Effect::Exists { .. }) => Step::Fail(RegistryError::ValueMismatch(p.clone())),
                Some(Effect::Gone { .. }) => Step::Fail(RegistryError::NoNode(p.clone())),
                None => {
                    conds.push((
                        i,
                        Cond::Value(inner.key(p), want.clone()),
                        RegistryError::ValueMismatch(p.clone()),
                    ));
                    Step::Result(TxnOpResult::Checked)
                }
            },
            TxnOp::Create { path, data, mode } => 'step: {
                if path.is_root() {
                    break 'step Step::Fail(RegistryError::NodeExists(path.clone()));
                }
                let parent = path.parent().unwrap_or_else(NodePath::root);
                if !parent.is_root() {
                    match effects.get(&parent) {
                        Some(Effect::Exists { lease: Some(l), .. }) if *l != 0 => {
                            break 'step Step::Fail(RegistryError::NoChildrenForEphemerals(parent));
                        }
                        Some(Effect::Exists { lease: Some(_), .. }) => {}
                        Some(Effect::Exists { lease: None, .. }) => conds.push((
                            i,
                            Cond::NotEphemeral(inner.key(&parent)),
                            RegistryError::NoChildrenForEphemerals(parent.clone()),
                        )),
                        Some(Effect::Gone { .. }) => {
                            break 'step Step::Fail(RegistryError::NoNode(parent));
                        }
                        None => {
                            conds.push((
                                i,
                                Cond::Exists(inner.key(&parent)),
                                RegistryError::NoNode(parent.clone()),
                            ));
                            conds.push((
                                i,
                                Cond::NotEphemeral(inner.key(&parent)),
                                RegistryError::NoChildrenForEphemerals(parent.clone()),
                            ));
                        }
                    }
                }
                match effects.get(path) {
                    Some(Effect::Exists { .. }) => {
                        break 'step Step::Fail(RegistryError::NodeExists(path.clone()));
                    }
                    Some(Effect::Gone {
                        existed_before: true,
                    }) => {
                        break 'step Step::Fail(RegistryError::Backend(format!(
                            "etcd cannot delete and create {path} again in one transaction"
                        )));
                    }
                    Some(Effect::Gone { .. }) => {}
                    None => conds.push((
                        i,
                        Cond::Absent(inner.key(path)),
                        RegistryError::NodeExists(path.clone()),
                    )),
                }
                let node_lease = match mode {
                    CreateMode::Persistent => 0,
                    CreateMode::Ephemeral => lease,
                };
                touch(
                    &mut effects,
                    path,
                    Effect::Exists {
                        data: data.clone(),
                        lease: Some(node_lease),
                        created_here: true,
                    },
                );
                Step::Result(TxnOpResult::Created(Stat {
                    version: Version(0),
                    created: Revision(0),
                    modified: Revision(0),
                    ephemeral_owner: (node_lease != 0).then_some(SessionId(node_lease as u64)),
                    mtime_ms: None,
                }))
            }
            TxnOp::Set {
                path,
                data,
                expected,
            } => match effects.get(path).cloned() {
                Some(Effect::Exists {
                    lease,
                    created_here,
                    ..
                }) => {
                    if let Some(v) = expected {
                        Step::Fail(RegistryError::BadVersion {
                            path: path.clone(),
                            expected: *v,
                        })
                    } else {
                        touch(
                            &mut effects,
                            path,
                            Effect::Exists {
                                data: data.clone(),
                                lease,
                                created_here,
                            },
                        );
                        Step::Result(TxnOpResult::Set(Stat {
                            version: Version(0),
                            created: Revision(0),
                            modified: Revision(0),
                            ephemeral_owner: None,
                            mtime_ms: None,
                        }))
                    }
                }
                Some(Effect::Gone { .. }) => Step::Fail(RegistryError::NoNode(path.clone())),
                None => {
                    let (cond, err) = expected_cond(inner, path, *expected);
                    conds.push((i, cond, err));
                    touch(
                        &mut effects,
                        path,
                        Effect::Exists {
                            data: data.clone(),
                            lease: None,
                            created_here: false,
                        },
                    );
                    Step::Result(TxnOpResult::Set(Stat {
                        version: Version(0),
                        created: Revision(0),
                        modified: Revision(0),
                        ephemeral_owner: None,
                        mtime_ms: None,
                    }))
                }
            },
            TxnOp::Delete { path, expected } => 'step: {
                if path.is_root() {
                    break 'step Step::Fail(RegistryError::NotAuthorized(
                        "the root node cannot be deleted".to_owned(),
                    ));
                }
                // Children this transaction created (and did not delete).
                let live_child = effects.iter().any(|(p, e)| {
                    p != path && path.contains(p) && matches!(e, Effect::Exists { .. })
                });
                if live_child {
                    break 'step Step::Fail(RegistryError::NotEmpty(path.clone()));
                }
                let created_here = match effects.get(path) {
                    Some(Effect::Gone { .. }) => {
                        break 'step Step::Fail(RegistryError::NoNode(path.clone()));
                    }
                    Some(Effect::Exists { .. }) if expected.is_some() => {
                        break 'step Step::Fail(RegistryError::BadVersion {
                            path: path.clone(),
                            expected: expected.unwrap_or(Version(0)),
                        });
                    }
                    Some(Effect::Exists { created_here, .. }) => *created_here,
                    None => {
                        let (cond, err) = expected_cond(inner, path, *expected);
                        conds.push((i, cond, err));
                        false
                    }
                };
                if !created_here {
                    let prefix = inner.child_prefix(path);
                    match reads.get(&prefix) {
                        Some((revision, keys)) => {
                            let deleted: BTreeSet<String> =
                                deleted_under(inner, &ops[..i], path).into_iter().collect();
                            if keys.iter().any(|k| !deleted.contains(k)) {
                                break 'step Step::Fail(RegistryError::NotEmpty(path.clone()));
                            }
                            conds.push((
                                i,
                                Cond::Unchanged(prefix, *revision),
                                RegistryError::NotEmpty(path.clone()),
                            ));
                        }
                        None => conds.push((
                            i,
                            Cond::NoChildren(prefix),
                            RegistryError::NotEmpty(path.clone()),
                        )),
                    }
                }
                touch(
                    &mut effects,
                    path,
                    Effect::Gone {
                        existed_before: !created_here,
                    },
                );
                Step::Result(TxnOpResult::Deleted)
            }
        };
        let failed = matches!(step, Step::Fail(_));
        steps.push(step);
        if failed {
            break;
        }
    }
    // The same condition twice (several creates under one parent) is sent once, for the
    // first operation that needs it.
    let mut seen = std::collections::HashSet::new();
    conds.retain(|(_, cond, _)| seen.insert(cond.clone()));
    let writes = order
        .into_iter()
        .filter_map(|p| {
            let e = effects.remove(&p)?;
            match e {
                Effect::Gone {
                    existed_before: false,
                } => None,
                e => Some((p.clone(), inner.key(&p), e)),
            }
        })
        .collect();
    Ok(Plan {
        conds,
        writes,
        steps,
    })
}

/// The compare of a set or delete of a node the transaction has not written before: its
/// `mod_revision` if a version is expected, else that it exists; with the error if it fails.
fn expected_cond(
    inner: &Inner,
    path: &NodePath,
    expected: Option<Version>,
) -> (Cond, RegistryError) {
    match expected {
        Some(v) => (
            Cond::ModRev(inner.key(path), v.0),
            RegistryError::BadVersion {
                path: path.clone(),
                expected: v,
            },
        ),
        None => (
            Cond::Exists(inner.key(path)),
            RegistryError::NoNode(path.clone()),
        ),
    }
}

/// The results of a committed transaction.
fn results(
    plan: &Plan,
    ops: &[TxnOp],
    resp: etcd::TxnResponse,
    revision: i64,
    lease: i64,
) -> Vec<TxnOpResult> {
    let rev = Revision(revision.max(0) as u64);
    // The previous value of every key set here: its creation revision and lease.
    let mut prev: HashMap<&NodePath, (Revision, i64)> = HashMap::new();
    for ((path, _, _), answer) in plan.writes.iter().zip(resp.op_responses()) {
        if let etcd::TxnOpResponse::Put(put) = answer
            && let Some(kv) = put.prev_key()
        {
            prev.insert(
                path,
                (Revision(kv.create_revision().max(0) as u64), kv.lease()),
            );
        }
    }
    let mut created_here: HashMap<&NodePath, i64> = HashMap::new();
    ops.iter()
        .zip(&plan.steps)
        .map(|(op, step)| match (op, step) {
            (TxnOp::Create { path, mode, .. }, _) => {
                let owner = match mode {
                    CreateMode::Persistent => 0,
                    CreateMode::Ephemeral => lease,
                };
                created_here.insert(path, owner);
                TxnOpResult::Created(stat(rev, rev, owner))
            }
            (TxnOp::Set { path, .. }, _) => {
                let (created, owner) = match created_here.get(path) {
                    Some(owner) => (rev, *owner),
                    None => prev.get(path).copied().unwrap_or((Revision(0), 0)),
                };
                TxnOpResult::Set(stat(created, rev, owner))
            }
            (_, Step::Result(r)) => r.clone(),
            (_, Step::Fail(_)) => TxnOpResult::Checked,
        })
        .collect()
}

fn stat(created: Revision, modified: Revision, lease: i64) -> Stat {
    Stat {
        version: Version(modified.0 as i64),
        created,
        modified,
        ephemeral_owner: (lease != 0).then_some(SessionId(lease as u64)),
        mtime_ms: None,
    }
}

/// Evaluates the conditions in order against the state now; the first that fails, with its
/// operation's index and error. `None` if all hold now.
async fn diagnose(
    inner: &Inner,
    c: &mut etcd::Client,
    plan: &Plan,
) -> Result<Option<(usize, RegistryError)>, RegistryError> {
    let mut cache: HashMap<String, Option<etcd::KeyValue>> = HashMap::new();
    for (index, cond, err) in &plan.conds {
        let holds = match cond {
            Cond::Exists(k)
            | Cond::Absent(k)
            | Cond::ModRev(k, _)
            | Cond::Value(k, _)
            | Cond::NotEphemeral(k)
            | Cond::Marker(k, _) => {
                if !cache.contains_key(k) {
                    let resp = c.get(k.as_str(), None).await.map_err(|e| inner.error(e))?;
                    cache.insert(k.clone(), resp.kvs().first().cloned());
                }
                let kv = cache.get(k).and_then(Option::as_ref);
                match cond {
                    Cond::Exists(_) => kv.is_some(),
                    Cond::Absent(_) => kv.is_none(),
                    Cond::ModRev(_, v) => kv.is_some_and(|kv| kv.mod_revision() == *v),
                    Cond::Value(_, d) => kv.is_some_and(|kv| kv.value() == d.as_slice()),
                    Cond::NotEphemeral(_) => kv.is_none_or(|kv| kv.lease() == 0),
                    Cond::Marker(_, l) => kv.is_some_and(|kv| kv.lease() == *l),
                    _ => true,
                }
            }
            Cond::NoChildren(p) => {
                let resp = c
                    .get(
                        p.as_str(),
                        Some(etcd::GetOptions::new().with_prefix().with_count_only()),
                    )
                    .await
                    .map_err(|e| inner.error(e))?;
                resp.count() == 0
            }
            Cond::Unchanged(p, rev) => {
                let resp = c
                    .get(
                        p.as_str(),
                        Some(
                            etcd::GetOptions::new()
                                .with_prefix()
                                .with_keys_only()
                                .with_min_mod_revision(rev + 1),
                        ),
                    )
                    .await
                    .map_err(|e| inner.error(e))?;
                resp.kvs().is_empty()
            }
        };
        if !holds {
            // A missing node is NoNode whatever the check wanted of it.
            let missing = match cond {
                Cond::ModRev(k, _) | Cond::Value(k, _) => cache.get(k).is_some_and(Option::is_none),
                _ => false,
            };
            let err = match (missing, err) {
                (true, RegistryError::BadVersion { path, .. })
                | (true, RegistryError::ValueMismatch(path)) => RegistryError::NoNode(path.clone()),
                _ => err.clone(),
            };
            return Ok(Some((*index, err)));
        }
    }
    Ok(None)
}
