//! One instance of the cluster: its machine, and its state as a process (up, paused, crashed,
//! stopped) times a link to the registry (connected, deaf, cut off). The cluster changes the
//! state through its fault methods ([`crate::cluster::Cluster::crash`],
//! [`crate::cluster::Cluster::partition`], ...); everyone else reads it through the accessors.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

use shardjob_backend_mem::WatchId;
use shardjob_core::InstanceId;
use shardjob_core::machine::{AuditMark, Execution, ExecutionId, Machine, MachineEvent};
use shardjob_core::registry::{
    Check, RegistryEvent, RegistryOp, RegistryReply, RequestId, SessionId, TxnOp,
};

/// What a node's process is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Process {
    /// It runs.
    Up,
    /// A stop-the-world pause since this virtual ms: it handles nothing and its runs make no
    /// progress.
    Paused {
        /// Virtual ms the pause began.
        since: u64,
    },
    /// It crashed: gone without closing its session.
    Crashed,
    /// It stopped by itself after closing its session (a finished graceful shutdown).
    Stopped,
}

/// How a node's connection to the registry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Link {
    /// Requests and replies, events flow.
    Connected,
    /// Its requests reach the registry (its session stays alive) but no reply or event comes
    /// back.
    Deaf,
    /// Cut off both ways; `deaf` if it had been made deaf too (a heal ends both).
    Partitioned {
        /// Whether it is deaf as well.
        deaf: bool,
    },
}

/// A request a shape sets a node to lose the reply to ([`Node::loses_reply_to`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum LoseReplyTo {
    /// A part of the end of an execution of `job` recorded in parts: a transaction that
    /// deletes the `running` markers of some of `items`, not all of them, and sets their
    /// execution records, and that the registry's transaction limit lets through (a part
    /// the registry refuses as too large is not the one: it applies nothing).
    EndPart {
        /// The job.
        job: String,
        /// The items of the execution.
        items: BTreeSet<u32>,
    },
    /// A leader's removal of the stale `running` marker at `path`: a transaction that
    /// deletes it and checks the job's leader node.
    Removal {
        /// The marker's path.
        path: String,
    },
}

impl LoseReplyTo {
    /// Whether the transaction `ops` is this request, under the registry's limit `max_ops`.
    fn matches(&self, ops: &[TxnOp], max_ops: Option<usize>) -> bool {
        match self {
            LoseReplyTo::EndPart { job, items } => {
                let prefix = format!("/{job}/sharding/");
                let item_of = |path: &str, leaf: &str| {
                    path.strip_prefix(&prefix)?
                        .strip_suffix(leaf)?
                        .parse::<u32>()
                        .ok()
                };
                let deleted: BTreeSet<u32> = ops
                    .iter()
                    .filter_map(|o| match o {
                        TxnOp::Delete { path, .. } => item_of(path.as_str(), "/running"),
                        _ => None,
                    })
                    .collect();
                let records = ops.iter().any(|o| {
                    matches!(o, TxnOp::Set { path, .. }
                        if item_of(path.as_str(), "/execution").is_some_and(|i| deleted.contains(&i)))
                });
                let fits = max_ops.is_none_or(|max| {
                    let (compares, writes) = shardjob_backend_mem::txn_cost(ops);
                    compares <= max && writes <= max
                });
                records
                    && !deleted.is_empty()
                    && deleted.len() < items.len()
                    && deleted.is_subset(items)
                    && fits
            }
            LoseReplyTo::Removal { path } => {
                let removes = ops.iter().any(
                    |o| matches!(o, TxnOp::Delete { path: p, .. } if p.as_str() == path.as_str()),
                );
                let leads = ops.iter().any(|o| {
                    matches!(o, TxnOp::Check(Check::Value(p, _))
                        if p.as_str().ends_with("/leader/election/instance"))
                });
                removes && leads
            }
        }
    }
}

/// A registry reply on its way to a node: when it arrives, which request it answers.
pub(crate) type Reply = (u64, RequestId, RegistryReply);

