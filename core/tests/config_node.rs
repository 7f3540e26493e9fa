//! A config node the registry holds but that cannot be used is reported for what it is (an
//! empty node as empty, not as a problem of one of its keys). The machine is driven by hand.

mod common;

use common::{every_second, hosting, load_request, node, now};
use shardjob_core::InstanceId;
use shardjob_core::machine::{Command, MachineEvent, MachineOptions};
use shardjob_core::registry::{RegistryReply, Tree};

#[test]
fn an_empty_config_node_is_reported_as_empty() {
    let mut m = hosting(
        MachineOptions::new(InstanceId::new("10.0.0.1@-@1").unwrap()),
        every_second("j"),
    );
    let id = load_request(&mut m);
    let tree = Tree {
        nodes: vec![
            node("/j", "SCRIPT", 1, None),
            node("/j/config", "", 1, None),
        ],
        revision: None,
    };
    m.handle_registry_reply(id, RegistryReply::Tree(tree), now(1));
    let mut errors = Vec::new();
    while let Some(cmd) = m.poll_command() {
        if let Command::Event(MachineEvent::ConfigInvalid { job, error }) = cmd {
            assert_eq!(job, "j");
            errors.push(error);
        }
    }
    assert!(!errors.is_empty());
    assert!(
        errors.iter().all(|e| e == "the config node is empty"),
        "{errors:?}"
    );
}
