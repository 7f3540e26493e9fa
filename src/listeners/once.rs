//! The distribute-once listener: once-hooks that run on one instance per fire, after every
//! item of the fire has started and after every item has ended, coordinated through
//! ElasticJob's `guarantee/started/{item}` and `guarantee/completed/{item}` nodes.
//!
//! # The protocol (one round; the `after` round is the same with `completed`)
//!
//! A round is keyed by the fire: its scheduled time in epoch milliseconds (misfire runs of
//! that fire join the same round), or `trigger` for manual triggers. Each node's data says
//! which round it belongs to, so leftovers of an earlier round never count for a later one.
//!
//! 1. **Register**: the instance writes `guarantee/started/{item}` = `{round}` for the items
//!    of its run (one transaction; items already holding an older round are overwritten).
//! 2. **Claim**: it tries one transaction that checks that every item `0..n-1` holds
//!    `{round}` (an item this instance sees disabled counts when its `disabled` node still
//!    exists) and sets its own first item to `{round} claimed {instance}`. The transaction
//!    succeeds for exactly one instance per round: the checks fail for everyone once a
//!    node says `claimed`. The last instance to register always sees every item, so some
//!    instance claims unless one died between registering and claiming (then the waiters'
//!    own claim attempts, made whenever a guarantee node changes, take over).
//! 3. The claimer runs the once-hook, then deletes the round's nodes and writes
//!    `{round} done` into `guarantee/started` in one transaction.
//! 4. **Wait**: the others wait until their own first item's node is gone (or holds another
//!    round): woken by the scheduler's registry watch, with a re-check every second as a
//!    safety net. Their `before` returns then, so every instance's items start after the
//!    once-hook has finished; their `after` returns after the after-once hook.
//! 5. **Timeout**: a waiter whose `startedTimeout`/`completedTimeout` passes first deletes
//!    the round's nodes and writes `{round} timeout {instance}` (one transaction, each
//!    delete conditional on the version it read) and fails with
//!    [`ListenerError::Timeout`]; the waiters it releases see the marker and fail with
//!    [`ListenerError::RoundAbandoned`]. The once-hook does not run for that round (a claimer
//!    still in its hook finishes it; its clean-up then finds nothing to delete).
//!
//! A waiter whose timeout passes while a claimer runs the once-hook still ends the round: the
//! hook runs to its end (exactly once), but the waiters report the round as timed out or
//! abandoned. Each waiter reads its node once when a guarantee node changes (and once after
//! each claim it tries and loses), so a round costs `O(instances²)` reads at most; the
//! registrations and the claim are one transaction each. A claim larger than the registry
//! allows fails the round at once with [`ListenerError::Registry`].
//! Manual triggers all share the round key `trigger`: two trigger rounds of one job must not
//! overlap.
//!
//! An instance that dies mid-round leaves its nodes behind: the others time out and clear
//! them; the next round overwrites them anyway. Failover runs skip the `before` round (their
//! fire's round was held, or given up, when the items first started) and join the `after`
//! round, so the fire's after-once hook runs once the re-run items end.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use shardjob_core::InstanceId;
use shardjob_core::backoff::Backoff;
use shardjob_core::layout::{JobPaths, parse_item};
use shardjob_core::machine::ItemOutcome;
use shardjob_core::machine::record::RunKind;
use shardjob_core::registry::{
    Check, CreateMode, ErrorClass, NodePath, Registry, RegistryError, TxnOp,
};
use tokio::sync::watch;
use tokio::time::Instant;

use super::{JobListener, ListenerError, ListenerHook, ShardingContexts};

/// How often a waiter re-reads its node when no watch event came.
const RECHECK: Duration = Duration::from_secs(1);

/// A deadline for a timeout too large to add to the clock: about thirty years, never reached.
const FAR_FUTURE: Duration = Duration::from_secs(86_400 * 365 * 30);

/// First pause after a transient registry error while registering (doubles up to 1 s).
const RETRY: Duration = Duration::from_millis(50);

/// The once-hooks of a [`DistributeOnce`] listener (ElasticJob's
/// `doBeforeJobExecutedAtLastStarted` and `doAfterJobExecutedAtLastCompleted`).
///
/// Both do nothing by default; implement the ones you need.
#[async_trait]
pub trait DistributeOnceListener: Send + Sync + 'static {
    /// Runs once per fire across all instances, on the instance that registers the last
    /// item as started, before any instance starts its items. `ctx` is that instance's run.
    async fn before_once(&self, ctx: &ShardingContexts) -> Result<(), ListenerError> {
        let _ = ctx;
        Ok(())
    }

    /// Runs once per fire across all instances, on the instance that registers the last
    /// item as ended, after every item of the fire has ended. `ctx` and `outcomes` are that
    /// instance's run (the other instances' outcomes are theirs).
    async fn after_once(
        &self,
        ctx: &ShardingContexts,
        outcomes: &BTreeMap<u32, ItemOutcome>,
    ) -> Result<(), ListenerError> {
        let _ = (ctx, outcomes);
        Ok(())
    }
}

