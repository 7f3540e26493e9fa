//! `shardjob demo`: three instances in one process share a sharded job over the in-memory
//! registry; one crashes and its items fail over, one leaves gracefully, and the run ends by
//! itself. A table shows, fire by fire, which instance ran which item.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use shardjob_backend_mem::{MemClient, MemServer};
use shardjob_core::machine::MachineEvent;
use shardjob_core::machine::record::RunKind;
use shardjob_core::{CronExpr, InstanceId, JobConfig, JobTimeZone};
use tokio::sync::mpsc;

use shardjob::jobs::{JobError, ShardingContext, SimpleJob};
use shardjob::runtime::{RunEvent, RuntimeError, Scheduler, SchedulerHandle};

/// The demo job's name.
pub const DEMO_JOB: &str = "demo-job";
/// Its items.
pub const DEMO_ITEMS: u32 = 6;
/// Its schedule: every 2 s.
pub const DEMO_CRON: &str = "0/2 * * * * ?";
/// How long one item's run lasts.
const WORK: Duration = Duration::from_millis(700);
/// How long after its fire a row is printed (later runs of that fire are listed below it).
const ROW_DELAY_MS: i64 = 1500;
/// The shortest demo: time for a crash while the victim runs items, the end of its session
/// (2 s) and the failover of those items, with a graceful leave after.
pub const MIN_SECONDS: u64 = 10;
/// How long past its time the demo waits for the crashed instance's items to fail over, if
/// they have not yet (a loaded machine): a demo of a failover shows one.
const FAILOVER_GRACE: Duration = Duration::from_secs(20);

/// Why the demo could not run.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// Writing the output failed.
    #[error("cannot write output: {0}")]
    Output(#[from] std::io::Error),
    /// An instance could not be started or stopped.
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// A built-in value was refused (a bug).
    #[error("demo setup: {0}")]
    Setup(String),
}

/// What the demo saw, for its caller.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DemoSummary {
    /// Item runs started.
    pub runs: usize,
    /// Failover runs among them.
    pub failovers: usize,
    /// Misfire runs among them.
    pub misfires: usize,
    /// Runs cancelled before they ended (the crashed instance's): they did not complete.
    pub cancelled: usize,
    /// (item, fire) pairs that completed more than once: must be 0.
    pub duplicates: usize,
    /// Fire lateness of on-time runs, ms: p50, p99, max.
    pub lateness_ms: Option<(i64, i64, i64)>,
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RunEnd {
    /// It did its work.
    Completed,
    /// It was cancelled first (its instance lost its session, or left): it did not complete.
    Cancelled,
}

#[derive(Debug, Clone)]
struct DemoRun {
    letter: char,
    item: u32,
    fire: DateTime<Utc>,
    kind: RunKind,
    started: DateTime<Utc>,
    /// How and when it ended; `None` while it runs.
    end: Option<(RunEnd, DateTime<Utc>)>,
}

/// What the table showed of a run so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shown {
    /// Not shown yet.
    No,
    /// Shown while it ran: its end is still to be told if it was cancelled.
    Running,
    /// Shown with its end.
    Ended,
}

type Log = Arc<Mutex<Vec<DemoRun>>>;

struct DemoJob {
    letter: char,
    log: Log,
}

#[async_trait]
impl SimpleJob for DemoJob {
    async fn execute(&self, ctx: &ShardingContext) -> Result<(), JobError> {
        let index = {
            let mut log = self.log.lock().unwrap_or_else(PoisonError::into_inner);
            log.push(DemoRun {
                letter: self.letter,
                item: ctx.sharding_item,
                fire: ctx.fire_time,
                kind: ctx.kind,
                started: Utc::now(),
                end: None,
            });
            log.len() - 1
        };
        let (end, result) = tokio::select! {
            () = tokio::time::sleep(WORK) => (RunEnd::Completed, Ok(())),
            _ = ctx.cancel.cancelled() => (RunEnd::Cancelled, Err(JobError::Cancelled)),
        };
        if let Some(run) = self
            .log
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get_mut(index)
        {
            run.end = Some((end, Utc::now()));
        }
        result
    }

