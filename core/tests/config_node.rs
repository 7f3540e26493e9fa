//! A config node the registry holds but that cannot be used is reported for what it is (an
//! empty node as empty, not as a problem of one of its keys). The machine is driven by hand.

use std::time::Duration;

use chrono::{TimeZone, Utc};
use shardjob_core::machine::{Command, JobSpec, Machine, MachineEvent, MachineOptions, Now};
use shardjob_core::registry::{
    Node, NodePath, RegistryEvent, RegistryOp, RegistryReply, Revision, SessionEvent, SessionId,
    SessionInfo, Stat, Tree, Version,
};
use shardjob_core::{CronExpr, InstanceId, JobConfig};

fn now(mono: u64) -> Now {
    Now {
        mono,
        wall: Utc
            .timestamp_millis_opt(1_800_000_000_000 + mono as i64)
            .unwrap(),
    }
}

fn node(path: &str, data: &str) -> Node {
    Node {
        path: NodePath::new(path).unwrap(),
        data: data.as_bytes().to_vec(),
        stat: Stat {
            version: Version(0),
            created: Revision(1),
            modified: Revision(1),
            ephemeral_owner: None,
        },
    }
}

#[test]
fn an_empty_config_node_is_reported_as_empty() {
    let mut m = Machine::new(MachineOptions::new(
        InstanceId::new("10.0.0.1@-@1").unwrap(),
    ));
    let mut config = JobConfig::new("j", 2);
    config.cron = Some(CronExpr::parse("* * * * * ?").unwrap());
    m.add_job(
        JobSpec {
            config,
            job_type: "SCRIPT".to_owned(),
        },
        now(0),
    )
    .unwrap();
    let info = SessionInfo {
        id: SessionId(7),
        timeout: Duration::from_secs(10),
    };
    m.handle_registry_event(
        RegistryEvent::Session(SessionEvent::Connected(info)),
        now(0),
    );
    let mut load = None;
    while let Some(cmd) = m.poll_command() {
        if let Command::Registry {
            id,
            op: RegistryOp::GetTree(_),
        } = cmd
        {
            load = Some(id);
        }
    }
    let id = load.expect("the job's subtree is loaded");
    let tree = Tree {
        nodes: vec![node("/j", "SCRIPT"), node("/j/config", "")],
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
