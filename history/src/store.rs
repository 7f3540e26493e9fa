//! The database side: a connection pool of the URL's dialect, the tables created when absent,
//! batches of events written in one transaction, the query API and the retention deletes.

use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, NaiveDateTime, Utc};
use serde::Serialize;
use sqlx::Row;
use sqlx::mysql::{MySqlConnectOptions, MySqlPool, MySqlPoolOptions};
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions};

use crate::event::{TraceEvent, truncate_message};
use crate::schema::{self, Statements};
use crate::url::{DatabaseUrl, Dialect};

/// Errors of the history database.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The URL's options are refused by the driver.
    #[error("history database {url}: {source}")]
    Options {
        /// The URL, without its password.
        url: String,
        /// The driver's reason.
        source: sqlx::Error,
    },
    /// A statement failed.
    #[error("history database {url}: {what}: {source}")]
    Sql {
        /// The URL, without its password.
        url: String,
        /// What was being done.
        what: &'static str,
        /// The driver's error.
        source: sqlx::Error,
    },
}

impl StoreError {
    /// Whether the error says the database is down, unreachable, busy or restarting (worth
    /// retrying as it is), rather than refusing what was sent.
    pub fn is_transient(&self) -> bool {
        match self {
            StoreError::Options { .. } => false,
            StoreError::Sql { source, .. } => is_transient(source),
        }
    }
}

/// Whether a driver error is the database being away or busy rather than a refusal of the
/// statement.
pub fn is_transient(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(db) => {
            if let Some(my) = db.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>() {
                // Too many connections, shutdown in progress, lock wait timeout, deadlock,
                // read-only, connection killed, gone away, lost, interrupted, timeouts.
                return matches!(
                    my.number(),
                    1040 | 1053
                        | 1205
                        | 1213
                        | 1290
                        | 1317
                        | 1836
                        | 1927
                        | 1969
                        | 2006
                        | 2013
                        | 3024
                );
            }
            if db.try_downcast_ref::<sqlx::sqlite::SqliteError>().is_some() {
                let code: i64 = db.code().and_then(|c| c.parse().ok()).unwrap_or(0);
                // BUSY, LOCKED, NOMEM, READONLY, IOERR, FULL, CANTOPEN.
                return matches!(code & 0xff, 5 | 6 | 7 | 8 | 10 | 13 | 14);
            }
            // PostgreSQL SQLSTATE classes: connection, operator intervention (shutdown,
            // starting up), insufficient resources, rollbacks (serialization, deadlock).
            let code = db.code().unwrap_or_default();
            ["08", "57", "53", "40", "55P03"]
                .iter()
                .any(|p| code.starts_with(p))
        }
        _ => false,
    }
}

/// A pool of one of the three dialects.
#[derive(Debug, Clone)]
enum Pool {
    Sqlite(SqlitePool),
    Postgres(PgPool),
    MySql(MySqlPool),
}

/// Runs `$body` with `$p` bound to the pool of whichever dialect it is; the body is the same
/// text for the three (sqlx's types are generic over the database).
macro_rules! on_pool {
    ($pool:expr, $p:ident => $body:expr) => {
        match $pool {
            Pool::Sqlite($p) => $body,
            Pool::Postgres($p) => $body,
            Pool::MySql($p) => $body,
        }
    };
}

/// A [`StatusRow`] from a result row of the status table's columns (any dialect).
macro_rules! status_row {
    ($r:expr, $err:expr) => {
        StatusRow {
            id: trimmed($r.try_get("id").map_err(&$err)?),
            job_name: trimmed($r.try_get("job_name").map_err(&$err)?),
            original_task_id: trimmed($r.try_get("original_task_id").map_err(&$err)?),
            task_id: trimmed($r.try_get("task_id").map_err(&$err)?),
            slave_id: trimmed($r.try_get("slave_id").map_err(&$err)?),
            source: trimmed($r.try_get("source").map_err(&$err)?),
            execution_type: trimmed($r.try_get("execution_type").map_err(&$err)?),
            sharding_item: trimmed($r.try_get("sharding_item").map_err(&$err)?),
            state: trimmed($r.try_get("state").map_err(&$err)?),
            message: $r.try_get("message").map_err(&$err)?,
            creation_time: $r.try_get("creation_time").map_err(&$err)?,
        }
    };
}

/// A value bound to a built query.
#[derive(Debug, Clone)]
enum Bind {
    Str(String),
    OptStr(Option<String>),
    Bool(bool),
    Int(i32),
    Big(i64),
    Time(NaiveDateTime),
    OptTime(Option<NaiveDateTime>),
}

macro_rules! bind_all {
    ($query:expr, $binds:expr) => {{
        let mut q = $query;
        for b in $binds {
            q = match b {
                Bind::Str(v) => q.bind(v),
                Bind::OptStr(v) => q.bind(v),
                Bind::Bool(v) => q.bind(v),
                Bind::Int(v) => q.bind(v),
                Bind::Big(v) => q.bind(v),
                Bind::Time(v) => q.bind(v),
                Bind::OptTime(v) => q.bind(v),
            };
        }
        q
    }};
}

/// UTC, to the millisecond (what every dialect keeps alike; MySQL's `TIMESTAMP` keeps
/// seconds).
fn naive(t: DateTime<Utc>) -> NaiveDateTime {
    let ms = t.timestamp_millis();
    DateTime::from_timestamp_millis(ms).unwrap_or(t).naive_utc()
}

