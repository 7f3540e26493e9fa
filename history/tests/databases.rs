//! The history against real databases: SQLite (a file in a temporary directory), and
//! PostgreSQL and MariaDB servers the tests start (`shardjob_testkit::DbServer`).

use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use shardjob_history::{
    DatabaseUrl, Dialect, ExecutionQuery, ExecutionSource, History, HistoryOptions, ItemRun,
    StatusQuery, StatusTrace, Store, TaskState, TraceEvent, trace_id,
};
use shardjob_testkit::DbServer;

/// Generous: a loaded 2-core machine.
const DEADLINE: Duration = Duration::from_secs(60);

fn at(secs: i64) -> DateTime<Utc> {
    Utc.timestamp_opt(1_764_050_400 + secs, 0)
        .single()
        .expect("a valid time")
}

fn run(job: &str, item: u32, exec: u64) -> ItemRun {
    let instance = "10.0.0.1@-@42";
    ItemRun {
        id: trace_id(&[instance, job, &item.to_string(), &exec.to_string()]),
        job_name: job.to_owned(),
        task_id: format!("{job}@-@0,1@-@READY@-@{instance}"),
        hostname: "host-a".to_owned(),
        ip: "10.0.0.1".to_owned(),
        sharding_item: item,
        source: ExecutionSource::NormalTrigger,
        start_time: Some(at(exec as i64 * 10)),
        instance_id: instance.to_owned(),
        fire_time: at(exec as i64 * 10),
        run_kind: "SCHEDULED".to_owned(),
        fencing_token: 100 + exec,
    }
}

fn status(job: &str, exec: u64, state: TaskState) -> StatusTrace {
    StatusTrace {
        id: trace_id(&["10.0.0.1@-@42", job, &exec.to_string(), state.as_str()]),
        job_name: job.to_owned(),
        task_id: format!("{job}@-@0,1@-@READY@-@10.0.0.1@-@42"),
        slave_id: "10.0.0.1".to_owned(),
        execution_type: "READY".to_owned(),
        sharding_item: "[0, 1]".to_owned(),
        state,
        message: String::new(),
        creation_time: at(exec as i64 * 10),
    }
}

/// The events of one execution of `job` with two items, item 1 failing.
fn execution(job: &str, exec: u64, cause: &str) -> Vec<TraceEvent> {
    let mut out = vec![
        TraceEvent::Status(status(job, exec, TaskState::Staging)),
        TraceEvent::Status(status(job, exec, TaskState::Running)),
    ];
    for item in [0, 1] {
        out.push(TraceEvent::ItemStarted(run(job, item, exec)));
    }
    for item in [0, 1] {
        out.push(TraceEvent::ItemFinished {
            run: run(job, item, exec),
            complete_time: at(exec as i64 * 10 + 2),
            success: item == 0,
            failure_cause: (item == 1).then(|| cause.to_owned()),
        });
    }
    out.push(TraceEvent::Status(status(job, exec, TaskState::Error)));
    out
}

fn sqlite_url(dir: &tempfile::TempDir) -> DatabaseUrl {
    DatabaseUrl::parse(&format!(
        "sqlite://{}",
        dir.path().join("history.db").display()
    ))
    .expect("a SQLite URL")
}

/// ElasticJob 3.0.4's columns, as each catalog spells their types.
fn expected_columns(dialect: Dialect, table: &str) -> Vec<(&'static str, &'static str)> {
    let (s, i, b, t, v4000) = match dialect {
        Dialect::Sqlite => (
            "CHARACTER",
            "INTEGER",
            "INTEGER",
            "TIMESTAMP",
            "CHARACTER VARYING(4000)",
        ),
        Dialect::Postgres => (
            "character varying",
            "integer",
            "boolean",
            "timestamp without time zone",
            "character varying(4000)",
        ),
        Dialect::MySql => ("varchar", "int", "int", "timestamp", "varchar(4000)"),
    };
    let c = |n: u32| -> &'static str { Box::leak(format!("{s}({n})").into_boxed_str()) };
    let mut cols = Vec::new();
    if dialect == Dialect::MySql {
        cols.push(("auto_id", i));
    }
    if table == "JOB_EXECUTION_LOG" {
        cols.extend([
            ("id", c(40)),
            ("job_name", c(100)),
            ("task_id", c(255)),
            ("hostname", c(255)),
            ("ip", c(50)),
            ("sharding_item", i),
            ("execution_source", c(20)),
            ("failure_cause", v4000),
            ("is_success", b),
            ("start_time", t),
            ("complete_time", t),
        ]);
    } else {
        cols.extend([
            ("id", c(40)),
            ("job_name", c(100)),
            ("original_task_id", c(255)),
            ("task_id", c(255)),
            ("slave_id", c(50)),
            ("source", c(50)),
            ("execution_type", c(20)),
            ("sharding_item", c(100)),
            ("state", c(20)),
            ("message", v4000),
            ("creation_time", t),
        ]);
    }
    cols
}

