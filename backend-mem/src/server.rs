//! The async side: a shared [`MemServer`] around a [`Store`] and a clock, and [`MemClient`], the
//! [`Registry`] its clients use.

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use shardjob_core::registry::{
    EventStream, Node, NodePath, Registry, RegistryError, RegistryEvent, Revision, SessionId,
    SessionInfo, Tree, TxnOp, TxnOpResult,
};
use tokio::sync::Notify;

use crate::store::{Link, SessionStatus, SessionView, Store, WatchId};

/// The session timeout [`MemServer::connect_default`] asks for.
pub const DEFAULT_SESSION_TIMEOUT: Duration = Duration::from_secs(10);

/// Where a [`MemServer`] takes the time from.
#[derive(Debug, Clone, Copy)]
pub struct MemClock(ClockKind);

#[derive(Debug, Clone, Copy)]
enum ClockKind {
    System(Instant),
    Manual,
}

impl MemClock {
    /// Real elapsed time since this call (the default). Connected clients heartbeat, so their
    /// sessions never expire by themselves; suspended and killed ones expire in real time.
    pub fn system() -> Self {
        MemClock(ClockKind::System(Instant::now()))
    }

    /// Time that stands still until [`MemServer::advance`] moves it; starts at 0.
    pub fn manual() -> Self {
        MemClock(ClockKind::Manual)
    }

    /// Whether this is a manual clock.
    pub fn is_manual(&self) -> bool {
        matches!(self.0, ClockKind::Manual)
    }
}

impl Default for MemClock {
    fn default() -> Self {
        Self::system()
    }
}

struct Shared {
    state: Mutex<State>,
    /// Woken after every change, so waiting event streams look again.
    changed: Notify,
    /// Wakes the timer thread (system clock) when an earlier deadline appears.
    timer: Condvar,
    clock: ClockKind,
}

struct State {
    store: Store,
    manual_now: Duration,
    clients: BTreeMap<u64, ClientEntry>,
    next_client: u64,
    timer: TimerState,
}

/// The timer thread's state (system clock only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TimerState {
    /// No thread runs.
    Idle,
    /// A thread runs and sleeps until this time.
    Sleeping(Duration),
    /// A thread runs and is about to look at the store.
    Busy,
}

struct ClientEntry {
    session: SessionId,
    closed: bool,
}

impl State {
    /// Gives every connected client whose session expired a new session. Returns how many.
    fn renew_clients(&mut self, now: Duration) -> usize {
        let mut renewed = 0;
        for client in self.clients.values_mut().filter(|c| !c.closed) {
            if let Some(info) = self.store.reconnect(client.session, now) {
                client.session = info.id;
                renewed += 1;
            }
        }
        renewed
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // The store is only changed through methods that leave it consistent (a transaction
        // rolls back before it returns an error); carry on rather than spread a panic.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn now(&self, st: &State) -> Duration {
        match self.clock {
            ClockKind::System(epoch) => epoch.elapsed(),
            ClockKind::Manual => st.manual_now,
        }
    }

    /// Brings the store up to the current time (expiries) and renews clients' sessions. Returns
    /// the time and whether anything changed.
    fn sync(&self, st: &mut State) -> (Duration, bool) {
        let now = self.now(st);
        let expired = st.store.advance_to(now);
        let renewed = st.renew_clients(now);
        (now, !expired.is_empty() || renewed > 0)
    }

    /// Arms the timer thread if the store waits on time (system clock only), releases the lock
    /// and wakes the streams if `changed`.
    fn finish(self: &Arc<Self>, mut st: MutexGuard<'_, State>, changed: bool) {
        if let (ClockKind::System(_), Some(deadline)) = (self.clock, st.store.next_deadline()) {
            match st.timer {
                TimerState::Idle => {
                    let shared = Arc::clone(self);
                    let spawned = std::thread::Builder::new()
                        .name("shardjob-mem-timer".into())
                        .spawn(move || shared.run_timer());
                    // Without a timer thread, deadlines are still processed lazily on every
                    // call.
                    if spawned.is_ok() {
                        st.timer = TimerState::Busy;
                    }
                }
                // Only an earlier deadline needs the sleeping thread's attention.
                TimerState::Sleeping(until) if deadline < until => {
                    st.timer = TimerState::Busy;
                    self.timer.notify_one();
                }
                TimerState::Sleeping(_) | TimerState::Busy => {}
            }
        }
        drop(st);
        if changed {
            self.changed.notify_waiters();
        }
    }