/// A [`JobListener`] whose hooks run once per fire across every instance of the job
/// (ElasticJob's `AbstractDistributeOnceElasticJobListener`), coordinated through the
/// registry's `guarantee` nodes. Register the same listener on every instance.
///
/// `before` returns, on every instance, once the before-once hook has run (or the round has
/// timed out), so no item of the fire starts before it; `after` returns once the after-once
/// hook has run. A round that does not gather every item of the fire within the timeout fails
/// with [`ListenerError::Timeout`] on the instance whose wait ran out first and
/// [`ListenerError::RoundAbandoned`] on the others, and the once-hook does not run: this
/// happens when an instance is blocked, slow or dies, when an item has no live owner, when an
/// item skips the fire (it still runs the previous one and `misfire` is off), or for a manual
/// trigger of one instance only. Items that are disabled (`sharding/{item}/disabled`)
/// do not run and are not waited for. Unlike ElasticJob's, the timeouts are never infinite.
///
/// The claim is one transaction that checks every item of the job: with etcd, `n + 1` must
/// not exceed the server's `--max-txn-ops` (128 by default); a claim that does fails the
/// round at once with [`ListenerError::Registry`] ([`RegistryError::TooLarge`]).
pub struct DistributeOnce<L> {
    hooks: L,
    started_timeout: Duration,
    completed_timeout: Duration,
    order: i32,
}

impl<L> std::fmt::Debug for DistributeOnce<L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DistributeOnce")
            .field("hooks", &std::any::type_name::<L>())
            .field("started_timeout", &self.started_timeout)
            .field("completed_timeout", &self.completed_timeout)
            .field("order", &self.order)
            .finish()
    }
}

impl<L: DistributeOnceListener> DistributeOnce<L> {
    /// A distribute-once listener: how long an instance waits for every item of a fire to
    /// start (`startedTimeoutMilliseconds`) and to end (`completedTimeoutMilliseconds`).
    pub fn new(hooks: L, started_timeout: Duration, completed_timeout: Duration) -> Self {
        Self {
            hooks,
            started_timeout,
            completed_timeout,
            order: i32::MAX,
        }
    }

    /// Sets its place among the job's listeners (see [`JobListener::order`]).
    pub fn with_order(mut self, order: i32) -> Self {
        self.order = order;
        self
    }

    /// The once-hooks.
    pub fn hooks(&self) -> &L {
        &self.hooks
    }
}

#[async_trait]
impl<L: DistributeOnceListener> JobListener for DistributeOnce<L> {
    async fn before(&self, ctx: &ShardingContexts) -> Result<(), ListenerError> {
        if ctx.kind == RunKind::Failover {
            return Ok(());
        }
        let hook = || self.hooks.before_once(ctx);
        match &ctx.guarantee {
            Some(g) => {
                g.round(ListenerHook::Before, ctx, self.started_timeout, hook)
                    .await
            }
            None => hook().await,
        }
    }

    async fn after(
        &self,
        ctx: &ShardingContexts,
        outcomes: &BTreeMap<u32, ItemOutcome>,
    ) -> Result<(), ListenerError> {
        let hook = || self.hooks.after_once(ctx, outcomes);
        match &ctx.guarantee {
            Some(g) => {
                g.round(ListenerHook::After, ctx, self.completed_timeout, hook)
                    .await
            }
            None => hook().await,
        }
    }

    fn order(&self) -> i32 {
        self.order
    }

    fn name(&self) -> String {
        format!("DistributeOnce<{}>", std::any::type_name::<L>())
    }
}

/// What the driver keeps per job for distribute-once rounds: a counter bumped on every
/// change under `/{job}/guarantee` (and on session changes, when events may have been
/// missed), and the items it sees disabled.
#[derive(Debug)]
pub(crate) struct GuaranteeShared {
    changes: watch::Sender<u64>,
    disabled: Mutex<BTreeSet<u32>>,
}

