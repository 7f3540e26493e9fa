//! This client's own writes, so that a watch does not read back what the client wrote.
//!
//! ZooKeeper's notifications carry no data: a stream reads every created or changed node
//! back. For a change this client made, it knows the data already (it sent it) and the stat
//! (the answer to the write carries it), so each stream keeps a [`Journal`] of the writes sent
//! on the session its watch lives on, and takes a node's state from there instead of reading
//! it.
//!
//! # Why the journal's state may stand for a notification
//!
//! A stream reports, for a created or changed node, the node's state at some moment at or
//! after the change the notification stands for (the read that used to follow every
//! notification gives no more than that either). One session's requests are applied in the
//! order they are sent, and the notifications of one path reach the stream in the order of
//! the changes. So:
//!
//! * Every write is entered, per path it touches, **before** it is sent, under one lock that
//!   also covers the sending (the `zookeeper-client` crate queues a request when it is made,
//!   not when it is awaited). The entries of a path are thus in the order the server applies
//!   them, and a notification of an entered write cannot have reached the stream before its
//!   entry.
//! * Invariant: no entry's notification has been consumed yet. Then the next notification
//!   of a path stands for a change at or before the path's first entry, and the state that
//!   entry's write left is a state at or after that change. Every notification of a path
//!   takes the path's first entry off (whether its state is used or not), which keeps the
//!   invariant: the notification was the first entry's or an earlier one, and later entries'
//!   notifications come after the first entry's.
//! * A write that fails (the server refused the whole multi) makes no change: its entries go
//!   at once. A notification waits for its path's first entry to be settled; if that does not
//!   happen within the request deadline, or the outcome is unknown (the connection was lost,
//!   the request timed out, the caller gave up), every entry of the path goes and the node is
//!   read, as before. Dropping entries is always safe (a notification without an entry is
//!   read; one that takes a later write's entry gets that later state).
//! * A multi applies all its operations at one zxid: each entry of a path stands for the
//!   state the whole multi left it in (a `create` and `delete` pair of an `Absent` check
//!   leaves it absent).
//! * A node's events must never take it back in time. A journal state is that of a write
//!   already answered, so a read sent afterwards shows it or later; and before the stream
//!   reads a node it forgets the node's entries, under the lock of entering and sending:
//!   their writes were sent before the read, which shows them or later, so their states must
//!   not stand for the notifications still to come (an entry entered after the read is a
//!   write applied after it). Within one burst, a node read stands for all its events from
//!   the first that needed the read.
//! * When the watch is lost or replaced (disconnection, expiry) the journal is emptied and
//!   closed; it opens again once the new watch is in place on the server, so every write
//!   entered afterwards is applied after the watch exists and has its notification.
//!
//! An entry is settled by the call that sent the write, when it sees the answer (or is
//! dropped). A caller that stops polling a write it has started, without dropping it, holds
//! up the notifications of the write's paths until the request deadline (then they are read).
//!
//! The stat of a node created in a multi is missing from ZooKeeper 3.8's answer
//! (ZOOKEEPER-4026): it is known exactly only when another write of the same multi tells the
//! multi's zxid (version 0, created and modified at that zxid); otherwise the entry's state is
//! unknown and the node is read.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use shardjob_core::registry::{NodePath, SessionId, Stat};
use tokio::sync::watch;

/// The state a write left a node in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum After {
    /// The node exists with this data and stat.
    Exists(Vec<u8>, Stat),
    /// The node does not exist.
    Gone,
}

/// Where a write stands.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    /// Sent, not answered yet.
    Pending,
    /// Applied; `None` if the state it left is not known exactly.
    Applied(Option<After>),
    /// Perhaps applied, perhaps not.
    Unknown,
}

#[derive(Debug)]
struct Entry {
    /// The write (one request) the entry belongs to.
    write: u64,
    outcome: Outcome,
}