    fn job_type(&self) -> String {
        "DEMO".to_owned()
    }
}

struct Instance {
    letter: char,
    client: Arc<MemClient>,
    handle: SchedulerHandle,
}

/// Runs the demo for `seconds` (at least [`MIN_SECONDS`]), writing to `out`.
pub async fn run(seconds: u64, out: &mut dyn Write) -> Result<DemoSummary, DemoError> {
    if seconds < MIN_SECONDS {
        writeln!(
            out,
            "(--seconds {seconds} is below the minimum of {MIN_SECONDS}: the demo runs \
             {MIN_SECONDS} s, time for a crash and its failover)"
        )?;
    }
    let seconds = seconds.max(MIN_SECONDS);
    let session_timeout = if seconds >= 20 {
        Duration::from_secs(3)
    } else {
        Duration::from_secs(2)
    };
    let cron = CronExpr::parse(DEMO_CRON).map_err(|e| DemoError::Setup(e.to_string()))?;
    let mut config = JobConfig::new(DEMO_JOB, DEMO_ITEMS).with_cron(cron.clone());
    config.failover = true;
    config.description = "shardjob demo".to_owned();

    let server = MemServer::default();
    let log: Log = Arc::default();
    let (notes_tx, mut notes) = mpsc::unbounded_channel::<String>();
    let mut instances = Vec::new();
    let mut letters = BTreeMap::new();
    for (k, letter) in ['A', 'B', 'C'].into_iter().enumerate() {
        let id = InstanceId::new(format!(
            "host-{}@-@{}",
            letter.to_ascii_lowercase(),
            101 + k
        ))
        .map_err(|e| DemoError::Setup(e.to_string()))?;
        letters.insert(id.to_string(), letter);
        let client = Arc::new(server.connect(session_timeout));
        let handle = Scheduler::builder()
            .registry(client.clone())
            .instance_id(id)
            .job(
                config.clone(),
                DemoJob {
                    letter,
                    log: Arc::clone(&log),
                },
            )
            .build()
            .await?;
        instances.push(Instance {
            letter,
            client,
            handle,
        });
    }
    let letters = Arc::new(letters);
    for inst in &instances {
        let mut events = inst.handle.subscribe();
        let tx = notes_tx.clone();
        let letter = inst.letter;
        let letters = Arc::clone(&letters);
        tokio::spawn(async move {
            while let Ok(event) = events.recv().await {
                let note = match event {
                    RunEvent::Machine(MachineEvent::BecameLeader { .. }) => {
                        format!("{letter} is elected leader")
                    }
                    RunEvent::Machine(MachineEvent::Resharded { owners, .. }) => {
                        format!("{letter} (leader) re-shards: {}", plan(&owners, &letters))
                    }
                    _ => continue,
                };
                if tx.send(note).is_err() {
                    return;
                }
            }
        });
    }

    let start = Utc::now();
    let end = start + ms(seconds as i64 * 1000);
    let utc = JobTimeZone::utc();
    let fires: Vec<DateTime<Utc>> = cron
        .fires_after(start, &utc)
        .take_while(|f| *f <= end)
        .collect();
    // C crashes once it runs items (so that they fail over), from 30 % of the demo on (from
    // 1.5 s in a short demo, so that the failover comes well before the end); if it runs
    // nothing for a while by then, it crashes all the same.
    let kill_from = start
        + if seconds >= 20 {
            ms(seconds as i64 * 300)
        } else {
            ms(1500)
        };
    let kill_anyway = kill_from + ms(6000);
    let leave_at = start + ms(seconds as i64 * 650);

    writeln!(
        out,
        "shardjob demo: instances A, B and C share job {DEMO_JOB:?}: {DEMO_ITEMS} items, cron \
         {DEMO_CRON:?} (every 2 s), failover on"
    )?;
    writeln!(
        out,
        "in-memory registry, one session per instance, session timeout {} s; each run lasts {} ms",
        session_timeout.as_secs(),
        WORK.as_millis()
    )?;
    writeln!(
        out,
        "each row is one fire: who ran each item (A on time, A* failover, A+ misfire, \
         A✗ cancelled before it ended, . nobody); logs: RUST_LOG=info"
    )?;
    writeln!(out)?;
    let header: String = (0..DEMO_ITEMS).map(|i| format!("{i:>4}")).collect();
    writeln!(out, "  fire (UTC) {header}")?;

    let mut printed: BTreeSet<DateTime<Utc>> = BTreeSet::new();
    let mut reported: Vec<Shown> = Vec::new();
    let mut killed = false;
    // The items C was running when it crashed: they must fail over.
    let mut crashed_items: Vec<u32> = Vec::new();
    let mut said_waiting = false;
    let mut leaving: Option<tokio::task::JoinHandle<()>> = None;
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    loop {
        tick.tick().await;
        let now = Utc::now();
        while let Ok(note) = notes.try_recv() {
            writeln!(out, "             · {note}")?;
        }
        let c_running = || -> Vec<u32> {
            runs_of(&log)
                .iter()
                .filter(|r| r.letter == 'C' && r.end.is_none() && now - r.started >= ms(100))
                .map(|r| r.item)
                .collect()
        };
        if !killed && now >= kill_from && (!c_running().is_empty() || now >= kill_anyway) {
            killed = true;
            if let Some(c) = instances.iter().find(|i| i.letter == 'C') {
                crashed_items = c_running();
                if let Some(session) = c.client.session_id() {
                    server.kill(session);
                }
                let running: Vec<String> = crashed_items.iter().map(u32::to_string).collect();
                writeln!(
                    out,
                    ">>> {}  C crashes: its registry client is killed, no goodbye (it was running \
                     item(s) {}, which do not complete: C✗). Its session lingers until the {} s \
                     timeout, then C's items fail over.",
                    now.format("%H:%M:%S"),
                    if running.is_empty() {
                        "none".to_owned()
                    } else {
                        running.join(",")
                    },
                    session_timeout.as_secs()
                )?;
            }
        }
        if leaving.is_none() && now >= leave_at {
            if let Some(b) = instances.iter().find(|i| i.letter == 'B') {
                writeln!(
                    out,
                    ">>> {}  B leaves gracefully: it finishes its running items and deletes its \
                     nodes, so A takes over at once",
                    now.format("%H:%M:%S")
                )?;
                let handle = b.handle.clone();
                let tx = notes_tx.clone();
                leaving = Some(tokio::spawn(async move {
                    let t0 = tokio::time::Instant::now();
                    let note = match handle.shutdown().await {
                        Ok(()) => format!("B has left ({} ms)", t0.elapsed().as_millis()),
                        Err(e) => format!("B's shutdown failed: {e}"),
                    };
                    let _ = tx.send(note);
                }));
            }
        }
        print_rows(out, &log, &fires, now, &mut printed, &mut reported)?;
        if now >= end {
            // A demo of a failover shows one: on a slow machine, wait a little for it.
            let failed_over = crashed_items.is_empty()
                || runs_of(&log).iter().any(|r| r.kind == RunKind::Failover);
            if failed_over || now >= end + ms(FAILOVER_GRACE.as_millis() as i64) {
                break;
            }
            if !said_waiting {
                said_waiting = true;
                writeln!(
                    out,
                    ">>> {}  time is up, but C's items have not failed over yet: waiting for \
                     them (at most {} s more)",
                    now.format("%H:%M:%S"),
                    FAILOVER_GRACE.as_secs()
                )?;
            }
        }
    }

    writeln!(
        out,
        ">>> {}  time is up: A leaves too",
        Utc::now().format("%H:%M:%S")
    )?;
    if let Some(task) = leaving {
        let _ = task.await;
    }
    for inst in &instances {
        match inst.handle.shutdown().await {
            Ok(()) | Err(RuntimeError::Failed(_)) => {} // C failed on purpose.
            Err(e) => return Err(e.into()),
        }
    }
    while let Ok(note) = notes.try_recv() {
        writeln!(out, "             · {note}")?;
    }
    let far = Utc::now() + ms(i64::from(u16::MAX));
    print_rows(out, &log, &fires, far, &mut printed, &mut reported)?;

    let summary = summarize(&runs_of(&log));
    writeln!(out)?;
    writeln!(
        out,
        "summary: {} fires, {} item runs ({} failover, {} misfire, {} cancelled before they ended)",
        fires.len(),
        summary.runs,
        summary.failovers,
        summary.misfires,
        summary.cancelled
    )?;
    if summary.duplicates == 0 {
        writeln!(out, "  no item completed twice for the same fire")?;
    } else {
        writeln!(
            out,
            "  ERROR: {} (item, fire) pairs completed twice",
            summary.duplicates
        )?;
    }
    if let Some((p50, p99, max)) = summary.lateness_ms {
        writeln!(
            out,
            "  fire lateness of on-time runs (job start − scheduled time): p50 {p50} ms, p99 {p99} ms, max {max} ms"
        )?;
        writeln!(
            out,
            "  (an instance runs at most {} items of a job at once, the CPU executor's cores × 2; \
             items beyond that wait for a slot, which shows in p99 once A runs all {DEMO_ITEMS})",
            shardjob::runtime::executor_size(shardjob_core::config::ExecutorType::Cpu)
        )?;
    }
    // What an operator sees of the job now, through the same code as `shardjob status`.
    writeln!(out)?;
    writeln!(
        out,
        "`shardjob status {DEMO_JOB}` now that every instance has left (CRASHED: no live \
         instance; SHARDING_FLAG: the item's owner is gone; LAST DONE: its last fire done):"
    )?;
    writeln!(out)?;
    let client = server.connect(Duration::from_secs(5));
    if let Err(why) = crate::ops_cli::show_status(&client, DEMO_JOB, Utc::now(), out).await? {
        writeln!(out, "(the status cannot be read: {why})")?;
    }
    Ok(summary)
}