impl GuaranteeShared {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self {
            changes: watch::channel(0).0,
            disabled: Mutex::new(BTreeSet::new()),
        })
    }

    /// Wakes the job's waiting rounds so they read the registry again.
    pub(crate) fn changed(&self) {
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Records whether an item is disabled, as the watch shows it.
    pub(crate) fn set_disabled(&self, item: u32, disabled: bool) {
        if let Ok(mut set) = self.disabled.lock() {
            if disabled {
                set.insert(item);
            } else {
                set.remove(&item);
            }
        }
    }

    /// Forgets every disabled item (before a reload of the job's tree).
    pub(crate) fn clear_disabled(&self) {
        if let Ok(mut set) = self.disabled.lock() {
            set.clear();
        }
    }

    fn disabled(&self) -> BTreeSet<u32> {
        self.disabled.lock().map(|s| s.clone()).unwrap_or_default()
    }
}

/// A run's access to the registry for distribute-once rounds.
#[derive(Clone)]
pub(crate) struct Guarantee {
    registry: Arc<dyn Registry>,
    paths: JobPaths,
    instance: InstanceId,
    shared: Arc<GuaranteeShared>,
}

/// Which nodes a round uses.
struct Round<'a> {
    dir: NodePath,
    key: String,
    hook: ListenerHook,
    paths: &'a JobPaths,
}

impl Round<'_> {
    fn item(&self, item: u32) -> NodePath {
        match self.hook {
            ListenerHook::Before => self.paths.guarantee_started_item(item),
            ListenerHook::After => self.paths.guarantee_completed_item(item),
        }
    }

    /// Whether a node's data belongs to this round (`{round}` or `{round} claimed {id}`).
    fn owns(&self, data: &[u8]) -> bool {
        data.strip_prefix(self.key.as_bytes())
            .is_some_and(|rest| matches!(rest.first(), None | Some(b' ')))
    }
}

/// What a waiter sees of its node.
enum Seen {
    /// Still this round's, not claimed: try to claim.
    Registered,
    /// Still this round's, claimed: the once-hook runs somewhere.
    Claimed,
    /// Gone, or another round's: the round is over.
    Over,
}

impl Guarantee {
    pub(crate) fn new(
        registry: Arc<dyn Registry>,
        paths: JobPaths,
        instance: InstanceId,
        shared: Arc<GuaranteeShared>,
    ) -> Self {
        Self {
            registry,
            paths,
            instance,
            shared,
        }
    }

    /// Runs one round: register this run's items, then claim and run `once`, or wait for
    /// the claimer or the timeout.
    async fn round<F, Fut>(
        &self,
        hook: ListenerHook,
        ctx: &ShardingContexts,
        timeout: Duration,
        once: F,
    ) -> Result<(), ListenerError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<(), ListenerError>>,
    {
        let Some(first) = ctx.items().next() else {
            return Ok(());
        };
        let round = Round {
            dir: match hook {
                ListenerHook::Before => self.paths.guarantee_started(),
                ListenerHook::After => self.paths.guarantee_completed(),
            },
            key: round_key(ctx),
            hook,
            paths: &self.paths,
        };
        let start = Instant::now();
        // A timeout too large for the clock never passes.
        let deadline = start
            .checked_add(timeout)
            .unwrap_or_else(|| start + FAR_FUTURE);
        // Subscribe before the first write, so no change after it is missed.
        let mut changes = self.shared.changes.subscribe();
        changes.borrow_and_update();

        self.register(&round, ctx, deadline).await?;
        if ctx.cancel.is_cancelled() {
            // Registered so the others are not held up; a cancelled run claims nothing.
            return Err(ListenerError::Cancelled);
        }
        let mut claimed = self.try_claim(&round, ctx, first).await?;
        loop {
            if let Some(participants) = claimed {
                tracing::debug!(
                    job = %ctx.job_name, round = %round.key, %hook,
                    "distribute-once: every item arrived; running the once-hook here"
                );
                let result = once().await;
                self.finish(&round, &participants, first).await;
                return result;
            }
            // The claim failed: the round may have ended meanwhile.
            if let Seen::Over = self.seen(&round, first).await {
                return self.outcome(&round).await;
            }
            // Wait for a change, reading the node once per wake, until it is worth another
            // claim: still registered but not claimed (a claimer that registered last but
            // died before claiming leaves the round to the waiters).
            loop {
                let now = Instant::now();
                if now >= deadline {
                    self.abandon(&round).await;
                    tracing::warn!(
                        job = %ctx.job_name, round = %round.key, %hook,
                        timeout_ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
                        "distribute-once round timed out: not every item arrived"
                    );
                    return Err(ListenerError::Timeout {
                        hook,
                        round: round.key,
                        after: timeout,
                    });
                }
                let pause = RECHECK.min(deadline - now);
                tokio::select! {
                    r = changes.changed() => {
                        if r.is_err() {
                            // Cannot happen while `self.shared` holds the sender; if it did,
                            // the re-check and the deadline still end the wait.
                            tokio::time::sleep(pause).await;
                        }
                    }
                    () = tokio::time::sleep(pause) => {}
                    _ = ctx.cancel.cancelled() => return Err(ListenerError::Cancelled),
                }
                match self.seen(&round, first).await {
                    Seen::Over => return self.outcome(&round).await,
                    Seen::Registered => break,
                    Seen::Claimed => {}
                }
            }
            claimed = self.try_claim(&round, ctx, first).await?;
        }
    }

