//! The job history of a scheduler: its [`RunEvent`]s turned into ElasticJob's event trace
//! rows (see [`shardjob_history`], re-exported as [`crate::history::db`]).
//!
//! [`SchedulerBuilder::tracing`](crate::runtime::SchedulerBuilder::tracing) starts a
//! [`History`] writer and hands the scheduler a sink for its events, in place before the driver
//! starts, so it hears every run from the first. The sink is called in line by whoever sends
//! an event (not through the subscribers' broadcast channel, where a starved reader misses
//! events): it translates the event and pushes the rows onto the writer's bounded queue, a
//! push that never waits. The only place events can be lost is that queue's bound
//! ([`HistoryOptions`]), and what it drops is counted ([`HistoryStats::dropped`]) and logged.
//!
//! Per item run: a `JOB_EXECUTION_LOG` row at its start, completed at its end (failure cause:
//! the job's error, with a script's captured output); per execution (one fire's items on this
//! instance): `TASK_STAGING` (`Job '…' execute begin.`) and `TASK_RUNNING` when its first item
//! starts, `TASK_FINISHED` or `TASK_ERROR` (the failed items, as ElasticJob's
//! `{item=cause, …}`) when its last item ends, as ElasticJob's Lite executor writes them. An
//! item cancelled before it started has no execution row.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use chrono::{DateTime, Utc};
use shardjob_core::machine::ItemOutcome;
use shardjob_core::machine::record::RunKind;

pub use shardjob_history as db;
pub use shardjob_history::{
    DatabaseUrl, ExecutionQuery, ExecutionRow, History, HistoryOptions, HistoryStats, Page,
};

use shardjob_history::{ExecutionSource, ItemRun, StatusTrace, TaskState, TraceEvent, trace_id};

use crate::runtime::events::RunEventSink;
use crate::runtime::{ItemRunInfo, RunEvent};

/// How long a scheduler's shutdown waits for the history to be written by default.
pub const DEFAULT_FLUSH_DEADLINE: Duration = Duration::from_secs(10);

/// The most executions followed at once (their statuses wait for their last item); beyond
/// it the oldest is forgotten (its end status is not written).
const MAX_OPEN_EXECUTIONS: usize = 10_000;

/// Which jobs are traced: ElasticJob's `includeJobNames` / `excludeJobNames` (at most one of
/// the two is set; both empty traces every job).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobFilter {
    /// Only these jobs, when not empty.
    pub include: BTreeSet<String>,
    /// Not these jobs.
    pub exclude: BTreeSet<String>,
}

impl JobFilter {
    /// Whether `job` is traced.
    pub fn traces(&self, job: &str) -> bool {
        (self.include.is_empty() || self.include.contains(job)) && !self.exclude.contains(job)
    }
}

/// How a scheduler records its history.
#[derive(Debug, Clone)]
pub struct TracingConfig {
    /// The database.
    pub url: DatabaseUrl,
    /// The writer's settings (queue bound, batch size, retention...).
    pub options: HistoryOptions,
    /// Which jobs.
    pub jobs: JobFilter,
    /// How long a shutdown waits for the queue to be written.
    pub flush_deadline: Duration,
}

impl TracingConfig {
    /// Every job, default settings.
    pub fn new(url: DatabaseUrl) -> TracingConfig {
        TracingConfig {
            url,
            options: HistoryOptions::default(),
            jobs: JobFilter::default(),
            flush_deadline: DEFAULT_FLUSH_DEADLINE,
        }
    }
}

/// The history of one scheduler: the sink that turns its events into trace rows, and the
/// writer behind it.
pub(crate) struct Feed {
    history: History,
    sink: std::sync::Arc<Sink>,
    finished: std::sync::atomic::AtomicBool,
    flush_deadline: Duration,
}

impl Feed {
    /// The history's side of a scheduler: hand [`Feed::sink`] to its events before the driver
    /// starts, so that it hears every run.
    pub(crate) fn start(history: History, jobs: JobFilter, flush_deadline: Duration) -> Feed {
        Feed {
            sink: std::sync::Arc::new(Sink {
                history: history.clone(),
                translator: std::sync::Mutex::new(Translator::new(jobs)),
            }),
            history,
            finished: std::sync::atomic::AtomicBool::new(false),
            flush_deadline,
        }
    }