async fn schema_is_elasticjobs(url: DatabaseUrl) {
    let store = Store::connect_lazy(&url, Duration::from_secs(10)).expect("a store");
    store.ensure_schema().await.expect("tables created");
    // A second time finds them.
    store.ensure_schema().await.expect("tables found");
    for table in ["JOB_EXECUTION_LOG", "JOB_STATUS_TRACE_LOG"] {
        let got: Vec<(String, String)> = store
            .columns(table)
            .await
            .expect("catalog read")
            .into_iter()
            // MariaDB spells INT as int(11).
            .map(|(n, t)| (n, t.replace("int(11)", "int")))
            .collect();
        let want: Vec<(String, String)> = expected_columns(url.dialect(), table)
            .into_iter()
            .map(|(n, t)| (n.to_owned(), t.to_owned()))
            .collect();
        assert_eq!(got, want, "{table} on {}", url.dialect().name());
    }
    let shardjob = store
        .columns("SHARDJOB_EXECUTION_LOG")
        .await
        .expect("catalog read");
    let names: Vec<&str> = shardjob.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "id",
            "job_name",
            "sharding_item",
            "instance_id",
            "fire_time",
            "run_kind",
            "fencing_token",
            "attempt",
            "creation_time"
        ]
    );
    store.close().await;
}