    /// Writes `{round}` into this run's item nodes: one transaction, or item by item when
    /// some exist already (left by an earlier round). Transient errors are retried until the
    /// deadline.
    async fn register(
        &self,
        round: &Round<'_>,
        ctx: &ShardingContexts,
        deadline: Instant,
    ) -> Result<(), ListenerError> {
        let mut retries = Backoff::new(RETRY, RECHECK).retries();
        loop {
            let attempt = self.try_register(round, ctx).await;
            match attempt {
                Ok(()) => return Ok(()),
                Err(e) if e.class() == ErrorClass::Transient && Instant::now() < deadline => {
                    tracing::debug!(job = %ctx.job_name, "distribute-once: registering failed, retrying: {e}");
                    tokio::time::sleep(retries.next_pause()).await;
                }
                Err(e) => return Err(ListenerError::Registry(e)),
            }
        }
    }

    async fn try_register(
        &self,
        round: &Round<'_>,
        ctx: &ShardingContexts,
    ) -> Result<(), RegistryError> {
        self.registry.ensure_path(&round.dir).await?;
        let data = round.key.as_bytes();
        let ops = ctx
            .items()
            .map(|i| TxnOp::create(round.item(i), data))
            .collect();
        match self.registry.transact(ops).await {
            Ok(_) => return Ok(()),
            Err(e) if e.class() == ErrorClass::Conflict => {}
            Err(e) => return Err(e),
        }
        for item in ctx.items() {
            self.upsert(&round.item(item), data).await?;
        }
        Ok(())
    }

    /// Creates a node or replaces its data.
    async fn upsert(&self, path: &NodePath, data: &[u8]) -> Result<(), RegistryError> {
        let mut last = None;
        for _ in 0..3 {
            match self
                .registry
                .create(path, data.to_vec(), CreateMode::Persistent)
                .await
            {
                Ok(_) => return Ok(()),
                Err(RegistryError::NodeExists(_)) => {}
                Err(e) => return Err(e),
            }
            match self.registry.set(path, data.to_vec(), None).await {
                Ok(_) => return Ok(()),
                // Deleted in between (a round ended): create it again.
                Err(e @ RegistryError::NoNode(_)) => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| RegistryError::NoNode(path.clone())))
    }

    /// The claim transaction; `Some(items checked)` if this instance won the round, `None` if
    /// it did not (or could not tell, and tries again at the next change). Fails on a fatal
    /// registry error, which no retry mends: a claim larger than the registry allows
    /// ([`RegistryError::TooLarge`]), a closed client.
    async fn try_claim(
        &self,
        round: &Round<'_>,
        ctx: &ShardingContexts,
        first: u32,
    ) -> Result<Option<Vec<u32>>, ListenerError> {
        let disabled = self.shared.disabled();
        let mine: BTreeSet<u32> = ctx.items().collect();
        let mut ops = Vec::new();
        let mut participants = Vec::new();
        for item in 0..ctx.sharding_total_count {
            if disabled.contains(&item) && !mine.contains(&item) {
                ops.push(TxnOp::Check(Check::Exists(self.paths.item_disabled(item))));
            } else {
                ops.push(TxnOp::Check(Check::Value(
                    round.item(item),
                    round.key.as_bytes().to_vec(),
                )));
                participants.push(item);
            }
        }
        let claim = format!("{} claimed {}", round.key, self.instance);
        ops.push(TxnOp::set(round.item(first), claim));
        match self.registry.transact(ops).await {
            Ok(_) => Ok(Some(participants)),
            Err(e) => match e.class() {
                ErrorClass::Conflict => Ok(None),
                ErrorClass::Fatal => Err(ListenerError::Registry(e)),
                _ => {
                    tracing::debug!(job = %ctx.job_name, "distribute-once: claim failed: {e}");
                    Ok(None)
                }
            },
        }
    }