    /// The timer thread: processes deadlines as they come, exits when none is left.
    fn run_timer(self: Arc<Self>) {
        let mut st = self.lock();
        loop {
            let (now, _) = self.sync(&mut st);
            // Wake the streams even if no session expired: a delayed event may have become
            // deliverable.
            self.changed.notify_waiters();
            let Some(deadline) = st.store.next_deadline() else {
                st.timer = TimerState::Idle;
                return;
            };
            st.timer = TimerState::Sleeping(deadline);
            let wait = deadline.saturating_sub(now).max(Duration::from_millis(1));
            st = match self.timer.wait_timeout(st, wait) {
                Ok((guard, _)) => guard,
                Err(poisoned) => poisoned.into_inner().0,
            };
            st.timer = TimerState::Busy;
        }
    }

    /// Runs `f` on the store for a client's request.
    fn request<T>(
        self: &Arc<Self>,
        client: u64,
        f: impl FnOnce(&mut Store, SessionId, Duration) -> Result<T, RegistryError>,
    ) -> Result<T, RegistryError> {
        let mut st = self.lock();
        let (now, _) = self.sync(&mut st);
        let session = client_session(&st, client)?;
        let result = f(&mut st.store, session, now);
        // Whatever the request did may have changed what other clients see.
        self.sync(&mut st);
        self.finish(st, true);
        result
    }

    /// Runs a hook on the store.
    fn hook<T>(self: &Arc<Self>, f: impl FnOnce(&mut Store, Duration) -> T) -> T {
        let mut st = self.lock();
        let (now, _) = self.sync(&mut st);
        let out = f(&mut st.store, now);
        self.sync(&mut st);
        self.finish(st, true);
        out
    }
}

/// The session a client may use, or why it may not.
fn client_session(st: &State, client: u64) -> Result<SessionId, RegistryError> {
    let entry = st.clients.get(&client).ok_or(RegistryError::Closed)?;
    if entry.closed || client_killed(st, entry.session) {
        return Err(RegistryError::Closed);
    }
    Ok(entry.session)
}

fn client_killed(st: &State, session: SessionId) -> bool {
    st.store
        .session_state(session)
        .is_some_and(|(_, _, link)| matches!(link, Link::Killed { .. }))
}

/// An in-process registry server: the shared [`Store`] plus a clock. Cheap to clone; all clones
/// are the same server.
///
/// Clients come from [`MemServer::connect`]. The other methods are hooks for tests and
/// simulations; hooks that name a session return whether they changed anything.
#[derive(Clone)]
pub struct MemServer {
    shared: Arc<Shared>,
}

impl fmt::Debug for MemServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemServer")
            .field("clock", &self.shared.clock)
            .field("now", &self.now())
            .finish_non_exhaustive()
    }
}

impl Default for MemServer {
    fn default() -> Self {
        Self::new(MemClock::system())
    }
}

impl MemServer {
    /// A server with an empty store and the given clock.
    pub fn new(clock: MemClock) -> Self {
        Self::from_store(Store::new(), clock)
    }