fn ms(n: i64) -> chrono::Duration {
    chrono::Duration::milliseconds(n)
}

fn runs_of(log: &Log) -> Vec<DemoRun> {
    log.lock().unwrap_or_else(PoisonError::into_inner).clone()
}

fn plan(owners: &BTreeMap<u32, InstanceId>, letters: &BTreeMap<String, char>) -> String {
    let mut by: BTreeMap<char, Vec<String>> = BTreeMap::new();
    for (item, id) in owners {
        let letter = letters.get(id.as_str()).copied().unwrap_or('?');
        by.entry(letter).or_default().push(item.to_string());
    }
    by.iter()
        .map(|(l, items)| format!("{l}: {}", items.join(",")))
        .collect::<Vec<_>>()
        .join("  ")
}

fn cell(run: &DemoRun) -> String {
    let mark = match run.kind {
        RunKind::Failover => "*",
        RunKind::Misfire => "+",
        RunKind::Trigger => "t",
        RunKind::Scheduled => "",
    };
    let cancelled = if matches!(run.end, Some((RunEnd::Cancelled, _))) {
        "✗"
    } else {
        ""
    };
    format!("{}{mark}{cancelled}", run.letter)
}

/// Why a run ran, in words, for the lines under the table.
fn kind_words(kind: RunKind) -> &'static str {
    match kind {
        RunKind::Failover => "failover",
        RunKind::Misfire => "misfire",
        RunKind::Trigger => "trigger",
        RunKind::Scheduled => "on time",
    }
}

