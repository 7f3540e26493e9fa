//! A job whose registry subtree cannot be loaded (an ACL that denies reads under it, a name the
//! registry refuses) must not hold up a graceful shutdown: the machine, driven by hand here,
//! leaves it without its load and closes the session, however often the load fails.

use std::time::Duration;

mod common;

use common::{every_second, hosting, now};
use shardjob_core::InstanceId;
use shardjob_core::machine::{Command, Machine, MachineEvent, MachineOptions};
use shardjob_core::registry::{RegistryError, RegistryOp, RegistryReply};

/// Answers every load with "not authorized" and every other request with a timeout; returns
/// the events and whether the session was closed.
fn drain(m: &mut Machine, t: u64, events: &mut Vec<MachineEvent>) -> bool {
    let mut closed = false;
    let mut replies = Vec::new();
    while let Some(cmd) = m.poll_command() {
        match cmd {
            Command::Registry { id, op } => {
                let error = match op {
                    RegistryOp::GetTree(_) => RegistryError::NotAuthorized("read /locked".into()),
                    _ => RegistryError::Timeout,
                };
                replies.push((id, RegistryReply::Failed(error)));
            }
            Command::CloseSession => closed = true,
            Command::Event(e) => events.push(e),
            _ => {}
        }
    }
    for (id, reply) in replies {
        m.handle_registry_reply(id, reply, now(t));
    }
    closed
}

fn machine_with_a_locked_job() -> Machine {
    let me = InstanceId::new("10.0.0.1@-@1").unwrap();
    let mut opts = MachineOptions::new(me);
    opts.shutdown_grace = Duration::from_secs(30);
    hosting(opts, every_second("locked"))
}

/// Runs the machine on its own timer until `until`; returns the time the session was closed.
fn run(m: &mut Machine, from: u64, until: u64, events: &mut Vec<MachineEvent>) -> Option<u64> {
    let mut t = from;
    loop {
        if drain(m, t, events) {
            return Some(t);
        }
        let next = m.poll_timeout()?;
        t = next.ms().max(t + 1);
        if t > until {
            return None;
        }
        m.handle_timeout(now(t));
    }
}

#[test]
fn a_shutdown_does_not_wait_for_a_load_that_keeps_failing() {
    let mut m = machine_with_a_locked_job();
    let mut events = Vec::new();
    // The load fails again and again (with backoff) for ten seconds.
    assert_eq!(run(&mut m, 0, 10_000, &mut events), None);
    assert!(events.iter().any(|e| matches!(
        e,
        MachineEvent::RegistryFailed {
            purpose: "load",
            ..
        }
    )));
    m.shutdown(now(10_000));
    let closed = run(&mut m, 10_000, 60_000, &mut events);
    assert_eq!(
        closed,
        Some(10_000),
        "the session must close at once, the job being left without its load"
    );
    assert!(m.is_stopped());
    let reason = events.iter().find_map(|e| match e {
        MachineEvent::LeftUnloaded { job, reason } if job == "locked" => Some(reason.clone()),
        _ => None,
    });
    let reason = reason.expect("the leave says why");
    assert!(reason.contains("not authorized"), "{reason}");
    assert!(
        events
            .iter()
            .any(|e| matches!(e, MachineEvent::JobLeft { job } if job == "locked"))
    );
}

#[test]
fn a_removed_job_that_never_loaded_leaves_at_once() {
    let mut m = machine_with_a_locked_job();
    let mut events = Vec::new();
    assert_eq!(run(&mut m, 0, 5_000, &mut events), None);
    m.remove_job("locked", now(5_000)).unwrap();
    run(&mut m, 5_000, 6_000, &mut events);
    assert!(
        events
            .iter()
            .any(|e| matches!(e, MachineEvent::JobLeft { job } if job == "locked"))
    );
    assert_eq!(m.job_names().count(), 0);
}
