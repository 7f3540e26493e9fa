//! What the core's integration tests share: a machine driven by hand, hosting one job on a
//! live session, and the registry's answers they hand it.

// Each test binary uses a part of it.
#![allow(dead_code)]

use std::time::Duration;

use chrono::{TimeZone, Utc};
use shardjob_core::machine::{Command, JobSpec, Machine, MachineOptions, Mono, Now};
use shardjob_core::registry::{
    Node, NodePath, RegistryEvent, RegistryOp, RequestId, Revision, SessionEvent, SessionId,
    SessionInfo, Stat, Version,
};
use shardjob_core::{CronExpr, JobConfig};

/// The machine's time `mono` ms after the start (wall time from 2027-01-15).
pub fn now(mono: u64) -> Now {
    Now {
        mono: Mono(mono),
        wall: Utc
            .timestamp_millis_opt(1_800_000_000_000 + mono as i64)
            .unwrap(),
    }
}

/// A node as the registry holds it: created and last changed at revision `rev`, ephemeral if
/// `owner` is its session.
pub fn node(path: &str, data: &str, rev: u64, owner: Option<SessionId>) -> Node {
    Node {
        path: NodePath::new(path).unwrap(),
        data: data.as_bytes().to_vec(),
        stat: Stat {
            version: Version(0),
            created: Revision(rev),
            modified: Revision(rev),
            ephemeral_owner: owner,
            mtime_ms: None,
        },
    }
}

/// Job `name` of 2 items firing every second, as a SCRIPT job.
pub fn every_second(name: &str) -> JobConfig {
    let mut config = JobConfig::new(name, 2);
    config.cron = Some(CronExpr::parse("* * * * * ?").unwrap());
    config
}

/// A machine hosting `config` that has just got session 7 (timeout 10 s); its commands are
/// not read yet.
pub fn hosting(opts: MachineOptions, config: JobConfig) -> Machine {
    let mut m = Machine::new(opts);
    let spec = JobSpec {
        config,
        job_type: "SCRIPT".to_owned(),
    };
    m.add_job(spec, now(0)).unwrap();
    let info = SessionInfo {
        id: SessionId(7),
        timeout: Duration::from_secs(10),
    };
    m.handle_registry_event(
        RegistryEvent::Session(SessionEvent::Connected(info)),
        now(0),
    );
    m
}

/// Reads the machine's commands; returns the id of its load of a job's subtree.
pub fn load_request(m: &mut Machine) -> RequestId {
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
    load.expect("the job's subtree is loaded")
}
