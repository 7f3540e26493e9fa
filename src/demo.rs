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

use crate::jobs::{JobError, ShardingContext, SimpleJob};
use crate::runtime::{RunEvent, RuntimeError, Scheduler, SchedulerHandle};

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
/// The shortest demo.
pub const MIN_SECONDS: u64 = 4;

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
    /// (item, fire) pairs that completed more than once: must be 0.
    pub duplicates: usize,
    /// Fire lateness of on-time runs, ms: p50, p99, max.
    pub lateness_ms: Option<(i64, i64, i64)>,
}

#[derive(Debug, Clone)]
struct DemoRun {
    letter: char,
    item: u32,
    fire: DateTime<Utc>,
    kind: RunKind,
    started: DateTime<Utc>,
    done: bool,
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
                done: false,
            });
            log.len() - 1
        };
        tokio::select! {
            () = tokio::time::sleep(WORK) => {}
            _ = ctx.cancel.cancelled() => return Err(JobError::Cancelled),
        }
        if let Some(run) = self
            .log
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get_mut(index)
        {
            run.done = true;
        }
        Ok(())
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
    let kill_at = fires
        .iter()
        .find(|f| **f >= start + ms(seconds as i64 * 300))
        .map(|f| *f + ms(300));
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
        "each row is one fire: who ran each item (A on time, A* failover, A+ misfire, . nobody); \
         logs: RUST_LOG=info"
    )?;
    writeln!(out)?;
    let header: String = (0..DEMO_ITEMS).map(|i| format!("{i:>4}")).collect();
    writeln!(out, "  fire (UTC) {header}")?;

    let mut printed: BTreeSet<DateTime<Utc>> = BTreeSet::new();
    let mut reported: Vec<bool> = Vec::new();
    let mut killed = false;
    let mut leaving: Option<tokio::task::JoinHandle<()>> = None;
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    loop {
        tick.tick().await;
        let now = Utc::now();
        while let Ok(note) = notes.try_recv() {
            writeln!(out, "             · {note}")?;
        }
        if !killed && kill_at.is_some_and(|t| now >= t) {
            killed = true;
            if let Some(c) = instances.iter().find(|i| i.letter == 'C') {
                if let Some(session) = c.client.session_id() {
                    server.kill(session);
                }
                let running: Vec<String> = runs_of(&log)
                    .iter()
                    .filter(|r| r.letter == 'C' && !r.done)
                    .map(|r| r.item.to_string())
                    .collect();
                writeln!(
                    out,
                    ">>> {}  C crashes: its registry client is killed, no goodbye (it was running \
                     item(s) {}). Its session lingers until the {} s timeout, then C's items \
                     fail over.",
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
            break;
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
        "summary: {} fires, {} item runs ({} failover, {} misfire)",
        fires.len(),
        summary.runs,
        summary.failovers,
        summary.misfires
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
            crate::runtime::executor_size(shardjob_core::config::ExecutorType::Cpu)
        )?;
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
    format!("{}{mark}", run.letter)
}

/// Prints the rows of fires at least [`ROW_DELAY_MS`] old, then runs of printed fires that
/// started after their row.
fn print_rows(
    out: &mut dyn Write,
    log: &Log,
    fires: &[DateTime<Utc>],
    now: DateTime<Utc>,
    printed: &mut BTreeSet<DateTime<Utc>>,
    reported: &mut Vec<bool>,
) -> std::io::Result<()> {
    let runs = runs_of(log);
    reported.resize(runs.len(), false);
    let mut late: BTreeMap<DateTime<Utc>, Vec<String>> = BTreeMap::new();
    for (i, run) in runs.iter().enumerate() {
        if !reported[i] && printed.contains(&run.fire) {
            reported[i] = true;
            late.entry(run.fire)
                .or_default()
                .push(format!("{}→{}", run.item, cell(run)));
        }
    }
    for (fire, cells) in late {
        writeln!(
            out,
            "             ↳ later for {}: {}",
            fire.format("%H:%M:%S"),
            cells.join(" ")
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
                reported[i] = true;
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
        if run.done && run.kind != RunKind::Trigger {
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
