//! The instance's own node deleted in its live session is an operator's shutdown only once a
//! probe sent after the deletion succeeds: a session that expired deletes the node too, and
//! etcd's watch may show that deletion before the client hears of the expiry. A probe that
//! fails (the session gone, or the reply lost) proves nothing, and the job stays hosted here.
//! The machine is driven by hand (`docs/mutants-survivors.md` no. 26: a failed probe taken for
//! a successful one).

mod common;

use common::{every_second, hosting, load_request, node, now};
use shardjob_core::InstanceId;
use shardjob_core::machine::{Command, Machine, MachineEvent, MachineOptions};
use shardjob_core::registry::{
    Check, NodePath, RegistryError, RegistryEvent, RegistryOp, RegistryReply, RequestId, Revision,
    SessionId, Tree, TxnOp, WatchEvent, WatchEventKind,
};

const ME: &str = "10.0.0.1@-@1";
const OTHER: &str = "10.0.0.2@-@2";

/// A machine hosting job `j` on session 7, active: the registry shows it registered in that
/// session, beside another instance (session 9) that leads and owns both items.
fn active() -> Machine {
    let config = every_second("j");
    let mut m = hosting(
        MachineOptions::new(InstanceId::new(ME).unwrap()),
        config.clone(),
    );
    let load = load_request(&mut m);
    let (mine, theirs) = (Some(SessionId(7)), Some(SessionId(9)));
    let tree = Tree {
        nodes: vec![
            node("/j", "SCRIPT", 1, None),
            node("/j/config", &config.to_yaml(), 1, None),
            node("/j/instances", "", 1, None),
            node(&format!("/j/instances/{ME}"), "", 5, mine),
            node(&format!("/j/instances/{OTHER}"), "", 2, theirs),
            node("/j/servers", "", 1, None),
            node("/j/servers/10.0.0.1", "ENABLED", 1, None),
            node("/j/servers/10.0.0.2", "ENABLED", 1, None),
            node("/j/sharding", "", 1, None),
            node("/j/sharding/0", "", 3, None),
            node("/j/sharding/0/instance", OTHER, 3, None),
            node("/j/sharding/1", "", 3, None),
            node("/j/sharding/1/instance", OTHER, 3, None),
            node("/j/leader", "", 1, None),
            node("/j/leader/election", "", 1, None),
            node("/j/leader/election/instance", OTHER, 2, theirs),
            node("/j/leader/sharding", "", 1, None),
            node("/j/leader/failover", "", 1, None),
            node("/j/trigger", "", 1, None),
        ],
        revision: Some(Revision(6)),
    };
    m.handle_registry_reply(load, RegistryReply::Tree(tree), now(1));
    assert!(m.is_active("j"));
    m
}

/// What the machine asked for: the ids of its probes (a transaction that only checks the
/// session), and whether it reported an operator's shutdown. Any other request is left
/// unanswered (none is expected).
fn drain(m: &mut Machine) -> (Vec<RequestId>, bool) {
    let mut probes = Vec::new();
    let mut shut_down = false;
    while let Some(cmd) = m.poll_command() {
        match cmd {
            Command::Registry {
                id,
                op: RegistryOp::Transact(ops),
            } if matches!(ops.as_slice(), [TxnOp::Check(Check::Session(_))]) => probes.push(id),
            Command::Event(MachineEvent::OperatorShutdown { .. }) => shut_down = true,
            _ => {}
        }
    }
    (probes, shut_down)
}

/// The watch shows this instance's node deleted, after the snapshot the job was loaded from.
fn own_node_deleted(m: &mut Machine, at: u64) {
    let event = RegistryEvent::Node(WatchEvent {
        kind: WatchEventKind::Deleted,
        path: NodePath::new(format!("/j/instances/{ME}")).unwrap(),
        data: Vec::new(),
        stat: None,
        revision: Some(Revision(7)),
    });
    m.handle_registry_event(event, now(at));
}

#[test]
fn a_failed_probe_is_no_proof_that_the_session_outlived_its_node() {
    let mut m = active();
    drain(&mut m);
    own_node_deleted(&mut m, 1_000);
    let (mut probes, shut_down) = drain(&mut m);
    assert!(!shut_down, "not before a probe");
    assert_eq!(probes.len(), 1, "the deletion is checked with a probe");
    // For six seconds every probe fails (the session expired, then replies are lost), while
    // the machine wakes on its own (its sweep, its probes): it never takes the deletion for a
    // shutdown.
    let mut t = 1_000;
    let mut failed = 0;
    while t < 7_000 {
        for id in probes.drain(..) {
            let error = if failed == 0 {
                RegistryError::SessionExpired
            } else {
                RegistryError::Timeout
            };
            failed += 1;
            m.handle_registry_reply(id, RegistryReply::Failed(error), now(t));
        }
        let (more, shut_down) = drain(&mut m);
        assert!(!shut_down, "a failed probe taken for proof at {t} ms");
        probes = more;
        t = m.poll_timeout().expect("a wake").ms().max(t + 1);
        m.handle_timeout(now(t));
        let (more, shut_down) = drain(&mut m);
        assert!(!shut_down, "a failed probe taken for proof at {t} ms");
        probes.extend(more);
    }
    assert!(failed >= 2, "the machine probes again ({failed} probes)");
    assert!(m.is_active("j"));
    // The next probe succeeds: the session outlived the deletion, an operator's shutdown.
    let id = probes
        .pop()
        .or_else(|| {
            let t = m.poll_timeout()?.ms();
            m.handle_timeout(now(t));
            drain(&mut m).0.pop()
        })
        .expect("a probe");
    m.handle_registry_reply(id, RegistryReply::Transacted(Vec::new()), now(t + 10));
    let (_, shut_down) = drain(&mut m);
    assert!(shut_down, "a successful probe proves the shutdown");
}