/// The statements of one event, with their values.
fn event_statements(
    st: &Statements,
    event: &TraceEvent,
    now: NaiveDateTime,
) -> Vec<(String, Vec<Bind>, bool)> {
    // (sql, binds, whether the statement is a marker that skips the rest when it changes
    // nothing)
    match event {
        TraceEvent::ItemStarted(run) => {
            let mut out = vec![(
                st.start.clone(),
                vec![
                    Bind::Str(run.id.clone()),
                    Bind::Str(run.job_name.clone()),
                    Bind::Str(run.task_id.clone()),
                    Bind::Str(run.hostname.clone()),
                    Bind::Str(run.ip.clone()),
                    Bind::Int(run.sharding_item as i32),
                    Bind::Str(run.source.as_str().to_owned()),
                    Bind::Bool(false),
                    Bind::OptTime(run.start_time.map(naive)),
                ],
                false,
            )];
            out.push(shardjob_row(st, run, now));
            out
        }
        TraceEvent::ItemFinished {
            run,
            complete_time,
            success,
            failure_cause,
        } => vec![
            (
                st.finish.clone(),
                vec![
                    Bind::Str(run.id.clone()),
                    Bind::Str(run.job_name.clone()),
                    Bind::Str(run.task_id.clone()),
                    Bind::Str(run.hostname.clone()),
                    Bind::Str(run.ip.clone()),
                    Bind::Int(run.sharding_item as i32),
                    Bind::Str(run.source.as_str().to_owned()),
                    Bind::OptStr(
                        failure_cause
                            .as_deref()
                            .map(|c| truncate_message(c).to_owned()),
                    ),
                    Bind::Bool(*success),
                    Bind::OptTime(run.start_time.map(naive)),
                    Bind::Time(naive(*complete_time)),
                ],
                false,
            ),
            shardjob_row(st, run, now),
        ],
        TraceEvent::Status(s) => {
            let mut out = Vec::new();
            if let Some(marker) = &st.status_marker {
                out.push((
                    marker.clone(),
                    vec![Bind::Str(s.id.clone()), Bind::Time(naive(s.creation_time))],
                    true,
                ));
            }
            out.push((
                st.status.clone(),
                vec![
                    Bind::Str(s.id.clone()),
                    Bind::Str(s.job_name.clone()),
                    // ElasticJob Lite's original task id is always empty.
                    Bind::Str(String::new()),
                    Bind::Str(s.task_id.clone()),
                    Bind::Str(s.slave_id.clone()),
                    Bind::Str("LITE_EXECUTOR".to_owned()),
                    Bind::Str(s.execution_type.clone()),
                    Bind::Str(s.sharding_item.clone()),
                    Bind::Str(s.state.as_str().to_owned()),
                    Bind::Str(truncate_message(&s.message).to_owned()),
                    Bind::Time(naive(s.creation_time)),
                ],
                false,
            ));
            out
        }
    }
}

fn shardjob_row(
    st: &Statements,
    run: &crate::event::ItemRun,
    now: NaiveDateTime,
) -> (String, Vec<Bind>, bool) {
    let fire = naive(run.fire_time);
    (
        st.shardjob.clone(),
        vec![
            Bind::Str(run.id.clone()),
            Bind::Str(run.job_name.clone()),
            Bind::Int(run.sharding_item as i32),
            Bind::Str(run.instance_id.clone()),
            Bind::Time(fire),
            Bind::Str(run.run_kind.clone()),
            Bind::Big(run.fencing_token as i64),
            Bind::Time(now),
            Bind::Str(run.job_name.clone()),
            Bind::Int(run.sharding_item as i32),
            Bind::Time(fire),
            Bind::Int(i32::from(run.run_kind == "TRIGGER")),
        ],
        false,
    )
}

/// How executions are sorted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub enum SortKey {
    /// By start time (default).
    #[default]
    StartTime,
    /// By completion time.
    CompleteTime,
    /// By job name, then start time.
    JobName,
}

/// A query of the execution log, for the console and `shardjob history`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutionQuery {
    /// This job only.
    pub job: Option<String>,
    /// Jobs whose name starts with this (all jobs when `None`).
    pub job_prefix: Option<String>,
    /// Runs of this IP only.
    pub ip: Option<String>,
    /// Successful (`Some(true)`) or failed/unfinished (`Some(false)`) runs only.
    pub success: Option<bool>,
    /// Runs started at or after this.
    pub since: Option<DateTime<Utc>>,
    /// Runs started before this.
    pub until: Option<DateTime<Utc>>,
    /// The sort key.
    pub sort: SortKey,
    /// Newest (largest) first.
    pub descending: bool,
    /// The page, from 0.
    pub page: u32,
    /// Rows per page (1 to 1000).
    pub page_size: u32,
}

impl Default for ExecutionQuery {
    fn default() -> Self {
        ExecutionQuery {
            job: None,
            job_prefix: None,
            ip: None,
            success: None,
            since: None,
            until: None,
            sort: SortKey::StartTime,
            descending: true,
            page: 0,
            page_size: 50,
        }
    }
}

