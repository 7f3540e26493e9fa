//! Measures fire lateness (job body start − scheduled fire time), start-up time, resident
//! memory and threads of one instance hosting many jobs on the in-memory registry.
//!
//! `cargo run --release --example lateness -- [JOBS] [SECONDS] [herd|spread|minute] [metrics]`
//! (default 1000 jobs, 10 s, herd, metrics off). Every job has one item.
//! - `herd`: every job fires every second, all at the same instant (the worst case);
//! - `spread`: every job fires every 10 s, a tenth of them in each second (job `n` at seconds
//!   `n % 10`, `n % 10 + 10`, …): with 10,000 jobs, still 1,000 at the same instant;
//! - `minute`: every job fires once a minute, job `n` at second `n % 60` (10,000 jobs: about
//!   167 at each second). Run it for at least 60 s to measure every job.
//!
//! With `metrics`, the Prometheus metrics are on (`.metrics`, on a free port of 127.0.0.1)
//! and scraped every 5 s while it measures, to weigh what they cost the lateness.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::Utc;
use shardjob::core::machine::MachineEvent;
use shardjob::core::{CronExpr, JobConfig};
use shardjob::jobs::{JobError, ShardingContext, SimpleJob};
use shardjob::mem::MemServer;
use shardjob::runtime::{RunEvent, Scheduler};

/// Not set yet: no fire is measured.
const UNSET: i64 = i64::MAX;

struct Probe {
    /// This job's lateness figures, in microseconds. One per job: a job runs one fire at a
    /// time here, so the lock is never contended and costs the measured runs nothing.
    lateness: Arc<Mutex<Vec<i64>>>,
    /// The first fire time measured, in epoch milliseconds; [`UNSET`] until every job is
    /// active.
    after: Arc<AtomicI64>,
}

#[async_trait::async_trait]
impl SimpleJob for Probe {
    async fn execute(&self, ctx: &ShardingContext) -> Result<(), JobError> {
        let now = Utc::now();
        if ctx.fire_time.timestamp_millis() >= self.after.load(Ordering::Relaxed) {
            let late = (now - ctx.fire_time).num_microseconds().unwrap_or(i64::MAX);
            self.lateness.lock().map_err(JobError::failed)?.push(late);
        }
        Ok(())
    }
}

fn proc_status(key: &str) -> String {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(key))
                .map(|l| l[key.len()..].trim().to_owned())
        })
        .unwrap_or_else(|| "?".to_owned())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let jobs: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(1000);
    let seconds: u64 = args.next().map(|a| a.parse()).transpose()?.unwrap_or(10);
    let mode = args.next().unwrap_or_else(|| "herd".to_owned());
    if !["herd", "spread", "minute"].contains(&mode.as_str()) {
        return Err(format!("expected herd, spread or minute, not {mode:?}").into());
    }
    let metrics = match args.next().as_deref() {
        None => false,
        Some("metrics") => true,
        Some(other) => return Err(format!("expected metrics or nothing, not {other:?}").into()),
    };
    let herd = CronExpr::parse("* * * * * ?")?;
    let mut probes: Vec<Arc<Mutex<Vec<i64>>>> = Vec::with_capacity(jobs);
    // Measured from a second after every job is active: start-up is measured separately, and
    // its backlog does not count as lateness.
    let after = Arc::new(AtomicI64::new(UNSET));
    let server = MemServer::default();
    let t0 = Instant::now();
    let mut builder = Scheduler::builder().registry(Arc::new(server.connect_default()));
    for n in 0..jobs {
        let cron = match mode.as_str() {
            "spread" => CronExpr::parse(&format!("{}/10 * * * * ?", n % 10))?,
            "minute" => CronExpr::parse(&format!("{} * * * * ?", n % 60))?,
            _ => herd.clone(),
        };
        let config = JobConfig::new(format!("job-{n}"), 1).with_cron(cron);
        let lateness = Arc::new(Mutex::new(Vec::with_capacity(seconds as usize + 2)));
        probes.push(Arc::clone(&lateness));
        builder = builder.job(
            config,
            Probe {
                lateness,
                after: Arc::clone(&after),
            },
        );
    }
    if metrics {
        builder = builder.metrics(0u16);
    }
    // Subscribed before the build: the first jobs can be active before it returns.
    let mut events = builder.subscribe();
    let handle = builder.build().await?;
    let mut active = std::collections::HashSet::new();
    while active.len() < jobs {
        match events.recv().await {
            Ok(RunEvent::Machine(MachineEvent::JobActive { job })) => {
                active.insert(job);
            }
            Ok(_) => {}
            Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                eprintln!("missed {n} events while counting start-up");
                break;
            }
            Err(e) => return Err(e.into()),
        }
    }
    let startup = t0.elapsed();
    // A subscriber that no longer reads would only make every run pay for events nobody
    // takes.
    drop(events);
    let from = Utc::now() + chrono::Duration::seconds(1);
    after.store(from.timestamp_millis(), Ordering::Relaxed);
    let scrapes = handle
        .metrics_addr()
        .map(|addr| tokio::spawn(scrape_every_5s(addr)));
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    if let Some(scrapes) = scrapes {
        scrapes.abort();
    }
    let rss = proc_status("VmRSS:");
    let threads = proc_status("Threads:");
    handle.shutdown().await?;

    let mut l = Vec::new();
    for p in &probes {
        l.extend(p.lock().map_err(|e| e.to_string())?.iter().copied());
    }
    l.sort_unstable();
    let pick = |q: f64| {
        l.get(((l.len().max(1) - 1) as f64 * q) as usize)
            .copied()
            .unwrap_or(0)
    };
    println!(
        "{jobs} jobs ({mode}), {seconds} s: start-up {} ms (all jobs active), {} item runs measured",
        startup.as_millis(),
        l.len()
    );
    println!(
        "fire lateness: p10 {:.2} ms, p25 {:.2} ms, p50 {:.2} ms, p75 {:.2} ms, p90 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        pick(0.1) as f64 / 1000.0,
        pick(0.25) as f64 / 1000.0,
        pick(0.5) as f64 / 1000.0,
        pick(0.75) as f64 / 1000.0,
        pick(0.9) as f64 / 1000.0,
        pick(0.99) as f64 / 1000.0,
        l.last().copied().unwrap_or(0) as f64 / 1000.0
    );
    println!(
        "resident memory {rss}, threads {threads}, metrics {}",
        if metrics { "on" } else { "off" }
    );
    Ok(())
}

/// Scrapes `/metrics` as a Prometheus would, every 5 s; says the size of the first scrape.
async fn scrape_every_5s(addr: std::net::SocketAddr) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut first = true;
    loop {
        tokio::time::sleep(Duration::from_secs(5)).await;
        let Ok(mut stream) = tokio::net::TcpStream::connect(addr).await else {
            continue;
        };
        let mut body = Vec::new();
        let asked = stream
            .write_all(b"GET /metrics HTTP/1.1\r\nHost: bench\r\n\r\n")
            .await;
        if asked.is_ok() && stream.read_to_end(&mut body).await.is_ok() && first {
            first = false;
            println!("scraped /metrics: {} bytes", body.len());
        }
    }
}