/// One instance of the cluster.
#[derive(Debug)]
pub struct Node {
    /// The instance id.
    pub id: InstanceId,
    /// The real core machine. Read it freely; hand it input only through the cluster, which
    /// keeps its cached answer to [`Machine::poll_timeout`] in step with it.
    pub machine: Machine,
    /// The machine's [`Machine::poll_timeout`] as of its last input, or `None` when it has to
    /// be asked again.
    pub(crate) timer: Option<Option<u64>>,
    /// How many timeouts in a row left its timer still due (a spinning machine).
    pub(crate) due_streak: u32,
    /// How many inputs the machine has been handed (each is followed by the cluster reading
    /// its commands), timeouts included.
    pub(crate) inputs: u64,
    /// [`Node::inputs`] right after its last timeout: equal still at the next timeout if no
    /// other input came between the two.
    pub(crate) inputs_after_wake: u64,
    /// The virtual times of its timeouts within the last simulated second that came with no
    /// other input between them (see [`crate::checkers::wake_rate`]).
    pub(crate) quiet_wakes: VecDeque<u64>,
    /// Whether its wakes were already found too many (reported once).
    pub(crate) wake_storm: bool,
    /// Whether the last session event handed to its machine was a suspension.
    pub(crate) suspended: bool,
    /// Its live session, if any.
    pub session: Option<SessionId>,
    pub(crate) watch: Option<WatchId>,
    /// What the registry said of the watch at its last poll: the watch, the store's
    /// [`Store::watch_changes`](shardjob_backend_mem::Store::watch_changes) then, and when it
    /// had something to deliver next. While the count stays and that time has not come, a poll
    /// would find nothing, and the cluster skips it.
    pub(crate) watch_poll: Option<(WatchId, u64, Option<Duration>)>,
    process: Process,
    link: Link,
    /// How many of its next requests lose their reply (see [`Node::lose_replies`]).
    lose_replies: u32,
    /// The chance, per mille, that a request of it loses its reply (see
    /// [`Node::reply_loss`]).
    reply_loss: u32,
    /// The job whose next failover claim loses its reply, if any (see
    /// [`Node::loses_failover_reply`]).
    lose_failover_reply: Option<String>,
    /// The request a shape picked to lose its reply, if any (see [`Node::loses_reply_to`]).
    lose_reply_to: Option<LoseReplyTo>,
    /// Milliseconds its wall clock is ahead of true time (negative: behind).
    pub skew: i64,
    /// Whether a graceful shutdown was asked for.
    pub shutdown_requested: bool,
    /// The jobs the node is meant to host: those it was added with, as
    /// [`crate::cluster::Cluster::add_job`] and [`crate::cluster::Cluster::remove_job`] changed
    /// them. The checkers hold the machine to it rather than to what the machine says it hosts.
    pub jobs: BTreeSet<String>,
    /// Replies on their way to it, in the order they were sent.
    pub(crate) replies: Vec<Reply>,
    /// Watch deliveries on their way to it when deliveries race ([`crate::network::Races`]):
    /// when each arrives, in order.
    pub(crate) inbox: VecDeque<(u64, Vec<RegistryEvent>)>,
    /// The latest arrival at the registry of a request of it, of a reply to it and of a watch
    /// delivery to it, drawn so far: the next is never earlier (one session, one order).
    pub(crate) wire: Wire,
    pub(crate) running: BTreeMap<ExecutionId, Running>,
    /// The earliest end of the runs in `running`, kept with it (see [`Node::ends_changed`]):
    /// each step of time asks, and most steps end nothing.
    pub(crate) first_end: Option<u64>,
    /// Runs announced with [`shardjob_core::machine::Command::Prepare`] and not started or
    /// discarded yet.
    pub(crate) prepared: BTreeMap<ExecutionId, Execution>,
    /// Events the machine reported, with their virtual time.
    pub events: Vec<(u64, MachineEvent)>,
    /// Where the last wake audit of the machine left off.
    pub(crate) audit: AuditMark,
}

/// The latest times drawn on a node's connection, so that one session's messages keep their
/// order however their latencies are drawn.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Wire {
    pub(crate) request: u64,
    pub(crate) reply: u64,
    pub(crate) event: u64,
}

/// A run in progress on a node.
#[derive(Debug)]
pub(crate) struct Running {
    pub(crate) exec: Execution,
    pub(crate) ends: u64,
    pub(crate) cancelled: bool,
    pub(crate) runs: Vec<usize>,
}