    /// A server around an existing store (its time continues from `store.now()` with a manual
    /// clock).
    pub fn from_store(mut store: Store, clock: MemClock) -> Self {
        let manual_now = store.now();
        // On the system clock the store's times are the process's: its modification times
        // are the wall clock at the server's start plus the time since (a manual clock keeps
        // none unless the store was given an origin).
        if let (ClockKind::System(epoch), None) = (&clock.0, store.wall_origin()) {
            let wall = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
            let since = i64::try_from(epoch.elapsed().as_millis()).unwrap_or(0);
            store.set_wall_origin(Some(wall.saturating_sub(since)));
        }
        let state = State {
            store,
            manual_now,
            clients: BTreeMap::new(),
            next_client: 1,
            timer: TimerState::Idle,
        };
        let shared = Shared {
            state: Mutex::new(state),
            changed: Notify::new(),
            timer: Condvar::new(),
            clock: clock.0,
        };
        MemServer {
            shared: Arc::new(shared),
        }
    }

    /// A server with a manual clock (see [`MemClock::manual`]).
    pub fn manual() -> Self {
        Self::new(MemClock::manual())
    }

    /// Opens a session with this timeout and returns its client. Never waits.
    pub fn connect(&self, session_timeout: Duration) -> MemClient {
        let mut st = self.shared.lock();
        let (now, _) = self.shared.sync(&mut st);
        let info = st.store.open_session(session_timeout, now);
        let id = st.next_client;
        st.next_client += 1;
        st.clients.insert(
            id,
            ClientEntry {
                session: info.id,
                closed: false,
            },
        );
        self.shared.finish(st, false);
        MemClient {
            shared: Arc::clone(&self.shared),
            id,
        }
    }

    /// [`MemServer::connect`] with [`DEFAULT_SESSION_TIMEOUT`].
    pub fn connect_default(&self) -> MemClient {
        self.connect(DEFAULT_SESSION_TIMEOUT)
    }

    /// The server's current time (since its epoch).
    pub fn now(&self) -> Duration {
        let st = self.shared.lock();
        self.shared.now(&st)
    }

    /// Moves a manual clock forward by `d` and processes what falls due (session expiries,
    /// delayed events). With the system clock time moves by itself: this only processes what is
    /// due. Returns the new time.
    pub fn advance(&self, d: Duration) -> Duration {
        let mut st = self.shared.lock();
        if matches!(self.shared.clock, ClockKind::Manual) {
            st.manual_now = st.manual_now.saturating_add(d);
        }
        let (now, _) = self.shared.sync(&mut st);
        self.shared.finish(st, true);
        now
    }

    /// Expires a session now: its ephemeral nodes go, its watches get `Expired`, and its client
    /// (unless suspended or killed) gets a new session at once (`Connected`).
    pub fn expire_session(&self, id: SessionId) -> bool {
        self.shared.hook(|s, now| s.expire_session(id, now))
    }

    /// Cuts the session's client off: requests fail with `ConnectionLoss`, watches get
    /// `Suspended` and queue node events; the session expires after its timeout unless resumed.
    pub fn suspend(&self, id: SessionId) -> bool {
        self.shared.hook(|s, now| s.suspend(id, now))
    }

    /// Reconnects a suspended client: `Reconnected` and the queued events if its session is
    /// alive, else `Expired` and, at once, a new session (`Connected`).
    pub fn resume(&self, id: SessionId) -> bool {
        self.shared.hook(|s, now| s.resume(id, now))
    }

    /// The session's client crashes: its calls return `Closed` from now on, its streams end,
    /// and its session lingers with its ephemeral nodes until its timeout has passed since the
    /// last contact.
    pub fn kill(&self, id: SessionId) -> bool {
        self.shared.hook(|s, now| s.kill(id, now))
    }

    /// Holds the delivery of the session's watches (events queue up). Returns how many watches.
    pub fn hold_watches(&self, id: SessionId) -> usize {
        self.for_watches(id, |s, w, _| s.hold_watch(w))
    }

    /// Releases the session's held watches. Returns how many watches.
    pub fn release_watches(&self, id: SessionId) -> usize {
        self.for_watches(id, |s, w, _| s.release_watch(w))
    }

    /// Delivers nothing of the session's watches for `d` from now (events stay queued, in
    /// order). Meant for the manual clock; with the system clock a timer thread wakes the
    /// streams when the delay is over. Returns how many watches.
    pub fn delay_watches(&self, id: SessionId, d: Duration) -> usize {
        self.for_watches(id, |s, w, now| s.delay_watch(w, now.saturating_add(d)))
    }