#[derive(Debug, Default)]
struct State {
    /// The session whose writes are entered; `None` while the journal is closed.
    session: Option<SessionId>,
    /// Grows whenever the journal is emptied, so that a write entered before does not settle
    /// an entry of after.
    generation: u64,
    /// Per path, the entries in the order the writes were sent.
    paths: HashMap<NodePath, VecDeque<Entry>>,
}

/// One stream's journal of this client's writes under the stream's root.
#[derive(Debug)]
pub(crate) struct Journal {
    root: NodePath,
    state: Mutex<State>,
    /// Bumped whenever an entry is settled.
    settled: watch::Sender<u64>,
}

impl Journal {
    /// A closed journal of the writes under `root`.
    pub(crate) fn new(root: NodePath) -> Arc<Journal> {
        Arc::new(Journal {
            root,
            state: Mutex::new(State::default()),
            settled: watch::channel(0).0,
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // The state is consistent between statements: a panic elsewhere leaves it usable.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts entering the writes of `session`: the stream's watch is in place on it.
    pub(crate) fn open(&self, session: SessionId) {
        let mut st = self.state();
        st.paths.clear();
        st.generation += 1;
        st.session = Some(session);
    }

    /// Forgets every entry and enters nothing until [`Journal::open`]: the watch is lost.
    pub(crate) fn close(&self) {
        let mut st = self.state();
        st.paths.clear();
        st.generation += 1;
        st.session = None;
    }

    /// The state of `path` that the stream's next notification of it may report, if the
    /// journal knows it (see the module documentation); takes the path's first entry off
    /// either way. Waits up to `patience` for that entry's write to be answered.
    pub(crate) async fn next_state(&self, path: &NodePath, patience: Duration) -> Option<After> {
        let deadline = tokio::time::Instant::now() + patience;
        let mut settled = self.settled.subscribe();
        loop {
            {
                let mut st = self.state();
                let queue = st.paths.get_mut(path)?;
                // Seen before the first entry is looked at, so that a settlement after it is
                // not missed by the wait below.
                settled.borrow_and_update();
                match queue.front().map(|e| &e.outcome) {
                    Some(Outcome::Pending) => {}
                    Some(Outcome::Applied(_)) => {
                        let first = queue.pop_front().map(|e| e.outcome);
                        if queue.is_empty() {
                            st.paths.remove(path);
                        }
                        return match first {
                            Some(Outcome::Applied(after)) => after,
                            _ => None,
                        };
                    }
                    // Perhaps applied: the path's notifications no longer tell which write
                    // they stand for.
                    Some(Outcome::Unknown) | None => {
                        st.paths.remove(path);
                        return None;
                    }
                }
            }
            if !matches!(
                tokio::time::timeout_at(deadline, settled.changed()).await,
                Ok(Ok(()))
            ) {
                // Not answered in time: forget the path's writes, the node is read.
                self.state().paths.remove(path);
                return None;
            }
        }
    }

    /// The number of entries, for tests.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.state().paths.values().map(VecDeque::len).sum()
    }
}

/// The journals of a client's streams, and the lock that orders entering and sending.
#[derive(Debug, Default)]
pub(crate) struct Journals {
    streams: Mutex<Vec<Weak<Journal>>>,
    next_write: std::sync::atomic::AtomicU64,
}

/// The journals a write is entered in, held while the write is sent.
pub(crate) struct Sending<'a> {
    guard: MutexGuard<'a, Vec<Weak<Journal>>>,
    next_write: &'a std::sync::atomic::AtomicU64,
}

impl Journals {
    /// Adds a stream's journal.
    pub(crate) fn add(&self, journal: &Arc<Journal>) {
        let mut streams = self.lock();
        streams.retain(|j| j.strong_count() > 0);
        streams.push(Arc::downgrade(journal));
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Weak<Journal>>> {
        self.streams.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes the lock under which a write is entered and then sent: hold the returned value
    /// until the request is queued.
    pub(crate) fn sending(&self) -> Sending<'_> {
        Sending {
            guard: self.lock(),
            next_write: &self.next_write,
        }
    }
}

impl Journals {
    /// Takes the lock under which the stream of `journal` queues a read of `paths`, after
    /// forgetting the journal's entries of them: their writes were sent before the read
    /// (entered and sent under this lock), so the read shows them or later changes, and their
    /// states, older, must not stand for a notification that comes after the read's (which
    /// would take the node back in time). Hold the returned value until the read is queued.
    pub(crate) fn reading(&self, journal: &Journal, paths: &[&NodePath]) -> Sending<'_> {
        let sending = self.sending();
        let mut st = journal.state();
        for path in paths {
            st.paths.remove(*path);
        }
        sending
    }
}

impl Sending<'_> {
    /// Enters a write of `session` whose node-changing operations touch `paths`, in the
    /// order of the operations (a path once per operation on it). Call right before the
    /// request is queued, with the lock still held.
    pub(crate) fn enter(&self, session: SessionId, paths: Vec<NodePath>) -> Written {
        let write = self
            .next_write
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut entered = Vec::new();
        for journal in self.guard.iter().filter_map(Weak::upgrade) {
            let mut st = journal.state();
            if st.session != Some(session) {
                continue;
            }
            let mut any = false;
            for path in paths.iter().filter(|p| journal.root.contains(p)) {
                st.paths.entry(path.clone()).or_default().push_back(Entry {
                    write,
                    outcome: Outcome::Pending,
                });
                any = true;
            }
            if any {
                let generation = st.generation;
                drop(st);
                entered.push((Arc::downgrade(&journal), generation));
            }
        }
        Written {
            write,
            paths,
            entered,
        }
    }
}