/// One item run as the history has it: ElasticJob's columns and, when shardjob wrote the row,
/// its own.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ExecutionRow {
    /// The row id.
    pub id: String,
    /// The job.
    pub job_name: String,
    /// ElasticJob's task id.
    pub task_id: String,
    /// The host.
    pub hostname: String,
    /// The IP.
    pub ip: String,
    /// The item.
    pub sharding_item: i32,
    /// `NORMAL_TRIGGER`, `MISFIRE` or `FAILOVER`.
    pub execution_source: String,
    /// Why it failed.
    pub failure_cause: Option<String>,
    /// Whether it succeeded (false while it runs).
    pub success: bool,
    /// When it started (UTC).
    #[serde(serialize_with = "utc_text")]
    pub start_time: Option<NaiveDateTime>,
    /// When it ended (UTC); `None` while it runs.
    #[serde(serialize_with = "utc_text")]
    pub complete_time: Option<NaiveDateTime>,
    /// shardjob: the fire time (UTC).
    #[serde(serialize_with = "utc_text")]
    pub fire_time: Option<NaiveDateTime>,
    /// shardjob: `SCHEDULED`, `MISFIRE`, `FAILOVER` or `TRIGGER`.
    pub run_kind: Option<String>,
    /// shardjob: the fencing token.
    pub fencing_token: Option<i64>,
    /// shardjob: which run of this fire and item it was (1 for the first).
    pub attempt: Option<i32>,
    /// shardjob: the instance.
    pub instance_id: Option<String>,
}

/// A status row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StatusRow {
    /// The row id.
    pub id: String,
    /// The job.
    pub job_name: String,
    /// The task id.
    pub task_id: String,
    /// The task id it was first created under (ElasticJob's `original_task_id`).
    pub original_task_id: String,
    /// The slave id (the instance's IP).
    pub slave_id: String,
    /// Where it came from: `CLOUD_SCHEDULER`, `CLOUD_EXECUTOR` or `LITE_EXECUTOR`.
    pub source: String,
    /// `READY` or `FAILOVER`.
    pub execution_type: String,
    /// The items (`[0, 1]`).
    pub sharding_item: String,
    /// `TASK_STAGING`, `TASK_RUNNING`, `TASK_FINISHED`, `TASK_ERROR`.
    pub state: String,
    /// The message.
    pub message: Option<String>,
    /// When (UTC).
    #[serde(serialize_with = "utc_text")]
    pub creation_time: Option<NaiveDateTime>,
}

/// One page of a query.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Page<T> {
    /// The rows.
    pub rows: Vec<T>,
    /// How many rows match in all.
    pub total: u64,
    /// The page, from 0.
    pub page: u32,
    /// Rows per page.
    pub page_size: u32,
}

/// A query of the status trace log, with the filters of ElasticJob's console (job, source,
/// execution type, state, creation time range), for the console and scripts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusQuery {
    /// This job only.
    pub job: Option<String>,
    /// Jobs whose name starts with this.
    pub job_prefix: Option<String>,
    /// `source` (`LITE_EXECUTOR` for ElasticJob-Lite and shardjob).
    pub source: Option<String>,
    /// `execution_type` (`READY` or `FAILOVER`).
    pub execution_type: Option<String>,
    /// `state` (`TASK_STAGING`, `TASK_RUNNING`, `TASK_FINISHED`, `TASK_ERROR`, ...).
    pub state: Option<String>,
    /// Rows created at or after this.
    pub since: Option<DateTime<Utc>>,
    /// Rows created before this.
    pub until: Option<DateTime<Utc>>,
    /// Newest first.
    pub descending: bool,
    /// The page, from 0.
    pub page: u32,
    /// Rows per page (1 to 1000).
    pub page_size: u32,
}

impl Default for StatusQuery {
    fn default() -> Self {
        StatusQuery {
            job: None,
            job_prefix: None,
            source: None,
            execution_type: None,
            state: None,
            since: None,
            until: None,
            descending: true,
            page: 0,
            page_size: 50,
        }
    }
}

/// The item runs that started in one minute (UTC): how many, how many of them failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MinuteCount {
    /// The minute (UTC), seconds zero.
    #[serde(serialize_with = "utc_minute")]
    pub minute: NaiveDateTime,
    /// Item runs started in it.
    pub runs: u64,
    /// Those that ended unsuccessfully.
    pub failures: u64,
}

/// One job's item runs that ended since a time: how many, how many failed, the last.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct JobRuns {
    /// The job.
    pub job_name: String,
    /// Item runs that ended.
    pub runs: u64,
    /// Those that failed.
    pub failures: u64,
    /// When the last one ended (UTC).
    #[serde(serialize_with = "utc_text")]
    pub last_complete: Option<NaiveDateTime>,
    /// When the last failed one ended (UTC), if one failed.
    #[serde(serialize_with = "utc_text")]
    pub last_failure: Option<NaiveDateTime>,
}

impl JobRuns {
    /// Whether the job's last run that ended failed.
    pub fn last_failed(&self) -> bool {
        self.last_failure.is_some() && self.last_failure == self.last_complete
    }
}

/// `text` for a `LIKE … ESCAPE '!'` prefix pattern.
fn like_prefix(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 1);
    for c in text.chars() {
        if matches!(c, '!' | '%' | '_') {
            out.push('!');
        }
        out.push(c);
    }
    out.push('%');
    out
}

