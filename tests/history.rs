//! The job history after a real run: a scheduler on the in-memory registry with
//! `.tracing(url)` runs a job every second (one item failing) and a manual trigger; its rows in
//! SQLite, PostgreSQL and MariaDB (servers the test starts) match the runs it reported.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use shardjob::core::{CronExpr, InstanceId, JobConfig};
use shardjob::history::{DatabaseUrl, db::Store};
use shardjob::history::{ExecutionQuery, HistoryOptions, TracingConfig};
use shardjob::jobs::{JobError, ShardingContext, SimpleJob};
use shardjob::mem::MemServer;
use shardjob::runtime::{RunEvent, Scheduler};
use shardjob_testkit::DbServer;

/// Generous: a loaded 2-core machine.
const DEADLINE: Duration = Duration::from_secs(60);

struct FailsOne;

#[async_trait]
impl SimpleJob for FailsOne {
    async fn execute(&self, ctx: &ShardingContext) -> Result<(), JobError> {
        if ctx.sharding_item == 1 {
            Err(JobError::failed(format!(
                "item 1 of {} failed",
                ctx.job_name
            )))
        } else {
            Ok(())
        }
    }
}

#[derive(Debug, Default)]
struct Seen {
    started: BTreeSet<(u64, u32)>,
    finished: usize,
    executions: BTreeSet<u64>,
    tokens: BTreeSet<u64>,
    triggered: usize,
}

