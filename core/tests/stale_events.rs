//! A watch event older than the snapshot a job was loaded from changes nothing: etcd's watch
//! may deliver a deletion after a read that already shows the node created again, and the
//! machine then registered as the start of a cluster that had another live instance (seed 5268
//! of the simulator's CI world).

mod common;

use common::{every_second, hosting, load_request, node, now};
use shardjob_core::machine::{Command, Machine, MachineOptions};
use shardjob_core::registry::{
    Check, NodePath, RegistryEvent, RegistryOp, RegistryReply, RequestId, Revision, SessionId,
    Tree, TxnOp, WatchEvent, WatchEventKind,
};
use shardjob_core::{InstanceId, JobConfig};

const OTHER: &str = "/j/instances/10.0.0.2@-@2";

fn deleted(path: &str, rev: u64) -> RegistryEvent {
    RegistryEvent::Node(WatchEvent {
        kind: WatchEventKind::Deleted,
        path: NodePath::new(path).unwrap(),
        data: Vec::new(),
        stat: None,
        revision: Some(Revision(rev)),
    })
}

/// A machine hosting job `j` on a new session, and the id of its load of the job.
fn loading() -> (Machine, JobConfig, RequestId) {
    loading_with(MachineOptions::new(
        InstanceId::new("10.0.0.1@-@1").unwrap(),
    ))
}

fn loading_with(opts: MachineOptions) -> (Machine, JobConfig, RequestId) {
    let config = every_second("j");
    let mut m = hosting(opts, config.clone());
    let load = load_request(&mut m);
    (m, config, load)
}

/// The job's subtree: the other instance's node created again at revision 6, read at 6.
fn snapshot(config: &JobConfig) -> Tree {
    Tree {
        nodes: vec![
            node("/j", "SCRIPT", 1, None),
            node("/j/config", &config.to_yaml(), 1, None),
            node("/j/instances", "", 1, None),
            node(OTHER, "", 6, Some(SessionId(9))),
        ],
        revision: Some(Revision(6)),
    }
}

/// The registration transaction the machine sends next.
fn registration(m: &mut Machine) -> Vec<TxnOp> {
    let mut found = None;
    while let Some(cmd) = m.poll_command() {
        if let Command::Registry {
            op: RegistryOp::Transact(ops),
            ..
        } = cmd
        {
            if found.is_none() {
                found = Some(ops);
            }
        }
    }
    found.expect("a registration")
}

fn starts_the_cluster(ops: &[TxnOp]) -> bool {
    ops.iter()
        .any(|op| matches!(op, TxnOp::Set { path, .. } if path.as_str() == "/j/instances"))
}

fn checks_the_other(ops: &[TxnOp]) -> bool {
    ops.iter()
        .any(|op| matches!(op, TxnOp::Check(Check::Exists(p)) if p.as_str() == OTHER))
}

/// The old deletion comes while the load is under way (the machine applies such events after
/// the snapshot): the other instance stays in the view, and the registration joins its
/// cluster.
#[test]
fn a_deletion_older_than_the_snapshot_hides_no_instance() {
    let (mut m, config, load) = loading();
    m.handle_registry_event(deleted(OTHER, 5), now(1));
    m.handle_registry_reply(load, RegistryReply::Tree(snapshot(&config)), now(2));
    let ops = registration(&mut m);
    assert!(
        checks_the_other(&ops) && !starts_the_cluster(&ops),
        "{ops:#?}"
    );
}

/// A deletion after the snapshot is applied: the machine is alone and starts the cluster.
#[test]
fn a_deletion_after_the_snapshot_is_applied() {
    let (mut m, config, load) = loading();
    m.handle_registry_event(deleted(OTHER, 7), now(1));
    m.handle_registry_reply(load, RegistryReply::Tree(snapshot(&config)), now(2));
    let ops = registration(&mut m);
    assert!(
        starts_the_cluster(&ops) && !checks_the_other(&ops),
        "{ops:#?}"
    );
}

/// The planted bug `stale-event-after-reload` brings the old behaviour back: the deletion hides
/// the other instance, and the machine starts the cluster over it.
#[cfg(feature = "plant-bugs")]
#[test]
fn the_planted_bug_applies_the_old_deletion() {
    use shardjob_core::machine::plant::Plant;
    let mut opts = MachineOptions::new(InstanceId::new("10.0.0.1@-@1").unwrap());
    opts.plants.insert(Plant::StaleEventAfterReload);
    let (mut m, config, load) = loading_with(opts);
    m.handle_registry_event(deleted(OTHER, 5), now(1));
    m.handle_registry_reply(load, RegistryReply::Tree(snapshot(&config)), now(2));
    let ops = registration(&mut m);
    assert!(starts_the_cluster(&ops), "{ops:#?}");
}
