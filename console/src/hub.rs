//! The registries the console shows: one client and one watch of the namespace's root per
//! registry, feeding a [`NamespaceView`]; changes coalesced and broadcast to the pages that
//! follow them (server-sent events). Nothing polls: a view is read once at start-up and after a
//! session event that may have lost events, then kept by the watch alone.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use shardjob::registry_url::{ConnectOptions, RegistryUrl};
use shardjob_core::backoff::Backoff;
use shardjob_core::registry::{NodePath, Registry, RegistryEvent, SessionEvent};
use shardjob_history::Store;
use shardjob_ops::{NamespaceView, Ops};
use tokio::sync::{broadcast, watch};

use crate::config::RegistryEntry;

/// How long changes are gathered before they are sent to the pages (one update per burst:
/// a fire of a job of 100 items is one update, not 300).
pub const COALESCE: Duration = Duration::from_millis(150);

/// How long a page waits for a registry's first snapshot before it shows the registry as
/// unreachable.
pub const FIRST_LOAD_WAIT: Duration = Duration::from_secs(15);

/// The session timeout the console's client asks for.
const SESSION_TIMEOUT: Duration = Duration::from_secs(15);

/// How long one connection attempt may take.
const CONNECT_WAIT: Duration = Duration::from_secs(10);

/// What changed, for the pages that follow a registry.
#[derive(Debug, Clone)]
pub struct Update {
    /// The jobs (top-level nodes) whose nodes changed.
    pub jobs: Arc<BTreeSet<String>>,
    /// The whole view was read again (after a new session): every page redraws.
    pub reloaded: bool,
}

/// Where a registry's link stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkState {
    /// Connecting (the first time, or again).
    Connecting,
    /// Reading the namespace.
    Loading,
    /// The view follows the registry.
    Live,
    /// The connection is lost; the view may be behind. The cause.
    Down(String),
}

impl LinkState {
    /// A word for the page.
    pub fn label(&self) -> &'static str {
        match self {
            LinkState::Connecting => "connecting",
            LinkState::Loading => "loading",
            LinkState::Live => "live",
            LinkState::Down(_) => "unreachable",
        }
    }
}

/// One registry: its client, its view, its updates.
pub struct Live {
    /// Its entry in the configuration.
    pub entry: RegistryEntry,
    /// The URL with credentials (never shown: `Display` hides the password).
    pub url: RegistryUrl,
    view: Mutex<NamespaceView>,
    client: RwLock<Option<Arc<dyn Registry>>>,
    state: watch::Sender<LinkState>,
    updates: broadcast::Sender<Update>,
    /// The job history's database, if the entry names one.
    pub history: Option<Store>,
    /// When the last snapshot was taken and how long it took (ms).
    pub last_load: Mutex<Option<(chrono::DateTime<chrono::Utc>, u128)>>,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// The history's per-job figures, and when they were read.
    runs: Mutex<Option<(std::time::Instant, RunsByJob)>>,
    #[cfg(feature = "mem")]
    demo: Mutex<Option<crate::demo::Demo>>,
}

/// The history's figures of the last day, by job.
pub type RunsByJob = Arc<BTreeMap<String, shardjob_history::JobRuns>>;

/// How long the history's per-job figures are reused before they are read again.
pub const RUNS_TTL: Duration = Duration::from_secs(3);

impl std::fmt::Debug for Live {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Live")
            .field("name", &self.entry.name)
            .field("url", &self.url.to_string())
            .finish()
    }
}

/// Why a registry's data cannot be shown or changed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum HubError {
    /// No registry of that name.
    #[error("no registry named {0:?} (add it on the registries page)")]
    Unknown(String),
    /// The registry has not been read yet and cannot be reached.
    #[error("registry {name:?} ({url}) cannot be reached: {cause}")]
    Unreachable {
        /// Its name.
        name: String,
        /// Its URL without password.
        url: String,
        /// Why.
        cause: String,
    },
}

