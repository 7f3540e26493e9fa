//! The tables, per dialect, and the statements that write them.
//!
//! `JOB_EXECUTION_LOG` and `JOB_STATUS_TRACE_LOG` are ElasticJob 3.0.4's
//! (`elasticjob-tracing-rdb`, `META-INF/sql/{MySQL,PostgreSQL,SQL92}.properties`), column for
//! column and type for type: MySQL's form (an `auto_id` primary key, `UNIQUE KEY id` on the
//! execution log only, InnoDB) for MySQL/MariaDB, PostgreSQL's (`BOOLEAN is_success`) for
//! PostgreSQL, and the SQL92 form ElasticJob falls back to for any other database for SQLite.
//! ElasticJob's console and a team's SQL read them as they read ElasticJob's.
//!
//! What only shardjob knows goes in tables of its own, never in a changed ElasticJob table:
//! `SHARDJOB_EXECUTION_LOG` (same `id` as the execution log row: fire time, run kind incl.
//! manual triggers, fencing token, attempt, instance) and, on MySQL only, where ElasticJob's
//! status table has no unique key on `id`, `SHARDJOB_STATUS_TRACE_ID` (the status row ids
//! written, so that a status row is never written twice).
//!
//! Writes are idempotent, keyed by the ids: a start is inserted unless its row exists; a
//! completion is an upsert of the whole row (ElasticJob's update-then-insert, in one
//! statement); a status row is inserted unless its id was written.

use crate::url::Dialect;

/// ElasticJob's execution log table.
pub const EXECUTION_LOG: &str = "JOB_EXECUTION_LOG";
/// ElasticJob's status trace table.
pub const STATUS_TRACE_LOG: &str = "JOB_STATUS_TRACE_LOG";
/// ElasticJob's index on the status trace table.
pub const TASK_ID_STATE_INDEX: &str = "TASK_ID_STATE_INDEX";
/// shardjob's table beside the execution log.
pub const SHARDJOB_EXECUTION_LOG: &str = "SHARDJOB_EXECUTION_LOG";
/// shardjob's index of its table by job, item and fire (an attempt counts the earlier runs
/// of the same fire).
pub const SHARDJOB_FIRE_INDEX: &str = "SHARDJOB_EXECUTION_FIRE_INDEX";
/// shardjob's record of the status row ids written (MySQL only).
pub const SHARDJOB_STATUS_TRACE_ID: &str = "SHARDJOB_STATUS_TRACE_ID";

