//! `shardjob history JOB [--failed] [--since 1h] [--json]`: a job's item runs from the job
//! history (ElasticJob's `JOB_EXECUTION_LOG`, with shardjob's columns beside it), newest
//! first. The database is `--url` (`sqlite://…`, `postgres://…`, `mysql://…`), else the
//! tracing settings of the job file `--file`, else `$SHARDJOB_TRACING_URL`.

use std::io::Write;
use std::path::PathBuf;

use chrono::{DateTime, Utc};

use crate::cli::CliError;

/// The environment variable `shardjob history` reads the database URL from.
pub const ENV_TRACING_URL: &str = "SHARDJOB_TRACING_URL";

/// Arguments of `shardjob history`.
#[derive(Debug, clap::Args)]
pub struct HistoryArgs {
    /// The job.
    pub job: String,
    /// Take JOB as a prefix: every job whose name starts with it.
    #[arg(long)]
    pub prefix: bool,
    /// Failed runs only.
    #[arg(long)]
    pub failed: bool,
    /// Runs started within this period before now (`1h`, `30m`, `7d`).
    #[arg(long)]
    pub since: Option<String>,
    /// Runs of this IP only.
    #[arg(long)]
    pub ip: Option<String>,
    /// At most this many runs (newest first).
    #[arg(long, default_value_t = 50)]
    pub limit: u32,
    /// The page of `limit` runs, from 0.
    #[arg(long, default_value_t = 0)]
    pub page: u32,
    /// Print one JSON object: `{"rows": [...], "total": n, "page": p, "page_size": s}`.
    #[arg(long)]
    pub json: bool,
    /// The history database: sqlite://path, postgres://user:pass@host:port/db or
    /// mysql://user:pass@host:port/db.
    #[arg(long)]
    pub url: Option<String>,
    /// A job file whose tracing settings name the database (`elasticjob.tracing` with
    /// `spring.datasource`, or `tracing.url`).
    #[arg(long)]
    pub file: Option<PathBuf>,
}

type Outcome = Result<(), String>;

/// Runs `shardjob history`.
pub fn run(
    args: &HistoryArgs,
    now: DateTime<Utc>,
    out: &mut dyn Write,
) -> Result<Outcome, CliError> {
    imp::run(args, now, out)
}

#[cfg(not(feature = "history"))]
mod imp {
    use super::*;

    pub(super) fn run(
        _: &HistoryArgs,
        _: DateTime<Utc>,
        _: &mut dyn Write,
    ) -> Result<Outcome, CliError> {
        Ok(Err(
            "error: this shardjob was built without its `history` feature".to_owned(),
        ))
    }
}

#[cfg(feature = "history")]
mod imp {
    use super::*;
    use shardjob::history::{DatabaseUrl, ExecutionQuery, ExecutionRow};
    use shardjob_history::{Store, parse_period};