impl Node {
    /// A node that runs, connected, with no session yet.
    pub(crate) fn new(id: InstanceId, machine: Machine, jobs: BTreeSet<String>) -> Self {
        Self {
            id,
            machine,
            timer: None,
            due_streak: 0,
            inputs: 0,
            inputs_after_wake: 0,
            quiet_wakes: VecDeque::new(),
            wake_storm: false,
            suspended: false,
            session: None,
            watch: None,
            watch_poll: None,
            process: Process::Up,
            link: Link::Connected,
            lose_replies: 0,
            reply_loss: 0,
            lose_failover_reply: None,
            lose_reply_to: None,
            skew: 0,
            shutdown_requested: false,
            jobs,
            replies: Vec::new(),
            inbox: VecDeque::new(),
            wire: Wire::default(),
            running: BTreeMap::new(),
            first_end: None,
            prepared: BTreeMap::new(),
            events: Vec::new(),
            audit: AuditMark::default(),
        }
    }

    /// What its process is doing.
    pub fn process(&self) -> Process {
        self.process
    }

    /// How its link to the registry is.
    pub fn link(&self) -> Link {
        self.link
    }

    /// Whether the process runs or is paused (not crashed, not stopped).
    pub fn up(&self) -> bool {
        matches!(self.process, Process::Up | Process::Paused { .. })
    }

    /// Whether it was crashed on purpose (as opposed to stopped).
    pub fn crashed(&self) -> bool {
        self.process == Process::Crashed
    }

    /// Since when the whole process is paused, if it is.
    pub fn paused(&self) -> Option<u64> {
        match self.process {
            Process::Paused { since } => Some(since),
            _ => None,
        }
    }

    /// Whether it runs and is not paused: it acts on what reaches it.
    pub fn active(&self) -> bool {
        self.process == Process::Up
    }

    /// Whether the node is cut off from the registry both ways.
    pub fn partitioned(&self) -> bool {
        matches!(self.link, Link::Partitioned { .. })
    }

    /// Whether its requests reach the registry but nothing comes back.
    pub fn deaf(&self) -> bool {
        matches!(self.link, Link::Deaf | Link::Partitioned { deaf: true })
    }

    /// How many of its next requests lose their reply: each reaches the registry and applies,
    /// and the node hears a timeout after [`crate::cluster::Cluster::request_timeout`] instead
    /// (a connection that drops between a request and its reply). Events still reach it. Set
    /// with [`crate::cluster::Cluster::lose_replies`].
    pub fn lose_replies(&self) -> u32 {
        self.lose_replies
    }

    /// The chance, per mille, that each of its requests loses its reply as
    /// [`Node::lose_replies`] describes, drawn per request from the cluster's seeded stream
    /// (on top of [`crate::network::Races::reply_loss`]). Set with
    /// [`crate::cluster::Cluster::set_reply_loss`].
    pub fn reply_loss(&self) -> u32 {
        self.reply_loss
    }

    /// The job whose next failover claim (a transaction that creates one of the job's items'
    /// `failover` nodes) loses its reply as [`Node::lose_replies`] describes, if any: its
    /// connection drops just as it claims a failed-over run. Set with
    /// [`crate::cluster::Cluster::lose_failover_reply`].
    pub fn loses_failover_reply(&self) -> Option<&str> {
        self.lose_failover_reply.as_deref()
    }

    pub(crate) fn set_lose_failover_reply(&mut self, job: Option<String>) {
        self.lose_failover_reply = job;
    }

    /// The request whose reply it loses as [`Node::lose_replies`] describes, if one is set
    /// (its connection drops just as it sends that one). Set with
    /// [`crate::cluster::Cluster::lose_reply_to`].
    pub fn loses_reply_to(&self) -> Option<&LoseReplyTo> {
        self.lose_reply_to.as_ref()
    }

    pub(crate) fn set_lose_reply_to(&mut self, request: Option<LoseReplyTo>) {
        self.lose_reply_to = request;
    }

    /// Whether the reply to `op` is lost because it is the request the node was set to lose
    /// ([`Node::loses_reply_to`]), under the registry's transaction limit `max_ops`; that loss
    /// is then used up.
    pub(crate) fn take_lost_reply_to(&mut self, op: &RegistryOp, max_ops: Option<usize>) -> bool {
        let (Some(request), RegistryOp::Transact(ops)) = (&self.lose_reply_to, op) else {
            return false;
        };
        if !request.matches(ops, max_ops) {
            return false;
        }
        self.lose_reply_to = None;
        true
    }

    /// Whether the reply to `op` is lost because it is the failover claim whose reply the node
    /// was set to lose ([`Node::loses_failover_reply`]); that loss is then used up.
    pub(crate) fn take_lost_failover_reply(&mut self, op: &RegistryOp) -> bool {
        let Some(job) = &self.lose_failover_reply else {
            return false;
        };
        let items = format!("/{job}/sharding/");
        let claims_failover = matches!(op, RegistryOp::Transact(ops) if ops.iter().any(|o| {
            matches!(o, TxnOp::Create { path, .. }
                if path.as_str().starts_with(&items) && path.as_str().ends_with("/failover"))
        }));
        if claims_failover {
            self.lose_failover_reply = None;
        }
        claims_failover
    }