    pub(crate) fn history(&self) -> &History {
        &self.history
    }

    /// What the scheduler's events go into.
    pub(crate) fn sink(&self) -> std::sync::Arc<dyn RunEventSink> {
        self.sink.clone()
    }

    /// Writes the queue within the deadline and stops the writer. Only the first call does
    /// anything.
    pub(crate) async fn finish(&self) {
        if !self
            .finished
            .swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            self.history.shutdown(self.flush_deadline).await;
        }
    }
}

/// Turns each event, in line, into trace events pushed onto the writer's bounded queue (a
/// push never waits: past the queue's bound the oldest events are dropped, counted).
struct Sink {
    history: History,
    translator: std::sync::Mutex<Translator>,
}

impl RunEventSink for Sink {
    fn event(&self, event: &RunEvent) {
        // A panic elsewhere while the lock was held leaves the translator as it was between
        // two events: go on with it.
        let mut t = self.translator.lock().unwrap_or_else(|p| p.into_inner());
        t.event(event, &mut |e| self.history.record(e));
    }
}

/// One execution being followed until its last item ends.
struct Open {
    items: usize,
    ended: usize,
    staged: bool,
    starts: BTreeMap<u32, DateTime<Utc>>,
    errors: Vec<(u32, String)>,
}

/// Turns run events into trace events (pure: unit-tested below).
pub(crate) struct Translator {
    jobs: JobFilter,
    hostname: String,
    open: BTreeMap<u64, Open>,
}

impl Translator {
    pub(crate) fn new(jobs: JobFilter) -> Translator {
        Translator {
            jobs,
            hostname: hostname(),
            open: BTreeMap::new(),
        }
    }

    pub(crate) fn event(&mut self, event: &RunEvent, out: &mut dyn FnMut(TraceEvent)) {
        match event {
            RunEvent::ItemStarted { run, at } if self.jobs.traces(&run.job) => {
                let open = self.open.entry(run.execution.0).or_insert_with(|| Open {
                    items: item_count(&run.job, &run.task_id),
                    ended: 0,
                    staged: false,
                    starts: BTreeMap::new(),
                    errors: Vec::new(),
                });
                open.starts.insert(run.item, *at);
                if !open.staged {
                    open.staged = true;
                    out(TraceEvent::Status(status(
                        run,
                        TaskState::Staging,
                        format!("Job '{}' execute begin.", run.job),
                        *at,
                    )));
                    out(TraceEvent::Status(status(
                        run,
                        TaskState::Running,
                        String::new(),
                        *at,
                    )));
                }
                out(TraceEvent::ItemStarted(self.item_run(run, Some(*at))));
                while self.open.len() > MAX_OPEN_EXECUTIONS {
                    self.open.pop_first();
                }
            }
            RunEvent::ItemFinished {
                run,
                outcome,
                error,
                ..
            } if self.jobs.traces(&run.job) => {
                let now = Utc::now();
                let open = self.open.entry(run.execution.0).or_insert_with(|| Open {
                    items: item_count(&run.job, &run.task_id),
                    ended: 0,
                    staged: false,
                    starts: BTreeMap::new(),
                    errors: Vec::new(),
                });
                open.ended += 1;
                let start = open.starts.get(&run.item).copied();
                let cause = match outcome {
                    ItemOutcome::Succeeded => None,
                    ItemOutcome::Failed(message) => Some(
                        error
                            .as_ref()
                            .map_or_else(|| message.clone(), ToString::to_string),
                    ),
                    ItemOutcome::Cancelled => Some(
                        error
                            .as_ref()
                            .map_or_else(|| "cancelled".to_owned(), ToString::to_string),
                    ),
                };
                if let Some(cause) = &cause {
                    open.errors.push((run.item, cause.clone()));
                }
                let done = open.ended >= open.items;
                let staged = open.staged;
                let errors = if done {
                    std::mem::take(&mut open.errors)
                } else {
                    Vec::new()
                };
                if start.is_some() {
                    out(TraceEvent::ItemFinished {
                        run: self.item_run(run, start),
                        complete_time: now,
                        success: cause.is_none(),
                        failure_cause: cause,
                    });
                }
                if done {
                    self.open.remove(&run.execution.0);
                    if staged {
                        let (state, message) = if errors.is_empty() {
                            (TaskState::Finished, String::new())
                        } else {
                            // Java's Map.toString of ElasticJob's itemErrorMessages.
                            let parts: Vec<String> =
                                errors.iter().map(|(i, c)| format!("{i}={c}")).collect();
                            (TaskState::Error, format!("{{{}}}", parts.join(", ")))
                        };
                        out(TraceEvent::Status(status(run, state, message, now)));
                    }
                }
            }
            _ => {}
        }
    }

