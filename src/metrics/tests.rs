use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use prometheus_client::registry::Registry;
use shardjob_core::InstanceId;
use shardjob_core::machine::record::RunKind;
use shardjob_core::machine::{ExecutionId, ItemOutcome, MachineEvent};
use shardjob_core::registry::{NodePath, RegistryError, RegistryOp, RegistryReply, SessionEvent};
use shardjob_testkit::prometheus_sample as sample;

use super::*;
use crate::runtime::{ItemRunInfo, RunEvent};

fn info(job: &str, item: u32, execution: u64, kind: RunKind) -> ItemRunInfo {
    ItemRunInfo {
        instance: InstanceId::new("10.1.2.3@-@77").unwrap(),
        job: job.into(),
        item,
        execution: ExecutionId(execution),
        fire_time: at(0),
        kind,
        fencing_token: 1,
        task_id: format!("{job}@-@0,1@-@READY@-@10.1.2.3@-@77"),
    }
}

fn at(ms: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(1_764_050_400_000 + ms).unwrap()
}

fn scrape(metrics: &Metrics) -> String {
    let mut registry = Registry::default();
    metrics.register(&mut registry);
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &registry).unwrap();
    out
}

fn started(run: ItemRunInfo, late_ms: i64) -> RunEvent {
    RunEvent::ItemStarted {
        run,
        at: at(late_ms),
    }
}

fn finished(run: ItemRunInfo, outcome: ItemOutcome) -> RunEvent {
    RunEvent::ItemFinished {
        run,
        outcome,
        error: None,
        output: None,
        elapsed: Duration::from_millis(30),
    }
}