/// The `CREATE TABLE IF NOT EXISTS` statements of a dialect, in order.
pub fn create_tables(dialect: Dialect) -> Vec<&'static str> {
    match dialect {
        Dialect::MySql => vec![
            "CREATE TABLE IF NOT EXISTS JOB_EXECUTION_LOG ( \
                auto_id int NOT NULL AUTO_INCREMENT, \
                id VARCHAR (40) NOT NULL, \
                job_name VARCHAR (100) NOT NULL, \
                task_id VARCHAR (255) NOT NULL, \
                hostname VARCHAR (255) NOT NULL, \
                ip VARCHAR (50) NOT NULL, \
                sharding_item INT NOT NULL, \
                execution_source VARCHAR (20) NOT NULL, \
                failure_cause VARCHAR (4000) NULL, \
                is_success INT NOT NULL, \
                start_time TIMESTAMP NULL, \
                complete_time TIMESTAMP NULL, \
                PRIMARY KEY (auto_id), \
                UNIQUE KEY `id` (`id`) \
            ) ENGINE=InnoDB",
            "CREATE TABLE IF NOT EXISTS JOB_STATUS_TRACE_LOG ( \
                auto_id int NOT NULL AUTO_INCREMENT, \
                id VARCHAR (40) NOT NULL, \
                job_name VARCHAR (100) NOT NULL, \
                original_task_id VARCHAR (255) NOT NULL, \
                task_id VARCHAR (255) NOT NULL, \
                slave_id VARCHAR (50) NOT NULL, \
                source VARCHAR (50) NOT NULL, \
                execution_type VARCHAR (20) NOT NULL, \
                sharding_item VARCHAR (100) NOT NULL, \
                state VARCHAR (20) NOT NULL, \
                message VARCHAR (4000) NULL, \
                creation_time TIMESTAMP NULL, \
                PRIMARY KEY (auto_id) \
            ) ENGINE=InnoDB",
            // shardjob's own table keeps milliseconds (`TIMESTAMP` alone keeps whole seconds
            // here): a trigger's fire time has them, and a run's attempt is counted by it.
            "CREATE TABLE IF NOT EXISTS SHARDJOB_EXECUTION_LOG ( \
                id VARCHAR (40) NOT NULL, \
                job_name VARCHAR (100) NOT NULL, \
                sharding_item INT NOT NULL, \
                instance_id VARCHAR (255) NOT NULL, \
                fire_time TIMESTAMP(3) NULL, \
                run_kind VARCHAR (20) NOT NULL, \
                fencing_token BIGINT NOT NULL, \
                attempt INT NOT NULL, \
                creation_time TIMESTAMP(3) NULL, \
                PRIMARY KEY (id) \
            ) ENGINE=InnoDB",
            "CREATE TABLE IF NOT EXISTS SHARDJOB_STATUS_TRACE_ID ( \
                id VARCHAR (40) NOT NULL, \
                creation_time TIMESTAMP NULL, \
                PRIMARY KEY (id) \
            ) ENGINE=InnoDB",
        ],
        Dialect::Postgres => vec![
            "CREATE TABLE IF NOT EXISTS JOB_EXECUTION_LOG (id VARCHAR(40) NOT NULL, \
             job_name VARCHAR(100) NOT NULL, task_id VARCHAR(255) NOT NULL, \
             hostname VARCHAR(255) NOT NULL, ip VARCHAR(50) NOT NULL, sharding_item INT NOT NULL, \
             execution_source VARCHAR(20) NOT NULL, failure_cause VARCHAR(4000) NULL, \
             is_success BOOLEAN NOT NULL, start_time TIMESTAMP NULL, complete_time TIMESTAMP NULL, \
             PRIMARY KEY (id))",
            "CREATE TABLE IF NOT EXISTS JOB_STATUS_TRACE_LOG (id VARCHAR(40) NOT NULL, \
             job_name VARCHAR(100) NOT NULL, original_task_id VARCHAR(255) NOT NULL, \
             task_id VARCHAR(255) NOT NULL, slave_id VARCHAR(50) NOT NULL, \
             source VARCHAR(50) NOT NULL, execution_type VARCHAR(20) NOT NULL, \
             sharding_item VARCHAR(100) NOT NULL, state VARCHAR(20) NOT NULL, \
             message VARCHAR(4000) NULL, creation_time TIMESTAMP NULL, PRIMARY KEY (id))",
            "CREATE TABLE IF NOT EXISTS SHARDJOB_EXECUTION_LOG (id VARCHAR(40) NOT NULL, \
             job_name VARCHAR(100) NOT NULL, sharding_item INT NOT NULL, \
             instance_id VARCHAR(255) NOT NULL, fire_time TIMESTAMP NULL, \
             run_kind VARCHAR(20) NOT NULL, fencing_token BIGINT NOT NULL, attempt INT NOT NULL, \
             creation_time TIMESTAMP NULL, PRIMARY KEY (id))",
        ],
        Dialect::Sqlite => vec![
            "CREATE TABLE IF NOT EXISTS JOB_EXECUTION_LOG (id CHARACTER(40) NOT NULL, \
             job_name CHARACTER(100) NOT NULL, task_id CHARACTER(255) NOT NULL, \
             hostname CHARACTER(255) NOT NULL, ip CHARACTER(50) NOT NULL, \
             sharding_item INTEGER NOT NULL, execution_source CHARACTER(20) NOT NULL, \
             failure_cause CHARACTER VARYING(4000) NULL, is_success INTEGER NOT NULL, \
             start_time TIMESTAMP NULL, complete_time TIMESTAMP NULL, PRIMARY KEY (id))",
            "CREATE TABLE IF NOT EXISTS JOB_STATUS_TRACE_LOG (id CHARACTER(40) NOT NULL, \
             job_name CHARACTER(100) NOT NULL, original_task_id CHARACTER(255) NOT NULL, \
             task_id CHARACTER(255) NOT NULL, slave_id CHARACTER(50) NOT NULL, \
             source CHARACTER(50) NOT NULL, execution_type CHARACTER(20) NOT NULL, \
             sharding_item CHARACTER(100) NOT NULL, state CHARACTER(20) NOT NULL, \
             message CHARACTER VARYING(4000) NULL, creation_time TIMESTAMP NULL, \
             PRIMARY KEY (id))",
            "CREATE TABLE IF NOT EXISTS SHARDJOB_EXECUTION_LOG (id CHARACTER(40) NOT NULL, \
             job_name CHARACTER(100) NOT NULL, sharding_item INTEGER NOT NULL, \
             instance_id CHARACTER(255) NOT NULL, fire_time TIMESTAMP NULL, \
             run_kind CHARACTER(20) NOT NULL, fencing_token BIGINT NOT NULL, \
             attempt INTEGER NOT NULL, creation_time TIMESTAMP NULL, PRIMARY KEY (id))",
        ],
    }
}

