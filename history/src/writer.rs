//! The writer: a bounded queue that [`History::record`] fills without ever waiting, and a task
//! that writes it to the database in batches, off the scheduler's path.
//!
//! A database that is down or slow is retried with backoff for as long as it is down; the
//! events wait in the queue meanwhile. Only when the queue's bound is exceeded are events
//! dropped, the oldest first (those of a batch being retried included), counted
//! ([`HistoryStats::dropped`]) and logged at most once a minute. A write that timed out or
//! whose connection broke is written again: the writes are idempotent (keyed by the ids), so
//! nothing is written twice. A batch the database refuses (not a connection problem) is
//! written event by event, and an event it refuses on its own is logged and counted
//! ([`HistoryStats::rejected`]) so that it cannot hold the queue up.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use chrono::Utc;
use shardjob_core::backoff::Backoff;
use tokio::sync::{Notify, watch};

use crate::event::TraceEvent;
use crate::store::{Store, StoreError};
use crate::url::DatabaseUrl;

/// How long between two logs of dropped events.
const DROP_LOG_EVERY: Duration = Duration::from_secs(60);

/// Settings of the writer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryOptions {
    /// The most events waiting to be written; beyond it the oldest are dropped.
    pub queue_bound: usize,
    /// The most events written in one transaction.
    pub batch_size: usize,
    /// How long one batch may take before it is given up and retried.
    pub write_timeout: Duration,
    /// The first pause after a failed write; it doubles up to `max_backoff`.
    pub min_backoff: Duration,
    /// The longest pause between two attempts while the database is down.
    pub max_backoff: Duration,
    /// Rows older than this are deleted (`tracing.retention`); `None` keeps everything.
    pub retention: Option<Duration>,
    /// How often the retention runs.
    pub retention_every: Duration,
    /// Rows per delete statement.
    pub retention_batch: u32,
}

impl Default for HistoryOptions {
    fn default() -> Self {
        HistoryOptions {
            queue_bound: 100_000,
            batch_size: 500,
            write_timeout: Duration::from_secs(10),
            min_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(5),
            retention: None,
            retention_every: Duration::from_secs(3600),
            retention_batch: 1000,
        }
    }
}

/// Errors when the history is set up.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    /// The URL's options are refused.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A bound of zero.
    #[error("the history queue bound and batch size must be at least 1")]
    ZeroBound,
    /// Not within a tokio runtime.
    #[error("the history writer must be started within a tokio runtime")]
    NoRuntime,
}

/// The writer's figures (for metrics).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HistoryStats {
    /// Events waiting (queued and being written).
    pub queued: u64,
    /// Events written.
    pub written: u64,
    /// Events dropped: the queue's bound was exceeded, or they were lost before reaching the
    /// queue ([`History::lost`]).
    pub dropped: u64,
    /// Events the database refused on their own (logged).
    pub rejected: u64,
    /// Whether the last write failed (the database is down or refusing).
    pub failing: bool,
}

/// What a flush left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlushReport {
    /// Whether everything recorded before the flush was written (or dropped) in time.
    pub complete: bool,
    /// Events still waiting.
    pub left: u64,
}

struct Queue {
    events: VecDeque<TraceEvent>,
    /// Events taken by the writer and not yet written.
    inflight: usize,
    /// How many of the in-flight events the writer must drop before its next attempt (the
    /// bound was exceeded while they waited).
    shed: usize,
    last_drop_log: Option<Instant>,
    dropped_since_log: u64,
}

struct Shared {
    queue: Mutex<Queue>,
    wake: Notify,
    bound: usize,
    recorded: AtomicU64,
    written: AtomicU64,
    dropped: AtomicU64,
    rejected: AtomicU64,
    failing: AtomicBool,
    /// Events settled (written, dropped or rejected): what a flush waits for.
    settled: watch::Sender<u64>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        // A panic while holding the lock leaves a queue that is still consistent.
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn settle(&self, n: u64) {
        if n > 0 {
            self.settled.send_modify(|s| *s += n);
        }
    }

    fn count_drops(&self, q: &mut Queue, n: u64) {
        self.dropped.fetch_add(n, Ordering::Relaxed);
        q.dropped_since_log += n;
        let due = q
            .last_drop_log
            .is_none_or(|at| at.elapsed() >= DROP_LOG_EVERY);
        if due {
            tracing::warn!(
                dropped = q.dropped_since_log,
                total_dropped = self.dropped.load(Ordering::Relaxed),
                bound = self.bound,
                "job history: queue bound exceeded, oldest events dropped (the database is \
                 down or too slow; raise tracing.queue-bound to keep more)"
            );
            q.last_drop_log = Some(Instant::now());
            q.dropped_since_log = 0;
        }
    }
}