impl Live {
    /// Starts following a registry (the task runs until [`Live::stop`]).
    pub fn start(entry: RegistryEntry) -> Result<Arc<Live>, crate::config::ConfigError> {
        let url = entry.registry_url()?;
        let mut entry = entry;
        #[cfg(feature = "mem")]
        if url == RegistryUrl::Mem && entry.history.is_none() {
            // The demo records its history in a file of its own, removed at exit.
            let file = std::env::temp_dir().join(format!(
                "shardjob-console-demo-{}-{}.db",
                std::process::id(),
                entry.name
            ));
            let _ = std::fs::remove_file(&file);
            entry.history = Some(format!("sqlite://{}", file.display()));
        }
        let history = match entry.history_url()? {
            Some(u) => Some(
                Store::connect_lazy(&u, Duration::from_secs(10)).map_err(|e| {
                    crate::config::ConfigError::Invalid(format!(
                        "registry {:?}: history: {e}",
                        entry.name
                    ))
                })?,
            ),
            None => None,
        };
        let (state, _) = watch::channel(LinkState::Connecting);
        let (updates, _) = broadcast::channel(64);
        let live = Arc::new(Live {
            entry,
            url,
            view: Mutex::new(NamespaceView::new()),
            client: RwLock::new(None),
            state,
            updates,
            history,
            last_load: Mutex::new(None),
            task: Mutex::new(None),
            runs: Mutex::new(None),
            #[cfg(feature = "mem")]
            demo: Mutex::new(None),
        });
        let task = tokio::spawn(follow(Arc::clone(&live)));
        *live.task.lock().unwrap_or_else(|e| e.into_inner()) = Some(task);
        Ok(live)
    }

    /// The registry's name.
    pub fn name(&self) -> &str {
        &self.entry.name
    }

    /// Stops following: the task ends, the client closes, a demo's jobs stop.
    pub async fn stop(&self) {
        let task = self.task.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(t) = task {
            t.abort();
        }
        let client = self
            .client
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(c) = client {
            let _ = tokio::time::timeout(Duration::from_secs(5), c.close()).await;
        }
        #[cfg(feature = "mem")]
        {
            let demo = self.demo.lock().unwrap_or_else(|e| e.into_inner()).take();
            if let Some(d) = demo {
                d.stop().await;
            }
        }
        if let Some(h) = &self.history {
            h.close().await;
        }
    }

    /// Whether the registry is still followed: its task runs (connecting, reading or
    /// watching). `false` once [`Live::stop`] ended it (the watch is gone, the client closed).
    pub fn is_following(&self) -> bool {
        self.task
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .is_some_and(|t| !t.is_finished())
    }

    /// The history's per-job figures, if read within [`RUNS_TTL`].
    pub fn runs_cache(&self) -> Option<RunsByJob> {
        let cached = self.runs.lock().unwrap_or_else(|e| e.into_inner());
        cached
            .as_ref()
            .filter(|(at, _)| at.elapsed() < RUNS_TTL)
            .map(|(_, r)| Arc::clone(r))
    }

    /// Keeps the history's per-job figures just read.
    pub fn set_runs_cache(&self, runs: RunsByJob) {
        *self.runs.lock().unwrap_or_else(|e| e.into_inner()) =
            Some((std::time::Instant::now(), runs));
    }

    /// The link's state now.
    pub fn state(&self) -> LinkState {
        self.state.borrow().clone()
    }

    /// Follows the registry's changes.
    pub fn subscribe(&self) -> broadcast::Receiver<Update> {
        self.updates.subscribe()
    }

    /// Follows the link's state.
    pub fn watch_state(&self) -> watch::Receiver<LinkState> {
        self.state.subscribe()
    }

    /// The client, if connected.
    pub fn client(&self) -> Result<Arc<dyn Registry>, HubError> {
        self.client
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .ok_or_else(|| self.unreachable())
    }

    fn unreachable(&self) -> HubError {
        let cause = match self.state() {
            LinkState::Down(cause) => cause,
            LinkState::Connecting => "still connecting".to_owned(),
            LinkState::Loading => "still reading the namespace".to_owned(),
            LinkState::Live => "no client".to_owned(),
        };
        HubError::Unreachable {
            name: self.entry.name.clone(),
            url: self.url.to_string(),
            cause,
        }
    }

    /// Waits (at most [`FIRST_LOAD_WAIT`]) for the first snapshot, then runs `read` on the
    /// view. After that the view is shown even while the link is down (with a warning).
    pub async fn read<T>(&self, read: impl FnOnce(&mut NamespaceView) -> T) -> Result<T, HubError> {
        let loaded = |s: &Self| s.view.lock().unwrap_or_else(|e| e.into_inner()).is_loaded();
        if !loaded(self) {
            let mut state = self.watch_state();
            let deadline = tokio::time::Instant::now() + FIRST_LOAD_WAIT;
            while !loaded(self) {
                if tokio::time::timeout_at(deadline, state.changed())
                    .await
                    .is_err()
                {
                    return Err(self.unreachable());
                }
            }
        }
        let mut view = self.view.lock().unwrap_or_else(|e| e.into_inner());
        Ok(read(&mut view))
    }

