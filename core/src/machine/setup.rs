//! Setup: the job's skeleton, its configuration and this instance's registration, in one
//! transaction.

#[allow(clippy::wildcard_imports)]
use super::*;

/// The skeleton, configuration and registration of a job, in one transaction.
pub(crate) fn setup_ops(
    j: &mut Job,
    view: &JobView,
    me: &InstanceId,
    sid: crate::registry::SessionId,
    now_ms: i64,
) -> Result<Vec<TxnOp>, MachineEvent> {
    let name = j.name().to_owned();
    let root = j.paths.root().clone();
    let stored_type = j
        .cache
        .root()
        .and_then(|data| std::str::from_utf8(data).ok())
        .map(str::trim)
        .unwrap_or("");
    if !stored_type.is_empty() && stored_type != j.job_type {
        return Err(MachineEvent::JobTypeConflict {
            job: name,
            registry: stored_type.to_owned(),
            local: j.job_type.clone(),
        });
    }
    let mut ops = vec![TxnOp::Check(Check::Session(sid))];
    if j.cache.root().is_none() {
        ops.push(TxnOp::create(root.clone(), j.job_type.as_str()));
    } else if stored_type.is_empty() {
        ops.push(TxnOp::set(root.clone(), j.job_type.as_str()));
    }
    let config_path = j.paths.config();
    let has_config = j.cache.config().is_some();
    if !has_config || j.local.overwrite {
        let yaml = j.local.to_yaml();
        if has_config {
            ops.push(TxnOp::set(config_path, yaml.clone()));
        } else {
            ops.push(TxnOp::create(config_path, yaml.clone()));
        }
        j.config = Some(Arc::clone(&j.local));
        j.config_seen = None;
        j.written_config = Some(yaml);
    } else if j.config.is_none() {
        return Err(MachineEvent::ConfigInvalid {
            job: name,
            error: j
                .last_config_error
                .clone()
                .unwrap_or_else(|| "the registry holds no usable configuration".to_owned()),
        });
    }
    let p = &j.paths;
    // Whether this registration starts the job's cluster: the `instances` node exists and no
    // instance node does, not even one of ours from an earlier session. Proved in the
    // transaction (see "Start-up after downtime" in the module documentation): a start
    // writes the `instances` node after creating its instance node, checking the version it
    // saw, and every registration into a non-empty directory checks that one node it saw
    // there still exists.
    let registers = j
        .cache
        .own_instance()
        .is_none_or(|stat| stat.ephemeral_owner.is_some_and(|o| o != sid));
    let other = view.instances.iter().find(|id| *id != me);
    let starts = registers
        && other.is_none()
        && j.cache.own_instance().is_none()
        && j.cache.has_dir(Dir::Instances);
    for (dir, path) in Dir::all(p) {
        if !j.cache.has_dir(dir) {
            ops.push(TxnOp::create(path, Vec::<u8>::new()));
        }
    }
    if let (true, Some(other)) = (registers, other) {
        ops.push(TxnOp::Check(Check::Exists(p.instance(other))));
    }
    if !view.servers.contains_key(me.server_ip()) {
        let server = p.server_of(me);
        let disabled = j.config.as_ref().is_some_and(|c| c.disabled);
        ops.push(TxnOp::create(
            server,
            if disabled { "DISABLED" } else { "ENABLED" },
        ));
    }
    let instance = p.instance(me);
    // `labels` tells shardjob's instances from ElasticJob's in a mixed job.
    let value = instance_value(me);
    match j.cache.own_instance() {
        Some(stat) if stat.ephemeral_owner.is_none_or(|o| o == sid) => {}
        Some(stat) => {
            // A node of ours from an earlier session (a restarted registry can show it for
            // one more timeout): replace it.
            ops.push(TxnOp::Delete {
                path: instance.clone(),
                expected: Some(stat.version),
            });
            ops.push(TxnOp::create_ephemeral(instance, value));
        }
        None => ops.push(TxnOp::create_ephemeral(instance, value)),
    }
    if starts {
        // After the instance node: a watcher that has seen only a part of this transaction
        // sees either the old version (its own start fails the check) or this instance.
        let start = StartRecord {
            started: Some(now_ms),
        };
        ops.push(TxnOp::Set {
            path: p.instances(),
            data: start.to_bytes(),
            expected: j.cache.instances_version(),
        });
    }
    Ok(ops)
}

/// The data of this instance's node of a job: ElasticJob's `JobInstance` in YAML, whose
/// `labels` tells shardjob's instances from ElasticJob's in a mixed job.
pub(crate) fn instance_value(me: &InstanceId) -> String {
    format!(
        "jobInstanceId: {me}\nlabels: {}\nserverIp: {}\n",
        job_view::SHARDJOB_LABEL,
        me.server_ip()
    )
}
