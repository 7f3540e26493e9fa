//! Leader election (`LeaderService`), and the Curator latch it runs under
//! (`executeInLeader`), also used by failover claims.
//!
//! The latch is Curator's `LeaderLatch` recipe as a mutex: each caller creates an ephemeral
//! node under the latch directory and holds the latch once its node is the oldest there;
//! meanwhile it waits for a change under the directory (Curator watches its predecessor). The
//! registry of the model has no sequential nodes: the age of a latch node is the revision that
//! created it, which orders them as ZooKeeper's sequence numbers do.

use shardjob_core::registry::{CreateMode, RegistryOp, RegistryReply, TxnOp};

use super::jvm::Jvm;
use super::storage::path;
use super::view::{ServerState, has_online_instances, latch_order, server_state};

/// `leader/election/latch`.
pub(crate) const ELECTION_LATCH: &str = "leader/election/latch";
/// `leader/election/instance`.
pub(crate) const LEADER: &str = "leader/election/instance";

/// A held latch: its node, to delete when done.
pub(crate) struct Held {
    rel: String,
}

impl Jvm {
    /// Waits for the latch at `latch` (relative to the job), as `LeaderLatch.start()` then
    /// `await()`: creates this caller's node, then waits until it is the oldest.
    pub(crate) async fn acquire(&self, job: &str, latch: &str) -> Held {
        let name = self.with(|s| {
            s.latch_seq += 1;
            let id = s.id.as_str().replace("@-@", "-");
            format!("_c_{id}-{}-latch-", s.latch_seq)
        });
        let rel = format!("{latch}/{name}");
        let mut created = false;
        loop {
            if !created {
                // Curator creates the node with its parents; a lost connection is retried
                // (and on a new session the node is made again).
                self.create_latch_node(job, &rel).await;
                created = true;
            }
            let seen = self.job(job, |j| j.latch_events).unwrap_or(0);
            let snap = self.read_under(job, latch).await;
            let children: Vec<(&str, shardjob_core::registry::Stat)> = snap
                .children(latch)
                .into_iter()
                .filter_map(|c| Some((c, snap.stat(&format!("{latch}/{c}"))?)))
                .collect();
            let order = latch_order(children);
            if !order.contains(&name.as_str()) {
                // Gone with a session, or never made (the connection was lost): again.
                if self.job(job, |j| j.shutdown).unwrap_or(true) {
                    return Held { rel };
                }
                created = false;
                self.sleep(100).await;
                continue;
            }
            if order.first() == Some(&name.as_str()) {
                return Held { rel };
            }
            // Wait for a change under the latch directory, or a (re)connection.
            self.until(|s| {
                s.jobs
                    .get(job)
                    .is_none_or(|j| j.latch_events != seen || j.shutdown)
                    .then_some(())
            })
            .await;
        }
    }

    async fn create_latch_node(&self, job: &str, rel: &str) {
        let Some(p) = path(job, rel) else { return };
        let create = |p| {
            RegistryOp::Transact(vec![TxnOp::Create {
                path: p,
                data: Vec::new(),
                mode: CreateMode::Ephemeral,
            }])
        };
        let reply = self.call(create(p.clone())).await;
        if matches!(reply, RegistryReply::Transacted(_)) {
            return;
        }
        // The latch directory and its parents.
        let mut parents = Vec::new();
        let mut at = p.parent();
        while let Some(parent) = at {
            if parent.is_root() {
                break;
            }
            at = parent.parent();
            parents.push(parent);
        }
        for parent in parents.into_iter().rev() {
            self.call(RegistryOp::Transact(vec![TxnOp::create(
                parent,
                Vec::new(),
            )]))
            .await;
        }
        self.call(create(p)).await;
    }

    /// Gives a latch back (`LeaderLatch.close()`): deletes its node.
    pub(crate) async fn release(&self, job: &str, held: Held) {
        if let Some(p) = path(job, &held.rel) {
            self.call(RegistryOp::Transact(vec![TxnOp::delete(p)]))
                .await;
        }
    }

    /// `LeaderService.electLeader`: under the election latch, creates the leader node with
    /// this instance's id if there is none.
    pub(crate) async fn elect_leader(&self, job: &str) {
        let held = self.acquire(job, ELECTION_LATCH).await;
        if !self.exists(job, LEADER).await {
            let me = self.id();
            if self
                .persist_ephemeral(job, LEADER, me.as_str())
                .await
                .is_some()
            {
                self.note(format!("{job}: becomes leader"));
            }
        }
        self.release(job, held).await;
    }

    /// `LeaderService.isLeader`: the cached leader node names this instance.
    pub(crate) async fn is_leader(&self, job: &str) -> bool {
        if self.job(job, |j| j.shutdown).unwrap_or(true) {
            return false;
        }
        let me = self.id();
        self.cached(job, LEADER).await.as_deref() == Some(me.as_str())
    }

    /// `ServerService.isEnableServer`: the server's cached value is `ENABLED`; a blank or
    /// missing one is read again every 100 ms, ten times.
    pub(crate) async fn is_enable_server(&self, job: &str, ip: &str) -> bool {
        let rel = format!("servers/{ip}");
        let mut tries = 0;
        loop {
            let state = server_state(self.cached(job, &rel).await.as_deref());
            if state != ServerState::Blank || tries == 10 {
                return state == ServerState::Enabled;
            }
            tries += 1;
            self.sleep(100).await;
        }
    }

    /// `ServerService.isAvailableServer`: enabled, and an instance of the IP is registered.
    pub(crate) async fn is_available_server(&self, job: &str, ip: &str) -> bool {
        if !self.is_enable_server(job, ip).await {
            return false;
        }
        let snap = self.read_under(job, "instances").await;
        has_online_instances(&snap.children("instances"), ip)
    }

    /// `ServerService.hasAvailableServers`.
    pub(crate) async fn has_available_servers(&self, job: &str) -> bool {
        let snap = self.read_under(job, "servers").await;
        let servers: Vec<String> = snap
            .children("servers")
            .into_iter()
            .map(str::to_owned)
            .collect();
        for ip in servers {
            if self.is_available_server(job, &ip).await {
                return true;
            }
        }
        false
    }

    /// `LeaderService.isLeaderUntilBlock`: while there is no leader and some server is
    /// available, waits 100 ms and, if this instance's server is available, elects; then
    /// whether this instance leads. No time limit.
    pub(crate) async fn is_leader_until_block(&self, job: &str) -> bool {
        let ip = self.id().server_ip().to_owned();
        loop {
            if self.exists(job, LEADER).await || !self.has_available_servers(job).await {
                break;
            }
            self.sleep(100).await;
            if !self.job(job, |j| j.shutdown).unwrap_or(true)
                && self.is_available_server(job, &ip).await
            {
                self.elect_leader(job).await;
            }
        }
        self.is_leader(job).await
    }

    /// `LeaderService.removeLeader`.
    pub(crate) async fn remove_leader(&self, job: &str) {
        if self.remove_if_exists(job, LEADER).await {
            self.note(format!("{job}: gives the lead up"));
        }
    }
}