/// A write entered in journals, to be settled once answered. Dropped unsettled (the caller
/// gave up, the deadline passed), its outcome counts as unknown.
pub(crate) struct Written {
    write: u64,
    /// The paths of its operations, as entered.
    paths: Vec<NodePath>,
    /// The journals it was entered in, with their generation then; empty once settled.
    entered: Vec<(Weak<Journal>, u64)>,
}

impl Written {
    /// The write was applied: `states[k]` is the state it left the path of its `k`-th
    /// operation in (`None`: not known exactly), in the order of [`Sending::enter`]'s paths.
    pub(crate) fn applied(mut self, states: &[Option<After>]) {
        let write = self.write;
        let paths = std::mem::take(&mut self.paths);
        self.settle(|st| {
            for (path, state) in paths.iter().zip(states) {
                // The path's next entry of this write not settled yet: entries of one path
                // are entered, and settled here, in the order of the operations.
                if let Some(entry) = st.paths.get_mut(path).and_then(|queue| {
                    queue
                        .iter_mut()
                        .find(|e| e.write == write && e.outcome == Outcome::Pending)
                }) {
                    entry.outcome = Outcome::Applied(state.clone());
                }
            }
        });
    }

    /// The server refused the write: nothing changed.
    pub(crate) fn refused(mut self) {
        let write = self.write;
        let paths = std::mem::take(&mut self.paths);
        self.settle(|st| {
            for path in &paths {
                if let Some(queue) = st.paths.get_mut(path) {
                    queue.retain(|e| e.write != write);
                    if queue.is_empty() {
                        st.paths.remove(path);
                    }
                }
            }
        });
    }

    /// Whether the write was applied is not known.
    pub(crate) fn unknown(mut self) {
        self.mark_unknown();
    }

    fn mark_unknown(&mut self) {
        let write = self.write;
        let paths = std::mem::take(&mut self.paths);
        self.settle(|st| {
            for path in &paths {
                for entry in st.paths.get_mut(path).into_iter().flatten() {
                    if entry.write == write {
                        entry.outcome = Outcome::Unknown;
                    }
                }
            }
        });
    }