    fn database(args: &HistoryArgs) -> Result<DatabaseUrl, String> {
        if let Some(url) = &args.url {
            return DatabaseUrl::parse(url).map_err(|e| format!("error: --url: {e}"));
        }
        if let Some(path) = &args.file {
            let name = path.display();
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("{name}: error: cannot read: {e}"))?;
            let file = crate::jobfile::load(&text).map_err(|problems| {
                problems
                    .iter()
                    .map(|p| format!("{name}:{p}"))
                    .collect::<Vec<_>>()
                    .join("\n")
            })?;
            let tracing = file.tracing.ok_or_else(|| {
                format!(
                    "{name}: error: no job history settings (elasticjob.tracing with \
                     spring.datasource, or tracing.url)"
                )
            })?;
            return tracing
                .database_url()
                .map_err(|e| format!("{name}: error: {e}"));
        }
        match std::env::var(ENV_TRACING_URL)
            .ok()
            .filter(|v| !v.is_empty())
        {
            Some(url) => {
                DatabaseUrl::parse(&url).map_err(|e| format!("error: {ENV_TRACING_URL}: {e}"))
            }
            None => Err(format!(
                "error: no history database: give --url (sqlite://…, postgres://…, mysql://…), \
                 --file with a job file's tracing settings, or {ENV_TRACING_URL}"
            )),
        }
    }

    pub(super) fn run(
        args: &HistoryArgs,
        now: DateTime<Utc>,
        out: &mut dyn Write,
    ) -> Result<Outcome, CliError> {
        let url = match database(args) {
            Ok(url) => url,
            Err(e) => return Ok(Err(e)),
        };
        let since = match &args.since {
            Some(text) => match parse_period(text) {
                Ok(d) => Some(now - chrono::Duration::from_std(d).unwrap_or(chrono::Duration::MAX)),
                Err(e) => return Ok(Err(format!("error: --since: {e}"))),
            },
            None => None,
        };
        if args.limit == 0 || args.limit > 1000 {
            return Ok(Err("error: --limit: 1 to 1000".to_owned()));
        }
        let query = ExecutionQuery {
            job: (!args.prefix).then(|| args.job.clone()),
            job_prefix: args.prefix.then(|| args.job.clone()),
            ip: args.ip.clone(),
            success: args.failed.then_some(false),
            since,
            page: args.page,
            page_size: args.limit,
            ..ExecutionQuery::default()
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| CliError::Runtime(e.to_string()))?;
        let found = rt.block_on(async {
            let store = Store::connect_lazy(&url, std::time::Duration::from_secs(10))
                .map_err(|e| e.to_string())?;
            let page = store.executions(&query).await.map_err(|e| e.to_string());
            store.close().await;
            page
        });
        let page = match found {
            Ok(page) => page,
            Err(e) => return Ok(Err(format!("error: {e}"))),
        };
        if args.json {
            let text = serde_json::to_string(&page).map_err(std::io::Error::other)?;
            writeln!(out, "{text}")?;
            return Ok(Ok(()));
        }
        if page.rows.is_empty() {
            writeln!(out, "no runs of {} match ({} in all)", args.job, page.total)?;
            return Ok(Ok(()));
        }
        writeln!(
            out,
            "{:<24} {:<20} {:>4} {:<10} {:>3} {:>9} {:<7} {:<22} CAUSE",
            "START (UTC)", "JOB", "ITEM", "KIND", "TRY", "TOOK", "RESULT", "INSTANCE"
        )?;
        for row in &page.rows {
            writeln!(out, "{}", line(row))?;
        }
        writeln!(
            out,
            "{} of {} run(s){}",
            page.rows.len(),
            page.total,
            if page.total > u64::from(page.page_size) * u64::from(page.page + 1) {
                format!("; --page {} for more", page.page + 1)
            } else {
                String::new()
            }
        )?;
        Ok(Ok(()))
    }

    fn line(row: &ExecutionRow) -> String {
        let start = row
            .start_time
            .map(|t| t.format("%Y-%m-%d %H:%M:%S%.3f").to_string())
            .unwrap_or_else(|| "-".to_owned());
        let took = match (row.start_time, row.complete_time) {
            (Some(a), Some(b)) => format!("{:.3}s", (b - a).num_milliseconds() as f64 / 1000.0),
            _ => "-".to_owned(),
        };
        let result = match (row.complete_time, row.success) {
            (None, _) => "running",
            (Some(_), true) => "ok",
            (Some(_), false) => "FAILED",
        };
        let cause: String = row
            .failure_cause
            .as_deref()
            .and_then(|c| c.lines().next())
            .unwrap_or("")
            .chars()
            .take(100)
            .collect();
        format!(
            "{start:<24} {:<20} {:>4} {:<10} {:>3} {took:>9} {result:<7} {:<22} {cause}",
            row.job_name,
            row.sharding_item,
            row.run_kind.as_deref().unwrap_or(&row.execution_source),
            row.attempt
                .map_or_else(|| "-".to_owned(), |a| a.to_string()),
            row.instance_id.as_deref().unwrap_or(&row.ip),
        )
    }
}