#[test]
fn runs_are_counted_by_job_kind_and_outcome_and_executions_once() {
    let metrics = Metrics::new();
    let mut r = Recorder::new(metrics.clone());
    // One fire on time, two items; one fails.
    r.event(&started(info("settle", 0, 7, RunKind::Scheduled), 4));
    r.event(&started(info("settle", 1, 7, RunKind::Scheduled), 2_000));
    r.event(&finished(
        info("settle", 0, 7, RunKind::Scheduled),
        ItemOutcome::Succeeded,
    ));
    r.event(&finished(
        info("settle", 1, 7, RunKind::Scheduled),
        ItemOutcome::Failed("boom".into()),
    ));
    // A trigger, a misfire cancelled before it started, a failover.
    r.event(&started(info("settle", 0, 8, RunKind::Trigger), 1));
    r.event(&finished(
        info("settle", 0, 8, RunKind::Trigger),
        ItemOutcome::Succeeded,
    ));
    r.event(&finished(
        info("settle", 1, 9, RunKind::Misfire),
        ItemOutcome::Cancelled,
    ));
    r.event(&started(info("report", 3, 10, RunKind::Failover), 9_000));
    r.event(&RunEvent::Machine(MachineEvent::Resharded {
        job: "report".into(),
        owners: BTreeMap::new(),
        moved_running: Vec::new(),
    }));
    r.event(&RunEvent::Machine(MachineEvent::TxnSplit {
        job: "report".into(),
        items: 64,
    }));
    r.event(&RunEvent::Machine(MachineEvent::SessionLost));

    let text = scrape(&metrics);
    let s = |name: &str, labels: &str| sample(&text, name, labels);
    assert_eq!(s("shardjob_job_fires_total", r#"job="settle""#), Some(1.0));
    assert_eq!(
        s("shardjob_job_triggers_total", r#"job="settle""#),
        Some(1.0)
    );
    assert_eq!(
        s("shardjob_job_misfires_total", r#"job="settle""#),
        Some(1.0)
    );
    assert_eq!(
        s("shardjob_job_failovers_total", r#"job="report""#),
        Some(1.0)
    );
    assert_eq!(s("shardjob_job_fires_total", r#"job="report""#), Some(0.0));
    let runs = "shardjob_job_item_runs_total";
    assert_eq!(
        s(runs, r#"job="settle",kind="scheduled",outcome="succeeded""#),
        Some(1.0)
    );
    assert_eq!(
        s(runs, r#"job="settle",kind="scheduled",outcome="failed""#),
        Some(1.0)
    );
    assert_eq!(
        s(runs, r#"job="settle",kind="trigger",outcome="succeeded""#),
        Some(1.0)
    );
    assert_eq!(
        s(runs, r#"job="settle",kind="misfire",outcome="cancelled""#),
        Some(1.0)
    );
    // Lateness: the two items of the fire on time only (4 ms and 2 s).
    let late = "shardjob_job_lateness_seconds";
    assert_eq!(s(&format!("{late}_count"), r#"job="settle""#), Some(2.0));
    assert_eq!(s(&format!("{late}_sum"), r#"job="settle""#), Some(2.004));
    assert_eq!(
        s(&format!("{late}_bucket"), r#"le="0.005",job="settle""#),
        Some(1.0)
    );
    assert_eq!(
        s(&format!("{late}_bucket"), r#"le="2.5",job="settle""#),
        Some(2.0)
    );
    assert_eq!(s(&format!("{late}_count"), r#"job="report""#), Some(0.0));
    // Duration: every item that ended.
    let dur = "shardjob_job_run_duration_seconds_count";
    assert_eq!(s(dur, r#"job="settle""#), Some(4.0));
    assert_eq!(
        s("shardjob_job_reshards_total", r#"job="report""#),
        Some(1.0)
    );
    assert_eq!(s("shardjob_registry_txn_splits_total", ""), Some(1.0));
    assert_eq!(s("shardjob_session_losses_total", ""), Some(1.0));
}

#[test]
fn an_execution_is_counted_once_even_when_its_items_interleave_with_others() {
    let metrics = Metrics::new();
    let mut r = Recorder::new(metrics.clone());
    for id in [1, 2, 1, 3, 2, 1] {
        r.event(&started(info("a", 0, id, RunKind::Scheduled), 0));
    }
    assert_eq!(
        sample(&scrape(&metrics), "shardjob_job_fires_total", r#"job="a""#),
        Some(3.0)
    );
}

#[test]
fn the_driver_probe_follows_requests_session_ownership_and_leadership() {
    let metrics = Metrics::new();
    let mut p = metrics.probe();
    let requests = p.requests();
    let get = RegistryOp::Get(NodePath::root());
    let txn = RegistryOp::Transact(Vec::new());
    requests.record(
        op_index(&get),
        &RegistryReply::Node(None),
        Duration::from_micros(300),
    );
    requests.record(
        op_index(&txn),
        &RegistryReply::Failed(RegistryError::NoNode(NodePath::root())),
        Duration::from_millis(3),
    );
    p.session(&SessionEvent::Suspended(
        shardjob_core::registry::SessionId(1),
    ));
    p.session(&SessionEvent::Reconnected(
        shardjob_core::registry::SessionId(1),
    ));
    p.job("settle", 3, false);
    p.machine_event(&MachineEvent::BecameLeader {
        job: "settle".into(),
    });
    p.job("other", 2, true);
    p.machine_event(&MachineEvent::JobLeft {
        job: "other".into(),
    });

    let text = scrape(&metrics);
    let s = |name: &str, labels: &str| sample(&text, name, labels);
    let req = "shardjob_registry_requests_total";
    assert_eq!(s(req, r#"operation="get",outcome="ok""#), Some(1.0));
    assert_eq!(
        s(req, r#"operation="transact",outcome="conflict""#),
        Some(1.0)
    );
    assert_eq!(s(req, r#"operation="get_tree",outcome="ok""#), Some(0.0));
    let lat = "shardjob_registry_request_duration_seconds_count";
    assert_eq!(s(lat, r#"operation="get""#), Some(1.0));
    assert_eq!(s(lat, r#"operation="transact""#), Some(1.0));
    assert_eq!(
        s("shardjob_session_state", r#"state="connected""#),
        Some(1.0)
    );
    assert_eq!(
        s("shardjob_session_state", r#"state="suspended""#),
        Some(0.0)
    );
    assert_eq!(
        s("shardjob_session_reconnects_total", r#"session="kept""#),
        Some(1.0)
    );
    assert_eq!(s("shardjob_job_items_owned", r#"job="settle""#), Some(3.0));
    assert_eq!(s("shardjob_job_leader", r#"job="settle""#), Some(1.0));
    assert_eq!(s("shardjob_job_items_owned", r#"job="other""#), Some(0.0));
    assert_eq!(s("shardjob_job_leader", r#"job="other""#), Some(0.0));
    p.machine_event(&MachineEvent::SessionLost);
    let text = scrape(&metrics);
    assert_eq!(
        sample(&text, "shardjob_job_leader", r#"job="settle""#),
        Some(0.0)
    );
}

#[test]
fn a_new_session_after_the_first_counts_as_a_reconnect() {
    let metrics = Metrics::new();
    let mut p = metrics.probe();
    let info = shardjob_core::registry::SessionInfo {
        id: shardjob_core::registry::SessionId(1),
        timeout: Duration::from_secs(10),
    };
    p.session(&SessionEvent::Connected(info));
    p.session(&SessionEvent::Expired(info.id));
    let text = scrape(&metrics);
    assert_eq!(
        sample(&text, "shardjob_session_state", r#"state="expired""#),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &text,
            "shardjob_session_reconnects_total",
            r#"session="new""#
        ),
        Some(0.0)
    );
    p.session(&SessionEvent::Connected(info));
    let text = scrape(&metrics);
    assert_eq!(
        sample(
            &text,
            "shardjob_session_reconnects_total",
            r#"session="new""#
        ),
        Some(1.0)
    );
}

#[test]
fn metrics_addresses_bind_loopback_unless_told_otherwise() {
    assert_eq!(
        "9464".parse::<MetricsAddr>().unwrap().0,
        "127.0.0.1:9464".parse().unwrap()
    );
    assert_eq!(
        "0.0.0.0:9464".parse::<MetricsAddr>().unwrap().0,
        "0.0.0.0:9464".parse().unwrap()
    );
    assert_eq!(
        "[::1]:1".parse::<MetricsAddr>().unwrap().0,
        "[::1]:1".parse().unwrap()
    );
    for bad in [
        "",
        "localhost:9464",
        "127.0.0.1",
        "127.0.0.1:99999",
        ":9464",
    ] {
        let e = bad.parse::<MetricsAddr>().unwrap_err();
        assert!(e.to_string().contains("HOST:PORT"), "{e}");
    }
}