    /// Runs `read` on the view without waiting; `None` before the first snapshot.
    pub fn read_now<T>(&self, read: impl FnOnce(&mut NamespaceView) -> T) -> Option<T> {
        let mut view = self.view.lock().unwrap_or_else(|e| e.into_inner());
        view.is_loaded().then(|| read(&mut view))
    }

    fn set_state(&self, state: LinkState) {
        self.state.send_if_modified(|s| {
            if *s == state {
                false
            } else {
                *s = state;
                true
            }
        });
    }

    fn view(&self) -> std::sync::MutexGuard<'_, NamespaceView> {
        self.view.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Connects: mem:// runs its demo jobs on an in-process server the console keeps.
async fn connect(live: &Live) -> Result<Arc<dyn Registry>, String> {
    #[cfg(feature = "mem")]
    if live.url == RegistryUrl::Mem {
        // The demo's history is the console's own file: its tables are made before any page
        // reads it (else the history page fails until the first run is recorded).
        if let Some(h) = &live.history {
            if let Err(e) = h.ensure_schema().await {
                tracing::warn!(registry = %live.entry.name, "the demo's history: {e}");
            }
        }
        let mut demo = live.demo.lock().unwrap_or_else(|e| e.into_inner());
        let d = demo.get_or_insert_with(crate::demo::Demo::new);
        let client = d.client();
        d.start_jobs(live.entry.history_url().ok().flatten());
        return Ok(client);
    }
    let options = ConnectOptions {
        session_timeout: SESSION_TIMEOUT,
        connection_timeout: Some(Duration::from_secs(5)),
        wait: Duration::ZERO,
        ..ConnectOptions::default()
    };
    match tokio::time::timeout(CONNECT_WAIT, live.url.connect_with(&options)).await {
        Ok(Ok(c)) => Ok(c),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no connection within {}s", CONNECT_WAIT.as_secs())),
    }
}

/// Why a watch ended.
enum Ended {
    /// A new session, or one that may have lost events: read everything again.
    Reload,
    /// The client is closed or the watch broke: connect again.
    Reconnect(String),
}

/// The task: connect, watch, read, follow; again on failure, with backoff.
async fn follow(live: Arc<Live>) {
    let backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(15));
    let mut failures: u32 = 0;
    loop {
        live.set_state(LinkState::Connecting);
        let client = match connect(&live).await {
            Ok(c) => c,
            Err(cause) => {
                failures += 1;
                tracing::warn!(registry = %live.entry.name, url = %live.url, "cannot connect: {cause}");
                live.set_state(LinkState::Down(cause));
                tokio::time::sleep(backoff.pause(failures)).await;
                continue;
            }
        };
        *live.client.write().unwrap_or_else(|e| e.into_inner()) = Some(Arc::clone(&client));
        loop {
            match watch_once(&live, &*client).await {
                Ended::Reload => continue,
                Ended::Reconnect(cause) => {
                    failures += 1;
                    tracing::warn!(registry = %live.entry.name, "watch ended: {cause}");
                    live.set_state(LinkState::Down(cause));
                    *live.client.write().unwrap_or_else(|e| e.into_inner()) = None;
                    let _ = tokio::time::timeout(Duration::from_secs(5), client.close()).await;
                    tokio::time::sleep(backoff.pause(failures)).await;
                    break;
                }
            }
        }
    }
}

