//! Prometheus metrics after a real run: a scheduler on the in-memory registry with
//! `.metrics(addr)` runs a job every second (one item failing) and a manual trigger; its
//! `/metrics`, scraped over HTTP, matches the runs it reported. Also: the application's own
//! registry, a port that cannot be bound. (`shardjob run --metrics` and the job file's
//! `elasticjob.metrics`: the cli crate's `tests/run_metrics.rs`; the overhead on lateness:
//! `examples/lateness.rs` with `metrics`.)

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use shardjob::core::machine::record::RunKind;
use shardjob::core::machine::{ItemOutcome, MachineEvent};
use shardjob::core::{CronExpr, InstanceId, JobConfig};
use shardjob::jobs::{JobError, ShardingContext, SimpleJob};
use shardjob::mem::MemServer;
use shardjob::runtime::{RunEvent, RuntimeError, Scheduler};
use shardjob_testkit::prometheus_sample as sample;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Generous: a loaded 2-core machine.
const DEADLINE: Duration = Duration::from_secs(60);

struct FailsOne;

#[async_trait]
impl SimpleJob for FailsOne {
    async fn execute(&self, ctx: &ShardingContext) -> Result<(), JobError> {
        if ctx.sharding_item == 1 {
            Err(JobError::failed("item 1 fails"))
        } else {
            Ok(())
        }
    }
}

/// `GET path` over HTTP/1.1; the status code and the body.
async fn get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .expect("the endpoint accepts");
    stream
        .write_all(format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n").as_bytes())
        .await
        .expect("a request");
    let mut response = String::new();
    tokio::time::timeout(DEADLINE, stream.read_to_string(&mut response))
        .await
        .expect("an answer in time")
        .expect("an answer");
    let (head, body) = response.split_once("\r\n\r\n").expect("a head and a body");
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("a status");
    (status, body.to_owned())
}

fn kind_label(kind: RunKind) -> &'static str {
    match kind {
        RunKind::Scheduled => "scheduled",
        RunKind::Misfire => "misfire",
        RunKind::Failover => "failover",
        RunKind::Trigger => "trigger",
    }
}

/// What the test saw of the runs, in the metrics' terms.
#[derive(Debug, Default, PartialEq)]
struct Tally {
    /// Executions by kind label.
    executions: BTreeMap<&'static str, std::collections::BTreeSet<u64>>,
    /// Item runs that ended, by (kind, outcome).
    runs: BTreeMap<(&'static str, &'static str), u64>,
    /// Starts of runs of fires on time (the lateness histogram's count).
    on_time_starts: u64,
    /// Item runs that ended (the duration histogram's count).
    ended: u64,
}

impl Tally {
    fn event(&mut self, event: &RunEvent) {
        match event {
            RunEvent::ItemStarted { run, .. } => {
                self.executions
                    .entry(kind_label(run.kind))
                    .or_default()
                    .insert(run.execution.0);
                if run.kind == RunKind::Scheduled {
                    self.on_time_starts += 1;
                }
            }
            RunEvent::ItemFinished { run, outcome, .. } => {
                self.executions
                    .entry(kind_label(run.kind))
                    .or_default()
                    .insert(run.execution.0);
                let outcome = match outcome {
                    ItemOutcome::Succeeded => "succeeded",
                    ItemOutcome::Failed(_) => "failed",
                    ItemOutcome::Cancelled => "cancelled",
                };
                *self
                    .runs
                    .entry((kind_label(run.kind), outcome))
                    .or_default() += 1;
                self.ended += 1;
            }
            _ => {}
        }
    }

    fn runs_of(&self, kind: &str, outcome: &str) -> u64 {
        self.runs
            .iter()
            .filter(|((k, o), _)| *k == kind && *o == outcome)
            .map(|(_, n)| *n)
            .sum()
    }

    fn executions_of(&self, kind: &str) -> u64 {
        self.executions.get(kind).map_or(0, |s| s.len() as u64)
    }