async fn a_real_run_leaves_its_rows(url: &str) {
    let server = MemServer::default();
    let config = JobConfig::new("settle.nightly", 3)
        .with_cron(CronExpr::parse("* * * * * ?").expect("a cron"));
    let db = DatabaseUrl::parse(url).expect("a URL");
    let builder = Scheduler::builder()
        .registry(Arc::new(server.connect_default()))
        .instance_id(InstanceId::new("127.0.0.9@-@4242").expect("an id"))
        .job(config, FailsOne)
        .tracing_config(TracingConfig {
            options: HistoryOptions {
                batch_size: 16,
                ..HistoryOptions::default()
            },
            ..TracingConfig::new(db.clone())
        });
    let mut events = builder.subscribe();
    let scheduler = builder.build().await.expect("a scheduler");
    let mut seen = Seen::default();
    let mut triggered = false;
    let deadline = tokio::time::Instant::now() + DEADLINE;
    // Two scheduled fires and a trigger, at least.
    while seen.finished < 9 || seen.triggered == 0 {
        let event = tokio::time::timeout_at(deadline, events.recv())
            .await
            .expect("runs within the deadline")
            .expect("no lag");
        match event {
            RunEvent::ItemStarted { run, .. } => {
                seen.started.insert((run.execution.0, run.item));
                seen.executions.insert(run.execution.0);
                seen.tokens.insert(run.fencing_token);
                if run.kind == shardjob::core::machine::record::RunKind::Trigger {
                    seen.triggered += 1;
                }
            }
            RunEvent::ItemFinished { .. } => {
                seen.finished += 1;
                if !triggered {
                    triggered = true;
                    scheduler
                        .trigger("settle.nightly", None)
                        .await
                        .expect("triggered");
                }
            }
            _ => {}
        }
    }
    scheduler.shutdown().await.expect("a graceful shutdown");
    // The shutdown took the events that came after the loop above: count them too.
    while let Ok(event) = events.try_recv() {
        if let RunEvent::ItemStarted { run, .. } = event {
            seen.started.insert((run.execution.0, run.item));
            seen.executions.insert(run.execution.0);
            seen.tokens.insert(run.fencing_token);
        }
    }
    let history = scheduler.history().expect("tracing is on");
    let stats = history.stats();
    assert_eq!(
        (stats.dropped, stats.rejected, stats.queued),
        (0, 0, 0),
        "{stats:?}"
    );

    let store = Store::connect_lazy(&db, DEADLINE).expect("a store");
    let all = store
        .executions(&ExecutionQuery {
            job_prefix: Some("settle.".into()),
            page_size: 1000,
            ..ExecutionQuery::default()
        })
        .await
        .expect("query");
    assert_eq!(
        all.total as usize,
        seen.started.len(),
        "one row per item run"
    );
    for row in &all.rows {
        assert_eq!(row.job_name, "settle.nightly");
        assert_eq!(row.ip, "127.0.0.9");
        assert_eq!(row.instance_id.as_deref(), Some("127.0.0.9@-@4242"));
        assert!(row.task_id.starts_with("settle.nightly@-@"), "{row:?}");
        assert!(
            row.task_id.ends_with("@-@READY@-@127.0.0.9@-@4242"),
            "{row:?}"
        );
        assert!(row.complete_time.is_some(), "every run ended: {row:?}");
        assert_eq!(row.success, row.sharding_item != 1, "{row:?}");
        assert_eq!(row.attempt, Some(1));
        assert!(
            seen.tokens
                .contains(&(row.fencing_token.unwrap_or(-1) as u64))
        );
        match row.run_kind.as_deref() {
            Some("TRIGGER") | Some("SCHEDULED") => {
                assert_eq!(row.execution_source, "NORMAL_TRIGGER")
            }
            Some("MISFIRE") => assert_eq!(row.execution_source, "MISFIRE"),
            other => panic!("unexpected run kind {other:?}"),
        }
        if row.sharding_item == 1 {
            assert_eq!(
                row.failure_cause.as_deref(),
                Some("item 1 of settle.nightly failed")
            );
        }
    }
    assert!(
        all.rows
            .iter()
            .any(|r| r.run_kind.as_deref() == Some("TRIGGER"))
    );
    let failed = store
        .executions(&ExecutionQuery {
            job_prefix: Some("settle.nightly".into()),
            success: Some(false),
            ..ExecutionQuery::default()
        })
        .await
        .expect("query");
    assert_eq!(
        failed.total as usize,
        seen.started.iter().filter(|(_, i)| *i == 1).count()
    );
    // Three status rows per execution: staging, running, and an error (item 1 failed).
    let statuses = store
        .statuses(Some("settle.nightly"), None, 10_000)
        .await
        .expect("statuses");
    let n = seen.executions.len();
    let count = |state: &str| statuses.iter().filter(|s| s.state == state).count();
    assert_eq!(
        (
            count("TASK_STAGING"),
            count("TASK_RUNNING"),
            count("TASK_ERROR")
        ),
        (n, n, n),
        "{statuses:#?}"
    );
    assert!(
        statuses
            .iter()
            .filter(|s| s.state == "TASK_ERROR")
            .all(|s| s.message.as_deref() == Some("{1=item 1 of settle.nightly failed}"))
    );
    assert!(
        statuses
            .iter()
            .all(|s| s.sharding_item == "[0, 1, 2]" && s.slave_id == "127.0.0.9")
    );
    store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_rows_after_a_real_run() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let url = format!("sqlite://{}", dir.path().join("history.db").display());
    a_real_run_leaves_its_rows(&url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_rows_after_a_real_run() {
    let server = DbServer::postgres().expect("a PostgreSQL server");
    a_real_run_leaves_its_rows(&server.url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_rows_after_a_real_run() {
    let server = DbServer::mariadb().expect("a MariaDB server");
    a_real_run_leaves_its_rows(&server.url()).await;
}

/// Counts its runs.
struct Counts(Arc<std::sync::atomic::AtomicUsize>);

#[async_trait]
impl SimpleJob for Counts {
    async fn execute(&self, _: &ShardingContext) -> Result<(), JobError> {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }
}

/// The history hears the scheduler's events in line, not through the subscribers' channel of
/// `EVENT_CAPACITY` events: a burst of more item events than that, on a one-thread runtime
/// where a reading task would get its turn only after the runs, leaves every row.
#[tokio::test(flavor = "current_thread")]
async fn a_burst_beyond_the_event_channel_loses_no_row() {
    const ITEMS: u32 = 3_000;
    assert!(2 * ITEMS as usize > shardjob::runtime::EVENT_CAPACITY);
    let dir = tempfile::tempdir().expect("a temporary directory");
    let url = format!("sqlite://{}", dir.path().join("history.db").display());
    let db = DatabaseUrl::parse(&url).expect("a URL");
    let server = MemServer::default();
    let ran = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let scheduler = Scheduler::builder()
        .registry(Arc::new(server.connect_default()))
        .instance_id(InstanceId::new("127.0.0.9@-@4243").expect("an id"))
        .job(JobConfig::new("burst", ITEMS), Counts(Arc::clone(&ran)))
        .tracing_config(TracingConfig::new(db.clone()))
        .build()
        .await
        .expect("a scheduler");
    // A subscriber that never reads: it misses events, the history must not.
    let _deaf = scheduler.subscribe();
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        // The job is active once the trigger is taken.
        if scheduler.trigger("burst", None).await.is_ok() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the job never became active"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    while ran.load(std::sync::atomic::Ordering::SeqCst) < ITEMS as usize {
        assert!(
            tokio::time::Instant::now() < deadline,
            "only {} of {ITEMS} items ran",
            ran.load(std::sync::atomic::Ordering::SeqCst)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    scheduler.shutdown().await.expect("a graceful shutdown");
    let stats = scheduler.history().expect("tracing is on").stats();
    assert_eq!(
        (stats.dropped, stats.rejected, stats.queued),
        (0, 0, 0),
        "{stats:?}"
    );
    let store = Store::connect_lazy(&db, DEADLINE).expect("a store");
    let page = store
        .executions(&ExecutionQuery {
            job_prefix: Some("burst".into()),
            success: Some(true),
            page_size: 1,
            ..ExecutionQuery::default()
        })
        .await
        .expect("query");
    assert_eq!(page.total, u64::from(ITEMS));
    store.close().await;
}

#[tokio::test]
async fn an_unusable_url_fails_the_build() {
    let server = MemServer::default();
    let err = Scheduler::builder()
        .registry(Arc::new(server.connect_default()))
        .job(JobConfig::new("j", 1), FailsOne)
        .tracing("oracle://db/x")
        .build()
        .await
        .expect_err("refused");
    assert!(err.to_string().contains("SQLite"), "{err}");
}