    /// Delivers every event queued from now on on the session's watches `latency` after its
    /// commit (in order). Returns how many watches.
    pub fn set_watch_latency(&self, id: SessionId, latency: Duration) -> usize {
        self.for_watches(id, |s, w, _| s.set_watch_latency(w, latency))
    }

    fn for_watches(
        &self,
        id: SessionId,
        mut f: impl FnMut(&mut Store, WatchId, Duration) -> bool,
    ) -> usize {
        self.shared.hook(|s, now| {
            let watches = s.session(id).map(|v| v.watches).unwrap_or_default();
            watches.into_iter().filter(|w| f(s, *w, now)).count()
        })
    }

    /// Every node, the root included, in path order.
    pub fn dump(&self) -> Vec<Node> {
        self.shared.hook(|s, _| s.dump())
    }

    /// The ids of all alive sessions, ascending.
    pub fn session_ids(&self) -> Vec<SessionId> {
        self.shared.hook(|s, _| s.session_ids())
    }

    /// A snapshot of one session.
    pub fn session(&self, id: SessionId) -> Option<SessionView> {
        self.shared.hook(|s, _| s.session(id))
    }

    /// Whether the session is alive on the server (whatever its client's link).
    pub fn is_alive(&self, id: SessionId) -> bool {
        self.shared.hook(|s, _| s.is_alive(id))
    }

    /// The revision of the last committed write.
    pub fn revision(&self) -> Revision {
        self.shared.hook(|s, _| s.revision())
    }

    /// Runs `f` on the store at the current time, for anything the other hooks do not cover.
    /// Clients' expired sessions are renewed afterwards and streams are woken.
    pub fn with_store<T>(&self, f: impl FnOnce(&mut Store, Duration) -> T) -> T {
        self.shared.hook(f)
    }
}

/// A client of a [`MemServer`]: one session at a time, renewed automatically after an expiry.
///
/// Implements [`Registry`]. Every call returns at once; none produces
/// [`RegistryError::Timeout`]. Dropping the client closes its session like
/// [`Registry::close`].
pub struct MemClient {
    shared: Arc<Shared>,
    id: u64,
}

impl fmt::Debug for MemClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemClient")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl MemClient {
    /// The server this client talks to.
    pub fn server(&self) -> MemServer {
        MemServer {
            shared: Arc::clone(&self.shared),
        }
    }

    /// The id of the client's current session, live or not (for hooks); `None` once closed.
    pub fn session_id(&self) -> Option<SessionId> {
        let mut st = self.shared.lock();
        let (_, changed) = self.shared.sync(&mut st);
        let id = st
            .clients
            .get(&self.id)
            .filter(|c| !c.closed)
            .map(|c| c.session);
        self.shared.finish(st, changed);
        id
    }
}

impl Drop for MemClient {
    fn drop(&mut self) {
        let mut st = self.shared.lock();
        let (now, _) = self.shared.sync(&mut st);
        if let Some(entry) = st.clients.remove(&self.id)
            && !entry.closed
            && !client_killed(&st, entry.session)
        {
            // Nothing to report to: a session that cannot be closed just times out.
            let _ = st.store.close_session(entry.session, now);
        }
        self.shared.finish(st, true);
    }
}

#[async_trait]
impl Registry for MemClient {
    /// The session as the client knows it: `Some` while it is alive, and also while the client
    /// is cut off and cannot know that it expired meanwhile; `None` once closed or killed.
    fn session(&self) -> Option<SessionInfo> {
        let mut st = self.shared.lock();
        let (_, changed) = self.shared.sync(&mut st);
        let info = client_session(&st, self.id)
            .ok()
            .and_then(|id| st.store.session_state(id))
            .filter(|(_, status, link)| {
                *status == SessionStatus::Alive || matches!(link, Link::Suspended { .. })
            })
            .map(|(info, _, _)| info);
        self.shared.finish(st, changed);
        info
    }