/// MySQL/MariaDB: whether shardjob's table keeps whole seconds only (made by a shardjob
/// before it asked for milliseconds); one row with a count when it does.
pub const MYSQL_SECONDS_ONLY_QUERY: &str = "SELECT COUNT(*) AS n FROM information_schema.columns \
     WHERE table_schema = DATABASE() AND table_name = 'SHARDJOB_EXECUTION_LOG' \
     AND column_name IN ('fire_time', 'creation_time') AND datetime_precision < 3";

/// MySQL/MariaDB: brings shardjob's table of whole seconds to milliseconds (the rows keep
/// their values).
pub const MYSQL_TO_MILLISECONDS: &str = "ALTER TABLE SHARDJOB_EXECUTION_LOG \
     MODIFY fire_time TIMESTAMP(3) NULL, MODIFY creation_time TIMESTAMP(3) NULL";

/// The indexes: (name, table, `CREATE INDEX` statement). Created when absent (looked up in
/// the catalog first: MySQL has no `CREATE INDEX IF NOT EXISTS`).
pub fn create_indexes(dialect: Dialect) -> Vec<(&'static str, &'static str, &'static str)> {
    match dialect {
        Dialect::MySql => vec![
            (
                TASK_ID_STATE_INDEX,
                STATUS_TRACE_LOG,
                "CREATE INDEX TASK_ID_STATE_INDEX ON JOB_STATUS_TRACE_LOG (task_id(128), state)",
            ),
            (
                SHARDJOB_FIRE_INDEX,
                SHARDJOB_EXECUTION_LOG,
                "CREATE INDEX SHARDJOB_EXECUTION_FIRE_INDEX ON SHARDJOB_EXECUTION_LOG \
                 (job_name, sharding_item, fire_time)",
            ),
        ],
        Dialect::Postgres | Dialect::Sqlite => vec![
            (
                TASK_ID_STATE_INDEX,
                STATUS_TRACE_LOG,
                "CREATE INDEX TASK_ID_STATE_INDEX ON JOB_STATUS_TRACE_LOG (task_id, state)",
            ),
            (
                SHARDJOB_FIRE_INDEX,
                SHARDJOB_EXECUTION_LOG,
                "CREATE INDEX SHARDJOB_EXECUTION_FIRE_INDEX ON SHARDJOB_EXECUTION_LOG \
                 (job_name, sharding_item, fire_time)",
            ),
        ],
    }
}