/// One watch: the snapshot (events kept aside meanwhile), then the events, coalesced.
async fn watch_once(live: &Live, client: &dyn Registry) -> Ended {
    let mut stream = match client.watch(&NodePath::root()).await {
        Ok(s) => s,
        Err(e) => return Ended::Reconnect(format!("cannot watch the namespace: {e}")),
    };
    live.set_state(LinkState::Loading);
    live.view().start_reload();
    let started = std::time::Instant::now();
    let ops = Ops::new(client);
    let load = ops.snapshot();
    tokio::pin!(load);
    let trees = loop {
        tokio::select! {
            trees = &mut load => break trees,
            event = stream.next() => match event {
                Some(RegistryEvent::Node(e)) => { live.view().apply(&e); }
                Some(RegistryEvent::Session(SessionEvent::Closed)) | None => {
                    return Ended::Reconnect("the registry client closed".to_owned());
                }
                Some(RegistryEvent::Session(_)) => {}
            }
        }
    };
    let trees = match trees {
        Ok(t) => t,
        Err(e) => return Ended::Reconnect(e.to_string()),
    };
    let changed = live.view().finish_reload(trees);
    *live.last_load.lock().unwrap_or_else(|e| e.into_inner()) =
        Some((chrono::Utc::now(), started.elapsed().as_millis()));
    tracing::info!(
        registry = %live.entry.name,
        jobs = live.view().names().len(),
        ms = started.elapsed().as_millis() as u64,
        "namespace read; following its changes"
    );
    live.set_state(LinkState::Live);
    let _ = live.updates.send(Update {
        jobs: Arc::new(changed),
        reloaded: true,
    });
    let mut dirty: BTreeSet<String> = BTreeSet::new();
    let mut flush_at: Option<tokio::time::Instant> = None;
    loop {
        let sleep = async {
            match flush_at {
                Some(t) => tokio::time::sleep_until(t).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            event = stream.next() => match event {
                Some(RegistryEvent::Node(e)) => {
                    if let Some(job) = live.view().apply(&e) {
                        dirty.insert(job);
                        flush_at.get_or_insert_with(|| tokio::time::Instant::now() + COALESCE);
                    }
                }
                Some(RegistryEvent::Session(SessionEvent::Suspended(_))) => {
                    live.set_state(LinkState::Down("connection lost, reconnecting".to_owned()));
                }
                Some(RegistryEvent::Session(
                    SessionEvent::Connected(_) | SessionEvent::Reconnected(_) | SessionEvent::Expired(_),
                )) => {
                    flush(live, &mut dirty);
                    return Ended::Reload;
                }
                Some(RegistryEvent::Session(SessionEvent::Closed)) | None => {
                    flush(live, &mut dirty);
                    return Ended::Reconnect("the registry client closed".to_owned());
                }
            },
            () = sleep => {
                flush_at = None;
                flush(live, &mut dirty);
            }
        }
    }
}

fn flush(live: &Live, dirty: &mut BTreeSet<String>) {
    if dirty.is_empty() {
        return;
    }
    let jobs = std::mem::take(dirty);
    let _ = live.updates.send(Update {
        jobs: Arc::new(jobs),
        reloaded: false,
    });
}

/// Every registry, by name.
#[derive(Debug, Default)]
pub struct Hub {
    regs: RwLock<BTreeMap<String, Arc<Live>>>,
    order: RwLock<Vec<String>>,
}

impl Hub {
    /// Starts following every registry of the list.
    pub fn start(entries: &[RegistryEntry]) -> Result<Hub, crate::config::ConfigError> {
        let hub = Hub::default();
        for e in entries {
            hub.add(e.clone())?;
        }
        Ok(hub)
    }

    /// Starts following one more registry.
    pub fn add(&self, entry: RegistryEntry) -> Result<Arc<Live>, crate::config::ConfigError> {
        let name = entry.name.clone();
        let live = Live::start(entry)?;
        self.regs
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(name.clone(), Arc::clone(&live));
        self.order
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .push(name);
        Ok(live)
    }

    /// Stops following a registry.
    pub async fn remove(&self, name: &str) {
        let live = self
            .regs
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(name);
        self.order
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|n| n != name);
        if let Some(l) = live {
            l.stop().await;
        }
    }

    /// The registry of that name.
    pub fn get(&self, name: &str) -> Result<Arc<Live>, HubError> {
        self.regs
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .cloned()
            .ok_or_else(|| HubError::Unknown(name.to_owned()))
    }

    /// Every registry, in the configuration's order.
    pub fn all(&self) -> Vec<Arc<Live>> {
        let regs = self.regs.read().unwrap_or_else(|e| e.into_inner());
        self.order
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter_map(|n| regs.get(n).cloned())
            .collect()
    }

    /// Stops following every registry.
    pub async fn stop(&self) {
        for l in self.all() {
            l.stop().await;
        }
    }
}