    pub(crate) fn set_process(&mut self, process: Process) {
        self.process = process;
    }

    pub(crate) fn set_link(&mut self, link: Link) {
        self.link = link;
    }

    pub(crate) fn set_lose_replies(&mut self, count: u32) {
        self.lose_replies = count;
    }

    pub(crate) fn set_reply_loss(&mut self, per_mille: u32) {
        self.reply_loss = per_mille.min(1_000);
    }

    /// Takes one from the count of replies to lose; whether there was one.
    pub(crate) fn take_lost_reply(&mut self) -> bool {
        let lost = self.lose_replies > 0;
        if lost {
            self.lose_replies -= 1;
        }
        lost
    }

    /// Works `first_end` out again after `running` changed.
    pub(crate) fn ends_changed(&mut self) {
        self.first_end = self.running.values().map(|r| r.ends).min();
    }

    /// When the machine's [`Machine::handle_timeout`] comes next: when it wants it, put off by
    /// `lag` (drawn once per answer: a racing world's late timers). Its timers change only
    /// when it is handed something (every input is followed by the cluster's pump, which
    /// forgets the answer), so it is asked once per input instead of at every step of time.
    pub(crate) fn timer(&mut self, lag: impl FnOnce() -> u64) -> Option<u64> {
        *self.timer.get_or_insert_with(|| {
            self.machine
                .poll_timeout()
                .map(|t| t.ms().saturating_add(lag()))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shardjob_core::machine::MachineOptions;

    fn node() -> Node {
        let id = InstanceId::new("10.0.0.1@-@1").expect("a valid id");
        Node::new(
            id.clone(),
            Machine::new(MachineOptions::new(id)),
            BTreeSet::new(),
        )
    }

    #[test]
    fn process_and_link_read_as_the_old_flags() {
        let mut n = node();
        assert!(n.up() && n.active() && !n.crashed() && n.paused().is_none());
        n.set_process(Process::Paused { since: 7 });
        assert!(n.up() && !n.active() && n.paused() == Some(7));
        n.set_process(Process::Crashed);
        assert!(!n.up() && n.crashed() && n.paused().is_none());
        n.set_process(Process::Stopped);
        assert!(!n.up() && !n.crashed());
        assert!(!n.partitioned() && !n.deaf());
        n.set_link(Link::Deaf);
        assert!(!n.partitioned() && n.deaf());
        n.set_link(Link::Partitioned { deaf: false });
        assert!(n.partitioned() && !n.deaf());
        n.set_link(Link::Partitioned { deaf: true });
        assert!(n.partitioned() && n.deaf());
    }

    #[test]
    fn lost_replies_count_down_and_the_chance_is_capped() {
        let mut n = node();
        n.set_lose_replies(2);
        assert!(n.take_lost_reply() && n.take_lost_reply() && !n.take_lost_reply());
        assert_eq!(n.lose_replies(), 0);
        n.set_reply_loss(5_000);
        assert_eq!(n.reply_loss(), 1_000);
    }

    #[test]
    fn the_reply_lost_is_that_of_the_next_failover_claim_of_the_job_only() {
        use shardjob_core::registry::NodePath;
        let claim = |path: &str| {
            let path = NodePath::new(path).expect("a valid path");
            RegistryOp::Transact(vec![TxnOp::create_ephemeral(path, "10.0.0.1@-@1")])
        };
        let mut n = node();
        assert!(!n.take_lost_failover_reply(&claim("/j/sharding/0/failover")));
        n.set_lose_failover_reply(Some("j".to_owned()));
        // Another job's failover claim, and a claim of the job's that is no failover, keep
        // their replies.
        assert!(!n.take_lost_failover_reply(&claim("/k/sharding/0/failover")));
        assert!(!n.take_lost_failover_reply(&claim("/j/sharding/0/running")));
        assert_eq!(n.loses_failover_reply(), Some("j"));
        // The job's failover claim loses it, once.
        assert!(n.take_lost_failover_reply(&claim("/j/sharding/3/failover")));
        assert_eq!(n.loses_failover_reply(), None);
        assert!(!n.take_lost_failover_reply(&claim("/j/sharding/3/failover")));
    }
}