/// Whether an index exists: a query with the index name and the table name bound (in that
/// order), returning a row when it does.
pub fn index_exists_query(dialect: Dialect) -> &'static str {
    match dialect {
        Dialect::MySql => {
            "SELECT 1 FROM information_schema.statistics WHERE table_schema = DATABASE() \
             AND index_name = ? AND table_name = ? LIMIT 1"
        }
        Dialect::Postgres => {
            "SELECT 1 FROM pg_indexes WHERE schemaname = current_schema() \
             AND lower(indexname) = lower(?) AND lower(tablename) = lower(?) LIMIT 1"
        }
        Dialect::Sqlite => {
            "SELECT 1 FROM sqlite_master WHERE type = 'index' AND name = ? \
             AND tbl_name = ? LIMIT 1"
        }
    }
}

/// The write statements of a dialect, with `?` placeholders (numbered for PostgreSQL).
#[derive(Debug, Clone)]
pub struct Statements {
    /// Insert a started item (id, job_name, task_id, hostname, ip, sharding_item,
    /// execution_source, is_success, start_time) unless its row exists.
    pub start: String,
    /// Upsert a finished item (id, job_name, task_id, hostname, ip, sharding_item,
    /// execution_source, failure_cause, is_success, start_time, complete_time).
    pub finish: String,
    /// Insert shardjob's row (id, job_name, sharding_item, instance_id, fire_time, run_kind,
    /// fencing_token, creation_time, then job_name, sharding_item, fire_time and 1 for a
    /// manual trigger's run or 0 for a fire's, for the attempt) unless it exists. A trigger's
    /// time may equal a scheduled fire's to the millisecond; its attempt counts only the runs
    /// of the same trigger (it stays a trigger when it fails over), a fire's only the fire's.
    pub shardjob: String,
    /// Record a status row id (id, creation_time); no row affected: it was written (MySQL).
    pub status_marker: Option<String>,
    /// Insert a status row (id, job_name, original_task_id, task_id, slave_id, source,
    /// execution_type, sharding_item, state, message, creation_time).
    pub status: String,
}

impl Statements {
    /// The statements of `dialect`.
    pub fn new(dialect: Dialect) -> Statements {
        let start_cols = "INSERT INTO JOB_EXECUTION_LOG (id, job_name, task_id, hostname, ip, \
                          sharding_item, execution_source, is_success, start_time) \
                          VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)";
        let finish_cols = "INSERT INTO JOB_EXECUTION_LOG (id, job_name, task_id, hostname, ip, \
                           sharding_item, execution_source, failure_cause, is_success, \
                           start_time, complete_time) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";
        let shardjob_cols = "INSERT INTO SHARDJOB_EXECUTION_LOG (id, job_name, sharding_item, \
                             instance_id, fire_time, run_kind, fencing_token, creation_time, \
                             attempt) SELECT ?, ?, ?, ?, ?, ?, ?, ?, 1 + (SELECT COUNT(*) FROM \
                             SHARDJOB_EXECUTION_LOG WHERE job_name = ? AND sharding_item = ? \
                             AND fire_time = ? AND (CASE WHEN run_kind = 'TRIGGER' THEN 1 ELSE 0 END) = ?)";
        let status_cols = "INTO JOB_STATUS_TRACE_LOG (id, job_name, original_task_id, task_id, \
                           slave_id, source, execution_type, sharding_item, state, message, \
                           creation_time) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";
        match dialect {
            Dialect::MySql => Statements {
                start: format!("{start_cols} ON DUPLICATE KEY UPDATE id = id"),
                finish: format!(
                    "{finish_cols} ON DUPLICATE KEY UPDATE is_success = VALUES(is_success), \
                     complete_time = VALUES(complete_time), \
                     failure_cause = VALUES(failure_cause), \
                     start_time = COALESCE(start_time, VALUES(start_time))"
                ),
                shardjob: format!("{shardjob_cols} FROM DUAL ON DUPLICATE KEY UPDATE id = id"),
                status_marker: Some(
                    "INSERT IGNORE INTO SHARDJOB_STATUS_TRACE_ID (id, creation_time) \
                     VALUES (?, ?)"
                        .to_owned(),
                ),
                status: format!("INSERT {status_cols}"),
            },
            Dialect::Postgres => Statements {
                start: number(&format!("{start_cols} ON CONFLICT (id) DO NOTHING")),
                finish: number(&format!(
                    "{finish_cols} ON CONFLICT (id) DO UPDATE SET \
                     is_success = excluded.is_success, complete_time = excluded.complete_time, \
                     failure_cause = excluded.failure_cause, \
                     start_time = COALESCE(JOB_EXECUTION_LOG.start_time, excluded.start_time)"
                )),
                shardjob: number(&format!("{shardjob_cols} ON CONFLICT (id) DO NOTHING")),
                status_marker: None,
                status: number(&format!("INSERT {status_cols} ON CONFLICT (id) DO NOTHING")),
            },
            Dialect::Sqlite => Statements {
                start: start_cols.replacen("INSERT INTO", "INSERT OR IGNORE INTO", 1),
                finish: format!(
                    "{finish_cols} ON CONFLICT (id) DO UPDATE SET \
                     is_success = excluded.is_success, complete_time = excluded.complete_time, \
                     failure_cause = excluded.failure_cause, \
                     start_time = COALESCE(start_time, excluded.start_time)"
                ),
                shardjob: shardjob_cols.replacen("INSERT INTO", "INSERT OR IGNORE INTO", 1),
                status_marker: None,
                status: format!("INSERT OR IGNORE {status_cols}"),
            },
        }
    }
}

