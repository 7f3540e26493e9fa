//! Tracing throughput: how many events per second the writer gets into each database on this
//! machine. Ignored (it measures, it does not check); run it with
//! `cargo test -p shardjob-history --release --test throughput -- --ignored --nocapture`.

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use shardjob_history::{
    DatabaseUrl, ExecutionSource, History, HistoryOptions, ItemRun, StatusTrace, TaskState,
    TraceEvent, trace_id,
};
use shardjob_testkit::DbServer;

/// Executions of two items: 7 events each (3 status rows, 2 starts, 2 completions).
const EXECUTIONS: u64 = 5_000;

fn events(exec: u64, now: DateTime<Utc>) -> Vec<TraceEvent> {
    let e = exec.to_string();
    let task = "bench@-@0,1@-@READY@-@10.0.0.1@-@1".to_owned();
    let status = |state: TaskState| {
        TraceEvent::Status(StatusTrace {
            id: trace_id(&["bench", &e, state.as_str()]),
            job_name: "bench".into(),
            task_id: task.clone(),
            slave_id: "10.0.0.1".into(),
            execution_type: "READY".into(),
            sharding_item: "[0, 1]".into(),
            state,
            message: String::new(),
            creation_time: now,
        })
    };
    let run = |item: u32| ItemRun {
        id: trace_id(&["bench", &e, &item.to_string()]),
        job_name: "bench".into(),
        task_id: task.clone(),
        hostname: "bench-host".into(),
        ip: "10.0.0.1".into(),
        sharding_item: item,
        source: ExecutionSource::NormalTrigger,
        start_time: Some(now),
        instance_id: "10.0.0.1@-@1".into(),
        fire_time: now + chrono::Duration::seconds(exec as i64),
        run_kind: "SCHEDULED".into(),
        fencing_token: exec * 2 + u64::from(item),
    };
    let mut out = vec![status(TaskState::Staging), status(TaskState::Running)];
    out.extend((0..2).map(|i| TraceEvent::ItemStarted(run(i))));
    out.extend((0..2).map(|i| TraceEvent::ItemFinished {
        run: run(i),
        complete_time: now,
        success: i == 0,
        failure_cause: (i == 1).then(|| "boom".to_owned()),
    }));
    out.push(status(TaskState::Finished));
    out
}

async fn measure(name: &str, url: &str) {
    let url = DatabaseUrl::parse(url).expect("a URL");
    let history = History::start(
        &url,
        HistoryOptions {
            queue_bound: 1_000_000,
            ..HistoryOptions::default()
        },
    )
    .expect("history");
    // Tables created before the clock starts.
    history.store().ensure_schema().await.expect("schema");
    let now = Utc::now();
    let all: Vec<TraceEvent> = (0..EXECUTIONS).flat_map(|e| events(e, now)).collect();
    let n = all.len();
    let t0 = Instant::now();
    for e in all {
        history.record(e);
    }
    let recorded = t0.elapsed();
    let report = history.flush(Duration::from_secs(600)).await;
    let took = t0.elapsed();
    assert!(report.complete);
    assert_eq!(history.stats().dropped, 0);
    println!(
        "{name}: {n} events in {:.2}s = {:.0} events/s written (recording them took {:.1} ms, \
         {:.2} µs per event)",
        took.as_secs_f64(),
        n as f64 / took.as_secs_f64(),
        recorded.as_secs_f64() * 1000.0,
        recorded.as_secs_f64() * 1e6 / n as f64
    );
    history.shutdown(Duration::from_secs(10)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: run with --ignored --nocapture"]
async fn tracing_throughput() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    measure(
        "SQLite",
        &format!("sqlite://{}", dir.path().join("bench.db").display()),
    )
    .await;
    let pg = DbServer::postgres().expect("PostgreSQL");
    measure("PostgreSQL", &pg.url()).await;
    let maria = DbServer::mariadb().expect("MariaDB");
    measure("MariaDB", &maria.url()).await;
}