/// The history database.
#[derive(Debug, Clone)]
pub struct Store {
    pool: Pool,
    dialect: Dialect,
    statements: Statements,
    shown: String,
}

impl Store {
    /// A store over `url`; nothing is connected until the first statement (a database that
    /// is down at start is not an error here).
    pub fn connect_lazy(url: &DatabaseUrl, write_timeout: Duration) -> Result<Store, StoreError> {
        let shown = url.to_string();
        let refused = |source| StoreError::Options {
            url: shown.clone(),
            source,
        };
        // Two connections: the writer's, and one for queries and retention.
        let acquire = write_timeout.max(Duration::from_secs(1));
        let pool = match url.dialect() {
            Dialect::Sqlite => {
                let opts = SqliteConnectOptions::from_str(url.driver_url())
                    .map_err(refused)?
                    .create_if_missing(true)
                    .journal_mode(SqliteJournalMode::Wal)
                    .busy_timeout(Duration::from_secs(5));
                Pool::Sqlite(
                    SqlitePoolOptions::new()
                        .max_connections(2)
                        .acquire_timeout(acquire)
                        .connect_lazy_with(opts),
                )
            }
            Dialect::Postgres => {
                let mut opts = PgConnectOptions::from_str(url.driver_url()).map_err(refused)?;
                if let Some(u) = url.username() {
                    opts = opts.username(u);
                }
                if let Some(p) = url.password() {
                    opts = opts.password(p);
                }
                Pool::Postgres(
                    PgPoolOptions::new()
                        .max_connections(2)
                        .acquire_timeout(acquire)
                        .connect_lazy_with(opts),
                )
            }
            Dialect::MySql => {
                let mut opts = MySqlConnectOptions::from_str(url.driver_url()).map_err(refused)?;
                if let Some(u) = url.username() {
                    opts = opts.username(u);
                }
                if let Some(p) = url.password() {
                    opts = opts.password(p);
                }
                Pool::MySql(
                    MySqlPoolOptions::new()
                        .max_connections(2)
                        .acquire_timeout(acquire)
                        .connect_lazy_with(opts),
                )
            }
        };
        Ok(Store {
            pool,
            dialect: url.dialect(),
            statements: Statements::new(url.dialect()),
            shown,
        })
    }