    /// The store's limit ([`Store::set_max_txn_ops`]), if any.
    fn max_txn_ops(&self) -> Option<usize> {
        self.shared.lock().store.max_txn_ops()
    }

    /// On the system clock, and when the store was given a wall-clock origin
    /// ([`Store::set_wall_origin`]).
    fn stamps_time(&self) -> bool {
        self.shared.lock().store.wall_origin().is_some()
    }

    async fn get(&self, path: &NodePath) -> Result<Option<Node>, RegistryError> {
        self.shared
            .request(self.id, |s, id, now| s.get(id, path, now))
    }

    async fn children(&self, path: &NodePath) -> Result<Vec<String>, RegistryError> {
        self.shared
            .request(self.id, |s, id, now| s.children(id, path, now))
    }

    async fn transact(&self, ops: Vec<TxnOp>) -> Result<Vec<TxnOpResult>, RegistryError> {
        self.shared
            .request(self.id, |s, id, now| s.transact(id, ops, now))
    }

    /// The stream's first event is whatever happens first: a watch opened on a connected
    /// client sees [`SessionEvent::Connected`](shardjob_core::registry::SessionEvent) only when
    /// the session changes later.
    async fn watch(&self, root: &NodePath) -> Result<Box<dyn EventStream>, RegistryError> {
        let watch = self
            .shared
            .request(self.id, |s, id, now| s.watch(id, root, now))?;
        Ok(Box::new(MemEventStream {
            shared: Arc::clone(&self.shared),
            watch,
            buffer: VecDeque::new(),
            done: false,
        }))
    }

    /// Closes the session (ephemeral nodes go at once, streams get `Closed` and then end).
    /// A client that is cut off stops at once, and its session expires after its timeout as
    /// the server never hears of the close. Closing twice is fine.
    async fn close(&self) -> Result<(), RegistryError> {
        let mut st = self.shared.lock();
        let (now, _) = self.shared.sync(&mut st);
        let Some(entry) = st.clients.get_mut(&self.id) else {
            return Ok(());
        };
        let was_closed = std::mem::replace(&mut entry.closed, true);
        let session = entry.session;
        if !was_closed && !client_killed(&st, session) {
            // `Closed` here means the session was closed already: the goal is reached.
            let _ = st.store.close_session(session, now);
        }
        self.shared.finish(st, true);
        Ok(())
    }

    async fn get_tree(&self, root: &NodePath) -> Result<Vec<Node>, RegistryError> {
        self.shared
            .request(self.id, |s, id, now| s.get_tree(id, root, now))
    }

    /// One atomic read, at the store's revision.
    async fn read_tree(&self, root: &NodePath) -> Result<Tree, RegistryError> {
        self.shared
            .request(self.id, |s, id, now| s.read_tree(id, root, now))
    }
}

/// The [`EventStream`] of a [`MemClient`] watch.
struct MemEventStream {
    shared: Arc<Shared>,
    watch: WatchId,
    buffer: VecDeque<RegistryEvent>,
    done: bool,
}

#[async_trait]
impl EventStream for MemEventStream {
    async fn next(&mut self) -> Option<RegistryEvent> {
        let shared = Arc::clone(&self.shared);
        loop {
            if let Some(event) = self.buffer.pop_front() {
                return Some(event);
            }
            if self.done {
                return None;
            }
            // Register for wake-ups before looking, so a change in between is not missed.
            let notified = shared.changed.notified();
            let mut notified = std::pin::pin!(notified);
            notified.as_mut().enable();
            {
                let mut st = shared.lock();
                let (now, changed) = shared.sync(&mut st);
                let events = st.store.take_events(self.watch, now);
                self.done = events.is_empty() && st.store.watch_finished(self.watch);
                self.buffer.extend(events);
                shared.finish(st, changed);
            }
            if self.buffer.is_empty() && !self.done {
                notified.await;
            }
        }
    }
}

impl Drop for MemEventStream {
    fn drop(&mut self) {
        self.shared.lock().store.unwatch(self.watch);
    }
}