    /// Every figure of the job the scrape must show, with its expected value.
    fn expected(&self, job: &str) -> Vec<(String, String, f64)> {
        let j = format!("job=\"{job}\"");
        let mut want = vec![
            (
                "shardjob_job_fires_total".to_owned(),
                j.clone(),
                self.executions_of("scheduled") as f64,
            ),
            (
                "shardjob_job_misfires_total".to_owned(),
                j.clone(),
                self.executions_of("misfire") as f64,
            ),
            (
                "shardjob_job_failovers_total".to_owned(),
                j.clone(),
                self.executions_of("failover") as f64,
            ),
            (
                "shardjob_job_triggers_total".to_owned(),
                j.clone(),
                self.executions_of("trigger") as f64,
            ),
            (
                "shardjob_job_lateness_seconds_count".to_owned(),
                j.clone(),
                self.on_time_starts as f64,
            ),
            (
                "shardjob_job_run_duration_seconds_count".to_owned(),
                j.clone(),
                self.ended as f64,
            ),
        ];
        for kind in ["scheduled", "misfire", "failover", "trigger"] {
            for outcome in ["succeeded", "failed", "cancelled"] {
                let n = self.runs_of(kind, outcome);
                if n > 0 {
                    want.push((
                        "shardjob_job_item_runs_total".to_owned(),
                        format!("{j},kind=\"{kind}\",outcome=\"{outcome}\""),
                        n as f64,
                    ));
                }
            }
        }
        want
    }
}