    /// Applies `f` to the state of every journal the write was entered in, unless emptied
    /// since, and wakes their streams.
    fn settle(&mut self, mut f: impl FnMut(&mut State)) {
        for (journal, generation) in self.entered.drain(..) {
            let Some(journal) = journal.upgrade() else {
                continue;
            };
            {
                let mut st = journal.state();
                if st.generation != generation {
                    continue;
                }
                f(&mut st);
            }
            journal.settled.send_modify(|n| *n = n.wrapping_add(1));
        }
    }
}

impl Drop for Written {
    fn drop(&mut self) {
        if !self.entered.is_empty() {
            self.mark_unknown();
        }
    }
}

#[cfg(test)]
mod tests {
    use shardjob_core::registry::{Revision, Version};

    use super::*;

    const ME: SessionId = SessionId(7);
    const PATIENCE: Duration = Duration::from_secs(5);

    fn p(s: &str) -> NodePath {
        NodePath::new(s).unwrap()
    }

    fn exists(data: &str, version: i64) -> After {
        After::Exists(
            data.as_bytes().to_vec(),
            Stat {
                version: Version(version),
                created: Revision(1),
                modified: Revision(version as u64 + 1),
                ephemeral_owner: None,
                mtime_ms: None,
            },
        )
    }

    fn journal(journals: &Journals, root: &str) -> Arc<Journal> {
        let j = Journal::new(p(root));
        journals.add(&j);
        j.open(ME);
        j
    }

    fn enter(journals: &Journals, paths: &[&str]) -> Written {
        journals
            .sending()
            .enter(ME, paths.iter().map(|s| p(s)).collect())
    }

    #[tokio::test]
    async fn a_notification_takes_the_first_write_of_its_path() {
        let journals = Journals::default();
        let j = journal(&journals, "/");
        let first = enter(&journals, &["/a", "/b"]);
        let second = enter(&journals, &["/a"]);
        first.applied(&[Some(exists("1", 1)), Some(After::Gone)]);
        second.applied(&[Some(exists("2", 2))]);
        assert_eq!(j.next_state(&p("/a"), PATIENCE).await, Some(exists("1", 1)));
        assert_eq!(j.next_state(&p("/b"), PATIENCE).await, Some(After::Gone));
        assert_eq!(j.next_state(&p("/a"), PATIENCE).await, Some(exists("2", 2)));
        // Nothing entered: read.
        assert_eq!(j.next_state(&p("/a"), PATIENCE).await, None);
        assert_eq!(j.len(), 0);
    }

    #[tokio::test]
    async fn a_refused_write_leaves_nothing_for_the_notifications_of_others() {
        let journals = Journals::default();
        let j = journal(&journals, "/");
        let refused = enter(&journals, &["/a"]);
        let applied = enter(&journals, &["/a"]);
        refused.refused();
        applied.applied(&[Some(exists("2", 2))]);
        assert_eq!(j.next_state(&p("/a"), PATIENCE).await, Some(exists("2", 2)));
        assert_eq!(j.len(), 0);
    }

    #[tokio::test]
    async fn a_write_of_unknown_outcome_makes_its_path_read() {
        let journals = Journals::default();
        let j = journal(&journals, "/");
        let lost = enter(&journals, &["/a"]);
        let applied = enter(&journals, &["/a"]);
        applied.applied(&[Some(exists("2", 2))]);
        // Dropped unanswered: the caller gave up.
        drop(lost);
        assert_eq!(j.next_state(&p("/a"), PATIENCE).await, None);
        // The later write's entry went too: its notification may have been the one just taken.
        assert_eq!(j.next_state(&p("/a"), PATIENCE).await, None);
        assert_eq!(j.len(), 0);
    }