    /// The dialect.
    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    fn sql_err(&self, what: &'static str) -> impl Fn(sqlx::Error) -> StoreError + '_ {
        move |source| StoreError::Sql {
            url: self.shown.clone(),
            what,
            source,
        }
    }

    /// Creates the tables and indexes that are absent (ElasticJob's and shardjob's).
    pub async fn ensure_schema(&self) -> Result<(), StoreError> {
        let err = self.sql_err("creating the tables");
        on_pool!(&self.pool, p => {
            for ddl in schema::create_tables(self.dialect) {
                sqlx::query(ddl).execute(p).await.map_err(&err)?;
            }
            if self.dialect == Dialect::MySql {
                let old: i64 = sqlx::query(schema::MYSQL_SECONDS_ONLY_QUERY)
                    .fetch_one(p)
                    .await
                    .and_then(|r| r.try_get("n"))
                    .map_err(&err)?;
                if old > 0 {
                    tracing::warn!(
                        url = %self.shown,
                        "SHARDJOB_EXECUTION_LOG keeps fire times to the second (made by an \
                         older shardjob): altering it to milliseconds; its rows keep their values"
                    );
                    // Not allowed (a user without ALTER): the history is written all the same,
                    // to the second, and the log says how to change the table.
                    if let Err(e) = sqlx::query(schema::MYSQL_TO_MILLISECONDS).execute(p).await {
                        tracing::warn!(
                            url = %self.shown,
                            error = %e,
                            "SHARDJOB_EXECUTION_LOG could not be altered: fire times are kept \
                             to the second, and the runs of a fire with milliseconds (a manual \
                             trigger's) count as first attempts; run `{}` as a user allowed to",
                            schema::MYSQL_TO_MILLISECONDS
                        );
                    }
                }
            }
            let exists = schema::for_dialect(self.dialect, schema::index_exists_query(self.dialect));
            for (name, table, ddl) in schema::create_indexes(self.dialect) {
                let found = sqlx::query(&exists)
                    .bind(name)
                    .bind(table)
                    .fetch_optional(p)
                    .await
                    .map_err(&err)?;
                if found.is_none() {
                    sqlx::query(ddl).execute(p).await.map_err(&err)?;
                }
            }
            Ok(())
        })
    }

    /// Writes the events in order, in one transaction. Every write is idempotent: writing
    /// the same events again changes nothing.
    pub async fn write_batch(&self, events: &[TraceEvent]) -> Result<(), StoreError> {
        let err = self.sql_err("writing events");
        let now = naive(Utc::now());
        let mut plans = Vec::with_capacity(events.len());
        for e in events {
            plans.push(event_statements(&self.statements, e, now));
        }
        on_pool!(&self.pool, p => {
            let mut tx = p.begin().await.map_err(&err)?;
            for plan in plans {
                for (sql, binds, marker) in plan {
                    let done = bind_all!(sqlx::query(&sql), binds)
                        .execute(&mut *tx)
                        .await
                        .map_err(&err)?;
                    if marker && done.rows_affected() == 0 {
                        // Written before: skip the row it guards.
                        break;
                    }
                }
            }
            tx.commit().await.map_err(&err)?;
            Ok(())
        })
    }

    /// One page of the execution log, with shardjob's columns where it has them.
    pub async fn executions(&self, q: &ExecutionQuery) -> Result<Page<ExecutionRow>, StoreError> {
        let page_size = q.page_size.clamp(1, 1000);
        let mut filters = Vec::new();
        let mut binds = Vec::new();
        if let Some(job) = &q.job {
            filters.push("e.job_name = ?");
            binds.push(Bind::Str(job.clone()));
        }
        if let Some(prefix) = &q.job_prefix {
            filters.push("e.job_name LIKE ? ESCAPE '!'");
            binds.push(Bind::Str(like_prefix(prefix)));
        }
        if let Some(ip) = &q.ip {
            filters.push("e.ip = ?");
            binds.push(Bind::Str(ip.clone()));
        }
        if let Some(success) = q.success {
            filters.push("e.is_success = ?");
            binds.push(Bind::Bool(success));
        }
        if let Some(since) = q.since {
            filters.push("e.start_time >= ?");
            binds.push(Bind::Time(naive(since)));
        }
        if let Some(until) = q.until {
            filters.push("e.start_time < ?");
            binds.push(Bind::Time(naive(until)));
        }
        let filter = if filters.is_empty() {
            String::new()
        } else {
            format!(" WHERE {}", filters.join(" AND "))
        };
        let dir = if q.descending { "DESC" } else { "ASC" };
        let order = match q.sort {
            SortKey::StartTime => format!("e.start_time {dir}, e.id {dir}"),
            SortKey::CompleteTime => format!("e.complete_time {dir}, e.id {dir}"),
            SortKey::JobName => format!("e.job_name {dir}, e.start_time {dir}, e.id {dir}"),
        };
        // MySQL's TIMESTAMP reads as UTC (the session's zone) only through DATETIME, to the
        // precision named (ElasticJob's columns keep seconds, shardjob's milliseconds).
        let ts = |col: &str, mysql: &str| match self.dialect {
            Dialect::MySql => format!("CAST({col} AS {mysql})"),
            Dialect::Postgres | Dialect::Sqlite => col.to_owned(),
        };
        let (start, complete, fire) = (
            ts("e.start_time", "DATETIME"),
            ts("e.complete_time", "DATETIME"),
            ts("s.fire_time", "DATETIME(3)"),
        );
        let success = match self.dialect {
            Dialect::Postgres => "CASE WHEN e.is_success THEN 1 ELSE 0 END",
            Dialect::MySql | Dialect::Sqlite => "e.is_success",
        };
        let offset = u64::from(q.page) * u64::from(page_size);
        let select = schema::for_dialect(
            self.dialect,
            &format!(
                "SELECT e.id AS id, e.job_name AS job_name, e.task_id AS task_id, \
                 e.hostname AS hostname, e.ip AS ip, e.sharding_item AS sharding_item, \
                 e.execution_source AS execution_source, e.failure_cause AS failure_cause, \
                 {success} AS success, {start} AS start_time, \
                 {complete} AS complete_time, {fire} AS fire_time, \
                 s.run_kind AS run_kind, s.fencing_token AS fencing_token, \
                 s.attempt AS attempt, s.instance_id AS instance_id \
                 FROM JOB_EXECUTION_LOG e LEFT JOIN SHARDJOB_EXECUTION_LOG s ON s.id = e.id\
                 {filter} ORDER BY {order} LIMIT {page_size} OFFSET {offset}"
            ),
        );
        let count = schema::for_dialect(
            self.dialect,
            &format!("SELECT COUNT(*) AS n FROM JOB_EXECUTION_LOG e{filter}"),
        );
        let err = self.sql_err("reading the execution log");
        on_pool!(&self.pool, p => {
            let total: i64 = bind_all!(sqlx::query(&count), binds.clone())
                .fetch_one(p)
                .await
                .map_err(&err)?
                .try_get("n")
                .map_err(&err)?;
            let found = bind_all!(sqlx::query(&select), binds)
                .fetch_all(p)
                .await
                .map_err(&err)?;
            let mut rows = Vec::with_capacity(found.len());
            for r in found {
                rows.push(ExecutionRow {
                    id: trimmed(r.try_get("id").map_err(&err)?),
                    job_name: trimmed(r.try_get("job_name").map_err(&err)?),
                    task_id: trimmed(r.try_get("task_id").map_err(&err)?),
                    hostname: trimmed(r.try_get("hostname").map_err(&err)?),
                    ip: trimmed(r.try_get("ip").map_err(&err)?),
                    sharding_item: r.try_get("sharding_item").map_err(&err)?,
                    execution_source: trimmed(r.try_get("execution_source").map_err(&err)?),
                    failure_cause: r.try_get("failure_cause").map_err(&err)?,
                    success: r.try_get::<i32, _>("success").map_err(&err)? != 0,
                    start_time: r.try_get("start_time").map_err(&err)?,
                    complete_time: r.try_get("complete_time").map_err(&err)?,
                    fire_time: r.try_get("fire_time").map_err(&err)?,
                    run_kind: r.try_get::<Option<String>, _>("run_kind").map_err(&err)?.map(trimmed),
                    fencing_token: r.try_get("fencing_token").map_err(&err)?,
                    attempt: r.try_get("attempt").map_err(&err)?,
                    instance_id: r.try_get::<Option<String>, _>("instance_id").map_err(&err)?.map(trimmed),
                });
            }
            Ok(Page { rows, total: total.max(0) as u64, page: q.page, page_size })
        })
    }

    /// The status rows of a job (all jobs when `None`), oldest first, at most `limit`.
    pub async fn statuses(
        &self,
        job: Option<&str>,
        since: Option<DateTime<Utc>>,
        limit: u32,
    ) -> Result<Vec<StatusRow>, StoreError> {
        let mut filters = Vec::new();
        let mut binds = Vec::new();
        if let Some(job) = job {
            filters.push("job_name = ?");
            binds.push(Bind::Str(job.to_owned()));
        }
        if let Some(since) = since {
            filters.push("creation_time >= ?");
            binds.push(Bind::Time(naive(since)));
        }
        let filter = if filters.is_empty() {
            String::new()
        } else {
            format!(" WHERE {}", filters.join(" AND "))
        };
        let created = match self.dialect {
            Dialect::MySql => "CAST(creation_time AS DATETIME)",
            Dialect::Postgres | Dialect::Sqlite => "creation_time",
        };
        let sql = schema::for_dialect(
            self.dialect,
            &format!(
                "SELECT id, job_name, original_task_id, task_id, slave_id, source, \
                 execution_type, sharding_item, state, \
                 message, {created} AS creation_time FROM JOB_STATUS_TRACE_LOG{filter} \
                 ORDER BY creation_time ASC, state ASC LIMIT {}",
                limit.clamp(1, 100_000)
            ),
        );
        let err = self.sql_err("reading the status trace log");
        on_pool!(&self.pool, p => {
            let found = bind_all!(sqlx::query(&sql), binds).fetch_all(p).await.map_err(&err)?;
            let mut rows = Vec::with_capacity(found.len());
            for r in found {
                rows.push(status_row!(r, err));
            }
            Ok(rows)
        })
    }

    /// One page of the status trace log, filtered as ElasticJob's console filters it.
    pub async fn status_page(&self, q: &StatusQuery) -> Result<Page<StatusRow>, StoreError> {
        let page_size = q.page_size.clamp(1, 1000);
        let mut filters = Vec::new();
        let mut binds = Vec::new();
        for (column, value) in [
            ("job_name", &q.job),
            ("source", &q.source),
            ("execution_type", &q.execution_type),
            ("state", &q.state),
        ] {
            if let Some(v) = value {
                filters.push(format!("{column} = ?"));
                binds.push(Bind::Str(v.clone()));
            }
        }
        if let Some(prefix) = &q.job_prefix {
            filters.push("job_name LIKE ? ESCAPE '!'".to_owned());
            binds.push(Bind::Str(like_prefix(prefix)));
        }
        if let Some(since) = q.since {
            filters.push("creation_time >= ?".to_owned());
            binds.push(Bind::Time(naive(since)));
        }
        if let Some(until) = q.until {
            filters.push("creation_time < ?".to_owned());
            binds.push(Bind::Time(naive(until)));
        }
        let filter = if filters.is_empty() {
            String::new()
        } else {
            format!(" WHERE {}", filters.join(" AND "))
        };
        let dir = if q.descending { "DESC" } else { "ASC" };
        let created = match self.dialect {
            Dialect::MySql => "CAST(creation_time AS DATETIME)",
            Dialect::Postgres | Dialect::Sqlite => "creation_time",
        };
        let offset = u64::from(q.page) * u64::from(page_size);
        let select = schema::for_dialect(
            self.dialect,
            &format!(
                "SELECT id, job_name, original_task_id, task_id, slave_id, source, \
                 execution_type, sharding_item, state, message, {created} AS creation_time \
                 FROM JOB_STATUS_TRACE_LOG{filter} \
                 ORDER BY creation_time {dir}, id {dir} LIMIT {page_size} OFFSET {offset}"
            ),
        );
        let count = schema::for_dialect(
            self.dialect,
            &format!("SELECT COUNT(*) AS n FROM JOB_STATUS_TRACE_LOG{filter}"),
        );
        let err = self.sql_err("reading the status trace log");
        on_pool!(&self.pool, p => {
            let total: i64 = bind_all!(sqlx::query(&count), binds.clone())
                .fetch_one(p)
                .await
                .map_err(&err)?
                .try_get("n")
                .map_err(&err)?;
            let found = bind_all!(sqlx::query(&select), binds).fetch_all(p).await.map_err(&err)?;
            let mut rows = Vec::with_capacity(found.len());
            for r in found {
                rows.push(status_row!(r, err));
            }
            Ok(Page { rows, total: total.max(0) as u64, page: q.page, page_size })
        })
    }

    /// The item runs started per minute in `[since, until)`, and how many of them failed,
    /// oldest minute first; minutes without a run are left out.
    pub async fn runs_per_minute(
        &self,
        since: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> Result<Vec<MinuteCount>, StoreError> {
        let minute = match self.dialect {
            Dialect::MySql => "DATE_FORMAT(CAST(start_time AS DATETIME), '%Y-%m-%d %H:%i')",
            Dialect::Postgres => "to_char(date_trunc('minute', start_time), 'YYYY-MM-DD HH24:MI')",
            Dialect::Sqlite => "strftime('%Y-%m-%d %H:%M', start_time)",
        };
        let failed = failed_condition(self.dialect);
        let sql = schema::for_dialect(
            self.dialect,
            &format!(
                "SELECT {minute} AS m, COUNT(*) AS runs, \
                 COUNT(CASE WHEN {failed} THEN 1 END) AS failures \
                 FROM JOB_EXECUTION_LOG WHERE start_time >= ? AND start_time < ? \
                 GROUP BY {minute} ORDER BY {minute}"
            ),
        );
        let err = self.sql_err("counting the runs per minute");
        on_pool!(&self.pool, p => {
            let found = sqlx::query(&sql)
                .bind(naive(since))
                .bind(naive(until))
                .fetch_all(p)
                .await
                .map_err(&err)?;
            let mut out = Vec::with_capacity(found.len());
            for r in found {
                let m: Option<String> = r.try_get("m").map_err(&err)?;
                let Some(minute) = m.and_then(|m| {
                    NaiveDateTime::parse_from_str(&format!("{m}:00"), "%Y-%m-%d %H:%M:%S").ok()
                }) else {
                    continue;
                };
                let runs: i64 = r.try_get("runs").map_err(&err)?;
                let failures: i64 = r.try_get("failures").map_err(&err)?;
                out.push(MinuteCount {
                    minute,
                    runs: runs.max(0) as u64,
                    failures: failures.max(0) as u64,
                });
            }
            Ok(out)
        })
    }

    /// Per job, the item runs that ended at or after `since`: how many, how many failed, when
    /// the last one and the last failed one ended. By job name.
    pub async fn job_runs(&self, since: DateTime<Utc>) -> Result<Vec<JobRuns>, StoreError> {
        let failed = failed_condition(self.dialect);
        let ts = |expr: &str| match self.dialect {
            Dialect::MySql => format!("CAST({expr} AS DATETIME)"),
            Dialect::Postgres | Dialect::Sqlite => expr.to_owned(),
        };
        let last = ts("MAX(complete_time)");
        let last_failed = ts(&format!("MAX(CASE WHEN {failed} THEN complete_time END)"));
        let sql = schema::for_dialect(
            self.dialect,
            &format!(
                "SELECT job_name, COUNT(*) AS runs, \
                 COUNT(CASE WHEN {failed} THEN 1 END) AS failures, \
                 {last} AS last_complete, {last_failed} AS last_failure \
                 FROM JOB_EXECUTION_LOG WHERE complete_time >= ? \
                 GROUP BY job_name ORDER BY job_name"
            ),
        );
        let err = self.sql_err("counting the runs per job");
        on_pool!(&self.pool, p => {
            let found = sqlx::query(&sql)
                .bind(naive(since))
                .fetch_all(p)
                .await
                .map_err(&err)?;
            let mut out = Vec::with_capacity(found.len());
            for r in found {
                let runs: i64 = r.try_get("runs").map_err(&err)?;
                let failures: i64 = r.try_get("failures").map_err(&err)?;
                out.push(JobRuns {
                    job_name: trimmed(r.try_get("job_name").map_err(&err)?),
                    runs: runs.max(0) as u64,
                    failures: failures.max(0) as u64,
                    last_complete: read_time(&r, "last_complete").map_err(&err)?,
                    last_failure: read_time(&r, "last_failure").map_err(&err)?,
                });
            }
            Ok(out)
        })
    }

    /// Deletes rows older than `cutoff`, at most `batch` rows per statement, from the four
    /// tables; returns how many went.
    pub async fn delete_older_than(
        &self,
        cutoff: DateTime<Utc>,
        batch: u32,
    ) -> Result<u64, StoreError> {
        let batch = batch.max(1);
        let targets: &[(&str, &str)] = match self.dialect {
            Dialect::MySql => &[
                (schema::EXECUTION_LOG, "COALESCE(complete_time, start_time)"),
                (schema::STATUS_TRACE_LOG, "creation_time"),
                (schema::SHARDJOB_EXECUTION_LOG, "creation_time"),
                (schema::SHARDJOB_STATUS_TRACE_ID, "creation_time"),
            ],
            Dialect::Postgres | Dialect::Sqlite => &[
                (schema::EXECUTION_LOG, "COALESCE(complete_time, start_time)"),
                (schema::STATUS_TRACE_LOG, "creation_time"),
                (schema::SHARDJOB_EXECUTION_LOG, "creation_time"),
            ],
        };
        let err = self.sql_err("deleting old rows");
        let cutoff = naive(cutoff);
        let mut deleted = 0;
        for (table, when) in targets {
            let sql = match self.dialect {
                Dialect::MySql => format!("DELETE FROM {table} WHERE {when} < ? LIMIT {batch}"),
                Dialect::Postgres | Dialect::Sqlite => format!(
                    "DELETE FROM {table} WHERE id IN (SELECT id FROM {table} WHERE {when} < ? \
                     LIMIT {batch})"
                ),
            };
            let sql = schema::for_dialect(self.dialect, &sql);
            loop {
                let n = on_pool!(&self.pool, p => sqlx::query(&sql)
                    .bind(cutoff)
                    .execute(p)
                    .await
                    .map_err(&err)?
                    .rows_affected());
                deleted += n;
                if n < u64::from(batch) {
                    break;
                }
                // Let the writer in between batches.
                tokio::task::yield_now().await;
            }
        }
        Ok(deleted)
    }

    /// The columns of a table as the database's catalog has them: (name, type), in order,
    /// names lower-case, types as the catalog spells them (for tests and checks).
    pub async fn columns(&self, table: &str) -> Result<Vec<(String, String)>, StoreError> {
        let err = self.sql_err("reading the catalog");
        let sql = match self.dialect {
            Dialect::MySql => {
                "SELECT column_name AS name, column_type AS type FROM information_schema.columns \
                 WHERE table_schema = DATABASE() AND table_name = ? ORDER BY ordinal_position"
                    .to_owned()
            }
            Dialect::Postgres => "SELECT column_name::text AS name, \
                 (CASE WHEN character_maximum_length IS NULL THEN data_type \
                 ELSE data_type || '(' || character_maximum_length || ')' END)::text AS type \
                 FROM information_schema.columns WHERE table_schema = current_schema() \
                 AND table_name = lower($1) ORDER BY ordinal_position"
                .to_owned(),
            Dialect::Sqlite => {
                "SELECT name AS name, type AS type FROM pragma_table_info(?) ORDER BY cid"
                    .to_owned()
            }
        };
        on_pool!(&self.pool, p => {
            let found = sqlx::query(&sql).bind(table).fetch_all(p).await.map_err(&err)?;
            let mut out = Vec::new();
            for r in found {
                let name: String = r.try_get("name").map_err(&err)?;
                let ty: String = r.try_get("type").map_err(&err)?;
                out.push((name.to_ascii_lowercase(), ty));
            }
            Ok(out)
        })
    }

    /// Runs a statement (tests and benchmarks: counting rows).
    pub async fn count(&self, table: &str, filter: &str) -> Result<i64, StoreError> {
        let err = self.sql_err("counting rows");
        let sql = if filter.is_empty() {
            format!("SELECT COUNT(*) AS n FROM {table}")
        } else {
            format!("SELECT COUNT(*) AS n FROM {table} WHERE {filter}")
        };
        on_pool!(&self.pool, p => sqlx::query(&sql)
            .fetch_one(p)
            .await
            .map_err(&err)?
            .try_get::<i64, _>("n")
            .map_err(&err))
    }

    /// Closes the pool.
    pub async fn close(&self) {
        on_pool!(&self.pool, p => p.close().await)
    }
}

/// A UTC time as RFC 3339 text (`2026-11-25T18:06:39.123Z`), or null.
fn utc_text<S: serde::Serializer>(t: &Option<NaiveDateTime>, s: S) -> Result<S::Ok, S::Error> {
    match t {
        Some(t) => s.serialize_str(
            &t.and_utc()
                .to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        ),
        None => s.serialize_none(),
    }
}

/// The SQL condition of a run that ended unsuccessfully (a run in progress has no
/// `complete_time`).
fn failed_condition(dialect: Dialect) -> &'static str {
    match dialect {
        Dialect::Postgres => "complete_time IS NOT NULL AND NOT is_success",
        Dialect::MySql | Dialect::Sqlite => "complete_time IS NOT NULL AND is_success = 0",
    }
}

/// A time column of an aggregate: SQLite gives an aggregate of a time column as the text it
/// stores, which is read back here; the other databases give a time.
fn read_time<R>(row: &R, column: &str) -> Result<Option<NaiveDateTime>, sqlx::Error>
where
    R: Row,
    for<'a> &'a str: sqlx::ColumnIndex<R>,
    for<'a> Option<NaiveDateTime>: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    for<'a> Option<String>: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
{
    match row.try_get::<Option<NaiveDateTime>, _>(column) {
        Ok(t) => Ok(t),
        Err(first) => match row.try_get::<Option<String>, _>(column) {
            Ok(Some(text)) => Ok(parse_time_text(&text)),
            Ok(None) => Ok(None),
            Err(_) => Err(first),
        },
    }
}

/// Reads `2026-11-25 18:06:39[.123]` (and the `T` form).
fn parse_time_text(text: &str) -> Option<NaiveDateTime> {
    let text = text.trim().replace('T', " ");
    let text = text.trim_end_matches('Z');
    NaiveDateTime::parse_from_str(text, "%Y-%m-%d %H:%M:%S%.f").ok()
}

/// A minute as RFC 3339 text (`2026-11-25T18:06:00Z`).
fn utc_minute<S: serde::Serializer>(t: &NaiveDateTime, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(
        &t.and_utc()
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
    )
}

/// `CHARACTER(n)` columns of some databases pad with spaces.
fn trimmed(s: String) -> String {
    if s.ends_with(' ') {
        s.trim_end().to_owned()
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aggregate_times_read_from_text() {
        let t = parse_time_text("2026-11-25 18:06:39.123").unwrap();
        assert_eq!(t.and_utc().timestamp_millis() % 1000, 123);
        assert!(parse_time_text("2026-11-25T18:06:39").is_some());
        assert!(parse_time_text("nonsense").is_none());
    }

    #[test]
    fn like_patterns_escape_their_wildcards() {
        assert_eq!(like_prefix("settle_"), "settle!_%");
        assert_eq!(like_prefix("a%b!"), "a!%b!!%");
        assert_eq!(like_prefix(""), "%");
    }
}