/// Prints the rows of fires at least [`ROW_DELAY_MS`] old, then runs of printed fires that
/// started after their row (with why and when they ran), and runs shown while they ran that
/// were cancelled since.
fn print_rows(
    out: &mut dyn Write,
    log: &Log,
    fires: &[DateTime<Utc>],
    now: DateTime<Utc>,
    printed: &mut BTreeSet<DateTime<Utc>>,
    reported: &mut Vec<Shown>,
) -> std::io::Result<()> {
    let runs = runs_of(log);
    reported.resize(runs.len(), Shown::No);
    let shown = |run: &DemoRun| {
        if run.end.is_some() {
            Shown::Ended
        } else {
            Shown::Running
        }
    };
    let mut late: BTreeMap<DateTime<Utc>, Vec<String>> = BTreeMap::new();
    for (i, run) in runs.iter().enumerate() {
        match reported[i] {
            Shown::No if printed.contains(&run.fire) => {
                reported[i] = shown(run);
                late.entry(run.fire).or_default().push(format!(
                    "item {} → {} ({}, ran at {})",
                    run.item,
                    cell(run),
                    kind_words(run.kind),
                    run.started.format("%H:%M:%S%.3f")
                ));
            }
            Shown::Running => match run.end {
                Some((RunEnd::Cancelled, at)) => {
                    reported[i] = Shown::Ended;
                    writeln!(
                        out,
                        "             ↳ {}: item {} on {} was cancelled at {} before it ended",
                        run.fire.format("%H:%M:%S"),
                        run.item,
                        run.letter,
                        at.format("%H:%M:%S%.3f")
                    )?;
                }
                Some((RunEnd::Completed, _)) => reported[i] = Shown::Ended,
                None => {}
            },
            _ => {}
        }
    }
    for (fire, cells) in late {
        writeln!(
            out,
            "             ↳ later for the fire of {}: {}",
            fire.format("%H:%M:%S"),
            cells.join("; ")
        )?;
    }
    // Fires of runs (a failover can bring back a fire before the demo began) and of the cron.
    let mut due: BTreeSet<DateTime<Utc>> = fires.iter().copied().collect();
    due.extend(runs.iter().map(|r| r.fire));
    for fire in due {
        if printed.contains(&fire) || fire + ms(ROW_DELAY_MS) > now {
            continue;
        }
        printed.insert(fire);
        let mut cells: BTreeMap<u32, Vec<String>> = BTreeMap::new();
        for (i, run) in runs.iter().enumerate() {
            if run.fire == fire {
                reported[i] = shown(run);
                cells.entry(run.item).or_default().push(cell(run));
            }
        }
        let row: String = (0..DEMO_ITEMS)
            .map(|i| {
                let text = cells
                    .get(&i)
                    .map_or_else(|| ".".to_owned(), |c| c.join("/"));
                format!("{text:>4}")
            })
            .collect();
        writeln!(out, "    {} {row}", fire.format("%H:%M:%S"))?;
    }
    Ok(())
}