    fn item_run(&self, run: &ItemRunInfo, start: Option<DateTime<Utc>>) -> ItemRun {
        let instance = run.instance.as_str();
        ItemRun {
            id: trace_id(&[
                instance,
                &run.job,
                &run.item.to_string(),
                &run.execution.0.to_string(),
                &run.fire_time.timestamp_millis().to_string(),
                &run.fencing_token.to_string(),
                run.kind.as_str(),
            ]),
            job_name: run.job.clone(),
            task_id: run.task_id.clone(),
            hostname: self.hostname.clone(),
            ip: ip_of(instance).to_owned(),
            sharding_item: run.item,
            source: source(run.kind),
            start_time: start,
            instance_id: instance.to_owned(),
            fire_time: run.fire_time,
            run_kind: run.kind.as_str().to_owned(),
            fencing_token: run.fencing_token,
        }
    }
}

fn status(run: &ItemRunInfo, state: TaskState, message: String, at: DateTime<Utc>) -> StatusTrace {
    let instance = run.instance.as_str();
    StatusTrace {
        id: trace_id(&[
            instance,
            &run.job,
            &run.execution.0.to_string(),
            &run.fire_time.timestamp_millis().to_string(),
            state.as_str(),
        ]),
        job_name: run.job.clone(),
        task_id: run.task_id.clone(),
        slave_id: ip_of(instance).to_owned(),
        execution_type: if run.kind == RunKind::Failover {
            "FAILOVER"
        } else {
            "READY"
        }
        .to_owned(),
        sharding_item: format!("[{}]", items_of(&run.job, &run.task_id).join(", ")),
        state,
        message,
        creation_time: at,
    }
}

fn source(kind: RunKind) -> ExecutionSource {
    match kind {
        RunKind::Scheduled | RunKind::Trigger => ExecutionSource::NormalTrigger,
        RunKind::Misfire => ExecutionSource::Misfire,
        RunKind::Failover => ExecutionSource::Failover,
    }
}

/// The items of an ElasticJob task id `{job}@-@{items}@-@READY@-@{instance}`.
fn items_of<'t>(job: &str, task_id: &'t str) -> Vec<&'t str> {
    task_id
        .strip_prefix(job)
        .and_then(|rest| rest.strip_prefix("@-@"))
        .and_then(|rest| rest.split("@-@").next())
        .map(|items| items.split(',').filter(|i| !i.is_empty()).collect())
        .unwrap_or_default()
}

fn item_count(job: &str, task_id: &str) -> usize {
    items_of(job, task_id).len().max(1)
}

/// The IP of an instance id `{ip}@-@{pid}` (the whole id when it has another form).
fn ip_of(instance: &str) -> &str {
    instance.split("@-@").next().unwrap_or(instance)
}

fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most buf.len() bytes into buf.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "localhost".to_owned();
    }
    let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// Starts a history writer for `config`, shared by the feeder of one scheduler.