/// Scrapes until every expected figure is shown (the metrics count in a task of their own,
/// a moment behind the events); the last scrape.
async fn scrape_until(addr: std::net::SocketAddr, want: &[(String, String, f64)]) -> String {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let (status, body) = get(addr, "/metrics").await;
        assert_eq!(status, 200, "{body}");
        let missing: Vec<_> = want
            .iter()
            .filter(|(name, labels, v)| sample(&body, name, labels) != Some(*v))
            .collect();
        if missing.is_empty() {
            return body;
        }
        if tokio::time::Instant::now() > deadline {
            panic!("the scrape does not show {missing:?}:\n{body}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scrape_after_a_real_run_shows_what_ran() {
    let server = MemServer::default();
    let config =
        JobConfig::new("settle", 3).with_cron(CronExpr::parse("* * * * * ?").expect("a cron"));
    let builder = Scheduler::builder()
        .registry(Arc::new(server.connect_default()))
        .instance_id(InstanceId::new("127.0.0.9@-@4242").expect("an id"))
        .job(config, FailsOne)
        .metrics(0u16);
    let mut events = builder.subscribe();
    let scheduler = builder.build().await.expect("a scheduler");
    let addr = scheduler.metrics_addr().expect("the endpoint is on");
    assert!(addr.ip().is_loopback(), "{addr}");
    let mut tally = Tally::default();
    let deadline = tokio::time::Instant::now() + DEADLINE;
    let mut triggered = false;
    // Two fires of the three items, then a manual trigger of the three.
    while tally.runs_of("trigger", "succeeded") + tally.runs_of("trigger", "failed") < 3 {
        let event = tokio::time::timeout_at(deadline, events.recv())
            .await
            .expect("runs within the deadline")
            .expect("no lag");
        tally.event(&event);
        // A loaded machine may run a fire late (a misfire): counted as well.
        let fired = tally.runs_of("scheduled", "failed") + tally.runs_of("misfire", "failed");
        if !triggered && fired >= 2 {
            triggered = true;
            scheduler.trigger("settle", None).await.expect("a trigger");
        }
    }
    // While the job runs here: every item owned, the leader, a live session.
    let owned = scheduler.owned_items("settle").await.expect("the plan");
    assert_eq!(owned, vec![0, 1, 2]);
    let body = scrape_until(
        addr,
        &[
            (
                "shardjob_job_items_owned".to_owned(),
                "job=\"settle\"".to_owned(),
                owned.len() as f64,
            ),
            (
                "shardjob_job_leader".to_owned(),
                "job=\"settle\"".to_owned(),
                1.0,
            ),
            (
                "shardjob_session_state".to_owned(),
                "state=\"connected\"".to_owned(),
                1.0,
            ),
        ],
    )
    .await;
    for (op, outcome) in [("get_tree", "ok"), ("transact", "ok")] {
        let n = sample(
            &body,
            "shardjob_registry_requests_total",
            &format!("operation=\"{op}\",outcome=\"{outcome}\""),
        )
        .unwrap_or(0.0);
        assert!(n > 0.0, "no {op} request counted:\n{body}");
        let timed = sample(
            &body,
            "shardjob_registry_request_duration_seconds_count",
            &format!("operation=\"{op}\""),
        )
        .unwrap_or(0.0);
        assert!(timed >= n, "{op}: {timed} timed, {n} counted:\n{body}");
    }
    assert!(body.ends_with("# EOF\n"), "{body}");

    // The job leaves: its runs stop, so the figures can be compared exactly.
    scheduler
        .remove_job("settle")
        .await
        .expect("the job leaves");
    loop {
        let event = tokio::time::timeout_at(deadline, events.recv())
            .await
            .expect("the job leaves within the deadline")
            .expect("no lag");
        tally.event(&event);
        if matches!(&event, RunEvent::Machine(MachineEvent::JobLeft { job }) if job == "settle") {
            break;
        }
    }
    assert!(
        tally.executions_of("scheduled") + tally.executions_of("misfire") >= 2,
        "{tally:?}"
    );
    assert_eq!(tally.executions_of("trigger"), 1, "{tally:?}");
    let mut want = tally.expected("settle");
    want.push((
        "shardjob_job_items_owned".to_owned(),
        "job=\"settle\"".to_owned(),
        0.0,
    ));
    want.push((
        "shardjob_job_leader".to_owned(),
        "job=\"settle\"".to_owned(),
        0.0,
    ));
    let body = scrape_until(addr, &want).await;
    // Nothing counted that did not run: no other outcome or kind of the job.
    let runs: Vec<&str> = body
        .lines()
        .filter(|l| l.starts_with("shardjob_job_item_runs_total{"))
        .collect();
    assert_eq!(
        runs.len(),
        want.iter()
            .filter(|w| w.0 == "shardjob_job_item_runs_total")
            .count(),
        "{runs:?} vs {tally:?}"
    );
    // Another path is refused.
    assert_eq!(get(addr, "/").await.0, 404);
    scheduler.shutdown().await.expect("a graceful stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metrics_go_into_the_applications_registry() {
    let server = MemServer::default();
    let mut registry = prometheus_client::registry::Registry::default();
    let builder = Scheduler::builder()
        .registry(Arc::new(server.connect_default()))
        .job(JobConfig::new("report", 2), FailsOne)
        .metrics_registry(&mut registry);
    let mut events = builder.subscribe();
    let scheduler = builder.build().await.expect("a scheduler");
    assert_eq!(scheduler.metrics_addr(), None);
    scheduler.trigger("report", None).await.expect("a trigger");
    let mut ended = 0;
    while ended < 2 {
        let event = tokio::time::timeout(DEADLINE, events.recv())
            .await
            .expect("runs within the deadline")
            .expect("no lag");
        if matches!(event, RunEvent::ItemFinished { .. }) {
            ended += 1;
        }
    }
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encoded");
        let ok = sample(
            &text,
            "shardjob_job_item_runs_total",
            "job=\"report\",kind=\"trigger\",outcome=\"succeeded\"",
        );
        let failed = sample(
            &text,
            "shardjob_job_item_runs_total",
            "job=\"report\",kind=\"trigger\",outcome=\"failed\"",
        );
        if ok == Some(1.0) && failed == Some(1.0) {
            assert_eq!(
                sample(&text, "shardjob_job_triggers_total", "job=\"report\""),
                Some(1.0),
                "{text}"
            );
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{text}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    scheduler.shutdown().await.expect("a graceful stop");
}

/// With the job history on, its queue and drops are shown.
#[cfg(feature = "history")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_history_queue_is_shown_when_tracing_is_on() {
    let dir = tempfile::tempdir().expect("a directory");
    let url = format!("sqlite://{}", dir.path().join("history.db").display());
    let server = MemServer::default();
    let builder = Scheduler::builder()
        .registry(Arc::new(server.connect_default()))
        .job(JobConfig::new("report", 2), FailsOne)
        .tracing(&url)
        .metrics(0u16);
    let scheduler = builder.build().await.expect("a scheduler");
    let addr = scheduler.metrics_addr().expect("the endpoint is on");
    scheduler.trigger("report", None).await.expect("a trigger");
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let (_, body) = get(addr, "/metrics").await;
        let written = sample(&body, "shardjob_history_written_total", "").unwrap_or(0.0);
        // The trigger's rows (status rows, starts, completions) are being written.
        if written >= 1.0 {
            assert_eq!(
                sample(&body, "shardjob_history_dropped_total", ""),
                Some(0.0),
                "{body}"
            );
            assert!(
                sample(&body, "shardjob_history_queue_depth", "").is_some(),
                "{body}"
            );
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{body}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    scheduler.shutdown().await.expect("a graceful stop");
}

#[tokio::test]
async fn a_port_that_cannot_be_bound_fails_the_build() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    let addr = taken.local_addr().expect("its address");
    let server = MemServer::default();
    let err = Scheduler::builder()
        .registry(Arc::new(server.connect_default()))
        .job(JobConfig::new("x", 1), FailsOne)
        .metrics(addr)
        .build()
        .await
        .expect_err("the port is taken");
    assert!(
        matches!(&err, RuntimeError::Metrics { addr: a, .. } if *a == addr),
        "{err:?}"
    );
    let message = err.to_string();
    assert!(
        message.contains(&format!("cannot open the metrics endpoint on {addr}"))
            && message.contains("pick another port"),
        "{message}"
    );
}