/// The job history: where events are recorded ([`History::record`]) and read back
/// ([`History::store`]). Cheap to clone.
#[derive(Clone)]
pub struct History {
    shared: Arc<Shared>,
    store: Store,
    tasks: Arc<Mutex<Vec<tokio::task::JoinHandle<()>>>>,
}

impl std::fmt::Debug for History {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("History")
            .field("store", &self.store)
            .field("stats", &self.stats())
            .finish()
    }
}

impl History {
    /// Starts the writer (and the retention, if set) for `url`. The database need not be up:
    /// the tables are created and the events written once it is. Must be called within a
    /// tokio runtime.
    pub fn start(url: &DatabaseUrl, opts: HistoryOptions) -> Result<History, HistoryError> {
        if opts.queue_bound == 0 || opts.batch_size == 0 {
            return Err(HistoryError::ZeroBound);
        }
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| HistoryError::NoRuntime)?;
        let store = Store::connect_lazy(url, opts.write_timeout)?;
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue {
                events: VecDeque::new(),
                inflight: 0,
                shed: 0,
                last_drop_log: None,
                dropped_since_log: 0,
            }),
            wake: Notify::new(),
            bound: opts.queue_bound,
            recorded: AtomicU64::new(0),
            written: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
            failing: AtomicBool::new(false),
            settled: watch::channel(0).0,
        });
        let mut tasks =
            vec![runtime.spawn(write_loop(Arc::clone(&shared), store.clone(), opts.clone()))];
        if let Some(keep) = opts.retention {
            tasks.push(runtime.spawn(retention_loop(store.clone(), keep, opts)));
        }
        Ok(History {
            shared,
            store,
            tasks: Arc::new(Mutex::new(tasks)),
        })
    }

    /// Queues an event; never waits. Beyond the bound the oldest waiting event is dropped
    /// (counted, logged at most once a minute).
    pub fn record(&self, event: TraceEvent) {
        let s = &self.shared;
        s.recorded.fetch_add(1, Ordering::Relaxed);
        let mut q = s.lock();
        if q.events.len() + q.inflight - q.shed.min(q.inflight) >= s.bound {
            if q.inflight > q.shed {
                // The writer's batch holds the oldest: it drops them before its next
                // attempt (and counts them then; written meanwhile, they are not dropped).
                q.shed += 1;
            } else if q.events.pop_front().is_some() {
                s.count_drops(&mut q, 1);
                s.settle(1);
            }
        }
        q.events.push_back(event);
        drop(q);
        s.wake.notify_one();
    }

    /// The writer's figures.
    pub fn stats(&self) -> HistoryStats {
        let s = &self.shared;
        let q = s.lock();
        HistoryStats {
            queued: (q.events.len() + q.inflight) as u64,
            written: s.written.load(Ordering::Relaxed),
            dropped: s.dropped.load(Ordering::Relaxed),
            rejected: s.rejected.load(Ordering::Relaxed),
            failing: s.failing.load(Ordering::Relaxed),
        }
    }

    /// The database, for queries.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Waits until every event recorded before the call is written (or dropped), at most
    /// `deadline`.
    pub async fn flush(&self, deadline: Duration) -> FlushReport {
        let target = self.shared.recorded.load(Ordering::Relaxed);
        let mut rx = self.shared.settled.subscribe();
        let wait = async {
            loop {
                if *rx.borrow_and_update() >= target {
                    return;
                }
                if rx.changed().await.is_err() {
                    return;
                }
            }
        };
        let complete = tokio::time::timeout(deadline, wait).await.is_ok();
        FlushReport {
            complete,
            left: self.stats().queued,
        }
    }

    /// Flushes within `deadline`, then stops the writer and the retention and closes the
    /// pool. What is left unwritten is logged.
    pub async fn shutdown(&self, deadline: Duration) -> FlushReport {
        let report = self.flush(deadline).await;
        let tasks: Vec<_> = {
            let mut t = self.tasks.lock().unwrap_or_else(|p| p.into_inner());
            t.drain(..).collect()
        };
        for t in tasks {
            t.abort();
        }
        if !report.complete {
            tracing::warn!(
                left = report.left,
                "job history: shutdown deadline ({deadline:?}) passed with events unwritten \
                 (the database is down or slow); they are lost"
            );
        }
        self.store.close().await;
        report
    }
}