pub(crate) fn start(config: &TracingConfig) -> Result<History, String> {
    for p in config.url.ignored_parameters() {
        tracing::warn!(
            "job history: JDBC parameter {p:?} of {} has no meaning for shardjob; ignored",
            config.url
        );
    }
    History::start(&config.url, config.options.clone()).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use shardjob_core::InstanceId;
    use shardjob_core::machine::ExecutionId;

    fn info(item: u32, kind: RunKind) -> ItemRunInfo {
        ItemRunInfo {
            instance: InstanceId::new("10.1.2.3@-@77").unwrap(),
            job: "settle".into(),
            item,
            execution: ExecutionId(5),
            fire_time: DateTime::from_timestamp(1_764_050_400, 0).unwrap(),
            kind,
            fencing_token: 40 + u64::from(item),
            task_id: "settle@-@0,2@-@READY@-@10.1.2.3@-@77".into(),
        }
    }

    fn at(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_764_050_400 + s, 0).unwrap()
    }

    #[test]
    fn an_execution_writes_elasticjobs_rows() {
        let mut t = Translator::new(JobFilter::default());
        let mut out = Vec::new();
        let mut push = |e| out.push(e);
        t.event(
            &RunEvent::ItemStarted {
                run: info(0, RunKind::Misfire),
                at: at(1),
            },
            &mut push,
        );
        t.event(
            &RunEvent::ItemStarted {
                run: info(2, RunKind::Misfire),
                at: at(1),
            },
            &mut push,
        );
        t.event(
            &RunEvent::ItemFinished {
                run: info(0, RunKind::Misfire),
                outcome: ItemOutcome::Succeeded,
                error: None,
                output: None,
                elapsed: Duration::from_secs(1),
            },
            &mut push,
        );
        t.event(
            &RunEvent::ItemFinished {
                run: info(2, RunKind::Misfire),
                outcome: ItemOutcome::Failed("disk full".into()),
                error: Some(crate::jobs::JobError::Failed("disk full".into())),
                output: None,
                elapsed: Duration::from_secs(1),
            },
            &mut push,
        );
        let kinds: Vec<String> = out
            .iter()
            .map(|e| match e {
                TraceEvent::Status(s) => s.state.as_str().to_owned(),
                TraceEvent::ItemStarted(r) => format!("start {}", r.sharding_item),
                TraceEvent::ItemFinished { run, success, .. } => {
                    format!("end {} {success}", run.sharding_item)
                }
            })
            .collect();
        assert_eq!(
            kinds,
            [
                "TASK_STAGING",
                "TASK_RUNNING",
                "start 0",
                "start 2",
                "end 0 true",
                "end 2 false",
                "TASK_ERROR"
            ]
        );
        let TraceEvent::Status(staging) = &out[0] else {
            unreachable!()
        };
        assert_eq!(staging.message, "Job 'settle' execute begin.");
        assert_eq!(staging.sharding_item, "[0, 2]");
        assert_eq!(staging.slave_id, "10.1.2.3");
        assert_eq!(staging.execution_type, "READY");
        let TraceEvent::Status(error) = &out[6] else {
            unreachable!()
        };
        assert_eq!(error.message, "{2=disk full}");
        let TraceEvent::ItemStarted(start) = &out[2] else {
            unreachable!()
        };
        assert_eq!(start.source, ExecutionSource::Misfire);
        assert_eq!(start.ip, "10.1.2.3");
        let TraceEvent::ItemFinished { run, .. } = &out[4] else {
            unreachable!()
        };
        assert_eq!(run.id, start.id, "start and end share the row");
        assert_eq!(run.start_time, Some(at(1)));
        assert!(t.open.is_empty());
    }

    #[test]
    fn an_item_cancelled_before_it_started_has_no_row_and_excluded_jobs_none_at_all() {
        let mut t = Translator::new(JobFilter::default());
        let mut out = Vec::new();
        for item in [0, 2] {
            t.event(
                &RunEvent::ItemFinished {
                    run: info(item, RunKind::Failover),
                    outcome: ItemOutcome::Cancelled,
                    error: None,
                    output: None,
                    elapsed: Duration::ZERO,
                },
                &mut |e| out.push(e),
            );
        }
        assert!(out.is_empty());
        assert!(t.open.is_empty());

        let mut t = Translator::new(JobFilter {
            include: BTreeSet::new(),
            exclude: ["settle".to_owned()].into(),
        });
        t.event(
            &RunEvent::ItemStarted {
                run: info(0, RunKind::Scheduled),
                at: at(0),
            },
            &mut |e| out.push(e),
        );
        assert!(out.is_empty());
    }

    #[test]
    fn task_ids_give_their_items() {
        assert_eq!(
            items_of("a", "a@-@0,1,5@-@READY@-@1.2.3.4@-@9"),
            ["0", "1", "5"]
        );
        assert_eq!(item_count("a", "garbage"), 1);
        assert_eq!(ip_of("1.2.3.4@-@9"), "1.2.3.4");
        assert_eq!(source(RunKind::Trigger), ExecutionSource::NormalTrigger);
    }
}