    /// What this instance's first item node says.
    async fn seen(&self, round: &Round<'_>, first: u32) -> Seen {
        match self.registry.get(&round.item(first)).await {
            Ok(Some(node)) if round.owns(&node.data) => {
                if node.data.as_slice() == round.key.as_bytes() {
                    Seen::Registered
                } else {
                    Seen::Claimed
                }
            }
            Ok(_) => Seen::Over,
            // Unknown: keep waiting; the deadline still holds.
            Err(e) => {
                tracing::debug!(path = %round.item(first), "distribute-once: cannot read: {e}");
                Seen::Claimed
            }
        }
    }

    /// How a round this instance waited for ended, from the marker in its directory.
    async fn outcome(&self, round: &Round<'_>) -> Result<(), ListenerError> {
        let marker = match self.registry.get(&round.dir).await {
            Ok(Some(node)) => String::from_utf8_lossy(&node.data).into_owned(),
            _ => return Ok(()),
        };
        let mut words = marker.split(' ');
        match (words.next(), words.next(), words.next()) {
            (Some(key), Some("timeout"), by) if key == round.key => {
                Err(ListenerError::RoundAbandoned {
                    hook: round.hook,
                    round: round.key.clone(),
                    by: by.unwrap_or("another instance").to_owned(),
                })
            }
            _ => Ok(()),
        }
    }

    /// The claimer's clean-up after the once-hook: delete the round's nodes and mark the
    /// round done, in one transaction; if a waiter's timeout cleared them first, nothing is
    /// left to do.
    async fn finish(&self, round: &Round<'_>, participants: &[u32], first: u32) {
        let mut ops: Vec<TxnOp> = participants
            .iter()
            .map(|&i| TxnOp::delete(round.item(i)))
            .collect();
        ops.push(TxnOp::set(round.dir.clone(), format!("{} done", round.key)));
        match self.registry.transact(ops).await {
            Ok(_) => {}
            Err(e) if e.class() == ErrorClass::Conflict => {
                // Part of the round is gone already: clear what is left of it (a node of
                // ours still claimed would hold nothing up, but would be garbage).
                if matches!(
                    self.seen(round, first).await,
                    Seen::Claimed | Seen::Registered
                ) {
                    self.clear(round, "done").await;
                }
            }
            Err(e) => {
                tracing::warn!(dir = %round.dir, "distribute-once: cannot clear the round: {e}");
                self.clear(round, "done").await;
            }
        }
    }

    /// A waiter's timeout: delete whatever is left of the round and mark it timed out.
    async fn abandon(&self, round: &Round<'_>) {
        let marker = format!("timeout {}", self.instance);
        self.clear(round, &marker).await;
    }

    /// Deletes the round's nodes (each only if it has not changed since it was read) and
    /// writes `{round} {marker}` into the directory; retried a few times on conflicts.
    async fn clear(&self, round: &Round<'_>, marker: &str) {
        for _ in 0..3 {
            let nodes = match self.registry.get_tree(&round.dir).await {
                // No directory: nothing to clear.
                Ok(nodes) if nodes.is_empty() => return,
                Ok(nodes) => nodes,
                Err(RegistryError::NoNode(_)) => return,
                Err(e) => {
                    tracing::warn!(dir = %round.dir, "distribute-once: cannot clear the round: {e}");
                    return;
                }
            };
            let mut ops: Vec<TxnOp> = nodes
                .into_iter()
                // The round's item nodes: the directory's children named by an item, not the
                // directory itself (the tree's first node).
                .filter(|node| {
                    node.path != round.dir
                        && parse_item(node.path.name()).is_some_and(|i| node.path == round.item(i))
                        && round.owns(&node.data)
                })
                .map(|node| TxnOp::Delete {
                    path: node.path,
                    expected: Some(node.stat.version),
                })
                .collect();
            ops.push(TxnOp::set(
                round.dir.clone(),
                format!("{} {marker}", round.key),
            ));
            match self.registry.transact(ops).await {
                Ok(_) => return,
                Err(e) if e.class() == ErrorClass::Conflict => continue,
                Err(e) => {
                    tracing::warn!(dir = %round.dir, "distribute-once: cannot clear the round: {e}");
                    return;
                }
            }
        }
        tracing::warn!(dir = %round.dir, "distribute-once: the round kept changing while it was cleared");
    }
}

/// A round's key: the fire time in epoch milliseconds (shared by every instance and by the
/// misfire runs of the fire), or `trigger` for manual triggers (whose times differ per
/// instance).
fn round_key(ctx: &ShardingContexts) -> String {
    match ctx.kind {
        RunKind::Trigger => "trigger".to_owned(),
        _ => ctx.fire_time.timestamp_millis().to_string(),
    }
}
