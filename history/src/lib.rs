//! shardjob's job history: ElasticJob's event trace tables (`JOB_EXECUTION_LOG`,
//! `JOB_STATUS_TRACE_LOG`) in SQLite, PostgreSQL or MySQL/MariaDB, written off the
//! scheduler's path, and read back for the console and `shardjob history`.
//!
//! - [`DatabaseUrl`]: where (shardjob's own URL, or ElasticJob's Spring Boot JDBC URL);
//! - [`schema`]: ElasticJob 3.0.4's tables per dialect, and shardjob's own table beside them;
//! - [`History`]: the bounded queue and its writer ([`History::record`] never waits), the
//!   retention, the figures for metrics ([`History::stats`]);
//! - [`Store`]: the database itself, and the query API ([`Store::executions`]).
//!
//! The runtime turns its events into [`TraceEvent`]s; this crate knows nothing of the
//! runtime.
#![warn(missing_docs)]

pub mod event;
pub mod schema;
pub mod store;
pub mod url;
pub mod writer;

pub use event::{ExecutionSource, ItemRun, StatusTrace, TaskState, TraceEvent, trace_id};
pub use store::{
    ExecutionQuery, ExecutionRow, JobRuns, MinuteCount, Page, SortKey, StatusQuery, StatusRow,
    Store, StoreError,
};
pub use url::{DatabaseUrl, Dialect, UrlError};
pub use writer::{FlushReport, History, HistoryError, HistoryOptions, HistoryStats};

use std::time::Duration;

/// Parses a retention or a look-back period: a number and a unit, `s`, `m`, `h`, `d` or `w`
/// (`7d`, `12h`, `90m`).
pub fn parse_period(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{text:?}: expected a number and a unit (7d, 12h, 30m, 90s)"))?;
    let secs = match unit.trim() {
        "s" => Some(n),
        "m" => n.checked_mul(60),
        "h" => n.checked_mul(3600),
        "d" => n.checked_mul(86_400),
        "w" => n.checked_mul(7 * 86_400),
        other => {
            return Err(format!(
                "{text:?}: unknown unit {other:?} (s, m, h, d or w, as in 7d)"
            ));
        }
    };
    match secs {
        Some(0) => Err(format!("{text:?}: the period must be longer than 0")),
        Some(s) => Ok(Duration::from_secs(s)),
        None => Err(format!("{text:?}: too long")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn periods_parse_with_their_units() {
        assert_eq!(parse_period("7d"), Ok(Duration::from_secs(7 * 86_400)));
        assert_eq!(parse_period("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_period(" 90s "), Ok(Duration::from_secs(90)));
        assert_eq!(parse_period("2w"), Ok(Duration::from_secs(14 * 86_400)));
        assert!(parse_period("0d").is_err());
        assert!(parse_period("7").is_err());
        assert!(parse_period("d").is_err());
        assert!(parse_period("7y").unwrap_err().contains("unknown unit"));
    }
}