async fn write_loop(shared: Arc<Shared>, store: Store, opts: HistoryOptions) {
    let batch_size = opts.batch_size.min(shared.bound);
    let mut schema_ready = false;
    let mut retries = Backoff::new(opts.min_backoff, opts.max_backoff).retries();
    let mut down_since: Option<Instant> = None;
    let mut last_down_log = Instant::now();
    loop {
        let mut batch: Vec<TraceEvent> = {
            let mut q = shared.lock();
            let n = q.events.len().min(batch_size);
            q.inflight = n;
            q.shed = 0;
            q.events.drain(..n).collect()
        };
        if batch.is_empty() {
            shared.wake.notified().await;
            continue;
        }
        loop {
            // Events of the batch the bound pushed out while it waited.
            {
                let mut q = shared.lock();
                let shed = q.shed.min(batch.len());
                if shed > 0 {
                    batch.drain(..shed);
                    q.inflight -= shed;
                    q.shed -= shed;
                    shared.count_drops(&mut q, shed as u64);
                    shared.settle(shed as u64);
                }
            }
            if batch.is_empty() {
                break;
            }
            let attempt = async {
                if !schema_ready {
                    // Any failure here (down, or not allowed to create) is retried.
                    store.ensure_schema().await.map_err(|e| (e, true))?;
                }
                store.write_batch(&batch).await.map_err(|e| (e, false))
            };
            let result = match tokio::time::timeout(opts.write_timeout, attempt).await {
                Ok(r) => r,
                Err(_) => Err((
                    StoreError::Sql {
                        url: store_name(&store),
                        what: "writing events (timed out)",
                        source: sqlx::Error::PoolTimedOut,
                    },
                    true,
                )),
            };
            match result {
                Ok(()) => {
                    schema_ready = true;
                    done(&shared, batch.len() as u64, batch.len() as u64);
                    if let Some(since) = down_since.take() {
                        tracing::info!(
                            after = ?since.elapsed(),
                            "job history: the database is back, writing again"
                        );
                    }
                    shared.failing.store(false, Ordering::Relaxed);
                    retries.reset();
                    break;
                }
                Err((e, retry)) if retry || e.is_transient() => {
                    shared.failing.store(true, Ordering::Relaxed);
                    schema_ready = false;
                    let now = Instant::now();
                    match down_since {
                        None => {
                            down_since = Some(now);
                            last_down_log = now;
                            tracing::warn!(
                                "job history: {e}; retrying with backoff while the database \
                                 is down (events wait in the queue)"
                            );
                        }
                        Some(since) if now.duration_since(last_down_log) >= DROP_LOG_EVERY => {
                            last_down_log = now;
                            tracing::warn!(
                                down_for = ?since.elapsed(),
                                queued = shared.lock().events.len() + batch.len(),
                                "job history: still cannot write: {e}"
                            );
                        }
                        Some(_) => {}
                    }
                    tokio::time::sleep(retries.next_pause()).await;
                }
                Err((e, _)) => {
                    // Refused, not down: find the events the database refuses on their own.
                    tracing::debug!("job history: batch refused ({e}); writing it event by event");
                    let mut written = 0;
                    let mut rejected = 0;
                    let mut rest = Vec::new();
                    for (i, event) in batch.iter().enumerate() {
                        let one = tokio::time::timeout(
                            opts.write_timeout,
                            store.write_batch(std::slice::from_ref(event)),
                        )
                        .await;
                        match one {
                            Ok(Ok(())) => written += 1,
                            // Timed out or down: the rest waits for the database.
                            Err(_) => {
                                rest = batch[i..].to_vec();
                                break;
                            }
                            Ok(Err(e)) if e.is_transient() => {
                                rest = batch[i..].to_vec();
                                break;
                            }
                            Ok(Err(e)) => {
                                rejected += 1;
                                tracing::error!(
                                    "job history: event refused, skipped: {e}: {event:?}"
                                );
                            }
                        }
                    }
                    shared.rejected.fetch_add(rejected, Ordering::Relaxed);
                    done(&shared, written + rejected, written);
                    if rest.is_empty() {
                        break;
                    }
                    batch = rest;
                }
            }
        }
    }
}

/// `n` events of the batch settled, `written` of them written.
fn done(shared: &Shared, n: u64, written: u64) {
    let mut q = shared.lock();
    q.inflight = q.inflight.saturating_sub(n as usize);
    drop(q);
    shared.written.fetch_add(written, Ordering::Relaxed);
    shared.settle(n);
}

fn store_name(store: &Store) -> String {
    format!("{} database", store.dialect().name())
}

async fn retention_loop(store: Store, keep: Duration, opts: HistoryOptions) {
    loop {
        let cutoff = Utc::now() - chrono::Duration::from_std(keep).unwrap_or(chrono::Duration::MAX);
        match store.delete_older_than(cutoff, opts.retention_batch).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(rows = n, "job history: deleted rows older than {keep:?}"),
            Err(e) => tracing::warn!("job history: retention: {e}; trying again later"),
        }
        tokio::time::sleep(opts.retention_every).await;
    }
}
