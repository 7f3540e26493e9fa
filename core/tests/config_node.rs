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

/// `maxTimeDiffSeconds` (ElasticJob's check of the clock against the registry's before each
/// run) is not honoured: a job given with it set is refused, and a registry configuration
/// that sets it (ElasticJob's, shared) is run and said so, once per configuration.
#[test]
fn max_time_diff_seconds_is_refused_locally_and_reported_from_the_registry() {
    use shardjob_core::machine::{JobSpec, Machine, MachineError};
    let opts = || MachineOptions::new(InstanceId::new("10.0.0.1@-@1").unwrap());
    let mut checked = every_second("j");
    checked.max_time_diff_seconds = 5;
    let mut m = Machine::new(opts());
    let spec = JobSpec {
        config: checked,
        job_type: "SCRIPT".to_owned(),
    };
    match m.add_job(spec, now(0)) {
        Err(MachineError::InvalidConfig { job, error }) => {
            assert_eq!(job, "j");
            assert!(error.starts_with("maxTimeDiffSeconds 5: "), "{error}");
        }
        other => panic!("not refused: {other:?}"),
    }

    let mut m = hosting(opts(), every_second("j"));
    let id = load_request(&mut m);
    let config = "jobName: j\ncron: '* * * * * ?'\nshardingTotalCount: 2\nmaxTimeDiffSeconds: 7\n";
    let tree = Tree {
        nodes: vec![
            node("/j", "SCRIPT", 1, None),
            node("/j/config", config, 1, None),
        ],
        revision: None,
    };
    m.handle_registry_reply(id, RegistryReply::Tree(tree), now(1));
    let mut reported = Vec::new();
    while let Some(cmd) = m.poll_command() {
        match cmd {
            Command::Event(MachineEvent::UnhonouredTimeDiff { job, seconds }) => {
                reported.push((job, seconds));
            }
            Command::Event(MachineEvent::ConfigInvalid { error, .. }) => {
                panic!("the registry's configuration refused: {error}")
            }
            _ => {}
        }
    }
    assert_eq!(reported, [("j".to_owned(), 7)]);
}