fn summarize(runs: &[DemoRun]) -> DemoSummary {
    let mut done: BTreeMap<(u32, DateTime<Utc>), usize> = BTreeMap::new();
    let mut lateness: Vec<i64> = Vec::new();
    for run in runs {
        let completed = matches!(run.end, Some((RunEnd::Completed, _)));
        if completed && run.kind != RunKind::Trigger {
            *done.entry((run.item, run.fire)).or_default() += 1;
        }
        if run.kind == RunKind::Scheduled {
            lateness.push((run.started - run.fire).num_milliseconds());
        }
    }
    lateness.sort_unstable();
    let pick = |q: f64| -> i64 {
        let i = ((lateness.len() as f64 - 1.0) * q).round() as usize;
        lateness.get(i).copied().unwrap_or_default()
    };
    DemoSummary {
        runs: runs.len(),
        failovers: runs.iter().filter(|r| r.kind == RunKind::Failover).count(),
        misfires: runs.iter().filter(|r| r.kind == RunKind::Misfire).count(),
        cancelled: runs
            .iter()
            .filter(|r| matches!(r.end, Some((RunEnd::Cancelled, _))))
            .count(),
        duplicates: done.values().filter(|n| **n > 1).count(),
        lateness_ms: (!lateness.is_empty()).then(|| {
            (
                pick(0.5),
                pick(0.99),
                lateness.last().copied().unwrap_or_default(),
            )
        }),
    }
}