/// `?` placeholders numbered `$1, $2, …` (PostgreSQL). The statements here have no `?` in
/// literals.
pub fn number(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len() + 16);
    let mut n = 0;
    for c in sql.chars() {
        if c == '?' {
            n += 1;
            out.push('$');
            out.push_str(&n.to_string());
        } else {
            out.push(c);
        }
    }
    out
}

/// A statement of the shared text (written with `?`) for `dialect`.
pub fn for_dialect(dialect: Dialect, sql: &str) -> String {
    match dialect {
        Dialect::Postgres => number(sql),
        Dialect::MySql | Dialect::Sqlite => sql.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_numbered_for_postgres_only() {
        assert_eq!(number("a = ? AND b IN (?, ?)"), "a = $1 AND b IN ($2, $3)");
        assert_eq!(for_dialect(Dialect::MySql, "x = ?"), "x = ?");
        let pg = Statements::new(Dialect::Postgres);
        assert!(pg.finish.contains("$11") && !pg.finish.contains('?'));
        assert!(pg.shardjob.contains("$12") && !pg.shardjob.contains('?'));
    }

    #[test]
    fn every_dialect_creates_both_elasticjob_tables_and_the_index() {
        for dialect in [Dialect::Sqlite, Dialect::Postgres, Dialect::MySql] {
            let tables = create_tables(dialect).join("\n");
            for table in [EXECUTION_LOG, STATUS_TRACE_LOG, SHARDJOB_EXECUTION_LOG] {
                assert!(
                    tables.contains(&format!("IF NOT EXISTS {table} (")),
                    "{dialect:?}"
                );
            }
            assert!(
                create_indexes(dialect)
                    .iter()
                    .any(|(name, table, _)| *name == TASK_ID_STATE_INDEX
                        && *table == STATUS_TRACE_LOG)
            );
            // The writes never change an ElasticJob table's shape.
            let s = Statements::new(dialect);
            for sql in [&s.start, &s.finish, &s.status] {
                assert!(!sql.contains("ALTER"));
            }
        }
        assert!(Statements::new(Dialect::MySql).status_marker.is_some());
        assert!(Statements::new(Dialect::Sqlite).status_marker.is_none());
    }
}