    #[tokio::test]
    async fn a_notification_waits_for_the_answer_to_its_write() {
        let journals = Arc::new(Journals::default());
        let j = journal(&journals, "/");
        let pending = enter(&journals, &["/a"]);
        let answer = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            pending.applied(&[Some(exists("1", 0))]);
        });
        assert_eq!(j.next_state(&p("/a"), PATIENCE).await, Some(exists("1", 0)));
        answer.await.unwrap();
    }

    #[tokio::test]
    async fn a_write_not_answered_in_time_makes_its_path_read() {
        let journals = Journals::default();
        let j = journal(&journals, "/");
        let pending = enter(&journals, &["/a"]);
        assert_eq!(
            j.next_state(&p("/a"), Duration::from_millis(20)).await,
            None
        );
        // Answered late: nothing is left to settle.
        pending.applied(&[Some(exists("1", 0))]);
        assert_eq!(j.len(), 0);
    }

    #[tokio::test]
    async fn a_closed_journal_enters_nothing_and_forgets_what_it_had() {
        let journals = Journals::default();
        let j = journal(&journals, "/");
        let before = enter(&journals, &["/a"]);
        j.close();
        assert_eq!(j.len(), 0);
        let during = enter(&journals, &["/a"]);
        j.open(ME);
        // Settled after the journal was emptied: ignored.
        before.applied(&[Some(exists("1", 0))]);
        during.applied(&[Some(exists("2", 1))]);
        assert_eq!(j.len(), 0);
        assert_eq!(j.next_state(&p("/a"), PATIENCE).await, None);
        // Writes of another session are not entered.
        let other = journals.sending().enter(SessionId(8), vec![p("/a")]);
        assert_eq!(j.len(), 0);
        other.applied(&[Some(exists("3", 2))]);
    }

    #[tokio::test]
    async fn a_journal_enters_the_writes_under_its_root_only() {
        let journals = Journals::default();
        let jobs = journal(&journals, "/jobs");
        let all = journal(&journals, "/");
        let w = enter(&journals, &["/jobs/a", "/other", "/jobs"]);
        assert_eq!((jobs.len(), all.len()), (2, 3));
        w.applied(&[
            Some(exists("a", 0)),
            Some(exists("o", 0)),
            Some(exists("j", 0)),
        ]);
        assert_eq!(
            jobs.next_state(&p("/jobs"), PATIENCE).await,
            Some(exists("j", 0))
        );
        assert_eq!(
            all.next_state(&p("/other"), PATIENCE).await,
            Some(exists("o", 0))
        );
        assert_eq!(
            jobs.next_state(&p("/jobs/a"), PATIENCE).await,
            Some(exists("a", 0))
        );
    }

    #[tokio::test]
    async fn a_read_forgets_the_writes_sent_before_it() {
        let journals = Journals::default();
        let j = journal(&journals, "/");
        let before = enter(&journals, &["/a", "/b"]);
        drop(journals.reading(&j, &[&p("/a")]));
        let after = enter(&journals, &["/a"]);
        before.applied(&[Some(exists("1", 0)), Some(exists("b", 0))]);
        after.applied(&[Some(exists("2", 1))]);
        // The read shows the first write or later: the notification that comes after it takes
        // the write sent after the read.
        assert_eq!(j.next_state(&p("/a"), PATIENCE).await, Some(exists("2", 1)));
        assert_eq!(j.next_state(&p("/b"), PATIENCE).await, Some(exists("b", 0)));
        assert_eq!(j.len(), 0);
    }

    #[tokio::test]
    async fn two_operations_on_a_path_take_their_states_in_order() {
        let journals = Journals::default();
        let j = journal(&journals, "/");
        // An Absent check's pair: create and delete, both leaving the node absent.
        let w = enter(&journals, &["/a", "/b", "/a"]);
        w.applied(&[Some(After::Gone), Some(exists("b", 0)), Some(After::Gone)]);
        assert_eq!(j.next_state(&p("/a"), PATIENCE).await, Some(After::Gone));
        assert_eq!(j.next_state(&p("/a"), PATIENCE).await, Some(After::Gone));
        assert_eq!(j.next_state(&p("/b"), PATIENCE).await, Some(exists("b", 0)));
    }
}