async fn events_are_written_once(url: DatabaseUrl) {
    let history = History::start(&url, HistoryOptions::default()).expect("history");
    let long = "x".repeat(5000);
    for e in execution("settle", 1, &long) {
        history.record(e);
    }
    assert!(
        history.flush(DEADLINE).await.complete,
        "{:?}",
        history.stats()
    );
    // The same events again (a batch written again after a reconnection): nothing new.
    for e in execution("settle", 1, &long) {
        history.record(e);
    }
    for e in execution("settle", 2, "boom") {
        history.record(e);
    }
    assert!(history.flush(DEADLINE).await.complete);
    let store = history.store();
    assert_eq!(store.count("JOB_EXECUTION_LOG", "").await.unwrap(), 4);
    assert_eq!(store.count("SHARDJOB_EXECUTION_LOG", "").await.unwrap(), 4);
    assert_eq!(store.count("JOB_STATUS_TRACE_LOG", "").await.unwrap(), 6);

    let failed = store
        .executions(&ExecutionQuery {
            job_prefix: Some("sett".into()),
            success: Some(false),
            descending: false,
            ..ExecutionQuery::default()
        })
        .await
        .expect("query");
    assert_eq!(failed.total, 2);
    let first = &failed.rows[0];
    assert_eq!(first.sharding_item, 1);
    assert_eq!(first.execution_source, "NORMAL_TRIGGER");
    assert_eq!(
        first.failure_cause.as_ref().map(|c| c.chars().count()),
        Some(4000)
    );
    assert_eq!(first.start_time, Some(at(10).naive_utc()));
    assert_eq!(first.complete_time, Some(at(12).naive_utc()));
    assert_eq!(first.fire_time, Some(at(10).naive_utc()));
    assert_eq!(first.run_kind.as_deref(), Some("SCHEDULED"));
    assert_eq!(first.fencing_token, Some(101));
    assert_eq!(first.attempt, Some(1));
    assert_eq!(failed.rows[1].failure_cause.as_deref(), Some("boom"));

    // Paging, sorting, the other filters.
    let page = store
        .executions(&ExecutionQuery {
            page_size: 3,
            page: 1,
            ..ExecutionQuery::default()
        })
        .await
        .unwrap();
    assert_eq!((page.total, page.rows.len()), (4, 1));
    assert_eq!(page.rows[0].start_time, Some(at(10).naive_utc()));
    let none = store
        .executions(&ExecutionQuery {
            ip: Some("10.9.9.9".into()),
            ..ExecutionQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(none.total, 0);
    let later = store
        .executions(&ExecutionQuery {
            since: Some(at(15)),
            ..ExecutionQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(later.total, 2);
    let other = store
        .executions(&ExecutionQuery {
            job_prefix: Some("sett_".into()),
            ..ExecutionQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(other.total, 0, "_ is not a wildcard in the prefix");

    let statuses = store.statuses(Some("settle"), None, 100).await.unwrap();
    assert_eq!(statuses.len(), 6);
    let states = |state: &str| statuses.iter().filter(|s| s.state == state).count();
    assert_eq!(
        (
            states("TASK_STAGING"),
            states("TASK_RUNNING"),
            states("TASK_ERROR")
        ),
        (2, 2, 2)
    );
    assert!(
        statuses
            .iter()
            .all(|s| s.sharding_item == "[0, 1]" && s.slave_id == "10.0.0.1")
    );

    // The status trace with the console's filters, paged.
    let errors = store
        .status_page(&StatusQuery {
            state: Some("TASK_ERROR".into()),
            ..StatusQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(errors.total, 2);
    assert_eq!(
        errors.rows[0].creation_time,
        Some(at(20).naive_utc()),
        "newest first"
    );
    assert_eq!(errors.rows[0].source, "LITE_EXECUTOR");
    let page = store
        .status_page(&StatusQuery {
            job_prefix: Some("set".into()),
            execution_type: Some("READY".into()),
            source: Some("LITE_EXECUTOR".into()),
            page_size: 4,
            page: 1,
            ..StatusQuery::default()
        })
        .await
        .unwrap();
    assert_eq!((page.total, page.rows.len()), (6, 2));
    let later = store
        .status_page(&StatusQuery {
            job: Some("settle".into()),
            since: Some(at(15)),
            until: Some(at(25)),
            descending: false,
            ..StatusQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(later.total, 3);
    let none = store
        .status_page(&StatusQuery {
            execution_type: Some("FAILOVER".into()),
            ..StatusQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(none.total, 0);

    // Runs per minute and per job: both executions in one minute, item 1 failing each time.
    let minutes = store.runs_per_minute(at(0), at(60)).await.unwrap();
    assert_eq!(minutes.len(), 1, "{minutes:?}");
    assert_eq!(minutes[0].minute, at(0).naive_utc());
    assert_eq!((minutes[0].runs, minutes[0].failures), (4, 2));
    assert!(
        store
            .runs_per_minute(at(60), at(120))
            .await
            .unwrap()
            .is_empty()
    );
    let per_job = store.job_runs(at(0)).await.unwrap();
    assert_eq!(per_job.len(), 1, "{per_job:?}");
    assert_eq!(per_job[0].job_name, "settle");
    assert_eq!((per_job[0].runs, per_job[0].failures), (4, 2));
    assert_eq!(per_job[0].last_complete, Some(at(22).naive_utc()));
    assert_eq!(per_job[0].last_failure, Some(at(22).naive_utc()));
    assert!(per_job[0].last_failed());
    assert!(store.job_runs(at(23)).await.unwrap().is_empty());

    // A failover of execution 2's item 0 (another row, same fire): its attempt is 2.
    let mut again = run("settle", 0, 2);
    again.id = trace_id(&["10.0.0.2@-@7", "settle", "0", "2"]);
    again.instance_id = "10.0.0.2@-@7".into();
    again.source = ExecutionSource::Failover;
    again.run_kind = "FAILOVER".into();
    history.record(TraceEvent::ItemStarted(again.clone()));
    // A manual trigger handled at the fire's very millisecond (the instance woke for the fire
    // and found the trigger queued) is not another attempt of the fire; its own failover is
    // the trigger's second attempt.
    let mut trigger = run("settle", 0, 2);
    trigger.id = trace_id(&["10.0.0.1@-@42", "settle", "0", "2", "trigger"]);
    trigger.run_kind = "TRIGGER".into();
    history.record(TraceEvent::ItemStarted(trigger.clone()));
    let mut moved = trigger.clone();
    moved.id = trace_id(&["10.0.0.2@-@7", "settle", "0", "2", "trigger"]);
    moved.instance_id = "10.0.0.2@-@7".into();
    history.record(TraceEvent::ItemStarted(moved.clone()));
    assert!(history.flush(DEADLINE).await.complete);
    let rows = store
        .executions(&ExecutionQuery {
            job: Some("settle".into()),
            since: Some(at(20)),
            until: Some(at(21)),
            sort: shardjob_history::SortKey::CompleteTime,
            ..ExecutionQuery::default()
        })
        .await
        .unwrap();
    let attempts: Vec<(Option<&str>, Option<i32>, Option<String>)> = rows
        .rows
        .iter()
        .filter(|r| r.sharding_item == 0)
        .map(|r| (r.run_kind.as_deref(), r.attempt, r.instance_id.clone()))
        .collect();
    assert_eq!(attempts.len(), 4, "{rows:?}");
    assert!(attempts.contains(&(Some("SCHEDULED"), Some(1), Some("10.0.0.1@-@42".into()))));
    assert!(attempts.contains(&(Some("FAILOVER"), Some(2), Some("10.0.0.2@-@7".into()))));
    assert!(attempts.contains(&(Some("TRIGGER"), Some(1), Some("10.0.0.1@-@42".into()))));
    assert!(attempts.contains(&(Some("TRIGGER"), Some(2), Some("10.0.0.2@-@7".into()))));
    let failover = rows.rows.iter().find(|r| r.execution_source == "FAILOVER");
    assert!(failover.is_some_and(|r| r.complete_time.is_none() && !r.success));

    // Retention: everything is older than now.
    let gone = store.delete_older_than(Utc::now(), 2).await.unwrap();
    assert_eq!(
        gone,
        7 + 6
            + 7
            + if url.dialect() == Dialect::MySql {
                6
            } else {
                0
            }
    );
    assert_eq!(store.count("JOB_EXECUTION_LOG", "").await.unwrap(), 0);
    assert_eq!(history.stats().dropped, 0);
    history.shutdown(DEADLINE).await;
}

/// The server dies mid-run and comes back: what was recorded meanwhile arrives, once.
/// shardjob's execution table as a shardjob before milliseconds made it on MySQL/MariaDB.
const OLD_TABLE: [&str; 2] = [
    "DROP TABLE IF EXISTS SHARDJOB_EXECUTION_LOG",
    "CREATE TABLE SHARDJOB_EXECUTION_LOG (id VARCHAR (40) NOT NULL, \
         job_name VARCHAR (100) NOT NULL, sharding_item INT NOT NULL, \
         instance_id VARCHAR (255) NOT NULL, fire_time TIMESTAMP NULL, \
         run_kind VARCHAR (20) NOT NULL, fencing_token BIGINT NOT NULL, \
         attempt INT NOT NULL, creation_time TIMESTAMP NULL, PRIMARY KEY (id)) ENGINE=InnoDB",
];

/// A fire time with milliseconds (a manual trigger's, a fire of a cron with a sub-second
/// offset after a clock step) reads back to the millisecond, and a second run of that fire
/// counts as its second attempt: MySQL's and MariaDB's `TIMESTAMP` keeps whole seconds unless
/// told otherwise, which dropped the milliseconds and made every such run a first attempt.
/// A table made with whole seconds (an older shardjob's) is brought to milliseconds.
async fn sub_second_fire_times_are_kept(url: DatabaseUrl, old_table: Option<&str>) {
    let store = Store::connect_lazy(&url, Duration::from_secs(10)).expect("a store");
    if let Some(raw) = old_table {
        let pool = sqlx::MySqlPool::connect(raw).await.expect("a connection");
        for sql in OLD_TABLE {
            sqlx::query(sql)
                .execute(&pool)
                .await
                .expect("the old table made");
        }
        pool.close().await;
    }
    let history = History::start(&url, HistoryOptions::default()).expect("history started");
    let fire = at(40) + chrono::Duration::milliseconds(250);
    let mut first = run("subsecond", 3, 4);
    first.id = trace_id(&["10.0.0.1@-@42", "subsecond", "3", "trigger"]);
    first.run_kind = "TRIGGER".into();
    first.fire_time = fire;
    first.start_time = Some(fire);
    let mut again = first.clone();
    again.id = trace_id(&["10.0.0.2@-@7", "subsecond", "3", "trigger"]);
    again.instance_id = "10.0.0.2@-@7".into();
    again.source = ExecutionSource::Failover;
    history.record(TraceEvent::ItemStarted(first));
    assert!(history.flush(DEADLINE).await.complete);
    history.record(TraceEvent::ItemStarted(again));
    assert!(history.flush(DEADLINE).await.complete);
    let rows = store
        .executions(&ExecutionQuery {
            job: Some("subsecond".into()),
            ..ExecutionQuery::default()
        })
        .await
        .expect("rows read");
    let mut got: Vec<(Option<chrono::NaiveDateTime>, Option<i32>)> =
        rows.rows.iter().map(|r| (r.fire_time, r.attempt)).collect();
    got.sort();
    let want = Some(fire.naive_utc());
    assert_eq!(
        got,
        [(want, Some(1)), (want, Some(2))],
        "on {} (old table: {})",
        url.dialect().name(),
        old_table.is_some()
    );
    history.shutdown(DEADLINE).await;
    // Leaves no row for the counts of the tests that follow.
    assert!(
        store
            .delete_older_than(Utc::now(), 2)
            .await
            .expect("rows deleted")
            >= 2
    );
    store.close().await;
}

/// A user not allowed to alter the old whole-second table still gets its history written
/// (to the second), and nothing waits on the table it cannot change.
async fn an_old_table_it_may_not_alter_is_written_to_the_second(server: &DbServer) {
    let root = sqlx::MySqlPool::connect(&server.url())
        .await
        .expect("a connection");
    for sql in OLD_TABLE.iter().copied().chain([
        "CREATE USER IF NOT EXISTS 'writer'@'127.0.0.1' IDENTIFIED BY 'w-pass'",
        "GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, INDEX ON shardjob.* TO 'writer'@'127.0.0.1'",
    ]) {
        sqlx::query(sql).execute(&root).await.expect("set up");
    }
    let limited = server.url().replace("root@", "writer:w-pass@");
    let url = DatabaseUrl::parse(&limited).unwrap();
    let history = History::start(&url, HistoryOptions::default()).expect("history started");
    let mut r = run("seconds", 1, 5);
    r.fire_time = at(50) + chrono::Duration::milliseconds(750);
    history.record(TraceEvent::ItemStarted(r));
    assert!(
        history.flush(DEADLINE).await.complete,
        "{:?}",
        history.stats()
    );
    let store = history.store();
    let rows = store
        .executions(&ExecutionQuery {
            job: Some("seconds".into()),
            ..ExecutionQuery::default()
        })
        .await
        .expect("rows read");
    let fires: Vec<_> = rows.rows.iter().map(|r| r.fire_time).collect();
    // MariaDB drops the fraction of a second the column does not keep.
    assert_eq!(fires, [Some(at(50).naive_utc())]);
    let precision: u64 = sqlx::query_scalar(
        "SELECT MAX(datetime_precision) FROM information_schema.columns WHERE \
         table_schema = 'shardjob' AND table_name = 'SHARDJOB_EXECUTION_LOG' \
         AND column_name = 'fire_time'",
    )
    .fetch_one(&root)
    .await
    .expect("catalog read");
    assert_eq!(
        precision, 0,
        "the table was altered by a user without ALTER"
    );
    assert!(
        store
            .delete_older_than(Utc::now(), 2)
            .await
            .expect("rows deleted")
            >= 1
    );
    history.shutdown(DEADLINE).await;
    // Back to the table shardjob makes, for the tests that follow.
    sqlx::query("DROP TABLE SHARDJOB_EXECUTION_LOG")
        .execute(&root)
        .await
        .expect("dropped");
    Store::connect_lazy(&DatabaseUrl::parse(&server.url()).unwrap(), DEADLINE)
        .expect("a store")
        .ensure_schema()
        .await
        .expect("tables made");
    root.close().await;
}

async fn survives_a_killed_database(server: &mut DbServer) {
    let url = DatabaseUrl::parse(&server.url()).unwrap();
    let opts = HistoryOptions {
        max_backoff: Duration::from_millis(500),
        write_timeout: Duration::from_secs(5),
        ..HistoryOptions::default()
    };
    let history = History::start(&url, opts).expect("history");
    for e in execution("nightly", 1, "e1") {
        history.record(e);
    }
    assert!(history.flush(DEADLINE).await.complete);
    server.kill().expect("killed");
    for exec in 2..=4 {
        for e in execution("nightly", exec, "e") {
            history.record(e);
        }
    }
    // The writer notices the database is gone.
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while !history.stats().failing {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{:?}",
            history.stats()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!history.flush(Duration::from_millis(300)).await.complete);
    server.restart().expect("restarted");
    assert!(
        history.flush(DEADLINE).await.complete,
        "{:?}",
        history.stats()
    );
    let store = history.store();
    assert_eq!(store.count("JOB_EXECUTION_LOG", "").await.unwrap(), 8);
    assert_eq!(store.count("SHARDJOB_EXECUTION_LOG", "").await.unwrap(), 8);
    assert_eq!(
        store
            .count("JOB_STATUS_TRACE_LOG", "job_name = 'nightly'")
            .await
            .unwrap(),
        12
    );
    assert_eq!(
        store
            .count("JOB_EXECUTION_LOG", "complete_time IS NOT NULL")
            .await
            .unwrap(),
        8
    );
    let stats = history.stats();
    assert_eq!((stats.dropped, stats.rejected, stats.queued), (0, 0, 0));
    history.shutdown(DEADLINE).await;
}

/// The server hangs (SIGSTOP) mid-run: writes time out and are retried; once it goes on,
/// everything arrives, once (a batch given up on may have been committed: written again, it
/// adds nothing).
async fn survives_a_hung_database(server: &mut DbServer) {
    let url = DatabaseUrl::parse(&server.url()).unwrap();
    let opts = HistoryOptions {
        max_backoff: Duration::from_millis(500),
        write_timeout: Duration::from_secs(1),
        ..HistoryOptions::default()
    };
    let history = History::start(&url, opts).expect("history");
    for e in execution("hung", 1, "e1") {
        history.record(e);
    }
    assert!(history.flush(DEADLINE).await.complete);
    server.pause().expect("paused");
    for exec in 2..=3 {
        for e in execution("hung", exec, "e") {
            history.record(e);
        }
    }
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while !history.stats().failing {
        if tokio::time::Instant::now() >= deadline {
            let _ = server.resume();
            panic!("the writer never saw the hang: {:?}", history.stats());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    server.resume().expect("resumed");
    assert!(
        history.flush(DEADLINE).await.complete,
        "{:?}",
        history.stats()
    );
    let store = history.store();
    assert_eq!(
        store
            .count("JOB_EXECUTION_LOG", "job_name = 'hung'")
            .await
            .unwrap(),
        6
    );
    assert_eq!(
        store
            .count("JOB_STATUS_TRACE_LOG", "job_name = 'hung'")
            .await
            .unwrap(),
        9
    );
    assert_eq!(
        store
            .count("SHARDJOB_EXECUTION_LOG", "job_name = 'hung'")
            .await
            .unwrap(),
        6
    );
    let stats = history.stats();
    assert_eq!((stats.dropped, stats.rejected, stats.queued), (0, 0, 0));
    history.shutdown(DEADLINE).await;
}

/// Over the bound while the database is down: the oldest go, counted; the newest arrive.
async fn overflow_drops_the_oldest(server: &mut DbServer) {
    let url = DatabaseUrl::parse(&server.url()).unwrap();
    let opts = HistoryOptions {
        queue_bound: 10,
        batch_size: 4,
        max_backoff: Duration::from_millis(300),
        write_timeout: Duration::from_secs(5),
        ..HistoryOptions::default()
    };
    server.kill().expect("killed");
    let history = History::start(&url, opts).expect("history");
    let events: Vec<TraceEvent> = (0..25)
        .map(|n| TraceEvent::Status(status("flood", n, TaskState::Staging)))
        .collect();
    for e in events.iter().cloned() {
        history.record(e);
    }
    // Drops from the batch the writer retries are counted when it next tries.
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let stats = history.stats();
        if stats.dropped == 15 && stats.queued == 10 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{stats:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    server.restart().expect("restarted");
    assert!(
        history.flush(DEADLINE).await.complete,
        "{:?}",
        history.stats()
    );
    let store = history.store();
    let rows = store.statuses(Some("flood"), None, 100).await.unwrap();
    let got: Vec<String> = rows.iter().map(|r| r.id.clone()).collect();
    let mut want: Vec<String> = (15..25)
        .map(|n| status("flood", n, TaskState::Staging).id)
        .collect();
    let mut got_sorted = got.clone();
    got_sorted.sort();
    want.sort();
    assert_eq!(got_sorted, want, "the 10 newest events are kept");
    assert_eq!(history.stats().dropped, 15);
    history.shutdown(DEADLINE).await;
}

/// An event the database refuses on its own (a job name longer than the column, refused by
/// PostgreSQL and by MariaDB's strict mode) is counted and skipped; its batch's others arrive.
async fn a_refused_event_does_not_hold_the_queue(url: DatabaseUrl) {
    let history = History::start(&url, HistoryOptions::default()).expect("history");
    let mut long = status("refused", 1, TaskState::Staging);
    long.job_name = "j".repeat(150);
    history.record(TraceEvent::Status(status("refused", 0, TaskState::Staging)));
    history.record(TraceEvent::Status(long));
    history.record(TraceEvent::Status(status("refused", 2, TaskState::Staging)));
    assert!(
        history.flush(DEADLINE).await.complete,
        "{:?}",
        history.stats()
    );
    let stats = history.stats();
    assert_eq!(
        (stats.written, stats.rejected, stats.dropped),
        (2, 1, 0),
        "{stats:?}"
    );
    let rows = history
        .store()
        .statuses(Some("refused"), None, 10)
        .await
        .unwrap();
    assert_eq!(rows.len(), 2);
    history.shutdown(DEADLINE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_schema_is_elasticjobs() {
    let dir = tempfile::tempdir().unwrap();
    schema_is_elasticjobs(sqlite_url(&dir)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_events_are_written_once() {
    let dir = tempfile::tempdir().unwrap();
    events_are_written_once(sqlite_url(&dir)).await;
    sub_second_fire_times_are_kept(sqlite_url(&dir), None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_schema_writes_kill_and_overflow() {
    let mut server = DbServer::postgres().expect("a PostgreSQL server");
    let url = DatabaseUrl::parse(&server.url()).unwrap();
    schema_is_elasticjobs(url.clone()).await;
    events_are_written_once(url.clone()).await;
    sub_second_fire_times_are_kept(url.clone(), None).await;
    let store = Store::connect_lazy(&DatabaseUrl::parse(&server.url()).unwrap(), DEADLINE).unwrap();
    for t in [
        "JOB_EXECUTION_LOG",
        "JOB_STATUS_TRACE_LOG",
        "SHARDJOB_EXECUTION_LOG",
    ] {
        store.count(t, "").await.unwrap();
    }
    store.close().await;
    a_refused_event_does_not_hold_the_queue(url).await;
    survives_a_killed_database(&mut server).await;
    overflow_drops_the_oldest(&mut server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_schema_writes_kill_hang_and_overflow() {
    let mut server = DbServer::mariadb().expect("a MariaDB server");
    let url = DatabaseUrl::parse(&server.url()).unwrap();
    schema_is_elasticjobs(url.clone()).await;
    events_are_written_once(url.clone()).await;
    sub_second_fire_times_are_kept(url.clone(), None).await;
    sub_second_fire_times_are_kept(url.clone(), Some(&server.url())).await;
    an_old_table_it_may_not_alter_is_written_to_the_second(&server).await;
    a_refused_event_does_not_hold_the_queue(url).await;
    survives_a_killed_database(&mut server).await;
    survives_a_hung_database(&mut server).await;
    overflow_drops_the_oldest(&mut server).await;
}
